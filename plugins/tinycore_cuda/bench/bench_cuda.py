"""tinycore on CUDA beside torch on the same GPU, in one run: issue 20's benchmark table.

Each workload is timed for tinycore and torch alternately (median of `--repeats`), every timed region ending in a
device synchronize; ratios are tinycore / torch for throughputs and torch / tinycore for times (> 1: tinycore better).
The kernel workloads (matmul, a*b+a, sum, softmax) are timed three ways for tinycore: one eager call (sync, call,
sync: all the host time before the first launch counts), ten eager calls back to back then one sync (an eager program's
steady state: the host builds call n+1 while the GPU runs call n) and TinyJit replays of the same call (ten per sync:
the kernels' device time); torch's calls are timed back to back too (ten per sync), its steady state.

    python3 plugins/tinycore_cuda/bench/bench_cuda.py                       # on the GPU machine
    python3 plugins/tinycore_cuda/bench/bench_cuda.py --device CLANG --torch-device cpu --scale 0.01   # dry run here
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from tinycore.device import Device
from tinycore.engine.jit import TinyJit
from tinycore.tensor import Tensor


def timed(fn: Callable[[], Any], sync: Callable[[], None], repeats: int, inner: int = 1) -> float:
    """Median seconds of one call of `fn` (`inner` calls per sample, after two warm-up samples)."""
    samples = []
    for k in range(repeats + 2):
        sync()
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        if k >= 2:
            samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def mlp_problem() -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The CPU benchmark's MLP (784-512-512-10, batch 128): initial weights, one batch and its one-hot labels."""
    rng = np.random.default_rng(0)
    shapes = [(784, 512), (512,), (512, 512), (512,), (512, 10), (10,)]
    inits = [(rng.standard_normal(shape) * 0.05).astype(np.float32) for shape in shapes]
    xb = rng.random((128, 784), dtype=np.float32)
    yb = np.zeros((128, 10), np.float32)
    yb[np.arange(128), rng.integers(0, 10, 128)] = 1
    return inits, xb, yb


def mlp_tensors(
    dev: str, inits: list[np.ndarray], xb: np.ndarray, yb: np.ndarray
) -> tuple[list[Tensor], Tensor, Tensor]:
    """The weights (needing gradients), the batch and the labels on `dev`, realized."""
    params = [Tensor(w, device=dev, requires_grad=True).realize() for w in inits]
    return params, Tensor(xb, device=dev).realize(), Tensor(yb, device=dev).realize()


def mlp_step(params: list[Tensor], x: Tensor, y: Tensor) -> Tensor:
    """One SGD step (lr 0.05) of softmax cross-entropy; returns the loss. The weight writes stay lazy: a TinyJit
    realizes them with the loss."""
    w1, b1, w2, b2, w3, b3 = params
    loss = -(((x @ w1 + b1).relu() @ w2 + b2).relu() @ w3 + b3).log_softmax(1).mul(y).sum(1).mean()
    for p_ in params:
        p_.grad = None
    loss.backward()
    for p_ in params:
        p_.assign(p_.detach() - 0.05 * p_.grad)
    return loss.realize()


