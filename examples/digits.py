"""Train a small CNN on scikit-learn's bundled 8x8 handwritten digits (no download) and check its test accuracy.

    python3 -m pip install -e '.[examples]' -e plugins/tinycore_clang && python3 examples/digits.py

Runs on the default device (``--device`` or ``DEV=`` picks another), shows a progress bar per epoch with the loss and
the training accuracy, prints the test accuracy and the time, saves the weights (``--save``) and exits 0 only when
the test accuracy reaches ``--min-accuracy`` (default 0.97). ``--load PATH`` evaluates saved weights without training.
The whole training step (forward, backward, Adam update) runs under `TinyJit`: captured once, then replayed.

``--distributed`` trains data-parallel across the processes of an MPI job (``pip install 'tinycore[mpi]'``)::

    mpirun -np 2 python3 examples/digits.py --distributed

each rank trains on its shard of every epoch (`tinycore.distributed.DistributedSampler`) with ``--batch-size``
images per step, and the gradients are averaged across ranks inside the captured step; rank 0 prints and saves.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

try:
    from sklearn.datasets import load_digits
    from tqdm import tqdm
except ImportError as error:
    sys.exit(
        f"examples/digits.py needs scikit-learn and tqdm ({error}): pip install 'tinycore[examples]'"
        " (in a checkout: pip install -e '.[examples]')"
    )

from tinycore import Device, Tensor, TinyJit, nn
from tinycore.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save


class DigitsCNN:
    """(N, 1, 8, 8) -> conv 3x3 (16) -> relu -> conv 3x3 (32) -> relu -> 2x2 max pool -> linear -> (N, 10) logits."""

    def __init__(self) -> None:
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def __call__(self, x: Tensor) -> Tensor:
        x = self.conv1(x).relu()
        x = self.conv2(x).relu().max_pool2d(2)
        return self.fc(x.flatten(1))


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The 1797 digits as float32 images in [0, 1] of shape (N, 1, 8, 8), split 80/20 (always the same split)."""
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int32)
    order = np.random.default_rng(0).permutation(len(y))
    n_train = int(0.8 * len(y))
    train, test = order[:n_train], order[n_train:]
    return x[train], y[train], x[test], y[test]


def evaluate(model: DigitsCNN, x: np.ndarray, y: np.ndarray) -> float:
    """The fraction of images in ``x`` whose predicted class is ``y``."""
    with Tensor.test():
        predicted = model(Tensor(x)).argmax(-1).numpy()
    return float((predicted == y).mean())


def main(argv: list[str] | None = None) -> int:
    """Train (or load), report, and return the exit status (0: the test accuracy reached --min-accuracy)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", metavar="PATH", default="digits.safetensors", help="where to write the trained weights")
    ap.add_argument("--load", metavar="PATH", help="evaluate these weights (from --save) instead of training")
    ap.add_argument("--device", help="the device to run on (default: DEV or the best one available)")
    ap.add_argument("--min-accuracy", type=float, default=0.97)
    ap.add_argument("--distributed", action="store_true", help="data-parallel across the ranks of an MPI job")
    args = ap.parse_args(argv)
    rank, world = 0, 1
    if args.distributed:
        import tinycore.distributed as dist

        group = dist.init()
        rank, world = group.rank, group.world_size
    say = print if rank == 0 else (lambda *a, **k: None)

    if args.device:
        Device.DEFAULT = args.device
    Tensor.manual_seed(args.seed)
    x_train, y_train, x_test, y_test = load_data()
    model = DigitsCNN()
    say(f"device {Device.DEFAULT}: {len(y_train)} training and {len(y_test)} test images of 8x8 digits"
        + (f", {world} ranks" if args.distributed else ""))  # fmt: skip
    start = time.perf_counter()

    if args.load:
        load_state_dict(model, safe_load(args.load))
    else:
        params = get_parameters(model)
        if args.distributed:
            dist.broadcast_parameters(params)  # every rank starts from rank 0's weights
        opt = nn.optim.Adam(params, lr=args.lr)

        @TinyJit
        @Tensor.train()
        def train_step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
            """One Adam step on a batch; returns the batch's loss and the number of correct predictions."""
            opt.zero_grad()
            logits = model(x)
            loss = logits.sparse_categorical_crossentropy(y)
            loss.backward()
            if args.distributed:
                dist.average_gradients(params)  # one all_reduce for all gradients, replayed by TinyJit
            opt.step()
            return loss.realize(), (logits.argmax(-1) == y).sum().realize()

        rng = np.random.default_rng(args.seed)
        sampler = dist.DistributedSampler(len(y_train), seed=args.seed) if args.distributed else None
        shard = len(sampler) if sampler is not None else len(y_train)
        n_batches = shard // args.batch_size  # the last partial batch is dropped: TinyJit needs fixed shapes
        for epoch in range(1, args.epochs + 1):
            if sampler is not None:
                sampler.set_epoch(epoch)
                order = np.array(sampler.indices())
            else:
                order = rng.permutation(len(y_train))
            bar = tqdm(range(n_batches), desc=f"epoch {epoch:2d}/{args.epochs}", unit="batch", leave=True,
                       disable=rank != 0)  # fmt: skip
            seen = correct = 0
            for i in bar:
                idx = order[i * args.batch_size : (i + 1) * args.batch_size]
                loss, hits = train_step(Tensor(x_train[idx]), Tensor(y_train[idx]))
                seen, correct = seen + len(idx), correct + int(hits.item())
                bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{correct / seen:.3f}")
        if rank == 0:
            safe_save(get_state_dict(model), args.save)
        say(f"saved the weights to {args.save}")

    accuracy = evaluate(model, x_test, y_test)
    say(f"test accuracy {accuracy:.4f} ({time.perf_counter() - start:.1f} s on {Device.DEFAULT})")
    if accuracy < args.min_accuracy:
        print(f"FAILED: the test accuracy {accuracy:.4f} is below --min-accuracy {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
