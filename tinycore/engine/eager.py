"""The eager fast path: the schedule-cache key of an elementwise chain, given to its nodes as the tensor front end
builds them, so a repeated chain finds its schedule without walking its graph.

An eager loop rebuilds the same chain of elementwise ops on the same realized input every call, so its nodes are
new each time and the key walk (`tinycore.engine.schedule_cache.KeyWalk`) would visit all of them. The tensor
front end instead gives each node of such a chain a *chain key* as it is built, ``(structure id, leaf)``, where the
leaf is a BUFFER or a RESHAPE of one (a realized tensor of several dimensions): ids number the distinct structures
(a BUFFER's dtype, size and device, and a reshaped leaf's sizes; a node's op, whether its dtype is bool or its
operand's, and its sources: ids, or a constant by identity, in order), so a node's id says what the walk of its
graph would find apart from the leaf's `Buffer`. A chain whose walk found nothing but that structure (no
realized node read instead, no bound variable) has its schedule remembered by structure id
(`tinycore.engine.schedule_cache.eager_schedules`), and later realizes of the same structure skip the walk. A
node that an earlier realize computed is recomputed instead of read: the value is the same (nothing in the chain
writes), and the root itself, which the realized table must serve, is checked.

What the tensor front end calls, as it builds nodes:

- `eager_key_of(u)`: the chain key of a node (a BUFFER's is made on first request);
- `note_elementwise_pair(node, a, b)`: key ``node = op(a, b)`` when both are chains over one leaf;
- `note_unary(node, a)`: key ``node = op(a)`` (a unary op or a cast) when `a` is a chain over one leaf;
- `constant_op_chain_id` / `known_chain_id`: the id of ``op(chain, constant)``, for ops it defers without
  building them (`tinycore.tensor._DeferredOp`), and `note_chain_node` to key such a node once it is built;
- `schedule_for_chain(chain_id, leaf)`: realize a deferred chain from its cached schedule, no node built.

A node's chain key is cached on it, in `UOp.chain_key`: the one UOp field set after construction, by this module
only, through `tinycore.uop.ops.set_chain_key` (a side table keyed by node, a weakref per node, made a chain of
tensor-tensor ops 25% slower). It is derived from the node and never part of its identity.
"""

from __future__ import annotations

import itertools

from tinycore.device import Buffer
from tinycore.dtype import dtypes
from tinycore.engine.realized import buffer_of, buffer_table
from tinycore.engine.schedule_cache import CachedSchedule, eager_schedules, leaf_buffer, schedule_stats
from tinycore.uop.ops import Ops, UOp, set_chain_key

__all__ = [
    "constant_op_chain_id",
    "eager_key_of",
    "known_chain_id",
    "note_chain_node",
    "note_elementwise_pair",
    "note_unary",
    "schedule_for_chain",
]

_CHAIN_IDS_LIMIT = 65536  # structures remembered; beyond, the table starts over (ids are never reused)
_chain_ids: dict[tuple, int] = {}
_next_chain_id = itertools.count(1).__next__
_BUFFER, _RESHAPE = Ops.BUFFER, Ops.RESHAPE
_BOOL_DTYPE = dtypes.bool
_buffers_data = buffer_table.data


def _chain_id(structure: tuple) -> int:
    sid = _chain_ids.get(structure)
    if sid is None:
        if len(_chain_ids) >= _CHAIN_IDS_LIMIT:
            _chain_ids.clear()
        sid = _chain_ids[structure] = _next_chain_id()
    return sid


def constant_op_chain_id(op: Ops, value_id: int, constant: UOp, constant_first: bool, bool_result: bool) -> int:
    """The structure id of a binary elementwise `op` of a chain of structure `value_id` and a sub-graph `constant`
    without buffers or variables (in that order unless `constant_first`); `bool_result`: the result is bool, else
    of the chain's dtype. The tensor front end keys the ops it has not built as UOps yet with it, and the nodes
    built from them later (`note_chain_node`), so both name one structure by one id."""
    structure = (op, value_id, constant, constant_first, bool_result)
    sid = _chain_ids.get(structure)
    return sid if sid is not None else _chain_id(structure)


# `known_chain_id((op, value_id, constant, constant_first, bool_result))`: the id `constant_op_chain_id` gave those
# arguments, or None before it gave one (the tensor front end's hot path looks it up without a Python call)
known_chain_id = _chain_ids.get


