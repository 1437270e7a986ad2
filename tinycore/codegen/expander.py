"""Expansion of upcast axes: ``UPCAST`` (output) and ``UNROLL`` (reduce) ranges become lanes.

Two strategies, chosen by the renderer (the ``expand`` pass of `tinycore.codegen.passes` calls one of them):

- `expand_scalar` (renderers without ``supports_float4``): every lane is a separate scalar copy of the code. An
  ``UNROLL`` axis folds its copies into the reduced value, an ``UPCAST`` axis repeats the stores.
- `expand_vectors` (renderers with ``supports_float4``): lanes are real vector lanes. Three steps, each a traceable
  pass:

  1. **memory** (``"expand_memory"``): every ``LOAD``/``STORE`` whose address or gate depends on an expanded range
     is split per lane: each lane's address is computed (the ranges substituted by constants, simplified) and
     split into ``base + constant offset``. Lanes that share ``base`` and gate and have consecutive offsets become
     one vector access (``LOAD`` of ``dtype.vec(w)`` through a scalar ``INDEX``), the rest stay scalar; lanes with
     the same address are loaded once. For a renderer with masked access, lanes that differ only in their gates
     are one access too, gated by a bool vector (one lane per element). A load becomes ``UNROLL(lanes, axes)``; a
     store takes its value through ``CONTRACT(value, axes)``.
  2. **lanes** (``"expand_lanes"``): each expanded range becomes ``UNROLL(VCONST(0..n-1), ((axis, n),))`` and
     ``UNROLL`` is pushed through the graph: an elementwise op over ``UNROLL`` sources is one vector op over the
     union of their axes (sources swizzled with ``GEP``, scalars broadcast with ``VECTORIZE``); other ops (``WMMA``,
     ``LOAD``...) are repeated per lane; ``CONTRACT`` gathers axes into the element vector; ``REDUCE`` over
     ``UNROLL`` axes folds those lanes (before the loop, or after it when the accumulator would be narrower than a
     vector register: see `LATE_FOLD_BYTES`), keeping the other lanes as vector accumulators.
  3. **cleanup** (``"vector_cleanup"``): ``GEP``/``VECTORIZE`` folding.

Lane order of ``UNROLL(x, ((a0, n0), (a1, n1), ...))``: axes sorted by axis id, row-major (the first axis is the
slowest); its dtype is the *element* dtype, ``x.dtype.count == prod(n) * element count``.

The results are the same as `expand_scalar`'s, up to the order of floating-point additions in folded reductions.

>>> from tinycore.dtype import dtypes
>>> from tinycore.uop.ops import AxisType
>>> buf = UOp.define_global(0, dtypes.float, 8)
>>> r, u = UOp.range(2, 0, AxisType.LOOP), UOp.range(4, 1, AxisType.UPCAST)
>>> st = buf.index(r * 4 + u).store((r * 4 + u).cast(dtypes.float))
>>> out = expand_vectors(UOp.sink(st))
>>> [(s.op.name, s.src[1].dtype) for s in out.src]
[('STORE', dtypes.float.vec(4))]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from tinycore.codegen.lowerer import range_key
from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.helpers import prod
from tinycore.uop.ops import AxisType, GroupOp, Ops, UOp
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite, graph_rewrite_map
from tinycore.uop.symbolic import _is_index, symbolic

__all__ = [
    "EXPAND_TYPES",
    "LATE_FOLD_BYTES",
    "affine_coefficients",
    "expand_scalar",
    "expand_vectors",
    "pm_vector_cleanup",
]

EXPAND_TYPES = (AxisType.UPCAST, AxisType.UNROLL)
# membership tests use sets: AxisType/Ops define __lt__, so `in` on a tuple calls a Python-level __eq__
_EXPAND_SET = frozenset(EXPAND_TYPES)
_LANE_OPS = frozenset({Ops.UNROLL, Ops.CONTRACT})
_VECTOR_OPS = frozenset({Ops.UNROLL, Ops.CONTRACT, Ops.WMMA})
LATE_FOLD_BYTES = 32  # a reduce whose kept lanes are narrower than this accumulates all lanes, folds after the loop
MAX_ACCESS_WIDTH = 16  # widest vector load/store emitted (lanes)
# widest vector load under one scalar gate for renderers without masked access (their gated loads stay scalar)
GATED_LOAD_WIDTH = 1

Axes = tuple[tuple[Any, int], ...]


def _size(r: UOp) -> int:
    return r.src[0].arg


def _expanded_ranges(u: UOp) -> list[UOp]:
    return sorted(
        (x for x in u.toposort() if x.op is Ops.RANGE and x.arg[1] in _EXPAND_SET and _size(x) > 1), key=range_key
    )


def _axis_sort_key(axis: Any) -> tuple:
    return tuple(axis) if isinstance(axis, tuple) else (axis,)


def _merge_axes(*groups: Iterable[tuple[Any, int]]) -> Axes:
    sizes: dict[Any, int] = {}
    for group in groups:
        for a, n in group:
            if sizes.setdefault(a, n) != n:
                raise ValueError(f"axis {a} is expanded with two sizes ({sizes[a]} and {n})")
    return tuple(sorted(sizes.items(), key=lambda item: _axis_sort_key(item[0])))


def _combos(axes: Axes) -> list[tuple[int, ...]]:
    return list(itertools.product(*(range(n) for _, n in axes)))


def _lane(src_axes: Axes, axes: Axes, combo: Sequence[int]) -> int:
    """The lane of `combo` (values of `axes`) in the layout of `src_axes` (axes it lacks are broadcast)."""
    pos = {a: i for i, (a, _) in enumerate(axes)}
    lane = 0
    for a, n in src_axes:
        lane = lane * n + combo[pos[a]]
    return lane


def _lanes(src_axes: Axes, axes: Axes) -> list[int]:
    """`_lane` of every combo of `axes`, in `_combos` order."""
    pos = {a: i for i, (a, _) in enumerate(axes)}
    plan = [(pos[a], n) for a, n in src_axes]
    out = []
    for combo in _combos(axes):
        lane = 0
        for p, n in plan:
            lane = lane * n + combo[p]
        out.append(lane)
    return out


# ---------------------------------------------------------------------------------------------------------------
# vector helpers


def _vec(dt: DType, n: int) -> DType:
    return dt if n == 1 else dt.scalar().vec(n)


def _gep(x: UOp, lanes: Sequence[int]) -> UOp:
    lanes = tuple(lanes)
    if x.dtype.count == 1:
        return x if len(lanes) == 1 else _broadcast(x, len(lanes))
    if lanes == tuple(range(x.dtype.count)):
        return x
    return x.gep(lanes)


def _broadcast(x: UOp, n: int) -> UOp:
    if n == 1:
        return x
    if x.op is Ops.CONST:
        return UOp.const(x.dtype.vec(n), x.arg)
    return UOp(Ops.VECTORIZE, x.dtype.vec(n), (x,) * n)


def _concat(parts: Sequence[UOp]) -> UOp:
    """One vector holding the lanes of `parts` in order (scalar lanes only, as renderers expect)."""
    if len(parts) == 1:
        return parts[0]
    lanes: list[UOp] = []
    for p in parts:
        lanes.extend([p] if p.dtype.count == 1 else [p.gep(i) for i in range(p.dtype.count)])
    return UOp(Ops.VECTORIZE, parts[0].dtype.scalar().vec(len(lanes)), tuple(lanes))


def _unroll(x: UOp, axes: Axes, elem: DType) -> UOp:
    return UOp(Ops.UNROLL, elem, (x,), axes) if axes else x


# ---------------------------------------------------------------------------------------------------------------
# step 1: per-lane memory accesses


def _split_offset(e: UOp) -> tuple[UOp | None, int]:
    if e.op is Ops.CONST:
        return None, int(e.arg)
    if e.op is Ops.ADD and e.src[1].op is Ops.CONST:
        return e.src[0], int(e.src[1].arg)
    if e.op is Ops.ADD and e.src[0].op is Ops.CONST:
        return e.src[1], int(e.src[0].arg)
    return e, 0


class _LaneAddress:
    """The simplified address and gate of one memory access for every lane of its expanded ranges."""

    def __init__(self, ptr: UOp, rngs: tuple[UOp, ...], memo: _Memo, plans: dict[Any, Any] | None = None):
        self.rngs = rngs
        self.axes: Axes = tuple((r.arg[0], _size(r)) for r in rngs)
        idx, gate = ptr.src[1], ptr.src[2] if len(ptr.src) > 2 else None
        self.lanes: list[tuple[UOp | None, int, UOp | None, bool]] = []  # (base, offset, gate, never)
        coefs, combos, terms = _lane_plan(idx, gate, rngs, plans)
        if coefs is not None:  # affine address: base + sum(coef * lane value), one simplification
            base, off0 = _split_offset(_subst(idx, rngs, combos[0], memo))
        for combo in _combos(self.axes):
            if coefs is not None:
                off = off0 + sum(c * v for c, v in zip(coefs, combo))
            else:
                base, off = _split_offset(_subst(idx, rngs, combo, memo))
            g, never = _lane_gate(terms, rngs, combo, memo)
            self.lanes.append((base, off, g, never))

    def chunks(
        self, max_width: int, dedupe: bool, gated_width: int, masked: bool = False
    ) -> list[tuple[UOp | None, int, UOp | None, list[list[int]]]]:
        """Groups of lanes accessed together: ``(base, first offset, gate, lanes per element)``; each chunk covers
        consecutive offsets. With `dedupe`, lanes of one address share an element (loads); else the last wins.

        With `masked` (the renderer takes a bool vector gate, one lane per element), lanes of one base with
        different gates still form one access: its gate is the shared gate when the lanes agree, else a
        ``VECTORIZE`` of the lanes' gates (``True`` for ungated lanes). Two lanes at one address with different
        gates can't share an element; such an access is grouped by gate as without `masked`."""
        if masked:
            found = self._masked_chunks(max_width, dedupe)
            if found is not None:
                return found
        groups: dict[tuple[Any, Any], dict[int, list[int]]] = {}
        for lane, (base, off, g, never) in enumerate(self.lanes):
            if never:
                continue
            offs = groups.setdefault((base, g), {})
            if dedupe:
                offs.setdefault(off, []).append(lane)
            else:
                offs[off] = [lane]
        out = []
        for (base, g), offs in groups.items():
            for run in _consecutive_runs(sorted(offs)):
                for part in _power_of_two_pieces(run, max_width if g is None else gated_width):
                    out.append((base, part[0], g, [offs[k] for k in part]))
        return out

    def _masked_chunks(
        self, max_width: int, dedupe: bool
    ) -> list[tuple[UOp | None, int, UOp | None, list[list[int]]]] | None:
        """`chunks` grouped by base only (see there); None when two lanes at one address have different gates."""
        groups: dict[Any, dict[int, tuple[UOp | None, list[int]]]] = {}
        for lane, (base, off, g, never) in enumerate(self.lanes):
            if never:
                continue
            offs = groups.setdefault(base, {})
            got = offs.get(off)
            if got is not None and got[0] is not g:
                return None
            if got is not None and dedupe:
                got[1].append(lane)
            else:
                offs[off] = (g, [lane])
        out = []
        for base, offs in groups.items():
            for run in _consecutive_runs(sorted(offs)):
                for part in _power_of_two_pieces(run, max_width):
                    gates = [offs[k][0] for k in part]
                    gate = gates[0] if all(g is gates[0] for g in gates) else _gate_vector(gates)
                    out.append((base, part[0], gate, [offs[k][1] for k in part]))
        return out


