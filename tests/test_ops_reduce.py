"""Op parity of the reductions, scans and sorting (ReduceMixin and the core `sum/mean/softmax`) with PyTorch.

Documented dtype differences (see tinycore/frontend/reduce.py): arg indices are int32 (PyTorch: int64), so the
PyTorch side casts before comparing. Integer sums/products/cumsums give int64 like PyTorch.
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
    """Integer sums/products accumulate in and return int64 like PyTorch (issue 18), max/min keep the dtype."""
    check_op(device, [(3, 4)], lambda t: t.sum(1), lambda t: t.sum(1), dtype=dtype, low=-50, high=50)
    check_op(device, [(3, 4)], lambda t: t.prod(0), lambda t: t.prod(0), dtype=dtype, low=-5, high=5)
    check_op(device, [(3, 4)], lambda t: t.cumsum(1), lambda t: t.cumsum(1), dtype=dtype, low=-50, high=50)
    check_op(device, [(3, 4)], lambda t: t.cumprod(1), lambda t: t.cumprod(1), dtype=dtype, low=-5, high=5)
    for op in ("sum", "prod", "cumsum", "cumprod"):
        assert getattr(Tensor(np.ones((2, 2), dtype=dtype), device=device), op)().dtype == dtypes.int64, op
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


# ----- issue 18: silently wrong reductions (integer wrap, fp16 mean overflow, float32 sums stalling at 2**24)


@pytest.mark.parametrize(
    "dtype", [dtypes.int32, dtypes.uint32, dtypes.int8, dtypes.int16, dtypes.uint8, dtypes.uint16, dtypes.bool], ids=str
)
def test_int_sum_does_not_wrap(device: str, dtype) -> None:
    """Integer sums, products and scans are int64 like PyTorch: past 32 bits they don't wrap (tinygrad's int32
    accumulator gave ``Tensor([2**31 - 1, 1]).sum() == -2**31``; uint32's wrapped at 2**32)."""
    big = {dtypes.int32: 2**31 - 1, dtypes.uint32: 2**32 - 1}.get(dtype, int(dtypes.max(dtype)))
    x = Tensor([big, big, 1], dtype=dtype, device=device)
    for op in ("sum", "prod", "cumsum", "cumprod"):
        assert getattr(x, op)().dtype == dtypes.int64, op
    assert x.sum().item() == 2 * big + 1 and x.cumsum().tolist() == [big, 2 * big, 2 * big + 1]
    if dtype != dtypes.bool:
        y = Tensor([big, 3, 2], dtype=dtype, device=device)
        assert y.prod().item() == 6 * big and y.cumprod().tolist() == [big, 3 * big, 6 * big]
    assert x.reshape(1, 3).sum(1, keepdim=True).tolist() == [[2 * big + 1]]
    m = x.mean()
    assert m.dtype == dtypes.float32 and m.item() == pytest.approx((2 * big + 1) / 3, rel=1e-7)
    if dtype in (dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.bool):  # numpy/torch-backed dtypes
        a = np.array([big, big, 1], dtype=np.dtype(dtype.fmt) if dtype != dtypes.bool else np.bool_)
        check_op(device, None, lambda t: t.sum(), lambda t: t.sum(), values=[a])
        check_op(device, None, lambda t: t.cumsum(0), lambda t: t.cumsum(0), values=[a])


def test_int_internal_sums_keep_int32(device: str) -> None:
    """matmul/einsum/conv2d/multinomial of int32 inputs still give int32 (their sums accumulate in int32: the low
    bits an int64 sum would give, without 64-bit math), matching PyTorch's int32 matmul/einsum."""
    a = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
    b = np.arange(8, dtype=np.int32).reshape(4, 2) * 3 - 7
    check_op(device, None, torch.matmul, Tensor.matmul, values=[a, b])
    check_op(device, None, lambda x, y: torch.einsum("ij,jk->ik", x, y), lambda x, y: Tensor.einsum("ij,jk->ik", x, y),
             values=[a, b])  # fmt: skip
    w = Tensor(np.ones((1, 1, 2, 2), dtype=np.int32), device=device)
    assert Tensor(a.reshape(1, 1, 3, 4), device=device).conv2d(w).dtype == dtypes.int32
    assert Tensor([0.2, 0.8], device=device).multinomial(3, replacement=True).dtype == dtypes.int32


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_half_mean_var_std_accumulate_in_float32(device: str, dtype) -> None:
    """Like PyTorch, float16/bfloat16 mean/var/std add and divide in float32 before the cast back: 70000 fp16 ones
    have mean 1 (was inf: the total 70000 was cast to fp16 first); their fp16 sum is inf, as in PyTorch."""
    tdt = torch.float16 if dtype == dtypes.float16 else torch.bfloat16
    ones = Tensor.ones(70000, dtype=dtype, device=device)
    assert ones.mean().dtype == dtype and ones.mean().item() == 1.0
    # torch 2.13 adds in float32 and rounds once (bfloat16: 70144); older CPU builds (2.11) round partial sums
    # (69632), so the reference is the float32 total rounded to the dtype
    assert ones.sum().dtype == dtype and ones.sum().item() == torch.ones(70000).sum().to(tdt).item()
    alt = np.tile(np.array([0.0, 10.0], dtype=np.float32), 35000)
    x, t = Tensor(alt, device=device).cast(dtype), torch.tensor(alt).to(tdt)
    for name in ("mean", "var", "std"):
        ours, ref = getattr(x, name)(), getattr(t, name)()
        assert ours.dtype == dtype and ours.item() == ref.item(), name
    assert x.reshape(2, 35000).mean(1).tolist() == t.reshape(2, 35000).mean(1).tolist()
    assert x.reshape(2, 35000).var(1, keepdim=True).tolist() == t.reshape(2, 35000).var(1, keepdim=True).tolist()


