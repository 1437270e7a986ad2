"""Measure the CLANG device's launch overhead and cold compile latency (a benchmark, not a test).

    python plugins/tinycore_clang/bench/bench_clang.py [--compilers gcc,clang] [--reps 15]

Prints, per compiler and flag set: median cold compile time of one tiny kernel (fresh source each time, no cache),
and of a batch of 16 kernels through `compile_many` vs one by one; lowering (`get_program`) and rendering time;
and the launch overhead of a 16-element kernel: direct `ClangProgram` call, through `ExecItem.run`, and a threaded
(core_id) launch on the native pool.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import numpy as np

os.environ.setdefault("TINYCORE_CACHE_DIR", tempfile.mkdtemp(prefix="tc-bench-cache-"))

from tinycore_clang.compiler import DEFAULT_FLAGS, ClangCompiler  # noqa: E402
from tinycore_clang.device import ClangDevice  # noqa: E402
from tinycore_clang.doctor import core_id_program  # noqa: E402
from tinycore_clang.renderer import ClangRenderer  # noqa: E402
from tinycore_clang.testing import elementwise  # noqa: E402

from tinycore.dtype import dtypes  # noqa: E402
from tinycore.uop.ops import Ops, UOp  # noqa: E402


def median_ms(samples: list[float]) -> str:
    """Median and minimum of timings in seconds, as milliseconds."""
    return f"{statistics.median(samples) * 1e3:7.1f} ms (min {min(samples) * 1e3:.1f})"


def fresh_sources(renderer: ClangRenderer, count: int, salt: int) -> list[str]:
    """Distinct tiny kernels (the constant differs), so nothing is cached anywhere."""
    out = []
    for k in range(count):
        prog = elementwise(lambda x, v=salt * 1000 + k: x + UOp.const(dtypes.float32, float(v)), [dtypes.float32],
                           dtypes.float32, 16)  # fmt: skip
        out.append(renderer.render(prog, name=f"E_16_{salt}_{k}"))
    return out


def bench_compile(cc: str, reps: int) -> None:
    """Cold compile latency of compiler `cc` at -O2 and -O1: one kernel, and 16 batched vs one by one."""
    renderer = ClangRenderer()
    for opt in ("-O2", "-O1"):
        flags = (*DEFAULT_FLAGS, "-march=native")
        flags = tuple(opt if f == "-O2" else f for f in flags)
        compiler = ClangCompiler(cc=cc, flags=flags)
        compiler.compile(fresh_sources(renderer, 1, 999)[0])  # warm the page cache
        single = []
        for r in range(reps):
            src = fresh_sources(renderer, 1, r)[0]
            start = time.perf_counter()
            compiler.compile(src)
            single.append(time.perf_counter() - start)
        batch, one_by_one = [], []
        for r in range(3):
            srcs = fresh_sources(renderer, 16, 100 + r)
            start = time.perf_counter()
            compiler.compile_many(srcs)
            batch.append((time.perf_counter() - start) / 16)
            srcs = fresh_sources(renderer, 16, 200 + r)
            start = time.perf_counter()
            for s in srcs:
                compiler.compile(s)
            one_by_one.append((time.perf_counter() - start) / 16)
        name = os.path.basename(cc)
        print(
            f"compile {name:6s} {opt}: 1 kernel {median_ms(single)} | per kernel, 16 in compile_many "
            f"{median_ms(batch)}, one by one {median_ms(one_by_one)}"
        )


def bench_lowering(device: ClangDevice, reps: int) -> None:
    """Time of `get_program` (lowering) and of rendering C for a small elementwise kernel."""
    try:
        from tinycore.codegen import get_program
    except ImportError:
        print("lowering: tinycore.codegen.get_program not available")
        return
    lower, render = [], []
    for r in range(reps):
        out, inp = UOp.define_global(0, dtypes.float, 64), UOp.define_global(1, dtypes.float, 64)
        x = UOp(Ops.LOAD, dtypes.float, (inp,)).reshape((8, 8))
        ast = UOp.sink(out.reshape((8, 8)).store(UOp(Ops.EXP2, dtypes.float, (x * x + float(r),))))
        start = time.perf_counter()
        program = get_program(ast, device.renderer)
        mid = time.perf_counter()
        device.renderer.render(program.uops, name=program.function_name)
        end = time.perf_counter()
        lower.append(mid - start)
        render.append(end - mid)
    print(f"lowering (get_program, exp2 elementwise): {median_ms(lower)}; rendering C: {median_ms(render)}")


def bench_launch(device: ClangDevice) -> None:
    """Launch overhead of a 16-element kernel: direct, through `ExecItem.run`, and threaded."""
    from tinycore.device import Buffer
    from tinycore.engine.exec_item import CompiledRunner, ExecItem
    from tinycore.renderer import ProgramSpec

    prog = elementwise(Ops.ADD, [dtypes.float32] * 2, dtypes.float32, 16)
    src = device.renderer.render(prog, name="E_16_launch")
    program = device.runtime("E_16_launch", device.compiler.compile_cached(src))
    alloc = device.allocator
    bufs = [alloc.alloc(64) for _ in range(3)]
    n = 200_000
    for _ in range(1000):
        program(*bufs)
    start = time.perf_counter()
    for _ in range(n):
        program(*bufs, global_size=(1, 1, 1), local_size=None, vals=())
    direct = (time.perf_counter() - start) / n
    runner = CompiledRunner(ProgramSpec("E_16_launch", prog, "CLANG"))
    buffers = [Buffer("CLANG", 16, dtypes.float32).copyin(np.zeros(16, np.float32).data) for _ in range(3)]
    item = ExecItem(runner, buffers)
    m = 50_000
    start = time.perf_counter()
    for _ in range(m):
        item.run()
    exec_item = (time.perf_counter() - start) / m
    threaded = device.runtime("tc_cores", device.compiler.compile_cached(device.renderer.render(
        core_id_program(device.threads, 8), name="tc_cores")))  # fmt: skip
    out = alloc.alloc(4 * 8 * device.threads)
    for _ in range(1000):
        threaded(out, global_size=(device.threads, 1, 1))
    k = 20_000
    start = time.perf_counter()
    for _ in range(k):
        threaded(out, global_size=(device.threads, 1, 1))
    hot = (time.perf_counter() - start) / k
    cold = []
    for _ in range(50):
        time.sleep(0.005)  # let the workers go to sleep
        start = time.perf_counter()
        threaded(out, global_size=(device.threads, 1, 1))
        cold.append(time.perf_counter() - start)
    print(
        f"launch, 16-element kernel: direct ClangProgram call {direct * 1e6:.2f} us, "
        f"ExecItem.run {exec_item * 1e6:.2f} us"
    )
    print(
        f"threaded launch ({device.threads} threads, empty-ish chunks): back to back {hot * 1e6:.2f} us, "
        f"after the workers slept {statistics.median(cold) * 1e6:.1f} us (median)"
    )


POOL_HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static int hits[512];
static void bump(void* const* b, const long long* v, int c) { (void)b; (void)v; __atomic_add_fetch(&hits[c], 1, 0); }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char** argv) {
  void* bufs[1] = {0}; long long vals[1] = {0}; int T = atoi(argv[1]), n = 100000;
  for (int i = 0; i < 1000; i++) tc_run(bump, bufs, vals, T, T);
  double t = now();
  for (int i = 0; i < n; i++) tc_run(bump, bufs, vals, T, T);
  double hot = (now() - t) / n * 1e6, cold = 0;
  for (int i = 0; i < 50; i++) { usleep(5000); t = now(); tc_run(bump, bufs, vals, T, T); cold += now() - t; }
  tc_item items[3] = {{bump, bufs, vals, T, 0}, {bump, bufs, vals, 1, 0}, {bump, bufs, vals, 2 * T, 0}};
  t = now();
  for (int i = 0; i < n; i++) tc_run_batch(items, 3, T);
  double batch = (now() - t) / n * 1e6;
  for (int c = 0; c < 2 * T; c++) {
    int expect = (c < T ? 1050 + 2 * n : 0) + (c == 0 ? n : 0) + n;
    if (hits[c] != expect) { printf("BAD chunk %d ran %d times, expected %d\n", c, hits[c], expect); return 1; }
  }
  printf("native pool, %2d threads: tc_run back to back %.2f us, after the workers slept %.1f us, "
         "3-item tc_run_batch %.2f us (chunk counts ok)\n", T, hot, cold / 50 * 1e6, batch);
  return 0;
}
"""