def _consecutive_runs(keys: list[int]) -> list[list[int]]:
    """Sorted `keys` cut where they skip a value: ``[0, 1, 2, 5, 6] -> [[0, 1, 2], [5, 6]]``."""
    runs: list[list[int]] = []
    for k in keys:
        if runs and k == runs[-1][-1] + 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    return runs


def _power_of_two_pieces(run: list[int], max_width: int) -> list[list[int]]:
    """`run` cut into pieces of the widest power of two that fits (at most `max_width`), left to right."""
    pieces, start = [], 0
    while start < len(run):
        width = 1
        while width * 2 <= min(max_width, len(run) - start):
            width *= 2
        pieces.append(run[start : start + width])
        start += width
    return pieces


def _gate_vector(gates: list[UOp | None]) -> UOp:
    """One bool lane per element: each lane's gate, ``True`` where a lane has none."""
    on = UOp.const(dtypes.bool, True)
    return UOp(Ops.VECTORIZE, dtypes.bool.vec(len(gates)), tuple(on if g is None else g for g in gates))


def affine_coefficients(idx: UOp, rngs: list[UOp]) -> list[int] | None:
    """The constant coefficient of each range in `idx` when `idx` is affine in them (sums, differences, products
    by constants), else None."""
    targets = set(rngs)
    coef: dict[UOp, dict[UOp, int] | None] = {}
    uses: set[UOp] = set()  # the nodes that depend on a range of `rngs` (filled in topological order)
    for u in idx.toposort():
        if u in targets:
            uses.add(u)
            coef[u] = {u: 1}
            continue
        if not any(s in uses for s in u.src):
            coef[u] = {}
            continue
        uses.add(u)
        if (u.op is Ops.ADD or u.op is Ops.SUB) and all(coef.get(s) is not None for s in u.src):
            a, b = coef[u.src[0]], coef[u.src[1]]
            sign = 1 if u.op is Ops.ADD else -1
            coef[u] = {r: a.get(r, 0) + sign * b.get(r, 0) for r in set(a) | set(b)}  # type: ignore[union-attr]
        elif u.op is Ops.NEG and coef.get(u.src[0]) is not None:
            coef[u] = {r: -c for r, c in coef[u.src[0]].items()}  # type: ignore[union-attr]
        elif u.op is Ops.MUL and any(s.op is Ops.CONST for s in u.src):
            c, x = (u.src[0], u.src[1]) if u.src[0].op is Ops.CONST else (u.src[1], u.src[0])
            inner = coef.get(x)
            coef[u] = None if inner is None else {r: v * int(c.arg) for r, v in inner.items()}
        else:
            coef[u] = None
    top = coef.get(idx)
    return None if top is None else [top.get(r, 0) for r in rngs]


