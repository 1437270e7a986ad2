#!/usr/bin/env python3
"""Kernel-quality benchmark: single kernels built as kernel ASTs, optimized by the heuristics (or BEAM), run on a
compiled device, compared with numpy (and torch when installed) measured in the same run.

Usage:
    python bench/bench_kernels.py [--device CLANG] [--only matmul_512,sum_16M] [--beam 2] [--noopt] [--reps 10]
                                  [--threads 1]

Workloads (float32):

- ``matmul_512`` / ``matmul_1024``: ``C = A @ B`` as one kernel (GFLOPS, 2*n^3 flops);
- ``sum_16M``: the sum of 16M floats into one value (GB/s of input read);
- ``elementwise_16M``: ``a*b + a`` (GB/s of 3 arrays moved);
- ``pack_1024``: the packing copy of a matmul's right operand into 16-column panels (GB/s of input + output);
- ``transpose_2048``: ``a.T`` into a contiguous buffer (GB/s of input + output);
- ``softmax_4096``: softmax over the rows of a 4096 x 4096 matrix as three kernels (row max, row sum of exp, divide;
  GB/s of input + output).

Each kernel is compiled once; then tinycore (``Program(..., wait=True)``), numpy and torch are timed in alternating
blocks of `--reps` calls (two rounds, a pause before each block), so all see the same (shared, noisy) machine and
no library's spinning worker threads slow another; the table shows medians.
Results are checked against numpy (float64 reference). numpy/torch use their own default thread counts.
Benchmarks are never run as timed tests.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


def _thread_env() -> None:
    """``--threads N`` must be in the environment before numpy/torch/tinycore start their thread pools."""
    if "--threads" in sys.argv[:-1]:
        n = sys.argv[sys.argv.index("--threads") + 1]
        for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "THREADS"):
            os.environ[key] = n


_thread_env()

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tinycore.codegen import Opt, get_program  # noqa: E402
from tinycore.device import Buffer, Device  # noqa: E402
from tinycore.dtype import dtypes  # noqa: E402
from tinycore.engine.exec_item import CompiledRunner  # noqa: E402
from tinycore.helpers import Context  # noqa: E402
from tinycore.uop.ops import Ops, UOp  # noqa: E402

F32 = dtypes.float


def _load(arg: int, size: int) -> UOp:
    return UOp(Ops.LOAD, F32, (UOp.define_global(arg, F32, size),))


def matmul_ast(n: int) -> UOp:
    """``out[i, j] = sum_k a[i, k] * b[k, j]`` for n x n matrices (buffers: out, a, b)."""
    a = _load(1, n * n).reshape((n, n, 1)).expand((n, n, n))
    b = _load(2, n * n).reshape((1, n, n)).expand((n, n, n))
    return UOp.sink(UOp.define_global(0, F32, n * n).reshape((n, 1, n)).store((a * b).r(Ops.ADD, (1,))))


def sum_ast(n: int) -> UOp:
    """``out[0] = sum(a)`` (buffers: out, a)."""
    return UOp.sink(UOp.define_global(0, F32, 1).reshape((1,)).store(_load(1, n).r(Ops.ADD, (0,))))


def elementwise_ast(n: int) -> UOp:
    """``out = a * b + a`` (buffers: out, a, b)."""
    a, b = _load(1, n), _load(2, n)
    return UOp.sink(UOp.define_global(0, F32, n).store(a * b + a))


def permute_ast(shape: tuple[int, ...], order: tuple[int, ...]) -> UOp:
    """``out = a.permute(order)`` into a contiguous buffer (buffers: out, a)."""
    size = math.prod(shape)
    out_shape = tuple(shape[i] for i in order)
    return UOp.sink(
        UOp.define_global(0, F32, size).reshape(out_shape).store(_load(1, size).reshape(shape).permute(order))
    )


def softmax_asts(rows: int, cols: int) -> list[UOp]:
    """Three kernels: ``m = max(x, 1)``, ``s = sum(exp(x - m), 1)``, ``out = exp(x - m) / s``.
    Buffers: (m, x), (s, x, m), (out, x, m, s)."""
    log2e = 1.0 / math.log(2.0)

    def x() -> UOp:
        return _load(1, rows * cols).reshape((rows, cols))

    def col(arg: int) -> UOp:
        return _load(arg, rows).reshape((rows, 1)).expand((rows, cols))

    def exp_shifted() -> UOp:
        return UOp(Ops.EXP2, F32, ((x() - col(2)) * UOp.const(F32, log2e).reshape((1, 1)).expand((rows, cols)),))

    k_max = UOp.sink(UOp.define_global(0, F32, rows).reshape((rows, 1)).store(x().r(Ops.MAX, (1,))))
    k_sum = UOp.sink(UOp.define_global(0, F32, rows).reshape((rows, 1)).store(exp_shifted().r(Ops.ADD, (1,))))
    k_div = UOp.sink(UOp.define_global(0, F32, rows * cols).reshape((rows, cols)).store(exp_shifted() / col(3)))
    return [k_max, k_sum, k_div]


@dataclass
class Workload:
    """One benchmark: kernel ASTs with their buffer lists, a numpy reference, and the amount of work."""

    name: str
    unit: str  # "GFLOPS" or "GB/s"
    work: float  # flops or bytes
    kernels: list[tuple[UOp, list[int]]]  # (ast, buffer slots): slot i of the workload's arrays
    arrays: list[np.ndarray]  # inputs (and zeroed outputs), by slot
    out_slot: int
    reference: Callable[[list[np.ndarray]], np.ndarray]
    peer_numpy: Callable[[list[np.ndarray]], object]
    peer_torch: Callable[[list[object]], object] | None = None


def workloads(only: set[str] | None) -> list[Workload]:
    """The benchmark list (random inputs, fixed seed)."""
    rng = np.random.default_rng(0)
    out: list[Workload] = []

    def want(name: str) -> bool:
        return only is None or name in only

    for n in (512, 1024):
        if want(f"matmul_{n}"):
            a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
            out.append(
                Workload(
                    f"matmul_{n}", "GFLOPS", 2.0 * n**3, [(matmul_ast(n), [0, 1, 2])],
                    [np.zeros(n * n, np.float32), a.ravel(), b.ravel()], 0,
                    lambda arr, n=n: (arr[1].reshape(n, n).astype(np.float64) @ arr[2].reshape(n, n)).ravel(),
                    lambda arr, n=n: arr[1].reshape(n, n) @ arr[2].reshape(n, n),
                    lambda t, n=n: t[1].reshape(n, n) @ t[2].reshape(n, n),
                )
            )  # fmt: skip
    n = 1 << 24
    if want("sum_16M"):
        a = rng.standard_normal(n, np.float32)
        out.append(
            Workload(
                "sum_16M", "GB/s", 4.0 * n, [(sum_ast(n), [0, 1])], [np.zeros(1, np.float32), a], 0,
                lambda arr: np.array([arr[1].astype(np.float64).sum()]),
                lambda arr: arr[1].sum(),
                lambda t: t[1].sum(),
            )
        )  # fmt: skip
    if want("elementwise_16M"):
        a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
        out.append(
            Workload(
                "elementwise_16M", "GB/s", 12.0 * n, [(elementwise_ast(n), [0, 1, 2])],
                [np.zeros(n, np.float32), a, b], 0,
                lambda arr: arr[1].astype(np.float64) * arr[2] + arr[1],
                lambda arr: arr[1] * arr[2] + arr[1],
                lambda t: t[1] * t[2] + t[1],
            )
        )  # fmt: skip
    panel = 16
    n = 1024
    if want(f"pack_{n}"):  # a matmul's right operand copied into column panels (tinycore.frontend.processing)
        b = rng.standard_normal(n * n, np.float32)
        shape, order = (n, n // panel, panel), (1, 0, 2)
        out.append(
            Workload(
                f"pack_{n}", "GB/s", 8.0 * n * n, [(permute_ast(shape, order), [0, 1])],
                [np.zeros(n * n, np.float32), b], 0,
                lambda arr, s=shape, o=order: arr[1].reshape(s).transpose(o).ravel(),
                lambda arr, s=shape, o=order: np.ascontiguousarray(arr[1].reshape(s).transpose(o)),
                lambda t, s=shape, o=order: t[1].reshape(s).permute(o).contiguous(),
            )
        )  # fmt: skip
    n = 2048
    if want(f"transpose_{n}"):
        a = rng.standard_normal(n * n, np.float32)
        out.append(
            Workload(
                f"transpose_{n}", "GB/s", 8.0 * n * n, [(permute_ast((n, n), (1, 0)), [0, 1])],
                [np.zeros(n * n, np.float32), a], 0,
                lambda arr, n=n: arr[1].reshape(n, n).T.ravel(),
                lambda arr, n=n: np.ascontiguousarray(arr[1].reshape(n, n).T),
                lambda t, n=n: t[1].reshape(n, n).T.contiguous(),
            )
        )  # fmt: skip
    if want("softmax_4096"):
        r = c = 4096
        x = rng.standard_normal(r * c, np.float32)
        k_max, k_sum, k_div = softmax_asts(r, c)

        def ref(arr: list[np.ndarray]) -> np.ndarray:
            e = np.exp(arr[1].reshape(r, c).astype(np.float64) - arr[1].reshape(r, c).max(1, keepdims=True))
            return (e / e.sum(1, keepdims=True)).ravel()

        def np_softmax(arr: list[np.ndarray]) -> np.ndarray:
            xx = arr[1].reshape(r, c)
            e = np.exp(xx - xx.max(1, keepdims=True))
            return e / e.sum(1, keepdims=True)

        out.append(
            Workload(
                "softmax_4096", "GB/s", 8.0 * r * c,
                [(k_max, [2, 1]), (k_sum, [3, 1, 2]), (k_div, [0, 1, 2, 3])],
                [np.zeros(r * c, np.float32), x, np.zeros(r, np.float32), np.zeros(r, np.float32)], 0,
                ref, np_softmax, lambda t: t[1].reshape(r, c).softmax(1),
            )
        )  # fmt: skip
    return out


def build_tinycore(
    w: Workload, device: str, opts: list[Opt] | None
) -> tuple[Callable[[], None], list[Buffer], list[str]]:
    """Compile the workload's kernels; returns (a function running them once, the buffers, kernel names)."""
    dev = Device[device]
    bufs = [Buffer(device, a.size, F32).copyin(np.ascontiguousarray(a).tobytes()) for a in w.arrays]
    runners = []
    names = []
    for ast, slots in w.kernels:
        p = get_program(ast, dev.renderer, opts)
        runners.append((CompiledRunner(p), [bufs[s] for s in slots]))
        names.append(f"{p.name} gs={tuple(p.global_size)}")

    def call() -> None:
        for runner, rb in runners:
            runner(rb, {}, wait=True)

    return call, bufs, names