def bench_pool_native(cc: str, threads: list[int]) -> None:
    """The thread pool without Python: a C harness linked with the runtime library source."""
    import subprocess

    from tinycore_clang.threadpool import RUNTIME_SRC

    folder = tempfile.mkdtemp(prefix="tc-pool-bench-")
    src, exe = os.path.join(folder, "pool.c"), os.path.join(folder, "pool")
    with open(src, "w") as file:
        file.write(RUNTIME_SRC + POOL_HARNESS)
    subprocess.run([cc, "-O2", "-pthread", src, "-o", exe], check=True)
    for count in threads:
        print(subprocess.run([exe, str(count)], capture_output=True, text=True).stdout.strip())
    shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    """Parse the command line and print every measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compilers", default="gcc,clang")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--pool", default="", help="thread counts for the native pool benchmark, e.g. 2,4,16")
    args = parser.parse_args()
    device = ClangDevice()
    if args.pool:
        bench_pool_native(device.compiler.cc, [int(t) for t in args.pool.split(",")])
    print(f"device {device.device}: compiler {device.compiler.cc}, threads {device.threads}")
    bench_launch(device)
    bench_lowering(device, args.reps)
    for cc in args.compilers.split(","):
        path = shutil.which(cc)
        if path is None:
            print(f"compile {cc}: not installed")
            continue
        bench_compile(path, args.reps)


if __name__ == "__main__":
    main()
