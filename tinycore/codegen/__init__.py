"""Code generation: a kernel AST in, a linearized `ProgramSpec` out (docs/pipeline.md §2-§4).

`get_program(ast, renderer, opts)` runs, each step a named (traceable) rewrite pass where it is one:

1. `lowerer.lower_ast`: ranges for the output shape, indices pushed through movement ops to every LOAD, REDUCE_AXIS
   as REDUCE over new reduce ranges, indices simplified; on CPU-style renderers with ``row_reduce_bytes``,
   `stash.stash_reduce_values` keeps a reduce body the output needs again in a row-sized register array;
2. `kernel.Kernel`: the kernel's axes; `opts` (a list of `Opt`, or the hand-coded heuristics of
   ``tinycore.codegen.heuristic`` when that module exists and ``NOOPT`` is off) are applied as axis splits;
   `Kernel.get_optimized_sink` maps axes to launch ids / loops / shared memory / registers;
3. decompositions of ops the renderer doesn't list in `Renderer.native_ops`
   (``tinycore.codegen.decompositions.decomposition_rules``; skipped while that module doesn't exist);
4. `estimates.estimate`, then index dtypes (int32, int64 where a value range needs it), then
   `linearize.linearize`.

>>> from tinycore.dtype import dtypes
>>> from tinycore.uop.ops import UOp, Ops
>>> from tinycore.runtime.python_device import PythonRenderer
>>> out, inp = UOp.define_global(0, dtypes.float, 16), UOp.define_global(1, dtypes.float, 16)
>>> x = UOp(Ops.LOAD, dtypes.float, (inp,)).reshape((4, 4))
>>> p = get_program(UOp.sink(out.reshape((4, 4)).store(x * x)), PythonRenderer(), opts=[])
>>> p.name, p.global_size, p.local_size, p.ins, p.outs, p.estimates.ops
('E_4_4', (4, 4, 1), (1, 1, 1), [1], [0], 16)
>>> get_program(UOp.sink(out.reshape((4, 4)).store(x * x)), PythonRenderer()).local_size  # the heuristics: locals
(4, 4, 1)
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from tinycore.codegen.kernel import Kernel, KernelOptError, Opt, OptOps

if TYPE_CHECKING:
    from tinycore.renderer import ProgramSpec, Renderer
    from tinycore.uop.ops import UOp

__all__ = [
    "Kernel",
    "KernelOptError",
    "Opt",
    "REWRITE_STAGES",
    "OptOps",
    "get_kernel",
    "get_program",
    "program_from_kernel",
    "record_stage_times",
]

# while `record_stage_times` is active: stage name -> seconds spent in it (summed over every program built)
_stage_times: dict[str, float] | None = None
_clock: Callable[[], float] = time.perf_counter


@contextlib.contextmanager
def record_stage_times(clock: Callable[[], float] = time.perf_counter) -> Iterator[dict[str, float]]:
    """Collect how long each code-generation stage takes while active: the yielded dict maps ``lower``,
    ``optimize`` (heuristics or BEAM, and applying the opts), ``expand`` (`Kernel.get_optimized_sink`),
    ``decompose`` and ``linearize`` (bounds check, estimates, index dtypes, ordering) to seconds of `clock`
    (``time.thread_time`` gives CPU seconds, steadier on a busy machine), summed over every `get_program` /
    `program_from_kernel` call inside the block. Used by ``bench/bench_compile.py``.

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


def _stage_done(stage: str, start: float) -> float:
    """Add the time since `start` to `stage` when recording; returns now (the next stage's start)."""
    now = _clock()
    if _stage_times is not None:
        _stage_times[stage] = _stage_times.get(stage, 0.0) + now - start
    return now


# documented cache: display name -> {structural AST key: suffix number}, so different ASTs get different names
_NAMES: dict[str, dict[bytes, int]] = {}


def _unique_name(name: str, ast: UOp) -> str:
    seen = _NAMES.setdefault(name, {})
    key = ast.key
    if key not in seen:
        seen[key] = len(seen)
    n = seen[key]
    return name if n == 0 else f"{name}n{n}"


