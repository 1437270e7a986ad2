#!/usr/bin/env python3
"""CPU matmul and convolution under register-tile variants, beside torch: which tile suits this machine.

Usage:
    python bench/bench_cpu_tiles.py [--threads 2] [--rounds 5] [--only matmul_1024,conv] [--vectors 2,4] [--l2 512,2048]

Each variant sets the CLANG renderer's ``gemm_panel_bytes`` (the register tile's width in vectors, `--vectors`)
and its ``l2_bytes`` (the L2 cache a block of left-operand rows is sized for, `--l2`), starts from fresh schedules
and kernels, and times each workload in rounds (10 calls of tinycore, a pause, 10 of torch), so both see about the
same moment of a shared, noisy machine. The table gives tinycore's median GFLOPS per variant and the median of the
rounds' ratios to torch (> 1: tinycore faster); the first row is what the renderer picks on this machine. Results
are checked against numpy. Benchmarks are never run as timed tests.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from paired_timing import alternate


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="THREADS for tinycore and torch (default: all)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of 10 + 10 calls per cell")
    parser.add_argument("--only", default="", help="comma-separated workload names (default: all)")
    parser.add_argument("--vectors", default="2,4", help="comma-separated tile widths in vector registers")
    parser.add_argument("--l2", default="", help="comma-separated L2 budgets in KiB (default: the renderer's, 2048)")
    return parser.parse_args()


def main() -> None:
    args = _parse()
    if args.threads is not None:
        os.environ["THREADS"] = str(args.threads)
    import numpy as np
    import torch
    import torch.nn.functional as F

    from tinycore import Tensor
    from tinycore.device import Device
    from tinycore.engine.realize import clear_runner_cache
    from tinycore.engine.schedule_cache import clear_schedule_cache

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    workloads: dict[str, tuple[Callable[[], Tensor], Callable[[], object], Callable[[Tensor], bool], float, int]] = {}
    for n in (512, 1024, 2048):
        a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
        ta, tb, pa, pb = Tensor(a, device="CLANG"), Tensor(b, device="CLANG"), torch.from_numpy(a), torch.from_numpy(b)
        want = a.astype(np.float64) @ b.astype(np.float64)
        workloads[f"matmul_{n}"] = (
            lambda ta=ta, tb=tb: (ta @ tb).realize(),
            lambda pa=pa, pb=pb: pa @ pb,
            lambda got, want=want: np.allclose(got.numpy(), want, rtol=1e-3),
            2 * n**3,
            10 if n < 2048 else 3,
        )
    x, w = rng.random((8, 64, 56, 56), dtype=np.float32), rng.random((64, 64, 3, 3), dtype=np.float32)
    tx, tw, px, pw = Tensor(x, device="CLANG"), Tensor(w, device="CLANG"), torch.from_numpy(x), torch.from_numpy(w)
    want_conv = F.conv2d(px.double(), pw.double(), padding=1).numpy()
    workloads["conv"] = (
        lambda: tx.conv2d(tw, padding=1).realize(),
        lambda: F.conv2d(px, pw, padding=1),
        lambda got: np.allclose(got.numpy(), want_conv, rtol=1e-3),
        2 * 8 * 64 * 64 * 9 * 56 * 56,
        10,
    )
    if args.only:
        workloads = {k: v for k, v in workloads.items() if k in args.only.split(",")}
    renderer = Device["CLANG"].renderer
    vb = renderer.vector_bytes
    base_panel, base_l2 = renderer.gemm_panel_bytes, renderer.l2_bytes
    l2s = [int(v) << 10 for v in args.l2.split(",")] if args.l2 else [base_l2, 2 << 20]
    variants = [("today", base_panel, base_l2)] + [
        (f"{v} vectors, L2 {l2 >> 10} KiB", v * vb, l2)
        for l2 in dict.fromkeys(l2s)
        for v in (int(x) for x in args.vectors.split(","))
        if (v * vb, l2) != (base_panel, base_l2)
    ]
    print(
        f"CLANG: {renderer.vector_registers} vector registers of {vb} bytes; torch {torch.__version__}; "
        f"{args.rounds} rounds per cell; GFLOPS (ratio to torch, > 1: tinycore faster)"
    )
    print("| variant | " + " | ".join(workloads) + " |")
    print("|---|" + "---:|" * len(workloads))
    for label, panel, l2 in variants:
        renderer.gemm_panel_bytes, renderer.l2_bytes = panel, l2
        clear_schedule_cache()
        clear_runner_cache()
        cells = []
        for name, (ours, peer, check, flops, calls) in workloads.items():
            if not check(ours()):
                raise SystemExit(f"{name} under {label!r}: wrong values")
            seconds, _, ratio = alternate(ours, peer, args.rounds, calls)
            cells.append(f"{flops / seconds / 1e9:.0f} ({ratio:.2f}x)")
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    renderer.gemm_panel_bytes, renderer.l2_bytes = base_panel, base_l2


if __name__ == "__main__":
    main()