_Memo = dict[tuple[UOp, tuple[UOp, ...], tuple[int, ...]], UOp]


def _lane_plan(
    idx: UOp, gate: UOp | None, rngs: tuple[UOp, ...], cache: dict[Any, Any] | None = None
) -> tuple[list[int] | None, list[tuple[int, ...]], list[tuple[UOp, tuple[UOp, ...]]]]:
    """How the lane addresses and gates of an access are found: `(coefficients, [zero combo], terms)` when the
    index is affine in `rngs` (one simplification), else `(None, every combo, terms)`; `terms` are the gate's
    AND-ed terms, each with the ranges of `rngs` it uses: a term is simplified once per combination of its own
    ranges (a matmul tile's store gate is ``row < M & column < N``: 4 + 16 simplifications, not 4 x 16).
    Remembered in `cache` when given (callers must not mutate the result)."""
    if cache is not None:
        key = (idx, gate, rngs)
        got = cache.get(key)
        if got is None:
            got = cache[key] = _lane_plan(idx, gate, rngs)
        return got
    terms = [(t, tuple(r for r in rngs if r in t.toposort())) for t in _and_terms(gate)] if gate is not None else []
    coefs = affine_coefficients(idx, list(rngs))
    if coefs is not None:
        return coefs, [(0,) * len(rngs)], terms
    return None, _combos(tuple((r.arg[0], _size(r)) for r in rngs)), terms


