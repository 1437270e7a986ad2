"""Op parity of the reductions, scans and sorting (ReduceMixin and the core `sum/mean/softmax`) with PyTorch.

Documented dtype differences (see tinycore/frontend/reduce.py): integer sums/products/cumsums accumulate in int32
(PyTorch: int64) and arg indices are int32, so the PyTorch side casts before comparing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from op_helpers import check_op, torch

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

HAS_GRAD = hasattr(Tensor, "backward")
needs_grad = pytest.mark.skipif(not HAS_GRAD, reason="autograd (Tensor.backward, tinycore/gradient.py) not landed yet")
FWD = not HAS_GRAD

AXES = [None, 0, 1, -1, (0, 2)]


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean"])
def test_basic_reduce(device: str, name: str, axis, keepdim: bool) -> None:
    def torch_fn(x):
        if name in ("max", "min"):
            f = torch.amax if name == "max" else torch.amin
            return f(x, dim=() if axis is None else axis, keepdim=keepdim)
        if name == "prod":
            if axis is None:
                return x.prod().reshape((1, 1, 1) if keepdim else ())
            out = x
            for a in sorted([axis] if isinstance(axis, int) else list(axis), key=lambda a: -(a % 3)):
                out = out.prod(a, keepdim=True)
            return out if keepdim else out.squeeze(axis)
        return getattr(torch, name)(x, dim=axis, keepdim=keepdim)

    check_op(device, [(3, 4, 5)], torch_fn, lambda x: getattr(x, name)(axis, keepdim), atol=1e-6, rtol=1e-5,
             low=0.5 if name == "prod" else -2, forward_only=FWD)  # fmt: skip


@pytest.mark.parametrize("name", ["sum", "max", "min", "mean", "prod", "var", "std", "logsumexp"])
def test_reduce_non_contiguous(device: str, name: str) -> None:
    def view(t):
        return t.permute(1, 0, 2)[1:3]

    def torch_fn(x):
        v = view(x)
        if name in ("max", "min"):
            return (torch.amax if name == "max" else torch.amin)(v, dim=1)
        return getattr(torch, name)(v, 1)

    check_op(device, [(4, 3, 5)], torch_fn, lambda x: getattr(view(x), name)(1), atol=1e-6, rtol=1e-5, low=0.5,
             forward_only=FWD)  # fmt: skip


def test_reduce_large(device: str) -> None:
    """2**16 elements reduced along both axes."""
    check_op(device, [(256, 256)], lambda x: x.sum(0) + x.amax(1) + x.mean(1),
             lambda x: x.sum(0) + x.max(1) + x.mean(1), atol=1e-4, rtol=1e-5, forward_only=FWD)  # fmt: skip


def test_reduce_scalar_and_one(device: str) -> None:
    x = Tensor(2.5, device=device)
    assert x.sum().item() == 2.5 and x.max().item() == 2.5 and x.sum(0).shape == () and x.mean().item() == 2.5
    check_op(device, [(1,)], lambda t: t.sum(0) * t.amax(0), lambda t: t.sum(0) * t.max(0), forward_only=FWD)


def test_empty_reductions(device: str) -> None:
    """sum/prod/any/all/mean/logsumexp over nothing, and max/argmax raising like PyTorch."""
    e = np.zeros((0, 3), dtype=np.float32)
    check_op(device, None, lambda t: t.sum(0), lambda t: t.sum(0), values=[e], forward_only=True)
    check_op(device, None, lambda t: t.sum(), lambda t: t.sum(), values=[e], forward_only=True)
    check_op(device, None, lambda t: t.prod(0), lambda t: t.prod(0), values=[e], forward_only=True)
    check_op(device, None, lambda t: t.mean(0), lambda t: t.mean(0), values=[e], forward_only=True)
    check_op(device, None, lambda t: t.amax(1), lambda t: t.max(1), values=[e], forward_only=True)
    check_op(device, None, lambda t: torch.logsumexp(t, 0), lambda t: t.logsumexp(0), values=[e], forward_only=True)
    b = np.zeros((0, 2), dtype=np.bool_)
    check_op(device, None, lambda t: t.any(0), lambda t: t.any(0), values=[b])
    check_op(device, None, lambda t: t.all(0), lambda t: t.all(0), values=[b])
    t = Tensor.zeros(0, 3, device=device)
    with pytest.raises(RuntimeError, match=r"max\(\): Expected reduction dim to be specified"):
        t.max()
    with pytest.raises(IndexError, match="Expected reduction dim 0 to have non-zero size"):
        t.min(0)
    with pytest.raises(IndexError, match="argmax"):
        t.argmax(0)
    with pytest.raises(IndexError, match="argmin"):
        t.argmin()


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8, np.bool_], ids=str)
def test_int_reduce_dtypes(device: str, dtype: type) -> None:
    """Integer sums/products accumulate in int32 (uint32 for unsigned; tinygrad's rule), max/min keep the dtype."""
    acc = {np.int32: torch.int32, np.int8: torch.int32, np.uint8: torch.uint32, np.bool_: torch.int32}[dtype]
    check_op(device, [(3, 4)], lambda t: t.sum(1).to(acc), lambda t: t.sum(1), dtype=dtype, low=-50, high=50)
    check_op(device, [(3, 4)], lambda t: t.prod(0).to(acc), lambda t: t.prod(0), dtype=dtype, low=-5, high=5)
    check_op(device, [(3, 4)], lambda t: t.cumsum(1).to(acc), lambda t: t.cumsum(1), dtype=dtype, low=-50, high=50)
    check_op(device, [(3, 4)], lambda t: t.amax(1), lambda t: t.max(1), dtype=dtype, low=-128, high=127)
    check_op(device, [(3, 4)], lambda t: t.amin(0), lambda t: t.min(0), dtype=dtype, low=-128, high=127)
    check_op(device, [(3, 4)], lambda t: t.any(1), lambda t: t.any(1), dtype=dtype, low=0, high=1)
    check_op(device, [(3, 4)], lambda t: t.all(0), lambda t: t.all(0), dtype=dtype, low=0, high=1)
    if dtype != np.bool_:
        check_op(device, [(3, 4)], lambda t: t.float().mean(1), lambda t: t.mean(1), dtype=dtype, atol=1e-6)
        out = Tensor(np.ones((2, 2), dtype=dtype), device=device).mean()
        assert out.dtype == dtypes.float32
    assert Tensor([1, 2], dtype=dtypes.int64, device=device).sum().dtype == dtypes.int64


def test_int_min_extremes(device: str) -> None:
    """min of integers is ~max(~x): correct at the dtype's most negative value (where -x overflows)."""
    a = np.array([[-128, 127, 0], [5, -3, -128]], dtype=np.int8)
    check_op(device, None, lambda t: t.amin(1), lambda t: t.min(1), values=[a])


# ----- statistics


@pytest.mark.parametrize("correction", [0, 1, 2])
@pytest.mark.parametrize("axis", [None, 1, (0, 1)], ids=str)
def test_var_std(device: str, axis, correction: int) -> None:
    for name in ("var", "std"):
        check_op(device, [(4, 5, 3)], lambda t, n=name: getattr(torch, n)(t, dim=axis, correction=correction),
                 lambda t, n=name: getattr(t, n)(axis, correction=correction), atol=1e-6, rtol=1e-5,
                 forward_only=FWD)  # fmt: skip
    check_op(
        device,
        [(4, 5, 3)],
        lambda t: torch.var(t, dim=axis, correction=correction, keepdim=True),
        lambda t: t.var(axis, keepdim=True, correction=correction),
        atol=1e-6,
        rtol=1e-5,
        forward_only=True,
    )


def test_var_mean_std_mean(device: str) -> None:
    x = np.random.default_rng(1).uniform(-2, 2, (4, 6)).astype(np.float32)
    for ours_fn, torch_fn in ((Tensor.std_mean, torch.std_mean), (Tensor.var_mean, torch.var_mean)):
        a, b = ours_fn(Tensor(x, device=device), 1)
        ra, rb = torch_fn(torch.tensor(x), 1)
        np.testing.assert_allclose(a.numpy(), ra.numpy(), atol=1e-6, rtol=1e-5)
        np.testing.assert_allclose(b.numpy(), rb.numpy(), atol=1e-6, rtol=1e-5)


def test_var_too_few(device: str) -> None:
    """N - correction <= 0 gives inf (or NaN for 0/0) like PyTorch."""
    check_op(device, [(1, 3)], lambda t: t.var(0), lambda t: t.var(0), forward_only=True)
    check_op(device, [(2, 3)], lambda t: t.var(1, correction=3), lambda t: t.var(1, correction=3), forward_only=True)


@pytest.mark.parametrize("axis", [0, 1, -1, None], ids=str)
def test_logsumexp(device: str, axis) -> None:
    dim = tuple(range(2)) if axis is None else axis
    check_op(device, [(4, 6)], lambda t: torch.logsumexp(t, dim), lambda t: t.logsumexp(axis), atol=1e-6, rtol=1e-5,
             forward_only=FWD)  # fmt: skip
    big = np.array([[1000.0, 999.0, -math.inf], [-math.inf, -math.inf, -math.inf]], dtype=np.float32)
    check_op(device, None, lambda t: torch.logsumexp(t, 1), lambda t: t.logsumexp(1), values=[big], forward_only=True)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [0, -1])
