"""Stash: a value a reduce loop computes and the output needs again is kept in a row-sized register array.

A one-kernel softmax (the scheduler keeps row reduces in the kernel that broadcasts them back, see
`tinycore.renderer.Renderer.row_reduce_bytes`) lowers to three loops per row::

    m = max over r1 of x[r1]
    s = sum over r2 of exp(x[r2] - m)
    out[i] = exp(x[i] - m) / s

``exp(x[i] - m)`` is the sum's body with ``r2`` renamed ``i``: computed twice per element, it costs as much as the
memory traffic fusion saves. `stash_reduce_values` writes the body into a ``DEFINE_REG`` array of one row inside the
sum's loop and has the output read it back::

    s = sum over r2 of (stash[r2] = exp(x[r2] - m))
    out[i] = stash[i] / s                      # stash read AFTER the END of the r2 loop

Only for renderers without launch ids (one thread runs a whole row; `Kernel` keeps ``THREAD`` splits off the ranges
that index a stash). The row must fit `max_bytes`; the body must be worth keeping (a transcendental or a division).

>>> from tinycore.dtype import dtypes
>>> from tinycore.uop.ops import AxisType
>>> out, inp = UOp.define_global(0, dtypes.float, 8), UOp.define_global(1, dtypes.float, 8)
>>> i, r = UOp.range(8, 0, AxisType.LOOP), UOp.range(8, 1, AxisType.REDUCE)
>>> def body(x): return inp.index(x).load().alu(Ops.EXP2)
>>> sink = UOp.sink(out.index(i).store(body(i) * UOp(Ops.REDUCE, dtypes.float, (body(r), r), Ops.ADD)))
>>> [u.op.name for u in stash_reduce_values(sink, 1024).toposort() if u.op in (Ops.DEFINE_REG, Ops.END)]
['DEFINE_REG', 'END']
"""

from __future__ import annotations

from tinycore.dtype import AddrSpace
from tinycore.uop.ops import AxisType, Ops, UOp

__all__ = ["is_stash_read", "stash_reduce_values"]

# ops that make a reduce body worth keeping rather than recomputing
_COSTLY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.FDIV, Ops.POW})


def _worth_keeping(body: UOp) -> bool:
    return any(u.op in _COSTLY for u in body.toposort())


def stash_reduce_values(sink: UOp, max_bytes: int) -> UOp:
    """`sink` (a lowered kernel, before opts) with every single-range reduce body that the output recomputes for
    the same row read from a register array instead (see the module docstring). Unchanged when nothing matches."""
    if len(sink.src) != 1 or sink.src[0].op is not Ops.STORE:
        return sink
    store = sink.src[0]
    value = store.src[1]
    nodes = set(value.toposort())
    out_rngs = sorted(
        {u for u in store.src[0].toposort() if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP}, key=lambda u: u.arg
    )
    next_reg = 1 + max((u.arg for u in sink.toposort() if u.op is Ops.DEFINE_REG), default=-1)
    replace: dict[UOp, UOp] = {}
    for red in [u for u in nodes if u.op is Ops.REDUCE and len(u.src) == 2]:
        body, rng = red.src
        size = rng.src[0]
        if size.op is not Ops.CONST or size.arg * body.dtype.itemsize > max_bytes or not _worth_keeping(body):
            continue
        body_nodes = set(body.toposort())
        for i in out_rngs:
            if i.src[0] is not size or i in body_nodes:  # a body that depends on i is one reduce per output
                continue
            twin = body.substitute({rng: i})
            if twin not in nodes or twin in replace:
                continue
            stash = UOp(Ops.DEFINE_REG, body.dtype.ptr(size.arg, AddrSpace.REG), (), next_reg)
            next_reg += 1
            done = stash.index(rng).store(body).end(rng)
            replace[twin] = stash.after(done).index(i).load()
            break
    return sink.substitute(replace) if replace else sink


def is_stash_read(u: UOp) -> bool:
    """True for a LOAD of a stash (a register array read after the END of the loop that filled it)."""
    if u.op is not Ops.LOAD or u.src[0].op is not Ops.INDEX:
        return False
    buf = u.src[0].src[0]
    return buf.op is Ops.AFTER and buf.src[0].op is Ops.DEFINE_REG and any(s.op is Ops.END for s in buf.src[1:])
