"""Kernel fusion: which nodes of a tensor graph are computed into buffers (*realize points*), and the kernel that
computes each of them. `tinycore.engine.schedule.schedule_graph` runs the steps in order; the rules are in
`docs/pipeline.md` and the `tinycore.engine.schedule` docstring.

- `simplify`: the ``schedule:early`` rewrite pass (drop ``DETACH``, fold no-op movement ops, ``CONTIGUOUS`` of a
  buffer, copies to the same device or of constants);
- `FusionGraph.find_realize_points`: outputs, ``CONTIGUOUS``, ``ASSIGN``, ``COPY``, and reduces that must not be
  recomputed (broadcast or reduced again, needed by two kernels), except the *row reduces* that stay in their
  consumer on CPU-style devices (`FusionGraph._row_reduces`), and costly values broadcast into a reduce
  (`FusionGraph._mark_broadcast_into_reduce`); everything else is fused into the kernels that use it;
- `FusionGraph.assign_slots`: a buffer slot per realize point (an ASSIGN writes its target's);
- `FusionGraph.order`: dependencies, read-before-assign included;
- `FusionGraph.group_outputs`: multi-output kernels (same device and shape, a common input, independent);
- `FusionGraph.kernel`: each kernel's AST (the ``schedule:kernel_ast`` pass), ``SINK(STORE(target, value), ...)``
  with ``LOAD(DEFINE_GLOBAL)`` inputs;
- `FusionGraph.output`: how each requested output is seen in its buffer.
"""

from __future__ import annotations

from typing import Any

from tinycore.device import renderer_setting
from tinycore.dtype import DType, dtypes
from tinycore.engine.realized import device_node
from tinycore.engine.schedule_cache import KeyWalk, OutputView, schedule_stats
from tinycore.engine.views import (
    flat_view,
    fold_view,
    is_symbolic_arg,
    plain_buffer,
    strip_binds,
    strip_reshapes,
    view_base,
)
from tinycore.helpers import FUSE_ROWS, prod
from tinycore.uop.ops import GroupOp, Ops, UOp
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite

__all__ = ["FusionGraph", "pm_early", "pm_kernel_ast", "simplify"]

# ---------------------------------------------------------------------------------------------------------------
# the early rewrite pass (tensor level)


def _noop_movement(x: UOp) -> UOp | None:
    src = x.src[0]
    if x.op is Ops.RESHAPE or x.op is Ops.EXPAND:
        return src if tuple(x.arg) == src.shape else None
    if x.op is Ops.PERMUTE:
        return src if tuple(x.arg) == tuple(range(len(x.arg))) else None
    if x.op is Ops.PAD:
        return src if all(b == 0 and a == 0 for b, a in x.arg) else None
    if x.op is Ops.SHRINK:
        return src if all(b == 0 and e == s for (b, e), s in zip(x.arg, src.shape)) else None
    return src if not any(x.arg) else None  # FLIP


def _contiguous_of_buffer(x: UOp) -> UOp | None:
    return x.src[0] if plain_buffer(x.src[0]) is not None else None


def _copy_same_device(x: UOp) -> UOp | None:
    return x.src[0] if x.src[0].device == x.src[1].arg else None


_CONSTANT_OPS = GroupOp.Movement | GroupOp.Elementwise | {Ops.CONST, Ops.IOTA, Ops.DEVICE}


def _copy_of_constant(x: UOp) -> UOp | None:
    """A COPY of a value computed from constants only (a broadcast scalar, IOTA math) is that value built on the
    target device: nothing to copy (a bare CONST could not even get a source buffer)."""
    src, target = x.src
    nodes = src.toposort()
    if any(n.op not in _CONSTANT_OPS for n in nodes):
        return None
    return src.substitute({n: target for n in nodes if n.op is Ops.DEVICE})


pm_early = PatternMatcher(
    [
        (UPat((Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), src=(UPat.var("x"),)), lambda x: x),
        (
            UPat(Ops.RESHAPE, src=(UPat(Ops.RESHAPE, name="inner"),), name="x"),
            lambda x, inner: inner.src[0].reshape(x.arg),
        ),
        (UPat(GroupOp.Movement, name="x"), _noop_movement),
        (UPat(Ops.CONTIGUOUS, src=(UPat(Ops.CONTIGUOUS, name="c"),)), lambda c: c),
        (UPat(Ops.CONTIGUOUS, name="x"), _contiguous_of_buffer),
        (UPat(Ops.COPY, name="x"), _copy_same_device),
        (UPat(Ops.COPY, name="x"), _copy_of_constant),
    ],
    name="schedule:early",
)


