"""Lowering: a kernel AST (docs/pipeline.md §2) becomes a lowered kernel of RANGE loops, pointer INDEXes, LOADs,
STOREs and kernel-level REDUCEs (docs/pipeline.md §3); then REDUCEs become register accumulators.

The index push is one traceable rewrite pass (``"lower_index"``): the root stores are written as
``STORE(INDEX(buf, flat index), INDEX(value, *output ranges))`` and rules move the *lowering-form* ``INDEX(value,
*indices)`` (its ``arg`` carries the validity gate accumulated from PADs, or None) down through the AST:

- movement ops transform the indices (``RESHAPE`` flattens and unflattens per group of matching axes, ``PERMUTE``
  permutes, ``EXPAND`` indexes 0, ``SHRINK`` adds the start, ``FLIP`` gives ``size-1-i``, ``PAD`` subtracts the
  padding and becomes ``where(valid, value, 0)`` with ``valid`` ANDed into the gate of every load below it);
- ``REDUCE_AXIS`` creates new ``AxisType.REDUCE`` ranges and becomes ``REDUCE(value, *ranges, arg=op)``;
- ``LOAD(DEFINE_GLOBAL)`` becomes ``LOAD(INDEX(buf, idx[, gate])[, alt 0])``; elementwise ops distribute;
- ``IOTA`` (``[0, 1, ..., n-1]``) becomes its index cast to its dtype: no load, O(1) work per element.

Indices are then simplified with the `symbolic` rules (``(a*4+b)//4 -> a`` for ``0 <= b < 4``).

>>> from tinycore.dtype import dtypes
>>> buf0, buf1 = UOp.define_global(0, dtypes.float, 12), UOp.define_global(1, dtypes.float, 12)
>>> x = UOp(Ops.LOAD, dtypes.float, (buf1,)).reshape((3, 4)).permute((1, 0))
>>> ast = UOp.sink(buf0.reshape((4, 3)).store(x + x))
>>> lowered = lower_ast(ast)
>>> sorted(r.arg[0] for r in lowered.toposort() if r.op is Ops.RANGE)
[0, 1]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tinycore.dtype import AddrSpace, DType, PtrDType, dtypes
from tinycore.helpers import prod
from tinycore.uop.ops import AxisType, GroupOp, Ops, UOp, sint
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite

__all__ = [
    "LoweringError",
    "kernel_shape",
    "lower_ast",
    "lower_reduces",
    "range_key",
    "reduce_identity",
    "scopes",
    "simplify_sink",
]


class LoweringError(ValueError):
    """A kernel AST that the lowerer can't turn into loops (malformed, or using an op it does not support)."""


# ---------------------------------------------------------------------------------------------------------------
# small helpers


def _is_one(s: sint) -> bool:
    return isinstance(s, int) and s == 1


def _idx_const(v: int) -> UOp:
    return UOp.const(dtypes.index, v)


def _as_uop(s: sint) -> UOp:
    return s if isinstance(s, UOp) else _idx_const(s)


def _ssimp(s: sint) -> sint:
    if isinstance(s, UOp):
        s = s.simplify()
        return s.arg if s.op is Ops.CONST else s
    return s


def _same(a: sint, b: sint) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return _ssimp(a) is _ssimp(b) if isinstance(_ssimp(a), UOp) else _ssimp(a) == _ssimp(b)


def _and(a: UOp | None, b: UOp | None) -> UOp | None:
    if a is None:
        return b
    if b is None:
        return a
    return a & b


def range_key(r: UOp) -> tuple:
    """Sort key of a RANGE: its axis id (an int or a tuple of ints), used for loop nesting (lower ids outside)."""
    aid = r.arg[0]
    return (tuple(aid) if isinstance(aid, tuple) else (aid,), r.arg[1].value)


def reduce_identity(op: Ops, dtype: DType) -> Any:
    """The identity of a reduction: 0 for ADD, 1 for MUL, the dtype's minimum for MAX.

    >>> reduce_identity(Ops.MAX, dtypes.int8), reduce_identity(Ops.ADD, dtypes.float)
    (-128, 0)
    """
    if op is Ops.ADD:
        return 0
    if op is Ops.MUL:
        return 1
    if op is Ops.MAX:
        return dtypes.min(dtype.scalar())
    raise LoweringError(f"{op} is not a reduce op (ADD, MUL or MAX)")