def test_softmax(device: str, name: str, axis: int) -> None:
    ref, ours = getattr(torch, name), getattr(Tensor, name)
    check_op(device, [(4, 7)], lambda t: ref(t, axis), lambda t: ours(t, axis), atol=1e-6, rtol=1e-5, forward_only=FWD)
    big = np.array([[1000.0, 0.0, -1000.0]], dtype=np.float32)
    check_op(device, None, lambda t: ref(t, -1), lambda t: ours(t, -1), values=[big], atol=1e-6, rtol=1e-5,
             forward_only=FWD)  # fmt: skip


# ----- arg reductions


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("axis", [None, 0, 1, -1], ids=str)
def test_argmax_argmin(device: str, axis, keepdim: bool) -> None:
    for name in ("argmax", "argmin"):
        check_op(device, [(5, 7)], lambda t, n=name: getattr(torch, n)(t, axis, keepdim).int(),
                 lambda t, n=name: getattr(t, n)(axis, keepdim))  # fmt: skip
        check_op(device, [(5, 7)], lambda t, n=name: getattr(torch, n)(t, axis, keepdim).int(),
                 lambda t, n=name: getattr(t, n)(axis, keepdim), dtype=np.int32, low=-3, high=3)  # fmt: skip


def test_argmax_ties_nan_and_errors(device: str) -> None:
    """The first maximum wins; NaN counts as the maximum; bool input raises like PyTorch."""
    x = np.array([[1.0, 3.0, 3.0, 2.0], [math.nan, 1.0, math.nan, 0.0], [-1.0, -1.0, -1.0, -1.0]], dtype=np.float32)
    check_op(device, None, lambda t: torch.argmax(t, 1).int(), lambda t: t.argmax(1), values=[x])
    check_op(device, None, lambda t: torch.argmin(t, 1).int(), lambda t: t.argmin(1), values=[x[[0, 2]]])
    assert Tensor(x[0], device=device).argmax().item() == 1
    with pytest.raises(RuntimeError, match="bool"):
        Tensor([True, False], device=device).argmax()
    with pytest.raises(IndexError, match="Dimension out of range"):
        Tensor([1.0, 2.0], device=device).argmax(3)


