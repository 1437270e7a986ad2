"""`CUDARenderer`: CUDA C (as NVRTC and nvcc compile it) as a dialect table on core's C-family renderer base
(`tinycore.sdk.CStyleRenderer`). Everything CUDA spells its own way is in `CUDA_C`.

What the compiler must do for results to match the reference device: compile with ``--fmad=false`` (no contraction
of ``a*b+c`` into fused multiply-adds; ``MULACC`` is rendered as ``fmaf``/``fma`` on purpose) and without fast-math
flags, and pass NVRTC the ``include`` folder of the CUDA runtime headers (``cuda_fp16.h``/``cuda_bf16.h`` are not
built into NVRTC). No GPU is needed to render.

Vector accesses use CUDA's built-in vector types (``float4``, ``uint2``, ``longlong2``...) through a cast pointer,
so only where the 16-byte-or-less vector is provably aligned (`CDialect.vector_alignment`). half has ``half2``
(``cuda_fp16.h``) and the prelude's 8-byte ``half4``; bfloat16 the prelude's ``tc_bf16_2``/``tc_bf16_4``; ``bool``
has none (lane by lane); 8-byte types use 2-lane pieces (``double4`` and ``longlong4`` are deprecated in CUDA 13).
Tensor cores: ``mma.sync`` m16n8k16 (`CUDA_TENSOR_CORES`).

Shared memory: a kernel whose shared arrays fit in `STATIC_SHARED_MAX` (48 KB) declares them ``__shared__``; a
bigger one carves them out of one ``extern __shared__`` (dynamic) array, 16-byte aligned each, and says how many
bytes it needs in a marker comment (`DYNAMIC_SHARED_MARKER`) that `tinycore_cuda.compiler` stores beside the CUBIN,
so the program opts in (``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``) and launches with that many bytes.
More than the renderer's `shared_max` (the GPU's opt-in limit once a device is opened) is a `CRenderError`.

Warp shuffles: the renderer declares ``warp_size = 32``, so core's grouped reduces first reduce within each warp
with ``Ops.SHUFFLE`` (rendered ``__shfl_xor_sync``); shared memory then holds one value per warp (none when one
warp is the whole group).

Row kernels: ``row_reduce_bytes`` lets a softmax, log-softmax or layernorm over rows of up to 64 KB run as one
kernel, a work-group per row whose work-items hold the row in registers (core's `Renderer.row_split` and the GPU
heuristic's ``GROUPLOCAL``): each row is read from memory once and written once.
"""

from __future__ import annotations

import re

from tinycore.sdk import (
    ALL_SCALARS,
    CDialect,
    CRenderError,
    CStyleRenderer,
    KernelWriter,
    Ops,
    PatternMatcher,
    PtrDType,
    TensorCore,
    UOp,
    UPat,
    dtypes,
)

# helpers every kernel may use; guarded, so the sources of several kernels can share one translation unit
CUDA_PRELUDE = """\
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef TINYCORE_CUDA_PRELUDE
#define TINYCORE_CUDA_PRELUDE
#ifndef INFINITY
#define INFINITY (__int_as_float(0x7f800000))
#endif
#ifndef NAN
#define NAN (__int_as_float(0x7fffffff))
#endif
static __device__ __forceinline__ float tc_to_float(half x) { return __half2float(x); }
static __device__ __forceinline__ float tc_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> static __device__ __forceinline__ T tc_from_float(float x);
template <> __device__ __forceinline__ half tc_from_float<half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 tc_from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
// 8-byte vectors of 16-bit floats (cuda_fp16.h has half2 only; bfloat16 gets 2 and 4 lanes): one 64-bit access.
// Not static: an unused static function is a warning nvcc's -Werror builds refuse.
struct __align__(8) half4 { half x, y, z, w; };
__device__ __forceinline__ half4 make_half4(half x, half y, half z, half w) { half4 v = {x, y, z, w}; return v; }
struct __align__(4) tc_bf16_2 { __nv_bfloat16 x, y; };
__device__ __forceinline__ tc_bf16_2 make_tc_bf16_2(__nv_bfloat16 x, __nv_bfloat16 y) {
  tc_bf16_2 v = {x, y};
  return v;
}
struct __align__(8) tc_bf16_4 { __nv_bfloat16 x, y, z, w; };
__device__ __forceinline__ tc_bf16_4 make_tc_bf16_4(__nv_bfloat16 x, __nv_bfloat16 y, __nv_bfloat16 z,
                                                    __nv_bfloat16 w) {
  tc_bf16_4 v = {x, y, z, w};
  return v;
}
template <typename T, typename F> static __device__ __forceinline__ T tc_bitcast(F x) {
  static_assert(sizeof(T) == sizeof(F), "a bitcast keeps the size");
  T y;
  memcpy(&y, &x, sizeof(T));
  return y;
}
#endif
"""

