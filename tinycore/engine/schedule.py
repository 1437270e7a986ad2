"""The scheduler: a tensor graph in, a list of `ScheduleItem(ast, bufs)` out (see `docs/pipeline.md`).

Steps on a schedule-cache miss:

1. **normalize**: one walk over the graph builds a structural key in which every `BUFFER` is replaced by its order of
   first appearance (by the `Buffer` it stands for, so aliasing is part of the key) and every `BIND` loses its value;
   nodes that an earlier realize already computed (the *realized table*) are read from their buffers;
2. **simplify**: the `schedule:early` rewrite pass (drop `DETACH`, fold no-op movement ops, `CONTIGUOUS` of a buffer);
3. **realize points**: outputs, `CONTIGUOUS`, `ASSIGN`, `COPY` (and a copy's source unless it is a plain buffer), a
   value holding a reduce when it is broadcast (`EXPAND`) or reduced again, a value holding a reduce that two
   kernels need (recomputing it would repeat the reduction), and a costly value of other kernels' outputs that is
   broadcast into a reduce (fused, the reduce would recompute it per broadcast element: a softmax backward inside
   the gradient matmuls). Everything else is fused into the kernels that use it. Exception, on devices whose
   renderer sets ``row_reduce_bytes`` (CPU-style: one thread runs a whole row): a reduce over the last axis of
   rows that short, whose result is only broadcast back over them (maybe through row-sized elementwise ops), stays
   in the kernel that uses it (`_Scheduler._row_reduces`; ``FUSE_ROWS=0`` turns it off): softmax, log-softmax and
   layernorm are one kernel reading each row from memory once. Such a reduce needed by two kernels is realized;
   the cheap rest of the value is recomputed in each;
4. **kernel ASTs**: the `schedule:kernel_ast` pass turns each kernel's region into ``SINK(STORE(target, value))``
   with `LOAD(DEFINE_GLOBAL)` inputs;
5. **order**: kernels sorted by dependencies, including read-before-assign (a kernel reading the old contents of X
   runs before the kernel that assigns X);
6. **multi-output kernels**: kernels of the same device and output shape that read a common input and don't depend
   on each other become one kernel with several STOREs (``x.sum(1)`` and ``x.max(1)`` realized together; ``x * 2``
   and ``x + 1``), sharing their loads (`_Scheduler._group_outputs`);
7. **memory plan**: internal buffers share arenas by lifetime (`tinycore.engine.memory`).

**Symbolic shapes.** A value whose shape holds bound variables gets a buffer sized for the variables' maximum; its
kernel stores the first ``prod(shape)`` elements (the variable is a kernel argument) and readers see the buffer
through ``SHRINK(0, numel) -> RESHAPE(shape)``. The cache entry keeps those views unbound and binds each call's
values when it builds the outputs, so one schedule serves every value in range.

The result is cached in terms of *slots* (input buffers by position, new buffers by spec); a cache hit runs only the
key walk and builds the `ScheduleItem`s for the new buffers: no rewrite pass at all (`schedule_stats` counts both).

**The realized table.** Every requested output that got a buffer is entered in a weak table, node -> buffer view,
so any other graph still holding that node (UOps are hash-consed: rebuilding the same expression on the same inputs
gives the same node) reads the buffer instead of recomputing it; entries die with their nodes, and nothing scans the
live tensors. An entry stays valid while none of the buffers it was computed from is written: an ASSIGN (or a
`buffer_written` call, e.g. from a JIT replay) drops it, so graphs built afterwards compute with the new contents.
An ASSIGN's target gets a fresh BUFFER uop on the same `Buffer`, so graphs built after the write are new nodes.

>>> from tinycore.dtype import dtypes
>>> from tinycore.engine.schedule import new_buffer_uop, create_schedule_with_vars
>>> x = new_buffer_uop("PYTHON", 4, dtypes.float)
>>> one = UOp.const(dtypes.float, 1.0, "PYTHON").reshape((1,)).expand((4,))
>>> items, var_vals = create_schedule_with_vars(UOp.sink(x + one))
>>> len(items), items[0].ast.op, var_vals
(1, Ops.SINK, {})
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tinycore.device import Buffer, renderer_setting
from tinycore.dtype import DType, dtypes
from tinycore.helpers import DEBUG, FUSE_ROWS, prod
from tinycore.uop.ops import GroupOp, Ops, UOp
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite

__all__ = [
    "ScheduleItem",
    "SCHEDULE_CACHE_LIMIT",
    "ScheduleStats",
    "buffer_of",
    "buffer_written",
    "clear_schedule_cache",
    "create_schedule_with_vars",
    "new_buffer_uop",
    "realized_view",
    "schedule_for_run",
    "schedule_outputs",
    "schedule_stats",
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
# buffers of BUFFER uops, and the realized table

_unique_ids = itertools.count()


class _IdTable:
    """A weak-keyed table of UOps keyed by `id` (UOps hash by identity): lookups cost one plain dict access, and an
    entry disappears when its key uop is collected."""

    __slots__ = ("data", "__weakref__")

    def __init__(self) -> None:
        self.data: dict[int, tuple[weakref.ReferenceType, Any]] = {}

    def get(self, key: UOp) -> Any:
        entry = self.data.get(id(key))
        return entry[1] if entry is not None and entry[0]() is key else None

    def __contains__(self, key: UOp) -> bool:
        return self.get(key) is not None

    def __setitem__(self, key: UOp, value: Any) -> None:
        data, k = self.data, id(key)

        def drop(ref: weakref.ReferenceType, k: int = k) -> None:
            entry = data.get(k)
            if entry is not None and entry[0] is ref:
                del data[k]

        self.data[k] = (weakref.ref(key, drop), value)

    def __len__(self) -> int:
        return len(self.data)


# BUFFER uop -> the Buffer holding its data (the entry lives as long as the uop, i.e. as long as a graph uses it)
_buffers = _IdTable()
# a tensor-graph node computed by an earlier realize -> (the buffer view holding its value, write epoch, input buffers)
_realized = _IdTable()
# nodes whose graph holds no BUFFER and no BIND: the cache key names them by identity instead of walking them
_pure = _IdTable()
# writes into buffers that graphs may still read (ASSIGN, TinyJit replays): a global epoch, and per written buffer the
# epoch of its last write; a realized-table entry records the epoch it was made at and the buffers it was computed
# from, and is valid while none of them was written since (see `buffer_written`)
_write_epoch = 0
_last_write: weakref.WeakKeyDictionary[Buffer, int] = weakref.WeakKeyDictionary()
_device_nodes: dict[str, UOp] = {}


def _device_node(device: str) -> UOp:
    node = _device_nodes.get(device)
    if node is None:
        node = _device_nodes[device] = UOp.device_node(device)
    return node


def new_buffer_uop(device: str, size: int, dtype: DType, buffer: Buffer | None = None) -> UOp:
    """A fresh tensor-level `BUFFER` uop (new UNIQUE id) backed by `buffer` (default: a new, unallocated one).

    >>> from tinycore.dtype import dtypes
    >>> u = new_buffer_uop("PYTHON", 3, dtypes.int32)
    >>> u.op, u.shape, buffer_of(u).size
    (Ops.BUFFER, (3,), 3)
    """
    if buffer is None:
        buffer = Buffer(device, size, dtype)
    elif buffer.size != size or buffer.dtype != dtype:
        raise ValueError(f"{buffer!r} can't back a BUFFER of {size} x {dtype}")
    uop = UOp(Ops.BUFFER, dtype, (UOp(Ops.UNIQUE, dtypes.void, (), next(_unique_ids)), _device_node(device)), size)
    _buffers[uop] = buffer
    return uop


def buffer_of(uop: UOp) -> Buffer:
    """The `Buffer` behind a `BUFFER` uop, or behind the BUFFER under a view's movement ops (created, unallocated,
    on first request for a uop made elsewhere)."""
    buf = _buffers.get(uop)
    if buf is None:
        uop = _view_base(uop)
        if uop.op is not Ops.BUFFER:
            raise TypeError(f"buffer_of needs a BUFFER uop (or a view of one), got {uop.op}")
        buf = _buffers.get(uop)
        if buf is not None:
            return buf
        buf = _buffers[uop] = Buffer(uop.src[1].arg, uop.arg, uop.dtype)
    return buf


def buffer_written(buf: Buffer) -> None:
    """Tell the scheduler that `buf`'s contents changed behind BUFFER uops that graphs may still use (an ASSIGN
    into it, a TinyJit replay writing its outputs again): values computed from it are no longer taken from the
    realized table, so graphs built afterwards compute with the new contents."""
    global _write_epoch
    _write_epoch += 1
    _last_write[buf.base] = _write_epoch


def _valid_view(entry: tuple[UOp, int, Sequence[Buffer]]) -> UOp | None:
    """The view of a realized-table value, or None when one of the buffers it was computed from was written since."""
    view, epoch, bufs = entry
    if bufs and _last_write:
        get = _last_write.get
        for b in bufs:
            written = get(b.base)
            if written is not None and written > epoch:
                return None
    return view


def realized_view(uop: UOp) -> UOp | None:
    """The buffer view holding `uop`'s value when an earlier realize computed it (from inputs not written since),
    else None."""
    entry = _realized.get(uop)
    return _valid_view(entry) if entry is not None else None


def _view_base(u: UOp) -> UOp:
    """`u` below its movement ops."""
    while u.op in GroupOp.Movement:
        u = u.src[0]
    return u


def _plain_buffer(u: UOp) -> UOp | None:
    """The BUFFER when `u` is a BUFFER seen through RESHAPEs only (its elements in storage order), else None."""
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u if u.op is Ops.BUFFER else None


# ---------------------------------------------------------------------------------------------------------------
# the cache key walk (the only graph work on a cache hit)


class _Walk:
    """The result of normalizing a graph: its key, its input buffers in slot order, bound variables, realized nodes.

    The key lists one entry per node (sources by position); a BUFFER is `(BUFFER, dtype, size, device, slot)` where
    slot numbers the distinct `Buffer`s by first appearance, a BIND keeps only its variable, and a sub-graph without
    buffers or binds (constants, broadcasts of constants) is named by its hash-consed node itself, so it costs one
    lookup. A node computed by an earlier realize stands for the buffer view holding it.
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
    def of_chain(cls, leaf: UOp) -> _Walk:
        """What the walk of an eager chain over the BUFFER `leaf` finds (see `schedule_for_run`); no key."""
        walk = cls.__new__(cls)
        buf = _buffers.get(leaf)
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
            buf = _buffers.get(node)
            if buf is None:
                buf = buffer_of(node)
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
                view = _valid_view(entry[1])
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
            if op in _MOVEMENT and _is_symbolic_arg(item[2]):
                item[2], pure = _strip_binds(item[2], self._binds), False
            if pure:
                _pure[node] = True
                return node
            item = tuple(item)
        enc = self._enc
        i = index[node] = len(enc)
        enc.append(item)
        return i