def _rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False) -> UOp:
    schedule_stats.rewrite_passes += 1
    return graph_rewrite(sink, pm, ctx=ctx, bottom_up=bottom_up, name=pm.name)


def simplify(sink: UOp) -> UOp:
    """The ``schedule:early`` pass over a `SINK` of tensor-level uops (`pm_early`)."""
    return _rewrite(sink, pm_early)


# ---------------------------------------------------------------------------------------------------------------
# kernel ASTs


class _AstCtx:
    """Per-kernel state of the `schedule:kernel_ast` pass: which nodes become loads, and the kernel's slots."""

    def __init__(self, sched: FusionGraph, root: UOp, out_slot: int):
        self.sched, self.root = sched, root
        self.slots: list[int] = [out_slot]

    def global_for(self, slot: int) -> UOp:
        """DEFINE_GLOBAL of this kernel for `slot` (appended to the kernel's buffers on first use)."""
        if slot not in self.slots:
            self.slots.append(slot)
        device, size, dtype = self.sched.slot_spec(slot)
        return UOp.define_global(self.slots.index(slot), dtype, size)

    def load_for(self, x: UOp) -> UOp | None:
        """The LOAD (through the right view) replacing a BUFFER or an other kernel's output inside this kernel."""
        if x is self.root:
            return None
        sched = self.sched
        if x.op is Ops.BUFFER:
            return _load(self.global_for(sched.walk.slot_of[x]))
        if x not in sched.slot_of_point:
            return None
        return sched.point_view(x, lambda slot: _load(self.global_for(slot)))


def _load(dg: UOp) -> UOp:
    return UOp(Ops.LOAD, dg.dtype.base, (dg,))


def _unbind_arg(x: UOp) -> UOp | None:
    if not is_symbolic_arg(x.arg):
        return None
    stripped = strip_binds(x.arg, {})
    return x.replace(arg=stripped) if stripped != x.arg else None


def _kernel_iota(x: UOp) -> UOp:
    """A tensor-level IOTA as it appears in a kernel AST: no DEVICE source, a symbolic size unbound."""
    return UOp(Ops.IOTA, x.dtype, (), strip_binds(x.arg, {}))


pm_kernel_ast = PatternMatcher(
    [
        (UPat(name="x"), lambda ctx, x: ctx.load_for(x)),
        (UPat(Ops.CONST, src=(UPat(Ops.DEVICE),), name="c"), lambda c: UOp(Ops.CONST, c.dtype, (), c.arg)),
        (UPat(Ops.IOTA, src=(UPat(Ops.DEVICE),), name="x"), lambda x: _kernel_iota(x)),
        (UPat(Ops.BIND, name="b"), lambda b: b.src[0]),
        (UPat((Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), src=(UPat.var("x"),)), lambda x: x),
        (UPat(GroupOp.Movement, name="x"), _unbind_arg),
    ],
    name="schedule:kernel_ast",
)


# ---------------------------------------------------------------------------------------------------------------
# the fusion graph (cache misses only)