def _and_terms(gate: UOp) -> list[UOp]:
    """The terms of a gate that is a chain of ANDs (itself when it is none)."""
    if gate.op is Ops.AND and gate.dtype == dtypes.bool:
        return _and_terms(gate.src[0]) + _and_terms(gate.src[1])
    return [gate]


def _lane_gate(
    terms: list[tuple[UOp, tuple[UOp, ...]]], rngs: tuple[UOp, ...], combo: tuple[int, ...], memo: _Memo
) -> tuple[UOp | None, bool]:
    """The gate of one lane (None: always on) and whether the lane is never on, from the gate's terms."""
    kept: list[UOp] = []
    for term, own in terms:
        if own:
            term = _subst(term, own, tuple(combo[rngs.index(r)] for r in own), memo)
        if term.op is Ops.CONST:
            if not term.arg:
                return None, True
            continue
        kept.append(term)
    gate = kept[0] if kept else None
    for term in kept[1:]:
        gate = gate & term
    return gate, False


def _substituted(u: UOp, rngs: tuple[UOp, ...], combo: tuple[int, ...]) -> UOp:
    return u.substitute({r: UOp.const(r.dtype, v) for r, v in zip(rngs, combo)})


def _subst(u: UOp, rngs: tuple[UOp, ...], combo: tuple[int, ...], memo: _Memo) -> UOp:
    """`u` with `rngs` replaced by the values `combo`, simplified (through `memo`)."""
    key = (u, rngs, combo)
    got = memo.get(key)
    if got is None:
        got = _substituted(u, rngs, combo).simplify() if rngs else u
        memo[key] = got
    return got


def _access_rngs(ptr: UOp, rngs: list[UOp], cache: dict[UOp, tuple[UOp, ...]] | None = None) -> tuple[UOp, ...]:
    """The ranges of `rngs` that the address or gate of memory access `ptr` (an INDEX) depends on (remembered in
    `cache`, which must only ever be used with the same `rngs`)."""
    if cache is not None and ptr in cache:
        return cache[ptr]
    nodes = ptr.src[1].toposort()
    if len(ptr.src) > 2:
        nodes.update(ptr.src[2].toposort())
    found = tuple(r for r in rngs if r in nodes)
    if cache is not None:
        cache[ptr] = found
    return found


def _presimplify(
    sink: UOp, rngs: list[UOp], memo: _Memo, access_cache: dict[UOp, tuple[UOp, ...]], plan_cache: dict[Any, Any]
) -> None:
    """Fill `memo` with the simplified lane addresses (and gates) of every memory access of `sink` in one
    simplification pass over all of them: the per-access expressions share most of their nodes (a kernel's
    accesses differ in a few terms), and a rewrite's result for a node depends on that node only, so the results
    are exactly those of simplifying each one alone, for a fraction of the work."""
    keys: list[tuple[UOp, tuple[UOp, ...], tuple[int, ...]]] = []
    exprs: list[UOp] = []
    # the all-zero lane of every access (the only one of an affine access) is one substitution for all of them:
    # setting every expanded range to 0 is the same as setting the access's own ranges to 0, as it uses no other
    zero_keys: list[tuple[UOp, tuple[UOp, ...], tuple[int, ...]]] = []
    zero_parts: list[UOp] = []
    for u in sink.toposort():
        if (u.op is not Ops.LOAD and u.op is not Ops.STORE) or u.src[0].op is not Ops.INDEX:
            continue
        ptr = u.src[0]
        if not isinstance(ptr.dtype, PtrDType):
            continue
        access = _access_rngs(ptr, rngs, access_cache)
        if not access:
            continue
        idx, gate = ptr.src[1], ptr.src[2] if len(ptr.src) > 2 else None
        _, combos, terms = _lane_plan(idx, gate, access, plan_cache)
        parts = [(idx, access, combos)]
        parts += [(t, own, _combos(tuple((r.arg[0], _size(r)) for r in own))) for t, own in terms if own]
        for part, part_rngs, part_combos in parts:
            for combo in part_combos:
                key = (part, part_rngs, combo)
                if key not in memo:
                    memo[key] = part  # placeholder, replaced below
                    if any(combo):
                        keys.append(key)
                        exprs.append(_substituted(part, part_rngs, combo))
                    else:
                        zero_keys.append(key)
                        zero_parts.append(part)
    if zero_parts:
        zero = UOp.sink(*zero_parts).substitute({r: UOp.const(r.dtype, 0) for r in rngs})
        keys, exprs = zero_keys + keys, [*zero.src, *exprs]
    if not exprs:
        return
    if Ops.SINK in symbolic.ops:  # a rule could change the SINK itself: map each expression back
        simplified = graph_rewrite_map(UOp.sink(*exprs), symbolic, name="simplify")
        results = [simplified.get(expr, expr) for expr in exprs]
    else:  # the SINK is only rebuilt from its simplified sources, in order
        results = list(graph_rewrite(UOp.sink(*exprs), symbolic, name="simplify").src)
    for key, result in zip(keys, results):
        memo[key] = result