_BUFFER, _BIND = Ops.BUFFER, Ops.BIND
_KEY_LEAVES = frozenset({Ops.CONST, Ops.DEVICE, Ops.DEFINE_VAR, Ops.UNIQUE, Ops.VCONST})
_MOVEMENT = GroupOp.Movement
_pure_data = _pure.data
_buffers_data = _buffers.data
_realized_data = _realized.data
_symbolic_args: dict[Any, bool] = {}


def _is_symbolic_arg(arg: Any) -> bool:
    """True when a movement arg holds UOps (symbolic sizes); memoized by arg."""
    try:
        return _symbolic_args[arg]
    except KeyError:
        pass
    except TypeError:
        return _has_uop(arg)
    flag = _has_uop(arg)
    if len(_symbolic_args) > 65536:
        _symbolic_args.clear()
    _symbolic_args[arg] = flag
    return flag


def _has_uop(arg: Any) -> bool:
    if isinstance(arg, UOp):
        return True
    return isinstance(arg, tuple) and any(_has_uop(a) for a in arg)


def _strip_binds(arg: Any, var_vals: dict[UOp, int]) -> Any:
    """A symbolic movement arg with its BIND values removed (recorded in `var_vals`)."""
    if isinstance(arg, tuple):
        return tuple(_strip_binds(a, var_vals) for a in arg)
    if isinstance(arg, UOp):
        unbound, values = arg.unbind_all()
        for var, value in values.items():
            if var_vals.setdefault(var, value) != value:
                raise ValueError(f"variable {var.arg[0]!r} is bound to both {var_vals[var]} and {value}")
        return unbound
    return arg


# ---------------------------------------------------------------------------------------------------------------
# eager chain keys: the cache key of an elementwise chain, built with its tensors
#
# An eager loop rebuilds the same chain of elementwise ops on the same realized input every call, so its nodes are
# new each time and the key walk above visits all of them. The tensor front end instead gives each node of such a
# chain a key as it is built, `UOp._eager_key = (structure id, BUFFER leaf)`: ids number the distinct structures
# (a BUFFER's dtype, size and device; a node's op, whether its dtype is bool or its operand's, and its sources: ids,
# or a constant by identity, in order), so a node's id says what the walk of its graph would find apart from the
# leaf's `Buffer`. A chain whose walk found nothing but that structure (no realized node
# read instead, no bound variable) has its schedule remembered by structure id, and later realizes of the same
# structure skip the walk. A node that an earlier realize computed is recomputed instead of read: the value is
# the same (nothing in the chain writes), and the root itself, which the realized table must serve, is checked.

_CHAIN_IDS_LIMIT = 65536  # structures remembered; beyond, the table starts over (ids are never reused)
_chain_ids: dict[tuple, int] = {}
_next_chain_id = itertools.count(1).__next__
_eager_entries: dict[int, _Entry] = {}  # structure id -> the cached schedule of that chain (see `schedule_for_run`)
_set_eager_key = UOp._eager_key.__set__  # the slot descriptor: UOp.__setattr__ refuses
_BOOL_DTYPE = dtypes.bool


def _chain_id(structure: tuple) -> int:
    sid = _chain_ids.get(structure)
    if sid is None:
        if len(_chain_ids) >= _CHAIN_IDS_LIMIT:
            _chain_ids.clear()
        sid = _chain_ids[structure] = _next_chain_id()
    return sid


def _eager_key_of(uop: UOp) -> tuple[int, UOp | None] | None:
    """`uop`'s eager chain key; a BUFFER's is computed here (its leaf is itself, stored as None: no cycle)."""
    key = uop._eager_key
    if key is None and uop.op is _BUFFER:
        key = (_chain_id((_BUFFER, uop.dtype, uop.arg, uop.src[1].arg)), None)
        _set_eager_key(uop, key)
    return key


def note_elementwise_with_constant(node: UOp, value: UOp, constant: UOp) -> None:
    """Give `node`, a binary elementwise op of a tensor's graph `value` and a sub-graph `constant` without buffers
    or variables (a broadcast scalar), its eager chain key when `value` has one (see `schedule_for_run`)."""
    key = value._eager_key
    if key is None:
        if value.op is not _BUFFER:
            return
        key = _eager_key_of(value)
    dtype = node.dtype
    if dtype is not value.dtype and dtype is not _BOOL_DTYPE:
        return  # the key names the dtype by "same as the value's" or "bool" only
    sid = constant_op_chain_id(node.op, key[0], constant, node.src[0] is constant, dtype is _BOOL_DTYPE)
    _set_eager_key(node, (sid, key[1] or value))  # type: ignore[index]


