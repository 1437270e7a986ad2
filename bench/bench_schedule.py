"""Scheduling overhead per realize: `(x+1).realize()` on 16 floats and a 100-op elementwise graph, cold and warm
schedule cache.

Rows (microseconds per call, the fastest of several samples in CPU time of this process):

- `build`: building the lazy graph (Tensor ops only);
- `schedule warm`: `schedule_with_vars` on a schedule-cache hit (the key walk plus new buffers: no rewrite pass);
- `schedule cold`: the same with the schedule cache cleared before every call (a full scheduling of the graph);
- `realize warm (noop kernels)`: `realize()` end to end with a kernel runner that does nothing, so the figure is the
  Python overhead of tinycore (graph, cache hit, buffers, exec items, counters) without the device;
- `realize warm (device)`: the real thing on `--device` when kernels can be built there (codegen present);
- `build + realize, same input, hot loop`: the loop a user writes (`(x+1).realize()` over and over on one `x`),
  graph building included, objects hot in the CPU caches.

Each row times fresh graphs on fresh input buffers (built before the clock starts), so hash-consing can't hand
back a graph that an earlier iteration already computed. Run: ``python bench/bench_schedule.py [--device CLANG]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any, NamedTuple


class Graph(NamedTuple):
    """A benchmark graph: its input tensor and its (unrealized) output tensor."""

    inp: Any
    out: Any


def _per_item(make: Callable[[], Any], op: Callable[[Any], Any], count: int, samples: int = 5) -> float:
    """Microseconds per call of `op` on fresh objects from `make` (made before the clock starts): the fastest of
    `samples` rounds, in CPU time of this process so other load on a shared machine does not count (a device
    working in other threads is not counted either: the rows measure the caller's cost)."""
    op(make())
    best = float("inf")
    for _ in range(samples):
        objs = [make() for _ in range(count)]
        t0 = time.process_time()
        for obj in objs:
            op(obj)
        best = min(best, (time.process_time() - t0) / count * 1e6)
        del objs
    return best


def _hot_loop(fn: Callable[[], Any], count: int, samples: int = 5) -> float:
    """Microseconds per call of `fn` called back to back (same input, objects hot in the CPU caches)."""
    fn()
    best = float("inf")
    for _ in range(samples):
        t0 = time.process_time()
        for _ in range(count):
            fn()
        best = min(best, (time.process_time() - t0) / count * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="device for the end-to-end rows (default: Device.DEFAULT)")
    parser.add_argument("--count", type=int, default=400, help="graphs per timed round")
    args = parser.parse_args()

    from tinycore.device import Device
    from tinycore.engine import realize, schedule
    from tinycore.engine.exec_item import Runner
    from tinycore.engine.realized import buffer_of
    from tinycore.tensor import Tensor
    from tinycore.uop import patterns

    device = Device.canonicalize(args.device) if args.device else Device.DEFAULT

    class NoopRunner(Runner):
        def __init__(self, ast: Any, dev: str):
            super().__init__("noop", dev)

        def __call__(self, bufs: list, var_vals: dict, wait: bool = False) -> float | None:
            return None

    passes = [0]
    original_pass = patterns._run_pass

    def counting_pass(*a: Any) -> Any:
        passes[0] += 1
        return original_pass(*a)

    def small(x: Tensor) -> Tensor:
        return x + 1

    def chain100(x: Tensor) -> Tensor:
        for i in range(50):
            x = x * 1.0001 + float(i)
        return x

    def cold(g: Graph) -> Any:
        schedule.clear_schedule_cache()
        return g.out.schedule_with_vars()

    rows: list[tuple[str, str, float]] = []
    graphs = (("(x+1), 16 floats", small, 16), ("100-op chain, 1024 floats", chain100, 1024))
    for name, build, n in graphs:
        Device.DEFAULT = "PYTHON"  # scheduling rows: a device that needs nothing installed

        def fresh_input(n: int = n) -> Tensor:
            t = Tensor.empty(n)
            buffer_of(t.uop).ensure_allocated()  # an input holds data: the rows don't time its allocation
            return t

        def fresh_graph(build: Callable[[Tensor], Tensor] = build, n: int = n) -> Graph:
            x = fresh_input(n)
            return Graph(x, build(x))  # the input stays alive, as a user's tensor would

        count = args.count if n == 16 else max(20, args.count // 10)
        rows.append((name, "build", _per_item(fresh_input, build, count)))
        rows.append((name, "schedule warm", _per_item(fresh_graph, lambda g: g.out.schedule_with_vars(), count)))
        patterns._run_pass = counting_pass  # type: ignore[assignment]
        passes[0] = 0
        fresh_graph().out.schedule_with_vars()
        patterns._run_pass = original_pass  # type: ignore[assignment]
        rows.append((name, "rewrite passes in a warm schedule", float(passes[0])))
        rows.append((name, "schedule cold", _per_item(fresh_graph, cold, max(10, count // 10))))
        saved = realize._compile_kernel
        realize.clear_runner_cache()
        realize._compile_kernel = lambda ast, dev: NoopRunner(ast, dev)  # type: ignore[assignment]
        try:
            rows.append((name, "realize warm (noop kernels)", _per_item(fresh_graph, lambda g: g.out.realize(), count)))
            same = fresh_input(n)
            hot = _hot_loop(lambda b=build, x=same: b(x).realize(), count)
            rows.append((name, "build + realize, same input, hot loop (noop kernels)", hot))
        finally:
            realize._compile_kernel = saved  # type: ignore[assignment]
            realize.clear_runner_cache()
        Device.DEFAULT = device
        try:
            rows.append((name, f"realize warm ({device})", _per_item(fresh_graph, lambda g: g.out.realize(), count)))
            same = fresh_input(n)
            hot = _hot_loop(lambda b=build, x=same: b(x).realize(), count)
            rows.append((name, f"build + realize, same input, hot loop ({device})", hot))
        except Exception as error:  # noqa: BLE001 - the row reports why it is missing
            rows.append((name, f"realize warm ({device}): {type(error).__name__}: {str(error)[:60]}", float("nan")))

    width = max(len(f"{a}  {b}") for a, b, _ in rows)
    print(f"{'graph / step':{width}s}  us per call")
    for graph, step, value in rows:
        label = f"{graph}  {step}"
        print(f"{label:{width}s}  {value:10.2f}")


if __name__ == "__main__":
    main()
