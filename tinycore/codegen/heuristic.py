"""Hand-coded kernel optimizations: `hand_coded_optimizations(k)` picks a list of `Opt` for a fresh `Kernel`.

`tinycore.codegen.get_program` uses it whenever no opts are given, ``NOOPT`` is off and ``BEAM`` is 0. The choice
depends only on what the renderer declares:

**GPU-style renderers** (``has_local``):

1. a declared tensor core (``TC``) on a matmul-shaped reduce whose dtypes fit (``USE_TC=0`` turns this off);
2. a long reduction with few outputs is split across a work-group (``GROUPTOP``);
3. small upcasts of a contiguous output axis (vector loads/stores) when the renderer has vectors;
4. local ids on the output axes (work-groups of up to 64 work-items), innermost axes first.

**CPU-style renderers** (no local ids):

1. matmul-shaped reduces get **register blocking**: the output axis that is contiguous in memory is upcast by two
   vector registers (16 floats with 32-byte vectors; four for reduces of 512 and more) and the other output axis
   by 4, so the reduction loop runs innermost over a 4 x 16 (4 x 32) tile of vector accumulators; when the right
   operand's strip for one column tile is larger than an L1 cache, the column tiles loop outside the row tiles
   (``SWAP``) so the strip stays in L2;
2. other kernels: a reduction that is contiguous in memory is unrolled by four vectors into independent vector
   accumulators (folded after the loop); otherwise the innermost contiguous output axis is upcast to the vector
   width (and a strided reduce unrolled by 4);
3. the largest parallel output axis is split across the CPU threads (``THREAD``): the renderer's ``threads``
   attribute (the CLANG renderer reads ``THREADS`` or the CPU count), else ``os.cpu_count()``; kernels with little
   work stay on one thread.

The vector width is the renderer's ``vector_bytes`` attribute when it declares one, else 32 bytes (AVX2).

>>> from tinycore.dtype import dtypes
>>> from tinycore.uop.ops import UOp, Ops
>>> from tinycore.codegen.lowerer import lower_ast
>>> from tinycore.codegen.kernel import Kernel
>>> from tinycore.runtime.python_device import PythonRenderer
>>> b0, b1 = UOp.define_global(0, dtypes.float, 1024), UOp.define_global(1, dtypes.float, 1024)
>>> ast = UOp.sink(b0.reshape((32, 32)).store(UOp(Ops.LOAD, dtypes.float, (b1,)).reshape((32, 32)) * 2.0))
>>> [o.op.name for o in hand_coded_optimizations(Kernel(lower_ast(ast), PythonRenderer()))]
['UPCAST', 'LOCAL', 'LOCAL']
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from tinycore.codegen.expander import affine_coefficients
from tinycore.codegen.kernel import Kernel, KernelOptError, Opt, OptOps, TCCandidate
from tinycore.dtype import PtrDType
from tinycore.helpers import ContextVar, prod
from tinycore.uop.ops import Ops, UOp

__all__ = ["USE_TC", "hand_coded_optimizations", "thread_count", "vector_width"]

USE_TC = ContextVar("USE_TC", 1)  # 0: the heuristics never pick tensor cores

_L1_BYTES = 32 * 1024  # a data cache size below which loop order hardly matters
_SMALL_WORK = 1 << 15  # output elements (times reduce size) below which a CPU kernel stays on one thread


def thread_count(k: Kernel) -> int:
    """How many CPU threads a THREAD split should use: the renderer's ``threads``, else ``os.cpu_count()``."""
    threads = getattr(k.renderer, "threads", None)
    return max(1, int(threads)) if isinstance(threads, int) and threads > 0 else max(1, os.cpu_count() or 1)