def eager_key_of(uop: UOp) -> tuple[int, UOp | None] | None:
    """`uop`'s eager chain key ``(structure id, BUFFER leaf or None when uop is that BUFFER)``, or None when it
    is not an elementwise chain over one BUFFER (see `schedule_for_run`)."""
    key = uop._eager_key
    return key if key is not None or uop.op is not _BUFFER else _eager_key_of(uop)


def constant_op_chain_id(op: Ops, value_id: int, constant: UOp, constant_first: bool, bool_result: bool) -> int:
    """The structure id of a binary elementwise `op` of a chain of structure `value_id` and a sub-graph `constant`
    without buffers or variables (in that order unless `constant_first`); `bool_result`: the result is bool, else
    of the chain's dtype. `note_elementwise_with_constant` keys nodes with it; the tensor front end keys the ops it
    has not built as UOps yet with it too, so both name one structure by one id."""
    structure = (op, value_id, constant, constant_first, bool_result)
    sid = _chain_ids.get(structure)
    return sid if sid is not None else _chain_id(structure)


# `known_chain_id((op, value_id, constant, constant_first, bool_result))`: the id `constant_op_chain_id` gave those
# arguments, or None before it gave one (the tensor front end's hot path looks it up without a Python call)
known_chain_id = _chain_ids.get


def note_chain_node(node: UOp, chain_id: int, leaf: UOp) -> None:
    """Give `node`, built from ops the tensor front end deferred, the eager chain key ``(chain_id, leaf)`` they
    were given (unless hash-consing returned a node that has its key already)."""
    if node._eager_key is None:
        _set_eager_key(node, (chain_id, leaf))


def note_elementwise_pair(node: UOp, first: UOp, second: UOp) -> None:
    """Give `node` = op(`first`, `second`), a binary elementwise op of two tensors' graphs, its eager chain key when
    both have one over the same BUFFER leaf (see `schedule_for_run`)."""
    key_a = first._eager_key if first.op is not _BUFFER else _eager_key_of(first)
    if key_a is None:
        return
    key_b = second._eager_key if second.op is not _BUFFER else _eager_key_of(second)
    if key_b is None or (key_a[1] or first) is not (key_b[1] or second):
        return
    dtype = node.dtype
    if dtype is not first.dtype and dtype is not _BOOL_DTYPE:
        return
    _set_eager_key(node, (_chain_id((node.op, key_a[0], key_b[0], dtype is _BOOL_DTYPE)), key_a[1] or first))


# ---------------------------------------------------------------------------------------------------------------
# cache entries: a schedule in terms of slots


@dataclass
class _Output:
    """How a requested output's new uop is built: movement `chain` over the BUFFER of `slot` (`fresh`: a new BUFFER
    uop for that slot even when it is an input, as after an ASSIGN)."""

    slot: int
    fresh: bool
    chain: tuple[tuple[Ops, Any], ...]
    depth: int = 0  # movement ops between the root and the node that was computed into the buffer
    above: tuple[tuple[Ops, Any], ...] = ()  # those movement ops, root first
    point_op: Ops | None = None  # the op of the computed node
    symbolic: bool = False  # the chain holds unbound variables (symbolic shapes): bound per call


@dataclass
class _Entry:
    """A cached schedule. Slots ``< n_inputs`` are the input buffers; the others are new buffers `new_specs`
    ``(device, size, dtype)``; `internal` slots live only inside the schedule and take their memory from `plan`."""

    n_inputs: int
    new_specs: list[tuple[str, int, DType]]
    items: list[tuple[UOp, tuple[int, ...], tuple[Any, ...]]]
    outputs: list[_Output | None]
    internal: frozenset[int]
    plan: Any = None  # tinycore.engine.memory.SlotPlan
    out_slots: tuple[int, ...] = ()
    written_inputs: tuple[int, ...] = ()  # input slots that an ASSIGN writes
    lowered: Any = None  # the realize engine's cache of this schedule's launches (`tinycore.engine.realize`)

    def materialize(self, walk: _Walk) -> tuple[list[ScheduleItem], list[UOp | None]]:
        """ScheduleItems on this call's buffers, and the new uop of each requested output (None: unchanged)."""
        bufs = self.buffers(walk)
        return self.items_on(bufs), self.output_uops(walk, bufs)

    def buffers(self, walk: _Walk) -> list[Buffer]:
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

    def items_on(self, bufs: Sequence[Buffer]) -> list[ScheduleItem]:
        """The ScheduleItems of this schedule on the buffers of `buffers`."""
        return [ScheduleItem(ast, tuple([bufs[s] for s in slots]), meta) for ast, slots, meta in self.items]

    def output_uops(self, walk: _Walk, bufs: Sequence[Buffer]) -> list[UOp | None]:
        """The new uop of each requested output (None: unchanged), over the buffers of `buffers`."""
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
                else:
                    buf = bufs[out.slot]  # a BUFFER uop for it, as `new_buffer_uop` makes (the spec is checked)
                    unique = UOp(Ops.UNIQUE, dtypes.void, (), next(_unique_ids))
                    base = UOp(_BUFFER, buf.dtype, (unique, _device_node(buf.device)), buf.size)
                    _buffers[base] = buf
                made[out.slot] = base
            view = base
            for op, arg in out.chain:
                view = UOp(op, view.dtype, (view,), _bind_arg(arg, walk.var_vals) if out.symbolic else arg)
            new_uops.append(view)
        return new_uops


_schedule_cache: dict[Any, _Entry] = {}
SCHEDULE_CACHE_LIMIT = 4096  # entries; the oldest is dropped beyond (graphs whose constants change every step)


_cached_fuse_rows: list[Any] = [None]  # the FUSE_ROWS value the cached schedules were made with


def clear_schedule_cache() -> None:
    """Forget every cached schedule (the next realize of each graph schedules it again)."""
    _schedule_cache.clear()
    _eager_entries.clear()


def _check_cache_settings() -> None:
    """Drop the cached schedules when a knob that changes kernel boundaries (``FUSE_ROWS``) changed since."""
    if FUSE_ROWS.value != _cached_fuse_rows[0]:
        clear_schedule_cache()
        _cached_fuse_rows[0] = FUSE_ROWS.value


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
            from tinycore.engine.multi import schedule_multi

            return schedule_multi(roots, schedule_outputs)
    entry, walk, bufs, new_uops = schedule_for_run(roots)
    return entry.items_on(bufs), walk.var_vals, new_uops


ReadersHook = Callable[[list[Buffer], Sequence[UOp]], "tuple[list[UOp], Callable[[list[UOp | None]], None]] | None"]
_readers_hook: ReadersHook | None = None


def set_readers_hook(hook: ReadersHook | None) -> None:
    """Install the function that `schedule_for_run` asks, when a schedule writes buffers (ASSIGN), for the lazy values
    elsewhere that read those buffers' old contents: ``hook(written_buffers, roots)`` returns None, or the values'
    uops and a callback that receives their new uops (buffer views) once they are scheduled with `roots`. The
    scheduler orders every read of a buffer before the write into it, so those values see the old contents."""
    global _readers_hook
    _readers_hook = hook


