#!/usr/bin/env python3
"""Run the shared peer benchmark for tinycore, numpy and torch interleaved in one run, and print ratios.

Usage:
    python bench/peers.py [--rounds 2] [--only dispatch,chain20] [--threads 0] [--harness PATH]

Each round runs `peer_bench.py --lib X` for X in (tinycore, numpy, torch) one after the other, appending to one
JSON-lines file under `bench/results/`, so every ratio compares numbers measured minutes apart on the same machine.
The table printed at the end gives, per workload, tinycore's median value, the best peer's, and the ratio
(> 1 means tinycore is better, whatever the unit's direction). Benchmarks are never run as timed tests.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_HARNESS = HERE.parent.parent / "shared" / "bench" / "peer_bench.py"
LOWER_IS_BETTER_UNITS = ("us/op", "us/call", "ms")
PEERS = ("numpy", "torch")


def run_round(harness: Path, lib: str, round_id: str, out: Path, only: str, threads: int) -> None:
    """Run one library through the harness, appending its rows to `out`."""
    cmd = [sys.executable, str(harness), "--lib", lib, "--run-id", round_id, "--out", str(out)]
    if only:
        cmd += ["--only", only]
    if threads:
        cmd += ["--threads", str(threads)]
    print(f"== {lib} ({round_id})", flush=True)
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)


def ratio_table(out: Path) -> str:
    """Markdown table: workload, unit, tinycore, best peer (which), ratio (>1 = tinycore better)."""
    values: dict[tuple[str, str], list[float]] = {}
    units: dict[str, str] = {}
    errors: dict[str, str] = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        if row["workload"].startswith("_"):
            continue
        if "error" in row:
            errors.setdefault(f"{row['workload']}/{row['lib']}", row["error"])
            continue
        if row.get("ok") is False:
            errors.setdefault(f"{row['workload']}/{row['lib']}", "result differs from numpy")
        values.setdefault((row["workload"], row["lib"]), []).append(row["value"])
        units[row["workload"]] = row["unit"]
    lines = ["| workload | unit | tinycore | best peer | ratio (>1: tinycore better) |", "|---|---|---:|---:|---:|"]
    for workload in dict.fromkeys(w for w, _ in values):
        unit = units[workload]
        lower_better = unit.startswith(LOWER_IS_BETTER_UNITS)
        ours = values.get((workload, "tinycore"))
        peers = {lib: statistics.median(values[(workload, lib)]) for lib in PEERS if (workload, lib) in values}
        if not peers:
            if ours is not None:
                lines.append(f"| {workload} | {unit} | {statistics.median(ours):.3g} | n/a | n/a |")
            continue
        best_lib = (min if lower_better else max)(peers, key=peers.__getitem__)
        best = peers[best_lib]
        if ours is None:
            lines.append(f"| {workload} | {unit} | n/a | {best:.3g} ({best_lib}) | n/a |")
            continue
        mine = statistics.median(ours)
        ratio = (best / mine if lower_better else mine / best) if mine and best else float("nan")
        lines.append(f"| {workload} | {unit} | {mine:.3g} | {best:.3g} ({best_lib}) | {ratio:.2f}x |")
    for key, message in errors.items():
        lines.append(f"\n- {key}: {message}")
    return "\n".join(lines)


def main() -> None:
    """Parse arguments, run the rounds, print the ratio table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated workload prefixes (passed to the harness)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--harness", type=Path, default=Path(os.environ.get("PEER_BENCH", DEFAULT_HARNESS)))
    parser.add_argument("--libs", default="tinycore,numpy,torch")
    args = parser.parse_args()
    if not args.harness.exists():
        sys.exit(f"peer harness not found at {args.harness}; pass --harness or set PEER_BENCH")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = HERE / "results" / f"peers-{stamp}.jsonl"
    out.parent.mkdir(exist_ok=True)
    for round_number in range(1, args.rounds + 1):
        for lib in args.libs.split(","):
            run_round(args.harness, lib, f"r{round_number}", out, args.only, args.threads)
    print(ratio_table(out))
    print(f"\nraw rows: {out}")


if __name__ == "__main__":
    main()
