"""``tinycore bench``: a short benchmark suite run side by side with numpy and torch (when installed).

Each workload is built once per library and timed in the same process, libraries interleaved round by round, so the
ratios compare numbers measured seconds apart on the same machine. The table reports each library's median and
tinycore's ratio to the best peer (> 1 means tinycore is better, whichever way the unit points).

    $ tinycore bench --only dispatch,sum --device CLANG
    workload         unit       tinycore      numpy      torch   ratio
    dispatch         us/call        25.1        1.6        3.9   0.06x
    ...

The repository's ``bench/`` folder holds the longer suites (the shared peer harness, kernel and JIT benches); this
one ships with the package so an installed tinycore can check itself on a new machine.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

LIBRARIES = ("tinycore", "numpy", "torch")
LOWER_IS_BETTER = ("us/call",)


@dataclass(frozen=True)
class Workload:
    """One benchmark: ``build(lib, size_scale, device)`` returns the callable to time (None: lib can't run it);
    ``amount(size_scale)`` converts seconds per call into the unit (bytes for GB/s, flops for GFLOPS, 1 for us)."""

    name: str
    unit: str
    build: Callable[[str, float, str | None], Callable[[], Any] | None]
    amount: Callable[[float], float]
    size: Callable[[float], str] = lambda scale: ""  # the problem size at `scale`, for the table


@dataclass
class Result:
    """Measured seconds per call of one workload for one library."""

    workload: str
    library: str
    unit: str
    seconds: list[float] = field(default_factory=list)
    amount: float = 1.0

    @property
    def value(self) -> float:
        """The median in the workload's unit."""
        median = statistics.median(self.seconds)
        if self.unit == "us/call":
            return median * 1e6
        return self.amount / median / 1e9


def _scaled(count: int, size_scale: float) -> int:
    return max(1, int(count * size_scale))


def _arrays(lib: str, device: str | None, *shapes: tuple[int, ...]) -> list[Any]:
    """Random float32 inputs for ``lib`` (tinycore tensors are realized on ``device`` before timing)."""
    import numpy as np

    rng = np.random.default_rng(0)
    host = [rng.standard_normal(shape, dtype=np.float32) for shape in shapes]
    if lib == "numpy":
        return host
    if lib == "torch":
        import torch

        return [torch.from_numpy(array) for array in host]
    from tinycore.tensor import Tensor

    return [Tensor(array, device=device).realize() for array in host]


def _finish(lib: str, make: Callable[[], Any]) -> Callable[[], Any]:
    """Wrap ``make`` so a tinycore result is realized and waited for (numpy/torch CPU results already are)."""
    if lib != "tinycore":
        return make
    from tinycore.device import Device

    def run() -> Any:
        out = make().realize()
        Device[out.device].synchronize()
        return out

    return run


def _chain20(value: Any) -> Any:
    for step in range(10):
        value = value * 1.0001 + 0.5 if step % 2 else (value - 0.25) * 0.999
    for _ in range(5):
        value = value * value * 0.5 + value
    return value


def _build_dispatch(lib: str, size_scale: float, device: str | None) -> Callable[[], Any]:
    (x,) = _arrays(lib, device, (16,))
    return _finish(lib, lambda: x + 1)


def _build_chain20_eager(lib: str, size_scale: float, device: str | None) -> Callable[[], Any]:
    (x,) = _arrays(lib, device, (1024,))
    return _finish(lib, lambda: _chain20(x))


def _build_chain20_jit(lib: str, size_scale: float, device: str | None) -> Callable[[], Any] | None:
    if lib != "tinycore":
        return None
    from tinycore.engine.jit import TinyJit

    (x,) = _arrays(lib, device, (1024,))
    replay = TinyJit(lambda value: _chain20(value).realize())
    return _finish(lib, lambda: replay(x))


def _build_elementwise(lib: str, size_scale: float, device: str | None) -> Callable[[], Any]:
    size = _scaled(4 << 20, size_scale)
    a, b = _arrays(lib, device, (size,), (size,))
    return _finish(lib, lambda: a * b + a)


def _build_sum(lib: str, size_scale: float, device: str | None) -> Callable[[], Any]:
    (x,) = _arrays(lib, device, (_scaled(4 << 20, size_scale),))
    return _finish(lib, lambda: x.sum())


def _softmax_side(size_scale: float) -> int:
    return _scaled(1024, size_scale**0.5)


def _build_softmax(lib: str, size_scale: float, device: str | None) -> Callable[[], Any]:
    side = _softmax_side(size_scale)
    (x,) = _arrays(lib, device, (side, side))
    if lib == "numpy":
        import numpy as np

        def numpy_softmax() -> Any:
            exps = np.exp(x - x.max(axis=-1, keepdims=True))
            return exps / exps.sum(axis=-1, keepdims=True)

        return numpy_softmax
    return _finish(lib, lambda: x.softmax(-1))


def _matmul_side(size_scale: float) -> int:
    return _scaled(512, size_scale ** (1 / 3))


def _build_matmul(lib: str, size_scale: float, device: str | None) -> Callable[[], Any]:
    side = _matmul_side(size_scale)
    a, b = _arrays(lib, device, (side, side), (side, side))
    return _finish(lib, lambda: a @ b)


WORKLOADS: dict[str, Workload] = {
    work.name: work
    for work in (
        Workload("dispatch", "us/call", _build_dispatch, lambda scale: 1.0, lambda scale: "x+1, 16 floats"),
        Workload("chain20_eager", "us/call", _build_chain20_eager, lambda scale: 1.0, lambda s: "20 ops, 1024"),
        Workload("chain20_jit", "us/call", _build_chain20_jit, lambda scale: 1.0, lambda s: "20 ops, 1024"),
        Workload(
            "elementwise",
            "GB/s",
            _build_elementwise,
            lambda scale: 12.0 * _scaled(4 << 20, scale),
            lambda scale: f"a*b+a, {_scaled(4 << 20, scale):,}",
        ),
        Workload(
            "sum",
            "GB/s",
            _build_sum,
            lambda scale: 4.0 * _scaled(4 << 20, scale),
            lambda scale: f"{_scaled(4 << 20, scale):,} floats",
        ),
        Workload(
            "softmax",
            "GB/s",
            _build_softmax,
            lambda scale: 8.0 * _softmax_side(scale) ** 2,
            lambda scale: f"{_softmax_side(scale)}x{_softmax_side(scale)}",
        ),
        Workload(
            "matmul",
            "GFLOPS",
            _build_matmul,
            lambda scale: 2.0 * _matmul_side(scale) ** 3,
            lambda scale: f"{_matmul_side(scale)}^3 float32",
        ),
    )
}


def available_libraries() -> list[str]:
    """tinycore plus each peer importable here (numpy always: tinycore needs it to build inputs)."""
    return [lib for lib in LIBRARIES if lib == "tinycore" or importlib.util.find_spec(lib) is not None]


def _time_calls(run: Callable[[], Any], budget_s: float, max_calls: int = 2000) -> list[float]:
    """Seconds of each call of ``run`` until ``budget_s`` is spent (at least 3 calls)."""
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < 3 or (time.perf_counter() - start < budget_s and len(samples) < max_calls):
        begin = time.perf_counter()
        run()
        samples.append(time.perf_counter() - begin)
    return samples


def run_benchmarks(
    names: list[str],
    *,
    device: str | None = None,
    rounds: int = 3,
    budget_s: float = 0.3,
    size_scale: float = 1.0,
    progress: Callable[[str], None] | None = None,
) -> list[Result]:
    """Time ``names`` (keys of :data:`WORKLOADS`) for every available library, interleaved over ``rounds``."""
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        raise ValueError(f"unknown workload(s) {unknown}; choose from {sorted(WORKLOADS)}")
    results: list[Result] = []
    for name in names:
        work = WORKLOADS[name]
        runners: dict[str, Callable[[], Any]] = {}
        for lib in available_libraries():
            runner = work.build(lib, size_scale, device)
            if runner is not None:
                for _ in range(3):  # warm: compile kernels, fill caches, capture the JIT
                    runner()
                runners[lib] = runner
        per_lib = {lib: Result(name, lib, work.unit, amount=work.amount(size_scale)) for lib in runners}
        for round_index in range(rounds):
            if progress:
                progress(f"{name}: round {round_index + 1}/{rounds}")
            for lib, runner in runners.items():
                per_lib[lib].seconds += _time_calls(runner, budget_s / rounds)
        results += per_lib.values()
    return results


def ratio(results: list[Result], workload: str) -> float | None:
    """tinycore's value over the best peer's for ``workload`` (> 1: tinycore better), None without a peer."""
    mine = [r for r in results if r.workload == workload and r.library == "tinycore"]
    peers = [r for r in results if r.workload == workload and r.library != "tinycore"]
    if not mine or not peers:
        return None
    if mine[0].unit in LOWER_IS_BETTER:
        return min(peer.value for peer in peers) / mine[0].value
    return mine[0].value / max(peer.value for peer in peers)


def format_table(results: list[Result], device: str | None = None, size_scale: float = 1.0) -> str:
    """The results as a text table, one row per workload (with its problem size), one column per library, then the
    ratio; a header line names tinycore's device and says what the ratio means."""
    libraries = [lib for lib in LIBRARIES if any(r.library == lib for r in results)]
    workloads = list(dict.fromkeys(r.workload for r in results))
    lines = [
        f"tinycore on {device or 'the default device'}; ratio: tinycore against the best peer, > 1: tinycore is better",
        f"{'workload':<16} {'size':<18} {'unit':<8}" + "".join(f"{lib:>11}" for lib in libraries) + f"{'ratio':>9}",
    ]
    for name in workloads:
        row = {r.library: r for r in results if r.workload == name}
        unit = next(iter(row.values())).unit
        size = WORKLOADS[name].size(size_scale) if name in WORKLOADS else ""
        cells = "".join(f"{row[lib].value:>11.2f}" if lib in row else f"{'-':>11}" for lib in libraries)
        value = ratio(results, name)
        cell = f"{value:>8.2f}x" if value is not None else f"{'-':>9}"
        lines.append(f"{name:<16} {size:<18} {unit:<8}{cells}" + cell)
    return "\n".join(lines)


def print_progress(message: str) -> None:
    """Progress lines go to stderr so ``--json`` output stays clean."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)
