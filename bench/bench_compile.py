#!/usr/bin/env python3
"""Cold-compile latency: how long a never-seen kernel takes from its AST to a runnable program, stage by stage.

Usage:
    python bench/bench_compile.py [--device CLANG] [--reps 7] [--only matmul,conv] [--profile matmul]
                                  [--flags "-O2" "-O1"] [--batch 8] [--mlp 5]

Each repetition builds every kind of kernel (elementwise ``(a*b+a).exp()``, reduce ``sum(axis=1)``, matmul, conv2d
3x3) on a fresh random shape, so no in-process or disk cache can serve it, and times:

- the code-generation stages of `tinycore.codegen.get_program` (``lower``, ``optimize`` (heuristics), ``expand``
  (the passes of `tinycore.codegen.passes.KERNEL_PASSES` up to ``extra_rules[expand]``), ``decompose``,
  ``linearize``; from `tinycore.codegen.record_stage_times`);
- ``render`` (the renderer, with the program's function name) and ``compile`` (the device compiler, no cache) and
  ``load`` (the device's program class);
- ``e2e``: ``realize()`` of the expression on another fresh shape minus a warm ``realize()`` of the same expression,
  i.e. scheduling + everything above + the first launch's extra cost (what ``peer_bench.py``'s cold_compile rows
  measure, without the ``.numpy()`` copy).

Two tables of medians (milliseconds): wall-clock time, and CPU time (this thread's for the Python stages, the
process's and the compiler processes' for ``compile``, the whole process's plus its children's for ``e2e``), which is
much steadier than wall time on a machine shared with other work. The disk cache is pointed at a fresh temporary
folder with ``CACHELEVEL=0`` before tinycore is imported. ``--flags A B`` additionally compiles the same rendered
sources with each set of extra compiler flags (interleaved) and prints the median compile time per set; ``--batch N``
compares N kernels compiled one by one with one `compile_many` call (when the device's compiler has it); ``--profile
KIND`` prints a cProfile of the code-generation stages of that kind. ``--mlp N`` instead times calls 0 (eager) and 1
(capture) of a TinyJit'd 784-512-512-10 MLP SGD step in N fresh processes whose disk cache holds the compiler facts
and runtime library but no kernel (medians; wall, Python CPU, compiler CPU). Benchmarks are never run as timed tests.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import resource
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if "--mlp-child" not in sys.argv:  # the --mlp children get their cache folder from the parent
    os.environ["TINYCORE_CACHE_DIR"] = tempfile.mkdtemp(prefix="tinycore-bench-compile-")
    os.environ["CACHELEVEL"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

KINDS = ("elementwise", "reduce", "matmul", "conv")
STAGES = ("lower", "optimize", "expand", "decompose", "linearize", "render", "compile", "load")
_RNG = random.SystemRandom()


def make_expression(kind: str, device: str) -> Callable[[], Any]:
    """A function building a fresh lazy tensor of `kind` on new random shapes (inputs already realized)."""
    from tinycore import Tensor

    def tensor(*shape: int) -> Tensor:
        return Tensor(np.random.default_rng(0).random(shape, dtype=np.float32), device=device).realize()

    if kind == "elementwise":
        a, b = tensor(_RNG.randrange(100_000, 900_000)), None
        b = tensor(a.shape[0])
        return lambda: (a * b + a).exp()
    if kind == "reduce":
        x = tensor(_RNG.randrange(300, 700), _RNG.randrange(300, 700))
        return lambda: x.sum(axis=1)
    if kind == "matmul":
        m, k, n = (_RNG.randrange(100, 300) for _ in range(3))
        a, b = tensor(m, k), tensor(k, n)
        return lambda: a @ b
    if kind == "conv":
        channels, out, size = _RNG.randrange(8, 33), _RNG.randrange(8, 33), _RNG.randrange(14, 31)
        x, w = tensor(2, channels, size, size), tensor(out, channels, 3, 3)
        return lambda: x.conv2d(w, padding=1)
    raise ValueError(f"unknown kernel kind {kind!r}")


def kernel_asts(kind: str, device: str) -> list[Any]:
    """The kernel ASTs (SINKs) of one fresh expression of `kind`."""
    return [si.ast for si in make_expression(kind, device)().schedule() if si.ast.op.name == "SINK"]


def render(renderer: Any, spec: Any) -> str:
    """The source of `spec` as `CompiledRunner` renders it."""
    from tinycore.engine.exec_item import render_program

    return render_program(renderer, spec)


def children_cpu() -> float:
    """CPU seconds used by finished child processes (the compiler) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def all_cpu() -> float:
    """CPU seconds of this process (every thread) and its finished children."""
    return time.process_time() + children_cpu()


