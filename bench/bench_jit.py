"""TinyJit replay overhead and a jitted training step, against torch in the same run.

Rows:

- ``chain20 replay``: a TinyJit of 20 fused elementwise ops on 1024 floats (one kernel), microseconds per call
  (the median of 7 samples of a calibrated loop), on each requested device; for CLANG with its graph runner
  (`ClangGraph`) and without (kernels launched one by one); torch eager and ``torch.compile`` for reference;
  ``same input`` passes one tensor every call (the replay fast path), ``2 inputs`` alternates two tensors (every
  call swaps its input buffer: the full input check);
- ``first calls``: seconds of call 0 (eager, compiles) and call 1 (capture) of each JIT;
- ``mlp train step``: 784-512-512-10 MLP, batch 128, SGD, inside TinyJit: steps per second, against torch eager;
  with ``--profile``, where a replay's time goes: the sum of its kernels' own times (each timed alone, best of 5)
  against the replay's time, and the slowest kernels (``--profile-top N``; 0: every kernel, in execution order).

Run: ``python bench/bench_jit.py [--devices CLANG PYTHON] [--no-torch]``. Reports ratios, never asserts.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def per_call(fn: Callable[[], Any], budget: float = 0.08, samples: int = 7) -> float:
    """Median seconds per call of `fn` over `samples` loops of about `budget` seconds each."""
    fn()
    n, start = 1, time.perf_counter()
    fn()
    one = max(time.perf_counter() - start, 1e-7)
    n = max(1, int(budget / one))
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - start) / n)
    return statistics.median(times)


def chain20(x: Any) -> Any:
    """20 elementwise ops (fused into one kernel by tinycore)."""
    for i in range(10):
        x = x * 1.0001 + (0.5 if i % 2 else -0.5)
    return x


def bench_chain(device: str, graph: bool) -> dict[str, float]:
    from tinycore import Tensor, TinyJit
    from tinycore.device import Device

    dev = Device[device]
    old = dev.graph
    if device.startswith("CLANG"):
        from tinycore_clang.graph import ClangGraph

        dev.graph = ClangGraph if graph else None
    try:
        jit = TinyJit(lambda x: chain20(x).contiguous())
        x = Tensor(np.random.default_rng(0).standard_normal(1024).astype(np.float32), device=device).realize()
        start = time.perf_counter()
        jit(x)
        first = time.perf_counter() - start
        start = time.perf_counter()
        jit(x)
        second = time.perf_counter() - start
        out = jit(x)
        np.testing.assert_allclose(out.numpy(), chain20(x.numpy().astype(np.float64)), rtol=1e-4, atol=1e-4)
        budget, samples = (0.08, 7) if device != "PYTHON" else (0.3, 3)
        us = per_call(lambda: jit(x), budget=budget, samples=samples)
        x2 = (x + 1).realize()
        us2 = per_call(lambda: (jit(x), jit(x2)), budget=budget, samples=samples) / 2
        return {"us": us * 1e6, "us_two_inputs": us2 * 1e6, "first_s": first, "second_s": second}
    finally:
        dev.graph = old


def bench_torch_chain() -> dict[str, float]:
    import torch

    x = torch.from_numpy(np.random.default_rng(0).standard_normal(1024).astype(np.float32))
    out = {"eager_us": per_call(lambda: chain20(x)) * 1e6}
    try:
        compiled = torch.compile(chain20)
        start = time.perf_counter()
        compiled(x)
        out["compile_first_s"] = time.perf_counter() - start
        out["compiled_us"] = per_call(lambda: compiled(x)) * 1e6
    except Exception as error:  # noqa: BLE001 - torch.compile needs a C++ toolchain; report and go on
        out["compile_error"] = str(error)[:80]  # type: ignore[assignment]
    return out


def _mlp_init(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = [(784, 512), (512,), (512, 512), (512,), (512, 10), (10,)]
    return [(rng.standard_normal(s) * (np.sqrt(2.0 / s[0]) if len(s) == 2 else 0.0)).astype(np.float32) for s in shapes]


def replay_profile(captured: Any, top: int = 5) -> dict[str, Any]:
    """Time each kernel of a `CapturedJit` alone (best of 5, on the last replay's inputs) and one whole replay;
    `slowest`: the `top` slowest kernels, or with ``top=0`` every kernel in execution order."""
    from tinycore.engine.exec_item import CompiledRunner

    inputs, var_vals = captured._last_inputs, captured._last_vals
    rows = []
    for index, item in enumerate(captured.items):
        bufs = list(item.bufs)
        for (i, j), position in captured.input_slots.items():
            if i == index:
                bufs[j] = inputs[position]
        bufs = [buf.ensure_allocated() for buf in bufs]
        merged = {**(item.var_vals or {}), **var_vals}
        seconds = min(item.runner(bufs, merged, wait=True) or 0.0 for _ in range(5))
        ops = item.runner.estimates.ops if isinstance(item.runner, CompiledRunner) else 0
        rows.append((seconds, item.runner.display_name, ops))
    replay = min(per_call(lambda: captured(inputs, var_vals), budget=0.05, samples=1) for _ in range(3))
    kernels = sum(r[0] for r in rows)
    slowest = sorted(rows, key=lambda r: -r[0])[:top] if top else rows
    return {"items": len(rows), "kernels_s": kernels, "replay_s": replay, "slowest": slowest}


def bench_mlp_tinycore(device: str, steps: int = 20, profile: bool = False, top: int = 5) -> dict[str, Any]:
    from tinycore import Tensor, TinyJit
    from tinycore.nn.optim import SGD

    params = [Tensor(p, device=device, requires_grad=True).realize() for p in _mlp_init()]
    opt = SGD(params, lr=0.01)
    rng = np.random.default_rng(1)
    xs = [Tensor(rng.standard_normal((128, 784)).astype(np.float32), device=device).realize() for _ in range(2)]
    ys = [Tensor(rng.integers(0, 10, 128).astype(np.int32), device=device).realize() for _ in range(2)]

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
        w1, b1, w2, b2, w3, b3 = params
        h = (x @ w1 + b1).relu()
        h = (h @ w2 + b2).relu()
        logits = h @ w3 + b3
        onehot = (Tensor.arange(10, device=device).reshape(1, 10) == y.reshape(128, 1)).cast(logits.dtype)
        loss = -(logits.log_softmax(1) * onehot).sum() / 128
        opt.zero_grad()
        loss.backward()
        # loss and update in one schedule: the loss is the one of the weights before the step (as torch's)
        return Tensor.realize(loss, *opt.schedule_step())

    start = time.perf_counter()
    step(xs[0], ys[0])
    first = time.perf_counter() - start
    start = time.perf_counter()
    step(xs[1], ys[1])
    second = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(steps):
        loss = step(xs[i % 2], ys[i % 2])
    loss.numpy()
    elapsed = time.perf_counter() - start
    out: dict[str, Any] = {"steps_per_s": steps / elapsed, "first_s": first, "second_s": second}
    out["loss"] = float(loss.item())
    if profile:
        out["profile"] = replay_profile(step.captured, top)
    return out


def bench_mlp_torch(steps: int = 20) -> dict[str, float]:
    import torch

    params = [torch.tensor(p, requires_grad=True) for p in _mlp_init()]
    opt = torch.optim.SGD(params, lr=0.01)
    rng = np.random.default_rng(1)
    xs = [torch.from_numpy(rng.standard_normal((128, 784)).astype(np.float32)) for _ in range(2)]
    ys = [torch.from_numpy(rng.integers(0, 10, 128).astype(np.int64)) for _ in range(2)]

    def step(x: Any, y: Any) -> Any:
        w1, b1, w2, b2, w3, b3 = params
        h = torch.relu(x @ w1 + b1)
        h = torch.relu(h @ w2 + b2)
        loss = torch.nn.functional.cross_entropy(h @ w3 + b3, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    step(xs[0], ys[0])
    start = time.perf_counter()
    for i in range(steps):
        loss = step(xs[i % 2], ys[i % 2])
    loss.item()
    return {"steps_per_s": steps / (time.perf_counter() - start)}


def main() -> None:
    """Run the rows and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", nargs="+", default=["CLANG", "PYTHON"])
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-mlp", action="store_true")
    parser.add_argument("--profile", action="store_true", help="break the MLP replay into kernel time and overhead")
    parser.add_argument("--profile-top", type=int, default=5, help="slowest kernels to list (0: all, in order)")
    args = parser.parse_args()
    from tinycore.device import Device

    rows: list[tuple[str, str]] = []
    for device in args.devices:
        try:
            Device[device]
        except Exception as error:  # noqa: BLE001 - skip devices that can't open here
            rows.append((f"chain20 replay {device}", f"unavailable ({type(error).__name__})"))
            continue
        variants = [True, False] if device.startswith("CLANG") else [True]
        for graph in variants:
            r = bench_chain(device, graph)
            label = f"chain20 replay {device}" + (
                "" if not device.startswith("CLANG") else (" graph" if graph else " no graph")
            )
            rows.append((label, f"{r['us']:9.2f} us/call  (call 0 {r['first_s']:.3f} s, call 1 {r['second_s']:.3f} s)"))
            rows.append((label + " 2 inputs", f"{r['us_two_inputs']:9.2f} us/call"))
    if not args.no_torch:
        t = bench_torch_chain()
        rows.append(("chain20 torch eager", f"{t['eager_us']:9.2f} us/call"))
        if "compiled_us" in t:
            rows.append(
                ("chain20 torch.compile", f"{t['compiled_us']:9.2f} us/call (first {t['compile_first_s']:.1f} s)")
            )
        else:
            rows.append(("chain20 torch.compile", f"failed: {t.get('compile_error')}"))
    if not args.no_mlp:
        device = next((d for d in args.devices if d != "PYTHON"), args.devices[0])
        try:
            m = bench_mlp_tinycore(device, profile=args.profile, top=args.profile_top)
            rows.append((f"mlp train step {device}", f"{m['steps_per_s']:9.2f} steps/s (call 0 {m['first_s']:.2f} s, "
                         f"call 1 {m['second_s']:.2f} s, loss {m['loss']:.4f})"))  # fmt: skip
            if "profile" in m:
                prof = m["profile"]
                share = prof["kernels_s"] / prof["replay_s"] if prof["replay_s"] else float("nan")
                rows.append((f"mlp replay {device}", f"{prof['replay_s'] * 1e3:9.2f} ms, kernels alone "
                             f"{prof['kernels_s'] * 1e3:.2f} ms ({share:.0%}) in {prof['items']} items"))  # fmt: skip
                for seconds, name, ops in prof["slowest"]:
                    gflops = ops / seconds / 1e9 if seconds and isinstance(ops, int) else 0.0
                    share = seconds / prof["kernels_s"] if prof["kernels_s"] else 0.0
                    rows.append((f"  kernel {name[:30]}", f"{seconds * 1e3:9.3f} ms {gflops:7.1f} GFLOPS {share:4.0%}"))
        except Exception as error:  # noqa: BLE001 - report what is missing (autograd, optimizer) and go on
            rows.append((f"mlp train step {device}", f"failed: {type(error).__name__}: {str(error)[:100]}"))
            m = None
        if not args.no_torch:
            tm = bench_mlp_torch()
            rows.append(("mlp train step torch eager", f"{tm['steps_per_s']:9.2f} steps/s"))
            if m is not None:
                rows.append(("mlp tinycore / torch", f"{m['steps_per_s'] / tm['steps_per_s']:9.2f}x"))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:{width}s}  {value}")


if __name__ == "__main__":
    main()
