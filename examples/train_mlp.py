"""Train a small MLP on a synthetic 3-arm spiral (generated here: no downloads) and check its test accuracy.

    python3 -m pip install -e . -e plugins/tinycore_clang && python3 examples/train_mlp.py

Runs on the default device (`DEV=` picks another), prints the loss and the training-batch accuracy every few steps
and the final test accuracy, and exits 0 only when the test accuracy reaches ``--threshold`` (default 0.90).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from tinycore import nn
from tinycore.nn.state import get_parameters
from tinycore.tensor import Tensor


def make_spirals(
    n_per_class: int, classes: int = 3, noise: float = 0.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """`classes` interleaved spiral arms in 2-D: ``(x float32 (n, 2), y int (n,))``, shuffled."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(classes):
        r = np.linspace(0.05, 1.0, n_per_class)
        theta = np.linspace(0, 4.0, n_per_class) + c * (2 * np.pi / classes) + rng.normal(0, noise, n_per_class)
        xs.append(np.stack([r * np.sin(theta), r * np.cos(theta)], axis=1))
        ys.append(np.full(n_per_class, c))
    x, y = np.concatenate(xs).astype(np.float32), np.concatenate(ys)
    order = rng.permutation(len(y))
    return x[order], y[order]


class MLP:
    """2 -> hidden -> hidden -> classes, ReLU activations."""

    def __init__(self, hidden: int = 64, classes: int = 3) -> None:
        self.layers = [nn.Linear(2, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, classes)]

    def __call__(self, x: Tensor) -> Tensor:
        for layer in self.layers[:-1]:
            x = layer(x).relu()
        return self.layers[-1](x)


def cross_entropy(logits: Tensor, onehot: Tensor) -> Tensor:
    """Mean cross entropy of `logits` against one-hot targets."""
    return -(logits.log_softmax(-1) * onehot).sum() / logits.shape[0]


def main(argv: list[str] | None = None) -> int:
    """Train, report, and return the exit status (0: the test accuracy reached the threshold)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    ap.add_argument("--threshold", type=float, default=0.90)
    ap.add_argument("--print-every", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    Tensor.manual_seed(args.seed)
    x_all, y_all = make_spirals(500, seed=args.seed)
    n_train = 1200
    x_train, y_train, x_test, y_test = x_all[:n_train], y_all[:n_train], x_all[n_train:], y_all[n_train:]
    eye = np.eye(3, dtype=np.float32)

    model = MLP()
    params = get_parameters(model)
    if args.optimizer == "adam":
        opt: nn.optim.Optimizer = nn.optim.Adam(params, lr=args.lr)
    else:
        opt = nn.optim.SGD(params, lr=args.lr, momentum=0.9)
    rng = np.random.default_rng(args.seed + 1)
    device = params[0].device
    print(f"training a 2-64-64-3 MLP on {n_train} spiral points, {args.optimizer}, device {device}")

    start = time.perf_counter()
    first_loss = last_loss = float("nan")
    with Tensor.train():
        for step in range(1, args.steps + 1):
            idx = rng.integers(0, n_train, args.batch)
            xb, yb = Tensor(x_train[idx]), Tensor(eye[y_train[idx]])
            opt.zero_grad()
            logits = model(xb)
            loss = cross_entropy(logits, yb)
            loss.backward()
            opt.step()
            if step == 1 or step % args.print_every == 0 or step == args.steps:
                last_loss = float(loss.item())
                if step == 1:
                    first_loss = last_loss
                acc = float((logits.numpy().argmax(-1) == y_train[idx]).mean())
                print(f"step {step:4d}  loss {last_loss:.4f}  batch accuracy {acc:.3f}")
    elapsed = time.perf_counter() - start
    test_acc = float((model(Tensor(x_test)).numpy().argmax(-1) == y_test).mean())
    print(f"first loss {first_loss:.4f}  final loss {last_loss:.4f}  ({elapsed:.1f} s)")
    print(f"test accuracy {test_acc:.3f} (threshold {args.threshold:.2f})")
    if test_acc < args.threshold:
        print("FAILED: the test accuracy is below the threshold", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