_EIGHT_BYTE = (dtypes.int64, dtypes.uint64, dtypes.float64)
STATIC_SHARED_MAX = 48 * 1024  # bytes of static __shared__ per block on every GPU; more needs the dynamic opt-in
DYNAMIC_SHARED_NAME = "tc_dynamic_smem"
DYNAMIC_SHARED_MARKER = "tinycore-cuda dynamic shared memory: {bytes} bytes"
_DYNAMIC_SHARED_PATTERN = re.compile(r"tinycore-cuda dynamic shared memory: (\d+) bytes")


def shared_layout(uops: list[UOp]) -> tuple[dict[UOp, int], int]:
    """(byte offset of each shared array, total bytes) of a kernel: its ``DEFINE_LOCAL`` arrays in program order,
    each starting on a 16-byte boundary (vector accesses assume it)."""
    offsets, total = {}, 0
    for u in uops:
        if u.op is Ops.DEFINE_LOCAL and isinstance(u.dtype, PtrDType):
            offsets[u] = total
            total += (max(1, u.dtype.size) * u.dtype.base.itemsize + 15) // 16 * 16
    return offsets, total


def dynamic_shared_bytes(src: str) -> int:
    """Bytes of dynamic shared memory the rendered kernel `src` needs (its `DYNAMIC_SHARED_MARKER`; 0 without one).

    >>> dynamic_shared_bytes("// tinycore-cuda dynamic shared memory: 65536 bytes"), dynamic_shared_bytes("")
    (65536, 0)
    """
    found = _DYNAMIC_SHARED_PATTERN.search(src)
    return int(found.group(1)) if found else 0


def _define_shared(ctx: KernelWriter, x: UOp) -> object:
    """A shared array: static ``__shared__`` while the kernel's arrays fit in 48 KB, else a slice of the dynamic
    array; over the renderer's `shared_max`, a CRenderError naming the kernel, the bytes and the limit."""
    offsets, total = shared_layout(ctx.uops)
    limit = ctx.renderer.shared_max
    if total > limit:
        raise CRenderError(
            f"CUDA renderer: kernel {ctx.name} needs {total} bytes of shared memory, over this target's limit of "
            f"{limit} bytes (the GPU's opt-in maximum per block once a device is opened; {STATIC_SHARED_MAX} for a "
            "compile-only target); fix: use fewer or smaller LOCAL/GROUP opts (or upcasts of grouped reduces)"
        )
    if total <= STATIC_SHARED_MAX:
        return None  # the dialect's static declaration (the base rule)
    assert isinstance(x.dtype, PtrDType)
    if offsets[x] == 0:
        marker = DYNAMIC_SHARED_MARKER.format(bytes=total)
        ctx.emit(f"extern __shared__ __align__(16) unsigned char {DYNAMIC_SHARED_NAME}[];  // {marker}")
    var, type_ = f"smem{x.arg}", ctx.type(x.dtype.base)
    ctx.emit(f"{type_}* {var} = ({type_}*)({DYNAMIC_SHARED_NAME} + {offsets[x]});")
    ctx.names[x] = var
    return KernelWriter.STATEMENT


_SHUFFLE_WIDENED = {dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16}


