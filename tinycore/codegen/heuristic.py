"""Hand-coded kernel optimizations: `hand_coded_optimizations(k)` picks a list of `Opt` for a fresh `Kernel`.

`tinycore.codegen.get_program` uses it whenever no opts are given, ``NOOPT`` is off and ``BEAM`` is 0. The choice
depends only on what the renderer declares:

**GPU-style renderers** (``has_local``), measured on an H100 (``plugins/tinycore_cuda/bench/results/``):

1. a declared tensor core (``TC``) on a matmul-shaped reduce whose dtypes fit (``USE_TC=0`` turns this off), then a
   block of instruction tiles per warp and a few warps per work-group (`TC_BLOCK`: 8 x 4 tiles, 2 x 2 warps; the
   N tiles interleaved by ``TC`` itself), then both operands through shared memory, `TC_STAGE` (4) k steps per
   stage (``STAGE``; fewer where the k loop doesn't divide);
2. a fused row kernel (softmax, layernorm: reduces over the row of the output's last axis, broadcast back over
   it; `tinycore.renderer.Renderer.row_split`) runs each row in one work-group: every work-item loads its share of
   the row once (vectors, neighbours on neighbouring vectors) and keeps it in registers for every pass, and each
   reduce's partials meet through warp shuffles on those same lanes (``GROUPLOCAL``);
3. another reduction contiguous in memory (row sums) gets vector lanes along the row (``UNROLL``)
   and then a work-group across it (``GROUP``) sized so each work-item loads 16 vectors; neighbouring work-items read
   neighbouring vectors (coalesced) and the partial results meet through warp shuffles and shared memory; other
   rows fill the rest of a 256-wide work-group (``LOCAL``). A strided reduction with few outputs is split across a
   work-group by blocks of rows (``GROUPTOP``);
4. small upcasts of a contiguous output axis (vector loads/stores) when the renderer has vectors;
5. local ids on the output axes, innermost first: 256-wide work-groups along one axis for copies and elementwise
   kernels (each work-item taking a second vector one work-group further on when the kernel is long), 16 x 16 for
   other kernels that reduce.

**CPU-style renderers** (no local ids):

1. matmul-shaped reduces get **register blocking**: the output axis that is contiguous in memory is upcast by the
   renderer's ``gemm_panel_bytes`` (else two vector registers: 16 floats with 32-byte vectors; padded to whole such
   tiles when that adds at most an eighth, rather than a narrower tile that divides it; a row that would take less
   than one vector is padded to a whole overlapping one) and the other output axis by enough rows for half to three
   quarters of the renderer's ``vector_registers`` as accumulators (`tile_rows`: 8-12 of AVX2's 16, 4 x 16 or 8 x 8
   floats; 16-24 of AVX-512's 32, 8 x 32 or 16 x 16 floats; a power of two of rows: 3-, 5- and 6-row tiles measured
   3-10x slower than 2 or 1 row on AVX2 and AVX-512), so the reduction loop runs innermost over a tile of
   accumulators with one fused multiply-add (``MULACC``) per lane and step; the row axis is split across the threads,
   and a block of rows whose left operand fits in half the renderer's ``l2_bytes`` (one core's L2) stays there while
   the column tiles sweep over it (``TILE`` the rows, ``SWAP`` the column loop inside). With a packed right operand
   (the frontend repacks it into column panels when the renderer declares ``gemm_panel_bytes``) every reduce step
   reads one contiguous panel row. Sizes that don't divide the tile are padded to whole tiles: the rows to a multiple
   of the tile times the threads when that adds at most an eighth, the columns always. The padding overlaps the last
   real elements (``OVERLAP``: each thread's block of rows, or each column tile, that would run past the end is
   shifted back to end at the last element, so every access stays a plain vector at an affine address) unless the
   kernel reads what it stores or a packed operand's panels would be straddled; then ``PADTO`` (only the stores of
   the extra lanes are masked; the packed operand's last panel is zero-filled). A convolution (more than one reduce
   axis) gets the same register tile but keeps its loop order (output channels outside the image rows). When the
   output's contiguous axis is too short for a vector (``A^T @ B`` with N = 10: a weight gradient), the lanes go
   along the other output axis if an operand is read contiguously along it (the two axes swap so those lanes are
   innermost), up to four vectors of it;
2. other kernels: a reduction that is contiguous in memory is unrolled by four vectors into independent vector
   accumulators (folded after the loop; one vector when another operand is gathered along it), and rows of at least
   64 vectors are reduced the renderer's ``reduce_streams`` at a time (an output axis upcast: that many memory
   streams; 4 by default, 1 on AMD Zen CPUs) unless the body computes an exp/log/sin; otherwise the innermost
   contiguous output axis is upcast to the vector width, or to two vectors for a long kernel computing an
   exp/log/sin (two polynomial chains overlap), and a strided reduce unrolled by 4.
   Copies and permutes (no reduce): when the largest input is contiguous along another output axis (a transpose),
   that axis is upcast too (an 8 x 8 tile transposed in registers), a contiguous row of two vectors is taken whole,
   and the loop that reads the input with the smallest stride goes innermost (the packing copy of a matmul's right
   operand reads its rows in order);
3. the largest parallel output axis (the rows of a blocked matmul) is split across the CPU threads (``THREAD``):
   the renderer's ``threads`` (the CLANG renderer reads ``THREADS`` or the CPU count), or ``os.cpu_count()`` when
   it is None (the `Renderer` default); kernels with little work stay on one thread.

The vector width is the renderer's ``vector_bytes`` (the `Renderer` default is 32 bytes, AVX2).

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
from tinycore.uop.ops import AxisType, Ops, UOp, ssimplify

__all__ = ["USE_TC", "hand_coded_optimizations", "thread_count", "vector_width"]

USE_TC = ContextVar("USE_TC", 1)  # 0: the heuristics never pick tensor cores

_MAX_TRANSPOSE_LANES = 64  # a transposed tile of a copy: 8 x 8 floats, 8 vector registers
ROW_CHOICES = (4, 8, 16, 2)  # rows of a matmul's register tile, best first (see `tile_rows`); powers of two only
_SMALL_WORK = 1 << 15  # output elements (times reduce size) below which a CPU kernel stays on one thread


def thread_count(k: Kernel) -> int:
    """How many CPU threads a THREAD split should use: the renderer's ``threads``, else ``os.cpu_count()``."""
    threads = k.renderer.threads if k.renderer is not None else None
    return max(1, int(threads)) if isinstance(threads, int) and threads > 0 else max(1, os.cpu_count() or 1)


