"""BEAM search: the disk cache (miss, hit, IGNORE_BEAM_CACHE), the never-slower-than-the-heuristics guarantee, the
wrong-result fallback, and the wiring into get_program (BEAM=n)."""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.backend.disk_cache import disk_get
from tinycore.codegen import Opt, OptOps, get_kernel, get_program
from tinycore.codegen.heuristic import hand_coded_optimizations
from tinycore.device import Buffer, Device
from tinycore.dtype import dtypes
from tinycore.engine import search
from tinycore.engine.exec_item import CompiledRunner
from tinycore.helpers import Context, temporary_env
from tinycore.runtime.python_device import PythonRenderer
from tinycore.uop.ops import Ops, UOp


class CPURenderer(PythonRenderer):
    """CPU style (THREAD opts, no locals) on the PYTHON interpreter: a small action space."""

    has_local = False
    has_shared = False
    threads = 2


def matmul_ast(m: int, k: int, n: int) -> UOp:
    a = UOp(Ops.LOAD, dtypes.float, (UOp.define_global(1, dtypes.float, m * k),)).reshape((m, k, 1)).expand((m, k, n))
    b = UOp(Ops.LOAD, dtypes.float, (UOp.define_global(2, dtypes.float, k * n),)).reshape((1, k, n)).expand((m, k, n))
    return UOp.sink(UOp.define_global(0, dtypes.float, m * n).reshape((m, 1, n)).store((a * b).r(Ops.ADD, (1,))))


@pytest.fixture
def cache(tmp_path):
    with (
        temporary_env(TINYCORE_CACHE_DIR=str(tmp_path), BEAM_MAX_STEPS="2"),
        Context(CACHELEVEL=2, IGNORE_BEAM_CACHE=0),
    ):
        yield tmp_path


@pytest.fixture
def fake_times(monkeypatch):
    """Deterministic timings: seconds = cost(applied opts); records every timed opts list."""
    state = {"cost": lambda opts: 1.0 + 0.1 * len(opts), "timed": [], "runners": {}}

    def time_all(cands, bufs, var_vals, best):
        for c in cands:
            state["runners"][id(c.runner)] = list(c.kernel.applied_opts)
            state["timed"].append(list(c.kernel.applied_opts))
            c.seconds = state["cost"](c.kernel.applied_opts)

    def time_program(runner, bufs, var_vals, runs, early):
        return state["cost"](state["runners"][id(runner)])

    monkeypatch.setattr(search, "_time_all", time_all)
    monkeypatch.setattr(search, "time_program", time_program)
    return state


def test_cache_miss_then_hit_then_ignore(cache, fake_times):
    k = get_kernel(matmul_ast(8, 8, 8), CPURenderer())
    first = search.beam_search(k.copy(), None, 2)
    searched = len(fake_times["timed"])
    assert searched > 2 and disk_get("beam", search.beam_cache_key(k, 2)) is not None
    again = search.beam_search(k.copy(), None, 2)
    assert len(fake_times["timed"]) == searched and again.applied_opts == first.applied_opts  # a cache hit
    assert search.beam_cache_key(k, 2) != search.beam_cache_key(k, 3)
    with Context(IGNORE_BEAM_CACHE=1):
        search.beam_search(k.copy(), None, 2)
    assert len(fake_times["timed"]) == 2 * searched


def test_search_follows_the_timings(cache, fake_times):
    target = [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.THREAD, 0, 2)]
    fake_times["cost"] = lambda opts: 0.5 if list(opts) == target else (0.9 if list(opts) == target[:1] else 1.0)
    k = get_kernel(matmul_ast(8, 8, 8), CPURenderer())
    assert search.beam_search(k, None, 2).applied_opts == target


def test_never_slower_than_the_heuristics(cache, fake_times):
    k = get_kernel(matmul_ast(8, 8, 16), CPURenderer())
    heur = hand_coded_optimizations(k.copy())
    assert heur  # the heuristics pick something for a matmul
    fake_times["cost"] = lambda opts: 0.1 if list(opts) == heur else 1.0 + len(opts)
    assert search.beam_search(k, None, 2).applied_opts == heur


