"""`ClangRenderer`: a linearized UOp program (docs/pipeline.md section 4) to one C translation unit.

The kernel ABI (see also the package README; `tinycore_clang.kernel_params` decides the parameters for both backends):

- ``void NAME(T0* restrict data0, const T1* restrict data1, ..., int var_n, ..., int core_id)``: buffers in
  `DEFINE_GLOBAL` index order (``const`` when the kernel never stores to them), then the `DEFINE_VAR` values in the
  order the program defines them (``int`` for int32 variables, ``long long`` otherwise), then ``int core_id`` only
  when the program has a ``SPECIAL("core_id")``;
- ``void NAME_tc(void* const* bufs, const long long* vals, int core_id)``: the same kernel behind one uniform
  signature, used by the thread pool (`tc_run`) and the graph runner (`tc_run_batch`);
- ``const char NAME_tc_info[]``: ``"tc1 bufs=N vars=iq cores=C"``; `vars` has one letter per variable (``i``: int,
  ``q``: long long) and `cores` is the number of core ids (0: not threaded, -1: symbolic, from the launch's
  ``global_size[0]``).

Semantics (what the reference device computes):

- integers wrap: signed ``ADD SUB MUL NEG SHL`` on values are computed in the unsigned type of the same width; pure
  index arithmetic (values that only feed addresses, loop bounds and gates) stays signed so the C compiler can use
  its no-overflow assumptions for addressing and vectorization;
- ``IDIV``/``MOD`` truncate toward zero like C; dividing by 0 gives 0 and ``MIN / -1`` wraps instead of trapping;
- shifts by a negative amount or by the bit width or more give 0 (``SHR`` of a negative value gives -1);
- ``MAX`` propagates NaN from either side and returns the first operand on ties (``max(-0.0, 0.0) == -0.0``);
- float to int casts go through a 64-bit conversion, so NaN and infinities give 0 and values up to 2**63 wrap
  modulo the target width; float to ``uint64`` wraps negative values; int64 from NaN is the hardware's pattern;
- ``float16`` is ``_Float16`` where the compiler has it (gcc >= 12, clang >= 15), clang's storage-only ``__fp16``
  otherwise, else ``unsigned short`` with software conversions; ``bfloat16`` is ``unsigned short`` with explicit
  conversions (round to nearest even, NaN stays a quiet NaN). 16-bit float arithmetic is done in float32 and
  rounded back after each op, which is what native half arithmetic does too;
- ``MULACC`` is ``fmaf``/``fma`` when the target has FMA instructions, else ``a*b+c``; nothing else is fused
  (the compiler runs with ``-ffp-contract=off``);
- constants are exact: floats as hex literals (``0x1.8p+1f``), ``__builtin_inff()``, ``__builtin_nanf("")``.

>>> from tinycore.sdk import dtypes
>>> ClangRenderer.float_literal(3.0, dtypes.float32), ClangRenderer.float_literal(float("-inf"), dtypes.float32)
('0x1.8p+1f', '(-__builtin_inff())')
"""

from __future__ import annotations

import functools
import math
import os
import platform
import re
from collections.abc import Callable
from typing import Any

from tinycore.sdk import (
    ALL_SCALARS,
    AddrSpace,
    DType,
    GroupOp,
    Ops,
    PtrDType,
    Renderer,
    UOp,
    dtypes,
    index_only_values,
    kernel_function_name,
)
from tinycore_clang.kernel_params import kernel_params, root_buffer
from tinycore_clang.toolchain import cpu_l2_bytes, cpu_vendor, cpuinfo_flags, default_thread_count

KERNEL_MARKER = "// tinycore-clang kernel "

PRELUDE_HALF = r"""#ifndef TC_HALF_1
#define TC_HALF_1
#if defined(__FLT16_MANT_DIG__)
typedef _Float16 half;
#define TC_H2F(x) ((float)(x))
#define TC_F2H(x) ((half)(x))
#elif defined(__clang__)
typedef __fp16 half;
#define TC_H2F(x) ((float)(x))
#define TC_F2H(x) ((half)(x))
#else
typedef unsigned short half;
static inline float tc_h2f(unsigned short h) {
  unsigned int sign = (unsigned int)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0x1fu) bits = sign | 0x7f800000u | (man << 13);
  else if (exp != 0) bits = sign | ((exp + 112u) << 23) | (man << 13);
  else if (man == 0) bits = sign;
  else {
    exp = 113u; while (!(man & 0x400u)) { man <<= 1; exp--; }
    bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f; __builtin_memcpy(&f, &bits, 4); return f;
}
static inline unsigned short tc_f2h(float f) {
  unsigned int x; __builtin_memcpy(&x, &f, 4);
  unsigned int sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);
  if (ax < 0x38800000u) {
    if (ax < 0x33000000u) return (unsigned short)sign;
    unsigned int e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e;
    unsigned int r = m >> shift, rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (r & 1u))) r++;
    return (unsigned short)(sign | r);
  }
  unsigned int r = ax + 0xc8000fffu + ((ax >> 13) & 1u);
  return (unsigned short)(sign | (r >> 13));
}
#define TC_H2F(x) tc_h2f(x)
#define TC_F2H(x) tc_f2h((float)(x))
#endif
/* double -> half, correctly rounded: round to odd into float (no helper call, same result on every compiler) */
static inline float tc_d2f_odd(double d) {
  float f = (float)d;
  if ((double)f != d && d == d) {
    unsigned int u; __builtin_memcpy(&u, &f, 4);
    if (__builtin_fabs((double)f) > __builtin_fabs(d)) u -= 1u;
    u |= 1u; __builtin_memcpy(&f, &u, 4);
  }
  return f;
}
#define TC_D2H(x) TC_F2H(tc_d2f_odd(x))
#endif
"""
PRELUDE_BF16 = r"""#ifndef TC_BF16_1
#define TC_BF16_1
typedef unsigned short tc_bf16;
static inline float tc_bf2f(unsigned short b) {
  unsigned int u = (unsigned int)b << 16; float f; __builtin_memcpy(&f, &u, 4); return f;
}
static inline unsigned short tc_f2bf(float f) {
  unsigned int u; __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
#endif
"""
PRELUDE_FMA = r"""#ifndef TC_FMA_1
#define TC_FMA_1
#if defined(__FP_FAST_FMAF) || defined(__FMA__)
#define TC_FMAF(a, b, c) __builtin_fmaf(a, b, c)
#define TC_FMA(a, b, c) __builtin_fma(a, b, c)
#else
#define TC_FMAF(a, b, c) ((a) * (b) + (c))
#define TC_FMA(a, b, c) ((a) * (b) + (c))
#endif
#endif
"""
PRELUDE_NT = r"""#ifndef TC_NT_1
#define TC_NT_1
#if defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define TC_NT_STORE(T, p, v, n) do { if ((((unsigned long long)(p)) & ((n) - 1)) == 0) \
  __builtin_nontemporal_store((v), (T*)(p)); else __builtin_memcpy((p), &(v), (n)); } while (0)
#define TC_NT_FENCE() __builtin_ia32_sfence()
#else
#define TC_NT_STORE(T, p, v, n) __builtin_memcpy((p), &(v), (n))
#define TC_NT_FENCE() ((void)0)
#endif
#endif
"""
# a row this long (the scratch row of a one-pass softmax, 4 KB per 1024 floats, included) stays in L1/L2 between
# the passes of a fused row reduce: the row is read from memory once
ROW_REDUCE_BYTES = 32 << 10
NT_STORE_MIN_BYTES = 16 << 20  # vector stores into outputs at least this large bypass the caches (streaming)