class FusionGraph:
    """One graph being scheduled: the simplified `sink` of the requested outputs, its nodes in topological order
    with their consumers, and (as the steps run, see the module docstring) its realize points, their buffer slots
    and the kernels computing them. `walk` is the graph's `KeyWalk` (input buffers by slot)."""

    def __init__(self, sink: UOp, walk: KeyWalk):
        self.walk = walk
        self.roots: tuple[UOp, ...] = sink.src
        self.topo = list(sink.toposort(gate=lambda _: True))  # uncached: a cached toposort keeps the graph alive
        self.consumers: dict[UOp, list[UOp]] = {u: [] for u in self.topo}
        for u in self.topo:
            for s in u.src:
                self.consumers[s].append(u)
        self.points: dict[UOp, None] = {}  # realize points, in the order they were found
        self.slot_of_point: dict[UOp, int] = {}
        self.new_specs: list[tuple[str, int, DType]] = []
        self.deps: dict[UOp, set[UOp]] = {}  # point -> the points it runs after (set by `order`)

    # ----- realize points

    def _mark(self, u: UOp) -> None:
        if u.op not in _LEAVES:
            self.points[u] = None

    def find_realize_points(self) -> None:
        """Step 3: find the realize points (`points`), the nodes computed into buffers of their own."""
        points = self.points
        for r in self.roots:
            self._mark(_output_point(r))
        for u in self.topo:
            if u.op in (Ops.CONTIGUOUS, Ops.ASSIGN):
                self._mark(u)
            elif u.op is Ops.COPY:
                self._mark(u)
                src = strip_reshapes(u.src[0])
                if src.op is not Ops.BUFFER:
                    self._mark(src)
        # a value holding a reduce that is broadcast or reduced again is computed once, into its own buffer
        feeds: dict[UOp, bool] = {}
        for u in reversed(self.topo):
            feeds[u] = u not in points and any(
                c.op is Ops.REDUCE_AXIS
                or (c.op is Ops.EXPAND and tuple(c.arg) != u.shape)
                or (c.op in GroupOp.Movement and feeds[c])
                for c in self.consumers[u]
            )
        # ... unless every reduce inside it is a row reduce that stays in its consumer (and it feeds no other reduce)
        rows = self._row_reduces() if FUSE_ROWS.value else set()
        has_reduce: dict[UOp, bool] = {}
        only_rows: dict[UOp, bool] = {}  # every unrealized reduce inside u is a row reduce
        for u in self.topo:
            flag = u.op is Ops.REDUCE_AXIS or any(has_reduce[s] and s not in points for s in u.src)
            inner = [s for s in u.src if has_reduce[s] and s not in points]
            only_rows[u] = (u in rows if u.op is Ops.REDUCE_AXIS else True) and all(only_rows[s] for s in inner)
            stays = bool(rows) and only_rows[u]
            stays = stays and all(c.op is not Ops.REDUCE_AXIS or c in rows for c in self.consumers[u])
            has_reduce[u] = flag
            if flag and feeds[u] and u.op not in GroupOp.Movement and not stays:
                # a broadcast product (a layernorm's rows times a weight): its reduce-holding operand, not the
                # product, is what gets computed once
                for value in self._broadcast_row_values(u, has_reduce) or [u]:
                    self._mark(value)
        # an ASSIGN whose value reads the target buffer through another view: compute the value first
        for u in self.topo:
            if u.op is Ops.ASSIGN and self._assign_hazard(u):
                self._mark(u.src[1])
        # a value holding a reduce that several kernels need is computed once
        groups: dict[UOp, set[UOp]] = {}
        for u in reversed(self.topo):
            g: set[UOp] = set()
            for c in self.consumers[u]:
                if c in points:
                    g.add(c)
                elif c.op is not Ops.SINK:
                    g |= groups[c]
            if len(g) > 1 and has_reduce[u] and u not in points and u.op not in GroupOp.Movement:
                inner = self._unrealized_reduces(u)
                if inner and all(r in rows for r in inner):  # the row reduces once; the cheap rest in each kernel
                    for r in inner:
                        self._mark(r)
                elif inner:
                    self._mark(u)
            groups[u] = g
        self._mark_broadcast_into_reduce()

    def _unrealized_reduces(self, u: UOp) -> list[UOp]:
        """The REDUCE_AXIS nodes `u` computes itself (not below a realize point)."""
        found: list[UOp] = []
        seen: set[UOp] = set()
        stack = [u]
        while stack:
            n = stack.pop()
            if n in seen or (n is not u and n in self.points):
                continue
            seen.add(n)
            if n.op is Ops.REDUCE_AXIS:
                found.append(n)
            stack.extend(n.src)
        return found

    def _row_reduces(self) -> set[UOp]:
        """Reduces that stay in the kernel consuming them: over the last axis of a value whose rows the device's
        renderer fuses (`tinycore.renderer.Renderer.fuses_row`: at most ``row_reduce_bytes`` long, and on a GPU-style
        renderer split over one work-group), with results only broadcast back over those rows. Such a kernel
        (softmax, layernorm) reads each row from memory once."""
        out: set[UOp] = set()
        fits: dict[Any, Any] = {}  # device -> its renderer's `fuses_row` (None: no renderer to ask)
        # passes[u]: the longest chain of row reduces that computing u in one kernel runs one after the other
        passes: dict[UOp, int] = {}
        for u in self.topo:
            passes[u] = max((passes[s] for s in u.src if s not in self.points), default=0)
            if u.op is Ops.REDUCE_AXIS:
                passes[u] = 0  # set below when it stays fused; any other reduce becomes its own kernel
            if u.op is not Ops.REDUCE_AXIS or not u.src[0].shape:
                continue
            shape = u.src[0].shape
            last = len(shape) - 1
            if tuple(u.arg[1]) != (last,) or not isinstance(shape[last], int) or shape[last] <= 1:
                continue
            device = u.device
            if device not in fits:
                fits[device] = renderer_setting(device, "fuses_row", None)
            if fits[device] is None or not fits[device](shape[last], max(u.dtype.itemsize, u.src[0].dtype.itemsize)):
                continue
            # the result may pass through reshapes and row-sized elementwise ops (``log(sum)``, ``rsqrt(var +
            # eps)``) but must end broadcast back over the rows it reduced: the EXPAND goes from the reduce's own
            # shape (reshapes between are then the identity) to its input's. A broadcast along another axis that
            # only happens to give the same shape (``(h @ w) @ w2`` with square matrices) would recompute the
            # whole reduce for every element it adds: cost growing with the depth of the graph.
            ok, stack, row_elems = True, list(self.consumers[u]), prod(u.shape)
            while stack and ok:
                c = stack.pop()
                if c.op is Ops.RESHAPE or (c.op in GroupOp.Elementwise and prod(c.shape) == row_elems):
                    stack.extend(self.consumers[c])
                elif c.op is Ops.EXPAND:
                    ok = tuple(c.arg) == tuple(shape) and tuple(c.src[0].shape) == tuple(u.shape)
                else:
                    ok = False
            if ok and self.consumers[u]:
                out.add(u)
                passes[u] = (passes[u.src[0]] if u.src[0] not in self.points else 0) + 1
                if passes[u] > _MAX_ROW_PASSES:
                    # a stack of row functions (softmax of a softmax...): each later pass would recompute every
                    # layer before it, cost quadratic in depth. The earlier passes' result is realized instead: where
                    # it is broadcast into this reduce's input (a layernorm feeding a matmul: the normalized rows,
                    # never the matmul's broadcast product), else the value the reduce reads.
                    for value in self._broadcast_row_values(u.src[0], passes) or [view_base(u.src[0])]:
                        self._mark(value)
                    passes[u] = 1
        return out

    def _broadcast_row_values(self, value: UOp, passes: dict[UOp, Any]) -> list[UOp]:
        """The values carrying row passes (or reduces: `passes` is true for them) that `value`'s kernel broadcasts
        along a new axis into `value` (the operands of a product, as a layernorm's rows feeding a matmul): what to
        realize so that a broadcast product is never the thing computed once. Broadcasts of a row reduce back over
        its row are looked through."""
        found: list[UOp] = []
        stack, seen = [value], set()
        while stack:
            n = stack.pop()
            if n in seen or (n is not value and n in self.points) or not passes.get(n, 0):
                continue
            seen.add(n)
            grown = [i for i, (a, b) in enumerate(zip(n.src[0].shape, n.shape)) if a != b] if n.op is Ops.EXPAND else []
            if grown and grown != [len(n.shape) - 1]:  # a product's broadcast, not a row reduce's back over its row
                base = view_base(n.src[0])
                if base not in self.points and base.op not in _LEAVES and base not in found:
                    found.append(base)
                continue
            stack.extend(n.src)
        return found

    def _mark_broadcast_into_reduce(self) -> None:
        """Realize a value computed from other kernels' outputs when it is broadcast into a reduce and costs more
        than a few ops per element. Fused, the reducing kernel would recompute it for every element the broadcast
        adds (a softmax backward recomputed inside both gradient matmuls that read it: 512 times per element);
        realized, it is computed once and each use is one load. Cheap values (``relu(h)``, ``h + b``) and values
        of input buffers only stay fused, so ``(x @ w + b).relu()`` and an MLP layer stay one kernel."""
        points, consumers = self.points, self.consumers
        reduced: dict[UOp, bool] = {}  # the kernel computing u's consumer reduces it
        checked: set[UOp] = set()
        # consumers first: a value marked here is a leaf for the kernels of the values it is computed from
        for u in reversed(self.topo):
            reduced[u] = any(c.op is Ops.REDUCE_AXIS or (c not in points and reduced[c]) for c in consumers[u])
            if u.op is not Ops.EXPAND or u.shape == u.src[0].shape or not reduced[u]:
                continue
            value = view_base(u)
            if value in points or value in checked or value.op in _LEAVES or value.op is Ops.ASSIGN:
                continue
            checked.add(value)
            if self._recompute_cost(value) > _RECOMPUTE_LIMIT:
                self._mark(value)

    def _recompute_cost(self, value: UOp) -> int:
        """A rough per-element cost of computing `value` in a kernel that reads it: its loads and ALU ops, a
        transcendental or division counting as several. 0 when it reads no other kernel's output (constants,
        input buffers only): such values are left fused."""
        reads_point, loads, ops = False, 0, 0
        for n in self._region(value):
            if n is not value and n in self.points:
                reads_point, loads = True, loads + 1
            elif n.op is Ops.BUFFER:
                loads += 1
            elif n.op in _EXPENSIVE_ALU:
                ops += _EXPENSIVE_COST
            elif n.op in GroupOp.ALU:
                ops += 1
        return loads + ops if reads_point else 0

    def _region(self, value: UOp) -> list[UOp]:
        """The nodes of the kernel computing `value`; other kernels' outputs are included as leaves."""
        seen: dict[UOp, None] = {}
        stack = [value]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen[n] = None
            if n is not value and n in self.points:
                continue
            stack.extend(n.src)
        return list(seen)

    def _value_of(self, p: UOp) -> UOp:
        """What kernel `p` computes (its source for CONTIGUOUS, COPY and ASSIGN)."""
        if p.op is Ops.ASSIGN:
            return p.src[1]
        return p.src[0] if p.op in (Ops.CONTIGUOUS, Ops.COPY) else p

    def _buffer_slot(self, u: UOp) -> int | None:
        """The input slot a view (movement ops over a BUFFER or an ASSIGN) reads, None for other values."""
        base = view_base(u)
        while base.op is Ops.ASSIGN:
            base = view_base(base.src[0])
        return self.walk.slot_of[base] if base.op is Ops.BUFFER else None

    def _view_signature(self, u: UOp) -> tuple[int | None, tuple[tuple[Ops, Any], ...]]:
        chain: list[tuple[Ops, Any]] = []
        while u.op in GroupOp.Movement:
            chain.append((u.op, u.arg))
            u = u.src[0]
        return self._buffer_slot(u), tuple(chain)

    def _assign_hazard(self, a: UOp) -> bool:
        """True when the value of ASSIGN `a` reads the target's buffer through a view other than the target's."""
        target, value = a.src
        slot = self._buffer_slot(target)
        if slot is None or value in self.points:
            return False
        wanted = self._view_signature(target)
        reads: list[UOp] = [value] if value.op in GroupOp.Movement or value.op in (Ops.BUFFER, Ops.ASSIGN) else []
        for n in self._region(value):
            if n.op in GroupOp.Movement or (n in self.points and n is not value):
                continue
            reads.extend(s for s in n.src if s.op in GroupOp.Movement or s.op in (Ops.BUFFER, Ops.ASSIGN))
        return any(self._buffer_slot(s) == slot and self._view_signature(s) != wanted for s in reads)

    # ----- buffers of realize points

    def slot_spec(self, slot: int) -> tuple[str, int, DType]:
        """`(device, size, dtype)` of a slot."""
        n = len(self.walk.in_bufs)
        if slot < n:
            buf = self.walk.in_bufs[slot]
            return buf.device, buf.size, buf.dtype
        return self.new_specs[slot - n]

    def _device_of(self, p: UOp) -> str:
        device = p.device
        if device is None:
            device = next(
                (
                    n.device
                    for n in self._region(self._value_of(p))
                    if n.op in (Ops.BUFFER, Ops.CONST) and n.device is not None
                ),
                None,
            )
        if device is None:
            from tinycore.device import Device

            device = Device.DEFAULT
        if isinstance(device, tuple):
            raise NotImplementedError(
                f"{p.op} on devices {device} below the top of the graph: build multi-device values through "
                "Tensor.shard, or push MULTI up first with tinycore.engine.multi.to_multi"
            )
        return device

    def assign_slots(self) -> None:
        """Give each realize point a buffer slot: an ASSIGN its target's input slot, any other a new buffer (its
        spec in `new_specs`)."""
        n_in = len(self.walk.in_bufs)
        for p in self.points:
            if p.op is Ops.ASSIGN:
                slot = self._buffer_slot(p.src[0])
                if slot is None:
                    raise RuntimeError(f"can't assign into a {view_base(p.src[0]).op} that is not a buffer")
                self.slot_of_point[p] = slot
                continue
            shape = p.shape
            if shape is None:
                raise NotImplementedError(f"can't allocate a buffer for {p.op} without a shape")
            self.slot_of_point[p] = n_in + len(self.new_specs)
            self.new_specs.append((self._device_of(p), _max_size(shape), p.dtype))

    def point_view(self, p: UOp, leaf: Any) -> UOp:
        """The value of realize point `p` read from its buffer: `leaf(slot)` (the flat buffer) through the right
        movement ops."""
        if p.op is Ops.ASSIGN:
            return self.rebase(p.src[0], leaf)
        slot = self.slot_of_point[p]
        return flat_view(leaf(slot), p.shape, self.slot_spec(slot)[1])

    def rebase(self, view: UOp, leaf: Any) -> UOp:
        """`view` (movement ops over a BUFFER or a realize point) rebuilt over `leaf(slot)`."""
        chain: list[UOp] = []
        node = view
        while node.op in GroupOp.Movement:
            chain.append(node)
            node = node.src[0]
        out = leaf(self.walk.slot_of[node]) if node.op is Ops.BUFFER else self.point_view(node, leaf)
        for m in reversed(chain):
            out = UOp(m.op, m.dtype, (out,), m.arg)
        return out

    # ----- kernels

    def kernel(self, group: list[UOp]) -> tuple[UOp, tuple[int, ...], tuple[Any, ...]]:
        """``(ast, slots, metadata)`` of the kernel computing the points of `group` (one of `group_outputs`): a
        ``SINK`` of ``STORE``s, or a ``COPY``; `slots` are the buffers bound to its ``DEFINE_GLOBAL``s."""
        return self._kernel(group[0]) if len(group) == 1 else self._multi_kernel(group)

    def computes_nothing(self, group: list[UOp]) -> bool:
        """True when the kernel of `group` has an empty output: its buffer is made, no kernel runs."""
        return self.slot_spec(self.slot_of_point[group[0]])[1] == 0

    def _kernel(self, p: UOp) -> tuple[UOp, tuple[int, ...], tuple[Any, ...]]:
        out_slot = self.slot_of_point[p]
        device, size, dtype = self.slot_spec(out_slot)
        if p.op is Ops.COPY:
            src = strip_reshapes(p.src[0])
            src_slot = self.walk.slot_of[src] if src.op is Ops.BUFFER else self.slot_of_point[src]
            ast = UOp(Ops.COPY, dtype, (UOp.define_global(1, dtype, size), device_node(device)))
            return ast, (out_slot, src_slot), ("copy",)
        ctx = _AstCtx(self, p, out_slot)
        out_global = UOp.define_global(0, dtype, size)
        if p.op is Ops.ASSIGN:
            target = self.rebase(p.src[0], lambda slot: out_global if slot == out_slot else ctx.global_for(slot))
        else:
            target = flat_view(out_global, p.shape, size)
        ast = UOp.sink(UOp(Ops.STORE, dtypes.void, (target, self._kernel_value(p, ctx))))
        return ast, tuple(ctx.slots), (p.op.name.lower(),)

    def _kernel_value(self, p: UOp, ctx: _AstCtx) -> UOp:
        """The kernel-AST value that point `p` stores (inputs become loads of `ctx`'s globals)."""
        ctx.root = p
        value = self._value_of(p)
        if value is p:  # the kernel's own root must not become a load: rewrite below it
            new_src = _rewrite(UOp.sink(*p.src), pm_kernel_ast, ctx, bottom_up=True).src
            value = p.replace(src=new_src)
            if p.op in GroupOp.Movement:
                value = _unbind_arg(value) or value
            elif p.op is Ops.IOTA:
                value = _kernel_iota(p)
        else:
            value = _rewrite(UOp.sink(value), pm_kernel_ast, ctx, bottom_up=True).src[0]
        return value

    # ----- multi-output kernels

    def _multi_kernel(self, group: list[UOp]) -> tuple[UOp, tuple[int, ...], tuple[Any, ...]]:
        """One kernel storing every point of `group` (see `group_outputs`): output i is DEFINE_GLOBAL i, the
        inputs follow; values computed from the same loads share them."""
        out_slots = [self.slot_of_point[p] for p in group]
        ctx = _AstCtx(self, group[0], out_slots[0])
        ctx.slots = list(out_slots)
        stores = []
        for i, (p, slot) in enumerate(zip(group, out_slots)):
            _, size, dtype = self.slot_spec(slot)
            target = flat_view(UOp.define_global(i, dtype, size), p.shape, size)
            stores.append(UOp(Ops.STORE, dtypes.void, (target, self._kernel_value(p, ctx))))
        return UOp.sink(*stores), tuple(ctx.slots), ("+".join(p.op.name.lower() for p in group),)

    def _groupable(self, p: UOp) -> bool:
        """Points that may share a kernel: computed values (no ASSIGN or COPY) of a concrete, non-empty shape."""
        shape = p.shape
        return (
            p.op not in (Ops.ASSIGN, Ops.COPY)
            and shape is not None
            and all(isinstance(d, int) for d in shape)
            and self.slot_spec(self.slot_of_point[p])[1] != 0
        )

    def _inputs_of(self, p: UOp) -> set[Any]:
        """What kernel `p` reads: input slots and other kernels' points."""
        out: set[Any] = set()
        for n in self._region(self._value_of(p)):
            if n.op is Ops.BUFFER:
                out.add(self.walk.slot_of[n])
            elif n in self.points and n is not p:
                out.add(n)
        return out

    def group_outputs(self, order: list[UOp]) -> list[list[UOp]]:
        """Kernels in execution order, points that group cleanly merged into one multi-output kernel: same device
        and output shape, a common input (a buffer or another kernel's output: its loads are shared), and neither
        depends on the other, so the later one can run at the earlier one's place once all its own dependencies
        ran. E.g. ``x.sum(1)`` and ``x.max(1)`` realized together, or ``x * 2`` and ``x + 1``."""
        deps = self.deps
        groups: list[list[UOp]] = []
        group_at: dict[UOp, int] = {}  # point -> index of its group
        open_groups: dict[tuple[Any, ...], list[int]] = {}  # (device, shape) -> groups that may take more members
        inputs: dict[int, set[Any]] = {}  # group -> what its kernel reads
        for p in order:
            # every dependency of a point runs in an earlier group than its own (by induction), so a group after all
            # of p's direct dependencies holds nothing p depends on, and p may run there
            key = (self.slot_spec(self.slot_of_point[p])[0], p.shape) if self._groupable(p) else None
            mine = self._inputs_of(p) if key is not None else set()
            target = None
            for gi in open_groups.get(key, ()) if key is not None else ():
                if not mine.isdisjoint(inputs[gi]) and all(group_at[d] < gi for d in deps[p]):
                    target = gi
                    break
            if target is None:
                target = len(groups)
                groups.append([])
                inputs[target] = set()
                if key is not None:
                    open_groups.setdefault(key, []).append(target)
            groups[target].append(p)
            group_at[p] = target
            inputs[target] |= mine
        return groups

    def written_slots(self) -> tuple[int, ...]:
        """The input slots that an ASSIGN of this graph writes."""
        return tuple(sorted({self.slot_of_point[p] for p in self.points if p.op is Ops.ASSIGN}))

    def output(self, r: UOp) -> OutputView | None:
        """How requested output `r` is seen in its buffer after the schedule ran (None: it needs no buffer, e.g. a
        broadcast constant)."""
        point = _output_point(r)
        if point.op is Ops.BUFFER:
            slot, fresh, view = self.walk.slot_of[point], False, r
        elif point in self.points:
            slot, fresh = self.slot_of_point[point], True
            _, size, dtype = self.slot_spec(slot)
            marker = UOp(Ops.BUFFER, dtype, (UOp.unique(-1), device_node("SCHEDULE")), size)
            view = r.substitute({point: self.point_view(point, lambda s: marker)})
        else:
            return None
        chain: list[tuple[Ops, Any]] = []
        node = fold_view(view)
        symbolic = False
        while node.op in GroupOp.Movement:
            arg = node.arg
            if is_symbolic_arg(arg):  # kept unbound: `CachedSchedule.output_uops` binds them per call
                arg, symbolic = strip_binds(arg, {}), True
            chain.append((node.op, arg))
            node = node.src[0]
        above: list[tuple[Ops, Any]] = []
        node = r
        while node is not point:
            above.append((node.op, node.arg))
            node = node.src[0]
        shape = point.shape
        fixed = shape if shape is not None and all(type(d) is int for d in shape) else None
        return OutputView(slot, fresh, tuple(reversed(chain)), len(above), tuple(above), point.op, symbolic, fixed)

    def order(self) -> list[UOp]:
        """The realize points in dependency order: producers first, and a kernel reading a buffer's old contents
        before the kernel assigning that buffer (the dependencies are kept in `deps`)."""
        points = list(self.points)
        position = {p: i for i, p in enumerate(points)}
        deps: dict[UOp, set[UOp]] = {p: set() for p in points}
        writers: dict[int, list[UOp]] = {}
        for p in points:
            if p.op is Ops.ASSIGN:
                writers.setdefault(self.slot_of_point[p], []).append(p)
        for p in points:
            value = self._value_of(p)
            # a kernel whose value is another kernel's output (CONTIGUOUS of an ASSIGN) reads that output only
            region = [value] if value is not p and value in self.points else self._region(value)
            if p.op is Ops.ASSIGN and view_base(p.src[0]).op is Ops.ASSIGN:
                region.append(view_base(p.src[0]))  # writing after an earlier ASSIGN of the same buffer
            for n in region:
                if n in self.points and n is not p:
                    deps[p].add(n)
                    if n.op is Ops.ASSIGN:  # p reads what that write left: before any later write of the buffer
                        for w in writers.get(self.slot_of_point[n], ()):
                            if w is not p and n in _earlier_writes(w):
                                deps[w].add(p)
                elif n.op is Ops.BUFFER:
                    for w in writers.get(self.walk.slot_of[n], ()):
                        if w is not p:
                            deps[w].add(p)  # p reads the contents from before the write
        order: list[UOp] = []
        done: set[UOp] = set()
        pending = sorted(points, key=position.__getitem__)
        while pending:
            ready = next((p for p in pending if deps[p] <= done), None)
            if ready is None:
                raise RuntimeError("cycle in the schedule: a kernel reads a buffer both before and after an ASSIGN")
            order.append(ready)
            done.add(ready)
            pending.remove(ready)
        self.deps = deps
        return order


