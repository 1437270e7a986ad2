"""Linearize: a kernel graph (after lowering, optimization and index dtype lowering) becomes the list of UOps in
execution order that renderers and the PYTHON interpreter consume (docs/pipeline.md §4).

How nodes are placed:

- every node runs inside the RANGEs it depends on (`tinycore.codegen.lowerer.scopes`: an END or a REDUCE closes
  ranges) and *outside every other loop*: range-independent work is hoisted out of loops;
- loops nest by axis id (lower ids outside); a range used together with outer ranges is nested inside them;
- inside one block, a priority toposort: ``DEFINE_GLOBAL`` (argument order), ``DEFINE_VAR`` (by name),
  ``DEFINE_LOCAL``, ``DEFINE_REG``, constants, launch ids, then the rest in graph order, except that work no loop
  of the block needs (a reduce's epilogue: the old values an in-place update reads, the output's addresses) comes
  after the block's loops, so it holds no registers across them; a loop is emitted as ``RANGE``, its block,
  ``END(last, range)``;
- ``AFTER(buffer, *effects)`` edges order effects (register/shared-memory stores, barriers, loop ENDs); they stay
  in the program (renderers treat ``AFTER`` as its first source) so values read before and after a loop stay
  distinct nodes;
- a STORE through a gated INDEX becomes ``IF(gate)``, ``STORE``, ``ENDIF`` (a bool vector gate stays: a masked store).

>>> from tinycore.dtype import dtypes
>>> from tinycore.uop.ops import UOp, Ops, AxisType
>>> buf = UOp.define_global(0, dtypes.int, 8)
>>> r = UOp.range(8, 0, AxisType.LOOP)
>>> [u.op.name for u in linearize(UOp.sink(buf.index(r).store(r.cast(dtypes.int) * 2)))]
['DEFINE_GLOBAL', 'CONST', 'CONST', 'RANGE', 'INDEX', 'CAST', 'MUL', 'STORE', 'END']
"""

from __future__ import annotations

import heapq
from operator import itemgetter
from typing import Any

from tinycore.codegen.lowerer import range_key, scopes
from tinycore.dtype import AddrSpace, PtrDType, dtypes
from tinycore.uop.ops import Ops, UOp

__all__ = ["LinearizeError", "linearize"]


class LinearizeError(RuntimeError):
    """The graph can't be put in execution order (a value used outside the loop it is computed in)."""


_ROOT: Any = None
_RANK = {
    Ops.DEFINE_GLOBAL: 0,
    Ops.DEFINE_VAR: 1,
    Ops.DEFINE_LOCAL: 2,
    Ops.DEFINE_REG: 3,
    Ops.CONST: 4,
    Ops.VCONST: 4,
    Ops.SPECIAL: 5,
}
_first = itemgetter(0)
_SKIP = frozenset({Ops.SINK, Ops.GROUP, Ops.NOOP})  # sets: `in` on a tuple of Ops calls __eq__


def _nest(nodes: list[UOp], sc: dict[UOp, frozenset[UOp]]) -> dict[UOp, UOp | None]:
    """The parent loop of every RANGE, so that all co-used ranges form proper nests."""
    rngs = [u for u in nodes if u.op is Ops.RANGE]
    ctx: dict[UOp, set[UOp]] = {r: set() for r in rngs}
    seen: set[frozenset[UOp]] = set()
    for u in nodes:
        s = sc[u]
        if len(s) > 1 and s not in seen:
            seen.add(s)
            ordered = sorted(s, key=range_key)
            for i, r in enumerate(ordered):
                ctx[r].update(ordered[:i])
    changed = True
    while changed:
        changed = False
        for r in rngs:
            for q in list(ctx[r]):
                more = ctx[q] - ctx[r]
                if more:
                    ctx[r] |= more
                    changed = True
                want = {p for p in ctx[r] if range_key(p) < range_key(q)} - ctx[q]
                if want:
                    ctx[q] |= want
                    changed = True
    return {r: (max(ctx[r], key=range_key) if ctx[r] else _ROOT) for r in rngs}


