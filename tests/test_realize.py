"""The realize engine: lowering with a per-(ast, device) runner cache, copies, counters, DEBUG output, the capture
hook for TinyJit, and the hit path running no rewrite pass (scheduling and lowering)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tinycore.device import Buffer, Device
from tinycore.dtype import dtypes
from tinycore.engine import realize
from tinycore.engine.exec_item import BufferCopy, ExecItem
from tinycore.engine.realize import (
    capture_exec_items,
    get_kernel_runner,
    is_capturing,
    lower_schedule,
    lower_schedule_item,
    run_schedule,
    runner_cache_info,
)
from tinycore.engine.realized import buffer_of
from tinycore.engine.schedule import ScheduleItem
from tinycore.helpers import Context, GlobalCounters
from tinycore.tensor import Tensor
from tinycore.uop import patterns
from tinycore.uop.ops import UOp, Variable


def _load_ref() -> Any:
    spec = importlib.util.spec_from_file_location(
        "tinycore_test_schedule_ref_realize", Path(__file__).with_name("test_schedule_ref.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _load_ref()
_ORIGINAL_COMPILE = realize._compile_kernel  # the real lowering (the fixture below replaces it)


@pytest.fixture(autouse=True)
def reference_backend() -> Iterator[list[Any]]:
    saved = Device.DEFAULT
    Device.DEFAULT = "PYTHON"
    try:
        with ref.use_reference_kernels() as made:
            yield made
    finally:
        Device.DEFAULT = saved


def test_run_schedule_runs_kernels_and_counts_them(reference_backend: list[Any]) -> None:
    x = Tensor([1.0, 2.0, 3.0])
    y = (x * 2).exp()
    items, var_vals = y.schedule_with_vars()
    GlobalCounters.reset()
    run_schedule(items, var_vals)
    assert GlobalCounters.kernel_count == 1
    np.testing.assert_allclose(buffer_of(y.uop).numpy(), np.exp(np.array([2.0, 4.0, 6.0], np.float32)), rtol=1e-6)


def test_repeated_kernel_is_lowered_once(reference_backend: list[Any]) -> None:
    for i in range(4):
        assert (Tensor([float(i)] * 4) + 1).tolist() == [i + 1.0] * 4
    assert len(reference_backend) == 1 and reference_backend[0].calls == 4
    info = runner_cache_info()
    assert info["misses"] == 1 and info["hits"] == 3 and info["size"] == 1


def test_runner_cache_is_per_device(reference_backend: list[Any]) -> None:
    (Tensor([1.0]) + 1).realize()
    (Tensor([1.0], device="PYTHON:1") + 1).realize()
    assert [r.device for r in reference_backend] == ["PYTHON", "PYTHON:1"]
    assert reference_backend[0].ast is reference_backend[1].ast
    assert get_kernel_runner(reference_backend[0].ast, "PYTHON") is reference_backend[0]


def test_second_realize_runs_no_rewrite_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    original = patterns._run_pass

    def counting(*args: Any) -> UOp:
        calls.append(args[4])
        return original(*args)

    monkeypatch.setattr(patterns, "_run_pass", counting)

    def step() -> list[float]:
        x, w = Tensor([[1.0, 2.0], [3.0, 4.0]]), Tensor([0.5, -1.0])
        return (x * w).sum(1).softmax(0).tolist()

    first = step()
    assert calls, "the first realize schedules (and lowers)"
    calls.clear()
    second = step()
    assert calls == [] and first == second


def test_copy_items_become_buffer_copies() -> None:
    x = Tensor([1.0, 2.0, 3.0])
    y = x.to("PYTHON:1")
    (si,) = y.schedule()
    ei = lower_schedule_item(si)
    assert isinstance(ei.runner, BufferCopy) and ei.bufs[0].device == "PYTHON:1"
    GlobalCounters.reset()
    run_schedule([si])
    assert GlobalCounters.kernel_count == 1
    assert buffer_of(y.uop).numpy().tolist() == [1.0, 2.0, 3.0]


def test_lowering_rejects_unknown_items() -> None:
    buf = Buffer("PYTHON", 1, dtypes.float32)
    with pytest.raises(ValueError, match="can't lower"):
        lower_schedule_item(ScheduleItem(UOp.const(dtypes.float32, 1.0), (buf,)))


def test_lower_schedule_is_lazy_and_ordered() -> None:
    x = Tensor([1.0, 2.0]).realize()
    items = x.softmax(0).schedule()
    eis = list(lower_schedule(items))
    assert [ei.bufs for ei in eis] == [list(si.bufs) for si in items]


def test_var_vals_by_name_or_variable() -> None:
    n = Variable("scale", 1, 10)
    x = Tensor([1.0, 2.0])
    y = x * Tensor(n.bind(4)).cast(dtypes.float32)
    items, var_vals = y.schedule_with_vars()
    assert var_vals == {"scale": 4}
    run_schedule(items, {n: 3})  # a variable uop works as a key too (and overrides the bound value)
    assert buffer_of(y.uop).numpy().tolist() == [3.0, 6.0]


# ---------------------------------------------------------------------------------------------------------------
# capture hook


def test_capture_hook_sees_every_exec_item_and_still_runs() -> None:
    seen: list[ExecItem] = []
    x = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    y = x.softmax(0)
    assert not is_capturing()
    with capture_exec_items(seen.append):
        assert is_capturing()
        y.realize()
    assert not is_capturing()
    assert len(seen) == 3 and all(isinstance(ei, ExecItem) for ei in seen)
    assert seen[-1].bufs[0] is buffer_of(y.uop)
    np.testing.assert_allclose(y.numpy().sum(), 1.0, rtol=1e-6)


def test_capture_without_running() -> None:
    seen: list[ExecItem] = []
    x = Tensor([1.0, 2.0]).realize()
    y = x + 1
    with capture_exec_items(seen.append, run=False):
        y.realize()
    assert len(seen) == 1 and not buffer_of(y.uop).is_allocated()
    seen[0].run()
    assert buffer_of(y.uop).numpy().tolist() == [2.0, 3.0]


def test_capture_is_innermost_and_can_be_turned_off() -> None:
    outer: list[ExecItem] = []
    inner: list[ExecItem] = []
    with capture_exec_items(outer.append):
        with capture_exec_items(inner.append):
            (Tensor([1.0]) * 3).realize()
        (Tensor([1.0]) * 4).realize()
        with Context(CAPTURING=0):
            (Tensor([1.0]) * 5).realize()
    assert len(inner) == 1 and len(outer) == 1


# ---------------------------------------------------------------------------------------------------------------
# DEBUG output


def test_debug_levels_print(capsys: pytest.CaptureFixture[str]) -> None:
    x = Tensor([1.0, 2.0]).realize()
    with Context(DEBUG=2):
        (x * 7).realize()
    out = capsys.readouterr().out
    assert out.count("***") == 1 and "PYTHON" in out
    with Context(DEBUG=5):
        (x * 11).realize()
    out = capsys.readouterr().out
    assert "kernel AST" in out and "Ops.STORE" in out
    with Context(DEBUG=3):
        (x * x * 13).realize()
    assert "scheduled 1 item(s)" in capsys.readouterr().out


def test_realize_returns_self_and_skips_buffers(reference_backend: list[Any]) -> None:
    x = Tensor([1.0])
    assert x.realize() is x
    GlobalCounters.reset()
    x.realize()
    x.reshape(1, 1).realize()
    assert GlobalCounters.kernel_count == 0 and reference_backend == []
