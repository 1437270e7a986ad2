"""Elementwise math and activation functions: methods of `Tensor` (see `tinycore/frontend/__init__.py`).

Everything here is a composition of the core ALU ops (`EXP2 LOG2 SIN SQRT RECIP TRUNC`, arithmetic, `MAX`,
comparisons, `WHERE`, `CAST`), so gradients follow from the primitives' rules and the scheduler fuses whole chains
into one kernel. Two rules keep both passes finite:

- **Stable forms.** Functions that overflow for large |x| are written on ``exp(-|x|)`` (sigmoid, softplus,
  logsigmoid, tanh), so no intermediate is ever ``inf``.
- **Safe branches.** A ``where`` sends a zero cotangent into the branch it did not pick, and ``0 * inf`` is NaN;
  so the input of each branch is clamped to the branch's own domain before the branch is computed.

Transcendentals the IR lacks are polynomial fits made for this project (float64 least squares on Chebyshev
nodes): ``atan`` on ``[0, tan(pi/8)]`` after range reduction, ``erf`` on ``[0, 1]`` and ``erfc(x) * exp(x**2)`` on
``[1, 4]`` in ``t = 1 / (1 + x/2)``. Both are within 1.5e-7 of the exact function in float32.

Integer division follows PyTorch: ``//`` floors (``-7 // 2 == -4``), ``%`` takes the divisor's sign
(``torch.remainder``), `idiv` truncates toward zero (C, ``torch.div(rounding_mode="trunc")``).

Integer division by zero raises, like PyTorch (``RuntimeError: ZeroDivisionError``), wherever the zero can be seen
at call time without computing anything: ``//``, ``%`` and `idiv` raise `tinycore.errors.IntegerDivisionByZeroError`
(both a ZeroDivisionError and a RuntimeError) when the divisor is a Python 0, a constant tensor of 0 (`zeros`,
`full(..., 0)`, a broadcast of one), or a realized tensor (data already on the device, e.g. ``Tensor([0, 1])``)
holding a 0; the last is read back at call time (up to 2**20 elements; larger ones are tested with an ``any``
reduction on their device). A lazy divisor, the result of ops not yet computed, is not checked, since that would
force it to be computed at once and break fusion; neither is one inside a TinyJit capture or replay (the check
reads data). There the IR's convention applies: ``x // 0`` and ``x % 0`` give 0. Mask such divisors first, e.g.
``a // (b != 0).where(b, 1)``. Float division by zero keeps IEEE inf/NaN like PyTorch (``1 / 0.0 == inf``,
``x // 0.0`` floors the inf, ``x % 0.0`` is NaN).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tinycore.dtype import DType, dtypes, least_upper_float
from tinycore.helpers import all_int
from tinycore.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from tinycore.frontend.tensor import Tensor

_LN2 = math.log(2)
_ATAN_COEFFS = (
    0.999999999725672, -0.3333331313058996, 0.1999842606788021, -0.14243120114391253, 0.10592206958677809,
    -0.060760940104958326,
)  # fmt: skip
_ERF_SMALL = (
    1.1283791665891336, -0.37612629867053937, 0.112836256366981, -0.02685539618025176, 0.005191212409862492,
    -0.0008034794244605459, 7.933317165546849e-05,
)  # fmt: skip
_ERFC_BIG = (
    -0.00011662594378376996, 0.28426169516021943, 0.26457932365580095, 0.3269798898540961, -0.04871334597354948,
    0.4714874529922779, -0.37618251462308183, 0.06365586318828349, 0.01415145269329078,
)  # fmt: skip
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _tensor_cls() -> type[Tensor]:
    from tinycore.frontend.tensor import Tensor

    return Tensor


def _poly(x: Tensor, coeffs: Sequence[float]) -> Tensor:
    """``sum(c_i * x**i)`` by Horner's rule."""
    acc = x * 0 + coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = acc * x + c
    return acc


_CHECK_ON_HOST = 1 << 20  # realized divisors up to this many elements are read back whole to look for a zero


def _constant_value(u: UOp) -> Any:
    """The value of every element of `u` when it is a constant seen through movement ops that keep all elements
    equal to it (and widening integer casts), else None. A PAD brings in zeros, so it ends the search."""
    while u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP) or (
        u.op is Ops.CAST and not dtypes.is_float(u.src[0].dtype) and u.src[0].dtype.itemsize <= u.dtype.itemsize
    ):
        u = u.src[0]
    return u.arg if u.op is Ops.CONST and isinstance(u.arg, (bool, int)) else None


