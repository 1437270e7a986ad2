"""The schedule cache: a scheduled graph remembered in terms of *slots*, found again by a structural key.

A schedule-cache entry (`CachedSchedule`) names buffers by slot: input buffers by position of first appearance in
the graph, new buffers by spec ``(device, size, dtype)``. The key (`KeyWalk`) is one walk over the graph in which
every `BUFFER` is replaced by its slot (by the `Buffer` it stands for, so aliasing is part of the key) and every
`BIND` loses its value; nodes that an earlier realize computed (`tinycore.engine.realized`) stand for the buffer
view holding them. A hit runs only that walk and builds the new buffers and output uops: no rewrite pass at all
(`schedule_stats` counts hits, misses and passes).

Two maps hold entries: `schedule_cache` by graph key, and `eager_schedules` by the structure id of an eager
elementwise chain (`tinycore.engine.eager`), which serves a repeated chain without any walk. Both are bounded
(`SCHEDULE_CACHE_LIMIT`) and dropped together by `clear_schedule_cache`, or when a knob that changes kernel
boundaries (``FUSE_ROWS``) changed since they were made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tinycore.device import Buffer
from tinycore.dtype import DType, dtypes
from tinycore.engine.realized import (
    UOpTable,
    buffer_of,
    buffer_table,
    device_node,
    realized_table,
    realized_view,
    unique_ids,
    valid_view,
)
from tinycore.engine.views import bind_arg, is_symbolic_arg, strip_binds
from tinycore.helpers import DEBUG, FUSE_ROWS
from tinycore.uop.ops import GroupOp, Ops, UOp

__all__ = [
    "SCHEDULE_CACHE_LIMIT",
    "CachedSchedule",
    "KeyWalk",
    "OutputView",
    "ScheduleStats",
    "check_cache_settings",
    "clear_schedule_cache",
    "eager_schedules",
    "leaf_buffer",
    "remember_chain_schedule",
    "schedule_cache",
    "schedule_stats",
    "store",
]


@dataclass
class ScheduleStats:
    """Counters of the scheduler (process-wide, reset with `reset()`): schedule-cache `hits` and `misses`, and
    `rewrite_passes`, the number of `graph_rewrite` passes the scheduler ran (a hit runs none)."""

    hits: int = 0
    misses: int = 0
    rewrite_passes: int = 0

    def reset(self) -> None:
        """Zero every counter."""
        self.hits = self.misses = self.rewrite_passes = 0


schedule_stats = ScheduleStats()

# ---------------------------------------------------------------------------------------------------------------
# the cache key walk (the only graph work on a cache hit)

# nodes whose graph holds no BUFFER and no BIND: the cache key names them by identity instead of walking them
_pure = UOpTable()
_pure_data = _pure.data
_buffers_data = buffer_table.data
_realized_data = realized_table.data
_BUFFER, _BIND = Ops.BUFFER, Ops.BIND
_KEY_LEAVES = frozenset({Ops.CONST, Ops.DEVICE, Ops.DEFINE_VAR, Ops.UNIQUE, Ops.VCONST})
_MOVEMENT = GroupOp.Movement


def leaf_buffer(leaf: UOp) -> UOp:
    """The BUFFER node of an eager chain's leaf (`tinycore.engine.eager`): the leaf itself, or the BUFFER under a
    leaf that reshapes one."""
    return leaf.src[0] if leaf.op is Ops.RESHAPE else leaf


class KeyWalk:
    """The result of normalizing a graph: its key, its input buffers in slot order, bound variables, realized nodes.

    The key lists one entry per node (sources by position); a BUFFER is `(BUFFER, dtype, size, device, slot)` where
    slot numbers the distinct `Buffer`s by first appearance, a BIND keeps only its variable, and a sub-graph without
    buffers or binds (constants, broadcasts of constants) is named by its hash-consed node itself, so it costs one
    lookup. A node computed by an earlier realize stands for the buffer view holding it (`subst` maps it there).
    """

    __slots__ = (
        "key",
        "in_uops",
        "in_bufs",
        "slot_of",
        "var_vals",
        "subst",
        "_binds",
        "_slot_by_buf",
        "_index",
        "_enc",
    )

    def __init__(self, roots: Sequence[UOp]):
        self.in_uops: list[UOp] = []
        self.in_bufs: list[Buffer] = []
        self.slot_of: dict[UOp, int] = {}
        self.subst: dict[UOp, UOp] = {}
        self._binds: dict[UOp, int] = {}
        self._slot_by_buf: dict[int, int] = {}
        self._index: dict[UOp, int] = {}
        self._enc: list[Any] = []
        try:
            root_ids = tuple([self._visit(r) for r in roots])
        except RecursionError:  # a very deep graph: visit it sources first, so the recursion stays shallow
            self.in_uops, self.in_bufs, self.slot_of, self.subst = [], [], {}, {}
            self._binds, self._slot_by_buf, self._index, self._enc = {}, {}, {}, []
            for r in roots:
                for node in r.toposort(gate=lambda n: realized_view(n) is None and _pure.get(n) is None):
                    self._visit(node)
            root_ids = tuple(self._visit(r) for r in roots)
        self.key = (tuple(self._enc), root_ids)
        self.var_vals = {var.arg[0]: value for var, value in self._binds.items()} if self._binds else {}

    @classmethod
    def of_chain(cls, leaf: UOp) -> KeyWalk:
        """What the walk of an eager chain over `leaf` (a BUFFER, or a RESHAPE of one) finds
        (`tinycore.engine.eager`); no key."""
        walk = cls.__new__(cls)
        leaf = leaf_buffer(leaf)
        buf = buffer_table.get(leaf)
        walk.in_uops, walk.in_bufs = [leaf], [buf if buf is not None else buffer_of(leaf)]
        walk.slot_of, walk.var_vals, walk.subst, walk.key = {leaf: 0}, {}, {}, None
        return walk

    def _visit(self, node: UOp) -> Any:
        """The key reference of `node`: its position in the key, or the node itself when its sub-graph holds no
        buffer and no bind (then it is never given a position, so the key does not depend on whether the purity
        was known before this walk)."""
        # hot on every realize: module constants are bound to locals and the common elementwise node takes the
        # first branch with one table lookup per node and per source
        index = self._index
        i = index.get(node)
        if i is not None:
            return i
        op = node.op
        if op in _KEY_LEAVES:
            return node
        if op is _BUFFER:
            found = _buffers_data.get(id(node))
            buf = found[1] if found is not None and found[0]() is node else buffer_of(node)
            slot = self._slot_by_buf.get(id(buf))
            if slot is None:
                slot = self._slot_by_buf[id(buf)] = len(self.in_bufs)
                self.in_bufs.append(buf)
                self.in_uops.append(node)
            self.slot_of[node] = slot
            item: Any = (_BUFFER, node.dtype, node.arg, node.src[1].arg, slot)
        elif op is _BIND:
            var, value = node.src[0], node.src[1].arg
            if self._binds.setdefault(var, value) != value:
                raise ValueError(f"variable {var.arg[0]!r} is bound to both {self._binds[var]} and {value}")
            item = (_BIND, var)
        else:
            node_id = id(node)
            entry = _pure_data.get(node_id)
            if entry is not None and entry[0]() is node:
                return node  # a realized pure node is recomputed from its constants: same values, no buffer read
            entry = _realized_data.get(node_id)
            if entry is not None and entry[0]() is node:
                view = valid_view(entry[1])
                if view is not None:
                    self.subst[node] = view
                    ref = index[node] = self._visit(view)
                    return ref
            item = [op, node.dtype, node.arg, node.tag]
            pure = True
            for src in node.src:
                ref = index.get(src)
                if ref is None:
                    if src.op in _KEY_LEAVES:
                        ref = src
                    else:
                        entry = _pure_data.get(id(src))
                        if entry is not None and entry[0]() is src:
                            ref = index[src] = src  # a constant operand is usually used again in the graph
                        else:
                            ref = self._visit(src)
                if pure and type(ref) is int:
                    pure = False
                item.append(ref)
            if op in _MOVEMENT and is_symbolic_arg(item[2]):
                item[2], pure = strip_binds(item[2], self._binds), False
            if pure:
                _pure[node] = True
                return node
            item = tuple(item)
        enc = self._enc
        i = index[node] = len(enc)
        enc.append(item)
        return i


# ---------------------------------------------------------------------------------------------------------------
# cache entries: a schedule in terms of slots


@dataclass
class OutputView:
    """How a requested output's new uop is built: movement `chain` over the BUFFER of `slot` (`fresh`: a new BUFFER
    uop for that slot even when it is an input, as after an ASSIGN)."""

    slot: int
    fresh: bool
    chain: tuple[tuple[Ops, Any], ...]
    depth: int = 0  # movement ops between the root and the node that was computed into the buffer
    above: tuple[tuple[Ops, Any], ...] = ()  # those movement ops, root first
    point_op: Ops | None = None  # the op of the computed node
    symbolic: bool = False  # the chain holds unbound variables (symbolic shapes): bound per call
    point_shape: tuple[int, ...] | None = None  # the computed node's shape when fixed (a hit reads it, no walk)


@dataclass
class CachedSchedule:
    """A cached schedule. Slots ``< n_inputs`` are the input buffers; the others are new buffers `new_specs`
    ``(device, size, dtype)``; `internal` slots live only inside the schedule and take their memory from `plan`.
    `items` are ``(ast, slots, metadata)``: `tinycore.engine.schedule.schedule_items` makes `ScheduleItem`s of
    them on one call's buffers."""

    n_inputs: int
    new_specs: list[tuple[str, int, DType]]
    items: list[tuple[UOp, tuple[int, ...], tuple[Any, ...]]]
    outputs: list[OutputView | None]
    internal: frozenset[int]
    plan: Any = None  # tinycore.engine.memory.SlotPlan
    out_slots: tuple[int, ...] = ()
    written_inputs: tuple[int, ...] = ()  # input slots that an ASSIGN writes
    lowered: Any = None  # the realize engine's cache of this schedule's launches (`tinycore.engine.realize`)

    def buffers(self, walk: KeyWalk) -> list[Buffer]:
        """This call's buffer of every slot: the walk's inputs, then new (unallocated) buffers."""
        return self.slot_buffers(walk.in_bufs)

    def slot_buffers(self, in_bufs: list[Buffer]) -> list[Buffer]:
        """The buffer of every slot given the input buffers `in_bufs` (in slot order): those, then new ones."""
        if self.plan is None:
            return [*in_bufs, *[Buffer(dev, size, dtype) for dev, size, dtype in self.new_specs]]
        bufs = list(in_bufs)
        planned = self.plan.buffers(self.new_specs, self.n_inputs)
        for i, (device, size, dtype) in enumerate(self.new_specs):
            slot = self.n_inputs + i
            bufs.append(planned[slot] if slot in planned else Buffer(device, size, dtype))
        return bufs

    def output_uops(self, walk: KeyWalk, bufs: Sequence[Buffer]) -> list[UOp | None]:
        """The new uop of each requested output (None: unchanged), over the buffers `bufs` of every slot."""
        new_uops: list[UOp | None] = []
        made: dict[int, UOp] = {}
        for out in self.outputs:
            if out is None:
                new_uops.append(None)
                continue
            base = made.get(out.slot)
            if base is None:
                if out.slot < self.n_inputs and not out.fresh:
                    base = walk.in_uops[out.slot]
                else:  # a BUFFER uop for it, as `new_buffer_uop` makes (the spec is known to match)
                    buf = bufs[out.slot]
                    unique = UOp(Ops.UNIQUE, dtypes.void, (), next(unique_ids))
                    base = UOp(_BUFFER, buf.dtype, (unique, device_node(buf.device)), buf.size)
                    buffer_table[base] = buf
                made[out.slot] = base
            view = base
            for op, arg in out.chain:
                view = UOp(op, view.dtype, (view,), bind_arg(arg, walk.var_vals) if out.symbolic else arg)
            new_uops.append(view)
        return new_uops


