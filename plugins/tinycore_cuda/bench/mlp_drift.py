"""How far the bench's MLP drifts from torch on the CPU after many TinyJit steps, with and without a device
synchronize after each step (``--sync``): tells an ordering bug between back-to-back replays from float drift.

    python3 plugins/tinycore_cuda/bench/mlp_drift.py [--steps 90] [--sync] [--device CUDA]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from bench_cuda import mlp_problem, mlp_step, mlp_tensors, torch_mlp_step

from tinycore.device import Device
from tinycore.engine.jit import TinyJit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="CUDA")
    parser.add_argument("--steps", type=int, default=90)
    parser.add_argument("--sync", action="store_true", help="synchronize after every step")
    args = parser.parse_args()
    inits, xb, yb = mlp_problem()
    params, x, y = mlp_tensors(args.device, inits, xb, yb)
    step = TinyJit(lambda a, b: mlp_step(params, a, b))
    cpu = [torch.tensor(w, requires_grad=True) for w in inits]
    drifts = []
    for i in range(args.steps):
        step(x, y)
        torch_mlp_step(cpu, torch.tensor(xb), torch.tensor(yb))
        if args.sync:
            Device[args.device].synchronize()
        if args.sync and (i + 1) % 10 == 0:
            drifts.append(max(float(np.abs(p.numpy() - t.detach().numpy()).max()) for p, t in zip(params, cpu)))
    final = max(float(np.abs(p.numpy() - t.detach().numpy()).max()) for p, t in zip(params, cpu))
    every10 = ", ".join(f"{d:.1e}" for d in drifts)
    print(f"{args.steps} steps (sync={args.sync}): max |tinycore - torch CPU| = {final:.2e}  every 10: {every10}")


if __name__ == "__main__":
    main()