def _check_divisor(name: str, divisor: Any) -> None:
    """Raise `IntegerDivisionByZeroError` when the divisor of an integer division is 0 where that can be seen now
    (see the module notes): a Python 0, a constant tensor of 0, or a realized tensor holding a 0 (read back when it
    has at most `_CHECK_ON_HOST` elements, else tested with an ``any`` reduction on its device). Lazy divisors
    (values not computed yet) and divisors inside a TinyJit capture are not checked: there a zero gives 0."""
    from tinycore.errors import IntegerDivisionByZeroError

    safe = "(b != 0).where(b, 1)"
    example = f"a.idiv({safe})" if name == "idiv" else f"a {'%' if name.startswith('remainder') else '//'} {safe}"
    fix = f"; mask the zeros first, e.g. ``{example}``, or divide as floats (``a / b`` gives inf/nan like PyTorch)"
    if not isinstance(divisor, _tensor_cls()):
        if isinstance(divisor, (bool, int)) and divisor == 0:
            raise IntegerDivisionByZeroError(f"integer {name} by zero: the divisor is the scalar {divisor!r}{fix}")
        return
    if divisor.numel() == 0 or not all_int(divisor.shape):
        return
    deferred = divisor._deferred
    if deferred is not None and type(deferred) is not _deferred_buffer_cls():
        return  # a lazy chain of ops: not computed yet
    u = divisor.uop if isinstance(divisor.device, str) else None
    if u is None:
        return  # sharded over several devices: not checked
    value = _constant_value(u)
    if value is not None:
        if value == 0:
            raise IntegerDivisionByZeroError(f"integer {name} by zero: the divisor is a constant 0 tensor{fix}")
        return
    while u.op in GroupOp.Movement:
        u = u.src[0]
    if u.op is not Ops.BUFFER or _capturing():
        return  # lazy, or inside a TinyJit capture (data read there would be frozen into the replay)
    if divisor.numel() <= _CHECK_ON_HOST:
        has_zero = not divisor.numpy().all()
    else:
        has_zero = bool((divisor == 0).any().item())
    if has_zero:
        raise IntegerDivisionByZeroError(f"integer {name} by zero: the divisor tensor holds a 0{fix}")


def _deferred_buffer_cls() -> type:
    from tinycore.frontend.tensor import _DeferredBuffer

    return _DeferredBuffer


def _capturing() -> bool:
    realize = sys.modules.get("tinycore.engine.realize")
    return realize is not None and realize.is_capturing()


