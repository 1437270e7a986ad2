"""`AMDRenderer`: HIP-style C++ for AMDGPU as a dialect table on core's C-family renderer base
(`tinycore.sdk.CStyleRenderer`). Everything it spells its own way is in `HIP_C`.

The source needs no HIP SDK: no HIP headers, no device libraries. It uses clang's own spellings (the HIP headers only
define macros over them): ``__attribute__((global))`` kernels, ``__attribute__((shared))`` arrays, the
``__builtin_amdgcn_workgroup_id_x()``/``__builtin_amdgcn_workitem_id_x()`` launch ids, a barrier between
work-group fences, ``ext_vector_type`` vectors and ``__builtin_*`` math that the AMDGPU backend lowers to
instructions (no calls into ``ocml``). It compiles with ``clang -x hip --offload-arch=gfxNNN -nogpulib -nogpuinc
--cuda-device-only`` (checked with clang 15 for gfx90a, gfx1030 and gfx1100) and with ROCm's hipRTC as it is, whose
pre-included HIP headers don't clash with it (checked with hipRTC 5.2 for gfx90a and gfx1030); hipcc should take it
as well, not checked.

bfloat16 is a two-byte struct with explicit conversions to and from float (round to nearest even, as the
reference device): clang 15 has no ``__bf16`` on AMDGPU. ``EXP2``, ``LOG2`` and ``SIN`` are decomposed by core: the
backend can't lower their float64 builtins without the device libraries ("unsupported libcall legalization"), and
``sin`` lowers to the hardware's approximate instruction. The prelude turns off floating-point contraction (HIP's
default contracts ``a*b+c``).

Tensor cores, per arch (`tensor_cores_for`), declared to core with their lane layouts so that the PYTHON device
emulates the very kernels written here: 16x16x16 fp16/bf16 in, fp32 accumulate, as WMMA on RDNA3 (``gfx11*``,
wave32, ``__builtin_amdgcn_wmma_f32_16x16x16_{f16,bf16}_w32``), WMMA on RDNA4 (``gfx1200``, ``gfx1201``, wave32,
``__builtin_amdgcn_wmma_f32_16x16x16_{f16,bf16}_w32_gfx12``) and MFMA on CDNA2/3 (``gfx90a``, ``gfx94*``, wave64,
``__builtin_amdgcn_mfma_f32_16x16x16f16`` / ``..._16x16x16bf16_1k``).

The RDNA4 layout (`RDNA4_TENSOR_CORES`, written down once in ``_wmma12_a/b/c``) is the one AMD's RDNA4 ISA guide
describes for 16x16x16 WMMA in wave32 (taken from a summary of the guide: its tables were not re-read for this).
It agrees with composable_kernel's ``ck_tile`` gfx12 WMMA traits (A/B: 16 lanes along M/N times 2 lanes along K, 8
consecutive K per lane; C/D: 2 lanes along M times 8 consecutive rows per lane, 16 lanes along N), with tinygrad's
``amd_rdna4`` tensor core (the same C/D layout and M/N placement of A and B; its K order within a lane differs, but
alike in A and B, which gives the same product), and with a layout probe published for a gfx1201 GPU (hipfire PR
140: accumulator element j of lane l is row ``8 * (l >> 4) + j``, column ``l & 15``, for the iu4 WMMA). It has not
run on an RDNA4 GPU here (none at hand): ``tests/test_amd_on_device.py`` checks it on one. A matmul can't tell the
K order apart (any order that A and B share gives the same product); the M and N placements it does check.
"""

from __future__ import annotations

from tinycore.sdk import ALL_SCALARS, CDialect, CStyleRenderer, KernelWriter, TensorCore, UOp, dtypes

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
    wmma=lambda ctx, x, a, b, c: render_matrix_op(ctx, x, a, b, c),
)


