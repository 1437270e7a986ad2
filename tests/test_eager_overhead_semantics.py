"""Semantics kept by the eager fast paths: schedule-cache hits on the same graph shape never serve a wrong schedule
(buffer identity and aliasing, dtypes, shapes, devices, variable bindings, scalar operands, assign order), the
direct kernel launch updates the counters like an `ExecItem`, `requires_grad` propagates as in tinygrad 0.11, and
rounding ops have PyTorch's zero gradient. Values are compared with numpy and torch; nothing here is timed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore.dtype import dtypes
from tinycore.engine import realize as realize_module
from tinycore.engine.schedule_cache import schedule_stats
from tinycore.helpers import GlobalCounters
from tinycore.tensor import Tensor
from tinycore.uop.ops import Variable


def arr(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


# ---------------------------------------------------------------------------------------------------------------
# schedule-cache hits in an eager loop


def test_same_graph_on_different_inputs_reads_each_input(device: str) -> None:
    inputs = [Tensor(arr(i, i + 1, i + 2), device=device) for i in range(4)]
    schedule_stats.reset()
    outs = [(x * 2 + 1).realize() for x in inputs]
    assert schedule_stats.hits >= 3  # one graph shape: later realizes are cache hits
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out.numpy(), arr(i, i + 1, i + 2) * 2 + 1)


def test_aliasing_is_part_of_the_key(device: str) -> None:
    a, b = Tensor(arr(1, 2), device=device), Tensor(arr(10, 20), device=device)
    np.testing.assert_array_equal((a + b).realize().numpy(), arr(11, 22))
    np.testing.assert_array_equal((a + a).realize().numpy(), arr(2, 4))  # a hit here would read b's buffer
    np.testing.assert_array_equal((b + a).realize().numpy(), arr(11, 22))
    np.testing.assert_array_equal((a - b).realize().numpy(), arr(-9, -18))
    np.testing.assert_array_equal((b - a).realize().numpy(), arr(9, 18))  # operand order survives the fast path


def test_dtype_and_shape_are_part_of_the_key(device: str) -> None:
    f = Tensor(arr(1.5, 2.5), device=device)
    i = Tensor(np.array([1, 2], np.int32), device=device)
    assert (f + 1).realize().tolist() == [2.5, 3.5]
    out = (i + 1).realize()
    assert out.dtype == dtypes.int32 and out.tolist() == [2, 3]
    promoted = (i + 1.5).realize()  # an int tensor and a float scalar: promoted, not served the int kernel
    assert promoted.dtype == dtypes.default_float and promoted.tolist() == [2.5, 3.5]
    whole = (i + 1.0).realize()  # 1.0 == 1 as Python values: the operand's type must be part of the lookup
    assert whole.dtype == dtypes.default_float and whole.tolist() == [2.0, 3.0]
    wide = Tensor(arr(1, 2, 3, 4), device=device)
    assert (wide + 1).realize().tolist() == [2.0, 3.0, 4.0, 5.0]
    square = Tensor(np.arange(4, dtype=np.float32).reshape(2, 2), device=device)
    assert (square + 1).realize().tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_scalar_operands_keep_type_sign_and_value(device: str) -> None:
    x = Tensor(arr(-1.0, 2.0), device=device)
    for _ in range(2):  # the second round takes the cached scalar operands
        assert np.signbit((x * 0.0).numpy()).tolist() == [True, False]
        assert np.signbit((x * -0.0).numpy()).tolist() == [False, True]
        assert (x * 3).tolist() == [-3.0, 6.0] and (x * 3.5).tolist() == [-3.5, 7.0]
        assert (2 - x).tolist() == [3.0, 0.0] and (x - 2).tolist() == [-3.0, 0.0]
        assert (x < 0).dtype == dtypes.bool and (x < 0).tolist() == [True, False]
    b = Tensor([True, False], device=device)
    assert (b * True).dtype == dtypes.bool and (b + 1).dtype == dtypes.int32


def test_devices_are_part_of_the_key() -> None:
    x0, x1 = Tensor(arr(1, 2), device="PYTHON"), Tensor(arr(5, 6), device="PYTHON:1")
    assert (x0 + 1).realize().tolist() == [2.0, 3.0]
    out = (x1 + 1).realize()
    assert out.device == "PYTHON:1" and out.tolist() == [6.0, 7.0]
    with pytest.raises(RuntimeError, match="same device"):
        x0 + x1


def test_variable_bindings_change_per_call(device: str) -> None:
    v = Variable("n", 1, 10)
    x = Tensor(arr(1, 2, 3), device=device)
    for n in (3, 7, 3):
        out = (x + Tensor(v.bind(n), device=device).cast(dtypes.float)).realize()
        np.testing.assert_array_equal(out.numpy(), arr(1, 2, 3) + n)


def test_assign_in_an_eager_loop_reads_the_new_contents(device: str) -> None:
    a = Tensor(arr(1, 2), device=device).realize()
    seen = []
    for _ in range(3):
        before = (a * 10).realize()  # computed from the contents before the assign below
        a.assign(a + 1).realize()
        seen.append((before.tolist(), a.tolist()))
    assert seen == [([10.0, 20.0], [2.0, 3.0]), ([20.0, 30.0], [3.0, 4.0]), ([30.0, 40.0], [4.0, 5.0])]


def test_one_buffer_behind_two_uops_is_one_slot(device: str) -> None:
    n = 256  # long enough that an in-place flip on a compiled device overwrites elements it has yet to read
    values = np.arange(n, dtype=np.float32)
    c, d = Tensor(values, device=device).realize(), Tensor(values + 5, device=device).realize()
    c.assign(d.flip(0)).realize()  # distinct buffers: the cached schedule writes c in place
    np.testing.assert_array_equal(c.numpy(), (values + 5)[::-1])
    a = Tensor(values, device=device).realize()
    old = a.flip(0)  # built on a's first BUFFER uop
    a.assign(a + 0).realize()  # a now holds a fresh BUFFER uop on the same Buffer
    a.assign(old).realize()  # reads and writes one buffer through two uops: must not reuse the in-place schedule
    np.testing.assert_array_equal(a.numpy(), values[::-1])


def test_each_realize_gets_its_own_output_buffer(device: str) -> None:
    x = Tensor(arr(1, 2), device=device)
    first = (x + 1).realize()
    second = (x + 1).realize()
    second.assign(Tensor(arr(7, 7), device=device)).realize()
    assert first.tolist() == [2.0, 3.0] and second.tolist() == [7.0, 7.0]


def test_direct_launch_updates_counters_like_an_exec_item(device: str) -> None:
    x = Tensor(arr(1, 2, 3, 4), device=device).realize()
    (x + 1).realize()
    GlobalCounters.reset()
    hits = realize_module.runner_cache_info()["hits"]
    for _ in range(3):
        (x + 1).realize()
    assert GlobalCounters.kernel_count == 3
    assert GlobalCounters.global_mem > 0 and GlobalCounters.global_ops > 0
    assert realize_module.runner_cache_info()["hits"] == hits + 3


def test_multi_kernel_schedule_in_an_eager_loop(device: str) -> None:
    values = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    x = Tensor(values, device=device).realize()
    expected = torch.softmax(torch.tensor(values), dim=0).numpy()
    kernels = []
    for _ in range(3):  # the first realize builds the kernels, the others launch the cached list
        GlobalCounters.reset()
        out = x.softmax(0).realize()  # over the first axis: several kernels on every device (no row fusion)
        kernels.append(GlobalCounters.kernel_count)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-7)
    assert kernels[0] >= 2 and kernels == [kernels[0]] * 3


def test_cleared_runner_cache_builds_the_kernel_again(device: str) -> None:
    x = Tensor(arr(1, 2), device=device)
    assert (x * 5).tolist() == [5.0, 10.0]
    realize_module.clear_runner_cache()
    assert (x * 5).tolist() == [5.0, 10.0]
    assert realize_module.runner_cache_info()["misses"] == 1


# ---------------------------------------------------------------------------------------------------------------
# requires_grad propagation (tinygrad 0.11: True if any input is True, else None if any is None, else False)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [((None, None), None), ((True, None), True), ((False, True), True), ((False, None), None), ((False, False), False)],
)
def test_requires_grad_of_binary_ops(flags: tuple, expected: bool | None) -> None:
    a = Tensor(arr(1, 2), requires_grad=flags[0])
    b = Tensor(arr(3, 4), requires_grad=flags[1])
    for out in (a + b, a * b, a / b, a < b, a.maximum(b), (a > 0).where(a, b), b - a):
        assert out.requires_grad is expected


@pytest.mark.parametrize("flag", [None, True, False])
def test_requires_grad_of_unary_movement_and_reduce_ops(flag: bool | None) -> None:
    x = Tensor(np.ones((2, 3), np.float32), requires_grad=flag)
    outs = [x * 2, 2 * x, x.exp(), x.cast(dtypes.float16), x.reshape(3, 2), x.permute(1, 0), x.sum(1), x.max()]
    outs += [x.pad(((1, 0), (0, 1))), x.shrink(((0, 1), None)), x.flip(0), x.expand(4, 2, 3), x.contiguous()]
    assert [t.requires_grad for t in outs] == [flag] * len(outs)
    assert x.detach().requires_grad is False


def test_requires_grad_matches_torch_for_a_small_model() -> None:
    w, x = Tensor(arr(1, 2), requires_grad=True), Tensor(arr(3, 4))
    tw, tx = torch.tensor(arr(1, 2), requires_grad=True), torch.tensor(arr(3, 4))
    hidden, t_hidden = (x * w).relu(), (tx * tw).relu()
    assert hidden.requires_grad is t_hidden.requires_grad is True
    assert (x * 2).requires_grad is None and (tx * 2).requires_grad is False  # tinygrad's "not set" vs torch False
    hidden.sum().backward()
    t_hidden.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())
    assert hidden.grad is None  # a result is no leaf: backward fills only tensors marked by the user (torch too)


def test_realized_result_with_propagated_flag_still_passes_gradients(device: str) -> None:
    w = Tensor(arr(1, 2), device=device, requires_grad=True)
    out = w * 3
    assert out.requires_grad is True
    out.numpy()  # out is a buffer now; its graph is remembered for the gradient
    (out * out).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * 3 * 3 * arr(1, 2))


def test_setting_requires_grad_twice_and_off() -> None:
    x = Tensor(arr(1, 2), requires_grad=True)
    x.requires_grad_()
    x.requires_grad = False
    assert x.requires_grad is False
    with pytest.raises(RuntimeError, match="does not require grad"):
        (x * 2).sum().backward()


# ---------------------------------------------------------------------------------------------------------------
# rounding ops: PyTorch's zero gradient, not None

SPECIAL = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, -2.5, 1.5, 0.5, -0.5, 2.5, 3.7, -3.2], np.float32)


@pytest.mark.parametrize("name", ["floor", "ceil", "round", "trunc", "sign"])
def test_rounding_gradients_are_zeros_like_torch(device: str, name: str) -> None:
    x = Tensor(SPECIAL, device=device, requires_grad=True)
    tx = torch.tensor(SPECIAL, requires_grad=True)
    out, t_out = getattr(x, name)(), getattr(torch, name)(tx)
    ours, ref = out.numpy(), t_out.detach().numpy()
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
    np.testing.assert_array_equal(ours[~np.isnan(ref)], ref[~np.isnan(ref)])
    assert np.signbit(ours).tolist() == np.signbit(ref).tolist()  # sign(-0.0) is +0.0, as in torch
    cotangent = np.linspace(-1, 1, SPECIAL.size, dtype=np.float32)
    (out * Tensor(cotangent, device=device)).sum().backward()
    (t_out * torch.tensor(cotangent)).sum().backward()
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_rounding_inside_a_larger_expression_matches_torch(device: str) -> None:
    values = np.array([-2.7, -0.2, 0.4, 1.6], np.float32)
    x = Tensor(values, device=device, requires_grad=True)
    tx = torch.tensor(values, requires_grad=True)
    (x * x.floor() + x.sign() * x).sum().backward()
    (tx * tx.floor() + tx.sign() * tx).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
