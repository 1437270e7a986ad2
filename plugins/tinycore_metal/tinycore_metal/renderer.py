"""`MetalRenderer`: the Metal Shading Language as a dialect table on core's C-family renderer base
(`tinycore.sdk.CStyleRenderer`). Everything MSL spells its own way is in `METAL_MSL`.

Buffers are ``device`` pointers bound by index (``[[buffer(i)]]``), variables ``constant`` references bound after
them, launch ids come from the attribute-bound ``gid``/``lid`` parameters. Transcendentals use ``metal::precise``
(Metal compiles with fast math unless told otherwise); the compiler should still turn fast math off
(``MTLCompileOptions.mathMode = .safe``): the decompositions rely on IEEE semantics. Metal has no float64, and
``bfloat`` needs MSL 3.1 (macOS 14). Vector accesses go through cast pointers (``float4``, ``half4``...), so only
where the vector is provably aligned (threadgroup arrays are assumed 16-byte aligned, as Metal allocates them).
"""

from __future__ import annotations

from tinycore.sdk import ALL_SCALARS, AddrSpace, CDialect, CStyleRenderer, dtypes

METAL_MSL = CDialect(
    name="Metal Shading Language",
    prelude="#include <metal_stdlib>\nusing namespace metal;",
    kernel_prefix="kernel void",
    extra_params=("uint3 gid [[threadgroup_position_in_grid]]", "uint3 lid [[thread_position_in_threadgroup]]"),
    buffer_param="{const}{space}{type}* {name} [[buffer({index})]]",
    var_param="constant {type}& {name} [[buffer({index})]]",
    address_spaces={AddrSpace.GLOBAL: "device ", AddrSpace.LOCAL: "threadgroup "},
    types={
        dtypes.int8: "char",
        dtypes.uint8: "uchar",
        dtypes.uint16: "ushort",
        dtypes.uint32: "uint",
        dtypes.int64: "long",
        dtypes.uint64: "ulong",
        dtypes.bfloat16: "bfloat",
    },
    long_suffix="l",
    launch_ids={"gidx": "gid.{xyz}", "lidx": "lid.{xyz}"},
    barrier="threadgroup_barrier(mem_flags::mem_threadgroup);",
    shared_decl="threadgroup {type} {name}[{size}];",
    vector_widths=(2, 4),
    vector_alignment=True,
    vector_make="{type}({lanes})",
    vector_load="*((const {space}{type}*)({ptr}))",
    vector_store="*(({space}{type}*)({ptr})) = {value};",
    lane_access="{v}.{xyzw}",
    intrinsics={
        "SQRT": "precise::sqrt({0})",
        "EXP2": "precise::exp2({0})",
        "LOG2": "precise::log2({0})",
        "SIN": "precise::sin({0})",
        "TRUNC": "trunc({0})",
        "MULACC": "fma({0}, {1}, {2})",
    },
    bitcast="as_type<{type}>(({src})({x}))",
)


class MetalRenderer(CStyleRenderer):
    """Metal Shading Language for one Apple GPU family (``arch`` like ``"apple9"``; None: any). No Mac is needed."""

    device = "METAL"
    suffix = "METAL"
    dialect = METAL_MSL
    has_local = True
    has_shared = True
    supports_float4 = True
    max_vector_access = 4  # the widest vector type the dialect uses
    global_max = (2**31 - 1, 2**31 - 1, 2**31 - 1)
    local_max = (1024, 1024, 1024)
    shared_max = 32768  # threadgroup memory
    tensor_cores = []  # simdgroup matrices land with the Metal device
    native_ops = frozenset({"SQRT", "TRUNC", "EXP2", "LOG2", "SIN", "MULACC"})
    supported_dtypes = frozenset(ALL_SCALARS) - {dtypes.float64}

    def __init__(self, arch: str | None = None):
        self.arch = arch
