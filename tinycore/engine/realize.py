"""The realize engine: lower `ScheduleItem`s to `ExecItem`s and run them, with a capture hook for TinyJit.

- a kernel item becomes ``CompiledRunner(get_program(ast, Device[dev].renderer))``, cached per ``(ast, device)`` so a
  repeated kernel is lowered and compiled once per process (`clear_runner_cache` forgets them);
- a copy item becomes a `BufferCopy`;
- `run_schedule` runs the items in order and updates `GlobalCounters`; ``DEBUG>=2`` prints one line per item (time,
  GFLOPS, GB/s), ``DEBUG>=4`` the kernel source (when it is compiled), ``DEBUG>=5`` the kernel AST;
- `capture_exec_items(callback)` hands every `ExecItem` that `run_schedule` produces to `callback` (and, unless
  ``run=False``, still runs it): TinyJit records a call this way. ``CAPTURING=0`` turns recording off.

>>> from tinycore.engine.realize import capture_exec_items
>>> seen = []
>>> with capture_exec_items(seen.append, run=False):
...     run_schedule([])
>>> seen
[]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from tinycore.engine.exec_item import BufferCopy, CompiledRunner, ExecItem, Runner
from tinycore.engine.schedule import ScheduleItem
from tinycore.helpers import CAPTURING, DEBUG
from tinycore.uop.ops import Ops, UOp

__all__ = [
    "capture_exec_items",
    "clear_runner_cache",
    "get_kernel_runner",
    "is_capturing",
    "lower_schedule",
    "lower_schedule_item",
    "run_schedule",
    "runner_cache_info",
]

_kernel_runners: dict[tuple[UOp, str], Runner] = {}
_copy_runners: dict[tuple[int, str, str], BufferCopy] = {}
_stats = {"hits": 0, "misses": 0}


def _compile_kernel(ast: UOp, device: str) -> Runner:
    """Lower, render and compile one kernel AST for `device` (no cache; see `get_kernel_runner`)."""
    try:
        from tinycore.codegen import get_program
    except ImportError as error:
        raise NotImplementedError(
            "kernel lowering (tinycore.codegen.get_program) is not available in this build"
        ) from error
    from tinycore.device import Device

    spec = get_program(ast, Device[device].renderer)
    if spec.device != device:
        spec = replace(spec, device=device)
    return CompiledRunner(spec)


def get_kernel_runner(ast: UOp, device: str) -> Runner:
    """The runner of kernel `ast` on `device`, lowered and compiled on first use and cached after."""
    key = (ast, device)
    runner = _kernel_runners.get(key)
    if runner is None:
        _stats["misses"] += 1
        if DEBUG >= 5:
            print(f"kernel AST for {device}:\n{ast}")
        runner = _kernel_runners[key] = _compile_kernel(ast, device)
    else:
        _stats["hits"] += 1
    return runner


def clear_runner_cache() -> None:
    """Forget every cached kernel and copy runner (the next use lowers and compiles again)."""
    _kernel_runners.clear()
    _copy_runners.clear()
    _stats["hits"] = _stats["misses"] = 0


def runner_cache_info() -> dict[str, int]:
    """``{"hits", "misses", "size"}`` of the kernel runner cache."""
    return {**_stats, "size": len(_kernel_runners)}


def lower_schedule_item(si: ScheduleItem, var_vals: dict[str, int] | None = None) -> ExecItem:
    """The `ExecItem` running `si`: a cached kernel runner, or a `BufferCopy` for a copy."""
    ast = si.ast
    if ast.op is Ops.SINK:
        runner = get_kernel_runner(ast, si.bufs[0].device)
    elif ast.op is Ops.COPY:
        dest, src = si.bufs[0], si.bufs[1]
        key = (dest.nbytes, dest.device, src.device)
        runner = _copy_runners.get(key)
        if runner is None:
            runner = _copy_runners[key] = BufferCopy(dest.nbytes, dest.device, src.device)
    else:
        raise ValueError(f"can't lower a schedule item whose ast is {ast.op}")
    return ExecItem(runner, list(si.bufs), dict(var_vals) if var_vals else {})


def lower_schedule(schedule: Sequence[ScheduleItem], var_vals: dict[str, int] | None = None) -> Iterator[ExecItem]:
    """Lower the items one by one (lazily, so a failing kernel names itself before the next is compiled)."""
    for si in schedule:
        yield lower_schedule_item(si, var_vals)


# ---------------------------------------------------------------------------------------------------------------
# capture hook


_captures: list[tuple[Callable[[ExecItem], Any], bool]] = []


@contextlib.contextmanager
def capture_exec_items(callback: Callable[[ExecItem], Any], run: bool = True) -> Iterator[None]:
    """While active, every `ExecItem` that `run_schedule` produces is passed to `callback`, in execution order
    (innermost capture only); with ``run=False`` the items are not executed. ``CAPTURING=0`` disables recording.

    >>> items = []
    >>> with capture_exec_items(items.append):
    ...     pass
    """
    _captures.append((callback, run))
    try:
        yield
    finally:
        _captures.pop()


def is_capturing() -> bool:
    """True inside `capture_exec_items` (and ``CAPTURING`` is on)."""
    return bool(_captures) and bool(CAPTURING)


def run_schedule(
    schedule: Sequence[ScheduleItem], var_vals: dict[Any, int] | None = None, do_update_stats: bool = True
) -> None:
    """Lower and run every item of `schedule` in order, with variable values `var_vals` (keys: names or
    DEFINE_VAR uops)."""
    vals: dict[str, int] = {}
    if var_vals:
        vals = {(k if isinstance(k, str) else k.expr): v for k, v in var_vals.items()}
    capture = _captures[-1] if _captures and CAPTURING else None
    for si in schedule:
        ei = lower_schedule_item(si, vals)
        if capture is not None:
            capture[0](ei)
            if not capture[1]:
                continue
        ei.run(vals, do_update_stats=do_update_stats)
