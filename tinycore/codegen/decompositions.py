"""Decompositions: ops a renderer does not render natively, rebuilt from the ones every renderer has.

A renderer lists the `Ops` it renders in `Renderer.native_ops`; `decomposition_rules(native_ops)` returns a
`PatternMatcher` that rewrites every other op into a graph of *basic* ops only:

    ADD MUL CMPLT CMPNE WHERE AND OR XOR SHL SHR CAST BITCAST   (plus constants)

(`SUB NEG MAX CMPEQ MULACC TRUNC FDIV RECIP` appear in some decompositions and are themselves decomposed when they
are not native either, so the result contains only native or basic ops). Every builder is exact where the op is
exact (integer division, `TRUNC`, special values) and a few ULP accurate for the transcendental ones, over the
whole range of float16, bfloat16, float32 and float64, denormals included; see `docs/decompositions.md` for the
algorithms and measured errors. float16 and bfloat16 are computed in float32 and rounded back once.

The float builders rely on IEEE semantics of each op (round to nearest even, no fused multiply-add contraction,
no reassociation, denormals not flushed): a renderer that compiles with fast-math flags breaks their error bounds.

>>> from tinycore.dtype import dtypes
>>> x = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 1))
>>> y = decompose(x.alu(Ops.EXP2), BASIC_OPS)  # a renderer with only the basic ops: SUB becomes ADD and MUL too
>>> sorted({u.op.name for u in y.toposort()} - {"CONST", "DEFINE_VAR"})
['ADD', 'BITCAST', 'CMPLT', 'CMPNE', 'MUL', 'SHL', 'SHR', 'WHERE']
"""

from __future__ import annotations

import decimal
import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from tinycore.dtype import FP8S, DType, PtrDType, dtypes
from tinycore.uop.ops import GroupOp, Ops, UOp
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite

__all__ = [
    "BASIC_OPS",
    "DECOMPOSABLE_OPS",
    "decompose",
    "decomposition_rules",
    "fp8_rules",
    "lower_fp8",
    "xexp2",
    "xfp8_decode",
    "xfp8_encode",
    "xfdiv",
    "xidiv",
    "xlog2",
    "xmod",
    "xpow",
    "xrecip",
    "xsin",
    "xsqrt",
    "xthreefry",
    "xtrunc",
]

BASIC_OPS: frozenset[str] = frozenset(
    {"ADD", "MUL", "CMPLT", "CMPNE", "WHERE", "AND", "OR", "XOR", "SHL", "SHR", "CAST", "BITCAST"}
)
"""Ops every renderer must render: the decompositions are built from these (and constants)."""

DECOMPOSABLE_OPS: frozenset[str] = frozenset(
    {"EXP2", "LOG2", "SIN", "SQRT", "RECIP", "FDIV", "POW", "IDIV", "MOD", "TRUNC", "NEG", "SUB", "MAX", "CMPEQ"}
    | {"MULACC", "THREEFRY"}
)
"""Ops `decomposition_rules` can replace when a renderer does not list them as native."""

# ---------------------------------------------------------------------------------------------------------------
# polynomial coefficients, lowest degree first (fitted by tools/fit_polynomials.py: Remez minimax, relative error)

# 2^r = 1 + r * P(r), |r| <= 0.5
_EXP2_F32 = (
    0.6931471824645996,
    0.24022650718688965,
    0.055504102259874344,
    0.009618036448955536,
    0.0013333935057744384,
    0.00015466756303794682,
    1.519615852885181e-05,
)
_EXP2_F64 = (
    0.6931471805599453,
    0.2402265069591013,
    0.055504108664820084,
    0.00961812910759412,
    0.0013333558146774649,
    0.00015403530457111438,
    1.5252733493095567e-05,
    1.3215435282639608e-06,
    1.0178199586538565e-07,
    7.073783191985704e-09,
    4.434768924340791e-10,
)
# log2(1 + f) = f * log2(e) + f^2 * G(f), f in [sqrt(1/2) - 1, sqrt(2) - 1]
_LOG2_F32 = (
    -0.7213475108146667,
    0.48089802265167236,
    -0.3606741428375244,
    0.2885710299015045,
    -0.24046391248703003,
    0.20511777698993683,
    -0.17900007963180542,
    0.17169447243213654,
    -0.16844964027404785,
    0.09702193737030029,
)
# sin(r) = r + r^3 * S(r^2), cos(r) = 1 - r^2/2 + r^4 * C(r^2), |r| <= pi/4
_SIN_F32 = (-0.1666666716337204, 0.008333329111337662, -0.00019839292508549988, 2.7179337394045433e-06)
_SIN_F64 = (
    -0.16666666666666666,
    0.008333333333333333,
    -0.00019841269841269828,
    2.7557319223973564e-06,
    -2.5052108379575958e-08,
    1.6059042209095408e-10,
    -7.646901515174e-13,
    2.788722267504662e-15,
)
_COS_F32 = (0.0416666679084301, -0.0013888883404433727, 2.4799437596811913e-05, -2.720398413202929e-07)
_COS_F64 = (
    0.041666666666666664,
    -0.001388888888888889,
    2.4801587301587295e-05,
    -2.7557319223980144e-07,
    2.0876756985014646e-09,
    -1.147074478797472e-11,
    4.7793456558933485e-14,
    -1.5504946325198757e-16,
)

# ---------------------------------------------------------------------------------------------------------------
# exact constants derived here (pi by Machin's formula in integer arithmetic)