# ----- scans


@pytest.mark.parametrize("n", [1, 7, 64, 200])
@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "logcumsumexp"])
def test_scans(device: str, name: str, n: int) -> None:
    """Lengths around the 64-element block: single block, exact block, several blocks plus padding."""
    torch_fn = {
        "cumsum": lambda t: torch.cumsum(t, 1),
        "cumprod": lambda t: torch.cumprod(t, 1),
        "cummax": lambda t: torch.cummax(t, 1).values,
        "logcumsumexp": lambda t: torch.logcumsumexp(t, 1),
    }[name]
    low, high = (0.9, 1.1) if name == "cumprod" else (-2, 2)
    check_op(device, [(2, n)], torch_fn, lambda t, n=name: getattr(t, n)(1), atol=1e-5, rtol=1e-5, low=low, high=high,
             forward_only=FWD)  # fmt: skip


def test_scan_axis0_non_contiguous(device: str) -> None:
    check_op(device, [(5, 9)], lambda t: torch.cumsum(t.T[2:], 0), lambda t: t.T[2:].cumsum(0), atol=1e-6,
             rtol=1e-5, forward_only=FWD)  # fmt: skip
    check_op(device, [(3, 70, 2)], lambda t: torch.cummax(t, 1).values, lambda t: t.cummax(1), forward_only=FWD)


def test_scan_odd_shapes(device: str) -> None:
    assert Tensor(3.0, device=device).cumsum().item() == 3.0
    check_op(device, [(0, 4)], lambda t: torch.cumsum(t, 0), lambda t: t.cumsum(0), forward_only=True)
    check_op(device, [(4, 0)], lambda t: torch.cumsum(t, 1), lambda t: t.cumsum(1), forward_only=True)
    check_op(device, [(1,)], lambda t: torch.cumprod(t, 0), lambda t: t.cumprod(0), forward_only=FWD)