def simplify_sink(sink: UOp, name: str = "simplify") -> UOp:
    """Run the `symbolic` rules over a whole kernel graph (a traceable pass named `name`)."""
    from tinycore.uop.symbolic import symbolic

    return graph_rewrite(sink, symbolic, name=name)


def scopes(root: UOp, cache: dict[UOp, frozenset[UOp]] | None = None) -> dict[UOp, frozenset[UOp]]:
    """For every node under `root`: the RANGEs it must run inside (the ranges it depends on, minus those closed
    by an END or reduced by a REDUCE on the way). `cache` may be shared between calls."""
    out = {} if cache is None else cache
    empty: frozenset[UOp] = frozenset()
    for u in root.toposort():
        if u in out:
            continue
        src = u.src
        s = out[src[0]] if src else empty
        for x in src[1:]:  # most sources share their scope (often the very same set): union only what's new
            t = out[x]
            if t is not s and not t <= s:
                s = s | t
        op = u.op
        if op is Ops.RANGE:
            s = s | {u}
        elif op is Ops.END or op is Ops.REDUCE:
            s = s - set(src[1:])
        out[u] = s
    return out


# ---------------------------------------------------------------------------------------------------------------
# shapes of kernel AST nodes


def kernel_shape(u: UOp, cache: dict[UOp, tuple[sint, ...] | None] | None = None) -> tuple[sint, ...] | None:
    """The shape of a kernel AST node: ``DEFINE_GLOBAL``/``LOAD`` are ``(size,)``, ``CONST``/``DEFINE_VAR`` are
    ``()``, movement ops and ``REDUCE_AXIS`` follow their args, elementwise ops take their widest source's shape.

    >>> b = UOp.define_global(0, dtypes.float, 6)
    >>> kernel_shape(UOp(Ops.LOAD, dtypes.float, (b,)).reshape((2, 3)).permute((1, 0)))
    (3, 2)
    """
    memo = {} if cache is None else cache
    if u in memo:  # asked again (the index pass asks for every node's shape): no walk
        return memo[u]
    for n in u.toposort():
        if n in memo:
            continue
        memo[n] = _node_shape(n, memo)
    return memo[u]


# membership tests use sets: Ops define __lt__, so `in` on a tuple of Ops calls a Python-level __eq__
_SCALAR_LEAVES = frozenset({Ops.CONST, Ops.VCONST, Ops.DEFINE_VAR, Ops.BIND})
_VALUE_LEAVES = frozenset({Ops.CONST, Ops.VCONST, Ops.DEFINE_VAR})


def _node_shape(n: UOp, memo: dict[UOp, Any]) -> tuple[sint, ...] | None:
    op = n.op
    if op is Ops.DEFINE_GLOBAL:
        size = n.dtype.size if isinstance(n.dtype, PtrDType) else -1
        return (size,)
    if op in _SCALAR_LEAVES:
        return ()
    if op is Ops.LOAD or op is Ops.STORE:
        return memo[n.src[-1]] if op is Ops.STORE else memo[n.src[0]]
    if op is Ops.RESHAPE or op is Ops.EXPAND:
        return tuple(_ssimp(s) for s in n.arg)
    if op is Ops.IOTA:
        return (_ssimp(n.arg),)
    src = memo.get(n.src[0]) if n.src else None
    if op in GroupOp.Movement or op is Ops.REDUCE_AXIS:
        if src is None:
            return None
        if op is Ops.PERMUTE:
            return tuple(src[i] for i in n.arg)
        if op is Ops.PAD:
            return tuple(
                _ssimp(s + b + a) if not all(isinstance(x, int) for x in (s, b, a)) else s + b + a
                for s, (b, a) in zip(src, n.arg)
            )
        if op is Ops.SHRINK:
            return tuple(_ssimp(e - b) if not (isinstance(e, int) and isinstance(b, int)) else e - b for b, e in n.arg)
        if op is Ops.FLIP:
            return src
        return tuple(1 if i in n.arg[1] else s for i, s in enumerate(src))
    if op in GroupOp.Elementwise or op is Ops.NOOP or op is Ops.AFTER:
        shapes = [memo.get(s) for s in (n.src if op in GroupOp.Elementwise else n.src[:1])]
        shapes = [s for s in shapes if s is not None]
        return max(shapes, key=len) if shapes else None
    return None


# ---------------------------------------------------------------------------------------------------------------
# index transforms through movement ops: result-shape indices -> source-shape indices (+ validity)