def _address(buf: UOp, base: UOp | None, off: int, gate: UOp | None) -> UOp:
    idx = UOp.const(dtypes.index, off) if base is None else (base if off == 0 else base + off)
    return buf.index(idx, gate)


def _expand_load(ld: UOp, ctx: _MemCtx) -> UOp | None:
    ptr = ld.src[0]
    if ptr.op is not Ops.INDEX or not isinstance(ptr.dtype, PtrDType):
        return None
    rngs = _access_rngs(ptr, ctx.rngs, ctx.access)
    if not rngs:
        return None
    la = _LaneAddress(ptr, rngs, ctx.memo, ctx.plans)
    alt = ld.src[1] if len(ld.src) > 1 else UOp.const(ld.dtype, 0)
    lane_src: list[UOp | tuple[UOp, int]] = [alt] * len(la.lanes)
    gated_width = ctx.max_width if ctx.masked else GATED_LOAD_WIDTH
    for base, off, g, elems in la.chunks(ctx.max_width, dedupe=True, gated_width=gated_width, masked=ctx.masked):
        width = len(elems)
        addr = _address(ptr.src[0], base, off, g)
        dt = _vec(ld.dtype, width)
        if g is None:
            chunk = UOp(Ops.LOAD, dt, (addr,))
        else:
            chunk = UOp(Ops.LOAD, dt, (addr, _broadcast(alt, width) if width > 1 else alt))
        for pos, lanes in enumerate(elems):
            for lane in lanes:
                lane_src[lane] = (chunk, pos) if width > 1 else chunk
    return _unroll(_assemble(lane_src), la.axes, ld.dtype)


def _assemble(lane_src: list[UOp | tuple[UOp, int]]) -> UOp:
    vecs = {s[0] for s in lane_src if isinstance(s, tuple)}
    if len(vecs) == 1 and all(isinstance(s, tuple) for s in lane_src):
        (v,) = vecs
        return _gep(v, [s[1] for s in lane_src])  # type: ignore[index]
    if not vecs and len(set(lane_src)) == 1:
        return _broadcast(lane_src[0], len(lane_src))  # type: ignore[arg-type]
    lanes = [s[0].gep(s[1]) if isinstance(s, tuple) else s for s in lane_src]
    return UOp(Ops.VECTORIZE, lanes[0].dtype.vec(len(lanes)), tuple(lanes))


def _expand_store(st: UOp, ctx: _MemCtx) -> list[UOp] | None:
    ptr, val = st.src
    if ptr.op is not Ops.INDEX or not isinstance(ptr.dtype, PtrDType):
        return None
    rngs = _access_rngs(ptr, ctx.rngs, ctx.access)
    if not rngs:
        return None
    la = _LaneAddress(ptr, rngs, ctx.memo, ctx.plans)
    c = val.dtype.count
    value = UOp(Ops.CONTRACT, val.dtype.scalar().vec(c * prod(n for _, n in la.axes)), (val,), la.axes)
    stores = []
    for base, off, g, elems in la.chunks(ctx.max_width, dedupe=False, gated_width=ctx.max_width, masked=ctx.masked):
        lanes = [lane * c + e for (lane,) in elems for e in range(c)]
        stores.append(_address(ptr.src[0], base, off, g).store(_gep(value, lanes)))
    return stores


class _MemCtx:
    def __init__(self, rngs: list[UOp], max_width: int, masked: bool):
        self.rngs, self.max_width, self.masked = rngs, max_width, masked
        self.memo: _Memo = {}
        self.access: dict[UOp, tuple[UOp, ...]] = {}  # memory access INDEX -> the ranges of `rngs` it uses
        self.plans: dict[Any, Any] = {}  # (index, gate, ranges) -> `_lane_plan`


pm_expand_memory = PatternMatcher(
    [(UPat(Ops.LOAD, name="ld"), lambda ctx, ld: _expand_load(ld, ctx))], name="expand_memory"
)


def _expand_memory(sink: UOp, rngs: list[UOp], max_width: int, masked: bool) -> UOp:
    ctx = _MemCtx(rngs, max_width, masked)
    _presimplify(sink, rngs, ctx.memo, ctx.access, ctx.plans)
    # a store inside a loop that an END closes (a stash filled by a reduce loop): its lanes, grouped under the END
    nested: dict[UOp, UOp] = {}
    for u in sink.toposort():
        if u.op is Ops.END and u.src[0].op is Ops.STORE and u.src[0] not in nested:
            parts = _expand_store(u.src[0], ctx)
            if parts is not None:
                nested[u.src[0]] = parts[0] if len(parts) == 1 else UOp(Ops.GROUP, dtypes.void, tuple(parts))
    if nested:
        sink = sink.substitute(nested)
    stores: list[UOp] = []
    for st in sink.src:
        if st.op is Ops.STORE:
            expanded = _expand_store(st, ctx)
            stores.extend(expanded if expanded is not None else [st])
        else:
            stores.append(st)
    return graph_rewrite(UOp.sink(*stores), pm_expand_memory, ctx=ctx, name="expand_memory")