def schedule_for_run(roots: Sequence[UOp]) -> tuple[_Entry, _Walk, list[Buffer], list[UOp | None]]:
    """`schedule_outputs` for the realize engine, without `ScheduleItem`s: the cached schedule, the walk (its
    `var_vals`), the buffer of every slot and the new uop of every root (roots on one device each: no `MULTI`).
    The realized table is updated as in `schedule_outputs`."""
    _check_cache_settings()
    chain = roots[0]._eager_key if len(roots) == 1 else None
    entry = _eager_entries.get(chain[0]) if chain is not None else None
    if entry is not None and _realized_data.get(id(roots[0])) is None:
        walk = _Walk.of_chain(chain[1])  # type: ignore[index]
        schedule_stats.hits += 1
    else:
        walk = _Walk(roots)
        entry = _schedule_cache.get(walk.key)
        if entry is not None:
            schedule_stats.hits += 1
        else:
            entry = _schedule_miss(roots, walk)
        if chain is not None and chain[1] is not None and walk.in_uops == [chain[1]] and not walk.subst:
            if not walk.var_vals and not entry.written_inputs:  # the walk found the chain's structure only
                if len(_eager_entries) >= SCHEDULE_CACHE_LIMIT:
                    _eager_entries.clear()
                _eager_entries[chain[0]] = entry
    if entry.written_inputs and _readers_hook is not None:
        readers = _readers_hook([walk.in_bufs[slot] for slot in entry.written_inputs], roots)
        if readers is not None:  # lazy values of the old contents: computed in this schedule, before the writes
            extra, deliver = readers
            entry, walk, bufs, new_uops = schedule_for_run((*roots, *extra))
            deliver(new_uops[len(roots) :])
            return entry, walk, bufs, new_uops[: len(roots)]
    bufs = entry.buffers(walk)
    new_uops = entry.output_uops(walk, bufs)
    written = entry.written_inputs
    for slot in written:  # ASSIGN targets: values computed from their old contents are stale now
        buffer_written(walk.in_bufs[slot])
    epoch, in_bufs = _write_epoch, walk.in_bufs
    for root, new, out in zip(roots, new_uops, entry.outputs):
        if new is None or new is root:
            continue
        base = root
        while base.op in _MOVEMENT:
            base = base.src[0]
        if base.op is Ops.ASSIGN:
            _realized[root] = (new, 0, ())  # the assigned buffer stays the value (re-running it would write twice)
            continue
        if written:
            continue  # computed from contents this very schedule overwrites: not worth remembering
        _realized[root] = (new, epoch, in_bufs)
        stamp = (epoch, in_bufs)
        if out is not None and out.depth:  # the computed node below the root's movement ops reads its buffer too
            node = root
            for op, arg in out.above:  # only when the root's own chain is the one that was scheduled
                if node.op is not op or node.arg != arg:
                    break
                node = node.src[0]
            else:
                if node.op is out.point_op and node not in _realized and node.op is not Ops.ASSIGN:
                    buf = _view_base(new)
                    _realized[node] = (_flat_view(buf, node.shape, buf.arg, unbind=False), *stamp)
    return entry, walk, bufs, new_uops


def schedule_for_chain(chain_id: int, leaf: UOp) -> tuple[_Entry, list[Buffer], Buffer, tuple] | None:
    """`schedule_for_run` of an eager chain whose ops were never built as UOps (a tensor's deferred ops, see
    `tinycore.tensor`): the cached schedule of structure `chain_id` over the BUFFER `leaf`, the buffer of every
    slot, and the chain's result: a new buffer and the movement ops ``((op, arg), ...)`` that make its view
    (`buffer_view`). None, having done nothing, when no schedule of that structure is cached, or its result is not
    a new buffer seen through fixed movement ops: the caller then builds the chain and calls `schedule_for_run`.
    Nothing enters the realized table: no graph can hold a node that was never built."""
    entry = _eager_entries.get(chain_id)
    if entry is None:
        return None
    out = entry.outputs[0]
    if out is None or out.symbolic or out.slot < entry.n_inputs:
        return None
    found = _buffers_data.get(id(leaf))  # `_buffers.get(leaf)` without the call
    buf = found[1] if found is not None and found[0]() is leaf else buffer_of(leaf)
    bufs = entry.slot_buffers([buf])
    schedule_stats.hits += 1
    return entry, bufs, bufs[out.slot], out.chain


def buffer_view(buf: Buffer, chain: tuple[tuple[Ops, Any], ...] = ()) -> UOp:
    """A new BUFFER uop backed by `buf`, seen through the movement ops `chain` ``((op, arg), ...)``."""
    view = new_buffer_uop(buf.device, buf.size, buf.dtype, buf)
    for op, arg in chain:
        view = UOp(op, view.dtype, (view,), arg)
    return view


def create_schedule_with_vars(sink: UOp) -> tuple[list[ScheduleItem], dict[str, int]]:
    """Schedule every source of `sink` (a `SINK` of tensor-level uops): ``(items, {variable name: value})``.

    The realized table is updated as in `schedule_outputs`; run the items with
    `tinycore.engine.realize.run_schedule` before reading the outputs.
    """
    if sink.op is not Ops.SINK:
        raise TypeError(f"create_schedule_with_vars needs a SINK, got {sink.op}")
    items, var_vals, _ = schedule_outputs(sink.src)
    return items, var_vals


def _lookup(roots: Sequence[UOp]) -> tuple[_Entry, _Walk]:
    _check_cache_settings()
    walk = _Walk(roots)
    entry = _schedule_cache.get(walk.key)
    if entry is not None:
        schedule_stats.hits += 1
        return entry, walk
    return _schedule_miss(roots, walk), walk


def _schedule_miss(roots: Sequence[UOp], walk: _Walk) -> _Entry:
    """Schedule `roots` from scratch and cache the result under `walk`'s key."""
    schedule_stats.misses += 1
    entry = _Scheduler(roots, walk).entry
    if len(_schedule_cache) >= SCHEDULE_CACHE_LIMIT:
        del _schedule_cache[next(iter(_schedule_cache))]
        _eager_entries.clear()  # it may hold the dropped entry
    _schedule_cache[walk.key] = entry
    if DEBUG >= 3:
        _print_entry(entry)
    return entry


def _print_entry(entry: _Entry) -> None:
    print(f"scheduled {len(entry.items)} item(s), {entry.n_inputs} input(s), {len(entry.new_specs)} new buffer(s)")
    for i, (ast, slots, meta) in enumerate(entry.items):
        kind = "copy" if ast.op is Ops.COPY else f"kernel {len(ast.toposort())} uops"
        print(f"  {i:3d} {kind:18s} slots {slots} {' '.join(map(str, meta))}")


# ---------------------------------------------------------------------------------------------------------------
# the early rewrite pass (tensor level)


def _noop_movement(x: UOp) -> UOp | None:
    src = x.src[0]
    if x.op is Ops.RESHAPE or x.op is Ops.EXPAND:
        return src if tuple(x.arg) == src.shape else None
    if x.op is Ops.PERMUTE:
        return src if tuple(x.arg) == tuple(range(len(x.arg))) else None
    if x.op is Ops.PAD:
        return src if all(b == 0 and a == 0 for b, a in x.arg) else None
    if x.op is Ops.SHRINK:
        return src if all(b == 0 and e == s for (b, e), s in zip(x.arg, src.shape)) else None
    return src if not any(x.arg) else None  # FLIP


def _contiguous_of_buffer(x: UOp) -> UOp | None:
    return x.src[0] if _plain_buffer(x.src[0]) is not None else None


def _copy_same_device(x: UOp) -> UOp | None:
    return x.src[0] if x.src[0].device == x.src[1].arg else None


_CONSTANT_OPS = GroupOp.Movement | GroupOp.Elementwise | {Ops.CONST, Ops.IOTA, Ops.DEVICE}


def _copy_of_constant(x: UOp) -> UOp | None:
    """A COPY of a value computed from constants only (a broadcast scalar, IOTA math) is that value built on the
    target device: nothing to copy (a bare CONST could not even get a source buffer)."""
    src, target = x.src
    nodes = src.toposort()
    if any(n.op not in _CONSTANT_OPS for n in nodes):
        return None
    return src.substitute({n: target for n in nodes if n.op is Ops.DEVICE})


pm_early = PatternMatcher(
    [
        (UPat((Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), src=(UPat.var("x"),)), lambda x: x),
        (
            UPat(Ops.RESHAPE, src=(UPat(Ops.RESHAPE, name="inner"),), name="x"),
            lambda x, inner: inner.src[0].reshape(x.arg),
        ),
        (UPat(GroupOp.Movement, name="x"), _noop_movement),
        (UPat(Ops.CONTIGUOUS, src=(UPat(Ops.CONTIGUOUS, name="c"),)), lambda c: c),
        (UPat(Ops.CONTIGUOUS, name="x"), _contiguous_of_buffer),
        (UPat(Ops.COPY, name="x"), _copy_same_device),
        (UPat(Ops.COPY, name="x"), _copy_of_constant),
    ],
    name="schedule:early",
)