def _reshape_groups(out_shape: Sequence[sint], in_shape: Sequence[sint]) -> list[tuple[list[int], list[int]]]:
    """Pair up runs of axes of equal total size (size-1 axes left out), so each run is reshaped on its own."""
    oa = [i for i, s in enumerate(out_shape) if not _is_one(s)]
    ia = [i for i, s in enumerate(in_shape) if not _is_one(s)]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(oa) and j < len(ia):
        go, gi = [oa[i]], [ia[j]]
        po, pi = out_shape[oa[i]], in_shape[ia[j]]
        i, j = i + 1, j + 1
        while not _same(po, pi):
            if isinstance(po, int) and isinstance(pi, int) and po < pi and i < len(oa):
                go.append(oa[i])
                po, i = po * out_shape[oa[i]], i + 1
            elif isinstance(po, int) and isinstance(pi, int) and pi < po and j < len(ia):
                gi.append(ia[j])
                pi, j = pi * in_shape[ia[j]], j + 1
            else:  # symbolic sizes that don't line up (or no axes left): one group for everything
                return [(oa, ia)]
        groups.append((go, gi))
    if i < len(oa) or j < len(ia):
        if not groups:
            return [(oa, ia)]
        go, gi = groups[-1]
        groups[-1] = (go + oa[i:], gi + ia[j:])
    return groups


def _reshape_index(idx: Sequence[UOp], out_shape: Sequence[sint], in_shape: Sequence[sint]) -> list[UOp]:
    new: list[UOp] = [_idx_const(0)] * len(in_shape)
    for go, gi in _reshape_groups(out_shape, in_shape):
        if len(go) == 1 and len(gi) == 1:
            new[gi[0]] = idx[go[0]]
            continue
        linear: UOp = _idx_const(0)
        for a in go:
            linear = linear * _as_uop(out_shape[a]) + idx[a]
        stride: sint = 1
        for n, b in enumerate(reversed(gi)):
            part = linear if _is_one(stride) else linear // _as_uop(stride)
            new[b] = part if n == len(gi) - 1 else part % _as_uop(in_shape[b])
            stride = stride * in_shape[b]
    return new


def _pad_index(idx: Sequence[UOp], in_shape: Sequence[sint], arg: tuple) -> tuple[list[UOp], UOp | None]:
    new, valid = [], None
    for i, s, (b, a) in zip(idx, in_shape, arg):
        if isinstance(b, int) and b == 0:
            new.append(i)
        else:
            new.append(i - _as_uop(b))
            valid = _and(valid, _as_uop(b) - 1 < i) if not isinstance(b, int) else _and(valid, i > b - 1)
        if not (isinstance(a, int) and a == 0):
            valid = _and(
                valid, i < _as_uop(b) + _as_uop(s) if not all(isinstance(x, int) for x in (b, s)) else i < b + s
            )
    return new, valid


def _movement_index(
    x: UOp, idx: Sequence[UOp], in_shape: Sequence[sint], out_shape: Sequence[sint]
) -> tuple[list[UOp], UOp | None]:
    """Indices into `x.src[0]` for indices `idx` into movement op `x`, and the validity (PAD only, else None)."""
    op = x.op
    if op is Ops.RESHAPE:
        return _reshape_index(idx, out_shape, in_shape), None
    if op is Ops.EXPAND:
        return [
            i if not (_is_one(si) and not _is_one(so)) else _idx_const(0) for i, si, so in zip(idx, in_shape, out_shape)
        ], None
    if op is Ops.PERMUTE:
        new: list[UOp] = [_idx_const(0)] * len(in_shape)
        for j, src_axis in enumerate(x.arg):
            new[src_axis] = idx[j]
        return new, None
    if op is Ops.SHRINK:
        return [i if isinstance(b, int) and b == 0 else i + _as_uop(b) for i, (b, _) in zip(idx, x.arg)], None
    if op is Ops.FLIP:
        return [(_as_uop(s) - 1 - i if f else i) for i, s, f in zip(idx, in_shape, x.arg)], None
    if op is Ops.PAD:
        return _pad_index(idx, in_shape, x.arg)
    raise LoweringError(f"{op} is not a movement op")


# ---------------------------------------------------------------------------------------------------------------
# the index-push pass