# ---------------------------------------------------------------------------------------------------------------
# step 2: lanes


def _swizzle(s: UOp, axes: Axes) -> UOp:
    """`s` as a plain vector over `axes` (its element lanes innermost)."""
    total = prod(n for _, n in axes)
    if s.op is Ops.UNROLL:
        c = s.dtype.count
        order = [lane * c + e for lane in _lanes(s.arg, axes) for e in range(c)]
        return _gep(s.src[0], order)
    c = s.dtype.count
    if c == 1:
        return _broadcast(s, total)
    return _gep(s, [e for _ in range(total) for e in range(c)])


def _lane_of(s: UOp, axes: Axes, combo: tuple[int, ...]) -> UOp:
    if s.op is not Ops.UNROLL:
        return s
    c = s.dtype.count
    lane = _lane(s.arg, axes, combo)
    return _gep(s.src[0], range(lane * c, lane * c + c))


_ELEMENTWISE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST}


def _expand_op(x: UOp) -> UOp | None:
    if not any(s.op is Ops.UNROLL for s in x.src):
        return None
    axes = _merge_axes(*(s.arg for s in x.src if s.op is Ops.UNROLL))
    total = prod(n for _, n in axes)
    index_math = any(_is_index(t.dtype.scalar()) for t in (x, *x.src))
    if (
        x.op in _ELEMENTWISE
        and not index_math
        and not (x.op is Ops.BITCAST and x.dtype.itemsize != x.src[0].dtype.itemsize)
    ):
        new = UOp(x.op, _vec(x.dtype, total * x.dtype.count), tuple(_swizzle(s, axes) for s in x.src), x.arg)
        return _unroll(new, axes, x.dtype)
    parts = [x.replace(src=tuple(_lane_of(s, axes, combo) for s in x.src)) for combo in _combos(axes)]
    if x.dtype == dtypes.void:
        return UOp.group(*parts)
    return _unroll(_concat(parts), axes, x.dtype)


def _expand_unroll_of_unroll(outer: UOp, inner: UOp) -> UOp:
    c_out = outer.dtype.count
    c_in = inner.dtype.count
    axes = _merge_axes(inner.arg, outer.arg)
    order = [
        _lane(inner.arg, axes, combo) * c_in + _lane(outer.arg, axes, combo) * c_out + e
        for combo in _combos(axes)
        for e in range(c_out)
    ]
    return _unroll(_gep(inner.src[0], order), axes, outer.dtype)


def _expand_contract(ct: UOp) -> UOp:
    x, c_axes = ct.src[0], tuple(ct.arg)
    if x.op is not Ops.UNROLL:
        return _swizzle(x, _merge_axes(c_axes))
    c = x.dtype.count
    rest = tuple((a, n) for a, n in x.arg if a not in dict(c_axes))
    full = _merge_axes(x.arg, c_axes)
    pos = {a: i for i, (a, _) in enumerate(full)}
    order = []
    for rcombo in _combos(rest):
        for ccombo in _combos(c_axes):
            combo = [0] * len(full)
            for (a, _), v in zip(rest, rcombo):
                combo[pos[a]] = v
            for (a, _), v in zip(c_axes, ccombo):
                combo[pos[a]] = v
            order.extend(_lane(x.arg, full, combo) * c + e for e in range(c))
    return _unroll(_gep(x.src[0], order), rest, ct.dtype)


def _expand_reduce(red: UOp) -> UOp | None:
    value, rest = red.src[0], red.src[1:]
    folds = [r for r in rest if r.op is Ops.UNROLL]
    if not folds and value.op is not Ops.UNROLL:
        return None
    loops = [r for r in rest if r.op is not Ops.UNROLL]
    x_axes = _merge_axes(*(r.arg for r in folds))
    full = _merge_axes(value.arg if value.op is Ops.UNROLL else (), x_axes)
    keep = tuple((a, n) for a, n in full if a not in dict(x_axes))
    c = red.dtype.count
    n_keep = prod(n for _, n in keep) * c
    vfull = _swizzle(value, full)

    def fold(v: UOp) -> UOp:
        if not x_axes:
            return v
        acc: UOp | None = None
        pos = {a: i for i, (a, _) in enumerate(full)}
        for xcombo in _combos(x_axes):
            lanes = []
            for kcombo in _combos(keep):
                combo = [0] * len(full)
                for (a, _), val in zip(keep, kcombo):
                    combo[pos[a]] = val
                for (a, _), val in zip(x_axes, xcombo):
                    combo[pos[a]] = val
                lane = _lane(full, full, combo)
                lanes.extend(lane * c + e for e in range(c))
            part = _gep(v, lanes)
            acc = part if acc is None else acc.alu(red.arg, part)
        assert acc is not None
        return acc

    late = bool(loops and x_axes) and n_keep * red.dtype.scalar().itemsize < LATE_FOLD_BYTES
    if late:
        out = fold(UOp(Ops.REDUCE, vfull.dtype, (vfull, *loops), red.arg))
    else:
        folded = fold(vfull)
        out = UOp(Ops.REDUCE, folded.dtype, (folded, *loops), red.arg) if loops else folded
    return _unroll(out, keep, red.dtype)


