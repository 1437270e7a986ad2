"""Multi-output kernels: values realized together that group cleanly (same device and output shape, a common input,
no dependency between them) share one kernel with several STOREs; everything else keeps a kernel of its own.
Values are checked against numpy on every device of `tests/conftest.py`."""

from __future__ import annotations

import numpy as np

from tinycore.engine.realize import run_schedule
from tinycore.engine.schedule_cache import clear_schedule_cache, schedule_stats
from tinycore.helpers import Context, GlobalCounters
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _input(a: np.ndarray, device: str = "PYTHON") -> Tensor:
    return Tensor(a, device=device).realize()


def test_sum_and_max_share_one_kernel(device: str) -> None:
    a = _data(16, 33)
    x = _input(a, device)
    s, m = x.sum(1), x.max(1)
    items = s.schedule(m)
    assert len(items) == 1
    (si,) = items
    assert len(si.outputs) == 2 and len(si.inputs) == 1
    assert sum(1 for u in si.ast.toposort() if u.op is Ops.REDUCE_AXIS) == 2
    GlobalCounters.reset()
    run_schedule(items)
    assert GlobalCounters.kernel_count == 1
    np.testing.assert_allclose(s.numpy(), a.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(m.numpy(), a.max(1))


def test_two_elementwise_outputs_of_one_input_share_its_load(device: str) -> None:
    a = _data(7, 9, seed=1)
    x = _input(a, device)
    b, c = x * 2, (x + 1).relu()
    (si,) = b.schedule(c)
    loads = {u for u in si.ast.toposort() if u.op is Ops.LOAD}
    assert len(loads) == 1  # the input is loaded once for both stores
    run_schedule([si])
    np.testing.assert_array_equal(b.numpy(), a * 2)
    np.testing.assert_array_equal(c.numpy(), np.maximum(a + 1, 0))


def test_three_outputs_with_an_internal_reduce(device: str) -> None:
    a = _data(5, 6, seed=2)
    x = _input(a, device)
    mean = x.mean(1, keepdim=True)
    outs = [(x - mean) * 2, (x - mean).abs(), x * mean]
    items = outs[0].schedule(*outs[1:])
    assert len(items) == 2 and len(items[1].outputs) == 3  # the mean once, then one kernel for the three
    run_schedule(items)
    m = a.mean(1, keepdims=True)
    for got, want in zip(outs, ((a - m) * 2, np.abs(a - m), a * m)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_what_does_not_group() -> None:
    x, y = _input(_data(4, 6, seed=3)), _input(_data(4, 6, seed=4))
    assert len(x.sum(0).schedule(x.sum(1))) == 2  # different output shapes
    assert len((x + 1).schedule(y * 2)) == 2  # no common input
    a = x.sum(1)
    assert len(a.schedule(a * 2)) == 2  # the second reads the first
    z = Tensor.zeros(4, 6, device="PYTHON").contiguous().realize()
    w = z.assign(x + 1)
    items = w.schedule(x * 3)
    assert len(items) == 2 and all(len(si.outputs) == 1 for si in items)  # an ASSIGN keeps its kernel


def test_group_respects_dependencies_through_other_kernels() -> None:
    a = _data(6, 4, seed=5)
    x = _input(a)
    first = x.sum(1, keepdim=True)  # kernel 1
    mid = (x * first).max(1, keepdim=True)  # kernel 2 reads kernel 1
    late = x + mid  # reads kernel 2: may not run with kernel 1 (same shape as x * 2, grouping with it is fine)
    other = x * 2
    items = first.schedule(mid, late, other)
    run_schedule(items)
    np.testing.assert_allclose(late.numpy(), a + (a * a.sum(1, keepdims=True)).max(1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(other.numpy(), a * 2)
    np.testing.assert_allclose(first.numpy(), a.sum(1, keepdims=True), rtol=1e-5)
    assert len(items) == 3  # first, mid, then late and other together


def test_multi_output_schedule_is_cached_and_noopt_agrees(device: str) -> None:
    clear_schedule_cache()
    schedule_stats.reset()
    results = []
    for seed, noopt in ((6, 0), (7, 0), (7, 1)):
        a = _data(8, 12, seed=seed)
        x = _input(a, device)
        with Context(NOOPT=noopt):
            from tinycore.engine.realize import clear_runner_cache

            clear_runner_cache()
            s, m, e = x.sum(0), x.max(0), (x * x).sum(0)
            Tensor.realize(s, m, e)
            results.append([s.numpy(), m.numpy(), e.numpy()])
        np.testing.assert_allclose(results[-1][0], a.sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(results[-1][1], a.max(0))
        np.testing.assert_allclose(results[-1][2], (a * a).sum(0), rtol=1e-5, atol=1e-5)
    assert schedule_stats.hits >= 2  # same graph shape: the grouped schedule is reused
    for got, want in zip(results[2], results[1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