def _int_bits(dtype: DType) -> DType:
    return {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[dtype.itemsize]


class ElementwiseMixin:
    """Elementwise math and activation functions, mixed into `tinycore.tensor.Tensor`."""

    __slots__ = ()

    # ----- helpers

    def _to_float(self: Tensor) -> Tensor:  # type: ignore[misc]
        return self.cast(least_upper_float(self.dtype))

    def _odd_abs(self: Tensor) -> Tensor:  # type: ignore[misc]
        """|x| for odd functions written ``sign(x) * g(|x|)``: its gradient is -1 below 0 and +1 from 0 up (abs's is 0
        at 0), so their gradient at 0 is g'(0), as torch's is (atan, erf, asinh). -0.0 stays -0.0."""
        return (self < 0).where(-self, self)

    def _neg_abs(self: Tensor) -> Tensor:  # type: ignore[misc]
        """-|x| whose derivative at 0 is that of the x >= 0 side (-1), so one-sided formulas keep their gradient."""
        return (self >= 0).where(-self, self)

    def _is_integral(self: Tensor) -> bool:  # type: ignore[misc]
        return not dtypes.is_float(self.dtype)

    # ----- exponentials and logarithms

    def rsqrt(self: Tensor) -> Tensor:  # type: ignore[misc]
        """1 / sqrt(x).

        >>> Tensor([4.0]).rsqrt().tolist()  # doctest: +SKIP
        [0.5]
        """
        return self.sqrt().reciprocal()

    def _log1p(self: Tensor) -> Tensor:  # type: ignore[misc]
        """log(1 + x), accurate for tiny x: ``log(u) * x / (u - 1)`` with ``u = 1 + x`` (exact when u == 1)."""
        x = self._to_float()
        u = x + 1
        exact = u == 1
        den = exact.where(1.0, u - 1)
        return exact.where(x, u.log() * (x / den))

    def _expm1(self: Tensor) -> Tensor:  # type: ignore[misc]
        """exp(x) - 1, accurate for tiny x: ``(u - 1) * x / log(u)`` with ``u = exp(x)``."""
        x = self._to_float()
        u = x.exp()
        exact = (u == 1) | (x.abs() > 20)
        safe = exact.where(1.0, x)
        su = exact.where(math.e, u)
        return exact.where(u - 1, (su - 1) * (safe / su.log()))

    # ----- trigonometry

    def cos(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Cosine as ``1 - 2 sin(x/2)^2``: halving is exact, so it stays within ~1e-7 of torch for every float32
        (``sin(pi/2 - x)`` loses pi/2 to rounding: 1e-4 off at 1e4, anything at 1e38)."""
        s = (self._to_float() * 0.5).sin()
        return 1 - 2 * s * s

    def tan(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Tangent (sin / cos)."""
        return self.sin() / self.cos()

    def atan(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Arc tangent: range reduction to ``|x| <= tan(pi/8)`` and a degree-11 odd polynomial (error < 1e-7)."""
        x = self._to_float()
        a = x._odd_abs()
        big = a > 2.414213562373095  # tan(3pi/8): atan(a) = pi/2 - atan(1/a)
        mid = (a > 0.41421356237309503) & big.logical_not()  # atan(a) = pi/4 + atan((a-1)/(a+1))
        safe_big, safe_mid = big.where(a, 1.0), mid.where(a, 1.0)  # (no inf/inf in a branch not taken)
        r = big.where(-safe_big.reciprocal(), mid.where((safe_mid - 1) / (safe_mid + 1), a))
        base = big.where(math.pi / 2, mid.where(math.pi / 4, 0.0))
        y = base + r * _poly(r * r, _ATAN_COEFFS)
        return (x < 0).where(-y, y)

    def asin(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Arc sine: ``2 * atan(x / (1 + sqrt(1 - x*x)))``: exact at +-1 (its gradient there is inf, as torch's),
        NaN outside [-1, 1] with a NaN gradient, and no cancellation near +-1 (the square root is added to 1)."""
        x = self._to_float()
        return (x / ((1 - x * x).sqrt() + 1)).atan() * 2

    def acos(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Arc cosine: pi/2 - asin(x)."""
        return math.pi / 2 - self.asin()

    # ----- hyperbolic

    def sinh(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Hyperbolic sine."""
        x = self._to_float()
        return (x.exp() - (-x).exp()) * 0.5

    def cosh(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Hyperbolic cosine."""
        x = self._to_float()
        return (x.exp() + (-x).exp()) * 0.5

    def tanh(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Hyperbolic tangent, stable for large |x|: ``sign(x) * (1 - e) / (1 + e)`` with ``e = exp(-2|x|)``."""
        x = self._to_float()
        e = (x._neg_abs() * 2).exp()
        y = (1 - e) / (1 + e)
        return (x < 0).where(-y, y)

    def atanh(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Inverse hyperbolic tangent: ``0.5 * (log(1 + x) - log(1 - x))`` (its gradient is torch's
        ``1 / (1 - x*x)``: inf at +-1, -0 at +-inf)."""
        x = self._to_float()
        return ((1 + x).log() - (1 - x).log()) * 0.5

    def asinh(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Inverse hyperbolic sine: ``sign(x) * log(|x| + sqrt(x*x + 1))``; ``log(|x|) + log(2)`` beyond 1e18, where
        ``x*x`` would overflow."""
        x = self._to_float()
        a = x._odd_abs()
        big = a > 1e18
        safe, large = big.where(1.0, a), big.where(a, 1.0)  # (each branch finite where it is not taken)
        y = big.where(large.log() + math.log(2), (safe + (safe * safe + 1).sqrt()).log())
        return (x < 0).where(-y, y)

    def acosh(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Inverse hyperbolic cosine: ``log(x + sqrt(x*x - 1))`` (NaN below 1); ``log(x) + log(2)`` beyond 1e18,
        where ``x*x`` would overflow."""
        x = self._to_float()
        huge = x.abs() > 1e18
        safe, large = huge.where(2.0, x), (huge & (x > 0)).where(x, 2.0)  # (finite where not taken)
        y = (safe + (safe * safe - 1).sqrt()).log()
        y = huge.where((x > 0).where(large.log() + math.log(2), math.nan), y)
        return (x < 1).where(math.nan, y)  # (below -1 the formula gives log(0) = -inf once x*x rounds, in float16)

    # ----- erf

    def erf(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Error function: an odd polynomial for ``|x| <= 1``, ``1 - exp(-x*x) * R(1 / (1 + |x|/2))`` up to 4,
        1 beyond (fits made for this project, error < 2e-7)."""
        x = self._to_float()
        a = x._odd_abs()
        small = a <= 1
        s = small.where(a, 0.0)
        lo = s * _poly(s * s, _ERF_SMALL)
        b = small.where(1.0, a.minimum(4.0))
        t = (b * 0.5 + 1).reciprocal()
        hi = 1 - (-(b * b)).exp() * _poly(t, _ERFC_BIG)
        y = small.where(lo, (a > 4).where(1.0, hi))
        nan = (x != x).where(x, 0.0)
        y = (x != x).where(nan * nan, y)  # NaN, with a NaN gradient like torch's
        return (x < 0).where(-y, y)

    # ----- sign and rounding

    def sign(self: Tensor) -> Tensor:  # type: ignore[misc]
        """-1, 0 or 1 by the sign of x (same dtype; NaN gives 0 like `torch.sign`; bool is unchanged)."""
        if self.dtype == dtypes.bool:
            return self
        zero = self._const_like(0, self.dtype, self.shape)
        if dtypes.is_float(self.dtype):
            # the 0 branch (x is +-0 or NaN there) is built from trunc(x) so the gradient is zeros, like PyTorch's,
            # rather than missing: t * t is +0 for both zeros, and NaN is sent to the constant
            t = self.trunc()
            zero = (self == self).where(t * t, zero)
        one = (self > 0).where(self._const_like(1, self.dtype, self.shape), zero)
        return (self < 0).where(self._const_like(-1, self.dtype, self.shape), one)

    def trunc(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Round toward zero (integers are returned unchanged)."""
        return self if self._is_integral() else self._unop(Ops.TRUNC)

    def floor(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Round toward -inf."""
        if self._is_integral():
            return self
        t = self.trunc()
        return (t > self).where(t - 1, t)

    def ceil(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Round toward +inf."""
        if self._is_integral():
            return self
        t = self.trunc()
        return (t < self).where(t + 1, t)

    def round(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Round to the nearest integer, halves to even (like `torch.round`)."""
        if self._is_integral():
            return self
        t = self.trunc()
        d = self - t  # exact: |d| < 1 and t shares x's exponent range
        half_odd = (d.abs() == 0.5) & ((t * 0.5).trunc() != t * 0.5)
        step = (d.abs() > 0.5) | half_odd
        return step.where((d < 0).where(t - 1, t + 1), t)

    def frac(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x - trunc(x)."""
        return self - self.trunc()

    # ----- integer division

    def idiv(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
        """Integer division truncating toward zero (C semantics); integer operands only.

        >>> Tensor([-7, 7]).idiv(2).tolist()  # doctest: +SKIP
        [-3, 3]
        """
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_float(a.dtype):
            raise TypeError(f"idiv needs integer tensors, got {a.dtype}; use // or div(...).trunc() for floats")
        _check_divisor("idiv", self if reverse else x)
        return a._binop(Ops.IDIV, b)

    def __floordiv__(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
        return self._floordiv(x)

    def __rfloordiv__(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
        return self._floordiv(x, True)

    def _floordiv(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_float(a.dtype):
            return (a / b).floor()
        if a.dtype == dtypes.bool:
            raise TypeError("floor division of bool tensors is not supported")
        _check_divisor("floor division (//)", self if reverse else x)
        q = a._binop(Ops.IDIV, b)
        r = a._binop(Ops.MOD, b)
        fix = (r != 0) & ((r < 0) != (b < 0))
        return fix.where(q - 1, q)

    def mod(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
        """Python-style remainder: the result has the divisor's sign (`torch.remainder`).

        >>> Tensor([-7, 7]).mod(3).tolist()  # doctest: +SKIP
        [2, 1]
        """
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_float(a.dtype):
            return a - (a / b).floor() * b
        if a.dtype == dtypes.bool:
            raise TypeError("remainder of bool tensors is not supported")
        _check_divisor("remainder (%)", self if reverse else x)
        r = a._binop(Ops.MOD, b)
        fix = (r != 0) & ((r < 0) != (b < 0))
        return fix.where(r + b, r)

    def __mod__(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
        return self.mod(x)

    def __rmod__(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
        return self.mod(x, True)

    # ----- pow

    def pow(self: Tensor, x: Any, reverse: bool = False) -> Tensor:  # type: ignore[misc]
        """``self ** x`` with PyTorch semantics: integer tensors stay integers, a negative base with an integer-valued
        exponent keeps its sign (``(-2) ** 3 == -8``, ``(-0.0) ** -1 == -inf``), a negative finite base with a
        fractional exponent is NaN, ``(-inf) ** 0.5 == inf``, ``0 ** 0 == 1`` and ``1 ** nan == 1`` (C's pow). Float
        powers are ``exp2(x * log2|self|)``: a result in the last octave below the float32 maximum may round to inf.

        >>> (Tensor([-2.0, 3.0]) ** 2).tolist()  # doctest: +SKIP
        [4.0, 9.0]
        """
        T = _tensor_cls()
        if not reverse and isinstance(x, int) and not isinstance(x, bool) and x < 0 and not dtypes.is_float(self.dtype):
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool):
            if x == 0:
                return self._broadcasted(x)[0] * 0 + 1
            if isinstance(x, int) and 0 < x <= 16 and not dtypes.is_float(self.dtype) or x in (1, 2, 3):
                base = self._broadcasted(x)[0]
                return _int_power(base, int(x))
            if x == 0.5:
                return self._broadcasted(x)[0].sqrt()
            if x == -1 and dtypes.is_float(self.dtype):
                return self.reciprocal()
        a, b = self._broadcasted(x, reverse)
        if not dtypes.is_float(a.dtype):
            if a.dtype == dtypes.bool:
                a, b = a.cast(dtypes.uint8), b.cast(dtypes.uint8)
            return _int_tensor_power(a, b)
        assert isinstance(a, T)
        lg = a.abs().log2()
        # C's pow (torch's): |a| == 1 to an infinite or NaN power is 1, not the NaN of 0 * inf
        mag = ((lg == 0) & (b * 0 != 0)).where(0.0, b * lg).exp2()
        is_int = b.trunc() == b
        odd = is_int & ((b * 0.5).trunc() != b * 0.5)
        neg = a < 0
        negative_sign = neg | ((a == 0) & (a.reciprocal() < 0))  # -0.0 keeps its sign under an odd power
        fractional = neg & is_int.logical_not() & (a != -math.inf)  # a finite negative base: no real power
        out = fractional.where(math.nan, (negative_sign & odd).where(-mag, mag))
        return (b == 0).where(1.0, out)

    def __pow__(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
        return self.pow(x)

    def __rpow__(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
        return self.pow(x, True)

    # ----- comparisons and selection

    def clamp(self: Tensor, min_: Any = None, max_: Any = None) -> Tensor:  # type: ignore[misc]
        """Limit values to ``[min_, max_]`` (either may be None; tensors broadcast; the dtype is promoted with the
        bounds like `torch.clamp`). NaN stays NaN; where ``min_ > max_`` the result is ``max_``."""
        if min_ is None and max_ is None:
            raise RuntimeError("clamp: at least one of 'min' or 'max' must not be None")
        x = self
        if min_ is not None:
            x = x.maximum(min_)
        if max_ is not None:
            x = x.minimum(max_)
        if not dtypes.is_float(self.dtype) or x.dtype != self.dtype or x.shape != self.shape:
            return x
        # torch's gradient: 1 inside the bounds, bounds included (maximum/minimum would split a tie in halves)
        inside = (self >= min_) if min_ is not None else None
        if max_ is not None:
            inside = (self <= max_) if inside is None else inside & (self <= max_)
        assert inside is not None
        return inside.where(self, x)

    def clip(self: Tensor, min_: Any = None, max_: Any = None) -> Tensor:  # type: ignore[misc]
        """Alias of `clamp`."""
        return self.clamp(min_, max_)

    def lerp(self: Tensor, end: Any, weight: Any) -> Tensor:  # type: ignore[misc]
        """``self + (end - self) * weight``."""
        return self + (end - self) * weight

    def copysign(self: Tensor, other: Any) -> Tensor:  # type: ignore[misc]
        """|self| with the sign bit of `other` (a float result; -0.0 counts as negative)."""
        T = _tensor_cls()
        x = self._to_float()
        o = other if isinstance(other, T) else T(other, device=self.device)
        o = o.cast(least_upper_float(o.dtype)) if not dtypes.is_float(o.dtype) else o
        x, o = x._broadcasted(o)
        neg = o.bitcast(_int_bits(o.dtype)) < 0
        out = neg.where(-x.abs(), x.abs())
        if o.requires_grad is False:  # no gradient wanted
            return out
        # the sign comes through a bitcast, which has no gradient; PyTorch gives `other` a zero gradient, so `other`
        # also enters through a WHERE branch that is never taken: the same values, and a gradient of exactly 0
        # (a WHERE passes 0 to its unselected branch without multiplying, so inf/NaN upstream gives 0 too)
        never = x._const_like(False, dtypes.bool, out.shape)
        return never.where(o.cast(out.dtype), out)

    def isclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:  # type: ignore[misc]
        """``|self - other| <= atol + rtol * |other|`` (equal infinities are close; NaNs only with `equal_nan`)."""
        a, b = self._broadcasted(other)
        close = (a == b) | ((a - b).abs() <= atol + rtol * b.abs()) & a.isfinite() & b.isfinite()
        if equal_nan:
            close = close | (a.isnan() & b.isnan())
        return close

    def isnan(self: Tensor) -> Tensor:  # type: ignore[misc]
        """True where x is NaN."""
        return self != self

    def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:  # type: ignore[misc]
        """True where x is +inf (`detect_positive`) or -inf (`detect_negative`)."""
        out = self._const_like(False, dtypes.bool, self.shape)
        if detect_positive:
            out = out | (self == math.inf)
        if detect_negative:
            out = out | (self == -math.inf)
        return out

    def isfinite(self: Tensor) -> Tensor:  # type: ignore[misc]
        """True where x is neither inf nor NaN."""
        if not dtypes.is_float(self.dtype):
            return self._const_like(True, dtypes.bool, self.shape)
        return (self - self) == 0

    def masked_fill(self: Tensor, mask: Tensor, value: Any) -> Tensor:  # type: ignore[misc]
        """`value` where `mask` is true, else self (keeps self's dtype; mask broadcasts)."""
        T = _tensor_cls()
        v = value.cast(self.dtype) if isinstance(value, T) else self._const_like(value, self.dtype, ())
        return mask.where(v, self)

    # ----- activations

    def sigmoid(self: Tensor) -> Tensor:  # type: ignore[misc]
        """1 / (1 + exp(-x)), stable for large |x| (written on exp(-|x|))."""
        x = self._to_float()
        z = x._neg_abs().exp()
        r = (1 + z).reciprocal()
        return (x >= 0).where(r, z * r)

    def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:  # type: ignore[misc]
        """``max(0, min(1, alpha * x + beta))`` (PyTorch's defaults; the gradient is 0 at the kinks, as torch's)."""
        return (self._to_float() * alpha + beta).hardtanh(0.0, 1.0)

    def gelu(self: Tensor) -> Tensor:  # type: ignore[misc]
        """GELU, tanh approximation (as tinygrad; `torch.nn.functional.gelu(x, approximate="tanh")`)."""
        x = self._to_float()
        return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())

    def quick_gelu(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x * sigmoid(1.702 x)."""
        return self * (self._to_float() * 1.702).sigmoid()

    def silu(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x * sigmoid(x)."""
        return self * self.sigmoid()

    def swish(self: Tensor) -> Tensor:  # type: ignore[misc]
        """Alias of `silu`."""
        return self.silu()

    def elu(self: Tensor, alpha: float = 1.0) -> Tensor:  # type: ignore[misc]
        """x for x > 0, else alpha * (exp(x) - 1)."""
        x = self._to_float()
        neg = x <= 0  # (not x > 0: NaN takes the identity branch, so its gradient is 1 as torch's is)
        return neg.where(alpha * neg.where(x, 0.0)._expm1(), x)

    def celu(self: Tensor, alpha: float = 1.0) -> Tensor:  # type: ignore[misc]
        """max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
        x = self._to_float()
        return (x > 0).where(x, alpha * ((x > 0).where(0.0, x) / alpha)._expm1())

    def selu(self: Tensor, alpha: float = 1.67326, gamma: float = 1.0507) -> Tensor:  # type: ignore[misc]
        """``gamma * elu(x, alpha)``. The defaults are tinygrad's rounded constants; they stand for the exact
        self-normalizing constants (``1.6732632423543772``, ``1.0507009873554805``), which are used, so the default
        result matches `torch.nn.functional.selu`. Other values are used as given."""
        alpha = _SELU_ALPHA if alpha == 1.67326 else alpha
        gamma = _SELU_SCALE if gamma == 1.0507 else gamma
        return gamma * self.elu(alpha)

    def softplus(self: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # type: ignore[misc]
        """``log(1 + exp(beta x)) / beta``, stable: ``max(y, 0) + log1p(exp(-|y|))`` with ``y = beta x``; where
        ``beta x > threshold`` the result is ``x`` itself (gradient 1), as `torch.nn.functional.softplus`."""
        x = self._to_float()
        y = x * beta
        pos = y > 0
        out = pos.where(y, 0.0) + pos.where(-y, y).exp()._log1p()
        out = out * (1 / beta) if beta != 1 else out
        return (y > threshold).where(x, out)

    def logsigmoid(self: Tensor) -> Tensor:  # type: ignore[misc]
        """log(sigmoid(x)) = -softplus(-x)."""
        return -(-self._to_float()).softplus()

    def mish(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x * tanh(softplus(x))."""
        return self * self.softplus().tanh()

    def relu6(self: Tensor) -> Tensor:  # type: ignore[misc]
        """min(max(x, 0), 6), i.e. ``hardtanh(0, 6)`` (its gradient is 0 at 0 and 6, as torch's)."""
        if not dtypes.is_float(self.dtype):
            return self.relu().minimum(6)
        return self.hardtanh(0.0, 6.0)

    def hardswish(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x * relu6(x + 3) / 6."""
        return self * (self + 3).relu6() * (1 / 6)

    def hardtanh(self: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor:  # type: ignore[misc]
        """Clamp to [min_val, max_val]; torch's gradient: 1 strictly inside, 0 at the bounds and outside."""
        x = self._to_float()
        return (x <= min_val).where(min_val, (x >= max_val).where(max_val, x))

    def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor:  # type: ignore[misc]
        """x for x > 0, else neg_slope * x."""
        return (self > 0).where(self, self * neg_slope)

    def softsign(self: Tensor) -> Tensor:  # type: ignore[misc]
        """x / (1 + |x|)."""
        return self / (1 + self.abs())


def _int_power(base: Tensor, n: int) -> Tensor:
    """base ** n for a positive int n by repeated squaring (exact for integers)."""
    result: Tensor | None = None
    sq = base
    while n:
        if n & 1:
            result = sq if result is None else result * sq
        n >>= 1
        if n:
            sq = sq * sq
    assert result is not None
    return result


def _int_tensor_power(a: Tensor, b: Tensor) -> Tensor:
    """Integer ``a ** b`` elementwise: square-and-multiply over every bit of the exponent (one fused kernel).

    Negative exponents follow C/PyTorch integer semantics: 1 ** n == 1, (-1) ** n == +-1, anything else gives 0."""
    bits = a.dtype.itemsize * 8
    acc = a * 0 + 1
    sq = a
    e = b.abs() if not dtypes.is_unsigned(b.dtype) else b
    for i in range(bits - (0 if dtypes.is_unsigned(b.dtype) else 1)):
        bit = ((e >> i) & 1) == 1
        acc = bit.where(acc * sq, acc)
        if i < bits - 2:
            sq = sq * sq
    if dtypes.is_unsigned(b.dtype):
        return acc
    neg = b < 0
    tiny = (a == 1) | (a == -1)
    return neg.where(tiny.where(acc, acc * 0), acc)