def _expand_store_lanes(st: UOp) -> UOp | None:
    ptr, val = st.src
    if ptr.op is Ops.UNROLL:
        return _expand_op(st)
    if val.op is not Ops.UNROLL:
        return None
    c = val.dtype.count
    last = val.src[0].dtype.count // c - 1
    return ptr.store(_gep(val.src[0], range(last * c, last * c + c)))  # lanes of one address: the last one wins


pm_expand_lanes = PatternMatcher(
    [
        (UPat(Ops.UNROLL, src=(UPat(Ops.UNROLL, name="inner"),), name="outer"), _expand_unroll_of_unroll),
        (UPat(Ops.CONTRACT, name="ct"), _expand_contract),
        (UPat(Ops.REDUCE, name="red"), _expand_reduce),
        (UPat(Ops.STORE, name="st"), _expand_store_lanes),
        (UPat(GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.INDEX, Ops.LOAD, Ops.WMMA, Ops.GEP}, name="x"), _expand_op),
    ],
    name="expand_lanes",
)


# ---------------------------------------------------------------------------------------------------------------
# step 3: cleanup


def _gep_gep(outer: UOp, inner: UOp) -> UOp:
    return _gep(inner.src[0], [inner.arg[i] for i in outer.arg])


def _gep_vectorize(g: UOp, v: UOp) -> UOp | None:
    if any(s.dtype.count > 1 for s in v.src):
        return None
    lanes = [v.src[i] for i in g.arg]
    if len(lanes) == 1:
        return lanes[0]
    return UOp(Ops.VECTORIZE, g.dtype, tuple(lanes))


def _gep_vconst(g: UOp, c: UOp) -> UOp:
    values = tuple(c.arg[i] for i in g.arg)
    return UOp.const(g.dtype, values[0] if len(values) == 1 else values)


def _gep_identity(g: UOp) -> UOp | None:
    x = g.src[0]
    return x if g.arg == tuple(range(x.dtype.count)) and x.dtype.count == g.dtype.count else None


def _vectorize_fold(v: UOp) -> UOp | None:
    srcs = v.src
    if all(s.op is Ops.CONST for s in srcs) and srcs[0].dtype.count == 1:
        return UOp.const(v.dtype, tuple(s.arg for s in srcs))
    if all(s.op is Ops.GEP and len(s.arg) == 1 for s in srcs):
        base = srcs[0].src[0]
        if all(s.src[0] is base for s in srcs):
            return _gep(base, [s.arg[0] for s in srcs])
    return None


def _gep_of_broadcast_alu(g: UOp, x: UOp) -> UOp | None:
    """GEP of a lane-uniform elementwise op: the op on fewer lanes."""
    if not all(s.op is Ops.VECTORIZE and all(t is s.src[0] for t in s.src) or s.op is Ops.VCONST for s in x.src):
        return None
    if len(g.arg) != 1:
        return None
    return x.replace(dtype=x.dtype.scalar(), src=tuple(_gep(s, g.arg) for s in x.src))


def _after_of_group(a: UOp) -> UOp | None:
    """AFTER(buf, GROUP(stores)) -> AFTER(buf, *stores): a fully unrolled loop's END leaves its stores' GROUP."""
    if not any(s.op is Ops.GROUP for s in a.src[1:]):
        return None
    return a.replace(src=(a.src[0], *_flatten_effects(a.src[1:])))


pm_vector_cleanup = PatternMatcher(
    [
        (UPat(Ops.GEP, src=(UPat(Ops.GEP, name="inner"),), name="outer"), _gep_gep),
        (UPat(Ops.GEP, src=(UPat(Ops.VECTORIZE, name="v"),), name="g"), _gep_vectorize),
        (UPat(Ops.GEP, src=(UPat(Ops.VCONST, name="c"),), name="g"), _gep_vconst),
        (UPat(Ops.GEP, name="g"), _gep_identity),
        (UPat(Ops.VECTORIZE, name="v"), _vectorize_fold),
        (UPat(Ops.GEP, src=(UPat(GroupOp.ALU, name="x"),), name="g"), _gep_of_broadcast_alu),
        (UPat(Ops.AFTER, name="a"), _after_of_group),
    ],
    name="vector_cleanup",
)