def _shuffle(ctx: KernelWriter, x: UOp) -> list[str] | str:
    """``Ops.SHUFFLE``: each lane's value from the lane whose id in the warp is its own XOR ``arg``, every lane of
    the warp taking part; one variable per lane, so the call is never moved into a branch some lanes skip."""
    scalar, out = x.dtype.scalar(), []
    for lane in ctx.lanes(x.src[0], x.dtype.count):
        if scalar in _SHUFFLE_WIDENED:  # no shuffle overload below 32 bits (half and bfloat16 have their own)
            expr = f"(({ctx.type(scalar)})__shfl_xor_sync(0xffffffffu, (int)({lane}), {int(x.arg)}))"
        else:
            expr = f"__shfl_xor_sync(0xffffffffu, {lane}, {int(x.arg)})"
        out.append(ctx.declare(scalar, expr, "shfl"))
    return out if x.dtype.count > 1 else out[0]


CUDA_RULES = PatternMatcher(
    [(UPat(Ops.DEFINE_LOCAL, name="x"), _define_shared), (UPat(Ops.SHUFFLE, name="x"), _shuffle)],
    name="cuda_c",
)

CUDA_C = CDialect(
    name="CUDA C",
    prelude=CUDA_PRELUDE,
    kernel_prefix='extern "C" __global__ void',
    buffer_param="{const}{type}* __restrict__ {name}",
    var_param="const {type} {name}",
    types={dtypes.float16: "half", dtypes.bfloat16: "__nv_bfloat16"},
    launch_ids={"gidx": "blockIdx.{xyz}", "lidx": "threadIdx.{xyz}"},
    barrier="__syncthreads();",
    shared_decl="__shared__ __align__(16) {type} {name}[{size}];",
    vector_widths=(2, 4),
    vector_widths_by_dtype={
        dtypes.bool: (),
        dtypes.float16: (2, 4),
        dtypes.bfloat16: (2, 4),
        **{d: (2,) for d in _EIGHT_BYTE},
    },
    vector_alignment=True,
    vector_stems={
        dtypes.int8: "char",
        dtypes.uint8: "uchar",
        dtypes.uint16: "ushort",
        dtypes.uint32: "uint",
        dtypes.int64: "longlong",
        dtypes.uint64: "ulonglong",
        dtypes.bfloat16: "tc_bf16_",
    },
    vector_make="make_{type}({lanes})",
    vector_load="*((const {type}*)({ptr}))",
    vector_store="*(({type}*)({ptr})) = {value};",
    lane_access="{v}.{xyzw}",
    intrinsics={
        "SQRT_FLOAT": "sqrtf({0})",
        "SQRT": "sqrt({0})",
        "TRUNC_FLOAT": "truncf({0})",
        "TRUNC": "trunc({0})",
        "EXP2_FLOAT": "exp2f({0})",
        "EXP2": "exp2({0})",
        "LOG2_FLOAT": "log2f({0})",
        "LOG2": "log2({0})",
        "SIN_FLOAT": "sinf({0})",
        "SIN": "sin({0})",
        "MULACC_FLOAT": "fmaf({0}, {1}, {2})",
        "MULACC": "fma({0}, {1}, {2})",
    },
    half_from_float="tc_from_float<{type}>({x})",
    half_to_float="tc_to_float({x})",
    bitcast="tc_bitcast<{type}, {src}>({x})",
    wmma=lambda ctx, x, a, b, c: render_mma(ctx, x, a, b, c),
    extra_rules=CUDA_RULES,
)


# mma.sync.aligned.m16n8k16 (sm_80+), fp32 accumulate: the lane layouts of PTX ISA's "Matrix Fragments for
# mma.m16n8k16 with floating point type", with one liberty: the 16 values of k are renumbered (the same way for A
# and B, so the products the instruction pairs are unchanged) such that the four k a thread holds in a row of A,
# logically 2t, 2t+1, 2t+8, 2t+9, are the neighbours 4t..4t+3 in memory: one 8-byte load per row instead of two
# 4-byte ones. A's elements are numbered (pair bit, k half, row half), so elements 0-3 are one contiguous row
# piece; `render_mma` packs them into the instruction's register order. In each warp, lane = 4 * group + t.
def _mma_a(lane: int, i: int) -> tuple[int, int]:  # A is 16 x 16 (rows m, cols k), 8 halves per lane
    return (lane >> 2) + 8 * (i >> 2), 4 * (lane & 3) + (i & 1) + 2 * ((i >> 1) & 1)