def vector_width(k: Kernel, itemsize: int) -> int:
    """Lanes of one vector register for elements of `itemsize` bytes (1 when the renderer has no vectors)."""
    ren = k.renderer
    if ren is None or not ren.supports_float4:
        return 1
    nbytes = ren.vector_bytes
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
        if (u.op is Ops.LOAD or u.op is Ops.STORE) and u.src[0].op is Ops.INDEX:
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


def _try_amounts(k: Kernel, op: OptOps, axis: int, size: object, wanted: Sequence[int]) -> int | None:
    """Apply ``Opt(op, axis, amt)`` for the first amount of `wanted` that divides `size` and that the kernel accepts
    (an upcast caps the lanes: two AVX-512 vectors of floats are more than one axis may take); the amount, or None."""
    for amt in wanted:
        if _divisor(size, (amt,)) is not None and _try(k, Opt(op, axis, amt)):
            return amt
    return None


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
    cands = [c for c in k.tc_candidates() if len(k.reduce_axes) >= 1 and not _dot_rows(k, c)]
    block = _register_block(k, cands[0], vw) if cands else None
    if block is None:
        _cpu_vectorize(k, vw)
        _cpu_threads(k)
        return
    rows: UOp | None = block[0]
    left = _size(k.output_axes[ra]) if (ra := _axis_index(k.output_axes, block[0])) is not None else None
    if not isinstance(left, int) or left < 4 * thread_count(k):
        rows = None  # few row tiles left (a short row axis): the threads split the largest axis instead
    _cpu_threads(k, prefer=rows)
    if len(k.reduce_axes) == 1 and not block[3]:
        # a convolution (several reduce axes: channels and the window) keeps the loop order: one output-channel
        # tile's weights stay in L1 while the image streams past, its window rows reused from L1/L2 as the output
        # rows advance (moving the column loop outward measured 10-15% slower)
        _cache_blocks(k, block, itemsize)


def _dot_rows(k: Kernel, cand: TCCandidate) -> bool:
    """True for a matmul whose column operand is read along the reduce, not along the columns (``x @ W.T`` with
    ``W`` in place: a product with too few rows to repack ``W``, see `tinycore.engine.gemm_packing`): a register
    tile would gather its vectors across ``W``'s rows, so each output is better a dot product of two contiguous
    rows (4 x 4096 @ 4096 x 4096 on a Zen 4: 52 ms as tiles). Only when that operand is the largest load: a 1 x 1
    convolution reads its small weight the same way, but its image dominates and wants the tile."""
    loads = [p for p, st in _accesses(k) if not st]
    column = [p for p in loads if _stride(p, cand.j) not in (0, None)]
    main = _by_size(loads)[0] if loads else None
    if not any(p is main for p in column):
        return False
    return all(_stride(p, cand.k) == 1 and _stride(p, cand.j) != 1 for p in column)


def _contiguous_axis(k: Kernel, rngs: list[UOp], ptrs: list[UOp]) -> UOp | None:
    """Among `rngs`, the one with stride 1 in the first of `ptrs` that has one."""
    for ptr in ptrs:
        for r in reversed(rngs):
            if _stride(ptr, r) == 1:
                return r
    return None


def _by_size(loads: list[UOp]) -> list[UOp]:
    """`loads` (INDEX nodes) from the largest global buffer to the smallest."""
    return sorted(loads, key=lambda p: -(p.src[0].dtype.size if isinstance(p.src[0].dtype, PtrDType) else 0))


