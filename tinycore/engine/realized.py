"""Realized buffers: the `Buffer` behind each tensor-level `BUFFER` uop, and the *realized table* of values an
earlier realize computed.

**BUFFER uops.** `new_buffer_uop` makes a fresh `BUFFER` uop (a new `UNIQUE` id) and records the `Buffer` holding
its data; `buffer_of` finds it again (through a view's movement ops too). `buffer_view` wraps an existing `Buffer`
in a new BUFFER uop seen through movement ops.

**The realized table.** Every requested output that got a buffer is entered in a weak table, node -> buffer view
(`remember_outputs`), so any other graph still holding that node (UOps are hash-consed: rebuilding the same
expression on the same inputs gives the same node) reads the buffer instead of recomputing it (`realized_view`);
entries die with their nodes, and nothing scans the live tensors. An entry stays valid while none of the buffers
it was computed from is written: an ASSIGN (or a `buffer_written` call, e.g. from a JIT replay) drops it, so graphs
built afterwards compute with the new contents. An ASSIGN's target gets a fresh BUFFER uop on the same `Buffer`,
so graphs built after the write are new nodes.

>>> from tinycore.dtype import dtypes
>>> u = new_buffer_uop("PYTHON", 3, dtypes.int32)
>>> u.op, u.shape, buffer_of(u).size, realized_view(u) is None
(Ops.BUFFER, (3,), 3, True)
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Sequence
from typing import Any

from tinycore.device import Buffer
from tinycore.dtype import DType, dtypes
from tinycore.engine.views import flat_view, view_base
from tinycore.uop.ops import GroupOp, Ops, UOp

__all__ = [
    "UOpTable",
    "buffer_of",
    "buffer_table",
    "buffer_view",
    "buffer_written",
    "device_node",
    "new_buffer_uop",
    "realized_table",
    "realized_view",
    "remember_outputs",
    "unique_ids",
    "valid_view",
]


class UOpTable:
    """A weak-keyed table of UOps keyed by `id` (UOps hash by identity): lookups cost one plain dict access, and an
    entry disappears when its key uop is collected. Hot callers read `data` directly: ``data[id(u)]`` is
    ``(weakref to u, value)``, valid only when the weakref still returns `u` (an id can be reused)."""

    __slots__ = ("data", "__weakref__")

    def __init__(self) -> None:
        self.data: dict[int, tuple[weakref.ReferenceType, Any]] = {}

    def get(self, key: UOp) -> Any:
        """The value stored for `key`, or None."""
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


# numbers the UNIQUE of every BUFFER uop the scheduler makes
unique_ids = itertools.count()
# BUFFER uop -> the Buffer holding its data (the entry lives as long as the uop, i.e. as long as a graph uses it)
buffer_table = UOpTable()
# a tensor-graph node computed by an earlier realize -> (the buffer view holding its value, write epoch, input buffers)
realized_table = UOpTable()
# writes into buffers that graphs may still read (ASSIGN, TinyJit replays): a global epoch, and per written buffer the
# epoch of its last write; a realized-table entry records the epoch it was made at and the buffers it was computed
# from, and is valid while none of them was written since (see `buffer_written`)
_write_epoch = 0
_last_write: weakref.WeakKeyDictionary[Buffer, int] = weakref.WeakKeyDictionary()
_device_nodes: dict[str, UOp] = {}
_MOVEMENT = GroupOp.Movement


def device_node(device: str) -> UOp:
    """The `DEVICE` uop of `device` (memoized)."""
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
    uop = UOp(Ops.BUFFER, dtype, (UOp(Ops.UNIQUE, dtypes.void, (), next(unique_ids)), device_node(device)), size)
    buffer_table[uop] = buffer
    return uop


def buffer_view(buf: Buffer, chain: tuple[tuple[Ops, Any], ...] = ()) -> UOp:
    """A new BUFFER uop backed by `buf`, seen through the movement ops `chain` ``((op, arg), ...)``."""
    view = new_buffer_uop(buf.device, buf.size, buf.dtype, buf)
    for op, arg in chain:
        view = UOp(op, view.dtype, (view,), arg)
    return view


def buffer_of(uop: UOp) -> Buffer:
    """The `Buffer` behind a `BUFFER` uop, or behind the BUFFER under a view's movement ops (created, unallocated,
    on first request for a uop made elsewhere)."""
    buf = buffer_table.get(uop)
    if buf is None:
        uop = view_base(uop)
        if uop.op is not Ops.BUFFER:
            raise TypeError(f"buffer_of needs a BUFFER uop (or a view of one), got {uop.op}")
        buf = buffer_table.get(uop)
        if buf is not None:
            return buf
        buf = Buffer(uop.src[1].arg, uop.arg, uop.dtype)
        buffer_table[uop] = buf
    return buf


def buffer_written(buf: Buffer) -> None:
    """Tell the scheduler that `buf`'s contents changed behind BUFFER uops that graphs may still use (an ASSIGN
    into it, a TinyJit replay writing its outputs again): values computed from it are no longer taken from the
    realized table, so graphs built afterwards compute with the new contents."""
    global _write_epoch
    _write_epoch += 1
    _last_write[buf.base] = _write_epoch


def valid_view(entry: tuple[UOp, int, Sequence[Buffer]]) -> UOp | None:
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
    entry = realized_table.get(uop)
    return valid_view(entry) if entry is not None else None


def remember_outputs(
    roots: Sequence[UOp], new_uops: Sequence[UOp | None], outputs: Sequence[Any], in_bufs: list[Buffer], written: bool
) -> None:
    """Enter the roots a schedule computed in the realized table: root -> its new uop `new_uops[i]` (None: not
    computed), made from the input buffers `in_bufs`. `outputs` are the schedule's
    `tinycore.engine.schedule_cache.OutputView`s: when one says its buffer holds a node below the root's movement
    ops, that node is entered too. `written`: the schedule writes some of its inputs (ASSIGN), so only the
    assigned values themselves are remembered (the rest was computed from contents it overwrites)."""
    epoch = _write_epoch
    for root, new, out in zip(roots, new_uops, outputs):
        if new is None or new is root:
            continue
        base = root
        while base.op in _MOVEMENT:
            base = base.src[0]
        if base.op is Ops.ASSIGN:
            realized_table[root] = (new, 0, ())  # the assigned buffer stays the value (re-running it would write twice)
            continue
        if written:
            continue  # computed from contents this very schedule overwrites: not worth remembering
        realized_table[root] = (new, epoch, in_bufs)
        if out is not None and out.depth:  # the computed node below the root's movement ops reads its buffer too
            node = root
            for op, arg in out.above:  # only when the root's own chain is the one that was scheduled
                if node.op is not op or node.arg != arg:
                    break
                node = node.src[0]
            else:
                if node.op is out.point_op and node not in realized_table and node.op is not Ops.ASSIGN:
                    buf = view_base(new)
                    shape = out.point_shape if out.point_shape is not None else node.shape
                    realized_table[node] = (flat_view(buf, shape, buf.arg, unbind=False), epoch, in_bufs)
