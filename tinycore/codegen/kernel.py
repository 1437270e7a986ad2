"""Kernel axes and optimizations: the hook points of the kernel optimizer.

A `Kernel` wraps a lowered kernel (see `tinycore.codegen.lowerer.lower_ast`): its *axes* are the RANGE UOps of the
graph, each with a size and an `AxisType`. Most optimizations (`Opt`) are **axis splits**: `Kernel.shift_to`
replaces a range ``r`` of size ``n`` by ``r_outer * amount + r_new`` (or ``r_new * (n // amount) + r_outer`` with
``top=True``) where ``r_new`` has the new axis type; the rest of the graph is untouched, so no lowering is redone.
The passes of `tinycore.codegen.passes.lower_kernel` then turn axis types into code:

=================  ==============================================================================================
axis type          becomes
=================  ==============================================================================================
``LOOP``           a loop; on a renderer with ``has_local`` (GPU style) a ``GLOBAL`` axis instead
``GLOBAL``         a ``SPECIAL("gidxN")`` group id (at most 3; extra outer axes are merged into the last one)
``LOCAL``          a ``SPECIAL("lidxN")`` local id
``GROUP_REDUCE``   a local id; the partial reduce goes through shared memory (``DEFINE_LOCAL`` + ``BARRIER``),
                   then every lane reduces the group's partials serially and lane 0 stores
``REDUCE``         a loop around a ``DEFINE_REG`` accumulator
``UPCAST``         (output axis) vector lanes (renderers with ``supports_float4``, `tinycore.codegen.expander`), or
                   unrolled copies of the stores
``UNROLL``         (reduce axis) vector lanes folded into the reduced value, or unrolled scalar copies
``THREAD``         (CPU-style devices) the outer part of an output axis becomes ``SPECIAL("core_id")``, one per
                   native thread; ``global_size[0]`` is the number of threads
=================  ==============================================================================================

Launch convention: ``global_size`` is the number of work-groups per dimension (``gidxN`` in ``[0, global_size[N])``)
and ``local_size`` the work-items per group (``lidxN``); ``gidx0``/``lidx0`` are the innermost (fastest) axes.

Which axis `Opt.axis` names:

- ``LOCAL``/``UPCAST``/``THREAD``: an index into `Kernel.output_axes` (``LOOP``/``GLOBAL`` ranges);
- ``GROUP``/``GROUPTOP``/``UNROLL``: an index into `Kernel.reduce_axes` (``REDUCE`` ranges);
- ``GROUPLOCAL``: an index into `Kernel.reduce_axes`; ``arg`` an index into the kernel's ``LOCAL`` axes
  (``Kernel.axes_of(AxisType.LOCAL)``): the reduce axis is split by that local axis's size and its inner part *is*
  that local axis, so the lanes that compute a row's outputs also share its reduction (a GPU row kernel: softmax,
  layernorm). Each lane reduces its part, the parts meet through warp shuffles and shared memory like ``GROUP``'s,
  and every lane gets the total, so the reduced value must not vary along the local axis (refused otherwise).
  Several reduces may share one local axis, each in its turn;
- ``PADTO``: an index into ``output_axes + reduce_axes``; ``arg`` is the multiple to pad the axis size up to. On a
  reduce axis the extra iterations are masked (loads gated, reduced values replaced by the reduce identity). On an
  output axis only the stores are gated: the extra lanes compute values nobody keeps, so a global load whose
  address stays inside its buffer reads there unmasked (a matmul's zero-padded column panels: whole-vector loads
  in the inner loop) and any other reads the last real lane's address (the padded range clamped to ``size - 1``),
  except that for a renderer with masked access a load contiguous along the padded axis is gated instead (one
  masked vector load); local memory stays gated;
- ``OVERLAP``: an index into `Kernel.output_axes`; ``arg`` is ``(multiple, block)``: the axis is padded up to a
  multiple of ``multiple`` like ``PADTO``, but instead of masking the extra elements, each block of ``block``
  consecutive indices that would run past the end is shifted back to end at the last element (index ``i`` becomes
  ``i - max(0, (i // block) * block + block - size)``), so it recomputes and stores again elements of the block
  before it, with the same values. Nothing is gated and the addresses stay affine in the lanes of a later
  ``UPCAST`` (``block`` a multiple of it); with ``block`` one THREAD split's share, the shift depends on the thread
  id only and two threads may store the same values to the shared elements. Refused when the kernel reads a buffer
  it stores (the repeated block would see its own writes);
- ``SWAP``: output axes ``axis`` and ``arg`` exchange their loop nesting (their axis ids);
- ``TILE``: output axis ``axis`` becomes an outer loop over tiles and an inner loop of ``arg`` iterations nested
  right inside it (a new ``LOOP`` axis, last in `Kernel.output_axes`); with ``SWAP`` other loops move between the
  two: cache blocking (a block of rows stays in cache while the column tiles sweep over it);
- ``TC``: ``axis`` picks one of `Kernel.tc_candidates` (a matmul-shaped reduce and its ``(i, j, k)`` axes), ``arg``
  the index of the tensor core in ``renderer.tensor_cores`` (None: the first that fits the dtypes), or a pair
  ``(index, tiles)``: each warp also computes `tiles` instruction tiles side by side along ``j`` (an ``UPCAST``
  made with the tensor core), interleaved column by column: the tile number is the fastest part of ``j``, so the
  values one lane holds for the same k in all its tiles are neighbours in memory (one vector load of B, one
  vector store of C) where tile after tile they would be a tile's width apart;
- ``STAGE``: no axis; ``arg`` k steps per stage (None: 1). After ``TC`` (and the ``UPCAST``/``LOCAL`` splits of its
  block), the tensor core's k loop is split into stages of `arg` instruction steps, and each stage's tiles of both
  operands go through shared memory: the work-group's threads copy them from global memory with coalesced loads of
  4 elements along the axis contiguous in memory (down the columns of a transposed operand); one ``BARRIER``
  before the copy, so no thread still reads the previous stage, and one after it; and the
  warps read their fragments from there instead of each gathering them from global memory. Rows are padded so a
  warp's 8-byte fragment loads hit every bank once per half-warp (A's rows 32 or 96 bytes apart modulo 128, B's
  by 4 elements: rows 4 apart land 32 bytes apart);
- ``NOLOCALS``: no axis; no local ids from now on.

``arg`` of a split is the amount (0 means the whole axis).

The passes that turn the axis types into code (the table above) are listed in order in
`tinycore.codegen.passes.KERNEL_PASSES`; this module holds the kernel-specific ones (`loops_to_globals`,
`group_reduces`, `map_launch_ids`, `pm_lower_vector_reduce`, `pm_wmma_accumulate` / `pm_wmma_fuse_accumulate`).

>>> from tinycore.dtype import dtypes
>>> from tinycore.uop.ops import UOp, Ops
>>> from tinycore.codegen.lowerer import lower_ast
>>> b0, b1 = UOp.define_global(0, dtypes.float, 4), UOp.define_global(1, dtypes.float, 64)
>>> x = UOp(Ops.LOAD, dtypes.float, (b1,)).reshape((4, 16)).r(Ops.ADD, (1,))
>>> from tinycore.runtime.python_device import PythonRenderer
>>> k = Kernel(lower_ast(UOp.sink(b0.reshape((4, 1)).store(x))), PythonRenderer())
>>> k.full_shape, [t.name for t in k.axis_types]
((4, 16), ['LOOP', 'REDUCE'])
>>> k.apply_opt(Opt(OptOps.GROUP, 0, 8)); k.full_shape, [t.name for t in k.axis_types]
((4, 2, 8), ['LOOP', 'REDUCE', 'GROUP_REDUCE'])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto
from typing import TYPE_CHECKING, Any

from tinycore.codegen.expander import affine_coefficients
from tinycore.codegen.lowerer import map_nodes, range_key, reduce_identity, scopes, substitute_ranges
from tinycore.codegen.stash import is_stash_read
from tinycore.dtype import AddrSpace, PtrDType, dtypes
from tinycore.errors import TinycoreError
from tinycore.helpers import prod
from tinycore.uop.ops import AxisType, Ops, UOp, sint, ssimplify
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite

if TYPE_CHECKING:
    from tinycore.renderer import Renderer, TensorCore

__all__ = [
    "GroupReduceCtx",
    "Kernel",
    "KernelOptError",
    "Opt",
    "OptOps",
    "RegisterCtx",
    "TCCandidate",
    "group_reduces",
    "loops_to_globals",
    "map_launch_ids",
]

OUTPUT_TYPES = (AxisType.GLOBAL, AxisType.THREAD, AxisType.LOCAL, AxisType.LOOP, AxisType.UPCAST)
REDUCE_TYPES = (AxisType.GROUP_REDUCE, AxisType.REDUCE, AxisType.UNROLL)
# membership tests use sets: AxisType/Ops define __lt__, so `in` on a tuple calls a Python-level __eq__
_REDUCE_SET = frozenset(REDUCE_TYPES)
_LOCAL_SET = frozenset({AxisType.LOCAL, AxisType.GROUP_REDUCE})
_REGISTER_PATH_OPS = frozenset({Ops.INDEX, Ops.AFTER, Ops.CAST})
TC_LANE_AXIS = 1 << 24  # axis ids of tensor-core lane axes start here: they sort after (inside) every other axis


class OptOps(Enum):
    """The kinds of kernel optimization (tinygrad's names); see the module docstring for each one's axis/arg."""

    TC = auto()
    UPCAST = auto()
    UNROLL = auto()
    LOCAL = auto()
    THREAD = auto()
    GROUP = auto()
    GROUPTOP = auto()
    GROUPLOCAL = auto()
    NOLOCALS = auto()
    PADTO = auto()
    OVERLAP = auto()
    SWAP = auto()
    TILE = auto()
    STAGE = auto()

    def __repr__(self) -> str:
        return f"OptOps.{self.name}"


@dataclass(frozen=True, order=True)
class Opt:
    """One optimization: `op` on axis `axis` (see the module docstring for how axes are counted) by `arg`.

    >>> Opt(OptOps.LOCAL, 0, 4)
    Opt(op=OptOps.LOCAL, axis=0, arg=4)
    """

    op: OptOps
    axis: int | None = None
    arg: Any = None


class KernelOptError(TinycoreError, ValueError):
    """An optimization that does not apply to this kernel (bad axis, size not divisible, over a device limit...)."""


@dataclass(frozen=True)
class TCCandidate:
    """A matmul-shaped reduce a tensor core can compute: ``red = REDUCE(ADD, a * b)`` over reduce axis `k`, where
    `a` depends on output axis `i` (rows) but not `j`, and `b` on `j` (columns) but not `i`. `din` is the dtype the
    operands have before any cast to the accumulation dtype."""

    red: UOp
    a: UOp
    b: UOp
    i: UOp
    j: UOp
    k: UOp
    din: Any


def _size(r: UOp) -> sint:
    end = r.src[0]
    return end.arg if end.op is Ops.CONST else end


def _global(index: UOp) -> bool:
    """True when `index` addresses a global buffer (not local memory or registers)."""
    dtype = index.src[0].dtype
    return isinstance(dtype, PtrDType) and dtype.addrspace is AddrSpace.GLOBAL and index.src[0].op is Ops.DEFINE_GLOBAL


def _inside(buffer: UOp, offset: UOp) -> bool:
    """True when every value `offset` can take is an element of `buffer` (a pointer of known size)."""
    size = buffer.dtype.size if isinstance(buffer.dtype, PtrDType) else -1
    lo, hi = offset.vmin, offset.vmax
    return size > 0 and isinstance(lo, int) and isinstance(hi, int) and 0 <= lo and hi < size


def _buffer(pointer: UOp) -> UOp:
    """The buffer (``DEFINE_GLOBAL``/``DEFINE_LOCAL``/register) that a pointer UOp indexes into."""
    while pointer.src and pointer.op not in (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG):
        pointer = pointer.src[0]
    return pointer


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise KernelOptError(msg)


@dataclass
class GroupReduceCtx:
    """What `group_reduces` allocates and knows: shared buffers, axis ids, the renderer's limits, the local ranges."""

    next_local: int = 0
    next_axis: int = 0
    shared_max: int = 0
    warp_size: int = 0
    local_rngs: list[UOp] = field(default_factory=list)
    scope_cache: dict[UOp, frozenset[UOp]] = field(default_factory=dict)


class Kernel:
    """A lowered kernel plus the optimizations applied to it, seen as a list of axes.

    - `sink`: the current lowered graph (RANGEs, INDEX/LOAD/STORE, kernel-level REDUCE); `base_sink`: the graph
      before any optimization (the key of searches and caches); `ast`: the kernel AST when the caller set it;
    - `rngs` / `full_shape` / `axis_types`: the axes, output axes first, each group by axis id;
    - `apply_opt(opt)` validates and applies one `Opt` (raises `KernelOptError`), recording it in `applied_opts`;
    - `tinycore.codegen.passes.lower_kernel(kernel)` turns the axes into code (launch ids, shared memory,
      registers) and linearizes it; it sets `global_size` / `local_size` (`get_optimized_sink()` runs its passes
      up to the simplified graph).
    """

    def __init__(self, sink: UOp, renderer: Renderer | None = None):
        self.sink = sink
        self.base_sink = sink
        self.ast: UOp | None = None
        self.renderer = renderer
        self.applied_opts: list[Opt] = []
        self.use_locals = bool(renderer.has_local) if renderer is not None else False
        self.has_reduce = any(u.op is Ops.REDUCE for u in sink.toposort())
        ids = [r.arg[0] for r in self.rngs if isinstance(r.arg[0], int) and r.arg[0] < TC_LANE_AXIS]
        self._next_axis = max(ids, default=-1) + 1
        self._next_lane_axis = TC_LANE_AXIS
        self.tc_elements: dict[int, int] = {}  # axis id -> size of a tensor core's per-thread element axes
        # after TC: SINK(A's row, A's k, B's k, B's column, the operands' other axes) as expressions of the current
        # axes (kept up to date by `shift_to`; None once another kind of opt rewrote the graph) and (A load, B load,
        # i, j, k, the other axes) as built
        self._tc_coords: UOp | None = None
        self._tc_operands: tuple[UOp, ...] = ()
        self.global_size: tuple[sint, ...] = (1, 1, 1)
        self.local_size: tuple[sint, ...] = (1, 1, 1)

    def copy(self) -> Kernel:
        """An independent copy (the graph is immutable, so this is cheap): for trying opts in a search."""
        k = Kernel.__new__(Kernel)
        k.__dict__.update(self.__dict__)
        k.applied_opts = list(self.applied_opts)
        return k

    # ----- the axes

    @property
    def rngs(self) -> list[UOp]:
        """Every RANGE of the kernel: output axes first, then reduce axes; by axis id within each."""
        cached = self.__dict__.get("_rngs_of")  # (sink, its ranges): asked many times per opt, walked once
        if cached is None or cached[0] is not self.sink:
            rs = [u for u in self.sink.toposort() if u.op is Ops.RANGE]
            cached = (self.sink, sorted(rs, key=lambda r: (r.arg[1] in _REDUCE_SET, range_key(r))))
            self._rngs_of = cached
        return list(cached[1])

    @property
    def full_shape(self) -> tuple[sint, ...]:
        """The size of every axis (ints, or symbolic UOps)."""
        return tuple(_size(r) for r in self.rngs)

    @property
    def axis_types(self) -> list[AxisType]:
        """The `AxisType` of every axis."""
        return [r.arg[1] for r in self.rngs]

    @property
    def output_axes(self) -> list[UOp]:
        """The output axes `LOCAL`/`UPCAST`/`THREAD` split (``LOOP`` and ``GLOBAL`` ranges)."""
        return [r for r in self.rngs if r.arg[1] is AxisType.LOOP or r.arg[1] is AxisType.GLOBAL]

    @property
    def reduce_axes(self) -> list[UOp]:
        """The reduce axes `GROUP`/`GROUPTOP`/`UNROLL` split (``REDUCE`` ranges)."""
        return [r for r in self.rngs if r.arg[1] is AxisType.REDUCE]

    def axes_of(self, *types: AxisType) -> list[UOp]:
        """The axes with one of `types`."""
        return [r for r in self.rngs if r.arg[1] in types]

    @property
    def name(self) -> str:
        """tinygrad-style display name: ``E_`` (elementwise) or ``r_`` (reduce) and the axis sizes."""
        dims = [str(s) if isinstance(s, int) else _sym_name(s) for s in self.full_shape]
        return ("r" if self.has_reduce else "E") + "".join(f"_{d}" for d in dims)

    @property
    def upcast_size(self) -> int:
        """The number of lanes of the ``UPCAST``/``UNROLL`` axes together (vector width of the widest value)."""
        return prod(s for s in (_size(r) for r in self.axes_of(AxisType.UPCAST, AxisType.UNROLL)) if isinstance(s, int))

    def _upcast_lanes(self) -> int:
        """The lanes of the widest value: the ``UPCAST``/``UNROLL`` axes together, where a tensor core's element
        axes count as their widest one (each feeds its own operand: they never multiply)."""
        sizes = [_size(r) for r in self.axes_of(AxisType.UPCAST, AxisType.UNROLL) if r.arg[0] not in self.tc_elements]
        return prod(s for s in sizes if isinstance(s, int)) * max(self.tc_elements.values(), default=1)

    def _lanes_with(self, rng: UOp) -> int:
        """The lanes a value reduced over `rng` has: the ``UPCAST`` axes times the ``UNROLL`` axes of the reduces
        that loop over `rng` (another reduce's unrolled lanes are folded before this one's loop: a one-pass
        softmax's max and sum passes don't multiply)."""
        mine = {r for u in self.sink.toposort() if u.op is Ops.REDUCE and rng in u.src[1:] for r in u.src[1:]}
        sizes = [_size(r) for r in self.axes_of(AxisType.UPCAST)]
        sizes += [_size(r) for r in self.axes_of(AxisType.UNROLL) if r in mine]
        return prod(s for s in sizes if isinstance(s, int))

    def _gather_ranges(self) -> frozenset[UOp]:
        """The ranges that reach a memory address through a loaded value (a gather: ``m[idx[i]]``): their lanes
        would need one address per lane, which vector expansion doesn't build, so they are never upcast."""
        cached = self.__dict__.get("_gathers_of")  # (sink, its gather ranges): walked once per graph, not per opt
        if cached is not None and cached[0] is self.sink:
            return cached[1]
        out: set[UOp] = set()
        for u in self.sink.toposort():
            if u.op is Ops.INDEX and len(u.src) > 1:
                for inner in u.src[1].toposort():
                    if inner.op is Ops.LOAD:
                        out |= {r for r in inner.src[0].toposort() if r.op is Ops.RANGE}
        found = frozenset(out)
        self.__dict__["_gathers_of"] = (self.sink, found)
        return found

    @property
    def buffers(self) -> list[UOp]:
        """The kernel's ``DEFINE_GLOBAL``s, by argument index."""
        return sorted({u for u in self.sink.toposort() if u.op is Ops.DEFINE_GLOBAL}, key=lambda u: u.arg)

    # ----- splitting axes

    def new_axis_id(self) -> int:
        """A fresh axis id (higher than every existing one, so new loops nest inside older ones)."""
        self._next_axis += 1
        return self._next_axis - 1

    def child_axis_id(self, rng: UOp) -> tuple[int, ...]:
        """A fresh id for an axis split off `rng`: it sorts right after `rng` and before earlier splits of `rng`
        (a later split of the outer part is the more significant one), so the lanes of upcast axes are ordered
        like the memory they index (the innermost dimension's lanes fastest)."""
        self._next_axis += 1
        return (*range_key(rng)[0], -self._next_axis)

    def shift_to(self, rng: UOp, amount: int, new_type: AxisType, top: bool = False) -> tuple[UOp, UOp]:
        """Split axis `rng` (size ``n``, divisible by `amount`) into ``(outer, new)`` where `new` has size `amount`
        and type `new_type`: ``rng = outer * amount + new`` (``top``: ``rng = new * (n // amount) + outer``)."""
        size = _size(rng)
        _check(isinstance(size, int), f"can't split the symbolic axis {rng.arg}")
        _check(amount > 0 and size % amount == 0, f"axis of size {size} is not divisible by {amount}")
        outer = UOp.range(size // amount, rng.arg[0], rng.arg[1])
        new = UOp.range(amount, self.child_axis_id(rng), new_type)
        expr = new * (size // amount) + outer if top else outer * amount + new
        kept = (outer, new)
        split = (new, size // amount) if top else (outer, amount)
        if size // amount == 1:
            expr, kept = new, (new,)
        splits = {rng: split} if size // amount > 1 else None
        self.sink = substitute_ranges(self.sink, {rng: (expr, kept)}, splits)
        if self._tc_coords is not None:
            self._tc_coords = substitute_ranges(self._tc_coords, {rng: (expr, kept)}, splits)
        return outer, new

    def _pick(self, axes: list[UOp], opt: Opt, kind: str) -> UOp:
        _check(
            isinstance(opt.axis, int) and 0 <= opt.axis < len(axes),
            f"{opt}: no {kind} axis {opt.axis} (the kernel has {len(axes)})",
        )
        return axes[opt.axis]  # type: ignore[index]

    def _amount(self, rng: UOp, opt: Opt) -> int:
        size = _size(rng)
        _check(isinstance(size, int), f"{opt}: axis has symbolic size {size}")
        amt = size if opt.arg in (0, None) else opt.arg
        _check(isinstance(amt, int) and amt > 0 and size % amt == 0, f"{opt}: axis of size {size} can't split by {amt}")
        return amt

    def apply_opt(self, opt: Opt) -> None:
        """Apply one optimization (raises `KernelOptError` when it doesn't apply; the kernel is then unchanged)."""
        saved = (self.sink, self.use_locals, self._next_axis, self._next_lane_axis, self._tc_coords)
        try:
            self._apply(opt)
        except KernelOptError:
            self.sink, self.use_locals, self._next_axis, self._next_lane_axis, self._tc_coords = saved
            raise
        if opt.op not in (OptOps.TC, OptOps.UPCAST, OptOps.LOCAL, OptOps.UNROLL, OptOps.STAGE, OptOps.NOLOCALS):
            self._tc_coords = None  # the opt rewrote the graph in a way `shift_to` doesn't track
        self.applied_opts.append(opt)

    def _apply(self, opt: Opt) -> None:  # noqa: C901 (one branch per op)
        ren = self.renderer
        if opt.op is OptOps.NOLOCALS:
            _check(not self.axes_of(AxisType.LOCAL, AxisType.GROUP_REDUCE), "NOLOCALS after local axes exist")
            self.use_locals = False
        elif opt.op is OptOps.LOCAL:
            _check(self.use_locals and ren is not None and ren.has_local, f"{opt}: the device has no local ids")
            rng = self._pick(self.output_axes, opt, "output")
            amt = self._amount(rng, opt)
            self._check_local_size(amt)
            self.shift_to(rng, amt, AxisType.LOCAL)
        elif opt.op in (OptOps.GROUP, OptOps.GROUPTOP):
            _check(
                self.use_locals and ren is not None and ren.has_local and ren.has_shared,
                f"{opt}: the device has no shared memory",
            )
            rng = self._pick(self.reduce_axes, opt, "reduce")
            amt = self._amount(rng, opt)
            self._check_local_size(amt)
            self.shift_to(rng, amt, AxisType.GROUP_REDUCE, top=opt.op is OptOps.GROUPTOP)
        elif opt.op is OptOps.GROUPLOCAL:
            self._group_local(opt)
        elif opt.op is OptOps.THREAD:
            _check(ren is not None and not ren.has_local, f"{opt}: THREAD is for CPU-style devices (no local ids)")
            _check(not self.axes_of(AxisType.THREAD), f"{opt}: the kernel already has a THREAD axis")
            rng = self._pick(self.output_axes, opt, "output")
            _check(
                not any(is_stash_read(u) and rng in u.src[0].src[1].toposort() for u in self.sink.toposort()),
                f"{opt}: the axis reads a stash that one thread fills for the whole row",
            )
            self.shift_to(rng, self._amount(rng, opt), AxisType.THREAD, top=True)
        elif opt.op is OptOps.UPCAST:
            rng = self._pick(self.output_axes, opt, "output")
            amt = self._amount(rng, opt)
            _check(amt <= 16, f"{opt}: upcast by more than 16")
            _check(self._upcast_lanes() * amt <= 256, f"{opt}: more than 256 upcast lanes in total")
            _check(rng not in self._gather_ranges(), f"{opt}: the axis picks the addresses of a gather")
            self.shift_to(rng, amt, AxisType.UPCAST)
        elif opt.op is OptOps.UNROLL:
            rng = self._pick(self.reduce_axes, opt, "reduce")
            amt = self._amount(rng, opt)
            _check(amt <= 32, f"{opt}: unroll by more than 32")
            _check(rng not in self._gather_ranges(), f"{opt}: the axis picks the addresses of a gather")
            _check(self._lanes_with(rng) * amt <= 256, f"{opt}: more than 256 upcast lanes in total")
            self.shift_to(rng, amt, AxisType.UNROLL)
        elif opt.op is OptOps.PADTO:
            self._padto(opt)
        elif opt.op is OptOps.OVERLAP:
            self._overlap(opt)
        elif opt.op is OptOps.SWAP:
            self._swap(opt)
        elif opt.op is OptOps.TILE:
            rng = self._pick(self.output_axes, opt, "output")
            amt = self._amount(rng, opt)
            _check(1 < amt < _size(rng), f"{opt}: a tile must split the axis in two loops")
            self.shift_to(rng, amt, rng.arg[1])
        elif opt.op is OptOps.TC:
            self._tensor_core(opt)
        elif opt.op is OptOps.STAGE:
            self._stage(opt)
        else:
            raise KernelOptError(f"{opt.op} is not implemented")

    def apply_opts(self, opts: list[Opt]) -> Kernel:
        """Apply `opts` in order; returns self."""
        for opt in opts:
            self.apply_opt(opt)
        return self

    def _group_local(self, opt: Opt) -> None:
        ren = self.renderer
        _check(
            self.use_locals and ren is not None and ren.has_local and ren.has_shared,
            f"{opt}: the device has no shared memory",
        )
        rng = self._pick(self.reduce_axes, opt, "reduce")
        local = self._pick(self.axes_of(AxisType.LOCAL), Opt(opt.op, opt.arg), "local")
        size, amt = _size(rng), _size(local)
        _check(isinstance(size, int) and isinstance(amt, int), f"{opt}: symbolic sizes")
        _check(size % amt == 0, f"{opt}: reduce axis of size {size} can't split by the local axis's {amt}")
        # the lanes share one total: legal only where every reduce over `rng` has the same value on all of them
        varying = [u for u in self.sink.toposort() if u.op is Ops.REDUCE and rng in u.src[1:]]
        _check(
            not any(local in u.src[0].toposort() for u in varying),
            f"{opt}: the reduced value varies along the local axis (its lanes compute different totals)",
        )
        outer = UOp.range(size // amt, rng.arg[0], rng.arg[1])
        if size // amt == 1:
            self.sink = substitute_ranges(self.sink, {rng: (local, (local,))})
        else:
            self.sink = substitute_ranges(self.sink, {rng: (outer * amt + local, (outer, local))}, {rng: (outer, amt)})

    def _check_local_size(self, extra: int) -> None:
        sizes = [_size(r) for r in self.axes_of(AxisType.LOCAL, AxisType.GROUP_REDUCE)]
        total = prod(s for s in sizes if isinstance(s, int)) * extra
        limit = prod(self.renderer.local_max) if self.renderer is not None and self.renderer.local_max else 0
        _check(total <= min(limit, 1024), f"a work-group of {total} work-items is over the limit")

    # ----- PADTO and SWAP

    def _padto(self, opt: Opt) -> None:
        axes = self.output_axes + self.reduce_axes
        rng = self._pick(axes, opt, "output or reduce")
        size = _size(rng)
        _check(isinstance(size, int), f"{opt}: axis has symbolic size {size}")
        _check(isinstance(opt.arg, int) and 1 < opt.arg <= 256, f"{opt}: pad to a multiple of 2..256")
        padded = -(-size // opt.arg) * opt.arg  # type: ignore[operator]
        _check(padded != size, f"{opt}: axis of size {size} is already a multiple of {opt.arg}")
        _check(padded <= 2 * size, f"{opt}: padding {size} to {padded} more than doubles the work")
        new = UOp.range(padded, rng.arg[0], rng.arg[1])
        valid = new < size
        sink = substitute_ranges(self.sink, {rng: (new, (new,))})
        output_axis = rng.arg[1] is not AxisType.REDUCE
        clamped = new.minimum(size - 1)
        stored = {u.src[0] for u in sink.toposort() if u.op is Ops.STORE}
        masked = self.renderer is not None and self.renderer.masked_access

        def uses(u: UOp) -> bool:
            return new in u.toposort()

        def gate(u: UOp, src: tuple[UOp, ...]) -> UOp | None:
            if u.op is Ops.INDEX and isinstance(u.dtype, PtrDType) and any(uses(s) for s in src[1:]):
                if output_axis and _global(u) and u not in stored:
                    if _inside(src[0], src[1]):
                        return None  # extra lanes read real memory; their results are never stored
                    if not (masked and affine_coefficients(src[1], [new]) == [1]):
                        # reads the last real lane instead: no branch, and a load along another axis stays one load
                        return u.replace(src=(src[0], *(s.substitute({new: clamped}) for s in src[1:])))
                    # contiguous along the padded axis: a masked vector load where the renderer has one
                g = valid if len(src) == 2 else src[2] & valid
                return u.replace(src=(src[0], src[1], g))
            if u.op is Ops.LOAD and len(src) == 1 and src[0].op is Ops.INDEX and len(src[0].src) == 3:
                if len(u.src[0].src) == 2:  # the INDEX just got a gate: loads need an alt value
                    return u.replace(src=(src[0], UOp.const(u.dtype, 0)))
            if u.op is Ops.REDUCE and new in src[1:]:
                ident = UOp.const(u.dtype, reduce_identity(u.arg, u.dtype))
                return u.replace(src=(valid.where(src[0], ident), *src[1:]))
            return None

        self.sink = map_nodes(sink, gate)

    def _overlap(self, opt: Opt) -> None:
        rng = self._pick(self.output_axes, opt, "output")
        size = _size(rng)
        _check(isinstance(size, int), f"{opt}: axis has symbolic size {size}")
        arg = opt.arg
        _check(
            isinstance(arg, tuple) and len(arg) == 2 and all(isinstance(a, int) for a in arg),
            f"{opt}: arg is (multiple, block)",
        )
        multiple, block = arg
        _check(1 < multiple <= 256, f"{opt}: pad to a multiple of 2..256")
        padded = -(-size // multiple) * multiple  # type: ignore[operator]
        _check(padded != size, f"{opt}: axis of size {size} is already a multiple of {multiple}")
        _check(padded <= 2 * size, f"{opt}: padding {size} to {padded} more than doubles the work")
        _check(1 < block <= size and padded % block == 0, f"{opt}: blocks of {block} don't tile {padded} in {size}")
        nodes = self.sink.toposort()
        # a stash (register array) is filled before the loop that reads it: a block done twice reads it again
        stored = {_buffer(u.src[0]) for u in nodes if u.op is Ops.STORE} - {u for u in nodes if u.op is Ops.DEFINE_REG}
        loaded = {_buffer(u.src[0]) for u in nodes if u.op is Ops.LOAD}
        _check(
            not stored & loaded, f"{opt}: the kernel reads a buffer it stores (a block done twice would see its writes)"
        )
        new = UOp.range(padded, rng.arg[0], rng.arg[1])
        shifted = new - ((new // block) * block + (block - size)).maximum(0)
        self.sink = substitute_ranges(self.sink, {rng: (shifted, (new,))})

    def _swap(self, opt: Opt) -> None:
        axes = self.output_axes
        a = self._pick(axes, opt, "output")
        _check(isinstance(opt.arg, int) and 0 <= opt.arg < len(axes) and opt.arg != opt.axis, f"{opt}: bad arg")
        b = axes[opt.arg]
        a2, b2 = UOp.range(_size(a), b.arg[0], a.arg[1]), UOp.range(_size(b), a.arg[0], b.arg[1])
        self.sink = substitute_ranges(self.sink, {a: (a2, (a2,)), b: (b2, (b2,))})

    # ----- tensor cores

    def tc_candidates(self, tc: TensorCore | None = None) -> list[TCCandidate]:
        """Matmul-shaped reduces whose operands (after dropping casts to the accumulation dtype) have the tensor
        core's input dtype and whose result has its output dtype (any dtypes when `tc` is None). Innermost axes
        first."""
        out: list[TCCandidate] = []
        outputs = self.output_axes
        for red in (u for u in self.sink.toposort() if u.op is Ops.REDUCE and u.arg is Ops.ADD):
            value, gate = red.src[0], None
            if value.op is Ops.WHERE and value.src[2].op is Ops.CONST and value.src[2].arg == 0:
                gate, value = value.src[0], value.src[1]  # a padded reduce axis (PADTO): gate one operand
            if value.op is not Ops.MUL:
                continue
            a, b = value.src
            if gate is not None:
                a = a.replace(src=(gate.where(a.src[0], 0),)) if a.op is Ops.CAST else gate.where(a, 0)
            if a.op is Ops.CAST and b.op is Ops.CAST and a.src[0].dtype == b.src[0].dtype:
                din = a.src[0].dtype
            elif a.dtype == b.dtype:
                din = a.dtype
            else:
                continue
            if tc is not None and (din != tc.dtype_in or red.dtype != tc.dtype_out):
                continue
            ta, tb = a.toposort(), b.toposort()
            ks = [r for r in red.src[1:] if r.arg[1] is AxisType.REDUCE and r in ta and r in tb]
            is_ = [r for r in outputs if r in ta and r not in tb]
            js = [r for r in outputs if r in tb and r not in ta]
            for k in reversed(ks):
                for i in reversed(is_):
                    for j in reversed(js):
                        out.append(TCCandidate(red, a, b, i, j, k, din))
        return out

    def _tensor_core(self, opt: Opt) -> None:
        ren = self.renderer
        _check(ren is not None and bool(ren.tensor_cores), f"{opt}: the renderer declares no tensor cores")
        assert ren is not None
        _check(self.use_locals and ren.has_local, f"{opt}: tensor cores need local ids")
        _check(ren.supports_float4, f"{opt}: tensor cores need vector support")
        _check(not self.axes_of(AxisType.LOCAL, AxisType.GROUP_REDUCE), f"{opt}: apply TC before LOCAL/GROUP")
        index, tiles = opt.arg if isinstance(opt.arg, tuple) else (opt.arg, 1)
        _check(isinstance(tiles, int) and 1 <= tiles <= 16, f"{opt}: tiles along j must be 1..16")
        choices = list(range(len(ren.tensor_cores))) if index in (None, -1) else [index]
        _check(all(isinstance(c, int) and 0 <= c < len(ren.tensor_cores) for c in choices), f"{opt}: no such TC")
        for choice in choices:
            tc = ren.tensor_cores[choice]
            cands = self.tc_candidates(tc)
            if not isinstance(opt.axis, int) or not 0 <= opt.axis < len(cands):
                continue
            cand = cands[opt.axis]
            n, m, kk = tc.dims
            si, sj, sk = _size(cand.i), _size(cand.j), _size(cand.k)
            if not all(isinstance(s, int) for s in (si, sj, sk)) or si % m or sj % (n * tiles) or sk % kk:  # type: ignore[operator]
                continue
            self._check_local_size(tc.threads)
            self._build_tc(cand, tc, tiles)
            return
        raise KernelOptError(f"{opt}: no tensor core fits this kernel (dtypes, matmul shape or divisibility)")

    def _build_tc(self, cand: TCCandidate, tc: TensorCore, tiles: int = 1) -> None:
        n, m, kk = tc.dims
        ea, eb, ec = tc.elements_per_thread

        def part(r: UOp, amount: int) -> UOp:
            size = _size(r)
            return UOp.range(size // amount, r.arg[0], r.arg[1]) if size // amount > 1 else UOp.const(r.dtype, 0)  # type: ignore[operator]

        i_o, j_o, k_o = part(cand.i, m), part(cand.j, n * tiles), part(cand.k, kk)
        # the tiles along j: column c of tile u is j = j_o * n * tiles + c * tiles + u (see `OptOps.TC`)
        tile = UOp.range(tiles, self.child_axis_id(cand.j), AxisType.UPCAST) if tiles > 1 else None

        def j_of(col: UOp) -> UOp:
            return j_o * n + col if tile is None else j_o * (n * tiles) + col * tiles + tile

        lane = UOp.range(tc.threads, self._next_lane_axis, AxisType.LOCAL)
        self._next_lane_axis += 1
        elems = [UOp.range(cnt, self.new_axis_id(), AxisType.UPCAST) if cnt > 1 else None for cnt in (ea, eb, ec)]
        self.tc_elements = {**self.tc_elements, **{e.arg[0]: e.src[0].arg for e in elems if e is not None}}

        def coord(which: int, dim: int) -> UOp:
            layout = tc.swizzle[which]
            table = {(t, e): layout[t][e][dim] for t in range(tc.threads) for e in range(len(layout[0]))}
            return _bit_affine(table, tc.threads, len(layout[0]), lane, elems[which])

        a_in, b_in = _strip_cast(cand.a, cand.din), _strip_cast(cand.b, cand.din)
        i_a, k_a, k_b, j_b = i_o * m + coord(0, 0), k_o * kk + coord(0, 1), k_o * kk + coord(1, 0), j_of(coord(1, 1))
        a_sub = a_in.substitute({cand.i: i_a, cand.k: k_a})
        b_sub = b_in.substitute({cand.k: k_b, cand.j: j_b})
        # the operands' other axes (a batch): their current expressions too, for STAGE's copy addresses
        others = sorted(
            {r for x in (a_in, b_in) for r in x.toposort() if r.op is Ops.RANGE and r not in (cand.i, cand.j, cand.k)},
            key=range_key,
        )
        self._tc_coords = UOp(Ops.SINK, dtypes.void, (i_a, k_a, k_b, j_b, *others))
        self._tc_operands = (a_in, b_in, cand.i, cand.j, cand.k, *others)

        def contract(x: UOp, e: UOp | None, cnt: int) -> UOp:
            return x if e is None else UOp(Ops.CONTRACT, x.dtype.vec(cnt), (x,), ((e.arg[0], cnt),))

        dout = tc.dtype_out
        acc0 = UOp.const(dout.vec(ec) if ec > 1 else dout, 0)
        arg = (tc.name, tc.dims, tc.threads, tc.elements_per_thread, tc.dtype_in, tc.dtype_out)
        wmma = UOp(Ops.WMMA, acc0.dtype, (contract(a_sub, elems[0], ea), contract(b_sub, elems[1], eb), acc0), arg)
        loops = [r for r in cand.red.src[1:] if r is not cand.k] + ([k_o] if k_o.op is Ops.RANGE else [])
        red = UOp(Ops.REDUCE, wmma.dtype, (wmma, *loops), Ops.ADD) if loops else wmma
        result = red if elems[2] is None else UOp(Ops.UNROLL, dout, (red,), ((elems[2].arg[0], ec),))
        sink = self.sink.substitute({cand.red: result})
        repl: dict[UOp, tuple[UOp, tuple[UOp, ...]]] = {
            cand.i: (i_o * m + coord(2, 0), (i_o,) if i_o.op is Ops.RANGE else ()),
            cand.j: (j_of(coord(2, 1)), tuple(r for r in (j_o, tile) if r is not None and r.op is Ops.RANGE)),
        }
        self.sink = substitute_ranges(sink, repl)

    # ----- STAGE: tensor-core operands through shared memory

    def _stage(self, opt: Opt) -> None:
        ren = self.renderer
        _check(ren is not None and ren.has_shared, f"{opt}: the device has no shared memory")
        assert ren is not None
        _check(self._tc_coords is not None, f"{opt}: needs TC, then only UPCAST/LOCAL splits of its block")
        _check(not any(u.op is Ops.DEFINE_LOCAL for u in self.sink.toposort()), f"{opt}: the operands are staged")
        steps = 1 if opt.arg is None else opt.arg
        _check(isinstance(steps, int) and steps >= 1, f"{opt}: k steps per stage must be a positive int")
        k_loop = [r for r in self.reduce_axes if r in self._tc_coords.src[1].toposort()]
        stage_steps: UOp | None = None
        if steps > 1:
            _check(len(k_loop) == 1 and _size(k_loop[0]) % steps == 0, f"{opt}: the k loop doesn't split by {steps}")
            _, stage_steps = self.shift_to(k_loop[0], steps, AxisType.REDUCE)
        wmmas = [u for u in self.sink.toposort() if u.op is Ops.WMMA]
        _check(len(wmmas) == 1, f"{opt}: one tensor-core instruction per kernel")
        assert self._tc_coords is not None
        locals_ = sorted(self.axes_of(AxisType.LOCAL), key=range_key)
        threads = prod(_size(r) for r in locals_)
        tid = _linear(locals_)  # the tensor core's lane axis sorts last: neighbouring lanes, neighbouring chunks
        i_a, k_a, k_b, j_b, *others_now = self._tc_coords.src
        a_in, b_in, ci, cj, ck, *others = self._tc_operands

        def in_stage(r: UOp) -> bool:  # the ranges that move within one stage's tiles
            return r is stage_steps or r.arg[1] in (AxisType.LOCAL, AxisType.UPCAST)

        def zero(e: UOp, inside: bool) -> UOp:
            rngs = [r for r in e.toposort() if r.op is Ops.RANGE and in_stage(r) == inside]
            return e.substitute({r: r.const_like(0) for r in rngs})

        # another axis of an operand (a batch) may pick the block's tile, never vary within it: one tile per stage
        _check(
            not any(in_stage(r) for e in others_now for r in e.toposort() if r.op is Ops.RANGE),
            f"{opt}: an operand varies along another axis within the work-group",
        )
        outer_axes = dict(zip(others, others_now))
        fills, reads = [], {}
        for n, (loaded, rows, cols, r_axis, c_axis) in enumerate(((a_in, i_a, k_a, ci, ck), (b_in, k_b, j_b, ck, cj))):
            index = loaded.src[0] if loaded.op is Ops.LOAD else None
            _check(
                index is not None and index.op is Ops.INDEX and len(index.src) == 2
                and index.src[0].op is Ops.DEFINE_GLOBAL,
                f"{opt}: an operand that is not a plain load of a buffer",
            )  # fmt: skip
            assert index is not None
            # chunks of 4 elements along whichever tile axis is contiguous in memory: along a row (one vector store
            # into shared memory), or down a column of a transposed operand (four scalar stores); else one by one
            along_row = affine_coefficients(index.src[1], [c_axis]) == [1]
            down = not along_row and affine_coefficients(index.src[1], [r_axis]) == [1]
            lanes = 4 if along_row or down else 1
            r_in, c_in = zero(rows, False).simplify(), zero(cols, False).simplify()
            height, width = int(r_in.vmax) + 1, int(c_in.vmax) + 1
            _check(
                (height if down else width) % lanes == 0 and height * width // lanes % threads == 0,
                f"{opt}: tile {height}x{width}",
            )
            dtype = loaded.dtype
            # A: a half-warp's 8-byte loads read 4 neighbouring rows; B: 4 rows 4 apart. Rows 32 or 96 bytes apart
            # modulo 128 put them in different banks (no such padding: unpadded, bank conflicts cost only time)
            apart = dtype.itemsize * (1 if n == 0 else 4)
            stride = next((w for w in range(width, width + 64, 4) if w * apart % 128 in (32, 96)), width)
            smem = UOp(Ops.DEFINE_LOCAL, dtype.ptr(height * stride, AddrSpace.LOCAL), (), n)  # group reduces: after
            r0, c0 = zero(rows, True).simplify(), zero(cols, True).simplify()
            for c in range(height * width // lanes // threads):
                chunk = tid + c * threads  # neighbouring threads take neighbouring chunks in memory
                if down:
                    row, col = chunk % (height // lanes) * lanes, chunk // (height // lanes)
                else:
                    row, col = chunk // (width // lanes), chunk % (width // lanes) * lanes
                address = index.src[1].substitute({**outer_axes, r_axis: r0 + row, c_axis: c0 + col}).simplify()
                value = UOp(Ops.LOAD, dtype.vec(lanes) if lanes > 1 else dtype, (index.src[0].index(address),))
                if down:
                    fills += [(smem, ((row + e) * stride + col).simplify(), value.gep(e)) for e in range(lanes)]
                else:
                    fills.append((smem, (row * stride + col).simplify(), value))
            current = wmmas[0].src[n].src[0] if wmmas[0].src[n].op is Ops.CONTRACT else wmmas[0].src[n]
            _check(current.op is Ops.LOAD, f"{opt}: the tensor core's operand {'AB'[n]} is not a load")
            reads[current] = (smem, (r_in * stride + c_in).simplify())
        copied = UOp(Ops.BARRIER, dtypes.void, tuple(v for _, _, v in fills))  # the previous step's reads are done
        stores = tuple(smem.after(copied).index(i).store(v) for smem, i, v in fills)
        ready = UOp(Ops.BARRIER, dtypes.void, stores)
        self.sink = self.sink.substitute(
            {ld: smem.after(ready).index(i).load(dtype=ld.dtype) for ld, (smem, i) in reads.items()}
        )

    # ----- turning axis types into code

    def get_optimized_sink(self) -> UOp:
        """The kernel graph ready for the renderer's rules and decompositions: the passes of
        `tinycore.codegen.passes.KERNEL_PASSES` up to ``simplify_kernel`` (UPCAST/UNROLL axes expanded, group
        reduces through shared memory, launch ids, REDUCEs as register accumulators, indices simplified). Sets
        `global_size` and `local_size`. The order of the passes lives in `tinycore.codegen.passes`; this is a
        shortcut for tests and tools that look at the graph before linearization."""
        from tinycore.codegen.passes import lower_kernel

        return lower_kernel(self, stop_after="simplify_kernel").sink


def loops_to_globals(sink: UOp) -> UOp:
    """On a renderer with ``has_local`` (GPU style) every ``LOOP`` axis is launched instead: it becomes ``GLOBAL``."""
    return substitute_ranges(
        sink,
        {
            r: (g := r.replace(arg=(r.arg[0], AxisType.GLOBAL)), (g,))
            for r in sink.toposort()
            if r.op is Ops.RANGE and r.arg[1] is AxisType.LOOP
        },
    )


def map_launch_ids(sink: UOp, renderer: Renderer | None) -> tuple[UOp, tuple[sint, ...], tuple[sint, ...]]:
    """``GLOBAL`` ranges become ``SPECIAL("gidxN")`` group ids, ``LOCAL``/``GROUP_REDUCE`` ranges ``SPECIAL("lidxN")``
    local ids (at most three each, extra outer ones merged), a ``THREAD`` range ``SPECIAL("core_id")``. Returns the
    graph, ``global_size`` and ``local_size`` (three entries each); raises `KernelOptError` when the renderer has
    no launch ids for them or the local size is over its ``local_max``."""
    has_local = renderer is not None and renderer.has_local
    all_rngs = sorted((u for u in sink.toposort() if u.op is Ops.RANGE), key=range_key)
    globals_ = [r for r in all_rngs if r.arg[1] is AxisType.GLOBAL]
    locals_ = [r for r in all_rngs if r.arg[1] in _LOCAL_SET]
    _check(has_local or not (globals_ or locals_), "the device has no launch ids for GLOBAL/LOCAL axes")
    mapping: dict[UOp, UOp] = {}
    threads = [r for r in all_rngs if r.arg[1] is AxisType.THREAD]
    for r in threads:  # CPU threads: one SPECIAL("core_id"), global_size[0] of them
        mapping[r] = UOp.special(_size(r), "core_id")
    gsz = _launch_ids(globals_, "gidx", mapping) if not threads else [_size(threads[0])]
    lsz = _launch_ids(locals_, "lidx", mapping)
    if renderer is not None and renderer.local_max is not None:
        for s, mx in zip(lsz, renderer.local_max):
            _check(not isinstance(s, int) or s <= mx, f"local size {lsz} is over the device's {renderer.local_max}")
    global_size = tuple(gsz) + (1,) * (3 - len(gsz))
    local_size = tuple(lsz) + (1,) * (3 - len(lsz))
    return sink.substitute(mapping), global_size, local_size


@dataclass
class RegisterCtx:
    """The registers the reduce passes allocate: the next free ``DEFINE_REG`` number."""

    next_reg: int = 0
    scope_cache: dict[UOp, frozenset[UOp]] = field(default_factory=dict)


def _vector_reduce_to_register(ctx: RegisterCtx, red: UOp) -> UOp | None:
    """A REDUCE of a vector value: an accumulator of ``count`` scalar registers, read, updated and written as one
    vector (renderers and the PYTHON interpreter treat a vector access through a scalar pointer as consecutive
    elements; C compilers keep the array in vector registers).

    The accumulator read is wrapped in a one-source AFTER so that the PYTHON interpreter, which can't yet fold
    vector accumulations over a vectorized loop, runs such loops iteration by iteration (renderers treat AFTER as
    its value)."""
    value, rngs, op = red.src[0], red.src[1:], red.arg
    if red.dtype.count == 1 or not rngs:
        return None
    outer = sorted(scopes(value, ctx.scope_cache)[value] - set(rngs), key=range_key)
    acc = UOp(Ops.DEFINE_REG, red.dtype.scalar().ptr(red.dtype.count, AddrSpace.REG), (), ctx.next_reg)
    ctx.next_reg += 1
    zero = UOp.const(dtypes.index, 0)
    init = acc.after(*outer).index(zero).store(UOp.const(red.dtype, reduce_identity(op, red.dtype)))
    ptr = acc.after(init, *rngs).index(zero)
    current = UOp(Ops.AFTER, red.dtype, (ptr.load(dtype=red.dtype),))
    update = ptr.store(current.alu(op, value))
    return acc.after(update.end(*rngs)).index(zero).load(dtype=red.dtype)


pm_lower_vector_reduce = PatternMatcher(
    [(UPat(Ops.REDUCE, name="red"), _vector_reduce_to_register)], name="lower_vector_reduce"
)


def _strip_cast(x: UOp, din: Any) -> UOp:
    return x.src[0] if x.op is Ops.CAST and x.dtype != din and x.src[0].dtype == din else x


def _bit_affine(table: dict[tuple[int, int], int], threads: int, count: int, lane: UOp, elem: UOp | None) -> UOp:
    """An index expression of (lane, element) equal to `table` at every point, affine in the bits of both (how
    tensor-core layouts are built); raises `KernelOptError` for a layout that isn't."""
    _check(threads & (threads - 1) == 0 and count & (count - 1) == 0, "tensor core sizes must be powers of two")
    c0 = table[(0, 0)]
    lane_bits = [table[(1 << b, 0)] - c0 for b in range(threads.bit_length() - 1)]
    elem_bits = [table[(0, 1 << b)] - c0 for b in range(count.bit_length() - 1)]
    for (t, e), v in table.items():
        want = (
            c0
            + sum(c for b, c in enumerate(lane_bits) if t >> b & 1)
            + sum(c for b, c in enumerate(elem_bits) if e >> b & 1)
        )
        _check(want == v, "the tensor core layout is not affine in the lane/element bits")
    expr: UOp = UOp.const(dtypes.index, c0)
    for x, coefs in ((lane, lane_bits), (elem, elem_bits)):
        if x is None:
            continue
        b = 0
        while b < len(coefs):
            if coefs[b] == 0:
                b += 1
                continue
            start = b
            while b + 1 < len(coefs) and coefs[b + 1] == 2 * coefs[b]:
                b += 1
            bits = (x // (1 << start) if start else x) % (1 << (b - start + 1))
            expr = expr + bits * coefs[start]
            b += 1
    return expr.simplify()


def _reads_accumulator(ld: UOp, p: UOp) -> bool:
    """`ld` is the read of the register `p` (maybe under the one-source ``AFTER`` that orders it after the reset)."""
    read = ld.src[0] if ld.op is Ops.AFTER and len(ld.src) == 1 else ld
    return read.op is Ops.LOAD and read.src[0] is p


def _zero_accumulator(w: UOp) -> bool:
    """The WMMA `w` adds its product to zero."""
    c = w.src[2]
    return (c.op is Ops.CONST and c.arg == 0) or (c.op is Ops.VCONST and all(v == 0 for v in c.arg))


def _wmma_accumulate(p: UOp, ld: UOp, w: UOp) -> UOp | None:
    """``acc = acc + WMMA(a, b, 0)`` -> ``acc = WMMA(a, b, acc)``."""
    if not _zero_accumulator(w) or not _reads_accumulator(ld, p) or ld.dtype != w.dtype:
        return None
    return p.store(w.replace(src=(w.src[0], w.src[1], ld)))


def _wmma_accumulate_lanes(p: UOp, ld: UOp, v: UOp) -> UOp | None:
    """The same for a block of tensor-core tiles (``UPCAST`` after ``TC``): ``acc = acc + VECTORIZE(lanes of
    WMMA_0(a0, b0, 0), lanes of WMMA_1(a1, b1, 0), ...)`` -> each ``WMMA_j`` takes its slice of `acc` as C."""
    if not _reads_accumulator(ld, p) or ld.dtype != v.dtype:
        return None
    lanes: list[UOp] = []
    while len(lanes) < len(v.src):
        start, g = len(lanes), v.src[len(lanes)]
        w = g.src[0] if g.op is Ops.GEP and g.src else None
        if w is None or w.op is not Ops.WMMA or not _zero_accumulator(w):
            return None
        count = w.dtype.count
        chunk = v.src[start : start + count]
        if [x.arg for x in chunk] != [(i,) for i in range(count)] or any(x.src[0] is not w for x in chunk):
            return None
        fused = w.replace(src=(w.src[0], w.src[1], ld.gep(tuple(range(start, start + count)))))
        lanes += [fused.gep(i) for i in range(count)]
    return p.store(UOp(Ops.VECTORIZE, v.dtype, tuple(lanes)))


pm_wmma_accumulate = PatternMatcher(
    [
        (
            UPat(
                Ops.STORE,
                src=(
                    UPat.var("p"),
                    UPat(Ops.ADD, src=[UPat((Ops.LOAD, Ops.AFTER), name="ld"), UPat(Ops.VECTORIZE, name="v")]),
                ),
            ),
            _wmma_accumulate_lanes,
        ),
        (
            UPat(
                Ops.STORE,
                src=(
                    UPat.var("p"),
                    UPat(Ops.ADD, src=[UPat((Ops.LOAD, Ops.AFTER), name="ld"), UPat(Ops.WMMA, name="w")]),
                ),
            ),
            _wmma_accumulate,
        ),
    ],
    name="wmma_accumulate",
)


def _is_register_read(x: UOp) -> bool:
    """True for the read of a register accumulator (a LOAD, maybe under a one-source AFTER, from a DEFINE_REG)."""
    if x.op is Ops.AFTER and len(x.src) == 1:
        x = x.src[0]
    if x.op is not Ops.LOAD:
        return False
    ptr = x.src[0]
    for _ in range(8):
        if ptr.op is Ops.DEFINE_REG:
            return True
        if ptr.op not in _REGISTER_PATH_OPS or not ptr.src:
            return False
        ptr = ptr.src[0]
    return False


def _fuse_accumulate(p: UOp, acc: UOp, m: UOp) -> UOp | None:
    """``acc = acc + a * b`` -> ``acc = MULACC(a, b, acc)`` for float accumulators: one fused multiply-add per
    reduce step (an FMA on CPUs: half the instructions of a dot product's inner loop, and one rounding)."""
    if not dtypes.is_float(m.dtype.scalar()) or not _is_register_read(acc) or acc.dtype != m.dtype:
        return None
    return p.store(UOp(Ops.MULACC, m.dtype, (m.src[0], m.src[1], acc)))


pm_fuse_accumulate = PatternMatcher(
    [
        (
            UPat(Ops.STORE, src=(UPat.var("p"), UPat(Ops.ADD, src=[UPat.var("acc"), UPat(Ops.MUL, name="m")]))),
            _fuse_accumulate,
        )
    ],
    name="fuse_accumulate",
)

pm_wmma_fuse_accumulate = pm_wmma_accumulate + pm_fuse_accumulate


def _sym_name(s: UOp) -> str:
    vars_ = sorted(v.arg[0] for v in s.toposort() if v.op is Ops.DEFINE_VAR)
    return vars_[0] if len(vars_) == 1 and s.op is Ops.DEFINE_VAR else "s" + "".join(vars_)


def _launch_ids(rngs: list[UOp], prefix: str, mapping: dict[UOp, UOp]) -> list[sint]:
    """Map ranges (outer to inner) to at most 3 SPECIAL ids; ``prefix0`` is the innermost. Extra outer ranges are
    merged into one id and recovered with division/modulo."""
    groups = [rngs[: len(rngs) - 2], *([r] for r in rngs[len(rngs) - 2 :])] if len(rngs) > 3 else [[r] for r in rngs]
    sizes: list[sint] = []
    for n, grp in enumerate(reversed(groups)):
        size = ssimplify(prod(_size(r) for r in grp))
        special = UOp.special(size, f"{prefix}{n}")
        sizes.append(size)
        stride: sint = 1
        for i, r in enumerate(reversed(grp)):
            e = special if isinstance(stride, int) and stride == 1 else special // stride
            mapping[r] = e if i == len(grp) - 1 else e % _size(r)
            stride = stride * _size(r)
    return sizes


def _linear(rngs: list[UOp]) -> UOp:
    out: UOp = UOp.const(dtypes.index, 0)
    for r in rngs:
        out = out * _size(r) + r
    return out


def _group_reduce(ctx: GroupReduceCtx, red: UOp) -> UOp | None:
    # a reduce over a LOCAL range (``GROUPLOCAL``) reduces across those lanes like one over a GROUP_REDUCE range
    grs = [r for r in red.src[1:] if r.arg[1] in _LOCAL_SET]
    if not grs:
        return None
    others = [r for r in red.src[1:] if r.arg[1] not in _LOCAL_SET]
    outer = scopes(red, ctx.scope_cache)[red]
    _check(
        all(r.arg[1] in (AxisType.GLOBAL, AxisType.LOCAL, AxisType.GROUP_REDUCE) for r in outer),
        "GROUP of a reduce nested inside a loop is not supported",
    )
    lanes = red.dtype.count
    partial = UOp(Ops.REDUCE, red.dtype, (red.src[0], *others), red.arg) if others else red.src[0]
    if (warps := _whole_warps(ctx, grs)) is not None:
        return _warp_group_reduce(ctx, red, grs, partial, warps)
    n_slots = prod(_size(r) for r in ctx.local_rngs) * lanes
    nbytes = n_slots * red.dtype.scalar().itemsize
    _check(nbytes <= ctx.shared_max, f"group reduce needs {nbytes} bytes of shared memory, over {ctx.shared_max}")
    lbuf = UOp(Ops.DEFINE_LOCAL, red.dtype.scalar().ptr(n_slots, AddrSpace.LOCAL), (), ctx.next_local)
    ctx.next_local += 1
    store = lbuf.index(_linear(ctx.local_rngs) * lanes).store(partial)
    barrier = UOp(Ops.BARRIER, dtypes.void, (store,))
    new = {r: UOp.range(_size(r), ctx.next_axis + i, AxisType.REDUCE) for i, r in enumerate(grs)}
    ctx.next_axis += len(grs)
    value = lbuf.after(barrier).index(_linear([new.get(r, r) for r in ctx.local_rngs]) * lanes).load(dtype=red.dtype)
    return UOp(Ops.REDUCE, red.dtype, (value, *new.values()), red.arg)


def _whole_warps(ctx: GroupReduceCtx, grs: list[UOp]) -> list[UOp] | None:
    """The innermost local ranges when they are GROUP_REDUCE ranges of this reduce (`grs`) whose lanes fill whole
    warps of ``ctx.warp_size`` (consecutive thread ids: each warp then holds lanes of one group only); None when
    the renderer has no warp shuffles or the ranges don't fill whole warps."""
    w = ctx.warp_size
    if w < 2 or w & (w - 1) or not all(isinstance(_size(r), int) for r in ctx.local_rngs):
        return None
    inner: list[UOp] = []
    lanes = 1
    for r in reversed(ctx.local_rngs):
        if lanes % w == 0 or r not in grs:
            break
        inner.insert(0, r)
        lanes *= int(_size(r))
    return inner if inner and lanes % w == 0 else None


def _warp_group_reduce(ctx: GroupReduceCtx, red: UOp, grs: list[UOp], partial: UOp, inner: list[UOp]) -> UOp:
    """A grouped reduce whose `inner` local ranges fill whole warps: each warp first reduces by XOR shuffles
    (``Ops.SHUFFLE``, every lane ends with its warp's result); when one warp is the whole group that is the result,
    else lane 0 of each warp writes one partial to shared memory and, after a barrier, every lane reduces its
    group's warp partials."""
    w = ctx.warp_size
    mask = w // 2
    while mask:
        partial = UOp(red.arg, partial.dtype, (partial, UOp(Ops.SHUFFLE, partial.dtype, (partial,), mask)))
        mask //= 2
    per_group = prod(int(_size(r)) for r in inner) // w  # warps of one group along the inner ranges
    rest = [r for r in grs if r not in inner]  # group lanes outside the warps
    if per_group == 1 and not rest:
        return partial
    lanes = red.dtype.count
    outer = [r for r in ctx.local_rngs if r not in inner]
    n_slots = prod(_size(r) for r in outer) * per_group * lanes
    nbytes = n_slots * red.dtype.scalar().itemsize
    _check(nbytes <= ctx.shared_max, f"group reduce needs {nbytes} bytes of shared memory, over {ctx.shared_max}")
    lbuf = UOp(Ops.DEFINE_LOCAL, red.dtype.scalar().ptr(n_slots, AddrSpace.LOCAL), (), ctx.next_local)
    ctx.next_local += 1
    lane = _linear(inner)
    slot = _linear(outer) * per_group + lane // w
    store = lbuf.index(slot * lanes, (lane % w).eq(0)).store(partial)
    barrier = UOp(Ops.BARRIER, dtypes.void, (store,))
    new = {r: UOp.range(_size(r), ctx.next_axis + i, AxisType.REDUCE) for i, r in enumerate(rest)}
    ctx.next_axis += len(rest)
    read = _linear([new.get(r, r) for r in outer]) * per_group
    ranges = list(new.values())
    if per_group > 1:
        ranges.append(UOp.range(per_group, ctx.next_axis, AxisType.REDUCE))
        ctx.next_axis += 1
        read = read + ranges[-1]
    value = lbuf.after(barrier).index(read * lanes).load(dtype=red.dtype)
    return UOp(Ops.REDUCE, red.dtype, (value, *ranges), red.arg)


pm_group_reduce = PatternMatcher([(UPat(Ops.REDUCE, name="red"), _group_reduce)], name="group_reduce")


def group_reduces(sink: UOp, ctx: GroupReduceCtx) -> UOp:
    """REDUCEs over GROUP_REDUCE ranges: per-lane partial reduce -> shared memory -> BARRIER -> serial reduce of
    the group's partials (with `Renderer.warp_size`, lanes filling whole warps shuffle within each warp first and
    shared memory holds one partial per warp); stores that don't depend on the group lanes are gated to lane 0."""
    ctx.local_rngs = sorted(
        (u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] in _LOCAL_SET),
        key=range_key,
    )
    group_rngs = [r for r in ctx.local_rngs if r.arg[1] is AxisType.GROUP_REDUCE]
    if not group_rngs and not any(
        u.op is Ops.REDUCE and any(r.arg[1] is AxisType.LOCAL for r in u.src[1:]) for u in sink.toposort()
    ):
        return sink
    sink = graph_rewrite(sink, pm_group_reduce, ctx=ctx, name="group_reduce_partials")
    stores = []
    for st in sink.src:
        ptr = st.src[0]
        used = ptr.toposort()
        gate = None
        for g in group_rngs:
            if g not in used:
                gate = g.eq(0) if gate is None else gate & g.eq(0)
        if gate is not None:
            full_gate = gate if len(ptr.src) == 2 else ptr.src[2] & gate
            st = st.replace(src=(ptr.replace(src=(ptr.src[0], ptr.src[1], full_gate)), st.src[1]))
        stores.append(st)
    return UOp.sink(*stores)
