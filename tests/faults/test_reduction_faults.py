"""Fault suite: special values through every reduction, compared with PyTorch (issue 18).

Each case feeds one input kind (NaN, +-inf, both infs in one row, -0.0, denormals, huge values that overflow a
sum, a 0-size axis, one element, a non-contiguous view, a broadcast view; for integers the dtype's extremes) through
one reduction or scan along the last axis of a 3 x 5 tensor (and, separately, over the whole tensor), in float32,
float16, int32 or bool as the op allows, on the default device. The result must equal PyTorch's: same shape, same
values (NaN where PyTorch has NaN, the same infinities, the sign of a zero for the sum-like ops), the same error
class where PyTorch raises, and for float32 the same gradients (NaN pattern included) under a fixed cotangent.

Known, documented differences (tinycore/frontend/reduce.py's notes) are compared through an adapter, not skipped:
arg indices are int32 (PyTorch int64); `cummax` returns values only; `max`/`min` gradients split ties evenly (PyTorch's
`amax`, not `max(dim)`, whose gradient picks one index); a float16 product accumulates in float32 (reference: the
float64 product rounded once); var/std accumulate in float32 (PyTorch's CPU kernel in float64; reference: numpy in
float32) and their gradient rules are in `_var_std_reference`; logsumexp's gradient is the exact softmax where
PyTorch's rounds (`_exact_logsumexp_grad`). Outcomes that differ and are not decisions are strict xfails (`XFAIL`):
the NaN positions of prod/cumprod gradients in groups with inf or overflowing products, logcumsumexp's gradient where
prefixes saturate float32.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

F32, F16, I32, BOOL = "float32", "float16", "int32", "bool"
NP = {F32: np.float32, F16: np.float16, I32: np.int32, BOOL: np.bool_}
TORCH = {F32: torch.float32, F16: torch.float16, I32: torch.int32, BOOL: torch.bool}
TINY = {F32: dtypes.float32, F16: dtypes.float16, I32: dtypes.int32, BOOL: dtypes.bool}
nan, inf = math.nan, math.inf


# ----- inputs: (array, how to view it) per kind; the view is applied to both libraries' tensors


def _float_kinds(dtype: str) -> dict[str, tuple[np.ndarray, str]]:
    tiny_val = 1e-40 if dtype == F32 else 1e-6  # a denormal of the dtype
    huge = 3e38 if dtype == F32 else 6e4  # two of them overflow the dtype
    base = np.array([[0.5, -1.25, 2.0, 0.0, 3.5], [1.0, 1.0, -2.0, 4.0, -0.75], [-3.0, 0.25, 1.5, -1.0, 2.25]])
    kinds = {
        "nan": [[1.0, nan, 2.0, -1.0, 0.5], [nan, nan, nan, nan, nan], [0.5, 1.0, -2.0, 3.0, 1.0]],
        "inf": [[1.0, inf, 2.0, -1.0, 0.5], [inf, inf, 1.0, 0.0, 2.0], [0.5, 1.0, -2.0, 3.0, 1.0]],
        "neg_inf": [[1.0, -inf, 2.0, -1.0, 0.5], [-inf, -inf, -inf, -inf, -inf], [0.5, 1.0, -2.0, 3.0, 1.0]],
        "both_inf": [[1.0, inf, -inf, -1.0, 0.5], [inf, -inf, nan, 0.0, 1.0], [-inf, 1.0, -2.0, 3.0, inf]],
        "neg_zero": [[-0.0] * 5, [-0.0, 0.0, -0.0, 0.0, -0.0], [-0.0, 1.0, -0.0, -2.0, -0.0]],
        "denormal": [[tiny_val] * 5, [-tiny_val, tiny_val, 0.0, tiny_val, -tiny_val], [tiny_val, 1.0, 2.0, -1.0, 0.5]],
        "huge": [[huge, huge, 1.0, 0.0, -1.0], [-huge, -huge, -huge, 2.0, 1.0], [huge, -huge, huge, 0.5, 0.25]],
    }
    out = {k: (np.array(v, dtype=np.float64), "plain") for k, v in kinds.items()}
    out["regular"] = (base, "plain")
    out["empty"] = (np.zeros((3, 0)), "plain")
    out["one"] = (np.array([[-0.75]]), "plain")
    out["noncontig"] = (np.arange(15, dtype=np.float64).reshape(5, 3) * 0.5 - 3.0, "transpose")
    out["broadcast"] = (np.array([[1.5, -0.5, inf, 2.0, -3.0]]), "expand")
    return out


def _int_kinds() -> dict[str, tuple[np.ndarray, str]]:
    lo, hi = -(2**31), 2**31 - 1
    return {
        "regular": (np.array([[3, -1, 2, 0, 5], [1, 1, -2, 4, -7], [-3, 0, 1, -1, 2]]), "plain"),
        "extremes": (np.array([[hi, hi, 1, 0, -1], [lo, lo, 2, 3, -1], [hi, lo, 0, hi, lo]]), "plain"),
        "empty": (np.zeros((3, 0)), "plain"),
        "one": (np.array([[-7]]), "plain"),
        "noncontig": (np.arange(15).reshape(5, 3) - 6, "transpose"),
        "broadcast": (np.array([[4, -2, 0, 7, 1]]), "expand"),
    }


def _bool_kinds() -> dict[str, tuple[np.ndarray, str]]:
    return {
        "regular": (np.array([[1, 0, 1, 1, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]), "plain"),
        "empty": (np.zeros((3, 0)), "plain"),
        "one": (np.array([[1]]), "plain"),
        "noncontig": (np.array([[1, 0, 1], [1, 1, 0], [0, 1, 1], [1, 1, 1], [0, 0, 1]]), "transpose"),
        "broadcast": (np.array([[1, 0, 1, 1, 1]]), "expand"),
    }


KINDS = {F32: _float_kinds(F32), F16: _float_kinds(F16), I32: _int_kinds(), BOOL: _bool_kinds()}


def _view(t: Any, how: str) -> Any:
    if isinstance(t, np.ndarray):
        return t.T if how == "transpose" else (np.broadcast_to(t, (3, t.shape[1])) if how == "expand" else t)
    if how == "transpose":
        return t.transpose(0, 1)
    if how == "expand":
        return t.expand(3, t.shape[1])
    return t


# ----- the reductions: (torch fn, tinycore fn) of a 2-d tensor and an axis (None: all), the dtypes each takes


@dataclass(frozen=True)
class Op:
    torch_fn: Callable[[Any, Any], Any]
    tiny_fn: Callable[[Any, Any], Any]
    dtypes: tuple[str, ...]
    grad: bool = True  # differentiable (checked on float32)
    signed_zero: bool = False  # the sign of a zero result is defined (identity +0 for sums, exact products)
    full: bool = True  # also reduced over the whole tensor (axis None)
    torch_grad_fn: Callable[[Any, Any], Any] | None = None  # the gradient's reference, when not torch_fn's


def _dims(t: Any, axis: Any) -> tuple[int, ...]:
    return tuple(range(t.ndim)) if axis is None else (axis,)


def _torch_argx(name: str) -> Callable[[Any, Any], Any]:
    return lambda t, axis: getattr(t, name)() if axis is None else getattr(t, name)(axis)


def _torch_extreme(name: str) -> Callable[[Any, Any], Any]:
    """``t.max()`` over everything (RuntimeError on an empty input, gradient split among ties), else
    ``torch.amax`` (``max(dim)`` sends the gradient to one tied index, `amax` splits it like tinycore)."""
    return lambda t, axis: getattr(t, name)() if axis is None else getattr(torch, "a" + name)(t, axis)


def _torch_scan(name: str) -> Callable[[Any, Any], Any]:
    def fn(t: Any, axis: Any) -> Any:
        out = getattr(torch, name)(t, -1)
        return out.values if name in ("cummax", "cummin") else out

    return fn


ALL, FLOATS, NUMERIC = (F32, F16, I32, BOOL), (F32, F16), (F32, F16, I32)
OPS = {
    "sum": Op(lambda t, a: t.sum(_dims(t, a)), lambda t, a: t.sum(a), ALL, signed_zero=True),
    "prod": Op(lambda t, a: t.prod() if a is None else t.prod(a), lambda t, a: t.prod(a), ALL, signed_zero=True),
    "mean": Op(lambda t, a: t.mean(_dims(t, a)), lambda t, a: t.mean(a), FLOATS, signed_zero=True),
    "var": Op(lambda t, a: t.var(_dims(t, a)), lambda t, a: t.var(a), FLOATS),
    "std": Op(lambda t, a: t.std(_dims(t, a)), lambda t, a: t.std(a), FLOATS),
    "max": Op(_torch_extreme("max"), lambda t, a: t.max(a), ALL, torch_grad_fn=lambda t, a: torch.amax(t, _dims(t, a))),
    "min": Op(_torch_extreme("min"), lambda t, a: t.min(a), ALL, torch_grad_fn=lambda t, a: torch.amin(t, _dims(t, a))),
    "argmax": Op(_torch_argx("argmax"), lambda t, a: t.argmax(a), ALL, grad=False),
    "argmin": Op(_torch_argx("argmin"), lambda t, a: t.argmin(a), ALL, grad=False),
    "any": Op(lambda t, a: t.any() if a is None else t.any(a), lambda t, a: t.any(a), ALL, grad=False),
    "all": Op(lambda t, a: t.all() if a is None else t.all(a), lambda t, a: t.all(a), ALL, grad=False),
    "logsumexp": Op(lambda t, a: torch.logsumexp(t, _dims(t, a)), lambda t, a: t.logsumexp(a), FLOATS),
    "softmax": Op(lambda t, a: t.softmax(-1), lambda t, a: t.softmax(-1), FLOATS, full=False),
    "log_softmax": Op(lambda t, a: t.log_softmax(-1), lambda t, a: t.log_softmax(-1), FLOATS, full=False),
    "cumsum": Op(lambda t, a: t.cumsum(-1), lambda t, a: t.cumsum(-1), ALL, signed_zero=True, full=False),
    "cumprod": Op(lambda t, a: t.cumprod(-1), lambda t, a: t.cumprod(-1), ALL, signed_zero=True, full=False),
    "cummax": Op(_torch_scan("cummax"), lambda t, a: t.cummax(-1), NUMERIC, grad=False, full=False),
    "logcumsumexp": Op(_torch_scan("logcumsumexp"), lambda t, a: t.logcumsumexp(-1), FLOATS, full=False),
}

# ----- documented differences: how the PyTorch reference is adapted (each rule is stated in the module it tests)


def _rows(a: np.ndarray, axis: Any) -> np.ndarray:
    """`a` (the reduced output) broadcast back over the input's reduced axis."""
    return a.reshape(-1, 1) if axis is not None else a.reshape(1, 1)