@dataclass
class _LowerCtx:
    shapes: dict[UOp, Any] = field(default_factory=dict)
    next_axis: int = 0
    reduces: dict[tuple[Any, ...], UOp] = field(default_factory=dict)  # lowered REDUCE_AXIS by (node, outer idx, gate)

    def shape(self, u: UOp) -> tuple[sint, ...]:
        """The kernel shape of `u` (raises `LoweringError` when it has none)."""
        s = kernel_shape(u, self.shapes)
        if s is None:
            raise LoweringError(f"can't infer the shape of {u.op} in the kernel AST")
        return s

    def new_range(self, size: sint, axis_type: AxisType) -> UOp:
        """A RANGE with the next axis id."""
        r = UOp.range(size, self.next_axis, axis_type)
        self.next_axis += 1
        return r


def _lidx(value: UOp, idx: Sequence[UOp], gate: UOp | None) -> UOp:
    """The lowering-form INDEX of a value (arg = the accumulated validity gate)."""
    if value.op in _VALUE_LEAVES and not value.src:
        return value
    if value.op is Ops.BIND:
        return value.src[0]
    return UOp(Ops.INDEX, value.dtype, (value, *idx), gate)


def _lower_reduce_axis(ctx: _LowerCtx, v: UOp, idx: list[UOp], gate: UOp | None) -> UOp:
    """``REDUCE_AXIS`` at index `idx`: new REDUCE ranges for its reduced axes (a zero-size one gives the identity)."""
    red_op, axes = v.arg
    in_shape = ctx.shape(v.src[0])
    new_idx, rngs = list(idx), []
    for a in axes:
        size = in_shape[a]
        if isinstance(size, int) and size == 0:
            return UOp.const(v.dtype, reduce_identity(red_op, v.dtype))
        if _is_one(size):
            new_idx[a] = _idx_const(0)
        else:
            r = ctx.new_range(size, AxisType.REDUCE)
            new_idx[a] = r
            rngs.append(r)
    inner = _lidx(v.src[0], new_idx, gate)
    return UOp(Ops.REDUCE, v.dtype, (inner, *rngs), red_op) if rngs else inner


def _push_index(ctx: _LowerCtx, x: UOp) -> UOp | None:
    v, idx, gate = x.src[0], list(x.src[1:]), x.arg
    op = v.op
    if isinstance(v.dtype, PtrDType):
        return None  # a pointer INDEX: already lowered
    if op is Ops.RESHAPE and v.src[0].op is Ops.RESHAPE:  # a reshape of a reshape is one reshape
        src = v.src[0]
        while src.op is Ops.RESHAPE:
            src = src.src[0]
        return _lidx(src, _reshape_index(idx, ctx.shape(v), ctx.shape(src)), gate)
    if op in GroupOp.Movement:
        in_shape, out_shape = ctx.shape(v.src[0]), ctx.shape(v)
        new_idx, valid = _movement_index(v, idx, in_shape, out_shape)
        if valid is None:
            return _lidx(v.src[0], new_idx, gate)
        valid = valid.simplify()
        if valid.op is Ops.CONST:
            return _lidx(v.src[0], new_idx, gate) if valid.arg else UOp.const(v.dtype, 0)
        inner = _lidx(v.src[0], new_idx, _and(gate, valid))
        return valid.where(inner, UOp.const(v.dtype, 0))
    if op is Ops.REDUCE_AXIS:
        red_op, axes = v.arg
        # the same reduce reached again with the same outer indices (a row max used inside a row sum's loop and by
        # the output) is the same value: one loop, not one per use
        key = (v, tuple(i for a, i in enumerate(idx) if a not in axes), gate)
        if (known := ctx.reduces.get(key)) is not None:
            return known
        ctx.reduces[key] = result = _lower_reduce_axis(ctx, v, idx, gate)
        return result
    if op is Ops.LOAD:
        buf = v.src[0]
        if buf.op is not Ops.DEFINE_GLOBAL:
            raise LoweringError(f"LOAD of {buf.op}: kernel inputs must be LOAD(DEFINE_GLOBAL)")
        ptr = UOp(Ops.INDEX, buf.dtype, (buf, idx[0]) if gate is None else (buf, idx[0], gate))
        return UOp(Ops.LOAD, v.dtype, (ptr,) if gate is None else (ptr, UOp.const(v.dtype, 0)))
    if op is Ops.CONST or op is Ops.VCONST:
        return v.replace(src=()) if v.src else v
    if op is Ops.DEFINE_VAR:
        return v
    if op is Ops.BIND:
        return v.src[0]
    if op is Ops.IOTA:  # each element is its own position: the flat index itself
        return idx[0] if v.dtype == dtypes.index else idx[0].cast(v.dtype)
    if op in GroupOp.Elementwise:
        shape = ctx.shape(v)
        srcs = []
        for s in v.src:
            s_shape = ctx.shape(s)
            if len(s_shape) == len(shape):
                srcs.append(_lidx(s, idx, gate))
            elif len(s_shape) == 0:
                srcs.append(_lidx(s, [], gate))
            else:
                raise LoweringError(f"{op} source of shape {s_shape} doesn't match {shape}: broadcast it explicitly")
        return UOp(op, v.dtype, tuple(srcs), v.arg)
    if op is Ops.NOOP or op is Ops.AFTER:
        return _lidx(v.src[0], idx, gate)
    raise LoweringError(f"{op} can't appear inside a kernel AST (see docs/pipeline.md §2)")


