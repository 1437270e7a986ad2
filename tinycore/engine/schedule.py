"""The scheduler: a tensor graph in, a list of `ScheduleItem(ast, bufs)` out (see `docs/pipeline.md`).

The scheduler is five modules; this one holds the public entry points and runs the steps in order
(`schedule_graph`). Each module imports only those above it in this list:

- `tinycore.engine.views`: views of flat buffers (movement ops over a BUFFER) and symbolic movement args;
- `tinycore.engine.realized`: the `Buffer` behind each BUFFER uop, and the realized table (values an earlier
  realize computed, read from their buffers by later graphs);
- `tinycore.engine.schedule_cache`: the schedule cache, its key walk and its entries (schedules in terms of
  buffer slots);
- `tinycore.engine.eager`: the eager fast path (chain keys given to elementwise chains as they are built);
- `tinycore.engine.fusion`: realize points and kernel grouping (cache misses only);
- `tinycore.engine.schedule` (this module): `ScheduleItem`, the entry points, the pass order.

Steps on a schedule-cache miss (`schedule_graph`):

1. **normalize**: one walk over the graph builds a structural key in which every `BUFFER` is replaced by its order of
   first appearance (by the `Buffer` it stands for, so aliasing is part of the key) and every `BIND` loses its value;
   nodes that an earlier realize already computed (the *realized table*) are read from their buffers
   (`schedule_cache.KeyWalk`);
2. **simplify**: the `schedule:early` rewrite pass (drop `DETACH`, fold no-op movement ops, `CONTIGUOUS` of a buffer);
3. **realize points**: outputs, `CONTIGUOUS`, `ASSIGN`, `COPY` (and a copy's source unless it is a plain buffer), a
   value holding a reduce when it is broadcast (`EXPAND`) or reduced again, a value holding a reduce that two
   kernels need (recomputing it would repeat the reduction), and a costly value of other kernels' outputs that is
   broadcast into a reduce (fused, the reduce would recompute it per broadcast element: a softmax backward inside
   the gradient matmuls). Everything else is fused into the kernels that use it. Exception, on devices whose
   renderer fuses rows (`tinycore.renderer.Renderer.fuses_row`: one CPU thread, or one GPU work-group, runs a
   whole row): a reduce over the last axis of rows that short, whose result is only broadcast back over them
   (maybe through row-sized elementwise ops), stays in the kernel that uses it (`fusion.FusionGraph._row_reduces`;
   ``FUSE_ROWS=0`` turns it off): softmax, log-softmax and layernorm are one kernel reading each row from memory
   once. Such a reduce needed by two kernels
   is realized; the cheap rest of the value is recomputed in each;
4. **kernel ASTs**: the `schedule:kernel_ast` pass turns each kernel's region into ``SINK(STORE(target, value))``
   with `LOAD(DEFINE_GLOBAL)` inputs;
5. **order**: kernels sorted by dependencies, including read-before-assign (a kernel reading the old contents of X
   runs before the kernel that assigns X);
6. **multi-output kernels**: kernels of the same device and output shape that read a common input and don't depend
   on each other become one kernel with several STOREs (``x.sum(1)`` and ``x.max(1)`` realized together; ``x * 2``
   and ``x + 1``), sharing their loads (`fusion.FusionGraph.group_outputs`);
7. **memory plan**: internal buffers share arenas by lifetime (`tinycore.engine.memory`).

**Symbolic shapes.** A value whose shape holds bound variables gets a buffer sized for the variables' maximum; its
kernel stores the first ``prod(shape)`` elements (the variable is a kernel argument) and readers see the buffer
through ``SHRINK(0, numel) -> RESHAPE(shape)``. The cache entry keeps those views unbound and binds each call's
values when it builds the outputs, so one schedule serves every value in range.

The result is cached in terms of *slots* (input buffers by position, new buffers by spec); a cache hit runs only the
key walk and builds the new buffers and output uops: no rewrite pass at all (`schedule_stats` counts both). After
every schedule, the outputs enter the realized table (`tinycore.engine.realized`).

>>> from tinycore.dtype import dtypes
>>> x = new_buffer_uop("PYTHON", 4, dtypes.float)
>>> one = UOp.const(dtypes.float, 1.0, "PYTHON").reshape((1,)).expand((4,))
>>> items, var_vals = create_schedule_with_vars(UOp.sink(x + one))
>>> len(items), items[0].ast.op, var_vals
(1, Ops.SINK, {})
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tinycore.device import Buffer
from tinycore.engine.eager import schedule_for_chain
from tinycore.engine.fusion import FusionGraph, simplify
from tinycore.engine.gemm_packing import pack_gemm_operands
from tinycore.engine.memory import plan_slots
from tinycore.engine.multi import schedule_multi
from tinycore.engine.realized import (
    buffer_of,
    buffer_view,
    buffer_written,
    new_buffer_uop,
    realized_table,
    realized_view,
    remember_outputs,
)
from tinycore.engine.schedule_cache import (
    SCHEDULE_CACHE_LIMIT,
    CachedSchedule,
    KeyWalk,
    ScheduleStats,
    check_cache_settings,
    clear_schedule_cache,
    eager_schedules,
    leaf_buffer,
    remember_chain_schedule,
    schedule_cache,
    schedule_stats,
    store,
)
from tinycore.uop.ops import Ops, UOp

# besides its own names, this module re-exports the ones callers imported from it before the split (the limit is
# read in `schedule_cache`: set `schedule_cache.SCHEDULE_CACHE_LIMIT` to change it)
__all__ = [
    "SCHEDULE_CACHE_LIMIT",
    "ScheduleItem",
    "ScheduleStats",
    "buffer_of",
    "buffer_view",
    "buffer_written",
    "clear_schedule_cache",
    "create_schedule_with_vars",
    "new_buffer_uop",
    "readers_of",
    "realized_view",
    "schedule_for_chain",
    "schedule_for_run",
    "schedule_graph",
    "schedule_items",
    "schedule_outputs",
    "schedule_stats",
    "set_readers_hook",
]


@dataclass(slots=True)
class ScheduleItem:
    """One step of a schedule: a kernel AST (``SINK`` of ``STORE``s) or a ``COPY``, and the buffers it runs on.

    ``bufs[i]`` is bound to ``DEFINE_GLOBAL(arg=i)``; outputs come first. For a copy, ``bufs = (dest, src)``.
    `metadata` is free-form (for now: a short description of what the kernel computes).
    """

    ast: UOp
    bufs: tuple[Buffer, ...]
    metadata: tuple[Any, ...] = ()

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        """The buffers this item writes (one per STORE; the destination of a copy)."""
        return self.bufs[: len(self.ast.src)] if self.ast.op is Ops.SINK else self.bufs[:1]

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        """The buffers this item only reads."""
        return self.bufs[len(self.outputs) :]


def schedule_items(entry: CachedSchedule, bufs: Sequence[Buffer]) -> list[ScheduleItem]:
    """The `ScheduleItem`s of the cached schedule `entry` on `bufs`, the buffer of every slot."""
    return [ScheduleItem(ast, tuple([bufs[s] for s in slots]), meta) for ast, slots, meta in entry.items]


# ---------------------------------------------------------------------------------------------------------------
# the pass order (a cache miss)


def schedule_graph(roots: Sequence[UOp], walk: KeyWalk) -> CachedSchedule:
    """Schedule `roots` from scratch, given their key walk `walk`: the steps of the module docstring, in order."""
    schedule_stats.misses += 1
    sink = UOp.sink(*roots)
    if walk.subst:  # 1. normalize: nodes an earlier realize computed are read from their buffers
        sink = sink.substitute(walk.subst)
    sink = pack_gemm_operands(sink)  # matmul right operands the device wants in column panels
    graph = FusionGraph(simplify(sink), walk)  # 2. simplify
    graph.find_realize_points()  # 3. realize points
    graph.assign_slots()
    order = graph.order()  # 5. order
    groups = graph.group_outputs(order)  # 6. multi-output kernels
    items = [graph.kernel(g) for g in groups if not graph.computes_nothing(g)]  # 4. kernel ASTs
    outputs = [graph.output(r) for r in graph.roots]
    n_in = len(walk.in_bufs)
    out_slots = {o.slot for o in outputs if o is not None}
    internal = frozenset(n_in + i for i in range(len(graph.new_specs))) - out_slots
    plan = plan_slots([slots for _, slots, _ in items], internal, graph.slot_spec) if internal else None  # 7.
    written = graph.written_slots()
    return CachedSchedule(n_in, graph.new_specs, items, outputs, internal, plan, tuple(sorted(out_slots)), written)


# ---------------------------------------------------------------------------------------------------------------
# public entry points


def schedule_outputs(roots: Sequence[UOp]) -> tuple[list[ScheduleItem], dict[str, int], list[UOp | None]]:
    """Schedule the computation of `roots` (tensor-level uops).

    Returns the items, the variable values (by name) and, per root, the uop that now holds its value (a view of a
    buffer; None when the root needs no buffer, e.g. a broadcast constant). Every root that got a buffer is entered
    in the realized table, so other graphs that contain it read the buffer instead of recomputing it.
    A `MULTI` root (a sharded tensor) is scheduled shard by shard in the same schedule (`tinycore.engine.multi`).
    """
    for r in roots:
        if r.op is Ops.MULTI:
            return schedule_multi(roots, schedule_outputs)
    entry, walk, bufs, new_uops = schedule_for_run(roots)
    return schedule_items(entry, bufs), walk.var_vals, new_uops


ReadersResult = tuple[list[UOp], Callable[[list[UOp | None]], None]] | None
ReadersHook = Callable[[list[Buffer], Sequence[UOp]], ReadersResult]
_readers_hook: ReadersHook | None = None


def set_readers_hook(hook: ReadersHook | None) -> None:
    """Install the function that `schedule_for_run` asks, when a schedule writes buffers (ASSIGN), for the lazy values
    elsewhere that read those buffers' old contents: ``hook(written_buffers, roots)`` returns None, or the values'
    uops and a callback that receives their new uops (buffer views) once they are scheduled with `roots`. The
    scheduler orders every read of a buffer before the write into it, so those values see the old contents."""
    global _readers_hook
    _readers_hook = hook


def readers_of(written: list[Buffer], roots: Sequence[UOp]) -> ReadersResult:
    """What `schedule_for_run` would schedule before a write into the buffers `written`: the live lazy values that
    read their current contents (not counting `roots`), with the callback that hands those values their new uops once
    they are computed; None when there are none (or no hook is installed). A caller that knows those buffers are
    about to be written (a training step's parameters) computes the values early, in one schedule with `roots`."""
    return None if _readers_hook is None else _readers_hook(written, roots)


_realized_data = realized_table.data


def schedule_for_run(roots: Sequence[UOp]) -> tuple[CachedSchedule, KeyWalk, list[Buffer], list[UOp | None]]:
    """`schedule_outputs` for the realize engine, without `ScheduleItem`s: the cached schedule, the walk (its
    `var_vals`), the buffer of every slot and the new uop of every root (roots on one device each: no `MULTI`).
    The realized table is updated as in `schedule_outputs`. A root with an eager chain key
    (`tinycore.engine.eager`) whose structure was scheduled before skips the key walk."""
    check_cache_settings()
    chain = roots[0].chain_key if len(roots) == 1 else None
    entry = eager_schedules.get(chain[0]) if chain is not None else None
    if entry is not None and _realized_data.get(id(roots[0])) is None:
        walk = KeyWalk.of_chain(chain[1])  # type: ignore[index, arg-type]
        schedule_stats.hits += 1
    else:
        walk = KeyWalk(roots)
        entry = schedule_cache.get(walk.key)
        if entry is not None:
            schedule_stats.hits += 1
        else:
            entry = schedule_graph(roots, walk)
            store(walk.key, entry)
        if chain is not None and chain[1] is not None and walk.in_uops == [leaf_buffer(chain[1])] and not walk.subst:
            if not walk.var_vals and not entry.written_inputs:  # the walk found the chain's structure only
                remember_chain_schedule(chain[0], entry)
    if entry.written_inputs and _readers_hook is not None:
        readers = _readers_hook([walk.in_bufs[slot] for slot in entry.written_inputs], roots)
        if readers is not None:  # lazy values of the old contents: computed in this schedule, before the writes
            extra, deliver = readers
            entry, walk, bufs, new_uops = schedule_for_run((*roots, *extra))
            deliver(new_uops[len(roots) :])
            return entry, walk, bufs, new_uops[: len(roots)]
    bufs = entry.buffers(walk)
    new_uops = entry.output_uops(walk, bufs)
    for slot in entry.written_inputs:  # ASSIGN targets: values computed from their old contents are stale now
        buffer_written(walk.in_bufs[slot])
    remember_outputs(roots, new_uops, entry.outputs, walk.in_bufs, bool(entry.written_inputs))
    return entry, walk, bufs, new_uops


def create_schedule_with_vars(sink: UOp) -> tuple[list[ScheduleItem], dict[str, int]]:
    """Schedule every source of `sink` (a `SINK` of tensor-level uops): ``(items, {variable name: value})``.

    The realized table is updated as in `schedule_outputs`; run the items with
    `tinycore.engine.realize.run_schedule` before reading the outputs.
    """
    if sink.op is not Ops.SINK:
        raise TypeError(f"create_schedule_with_vars needs a SINK, got {sink.op}")
    items, var_vals, _ = schedule_outputs(sink.src)
    return items, var_vals
