"""Code generation: a kernel AST in, a linearized `ProgramSpec` out (docs/pipeline.md §2-§4).

`get_program(ast, renderer, opts)` runs three steps:

1. `get_kernel`: `lowerer.lower_ast` (ranges for the output shape, indices pushed through movement ops to every
   LOAD, REDUCE_AXIS as REDUCE over new reduce ranges, indices simplified); a one-hot selection summed over its
   range as one indexed load (`select_fold.fold_one_hot_selects`: indexing, gather, embeddings); fp8 values as
   uint8 bits (`decompositions.lower_fp8`); on CPU-style renderers with
   ``row_reduce_bytes``, `stash.stash_reduce_values` (a reduce body the output needs again kept in a row-sized
   register array); the renderer's ``extra_rules[lower]``. The result is a `kernel.Kernel`: the kernel's axes;
2. optimization: `opts` (a list of `Opt`: a BEAM search's, which the engine runs on the device with ``BEAM>=1``,
   see `tinycore.engine.search`), else the hand-coded heuristics of `tinycore.codegen.heuristic` (none with
   ``NOOPT``), applied to the `Kernel` as axis splits;
3. `program_from_kernel`: `passes.lower_kernel` runs `passes.KERNEL_PASSES`, the recipe that lists by name and in
   order every pass from the optimized kernel to the linearized uops (expand, launch ids, reduces, decompositions,
   estimates, index dtypes, linearize...), and the `ProgramSpec` is built from its result.

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

from typing import TYPE_CHECKING

from tinycore.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tinycore.codegen.passes import (
    KERNEL_PASSES,
    REWRITE_STAGES,
    _stage_done,
    _stage_start,
    apply_extra_rules,
    lower_kernel,
    record_stage_times,
)

if TYPE_CHECKING:
    from tinycore.renderer import ProgramSpec, Renderer
    from tinycore.uop.ops import UOp

__all__ = [
    "KERNEL_PASSES",
    "Kernel",
    "KernelOptError",
    "Opt",
    "REWRITE_STAGES",
    "OptOps",
    "get_kernel",
    "get_program",
    "lower_kernel",
    "program_from_kernel",
    "record_stage_times",
]

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
    """The default optimization of the fresh kernel `k`: nothing with ``NOOPT``, else the hand-coded heuristics of
    `tinycore.codegen.heuristic` (they apply each opt to `k` as they choose it, so nothing is replayed). A BEAM
    search needs the device to time candidates on, so the engine runs it and passes its opts in
    (`tinycore.engine.search.kernel_program`)."""
    from tinycore.helpers import NOOPT

    if NOOPT:
        return
    from tinycore.codegen.heuristic import hand_coded_optimizations

    hand_coded_optimizations(k)


def get_kernel(ast: UOp, renderer: Renderer) -> Kernel:
    """The lowered kernel of `ast` as a `Kernel` (no optimization applied yet): the optimizer's entry point.
    `lowerer.lower_ast`, `select_fold.fold_one_hot_selects` (a one-hot selection sum as one indexed load), then
    (CPU-style renderers with ``row_reduce_bytes``) `stash.stash_reduce_values`, then the renderer's
    ``extra_rules[lower]``."""
    from tinycore.codegen.lowerer import lower_ast
    from tinycore.codegen.select_fold import fold_one_hot_selects

    sink = fold_one_hot_selects(lower_ast(ast))
    if _uses_fp8(ast):  # no renderer knows the fp8 types: uint8 bits, converted in float32
        from tinycore.codegen.decompositions import lower_fp8

        sink = lower_fp8(sink)
    if renderer is not None and renderer.row_reduce_bytes > 0 and not renderer.has_local:
        from tinycore.codegen.stash import stash_reduce_values

        sink = stash_reduce_values(sink, renderer.row_reduce_bytes)
    k = Kernel(apply_extra_rules(sink, renderer, "lower"), renderer)
    k.ast = ast
    return k


def _uses_fp8(ast: UOp) -> bool:
    from tinycore.dtype import FP8S, PtrDType

    return any((u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype).scalar() in FP8S for u in ast.toposort())


def _check_dtypes(ast: UOp, renderer: Renderer) -> None:
    """Raise `UnsupportedDTypeError` when the kernel `ast` uses a dtype the renderer does not declare
    (``Renderer.supported_dtypes``): the device's compiler would reject it with a less helpful message, or accept it."""
    from tinycore.dtype import FP8S, PtrDType, dtypes
    from tinycore.errors import UnsupportedDTypeError

    supported = renderer.supported_dtypes
    if {dtypes.uint8, dtypes.uint32, dtypes.float32} <= supported:  # fp8 kernels use these (`lower_fp8`)
        supported = supported | frozenset(FP8S)
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
    start = _stage_start()
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
    """The `ProgramSpec` of an optimized `Kernel` (its opts already applied): the second half of `get_program`, the
    passes of `tinycore.codegen.passes.KERNEL_PASSES` (`lower_kernel`). `name` overrides the display name
    (default: the kernel's name, made unique per AST)."""
    from tinycore.renderer import ProgramSpec
    from tinycore.uop.ops import Ops

    renderer = k.renderer
    assert renderer is not None, "program_from_kernel needs a Kernel with a renderer"
    if name is None:
        name = _unique_name(k.name, k.ast if k.ast is not None else k.base_sink)
    lowered = lower_kernel(k)
    uops = lowered.uops
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
        global_size=lowered.global_size,
        local_size=lowered.local_size,
        vars=[u.arg[0] for u in uops if u.op is Ops.DEFINE_VAR],
        ins=ins,
        outs=outs,
        estimates=lowered.estimates,
    )
