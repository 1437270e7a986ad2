"""The realize engine: lower `ScheduleItem`s to `ExecItem`s and run them, with a capture hook for TinyJit.

- a kernel item becomes ``CompiledRunner(kernel_program(ast, Device[dev].renderer))`` (`tinycore.engine.search`:
  BEAM search or heuristics), cached per ``(ast, device)`` so a repeated kernel is lowered and compiled once per
  process (`clear_runner_cache` forgets them);
- a copy item becomes a `BufferCopy`;
- `run_schedule` runs the items in order and updates `GlobalCounters`; ``DEBUG>=2`` prints one line per item (time,
  GFLOPS, GB/s), ``DEBUG>=4`` the kernel source (when it is compiled), ``DEBUG>=5`` the kernel AST;
- the eager case (one kernel item, nothing capturing, ``DEBUG<2``) launches the kernel without building an
  `ExecItem`, with the same effect on buffers and counters; a Program may offer an optional
  ``launcher(global_size, local_size, vals)`` returning a callable on the buffer handles (None: not offered), which
  this path then uses instead of the full ``prg(*bufs, global_size=..., ...)`` call;
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
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from tinycore.device import LaunchableProgram
from tinycore.engine import live
from tinycore.engine.exec_item import BufferCopy, CompiledRunner, ExecItem, Runner, build_kernel_runners
from tinycore.engine.schedule import ScheduleItem
from tinycore.helpers import CAPTURING, DEBUG, GlobalCounters
from tinycore.uop.ops import Ops, UOp

__all__ = [
    "capture_exec_items",
    "clear_runner_cache",
    "get_kernel_runner",
    "capture_start",
    "is_capturing",
    "lower_schedule",
    "lower_schedule_item",
    "run_cached_schedule",
    "run_exec_items",
    "run_schedule",
    "runner_cache_info",
]

_kernel_runners: dict[tuple[UOp, str], Runner] = {}
_copy_runners: dict[tuple[int, str, str], BufferCopy] = {}
_stats = {"hits": 0, "misses": 0}


def _compile_kernel(ast: UOp, device: str) -> Runner:
    """Lower, render and compile one kernel AST for `device` (no cache; see `get_kernel_runner`)."""
    from tinycore.device import Device
    from tinycore.engine.search import kernel_program

    spec = kernel_program(ast, Device[device].renderer)
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
    global _runner_generation
    _kernel_runners.clear()
    _copy_runners.clear()
    _direct_launches.clear()
    _runner_generation += 1  # launch lists cached on schedule-cache entries are stale now
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


# runner -> how to launch it without an ExecItem: (callable on the buffer handles, ops, mem), or None when it needs
# the general path (variables, symbolic sizes or estimates, a runner other than a plain CompiledRunner). The callable
# is the Program's optional ``launcher(global_size, local_size, vals)`` when it has one, else a call of the Program.
_UNALLOCATED: Any = object()
_direct_launches: dict[Runner, tuple[Callable[..., Any], int, int] | None] = {}


def _direct_launch(runner: Runner) -> tuple[Callable[..., Any], int, int] | None:
    if type(runner) is not CompiledRunner or runner.p.vars:
        return None
    est = runner.estimates
    try:
        global_size, local_size = runner.p.launch_dims({})
    except Exception:  # noqa: BLE001 - symbolic launch sizes: the general path evaluates them per call
        return None
    if not all(isinstance(v, int) for v in (est.ops, est.mem)):
        return None
    prg = runner._prg
    # `LaunchableProgram.launcher`, the optional Program method giving a callable with the launch fixed
    launch = prg.launcher(global_size, local_size, ()) if isinstance(prg, LaunchableProgram) else None
    if launch is None:
        launch = functools.partial(prg, global_size=global_size, local_size=local_size, vals=(), wait=False)
    return launch, est.ops, est.mem


def _run_kernel_direct(runner: Runner, bufs: Sequence[Any], vals: dict[str, int], do_update_stats: bool) -> None:
    """What ``lower_schedule_item(si, vals).run(vals)`` does for a kernel item, without building the `ExecItem`:
    the eager path runs one small kernel per realize, where those objects cost more than the launch."""
    try:
        launch = _direct_launches[runner]
    except KeyError:
        launch = _direct_launches[runner] = _direct_launch(runner)
    if launch is None:
        ExecItem(runner, list(bufs), dict(vals)).run(vals, do_update_stats=do_update_stats)
        return
    call, ops, mem = launch
    handles = []
    for buf in bufs:
        handle = getattr(buf, "_buf", _UNALLOCATED)  # as `ensure_allocated`, without its calls
        handles.append(handle if handle is not _UNALLOCATED else buf.allocate()._buf)
    call(*handles)
    if do_update_stats:
        GlobalCounters.kernel_count += runner.kernel_count
        GlobalCounters.global_ops += ops
        GlobalCounters.global_mem += mem


_runner_generation = 0


def run_cached_schedule(
    entry: Any, bufs: Sequence[Any], var_vals: dict[str, int], do_update_stats: bool = True
) -> bool:
    """Run the kernels of a schedule-cache entry (`tinycore.engine.schedule.schedule_for_run`) on `bufs`, the buffer
    of every slot, the way `run_schedule` would run its items, without building items: the eager fast path.

    Returns False, having run nothing, when the general path is needed: something is capturing, ``DEBUG>=2``,
    variables are bound, the schedule holds a copy, or one of its kernels is not built yet (`run_schedule` builds
    new kernels, together when there are several) or can't be launched directly. The launches are cached on the
    entry (``entry.lowered``) until `clear_runner_cache`.
    """
    if var_vals or _captures or DEBUG.value >= 2:
        return False
    lowered = entry.lowered
    if lowered is None or lowered[0] != _runner_generation:
        launches: list[tuple[Any, ...]] | None = []
        for ast, slots, _ in entry.items:
            runner = _kernel_runners.get((ast, bufs[slots[0]].device)) if ast.op is Ops.SINK else None
            if runner is None:
                if ast.op is Ops.SINK:
                    return False  # not built yet: no verdict to remember
                launches = None  # a copy: this schedule always takes the general path
                break
            launch = _direct_launches.get(runner, False)
            if launch is False:
                launch = _direct_launches[runner] = _direct_launch(runner)
            if launch is None:
                launches = None
                break
            launches.append((*launch, slots, runner.kernel_count))
        lowered = entry.lowered = (_runner_generation, launches)
    if lowered[1] is None:
        return False
    for call, ops, mem, slots, kernel_count in lowered[1]:
        handles = []
        for slot in slots:
            buf = bufs[slot]
            handle = getattr(buf, "_buf", _UNALLOCATED)  # as `ensure_allocated`, without its calls
            handles.append(handle if handle is not _UNALLOCATED else buf.allocate()._buf)
        call(*handles)
        _stats["hits"] += 1
        if do_update_stats:
            GlobalCounters.kernel_count += kernel_count
            GlobalCounters.global_ops += ops
            GlobalCounters.global_mem += mem
    return True


def lower_schedule(schedule: Sequence[ScheduleItem], var_vals: dict[str, int] | None = None) -> Iterator[ExecItem]:
    """Lower the items one by one (lazily, so a failing kernel names itself before the next is compiled)."""
    for si in schedule:
        yield lower_schedule_item(si, var_vals)


# ---------------------------------------------------------------------------------------------------------------
# capture hook


_captures: list[tuple[Callable[[ExecItem], Any], bool]] = []
_capture_marks: list[int] = []  # `tinycore.engine.live.mark()` at the start of each active capture


@contextlib.contextmanager
def capture_exec_items(callback: Callable[[ExecItem], Any], run: bool = True) -> Iterator[None]:
    """While active, every `ExecItem` that `run_schedule` produces is passed to `callback`, in execution order
    (innermost capture only); with ``run=False`` the items are not executed. ``CAPTURING=0`` disables recording.

    >>> items = []
    >>> with capture_exec_items(items.append):
    ...     pass
    """
    _captures.append((callback, run))
    _capture_marks.append(live.mark())
    try:
        yield
    finally:
        _captures.pop()
        _capture_marks.pop()


def is_capturing() -> bool:
    """True inside `capture_exec_items` (and ``CAPTURING`` is on)."""
    return bool(_captures) and bool(CAPTURING)


def capture_start() -> int | None:
    """The `tinycore.engine.live` number at the start of the innermost active capture (None when not capturing):
    tensors numbered below it were made outside the captured function."""
    return _capture_marks[-1] if _captures and CAPTURING else None


def run_exec_items(items: Sequence[ExecItem], do_update_stats: bool = True) -> None:
    """Run `items` in order as `run_schedule` runs the items it lowers: inside `capture_exec_items` each is handed
    to the capture's callback first (and not run with ``run=False``). For runners made outside the scheduler (the
    collectives of `tinycore.distributed`), so TinyJit records them between the kernels around them and replays them.
    """
    capture = _captures[-1] if _captures and CAPTURING else None
    for ei in items:
        if capture is not None:
            capture[0](ei)
            if not capture[1]:
                continue
        ei.run(do_update_stats=do_update_stats)


def run_schedule(
    schedule: Sequence[ScheduleItem], var_vals: dict[Any, int] | None = None, do_update_stats: bool = True
) -> None:
    """Lower and run every item of `schedule` in order, with variable values `var_vals` (keys: names or
    DEFINE_VAR uops)."""
    vals: dict[str, int] = {}
    if var_vals:
        vals = {(k if isinstance(k, str) else k.expr): v for k, v in var_vals.items()}
    capture = _captures[-1] if _captures and CAPTURING else None
    if capture is None and DEBUG.value < 2 and len(schedule) == 1:  # the eager common case: one item, no capture
        si = schedule[0]
        if si.ast.op is Ops.SINK:
            runner = _kernel_runners.get((si.ast, si.bufs[0].device))
            if runner is None:
                runner = get_kernel_runner(si.ast, si.bufs[0].device)
            else:
                _stats["hits"] += 1
            _run_kernel_direct(runner, si.bufs, vals, do_update_stats)
            return
    if len(schedule) > 1:  # the schedule's new kernels are built together: one batch compile, overlapping lowering
        new = build_kernel_runners([(si.ast, si.bufs[0].device) for si in schedule], _kernel_runners)
        _kernel_runners.update(new)
        _stats["misses"], _stats["hits"] = _stats["misses"] + len(new), _stats["hits"] - len(new)
    for si in schedule:
        ei = lower_schedule_item(si, vals)
        if capture is not None:
            capture[0](ei)
            if not capture[1]:
                continue
        ei.run(vals, do_update_stats=do_update_stats)
