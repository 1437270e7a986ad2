"""Tensors whose shape holds a bound `Variable` realize into buffers sized by the variable's maximum, and one cached
schedule serves every value in range (the bound value reaches the kernels as a DEFINE_VAR argument).

A realized symbolic tensor is a view ``BUFFER(max size) -> SHRINK(0, numel) -> RESHAPE(shape)`` with this call's
binding; `reshape` it to the concrete shape to read it with `numpy()`.
"""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.dtype import dtypes
from tinycore.engine.realized import buffer_of
from tinycore.engine.schedule_cache import clear_schedule_cache, schedule_stats
from tinycore.engine.views import view_base
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops, Variable

VALUES = (3, 7, 1, 10, 5)


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _buffer_size(t: Tensor) -> int:
    return buffer_of(view_base(t.uop)).size


def test_symbolic_output_is_sized_by_the_maximum_and_cached(device: str) -> None:
    a = _data(4, 10)
    x = Tensor(a, device=device).realize()
    clear_schedule_cache()
    misses = []
    for value in VALUES:
        n = Variable("n", 1, 10).bind(value)
        schedule_stats.reset()
        y = (x.shrink(((0, 4), (0, n))) * 2 + 1).realize()
        misses.append(schedule_stats.misses)
        assert y.shape[1] is n  # the tensor keeps its symbolic shape
        assert _buffer_size(y) == 40  # 4 x max(n)
        np.testing.assert_allclose(y.reshape(4, value).numpy(), a[:, :value] * 2 + 1, rtol=1e-6)
    assert misses == [1] + [0] * (len(VALUES) - 1)  # one schedule serves every value


def test_realized_symbolic_tensor_feeds_later_kernels(device: str) -> None:
    a = _data(4, 10, seed=1)
    x = Tensor(a, device=device).realize()
    for value in VALUES:
        n = Variable("n", 1, 10).bind(value)
        y = (x.shrink(((0, 4), (0, n))).exp()).realize()
        want = np.exp(a[:, :value])
        rows = y.sum(1)  # reduce over the symbolic axis: concrete result
        assert rows.shape == (4,)
        np.testing.assert_allclose(rows.numpy().reshape(4), want.sum(1), rtol=1e-5)
        cols = y.max(0).realize()  # symbolic again: (n,)
        assert _buffer_size(cols) == 10
        np.testing.assert_allclose(cols.reshape(value).numpy(), want.max(0), rtol=1e-6)
        scaled = (y * y.sum(1, keepdim=True)).realize()  # a reduce broadcast back over the symbolic axis
        np.testing.assert_allclose(scaled.reshape(4, value).numpy(), want * want.sum(1, keepdims=True), rtol=1e-5)


def test_symbolic_leading_axis_and_1d(device: str) -> None:
    a = _data(10, 3, seed=2)
    x = Tensor(a, device=device).realize()
    for value in (2, 9):
        n = Variable("rows", 1, 10).bind(value)
        y = (x.shrink(((0, n), (0, 3))) - 1).realize()
        assert _buffer_size(y) == 30
        np.testing.assert_allclose(y.reshape(value, 3).numpy(), a[:value] - 1, rtol=1e-6)
        flat = (x.reshape(30).shrink(((0, n),)) * 3).realize()
        assert _buffer_size(flat) == 10
        np.testing.assert_allclose(flat.reshape(value).numpy(), a.reshape(30)[:value] * 3, rtol=1e-6)


def test_internal_symbolic_buffer_and_memory_plan(device: str) -> None:
    a = _data(6, 8, seed=3)
    x = Tensor(a, device=device).realize()
    for value in (8, 3):
        n = Variable("n", 1, 8).bind(value)
        part = x.shrink(((0, 6), (0, n)))
        mid = (part * 2).contiguous()  # an internal buffer of symbolic shape, planned at its maximum
        out = (mid + mid.max(1, keepdim=True)).sum(1).realize()
        want = (a[:, :value] * 2 + (a[:, :value] * 2).max(1, keepdims=True)).sum(1)
        np.testing.assert_allclose(out.numpy().reshape(6), want, rtol=1e-5)


def test_symbolic_kernel_takes_the_variable_not_its_value() -> None:
    x = Tensor(_data(4, 10, seed=4), device="PYTHON").realize()
    n = Variable("n", 1, 10).bind(6)
    items, var_vals = (x.shrink(((0, 4), (0, n))) + 1).schedule_with_vars()
    assert var_vals == {"n": 6} and len(items) == 1
    assert {v.op for v in items[0].ast.vars()} == {Ops.DEFINE_VAR}  # unbound: the value is a kernel argument
    assert items[0].outputs[0].size == 40


def test_symbolic_int_dtype_values(device: str) -> None:
    x = Tensor.arange(12, device=device, dtype=dtypes.int32).reshape(3, 4).realize()
    for value in (1, 4, 2):
        n = Variable("k", 1, 4).bind(value)
        y = (x.shrink(((0, 3), (0, n))) * 10).realize()
        np.testing.assert_array_equal(y.reshape(3, value).numpy(), np.arange(12).reshape(3, 4)[:, :value] * 10)


def test_numpy_of_a_symbolic_shape_reads_at_the_bound_values_and_asks_for_them_otherwise() -> None:
    data = _data(4, 10, seed=5)
    x = Tensor(data, device="PYTHON").realize()
    y = x.shrink(((0, 4), (0, Variable("n", 1, 10).bind(2)))) + 1
    np.testing.assert_allclose(y.numpy(), data[:, :2] + 1)
    unbound = x.shrink(((0, 4), (0, Variable("n", 1, 10)))) + 1
    with pytest.raises(ValueError, match="concrete shape or bound variables"):
        unbound.numpy()