def _order(sink: UOp) -> tuple[list[UOp], dict[UOp, UOp]]:
    nodes = list(sink.toposort())
    pos = {u: i for i, u in enumerate(nodes)}
    sc = scopes(sink)
    parent = _nest(nodes, sc)

    rkey = {r: range_key(r) for r in parent}
    home_cache: dict[UOp, UOp | None] = {}

    def home(u: UOp) -> UOp | None:
        if u.op is Ops.RANGE:
            return parent[u]
        h = home_cache.get(u, home_cache)
        if h is home_cache:
            s = sc[u]
            h = max(s, key=rkey.__getitem__) if s else _ROOT
            home_cache[u] = h
        return h  # type: ignore[return-value]

    loop_item = {r: ("loop", r) for r in parent}
    placements: dict[UOp, dict[UOp | None, Any]] = {}

    def placed(v: UOp) -> dict[UOp | None, Any]:
        """`{block: the item holding v in that block}` for v's own block and every block around it, innermost
        first: v itself in its home block (a RANGE: its loop in the parent block), then the enclosing loops."""
        got = placements.get(v)
        if got is None:
            got = {}
            x = v if v.op is Ops.RANGE else home(v)
            if v.op is not Ops.RANGE:
                got[x] = v
            while x is not _ROOT:
                got[parent[x]] = loop_item[x]
                x = parent[x]
            placements[v] = got
        return got

    items: dict[Any, list[Any]] = {}
    deps: dict[Any, set[Any]] = {}
    for u in nodes:
        if u.op in _SKIP:
            continue
        item = loop_item[u] if u.op is Ops.RANGE else u
        level = parent[u] if u.op is Ops.RANGE else home(u)
        items.setdefault(level, []).append(item)
        deps.setdefault(item, set())
    for u in nodes:
        if u.op in _SKIP:
            continue
        mine = placed(u)  # its keys are the blocks from u's own block out to the root
        for s in u.src:
            theirs = placed(s)
            found = False
            for level, iu in mine.items():
                is_ = theirs.get(level)
                if is_ is not None:
                    # the innermost block holding both; in every block outside it both sit in the same loop
                    found = True
                    if is_ is not iu:
                        deps[iu].add(is_)
                    break
            if not found and s.op is not Ops.RANGE and home(s) not in mine:
                raise LinearizeError(f"{u.op} uses {s.op}, which is computed inside a loop it is not in")

    def item_prio(item: Any) -> tuple:
        if isinstance(item, tuple):
            return (6, pos[item[1]])
        rank = _RANK.get(item.op, 6)
        if item.op is Ops.DEFINE_GLOBAL:
            return (0, item.arg, 0)
        if item.op is Ops.DEFINE_VAR:
            return (1, item.arg[0], 0)
        return (rank, pos[item])

    out: list[UOp] = []
    marker_of: dict[UOp, tuple[int, UOp]] = {}

    def loop_inputs(block: list[Any], block_set: set[Any]) -> set[Any]:
        """The items of `block` that one of its loops needs, directly or through other items of the block."""
        need: set[Any] = set()
        stack = [it for it in block if isinstance(it, tuple)]
        while stack:
            for d in deps[stack.pop()]:
                if d in block_set and d not in need:
                    need.add(d)
                    stack.append(d)
        return need

    def emit(level: UOp | None) -> None:
        block = items.get(level, [])
        block_set = set(block)
        pending = {it: len(deps[it] & block_set) for it in block}
        users: dict[Any, list[Any]] = {}
        for it in block:
            for d in deps[it]:
                if d in pending:
                    users.setdefault(d, []).append(it)
        # work no loop of the block needs (a matmul's epilogue: the old values an in-place update reads, the
        # output's addresses) goes after the loops: held across a loop it would take registers the loop needs
        late: set[Any] = set()
        if any(isinstance(it, tuple) for it in block):
            need = loop_inputs(block, block_set)
            late = {it for it in block if not isinstance(it, tuple) and it not in need and item_prio(it)[0] == 6}

        def prio(it: Any, late: set[Any] = late) -> tuple:
            p = item_prio(it)
            return (7, *p[1:]) if it in late else p

        ready = sorted([(prio(it), it) for it, n in pending.items() if n == 0], key=_first)
        done = 0
        heap = [(p, i, it) for i, (p, it) in enumerate(ready)]
        heapq.heapify(heap)
        counter = len(heap)
        while heap:
            _, _, it = heapq.heappop(heap)
            done += 1
            if isinstance(it, tuple):
                r = it[1]
                out.append(r)
                emit(r)
                out.append(UOp(Ops.END, dtypes.void, (out[-1], r)))
                marker_of[r] = (len(out), out[-1])
            elif it.op is not Ops.END:
                out.append(it)
            for user in users.get(it, ()):
                pending[user] -= 1
                if pending[user] == 0:
                    heapq.heappush(heap, (prio(user), counter, user))
                    counter += 1
        if done != len(block):
            raise LinearizeError("the kernel graph has a dependency cycle")

    emit(_ROOT)
    ends = {u: max(marker_of[r] for r in u.src[1:])[1] for u in nodes if u.op is Ops.END}
    return out, ends