# C scalar type names and the names used inside vector typedefs
_CTYPES: dict[DType, str] = {
    dtypes.bool: "_Bool",
    dtypes.int8: "signed char",
    dtypes.uint8: "unsigned char",
    dtypes.int16: "short",
    dtypes.uint16: "unsigned short",
    dtypes.int32: "int",
    dtypes.uint32: "unsigned int",
    dtypes.int64: "long long",
    dtypes.uint64: "unsigned long long",
    dtypes.float16: "half",
    dtypes.bfloat16: "tc_bf16",
    dtypes.float32: "float",
    dtypes.float64: "double",
    dtypes.index: "long long",
}
_VEC_LANE_TYPES: dict[DType, tuple[str, str]] = {  # (typedef name part, lane C type); bool lanes are bytes
    dtypes.bool: ("bool", "unsigned char"),
    dtypes.int8: ("char", "signed char"),
    dtypes.uint8: ("uchar", "unsigned char"),
    dtypes.int16: ("short", "short"),
    dtypes.uint16: ("ushort", "unsigned short"),
    dtypes.int32: ("int", "int"),
    dtypes.uint32: ("uint", "unsigned int"),
    dtypes.int64: ("long", "long long"),
    dtypes.uint64: ("ulong", "unsigned long long"),
    dtypes.float16: ("half", "half"),
    dtypes.bfloat16: ("bf16", "tc_bf16"),
    dtypes.float32: ("float", "float"),
    dtypes.float64: ("double", "double"),
    dtypes.index: ("long", "long long"),
}
_SIGNED = frozenset({dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.index})
_HALF_LIKE = frozenset({dtypes.float16, dtypes.bfloat16})
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIMPLE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?|\(?-?[0-9][0-9a-fA-FxXpP.+\-]*(?:u|ll|ull|f)?\)?)$")
_SYM = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}
_NOT_SUPPORTED = {Ops.DEFINE_LOCAL, Ops.WMMA, Ops.UNROLL, Ops.CONTRACT, Ops.REDUCE, Ops.KERNEL}


class ClangRenderError(ValueError):
    """A linearized program the C renderer can't express (names the uop and why)."""


# -march values whose CPUs have AVX-512F (x86-64-v4 and the Intel/AMD server and client cores that have it)
AVX512_ARCHS = frozenset(
    {
        "x86-64-v4", "skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server",
        "rocketlake", "tigerlake", "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d",
        "diamondrapids", "znver4", "znver5", "knl", "knm",
    }
)  # fmt: skip


