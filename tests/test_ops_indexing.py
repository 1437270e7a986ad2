"""Op parity with PyTorch for indexing: `__getitem__` (a broad generated table of index expressions, forward and
backward), `__setitem__`, `gather`, `scatter`, `scatter_reduce`, `masked_select`, and the errors users expect.

Tolerances: indexing moves values, so forward results must match exactly (``atol=0, rtol=0``); gradients add up
at most a few cotangents per element (duplicate indices), so they get ``atol=1e-6, rtol=1e-6``. `scatter_reduce`
"mean"/"prod" do arithmetic: ``atol=1e-6, rtol=1e-5`` (float32 rounding of a handful of operations).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from op_helpers import check_op, make_inputs, torch

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops

HAS_GRAD = hasattr(Tensor, "backward")
EXACT = {"atol": 0.0, "rtol": 0.0, "grad_atol": 1e-6, "grad_rtol": 1e-6, "forward_only": not HAS_GRAD}
ARITH = {"atol": 1e-6, "rtol": 1e-5, "forward_only": not HAS_GRAD}

SHAPE = (4, 5, 6)


# ---------------------------------------------------------------------------------------------------------------
# the index table: entries are built lazily per device (index tensors live on the device under test)


class Idx:
    """An integer index array used as a tensor index (tinycore Tensor / torch tensor) or, with `as_list`, a list."""

    def __init__(self, values: object, as_list: bool = False, dtype: object = np.int64) -> None:
        self.values = np.array(values, dtype=dtype)
        self.as_list = as_list
        self.py_scalar = isinstance(values, int)

    def tiny(self, device: str) -> object:
        if self.py_scalar:
            return Tensor(int(self.values), device=device)  # a 0-d index tensor (from a Python int)
        return self.values.tolist() if self.as_list else Tensor(self.values, device=device)

    def torch(self) -> object:
        return self.values.tolist() if self.as_list else torch.tensor(self.values)

    def __repr__(self) -> str:
        return f"{'list' if self.as_list else 'T'}{self.values.tolist()}"


def _tiny_index(index: tuple, device: str) -> tuple:
    return tuple(i.tiny(device) if isinstance(i, Idx) else i for i in index)


def _torch_index(index: tuple) -> tuple:
    return tuple(i.torch() if isinstance(i, Idx) else i for i in index)


HANDPICKED: list[tuple] = [
    (0,),
    (-1,),
    (3, -2, 5),
    (slice(None),),
    (slice(1, 3),),
    (slice(None, None, 2), slice(1, None, 3)),
    (slice(-3, None), 2),
    (slice(5, 1),),
    (slice(1, -1, 2), slice(None), slice(0, 6, 4)),
    (None,),
    (None, 1, None, slice(2, 4)),
    (Ellipsis,),
    (Ellipsis, 0),
    (1, Ellipsis, None),
    (Ellipsis, None, slice(None, None, 5)),
    (Idx([0, 2]),),
    (Idx([[0, 1], [3, 3]]),),
    (Idx([-1, 0, 0], as_list=True),),
    (slice(None), Idx([4, 0, 2])),
    (Idx([0, 3]), slice(None), Idx([5, 1])),
    (Idx([0, 3]), Idx([1, 4])),
    (Idx([[0], [2]]), Idx([1, 4, 0])),
    (0, slice(None), Idx([1, 2])),
    (
        slice(None),
        Idx([0]),
        0,
    ),
    (Idx([1]), 0, Idx([2])),
    (slice(None), Idx([0, 1]), None, Idx([1, 2])),
    (Ellipsis, Idx([0, 5, 5])),
    (None, Idx([1, 2]), Ellipsis, Idx([0, 1])),
    (Idx([2, 0]), slice(1, 4, 2), Idx([3, 3])),
    (Idx(np.zeros((0,), np.int64)),),
    (slice(None), Idx([True, False, True, False, True], as_list=True)),
    (Idx([1, 2, 3], dtype=np.int32), 1),
    (True,),
    (False, 0),
    (Idx(np.array(2)),),
    (Idx(2),),
    (slice(None), slice(None), Idx(list(range(6)) * 3)),
]

_POOL = [0, 2, -1, slice(None), slice(1, 4), slice(None, None, 2), slice(-2, None), slice(4, 0), None, Ellipsis,
         Idx([1, 0]), Idx([[2], [0]]), Idx([3, -1], as_list=True)]  # fmt: skip


def _generated(count: int, seed: int = 0) -> list[tuple]:
    """Random combinations of the pool that are valid for SHAPE (at most one Ellipsis, at most 3 dims used)."""
    rng = random.Random(seed)
    out: list[tuple] = []
    while len(out) < count:
        n = rng.randint(1, 4)
        index = tuple(rng.choice(_POOL) for _ in range(n))
        used = sum(1 for i in index if i is not None and i is not Ellipsis)
        if sum(1 for i in index if i is Ellipsis) > 1 or used > len(SHAPE) or index in out:
            continue
        # a pool int is in range for every dim of SHAPE except -1/2 on dim 0 (size 4 holds them too)
        out.append(index)
    return out


TABLE = HANDPICKED + _generated(40)


@pytest.mark.parametrize(
    "index", TABLE, ids=[repr(i.values[0] if isinstance(i, type(pytest.param(0))) else i) for i in TABLE]
)
def test_getitem_table(device: str, index: tuple) -> None:
    check_op(device, [SHAPE], lambda x: x[_torch_index(index)], lambda x: x[_tiny_index(index, device)], **EXACT)


@pytest.mark.parametrize("index", [(0,), (slice(None), Idx([1, 0, 1])), (Idx([[1, 1]]), slice(1, 3))], ids=repr)
@pytest.mark.parametrize("dtype", [np.int32, np.bool_])
def test_getitem_int_bool_data(device: str, index: tuple, dtype: type) -> None:
    check_op(device, [(3, 4)], lambda x: x[_torch_index(index)], lambda x: x[_tiny_index(index, device)],
             dtype=dtype, **EXACT)  # fmt: skip


@pytest.mark.parametrize(
    "index",
    [(slice(None, None, -1),), (slice(3, 0, -2),), (1, slice(None, None, -3)), (slice(-1, None, -1), None, 2),
     (Ellipsis, slice(4, None, -4)), (slice(None, None, -2), slice(1, 4), slice(None, None, -1))],
    ids=repr,
)  # fmt: skip
def test_getitem_negative_steps(device: str, index: tuple) -> None:
    """PyTorch rejects negative steps: the reference flips the dimension and uses the mirrored positive slice."""

    def torch_fn(x: object) -> object:
        dims, converted, d = [], [], 0
        rest = len(SHAPE) - sum(1 for i in index if i is not None and i is not Ellipsis)
        for item in index:
            if item is Ellipsis:
                converted.append(item)
                d += rest
            elif item is None:
                converted.append(item)
            elif isinstance(item, slice) and (item.step or 1) < 0:
                n = SHAPE[d]
                positions = list(range(*item.indices(n)))
                first, last = n - 1 - positions[0], n - 1 - positions[-1]
                converted.append(slice(first, last + 1, -item.step))
                dims.append(d)
                d += 1
            else:
                converted.append(item)
                d += 1
        return x.flip(dims)[tuple(converted)]

    check_op(device, [SHAPE], torch_fn, lambda x: x[index], **EXACT)
    np.testing.assert_array_equal(Tensor(np.arange(120).reshape(SHAPE), device=device)[index].numpy(),
                                  np.arange(120).reshape(SHAPE)[index])  # fmt: skip


def test_getitem_bool_masks(device: str) -> None:
    mask = make_inputs([SHAPE], np.bool_, seed=3)[0]
    check_op(device, [SHAPE], lambda x: x[torch.tensor(mask)], lambda x: x[Tensor(mask, device=device)], **EXACT)
    check_op(device, [SHAPE], lambda x: x[torch.tensor(mask[:, :, 0])],
             lambda x: x[Tensor(mask[:, :, 0], device=device)], **EXACT)  # fmt: skip
    check_op(device, [SHAPE], lambda x: x[1, torch.tensor(mask[0, :, 0])],
             lambda x: x[1, Tensor(mask[0, :, 0], device=device)], **EXACT)  # fmt: skip
    check_op(device, [SHAPE], lambda x: x[x > 0.5], lambda x: x[x > 0.5], **EXACT)
    check_op(device, [SHAPE], lambda x: x[x > 9], lambda x: x[x > 9], **EXACT)  # empty selection


def test_getitem_non_contiguous_and_broadcast(device: str) -> None:
    idx = np.array([[0], [2]])
    check_op(device, [(5, 4)], lambda x: x.T[torch.tensor(idx), 1:],
             lambda x: x.T[Tensor(idx, device=device), 1:], **EXACT)  # fmt: skip
    check_op(device, [(1, 4)], lambda x: x.expand(3, 4)[[2, 0], ::3], lambda x: x.expand(3, 4)[[2, 0], ::3], **EXACT)


def test_getitem_zero_size_and_one_element(device: str) -> None:
    check_op(device, [(0, 3)], lambda x: x[:, 1], **EXACT)
    check_op(device, [(0, 3)], lambda x: x[torch.tensor([], dtype=torch.int64)],
             lambda x: x[Tensor(np.zeros(0, np.int64), device=device)], **EXACT)  # fmt: skip
    check_op(device, [(1,)], lambda x: x[0], **EXACT)
    check_op(device, [(1, 1)], lambda x: x[[0, 0, 0]], **EXACT)


def test_getitem_large(device: str) -> None:
    """A larger one-hot gather: 100 lazy tensor indices into 300 rows (and the static path with a long list)."""
    idx = np.random.default_rng(5).integers(-300, 300, 100)
    check_op(device, [(300, 7)], lambda x: x[torch.tensor(idx)], lambda x: x[Tensor(idx, device=device)], **EXACT)
    check_op(device, [(300, 7)], lambda x: x[idx.tolist(), 2:], lambda x: x[idx.tolist(), 2:], **EXACT)


def test_getitem_tensor_index_is_lazy_and_fused(device: str) -> None:
    """Advanced indexing with a Tensor index builds a graph (nothing runs) that schedules as one kernel."""
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device).realize()
    idx = Tensor([2, 0, 2], device=device).realize()
    assert len((x[idx, 1:] * 2).schedule()) == 1
    out = x[idx, 1:] * 2
    assert out.uop.op is not Ops.BUFFER
    np.testing.assert_array_equal(out.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4)[[2, 0, 2], 1:] * 2)


def test_getitem_errors(device: str) -> None:
    x = Tensor.zeros(2, 3, device=device)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 1 with size 3"):
        x[0, 3]
    with pytest.raises(IndexError, match="index -3 is out of bounds for dimension 0 with size 2"):
        x[-3]
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 2"):
        x[[0, 5]]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError, match=r"could not be broadcast together with shapes \[2\], \[3\]"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match=r"The shape of the mask \[3\] at index 0 does not match"):
        x[Tensor([True, False, True], device=device)]
    with pytest.raises(IndexError, match="only integers, slices"):
        x["a"]
    with pytest.raises(IndexError, match="must be long, int, byte or bool"):
        x[Tensor([0.5], device=device)]
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        x[::0]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 0"):
        Tensor(1.0, device=device)[0]


# ---------------------------------------------------------------------------------------------------------------
# __setitem__ (compared with torch's in-place indexing, forward)

SET_CASES = [
    ((1,), 7.0),
    ((slice(None), 2), -1.0),
    ((slice(0, 3, 2), slice(None, None, 3)), "tensor_broadcast"),
    ((Ellipsis, -1), "tensor_full"),
    ((Idx([2, 0]), slice(1, 3)), "tensor_full"),
    ((Idx([0, 3]), Idx([1, 4])), 5.0),
    ((slice(None), Idx([True, False, True, False, True], as_list=True)), 0.5),
    ((None, 1, slice(1, None)), "tensor_full"),
    ((slice(5, 1),), 3.0),
]


@pytest.mark.parametrize("index,value", SET_CASES, ids=[repr(c) for c in SET_CASES])
def test_setitem(device: str, index: tuple, value: object) -> None:
    base = make_inputs([(4, 5)])[0]
    ours, ref = Tensor(base.copy(), device=device), torch.tensor(base.copy())
    shape = tuple(ref[_torch_index(index)].shape)
    if value == "tensor_full":
        v = make_inputs([shape], seed=2)[0]
    elif value == "tensor_broadcast":
        v = make_inputs([shape[-1:]], seed=2)[0]
    else:
        v = value
    ours[_tiny_index(index, device)] = Tensor(v, device=device) if isinstance(v, np.ndarray) else v
    ref[_torch_index(index)] = torch.tensor(v) if isinstance(v, np.ndarray) else v
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())


def test_setitem_negative_step_int_dtype_and_mask(device: str) -> None:
    base = np.arange(20, dtype=np.int32).reshape(4, 5)
    ours, ref = Tensor(base.copy(), device=device), base.copy()
    ours[::-2, 1] = Tensor([100, 200], device=device)
    ref[::-2, 1] = [100, 200]
    ours[ours > 15] = -1
    ref[ref > 15] = -1
    ours[0] = 2.7  # cast to the tensor's dtype (truncation)
    ref[0] = 2
    np.testing.assert_array_equal(ours.numpy(), ref)


def test_setitem_view_sees_write(device: str) -> None:
    t = Tensor(np.zeros((2, 3), np.float32), device=device)
    t[1] = 4.0
    t[0, 1:] = Tensor([1.0, 2.0], device=device)
    np.testing.assert_array_equal(t[1].numpy(), [4.0, 4.0, 4.0])
    np.testing.assert_array_equal(t.numpy(), [[0.0, 1.0, 2.0], [4.0, 4.0, 4.0]])


def test_setitem_errors(device: str) -> None:
    t = Tensor.zeros(2, 3, device=device).contiguous()
    with pytest.raises(RuntimeError, match=r"value tensor of shape \[2\] cannot be broadcast to indexing result"):
        t[0] = Tensor([1.0, 2.0], device=device)
    with pytest.raises(IndexError, match="out of bounds"):
        t[2] = 1.0


# ---------------------------------------------------------------------------------------------------------------
# gather / scatter / scatter_reduce / masked_select


def _index(shape: tuple[int, ...], high: int, seed: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high, shape).astype(np.int64)


GATHER_CASES = [((3, 4), 1, (3, 2)), ((3, 4), 0, (5, 4)), ((3, 4, 5), 2, (2, 3, 1)), ((3, 4, 5), -2, (3, 6, 5)),
                ((5,), 0, (8,)), ((3, 4), 1, (0, 2)), ((1, 1), 0, (1, 1))]  # fmt: skip


@pytest.mark.parametrize("shape,dim,ishape", GATHER_CASES, ids=repr)
def test_gather(device: str, shape: tuple[int, ...], dim: int, ishape: tuple[int, ...]) -> None:
    idx = _index(ishape, shape[dim])
    check_op(device, [shape], lambda x: x.gather(dim, torch.tensor(idx)),
             lambda x: x.gather(dim, Tensor(idx, device=device)), **EXACT)  # fmt: skip


def test_gather_int_non_contiguous_large(device: str) -> None:
    idx = _index((4, 3), 5)
    check_op(device, [(5, 4)], lambda x: x.T.gather(1, torch.tensor(idx)),
             lambda x: x.T.gather(1, Tensor(idx, device=device)), dtype=np.int32, **EXACT)  # fmt: skip
    big = _index((128, 40), 96, seed=9)
    check_op(device, [(128, 96)], lambda x: x.gather(1, torch.tensor(big)),
             lambda x: x.gather(1, Tensor(big, device=device)), **EXACT)  # fmt: skip


def _perm_index(shape: tuple[int, ...], dim: int, n: int, seed: int = 6) -> np.ndarray:
    """Index of `shape` whose entries along `dim` are distinct (scatter without reduce is defined only then)."""
    rng = np.random.default_rng(seed)
    moved = list(shape)
    moved[dim], moved[-1] = moved[-1], moved[dim]
    rows = [rng.permutation(n)[: moved[-1]] for _ in range(int(np.prod(moved[:-1])))]
    return np.array(rows, dtype=np.int64).reshape(moved).swapaxes(dim, -1)


@pytest.mark.parametrize("shape,dim,ishape", [((4, 5), 1, (3, 2)), ((4, 5), 0, (2, 5)), ((3, 4, 5), 2, (2, 2, 3))])
def test_scatter(device: str, shape: tuple[int, ...], dim: int, ishape: tuple[int, ...]) -> None:
    idx = _perm_index(ishape, dim, shape[dim])
    check_op(device, [shape, ishape], lambda x, s: x.scatter(dim, torch.tensor(idx), s),
             lambda x, s: x.scatter(dim, Tensor(idx, device=device), s), **EXACT)  # fmt: skip
    # a src larger than the index: PyTorch's ScatterBackward rejects its own gradient shape, so forward only
    src_shape = tuple(s + 1 for s in ishape)
    check_op(device, [shape, src_shape], lambda x, s: x.scatter(dim, torch.tensor(idx), s),
             lambda x, s: x.scatter(dim, Tensor(idx, device=device), s), **{**EXACT, "forward_only": True})  # fmt: skip


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter:UserWarning")
def test_scatter_scalar_and_int(device: str) -> None:
    idx = _perm_index((2, 3), 1, 4)
    check_op(device, [(3, 4)], lambda x: x.scatter(1, torch.tensor(idx), 9.5),
             lambda x: x.scatter(1, Tensor(idx, device=device), 9.5), **EXACT)  # fmt: skip
    check_op(device, [(3, 4), (2, 3)], lambda x, s: x.scatter(1, torch.tensor(idx), s),
             lambda x, s: x.scatter(1, Tensor(idx, device=device), s), dtype=np.int32, **EXACT)  # fmt: skip
    check_op(device, [(3, 4), (2, 3)], lambda x, s: x.scatter(1, torch.tensor(idx), s, reduce="add"),
             lambda x, s: x.scatter(1, Tensor(idx, device=device), s, reduce="add"),
             dtype=np.int32, **EXACT)  # fmt: skip


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce(device: str, reduce: str, include_self: bool) -> None:
    idx = _index((5, 3), 4)  # duplicates on purpose; row 4 of `self` (dim 0) is never hit
    check_op(device, [(5, 3), (5, 3)],
             lambda x, s: x.scatter_reduce(0, torch.tensor(idx), s, reduce, include_self=include_self),
             lambda x, s: x.scatter_reduce(0, Tensor(idx, device=device), s, reduce, include_self=include_self),
             low=0.5, high=2.0, **ARITH)  # fmt: skip


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_int(device: str, reduce: str) -> None:
    idx = _index((2, 6), 4, seed=8)
    for include_self in (True, False):
        check_op(device, [(3, 4), (2, 6)],
                 lambda x, s: x.scatter_reduce(1, torch.tensor(idx), s, reduce, include_self=include_self),  # noqa: B023
                 lambda x, s: x.scatter_reduce(1, Tensor(idx, device=device), s, reduce, include_self=include_self),  # noqa: B023
                 dtype=np.int32, low=-5, high=5, **EXACT)  # fmt: skip


@pytest.mark.parametrize("xshape,mshape", [((3, 4), (3, 4)), ((3, 4), (4,)), ((1, 4), (3, 1)), ((0, 2), (0, 2))])
def test_masked_select(device: str, xshape: tuple[int, ...], mshape: tuple[int, ...]) -> None:
    mask = make_inputs([mshape], np.bool_, seed=7)[0]
    check_op(device, [xshape], lambda x: x.masked_select(torch.tensor(mask)),
             lambda x: x.masked_select(Tensor(mask, device=device)), **EXACT)  # fmt: skip


def test_masked_select_int(device: str) -> None:
    mask = make_inputs([(3, 4)], np.bool_, seed=7)[0]
    check_op(device, [(3, 4)], lambda x: x.masked_select(torch.tensor(mask)),
             lambda x: x.masked_select(Tensor(mask, device=device)), dtype=np.int32, **EXACT)  # fmt: skip


def test_gather_scatter_errors(device: str) -> None:
    x = Tensor.zeros(2, 3, device=device)
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        x.gather(1, Tensor([0, 1], device=device))
    with pytest.raises(RuntimeError, match="Expected dtype int64 for index"):
        x.gather(1, Tensor([[0.0]], device=device))
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.gather(2, Tensor([[0]], device=device))
    with pytest.raises(RuntimeError, match="Size does not match at dimension 0"):
        x.gather(1, Tensor([[0], [0], [0]], device=device))
    with pytest.raises(RuntimeError, match="reduce argument must be either sum, prod, mean, amax or amin"):
        x.scatter_reduce(0, Tensor([[0]], device=device), x, "max")
    with pytest.raises(RuntimeError, match="masked_select: expected BoolTensor"):
        x.masked_select(Tensor([1, 0, 1], device=device))


def test_index_dtypes_agree(device: str) -> None:
    """Index dtypes int8..int64 and lists pick the same elements; the result keeps the data dtype."""
    data = Tensor(np.arange(10, dtype=np.int16), device=device)
    picks = [data[Tensor(np.array([7, 1, 7], dt), device=device)].numpy().tolist()
             for dt in (np.int8, np.int16, np.int32, np.int64)]  # fmt: skip
    assert picks == [[7, 1, 7]] * 4 and data[[7, 1, 7]].numpy().tolist() == [7, 1, 7]
    assert data[[7, 1]].dtype == dtypes.int16