def check_tinycore(w: Workload, bufs: list[Buffer]) -> bool:
    """The tinycore result against the float64 numpy reference."""
    got = bufs[w.out_slot].numpy().astype(np.float64)
    want = w.reference([np.asarray(a) for a in w.arrays])
    return bool(np.allclose(got, want, rtol=2e-3, atol=2e-3 * max(1.0, float(np.abs(want).max()))))


def time_interleaved(fns: dict[str, Callable[[], object]], reps: int, rounds: int = 2) -> dict[str, float]:
    """Median seconds of each function. Each library is timed in a block of `reps` calls (after one warm-up call),
    the blocks alternate between libraries for `rounds` rounds, with a pause before each block: torch's OpenMP and
    OpenBLAS workers spin after a call and would slow whoever runs next on this 2-core machine."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            time.sleep(0.3)
            fn()
            for _ in range(reps):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()} | {
        f"{name} best": min(t) for name, t in times.items()
    }


def main() -> None:
    """Parse arguments, run every workload on tinycore and its peers, print a markdown table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="CLANG")
    ap.add_argument("--only", default="", help="comma-separated workload names")
    ap.add_argument("--beam", type=int, default=0, help="BEAM width (0: the heuristics)")
    ap.add_argument("--noopt", action="store_true", help="also time the unoptimized kernels")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="threads for every library (0: their defaults)")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    try:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    rows = []
    for w in workloads(only):
        with Context(BEAM=args.beam):
            call, bufs, names = build_tinycore(w, args.device, None)
        fns: dict[str, Callable[[], object]] = {"tinycore": call, "numpy": lambda w=w: w.peer_numpy(w.arrays)}
        if args.noopt:
            with Context(NOOPT=1):
                fns["noopt"] = build_tinycore(w, args.device, None)[0]
        if torch is not None and w.peer_torch is not None:
            tensors = [torch.from_numpy(np.asarray(a)) for a in w.arrays]
            fns["torch"] = lambda w=w, t=tensors: w.peer_torch(t)
        seconds = time_interleaved(fns, args.reps)
        row: dict[str, object] = {"name": w.name, "unit": w.unit, "ok": check_tinycore(w, bufs), "kernels": names}
        row.update({name: w.work / sec / 1e9 for name, sec in seconds.items()})
        rows.append(row)
        print(
            f"{w.name:16s} {row['tinycore']:8.2f} {w.unit:6s} ok={row['ok']} numpy {row['numpy']:8.2f}"
            + (f" torch {row['torch']:8.2f}" if "torch" in row else "")
            + (f" noopt {row['noopt']:8.2f}" if "noopt" in row else "")
            + f"   {'; '.join(names)}",
            flush=True,
        )
    label = f"BEAM={args.beam}" if args.beam else "heuristic"
    print(f"\nmedian (best of {2 * args.reps}) per library; ratios of medians (of bests)\n")
    noopt = any("noopt" in r for r in rows)
    extra = " NOOPT |" if noopt else ""
    print(f"| workload | unit | tinycore ({label}) |{extra} numpy | torch | vs numpy | vs torch | ok |")
    print("|---|---|---:|" + ("---:|" if noopt else "") + "---:|---:|---:|---:|---|")

    def cell(r: dict, lib: str) -> str:
        return f"{float(r[lib]):.2f} ({float(r[lib + ' best']):.2f})" if lib in r else "-"

    def ratio(r: dict, lib: str) -> str:
        if lib not in r:
            return "-"
        med = float(r["tinycore"]) / float(r[lib])
        best = float(r["tinycore best"]) / float(r[lib + " best"])
        return f"{med:.2f}x ({best:.2f}x)"

    for r in rows:
        print(
            f"| {r['name']} | {r['unit']} | {cell(r, 'tinycore')} |"
            + (f" {cell(r, 'noopt')} |" if noopt else "")
            + f" {cell(r, 'numpy')} | {cell(r, 'torch')} | "
            f"{ratio(r, 'numpy')} | {ratio(r, 'torch')} | {r['ok']} |"
        )


if __name__ == "__main__":
    main()