# RDNA3 (gfx11) v_wmma_f32_16x16x16_{f16,bf16} in wave32, the layouts of AMD's RDNA3 ISA guide and its WMMA notes:
# lane l holds row l % 16 of A and column l % 16 of B, all 16 K values each (lanes 16-31 hold copies of lanes 0-15),
# and 8 floats of C/D: element i is row 2 * i + l // 16, column l % 16.
def _wmma_a(lane: int, i: int) -> tuple[int, int]:  # A is 16 x 16 (rows m, cols k)
    return lane % 16, i


def _wmma_b(lane: int, i: int) -> tuple[int, int]:  # B is 16 x 16 (rows k, cols n)
    return i, lane % 16


def _wmma_c(lane: int, i: int) -> tuple[int, int]:  # C and D are 16 x 16 (rows m, cols n)
    return 2 * i + lane // 16, lane % 16


# CDNA (gfx90a, gfx94x) v_mfma_f32_16x16x16{f16,bf16_1k} in wave64, the layouts of AMD's matrix instruction
# calculator: lane l holds A[l % 16][4 * (l // 16) + i], B[4 * (l // 16) + i][l % 16] and D[4 * (l // 16) + i][l % 16]
# for i in 0..3 (no copies).
def _mfma_a(lane: int, i: int) -> tuple[int, int]:
    return lane % 16, 4 * (lane // 16) + i


def _mfma_b(lane: int, i: int) -> tuple[int, int]:
    return 4 * (lane // 16) + i, lane % 16


def _mfma_c(lane: int, i: int) -> tuple[int, int]:
    return 4 * (lane // 16) + i, lane % 16


# RDNA4 (gfx1200, gfx1201) v_wmma_f32_16x16x16_{f16,bf16} in wave32 (the ``_gfx12`` builtins), the layout of AMD's
# RDNA4 ISA guide (sources in the module docstring): no copies; lane l holds 8 elements of each operand, row l % 16
# of A and column l % 16 of B at K = 8 * (l // 16) + i, and C/D column l % 16 at rows 8 * (l // 16) + i (lanes 0-15
# rows 0-7, lanes 16-31 rows 8-15: not gfx11's interleave). The one place this layout is written down.
def _wmma12_a(lane: int, i: int) -> tuple[int, int]:  # A is 16 x 16 (rows m, cols k)
    return lane % 16, 8 * (lane // 16) + i


def _wmma12_b(lane: int, i: int) -> tuple[int, int]:  # B is 16 x 16 (rows k, cols n)
    return 8 * (lane // 16) + i, lane % 16


def _wmma12_c(lane: int, i: int) -> tuple[int, int]:  # C and D are 16 x 16 (rows m, cols n)
    return 8 * (lane // 16) + i, lane % 16


_HALVES = (dtypes.float16, dtypes.bfloat16)
RDNA3_TENSOR_CORES = [
    TensorCore.from_maps((16, 16, 16), 32, din, dtypes.float32, a=_wmma_a, b=_wmma_b, c=_wmma_c, replication=(2, 2))
    for din in _HALVES
]
RDNA4_TENSOR_CORES = [
    TensorCore.from_maps((16, 16, 16), 32, din, dtypes.float32, a=_wmma12_a, b=_wmma12_b, c=_wmma12_c)
    for din in _HALVES
]
CDNA_TENSOR_CORES = [
    TensorCore.from_maps((16, 16, 16), 64, din, dtypes.float32, a=_mfma_a, b=_mfma_b, c=_mfma_c) for din in _HALVES
]
# (builtin, lanes of C/D, extra arguments) per (wave size, elements of A and B per lane, input dtype): gfx11's WMMA
# takes 16 (copies in lanes 16-31), gfx12's 8, CDNA's MFMA 4; bf16 goes in as raw shorts
_MATRIX_BUILTINS = {
    (32, 16, dtypes.float16): ("__builtin_amdgcn_wmma_f32_16x16x16_f16_w32", 8, ""),
    (32, 16, dtypes.bfloat16): ("__builtin_amdgcn_wmma_f32_16x16x16_bf16_w32", 8, ""),
    (32, 8, dtypes.float16): ("__builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12", 8, ""),
    (32, 8, dtypes.bfloat16): ("__builtin_amdgcn_wmma_f32_16x16x16_bf16_w32_gfx12", 8, ""),
    (64, 4, dtypes.float16): ("__builtin_amdgcn_mfma_f32_16x16x16f16", 4, ", 0, 0, 0"),
    (64, 4, dtypes.bfloat16): ("__builtin_amdgcn_mfma_f32_16x16x16bf16_1k", 4, ", 0, 0, 0"),
}
RDNA4_ARCHS = ("gfx1200", "gfx1201")  # gfx12 names clang builds; gfx1250's WMMA is another one (16x16x32 and more)


def tensor_cores_for(arch: str | None) -> list[TensorCore]:
    """The tensor cores `arch` has and this renderer writes: WMMA on RDNA3 (``gfx11*``) and RDNA4 (`RDNA4_ARCHS`:
    ``gfx1200``, ``gfx1201``; its layout from AMD's ISA guide, not yet run on such a GPU), MFMA on CDNA2/3
    (``gfx90a``, ``gfx94*``); none for other archs (gfx908, gfx10*, gfx1250) or an unknown one (None).

    >>> len(tensor_cores_for("gfx1100")), tensor_cores_for("gfx942")[0].threads, tensor_cores_for("gfx1030")
    (2, 64, [])
    >>> tensor_cores_for("gfx1201")[0].elements_per_thread
    (8, 8, 8)
    """
    if arch is None:
        return []
    if arch.startswith("gfx11"):
        return RDNA3_TENSOR_CORES
    if arch in RDNA4_ARCHS:
        return RDNA4_TENSOR_CORES
    if arch == "gfx90a" or arch.startswith("gfx94"):
        return CDNA_TENSOR_CORES
    return []


def render_matrix_op(ctx: KernelWriter, x: UOp, a: list[str], b: list[str], c: list[str]) -> list[str]:
    """One 16x16x16 matrix multiply-accumulate with fp32 accumulate: ``v_wmma_f32_16x16x16_*`` (32 lanes; 16 elements
    of A and B per lane on RDNA3, 8 on RDNA4) or ``v_mfma_f32_16x16x16*`` (64 lanes, CDNA), through clang's amdgcn
    builtins on ``ext_vector_type`` operands. Returns the lanes of D as fresh float variables."""
    din, threads, count = x.src[0].dtype.scalar(), x.arg[2], x.arg[3][0]
    spec = _MATRIX_BUILTINS.get((threads, count, din))
    if spec is None:
        raise ctx.fail(x, "AMD renders 16x16x16 fp16/bf16 matrix ops with fp32 accumulate in 32 or 64 lanes only")
    builtin, out_count, extra = spec
    if len(a) != count or len(b) != count or len(c) != out_count:
        raise ctx.fail(x, f"{builtin} takes {count} lanes of A and B and {out_count} of C per lane")
    element = "short" if din == dtypes.bfloat16 else "_Float16"
    names = []
    for lanes in (a, b):
        name = ctx.fresh("mx_in")
        values = [f"(short)({v}).bits" for v in lanes] if din == dtypes.bfloat16 else lanes
        ctx.emit(f"tc_vec<{element}, {count}> {name} = {{{', '.join(values)}}};")
        names.append(name)
    acc = ctx.fresh("mx_acc")
    ctx.emit(f"tc_vec<float, {out_count}> {acc} = {{{', '.join(c)}}};")
    ctx.emit(f"{acc} = {builtin}({names[0]}, {names[1]}, {acc}{extra});")
    out = [ctx.fresh("mx_d") for _ in range(out_count)]
    for i, d in enumerate(out):
        ctx.emit(f"float {d} = {acc}[{i}];")
    return out


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
    tensor_cores: list[TensorCore] = []  # per arch: see `tensor_cores_for`
    native_ops = frozenset({"SQRT", "TRUNC", "MULACC"})
    supported_dtypes = frozenset(ALL_SCALARS)

    def __init__(self, arch: str | None = None):
        self.arch = arch
        self.tensor_cores = tensor_cores_for(arch)
