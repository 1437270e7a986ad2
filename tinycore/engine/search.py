"""BEAM search over kernel optimizations, timed on the real device, and `kernel_program`: how the engine builds a
kernel's program (the search's opts with ``BEAM>=1``, else code generation's heuristics).

The search lives in the engine, not in code generation: it builds runners (`CompiledRunner`) and buffers on the
device to time candidates, and code generation sits below both.

`beam_search(k, rawbufs, beam_width)` starts from the unoptimized kernel and the hand-coded heuristics' choice,
then repeatedly extends every kernel of the beam by one legal action (`actions`), compiles the new candidates (in
one batch through the compiler's ``compile_many`` when it has one), times each with
``Program(..., wait=True)`` (through `CompiledRunner`) on random buffers of the right sizes, and keeps the
`beam_width` fastest of the step. It stops after `BEAM_PATIENCE` steps that found nothing faster than the best so
far (or after `BEAM_MAX_STEPS`; both can be set in the environment).

Guarantees and safety:

- the heuristics' opts are a candidate from the start, and the winner is re-timed against them at the end, so the
  result is never slower than the heuristics (within timing noise);
- the winner's output is compared with the unoptimized kernel's on the same inputs; a mismatch falls back to the
  heuristics (and is reported at ``DEBUG>=1``);
- a candidate that fails to compile or run is dropped, and so is one still compiling `CANDIDATE_TIMEOUT` seconds
  after its step's compile batch started; one whose first run is `EARLY_STOP` times slower than the best so far
  is not timed again (a launch can't be interrupted, so a slow one costs one run).

Results are cached on disk (`tinycore.backend.disk_cache`, table ``"beam"``) under the AST's structural key, the
renderer (family, arch, class, thread count), the compiler's cache key parts (which include the resolved CPU
features on CLANG) and the beam width. ``IGNORE_BEAM_CACHE=1`` skips the lookup (the new result is still stored);
``CACHELEVEL=0`` disables the cache. Progress lines are printed at ``DEBUG>=1``.

>>> from tinycore.dtype import dtypes
>>> from tinycore.uop.ops import UOp, Ops
>>> from tinycore.codegen import get_kernel
>>> from tinycore.runtime.python_device import PythonRenderer
>>> b0, b1 = UOp.define_global(0, dtypes.float, 16), UOp.define_global(1, dtypes.float, 16)
>>> k = get_kernel(UOp.sink(b0.store(UOp(Ops.LOAD, dtypes.float, (b1,)) + 1.0)), PythonRenderer())
>>> len(actions(k)) > 0
True
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tinycore.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tinycore.dtype import PtrDType, dtypes
from tinycore.helpers import CACHELEVEL, DEBUG, IGNORE_BEAM_CACHE, getenv
from tinycore.uop.ops import AxisType, Ops, UOp

if TYPE_CHECKING:
    from tinycore.device import Buffer
    from tinycore.renderer import ProgramSpec, Renderer

__all__ = [
    "BEAM_MAX_STEPS",
    "BEAM_PATIENCE",
    "Candidate",
    "actions",
    "beam_cache_key",
    "beam_search",
    "kernel_program",
    "time_program",
]

BEAM_MAX_STEPS = 12
BEAM_PATIENCE = 1  # steps without a faster candidate before the search stops
EARLY_STOP = 3.0  # a candidate this many times slower than the best on its first run is not timed again
CANDIDATE_TIMEOUT = 120.0  # seconds for compiling one step's candidates
TIMING_RUNS = 3

_UPCAST_AMOUNTS = (0, 2, 3, 4, 5, 6, 7, 8, 16)
_UNROLL_AMOUNTS = (0, 2, 4, 7, 8, 16, 32)
_LOCAL_AMOUNTS = (2, 3, 4, 8, 13, 16, 29, 32)
_GROUP_AMOUNTS = (0, 4, 8, 16, 32)
_GROUPTOP_AMOUNTS = (13, 16, 28, 29, 32, 49, 64, 256)
_TILE_AMOUNTS = (4, 8, 16, 32)


def actions(k: Kernel) -> list[Opt]:
    """Every opt worth trying on `k` as its next step (each may still raise `KernelOptError` when applied)."""
    ren = k.renderer
    n_out, n_red = len(k.output_axes), len(k.reduce_axes)
    acts: list[Opt] = []
    acts += [Opt(OptOps.UPCAST, a, amt) for a in range(n_out) for amt in _UPCAST_AMOUNTS]
    acts += [Opt(OptOps.UNROLL, a, amt) for a in range(n_red) for amt in _UNROLL_AMOUNTS]
    acts += [Opt(OptOps.SWAP, a, b) for a in range(n_out) for b in range(a + 1, n_out)]
    acts += [Opt(OptOps.PADTO, a, amt) for a in range(n_out + n_red) for amt in (4, 16, 32)]
    acts += [Opt(OptOps.OVERLAP, a, (amt, amt)) for a in range(n_out) for amt in (4, 16, 32)]
    if ren is not None and ren.has_local and k.use_locals:
        acts += [Opt(OptOps.LOCAL, a, amt) for a in range(n_out) for amt in _LOCAL_AMOUNTS]
        if ren.has_shared:
            acts += [Opt(OptOps.GROUP, a, amt) for a in range(n_red) for amt in _GROUP_AMOUNTS]
            acts += [Opt(OptOps.GROUPTOP, a, amt) for a in range(n_red) for amt in _GROUPTOP_AMOUNTS]
            n_local = len(k.axes_of(AxisType.LOCAL))
            acts += [Opt(OptOps.GROUPLOCAL, a, loc) for a in range(n_red) for loc in range(n_local)]
            acts += [Opt(OptOps.STAGE, None, steps) for steps in (1, 2, 4)] if ren.tensor_cores else []
        acts += [Opt(OptOps.TC, c, t) for t in range(len(ren.tensor_cores)) for c in range(2)]
        acts.append(Opt(OptOps.NOLOCALS))
    elif ren is not None and not ren.has_local:
        from tinycore.codegen.heuristic import thread_count

        threads = thread_count(k)
        amounts = sorted({t for t in (threads, threads // 2, 2 * threads) if t > 1})
        acts += [Opt(OptOps.THREAD, a, amt) for a in range(n_out) for amt in amounts]
        if k.reduce_axes:  # cache blocks of a reduce's output loops (with SWAP, see `OptOps.TILE`)
            acts += [Opt(OptOps.TILE, a, amt) for a in range(n_out) for amt in _TILE_AMOUNTS]
    return acts


@dataclass
class Candidate:
    """A kernel of the search, its program once built, and its best time (None: not timed or failed)."""

    kernel: Kernel
    program: ProgramSpec | None = None
    runner: Any = None
    seconds: float | None = None


def beam_cache_key(k: Kernel, beam_width: int) -> str:
    """The disk-cache key of a BEAM result for `k` (see the module docstring)."""
    from tinycore.device import Device

    ren = k.renderer
    assert ren is not None
    ast_key = (k.ast if k.ast is not None else k.base_sink).key.hex()
    parts = [ast_key, ren.device, str(ren.arch), type(ren).__name__, f"threads={ren.threads}"]
    try:
        compiler = Device[ren.device].compiler
        key_parts = getattr(compiler, "cache_key_parts", None)
        if callable(key_parts):
            parts += [str(p) for p in key_parts()]
    except Exception as error:  # noqa: BLE001 (a device that can't be opened just gives a narrower key)
        parts.append(f"no-device:{type(error).__name__}")
    return "|".join([*parts, f"beam={beam_width}"])


def _encode_opts(opts: Sequence[Opt]) -> bytes:
    return json.dumps([[o.op.name, o.axis, o.arg] for o in opts]).encode()


def _decode_opts(data: bytes) -> list[Opt]:
    return [Opt(OptOps[op], axis, tuple(arg) if isinstance(arg, list) else arg) for op, axis, arg in json.loads(data)]


def _var_values(k: Kernel) -> dict[str, int]:
    return {u.arg[0]: u.arg[2] for u in k.base_sink.toposort() if u.op is Ops.DEFINE_VAR}


def _random_buffers(k: Kernel, device: str) -> list[Buffer]:
    """One buffer per DEFINE_GLOBAL, filled with random values of its dtype."""
    import numpy as np

    from tinycore.device import Buffer

    rng = np.random.default_rng(0)
    glbs = {u.arg: u for u in k.base_sink.toposort() if u.op is Ops.DEFINE_GLOBAL}
    sizes: dict[int, int] = {}
    for u in k.base_sink.toposort():
        if u.op is Ops.INDEX and u.src[0].op is Ops.DEFINE_GLOBAL:
            sizes[u.src[0].arg] = max(sizes.get(u.src[0].arg, 1), int(u.src[1].vmax) + 1)
    bufs: list[Buffer] = []
    for i in range(max(glbs, default=-1) + 1):
        g = glbs.get(i)
        dt = g.dtype.base.scalar() if g is not None and isinstance(g.dtype, PtrDType) else dtypes.uint8
        size = g.dtype.size if g is not None and isinstance(g.dtype, PtrDType) and g.dtype.size > 0 else 0
        size = max(size, sizes.get(i, 1), 1)
        npdt = dtypes.to_np(dt) if dt != dtypes.bfloat16 else np.uint16
        if dtypes.is_float(dt):
            data = rng.standard_normal(size).astype(npdt)
        elif dt == dtypes.bool:
            data = rng.integers(0, 2, size).astype(np.bool_)
        else:
            data = rng.integers(0, 8, size).astype(npdt)
        bufs.append(Buffer(device, size, dt).copyin(data.tobytes()))
    return bufs


def _build(cands: list[Candidate], device: str) -> list[Candidate]:
    """Linearize, render and compile the candidates (one batch when the compiler has ``compile_many``);
    returns the ones that built, with their runners."""
    from tinycore.codegen import program_from_kernel
    from tinycore.device import Device
    from tinycore.engine.exec_item import CompiledRunner, render_program

    dev = Device[device]
    built: list[tuple[Candidate, ProgramSpec, str]] = []
    seen: set[str] = set()
    for i, c in enumerate(cands):
        try:
            p = program_from_kernel(c.kernel, name=f"beam{i}_{c.kernel.name}")
            src = render_program(dev.renderer, p)
        except Exception as error:  # noqa: BLE001 (any failure drops the candidate)
            if DEBUG >= 3:
                print(f"BEAM: {c.kernel.applied_opts} failed to build: {type(error).__name__}: {error}")
            continue
        body = src.replace(p.function_name, "K")
        if body in seen:  # the same code as another candidate
            continue
        seen.add(body)
        built.append((c, replace(p, src=src), src))
    if not built:
        return []
    libs = _compile_all(dev.compiler, [s for _, _, s in built])
    out = []
    for (c, p, _), lib in zip(built, libs):
        if lib is None:
            continue
        try:
            c.program, c.runner = p, CompiledRunner(p, precompiled=lib)
        except Exception:  # noqa: BLE001
            continue
        out.append(c)
    return out


def _compile_all(compiler: Any, srcs: list[str]) -> list[bytes | None]:
    """Compile `srcs` (one batch through ``compile_many`` when the compiler has it, else one by one); a source that
    fails, or that is still compiling `CANDIDATE_TIMEOUT` seconds after the batch started, gives None."""
    import concurrent.futures

    start = time.perf_counter()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        many = getattr(compiler, "compile_many", None)
        if callable(many) and len(srcs) > 1:
            try:
                libs = list(pool.submit(many, srcs).result(timeout=CANDIDATE_TIMEOUT))
                if len(libs) == len(srcs):
                    return libs
            except concurrent.futures.TimeoutError:
                if DEBUG >= 1:
                    print(f"BEAM: compiling {len(srcs)} candidates took over {CANDIDATE_TIMEOUT} s; dropped")
                return [None] * len(srcs)
            except Exception:  # noqa: BLE001 (one by one below drops only the failing sources)
                pass
        out: list[bytes | None] = []
        for src in srcs:
            left = CANDIDATE_TIMEOUT - (time.perf_counter() - start)
            try:
                out.append(pool.submit(compiler.compile, src).result(timeout=max(left, 0.001)))
            except Exception:  # noqa: BLE001 (a compile error or a timeout drops the candidate)
                out.append(None)
        return out
    finally:
        pool.shutdown(wait=False)


def time_program(runner: Any, bufs: list[Buffer], var_vals: dict[str, int], runs: int, early: float | None) -> float:
    """The best of `runs` timed launches (``wait=True``); stops after the first one when it is over `early`."""
    best = float("inf")
    for _ in range(runs):
        t = runner(bufs, var_vals, wait=True)
        best = min(best, t if t is not None else float("inf"))
        if early is not None and best > early:
            break
    return best


def _time_all(cands: list[Candidate], bufs: list[Buffer], var_vals: dict[str, int], best: float) -> None:
    for c in cands:
        try:
            c.seconds = time_program(c.runner, bufs, var_vals, TIMING_RUNS, best * EARLY_STOP if best < 1e9 else None)
        except Exception as error:  # noqa: BLE001 (a candidate that fails at run time is dropped)
            if DEBUG >= 3:
                print(f"BEAM: {c.kernel.applied_opts} failed to run: {type(error).__name__}: {error}")
            c.seconds = None
            continue
        best = min(best, c.seconds)


def _outputs(bufs: list[Buffer], outs: Sequence[int]) -> list[Any]:
    return [bufs[i].numpy().copy() for i in outs]


def _same(a: list[Any], b: list[Any]) -> bool:
    import numpy as np

    for x, y in zip(a, b):
        if x.dtype.kind == "f":
            scale = max(1.0, float(np.nanmax(np.abs(y.astype(np.float64))))) if y.size else 1.0
            if not np.allclose(
                x.astype(np.float64), y.astype(np.float64), rtol=1e-3, atol=1e-3 * scale, equal_nan=True
            ):
                return False
        elif not np.array_equal(x, y):
            return False
    return True


def beam_search(k: Kernel, rawbufs: list[Buffer] | None, beam_width: int, device: str | None = None) -> Kernel:
    """The best kernel found by a BEAM search of width `beam_width` from `k` (which must have no opts applied):
    a copy of `k` with the winning opts applied. `rawbufs` are buffers to time on (one per DEFINE_GLOBAL, in
    argument order; None: random buffers of the right sizes are allocated). `device` defaults to the renderer's
    device family."""
    from tinycore.backend.disk_cache import disk_get, disk_put
    from tinycore.codegen.heuristic import hand_coded_optimizations

    ren = k.renderer
    assert ren is not None, "beam_search needs a kernel with a renderer"
    device = device or ren.device
    key = beam_cache_key(k, beam_width)
    if not IGNORE_BEAM_CACHE and CACHELEVEL >= 1:
        cached = disk_get("beam", key)
        if cached is not None:
            try:
                return k.copy().apply_opts(_decode_opts(cached))
            except (KernelOptError, ValueError, KeyError):
                pass  # a stale entry: search again
    start = time.perf_counter()
    bufs = rawbufs if rawbufs is not None else _random_buffers(k, device)
    var_vals = _var_values(k)
    base = Candidate(k.copy())
    heur_k = k.copy()
    hand_coded_optimizations(heur_k)
    heur = Candidate(heur_k)
    first = _build([base, heur] if heur_k.applied_opts else [base], device)
    _time_all(first, bufs, var_vals, float("inf"))
    timed = [c for c in first if c.seconds is not None]
    if not timed:
        raise RuntimeError(f"BEAM: kernel {k.name} can't be built or run on {device} even without opts")
    reference = None
    base_built = next((c for c in timed if c.kernel is base.kernel), None)
    if base_built is not None and base_built.program is not None:
        base_built.runner(bufs, var_vals)
        reference = _outputs(bufs, base_built.program.outs)
    beam = sorted(timed, key=lambda c: c.seconds)[:beam_width]  # type: ignore[arg-type, return-value]
    best = beam[0]
    seen = {(c.kernel.sink, c.kernel.use_locals) for c in first}
    stale = 0
    for step in range(getenv("BEAM_MAX_STEPS", BEAM_MAX_STEPS)):
        cands: list[Candidate] = []
        for c in beam:
            for act in actions(c.kernel):
                nk = c.kernel.copy()
                try:
                    nk.apply_opt(act)
                except KernelOptError:
                    continue
                sig = (nk.sink, nk.use_locals)  # hash-consed graphs: equal kernels are the same object
                if sig in seen:
                    continue
                seen.add(sig)
                cands.append(Candidate(nk))
        built = _build(cands, device)
        _time_all(built, bufs, var_vals, best.seconds or float("inf"))
        good = sorted((c for c in built if c.seconds is not None), key=lambda c: c.seconds)  # type: ignore[arg-type, return-value]
        if DEBUG >= 1:
            top = good[0] if good else None
            print(
                f"BEAM {k.name}: step {step}, {len(cands)} candidates, {len(built)} built, best "
                + (f"{top.seconds * 1e6:.1f} us {top.kernel.applied_opts}" if top and top.seconds else "none")
                + f" (so far {best.seconds * 1e6:.1f} us, {time.perf_counter() - start:.1f} s)"  # type: ignore[operator]
            )
        if not good:
            break
        if good[0].seconds >= best.seconds:  # type: ignore[operator]
            stale += 1
            if stale > getenv("BEAM_PATIENCE", BEAM_PATIENCE):
                break
        else:
            best, stale = good[0], 0
        beam = good[:beam_width]
    winner = _final_choice(best, heur, bufs, var_vals, reference)
    opts = list(winner.kernel.applied_opts)
    if DEBUG >= 1:
        print(f"BEAM {k.name}: {opts} in {time.perf_counter() - start:.1f} s")
    if CACHELEVEL >= 1:
        disk_put("beam", key, _encode_opts(opts))
    return winner.kernel


def _final_choice(
    best: Candidate, heur: Candidate, bufs: list[Buffer], var_vals: dict[str, int], reference: list[Any] | None
) -> Candidate:
    """`best`, unless its output differs from the reference or, re-timed, it is slower than the heuristics."""
    if heur.runner is None or best is heur:
        return best
    if reference is not None and best.program is not None:
        best.runner(bufs, var_vals)
        if not _same(_outputs(bufs, best.program.outs), reference):
            if DEBUG >= 1:
                print(f"BEAM: {best.kernel.applied_opts} gives a different result; keeping the heuristics' opts")
            return heur
    t_best = min(time_program(best.runner, bufs, var_vals, TIMING_RUNS, None), best.seconds or float("inf"))
    t_heur = min(time_program(heur.runner, bufs, var_vals, TIMING_RUNS, None), heur.seconds or float("inf"))
    return best if t_best <= t_heur else heur


def kernel_program(ast: UOp, renderer: Renderer) -> ProgramSpec:
    """The program of kernel `ast` for `renderer` as the engine builds it: with ``BEAM>=1`` (and ``NOOPT`` off) the
    opts a BEAM search of that width finds timing candidates on the renderer's device, else
    `tinycore.codegen.get_program`'s default (the hand-coded heuristics)."""
    from tinycore.codegen import get_kernel, get_program
    from tinycore.helpers import BEAM, NOOPT

    if BEAM >= 1 and not NOOPT:
        opts = list(beam_search(get_kernel(ast, renderer), None, int(BEAM.value)).applied_opts)
        return get_program(ast, renderer, opts)
    return get_program(ast, renderer)
