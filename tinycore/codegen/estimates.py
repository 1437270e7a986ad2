"""Cost estimates of a kernel (`tinycore.renderer.Estimates`): arithmetic operations and bytes moved.

Computed on the optimized kernel graph, before index dtypes are lowered, so index arithmetic (``dtypes.index``)
is told apart from real work:

- ``ops``: every ALU lane whose dtype is not ``dtypes.index`` (``MULACC`` counts 2), times how often it runs: the
  product of the sizes of the loops it is in, times the number of launched work-items;
- ``lds``: bytes loaded from and stored to global memory, counted the same way;
- ``mem``: bytes of global memory touched: per buffer, the smaller of its size and the bytes accessed.

Sizes may be symbolic; the estimates are then UOp expressions, evaluated at launch (`Estimates.evaluate`).

>>> from tinycore.dtype import dtypes
>>> from tinycore.uop.ops import UOp, AxisType
>>> out, inp = UOp.define_global(0, dtypes.float, 16), UOp.define_global(1, dtypes.float, 16)
>>> r = UOp.range(16, 0, AxisType.LOOP)
>>> estimate(UOp.sink(out.index(r).store(inp.index(r).load() * 2.0)))
Estimates(ops=16, lds=128, mem=128)
"""

from __future__ import annotations

from collections.abc import Sequence

from tinycore.codegen.lowerer import scopes
from tinycore.dtype import AddrSpace, PtrDType
from tinycore.helpers import prod
from tinycore.renderer import Estimates
from tinycore.uop.ops import GroupOp, Ops, UOp, sint, smin
from tinycore.uop.symbolic import _is_index

__all__ = ["estimate"]


def _size(r: UOp) -> sint:
    end = r.src[0]
    return end.arg if end.op is Ops.CONST else end


def estimate(sink: UOp, global_size: Sequence[sint] = (1, 1, 1), local_size: Sequence[sint] = (1, 1, 1)) -> Estimates:
    """Estimates of the kernel graph under `sink` launched with `global_size` x `local_size` work-items."""
    threads: sint = prod(global_size) * prod(local_size)
    sc = scopes(sink)
    mult_cache: dict[frozenset[UOp], sint] = {}

    def times(u: UOp) -> sint:
        s = sc[u]
        if s not in mult_cache:
            mult_cache[s] = prod((_size(r) for r in s), threads)
        return mult_cache[s]

    ops: sint = 0
    lds: sint = 0
    accessed: dict[UOp, sint] = {}
    for u in sink.toposort():
        if u.op in GroupOp.ALU and not _is_index(u.dtype.scalar()):
            ops = ops + times(u) * (2 if u.op is Ops.MULACC else 1) * u.dtype.count  # a vector op does count lanes
        elif u.op is Ops.WMMA and isinstance(u.arg, tuple) and len(u.arg) > 1 and isinstance(u.arg[1], tuple):
            ops = ops + times(u) * 2 * prod(u.arg[1]) // max(1, u.dtype.count)
        elif u.op is Ops.LOAD or u.op is Ops.STORE:
            ptr = u.src[0]
            buf = ptr.src[0] if ptr.op is Ops.INDEX else ptr
            while buf.op is Ops.AFTER:
                buf = buf.src[0]
            if not (isinstance(buf.dtype, PtrDType) and buf.dtype.addrspace is AddrSpace.GLOBAL):
                continue
            value = u if u.op is Ops.LOAD else u.src[1]
            nbytes = times(u) * value.dtype.itemsize
            lds = lds + nbytes
            accessed[buf] = accessed.get(buf, 0) + nbytes
    mem: sint = 0
    for buf, nbytes in accessed.items():
        size = buf.dtype.size if isinstance(buf.dtype, PtrDType) else -1
        mem = mem + (smin(size * buf.dtype.itemsize, nbytes) if size >= 0 else nbytes)
    return Estimates(ops=_int(ops), lds=_int(lds), mem=_int(mem))


def _int(x: sint) -> sint:
    if isinstance(x, UOp):
        s = x.simplify()
        return s.arg if s.op is Ops.CONST else s
    return x