def test_final_choice_retimes_and_checks_the_result(monkeypatch):
    class Runner:
        def __init__(self, seconds):
            self.seconds = seconds

        def __call__(self, bufs, var_vals, wait=False):
            return self.seconds

    class Prog:
        outs = [0]

    fast_looking = search.Candidate(get_kernel(matmul_ast(4, 4, 4), CPURenderer()), Prog(), Runner(2.0), 0.5)
    heur = search.Candidate(get_kernel(matmul_ast(4, 4, 4), CPURenderer()), Prog(), Runner(1.0), 1.0)
    monkeypatch.setattr(search, "_outputs", lambda bufs, outs: [np.zeros(4, np.float32)])
    assert search._final_choice(fast_looking, heur, [], {}, [np.zeros(4, np.float32)]) is fast_looking  # 0.5 < 1.0
    fast_looking.seconds = 3.0  # re-timed slower than the heuristics: keep them
    assert search._final_choice(fast_looking, heur, [], {}, [np.zeros(4, np.float32)]) is heur
    fast_looking.seconds = 0.1
    assert search._final_choice(fast_looking, heur, [], {}, [np.ones(4, np.float32)]) is heur  # a wrong result


def test_real_search_on_python_is_correct_and_legal(cache):
    ast = matmul_ast(8, 4, 8)
    k = get_kernel(ast, PythonRenderer())
    with temporary_env(BEAM_MAX_STEPS="1"):
        best = search.beam_search(k, None, 1)
    p = get_program(ast, PythonRenderer(), best.applied_opts)  # the opts replay on a fresh kernel
    a, b = np.random.randn(8, 4).astype(np.float32), np.random.randn(4, 8).astype(np.float32)
    bufs = [
        Buffer("PYTHON", 64, dtypes.float).ensure_allocated(),
        Buffer("PYTHON", 32, dtypes.float).copyin(a.tobytes()),
        Buffer("PYTHON", 32, dtypes.float).copyin(b.tobytes()),
    ]
    CompiledRunner(p)(bufs, {})
    np.testing.assert_allclose(bufs[0].numpy().reshape(8, 8), a @ b, rtol=1e-5, atol=1e-5)


def test_the_engine_searches_when_beam_is_set(cache, fake_times, monkeypatch):
    calls = []
    real = search.beam_search
    monkeypatch.setattr(search, "beam_search", lambda *a, **kw: calls.append(a[2]) or real(*a, **kw))
    with Context(BEAM=2):
        searched = search.kernel_program(matmul_ast(8, 8, 8), CPURenderer())
        get_program(matmul_ast(8, 8, 8), CPURenderer())  # code generation alone never searches: no device to time on
    with Context(BEAM=2, NOOPT=1):
        search.kernel_program(matmul_ast(8, 8, 8), CPURenderer())
    search.kernel_program(matmul_ast(8, 8, 8), CPURenderer())
    assert calls == [2]
    assert searched.uops and searched.name.startswith("r_")


def test_actions_depend_on_the_renderer():
    gpu = {o.op for o in search.actions(get_kernel(matmul_ast(16, 16, 16), PythonRenderer()))}
    cpu = {o.op for o in search.actions(get_kernel(matmul_ast(16, 16, 16), CPURenderer()))}
    assert {OptOps.LOCAL, OptOps.GROUPTOP, OptOps.TC} <= gpu and OptOps.THREAD not in gpu
    assert OptOps.THREAD in cpu and not {OptOps.LOCAL, OptOps.TC} & cpu


def test_clang_beam_step(cache):
    try:
        dev = Device["CLANG"]
        dev.compiler  # noqa: B018
    except Exception as error:  # noqa: BLE001
        pytest.skip(f"no C compiler (CLANG device unavailable: {type(error).__name__})")
    x = UOp(Ops.LOAD, dtypes.float, (UOp.define_global(1, dtypes.float, 4096),))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, 4096).store(x * x))
    with temporary_env(BEAM_MAX_STEPS="1"):
        best = search.beam_search(get_kernel(ast, dev.renderer), None, 1)
    assert disk_get("beam", search.beam_cache_key(get_kernel(ast, dev.renderer), 1)) is not None
    p = get_program(ast, dev.renderer, best.applied_opts)
    a = np.random.randn(4096).astype(np.float32)
    bufs = [
        Buffer("CLANG", 4096, dtypes.float).ensure_allocated(),
        Buffer("CLANG", 4096, dtypes.float).copyin(a.tobytes()),
    ]
    CompiledRunner(p)(bufs, {})
    np.testing.assert_allclose(bufs[0].numpy(), a * a, rtol=1e-6)