def _rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False) -> UOp:
    schedule_stats.rewrite_passes += 1
    return graph_rewrite(sink, pm, ctx=ctx, bottom_up=bottom_up, name=pm.name)


# ---------------------------------------------------------------------------------------------------------------
# kernel ASTs


class _AstCtx:
    """Per-kernel state of the `schedule:kernel_ast` pass: which nodes become loads, and the kernel's slots."""

    def __init__(self, sched: _Scheduler, root: UOp, out_slot: int):
        self.sched, self.root = sched, root
        self.slots: list[int] = [out_slot]

    def global_for(self, slot: int) -> UOp:
        """DEFINE_GLOBAL of this kernel for `slot` (appended to the kernel's buffers on first use)."""
        if slot not in self.slots:
            self.slots.append(slot)
        device, size, dtype = self.sched.slot_spec(slot)
        return UOp.define_global(self.slots.index(slot), dtype, size)

    def load_for(self, x: UOp) -> UOp | None:
        """The LOAD (through the right view) replacing a BUFFER or an other kernel's output inside this kernel."""
        if x is self.root:
            return None
        sched = self.sched
        if x.op is Ops.BUFFER:
            return _load(self.global_for(sched.walk.slot_of[x]))
        if x not in sched.slot_of_point:
            return None
        return sched.point_view(x, lambda slot: _load(self.global_for(slot)))


def _load(dg: UOp) -> UOp:
    return UOp(Ops.LOAD, dg.dtype.base, (dg,))


def _unbind_arg(x: UOp) -> UOp | None:
    if not _is_symbolic_arg(x.arg):
        return None
    stripped = _strip_binds(x.arg, {})
    return x.replace(arg=stripped) if stripped != x.arg else None


def _kernel_iota(x: UOp) -> UOp:
    """A tensor-level IOTA as it appears in a kernel AST: no DEVICE source, a symbolic size unbound."""
    return UOp(Ops.IOTA, x.dtype, (), _strip_binds(x.arg, {}))


pm_kernel_ast = PatternMatcher(
    [
        (UPat(name="x"), lambda ctx, x: ctx.load_for(x)),
        (UPat(Ops.CONST, src=(UPat(Ops.DEVICE),), name="c"), lambda c: UOp(Ops.CONST, c.dtype, (), c.arg)),
        (UPat(Ops.IOTA, src=(UPat(Ops.DEVICE),), name="x"), lambda x: _kernel_iota(x)),
        (UPat(Ops.BIND, name="b"), lambda b: b.src[0]),
        (UPat((Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), src=(UPat.var("x"),)), lambda x: x),
        (UPat(GroupOp.Movement, name="x"), _unbind_arg),
    ],
    name="schedule:kernel_ast",
)


# ---------------------------------------------------------------------------------------------------------------
# the scheduler proper (cache misses only)


