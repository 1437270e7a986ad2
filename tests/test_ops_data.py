"""`clone to_ float half int bool` and `tinycore.tensor._to_np_dtype`, against PyTorch's meaning of the same names."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore.dtype import dtypes
from tinycore.frontend.tensor import _to_np_dtype
from tinycore.tensor import Tensor

VALUES = [[-2.7, -0.5, 0.0], [0.49, 1.5, 300.25]]


@pytest.mark.parametrize("method", ["float", "half", "int", "bool"])
def test_cast_shorthands_match_torch(device: str, method: str):
    ours = getattr(Tensor(VALUES, device=device), method)()
    ref = getattr(torch.tensor(VALUES), method)()
    assert (
        ours.dtype
        == {"float": dtypes.float32, "half": dtypes.float16, "int": dtypes.int32, "bool": dtypes.bool}[method]
    )
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())


def test_clone_owns_its_buffer(device: str):
    source = Tensor([1.0, 2.0, 3.0], device=device).realize()
    copy = source.clone()
    copy.assign(Tensor([7.0, 8.0, 9.0], device=device)).realize()
    assert source.tolist() == [1.0, 2.0, 3.0] and copy.tolist() == [7.0, 8.0, 9.0]
    lazy = (source * 2).clone()  # a clone of an unrealized value
    assert lazy.tolist() == [2.0, 4.0, 6.0] and lazy.dtype == source.dtype and lazy.device == device


@pytest.mark.parametrize("shape", [(0,), (1,), (3, 4)])
def test_clone_passes_gradients_like_torch(device: str, shape):
    values = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 1.5
    ours = Tensor(values, device=device, requires_grad=True)
    ref = torch.tensor(values, requires_grad=True)
    (ours.clone() * ours).sum().backward()
    (ref.clone() * ref).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), ref.grad.numpy(), rtol=1e-6)


def test_assign_result_passes_gradient_to_the_value(device: str):
    value = Tensor([1.0, -2.0], device=device, requires_grad=True)
    target = Tensor.zeros(2, device=device).contiguous().realize()
    (target.assign(value * 3) * 2).sum().backward()
    assert value.grad.tolist() == [6.0, 6.0]


def test_to_in_place_moves_value_and_grad(device: str):
    other = "PYTHON:1"
    t = Tensor([1.0, 2.0], device=device, requires_grad=True)
    (t * t).sum().backward()
    assert t.to_(other) is t
    assert t.device == other and t.grad.device == other
    assert t.tolist() == [1.0, 2.0] and t.grad.tolist() == [2.0, 4.0]
    assert t.to_(other) is t and t.device == other  # already there: nothing changes


def test_to_np_dtype_follows_numpy_and_has_none_for_bfloat16():
    assert _to_np_dtype(dtypes.float16) == np.float16 and _to_np_dtype(dtypes.uint64) == np.uint64
    assert _to_np_dtype(dtypes.bool) == np.bool_ and _to_np_dtype(dtypes.bfloat16) is None


@pytest.mark.parametrize("shape", [(0,), (), (1,), (2, 3, 4)])
def test_size_queries_match_torch(device: str, shape):
    values = np.ones(shape, dtype=np.float16)
    ours, ref = Tensor(values, device=device), torch.tensor(values)
    assert (ours.ndim, ours.numel(), ours.element_size(), ours.nbytes()) == (
        ref.ndim,
        ref.numel(),
        ref.element_size(),
        ref.numel() * ref.element_size(),
    )


@pytest.mark.parametrize(("start", "end"), [(0, -1), (1, 2), (0, 0), (-2, -1)])
def test_flatten_matches_torch(device: str, start: int, end: int):
    values = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    ours = Tensor(values, device=device).flatten(start, end)
    ref = torch.tensor(values).flatten(start, end)
    assert ours.shape == tuple(ref.shape)
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())


@pytest.mark.parametrize(("source", "target"), [("float32", "int32"), ("int32", "float32"), ("float16", "int16")])
def test_bitcast_matches_torch_view(device: str, source: str, target: str):
    values = np.array([1.5, -2.0, 0.0, 3.25]).astype(source)
    ours = Tensor(values, device=device).bitcast(getattr(dtypes, target))
    np.testing.assert_array_equal(ours.numpy(), torch.tensor(values).view(getattr(torch, target)).numpy())
    with pytest.raises(TypeError, match="item size"):
        Tensor(values, device=device).bitcast(dtypes.int8)
