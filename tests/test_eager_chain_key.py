"""The eager chain key (`tinycore.engine.schedule.schedule_for_run`): an elementwise chain built by the tensor
operators on one realized input carries its schedule-cache key, so a realize of a chain seen before skips the key
walk. These tests check that such hits are never wrong (constants, operand order, dtypes, shapes, devices, inputs,
realized nodes, writes), that the key keeps nothing alive, and that the hash-consing of nodes with equal dtypes is
unchanged by the dtype tokens of its key. Values are compared with numpy; nothing here is timed."""

from __future__ import annotations

import copy
import gc
import pickle
import weakref

import numpy as np
import pytest

from tinycore.dtype import dtypes
from tinycore.engine import schedule as sched
from tinycore.engine.realized import buffer_of
from tinycore.engine.schedule_cache import clear_schedule_cache, schedule_stats
from tinycore.helpers import GlobalCounters
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops, UOp


def chain(y: Tensor | np.ndarray, n: int = 8) -> Tensor | np.ndarray:
    """The peer benchmark's chain: multiply, add, subtract, multiply, repeated."""
    for i in range(n):
        m = i % 4
        y = y * 1.0001 if m == 0 else (y + 0.5 if m == 1 else (y - 0.25 if m == 2 else y * 0.999))
    return y


