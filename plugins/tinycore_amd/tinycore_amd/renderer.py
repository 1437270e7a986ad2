"""`AMDRenderer`: HIP-style C++ for AMDGPU as a dialect table on core's C-family renderer base
(`tinycore.sdk.CStyleRenderer`). Everything it spells its own way is in `HIP_C`.

The source needs no HIP SDK: no HIP headers, no device libraries. It uses clang's own spellings (the HIP headers only
define macros over them): ``__attribute__((global))`` kernels, ``__attribute__((shared))`` arrays, the
``__builtin_amdgcn_workgroup_id_x()``/``__builtin_amdgcn_workitem_id_x()`` launch ids, a barrier between
work-group fences, ``ext_vector_type`` vectors and ``__builtin_*`` math that the AMDGPU backend lowers to
instructions (no calls into ``ocml``). It compiles with ``clang -x hip --offload-arch=gfxNNN -nogpulib -nogpuinc
--cuda-device-only`` (checked with clang 15 for gfx90a, gfx1030 and gfx1100; hipcc and hiprtc should take it as
well, not checked).

bfloat16 is a two-byte struct with explicit conversions to and from float (round to nearest even, as the
reference device): clang 15 has no ``__bf16`` on AMDGPU. ``EXP2``, ``LOG2`` and ``SIN`` are decomposed by core: the
backend can't lower their float64 builtins without the device libraries ("unsupported libcall legalization"), and
``sin`` lowers to the hardware's approximate instruction. The prelude turns off floating-point contraction (HIP's
default contracts ``a*b+c``).
"""

from __future__ import annotations

from tinycore.sdk import ALL_SCALARS, CDialect, CStyleRenderer, dtypes

# helpers every kernel may use; guarded, so the sources of several kernels can share one translation unit
HIP_PRELUDE = """\
#ifndef TINYCORE_HIP_PRELUDE
#define TINYCORE_HIP_PRELUDE
#pragma clang fp contract(off)
template <typename T, int N> using tc_vec = T __attribute__((ext_vector_type(N)));
template <typename T, typename F> __attribute__((device)) static inline T tc_bitcast(F x) {
  return __builtin_bit_cast(T, x);
}
struct tc_bf16 {
  unsigned short bits;
  tc_bf16() = default;
  __attribute__((device)) explicit tc_bf16(float f) {
    unsigned int u = __builtin_bit_cast(unsigned int, f);
    bits = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u)
                                            : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  __attribute__((device)) explicit operator float() const {
    return __builtin_bit_cast(float, (unsigned int)bits << 16);
  }
};
#endif
"""

_EIGHT_BYTE = (dtypes.int64, dtypes.uint64, dtypes.float64)

HIP_C = CDialect(
    name="HIP C++",
    prelude=HIP_PRELUDE,
    kernel_prefix='extern "C" __attribute__((global)) void',
    buffer_param="{const}{type}* __restrict__ {name}",
    var_param="const {type} {name}",
    types={dtypes.float16: "_Float16", dtypes.bfloat16: "tc_bf16"},
    launch_ids={"gidx": "__builtin_amdgcn_workgroup_id_{xyz}()", "lidx": "__builtin_amdgcn_workitem_id_{xyz}()"},
    barrier='__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); '
    '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");',
    shared_decl="__attribute__((shared, aligned(16))) {type} {name}[{size}];",
    vector_widths=(2, 4),
    vector_widths_by_dtype={dtypes.bool: (), dtypes.bfloat16: (), **{d: (2,) for d in _EIGHT_BYTE}},
    vector_alignment=True,
    vector_type="tc_vec<{scalar}, {n}>",
    vector_make="{type}{{{lanes}}}",
    vector_load="*((const {type}*)({ptr}))",
    vector_store="*(({type}*)({ptr})) = {value};",
    lane_access="{v}.{xyzw}",
    float_specials={"inf": "__builtin_inff()", "nan": '__builtin_nanf("")'},
    intrinsics={
        "SQRT_FLOAT": "__builtin_sqrtf({0})",
        "SQRT": "__builtin_sqrt({0})",
        "TRUNC_FLOAT": "__builtin_truncf({0})",
        "TRUNC": "__builtin_trunc({0})",
        "MULACC_FLOAT": "__builtin_fmaf({0}, {1}, {2})",
        "MULACC": "__builtin_fma({0}, {1}, {2})",
    },
    bitcast="tc_bitcast<{type}, {src}>({x})",
)


class AMDRenderer(CStyleRenderer):
    """HIP-style C++ for one AMDGPU architecture (``arch`` like ``"gfx1100"``; None: any). No GPU is needed."""

    device = "AMD"
    suffix = "AMD"
    dialect = HIP_C
    has_local = True
    has_shared = True
    supports_float4 = True
    max_vector_access = 4  # the widest vector type the dialect uses
    global_max = (2**31 - 1, 65535, 65535)
    local_max = (1024, 1024, 1024)
    shared_max = 65536  # LDS per work-group
    tensor_cores = []  # WMMA/MFMA land with the AMD device
    native_ops = frozenset({"SQRT", "TRUNC", "MULACC"})
    supported_dtypes = frozenset(ALL_SCALARS)

    def __init__(self, arch: str | None = None):
        self.arch = arch