def _var_std_reference(name: str, array: np.ndarray, how: str, axis: Any, ref: np.ndarray, grad: Any) -> tuple:
    """var/std are computed in the input's float dtype (float32 for the half types; PyTorch's CPU kernel adds in
    float64), so squared deviations past float32's range give inf where PyTorch stays finite: the forward reference
    is numpy's float32 computation. The gradient is autograd's through ``sum((x - mean)**2)``, PyTorch's closed form
    where the variance is finite; a row whose variance is 0 gets 0 (std: PyTorch masks its root there too, but
    leaves NaN where x == mean); a row whose variance is not finite is not compared (NaN/inf in both, placed
    differently: the mean's term, analytically 0, is inf - inf here). Returns (forward, gradient, compared)."""
    view = _view(array, how)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a32 = view.astype(np.float32)
        fn = np.var if name == "var" else np.std
        fwd = np.asarray(fn(a32, axis=axis, ddof=1), dtype=np.float32).astype(ref.dtype).reshape(ref.shape)
        var = np.asarray(np.var(a32, axis=axis, ddof=1), dtype=np.float32)
    if grad is None:
        return fwd, None, None
    shape = view.shape

    def to_input(mask: np.ndarray) -> np.ndarray:
        mask = np.broadcast_to(_rows(mask, axis), shape)
        return mask.T if how == "transpose" else (mask.any(0, keepdims=True) if how == "expand" else mask)

    bad, zero = to_input(~np.isfinite(var)), to_input(var == 0)
    grad = np.where(zero & ~bad, 0.0, grad).astype(grad.dtype)
    return fwd, grad, ~bad


