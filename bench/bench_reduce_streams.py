#!/usr/bin/env python3
"""How many rows a long reduce should read side by side on this CPU: the CLANG renderer's `reduce_streams`.

Usage:
    python bench/bench_reduce_streams.py [--streams 1,4] [--rounds 7] [--threads 2]

For each value of `reduce_streams` (a fresh schedule and kernel each), the sum of 16M floats and the row sums of a
4096 x 4096 matrix are timed beside torch (numpy when torch is missing) in rounds: 10 tinycore calls, a pause, 10
peer calls, so both see about the same moment of a shared, noisy machine. The table gives each side's median GB/s
and the median of the rounds' ratios (> 1: tinycore faster). The renderer's own choice (from the CPU vendor, see
``tinycore doctor CLANG``) is marked. Benchmarks are never run as timed tests.
"""

from __future__ import annotations

import argparse
import os

from paired_timing import alternate

N_SUM = 1 << 24
ROWS = 4096


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="1,4", help="comma-separated reduce_streams values to time")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of 10 tinycore and 10 peer calls per row")
    parser.add_argument("--threads", type=int, default=None, help="THREADS for tinycore and the peer (default: all)")
    return parser.parse_args()


def main() -> None:
    args = _parse()
    if args.threads is not None:
        os.environ["THREADS"] = str(args.threads)
    import numpy as np

    from tinycore import Tensor
    from tinycore.device import Device
    from tinycore.engine.realize import clear_runner_cache
    from tinycore.engine.schedule_cache import clear_schedule_cache

    try:
        import torch

        if args.threads is not None:
            torch.set_num_threads(args.threads)
        peer_name = f"torch {torch.__version__}"
    except ImportError:
        torch = None
        peer_name = f"numpy {np.__version__}"
    rng = np.random.default_rng(0)
    flat = rng.random(N_SUM, dtype=np.float32)
    rows = rng.random((ROWS, ROWS), dtype=np.float32)
    flat_t, rows_t = Tensor(flat, device="CLANG").realize(), Tensor(rows, device="CLANG").realize()
    if torch is not None:
        flat_p, rows_p = torch.from_numpy(flat.copy()), torch.from_numpy(rows.copy())
        peer_sum, peer_rows = (lambda: flat_p.sum()), (lambda: rows_p.sum(dim=1))
    else:
        peer_sum, peer_rows = (lambda: flat.sum()), (lambda: rows.sum(axis=1))
    renderer = Device["CLANG"].renderer
    chosen = renderer.reduce_streams
    print(f"CLANG renderer's reduce_streams here: {chosen}; peer: {peer_name}; {args.rounds} rounds of 10 calls each")
    print("| workload | reduce_streams | tinycore GB/s | peer GB/s | ratio (>1: tinycore faster) |")
    print("|---|---:|---:|---:|---:|")
    for streams in (int(s) for s in args.streams.split(",")):
        renderer.reduce_streams = streams
        clear_schedule_cache()
        clear_runner_cache()
        for name, ours, peer in (
            ("sum 16M", lambda: flat_t.sum().realize(), peer_sum),
            ("row sums 4096", lambda: rows_t.sum(axis=1).realize(), peer_rows),
        ):
            got = ours().numpy()
            want = flat.astype(np.float64).sum() if name.startswith("sum") else rows.astype(np.float64).sum(axis=1)
            if not np.allclose(got, want, rtol=1e-4):
                raise SystemExit(f"{name} with reduce_streams={streams}: wrong values")
            mine, theirs, ratio = alternate(ours, peer, args.rounds)
            mark = " (chosen)" if streams == chosen else ""
            gb = N_SUM * 4 / 1e9
            print(f"| {name} | {streams}{mark} | {gb / mine:.1f} | {gb / theirs:.1f} | {ratio:.2f}x |")
    renderer.reduce_streams = chosen


if __name__ == "__main__":
    main()
