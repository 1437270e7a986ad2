"""The lowering of one kernel as a recipe: `KERNEL_PASSES` lists, by name and in order, every pass that takes an
optimized `Kernel` (its opts applied, docs/pipeline.md §3) to the linearized uops of a `ProgramSpec` (§4), and
`lower_kernel` runs them. Nothing else decides the order: `program_from_kernel` and `Kernel.get_optimized_sink`
both call `lower_kernel`.

=========================  ==================================================================================
pass                       what it does
=========================  ==================================================================================
``expand``                 ``UPCAST``/``UNROLL`` axes become vector lanes (`expander.expand_vectors`, renderers
                           with ``supports_float4``) or scalar copies (`expander.expand_scalar`)
``loops_to_globals``       on a renderer with ``has_local``, ``LOOP`` axes are launched: they become ``GLOBAL``
``group_reduce``           reduces over ``GROUP_REDUCE`` axes go through shared memory (and warp shuffles)
``launch_ids``             ``GLOBAL``/``LOCAL``/``THREAD`` axes become ``SPECIAL`` ids; sets the launch sizes
``lower_vector_reduce``    a ``REDUCE`` of a vector value: a vector register accumulator (rule table)
``lower_reduce``           every other ``REDUCE``: a register accumulator and its loop
``fuse_accumulate``        ``acc + WMMA(a, b, 0)`` -> ``WMMA(a, b, acc)``; with a native ``MULACC`` also
                           ``acc + a * b`` -> ``MULACC(a, b, acc)`` (rule table)
``simplify_kernel``        symbolic simplification of the whole graph (rule table)
``extra_rules[expand]``    the renderer's own rules for the ``expand`` stage (rule table, when it has some)
``decompositions``         ops the renderer lacks (``Renderer.native_ops``) in terms of ones it has (rule table)
``extra_rules[decompose]`` the renderer's rules for the ``decompose`` stage
``check_bounds``           an index that can leave its global buffer raises IndexError (skipped with IGNORE_OOB)
``estimates``              the operation and memory counts of `tinycore.codegen.estimates`
``lower_index_dtype``      ``dtypes.index`` becomes int32 (int64 where a value range needs it, or everywhere on
                           a 64-bit-index renderer)
``extra_rules[linearize]`` the renderer's rules for the ``linearize`` stage
``linearize``              the graph as a list in execution order (`tinycore.codegen.linearize`), every buffer
                           argument kept
=========================  ==================================================================================

Each pass is a `KernelPass`: a name, the `record_stage_times` stage its time counts to, and ``run(sink, lowering)
-> sink``. A rule-table pass (`rewrite_pass`) is one `graph_rewrite` under the pass's name; the others are small
functions. Tracing shows the same names: with ``TRACK_REWRITES>=1`` every pass leaves one `RewriteTrace` named
after it in `rewrite_traces` (a rule-table pass through its rewrite; for a function pass `lower_kernel` records
one, after the traces of the rewrites it ran inside, like ``expand``'s ``expand_lanes``), and ``DEBUG>=5`` prints
a ``pass NAME`` line after each.

The renderer's ``extra_rules`` run at the end of the stages named in `REWRITE_STAGES`: ``lower`` (in
`tinycore.codegen.get_kernel`, before optimization), then ``expand``, ``decompose`` and ``linearize`` here.

>>> [p.name for p in KERNEL_PASSES][:4]
['expand', 'loops_to_globals', 'group_reduce', 'launch_ids']
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tinycore.codegen.expander import expand_scalar, expand_vectors
from tinycore.codegen.kernel import (
    GroupReduceCtx,
    Kernel,
    KernelOptError,
    RegisterCtx,
    group_reduces,
    loops_to_globals,
    map_launch_ids,
    pm_lower_vector_reduce,
    pm_wmma_accumulate,
    pm_wmma_fuse_accumulate,
)
from tinycore.codegen.lowerer import lower_reduces, simplify_sink
from tinycore.helpers import DEBUG
from tinycore.uop.ops import Ops, UOp, sint
from tinycore.uop.patterns import TRACK_REWRITES, PatternMatcher, RewriteTrace, graph_rewrite, rewrite_traces

if TYPE_CHECKING:
    from tinycore.renderer import Estimates, Renderer

__all__ = [
    "KERNEL_PASSES",
    "REWRITE_STAGES",
    "KernelLowering",
    "KernelPass",
    "apply_extra_rules",
    "lower_kernel",
    "record_stage_times",
    "rewrite_pass",
]

# the lowering stages a renderer's `extra_rules` may name: each runs its rules at the end of that stage
REWRITE_STAGES: tuple[str, ...] = ("lower", "expand", "decompose", "linearize")

# ----- stage times

# while `record_stage_times` is active: stage name -> seconds spent in it (summed over every program built)
_stage_times: dict[str, float] | None = None
_clock: Callable[[], float] = time.perf_counter


@contextlib.contextmanager
def record_stage_times(clock: Callable[[], float] = time.perf_counter) -> Iterator[dict[str, float]]:
    """Collect how long each code-generation stage takes while active: the yielded dict maps ``lower``,
    ``optimize`` (heuristics or BEAM, and applying the opts), ``expand`` (the passes of `KERNEL_PASSES` up to
    ``extra_rules[expand]``), ``decompose`` and ``linearize`` (bounds check, estimates, index dtypes, ordering) to
    seconds of `clock` (``time.thread_time`` gives CPU seconds, steadier on a busy machine), summed over every
    `get_program` / `program_from_kernel` call inside the block. Used by ``bench/bench_compile.py``.

    >>> with record_stage_times() as times:
    ...     pass
    >>> times
    {}
    """
    global _stage_times, _clock
    previous = _stage_times, _clock
    _stage_times, _clock = {}, clock
    try:
        yield _stage_times
    finally:
        _stage_times, _clock = previous


def _stage_start() -> float:
    """Now, by the clock of the active `record_stage_times` (0.0 when none is active: nothing is timed)."""
    return _clock() if _stage_times is not None else 0.0


def _stage_done(stage: str, start: float) -> float:
    """Add the time since `start` to `stage` when recording; returns now (the next stage's start)."""
    if _stage_times is None:
        return 0.0
    now = _clock()
    _stage_times[stage] = _stage_times.get(stage, 0.0) + now - start
    return now


# ----- the passes' shared state and the pass type


@dataclass
class KernelLowering:
    """What the passes of one kernel share: the `kernel` and its `renderer`, the current graph `sink` (each pass's
    result), the allocators of the reduce passes (`group`: shared buffers and axis ids; `registers`: accumulator
    numbers), and what passes find out along the way: the launch sizes (``launch_ids``), the `estimates`
    (``estimates``) and the linearized `uops` (``linearize``)."""

    kernel: Kernel
    renderer: Renderer | None
    sink: UOp
    group: GroupReduceCtx
    registers: RegisterCtx
    global_size: tuple[sint, ...] = (1, 1, 1)
    local_size: tuple[sint, ...] = (1, 1, 1)
    estimates: Estimates | None = None
    uops: list[UOp] = field(default_factory=list)

    @classmethod
    def of(cls, k: Kernel) -> KernelLowering:
        """The state before the first pass: `k`'s graph; new axes numbered after `k`'s, accumulators after its
        stash arrays (the registers that exist before expansion)."""
        ren = k.renderer
        group = GroupReduceCtx(
            # shared arrays after the kernel's own (`OptOps.STAGE`'s)
            next_local=1 + max((u.arg for u in k.sink.toposort() if u.op is Ops.DEFINE_LOCAL), default=-1),
            next_axis=k._next_axis,  # the kernel's next free axis id: the group reduce's serial loops get new ones
            shared_max=ren.shared_max if ren is not None else 0,
            warp_size=ren.warp_size if ren is not None else 0,
        )
        regs = RegisterCtx(next_reg=1 + max((u.arg for u in k.sink.toposort() if u.op is Ops.DEFINE_REG), default=-1))
        return cls(k, ren, k.sink, group, regs)


@dataclass(frozen=True)
class KernelPass:
    """One named step of `KERNEL_PASSES`: ``run(sink, lowering)`` returns the new graph (and may record what it
    found in the `KernelLowering`); its time counts to `stage` of `record_stage_times`."""

    name: str
    stage: str
    run: Callable[[UOp, KernelLowering], UOp]


def rewrite_pass(
    name: str,
    stage: str,
    rules: Callable[[KernelLowering], PatternMatcher | None],
    ctx: Callable[[KernelLowering], Any] | None = None,
) -> KernelPass:
    """A rule-table pass: ``graph_rewrite(sink, rules(lowering), ctx(lowering), name=name)``. `rules` picks the table
    for this kernel's renderer; when it gives None the pass has nothing to do and returns the graph unchanged."""

    def run(sink: UOp, lowering: KernelLowering) -> UOp:
        pm = rules(lowering)
        if pm is None:
            return sink
        return graph_rewrite(sink, pm, ctx=ctx(lowering) if ctx is not None else None, name=name)

    return KernelPass(name, stage, run)


# ----- the renderer's extra rules


def _extra_rules(renderer: Renderer | None, stage: str) -> PatternMatcher | None:
    """``renderer.extra_rules[stage]`` (None when there are none). An unknown stage name in `extra_rules` raises a
    ValueError naming the renderer, its device and the valid stages."""
    rules = renderer.extra_rules if renderer is not None else None
    if not rules:
        return None
    unknown = sorted(set(rules) - set(REWRITE_STAGES))
    if unknown:
        raise ValueError(
            f"{type(renderer).__module__}.{type(renderer).__name__} (device {renderer.device}) declares extra_rules "
            f"for unknown lowering stage(s) {', '.join(map(repr, unknown))}; valid stages: {', '.join(REWRITE_STAGES)}"
        )
    return rules.get(stage)


def apply_extra_rules(sink: UOp, renderer: Renderer | None, stage: str) -> UOp:
    """`sink` rewritten with ``renderer.extra_rules[stage]`` under the name ``extra_rules[<stage>]`` (unchanged
    when there are none); raises ValueError for a stage name not in `REWRITE_STAGES`."""
    pm = _extra_rules(renderer, stage)
    return sink if pm is None else graph_rewrite(sink, pm, name=f"extra_rules[{stage}]")


def _extra_rules_pass(stage: str) -> KernelPass:
    return rewrite_pass(f"extra_rules[{stage}]", stage, lambda lowering: _extra_rules(lowering.renderer, stage))


# ----- the function passes, in recipe order


def _expand(sink: UOp, lowering: KernelLowering) -> UOp:
    """``UPCAST``/``UNROLL`` axes (and the tensor-core opt's lanes) become vector lanes on a renderer with
    ``supports_float4``, else scalar copies (tensor cores then raise `KernelOptError`)."""
    ren = lowering.renderer
    if ren is not None and ren.supports_float4:
        return expand_vectors(sink, ren.max_vector_access, ren.masked_access)
    try:
        return expand_scalar(sink)
    except ValueError as error:
        raise KernelOptError(str(error)) from None


def _loops_to_globals(sink: UOp, lowering: KernelLowering) -> UOp:
    """On a renderer with ``has_local`` every ``LOOP`` axis becomes a launched ``GLOBAL`` axis."""
    ren = lowering.renderer
    return loops_to_globals(sink) if ren is not None and ren.has_local else sink


def _group_reduce(sink: UOp, lowering: KernelLowering) -> UOp:
    """Reduces over ``GROUP_REDUCE`` axes through shared memory (`tinycore.codegen.kernel.group_reduces`)."""
    return group_reduces(sink, lowering.group)


def _launch_ids(sink: UOp, lowering: KernelLowering) -> UOp:
    """Launch axes become ``SPECIAL`` ids; the launch sizes are set on the lowering and on the kernel."""
    sink, lowering.global_size, lowering.local_size = map_launch_ids(sink, lowering.renderer)
    lowering.kernel.global_size, lowering.kernel.local_size = lowering.global_size, lowering.local_size
    return sink


def _lower_reduce(sink: UOp, lowering: KernelLowering) -> UOp:
    """Every remaining ``REDUCE`` becomes a register accumulator (`lowerer.lower_reduces`), numbered after the
    vector accumulators."""
    return lower_reduces(sink, first_reg=lowering.registers.next_reg)


def _accumulate_rules(lowering: KernelLowering) -> PatternMatcher:
    # one walk for both where MULACC is native: their rules match different STORE values (ADD of WMMA vs ADD of
    # MUL) and neither rule's result matches the other, so this is the same as running them one after the other
    ren = lowering.renderer
    return pm_wmma_fuse_accumulate if ren is not None and "MULACC" in ren.native_ops else pm_wmma_accumulate


def _simplify_kernel(sink: UOp, lowering: KernelLowering) -> UOp:
    """Symbolic simplification of the whole kernel graph (`lowerer.simplify_sink`)."""
    return simplify_sink(sink, name="simplify_kernel")


def _decomposition_rules(lowering: KernelLowering) -> PatternMatcher:
    from tinycore.codegen.decompositions import decomposition_rules  # 1300 lines: loaded on the first kernel

    assert lowering.renderer is not None, "decompositions need the kernel's renderer"
    return decomposition_rules(frozenset(lowering.renderer.native_ops))


def _check_bounds(sink: UOp, lowering: KernelLowering) -> UOp:
    """Raise IndexError when an index into a global buffer of known size can fall outside it (nothing with
    ``IGNORE_OOB``); the graph is unchanged."""
    from tinycore.dtype import AddrSpace, PtrDType
    from tinycore.helpers import IGNORE_OOB

    if IGNORE_OOB:
        return sink
    for u in sink.toposort():
        if u.op is Ops.INDEX and len(u.src) == 2 and isinstance(u.src[0].dtype, PtrDType):
            size = u.src[0].dtype.size
            if u.src[0].dtype.addrspace is AddrSpace.GLOBAL and size >= 0:
                idx = u.src[1]
                if idx.vmin < 0 or idx.vmax >= size:
                    raise IndexError(
                        f"index {idx.render()} of buffer {u.src[0].arg} can be out of bounds "
                        f"[{idx.vmin}, {idx.vmax}] for size {size}"
                    )
    return sink


def _estimates(sink: UOp, lowering: KernelLowering) -> UOp:
    """Count operations and memory traffic (before index dtypes are lowered, so index math is not counted)."""
    from tinycore.codegen.estimates import estimate

    lowering.estimates = estimate(sink, lowering.global_size, lowering.local_size)
    return sink


def _lower_index_dtype(sink: UOp, lowering: KernelLowering) -> UOp:
    """Concrete index dtypes (`tinycore.uop.symbolic.lower_index_dtype` with the renderer's ``index_bits``)."""
    from tinycore.uop.symbolic import lower_index_dtype

    assert lowering.renderer is not None, "index dtypes need the kernel's renderer"
    return lower_index_dtype(sink, lowering.renderer.index_bits)


def _keep_all_buffer_args(uops: list[UOp], ast: UOp | None) -> list[UOp]:
    """`uops` with a `DEFINE_GLOBAL` for every buffer argument of `ast`, in argument order, first.

    A load can fold away (a PAD of an empty buffer, `x*0`), but the schedule still binds one buffer per argument of
    the AST, so the program's signature must keep every argument even when the kernel no longer reads it.
    """
    if ast is None:
        return uops
    present = {u.arg for u in uops if u.op is Ops.DEFINE_GLOBAL}
    missing = [u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL and u.arg not in present]
    if not missing:
        return uops
    defines = sorted([u for u in uops if u.op is Ops.DEFINE_GLOBAL] + missing, key=lambda u: u.arg)
    return defines + [u for u in uops if u.op is not Ops.DEFINE_GLOBAL]


def _linearize(sink: UOp, lowering: KernelLowering) -> UOp:
    """The graph as a list in execution order, every buffer argument of the kernel AST kept, into
    ``lowering.uops`` (verified with ``SPEC>=1``, printed with ``DEBUG>=6``); the graph is unchanged."""
    from tinycore.codegen.linearize import linearize
    from tinycore.helpers import SPEC
    from tinycore.uop.ops import print_uops

    uops = _keep_all_buffer_args(linearize(sink), lowering.kernel.ast)
    if SPEC >= 1:
        from tinycore.uop.spec import type_verify

        type_verify(uops, "program", pass_name="linearize")
    if DEBUG >= 6:
        print_uops(uops)
    lowering.uops = uops
    return sink


# ----- the recipe

KERNEL_PASSES: tuple[KernelPass, ...] = (
    KernelPass("expand", "expand", _expand),
    KernelPass("loops_to_globals", "expand", _loops_to_globals),
    KernelPass("group_reduce", "expand", _group_reduce),
    KernelPass("launch_ids", "expand", _launch_ids),
    rewrite_pass("lower_vector_reduce", "expand", lambda lw: pm_lower_vector_reduce, ctx=lambda lw: lw.registers),
    KernelPass("lower_reduce", "expand", _lower_reduce),
    rewrite_pass("fuse_accumulate", "expand", _accumulate_rules),
    KernelPass("simplify_kernel", "expand", _simplify_kernel),
    _extra_rules_pass("expand"),
    rewrite_pass("decompositions", "decompose", _decomposition_rules),
    _extra_rules_pass("decompose"),
    KernelPass("check_bounds", "linearize", _check_bounds),
    KernelPass("estimates", "linearize", _estimates),
    KernelPass("lower_index_dtype", "linearize", _lower_index_dtype),
    _extra_rules_pass("linearize"),
    KernelPass("linearize", "linearize", _linearize),
)


def _traced(p: KernelPass, lowering: KernelLowering) -> UOp:
    """Run `p` with ``DEBUG>=5`` or ``TRACK_REWRITES>=1``: record a trace named after it unless its own rewrite
    (the last one it ran, under its name, giving its result) already did, and print a ``pass NAME`` line."""
    sink, first = lowering.sink, len(rewrite_traces)
    start = time.perf_counter()
    out = p.run(sink, lowering)
    seconds = time.perf_counter() - start
    if TRACK_REWRITES >= 1:
        inner = rewrite_traces[first:]
        if not (inner and inner[-1].name == p.name and inner[-1].output is out):
            hits: dict[str, int] = {}
            for trace in inner:
                for rule, count in trace.hits.items():
                    hits[rule] = hits.get(rule, 0) + count
            steps = [step for trace in inner for step in trace.steps]
            rewrite_traces.append(RewriteTrace(p.name, sink, out, hits, seconds, steps))
    if DEBUG >= 5:
        print(f"pass {p.name}: {len(sink.toposort())} -> {len(out.toposort())} nodes in {seconds * 1e3:.2f} ms")
    return out


def lower_kernel(k: Kernel, stop_after: str | None = None) -> KernelLowering:
    """Run the passes of `KERNEL_PASSES` in order on the optimized kernel `k` (after the pass named `stop_after`,
    stop); returns the `KernelLowering` with the final graph, the launch sizes (also set on `k`), the estimates and
    the linearized uops. Raises `KernelOptError` when the opts can't be turned into code on `k`'s renderer.

    >>> from tinycore.dtype import dtypes
    >>> from tinycore.codegen.lowerer import lower_ast
    >>> from tinycore.runtime.python_device import PythonRenderer
    >>> out, inp = UOp.define_global(0, dtypes.float, 16), UOp.define_global(1, dtypes.float, 16)
    >>> ast = UOp.sink(out.reshape((4, 4)).store(UOp(Ops.LOAD, dtypes.float, (inp,)).reshape((4, 4)) * 2))
    >>> lowered = lower_kernel(Kernel(lower_ast(ast), PythonRenderer()))
    >>> lowered.global_size, [u.arg for u in lowered.uops if u.op is Ops.SPECIAL], lowered.estimates.ops
    ((4, 4, 1), ['gidx1', 'gidx0'], 16)
    """
    if stop_after is not None and all(p.name != stop_after for p in KERNEL_PASSES):
        raise ValueError(f"no pass named {stop_after!r}; the passes: {', '.join(p.name for p in KERNEL_PASSES)}")
    lowering = KernelLowering.of(k)
    tracing = DEBUG >= 5 or TRACK_REWRITES >= 1
    for p in KERNEL_PASSES:
        start = _stage_start()
        lowering.sink = _traced(p, lowering) if tracing else p.run(lowering.sink, lowering)
        _stage_done(p.stage, start)
        if p.name == stop_after:
            break
    return lowering