def _earlier_writes(write: UOp) -> set[UOp]:
    """The ASSIGNs to the same buffer that ASSIGN `write` comes after (the chain under its target)."""
    out: set[UOp] = set()
    node = view_base(write.src[0])
    while node.op is Ops.ASSIGN:
        out.add(node)
        node = view_base(node.src[0])
    return out


_LEAVES = frozenset({Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.DEVICE, Ops.UNIQUE})
# a value broadcast into a reduce is realized when its per-element cost is above this (see
# `FusionGraph._mark_broadcast_into_reduce`); transcendentals and divisions count `_EXPENSIVE_COST` each
_RECOMPUTE_LIMIT = 3
_MAX_ROW_PASSES = 2  # row reduces chained in one kernel: softmax (max, then sum of exp) and layernorm need two
_EXPENSIVE_COST = 4
_EXPENSIVE_ALU = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.POW})


def _output_point(r: UOp) -> UOp:
    """The node of a requested output that is computed into a buffer: the smallest node of its movement chain
    (the lowest one on ties), so `x.sum(1)` stores the reduce and `arange`'s trailing SHRINK stores only n values.
    A chain over a BUFFER or a constant needs no kernel: its base is returned."""
    chain = [r]
    while chain[-1].op in GroupOp.Movement:
        chain.append(chain[-1].src[0])
    base = chain[-1]
    if base.op in _LEAVES or base.op is Ops.ASSIGN:
        return base
    best = base
    for node in reversed(chain[:-1]):
        size, best_size = prod(node.shape), prod(best.shape)
        if isinstance(size, int) and isinstance(best_size, int) and size < best_size:
            best = node
    return best


def _max_size(shape: tuple[Any, ...]) -> int:
    """Elements of a buffer holding a value of `shape`: symbolic dimensions at their variables' maximum, so one
    buffer size (and one cached schedule) serves every value in range."""
    size = prod(shape)
    if isinstance(size, UOp):
        size = size.vmax
    if not isinstance(size, int):
        raise NotImplementedError(f"can't size a buffer for shape {shape}")
    return size