pm_lower_index = PatternMatcher([(UPat(Ops.INDEX, name="x"), _push_index)], name="lower_index")


def _target_index(ctx: _LowerCtx, target: UOp, idx: list[UOp]) -> UOp:
    """The pointer INDEX a STORE writes, pushing the output indices through the target's movement ops."""
    gate: UOp | None = None
    node = target
    while node.op in GroupOp.Movement:
        new_idx, valid = _movement_index(node, idx, ctx.shape(node.src[0]), ctx.shape(node))
        idx, gate, node = new_idx, _and(gate, valid), node.src[0]
    if node.op is not Ops.DEFINE_GLOBAL:
        raise LoweringError(f"STORE target must be DEFINE_GLOBAL under movement ops, got {node.op}")
    if len(idx) != 1:
        raise LoweringError(f"STORE target of shape {ctx.shape(target)} doesn't reach a flat buffer")
    return UOp(Ops.INDEX, node.dtype, (node, idx[0]) if gate is None else (node, idx[0], gate))


def lower_ast(ast: UOp) -> UOp:
    """Lower a kernel AST: output ranges (`AxisType.LOOP`, shared by every STORE), index expressions pushed down to
    each LOAD, `REDUCE_AXIS` as `REDUCE` over new `AxisType.REDUCE` ranges; indices simplified.

    Size-1 output axes get no range (index 0); a kernel with a zero-size output lowers to an empty SINK.
    """
    if ast.op is not Ops.SINK:
        raise LoweringError(f"a kernel AST is a SINK of STOREs, got {ast.op}")
    ctx = _LowerCtx()
    stores = [s for s in ast.src if s.op is Ops.STORE]
    if len(stores) != len(ast.src):
        raise LoweringError(f"a kernel AST SINK holds only STOREs, got {[s.op for s in ast.src]}")
    if not stores:
        return UOp.sink()
    shape = ctx.shape(stores[0].src[1])
    for st in stores[1:]:
        if len(ctx.shape(st.src[1])) != len(shape) or not all(_same(a, b) for a, b in zip(ctx.shape(st.src[1]), shape)):
            raise LoweringError(f"the STOREs of one kernel must share a shape: {ctx.shape(st.src[1])} vs {shape}")
    if any(isinstance(s, int) and s == 0 for s in shape):
        return UOp.sink()
    rngs = [_idx_const(0) if _is_one(s) else ctx.new_range(s, AxisType.LOOP) for s in shape]
    new_stores = []
    for st in stores:
        target, value = st.src
        t_shape = ctx.shape(target)
        if target.op is Ops.DEFINE_GLOBAL and len(shape) != 1:
            if not _same(prod(shape), t_shape[0]) and t_shape[0] != -1:
                raise LoweringError(f"can't store a value of shape {shape} into a buffer of {t_shape[0]} elements")
            target = target.reshape(shape)
        ptr = _target_index(ctx, target, list(rngs))
        new_stores.append(UOp(Ops.STORE, dtypes.void, (ptr, _lidx(value, rngs, None))))
    sink = graph_rewrite(UOp.sink(*new_stores), pm_lower_index, ctx=ctx, bottom_up=True, name="lower_index")
    return simplify_sink(_drop_redundant_where(sink), name="simplify_indexing")


def _fold_gated_load(g: UOp, ld: UOp, z: UOp) -> UOp | None:
    """``where(valid, LOAD(INDEX(b, i, valid), 0), 0)`` is the gated load itself."""
    ptr = ld.src[0]
    if len(ld.src) == 2 and len(ptr.src) == 3 and ptr.src[2] is g and ld.src[1] is z:
        return ld
    return None


pm_fold_gated_loads = PatternMatcher(
    [(UPat(Ops.WHERE, src=(UPat.var("g"), UPat(Ops.LOAD, name="ld"), UPat.cvar("z", arg=0))), _fold_gated_load)],
    name="fold_gated_loads",
)


