"""Timing tinycore beside a peer library on a shared, noisy machine, for the scripts in this folder.

`alternate` times blocks of calls of each side in turn, a pause before each block (a library's idle worker threads
may spin for a while after its calls; the pause keeps them from slowing the other side's block), and gives the
medians and the median of the rounds' ratios, so both sides see about the same moment of the machine.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

PAUSE_S = 0.05


def alternate(
    ours: Callable[[], object], peer: Callable[[], object], rounds: int, calls: int = 10
) -> tuple[float, float, float]:
    """Median seconds per call of `ours`, of `peer`, and the median of the rounds' peer/ours ratios (> 1: `ours`
    faster), over `rounds` rounds of `calls` calls of each, after one warm call each."""
    ours(), peer()
    mine, theirs, ratios = [], [], []
    for _ in range(rounds):
        times = []
        for call in (ours, peer):
            time.sleep(PAUSE_S)
            start = time.perf_counter()
            for _ in range(calls):
                call()
            times.append((time.perf_counter() - start) / calls)
        mine.append(times[0])
        theirs.append(times[1])
        ratios.append(times[1] / times[0])
    return statistics.median(mine), statistics.median(theirs), statistics.median(ratios)