@functools.cache
def _pi_scaled(bits: int) -> int:
    """floor(pi * 2^bits) (exact: computed with 64 guard bits, Machin: pi = 16 atan(1/5) - 4 atan(1/239))."""
    one = 1 << (bits + 64)

    def atan_inv(n: int) -> int:  # atan(1/n) * 2^(bits+64), alternating series
        total, term, k, sign = 0, one // n, 1, 1
        while term:
            total += sign * (term // k)
            term //= n * n
            k += 2
            sign = -sign
        return total

    return (16 * atan_inv(5) - 4 * atan_inv(239)) >> 64


def _pio2() -> Fraction:
    """pi/2 to 1400 bits, as an exact fraction."""
    return Fraction(_pi_scaled(1400), 1 << 1401)


@functools.cache
def _two_over_pi_words(count: int, pad: int) -> tuple[int, ...]:
    """The binary expansion of 2/pi as `count` 32-bit words, preceded by `pad` zero bits: word i holds bits
    [32i, 32i+32) of floor(2/pi * 2^(32*count - pad))."""
    total = 32 * count
    value = (1 << (total - pad + 1 + 1400)) // _pi_scaled(1400)  # 2^(total-pad) * 2/pi
    return tuple((value >> (total - 32 * (i + 1))) & 0xFFFFFFFF for i in range(count))


def _truncate_bits(value: Fraction, nbits: int) -> Fraction:
    """`value` (> 0) truncated to `nbits` significant bits."""
    exp = math.floor(math.log2(value))
    while Fraction(2) ** exp > value:
        exp -= 1
    while Fraction(2) ** (exp + 1) <= value:
        exp += 1
    scale = Fraction(2) ** (nbits - 1 - exp)
    return Fraction(math.floor(value * scale)) / scale


def _round_float(value: Fraction | float, fmt: _Fmt) -> float:
    """`value` rounded to nearest in the format (float32 values are returned as exact Python floats)."""
    as_double = float(value)
    if fmt.bits == 64:
        return as_double
    import struct

    return struct.unpack("f", struct.pack("f", as_double))[0]


def _float_bits(value: float, fmt: _Fmt) -> int:
    """The bit pattern of `value` rounded to the format, as a signed integer."""
    import struct

    code = "f" if fmt.bits == 32 else "d"
    return struct.unpack(code.replace("f", "i").replace("d", "q"), struct.pack(code, value))[0]


def _split_const(value: Fraction, fmt: _Fmt) -> tuple[float, float]:
    """`value` as a float-float pair (hi, lo) of the format."""
    hi = _round_float(value, fmt)
    return hi, _round_float(value - Fraction(hi), fmt)


# ---------------------------------------------------------------------------------------------------------------
# float formats and small graph helpers


@dataclass(frozen=True)
class _Fmt:
    """An IEEE binary format the float builders compute in."""

    float: DType
    sint: DType
    uint: DType
    bits: int  # total bits
    mbits: int  # stored mantissa bits
    bias: int

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number."""
        return 1 - self.bias

    @property
    def precision(self) -> int:
        """Significant bits, the implicit one included."""
        return self.mbits + 1


_F32 = _Fmt(dtypes.float32, dtypes.int32, dtypes.uint32, 32, 23, 127)
_F64 = _Fmt(dtypes.float64, dtypes.int64, dtypes.uint64, 64, 52, 1023)


def _fmt(dtype: DType) -> _Fmt:
    scalar = dtype.scalar()
    if scalar == dtypes.float32:
        return _F32
    if scalar == dtypes.float64:
        return _F64
    raise TypeError(f"no float decomposition computes in {dtype}")


def _like(scalar: DType, x: UOp) -> DType:
    """`scalar` with the vector width of `x`."""
    return scalar.vec(x.dtype.count) if x.dtype.count > 1 else scalar


def _k(x: UOp, value: float | int | bool) -> UOp:
    """A constant of `x`'s dtype."""
    return UOp.const(x.dtype, value)


def _kd(dtype: DType, x: UOp, value: float | int | bool) -> UOp:
    """A constant of scalar `dtype` with `x`'s vector width."""
    return UOp.const(_like(dtype, x), value)


def _poly(x: UOp, coeffs: Sequence[float]) -> UOp:
    """Horner evaluation of sum(coeffs[i] * x^i)."""
    acc = _k(x, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = acc * x + c
    return acc


def _sel(cond: UOp, a: UOp | float | int, b: UOp | float | int, like: UOp) -> UOp:
    """where(cond, a, b) with Python numbers turned into constants of `like`'s dtype."""
    return cond.where(a if isinstance(a, UOp) else _k(like, a), b)


def _clamp(x: UOp, lo: float | int, hi: float | int) -> UOp:
    """min(max(x, lo), hi) with WHERE (NaN goes to `hi`)."""
    x = (x < hi).where(x, hi)
    return (x < lo).where(lo, x)


def _round_int(x: UOp, fmt: _Fmt) -> tuple[UOp, UOp]:
    """round(x) (to nearest even) for |x| < 2^(p-2), as (sint, float): adding 1.5 * 2^mbits leaves the integer in
    the low mantissa bits. No float-to-int CAST, so it vectorizes everywhere (and can't hit undefined casts)."""
    magic = 1.5 * 2.0**fmt.mbits
    t = x + magic
    return t.bitcast(_like(fmt.sint, x)) - _float_bits(magic, fmt), t - magic


def _pow2(n: UOp, fmt: _Fmt) -> UOp:
    """2^n as a float, for integer n (of `fmt.sint`) in [emin, bias]."""
    return ((n + fmt.bias) << fmt.mbits).bitcast(_like(fmt.float, n))


def _ldexp2(x: UOp, n: UOp, fmt: _Fmt) -> UOp:
    """x * 2^n in two exact steps then one rounding; n integer with |n| <= 2*bias (for x near 1)."""
    n1 = n >> 1
    return x * _pow2(n1, fmt) * _pow2(n - n1, fmt)


def _isnan(x: UOp) -> UOp:
    return x.ne(x)


def _abs(x: UOp, fmt: _Fmt) -> UOp:
    """|x| by clearing the sign bit (exact for every value, NaN included)."""
    return (x.bitcast(_like(fmt.uint, x)) & ((1 << (fmt.bits - 1)) - 1)).bitcast(x.dtype)


def _sign_bit(x: UOp, fmt: _Fmt) -> UOp:
    """The sign bit of x, in place, as an unsigned integer."""
    return x.bitcast(_like(fmt.uint, x)) & (1 << (fmt.bits - 1))


def _with_sign(mag: UOp, sign: UOp, fmt: _Fmt) -> UOp:
    """`mag` (sign bit clear) with the sign bit `sign` (from `_sign_bit`) xored in."""
    return (mag.bitcast(_like(fmt.uint, mag)) ^ sign).bitcast(mag.dtype)


def _fast_two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """s + e == a + b exactly, s = fl(a + b); needs |a| >= |b| (or a == 0)."""
    s = a + b
    return s, b - (s - a)


def _two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """s + e == a + b exactly, s = fl(a + b), for any order of magnitudes (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a: UOp, fmt: _Fmt) -> tuple[UOp, UOp]:
    """Veltkamp split: a == hi + lo with hi, lo of at most half the precision each (|a| < 2^(emax - p/2))."""
    t = a * float((1 << ((fmt.precision + 1) // 2)) + 1)
    hi = t - (t - a)
    return hi, a - hi


def _two_prod(a: UOp, b: UOp, fmt: _Fmt, b_split: tuple[float, float] | None = None) -> tuple[UOp, UOp]:
    """p + e == a * b exactly, p = fl(a * b) (Dekker, no fused multiply-add). `b_split` gives a constant b's halves."""
    p = a * b
    ah, al = _split(a, fmt)
    if b_split is not None:
        bh, bl = _k(a, b_split[0]), _k(a, b_split[1])
    else:
        bh, bl = _split(b, fmt)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _const_split(value: float, fmt: _Fmt) -> tuple[float, float]:
    """The Veltkamp halves of a constant, computed exactly in Python."""
    keep = (fmt.precision + 1) // 2
    frac = Fraction(value)
    if frac == 0:
        return 0.0, 0.0
    sign = -1 if frac < 0 else 1
    exp = math.frexp(abs(value))[1]  # 2^(exp-1) <= |v| < 2^exp
    scale = Fraction(2) ** (keep - exp)
    hi = Fraction(round(abs(frac) * scale)) / scale * sign
    return float(hi), float(frac - hi)


def _frexp1(ax: UOp, fmt: _Fmt) -> tuple[UOp, UOp]:
    """ax (positive or zero, finite) as m * 2^e with m in [1, 2) (m = 1, e = emin - p - 1 for 0): (m, e as sint)."""
    den = ax < 2.0**fmt.emin
    scale = fmt.precision + 8
    axs = den.where(ax * 2.0**scale, ax)
    bits = axs.bitcast(_like(fmt.sint, ax))
    e = (bits >> fmt.mbits) - (den.where(_kd(fmt.sint, ax, fmt.bias + scale), _kd(fmt.sint, ax, fmt.bias)))
    m = ((bits & ((1 << fmt.mbits) - 1)) | (fmt.bias << fmt.mbits)).bitcast(ax.dtype)
    return m, e


def _unary_float(builder: Callable[[UOp, _Fmt], UOp], x: UOp) -> UOp:
    """Run a float32/float64 builder on x, computing float16/bfloat16 in float32 and rounding back once."""
    scalar = x.dtype.scalar()
    if scalar in (dtypes.float16, dtypes.bfloat16):
        return builder(x.cast(_like(dtypes.float32, x)), _F32).cast(x.dtype)
    return builder(x, _fmt(x.dtype))


def _binary_float(builder: Callable[[UOp, UOp, _Fmt], UOp], x: UOp, y: UOp) -> UOp:
    scalar = x.dtype.scalar()
    if scalar in (dtypes.float16, dtypes.bfloat16):
        f32 = _like(dtypes.float32, x)
        return builder(x.cast(f32), y.cast(f32), _F32).cast(x.dtype)
    return builder(x, y, _fmt(x.dtype))


# ---------------------------------------------------------------------------------------------------------------
# exp2


def _exp2_core(x: UOp, fmt: _Fmt, x_lo: UOp | None = None, accurate: bool | None = None, fused: bool = False) -> UOp:
    """2^(x + x_lo) for any x (x_lo: an optional small correction, ignored where x is clamped).

    `accurate` (default: float64 only) takes the leading term r*ln2 of 2^r - 1 exactly, in two halves, so only small
    terms are rounded before the last addition (~10 more ops; float32 exp2 keeps the shorter form).

    `fused` (the short form only; for renderers with a native ``MULACC``): the polynomial and the final ``+ 1`` are
    fused multiply-adds (7 instead of 14 ops, one rounding each), and NaN needs no select at the end: the clamp lets
    it through and it propagates (NaN times any power of two is NaN)."""
    hi, lo = float(fmt.bias + 1), float(fmt.emin - fmt.precision - 2)  # 2^hi overflows, 2^lo rounds to 0
    if accurate is None:
        accurate = fmt is _F64
    fused = fused and not accurate and x_lo is None
    if fused:
        xc = (_k(x, hi) < x).where(hi, x)  # min/max that keep NaN
        xc = (xc < lo).where(lo, xc)
    else:
        xc = _clamp(x, lo, hi)  # NaN -> hi, fixed at the end
    n, nf = _round_int(xc, fmt)
    r = xc - nf  # exact, |r| <= 0.5
    coeffs = _EXP2_F32 if fmt is _F32 else _EXP2_F64
    if fused:
        acc = _k(r, coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = UOp(Ops.MULACC, r.dtype, (acc, r, _k(r, c)))
        return _ldexp2(UOp(Ops.MULACC, r.dtype, (r, acc, _k(r, 1.0))), n, fmt)  # 1 + r*P(r), scaled
    if not accurate:
        t = r * _poly(r, coeffs)  # 2^r - 1
        rest = None
    else:  # 2^r - 1 = r*c0 + r^2*Q(r): r_hi*c0_hi is exact, the rest is small
        half = (fmt.precision + 1) // 2
        uint = _like(fmt.uint, x)
        r_hi = (r.bitcast(uint) & (((1 << fmt.bits) - 1) ^ ((1 << (fmt.mbits + 1 - half)) - 1))).bitcast(x.dtype)
        c0_hi = float(_truncate_bits(Fraction(coeffs[0]), fmt.precision - half))
        c0_lo = coeffs[0] - c0_hi  # exact
        t = r_hi * c0_hi
        rest = ((r - r_hi) * c0_hi + r * c0_lo) + r * (r * _poly(r, coeffs[1:]))
    if x_lo is not None:  # 2^(r + lo) = 2^r * (1 + lo*ln2 + ...): lo is below 2^-(p-10) here
        lo_term = x.ne(xc).where(0.0, x_lo) * _round_float(math.log(2), fmt) * ((t if rest is None else t + rest) + 1.0)
        rest = lo_term if rest is None else rest + lo_term
    if rest is None:
        p = t + 1.0
    else:
        s, err = _fast_two_sum(_k(t, 1.0), t)
        p = s + (err + rest)
    return _isnan(x).where(x, _ldexp2(p, n, fmt))


def xexp2(x: UOp, fused: bool = False) -> UOp:
    """2^x from basic ops (float16/bfloat16/float32/float64, any vector width).

    Reduction 2^x = 2^n * 2^r with n = round(x), r = x - n exact, |r| <= 1/2; 2^r = 1 + r*P(r) with a minimax
    polynomial; the 2^n scaling is two exact power-of-two multiplies, so denormal results round once. Exact at
    the boundaries: overflow to +inf at x >= 128 (float32), 0 below -150, NaN for NaN, 2^-inf = 0.
    `fused`: evaluate the polynomial with ``MULACC`` (for renderers that have it natively; float16/32 only)."""
    return _unary_float(functools.partial(_exp2_core, fused=fused) if fused else _exp2_core, x)


def _rule_exp2(native: frozenset[str]) -> Callable[[UOp], UOp | None]:
    fused = "MULACC" in native

    def rule(x: UOp) -> UOp | None:
        return xexp2(x.src[0], fused) if _is_float(x) else None

    return rule


# ---------------------------------------------------------------------------------------------------------------
# log2


def _reduce_log(x: UOp, fmt: _Fmt) -> tuple[UOp, UOp]:
    """Positive finite x as 2^e * m with m in [sqrt(1/2), sqrt(2)): returns (f = m - 1 exact, e as float)."""
    den = x < 2.0**fmt.emin
    scale = fmt.precision + 8
    xs = den.where(x * 2.0**scale, x)
    sint = _like(fmt.sint, x)
    bits = xs.bitcast(sint)
    c_bits = _float_bits(math.sqrt(0.5), fmt)  # the float nearest sqrt(1/2)
    t = bits - c_bits
    e = t >> fmt.mbits  # arithmetic: floor
    m = ((t & ((1 << fmt.mbits) - 1)) + c_bits).bitcast(x.dtype)
    ef = e.cast(x.dtype) - _sel(den, float(scale), 0.0, x)
    return m - 1.0, ef


def _log2_core(x: UOp, fmt: _Fmt) -> UOp:
    """log2(x): x = 2^e * (1 + f), log2(1 + f) = f*log2(e) + f^2*G(f); the leading product is exact in two halves
    and added to e with an exact sum, so the result has one final rounding plus small polynomial terms."""
    safe = (0.0 < x) & (x < math.inf)
    xs = safe.where(x, 1.0)
    if fmt is _F64:  # a degree-20 polynomial would round too much near |log2 m| = 1/2: use the float-float log
        hi, lo = _log2_ff(xs, fmt)
        return _log2_specials(x, hi + lo)
    f, ef = _reduce_log(xs, fmt)
    half = (fmt.precision + 1) // 2
    ln2inv = _log2e()
    k_hi = float(_truncate_bits(ln2inv, fmt.precision - half))
    k_lo = _round_float(ln2inv - Fraction(k_hi), fmt)
    # f_hi: f with only `half` significant bits, so f_hi * k_hi is exact
    uint = _like(fmt.uint, x)
    f_hi = (f.bitcast(uint) & (((1 << fmt.bits) - 1) ^ ((1 << (fmt.mbits + 1 - half)) - 1))).bitcast(x.dtype)
    f_lo = f - f_hi
    hi = f_hi * k_hi
    lo = f_lo * k_hi + f * (f * _poly(f, _LOG2_F32) + k_lo)
    s, err = _fast_two_sum(ef, hi)
    return _log2_specials(x, s + (err + lo))


def _log2_specials(x: UOp, res: UOp) -> UOp:
    """log2's special values around the finite positive result `res`."""
    res = (x < math.inf).where(res, x)  # +inf -> +inf, NaN -> NaN
    res = x.ne(0.0).where(res, -math.inf)
    return (x < 0.0).where(math.nan, res)


@functools.cache
def _log2e() -> Fraction:
    """log2(e) = 1/ln(2) to ~150 bits (decimal arithmetic)."""
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        return Fraction(1 / decimal.Decimal(2).ln())


def xlog2(x: UOp) -> UOp:
    """log2(x) from basic ops (float16/bfloat16/float32/float64).

    Denormals are scaled up exactly first; x = 2^e * m with m in [sqrt(1/2), sqrt(2)), f = m - 1 exact. float32
    (and the 16-bit types) are division free: log2(1 + f) = f*log2(e) + f^2*G(f) (minimax G) where f*log2(e) is
    split so its leading part is exact. float64 rounds a float-float log2 (atanh series around the nearest
    2^(j/4), one RECIP, itself decomposed when not native). log2(0) = -inf, log2(x < 0) = NaN, log2(inf) = inf,
    log2(1) = +0."""
    return _unary_float(_log2_core, x)


# ---------------------------------------------------------------------------------------------------------------
# sqrt


def _sqrt_core(x: UOp, fmt: _Fmt) -> UOp:
    """sqrt(x): rsqrt bit-trick guess, Newton iterations, then one correction with an exact residual."""
    safe = (0.0 < x) & (x < math.inf)
    xs = safe.where(x, 1.0)
    # bring xs into [2^-(bias/2), 2^(bias/2)] with an even power of two so the Newton steps never over/underflow
    shift = 2 * ((fmt.bias + 1) // 4)  # 64 for float32, 512 for float64
    small, big = xs < 2.0 ** (-shift // 2), xs > 2.0 ** (shift // 2)
    xs = small.where(xs * 2.0**shift, big.where(xs * 2.0**-shift, xs))
    unscale = _sel(small, 2.0 ** (-shift // 2), _sel(big, 2.0 ** (shift // 2), 1.0, x), x)
    sint = _like(fmt.sint, x)
    y = (_kd(fmt.sint, x, _RSQRT_MAGIC[fmt.bits]) - (xs.bitcast(sint) >> 1)).bitcast(x.dtype)
    hx = xs * 0.5
    for _ in range(3 if fmt is _F32 else 4):
        y = y * (1.5 - hx * y * y)
    s = xs * y
    p, e = _two_prod(s, s, fmt)
    s = s + ((xs - p) - e) * (y * 0.5)
    res = s * unscale
    res = (x < math.inf).where(res, x)  # inf, NaN
    res = x.ne(0.0).where(res, x)  # +-0 keeps its sign
    return (x < 0.0).where(math.nan, res)


# initial guesses for 1/sqrt(x): bits(y0) = MAGIC - bits(x) / 2 (constants searched in tools/fit_polynomials.py)
_RSQRT_MAGIC = {32: 0x5F37642D, 64: 0x5FE6EC85A1E4E3FC}  # max relative error of the guess: 0.0342


def xsqrt(x: UOp) -> UOp:
    """sqrt(x) from basic ops, division free: reciprocal square root by a bit-trick guess and Newton steps, then a
    Newton correction of sqrt with an exact (Dekker) residual. sqrt(-0) = -0, sqrt(x < 0) = NaN, sqrt(inf) = inf."""
    return _unary_float(_sqrt_core, x)


# ---------------------------------------------------------------------------------------------------------------
# reciprocal and division


def _recip_mantissa(m: UOp, fmt: _Fmt) -> UOp:
    """1/m for m in [1, 2): linear guess (max error 1/17) and Newton steps, accurate to ~2^-(p+2)."""
    y = m * (-8.0 / 17.0) + (24.0 / 17.0)
    for _ in range(3 if fmt is _F32 else 4):
        y = y + y * (1.0 - m * y)
    return y


def _div_mantissas(ma: UOp, mb: UOp, fmt: _Fmt) -> UOp:
    """ma / mb for ma, mb in [1, 2), before the final rounding, from a Newton reciprocal and one exact-residual
    correction: the result in (1/2, 2) is within a fraction of an ULP."""
    y = _recip_mantissa(mb, fmt)
    q = ma * y
    p, e = _two_prod(mb, q, fmt)
    return q + ((ma - p) - e) * y


def _ldexp3(q: UOp, d: UOp, fmt: _Fmt) -> UOp:
    """q * 2^d for q in (1/2, 2), any |d| <= 3*lim: the partial products stay normal, the last one rounds once."""
    lim = fmt.bias - fmt.precision - 3  # q * 2^-lim stays normal
    d1 = _clamp(d, -lim, lim)
    d2 = _clamp(d - d1, -lim, lim)
    d3 = _clamp(d - d1 - d2, -lim, lim)
    return q * _pow2(d1, fmt) * _pow2(d2, fmt) * _pow2(d3, fmt)


def _fdiv_core(a: UOp, b: UOp, fmt: _Fmt) -> UOp:
    """a / b: mantissas divided with a correction step, exponents combined by exact power-of-two scaling."""
    sign = _sign_bit(a, fmt) ^ _sign_bit(b, fmt)
    aa, ab = _abs(a, fmt), _abs(b, fmt)
    fin_a, fin_b = aa < math.inf, ab < math.inf
    ma, ea = _frexp1(fin_a.where(aa, 1.0), fmt)
    mb, eb = _frexp1(fin_b.where(ab, 1.0), fmt)
    res = _ldexp3(_div_mantissas(ma, mb, fmt), ea - eb, fmt)
    res = aa.ne(0.0).where(res, 0.0)  # 0 / b
    res = ab.ne(0.0).where(res, math.inf)  # a / 0
    res = fin_b.where(res, 0.0)  # a / inf
    res = fin_a.where(res, math.inf)  # inf / b
    res = _with_sign(res, sign, fmt)
    nan = _isnan(a) | _isnan(b) | (aa.ne(0.0).logical_not() & ab.ne(0.0).logical_not())
    nan = nan | (fin_a.logical_not() & fin_b.logical_not())
    return nan.where(math.nan, res)


def _recip_core(x: UOp, fmt: _Fmt) -> UOp:
    """1 / x: the division with a dividend of exactly 1."""
    sign = _sign_bit(x, fmt)
    ax = _abs(x, fmt)
    fin = ax < math.inf
    m, e = _frexp1(fin.where(ax, 1.0), fmt)
    y = _recip_mantissa(m, fmt)
    p, pe = _two_prod(m, y, fmt)
    y = y + ((1.0 - p) - pe) * y
    res = _ldexp3(y, e * -1, fmt)
    res = ax.ne(0.0).where(res, math.inf)
    res = fin.where(res, 0.0)
    return _isnan(x).where(x, _with_sign(res, sign, fmt))


def xrecip(x: UOp) -> UOp:
    """1/x from basic ops (no division): Newton reciprocal of the mantissa with an exact-residual correction,
    exponent by power-of-two scaling. 1/+-0 = +-inf, 1/+-inf = +-0, denormal inputs overflow to inf exactly as in
    IEEE, results below the normal range are rounded once."""
    return _unary_float(_recip_core, x)


def xfdiv(a: UOp, b: UOp) -> UOp:
    """a / b from basic ops (no division), <= 1 ULP; IEEE special cases (0/0, inf/inf = NaN, x/0 = +-inf ...)."""
    return _binary_float(_fdiv_core, a, b)


# ---------------------------------------------------------------------------------------------------------------
# trunc


def _trunc_core(x: UOp, fmt: _Fmt) -> UOp:
    """trunc(x) by clearing the fraction bits of the mantissa (exact; inf and NaN pass through)."""
    uint = _like(fmt.uint, x)
    bits = x.bitcast(uint)
    e = ((bits >> fmt.mbits) & ((1 << (fmt.bits - fmt.mbits - 1)) - 1)).cast(_like(fmt.sint, x)) - fmt.bias
    frac_bits = _clamp(fmt.mbits - e, 0, fmt.mbits).cast(uint)  # number of fraction bits in the mantissa
    mask = ((1 << fmt.bits) - 1) ^ ((_kd(fmt.uint, x, 1) << frac_bits) - 1)
    kept = (bits & mask).bitcast(x.dtype)
    return (e < 0).where(_sign_bit(x, fmt).bitcast(x.dtype), kept)


def xtrunc(x: UOp) -> UOp:
    """trunc(x) (round toward zero) from integer ops on the bits: exact for every float, keeps the sign of zero."""
    scalar = x.dtype.scalar()
    if scalar in (dtypes.float16, dtypes.bfloat16):
        return _trunc_core(x.cast(_like(dtypes.float32, x)), _F32).cast(x.dtype)
    return _trunc_core(x, _fmt(x.dtype))


# ---------------------------------------------------------------------------------------------------------------
# sin


@dataclass(frozen=True)
class _SinParams:
    cw_limit: float  # |x| below this: Cody-Waite reduction
    cw_pieces: tuple[float, ...]  # pi/2 = sum of pieces; all but the last have few bits so k * piece is exact
    pad: int  # zero bits in front of the 2/pi table
    nwords: int  # 32-bit words of the table
    limbs: int  # 32-bit limbs of the 2/pi window multiplied by the mantissa
    pio2: tuple[float, float]  # pi/2 as float-float


@functools.cache
def _sin_params(bits: int, kbits: int | None = None) -> _SinParams:
    """Reduction parameters for float32 (`bits=32`) or float64; `kbits` widens the Cody-Waite range (float16 inputs
    use 17 bits, which covers all of them, with more and narrower pieces of pi/2)."""
    fmt = _F32 if bits == 32 else _F64
    if kbits is None:
        kbits = 13 if bits == 32 else 20  # k = round(|x| * 2/pi) < 2^kbits on the Cody-Waite path
    npieces = 3 if bits == 64 else 4 if kbits <= 13 else 5
    chunk = fmt.precision - kbits
    pieces, rest = [], _pio2()
    for _ in range(npieces):
        piece = _truncate_bits(rest, chunk)
        pieces.append(float(piece))
        rest -= piece
    pieces.append(_round_float(rest, fmt))
    limit = float(2**kbits)  # |x| < 2^kbits: k <= 2^kbits * 2/pi + 1 < 2^kbits
    pad = 32 if bits == 32 else 64
    # largest window start: exponent of the LSB of the largest finite value, minus 2, plus the pad
    emax_lsb = (2 ** (bits - fmt.mbits - 1) - 2) - fmt.bias - fmt.mbits
    limbs = 3 if bits == 32 else 6
    nwords = ((emax_lsb - 2 + pad) >> 5) + limbs + 2
    return _SinParams(limit, tuple(pieces), pad, nwords, limbs, _split_const(_pio2(), fmt))


def _select_word(words: Sequence[int], idx: UOp, offset: int, count: int) -> UOp:
    """words[idx + offset] for idx in [0, count) as a uint64 UOp, by a chain of WHEREs."""
    u64 = _like(dtypes.uint64, idx)
    acc = UOp.const(u64, words[offset])
    for i in range(1, count):
        acc = idx.ne(i).where(acc, UOp.const(u64, words[offset + i]))
    return acc


def _payne_hanek(ax: UOp, fmt: _Fmt, params: _SinParams) -> tuple[UOp, UOp, UOp]:
    """Reduce a finite ax >= cw_limit: ax * 2/pi = q + f (mod 4), q integer, |f| <= 1/2, with integer arithmetic on
    the mantissa and a window of the bits of 2/pi (so the result is exact to ~2^-(limbs*32 - p) for every ax).
    Returns (r_hi, r_lo, q) with r = f * pi/2 as a float-float."""
    u64 = _like(dtypes.uint64, ax)
    sint = _like(fmt.sint, ax)
    m32 = 0xFFFFFFFF
    bits = ax.bitcast(sint)
    e_lsb = (bits >> fmt.mbits) - (fmt.bias + fmt.mbits)  # ax = M * 2^e_lsb
    mant = ((bits & ((1 << fmt.mbits) - 1)) | (1 << fmt.mbits)).cast(u64)
    jmax = ((2 ** (fmt.bits - fmt.mbits - 1) - 2) - fmt.bias - fmt.mbits) - 2 + params.pad
    j = _clamp(e_lsb - 2 + params.pad, 0, jmax)  # first bit of 2/pi that matters (bit index in the padded table)
    widx = (j >> 5).cast(_like(dtypes.int32, ax))
    off = (j & 31).cast(u64)
    nsel = (jmax >> 5) + 1
    words = _two_over_pi_words(params.nwords, params.pad)
    sel = [_select_word(words, widx, k, nsel) for k in range(params.limbs + 1)]
    # window limbs, most significant first: 32 bits of the table starting at bit j + 32k
    win = [((((sel[k] << 32) | sel[k + 1]) << off) >> 32) & m32 for k in range(params.limbs)]
    u = win[::-1]  # least significant first
    v = [mant & m32] if fmt is _F32 else [mant & m32, mant >> 32]
    # low (32*limbs) bits of mant * window, by columns of 32-bit partial products split into halves
    res: list[UOp] = []
    carry: UOp | None = None
    for col in range(params.limbs):
        terms: list[UOp] = []
        for vi, vv in enumerate(v):
            if 0 <= col - vi < params.limbs:
                terms.append((u[col - vi] * vv) & m32)
            if 0 <= col - vi - 1 < params.limbs:
                terms.append((u[col - vi - 1] * vv) >> 32)
        total = functools.reduce(lambda a, b: a + b, terms if carry is None else [*terms, carry])
        res.append(total & m32)
        carry = total >> 32
    top = res[-1]  # bits 31..30: quadrant, 29..0: start of the fraction
    q = (((top + (1 << 29)) >> 30) & 3).cast(_like(dtypes.int32, ax))
    s0 = ((top << 2) & m32).bitcast(_like(dtypes.int64, ax))
    s0 = (s0 < (1 << 31)).where(s0, s0 - (1 << 32))  # the fraction's top 32 bits, signed: f in [-1/2, 1/2)
    # the fraction as exact float chunks (each fits the mantissa), summed into a float-float
    chunks: list[tuple[UOp, int]] = []  # (integer chunk, weight exponent)
    lower = res[-2::-1]  # the limbs below the top one: weights 2^-62, 2^-94, ... (the top holds 2 + 30 bits)
    if fmt is _F32:
        chunks.append((s0 >> 16, -16))
        chunks.append((s0 & 0xFFFF, -32))
        for i, limb in enumerate(lower[:2]):
            chunks.append(((limb >> 16).bitcast(_like(dtypes.int64, ax)), -46 - 32 * i))
            chunks.append(((limb & 0xFFFF).bitcast(_like(dtypes.int64, ax)), -62 - 32 * i))
    else:
        chunks.append((s0, -32))
        for i, limb in enumerate(lower[:3]):
            chunks.append((limb.bitcast(_like(dtypes.int64, ax)), -62 - 32 * i))
    vals = [c.cast(ax.dtype) * 2.0**w for c, w in chunks]
    hi, lo = vals[0], None
    for val in vals[1:]:
        hi, err = _two_sum(hi, val)
        lo = err if lo is None else lo + err
    assert lo is not None
    hi, lo = _fast_two_sum(hi, lo)
    # r = (hi + lo) * pi/2 as a float-float
    p_hi, p_lo = params.pio2
    rh, rl = _two_prod(hi, _k(hi, p_hi), fmt, _const_split(p_hi, fmt))
    rl = rl + (hi * p_lo + lo * p_hi)
    r_hi, r_lo = _fast_two_sum(rh, rl)
    return r_hi, r_lo, q


def _cody_waite(ax: UOp, fmt: _Fmt, params: _SinParams) -> tuple[UOp, UOp, UOp]:
    """Reduce 0 <= ax < cw_limit: k = round(ax * 2/pi), r = ax - k*pi/2 with pi/2 in pieces (k*piece exact)."""
    two_over_pi = _round_float(1 / _pio2(), fmt)
    k, kf = _round_int(ax * two_over_pi, fmt)
    pieces = params.cw_pieces
    hi = ax - kf * pieces[0]  # exact (Sterbenz)
    lo: UOp | None = None
    for piece in pieces[1:-1]:
        hi, err = _two_sum(hi, kf * (-piece))
        lo = err if lo is None else lo + err
    assert lo is not None
    lo = lo - kf * pieces[-1]
    r_hi, r_lo = _fast_two_sum(hi, lo)
    return r_hi, r_lo, (k & 3).cast(_like(dtypes.int32, ax))


def _sin_core(x: UOp, fmt: _Fmt, params: _SinParams | None = None) -> UOp:
    """sin(x): reduce |x| modulo pi/2 (Cody-Waite below cw_limit, Payne-Hanek above), evaluate sin or cos of the
    float-float remainder by minimax polynomials, fix the quadrant's sign and x's sign. With `params` given, every
    finite input is known to be below its cw_limit: no Payne-Hanek path."""
    ax = _abs(x, fmt)
    if params is not None:
        r_hi, r_lo, q = _cody_waite((ax < params.cw_limit).where(ax, 0.0), fmt, params)
    else:
        params = _sin_params(fmt.bits)
        use_cw = ax < params.cw_limit  # False for NaN and inf
        cw_hi, cw_lo, cw_q = _cody_waite(use_cw.where(ax, 0.0), fmt, params)
        ph_in = (use_cw | (ax.ne(ax)) | (ax.ne(math.inf).logical_not())).where(params.cw_limit, ax)
        ph_hi, ph_lo, ph_q = _payne_hanek(ph_in, fmt, params)
        r_hi, r_lo, q = use_cw.where(cw_hi, ph_hi), use_cw.where(cw_lo, ph_lo), use_cw.where(cw_q, ph_q)
    z = r_hi * r_hi
    sin_r = r_hi + (r_hi * z * _poly(z, _SIN_F32 if fmt is _F32 else _SIN_F64) + r_lo * (1.0 - z * 0.5))
    # cos: 1 - z/2 carries most of the value: take z = r_hi^2 exactly and keep the rounding error of 1 - z/2
    z_hi, z_lo = _two_prod(r_hi, r_hi, fmt)
    w = 1.0 - z_hi * 0.5
    w_err = (1.0 - w) - z_hi * 0.5
    tail = (z * z * _poly(z, _COS_F32 if fmt is _F32 else _COS_F64) - z_lo * 0.5) - r_hi * r_lo
    cos_r = w + (w_err + tail)
    res = (q & 1).ne(0).where(cos_r, sin_r)
    flip = ((q >> 1) & 1).cast(_like(fmt.uint, x)) << (fmt.bits - 1)
    res = _with_sign(res, _sign_bit(x, fmt) ^ flip, fmt)
    return (ax < math.inf).where(res, math.nan)


def xsin(x: UOp) -> UOp:
    """sin(x) from basic ops, accurate over the whole float range (float16/bfloat16/float32/float64).

    |x| is reduced modulo pi/2 to a float-float remainder: Cody-Waite (pi/2 in pieces) for moderate |x|, an
    integer Payne-Hanek reduction (mantissa times a window of the bits of 2/pi) for huge |x|; then a minimax
    sin or cos polynomial by quadrant. sin(+-0) = +-0, sin(+-inf) = sin(NaN) = NaN."""
    if x.dtype.scalar() == dtypes.float16:  # |x| <= 65504: the Cody-Waite reduction alone covers every input
        return _sin_core(x.cast(_like(dtypes.float32, x)), _F32, _sin_params(32, kbits=17)).cast(x.dtype)
    return _unary_float(_sin_core, x)


# ---------------------------------------------------------------------------------------------------------------
# pow


@functools.cache
def _log2_centers(bits: int) -> tuple[tuple[float, float, float], ...]:
    """(c, log2(c) hi, log2(c) lo) for c = 2^(j/4), j = -2..2, rounded to the format."""
    fmt = _F32 if bits == 32 else _F64
    out = []
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        ln2 = decimal.Decimal(2).ln()
        for j in range(-2, 3):
            c = _round_float(2.0 ** (j / 4), fmt)
            lg = Fraction(decimal.Decimal(c).ln() / ln2)
            hi, lo = _split_const(lg, fmt)
            out.append((c, hi, lo))
    return tuple(out)


def _log2_ff(x: UOp, fmt: _Fmt) -> tuple[UOp, UOp]:
    """log2(x) for positive finite x as a float-float (hi, lo), ~p+10 bits relative: x = 2^e * m,
    m = c * (1+s)/(1-s) for the nearest c = 2^(j/4), log2(m) = log2(c) + 2*log2(e)*(s + s^3/3 + ...)."""
    f, ef = _reduce_log(x, fmt)
    m = f + 1.0  # exact
    centers = _log2_centers(fmt.bits)
    c, lc_hi, lc_lo = _k(m, centers[0][0]), _k(m, centers[0][1]), _k(m, centers[0][2])
    for j in range(1, len(centers)):
        edge = 2.0 ** ((j - 2.5) / 4)
        above = (m < edge).logical_not()
        c = above.where(centers[j][0], c)
        lc_hi = above.where(centers[j][1], lc_hi)
        lc_lo = above.where(centers[j][2], lc_lo)
    num = m - c  # exact (Sterbenz)
    u_hi, u_lo = _two_sum(m, c)
    inv = u_hi.alu(Ops.RECIP)
    s = num * inv
    p, pe = _two_prod(s, u_hi, fmt)
    s_lo = (((num - p) - pe) - s * u_lo) * inv
    k2 = 2 * _log2e()
    k2_hi, k2_lo = _split_const(k2, fmt)
    a_hi, a_lo = _two_prod(s, _k(s, k2_hi), fmt, _const_split(k2_hi, fmt))
    a_lo = a_lo + (s_lo * k2_hi + s * k2_lo)
    # (2/3)log2(e) * s^3 is still ~s^2/3 of the total: take it as a float-float too (s^3 from exact products)
    z_hi, z_lo = _two_prod(s, s, fmt)
    c_hi, c_lo = _two_prod(z_hi, s, fmt)
    c_lo = c_lo + z_lo * s
    k3_hi, k3_lo = _split_const(k2 / 3, fmt)
    d_hi, d_lo = _two_prod(c_hi, _k(s, k3_hi), fmt, _const_split(k3_hi, fmt))
    d_lo = d_lo + (c_hi * k3_lo + c_lo * k3_hi) + (s_lo * z_hi) * k2_hi  # the last: d(s^3)/ds * s_lo
    # the rest of the atanh series, s^5 * (2 log2(e)) * (1/5 + z/7 + ...), is below 2^-19 of the total
    z = z_hi
    nterms = 3 if fmt is _F32 else 6  # truncation below 2^-(p+14) relative for s^2 <= 0.0019
    series = [float(k2 / (2 * i + 5)) for i in range(nterms)]
    b = s * z * z * _poly(z, series)
    h, l1 = _two_sum(ef, lc_hi)
    h, l2 = _two_sum(h, a_hi)
    h, l3 = _two_sum(h, d_hi)
    return _fast_two_sum(h, (((l1 + l2) + l3) + ((a_lo + lc_lo) + d_lo)) + b)


def _pow_core(x: UOp, y: UOp, fmt: _Fmt) -> UOp:
    """x^y = 2^(y * log2|x|) with float-float log2 and product, then the C99/PyTorch special cases."""
    ax = _abs(x, fmt)
    ay = _abs(y, fmt)
    x_fin, y_fin = ax < math.inf, ay < math.inf
    core_ok = x_fin & ax.ne(0.0) & y_fin
    axs = core_ok.where(ax, 1.0)
    big = 2.0 ** (fmt.precision + 16)  # |y| beyond this with x != 1 over/underflows anyway: keep the product finite
    ys = _clamp(core_ok.where(y, 0.0), -big, big)
    l_hi, l_lo = _log2_ff(axs, fmt)
    z_hi, z_lo = _two_prod(ys, l_hi, fmt)
    z_lo = z_lo + ys * l_lo
    mag = _exp2_core(z_hi, fmt, z_lo, accurate=True)
    # integer-ness and parity of y
    y_int = _trunc_core(y, fmt).ne(y).logical_not()  # True for +-inf too (C99: they are even integers)
    odd_lim = 2.0**fmt.precision
    y_small = ay < odd_lim
    yi = y_small.where(y, 0.0).cast(_like(fmt.sint, x))
    y_odd = y_small & y_int & (yi & 1).ne(0)
    neg_y = y < 0.0
    mag = ax.ne(0.0).where(mag, _sel(neg_y, math.inf, 0.0, x))
    mag = x_fin.where(mag, _sel(neg_y, 0.0, math.inf, x))
    lt1 = ax < 1.0
    mag = y.ne(math.inf).where(mag, _sel(lt1, 0.0, math.inf, x))
    mag = y.ne(-math.inf).where(mag, _sel(lt1, math.inf, 0.0, x))
    neg_x = _sign_bit(x, fmt).ne(0)
    res = (neg_x & y_odd).where(mag * -1.0, mag)
    bad = (x < 0.0) & x_fin & y_fin & y_int.logical_not()
    res = (bad | _isnan(x) | _isnan(y)).where(math.nan, res)
    one = x.ne(1.0).logical_not() | y.ne(0.0).logical_not() | (x.ne(-1.0).logical_not() & ay.ne(math.inf).logical_not())
    return one.where(1.0, res)


def xpow(x: UOp, y: UOp) -> UOp:
    """x ** y from basic ops (and RECIP, decomposed too when not native), with C99 / PyTorch semantics:
    pow(x, 0) = 1 and pow(1, y) = 1 even for NaN, negative x needs an integer y (odd y keeps the sign), pow(+-0, y)
    and pow(+-inf, y) by the sign and parity of y, pow(-1, +-inf) = 1, |x| < 1 or > 1 with y = +-inf.
    The magnitude is 2^(y * log2|x|) with log2|x| and the product carried as float-floats."""
    return _binary_float(_pow_core, x, y)


# ---------------------------------------------------------------------------------------------------------------
# integer division and remainder (C semantics: truncation toward zero, remainder has the dividend's sign)


def _bits_of(dtype: DType) -> int:
    return 8 * dtype.scalar().itemsize


def _unsigned_of(dtype: DType) -> DType:
    return {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dtype.scalar().itemsize]


def _magic(d: int, xmax: int) -> tuple[int, int]:
    """(m, s) with floor(x * m / 2^s) == floor(x / d) for every 0 <= x <= xmax (d >= 1): the smallest s for which
    m = ceil(2^s / d) has error e = m*d - 2^s with e * xmax < 2^s (then x*e/(d 2^s) < 1/d keeps the floor)."""
    s = 0
    while True:
        m = -(-(1 << s) // d)
        if (m * d - (1 << s)) * xmax < (1 << s):
            return m, s
        s += 1


def _mulhi64(a: UOp, m: int) -> UOp:
    """floor(a * m / 2^64) for uint64 a and a constant 0 <= m < 2^64, from 32-bit halves."""
    m32 = 0xFFFFFFFF
    a0, a1 = a & m32, a >> 32
    b0, b1 = m & m32, m >> 32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> 32) + (p01 & m32) + (p10 & m32)
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32)


def _udiv_const(x: UOp, d: int, xmax: int) -> UOp:
    """floor(x / d) for an unsigned (or non-negative index) x <= xmax and a constant d >= 1, in x's dtype."""
    if d == 1:
        return x
    if d & (d - 1) == 0:
        return x >> (d.bit_length() - 1)
    if d > xmax:
        return _k(x, 0)
    m, s = _magic(d, xmax)
    bits = _bits_of(x.dtype)
    for wide in (dtypes.uint32, dtypes.uint64):
        if bits <= _bits_of(wide) and xmax * m < 1 << _bits_of(wide):
            return ((x.cast(_like(wide, x)) * m) >> s).cast(x.dtype)
    u64 = _like(dtypes.uint64, x)
    xw = x.cast(u64)
    if bits <= 32:  # here 2^32 <= m < 2^33 (so s >= 32): x*m = x*(m - 2^32) + x*2^32, all below 2^64
        return ((((xw * (m - (1 << 32))) >> 32) + xw) >> (s - 32)).cast(x.dtype)
    # 64-bit dividend (s >= 64 here): the high half of a 128-bit product; m may need 65 bits
    if m < 1 << 64:
        return _mulhi64(xw, m) >> (s - 64)
    t = _mulhi64(xw, m - (1 << 64))
    return (t + ((xw - t) >> 1)) >> (s - 65)  # (t + x) >> 1 without overflowing: x >= t


def _sdiv_parts(x: UOp) -> tuple[UOp, UOp, int]:
    """(|x| as the unsigned dtype, x < 0, max |x|) for a signed integer x (|INT_MIN| wraps into range)."""
    neg = x < 0
    ux = neg.where(x * -1, x).cast(_like(_unsigned_of(x.dtype), x))
    return ux, neg, 1 << (_bits_of(x.dtype) - 1)


def _idiv_const(x: UOp, d: int) -> UOp | None:
    """x / d (C truncation) for a constant d, or None when it can't be done (index dtype of unknown sign)."""
    dt = x.dtype.scalar()
    if d == 0:
        return _k(x, 0)  # exec_alu's convention for division by zero
    if dt == dtypes.index:
        return _idiv_index(x, d)
    bits = _bits_of(dt)
    if dtypes.is_unsigned(dt):
        return _udiv_const(x, d, (1 << bits) - 1)
    ad = abs(d)
    if ad == 1:
        return x if d > 0 else x * -1
    if ad & (ad - 1) == 0:
        k = ad.bit_length() - 1
        bias = (x >> (bits - 1)) & (ad - 1)  # ad - 1 for negative x: rounds the shift toward zero
        q = (x + bias) >> k
        return q if d > 0 else q * -1
    ux, neg, xmax = _sdiv_parts(x)
    q = _udiv_const(ux, ad, xmax).cast(x.dtype)  # < 2^(bits-1): the cast back is exact
    return neg.where(q * -1, q) if d > 0 else neg.where(q, q * -1)


def _idiv_index(x: UOp, d: int) -> UOp | None:
    """x / d for `dtypes.index` x (lowered to int32 or int64 later, so nothing may depend on the width): the value
    range bounds |x|, and the magic product must stay below 2^31. None when it may not."""
    lo, hi = int(x.vmin), int(x.vmax)
    ad = abs(d)
    if ad == 1:
        return x if d > 0 else x * -1
    neg = x < 0
    if ad & (ad - 1) == 0:
        q = x >> (ad.bit_length() - 1) if lo >= 0 else (x + _sel(neg, ad - 1, 0, x)) >> (ad.bit_length() - 1)
    else:
        amax = max(abs(lo), abs(hi), 1)
        m, s = _magic(ad, amax)
        if amax * m >= 1 << 31:
            return None
        if lo >= 0:
            q = (x * m) >> s
        else:
            qa = (neg.where(x * -1, x) * m) >> s
            q = neg.where(qa * -1, qa)
    return q if d > 0 else q * -1


def _udiv_var(x: UOp, y: UOp) -> UOp:
    """floor(x / y) for unsigned x, y (y != 0) by restoring long division, one quotient bit per step."""
    bits = _bits_of(x.dtype)
    wide = _like(dtypes.uint64 if bits == 64 else dtypes.uint32, x)
    xw, yw = x.cast(wide), y.cast(wide)
    rem, quo = _k(xw, 0), _k(xw, 0)
    for i in range(bits - 1, -1, -1):
        rem = (rem << 1) | ((xw >> i) & 1)
        ge = (rem < yw).logical_not()
        rem = ge.where(rem - yw, rem)
        quo = quo | (ge.cast(wide) << i)
    return quo.cast(x.dtype)


def _idiv_var(x: UOp, y: UOp) -> UOp:
    """x / y (C truncation) for a non-constant divisor; x / 0 = 0 (exec_alu's convention)."""
    dt = x.dtype.scalar()
    zero = y.ne(0).logical_not()
    if dtypes.is_unsigned(dt):
        return zero.where(0, _udiv_var(x, zero.where(1, y)))
    ux, xneg, _ = _sdiv_parts(x)
    uy, yneg, _ = _sdiv_parts(zero.where(1, y))
    q = _udiv_var(ux, uy).cast(x.dtype)
    return zero.where(0, (xneg ^ yneg).where(q * -1, q))


def _const_int(y: UOp | int) -> UOp | int:
    """A constant divisor as a Python int (a VCONST with equal lanes too); other UOps unchanged."""
    if isinstance(y, UOp):
        if y.op is Ops.CONST:
            return int(y.arg)
        if y.op is Ops.VCONST and len(set(y.arg)) == 1:
            return int(y.arg[0])
    return y


def xidiv(x: UOp, y: UOp | int) -> UOp | None:
    """Integer x / y truncating toward zero (C), from shifts, masks and multiplies; y = 0 gives 0.

    A constant power of two becomes shifts with a rounding bias for negative x; another constant becomes a
    multiply-high by a magic number (in the next wider integer type, or 32-bit halves for 64-bit x); a variable
    divisor becomes restoring long division. Returns None for `dtypes.index` cases it leaves alone (a dividend
    that may be negative, or a magic product that may not fit in 31 bits)."""
    y = _const_int(y)
    if isinstance(y, int):
        return _idiv_const(x, y)
    if x.dtype.scalar() == dtypes.index:
        return None
    return _idiv_var(x, y)


def xmod(x: UOp, y: UOp | int) -> UOp | None:
    """Integer x % y with C semantics (sign of the dividend), as x - (x / y) * y; a power of two is a mask for
    unsigned or non-negative x. x % 0 = 0. None where `xidiv` is None."""
    y = _const_int(y)
    if isinstance(y, int):
        if y == 0:
            return _k(x, 0)
        non_negative = dtypes.is_unsigned(x.dtype) or (x.dtype.scalar() == dtypes.index and x.vmin >= 0)
        if non_negative and abs(y) & (abs(y) - 1) == 0:
            return x & (abs(y) - 1)
        q = xidiv(x, y)
        return None if q is None else x - q * y
    q = xidiv(x, y)
    if q is None:
        return None
    zero = y.ne(0).logical_not()
    return zero.where(0, x - q * y)


# ---------------------------------------------------------------------------------------------------------------
# threefry


def xthreefry(x: UOp, key: UOp) -> UOp:
    """Threefry-2x32 with 20 rounds (Random123) of a uint64 counter and key, from uint32 adds, shifts and xors:
    the low and high words of `x` are the two counter words, those of `key` the key words (as `exec_alu`)."""
    u32 = _like(dtypes.uint32, x)
    x0, x1 = (x & 0xFFFFFFFF).cast(u32), (x >> 32).cast(u32)
    k0, k1 = (key & 0xFFFFFFFF).cast(u32), (key >> 32).cast(u32)
    ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
            x0 = x0 + x1
            x1 = ((x1 << r) | (x1 >> (32 - r))) ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + (i + 1)
    return (x1.cast(x.dtype) << 32) | x0.cast(x.dtype)


def _threefry_rule(x: UOp) -> UOp | None:
    """The THREEFRY rule: `xthreefry` of the counter and key (uint64, or vectors of them)."""
    return xthreefry(*x.src) if x.dtype.scalar() == dtypes.uint64 else None


# ---------------------------------------------------------------------------------------------------------------
# the rules


def _is_float(u: UOp) -> bool:
    return dtypes.is_float(u.dtype)


def _float_rule(fn: Callable[..., UOp]) -> Callable[..., UOp | None]:
    def rule(x: UOp) -> UOp | None:
        return fn(*x.src) if _is_float(x) else None

    return rule


def _neg(x: UOp) -> UOp:
    if x.dtype.scalar() == dtypes.bool:
        return x ^ True
    return x * -1


def _max(a: UOp, b: UOp) -> UOp:
    res = (a < b).where(b, a)
    return _isnan(b).where(b, res) if _is_float(a) else res


def _rule_idiv(x: UOp) -> UOp | None:
    a, b = x.src
    if _is_float(x):
        return None
    return xidiv(a, b)


def _rule_mod(native: frozenset[str]) -> Callable[[UOp], UOp | None]:
    def rule(x: UOp) -> UOp | None:
        a, b = x.src
        if _is_float(x):
            return None
        if "IDIV" not in native:
            return xmod(a, b)
        c = _const_int(b)
        if isinstance(c, int):
            non_negative = dtypes.is_unsigned(x.dtype) or (x.dtype.scalar() == dtypes.index and a.vmin >= 0)
            if c == 0 or (non_negative and abs(c) & (abs(c) - 1) == 0):
                return xmod(a, c)  # x % 0 = 0 (exec_alu's convention), or a mask
            return a - a.alu(Ops.IDIV, b) * b  # with the native division
        return b.ne(0).where(a - a.alu(Ops.IDIV, b) * b, 0)

    return rule


def _rule_recip(native: frozenset[str]) -> Callable[[UOp], UOp | None]:
    def rule(x: UOp) -> UOp | None:
        if not _is_float(x):
            return None
        if "FDIV" in native:  # a native division is correctly rounded: prefer it
            return _k(x, 1.0).alu(Ops.FDIV, x.src[0])
        return xrecip(x.src[0])

    return rule


def _rule_fdiv(x: UOp) -> UOp | None:
    a, b = x.src
    if not _is_float(x):
        return None
    if b.op is Ops.CONST and b.arg != 0 and math.isfinite(b.arg):
        mant, _ = math.frexp(b.arg)
        inv = 1.0 / b.arg
        if abs(mant) == 0.5 and math.isfinite(inv) and UOp.const(x.dtype, inv).arg == inv and inv != 0:
            return a * inv  # exact: a power of two with a representable inverse
    return xfdiv(a, b)


def _rule_map(native: frozenset[str]) -> dict[str, tuple[UPat, Callable[..., UOp | None]]]:
    x = UPat.var("x")
    pats: dict[str, tuple[UPat, Callable[..., UOp | None]]] = {
        "EXP2": (UPat(Ops.EXP2, name="x"), _rule_exp2(native)),
        "LOG2": (UPat(Ops.LOG2, name="x"), _float_rule(xlog2)),
        "SIN": (UPat(Ops.SIN, name="x"), _float_rule(xsin)),
        "SQRT": (UPat(Ops.SQRT, name="x"), _float_rule(xsqrt)),
        "RECIP": (UPat(Ops.RECIP, name="x"), _rule_recip(native)),
        "FDIV": (UPat(Ops.FDIV, name="x"), _rule_fdiv),
        "POW": (UPat(Ops.POW, name="x"), _float_rule(xpow)),
        "TRUNC": (UPat(Ops.TRUNC, name="x"), lambda x: xtrunc(x.src[0]) if _is_float(x) else x.src[0]),
        "IDIV": (UPat(Ops.IDIV, name="x"), _rule_idiv),
        "MOD": (UPat(Ops.MOD, name="x"), _rule_mod(native)),
        "NEG": (UPat(Ops.NEG, src=(x,)), _neg),
        "SUB": (UPat(Ops.SUB, src=(UPat.var("a"), UPat.var("b"))), lambda a, b: a + _neg(b)),
        "MAX": (UPat(Ops.MAX, src=(UPat.var("a"), UPat.var("b"))), _max),
        "CMPEQ": (UPat(Ops.CMPEQ, src=(UPat.var("a"), UPat.var("b"))), lambda a, b: a.ne(b).ne(True)),
        "MULACC": (UPat(Ops.MULACC, src=(UPat.var("a"), UPat.var("b"), UPat.var("c"))), lambda a, b, c: a * b + c),
        "THREEFRY": (UPat(Ops.THREEFRY, name="x"), _threefry_rule),
    }
    return pats


# names renderers may use for an op, mapped to the `Ops` member name
_ALIASES = {"RECIPROCAL": "RECIP"}


_OP_NAMES = frozenset(op.name for op in Ops)


def _canonical(native_ops: Iterable[str]) -> frozenset[str]:
    names = set()
    for name in native_ops:
        name = _ALIASES.get(name, name)
        if name not in _OP_NAMES:
            raise ValueError(f"native op {name!r} is not an Ops member name (see tinycore.uop.ops.Ops)")
        names.add(name)
    return frozenset(names)


def decomposition_rules(native_ops: Iterable[str]) -> PatternMatcher:
    """A `PatternMatcher` rewriting every op of `DECOMPOSABLE_OPS` that is not in `native_ops` (names of `Ops`
    members, as in `Renderer.native_ops`) into basic ops. Cached per distinct native set.

    >>> pm = decomposition_rules({"ADD", "MUL", "EXP2"})
    >>> pm is decomposition_rules(frozenset({"MUL", "EXP2", "ADD"}))
    True
    >>> len(pm) == len(DECOMPOSABLE_OPS) - 1 + 1  # a rule per non-native op, plus one splitting vector ops into lanes
    True
    """
    return _decomposition_rules(_canonical(native_ops))


def _split_lanes(x: UOp) -> UOp | None:
    """A vector op as a VECTORIZE of its lanes, so the scalar decomposition rules apply to each lane."""
    if x.dtype.count <= 1:
        return None
    lanes = [
        UOp(x.op, x.dtype.scalar(), tuple(s.gep(i) if s.dtype.count > 1 else s for s in x.src), x.arg)
        for i in range(x.dtype.count)
    ]
    return UOp.vectorize(*lanes)


def _shift_index_division(x: UOp) -> UOp | None:
    """A native index division or remainder by a power of two of a never-negative value, as a shift or a mask: the
    renderer's signed division must round negative values toward zero, which it cannot rule out from the types."""
    a, b = x.src
    if x.dtype.scalar() != dtypes.index or b.op is not Ops.CONST or not isinstance(b.arg, int):
        return None
    if b.arg < 2 or b.arg & (b.arg - 1) or a.vmin < 0:
        return None
    return a >> (b.arg.bit_length() - 1) if x.op is Ops.IDIV else a & (b.arg - 1)


@functools.cache
def _decomposition_rules(native: frozenset[str]) -> PatternMatcher:
    rules = [rule for name, rule in sorted(_rule_map(native).items()) if name not in native]
    native_division = tuple(op for op in (Ops.IDIV, Ops.MOD) if op.name in native)
    if native_division:
        rules.append((UPat(native_division, name="x"), _shift_index_division))
    if missing := sorted(DECOMPOSABLE_OPS - native):
        # last: a vector op that no rule above decomposes as a vector (e.g. an upcast THREEFRY) is split into lanes
        op_names = {op.name for op in Ops}
        rules.append((UPat(tuple(Ops[name] for name in missing if name in op_names), name="x"), _split_lanes))
    tag = ",".join(sorted(DECOMPOSABLE_OPS - native)) or "none"
    return PatternMatcher(rules, name=f"decompositions[{tag}]")


def decompose(uop: UOp, native_ops: Iterable[str]) -> UOp:
    """`uop` with every non-native decomposable op rewritten (a `graph_rewrite` with `decomposition_rules`).

    >>> from tinycore.dtype import dtypes
    >>> x = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("x", -100, 100))
    >>> Ops.IDIV in {u.op for u in decompose(x // 8, {"ADD", "MUL"}).toposort()}
    False
    """
    return graph_rewrite(uop, decomposition_rules(native_ops), name="decompositions")


# ---------------------------------------------------------------------------------------------------------------
# the fp8 types: no renderer knows them. `lower_fp8` rewrites a kernel so that fp8 buffers are uint8 buffers and
# every fp8 value is a uint8 of its bits: a CAST to fp8 is float32 -> uint8 bit manipulation (`xfp8_encode`), a
# CAST from fp8 uint8 -> float32 (`xfp8_decode`), and any other op on fp8 values computes in float32 and encodes the
# result. Both match PyTorch's conversions bit for bit (`tinycore.dtype.fp8_encode`, the host reference).


def _fp8_params(dtype: DType) -> tuple[int, int, int]:
    """(mantissa bits, exponent bias, code an overflow gives) of an fp8 dtype."""
    from tinycore.dtype import _fp8_format

    man, bias, _, overflow = _fp8_format(dtype)
    return man, bias, overflow


def xfp8_encode(x: UOp, dtype: DType) -> UOp:
    """The uint8 fp8 code (`dtype`: fp8e4m3 or fp8e5m2) of the float32 `x`, as PyTorch converts: round to nearest
    even (subnormals by adding a power of two whose float32 step is the fp8 subnormal step, the float add rounding),
    NaN -> 0x7F with x's sign, overflow -> 0x7E (+-448, E4M3FN saturates, infinities too) or 0x7C (E5M2: inf)."""
    man, bias, overflow = _fp8_params(dtype)
    u32 = _like(dtypes.uint32, x)
    bits = x.bitcast(u32)
    sign = (bits >> 24) & 0x80
    mag = bits & 0x7FFFFFFF
    shift = 23 - man
    rounded = mag + ((1 << (shift - 1)) - 1 - ((127 - bias) << 23)) + ((mag >> shift) & 1)
    normal = rounded >> shift
    normal = (normal < overflow).where(normal, _kd(dtypes.uint32, x, overflow))
    magic = (127 + 24 - man - bias) << 23  # float32 2^(24 - man - bias): its ulp is the fp8 subnormal step
    magic_f = _kd(dtypes.uint32, x, magic).bitcast(x.dtype)
    sub = (mag.bitcast(x.dtype) + magic_f).bitcast(u32) + ((1 << 32) - magic)
    code = (mag < ((128 - bias) << 23)).where(sub, normal)
    code = (_kd(dtypes.uint32, x, 0x7F800000) < mag).where(_kd(dtypes.uint32, x, 0x7F), code)
    return (code | sign).cast(_like(dtypes.uint8, x))


def xfp8_decode(code: UOp, dtype: DType) -> UOp:
    """The float32 value of the uint8 fp8 code `code` (PyTorch's bit patterns, NaN payloads included)."""
    man, bias, _ = _fp8_params(dtype)
    u32 = _like(dtypes.uint32, code)
    c = code.cast(u32)
    sign = (c & 0x80) << 24
    mag = c & 0x7F
    exp, frac = mag >> man, mag & ((1 << man) - 1)
    normal = ((mag << (23 - man)) + ((127 - bias) << 23)) | sign
    sub_f = frac.cast(_like(dtypes.float32, code)) * (2.0 ** (1 - bias - man))
    sub = sub_f.bitcast(u32) | sign
    out = (exp.ne(0)).where(normal, sub)
    if dtype.scalar() == dtypes.fp8e4m3:
        nan = sign | 0x7FF00000
        out = mag.ne(0x7F).where(out, nan)
    else:
        special = sign | 0x7F800000 | (frac.ne(0).where(_kd(dtypes.uint32, code, 0x400000), 0) | (frac << 21))
        out = exp.ne(0x1F).where(out, special)
    return out.bitcast(_like(dtypes.float32, code))


def _fp8_of(x: UOp) -> DType | None:
    """The fp8 dtype `x` holds the bits of (`x` is BITCAST(uint8 -> fp8)), else None."""
    if x.op is Ops.BITCAST and x.dtype.scalar() in FP8S and x.src[0].dtype.scalar() == dtypes.uint8:
        return x.dtype.scalar()
    return None


def _bits(x: UOp) -> UOp:
    return x.src[0] if _fp8_of(x) is not None else x


def _value(x: UOp) -> UOp:
    """A source as a (non-fp8) value: fp8 bits decoded to float32."""
    dt = _fp8_of(x)
    return xfp8_decode(x.src[0], dt) if dt is not None else x


def _as_fp8(code: UOp, dtype: DType) -> UOp:
    return UOp(Ops.BITCAST, _like(dtype.scalar(), code), (code,))


def _fp8_ptr(x: UOp) -> UOp | None:
    """A buffer definition (or INDEX) of fp8 elements: the same of uint8."""
    dt = x.dtype
    if not isinstance(dt, PtrDType) or dt.base.scalar() not in FP8S:
        return None
    base = dtypes.uint8.vec(dt.base.count) if dt.base.count > 1 else dtypes.uint8
    ptr = base.ptr(dt.size, dt.addrspace)
    return UOp(x.op, ptr.vec(dt.v) if dt.v > 1 else ptr, x.src, x.arg)


def _fp8_node(x: UOp) -> UOp | None:
    """A node that produces or reads fp8 values (or points to fp8 elements), without fp8."""
    if isinstance(x.dtype, PtrDType):
        return _fp8_ptr(x)
    produces = x.dtype.scalar() in FP8S and not isinstance(x.dtype, PtrDType)
    reads = any(_fp8_of(s) is not None for s in x.src)
    if not produces and not reads:
        return None
    op = x.op
    if op is Ops.BITCAST:
        src = x.src[0]
        if produces and not reads:  # int8/uint8 bits -> fp8
            if src.dtype.scalar() == dtypes.uint8:
                return None  # already the canonical form
            if src.dtype.scalar() == dtypes.int8:
                return _as_fp8(src.bitcast(_like(dtypes.uint8, src)), x.dtype)
            return None
        bits = src.src[0]
        return _as_fp8(bits, x.dtype) if produces else bits.bitcast(x.dtype)
    if op is Ops.CAST:
        value = _value(x.src[0])
        if not produces:
            return value.cast(x.dtype)
        return _as_fp8(xfp8_encode(value.cast(_like(dtypes.float32, value)), x.dtype), x.dtype)
    if op is Ops.CONST:
        from tinycore.dtype import fp8_encode

        return _as_fp8(UOp.const(_like(dtypes.uint8, x), fp8_encode(x.arg, x.dtype)), x.dtype)
    if op in (Ops.LOAD, Ops.WHERE, Ops.VECTORIZE, Ops.GEP) and produces:  # the bits move unchanged
        return _as_fp8(UOp(op, _like(dtypes.uint8, x), tuple(_bits(s) for s in x.src), x.arg), x.dtype)
    if op is Ops.STORE:
        return UOp(op, x.dtype, tuple(_bits(s) for s in x.src), x.arg)
    if op in GroupOp.ALU or op is Ops.REDUCE:  # computed in float32, rounded to fp8 once
        f32 = _like(dtypes.float32, x)
        srcs = tuple(_value(s) for s in x.src)
        if produces:
            srcs = (srcs[0].cast(f32), *x.src[1:]) if op is Ops.REDUCE else tuple(s.cast(f32) for s in srcs)
            return _as_fp8(xfp8_encode(UOp(op, f32, srcs, x.arg), x.dtype), x.dtype)
        return UOp(op, x.dtype, srcs, x.arg)
    return None


fp8_rules = PatternMatcher(
    [
        (UPat(GroupOp.All, name="x"), _fp8_node),
    ],
    name="lower_fp8",
)
"""The rule table of `lower_fp8`: fp8 buffers become uint8 buffers, fp8 values BITCAST(uint8 bits -> fp8) nodes
that every reader of an fp8 value unwraps (a STORE stores the bits, a CAST decodes them, arithmetic computes in
float32 and encodes)."""


def lower_fp8(sink: UOp) -> UOp:
    """`sink` (a kernel) without fp8 dtypes: `fp8_rules`, then a check that none is left (an op the rules do not
    know raises a TypeError naming it rather than reaching a renderer).

    >>> b0, b1 = UOp.define_global(0, dtypes.fp8e4m3, 4), UOp.define_global(1, dtypes.float, 4)
    >>> i = UOp.const(dtypes.index, 0)
    >>> k = lower_fp8(UOp.sink(b0.index(i).store(b1.index(i).load().cast(dtypes.fp8e4m3))))
    >>> sorted({u.dtype.base.scalar().name for u in k.toposort()} & {"float8_e4m3", "unsigned char"})
    ['unsigned char']
    """
    out = graph_rewrite(sink, fp8_rules, name="lower_fp8")
    for u in out.toposort():
        dt = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
        if dt.scalar() in FP8S:
            raise TypeError(f"can't lower {u.op} of {u.dtype} to uint8 bits: cast the fp8 tensor to float first")
    return out
