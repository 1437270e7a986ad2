"""ClangGraph replays of unchanged inputs (`resubmit`: one foreign call, nothing re-packed) and of sharded inputs
(one graph submission per device)."""

from __future__ import annotations

import numpy as np
import pytest
from tinycore_clang.graph import ClangGraph, graph_stats


def _open(*names: str) -> None:
    from tinycore.device import Device

    try:
        for name in names:
            Device[name]
    except Exception as error:  # noqa: BLE001 - any failure to open means "not here"
        pytest.skip(f"CLANG is unavailable: {error}")
    for name in names:
        if Device[name].graph is not ClangGraph:
            pytest.skip(f"{name} does not use ClangGraph")


def test_same_inputs_resubmit_once_per_call() -> None:
    _open("CLANG")
    from tinycore import Tensor, TinyJit

    @TinyJit
    def f(a: Tensor) -> Tensor:
        for _ in range(3):
            a = (a * 2 - 1).contiguous().realize()
        return a

    x = Tensor(np.arange(16, dtype=np.float32), device="CLANG").realize()
    expected = np.arange(16, dtype=np.float64)
    for _ in range(3):
        expected = expected * 2 - 1
    for i in range(6):
        before = graph_stats.submissions
        np.testing.assert_allclose(f(x).numpy(), expected)
        if i >= 1:
            assert graph_stats.submissions - before == 1
    graph = f.captured.graphs[0]
    assert isinstance(graph, ClangGraph) and graph.submissions == 5  # capture + 4 replays (3 of them resubmits)


def test_resubmit_follows_a_thread_count_change() -> None:
    _open("CLANG")
    from tinycore import Tensor, TinyJit
    from tinycore.device import Device

    device = Device["CLANG"]

    @TinyJit
    def f(a: Tensor, b: Tensor) -> Tensor:
        return (a @ b).relu().sum(1)

    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((96, 96)).astype(np.float32) for _ in range(2))
    a, b = Tensor(x, device="CLANG").realize(), Tensor(y, device="CLANG").realize()
    old = device.threads
    try:
        for threads in (old, old, 1, 1, max(2, old)):
            device.threads = threads
            np.testing.assert_allclose(f(a, b).numpy(), np.maximum(x @ y, 0).sum(1), rtol=1e-3, atol=1e-3)
        graph = f.captured.graphs[0]
        assert graph._launch_threads == max(2, old)
    finally:
        device.threads = old


def test_resubmit_before_the_first_call_is_an_error() -> None:
    _open("CLANG")
    from tinycore import Tensor, TinyJit

    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a + 1

    for _ in range(2):
        f(Tensor(np.ones(4, np.float32), device="CLANG"))
    graph = f.captured.graphs[0]
    fresh = ClangGraph("CLANG", graph.items, graph.input_slots, graph.var_names)
    with pytest.raises(RuntimeError, match="before the first call"):
        fresh.resubmit()


def test_sharded_replay_is_one_submission_per_device() -> None:
    _open("CLANG", "CLANG:1")
    from tinycore import Tensor, TinyJit

    devs = ("CLANG", "CLANG:1")

    @TinyJit
    def f(a: Tensor) -> Tensor:
        for _ in range(5):
            a = (a + 1).contiguous().realize()
        return a * 2

    for i in range(4):
        x = np.random.default_rng(i).standard_normal((8, 8)).astype(np.float32)
        before = graph_stats.submissions
        np.testing.assert_allclose(f(Tensor(x).shard(devs, axis=0)).numpy(), (x + 5) * 2, rtol=1e-6)
        if i >= 2:
            assert graph_stats.submissions - before == 2  # one per device, each running its 6 kernels
    assert sorted(g.device for g in f.captured.graphs) == list(devs)
    assert all(g.kernel_count == 6 for g in f.captured.graphs)
