"""Select fold: a one-hot selection summed over its range becomes one indexed load.

Advanced indexing, `gather` and embeddings pick values with a one-hot mask (``tinycore/frontend/movement.py``): in a
lowered kernel that is ::

    out = sum over r in [0, n) of (e == r ? t(r) : 0)

where ``e`` (the index, read from a buffer) does not depend on ``r``. It costs ``n`` loads and compares per output;
``m[idx]`` with a 2048-row ``m`` spent 4.6 s where a gather copies 32 MB. At most one ``r`` equals ``e``, so the sum
is that element, or 0 when ``e`` is outside ``[0, n)``::

    out = (0 <= e < n) ? t(clamp(e, 0, n - 1)) : 0

A one-hot matrix product (`tinycore.nn.Embedding`: ``cast(e == r) * t(r)`` summed) folds the same way; there the
fold also drops the ``0 * inf`` NaNs the product made of non-finite rows it did not pick (torch's lookup has none).
Casts of ``r`` are looked through when their integer dtype holds every value of ``r`` (so the one-hot stays one-hot).

The clamp keeps every load inside the buffer (the value read for an out-of-range index is discarded), so the result
is the sum's for every index, in range or not. The one difference: a picked ``-0.0`` stays ``-0.0`` (the sum added
it to ``+0.0``), as torch's gather keeps it.

>>> from tinycore.dtype import dtypes
>>> from tinycore.uop.ops import AxisType
>>> out, src, ind = (UOp.define_global(i, d, 8) for i, d in ((0, dtypes.float), (1, dtypes.float), (2, dtypes.int)))
>>> i, r = UOp.range(8, 0, AxisType.LOOP), UOp.range(8, 1, AxisType.REDUCE)
>>> e = ind.index(i).load()
>>> picked = e.eq(r.cast(dtypes.int)).where(src.index(r).load(), 0.0)
>>> sink = UOp.sink(out.index(i).store(UOp(Ops.REDUCE, dtypes.float, (picked, r), Ops.ADD)))
>>> [u.op.name for u in fold_one_hot_selects(sink).toposort() if u.op in (Ops.REDUCE, Ops.RANGE)]
['RANGE']
"""

from __future__ import annotations

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops, UOp

__all__ = ["fold_one_hot_selects"]


def _range_side(cmp: UOp, rng: UOp) -> UOp | None:
    """The other side of ``CMPEQ(e, r)`` (either order; ``r`` possibly cast through integer dtypes that hold all of
    its values, so each value stays distinct), else None."""
    size = rng.src[0].arg if rng.src[0].op is Ops.CONST else None
    for mine, other in ((cmp.src[1], cmp.src[0]), (cmp.src[0], cmp.src[1])):
        bare = mine
        while bare.op is Ops.CAST and dtypes.is_int(bare.dtype) and size is not None and dtypes.max(bare.dtype) >= size:
            bare = bare.src[0]
        if bare is rng and rng not in other.toposort():
            return other
    return None


def _is_zero(u: UOp) -> bool:
    return u.op is Ops.CONST and u.arg == 0


def _selection(value: UOp) -> tuple[UOp, UOp] | None:
    """(the ``CMPEQ``, the picked value) of a one-hot selection: ``where(e == r, t, 0)``, or the product form
    ``cast(e == r) * t`` (either order) that a one-hot matrix product lowers to; else None."""
    if value.op is Ops.WHERE and value.src[0].op is Ops.CMPEQ and _is_zero(value.src[2]):
        return value.src[0], value.src[1]
    if value.op is Ops.MUL:
        for hot, picked in ((value.src[0], value.src[1]), (value.src[1], value.src[0])):
            if hot.op is Ops.CAST and hot.src[0].op is Ops.CMPEQ:
                return hot.src[0], picked
    return None


def _folded(red: UOp) -> UOp | None:
    """`red` (a REDUCE) as one indexed load when it sums a one-hot selection over a single range, else None."""
    if red.arg is not Ops.ADD or len(red.src) != 2:
        return None
    value, rng = red.src
    selection = _selection(value)
    if selection is None:
        return None
    cmp, picked = selection
    index = _range_side(cmp, rng)
    size = rng.src[0]
    if index is None or not dtypes.is_int(index.dtype) or size.op is not Ops.CONST:
        return None
    valid = (index < 0).logical_not() & (index < size.arg)
    clamped = index.maximum(0).minimum(size.arg - 1).cast(dtypes.index)
    got = picked.substitute({rng: clamped})
    got = got.cast(red.dtype) if got.dtype != red.dtype else got
    return valid.where(got, got.const_like(0))


def fold_one_hot_selects(sink: UOp) -> UOp:
    """`sink` (a lowered kernel, before opts) with every one-hot selection sum replaced by an indexed load (see the
    module docstring); unchanged when there is none."""
    replace = {}
    for u in sink.toposort():
        if u.op is Ops.REDUCE and (new := _folded(u)) is not None:
            replace[u] = new
    return sink.substitute(replace) if replace else sink
