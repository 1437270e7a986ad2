"""GraphRunner bookkeeping (input slots, variable values, launch dims) and the SequentialGraphRunner."""

from __future__ import annotations

import sys
import types

import pytest

import tinycore.device as device_module
from tinycore.device import Buffer, Compiled
from tinycore.dtype import dtypes
from tinycore.engine.exec_item import CompiledRunner, ExecItem, Runner
from tinycore.engine.graph_runner import GraphRunner, GraphUpdate, SequentialGraphRunner
from tinycore.helpers import GlobalCounters
from tinycore.renderer import Estimates, ProgramSpec
from tinycore.runtime.python_device import PythonAllocator, PythonDevice


class FakeRunner(Runner):
    def __init__(self, name, log, seconds=0.125):
        super().__init__(name, "PYTHON", Estimates(ops=10, mem=100))
        self.log, self.seconds = log, seconds

    def __call__(self, bufs, var_vals, wait=False):
        self.log.append((self.display_name, list(bufs), dict(var_vals)))
        return self.seconds if wait else None


class RecordingProgram:
    def __init__(self, device, name, lib):
        self.name = name

    def __call__(self, *bufs, global_size, local_size, vals=(), wait=False):
        return None


@pytest.fixture
def devices(monkeypatch):
    fake = Compiled("FAKE", PythonAllocator(), None, None, RecordingProgram)
    table = {"PYTHON": PythonDevice("PYTHON"), "FAKE": fake}
    monkeypatch.setattr(device_module, "_device_lookup", lambda name: table[name])
    return table


def buf(n=4):
    return Buffer("PYTHON", n, dtypes.float32)


def test_sequential_runner_replays_with_swapped_inputs(devices):
    log: list = []
    captured_in, captured_out, tmp = buf(), buf(), buf()
    items = [
        ExecItem(FakeRunner("k0", log), [tmp, captured_in]),
        ExecItem(FakeRunner("k1", log), [captured_out, tmp, captured_in]),
    ]
    slots = {(0, 1): 0, (1, 2): 0, (1, 0): 1}
    graph = SequentialGraphRunner("PYTHON", items, slots, [])
    assert tmp.is_allocated() and not captured_in.is_allocated()  # non-input buffers are planned once
    assert graph.slots_by_item == {0: [(1, 0)], 1: [(0, 1), (2, 0)]}
    new_in, new_out = buf(), buf()
    assert graph([new_in, new_out], {}) is None
    assert [entry[0] for entry in log] == ["k0", "k1"]
    assert log[0][1] == [tmp, new_in] and log[1][1] == [new_out, tmp, new_in]
    assert items[0].bufs[1] is captured_in  # the caller's items are not patched
    assert graph([new_in, new_out], {}, wait=True) == 0.25


def test_update_reports_only_changed_slots(devices):
    log: list = []
    a, b = buf(), buf()
    graph = SequentialGraphRunner("PYTHON", [ExecItem(FakeRunner("k", log), [a, b])], {(0, 0): 0, (0, 1): 1}, [])
    x, y = buf(), buf()
    first = graph.update([x, y], {})
    assert {(i, j) for i, j, _ in first.buffers} == {(0, 0), (0, 1)}
    assert graph.update([x, y], {}).buffers == []
    third = graph.update([x, a], {})
    assert [(i, j, new) for i, j, new in third.buffers] == [(0, 1, a)]


def test_var_names_must_be_bound_and_reach_the_items(devices):
    log: list = []
    graph = SequentialGraphRunner("PYTHON", [ExecItem(FakeRunner("k", log), [], {"fixed": 1})], {}, ["n"])
    with pytest.raises(KeyError, match="'n'"):
        graph([], {})
    graph([], {"n": 4})
    assert log[-1][2] == {"fixed": 1, "n": 4}