def _apply_default_opts(k: Kernel) -> None:
    """The optimizer's hook, applied to the fresh kernel `k`: nothing with ``NOOPT``; the opts of a BEAM search
    (`tinycore.codegen.search.beam_search`, timed on the renderer's device with random buffers) with ``BEAM>=1``;
    else the hand-coded heuristics of ``tinycore.codegen.heuristic`` when that module exists (they apply each opt
    to `k` as they choose it, so nothing is replayed)."""
    from tinycore.helpers import BEAM, NOOPT

    if NOOPT:
        return
    if BEAM >= 1:
        from tinycore.codegen.search import beam_search

        k.apply_opts(list(beam_search(k.copy(), None, int(BEAM.value)).applied_opts))
        return
    try:
        heuristic = importlib.import_module("tinycore.codegen.heuristic")
    except ModuleNotFoundError as error:
        if error.name == "tinycore.codegen.heuristic":
            return
        raise
    heuristic.hand_coded_optimizations(k)


def _decompose(sink: UOp, renderer: Renderer) -> UOp:
    try:
        decompositions = importlib.import_module("tinycore.codegen.decompositions")
    except ModuleNotFoundError as error:
        if error.name == "tinycore.codegen.decompositions":
            return sink
        raise
    decomposition_rules = decompositions.decomposition_rules
    from tinycore.uop.patterns import graph_rewrite

    return graph_rewrite(sink, decomposition_rules(frozenset(renderer.native_ops)), name="decompositions")


# the lowering stages a renderer's `extra_rules` may name: each runs its rules at the end of that stage
REWRITE_STAGES: tuple[str, ...] = ("lower", "expand", "decompose", "linearize")


def _apply_extra_rules(sink: UOp, renderer: Renderer | None, stage: str) -> UOp:
    """`sink` rewritten with ``renderer.extra_rules[stage]`` (unchanged when there are none). An unknown stage name
    in `extra_rules` raises a ValueError naming the renderer, its device and the valid stages."""
    rules = renderer.extra_rules if renderer is not None else None
    if not rules:
        return sink
    unknown = sorted(set(rules) - set(REWRITE_STAGES))
    if unknown:
        raise ValueError(
            f"{type(renderer).__module__}.{type(renderer).__name__} (device {renderer.device}) declares extra_rules "
            f"for unknown lowering stage(s) {', '.join(map(repr, unknown))}; valid stages: {', '.join(REWRITE_STAGES)}"
        )
    pm = rules.get(stage)
    if pm is None:
        return sink
    from tinycore.uop.patterns import graph_rewrite

    return graph_rewrite(sink, pm, name=f"{renderer.device} extra_rules[{stage}]")


def _keep_all_buffer_args(uops: list[UOp], ast: UOp | None) -> list[UOp]:
    """`uops` with a `DEFINE_GLOBAL` for every buffer argument of `ast`, in argument order, first.

    A load can fold away (a PAD of an empty buffer, `x*0`), but the schedule still binds one buffer per argument of
    the AST, so the program's signature must keep every argument even when the kernel no longer reads it.
    """
    from tinycore.uop.ops import Ops

    if ast is None:
        return uops
    present = {u.arg for u in uops if u.op is Ops.DEFINE_GLOBAL}
    missing = [u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL and u.arg not in present]
    if not missing:
        return uops
    defines = sorted([u for u in uops if u.op is Ops.DEFINE_GLOBAL] + missing, key=lambda u: u.arg)
    return defines + [u for u in uops if u.op is not Ops.DEFINE_GLOBAL]


def get_kernel(ast: UOp, renderer: Renderer) -> Kernel:
    """The lowered kernel of `ast` as a `Kernel` (no optimization applied yet): the optimizer's entry point."""
    from tinycore.codegen.lowerer import lower_ast

    sink = lower_ast(ast)
    if renderer is not None and renderer.row_reduce_bytes > 0 and not renderer.has_local:
        from tinycore.codegen.stash import stash_reduce_values

        sink = stash_reduce_values(sink, renderer.row_reduce_bytes)
    k = Kernel(_apply_extra_rules(sink, renderer, "lower"), renderer)
    k.ast = ast
    return k