def vector_width(k: Kernel, itemsize: int) -> int:
    """Lanes of one vector register for elements of `itemsize` bytes (1 when the renderer has no vectors)."""
    ren = k.renderer
    if ren is None or not ren.supports_float4:
        return 1
    nbytes = getattr(ren, "vector_bytes", 32)
    return max(1, int(nbytes) // max(1, itemsize))


def _try(k: Kernel, opt: Opt) -> bool:
    try:
        k.apply_opt(opt)
    except KernelOptError:
        return False
    return True


def _accesses(k: Kernel) -> list[tuple[UOp, bool]]:
    """The global memory accesses of the kernel: (INDEX, is_store)."""
    out = []
    for u in k.sink.toposort():
        if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX:
            ptr = u.src[0]
            if isinstance(ptr.src[0].dtype, PtrDType) and ptr.src[0].op is Ops.DEFINE_GLOBAL:
                out.append((ptr, u.op is Ops.STORE))
    return out


def _stride(ptr: UOp, rng: UOp) -> int | None:
    """The constant stride of `rng` in the address of `ptr` (0 when unused; None when not affine)."""
    coefs = affine_coefficients(ptr.src[1], [rng])
    return None if coefs is None else coefs[0]


def _divisor(size: object, wanted: Sequence[int]) -> int | None:
    if not isinstance(size, int):
        return None
    return next((w for w in wanted if w > 1 and size % w == 0 and size >= w), None)


def _axis_index(axes: list[UOp], rng: UOp) -> int | None:
    """The position of the axis with `rng`'s id in `axes` (axes are rebuilt when the kernel changes)."""
    for i, r in enumerate(axes):
        if r.arg[0] == rng.arg[0]:
            return i
    return None


def _itemsize(k: Kernel) -> int:
    sizes = [b.dtype.base.scalar().itemsize for b in k.buffers if isinstance(b.dtype, PtrDType)]
    return max(sizes, default=4)


def _size(r: UOp) -> object:
    return r.src[0].arg if r.src[0].op is Ops.CONST else r.src[0]


def hand_coded_optimizations(k: Kernel) -> list[Opt]:
    """Opts for `k` (applied to it as they are chosen; pass a copy to keep the original), see the module docstring."""
    if k.renderer is None or k.applied_opts:
        return list(k.applied_opts)
    if k.renderer.has_local:
        _gpu(k)
    else:
        _cpu(k)
    return list(k.applied_opts)


# ---------------------------------------------------------------------------------------------------------------
# CPU


def _cpu(k: Kernel) -> None:
    itemsize = _itemsize(k)
    vw = vector_width(k, itemsize)
    work = prod(s for s in k.full_shape if isinstance(s, int))
    cands = [c for c in k.tc_candidates() if len(k.reduce_axes) >= 1]
    tile_width = _register_block(k, cands[0], vw) if cands else 0
    if not tile_width:
        _cpu_vectorize(k, vw)
    _cpu_threads(k, work)
    if tile_width:
        _column_tiles_outside(k, tile_width * itemsize)


def _column_tiles_outside(k: Kernel, tile_bytes: int) -> None:
    """Loop over the column tiles outside the row tiles, so that one tile-wide strip of the right operand
    (reduce size x tile width) stays in the L2 cache while every row tile uses it."""
    outs = k.output_axes
    red = prod(s for s in (_size(r) for r in k.reduce_axes) if isinstance(s, int))
    strip = red * tile_bytes
    if len(outs) == 2 and strip > _L1_BYTES and all(isinstance(_size(r), int) and _size(r) > 1 for r in outs):
        _try(k, Opt(OptOps.SWAP, 0, 1))


def _contiguous_axis(k: Kernel, rngs: list[UOp], ptrs: list[UOp]) -> UOp | None:
    """Among `rngs`, the one with stride 1 in the first of `ptrs` that has one."""
    for ptr in ptrs:
        for r in reversed(rngs):
            if _stride(ptr, r) == 1:
                return r
    return None


def _register_block(k: Kernel, cand: TCCandidate, vw: int) -> int:
    """A 4 x (2 vectors) tile of accumulators for a matmul-shaped reduce, the reduce loop innermost; returns the
    tile's width along the contiguous axis (0: not applied)."""
    i, j = cand.i, cand.j
    stores = [p for p, st in _accesses(k) if st]
    if stores and _stride(stores[0], i) == 1 and _stride(stores[0], j) != 1:
        i, j = j, i  # j is the axis contiguous in the output
    red = prod(s for s in (_size(r) for r in k.reduce_axes) if isinstance(s, int))
    # a long reduce streams the right operand from beyond L1: wider tiles use each of its cache lines and pages
    # for more work (measured on AVX2: 4 x 32 beats 4 x 16 by ~1.5x at n=1024, a few spills included)
    jn = _divisor(_size(j), (4 * vw, 2 * vw, vw, 8, 4) if red >= 512 else (2 * vw, vw, 8, 4))
    im = _divisor(_size(i), (4, 3, 2))
    if jn is None or im is None:
        return 0
    ja = _axis_index(k.output_axes, j)
    first = min(jn, 16)  # one UPCAST is at most 16 lanes: wider tiles split the outer part again
    if ja is None or not _try(k, Opt(OptOps.UPCAST, ja, first)):
        return 0
    if jn > first:
        ja = _axis_index(k.output_axes, j)
        if ja is None or not _try(k, Opt(OptOps.UPCAST, ja, jn // first)):
            jn = first
    ia = _axis_index(k.output_axes, i)
    if ia is not None:
        _try(k, Opt(OptOps.UPCAST, ia, im))
    return jn


def _cpu_vectorize(k: Kernel, vw: int) -> None:
    ptrs = _accesses(k)
    stores = [p for p, st in ptrs if st]
    loads = [p for p, st in ptrs if not st]
    out_axis = _contiguous_axis(k, k.output_axes, stores)
    red_axis = _contiguous_axis(k, k.reduce_axes, loads)
    if red_axis is not None:  # contiguous reduce: independent vector accumulators, folded after the loop
        amt = _divisor(_size(red_axis), (4 * vw, 2 * vw, vw, 4, 2))
        idx = _axis_index(k.reduce_axes, red_axis)
        if amt is not None and idx is not None:
            _try(k, Opt(OptOps.UNROLL, idx, amt))
        return
    if out_axis is not None and vw > 1:
        amt = _divisor(_size(out_axis), (vw, vw // 2, 4, 2))
        idx = _axis_index(k.output_axes, out_axis)
        if amt is not None and idx is not None:
            _try(k, Opt(OptOps.UPCAST, idx, amt))
    if k.reduce_axes:  # a strided reduce: unroll a little for independent loads
        r = k.reduce_axes[-1]
        amt = _divisor(_size(r), (4, 2))
        if amt is not None:
            _try(k, Opt(OptOps.UNROLL, len(k.reduce_axes) - 1, amt))


def _cpu_threads(k: Kernel, work: int) -> None:
    threads = thread_count(k)
    if threads <= 1 or work < _SMALL_WORK:
        return
    axes = k.output_axes
    order = sorted(range(len(axes)), key=lambda a: (-(_size(axes[a]) if isinstance(_size(axes[a]), int) else 0), a))
    for amount in range(threads, 1, -1):
        for a in order:
            size = _size(axes[a])
            if isinstance(size, int) and size % amount == 0 and size >= amount:
                if _try(k, Opt(OptOps.THREAD, a, amount)):
                    return


# ---------------------------------------------------------------------------------------------------------------
# GPU


def _gpu(k: Kernel) -> None:
    if USE_TC and k.renderer is not None and k.renderer.tensor_cores and k.tc_candidates():
        if _try(k, Opt(OptOps.TC, 0, None)):
            return
    outputs = prod(s for s in (_size(r) for r in k.output_axes) if isinstance(s, int))
    reduce_size = prod(s for s in (_size(r) for r in k.reduce_axes) if isinstance(s, int))
    if k.reduce_axes and outputs <= 2048 and reduce_size >= 256 and k.renderer is not None and k.renderer.has_shared:
        r = k.reduce_axes[-1]
        amt = _divisor(_size(r), (32, 16, 8, 4))
        if amt is not None:
            _try(k, Opt(OptOps.GROUPTOP, len(k.reduce_axes) - 1, amt))
    vw = min(4, vector_width(k, _itemsize(k)))
    stores = [p for p, st in _accesses(k) if st]
    out_axis = _contiguous_axis(k, k.output_axes, stores)
    if out_axis is not None and vw > 1:
        amt = _divisor(_size(out_axis), (vw, 2))
        idx = _axis_index(k.output_axes, out_axis)
        if amt is not None and idx is not None and isinstance(_size(out_axis), int) and _size(out_axis) > amt:
            _try(k, Opt(OptOps.UPCAST, idx, amt))
    budget = 64
    for r in reversed(k.output_axes):
        size = _size(r)
        amt = _divisor(size, [w for w in (32, 16, 8, 4, 2) if w <= budget])
        idx = _axis_index(k.output_axes, r)
        if amt is None or idx is None:
            continue
        if _try(k, Opt(OptOps.LOCAL, idx, amt)):
            budget //= amt
        if budget < 2:
            break