def test_graph_counts_its_kernels_and_estimates(devices):
    saved = GlobalCounters.kernel_count, GlobalCounters.global_ops
    try:
        GlobalCounters.reset()
        log: list = []
        graph = SequentialGraphRunner("PYTHON", [ExecItem(FakeRunner(f"k{i}", log), []) for i in range(3)], {}, [])
        assert graph.kernel_count == 3 and graph.estimates == Estimates(ops=30, mem=300)
        assert graph.display_name == "<batched 3>"
        ExecItem(graph, []).run()
        assert GlobalCounters.kernel_count == 3 and GlobalCounters.global_ops == 30 and len(log) == 3
    finally:
        GlobalCounters.kernel_count, GlobalCounters.global_ops = saved


def test_base_graph_runner_supports_only_kernels_and_submit_is_abstract(devices):
    log: list = []
    with pytest.raises(ValueError, match="can't batch item 0"):
        GraphRunner("PYTHON", [ExecItem(FakeRunner("k", log), [])], {}, [])
    kernel = CompiledRunner(ProgramSpec("k", [], "FAKE"), precompiled=b"")
    assert GraphRunner.supports(ExecItem(kernel, []))
    graph = GraphRunner("FAKE", [ExecItem(kernel, [])], {}, [])
    with pytest.raises(NotImplementedError):
        graph([], {})
    nested = SequentialGraphRunner("PYTHON", [ExecItem(FakeRunner("k", log), [])], {}, [])
    assert not SequentialGraphRunner.supports(ExecItem(nested, []))


def test_input_slots_are_validated(devices):
    log: list = []
    item = ExecItem(FakeRunner("k", log), [buf()])
    for slots in ({(1, 0): 0}, {(0, 1): 0}, {(0, 0): -1}):
        with pytest.raises(ValueError, match="input slot"):
            SequentialGraphRunner("PYTHON", [item], slots, [])


class _Sym:
    def __init__(self, factor):
        self.factor = factor


class Recorder(GraphRunner):
    """A device-style runner: keeps every GraphUpdate it is asked to submit."""

    def __init__(self, *args):
        super().__init__(*args)
        self.updates: list[GraphUpdate] = []

    def submit(self, update, wait):
        self.updates.append(update)
        return 1.0 if wait else None


def test_vals_and_symbolic_launch_dims_are_patched_only_when_changed(devices, monkeypatch):
    module = types.ModuleType("tinycore.uop.ops")
    module.sym_infer = lambda expr, var_vals: expr.factor * var_vals["n"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tinycore.uop.ops", module)
    fixed = CompiledRunner(ProgramSpec("fixed", [], "FAKE", global_size=(8, 1, 1), vars=["m"]), precompiled=b"")
    dynamic = CompiledRunner(
        ProgramSpec("dyn", [], "FAKE", global_size=(_Sym(4), 1, 1), local_size=(_Sym(1), 1, 1), vars=["n"]),
        precompiled=b"",
    )
    items = [ExecItem(fixed, [], {"m": 2}), ExecItem(dynamic, [], {"n": 3})]
    graph = Recorder("FAKE", items, {}, ["n"])
    assert graph.item_vars == {0: ("m",), 1: ("n",)} and graph.symbolic_items == {1}
    assert graph.vals == {0: (2,), 1: (3,)}
    assert graph.launch_dims == {0: ((8, 1, 1), (1, 1, 1)), 1: ((12, 1, 1), (3, 1, 1))}
    assert graph([], {"n": 3}, wait=True) == 1.0
    assert graph.updates[-1].vals == {} and graph.updates[-1].launch_dims == {}
    graph([], {"n": 5})
    update = graph.updates[-1]
    assert update.vals == {1: (5,)} and update.launch_dims == {1: ((20, 1, 1), (5, 1, 1))}
    assert update.var_vals == {"n": 5}
    graph([], {"n": 5, "m": 7})
    assert graph.updates[-1].vals == {0: (7,)} and graph.updates[-1].launch_dims == {}