# ---------------------------------------------------------------------------------------------------------------
# the chain keys of nodes: `UOp.chain_key`, set with `tinycore.uop.ops.set_chain_key` (only here)


def eager_key_of(uop: UOp) -> tuple[int, UOp | None] | None:
    """`uop`'s eager chain key ``(structure id, leaf or None when uop is that leaf)``, or None when it is not an
    elementwise chain over one leaf. A leaf is a BUFFER, or a RESHAPE of one to concrete sizes (every realized
    tensor of two or more dimensions); its key is made here, on first request (the hot path reads
    ``uop.chain_key`` first and calls this for a leaf only)."""
    key = uop.chain_key
    if key is None:
        op = uop.op
        if op is _BUFFER:
            key = (_chain_id((_BUFFER, uop.dtype, uop.arg, uop.src[1].arg)), None)
        elif op is _RESHAPE and uop.src[0].op is _BUFFER and all(type(d) is int for d in uop.arg):
            buf = uop.src[0]
            key = (_chain_id((_RESHAPE, uop.arg, buf.dtype, buf.arg, buf.src[1].arg)), None)
        else:
            return None
        set_chain_key(uop, key)
    return key


def note_chain_node(node: UOp, chain_id: int, leaf: UOp) -> None:
    """Give `node`, built from ops the tensor front end deferred, the eager chain key ``(chain_id, leaf)`` they
    were given (unless hash-consing returned a node that has its key already)."""
    if node.chain_key is None:
        set_chain_key(node, (chain_id, leaf))


def note_unary(node: UOp, source: UOp) -> None:
    """Give `node` = op(`source`), a unary elementwise op or a cast that the tensor front end built, its key (unless
    hash-consing returned a node that has one) when `source` is a chain over one leaf (or that leaf): scalar ops on
    it are then deferred too, and a repeated chain through an activation finds its schedule without a walk."""
    if node.chain_key is not None:
        return
    key = eager_key_of(source)
    if key is not None:
        set_chain_key(node, (_chain_id(("unary", node.op, key[0], node.dtype, node.arg)), key[1] or source))


def note_elementwise_pair(node: UOp, first: UOp, second: UOp) -> None:
    """Give `node` = op(`first`, `second`), a binary elementwise op of two tensors' graphs that has no chain key
    yet, its key when both operands have one over the same leaf."""
    key_a = eager_key_of(first)
    if key_a is None:
        return
    key_b = eager_key_of(second)
    if key_b is None or (key_a[1] or first) is not (key_b[1] or second):
        return
    dtype = node.dtype
    if dtype is not first.dtype and dtype is not _BOOL_DTYPE:
        return  # the key names the dtype by "same as the operands'" or "bool" only
    set_chain_key(node, (_chain_id((node.op, key_a[0], key_b[0], dtype is _BOOL_DTYPE)), key_a[1] or first))


def schedule_for_chain(chain_id: int, leaf: UOp) -> tuple[CachedSchedule, list[Buffer], Buffer, tuple] | None:
    """`tinycore.engine.schedule.schedule_for_run` of an eager chain whose ops were never built as UOps (a tensor's
    deferred ops, see `tinycore.tensor`): the cached schedule of structure `chain_id` over the BUFFER `leaf`, the
    buffer of every slot, and the chain's result: a new buffer and the movement ops ``((op, arg), ...)`` that make
    its view (`tinycore.engine.realized.buffer_view`). None, having done nothing, when no schedule of that
    structure is cached, or its result is not a new buffer seen through fixed movement ops: the caller then builds
    the chain and calls `schedule_for_run`. Nothing enters the realized table: no graph can hold a node that was
    never built."""
    entry = eager_schedules.get(chain_id)
    if entry is None:
        return None
    out = entry.outputs[0]
    if out is None or out.symbolic or out.slot < entry.n_inputs:
        return None
    leaf = leaf_buffer(leaf)
    found = _buffers_data.get(id(leaf))  # `buffer_table.get(leaf)` without the call
    buf = found[1] if found is not None and found[0]() is leaf else buffer_of(leaf)
    bufs = entry.slot_buffers([buf])
    schedule_stats.hits += 1
    return entry, bufs, bufs[out.slot], out.chain