def time_stages(kind: str, device: str, cpu: bool) -> tuple[dict[str, float], list[str]]:
    """Seconds per stage for the kernels of one fresh expression of `kind` (summed over its kernels), and their
    sources; with `cpu`, CPU seconds (for ``compile``: this process's and its children's, so an in-process compiler
    counts too)."""
    from tinycore.codegen import get_program, record_stage_times
    from tinycore.device import Device

    dev = Device[device]
    clock = time.thread_time if cpu else time.perf_counter
    compile_clock = all_cpu if cpu else time.perf_counter  # children for a compiler process, threads for in-process
    out: dict[str, float] = dict.fromkeys(STAGES, 0.0)
    sources: list[str] = []
    for ast in kernel_asts(kind, device):
        with record_stage_times(clock) as times:
            spec = get_program(ast, dev.renderer)
        for stage, seconds in times.items():
            out[stage] += seconds
        start = clock()
        src = render(dev.renderer, spec)
        out["render"] += clock() - start
        start = compile_clock()
        lib = dev.compiler.compile(src)
        out["compile"] += compile_clock() - start
        start = clock()
        dev.runtime(spec.function_name, lib)
        out["load"] += clock() - start
        sources.append(src)
    return out, sources


def time_end_to_end(kind: str, device: str, cpu: bool) -> float:
    """Seconds of a cold ``realize()`` of a fresh expression minus a warm one of the same expression (with `cpu`,
    CPU seconds of the process and the compiler)."""
    from tinycore.device import Device

    clock = all_cpu if cpu else time.perf_counter
    build = make_expression(kind, device)
    sync = Device[device].synchronize
    start = clock()
    build().realize()
    sync()
    cold = clock() - start
    start = clock()
    build().realize()
    sync()
    return cold - (clock() - start)


def compare_flags(device: str, sources: list[str], flag_sets: list[str], reps: int) -> dict[str, float]:
    """Median seconds to compile one of `sources` with each set of extra flags (interleaved)."""
    from tinycore.device import Device

    compiler = Device[device].compiler
    base = tuple(compiler.flags)
    times: dict[str, list[float]] = {flags: [] for flags in flag_sets}
    try:
        for _ in range(reps):
            for flags in flag_sets:
                compiler.flags = base + tuple(shlex.split(flags))
                for src in sources:
                    start = time.perf_counter()
                    compiler.compile(src)
                    times[flags].append(time.perf_counter() - start)
    finally:
        compiler.flags = base
    return {flags: statistics.median(values) for flags, values in times.items()}