def _drop_redundant_where(sink: UOp) -> UOp:
    return graph_rewrite(sink, pm_fold_gated_loads, name="fold_gated_loads")


# ---------------------------------------------------------------------------------------------------------------
# REDUCE -> DEFINE_REG accumulator


@dataclass
class _RegCtx:
    next_reg: int = 0
    scope_cache: dict[UOp, frozenset[UOp]] = field(default_factory=dict)


def _reduce_to_register(ctx: _RegCtx, red: UOp) -> UOp:
    value, rngs, op = red.src[0], red.src[1:], red.arg
    if not rngs:
        return value
    outer = sorted(scopes(value, ctx.scope_cache)[value] - set(rngs), key=range_key)
    acc = UOp(Ops.DEFINE_REG, red.dtype.ptr(1, AddrSpace.REG), (), ctx.next_reg)
    ctx.next_reg += 1
    zero = _idx_const(0)
    init = acc.after(*outer).index(zero).store(UOp.const(red.dtype, reduce_identity(op, red.dtype)))
    ptr = acc.after(init, *rngs).index(zero)
    update = ptr.store(ptr.load().alu(op, value))
    return acc.after(update.end(*rngs)).index(zero).load()


pm_lower_reduce = PatternMatcher([(UPat(Ops.REDUCE, name="red"), _reduce_to_register)], name="lower_reduce")


def lower_reduces(sink: UOp, first_reg: int = 0) -> UOp:
    """Every kernel-level ``REDUCE(value, *ranges, arg=op)`` becomes a register accumulator::

        acc = DEFINE_REG(dtype.ptr(1, REG))
        STORE(acc[0], identity)                  # inside the ranges the value depends on, before the loop
        RANGE r: STORE(acc[0], LOAD(acc[0]) op value)
        END r
        LOAD(acc[0])                             # the result, after the loop

    Ordering is explicit through ``AFTER`` edges, which the linearizer follows and keeps.
    """
    return graph_rewrite(sink, pm_lower_reduce, ctx=_RegCtx(next_reg=first_reg), name="lower_reduce")


def substitute_ranges(
    sink: UOp, replace: dict[UOp, tuple[UOp, tuple[UOp, ...]]], splits: dict[UOp, tuple[UOp, int]] | None = None
) -> UOp:
    """Replace RANGEs by expressions: `replace[r] = (expr, new ranges)`. Uses of `r` become `expr`; where `r` is
    listed as a reduced range (a REDUCE or END source) it is replaced by `new ranges` instead.

    `splits[r] = (high, low_size)` says that `expr` is ``high * low_size + low`` with ``0 <= low < low_size``: then
    ``r // c`` for a constant multiple ``c`` of `low_size` becomes ``high // (c // low_size)`` (``high`` when equal),
    exactly and without a division of the lanes a later upcast makes of ``low`` (``OVERLAP``'s block starts).

    This is how optimizations split an axis without lowering again (see `tinycore.codegen.kernel`).
    """
    done: dict[UOp, UOp] = {}
    for u in sink.toposort():
        if u in replace:
            done[u] = replace[u][0]
            continue
        if not u.src:
            done[u] = u
            continue
        if splits and u.op is Ops.IDIV and u.src[0] in splits and u.src[1].op is Ops.CONST:
            high, low_size = splits[u.src[0]]
            if u.src[1].arg % low_size == 0:
                done[u] = high if u.src[1].arg == low_size else high // (u.src[1].arg // low_size)
                continue
        if u.op is Ops.REDUCE or u.op is Ops.END:
            rest: list[UOp] = []
            for r in u.src[1:]:
                rest.extend(replace[r][1] if r in replace else (done[r],))
            new_src = (done[u.src[0]], *rest)
        else:
            new_src = tuple([done[s] for s in u.src])
        done[u] = u if new_src == u.src else u.replace(src=new_src)  # tuples of UOps compare by identity
    return done[sink]


def map_nodes(sink: UOp, fn: Callable[[UOp, tuple[UOp, ...]], UOp | None]) -> UOp:
    """Rebuild a graph sources-first; `fn(node, new sources)` may return a replacement (None keeps the node)."""
    done: dict[UOp, UOp] = {}
    for u in sink.toposort():
        new_src = tuple([done[s] for s in u.src])
        r = fn(u, new_src)
        if r is None:
            r = u if new_src == u.src else u.replace(src=new_src)  # tuples of UOps compare by identity
        done[u] = r
    return done[sink]