def expand_vectors(sink: UOp, max_width: int = MAX_ACCESS_WIDTH, masked: bool = False) -> UOp:
    """Expand the ``UPCAST``/``UNROLL`` ranges (and ``UNROLL``/``CONTRACT`` nodes the tensor-core opt built) of a
    lowered kernel into vector lanes (see the module docstring). Vector memory accesses are at most `max_width`
    lanes wide; with `masked` (`tinycore.renderer.Renderer.masked_access`) consecutive lanes with different gates
    are one access with a bool vector gate, and gated loads are vectors too."""
    size_one = {
        x: UOp.const(x.dtype, 0)
        for x in sink.toposort()
        if x.op is Ops.RANGE and x.arg[1] in _EXPAND_SET and _size(x) == 1
    }
    if size_one:
        sink = _drop_ranges(sink, size_one)
    sink = graph_rewrite(sink, pm_unroll_wide, name="expand_unroll_wide")
    rngs = _expanded_ranges(sink)
    has_lanes = any(u.op in _LANE_OPS for u in sink.toposort())
    if not rngs and not has_lanes:
        return sink
    sink = _expand_memory(sink, rngs, max_width, masked)
    lanes = {
        r: UOp(
            Ops.UNROLL, r.dtype, (UOp.const(r.dtype.vec(_size(r)), tuple(range(_size(r)))),), ((r.arg[0], _size(r)),)
        )
        for r in rngs
    }
    sink = _drop_ranges(sink, lanes)
    sink = graph_rewrite(sink, pm_expand_lanes, name="expand_lanes")
    sink = UOp.sink(*_flatten_effects(sink.src))
    return graph_rewrite(sink, pm_vector_cleanup, name="vector_cleanup")


def _flatten_effects(srcs: Iterable[UOp]) -> list[UOp]:
    out: list[UOp] = []
    for s in srcs:
        out.extend(_flatten_effects(s.src) if s.op is Ops.GROUP else [s])
    return out


def _drop_ranges(sink: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """Substitute ranges by values everywhere, removing them from REDUCE/END range lists when they become
    constants (a size-1 axis)."""
    from tinycore.codegen.lowerer import map_nodes

    def fn(u: UOp, src: tuple[UOp, ...]) -> UOp | None:
        if u in mapping:
            return mapping[u]
        if u.op is Ops.REDUCE or u.op is Ops.END:
            # an END's expanded ranges are gone (its stores cover their lanes); a REDUCE folds them later
            keep = tuple(s for s in src[1:] if s.op is not Ops.CONST and (u.op is Ops.REDUCE or s.op is not Ops.UNROLL))
            if len(keep) != len(src) - 1:
                return u.replace(src=(src[0], *keep)) if keep else src[0]  # no loop left: the effect itself
        return None

    return map_nodes(sink, fn)


# ---------------------------------------------------------------------------------------------------------------
# the scalar strategy


def _unroll_reduce(red: UOp) -> UOp | None:
    unrolled = [r for r in red.src[1:] if r.op is Ops.RANGE and r.arg[1] is AxisType.UNROLL]
    if not unrolled:
        return None
    rest = [r for r in red.src[1:] if r not in unrolled]
    vals = [
        red.src[0].substitute({r: UOp.const(r.dtype, k) for r, k in zip(unrolled, combo)})
        for combo in itertools.product(*(range(_size(r)) for r in unrolled))
    ]
    acc = vals[0]
    for v in vals[1:]:
        acc = acc.alu(red.arg, v)
    return UOp(Ops.REDUCE, red.dtype, (acc, *rest), red.arg) if rest else acc


def _unroll_wide_reduce(red: UOp) -> UOp | None:
    """A reduce whose value already has a vector register of upcast lanes: its UNROLL axes are unrolled as
    copies of the (vector) value, folded one by one, instead of multiplying the vector width."""
    if not any(r.op is Ops.RANGE and r.arg[1] is AxisType.UNROLL for r in red.src[1:]):
        return None
    value = red.src[0]
    lanes = prod(_size(r) for r in value.toposort() if r.op is Ops.RANGE and r.arg[1] is AxisType.UPCAST)
    lanes *= prod(n for u in value.toposort() if u.op is Ops.UNROLL for _, n in u.arg)
    if lanes * red.dtype.count * red.dtype.scalar().itemsize < LATE_FOLD_BYTES:
        return None
    return _unroll_reduce(red)


pm_unroll_wide = PatternMatcher([(UPat(Ops.REDUCE, name="red"), _unroll_wide_reduce)], name="expand_unroll_wide")

pm_unroll_scalar = PatternMatcher([(UPat(Ops.REDUCE, name="red"), _unroll_reduce)], name="expand_unroll")


def expand_scalar(sink: UOp) -> UOp:
    """Expand ``UNROLL`` reduce ranges by folding scalar copies of the reduced value, and ``UPCAST`` output ranges
    by repeating each store that depends on them (one copy per lane, in lane order)."""
    if any(u.op in _VECTOR_OPS for u in sink.toposort()):
        raise ValueError("vector lanes (tensor cores) need a renderer with supports_float4")
    sink = graph_rewrite(sink, pm_unroll_scalar, name="expand_unroll")
    ups = [r for r in sink.toposort() if r.op is Ops.RANGE and r.arg[1] is AxisType.UPCAST]
    if not ups:
        return sink
    stores: list[UOp] = []
    for st in sink.src:
        mine = [r for r in ups if r in st.toposort()]
        for combo in itertools.product(*(range(_size(r)) for r in mine)):
            stores.append(st.substitute({r: UOp.const(r.dtype, k) for r, k in zip(mine, combo)}))
    return UOp.sink(*stores)