# The x86-64 CPUs ``CLANG_CPU`` may name (LLVM's and ``-march``'s names), each with the /proc/cpuinfo flags of the
# instruction set extensions LLVM may generate code with for it: the x86-64 psABI levels, then each core's vector
# extras. Only these are compared with the running machine (`check_target_cpu`); system-level ones (sgx, aes, adx...)
# are left out because no kernel uses them.
_X86_64_V1 = frozenset({"sse", "sse2"})
_X86_64_V2 = _X86_64_V1 | {"pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16"}
_X86_64_V3 = _X86_64_V2 | {"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "abm", "movbe"}
_X86_64_V4 = _X86_64_V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
_ALDERLAKE = _X86_64_V3 | {"avx_vnni", "gfni", "vaes", "vpclmulqdq"}
_ICELAKE = _X86_64_V4 | {
    "avx512ifma", "avx512vbmi", "avx512_vbmi2", "avx512_vnni", "avx512_bitalg", "avx512_vpopcntdq", "gfni", "vaes",
    "vpclmulqdq",
}  # fmt: skip
_SAPPHIRERAPIDS = _ICELAKE | {"avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"}
_ZEN = _X86_64_V3 | {"sse4a"}  # LLVM stores nontemporal scalar floats with SSE4A's movntss/movntsd
_ZEN4 = _ZEN | _ICELAKE | {"avx512_bf16"}
X86_CPUS: dict[str, frozenset[str]] = {
    "x86-64": _X86_64_V1,
    "x86-64-v2": _X86_64_V2,
    "x86-64-v3": _X86_64_V3,
    "x86-64-v4": _X86_64_V4,
    "nehalem": _X86_64_V2,
    "westmere": _X86_64_V2,
    "sandybridge": _X86_64_V2 | {"avx"},
    "ivybridge": _X86_64_V2 | {"avx", "f16c"},
    "haswell": _X86_64_V3,
    "broadwell": _X86_64_V3,
    "skylake": _X86_64_V3,
    "alderlake": _ALDERLAKE,
    "raptorlake": _ALDERLAKE,
    "meteorlake": _ALDERLAKE,
    "skylake-avx512": _X86_64_V4,
    "cascadelake": _X86_64_V4 | {"avx512_vnni"},
    "cooperlake": _X86_64_V4 | {"avx512_vnni", "avx512_bf16"},
    "cannonlake": _X86_64_V4 | {"avx512ifma", "avx512vbmi"},
    "icelake-client": _ICELAKE,
    "icelake-server": _ICELAKE,
    "rocketlake": _ICELAKE,
    "tigerlake": _ICELAKE | {"avx512_vp2intersect"},
    "sapphirerapids": _SAPPHIRERAPIDS,
    "emeraldrapids": _SAPPHIRERAPIDS,
    "graniterapids": _SAPPHIRERAPIDS | {"amx_fp16"},
    "znver1": _ZEN,
    "znver2": _ZEN,
    "znver3": _ZEN | {"vaes", "vpclmulqdq"},
    "znver4": _ZEN4,
    "znver5": _ZEN4 | {"avx512_vp2intersect", "avx_vnni"},
}
CPU_ENV = "CLANG_CPU"
HOST_CPU = "native"  # what a ``cpu`` argument says for "this machine's CPU" (``-march=native``)
CPU_EXAMPLES = ("haswell", "skylake", "znver3", "x86-64-v3", "skylake-avx512")
_X86_MACHINES = ("x86_64", "amd64")


@functools.cache
def host_cpu_flags() -> frozenset[str]:
    """This machine's CPU feature flags (``/proc/cpuinfo``; empty when unknown), read once per process."""
    return frozenset(cpuinfo_flags().split())


@functools.cache
def host_vector_bytes() -> int:
    """Bytes of this CPU's widest vector registers that ``-march=native`` code uses: 64 (AVX-512F), 32 (AVX), 16."""
    flags = host_cpu_flags()
    return 64 if "avx512f" in flags else 32 if "avx" in flags else 16


def vector_shape(arch: str | None) -> tuple[int, int]:
    """``(bytes per vector register, number of vector registers)`` of CPU target `arch` (a ``-march`` value; None:
    this machine): AVX-512 has 32 registers of 64 bytes, AVX/AVX2 16 of 32, SSE 16 of 16. A CPU of `X86_CPUS` gets
    its own ISA's; another `arch` counts as AVX2 unless it is one of `AVX512_ARCHS`.

    >>> vector_shape("haswell"), vector_shape("znver4"), vector_shape("x86-64-v4"), vector_shape("x86-64-v2")
    ((32, 16), (64, 32), (64, 32), (16, 16))
    """
    flags = X86_CPUS.get(arch) if arch is not None else None
    if arch is None:
        width = host_vector_bytes()
    elif flags is not None:
        width = 64 if "avx512f" in flags else 32 if "avx" in flags else 16
    else:
        width = 64 if arch in AVX512_ARCHS else 32
    return width, 32 if width == 64 else 16


def reduce_streams(arch: str | None) -> int:
    """How many rows a long contiguous reduce on CPU target `arch` (None: this machine) reads side by side (the
    renderer's `reduce_streams`): 1 on AMD Zen, whose prefetchers keep one stream per core at full speed (row sums
    of a 4096 x 4096 matrix on a Zen 4, 2 threads: one row ~30% faster than four side by side), 4 elsewhere (four
    streams ~25% faster than one on an Intel AVX2 box). A named `arch` says the vendor (``znver*``); the host's is
    read from ``/proc/cpuinfo``.

    >>> reduce_streams("znver4"), reduce_streams("haswell"), reduce_streams("skylake-avx512")
    (1, 4, 4)
    """
    amd = arch.startswith("znver") if arch is not None else cpu_vendor() == "AuthenticAMD"
    return 1 if amd else 4


DEFAULT_L2_BYTES = 512 << 10


def l2_bytes(arch: str | None) -> int:
    """One core's L2 cache on CPU target `arch` (None: this machine, read from sysfs), the renderer's `l2_bytes`:
    a matmul's block of left-operand rows is sized to half of it. A named `arch`, or a machine that doesn't say,
    gets `DEFAULT_L2_BYTES` (512 KiB). Sizing for the real cache matters: on a Xeon with 2 MiB of L2, blocks sized
    for it with 4-vector tiles ran matmul 1024 at 0.86-1.00x torch against 0.68-0.87x (2 cores, same runs).

    >>> l2_bytes("haswell") == DEFAULT_L2_BYTES
    True
    """
    return (cpu_l2_bytes() if arch is None else None) or DEFAULT_L2_BYTES


def check_target_cpu(
    value: str, flags: frozenset[str] | None = None, machine: str | None = None, source: str = CPU_ENV
) -> str | None:
    """The CPU that `value` (what ``CLANG_CPU`` says) names, checked: None for ``native`` (the host); else a name of
    `X86_CPUS` whose instruction set this machine has (`flags`: its /proc/cpuinfo flags, default `host_cpu_flags`;
    `machine`: default ``platform.machine()``), since kernels built for it run here. A ValueError naming `source`,
    the value and the problem (an unknown name, with examples; a missing feature; not an x86-64 machine) otherwise:
    an unknown name never reaches LLVM, which would warn, target a generic CPU, or even abort the process.

    >>> check_target_cpu("Haswell", frozenset(X86_CPUS["skylake-avx512"]), "x86_64")
    'haswell'
    >>> check_target_cpu("skylake-avx512", frozenset(X86_CPUS["haswell"]), "x86_64")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: CLANG_CPU=skylake-avx512: this machine lacks avx512bw, avx512cd, avx512dq, avx512f, avx512vl, ...
    """
    cpu = value.strip().lower()
    if cpu == HOST_CPU:
        return None
    if cpu not in X86_CPUS:
        raise ValueError(
            f"{source}={value!r}: not an x86-64 CPU name tinycore knows; use an LLVM/-march CPU name such as "
            f"{', '.join(CPU_EXAMPLES)} (all: {', '.join(sorted(X86_CPUS))}), or {HOST_CPU} for this machine"
        )
    machine = (platform.machine() if machine is None else machine).lower()
    if machine not in _X86_MACHINES:
        raise ValueError(f"{source}={cpu}: kernels for another x86-64 CPU need an x86-64 machine; this is {machine!r}")
    have = host_cpu_flags() if flags is None else flags
    if not have:
        raise ValueError(
            f"{source}={cpu}: this machine's CPU features are unknown (no /proc/cpuinfo flags), so whether it can "
            f"run code built for {cpu} can't be checked"
        )
    missing = sorted(X86_CPUS[cpu] - have)
    if missing:
        fits = [name for name, need in X86_CPUS.items() if need <= have]
        raise ValueError(
            f"{source}={cpu}: this machine lacks {', '.join(missing)}, which code built for {cpu} may use (the "
            f"kernels run on this machine); CPUs it can run: {', '.join(fits) or 'none'}"
        )
    return cpu


def target_cpu_from_env(env: dict[str, str] | None = None) -> str | None:
    """The CPU ``CLANG_CPU`` asks kernels to be built for, checked (`check_target_cpu`: a ValueError when unknown or
    not runnable here); None when unset, empty or ``native``: this machine's CPU.

    >>> target_cpu_from_env({}), target_cpu_from_env({"CLANG_CPU": " "})
    (None, None)
    """
    value = (os.environ if env is None else env).get(CPU_ENV, "")
    return check_target_cpu(value) if value.strip() else None


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _register_of(index: UOp | None) -> UOp | None:
    """The register array (``DEFINE_REG``) an INDEX addresses, through ``AFTER``/``CAST`` wrappers (None if none)."""
    node = index.src[0] if index is not None else None
    while node is not None and node.op in (Ops.AFTER, Ops.CAST) and node.src:
        node = node.src[0]
    return node if node is not None and node.op is Ops.DEFINE_REG else None


class ClangRenderer(Renderer):
    """C renderer of the CLANG device: one function per kernel, loops for ranges, GCC/clang vector extensions
    (``__attribute__((vector_size(N)))``) for vector dtypes, ``restrict`` buffers, and exact constants.

    `arch` is the CPU target handed to the compiler (None: ``-march=native``); rendering doesn't depend on it.
    `threads` is how many CPU threads a ``core_id`` split should use (``THREADS`` or the CPU count). Picklable as
    ``(family, arch)`` like every renderer. `vector_bytes` and `vector_registers` describe the target's vector
    registers (`vector_shape`: 64 bytes x 32 with AVX-512, 32 x 16 with AVX), `reduce_streams` how many rows a long
    reduce reads side by side (`reduce_streams`: 1 on AMD Zen, 4 elsewhere), `l2_bytes` one core's L2 cache
    (`l2_bytes`, from sysfs); `gemm_panel_bytes` (four vector registers with 32 of them, else two) asks the
    frontend to repack a large matmul's right operand into panels one register tile wide;
    `row_reduce_bytes` (`ROW_REDUCE_BYTES`) lets softmax-like row reduces run in one kernel per row.

    >>> r = ClangRenderer()
    >>> r.has_local, r.has_shared, "SQRT" in r.native_ops, "EXP2" in r.native_ops
    (False, False, True, False)
    """

    device = "CLANG"
    suffix = "CLANG"
    supports_float4 = True
    has_local = False
    has_shared = False
    has_threads = True
    global_max = None
    local_max = None
    shared_max = 0
    tensor_cores = []
    # ALU ops rendered directly (core decomposes the rest: EXP2, LOG2, SIN, POW, THREEFRY). SQRT and TRUNC map to
    # vectorizable builtins; MULACC to fma where the target has FMA.
    native_ops = frozenset(
        {
            "ADD", "SUB", "MUL", "FDIV", "IDIV", "MOD", "MAX", "NEG", "RECIP", "SQRT", "TRUNC",
            "CMPLT", "CMPNE", "CMPEQ", "AND", "OR", "XOR", "SHL", "SHR", "WHERE", "MULACC",
        }
    )  # fmt: skip
    supported_dtypes = frozenset(ALL_SCALARS)
    row_reduce_bytes = ROW_REDUCE_BYTES

    def __init__(self, arch: str | None = None, threads: int | None = None):
        self.arch = arch
        self.threads = threads if threads is not None else default_thread_count()
        self.vector_bytes, self.vector_registers = vector_shape(arch)
        self.reduce_streams = reduce_streams(arch)
        self.l2_bytes = l2_bytes(arch)
        # a matmul's register tile: 4 rows x 4 vectors with AVX-512's 32 registers (a Xeon with 2 MiB L2: matmul
        # 1024 0.86-1.00x torch against 0.68-0.87x with 8 x 2 in the same runs; a Zen 4 the same within noise),
        # 4 x 2 with AVX2's 16
        self.gemm_panel_bytes = (4 if self.vector_registers >= 32 else 2) * self.vector_bytes

    # ----- public helpers -----
    @staticmethod
    def float_literal(value: float, dtype: DType) -> str:
        """An exact C literal for a float constant of `dtype` (hex floats, builtins for inf and nan).

        16-bit floats give the float32 literal of their value (the caller converts).
        """
        is_double = dtype.scalar() == dtypes.float64
        suffix = "" if is_double else "f"
        if math.isnan(value):
            return '__builtin_nan("")' if is_double else '__builtin_nanf("")'
        if math.isinf(value):
            inf = "__builtin_inf()" if is_double else "__builtin_inff()"
            return inf if value > 0 else f"(-{inf})"
        mantissa, _, exponent = float(value).hex().partition("p")
        mantissa = mantissa.rstrip("0").rstrip(".")
        text = f"{mantissa}p{exponent}{suffix}"
        return f"({text})" if text.startswith("-") else text

    @staticmethod
    def ctype(dtype: DType) -> str:
        """The C type of a scalar, vector or pointer dtype as rendered (vectors are ``tc_<lane>x<N>`` typedefs)."""
        if isinstance(dtype, PtrDType):
            return f"{ClangRenderer.ctype(dtype.base)}*"
        if dtype.count > 1:
            name, _ = _VEC_LANE_TYPES[dtype.scalar()]
            return f"tc_{name}x{_next_pow2(dtype.count)}"
        if dtype == dtypes.void:
            return "void"
        return _CTYPES[dtype]

    # ----- rendering -----
    def render(self, uops: list[UOp], name: str | None = None) -> str:
        """The C source of one kernel. `name` is the function name; without it the name comes from the program's
        SINK (an arg that is a string or has ``name``/``function_name``), else ``kernel``."""
        fname = kernel_function_name(uops, name)
        return _KernelWriter(uops, fname).write()


def _unsigned_of(dtype: DType) -> str:
    return "unsigned long long" if dtype.itemsize == 8 else "unsigned int"


def _int_const(value: int, dtype: DType) -> str:
    scalar = dtype.scalar()
    value = int(value)
    if scalar in (dtypes.int64, dtypes.index):
        return "(-9223372036854775807ll-1)" if value == -(2**63) else (f"({value}ll)" if value < 0 else f"{value}ll")
    if scalar == dtypes.uint64:
        return f"{value}ull"
    if scalar == dtypes.uint32:
        return f"{value}u"
    if scalar == dtypes.int32 and value == -(2**31):
        return "(-2147483647-1)"
    return f"({value})" if value < 0 else str(value)


class _KernelWriter:
    """Renders one program; `exprs[u]` is the C expression (a variable name or an inlinable expression) of `u`."""

    def __init__(self, uops: list[UOp], name: str):
        self.uops, self.name = uops, name
        self.exprs: dict[UOp, str] = {}
        self.lines: list[str] = []
        self.depth = 1
        self.counter = 0
        self.vec_types: dict[str, str] = {}
        self.uses: dict[UOp, int] = {}
        for u in uops:
            for s in u.src:
                self.uses[s] = self.uses.get(s, 0) + 1
        self.index_only = index_only_values(uops)
        self.streaming = False  # a non-temporal store was emitted: the kernel ends with a store fence
        self.reg_store_depth: dict[UOp, int] = {}  # register array -> loop depth of its last store
        self.gated_stores = any(
            u.op is Ops.IF
            or (u.op is Ops.STORE and (index := _find_index(u.src[0])) is not None and len(index.src) > 2)
            for u in uops
        )

    # ----- output helpers -----
    def emit(self, line: str) -> None:
        """Append one line of C at the current indentation."""
        self.lines.append("  " * self.depth + line)

    def fresh(self, prefix: str) -> str:
        """A new variable name with `prefix`."""
        self.counter += 1
        return f"{prefix}{self.counter}"

    def ctype(self, dtype: DType) -> str:
        """The C type of `dtype`, registering the vector typedef it needs."""
        if isinstance(dtype, PtrDType):
            return f"{self.ctype(dtype.base)}*"
        if dtype.count > 1:
            name = ClangRenderer.ctype(dtype)
            if name not in self.vec_types:
                _, lane = _VEC_LANE_TYPES[dtype.scalar()]
                lanes = _next_pow2(dtype.count)
                size = lanes * dtype.scalar().itemsize
                self.vec_types[name] = f"typedef {lane} {name} __attribute__((vector_size({size})));"
            return name
        return ClangRenderer.ctype(dtype)

    def simple(self, expr: str, dtype: DType) -> str:
        """`expr` as something cheap to repeat: itself when already a name or literal, else a new variable."""
        if _SIMPLE.match(expr):
            return expr
        var = self.fresh("t")
        self.emit(f"{self.ctype(dtype)} {var} = {expr};")
        return var

    def declare(self, u: UOp, expr: str, prefix: str = "val") -> str:
        """Give `u` a variable initialised with `expr`; returns its name."""
        var = self.fresh(prefix)
        self.emit(f"{self.ctype(u.dtype)} {var} = {expr};")
        return var

    def fail(self, u: UOp, why: str) -> ClangRenderError:
        """A `ClangRenderError` naming `u` and why it can't be rendered."""
        return ClangRenderError(f"CLANG renderer: can't render {u.op} ({u.dtype!r}, arg={u.arg!r}): {why}")

    # ----- the program -----
    def write(self) -> str:
        """The whole translation unit: marker, preludes, typedefs, kernel, trampoline, info string."""
        kernel = kernel_params(self.uops, self.fail)
        params: list[str] = []
        casts: list[str] = []
        for i, g in enumerate(kernel.buffers):
            if g is None:
                params.append(f"void* restrict unused{i}")
                casts.append(f"bufs[{i}]")
                continue
            base = self.ctype(kernel.pointee(g))
            const = "" if i in kernel.written else "const "
            params.append(f"{const}{base}* restrict data{i}")
            casts.append(f"({const}{base}*)bufs[{i}]")
            self.exprs[g] = f"data{i}"
        for j, var in enumerate(kernel.variables):
            ctype = "long long" if var.wide else "int"
            params.append(f"{ctype} {var.name}")
            casts.append(f"({ctype})vals[{j}]")
            self.exprs[var.uop] = var.name
        if kernel.core_id is not None:
            params.append("int core_id")
            casts.append("core_id")
            self.exprs[kernel.core_id] = "core_id"
        for u in self.uops:
            self.render_uop(u)
        while self.depth > 1:  # tolerate a program whose last ENDs were dropped
            self.depth -= 1
            self.emit("}")
        if self.streaming:  # streaming stores are weakly ordered: make them visible before the launch returns
            self.emit("TC_NT_FENCE();")
        body = "\n".join(self.lines)
        used = {u.dtype.scalar() for u in self.uops} | {
            u.dtype.base.scalar() for u in self.uops if isinstance(u.dtype, PtrDType)
        }
        preludes = [PRELUDE_HALF] if dtypes.float16 in used else []
        preludes += [PRELUDE_BF16] if dtypes.bfloat16 in used else []
        preludes += [PRELUDE_FMA] if any(u.op is Ops.MULACC for u in self.uops) else []
        preludes += [PRELUDE_NT] if self.streaming else []
        header = [f"{KERNEL_MARKER}{self.name}", *(p.rstrip("\n") for p in preludes), *self.vec_types.values()]
        signature = ", ".join(params) if params else "void"
        tramp_args = ", ".join(casts)
        return (
            "\n".join(header)
            + f"\nvoid {self.name}({signature}) {{\n{body}\n}}\n"
            + f"void {self.name}_tc(void* const* bufs, const long long* vals, int core_id) {{\n"
            + "  (void)bufs; (void)vals; (void)core_id;\n"
            + f"  {self.name}({tramp_args});\n}}\n"
            + f'const char {self.name}_tc_info[] = "{kernel.info}";\n'
        )

    # ----- one uop -----
    def render_uop(self, u: UOp) -> None:
        """Emit the C for one uop (or record the expression it stands for)."""
        op = u.op
        if op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.SINK, Ops.GROUP, Ops.BARRIER):
            return  # parameters, or nothing to do on a CPU (no shared memory, so no barrier)
        if op in _NOT_SUPPORTED:
            raise self.fail(u, "not available on the CPU (has_local/has_shared are False, no tensor cores)")
        if op in (Ops.NOOP, Ops.AFTER):
            if u.src:
                self.exprs[u] = self.exprs[u.src[0]]
            return
        if op is Ops.CONST:
            self.exprs[u] = self.const(u.arg, u.dtype)
        elif op is Ops.VCONST:
            lanes = ", ".join(self.const(v, u.dtype.scalar()) for v in u.arg)
            self.exprs[u] = self.declare(u, f"({self.ctype(u.dtype)}){{{lanes}}}", "vc")
        elif op is Ops.DEFINE_REG:
            if not isinstance(u.dtype, PtrDType) or u.dtype.size < 0:
                raise self.fail(u, "a register array needs a pointer dtype with a known size")
            var = self.fresh("acc")
            self.emit(f"{self.ctype(u.dtype.base)} {var}[{max(1, u.dtype.size)}];")
            self.exprs[u] = var
        elif op is Ops.RANGE:
            var = self.fresh("ridx")
            end = self.exprs[u.src[0]]
            self.emit(f"for ({self.ctype(u.dtype)} {var} = 0; {var} < {end}; {var}++) {{")
            self.depth += 1
            self.exprs[u] = var
        elif op is Ops.END:
            closes = sum(1 for s in u.src if s.op is Ops.RANGE) or 1
            for _ in range(closes):
                self.depth -= 1
                self.emit("}")
        elif op is Ops.IF:
            self.emit(f"if ({self.exprs[u.src[0]]}) {{")
            self.depth += 1
        elif op is Ops.ENDIF:
            self.depth -= 1
            self.emit("}")
        elif op is Ops.INDEX:
            self.render_index(u)
        elif op is Ops.LOAD:
            self.render_load(u)
        elif op is Ops.STORE:
            self.render_store(u)
        elif op is Ops.CAST and isinstance(u.dtype, PtrDType):
            self.exprs[u] = f"(({self.ctype(u.dtype)})({self.exprs[u.src[0]]}))"
        elif op is Ops.CUSTOM:
            text = str(u.arg).format(*(self.exprs.get(s, "") for s in u.src))  # effects order, have no value
            if u.dtype == dtypes.void:
                self.emit(f"{text};")
            else:
                self.exprs[u] = self.declare(u, text, "cus")
        elif op is Ops.VECTORIZE:
            lanes = ", ".join(self.exprs[s] for s in u.src)
            self.finish(u, f"({self.ctype(u.dtype)}){{{lanes}}}")
        elif op is Ops.GEP:
            src = self.exprs[u.src[0]]
            if u.src[0].dtype.count == 1 and len(u.arg) > 1:  # broadcast a scalar
                self.finish(u, f"({self.ctype(u.dtype)}){{{', '.join([src] * len(u.arg))}}}")
            elif u.src[0].dtype.count == 1:
                self.exprs[u] = src
            elif len(u.arg) == 1:
                self.exprs[u] = f"{src}[{u.arg[0]}]"
            else:
                lanes = ", ".join(f"{src}[{i}]" for i in u.arg)
                self.finish(u, f"({self.ctype(u.dtype)}){{{lanes}}}")
        elif op is Ops.CAST:
            self.finish(u, self.lanewise(u, lambda xs, dt, s: self.cast(xs[0], s[0], dt)))
        elif op is Ops.BITCAST:
            self.finish(u, self.bitcast(self.exprs[u.src[0]], u.src[0].dtype, u.dtype))
        elif op in GroupOp.ALU:
            self.finish(u, self.alu(u))
        else:
            raise self.fail(u, "unknown op for the C renderer")

    def finish(self, u: UOp, expr: str) -> None:
        """Inline a single-use scalar expression; give everything else a variable."""
        inline = u.dtype.count == 1 and self.uses.get(u, 0) <= 1 and len(expr) < 400
        self.exprs[u] = expr if inline else self.declare(u, expr, "alu" if u.op in GroupOp.ALU else "val")

    # ----- constants -----
    def const(self, value: Any, dtype: DType) -> str:
        """The C literal of a scalar constant of `dtype`."""
        scalar = dtype.scalar()
        if scalar == dtypes.bool:
            return "1" if value else "0"
        if dtypes.is_float(scalar):
            literal = ClangRenderer.float_literal(float(value), scalar)
            if scalar == dtypes.float16:
                return f"TC_F2H({literal})"
            if scalar == dtypes.bfloat16:
                return f"tc_f2bf({literal})"
            return literal
        return _int_const(value, scalar)

    def as_float(self, u: UOp) -> str:
        """A float32 expression of a 16-bit float scalar operand (constants directly as float literals)."""
        if u.op is Ops.CONST:
            return ClangRenderer.float_literal(float(u.arg), dtypes.float32)
        return self.to_float(self.exprs[u], u.dtype.scalar())

    @staticmethod
    def to_float(expr: str, dtype: DType) -> str:
        """Convert a 16-bit float expression to float32."""
        return f"TC_H2F({expr})" if dtype == dtypes.float16 else f"tc_bf2f({expr})"

    @staticmethod
    def from_float(expr: str, dtype: DType) -> str:
        """Round a float32 expression to a 16-bit float dtype."""
        return f"TC_F2H({expr})" if dtype == dtypes.float16 else f"tc_f2bf({expr})"

    # ----- memory -----
    def render_index(self, u: UOp) -> None:
        """A pointer expression for INDEX (the buffer itself for gathers/scatters)."""
        buf, idx = self.exprs[u.src[0]], u.src[1]
        if idx.dtype.count > 1:  # a vector of addresses: loads/stores gather/scatter lane by lane
            self.exprs[u] = buf
            return
        if idx.op is Ops.CONST and idx.arg == 0:
            self.exprs[u] = buf
        else:
            self.exprs[u] = f"({buf}+{self.exprs[idx]})"

    def render_load(self, u: UOp) -> None:
        """A LOAD into a new variable: plain, gated (memory untouched when off), vector or gather."""
        index = _find_index(u.src[0])
        ptr = self.exprs[u.src[0]]
        gate = index.src[2] if index is not None and len(index.src) > 2 else None
        alt = self.exprs[u.src[1]] if len(u.src) > 1 else None
        ctype = self.ctype(u.dtype)
        var = self.fresh("ld")
        if index is not None and index.src[1].dtype.count > 1:  # gather
            idx = self.simple(self.exprs[index.src[1]], index.src[1].dtype)
            g = self.simple(self.exprs[gate], gate.dtype) if gate is not None else None
            a = self.simple(alt, u.src[1].dtype) if alt is not None else None
            lanes = []
            for i in range(u.dtype.count):
                access = f"{ptr}[{idx}[{i}]]"
                if g is not None:
                    g_i = f"{g}[{i}]" if gate is not None and gate.dtype.count > 1 else g
                    a_i = (f"{a}[{i}]" if u.src[1].dtype.count > 1 else a) if a is not None else "0"
                    access = f"({g_i} ? {access} : {a_i})"
                lanes.append(access)
            self.emit(f"{ctype} {var} = ({ctype}){{{', '.join(lanes)}}};")
        elif u.dtype.count > 1 or _needs_memcpy(u.src[0].dtype, u.dtype):
            nbytes = u.dtype.count * u.dtype.scalar().itemsize
            if gate is not None:
                init = alt if alt is not None else f"({ctype}){{0}}"
                self.emit(f"{ctype} {var} = {init};")
                self.emit(f"if ({self.exprs[gate]}) __builtin_memcpy(&{var}, {ptr}, {nbytes});")
            elif self._final_register_read(index):
                # an accumulator read after its loop in a kernel with gated stores: copied out through a compiler
                # barrier, so clang vectorizes the accumulation as whole vectors (when the value's lanes go on to
                # stores of irregular pieces, the masked tail of a tile, its SLP vectorizer left a third of the FMAs
                # scalar: 17 vs 130 GFLOPS on 513x511x517); without gates the copy only cost 2-4%
                self.emit(f"unsigned char {var}_out[{nbytes}];")
                self.emit(f"__builtin_memcpy({var}_out, {ptr}, {nbytes});")
                self.emit(f'__asm__ volatile("" : : "r"({var}_out) : "memory");')
                self.emit(f"{ctype} {var}; __builtin_memcpy(&{var}, {var}_out, {nbytes});")
            else:
                self.emit(f"{ctype} {var}; __builtin_memcpy(&{var}, {ptr}, {nbytes});")
        elif gate is not None:
            self.emit(f"{ctype} {var} = ({self.exprs[gate]}) ? *{ptr} : {alt if alt is not None else '0'};")
        else:
            self.emit(f"{ctype} {var} = *{ptr};")
        self.exprs[u] = var

    def _final_register_read(self, index: UOp | None) -> bool:
        """Whether a load through `index` reads a register array outside the loop that last stored to it, in a kernel
        with gated stores (or ``IF`` blocks)."""
        register = _register_of(index)
        depth = self.reg_store_depth.get(register) if register is not None else None
        return self.gated_stores and depth is not None and self.depth < depth

    def render_store(self, u: UOp) -> None:
        """A STORE: plain, vector (memcpy), scatter, or gated by the INDEX gate."""
        target, value = u.src[0], u.src[1]
        index = _find_index(target)
        register = _register_of(index)
        if register is not None:
            self.reg_store_depth[register] = self.depth
        ptr, val = self.exprs[target], self.exprs[value]
        gate = index.src[2] if index is not None and len(index.src) > 2 else None
        if index is not None and index.src[1].dtype.count > 1:  # scatter
            idx = self.simple(self.exprs[index.src[1]], index.src[1].dtype)
            v = self.simple(val, value.dtype)
            for i in range(index.src[1].dtype.count):
                lane = f"{v}[{i}]" if value.dtype.count > 1 else v
                stmt = f"{ptr}[{idx}[{i}]] = {lane};"
                if gate is not None:
                    g_i = f"{self.exprs[gate]}[{i}]" if gate.dtype.count > 1 else self.exprs[gate]
                    stmt = f"if ({g_i}) {stmt}"
                self.emit(stmt)
            return
        if value.dtype.count > 1 or _needs_memcpy(target.dtype, value.dtype):
            tmp = self.fresh("st")
            nbytes = value.dtype.count * value.dtype.scalar().itemsize
            vtype = self.ctype(value.dtype)
            if gate is None and self._streams(target, value):
                self.streaming = True
                stmt = f"{{ {vtype} {tmp} = {val}; TC_NT_STORE({vtype}, {ptr}, {tmp}, {nbytes}); }}"
            else:
                stmt = f"{{ {vtype} {tmp} = {val}; __builtin_memcpy({ptr}, &{tmp}, {nbytes}); }}"
        else:
            stmt = f"*{ptr} = {val};"
        self.emit(f"if ({self.exprs[gate]}) {stmt}" if gate is not None else stmt)

    @staticmethod
    def _streams(target: UOp, value: UOp) -> bool:
        """A whole-vector (power-of-two size, 16 bytes or more) store into a global buffer of at least
        `NT_STORE_MIN_BYTES`: written once and far larger than the caches, so it bypasses them (no read of the
        destination's lines first, no eviction of the inputs)."""
        root = root_buffer(target)
        nbytes = value.dtype.count * value.dtype.scalar().itemsize
        if root is None or root.op is not Ops.DEFINE_GLOBAL or not isinstance(root.dtype, PtrDType):
            return False
        if value.dtype.count != _next_pow2(value.dtype.count) or nbytes < 16:
            return False
        return root.dtype.size * root.dtype.base.itemsize >= NT_STORE_MIN_BYTES

    # ----- elementwise -----
    def lanewise(self, u: UOp, scalar: Callable[[list[str], DType, list[DType]], str]) -> str:
        """Apply `scalar(operand exprs, result scalar dtype, operand scalar dtypes)` per lane of a vector uop."""
        src_dtypes = [s.dtype.scalar() for s in u.src]
        if u.dtype.count == 1:
            return scalar([self.exprs[s] for s in u.src], u.dtype.scalar(), src_dtypes)
        operands = [self.simple(self.exprs[s], s.dtype) for s in u.src]
        lanes = []
        for i in range(u.dtype.count):
            args = [f"{o}[{i}]" if s.dtype.count > 1 else o for o, s in zip(operands, u.src)]
            lanes.append(scalar(args, u.dtype.scalar(), src_dtypes))
        return f"({self.ctype(u.dtype)}){{{', '.join(lanes)}}}"

    def alu(self, u: UOp) -> str:
        """The expression of an ALU uop (vector fast paths, 16-bit floats through float32)."""
        op, dtype = u.op, u.dtype.scalar()
        operand_dtype = u.src[-1].dtype.scalar() if u.src else dtype
        if u.dtype.count > 1 and op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.AND, Ops.OR, Ops.XOR, Ops.NEG):
            fast = self.vector_alu(u)
            if fast is not None:
                return fast
        if op in GroupOp.Comparison:
            sym = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}[op]
            if operand_dtype in _HALF_LIKE:
                if u.dtype.count == 1:
                    return f"({self.as_float(u.src[0])}{sym}{self.as_float(u.src[1])})"
                return self.lanewise(
                    u, lambda xs, dt, sd: f"({self.to_float(xs[0], sd[0])}{sym}{self.to_float(xs[1], sd[1])})"
                )
            return self.lanewise(u, lambda xs, dt, sd: f"({xs[0]}{sym}{xs[1]})")
        if op is Ops.WHERE:
            return self.lanewise(u, lambda xs, dt, sd: f"({xs[0]}?{xs[1]}:{xs[2]})")
        if dtype in _HALF_LIKE:
            return self.half_alu(u)
        index_only = u in self.index_only
        return self.lanewise(u, lambda xs, dt, sd: self.scalar_alu(op, xs, dt, index_only))

    def vector_alu(self, u: UOp) -> str | None:
        """Whole-vector arithmetic where the vector extension's semantics equal the scalar ones."""
        scalar = u.dtype.scalar()
        sym = _SYM
        ops = [self.exprs[s] for s in u.src]
        if scalar in (dtypes.float32, dtypes.float64):
            if u.op is Ops.NEG:
                return f"(-{ops[0]})"
            if u.op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV):
                return f"({ops[0]}{sym[u.op]}{ops[1]})"
            return None
        if not dtypes.is_int(scalar) or scalar.itemsize < 4 or any(s.dtype.count != u.dtype.count for s in u.src):
            return None
        if u.op in (Ops.AND, Ops.OR, Ops.XOR):
            return f"({ops[0]}{sym[u.op]}{ops[1]})"
        if u.op is Ops.FDIV:
            return None
        vt = self.ctype(u.dtype)
        if scalar in _SIGNED and u not in self.index_only:  # wrap through the unsigned vector type
            uvt = self.ctype((dtypes.uint64 if scalar.itemsize == 8 else dtypes.uint32).vec(u.dtype.count))
            if u.op is Ops.NEG:
                return f"(({vt})(-({uvt}){ops[0]}))"
            return f"(({vt})(({uvt}){ops[0]}{sym[u.op]}({uvt}){ops[1]}))"
        return f"(-{ops[0]})" if u.op is Ops.NEG else f"({ops[0]}{sym[u.op]}{ops[1]})"

    def half_alu(self, u: UOp) -> str:
        """float16/bfloat16 arithmetic: computed in float32, rounded back after the op."""
        dtype = u.dtype.scalar()

        def scalar(xs: list[str], dt: DType, sd: list[DType]) -> str:
            """One lane: operands to float32, the op, rounded back."""
            fs = [self.to_float(x, d) for x, d in zip(xs, sd)]
            return self.from_float(self.scalar_alu(u.op, fs, dtypes.float32, False), dtype)

        if u.dtype.count == 1:
            fs = [self.as_float(s) for s in u.src]
            return self.from_float(self.scalar_alu(u.op, fs, dtypes.float32, False), dtype)
        return self.lanewise(u, scalar)

    def scalar_alu(self, op: Ops, xs: list[str], dtype: DType, index_only: bool) -> str:
        """One scalar ALU op on rendered operands (integer results of less than 32 bits are cast back)."""
        is_float = dtypes.is_float(dtype)
        is_bool = dtype == dtypes.bool
        ct = _CTYPES[dtype]
        a = xs[0]
        b = xs[1] if len(xs) > 1 else ""
        if is_bool:
            table = {Ops.ADD: "|", Ops.OR: "|", Ops.MUL: "&", Ops.AND: "&", Ops.XOR: "^", Ops.MAX: "|"}
            if op in table:
                return f"({a}{table[op]}{b})"
            if op is Ops.NEG:
                return f"(!{a})"
            raise ClangRenderError(f"CLANG renderer: {op} is not defined on bool")
        if is_float:
            suffix = "f" if dtype == dtypes.float32 else ""
            one = "1.0f" if dtype == dtypes.float32 else "1.0"
            if op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV):
                return f"({a}{_SYM[op]}{b})"
            if op is Ops.NEG:
                return f"(-{a})"
            if op is Ops.RECIP:
                return f"({one}/{a})"
            if op is Ops.SQRT:
                return f"__builtin_sqrt{suffix}({a})"
            if op is Ops.TRUNC:
                return f"__builtin_trunc{suffix}({a})"
            if op is Ops.MULACC:
                return f"{'TC_FMAF' if suffix else 'TC_FMA'}({a}, {b}, {xs[2]})"
            if op is Ops.MAX:
                sa, sb = self.simple(a, dtype), self.simple(b, dtype)
                return f"(({sb}>{sa}||{sb}!={sb})?{sb}:{sa})"
            if op is Ops.IDIV:
                return f"__builtin_trunc{suffix}({a}/{b})"
            if op is Ops.MOD:
                return f"__builtin_fmod{suffix}({a}, {b})"
            raise ClangRenderError(f"CLANG renderer: {op} is not defined on {dtype}")
        # integers
        signed = dtype in _SIGNED
        narrow = dtype.itemsize < 4

        def back(expr: str) -> str:
            """Cast an integer result narrower than int back to its type."""
            return f"(({ct}){expr})" if narrow else expr

        if op in (Ops.AND, Ops.OR, Ops.XOR):
            return back(f"({a}{_SYM[op]}{b})")
        if op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.MULACC):
            wrap = not index_only and (signed or narrow)
            if op is Ops.MULACC:
                if wrap:
                    ut = _unsigned_of(dtype)
                    return f"(({ct})(({ut}){a}*({ut}){b}+({ut}){xs[2]}))"
                return back(f"({a}*{b}+{xs[2]})")
            if op is Ops.NEG:
                return f"(({ct})(0u-({_unsigned_of(dtype)}){a}))" if wrap else back(f"(-{a})")
            sym = _SYM[op]
            if wrap:
                ut = _unsigned_of(dtype)
                return f"(({ct})(({ut}){a}{sym}({ut}){b}))"
            return f"({a}{sym}{b})"
        if op in (Ops.IDIV, Ops.MOD):
            sym = "/" if op is Ops.IDIV else "%"
            divisor = self._const_value(b)
            if divisor is not None and divisor != 0 and not (signed and divisor == -1):
                return back(f"({a}{sym}{b})")
            sa, sb = self.simple(a, dtype), self.simple(b, dtype)
            if signed:
                ut = _unsigned_of(dtype)
                minus = f"(({ct})(0u-({ut}){sa}))" if op is Ops.IDIV else "0"
                return back(f"({sb}==0?0:{sb}==-1?{minus}:{sa}{sym}{sb})")
            return back(f"({sb}==0?0:{sa}{sym}{sb})")
        if op is Ops.MAX:
            sa, sb = self.simple(a, dtype), self.simple(b, dtype)
            return f"({sb}>{sa}?{sb}:{sa})"
        if op in (Ops.SHL, Ops.SHR):
            bits = dtype.itemsize * 8
            amount = self._const_value(b)
            ut = _unsigned_of(dtype)
            if op is Ops.SHL:
                if amount is not None and not 0 <= amount < bits:
                    return f"(({ct})0)"
                sb = b if amount is not None else self.simple(b, dtype)
                shifted = f"(({ct})(({ut}){a}<<{sb}))" if signed or narrow else f"({a}<<{sb})"
                return shifted if amount is not None else f"((({ut}){sb})<{bits}u?{shifted}:({ct})0)"
            if amount is not None:
                if 0 <= amount < bits:
                    return back(f"({a}>>{b})")
                return back(f"({a}>>{bits - 1})") if signed else f"(({ct})0)"
            sa, sb = self.simple(a, dtype), self.simple(b, dtype)
            overflow = f"({sa}>>{bits - 1})" if signed else "0"
            return back(f"((({ut}){sb})<{bits}u?({sa}>>{sb}):{overflow})")
        if op is Ops.TRUNC:
            return a
        raise ClangRenderError(f"CLANG renderer: {op} is not defined on {dtype}")

    @staticmethod
    def _const_value(expr: str) -> int | None:
        match = re.fullmatch(r"\(?(-?\d+)(?:u|ll|ull)?\)?", expr)
        return int(match.group(1)) if match else None

    # ----- conversions -----
    def cast(self, x: str, src: DType, dst: DType) -> str:
        """Scalar value conversion with the documented semantics."""
        if src == dst:
            return x
        if src in _HALF_LIKE:
            if dst in _HALF_LIKE:
                return self.from_float(self.to_float(x, src), dst)
            return self.cast(self.to_float(x, src), dtypes.float32, dst)
        if dst in _HALF_LIKE:
            if dst == dtypes.float16 and src == dtypes.float64:
                return f"TC_D2H({x})"
            return self.from_float(x if src == dtypes.float32 else f"(float)({x})", dst)
        ct = _CTYPES[dst]
        if dst == dtypes.bool:
            return f"((_Bool)({x}))"
        if dtypes.is_float(src) and dtypes.is_int(dst):
            if dst.itemsize <= 4:  # NaN/inf -> INT64_MIN -> 0 in the low bits; finite values wrap
                return f"(({ct})(long long)({x}))"
            sx = self.simple(x, src)
            lit = "f" if src == dtypes.float32 else ""
            if dst == dtypes.uint64:
                return (
                    f"(({sx}>=0&&{sx}<0x1p64{lit})?(unsigned long long)({sx}):"
                    f"({sx}<0&&{sx}>-0x1p63{lit})?(unsigned long long)(long long)({sx}):0ull)"
                )
            return f"(({sx}>-0x1p63{lit}&&{sx}<0x1p63{lit})?(long long)({sx}):0ll)"
        return f"(({ct})({x}))"

    def bitcast(self, x: str, src: DType, dst: DType) -> str:
        """Reinterpret the bits of `x` (a statement expression around memcpy: strict-aliasing safe)."""
        tmp_in, tmp_out = self.fresh("_bi"), self.fresh("_bo")
        nbytes = dst.count * dst.scalar().itemsize
        return (
            f"({{ {self.ctype(src)} {tmp_in} = {x}; {self.ctype(dst)} {tmp_out}; "
            f"__builtin_memcpy(&{tmp_out}, &{tmp_in}, {nbytes}); {tmp_out}; }})"
        )


def _find_index(u: UOp) -> UOp | None:
    """The INDEX under a pointer expression (through pointer casts and ordering nodes)."""
    seen = 0
    while u is not None and seen < 64:
        if u.op is Ops.INDEX:
            return u
        if u.op in (Ops.CAST, Ops.AFTER, Ops.NOOP, Ops.BITCAST) and u.src:
            u = u.src[0]
            seen += 1
            continue
        return None
    return None


def _needs_memcpy(ptr_dtype: DType, value_dtype: DType) -> bool:
    """True when the value is accessed with a type other than the pointer's element type."""
    if not isinstance(ptr_dtype, PtrDType):
        return False
    return ptr_dtype.base != value_dtype and ptr_dtype.addrspace != AddrSpace.LOCAL