def _mma_b(lane: int, i: int) -> tuple[int, int]:  # B is 16 x 8 (rows k, cols n), 4 halves per lane
    return 4 * (lane & 3) + (i & 1) + 2 * (i >> 1), lane >> 2


def _mma_c(lane: int, i: int) -> tuple[int, int]:  # C and D are 16 x 8 (rows m, cols n), 4 floats per lane
    return (lane >> 2) + 8 * (i >> 1), 2 * (lane & 3) + (i & 1)


# the instruction's A registers a0a1, a2a3, a4a5, a6a7 (row g / g+8, then k 2t / 2t+8) in `_mma_a`'s numbering
_MMA_A_PAIRS = ((0, 1), (4, 5), (2, 3), (6, 7))


CUDA_TENSOR_CORES = [
    TensorCore.from_maps((8, 16, 16), 32, din, dtypes.float32, a=_mma_a, b=_mma_b, c=_mma_c)
    for din in (dtypes.float16, dtypes.bfloat16)
]
_MMA_TYPE = {dtypes.float16: ("f16", "__halves2half2"), dtypes.bfloat16: ("bf16", "__halves2bfloat162")}


def render_mma(ctx: KernelWriter, x: UOp, a: list[str], b: list[str], c: list[str]) -> list[str]:
    """One ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`` as inline PTX: A and B packed two
    halves per 32-bit register (the lower half holds the lower-numbered element), C and D four floats."""
    din = x.src[0].dtype.scalar()
    if din not in _MMA_TYPE or len(a) != 8 or len(b) != 4 or len(c) != 4:
        raise ctx.fail(x, "CUDA renders the m16n8k16 fp16/bf16 mma with fp32 accumulate only")
    kind, pack = _MMA_TYPE[din]
    regs = []
    for pair in [[a[i], a[j]] for i, j in _MMA_A_PAIRS] + [b[k : k + 2] for k in range(0, 4, 2)]:
        reg = ctx.fresh("mma_r")
        ctx.emit(f"unsigned {reg} = tc_bitcast<unsigned>({pack}({pair[0]}, {pair[1]}));")
        regs.append(reg)
    out = [ctx.fresh("mma_d") for _ in range(4)]
    for d, acc in zip(out, c):
        ctx.emit(f"float {d} = {acc};")
    ctx.emit(
        f'asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 {{%0, %1, %2, %3}}, '
        '{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};" : '
        + ", ".join(f'"+f"({d})' for d in out)
        + " : "
        + ", ".join(f'"r"({r})' for r in regs)
        + ");"
    )
    return out


class CUDARenderer(CStyleRenderer):
    """CUDA C for one architecture (``arch`` like ``"sm_90"``; None: any). No hardware is needed to render."""

    device = "CUDA"
    suffix = "CUDA"
    dialect = CUDA_C
    has_local = True
    has_shared = True
    supports_float4 = True
    max_vector_access = 4  # the widest vector type the dialect uses
    global_max = (2**31 - 1, 65535, 65535)
    local_max = (1024, 1024, 64)
    shared_max = STATIC_SHARED_MAX  # a compile-only target; an opened device sets its GPU's opt-in maximum
    warp_size = 32  # grouped reduces reduce within each warp with __shfl_xor_sync first
    # softmax/layernorm rows up to 64 KB are one kernel: a work-group per row, the row in registers (`row_split`)
    row_reduce_bytes = 65536
    tensor_cores = CUDA_TENSOR_CORES  # mma.sync m16n8k16, sm_80 and newer (see `__init__`)
    # CUDA C's float division is correctly rounded (NVRTC defaults to -prec-div=true): RECIP and FDIV are native
    native_ops = frozenset({"SQRT", "TRUNC", "EXP2", "LOG2", "SIN", "MULACC", "RECIP", "FDIV", "NEG", "SUB"})
    supported_dtypes = frozenset(ALL_SCALARS)

    def __init__(self, arch: str | None = None):
        self.arch = arch
        digits = "".join(ch for ch in (arch or "") if ch.isdigit())
        if digits and int(digits) < 80:
            self.tensor_cores = []  # mma.sync m16n8k16 with fp32 accumulate needs sm_80
