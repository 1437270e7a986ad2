"""`MetalRenderer`: the Metal Shading Language as a dialect table on core's C-family renderer base
(`tinycore.sdk.CStyleRenderer`). Everything MSL spells its own way is in `METAL_MSL`.

Buffers are ``device`` pointers bound by index (``[[buffer(i)]]``), variables ``constant`` references bound after
them, launch ids come from the attribute-bound ``gid`` (``[[threadgroup_position_in_grid]]``) and ``lid``
(``[[thread_position_in_threadgroup]]``) parameters. Threadgroup arrays are declared 16-byte aligned, so the vector
accesses into them are aligned; the barrier is ``threadgroup_barrier(mem_flags::mem_threadgroup)``.

Transcendentals use ``metal::precise`` (Metal compiles with fast math unless told otherwise); the compiler still turns
fast math off (`tinycore_metal.compiler.MetalCompiler`): the decompositions rely on IEEE semantics. Metal has no
float64; ``half`` is native, ``bfloat`` (and ``simdgroup_bfloat8x8``) needs MSL 3.1 (macOS 14). Vector accesses go
through cast pointers (``float4``, ``half4``, ``bfloat4``...), so only where the vector is provably aligned.

Tensor cores: ``simdgroup_matrix`` 8x8x8 (Apple7 GPUs and newer: M1, A14 and later). The 32 threads of a SIMD-group
each hold 2 elements of every 8x8 fragment (``thread_elements()``); `simdgroup_coord` is where they sit, the same
layout for A, B and C, and `METAL_TENSOR_CORES` declares it so core's optimizer builds the kernel and the ``PYTHON``
reference device emulates it. Inputs are float32, half or bfloat, the accumulator float32.
"""

from __future__ import annotations

import re

from tinycore.sdk import ALL_SCALARS, AddrSpace, CDialect, CStyleRenderer, KernelWriter, TensorCore, UOp, dtypes

ARCH_PATTERN = re.compile(r"^apple(\d+)$")
FIRST_SIMDGROUP_MATRIX_FAMILY = 7  # MTLGPUFamilyApple7 (M1, A14): the first with simdgroup_matrix


def simdgroup_coord(lane: int, i: int) -> tuple[int, int]:
    """``(row, col)`` in an 8x8 ``simdgroup_matrix`` of element `i` (0 or 1) of SIMD-group thread `lane` (0..31).

    Lanes go in quads of four: a quad holds a 2x4 block (two rows, two columns of pairs); lane bit 0 picks the pair
    of columns, bit 1 the row within the quad, bit 2 the next pair of rows, bit 3 the right half of the matrix and
    bit 4 the lower half. Element ``i`` is the pair's ``i``-th column.

    >>> [simdgroup_coord(lane, 0) for lane in (0, 1, 2, 3, 4, 8, 16, 31)]
    [(0, 0), (0, 2), (1, 0), (1, 2), (2, 0), (0, 4), (4, 0), (7, 6)]
    """
    row = 4 * (lane >> 4 & 1) + 2 * (lane >> 2 & 1) + (lane >> 1 & 1)
    col = 4 * (lane >> 3 & 1) + 2 * (lane & 1) + i
    return row, col


METAL_TENSOR_CORES = [
    TensorCore.from_maps((8, 8, 8), 32, din, dtypes.float32, a=simdgroup_coord, b=simdgroup_coord, c=simdgroup_coord)
    for din in (dtypes.float16, dtypes.bfloat16, dtypes.float32)
]
_SIMDGROUP_TYPES = {dtypes.float16: "simdgroup_half8x8", dtypes.bfloat16: "simdgroup_bfloat8x8",
                    dtypes.float32: "simdgroup_float8x8"}  # fmt: skip


def render_simdgroup_mma(ctx: KernelWriter, x: UOp, a: list[str], b: list[str], c: list[str]) -> list[str]:
    """One ``simdgroup_multiply_accumulate(D, A, B, C)`` on 8x8 fragments: each thread writes its 2 elements of A, B
    and C into ``thread_elements()`` and reads its 2 elements of D back."""
    din, dout = x.src[0].dtype.scalar(), x.dtype.scalar()
    if din not in _SIMDGROUP_TYPES or dout != dtypes.float32 or len(a) != 2 or len(b) != 2 or len(c) != 2:
        raise ctx.fail(x, "Metal renders 8x8x8 simdgroup matrices (float, half or bfloat in, float out) only")
    mat_a, mat_b, mat_c = ctx.fresh("sg_a"), ctx.fresh("sg_b"), ctx.fresh("sg_c")
    ctx.emit(f"{_SIMDGROUP_TYPES[din]} {mat_a}, {mat_b};")
    ctx.emit(f"{_SIMDGROUP_TYPES[dout]} {mat_c};")
    for mat, values in ((mat_a, a), (mat_b, b), (mat_c, c)):
        ctx.emit(" ".join(f"{mat}.thread_elements()[{i}] = {v};" for i, v in enumerate(values)))
    ctx.emit(f"simdgroup_multiply_accumulate({mat_c}, {mat_a}, {mat_b}, {mat_c});")
    return [ctx.declare(dout, f"{mat_c}.thread_elements()[{i}]", "sg_d") for i in range(2)]


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
    shared_decl="threadgroup __attribute__((aligned(16))) {type} {name}[{size}];",
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
    wmma=lambda ctx, x, a, b, c: render_simdgroup_mma(ctx, x, a, b, c),
)


def check_arch(arch: str) -> str:
    """`arch` if it names an Apple GPU family (``apple7`` for M1/A14, ``apple8`` M2/A15, ``apple9`` M3/A17...),
    else a ValueError naming the fix.

    >>> check_arch("apple9")
    'apple9'
    """
    if not ARCH_PATTERN.match(arch):
        raise ValueError(f"METAL: {arch!r} is not an Apple GPU family: use appleN (apple7 is M1, apple9 is M3)")
    return arch


class MetalRenderer(CStyleRenderer):
    """Metal Shading Language for one Apple GPU family (``arch`` like ``"apple9"``; None: any). No Mac is needed.

    Families before ``apple7`` have no ``simdgroup_matrix``: they declare no tensor cores."""

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
    tensor_cores = METAL_TENSOR_CORES
    native_ops = frozenset({"SQRT", "TRUNC", "EXP2", "LOG2", "SIN", "MULACC"})
    supported_dtypes = frozenset(ALL_SCALARS) - {dtypes.float64}

    def __init__(self, arch: str | None = None):
        self.arch = arch
        match = ARCH_PATTERN.match(arch or "")
        if match and int(match.group(1)) < FIRST_SIMDGROUP_MATRIX_FAMILY:
            self.tensor_cores = []
