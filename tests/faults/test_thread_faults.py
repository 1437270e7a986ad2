"""Threads realizing shared lazy tensors (one graph, graphs sharing lazy parts, deferred eager chains) get numpy's
answer, and threads each running their own TinyJit do not disturb one another (`tinycore.helpers.REALIZE_LOCK`)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import numpy as np
import pytest

from tinycore import Tensor, TinyJit

THREADS = 8
REPEATS = 4


@pytest.fixture(autouse=True)
def _switch_often():
    """Let the interpreter switch threads every 10 us (default 5 ms), so the threads really interleave."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def _run_together(count: int, work: Callable[[int], object]) -> list[object]:
    """Run ``work(i)`` on ``count`` threads released at once; their results, in order (exceptions re-raised)."""
    barrier = threading.Barrier(count)
    results: list[object] = [None] * count
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait(timeout=60)
            results[i] = work(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), name=f"faults-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_threads_realizing_one_shared_lazy_tensor(repeat):
    a_np = np.random.rand(64, 48).astype(np.float32)
    a = Tensor(a_np)
    shared = (a * 2 + 1).sum(axis=1) + a.exp2().max()  # several kernels: a window between schedule and run
    expected = (a_np * 2 + 1).sum(axis=1) + np.exp2(a_np).max()
    readers = [
        lambda t: t.numpy(),
        lambda t: np.array(t.tolist(), np.float32),
        lambda t: np.frombuffer(t.data(), np.float32),
        lambda t: t.realize().numpy(),
    ]
    results = _run_together(THREADS, lambda i: readers[i % len(readers)](shared))
    for got in results:
        np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_threads_realizing_distinct_tensors_sharing_lazy_inputs(repeat):
    a_np, b_np = np.random.rand(32, 32).astype(np.float32), np.random.rand(32, 32).astype(np.float32)
    a, b = Tensor(a_np), Tensor(b_np)
    common = (a @ b).relu() + 0.5  # lazy, shared by every thread's graph
    common_np = np.maximum(a_np @ b_np, 0) + 0.5

    def work(i: int) -> tuple[np.ndarray, np.ndarray]:
        mine = (common * (i + 1) - a).sum(axis=0)
        return mine.numpy(), ((common_np * (i + 1)) - a_np).sum(axis=0)

    for got, want in _run_together(THREADS, work):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(common.numpy(), common_np, rtol=1e-5)


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_threads_sharing_a_deferred_eager_chain(repeat):
    x_np = np.random.rand(256).astype(np.float32)
    x = Tensor(x_np).realize()
    chain = x * 1.5 + 0.25  # scalar ops on a realized buffer: the deferred eager fast path
    want = x_np * np.float32(1.5) + np.float32(0.25)

    def work(i: int) -> np.ndarray:
        if i % 2:
            chain.realize()
        return (chain * 2.0).numpy() if i % 3 == 0 else chain.numpy() * 2

    for got in _run_together(THREADS, work):
        np.testing.assert_allclose(got, want * 2, rtol=1e-6)


def test_threads_each_running_their_own_tinyjit():
    count, calls = 4, 6

    def step(x: Tensor, k: int) -> Tensor:
        y = (x * (k + 1) + k).relu()
        return (y.sum(axis=0) + y.max(axis=0)).contiguous() * 0.5  # a few kernels: a capture long enough to overlap

    jits = [TinyJit(lambda x, k=k: step(x, k)) for k in range(count)]

    def work(k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for call in range(calls):
            x_np = np.random.default_rng(100 * k + call).standard_normal((16, 8)).astype(np.float32)
            got = jits[k](Tensor(x_np)).numpy()  # copied at once: the next call reuses the output buffer
            y_np = np.maximum(x_np * (k + 1) + k, 0)
            out.append((got, (y_np.sum(axis=0) + y_np.max(axis=0)) * 0.5))
        return out

    for pairs in _run_together(count, work):
        for got, want in pairs:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert all(jit.cnt == calls and jit.captured is not None for jit in jits)