class _Scheduler:
    """Builds the cache entry of one graph (see the module docstring for the steps)."""

    def __init__(self, roots: Sequence[UOp], walk: _Walk):
        self.walk = walk
        sink = UOp.sink(*roots)
        if walk.subst:
            sink = sink.substitute(walk.subst)
        sink = _rewrite(sink, pm_early)
        self.roots = sink.src
        self.topo = list(sink.toposort(gate=lambda _: True))  # uncached: a cached toposort keeps the graph alive
        self.consumers: dict[UOp, list[UOp]] = {u: [] for u in self.topo}
        for u in self.topo:
            for s in u.src:
                self.consumers[s].append(u)
        self.points: dict[UOp, None] = {}  # realize points, in the order they were found
        self.slot_of_point: dict[UOp, int] = {}
        self.new_specs: list[tuple[str, int, DType]] = []
        self._find_points()
        self._assign_slots()
        self.entry = self._build()

    # ----- realize points

    def _mark(self, u: UOp) -> None:
        if u.op not in _LEAVES:
            self.points[u] = None

    def _find_points(self) -> None:
        points = self.points
        for r in self.roots:
            self._mark(_output_point(r))
        for u in self.topo:
            if u.op in (Ops.CONTIGUOUS, Ops.ASSIGN):
                self._mark(u)
            elif u.op is Ops.COPY:
                self._mark(u)
                src = _strip_reshapes(u.src[0])
                if src.op is not Ops.BUFFER:
                    self._mark(src)
        # a value holding a reduce that is broadcast or reduced again is computed once, into its own buffer
        feeds: dict[UOp, bool] = {}
        for u in reversed(self.topo):
            feeds[u] = u not in points and any(
                c.op is Ops.REDUCE_AXIS
                or (c.op is Ops.EXPAND and tuple(c.arg) != u.shape)
                or (c.op in GroupOp.Movement and feeds[c])
                for c in self.consumers[u]
            )
        # ... unless every reduce inside it is a row reduce that stays in its consumer (and it feeds no other reduce)
        rows = self._row_reduces() if FUSE_ROWS.value else set()
        has_reduce: dict[UOp, bool] = {}
        only_rows: dict[UOp, bool] = {}  # every unrealized reduce inside u is a row reduce
        for u in self.topo:
            flag = u.op is Ops.REDUCE_AXIS or any(has_reduce[s] and s not in points for s in u.src)
            inner = [s for s in u.src if has_reduce[s] and s not in points]
            only_rows[u] = (u in rows if u.op is Ops.REDUCE_AXIS else True) and all(only_rows[s] for s in inner)
            stays = bool(rows) and only_rows[u]
            stays = stays and all(c.op is not Ops.REDUCE_AXIS or c in rows for c in self.consumers[u])
            has_reduce[u] = flag
            if flag and feeds[u] and u.op not in GroupOp.Movement and not stays:
                # a broadcast product (a layernorm's rows times a weight): its reduce-holding operand, not the
                # product, is what gets computed once
                for value in self._broadcast_row_values(u, has_reduce) or [u]:
                    self._mark(value)
        # an ASSIGN whose value reads the target buffer through another view: compute the value first
        for u in self.topo:
            if u.op is Ops.ASSIGN and self._assign_hazard(u):
                self._mark(u.src[1])
        # a value holding a reduce that several kernels need is computed once
        groups: dict[UOp, set[UOp]] = {}
        for u in reversed(self.topo):
            g: set[UOp] = set()
            for c in self.consumers[u]:
                if c in points:
                    g.add(c)
                elif c.op is not Ops.SINK:
                    g |= groups[c]
            if len(g) > 1 and has_reduce[u] and u not in points and u.op not in GroupOp.Movement:
                inner = self._unrealized_reduces(u)
                if inner and all(r in rows for r in inner):  # the row reduces once; the cheap rest in each kernel
                    for r in inner:
                        self._mark(r)
                elif inner:
                    self._mark(u)
            groups[u] = g
        self._mark_broadcast_into_reduce()

    def _unrealized_reduces(self, u: UOp) -> list[UOp]:
        """The REDUCE_AXIS nodes `u` computes itself (not below a realize point)."""
        found: list[UOp] = []
        seen: set[UOp] = set()
        stack = [u]
        while stack:
            n = stack.pop()
            if n in seen or (n is not u and n in self.points):
                continue
            seen.add(n)
            if n.op is Ops.REDUCE_AXIS:
                found.append(n)
            stack.extend(n.src)
        return found

    def _row_reduces(self) -> set[UOp]:
        """Reduces that stay in the kernel consuming them: over the last axis of a value whose rows are at most the
        device renderer's ``row_reduce_bytes`` long (`tinycore.renderer.Renderer.row_reduce_bytes`; 0 on GPUs),
        with results only broadcast back over those rows. Such a kernel (softmax, layernorm) reads each row from
        memory once; its later passes over the row hit the cache."""
        out: set[UOp] = set()
        limits: dict[Any, int] = {}
        # passes[u]: the longest chain of row reduces that computing u in one kernel runs one after the other
        passes: dict[UOp, int] = {}
        for u in self.topo:
            passes[u] = max((passes[s] for s in u.src if s not in self.points), default=0)
            if u.op is Ops.REDUCE_AXIS:
                passes[u] = 0  # set below when it stays fused; any other reduce becomes its own kernel
            if u.op is not Ops.REDUCE_AXIS or not u.src[0].shape:
                continue
            shape = u.src[0].shape
            last = len(shape) - 1
            if tuple(u.arg[1]) != (last,) or not isinstance(shape[last], int) or shape[last] <= 1:
                continue
            device = u.device
            if device not in limits:
                limits[device] = int(renderer_setting(device, "row_reduce_bytes", 0) or 0)
            if shape[last] * max(u.dtype.itemsize, u.src[0].dtype.itemsize) > limits[device]:
                continue
            # the result may pass through reshapes and row-sized elementwise ops (``log(sum)``, ``rsqrt(var +
            # eps)``) but must end broadcast back over the rows it reduced: the EXPAND goes from the reduce's own
            # shape (reshapes between are then the identity) to its input's. A broadcast along another axis that
            # only happens to give the same shape (``(h @ w) @ w2`` with square matrices) would recompute the
            # whole reduce for every element it adds: cost growing with the depth of the graph.
            ok, stack, row_elems = True, list(self.consumers[u]), prod(u.shape)
            while stack and ok:
                c = stack.pop()
                if c.op is Ops.RESHAPE or (c.op in GroupOp.Elementwise and prod(c.shape) == row_elems):
                    stack.extend(self.consumers[c])
                elif c.op is Ops.EXPAND:
                    ok = tuple(c.arg) == tuple(shape) and tuple(c.src[0].shape) == tuple(u.shape)
                else:
                    ok = False
            if ok and self.consumers[u]:
                out.add(u)
                passes[u] = (passes[u.src[0]] if u.src[0] not in self.points else 0) + 1
                if passes[u] > _MAX_ROW_PASSES:
                    # a stack of row functions (softmax of a softmax...): each later pass would recompute every
                    # layer before it, cost quadratic in depth. The earlier passes' result is realized instead: where
                    # it is broadcast into this reduce's input (a layernorm feeding a matmul: the normalized rows,
                    # never the matmul's broadcast product), else the value the reduce reads.
                    for value in self._broadcast_row_values(u.src[0], passes) or [_view_base(u.src[0])]:
                        self._mark(value)
                    passes[u] = 1
        return out

    def _broadcast_row_values(self, value: UOp, passes: dict[UOp, Any]) -> list[UOp]:
        """The values carrying row passes (or reduces: `passes` is true for them) that `value`'s kernel broadcasts
        along a new axis into `value` (the operands of a product, as a layernorm's rows feeding a matmul): what to
        realize so that a broadcast product is never the thing computed once. Broadcasts of a row reduce back over
        its row are looked through."""
        found: list[UOp] = []
        stack, seen = [value], set()
        while stack:
            n = stack.pop()
            if n in seen or (n is not value and n in self.points) or not passes.get(n, 0):
                continue
            seen.add(n)
            grown = [i for i, (a, b) in enumerate(zip(n.src[0].shape, n.shape)) if a != b] if n.op is Ops.EXPAND else []
            if grown and grown != [len(n.shape) - 1]:  # a product's broadcast, not a row reduce's back over its row
                base = _view_base(n.src[0])
                if base not in self.points and base.op not in _LEAVES and base not in found:
                    found.append(base)
                continue
            stack.extend(n.src)
        return found

    def _mark_broadcast_into_reduce(self) -> None:
        """Realize a value computed from other kernels' outputs when it is broadcast into a reduce and costs more
        than a few ops per element. Fused, the reducing kernel would recompute it for every element the broadcast
        adds (a softmax backward recomputed inside both gradient matmuls that read it: 512 times per element);
        realized, it is computed once and each use is one load. Cheap values (``relu(h)``, ``h + b``) and values
        of input buffers only stay fused, so ``(x @ w + b).relu()`` and an MLP layer stay one kernel."""
        points, consumers = self.points, self.consumers
        reduced: dict[UOp, bool] = {}  # the kernel computing u's consumer reduces it
        checked: set[UOp] = set()
        # consumers first: a value marked here is a leaf for the kernels of the values it is computed from
        for u in reversed(self.topo):
            reduced[u] = any(c.op is Ops.REDUCE_AXIS or (c not in points and reduced[c]) for c in consumers[u])
            if u.op is not Ops.EXPAND or u.shape == u.src[0].shape or not reduced[u]:
                continue
            value = _view_base(u)
            if value in points or value in checked or value.op in _LEAVES or value.op is Ops.ASSIGN:
                continue
            checked.add(value)
            if self._recompute_cost(value) > _RECOMPUTE_LIMIT:
                self._mark(value)

    def _recompute_cost(self, value: UOp) -> int:
        """A rough per-element cost of computing `value` in a kernel that reads it: its loads and ALU ops, a
        transcendental or division counting as several. 0 when it reads no other kernel's output (constants,
        input buffers only): such values are left fused."""
        reads_point, loads, ops = False, 0, 0
        for n in self._region(value):
            if n is not value and n in self.points:
                reads_point, loads = True, loads + 1
            elif n.op is Ops.BUFFER:
                loads += 1
            elif n.op in _EXPENSIVE_ALU:
                ops += _EXPENSIVE_COST
            elif n.op in GroupOp.ALU:
                ops += 1
        return loads + ops if reads_point else 0

    def _region(self, value: UOp) -> list[UOp]:
        """The nodes of the kernel computing `value`; other kernels' outputs are included as leaves."""
        seen: dict[UOp, None] = {}
        stack = [value]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen[n] = None
            if n is not value and n in self.points:
                continue
            stack.extend(n.src)
        return list(seen)

    def _value_of(self, p: UOp) -> UOp:
        """What kernel `p` computes (its source for CONTIGUOUS, COPY and ASSIGN)."""
        if p.op is Ops.ASSIGN:
            return p.src[1]
        return p.src[0] if p.op in (Ops.CONTIGUOUS, Ops.COPY) else p

    def _buffer_slot(self, u: UOp) -> int | None:
        """The input slot a view (movement ops over a BUFFER or an ASSIGN) reads, None for other values."""
        base = _view_base(u)
        while base.op is Ops.ASSIGN:
            base = _view_base(base.src[0])
        return self.walk.slot_of[base] if base.op is Ops.BUFFER else None

    def _view_signature(self, u: UOp) -> tuple[int | None, tuple[tuple[Ops, Any], ...]]:
        chain: list[tuple[Ops, Any]] = []
        while u.op in GroupOp.Movement:
            chain.append((u.op, u.arg))
            u = u.src[0]
        return self._buffer_slot(u), tuple(chain)

    def _assign_hazard(self, a: UOp) -> bool:
        """True when the value of ASSIGN `a` reads the target's buffer through a view other than the target's."""
        target, value = a.src
        slot = self._buffer_slot(target)
        if slot is None or value in self.points:
            return False
        wanted = self._view_signature(target)
        reads: list[UOp] = [value] if value.op in GroupOp.Movement or value.op in (Ops.BUFFER, Ops.ASSIGN) else []
        for n in self._region(value):
            if n.op in GroupOp.Movement or (n in self.points and n is not value):
                continue
            reads.extend(s for s in n.src if s.op in GroupOp.Movement or s.op in (Ops.BUFFER, Ops.ASSIGN))
        return any(self._buffer_slot(s) == slot and self._view_signature(s) != wanted for s in reads)

    # ----- buffers of realize points

    def slot_spec(self, slot: int) -> tuple[str, int, DType]:
        """`(device, size, dtype)` of a slot."""
        n = len(self.walk.in_bufs)
        if slot < n:
            buf = self.walk.in_bufs[slot]
            return buf.device, buf.size, buf.dtype
        return self.new_specs[slot - n]

    def _device_of(self, p: UOp) -> str:
        device = p.device
        if device is None:
            device = next(
                (
                    n.device
                    for n in self._region(self._value_of(p))
                    if n.op in (Ops.BUFFER, Ops.CONST) and n.device is not None
                ),
                None,
            )
        if device is None:
            from tinycore.device import Device

            device = Device.DEFAULT
        if isinstance(device, tuple):
            raise NotImplementedError(
                f"{p.op} on devices {device} below the top of the graph: build multi-device values through "
                "Tensor.shard, or push MULTI up first with tinycore.engine.multi.to_multi"
            )
        return device

    def _assign_slots(self) -> None:
        n_in = len(self.walk.in_bufs)
        for p in self.points:
            if p.op is Ops.ASSIGN:
                slot = self._buffer_slot(p.src[0])
                if slot is None:
                    raise RuntimeError(f"can't assign into a {_view_base(p.src[0]).op} that is not a buffer")
                self.slot_of_point[p] = slot
                continue
            shape = p.shape
            if shape is None:
                raise NotImplementedError(f"can't allocate a buffer for {p.op} without a shape")
            self.slot_of_point[p] = n_in + len(self.new_specs)
            self.new_specs.append((self._device_of(p), _max_size(shape), p.dtype))

    def point_view(self, p: UOp, leaf: Any) -> UOp:
        """The value of realize point `p` read from its buffer: `leaf(slot)` (the flat buffer) through the right
        movement ops."""
        if p.op is Ops.ASSIGN:
            return self.rebase(p.src[0], leaf)
        slot = self.slot_of_point[p]
        return _flat_view(leaf(slot), p.shape, self.slot_spec(slot)[1])

    def rebase(self, view: UOp, leaf: Any) -> UOp:
        """`view` (movement ops over a BUFFER or a realize point) rebuilt over `leaf(slot)`."""
        chain: list[UOp] = []
        node = view
        while node.op in GroupOp.Movement:
            chain.append(node)
            node = node.src[0]
        out = leaf(self.walk.slot_of[node]) if node.op is Ops.BUFFER else self.point_view(node, leaf)
        for m in reversed(chain):
            out = UOp(m.op, m.dtype, (out,), m.arg)
        return out

    # ----- kernels

    def _kernel(self, p: UOp) -> tuple[UOp, tuple[int, ...], tuple[Any, ...]]:
        out_slot = self.slot_of_point[p]
        device, size, dtype = self.slot_spec(out_slot)
        if p.op is Ops.COPY:
            src = _strip_reshapes(p.src[0])
            src_slot = self.walk.slot_of[src] if src.op is Ops.BUFFER else self.slot_of_point[src]
            ast = UOp(Ops.COPY, dtype, (UOp.define_global(1, dtype, size), _device_node(device)))
            return ast, (out_slot, src_slot), ("copy",)
        ctx = _AstCtx(self, p, out_slot)
        out_global = UOp.define_global(0, dtype, size)
        if p.op is Ops.ASSIGN:
            target = self.rebase(p.src[0], lambda slot: out_global if slot == out_slot else ctx.global_for(slot))
        else:
            target = _flat_view(out_global, p.shape, size)
        ast = UOp.sink(UOp(Ops.STORE, dtypes.void, (target, self._kernel_value(p, ctx))))
        return ast, tuple(ctx.slots), (p.op.name.lower(),)

    def _kernel_value(self, p: UOp, ctx: _AstCtx) -> UOp:
        """The kernel-AST value that point `p` stores (inputs become loads of `ctx`'s globals)."""
        ctx.root = p
        value = self._value_of(p)
        if value is p:  # the kernel's own root must not become a load: rewrite below it
            new_src = _rewrite(UOp.sink(*p.src), pm_kernel_ast, ctx, bottom_up=True).src
            value = p.replace(src=new_src)
            if p.op in GroupOp.Movement:
                value = _unbind_arg(value) or value
            elif p.op is Ops.IOTA:
                value = _kernel_iota(p)
        else:
            value = _rewrite(UOp.sink(value), pm_kernel_ast, ctx, bottom_up=True).src[0]
        return value

    # ----- multi-output kernels

    def _multi_kernel(self, group: list[UOp]) -> tuple[UOp, tuple[int, ...], tuple[Any, ...]]:
        """One kernel storing every point of `group` (see `_group_outputs`): output i is DEFINE_GLOBAL i, the
        inputs follow; values computed from the same loads share them."""
        out_slots = [self.slot_of_point[p] for p in group]
        ctx = _AstCtx(self, group[0], out_slots[0])
        ctx.slots = list(out_slots)
        stores = []
        for i, (p, slot) in enumerate(zip(group, out_slots)):
            _, size, dtype = self.slot_spec(slot)
            target = _flat_view(UOp.define_global(i, dtype, size), p.shape, size)
            stores.append(UOp(Ops.STORE, dtypes.void, (target, self._kernel_value(p, ctx))))
        return UOp.sink(*stores), tuple(ctx.slots), ("+".join(p.op.name.lower() for p in group),)

    def _groupable(self, p: UOp) -> bool:
        """Points that may share a kernel: computed values (no ASSIGN or COPY) of a concrete, non-empty shape."""
        shape = p.shape
        return (
            p.op not in (Ops.ASSIGN, Ops.COPY)
            and shape is not None
            and all(isinstance(d, int) for d in shape)
            and self.slot_spec(self.slot_of_point[p])[1] != 0
        )

    def _inputs_of(self, p: UOp) -> set[Any]:
        """What kernel `p` reads: input slots and other kernels' points."""
        out: set[Any] = set()
        for n in self._region(self._value_of(p)):
            if n.op is Ops.BUFFER:
                out.add(self.walk.slot_of[n])
            elif n in self.points and n is not p:
                out.add(n)
        return out

    def _group_outputs(self, order: list[UOp], deps: dict[UOp, set[UOp]]) -> list[list[UOp]]:
        """Kernels in execution order, points that group cleanly merged into one multi-output kernel: same device
        and output shape, a common input (a buffer or another kernel's output: its loads are shared), and neither
        depends on the other, so the later one can run at the earlier one's place once all its own dependencies
        ran. E.g. ``x.sum(1)`` and ``x.max(1)`` realized together, or ``x * 2`` and ``x + 1``."""
        groups: list[list[UOp]] = []
        group_at: dict[UOp, int] = {}  # point -> index of its group
        open_groups: dict[tuple[Any, ...], list[int]] = {}  # (device, shape) -> groups that may take more members
        inputs: dict[int, set[Any]] = {}  # group -> what its kernel reads
        for p in order:
            # every dependency of a point runs in an earlier group than its own (by induction), so a group after all
            # of p's direct dependencies holds nothing p depends on, and p may run there
            key = (self.slot_spec(self.slot_of_point[p])[0], p.shape) if self._groupable(p) else None
            mine = self._inputs_of(p) if key is not None else set()
            target = None
            for gi in open_groups.get(key, ()) if key is not None else ():
                if not mine.isdisjoint(inputs[gi]) and all(group_at[d] < gi for d in deps[p]):
                    target = gi
                    break
            if target is None:
                target = len(groups)
                groups.append([])
                inputs[target] = set()
                if key is not None:
                    open_groups.setdefault(key, []).append(target)
            groups[target].append(p)
            group_at[p] = target
            inputs[target] |= mine
        return groups

    def _build(self) -> _Entry:
        from tinycore.engine.memory import plan_slots

        points = list(self.points)
        order = self._order(points)
        # an empty output has nothing to compute: its (empty) buffer is made, no kernel runs
        items = [
            self._kernel(g[0]) if len(g) == 1 else self._multi_kernel(g)
            for g in self._group_outputs(order, self._deps)
            if self.slot_spec(self.slot_of_point[g[0]])[1] != 0
        ]
        n_in = len(self.walk.in_bufs)
        outputs = [self._output(r) for r in self.roots]
        out_slots = {o.slot for o in outputs if o is not None}
        internal = frozenset(n_in + i for i in range(len(self.new_specs))) - out_slots
        plan = plan_slots([slots for _, slots, _ in items], internal, self.slot_spec) if internal else None
        written = tuple(sorted({self.slot_of_point[p] for p in points if p.op is Ops.ASSIGN}))
        return _Entry(n_in, self.new_specs, items, outputs, internal, plan, tuple(sorted(out_slots)), written)

    def _output(self, r: UOp) -> _Output | None:
        point = _output_point(r)
        if point.op is Ops.BUFFER:
            slot, fresh, view = self.walk.slot_of[point], False, r
        elif point in self.points:
            slot, fresh = self.slot_of_point[point], True
            _, size, dtype = self.slot_spec(slot)
            marker = UOp(Ops.BUFFER, dtype, (UOp.unique(-1), _device_node("SCHEDULE")), size)
            view = r.substitute({point: self.point_view(point, lambda s: marker)})
        else:
            return None
        chain: list[tuple[Ops, Any]] = []
        node = _fold_view(view)
        symbolic = False
        while node.op in GroupOp.Movement:
            arg = node.arg
            if _is_symbolic_arg(arg):  # kept unbound: `materialize` binds this call's values
                arg, symbolic = _strip_binds(arg, {}), True
            chain.append((node.op, arg))
            node = node.src[0]
        above: list[tuple[Ops, Any]] = []
        node = r
        while node is not point:
            above.append((node.op, node.arg))
            node = node.src[0]
        return _Output(slot, fresh, tuple(reversed(chain)), len(above), tuple(above), point.op, symbolic)

    def _order(self, points: list[UOp]) -> list[UOp]:
        """Kernels in dependency order: producers first, and a kernel reading a buffer's old contents before the
        kernel assigning that buffer."""
        position = {p: i for i, p in enumerate(points)}
        deps: dict[UOp, set[UOp]] = {p: set() for p in points}
        writers: dict[int, list[UOp]] = {}
        for p in points:
            if p.op is Ops.ASSIGN:
                writers.setdefault(self.slot_of_point[p], []).append(p)
        for p in points:
            value = self._value_of(p)
            # a kernel whose value is another kernel's output (CONTIGUOUS of an ASSIGN) reads that output only
            region = [value] if value is not p and value in self.points else self._region(value)
            if p.op is Ops.ASSIGN and _view_base(p.src[0]).op is Ops.ASSIGN:
                region.append(_view_base(p.src[0]))  # writing after an earlier ASSIGN of the same buffer
            for n in region:
                if n in self.points and n is not p:
                    deps[p].add(n)
                    if n.op is Ops.ASSIGN:  # p reads what that write left: before any later write of the buffer
                        for w in writers.get(self.slot_of_point[n], ()):
                            if w is not p and n in _earlier_writes(w):
                                deps[w].add(p)
                elif n.op is Ops.BUFFER:
                    for w in writers.get(self.walk.slot_of[n], ()):
                        if w is not p:
                            deps[w].add(p)  # p reads the contents from before the write
        order: list[UOp] = []
        done: set[UOp] = set()
        pending = sorted(points, key=position.__getitem__)
        while pending:
            ready = next((p for p in pending if deps[p] <= done), None)
            if ready is None:
                raise RuntimeError("cycle in the schedule: a kernel reads a buffer both before and after an ASSIGN")
            order.append(ready)
            done.add(ready)
            pending.remove(ready)
        self._deps = deps
        return order