def _contiguous_reduce_axis(k: Kernel, by_size: list[UOp]) -> UOp | None:
    """The reduce axis to vectorize along: the stride-1 reduce axis of the largest load (`by_size`: the loads,
    largest first) that walks memory contiguously along any axis. None when that load is contiguous along an output
    axis instead: a small operand read along the reduce (the index of a one-hot scatter, the vector of ``x @ W``)
    must not decide for the large one, which then gets vector loads along its rows."""
    for ptr in by_size:
        for r in reversed(k.reduce_axes):
            if _stride(ptr, r) == 1:
                return r
        if any(_stride(ptr, r) == 1 for r in k.output_axes):
            return None
    return None


def _register_block(k: Kernel, cand: TCCandidate, vw: int) -> tuple[UOp, UOp, int, bool] | None:
    """A tile of (4 rows) x (2 vectors) accumulators for a matmul-shaped reduce, the reduce loop innermost: 8 vector
    registers of sums, 2 vector loads of the right operand and 4 broadcasts of the left one per reduce step (it
    leaves registers for the compiler, so nothing spills). Returns the (row, column) output axes that are left
    to loop over, the rows per tile and whether the vector lanes run along the rows of the output (a short output
    row: its loop order is already chosen), or None when the shape doesn't allow it."""
    i, j = cand.i, cand.j
    stores = [p for p, st in _accesses(k) if st]
    if stores and _stride(stores[0], i) == 1 and _stride(stores[0], j) != 1:
        i, j = j, i  # j is the axis contiguous in the output
    panel = (k.renderer.gemm_panel_bytes if k.renderer is not None else 0) // max(1, _itemsize(k))
    widths = (panel if panel > 1 else 2 * vw, vw, 8, 4)
    size_j = _size(j)
    jn = _divisor(size_j, widths[:1])
    long_row = isinstance(size_j, int) and size_j >= 8 * widths[0]
    if jn is None and long_row and _pad_columns(k, j, widths[0]):
        jn = widths[0]  # a full-width tile over at most an eighth more columns beats a narrower exact one
    jn = jn or _divisor(size_j, widths[1:])
    if jn is not None and jn < vw < size_j:
        # a whole (overlapping) vector beats a partial one: 56 columns as 4 x 16 lanes, not 7 x 8 (AVX-512); with 32
        # vector registers a convolution takes two vectors per row (8 channels x 32 columns instead of 16 x 16: half
        # the broadcasts per multiply-add, the kernel 3-14% faster on 8x64x56x56)
        wide = 2 * vw if len(k.reduce_axes) > 1 and _registers(k) >= 32 and size_j > 2 * vw else 0
        if wide and _pad_columns(k, j, wide):
            jn = wide
        elif _pad_columns(k, j, vw):
            jn = vw
    swapped = None
    if jn is None and not long_row and _pad_columns(k, j, widths[0]):  # (a long row was tried above)
        jn = widths[0]
    if jn is None:
        swapped = _vector_rows(k, i, j, vw)
        if swapped is None:
            return None
        i, j = swapped
        # up to four vectors of the (long) row axis: a weight gradient with N = 10 reads each reduce step's
        # row of the left operand whole (512 x 10 from 128 rows: 107 -> 14 us on a Zen 4)
        jn = _divisor(_size(j), (4 * vw, 2 * vw, vw))
    vectors = max(1, -(-jn // vw)) if jn is not None else 1
    rows = tile_rows(vectors, _registers(k))
    im = _divisor(_size(i), rows)
    if im is None and rows and _pad_rows(k, i, min(rows)):
        im = min(rows)
    im = im or _divisor(_size(i), [4, 2])  # 3- or 5-row tiles: 4-10x slower than 2 or 1 row (a Zen 4, M = 10, 15)
    ja = _axis_index(k.output_axes, j)
    first = min(jn or 0, 16)  # one UPCAST is at most 16 lanes: wider tiles split the outer part again
    if jn is None or ja is None or not _try(k, Opt(OptOps.UPCAST, ja, first)):
        return None
    if jn > first and (
        (ja := _axis_index(k.output_axes, j)) is None or not _try(k, Opt(OptOps.UPCAST, ja, jn // first))
    ):
        return None
    ia = _axis_index(k.output_axes, i)
    if im is None or ia is None or not _try(k, Opt(OptOps.UPCAST, ia, im)):
        im = 1
    return i, j, im, swapped is not None


def _registers(k: Kernel) -> int:
    """The target's vector registers (16 without a renderer: AVX2's)."""
    return k.renderer.vector_registers if k.renderer is not None else 16


def tile_rows(vectors: int, registers: int) -> list[int]:
    """Rows of a matmul's register tile `vectors` vector registers wide, best first: the tile holds between half and
    three quarters of the target's `registers` as accumulators (enough independent FMAs to hide their latency, the
    rest left for the operands so nothing spills): 8-12 of AVX2's 16, 16-24 of AVX-512's 32. Only powers of two
    (`ROW_CHOICES`): LLVM turns the broadcast of 3 or 5 rows into scalar inserts in the loop.

    >>> tile_rows(2, 16), tile_rows(2, 32), tile_rows(1, 16)
    ([4], [8], [8])
    """
    low, high = registers // 2, registers * 3 // 4
    return [r for r in ROW_CHOICES if low <= r * vectors <= high]


def _pad_columns(k: Kernel, j: UOp, width: int) -> bool:
    """Pads the column axis `j` to whole tiles of `width`. Where every operand is read along `j` with a constant
    stride, the last tile overlaps the one before it (``OVERLAP``: shifted back to end at the last column, so its
    loads and stores stay whole unmasked vectors). Otherwise (``PADTO``) when the right operand is then still read
    as whole vectors: its memory is padded too (the frontend's zero-filled column panels), so only the stores of the
    extra columns are masked; tried on a copy first. Returns whether `k` was padded."""
    ja, size = _axis_index(k.output_axes, j), _size(j)
    if ja is None or not isinstance(size, int) or size <= width or size % width == 0:
        return False
    if all(_stride(ptr, j) is not None for ptr, _ in _accesses(k)):
        if _try(k, Opt(OptOps.OVERLAP, ja, (width, width))):
            return True
    probe = k.copy()
    if not _try(probe, Opt(OptOps.PADTO, ja, width)) or not _try(probe, Opt(OptOps.UPCAST, ja, min(width, 16))):
        return False
    lanes = [r for r in probe.rngs if r.arg[1] is AxisType.UPCAST][-1]
    offsets = [ssimplify(ptr.src[1]) for ptr, is_store in _accesses(probe) if not is_store]
    if not any(isinstance(o, UOp) and (c := affine_coefficients(o, [lanes])) and c[0] == 1 for o in offsets):
        return False  # the operand isn't padded in memory: its loads would be gathered lane by lane
    return _try(k, Opt(OptOps.PADTO, ja, width))


def _pad_rows(k: Kernel, i: UOp, tile: int) -> bool:
    """Pads the row axis `i` to whole tiles of `tile` rows (times the thread count, so the row tiles still split
    evenly across the threads) when that adds at most an eighth. The extra rows overlap the last real ones
    (``OVERLAP``: each thread's block of rows, or each tile on one thread, shifted back to end at the last row, so
    every address stays affine and no store is masked); where the kernel reads what it stores they are computed
    and never stored instead (``PADTO``). Returns whether `k` was padded."""
    ia, size = _axis_index(k.output_axes, i), _size(i)
    if ia is None or not isinstance(size, int):
        return False
    threads = _thread_split(k)
    multiple = tile * threads
    padded = -(-size // multiple) * multiple
    block = padded // threads if threads > 1 else tile  # the THREAD split goes on the rows (see `_cpu`)
    if size < block or (padded - size) * 8 > size:
        return False
    return _try(k, Opt(OptOps.OVERLAP, ia, (multiple, block))) or _try(k, Opt(OptOps.PADTO, ia, multiple))


def _vector_rows(k: Kernel, i: UOp, j: UOp, vw: int) -> tuple[UOp, UOp] | None:
    """A matmul whose output is contiguous along a short axis `j` (``A^T @ B`` with ``N = 10``): the vector lanes go
    along the other output axis `i` instead, when an operand is read contiguously along it (``A^T``'s rows). The two
    axes exchange their loop nesting so `i`'s lanes are the innermost ones (the order of the loaded memory); returns
    the new (rows, vector) axes, or None when `i` can't take whole vectors either."""
    loads = [p for p, st in _accesses(k) if not st]
    if vw < 2 or _divisor(_size(i), (vw,)) is None or not any(_stride(p, i) == 1 for p in loads):
        return None
    ia, ja = _axis_index(k.output_axes, i), _axis_index(k.output_axes, j)
    if ia is None or ja is None:
        return None
    if ia < ja:
        if not _try(k, Opt(OptOps.SWAP, ia, ja)):
            return None
        ia, ja = ja, ia  # the swap exchanged the axis ids: find both again by position
    return k.output_axes[ja], k.output_axes[ia]


def _cache_blocks(k: Kernel, block: tuple[UOp, UOp, int, bool], itemsize: int) -> None:
    """Loop order of a register-blocked matmul: a block of rows whose left-operand rows fit in half the renderer's
    ``l2_bytes`` (one core's L2 cache) stays there while the column tiles sweep over it, and for each column tile the
    block's row tiles reuse one tile-wide strip of the right operand from L1/L2 (``TILE`` the rows, ``SWAP`` the
    column loop between)."""
    rows, cols, row_tile, _ = block
    ra, ca = _axis_index(k.output_axes, rows), _axis_index(k.output_axes, cols)
    if ra is None or ca is None or ra > ca:
        return
    n_rows = _size(k.output_axes[ra])
    red = prod(s for s in (_size(r) for r in k.reduce_axes) if isinstance(s, int))
    if not isinstance(n_rows, int) or n_rows < 2:
        return
    l2 = k.renderer.l2_bytes if k.renderer is not None else 512 << 10  # one core's L2: the block uses half of it
    budget = max(1, l2 // 2 // max(1, row_tile * red * itemsize))  # row tiles per cache block
    per_block = next((d for d in range(min(budget, n_rows), 0, -1) if n_rows % d == 0), 1)
    if per_block >= n_rows:  # every row fits: the column tiles loop outermost
        _try(k, Opt(OptOps.SWAP, ra, ca))
        return
    if per_block > 1 and _try(k, Opt(OptOps.TILE, ra, per_block)):
        inner = ra + 1
        ca = _axis_index(k.output_axes, cols)
        if ca is not None and ca > inner:
            _try(k, Opt(OptOps.SWAP, inner, ca))


def _cpu_vectorize(k: Kernel, vw: int) -> None:
    ptrs = _accesses(k)
    stores = [p for p, st in ptrs if st]
    loads = [p for p, st in ptrs if not st]
    by_size = _by_size(loads)
    out_axis = _contiguous_axis(k, k.output_axes, stores)
    red_axis = _contiguous_reduce_axis(k, by_size)
    passes = [r for r in k.reduce_axes if any(_stride(p, r) == 1 for p in loads)]
    if len(passes) > 1 and out_axis is not None:
        _vectorize_row_passes(k, vw, out_axis, passes)
        return
    if red_axis is not None:  # contiguous reduce: independent vector accumulators, folded after the loop
        # another operand read with a stride along the reduce (``h @ w`` with a narrow ``w``) is gathered lane by
        # lane: one vector per step, as wider steps cost compile time (wide gathers) and gain nothing at run time
        gathered = any(_stride(p, red_axis) not in (0, 1) for p in loads)
        # rows of the output the largest load does not depend on (the rows of ``x`` in ``x @ W.T``) are computed
        # side by side, so each vector of it loaded serves them all (4 x 4096 @ 4096 x 4096: W read once, not 4x)
        reuse = [a for a in k.output_axes if _stride(by_size[0], a) == 0 and _divisor(_size(a), (4, 2))]
        together = 1
        if reuse and not gathered:
            together = _try_amounts(k, OptOps.UPCAST, k.output_axes.index(reuse[-1]), _size(reuse[-1]), (4, 2)) or 1
        idx = _axis_index(k.reduce_axes, red_axis)
        if idx is not None:  # the widest the kernel takes (64 lanes: not), half the registers at most as sums
            wanted = [a for a in (4 * vw, 2 * vw, vw, 4, 2) if together * max(a // vw, 1) <= _registers(k) // 2]
            _try_amounts(k, OptOps.UNROLL, idx, _size(red_axis), (vw,) if gathered else wanted)
        if together > 1:
            return
        # long rows reduced side by side, the renderer's `reduce_streams` of them per step: independent memory
        # streams (row max/sum of a 4096 x 4096 matrix: four rows ~25% faster on an Intel AVX2 box, one row ~30%
        # faster than four on an AMD Zen 4); not with exp/log in the body, whose 16 polynomial chains would no
        # longer fit the registers
        streams = k.renderer.reduce_streams if k.renderer is not None else 4
        if streams > 1 and _long_enough(_size(red_axis), 64 * vw) and not _transcendental(k):
            rows = [a for a in k.output_axes if _long_enough(_size(a), 64) and _divisor(_size(a), (streams,))]
            if rows:
                _try(k, Opt(OptOps.UPCAST, k.output_axes.index(rows[-1]), streams))
        return
    out_lanes = 1
    if out_axis is not None and vw > 1:
        size = _size(out_axis)
        # a copy whose contiguous rows are only two vectors long takes them whole (no loop of two iterations inside)
        whole = (size,) if not k.reduce_axes and isinstance(size, int) and size == 2 * vw and size <= 16 else ()
        # a long elementwise kernel computing exp/log/sin per element: two vectors per step let the two
        # polynomial chains overlap (softmax's last kernel: ~13% faster on AVX2)
        double = (2 * vw,) if not k.reduce_axes and _transcendental(k) and _long_enough(size, 64 * vw) else ()
        idx = _axis_index(k.output_axes, out_axis)
        if idx is not None:
            out_lanes = _try_amounts(k, OptOps.UPCAST, idx, size, (*whole, *double, vw, vw // 2, 4, 2)) or 1
        if k.reduce_axes and out_lanes == vw and (idx := _axis_index(k.output_axes, out_axis)) is not None:
            # a reduce down the rows of its main load (``x @ W`` with one row, column sums): a quarter of the
            # registers as accumulators, so each row is read in long runs the prefetchers follow (1 x 4096 x 4096
            # on a Zen 4: 5.2 ms with one vector per row, 2.9 ms with eight, torch 2.8 ms)
            more, rest, threads = max(_registers(k) // 4, 1), _size(k.output_axes[idx]), _thread_split(k)
            if isinstance(rest, int):  # what is left of the axis must still split over the threads
                amounts = [a for a in (more, more // 2, 2) if a > 1 and rest % (a * threads) == 0]
                _try_amounts(k, OptOps.UPCAST, idx, rest, amounts[:1])
    if not k.reduce_axes and vw > 1:
        _cpu_permute(k, vw, out_lanes, out_axis)
    if k.reduce_axes:  # a strided reduce: unroll a little for independent loads
        r = k.reduce_axes[-1]
        amt = _divisor(_size(r), (4, 2))
        if amt is not None:
            _try(k, Opt(OptOps.UNROLL, len(k.reduce_axes) - 1, amt))


_TRANSCENDENTAL = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})


def _vectorize_row_passes(k: Kernel, vw: int, out_axis: UOp, passes: list[UOp]) -> None:
    """A one-kernel row function (softmax: a max pass, a sum pass, the output pass over each row): the output
    upcast by two vectors, each contiguous reduce pass unrolled by four vectors, two when its body computes exp or
    log (16 polynomial chains no longer fit the registers). On 4096 x 4096 (AVX2) these are within 3% of the best
    of the splits tried by hand."""
    idx = _axis_index(k.output_axes, out_axis)
    if idx is not None:
        _try_amounts(k, OptOps.UPCAST, idx, _size(out_axis), (2 * vw, vw))
    for rng in passes:
        bodies = [red.src[0] for red in k.sink.toposort() if red.op is Ops.REDUCE and rng in red.src[1:]]
        heavy = any(u.op in _TRANSCENDENTAL for body in bodies for u in body.toposort())
        idx = _axis_index(k.reduce_axes, rng)
        if idx is not None:
            _try_amounts(k, OptOps.UNROLL, idx, _size(rng), (2 * vw, vw, 4, 2) if heavy else (4 * vw, 2 * vw, vw, 4, 2))


def _transcendental(k: Kernel) -> bool:
    """True when the kernel computes an exp, log or sin (decomposed later into long polynomial chains)."""
    return any(u.op in _TRANSCENDENTAL for u in k.sink.toposort())


def _long_enough(size: object, at_least: int) -> bool:
    return isinstance(size, int) and size >= at_least


def _main_load(k: Kernel) -> UOp | None:
    """The INDEX of the load from the largest global buffer (the one whose traffic dominates a copy)."""
    loads = [p for p, st in _accesses(k) if not st]
    sizes = [p.src[0].dtype.size if isinstance(p.src[0].dtype, PtrDType) else 0 for p in loads]
    return loads[sizes.index(max(sizes))] if loads else None


def _cpu_permute(k: Kernel, vw: int, out_lanes: int, out_axis: UOp | None) -> None:
    """Copies and permutes (no reduce): both sides of the copy get whole-vector accesses and the loops walk memory
    in order, instead of one side being gathered element by element across rows.

    1. when the largest input is contiguous along another output axis than the output (a transpose), that axis is
       upcast too: a tile of ``out_lanes x in_lanes`` values is read as ``out_lanes`` vector loads and written as
       ``in_lanes`` vector stores (the compiler transposes it in registers);
    2. the innermost loop becomes the one along which the largest input is read with the smallest stride, so the
       reads stream through memory in order (the hardware prefetcher follows them) while every write is a whole
       vector; for a plain elementwise kernel this already is the innermost loop and nothing changes."""
    ptr = _main_load(k)
    if ptr is None:
        return
    in_axis = _contiguous_axis(k, k.output_axes, [ptr])
    if in_axis is not None and out_axis is not None and in_axis.arg[0] != out_axis.arg[0]:
        limit = max(1, _MAX_TRANSPOSE_LANES // out_lanes)
        amt = _divisor(_size(in_axis), [w for w in (vw, 8, 4, 2) if w <= limit])
        idx = _axis_index(k.output_axes, in_axis)
        if amt is not None and idx is not None:
            _try(k, Opt(OptOps.UPCAST, idx, amt))
    axes = k.output_axes
    if len(axes) < 2:
        return

    def read_stride(i: int) -> float:  # axes the load doesn't walk (broadcast, not affine, size 1) go outermost
        st, size = _stride(ptr, axes[i]), _size(axes[i])
        return abs(st) if st and isinstance(size, int) and size > 1 else float("inf")

    last = len(axes) - 1
    best = min(range(len(axes)), key=lambda i: (read_stride(i), -i))
    if best != last and read_stride(best) < read_stride(last):
        _try(k, Opt(OptOps.SWAP, best, last))


def _thread_split(k: Kernel) -> int:
    """How many threads `_cpu_threads` splits `k` across (1: it stays on one thread)."""
    work = prod(s for s in k.full_shape if isinstance(s, int))
    return thread_count(k) if work >= _SMALL_WORK else 1


def _cpu_threads(k: Kernel, prefer: UOp | None = None) -> None:
    threads = _thread_split(k)
    if threads <= 1:
        return
    axes = k.output_axes
    first = _axis_index(axes, prefer) if prefer is not None else None
    order = sorted(
        range(len(axes)),
        key=lambda a: (a != first, -(_size(axes[a]) if isinstance(_size(axes[a]), int) else 0), a),
    )
    for amount in range(threads, 1, -1):
        for a in order:
            size = _size(axes[a])
            if isinstance(size, int) and size % amount == 0 and size >= amount:
                if _try(k, Opt(OptOps.THREAD, a, amount)):
                    return


# ---------------------------------------------------------------------------------------------------------------
# GPU


_GPU_THREADS = 256  # work-items per work-group the GPU heuristics aim for (8 warps of 32)
_GPU_ROW_STEPS = 16  # vector loads per work-item a grouped row reduction aims for
_GPU_BIG_COPY = 1 << 20  # output elements from which an elementwise work-item writes two vectors, not one
TC_BLOCK = (8, 4, 2, 2)  # TC tiles per warp along N and M, then warps per work-group along N and M (H100 sweeps)
TC_STAGE = 4  # k steps of the tensor core per shared-memory stage (`OptOps.STAGE`; 0: operands from global memory)


def _gpu(k: Kernel) -> None:
    if USE_TC and k.renderer is not None and k.renderer.tensor_cores and k.tc_candidates():
        # the block's tiles along N come with the tensor core, interleaved (vector loads of B, stores of C)
        if _try(k, Opt(OptOps.TC, 0, (None, TC_BLOCK[0]))) or _try(k, Opt(OptOps.TC, 0, None)):
            _gpu_tc_blocks(k)
            if TC_STAGE and k.renderer.has_shared:  # fewer steps per stage where the k loop doesn't divide
                any(_try(k, Opt(OptOps.STAGE, None, steps)) for steps in sorted({TC_STAGE, 4, 2, 1}, reverse=True))
            return
    if k.reduce_axes and _gpu_row_kernel(k):
        return
    vw = min(4, vector_width(k, _itemsize(k)))
    main = _main_load(k)
    group = _gpu_row_group(k, vw, main) if k.reduce_axes else 1
    if group == 1 and k.reduce_axes:
        _gpu_strided_reduce(k)
    stores = [p for p, st in _accesses(k) if st]
    out_axis = _contiguous_axis(k, k.output_axes, stores)
    if out_axis is not None and vw > 1 and group == 1:
        amt = _divisor(_size(out_axis), (vw, 2))
        idx = _axis_index(k.output_axes, out_axis)
        if amt is not None and idx is not None and isinstance(_size(out_axis), int) and _size(out_axis) > amt:
            _try(k, Opt(OptOps.UPCAST, idx, amt))
    budget = max(1, _GPU_THREADS // group)
    # a work-group along one output axis for copies and elementwise kernels (whole warps reading consecutive
    # vectors); kernels that reduce share their loads between rows and columns, so they get a square-ish one
    # (rows of a grouped reduction sit side by side like an elementwise kernel's)
    per_axis = budget if not k.reduce_axes or group > 1 else 16
    for r in reversed(k.output_axes):
        size = _size(r)
        amt = _divisor(size, [w for w in (256, 128, 64, 32, 16, 8, 4, 2) if w <= min(budget, per_axis)])
        idx = _axis_index(k.output_axes, r)
        if amt is None or idx is None:
            continue
        if _try(k, Opt(OptOps.LOCAL, idx, amt)):
            budget //= amt
        if budget < 2:
            break
    if not k.reduce_axes and out_axis is not None and vw > 1:
        _gpu_second_vector(k)


def _gpu_row_kernel(k: Kernel) -> bool:
    """A fused row kernel (softmax, layernorm: reduces over the last output axis's row, broadcast back over it; see
    `tinycore.renderer.Renderer.row_split`): one work-group per row. The row's vectors are spread over the
    work-items (``UPCAST`` lanes, ``LOCAL``, ``UPCAST`` the rest), and every reduce is split the same way over the
    same lanes (``UNROLL``, ``GROUPLOCAL``, ``UNROLL``), so each work-item loads its share of the row once, keeps it
    in registers for every pass, and the reduces meet through warp shuffles. Short rows share a work-group (up to
    128 work-items). Returns False, changing nothing, when `k` is not such a kernel or its row can't be split."""
    j = k.output_axes[-1] if k.output_axes else None
    length = _size(j) if j is not None else None
    if j is None or not isinstance(length, int) or any(_size(r) != length for r in k.reduce_axes):
        return False
    reduces = [u for u in k.sink.toposort() if u.op is Ops.REDUCE]
    if not reduces or any(j in red.src[0].toposort() for red in reduces):
        return False  # a reduce that reads along the output's row axis: an ordinary reduction
    split = k.renderer.row_split(length, _itemsize(k)) or k.renderer.row_split(length, 16)
    if split is None:
        return False
    lanes, items = split
    rest = length // lanes // items
    last = len(k.output_axes) - 1
    opts = ([Opt(OptOps.UPCAST, last, lanes)] if lanes > 1 else []) + [Opt(OptOps.LOCAL, last, items)]
    opts += [Opt(OptOps.UPCAST, last, rest)] if rest > 1 else []
    for i in reversed(range(len(k.reduce_axes))):  # a reduce split over whole lanes leaves reduce_axes: last first
        opts += [Opt(OptOps.UNROLL, i, lanes)] if lanes > 1 else []
        opts += [Opt(OptOps.GROUPLOCAL, i, 0)] + ([Opt(OptOps.UNROLL, i, rest)] if rest > 1 else [])
    trial = k.copy()
    try:
        trial.apply_opts(opts)
    except KernelOptError:
        return False
    k.__dict__.update(trial.__dict__)
    if items < 128 and k.output_axes:  # short rows: neighbouring rows fill the work-group
        rows = k.output_axes[-1]
        amt = _divisor(_size(rows), [w for w in (64, 32, 16, 8, 4, 2) if w * items <= 128])
        if amt is not None:
            _try(k, Opt(OptOps.LOCAL, len(k.output_axes) - 1, amt))
    return True


def _gpu_second_vector(k: Kernel) -> None:
    """A long copy or elementwise kernel: each work-item also takes a second vector, one work-group's span further
    on (fewer, fuller work-groups; both accesses stay coalesced)."""
    outputs = prod(s for s in (_size(r) for r in k.rngs) if isinstance(s, int))
    sizes = [(s, i) for i, s in enumerate(_size(r) for r in k.output_axes) if isinstance(s, int) and s >= 2]
    if outputs < _GPU_BIG_COPY or not sizes:
        return
    size, idx = max(sizes)
    if size % 2 == 0:
        _try(k, Opt(OptOps.UPCAST, idx, 2))


def _gpu_tc_blocks(k: Kernel) -> None:
    """After ``TC``: each warp computes a block of instruction tiles (its A fragments reused across the block's
    columns, its B fragments across its rows; the N tiles come with ``TC`` itself, interleaved, when N divides),
    and a few warps share a work-group (their loads meet in L1)."""
    n_up, m_up, n_warps, m_warps = TC_BLOCK
    axes = list(k.output_axes)
    if len(axes) < 2:
        return
    m_axis, n_axis = axes[-2], axes[-1]
    tc_arg = k.applied_opts[-1].arg
    n_tiled = isinstance(tc_arg, tuple) and tc_arg[1] > 1  # the N tiles came with the tensor core
    for rng, amounts in ([] if n_tiled else [(n_axis, (n_up, 2))]) + [(m_axis, (m_up, 2))]:
        amt = _divisor(_size(rng), [a for a in amounts if a > 1])
        idx = _axis_index(k.output_axes, rng)
        if amt is not None and idx is not None:
            _try(k, Opt(OptOps.UPCAST, idx, amt))
    for rng, amt in ((n_axis, n_warps), (m_axis, m_warps)):
        idx = _axis_index(k.output_axes, rng)
        if amt > 1 and idx is not None and _divisor(_size(k.output_axes[idx]), (amt,)) is not None:
            _try(k, Opt(OptOps.LOCAL, idx, amt))


def _gpu_row_group(k: Kernel, vw: int, main: UOp | None) -> int:
    """A reduction contiguous in memory (a row sum, the max and sum of a softmax): vector lanes along the row, then a
    work-group across it, so neighbouring work-items read neighbouring vectors (coalesced) and the partial results
    meet in shared memory. Returns the work-group size (1: not applied)."""
    if main is None or k.renderer is None or not k.renderer.has_shared:
        return 1
    if any(_long_enough(_size(c.i), 16) and _long_enough(_size(c.j), 16) for c in k.tc_candidates()):
        return 1  # a matmul: a tile of outputs per work-group shares its loads instead
    r = k.reduce_axes[-1]
    size = _size(r)
    if not isinstance(size, int) or size < 64 or _stride(main, r) != 1:
        return 1
    lanes = _divisor(size, (vw, 2)) if vw > 1 else None
    if lanes is not None and _try(k, Opt(OptOps.UNROLL, len(k.reduce_axes) - 1, lanes)):
        size //= lanes
    # enough vectors per work-item (16) that the loads, not the tree across the group, dominate; neighbouring
    # outputs fill the rest of the work-group (`_gpu` adds LOCAL on them)
    amt = next((g for g in (256, 128, 64, 32) if size % g == 0 and size >= _GPU_ROW_STEPS * g), None)
    amt = amt or _divisor(size, (32, 16, 8))
    if amt is None or not _try(k, Opt(OptOps.GROUP, len(k.reduce_axes) - 1, amt)):
        return 1
    return amt


def _gpu_strided_reduce(k: Kernel) -> None:
    """A reduction across rows (a column sum) with few outputs: its rows are split across a work-group (each
    work-item takes a block of rows; the output axis stays contiguous between neighbours)."""
    outputs = prod(s for s in (_size(r) for r in k.output_axes) if isinstance(s, int))
    reduce_size = prod(s for s in (_size(r) for r in k.reduce_axes) if isinstance(s, int))
    if outputs <= 2048 and reduce_size >= 256 and k.renderer is not None and k.renderer.has_shared:
        amt = _divisor(_size(k.reduce_axes[-1]), (32, 16, 8, 4))
        if amt is not None:
            _try(k, Opt(OptOps.GROUPTOP, len(k.reduce_axes) - 1, amt))