def _finalize(order: list[UOp], ends: dict[UOp, UOp]) -> list[UOp]:
    """Point effects at the emitted ENDs, wrap gated stores in IF/ENDIF, drop dead pointer math."""
    new: dict[UOp, UOp] = {}
    out: list[UOp] = []
    emitted: set[UOp] = set()

    def push(u: UOp) -> UOp:
        if u not in emitted:
            emitted.add(u)
            out.append(u)
        return u

    for u in order:
        if u.op is Ops.END:
            new[u] = push(UOp(Ops.END, u.dtype, (out[-1], new[u.src[1]])))
            continue
        src = tuple([new[ends[s]] if s in ends else new[s] for s in u.src])
        ptr = src[0] if src else None
        if (
            u.op is Ops.STORE
            and ptr is not None
            and ptr.op is Ops.INDEX
            and len(ptr.src) == 3
            and ptr.src[2].dtype.count == 1  # a bool vector gate masks lanes: the renderer's masked store
            and isinstance(ptr.dtype, PtrDType)
            and ptr.dtype.addrspace is not AddrSpace.REG
        ):
            gate = ptr.src[2]
            if gate.op is Ops.CONST and gate.arg is True:
                new[u] = push(u.replace(src=(push(ptr.replace(src=ptr.src[:2])), src[1])))
                continue
            if out and out[-1].op is Ops.ENDIF and out[-1].src[0].src[0] is gate:
                endif = out.pop()  # the previous store had the same gate: one IF block for both
            else:
                # tagged: each IF block is its own node, even when another block has the same gate
                endif = UOp(Ops.ENDIF, dtypes.void, (push(UOp(Ops.IF, dtypes.void, (gate,), tag=len(out))),))
            store = push(u.replace(src=(push(ptr.replace(src=ptr.src[:2])), src[1])))
            out.append(endif)
            new[u] = store
            continue
        new[u] = push(u.replace(src=src) if src != u.src else u)
    return _drop_dead(out)


_KEEP = frozenset(
    {
        Ops.STORE,
        Ops.END,
        Ops.IF,
        Ops.ENDIF,
        Ops.BARRIER,
        Ops.RANGE,
        Ops.DEFINE_GLOBAL,
        Ops.DEFINE_VAR,
        Ops.DEFINE_LOCAL,
        Ops.DEFINE_REG,
        Ops.SPECIAL,
        Ops.CUSTOM,
    }
)


def _drop_dead(uops: list[UOp]) -> list[UOp]:
    used: set[UOp] = set()
    keep = [False] * len(uops)
    for i in range(len(uops) - 1, -1, -1):
        u = uops[i]
        if u.op in _KEEP or u in used:
            keep[i] = True
            used.update(u.src)
    return [u for u, k in zip(uops, keep) if k]


def linearize(sink: UOp) -> list[UOp]:
    """The kernel graph under `sink` as a list in execution order (see the module docstring)."""
    return _finalize(*_order(sink))