def test_cumsum_large(device: str) -> None:
    """2**16 elements in one scan: blocked (64 * 64 * 16), never an n x n buffer. Integer-valued inputs make the
    forward exact; the gradient is a reversed running sum of 2**16 random float32 cotangents (partial sums up to
    ~40), whose rounding depends on the summation order: grad_atol 5e-4 (~ sqrt(2**16) * 40 * 2**-24 * 8)."""
    x = np.random.default_rng(2).integers(-3, 4, 1 << 16).astype(np.float32)
    check_op(device, None, lambda t: torch.cumsum(t, 0), lambda t: t.cumsum(0), values=[x], atol=0, rtol=0,
             grad_atol=5e-4, grad_rtol=0, forward_only=FWD)  # fmt: skip


# ----- sort / topk


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("shape,dim", [((13,), 0), ((3, 16), 1), ((5, 4), 0), ((2, 3, 9), 1), ((1,), 0)], ids=str)
def test_sort(device: str, shape, dim: int, descending: bool) -> None:
    check_op(device, [shape], lambda t: torch.sort(t, dim, descending).values,
             lambda t: t.sort(dim, descending)[0], atol=0, rtol=0, forward_only=FWD)  # fmt: skip
    check_op(device, [shape], lambda t: torch.sort(t, dim, descending).indices.int(),
             lambda t: t.sort(dim, descending)[1])  # fmt: skip


def test_sort_ties_nan_ints(device: str) -> None:
    """Stable on ties, NaN sorts last (first when descending), integer and bool dtypes."""
    x = np.array([3.0, math.nan, 1.0, 3.0, -math.inf, 1.0, math.inf, math.nan, 0.0], dtype=np.float32)
    for desc in (False, True):
        check_op(device, None, lambda t, d=desc: torch.sort(t, descending=d, stable=True).indices.int(),
                 lambda t, d=desc: t.sort(descending=d)[1], values=[x])  # fmt: skip
        check_op(device, None, lambda t, d=desc: torch.sort(t, descending=d, stable=True).values,
                 lambda t, d=desc: t.sort(descending=d)[0], values=[x], forward_only=True)  # fmt: skip
    for dtype in (np.int32, np.int8, np.uint8, np.bool_):
        check_op(device, [(2, 11)], lambda t: torch.sort(t, dim=1, stable=True).values, lambda t: t.sort(1)[0],
                 dtype=dtype, low=-4, high=4)  # fmt: skip
        check_op(device, [(2, 11)], lambda t: torch.sort(t, dim=1, descending=True, stable=True).indices.int(),
                 lambda t: t.sort(1, descending=True)[1], dtype=dtype, low=-4, high=4)  # fmt: skip


def test_sort_errors_and_odd(device: str) -> None:
    with pytest.raises(IndexError, match="Dimension out of range"):
        Tensor([1.0, 2.0], device=device).sort(2)
    v, i = Tensor(1.5, device=device).sort()
    assert v.item() == 1.5 and i.item() == 0 and i.dtype == dtypes.int32
    v, i = Tensor.zeros(0, 3, device=device).sort(0)
    assert v.shape == (0, 3) and i.shape == (0, 3)
    check_op(device, [(5, 4)], lambda t: torch.sort(t.T[1:], 1).values, lambda t: t.T[1:].sort(1)[0],
             forward_only=FWD)  # fmt: skip


def test_sort_large(device: str) -> None:
    """2**10 elements (a 55-stage bitonic network)."""
    x = np.random.default_rng(4).permutation(1000).astype(np.float32)
    check_op(device, None, lambda t: torch.sort(t).values, lambda t: t.sort()[0], values=[x], atol=0, rtol=0,
             forward_only=FWD)  # fmt: skip


@pytest.mark.parametrize("largest", [True, False])
def test_topk(device: str, largest: bool) -> None:
    check_op(device, [(4, 10)], lambda t: torch.topk(t, 3, 1, largest).values, lambda t: t.topk(3, 1, largest)[0],
             atol=0, rtol=0, forward_only=FWD)  # fmt: skip
    check_op(device, [(4, 10)], lambda t: torch.topk(t, 3, 0, largest).indices.int(),
             lambda t: t.topk(3, 0, largest)[1])  # fmt: skip
    with pytest.raises(RuntimeError, match="out of range"):
        Tensor([1.0, 2.0], device=device).topk(3)