def compare_batch(device: str, sources: list[str], reps: int) -> dict[str, float]:
    """Seconds to compile all `sources` one by one versus in one `compile_many` call (medians, interleaved)."""
    from tinycore.device import Device

    compiler = Device[device].compiler
    one_by_one: list[float] = []
    batched: list[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        for src in sources:
            compiler.compile(src)
        one_by_one.append(time.perf_counter() - start)
        start = time.perf_counter()
        compiler.compile_many(sources)
        batched.append(time.perf_counter() - start)
    return {"one_by_one": statistics.median(one_by_one), "compile_many": statistics.median(batched)}


def profile(kind: str, device: str, reps: int) -> None:
    """Print the cProfile of the code-generation stages (lowering to linearized program) of `kind`."""
    from tinycore.codegen import get_program
    from tinycore.device import Device

    renderer = Device[device].renderer
    asts = [ast for _ in range(reps) for ast in kernel_asts(kind, device)]
    profiler = cProfile.Profile()
    profiler.enable()
    for ast in asts:
        get_program(ast, renderer)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def mlp_first_calls(device: str) -> dict[str, float]:
    """Seconds of calls 0 (eager) and 1 (capture) of a TinyJit'd 784-512-512-10 MLP SGD step (batch 128), and the
    CPU seconds of this process and of the compiler processes during them."""
    from tinycore import Tensor, TinyJit
    from tinycore.nn.optim import SGD

    rng = np.random.default_rng(0)
    shapes = [(784, 512), (512,), (512, 512), (512,), (512, 10), (10,)]
    params = [Tensor(rng.standard_normal(s).astype(np.float32), device=device, requires_grad=True) for s in shapes]
    params = [p.realize() for p in params]
    opt = SGD(params, lr=0.01)
    xs = [Tensor(rng.standard_normal((128, 784)).astype(np.float32), device=device).realize() for _ in range(2)]
    ys = [Tensor(rng.integers(0, 10, 128).astype(np.int32), device=device).realize() for _ in range(2)]

    @TinyJit
    def step(x: Any, y: Any) -> Any:
        w1, b1, w2, b2, w3, b3 = params
        h = ((x @ w1 + b1).relu() @ w2 + b2).relu()
        logits = h @ w3 + b3
        onehot = (Tensor.arange(10, device=device).reshape(1, 10) == y.reshape(128, 1)).cast(logits.dtype)
        loss = -(logits.log_softmax(1) * onehot).sum() / 128
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.realize()

    own, children, start = time.process_time(), children_cpu(), time.perf_counter()
    step(xs[0], ys[0])
    middle = time.perf_counter()
    step(xs[1], ys[1])
    end = time.perf_counter()
    return {
        "call0": middle - start,
        "call1": end - middle,
        "total": end - start,
        "python_cpu": time.process_time() - own,
        "compiler_cpu": children_cpu() - children,
    }


def compare_mlp(device: str, reps: int) -> dict[str, float]:
    """Medians of `mlp_first_calls` over `reps` fresh processes, each with a disk cache that holds the compiler
    facts (version, target, link command) and the runtime library but no kernel: a new program on a set-up machine."""
    import json
    import shutil
    import subprocess

    seed = tempfile.mkdtemp(prefix="tinycore-bench-mlp-seed-")
    env = {**os.environ, "CACHELEVEL": "1", "TINYCORE_CACHE_DIR": seed}
    subprocess.run([sys.executable, __file__, "--device", device, "--mlp-child", "seed"], env=env, check=True)
    rows: list[dict[str, float]] = []
    for _ in range(reps):
        folder = tempfile.mkdtemp(prefix="tinycore-bench-mlp-")
        shutil.rmtree(folder)
        shutil.copytree(seed, folder)
        env["TINYCORE_CACHE_DIR"] = folder
        cmd = [sys.executable, __file__, "--device", device, "--mlp-child", "run"]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
        shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(seed, ignore_errors=True)
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


def _mlp_child(device: str, what: str) -> None:
    import json

    from tinycore.device import Device

    if what == "seed":  # what a machine that ran tinycore before has in its cache, besides kernels
        compiler = getattr(Device[device], "host_compiler", None) or Device[device].compiler
        Device[device].compiler.cache_key_parts()
        compiler.cache_key_parts()
        for name in ("link_command",):
            if hasattr(compiler, name):
                getattr(compiler, name)()
        if device.split(":")[0] == "CLANG":
            from tinycore_clang.threadpool import get_pool

            get_pool(Device[device].pool_compiler)
        return
    print(json.dumps(mlp_first_calls(device)))


def main() -> None:
    """Parse arguments, run the repetitions, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="CLANG")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--only", default="", help="comma-separated kinds: " + ",".join(KINDS))
    parser.add_argument("--profile", default="", help="a kind to profile instead of timing")
    parser.add_argument("--flags", nargs="*", default=[], help="extra compiler flag sets to compare")
    parser.add_argument("--batch", type=int, default=0, help="compare N kernels one by one vs compile_many")
    parser.add_argument("--mlp", type=int, default=0, help="time MLP calls 0+1 in N fresh processes, then stop")
    parser.add_argument("--mlp-child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mlp_child:
        _mlp_child(args.device, args.mlp_child)
        return
    if args.mlp:
        result = compare_mlp(args.device, args.mlp)
        print(f"MLP 784-512-512-10 SGD in TinyJit on {args.device}, medians of {args.mlp} fresh processes (no kernel "
              f"cached): call 0 {result['call0']:.3f} s, call 1 {result['call1']:.3f} s, "
              f"total {result['total']:.3f} s; CPU: python {result['python_cpu']:.3f} s, "
              f"compiler {result['compiler_cpu']:.3f} s")  # fmt: skip
        return
    kinds = [k for k in KINDS if not args.only or k in args.only.split(",")]
    from tinycore.device import Device

    dev = Device[args.device]
    print(f"device {args.device}: {dev.compiler!r}")
    for kind in kinds:  # warm-up: imports, pattern matcher compilation, the first dlopen
        time_stages(kind, args.device, False)
        time_end_to_end(kind, args.device, False)
    if args.profile:
        profile(args.profile, args.device, args.reps)
        return
    columns = (*STAGES, "codegen", "e2e")
    samples = {cpu: {k: {c: [] for c in columns} for k in kinds} for cpu in (False, True)}
    sources: dict[str, list[str]] = {k: [] for k in kinds}
    for _ in range(args.reps):
        for kind in kinds:
            for cpu in (False, True):
                stages, srcs = time_stages(kind, args.device, cpu)
                table = samples[cpu][kind]
                for stage, seconds in stages.items():
                    table[stage].append(seconds)
                table["codegen"].append(sum(stages[s] for s in STAGES[:6]))
                table["e2e"].append(time_end_to_end(kind, args.device, cpu))
                sources[kind].extend(srcs)
    for cpu in (False, True):
        print(f"\nmedian {'CPU' if cpu else 'wall-clock'} ms per kernel kind "
              "(codegen = lower..render, the Python side; e2e = cold - warm realize)")  # fmt: skip
        print(f"| kind | {' | '.join(columns)} |")
        print("|---|" + "---:|" * len(columns))
        for kind in kinds:
            cells = [f"{statistics.median(samples[cpu][kind][c]) * 1e3:.1f}" for c in columns]
            print(f"| {kind} | {' | '.join(cells)} |")
    every = [src for kind in kinds for src in sources[kind][: max(1, args.reps // 2)]]
    if args.flags:
        print("\nmedian ms to compile one kernel, extra flags:")
        for flags, seconds in compare_flags(args.device, every, ["", *args.flags], 3).items():
            print(f"  {flags or '(defaults)':30s} {seconds * 1e3:7.1f}")
    if args.batch and hasattr(dev.compiler, "compile_many"):
        batch = (every * args.batch)[: args.batch]
        result = compare_batch(args.device, batch, 3)
        print(f"\n{len(batch)} kernels: one by one {result['one_by_one'] * 1e3:.1f} ms, "
              f"compile_many {result['compile_many'] * 1e3:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