def _exact_logsumexp_grad(array: np.ndarray, axis: Any, cotangent: np.ndarray) -> np.ndarray:
    """The gradient of logsumexp is softmax(x) * cotangent. PyTorch computes ``exp(x - result)``, and for a row like
    ``[3e38, 3e38, ...]`` the result ``3e38 + log 2`` rounds to 3e38, giving 1 (not 0.5) at both maxima; tinycore's
    gradient (through the shifted sum) is the exact 0.5."""
    a = array.astype(np.float64)
    m = a.max(axis=axis, keepdims=True)
    e = np.exp(a - m)
    return (e / e.sum(axis=axis, keepdims=True) * _rows(cotangent, axis)).astype(np.float32)


# (op, dtype, kind, axis) -> reason: outcomes that differ from PyTorch and are not documented decisions; strict, so
# a fix elsewhere must remove its entry
_PROD_GRAD = (
    "groups holding inf or overflowing products: PyTorch's NaNs depend on its evaluation path (prod / x when the "
    "whole tensor has no zero, else prefix * suffix products in a fixed order); tinycore uses prod / x, or the "
    "product of the non-zero elements at a lone zero (tinycore/gradient.py)"
)
_LCSE = (
    "logcumsumexp's gradient where prefixes saturate float32 (max + log 2 rounds to max): PyTorch's backward takes "
    "exp(x - out) = 1 from the rounded output for every such prefix; tinycore gives each element its exact share "
    "(1/2, 1/3, ...) of the shifted sum"
)
XFAIL: dict[tuple[str, str, str, str], str] = {
    **{(op, F32, k, "last"): _PROD_GRAD for op in ("prod", "cumprod") for k in ("inf", "both_inf", "huge")},
    ("logcumsumexp", F32, "huge", "last"): _LCSE,
}