def torch_mlp_step(params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> None:
    """`mlp_step` in torch, eagerly."""
    w1, b1, w2, b2, w3, b3 = params
    loss = -(torch.log_softmax(torch.relu(torch.relu(x @ w1 + b1) @ w2 + b2) @ w3 + b3, 1) * y).sum(1).mean()
    for p_ in params:
        p_.grad = None
    loss.backward()
    with torch.no_grad():
        for p_ in params:
            p_ -= 0.05 * p_.grad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="CUDA")
    parser.add_argument("--torch-device", default="cuda")
    parser.add_argument("--scale", type=float, default=1.0, help="size multiplier (a dry run uses 0.01)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    dev, tdev, reps = args.device, torch.device(args.torch_device), args.repeats

    def sync_tc() -> None:
        Device[dev].synchronize()

    def sync_torch() -> None:
        if tdev.type == "cuda":
            torch.cuda.synchronize()

    # name, unit, tinycore eager, eager back to back, TinyJit (nan: not timed), torch, higher is better
    rows: list[tuple[str, str, float, float, float, float, bool]] = []

    def attempt(name: str, measure: Callable[[], float]) -> float:
        try:
            return measure()
        except Exception as error:  # one failing workload must not hide the others
            print(f"{name}: tinycore failed: {type(error).__name__}: {str(error).splitlines()[0]}")
            return float("nan")

    def row(
        name: str,
        unit: str,
        ours: Callable[[], float],
        theirs: Callable[[], float],
        higher: bool,
        ours_jit: Callable[[], float] | None = None,
        ours_piped: Callable[[], float] | None = None,
    ) -> None:
        jit_value = attempt(name + " (TinyJit)", ours_jit) if ours_jit is not None else float("nan")
        piped = attempt(name + " (back to back)", ours_piped) if ours_piped is not None else float("nan")
        rows.append((name, unit, attempt(name, ours), piped, jit_value, theirs(), higher))

    def kernel_row(name: str, unit: str, work: float, ours: Callable[[], Tensor], theirs: Callable[[], Any]) -> None:
        """A kernel workload: `work` units per second of tinycore's call (eager, eager back to back, TinyJit)
        and of torch's (back to back)."""
        row(
            name,
            unit,
            lambda: work / timed(lambda: ours().realize(), sync_tc, reps),
            lambda: work / timed(theirs, sync_torch, reps, inner=10),
            True,
            jitted_rate(work, ours),
            lambda: work / timed(lambda: ours().realize(), sync_tc, reps, inner=10),
        )

    def jitted_rate(work: float, call: Callable[[], Tensor]) -> Callable[[], float]:
        """`work` per second of TinyJit replays of `call` (captured on its first calls), ten per sync."""

        def measure() -> float:
            replay = TinyJit(lambda: call().realize())
            for _ in range(3):
                replay()
            return work / timed(replay, sync_tc, reps, inner=10)  # back to back, as torch's calls

        return measure

    n = max(64, int(4096 * args.scale**0.5)) // 64 * 64
    big = max(1 << 16, int((64 << 20) * args.scale))

    # matmul fp16 n x n
    a16 = Tensor(np.random.rand(n, n).astype(np.float16), device=dev).realize()
    b16 = Tensor(np.random.rand(n, n).astype(np.float16), device=dev).realize()
    ta16, tb16 = (torch.rand(n, n, dtype=torch.float16, device=tdev) for _ in range(2))
    flops = 2 * n**3
    kernel_row(f"matmul fp16 {n}", "TFLOP/s", flops / 1e12, lambda: a16 @ b16, lambda: ta16 @ tb16)
    # elementwise a*b+a, sum, softmax
    x = Tensor(np.random.rand(big).astype(np.float32), device=dev).realize()
    y = Tensor(np.random.rand(big).astype(np.float32), device=dev).realize()
    tx, ty = torch.rand(big, device=tdev), torch.rand(big, device=tdev)
    tout = torch.empty_like(tx)
    kernel_row(f"a*b+a {big / 2**20:g}M", "GB/s", 12 * big / 1e9, lambda: x * y + x,
               lambda: torch.addcmul(tx, tx, ty, out=tout))  # fmt: skip
    kernel_row(f"sum {big / 2**20:g}M", "GB/s", 4 * big / 1e9, lambda: x.sum(), lambda: tx.sum())
    s = Tensor(np.random.rand(n, n).astype(np.float32), device=dev).realize()
    ts = torch.rand(n, n, device=tdev)
    kernel_row(f"softmax {n}x{n}", "GB/s", 8 * n * n / 1e9, lambda: s.softmax(-1), lambda: torch.softmax(ts, -1))

    # host <-> device copies of `big` floats: through the page-locked staging buffers (the default) and straight from
    # pageable memory (CUDA_STAGING=0), against torch copying the same pageable memory
    host = np.random.rand(big).astype(np.float32)
    on_device = Tensor(host, device=dev).realize()
    th, tdevice_copy = torch.from_numpy(host), torch.from_numpy(host).to(tdev)
    staging = getattr(Device[dev], "staging", None)
    for label, stage in [("", staging), (", no staging", None)]:
        if label and staging is None:
            break  # no staging on this device: one pair of rows

        def with_staging(fn: Callable[[], Any], stage: Any = stage) -> Callable[[], Any]:
            def call() -> Any:
                Device[dev].staging = stage
                try:
                    return fn()
                finally:
                    Device[dev].staging = staging

            return call if staging is not None else fn

        row(f"copy in {4 * big >> 20}MB{label}", "GB/s",
            lambda w=with_staging: 4 * big / timed(w(lambda: Tensor(host, device=dev).realize()), sync_tc, reps) / 1e9,
            lambda: 4 * big / timed(lambda: th.to(tdev), sync_torch, reps) / 1e9, True)  # fmt: skip
        row(f"copy out {4 * big >> 20}MB{label}", "GB/s",
            lambda w=with_staging: 4 * big / timed(w(lambda: on_device.numpy()), sync_tc, reps) / 1e9,
            lambda: 4 * big / timed(lambda: tdevice_copy.cpu(), sync_torch, reps) / 1e9, True)  # fmt: skip

    # 100 dependent small kernels replayed: TinyJit against a torch CUDA graph
    def chain(v: Tensor) -> Tensor:
        for _ in range(100):
            v = (v * 1.0001 + 0.5).contiguous().realize()
        return v

    jitted = TinyJit(chain)
    small = Tensor(np.ones(1024, np.float32), device=dev).realize()
    for _ in range(3):
        jitted(small)
    tsmall = torch.ones(1024, device=tdev)

    def torch_chain() -> torch.Tensor:
        v = tsmall
        for _ in range(100):
            v = v * 1.0001 + 0.5
        return v

    if tdev.type == "cuda":
        graph = torch.cuda.CUDAGraph()
        torch_chain()
        with torch.cuda.graph(graph):
            torch_chain()
        torch_replay = graph.replay
    else:
        torch_replay = torch_chain
    row(
        "100-kernel replay",
        "us",
        lambda: timed(lambda: jitted(small), sync_tc, reps, inner=20) * 1e6,
        lambda: timed(torch_replay, sync_torch, reps, inner=20) * 1e6,
        False,
    )
    # the CPU benchmark's MLP train step: 784-512-512-10, batch 128, SGD; TinyJit'd here, eager torch there
    inits, xb, yb = mlp_problem()
    params, mx, my = mlp_tensors(dev, inits, xb, yb)
    jit_step = TinyJit(lambda xin, yin: mlp_step(params, xin, yin))
    gpu_torch = [torch.tensor(w, device=tdev, requires_grad=True) for w in inits]
    tx, ty = torch.tensor(xb, device=tdev), torch.tensor(yb, device=tdev)
    row(
        "MLP train step",
        "steps/s",
        lambda: 1 / timed(lambda: jit_step(mx, my), sync_tc, reps, inner=10),
        lambda: 1 / timed(lambda: torch_mlp_step(gpu_torch, tx, ty), sync_torch, reps, inner=10),
        True,
    )
    # both took the same number of steps from the same weights on the same batch: they must agree, and agree with
    # torch on the CPU taking those steps too (which of the two drifts, when they don't)
    steps = (reps + 2) * 10
    cpu_torch = [torch.tensor(w, requires_grad=True) for w in inits]
    for _ in range(steps):
        torch_mlp_step(cpu_torch, torch.tensor(xb), torch.tensor(yb))
    reference = [t_.detach().numpy() for t_ in cpu_torch]

    def drift(weights: list[np.ndarray]) -> float:
        return max(float(np.abs(a - b).max()) for a, b in zip(weights, reference))

    print(f"MLP train step, weights after {steps} steps: max |torch on {tdev} - torch on the CPU| = "
          f"{drift([t_.detach().cpu().numpy() for t_ in gpu_torch]):.2e}, max |tinycore - torch on the CPU| = "
          f"{drift([p_.numpy() for p_ in params]):.2e}")  # fmt: skip
    # eager dispatch: host time of one tiny op
    tiny = Tensor(np.ones(16, np.float32), device=dev).realize()
    ttiny = torch.ones(16, device=tdev)
    row(
        "eager (x+1) 16 floats",
        "us",
        lambda: timed(lambda: (tiny + 1).realize(), lambda: None, reps, inner=200) * 1e6,
        lambda: timed(lambda: ttiny + 1, lambda: None, reps, inner=200) * 1e6,
        False,
    )

    print(f"\ntinycore on {dev} ({getattr(Device[dev], 'name', b'')!r}) vs torch {torch.__version__} on {tdev}")
    print(f"{'workload':26} {'unit':8} {'tinycore':>9} {'x10':>9} {'TinyJit':>9} {'torch':>9} {'ratio':>6} {'x10':>6} "
          f"{'jit':>6}")  # fmt: skip
    for name, unit, ours, piped, jit_value, theirs, higher in rows:
        values = (ours, piped, jit_value)
        ratios = [("" if v != v else f"{(v / theirs if higher else theirs / v):5.2f}x") for v in values]
        print(f"{name:26} {unit:8} {ours:9.2f} {piped:9.2f} {jit_value:9.2f} {theirs:9.2f} "
              f"{ratios[0]:>6} {ratios[1]:>6} {ratios[2]:>6}")  # fmt: skip
    print(
        "(ratio > 1: tinycore better; tinycore: one eager call, host time included; x10: ten eager calls back to "
        "back; TinyJit: the call replayed; torch: ten calls back to back)"
    )


if __name__ == "__main__":
    main()
