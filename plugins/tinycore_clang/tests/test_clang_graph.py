"""ClangGraph: a TinyJit replay on CLANG is one foreign call (the runtime library walks a table of kernel entries)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from tinycore_clang.graph import ClangGraph, graph_stats


@pytest.fixture
def dev(monkeypatch: pytest.MonkeyPatch) -> str:
    """The registry's CLANG device with `ClangGraph` as its graph runner (skips when CLANG can't run here)."""
    from tinycore.device import Device

    try:
        device = Device["CLANG"]
    except Exception as error:  # noqa: BLE001 - any failure to open means "not here"
        pytest.skip(f"CLANG is unavailable: {error}")
    if device.graph is not ClangGraph:
        monkeypatch.setattr(device, "graph", ClangGraph)
    return "CLANG"


def test_ten_kernels_replay_as_one_submission(dev: str) -> None:
    from tinycore import Tensor, TinyJit

    @TinyJit
    def f(a: Tensor) -> Tensor:
        for _ in range(10):
            a = (a * 1.5 + 1).contiguous().realize()
        return a

    for i in range(5):
        x = np.random.default_rng(i).standard_normal(1024).astype(np.float32)
        expected = x.astype(np.float64)
        for _ in range(10):
            expected = expected * 1.5 + 1
        before = graph_stats.submissions
        out = f(Tensor(x, device=dev))
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-4)
        if i >= 1:  # the capture call runs the program once too
            assert graph_stats.submissions - before == 1
    captured = f.captured
    assert captured is not None and len(captured.graphs) == 1
    graph = captured.graphs[0]
    assert isinstance(graph, ClangGraph) and graph.kernel_count == 10
    assert graph.submissions == 4  # capture + 3 replays


def test_threaded_kernels_go_through_the_pool(dev: str) -> None:
    from tinycore import Tensor, TinyJit

    @TinyJit
    def f(a: Tensor, b: Tensor) -> Tensor:
        return (a @ b).relu().sum(1)

    rng = np.random.default_rng(0)
    for _ in range(3):
        x, y = (rng.standard_normal((128, 128)).astype(np.float32) for _ in range(2))
        out = f(Tensor(x, device=dev), Tensor(y, device=dev))
        np.testing.assert_allclose(out.numpy(), np.maximum(x @ y, 0).sum(1), rtol=1e-3, atol=1e-3)
    graph = f.captured.graphs[0]
    from tinycore.device import Device

    if Device[dev].threads > 1:
        assert any(prg.threaded for prg in graph.programs)
        threaded = [i for i, prg in enumerate(graph.programs) if prg.threaded and prg.info.cores > 1]
        # each item points at its kernel's entry and its slice of the tables; threaded items fan out over cores
        for i, prg in enumerate(graph.programs):
            assert graph.table[i].fn == prg.entry
            assert graph.table[i].bufs == ctypes.addressof(graph.ptrs) + 8 * graph.buf_offsets[i]
        assert all(graph.table[i].ntasks == graph.programs[i].info.cores for i in threaded)


def test_variables_patched_per_replay(dev: str) -> None:
    from tinycore import Tensor, TinyJit, Variable

    @TinyJit
    def f(x: Tensor, n: object) -> Tensor:
        return (x.shrink(((0, n),)) * 2).sum()

    x = np.arange(16, dtype=np.float32)
    t = Tensor(x, device=dev).realize()
    for value in (4, 9, 16, 1, 7):
        out = f(t, Variable("n", 1, 16).bind(value))
        assert out.item() == pytest.approx(2 * x[:value].sum())
    assert isinstance(f.captured.graphs[0], ClangGraph)


def test_inputs_swapped_without_rebuilding(dev: str) -> None:
    from tinycore import Tensor, TinyJit

    @TinyJit
    def f(a: Tensor, b: Tensor) -> Tensor:
        return (a - b).contiguous().realize() * 3

    built = None
    for i in range(4):
        a, b = np.full(8, i, np.float32), np.full(8, 2 * i, np.float32)
        assert f(Tensor(a, device=dev), Tensor(b, device=dev)).tolist() == ((a - b) * 3).tolist()
        if f.captured is not None:
            built = built or graph_stats.built
    assert graph_stats.built == built  # replays patch pointers, they build nothing