def _check_bounds(sink: UOp) -> None:
    from tinycore.dtype import AddrSpace, PtrDType
    from tinycore.uop.ops import Ops

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


def _check_dtypes(ast: UOp, renderer: Renderer) -> None:
    """Raise `UnsupportedDTypeError` when the kernel `ast` uses a dtype the renderer does not declare
    (``Renderer.supported_dtypes``): the device's compiler would reject it with a less helpful message, or accept it."""
    from tinycore.dtype import PtrDType, dtypes
    from tinycore.errors import UnsupportedDTypeError

    supported = renderer.supported_dtypes
    used = {(u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype).scalar() for u in ast.toposort()}
    missing = sorted((d for d in used - supported if d not in (dtypes.void, dtypes.index)), key=lambda d: d.name)
    if missing:
        device, names = renderer.device or type(renderer).__name__, ", ".join(repr(d) for d in missing)
        have = ", ".join(sorted(repr(d) for d in supported))
        raise UnsupportedDTypeError(
            f"device {device} does not support {names}, which a kernel needs ({device} supports: {have}); cast the "
            "tensors to a supported dtype (.cast(...)) or run this on another device (DEV=... or .to(...))"
        )


def get_program(ast: UOp, renderer: Renderer, opts: list[Opt] | None = None) -> ProgramSpec:
    """Lower, optimize (with `opts`, or the default heuristics when None) and linearize the kernel AST `ast` (a
    SINK of STOREs, docs/pipeline.md §2) for `renderer`. The caller renders and compiles the result
    (`CompiledRunner`). Raises `KernelOptError` when an opt doesn't apply, `LoweringError` for a malformed AST."""
    start = _clock()
    _check_dtypes(ast, renderer)
    k = get_kernel(ast, renderer)
    start = _stage_done("lower", start)
    if opts is None:
        _apply_default_opts(k)
    else:
        k.apply_opts(list(opts))
    _stage_done("optimize", start)
    return program_from_kernel(k)


def program_from_kernel(k: Kernel, name: str | None = None) -> ProgramSpec:
    """The `ProgramSpec` of an optimized `Kernel` (its opts already applied): the second half of `get_program`.
    `name` overrides the display name (default: the kernel's name, made unique per AST)."""
    from tinycore.codegen.estimates import estimate
    from tinycore.codegen.linearize import linearize
    from tinycore.helpers import DEBUG, IGNORE_OOB, SPEC
    from tinycore.renderer import ProgramSpec
    from tinycore.uop.ops import Ops, print_uops
    from tinycore.uop.symbolic import lower_index_dtype

    renderer = k.renderer
    assert renderer is not None, "program_from_kernel needs a Kernel with a renderer"
    if name is None:
        name = _unique_name(k.name, k.ast if k.ast is not None else k.base_sink)
    start = _clock()
    sink = _apply_extra_rules(k.get_optimized_sink(), renderer, "expand")
    start = _stage_done("expand", start)
    sink = _apply_extra_rules(_decompose(sink, renderer), renderer, "decompose")
    start = _stage_done("decompose", start)
    if not IGNORE_OOB:
        _check_bounds(sink)
    estimates = estimate(sink, k.global_size, k.local_size)
    sink = _apply_extra_rules(lower_index_dtype(sink, renderer.index_bits), renderer, "linearize")
    uops = _keep_all_buffer_args(linearize(sink), k.ast)
    if SPEC >= 1:
        from tinycore.uop.spec import type_verify

        type_verify(uops, "program", pass_name="linearize")
    if DEBUG >= 6:
        print_uops(uops)
    _stage_done("linearize", start)
    ins = sorted(
        {
            u.src[0].src[0].arg
            for u in uops
            if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL
        }
    )
    outs = sorted(
        {
            u.src[0].src[0].arg
            for u in uops
            if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL
        }
    )
    return ProgramSpec(
        name,
        uops,
        renderer.device,
        global_size=k.global_size,
        local_size=k.local_size,
        vars=[u.arg[0] for u in uops if u.op is Ops.DEFINE_VAR],
        ins=ins,
        outs=outs,
        estimates=estimates,
    )
