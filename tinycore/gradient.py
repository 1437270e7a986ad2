"""Reverse-mode differentiation of tensor-level UOp graphs.

The derivative of every differentiable op is written once, as a rule of the `pm_gradient` PatternMatcher: a rule
matches the forward node (named ``ret``), receives the gradient of that node as ``ctx`` and returns a tuple with one
gradient (or None: no gradient) per source of the node. `compute_gradient` walks a graph once, in reverse
topological order, applies the rules, and sums the contributions of nodes used more than once.

Conventions (PyTorch is the oracle):

- `MAX` (``torch.maximum``): the larger operand gets the gradient; equal operands split it 0.5 / 0.5.
- `REDUCE_AXIS` MAX (``torch.amax``): the gradient goes to the maximal elements, split evenly among ties.
- `REDUCE_AXIS` MUL (``torch.prod``): ``grad *`` the product of the other elements (``prod / x`` without zeros; with
  zeros, PyTorch's values: the product of the non-zero elements at a lone zero, else 0).
- comparisons, `BITCAST`, integer and bool nodes have no gradient; `DETACH` stops it.
- `TRUNC` (and so floor, ceil, round and sign, which are built on it) has a zero gradient, as in PyTorch.
- `EXPAND` sums the gradient over the expanded axes; `PAD` and `SHRINK` are each other's inverse; `PERMUTE` applies
  the inverse permutation; `FLIP` flips again; `COPY` copies the gradient back to the source's device.
- `CONTIGUOUS_BACKWARD` makes the gradient contiguous (realized in its own buffer).
- `ASSIGN` passes the gradient to the assigned value (that is what the result holds), none to the old contents.

>>> from tinycore.dtype import dtypes
>>> from tinycore.engine.schedule import new_buffer_uop
>>> x = new_buffer_uop("PYTHON", 3, dtypes.float)
>>> y = x * x
>>> g = compute_gradient(y, full_like(y, 1.0), [x])
>>> g[x].shape
(3,)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.patterns import PatternMatcher, UPat

__all__ = ["compute_gradient", "full_like", "pm_gradient"]


def full_like(like: UOp, value: Any) -> UOp:
    """A tensor-level constant with the dtype, device and shape of `like` (a broadcast scalar, no buffer)."""
    c = UOp.const(like.dtype, value, like.device)
    shape = like.shape or ()
    if shape:
        c = c.reshape((1,) * len(shape))
        if any(not (isinstance(d, int) and d == 1) for d in shape):
            c = c.expand(tuple(shape))
    return c


def _reduce_grad(ctx: UOp, ret: UOp) -> tuple[UOp | None]:
    x = ret.src[0]
    op, _axes = ret.arg
    up = ctx.expand(x.shape) if ctx.shape != x.shape else ctx
    if op is Ops.ADD:
        return (up,)
    if op is Ops.MAX:
        big = ret.expand(x.shape) if ret.shape != x.shape else ret
        mask = x.eq(big).cast(x.dtype)
        count = mask.r(Ops.ADD, ret.arg[1])
        count = count.expand(x.shape) if count.shape != x.shape else count
        return (up.alu(Ops.MUL, mask).alu(Ops.FDIV, count),)
    if op is Ops.MUL:
        return (up.alu(Ops.MUL, _prod_of_others(ret, x)),)
    return (None,)


def _prod_of_others(ret: UOp, x: UOp) -> UOp:
    """``d prod(x) / d x_i``: the product of the other elements of x_i's group, as PyTorch computes it. With no zero
    in the group it is ``prod / x_i``; with exactly one zero, the product of the non-zero elements at the zero and 0
    elsewhere; with two or more zeros, 0 everywhere."""
    axes = ret.arg[1]

    def back(u: UOp) -> UOp:
        return u.expand(x.shape) if u.shape != x.shape else u

    zero = x.eq(full_like(x, 0))
    zeros = back(zero.cast(x.dtype).r(Ops.ADD, axes))
    nonzero_prod = back(zero.where(full_like(x, 1), x).r(Ops.MUL, axes))
    no_zero = back(ret).alu(Ops.FDIV, x)
    one_zero = zero.where(nonzero_prod, full_like(x, 0).alu(Ops.MUL, nonzero_prod))  # 0 * inf is NaN, as in PyTorch
    return zeros.eq(full_like(zeros, 0)).where(
        no_zero, zeros.eq(full_like(zeros, 1)).where(one_zero, full_like(x, 0))
    )


def _max_grad(ctx: UOp, ret: UOp) -> tuple[UOp, UOp]:
    a, b = ret.src
    half = ctx.alu(Ops.MUL, full_like(ctx, 0.5))
    zero = full_like(ctx, 0.0)
    tie = a.eq(b)
    return (
        tie.where(half, b.alu(Ops.CMPLT, a).where(ctx, zero)),
        tie.where(half, a.alu(Ops.CMPLT, b).where(ctx, zero)),
    )


def _pow_grad(ctx: UOp, ret: UOp) -> tuple[UOp, UOp]:
    a, b = ret.src
    one, zero = full_like(a, 1.0), full_like(a, 0.0)
    # d/da a**b = b * a**(b-1); d/db a**b = a**b * ln(a), taken as 0 where a == 0 (as PyTorch does)
    da = ctx.alu(Ops.MUL, b.alu(Ops.MUL, a.alu(Ops.POW, b.alu(Ops.SUB, one))))
    log_a = a.alu(Ops.LOG2).alu(Ops.MUL, full_like(a, math.log(2)))
    db = a.eq(zero).where(zero, ctx.alu(Ops.MUL, ret.alu(Ops.MUL, log_a)))
    return (da, db)


def _permute_grad(ctx: UOp, ret: UOp) -> tuple[UOp]:
    inverse = tuple(sorted(range(len(ret.arg)), key=lambda i: ret.arg[i]))
    return (ctx.permute(inverse),)


def _expand_grad(ctx: UOp, ret: UOp) -> tuple[UOp]:
    src_shape = ret.src[0].shape
    axes = tuple(i for i, (s, n) in enumerate(zip(src_shape, ret.arg)) if s != n)
    return (ctx.r(Ops.ADD, axes) if axes else ctx,)


def _multi_grad(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
    from tinycore.engine.multi import multi_source_grads  # multi-device roots only (see tinycore.engine.multi)

    return multi_source_grads(ctx, ret)


def _cos(x: UOp) -> UOp:
    """cos(x) as ``1 - 2 sin(x/2)^2``: exact argument halving, so it stays accurate where ``sin(pi/2 - x)`` loses
    ``pi/2`` to rounding (|x| of 1e4: 1e-4 off; 1e38: any value)."""
    s = x.alu(Ops.MUL, full_like(x, 0.5)).alu(Ops.SIN)
    return full_like(x, 1.0).alu(Ops.SUB, s.alu(Ops.MUL, s).alu(Ops.MUL, full_like(x, 2.0)))


def _ln2(x: UOp) -> UOp:
    return full_like(x, math.log(2))


pm_gradient = PatternMatcher(
    [
        # elementwise
        (UPat(Ops.CAST, name="ret"), lambda ctx, ret: (ctx.cast(ret.src[0].dtype),)),
        (UPat(Ops.NEG, name="ret"), lambda ctx, ret: (ctx.alu(Ops.NEG),)),
        (UPat(Ops.ADD, name="ret"), lambda ctx, ret: (ctx, ctx)),
        (UPat(Ops.SUB, name="ret"), lambda ctx, ret: (ctx, ctx.alu(Ops.NEG))),
        (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (ctx.alu(Ops.MUL, ret.src[1]), ctx.alu(Ops.MUL, ret.src[0]))),
        (
            UPat(Ops.FDIV, name="ret"),
            lambda ctx, ret: (
                ctx.alu(Ops.FDIV, ret.src[1]),
                ctx.alu(Ops.MUL, ret).alu(Ops.FDIV, ret.src[1]).alu(Ops.NEG),
            ),
        ),
        (UPat(Ops.MAX, name="ret"), _max_grad),
        (UPat(Ops.POW, name="ret"), _pow_grad),
        (
            UPat(Ops.MULACC, name="ret"),
            lambda ctx, ret: (ctx.alu(Ops.MUL, ret.src[1]), ctx.alu(Ops.MUL, ret.src[0]), ctx),
        ),
        (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (ctx.alu(Ops.MUL, ret).alu(Ops.MUL, _ln2(ret)),)),
        (
            UPat(Ops.LOG2, name="ret"),
            lambda ctx, ret: (ctx.alu(Ops.FDIV, ret.src[0].alu(Ops.MUL, _ln2(ret))),),
        ),
        (UPat(Ops.SIN, name="ret"), lambda ctx, ret: (ctx.alu(Ops.MUL, _cos(ret.src[0])),)),
        (
            UPat(Ops.SQRT, name="ret"),
            lambda ctx, ret: (ctx.alu(Ops.FDIV, ret.alu(Ops.MUL, full_like(ret, 2.0))),),
        ),
        (
            UPat(Ops.RECIP, name="ret"),
            lambda ctx, ret: (ctx.alu(Ops.MUL, ret).alu(Ops.MUL, ret).alu(Ops.NEG),),
        ),
        (
            UPat(Ops.WHERE, name="ret"),
            lambda ctx, ret: (
                None,
                ret.src[0].where(ctx, full_like(ctx, 0.0)),
                ret.src[0].where(full_like(ctx, 0.0), ctx),
            ),
        ),
        (UPat((Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ), name="ret"), lambda ctx, ret: (None, None)),
        # rounding is flat almost everywhere: a zero gradient (as PyTorch gives for trunc/floor/ceil/round/sign),
        # not None, so that inputs reached only through rounding still get a (zero) `.grad`
        (UPat(Ops.TRUNC, name="ret"), lambda ctx, ret: (full_like(ret.src[0], 0.0),)),
        (UPat(Ops.BITCAST, name="ret"), lambda ctx, ret: (None,)),
        # movement
        (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (ctx.reshape(ret.src[0].shape),)),
        (UPat(Ops.EXPAND, name="ret"), _expand_grad),
        (UPat(Ops.PERMUTE, name="ret"), _permute_grad),
        (
            UPat(Ops.PAD, name="ret"),
            lambda ctx, ret: (ctx.shrink(tuple((b, b + s) for (b, _), s in zip(ret.arg, ret.src[0].shape))),),
        ),
        (
            UPat(Ops.SHRINK, name="ret"),
            lambda ctx, ret: (ctx.pad(tuple((b, s - e) for (b, e), s in zip(ret.arg, ret.src[0].shape))),),
        ),
        (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (ctx.flip(ret.arg),)),
        # reductions
        (UPat(Ops.REDUCE_AXIS, name="ret"), _reduce_grad),
        # structure
        (UPat(Ops.CONTIGUOUS, name="ret"), lambda ctx, ret: (ctx,)),
        (UPat(Ops.CONTIGUOUS_BACKWARD, name="ret"), lambda ctx, ret: (ctx.contiguous(),)),
        (UPat(Ops.DETACH, name="ret"), lambda ctx, ret: (None,)),
        (UPat(Ops.NOOP, name="ret"), lambda ctx, ret: (ctx,) * len(ret.src)),
        (UPat(Ops.COPY, name="ret"), lambda ctx, ret: (ctx.copy_to_device(ret.src[0].device), None)),
        (UPat(Ops.AFTER, name="ret"), lambda ctx, ret: (ctx,) + (None,) * (len(ret.src) - 1)),
        # the result of an assign is the assigned value; the overwritten target gets nothing
        (UPat(Ops.ASSIGN, name="ret"), lambda ctx, ret: (None, ctx)),
        (UPat(Ops.MULTI, name="ret"), _multi_grad),
    ],
    name="gradient",
)


def _differentiable(u: UOp) -> bool:
    return dtypes.is_float(u.dtype)


def compute_gradient(root: UOp, root_grad: UOp, targets: Iterable[UOp]) -> dict[UOp, UOp]:
    """Gradients of `root` (seeded with `root_grad`, same shape and dtype) with respect to `targets`.

    Returns ``{target: gradient}`` for every target that `root` depends on through differentiable ops (targets not
    reached are absent). One walk in reverse topological order; a node used several times gets the sum of its
    gradients. Only the part of the graph between `root` and the targets is differentiated.
    """
    targets = list(targets)
    if any(t.op is Ops.MULTI for t in targets):  # sharded tensors: differentiate through their shards
        from tinycore.engine.multi import gradient_of_shards

        return gradient_of_shards(root, root_grad, targets, compute_gradient)
    target_set = set(targets)
    topo = list(root.toposort())
    # nodes with a target below them (through differentiable edges): only they need gradients
    on_path: dict[UOp, bool] = {}
    for node in topo:
        reach = node in target_set
        if not reach and node.op is not Ops.DETACH and _differentiable(node):
            reach = any(on_path.get(s, False) for s in node.src)
        on_path[node] = reach
    if not on_path.get(root, False):
        return {}
    grads: dict[UOp, UOp] = {root: root_grad}
    for node in reversed(topo):
        grad = grads.get(node)
        if grad is None or not node.src:
            continue
        if node in target_set and not any(on_path.get(s, False) for s in node.src):
            continue
        new = pm_gradient.rewrite(node, ctx=grad)
        if new is None:
            if any(on_path.get(s, False) for s in node.src):
                raise NotImplementedError(f"no derivative rule for {node.op} (needed on the path to a target)")
            continue
        if len(new) != len(node.src):
            raise RuntimeError(f"the derivative rule of {node.op} returned {len(new)} gradients for {len(node.src)}")
        for src, g in zip(node.src, new):
            if g is None or not on_path.get(src, False):
                continue
            if g.dtype != src.dtype:
                g = g.cast(src.dtype)
            prev = grads.get(src)
            grads[src] = g if prev is None else prev.alu(Ops.ADD, g)
    return {t: grads[t] for t in target_set if t in grads}