_CASCADE_CASES = [
    ((1000,), None, False),
    ((3, 333), 1, False),
    ((333, 3), 0, True),
    ((5, 7, 30), (0, 2), True),
    ((37, 29), None, True),
    ((4, 6, 50), (1, 2), False),
]


@pytest.mark.parametrize("name", ["sum", "mean"])
@pytest.mark.parametrize("case", _CASCADE_CASES, ids=str)
def test_cascade_sum_matches_reference(device: str, monkeypatch: pytest.MonkeyPatch, name: str, case) -> None:
    """The staged sum (thresholds shrunk so small shapes take every path: full and partial reductions, a reduced
    axis that isn't last, keepdim, chunk remainders) gives PyTorch's values and gradients."""
    import tinycore.frontend.reduce as reduce_mod

    for attr, value in (("_CASCADE_MIN", 40), ("_CASCADE_ALWAYS", 40), ("_CASCADE_CHUNK", 8), ("_CASCADE_TOP", 4)):
        monkeypatch.setattr(reduce_mod, attr, value)
    monkeypatch.setattr(reduce_mod, "_CASCADE_GROUPS", 2)
    shape, axis, keepdim = case

    def torch_fn(t):
        dims = tuple(range(t.ndim)) if axis is None else axis
        return getattr(t, name)(dims, keepdim)

    check_op(device, [shape], torch_fn, lambda t: getattr(t, name)(axis, keepdim), atol=1e-5, forward_only=FWD)


def test_cascade_sum_of_broadcast_constant(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import tinycore.frontend.reduce as reduce_mod

    for attr, value in (("_CASCADE_MIN", 40), ("_CASCADE_ALWAYS", 40), ("_CASCADE_CHUNK", 8), ("_CASCADE_TOP", 4)):
        monkeypatch.setattr(reduce_mod, attr, value)
    ones = Tensor.ones(5, 1, device=device).expand(5, 1001)  # a broadcast constant: no buffer
    assert ones.sum(1).tolist() == [1001.0] * 5 and ones.sum().item() == 5005.0
    assert Tensor.ones(100, dtype=dtypes.float16, device=device).sum().item() == 100.0


def test_sum_16m_keeps_its_kernels() -> None:
    """The `sum 16M` benchmark's full reduction of 2**24 floats keeps `_reduce`'s two kernels (64 partial sums,
    then their total); sizes that don't split into 64 even parts, or above 2**24, are cascaded."""
    assert len(Tensor.empty(2**24).sum().schedule()) == 2
    assert len(Tensor.empty(2**20).sum().schedule()) == 2
    # cascaded: totals of 4096-element chunks first (a multiple of 16 of them; the rest is added in the last kernel)
    assert [item.bufs[0].size for item in Tensor.empty(2**24 - 5).sum().schedule()] == [4080, 1]
    assert [item.bufs[0].size for item in Tensor.empty(2**24 + 64).sum().schedule()] == [4096, 1]
    # above 4096 chunks, their totals are summed in 4096-element chunks again: 2**26 in three kernels
    assert [item.bufs[0].size for item in Tensor.empty(2**26).sum().schedule()] == [16384, 4, 1]
    assert len(Tensor.empty(4096, 4096).sum(1).schedule()) == 1
    assert len(Tensor.empty(3, 2**19).sum(1).schedule()) == 1


def test_large_float_sum_is_accurate() -> None:
    """2**25 + 12345 uniform [0, 1) float32 values: within 1e-6 relative of the float64 total (one float32
    accumulator per output, as before the cascade, was off by ~3e-4; a sequential float32 sum by ~3e-5). The mean
    and an axis sum of two such rows too. Default device (CLANG where present): 128 MiB, ~0.5 s."""
    n = 2**25 + 12345
    a = np.random.default_rng(18).random(n, dtype=np.float32)
    ref = a.astype(np.float64).sum()
    x = Tensor(a)
    assert x.sum().item() == pytest.approx(ref, rel=1e-6)
    assert x.mean().item() == pytest.approx(ref / n, rel=1e-6)
    rows = x.shrink(((0, 2 * (n // 2)),)).reshape(2, n // 2).sum(1).numpy()
    np.testing.assert_allclose(rows, a[: 2 * (n // 2)].reshape(2, -1).astype(np.float64).sum(1), rtol=1e-6)


def test_huge_constant_sum_is_exact() -> None:
    """``ones(10**10).sum()`` is 1e10 like PyTorch (was 4294967296: float32 partial sums stuck at 2**24), without
    allocating 40 GB (the broadcast constant stays a constant) and with indices past 2**31; so are the mean (was
    0.2147...) and an axis sum of two 3e9-element rows (was 67108864 each)."""
    assert Tensor.ones(10**10).sum().item() == 1e10
    assert Tensor.full((10**10,), 0.5).mean().item() == 0.5
    assert Tensor.ones(2, 3 * 10**9).sum(1).tolist() == [3e9, 3e9]


@pytest.mark.parametrize("n", [5, 64, 65, 200, 5000])
def test_logcumsumexp_shifts_each_prefix_by_its_own_max(n: int) -> None:
    # an element ~300 below a later maximum still counts in the prefixes before that maximum (a shift by the row's
    # max would make them -inf); long rows cross the 64-element blocks and their combining step
    rng = np.random.default_rng(n)
    a = (rng.standard_normal((2, n)) * 50).astype(np.float32)
    a[:, 0], a[:, -1] = -300.0, 300.0
    t, tt = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    out, ref = t.logcumsumexp(1), torch.logcumsumexp(tt, 1)
    out.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-6, atol=2e-5)
    assert np.isfinite(out.numpy()).all()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=2e-5, atol=1e-3)