# ---------------------------------------------------------------------------------------------------------------
# the maps

SCHEDULE_CACHE_LIMIT = 4096  # entries of each map; beyond, the oldest is dropped (graphs whose constants change)
schedule_cache: dict[Any, CachedSchedule] = {}  # `KeyWalk.key` -> the graph's schedule
eager_schedules: dict[int, CachedSchedule] = {}  # eager chain structure id -> the schedule of that chain
_cached_fuse_rows: list[Any] = [None]  # the FUSE_ROWS value the cached schedules were made with


def clear_schedule_cache() -> None:
    """Forget every cached schedule (the next realize of each graph schedules it again)."""
    schedule_cache.clear()
    eager_schedules.clear()


def check_cache_settings() -> None:
    """Drop the cached schedules when a knob that changes kernel boundaries (``FUSE_ROWS``) changed since."""
    if FUSE_ROWS.value != _cached_fuse_rows[0]:
        clear_schedule_cache()
        _cached_fuse_rows[0] = FUSE_ROWS.value


def store(key: Any, entry: CachedSchedule) -> None:
    """Cache `entry`, a fresh schedule, under the graph key `key` (dropping the oldest entry beyond the limit)."""
    if len(schedule_cache) >= SCHEDULE_CACHE_LIMIT:
        del schedule_cache[next(iter(schedule_cache))]
        eager_schedules.clear()  # it may hold the dropped entry
    schedule_cache[key] = entry
    if DEBUG >= 3:
        print(f"scheduled {len(entry.items)} item(s), {entry.n_inputs} input(s), {len(entry.new_specs)} new buffer(s)")
        for i, (ast, slots, meta) in enumerate(entry.items):
            kind = "copy" if ast.op is Ops.COPY else f"kernel {len(ast.toposort())} uops"
            print(f"  {i:3d} {kind:18s} slots {slots} {' '.join(map(str, meta))}")


def remember_chain_schedule(chain_id: int, entry: CachedSchedule) -> None:
    """Serve the eager chains of structure `chain_id` with `entry` from now on (`tinycore.engine.eager`)."""
    if len(eager_schedules) >= SCHEDULE_CACHE_LIMIT:
        eager_schedules.clear()
    eager_schedules[chain_id] = entry