def _cases() -> list[Any]:
    cases = []
    for name, op in OPS.items():
        for dtype in op.dtypes:
            for kind in KINDS[dtype]:
                for axis in ("last", "all") if op.full else ("last",):
                    if axis == "all" and kind not in ("regular", "nan", "inf", "both_inf", "empty", "extremes"):
                        continue
                    marks = []
                    reason = XFAIL.get((name, dtype, kind, axis))
                    if reason is not None:
                        marks.append(pytest.mark.xfail(strict=True, reason=reason))
                    cases.append(pytest.param(name, dtype, kind, axis, id=f"{name}-{dtype}-{kind}-{axis}", marks=marks))
    return cases


def _compare(ours: np.ndarray, ref: np.ndarray, dtype: str, signed_zero: bool, what: str) -> None:
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != torch {ref.shape}"
    if ref.dtype == np.bool_ or np.issubdtype(ref.dtype, np.integer):
        np.testing.assert_array_equal(ours.astype(ref.dtype), ref, err_msg=what)
        return
    tol = 2e-3 if dtype == F16 else 1e-5
    ours64, ref64 = ours.astype(np.float64), ref.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(ours64), np.isnan(ref64), err_msg=f"{what}: NaN positions")
    np.testing.assert_array_equal(np.isposinf(ours64), np.isposinf(ref64), err_msg=f"{what}: +inf positions")
    np.testing.assert_array_equal(np.isneginf(ours64), np.isneginf(ref64), err_msg=f"{what}: -inf positions")
    np.testing.assert_allclose(ours64, ref64, rtol=tol, atol=tol * 0.1, err_msg=what)
    if signed_zero:
        zero = ref64 == 0
        np.testing.assert_array_equal(np.signbit(ours64[zero]), np.signbit(ref64[zero]), err_msg=f"{what}: zero sign")


@pytest.mark.parametrize(("name", "dtype", "kind", "axis"), _cases())
def test_reduction_special_values(name: str, dtype: str, kind: str, axis: str) -> None:
    op = OPS[name]
    array, how = KINDS[dtype][kind]
    array = array.astype(NP[dtype])
    ax = None if axis == "all" else -1
    want_grad = dtype == F32 and op.grad
    t_in = torch.tensor(array, dtype=TORCH[dtype], requires_grad=want_grad)
    x_in = Tensor(array, dtype=TINY[dtype], requires_grad=want_grad or None)
    t, x = _view(t_in, how), _view(x_in, how)
    assert tuple(x.shape) == tuple(t.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns on var/std with too few elements
        try:
            ref = op.torch_fn(t, ax)
        except (RuntimeError, IndexError) as error:
            with pytest.raises(type(error)):
                op.tiny_fn(x, ax).realize()
            return
    out = op.tiny_fn(x, ax)
    ours = out.numpy()
    ref_np = ref.detach().numpy()
    if name in ("argmax", "argmin"):
        assert out.dtype == dtypes.int32  # documented: PyTorch's are int64
        ref_np = ref_np.astype(np.int32)
    assert np.dtype(ours.dtype) == ref_np.dtype, f"dtype {ours.dtype} != torch {ref_np.dtype}"
    if name == "prod" and dtype == F16:
        # documented: half sums/products accumulate in float32 (PyTorch's fp16 product overflows on the way to an
        # exact 0 or a representable value): the reference is the float64 product, rounded to float16 once
        with np.errstate(all="ignore"):
            ref_np = np.prod(_view(array.astype(np.float64), how), axis=ax).astype(np.float16).reshape(ref_np.shape)
    grad_ref = None
    if want_grad and ref.numel():
        cotangent = np.random.default_rng(18).uniform(0.5, 1.5, ref_np.shape).astype(np.float32)
        grad_fn = op.torch_grad_fn or op.torch_fn
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # var/std with too few elements, again
            (grad_fn(_view(t_in, how), ax) * torch.tensor(cotangent)).sum().backward()
        grad_ref = t_in.grad.numpy()
        if name == "logsumexp" and kind == "huge":
            grad_ref = _exact_logsumexp_grad(array.astype(np.float64), ax, cotangent)
    compared = None
    if name in ("var", "std"):
        ref_np, grad_ref, compared = _var_std_reference(name, array, how, ax, ref_np, grad_ref)
    _compare(ours, ref_np, dtype, op.signed_zero, f"{name} forward")
    if grad_ref is None:
        return
    (out * Tensor(cotangent)).sum().backward()
    assert x_in.grad is not None, f"{name}: no gradient"
    grad = x_in.grad.numpy()
    if compared is not None:
        grad, grad_ref = np.where(compared, grad, 0.0), np.where(compared, grad_ref, 0.0)
    _compare(grad, grad_ref, dtype, False, f"{name} gradient")