def _earlier_writes(write: UOp) -> set[UOp]:
    """The ASSIGNs to the same buffer that ASSIGN `write` comes after (the chain under its target)."""
    out: set[UOp] = set()
    node = _view_base(write.src[0])
    while node.op is Ops.ASSIGN:
        out.add(node)
        node = _view_base(node.src[0])
    return out


_LEAVES = frozenset({Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.DEVICE, Ops.UNIQUE})
# a value broadcast into a reduce is realized when its per-element cost is above this (see
# `_Scheduler._mark_broadcast_into_reduce`); transcendentals and divisions count `_EXPENSIVE_COST` each
_RECOMPUTE_LIMIT = 3
_MAX_ROW_PASSES = 2  # row reduces chained in one kernel: softmax (max, then sum of exp) and layernorm need two
_EXPENSIVE_COST = 4
_EXPENSIVE_ALU = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.POW})


def _output_point(r: UOp) -> UOp:
    """The node of a requested output that is computed into a buffer: the smallest node of its movement chain
    (the lowest one on ties), so `x.sum(1)` stores the reduce and `arange`'s trailing SHRINK stores only n values.
    A chain over a BUFFER or a constant needs no kernel: its base is returned."""
    chain = [r]
    while chain[-1].op in GroupOp.Movement:
        chain.append(chain[-1].src[0])
    base = chain[-1]
    if base.op in _LEAVES or base.op is Ops.ASSIGN:
        return base
    best = base
    for node in reversed(chain[:-1]):
        size, best_size = prod(node.shape), prod(best.shape)
        if isinstance(size, int) and isinstance(best_size, int) and size < best_size:
            best = node
    return best