def values(seed: int, n: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def warm(x: Tensor, build) -> None:  # noqa: ANN001 - a callable of one tensor
    """Realize `build(x)` until its chain key has a cached schedule (the first build meets new scalar operands)."""
    for _ in range(3):
        build(x).realize()


def test_a_warm_chain_is_served_by_its_key_without_a_walk(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = Tensor(values(0), device=device).realize()
    warm(x, chain)
    walks = []
    real_walk = sched.KeyWalk

    class CountingWalk(real_walk):  # type: ignore[misc, valid-type]
        __slots__ = ()

        def __init__(self, roots):  # noqa: ANN001
            walks.append(len(roots))
            super().__init__(roots)

    monkeypatch.setattr(sched, "KeyWalk", CountingWalk)  # as `schedule_for_run` finds it
    schedule_stats.reset()
    out = chain(x).realize()
    assert walks == [] and schedule_stats.hits == 1 and schedule_stats.misses == 0
    np.testing.assert_allclose(out.numpy(), chain(values(0).astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_other_inputs_of_the_same_spec_read_their_own_buffer(device: str) -> None:
    inputs = [Tensor(values(seed), device=device).realize() for seed in range(4)]
    warm(inputs[0], chain)
    for seed, x in enumerate(inputs):
        out = chain(x).realize()
        np.testing.assert_allclose(out.numpy(), chain(values(seed).astype(np.float64)), rtol=1e-5, atol=1e-6)
        assert buffer_of(out.uop) is not buffer_of(x.uop)  # a fresh result, never the input


def test_each_call_recomputes_into_a_result_of_its_own(device: str) -> None:
    x = Tensor(values(1), device=device).realize()
    warm(x, chain)
    GlobalCounters.reset()
    first, second = chain(x).realize(), chain(x).realize()
    assert GlobalCounters.kernel_count == 2  # the second call ran the kernel again
    assert buffer_of(first.uop) is not buffer_of(second.uop)
    np.testing.assert_array_equal(first.numpy(), second.numpy())


@pytest.mark.parametrize(
    "build",
    [
        lambda t: t * 2.0 + 1.0,
        lambda t: t * 2.0 - 1.0,
        lambda t: t * 3.0 + 1.0,  # another constant, same structure
        lambda t: 1.0 - t * 2.0,  # reversed operand
        lambda t: t * 2.0 * t,  # a pair over one input
        lambda t: (t + 1.0) - (t * 0.5),
        lambda t: t * 2.0 < 1.0,  # a comparison: bool result
        lambda t: (t * 2.0 < 1.0) * 1.0 + t,  # promoted, then chained again
    ],
)
def test_chains_that_differ_in_anything_get_their_own_result(device: str, build) -> None:  # noqa: ANN001
    x = Tensor(values(2), device=device).realize()
    reference = build(values(2).astype(np.float64))
    for _ in range(3):  # cold, then served by the key
        out = build(x).realize()
        assert out.dtype == (dtypes.bool if reference.dtype == np.bool_ else dtypes.float)
        np.testing.assert_allclose(out.numpy(), reference, rtol=1e-5, atol=1e-6)


def test_interleaved_chains_never_share_a_schedule(device: str) -> None:
    x = Tensor(values(3), device=device).realize()
    builds = [lambda t: t + 1.0, lambda t: t - 1.0, lambda t: 1.0 - t, lambda t: t * 1.0001, lambda t: t + t]
    for _ in range(3):
        for build in builds:
            np.testing.assert_allclose(build(x).numpy(), build(values(3).astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_shapes_dtypes_and_devices_are_part_of_the_key() -> None:
    a = Tensor(values(4, 16), device="PYTHON").realize()
    b = Tensor(values(4, 8), device="PYTHON").realize()
    c = Tensor(values(4, 16), device="PYTHON:1").realize()
    d = Tensor(np.arange(16, dtype=np.int32), device="PYTHON").realize()
    for _ in range(3):
        for x, expected in ((a, values(4, 16)), (b, values(4, 8)), (c, values(4, 16))):
            out = (x * 2.0 + 1.0).realize()
            assert out.device == x.device and out.shape == x.shape
            np.testing.assert_allclose(out.numpy(), expected * 2 + 1, rtol=1e-5, atol=1e-6)
        out = (d * 2 + 1).realize()
        assert out.dtype == dtypes.int32 and out.tolist() == (np.arange(16) * 2 + 1).tolist()


def test_pairs_over_two_inputs_keep_aliasing(device: str) -> None:
    a, b = Tensor(values(5), device=device).realize(), Tensor(values(6), device=device).realize()
    for _ in range(3):
        np.testing.assert_allclose((a * 2.0 + b).numpy(), values(5) * 2 + values(6), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose((a * 2.0 + a).numpy(), values(5) * 3, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose((b * 2.0 + a).numpy(), values(6) * 2 + values(5), rtol=1e-5, atol=1e-6)


def test_a_realized_root_is_served_by_the_realized_table(device: str) -> None:
    x = Tensor(values(7), device=device).realize()
    warm(x, chain)
    held = chain(x)  # the same root node as the next graph while `held` is unrealized
    again = chain(x)
    assert held.uop is again.uop
    held.realize()
    GlobalCounters.reset()
    again.realize()
    assert GlobalCounters.kernel_count == 0  # read from held's buffer, not recomputed
    np.testing.assert_array_equal(again.numpy(), held.numpy())


def test_a_realized_inner_node_gives_the_same_value(device: str) -> None:
    x = Tensor(values(8), device=device).realize()
    warm(x, chain)
    inner = x * 1.0001 + 0.5
    outer = (inner - 0.25) * 0.999
    inner.realize()
    np.testing.assert_allclose(outer.realize().numpy(), chain(values(8).astype(np.float64), 4), rtol=1e-5, atol=1e-6)


def test_writes_to_the_input_are_read(device: str) -> None:
    x = Tensor(values(9), device=device).realize()
    warm(x, chain)
    built_before = chain(x)  # read after the write: the old contents (PyTorch's order)
    x.assign(Tensor(values(10), device=device)).realize()
    np.testing.assert_allclose(built_before.numpy(), chain(values(9).astype(np.float64)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(chain(x).numpy(), chain(values(10).astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_cleared_cache_schedules_the_chain_again(device: str) -> None:
    x = Tensor(values(11), device=device).realize()
    warm(x, chain)
    clear_schedule_cache()
    schedule_stats.reset()
    chain(x).realize()
    assert schedule_stats.misses == 1
    chain(x).realize()
    assert schedule_stats.hits == 1 and schedule_stats.misses == 1


def test_the_key_keeps_no_input_alive(device: str) -> None:
    x = Tensor(values(12), device=device).realize()
    warm(x, chain)
    out = chain(x).realize()
    input_buffer = weakref.ref(buffer_of(x.uop))
    del x
    gc.collect()
    assert input_buffer() is None
    np.testing.assert_allclose(out.numpy(), chain(values(12).astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_equal_dtypes_build_the_same_node() -> None:
    clone = pickle.loads(pickle.dumps(dtypes.float32))
    assert clone == dtypes.float32
    node = UOp(Ops.CONST, dtypes.float32, (), 1.5)
    assert UOp(Ops.CONST, clone, (), 1.5) is node
    assert UOp(Ops.CONST, copy.copy(dtypes.float32), (), 1.5) is node
    assert UOp(Ops.CONST, dtypes.float16, (), 1.5) is not node  # other dtype, other node
    pointer = dtypes.float.ptr(16)
    assert UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(16), (), 0) is UOp(Ops.DEFINE_GLOBAL, pointer, (), 0)
    assert UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(8), (), 0) is not UOp(Ops.DEFINE_GLOBAL, pointer, (), 0)
