"""The bench's MLP (`bench_cuda.mlp_step`) on CUDA against CLANG: one step's loss and gradients, then 30 TinyJit
steps (losses and weights). Tells a wrong GPU kernel from floating-point drift.

    python3 plugins/tinycore_cuda/bench/mlp_check.py [--device CUDA] [--reference CLANG]
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_cuda import mlp_problem, mlp_step, mlp_tensors

from tinycore.engine.jit import TinyJit


def run(dev: str, steps: int) -> tuple[float, list[np.ndarray], list[float], list[np.ndarray]]:
    """First-step loss and gradients, the losses of `steps` TinyJit'd steps, and the weights after them."""
    params, x, y = mlp_tensors(dev, *mlp_problem())
    loss = mlp_step(params, x, y).item()
    grads = [p.grad.numpy() for p in params]
    jitted = TinyJit(lambda a, b: mlp_step(params, a, b))
    losses = [jitted(x, y).item() for _ in range(steps)]
    return loss, grads, losses, [p.numpy() for p in params]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="CUDA")
    parser.add_argument("--reference", default="CLANG")
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    dev, ref = args.device, args.reference
    (l0, g0, ls0, w0), (l1, g1, ls1, w1) = run(ref, args.steps), run(dev, args.steps)
    print(f"step 1 loss {ref} {l0:.7f} {dev} {l1:.7f}")
    for name, a, b in zip(("w1", "b1", "w2", "b2", "w3", "b3"), g0, g1):
        print(f"grad {name}: max |{dev} - {ref}| = {np.abs(a - b).max():.2e} (max |grad| {np.abs(a).max():.2e})")
    every = max(1, args.steps // 5)
    print(f"losses over {args.steps} TinyJit steps, {ref}:", [round(v, 5) for v in ls0[::every]])
    print(f"losses over {args.steps} TinyJit steps, {dev}:", [round(v, 5) for v in ls1[::every]])
    drift = max(float(np.abs(a - b).max()) for a, b in zip(w0, w1))
    print(f"weights after {args.steps + 1} steps: max |{dev} - {ref}| = {drift:.2e}")


if __name__ == "__main__":
    main()