def _max_size(shape: tuple[Any, ...]) -> int:
    """Elements of a buffer holding a value of `shape`: symbolic dimensions at their variables' maximum, so one
    buffer size (and one cached schedule) serves every value in range."""
    size = prod(shape)
    if isinstance(size, UOp):
        size = size.vmax
    if not isinstance(size, int):
        raise NotImplementedError(f"can't size a buffer for shape {shape}")
    return size


def _flat_view(flat: UOp, shape: tuple[Any, ...], size: int, unbind: bool = True) -> UOp:
    """A flat buffer (or DEFINE_GLOBAL) of `size` elements seen as `shape`; a symbolic shape uses its first
    ``prod(shape)`` elements (the buffer is sized for the largest values). `unbind`: symbolic sizes without their
    bound values (for kernel ASTs and cache entries)."""
    if tuple(shape) == (size,):
        return flat
    numel = prod(shape)
    if isinstance(numel, UOp):
        if unbind:
            shape, numel = _strip_binds(tuple(shape), {}), _strip_binds(numel, {})
        flat = flat.shrink(((0, numel),))
        return flat.reshape(shape) if len(shape) != 1 else flat
    return flat.reshape(shape)


def _bind_arg(arg: Any, var_vals: dict[str, int]) -> Any:
    """A movement arg whose unbound variables are bound to this call's values (by name); others stay unbound."""
    if isinstance(arg, tuple):
        return tuple(_bind_arg(a, var_vals) for a in arg)
    if isinstance(arg, UOp):
        binds = {v: v.bind(var_vals[v.arg[0]]) for v in arg.vars() if v.op is Ops.DEFINE_VAR and v.arg[0] in var_vals}
        return arg.substitute(binds) if binds else arg
    return arg


def _strip_reshapes(u: UOp) -> UOp:
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u


def _fold_view(view: UOp) -> UOp:
    """Fold RESHAPE chains in a view and drop a RESHAPE back to the BUFFER's own shape."""
    chain: list[UOp] = []
    node = view
    while node.op in GroupOp.Movement:
        chain.append(node)
        node = node.src[0]
    out = node
    for m in reversed(chain):
        if m.op is Ops.RESHAPE:
            while out.op is Ops.RESHAPE:
                out = out.src[0]
            if tuple(m.arg) == out.shape:
                continue
        out = UOp(m.op, m.dtype, (out,), m.arg)
    return out
