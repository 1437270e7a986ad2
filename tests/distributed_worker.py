"""One rank of the distributed tests (tests/test_distributed.py starts it with ``mpirun -np 2``).

``python3 distributed_worker.py SCENARIO [ARG]``; each scenario prints ``PASS <scenario> rank <r>`` lines the test
looks for (and, for the failure scenarios, the error it caught).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import tinycore.distributed as dist
from tinycore import Tensor, TinyJit, dtypes


def say(*parts: object) -> None:
    print(*parts, flush=True)


def data(rank: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    rng = np.random.default_rng(100 + rank)
    if dtype.startswith("int"):
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def collectives() -> None:
    """Every collective against numpy, on CLANG and PYTHON, several dtypes; a strided input; TinyJit replays."""
    g = dist.init()
    r, n = g.rank, g.world_size
    for device in ("CLANG", "PYTHON"):
        for dtype, shape in (("float32", (3, 5)), ("int32", (4,)), ("float64", (2, 2, 2))):
            mine = data(r, shape, dtype)
            every = np.stack([data(k, shape, dtype) for k in range(n)])
            x = Tensor(mine, device=device)
            np.testing.assert_allclose(dist.all_reduce(x).numpy(), every.sum(0), rtol=1e-6)
            np.testing.assert_array_equal(dist.all_reduce(x, "max").numpy(), every.max(0))
            np.testing.assert_array_equal(dist.all_reduce(x, "min").numpy(), every.min(0))
            if dtype != "int32":
                np.testing.assert_allclose(dist.all_reduce(x, "mean").numpy(), every.mean(0), rtol=1e-6)
            np.testing.assert_array_equal(dist.broadcast(x, root=n - 1).numpy(), every[n - 1])
            gathered = dist.all_gather(x)
            assert gathered.shape == (n * shape[0], *shape[1:]) and gathered.device == device
            np.testing.assert_array_equal(gathered.numpy(), np.concatenate(list(every)))
            big = Tensor(np.concatenate([mine] * n), device=device)
            block = dist.reduce_scatter(big)
            expect = np.concatenate([every.sum(0)] * n).reshape(n, *shape)[r]
            np.testing.assert_allclose(block.numpy(), expect.reshape(shape[0], *shape[1:]), rtol=1e-6)
            say(f"checked {device} {dtype} rank {r}")
    # a strided view and a lazy expression as input; bfloat16 moves as bytes
    m = Tensor(data(r, (4, 3), "float32"))
    every = np.stack([data(k, (4, 3), "float32") for k in range(n)])
    np.testing.assert_allclose(dist.all_reduce(m.T * 2).numpy(), (every * 2).sum(0).T, rtol=1e-6)
    b = Tensor([1.5 + r, 2.0], dtype=dtypes.bfloat16)
    assert dist.broadcast(b, root=0).tolist() == [1.5, 2.0]
    try:
        dist.all_reduce(Tensor([1.0], dtype=dtypes.float16))
        raise AssertionError("float16 all_reduce through MPI should fail")
    except dist.DistributedError as error:
        assert "float16" in str(error) and "cast" in str(error), error
    dist.barrier()

    # TinyJit records the collective and replays it with new inputs
    @TinyJit
    def step(x: Tensor) -> Tensor:
        return dist.all_reduce(x * 2 + 1).sqrt()

    for i in range(5):
        mine = np.full((8,), float(i + r), np.float32)
        got = step(Tensor(mine)).numpy()
        expect = np.sqrt(sum(np.full((8,), float(i + k), np.float32) * 2 + 1 for k in range(n)))
        np.testing.assert_allclose(got, expect, rtol=1e-6)
    assert step.captured is not None and step.cnt == 5
    say(f"PASS collectives rank {r}")


def mismatch() -> None:
    """Shape, dtype and collective mismatches name both ranks; the group stays usable after them."""
    g = dist.init(timeout=20)
    r = g.rank

    @TinyJit
    def summed(x: Tensor) -> Tensor:
        return dist.all_reduce(x).realize()

    for _ in range(3):  # captured and replayed on both ranks
        assert summed(Tensor.ones(4).contiguous()).tolist() == [2.0] * 4
    cases = (
        ("shape", lambda: dist.all_reduce(Tensor.ones(4 + r).contiguous())),
        ("dtype", lambda: dist.all_reduce(Tensor.ones(4, dtype=dtypes.float32 if r == 0 else dtypes.int32))),
        ("kind", lambda: dist.all_reduce(Tensor.ones(4)) if r == 0 else dist.broadcast(Tensor.ones(4))),
        # a replay checks its header too: rank 0 replays the captured all_reduce of 4, rank 1 runs one of 5
        ("replay", lambda: summed(Tensor.ones(4).contiguous()) if r == 0 else dist.all_reduce(Tensor.ones(5))),
    )
    for what, run in cases:
        try:
            run()
            raise AssertionError(f"{what} mismatch was not detected")
        except dist.CollectiveMismatchError as error:
            say(f"MISMATCH {what} rank {r}: {error}")
    assert dist.all_reduce(Tensor([1.0])).tolist() == [float(g.world_size)]
    say(f"PASS mismatch rank {r}")


def lost(victim: int, how: str) -> None:
    """Rank `victim` never arrives (``hang``: sleeps; ``kill``: SIGKILLs itself); the others must raise a
    CollectiveTimeoutError naming it and the collective within the timeout."""
    timeout = 3.0
    g = dist.init(timeout=timeout)
    r = g.rank
    assert dist.all_reduce(Tensor([1.0])).tolist() == [float(g.world_size)]  # all connected
    if r == victim:
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(120)
        return
    start = time.monotonic()
    try:
        dist.all_reduce(Tensor([2.0]))
        say(f"FAIL rank {r}: the collective finished without rank {victim}")
    except dist.CollectiveTimeoutError as error:
        say(f"LOST rank {r} after {time.monotonic() - start:.2f} s ranks={list(error.ranks)}: {error}")
        try:
            dist.all_reduce(Tensor([2.0]))
        except dist.DistributedError as again:
            assert "broken" in str(again), again
            say(f"PASS lost rank {r}")
    sys.exit(1)  # leaves without MPI_Finalize (the group is broken)


def digits(steps: int = 20) -> None:
    """Two ranks train the digits CNN under TinyJit with averaged gradients; rank 0 then trains the same model in
    one process on both ranks' batches together and compares the parameters (1e-5 relative)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    from digits import DigitsCNN, load_data

    from tinycore import nn
    from tinycore.nn.state import get_parameters

    g = dist.init()
    r, n = g.rank, g.world_size
    x_train, y_train, _, _ = load_data()
    batch = 16

    def train(distributed: bool) -> list[np.ndarray]:
        Tensor.manual_seed(0)
        model = DigitsCNN()
        params = get_parameters(model)
        if distributed:
            dist.broadcast_parameters(params)
        else:  # realized, as broadcast_parameters leaves them (the same first step either way since the scheduler
            Tensor.realize(*params)  # orders reads before later ASSIGNs: tests/faults/test_evaluation_order.py)
        opt = nn.optim.Adam(params, lr=3e-3)

        @TinyJit
        @Tensor.train()
        def step(x: Tensor, y: Tensor) -> Tensor:
            opt.zero_grad()
            loss = model(x).sparse_categorical_crossentropy(y)
            loss.backward()
            if distributed:
                dist.average_gradients(params)
            opt.step()
            return loss.realize()

        shard = (r, n) if distributed else (0, 1)
        sampler = dist.DistributedSampler(len(y_train), rank=shard[0], world_size=shard[1])
        order = sampler.indices()
        per = batch if distributed else batch * n
        for i in range(steps):
            idx = order[i * per : (i + 1) * per]
            step(Tensor(x_train[idx]), Tensor(y_train[idx]))
        return [p.numpy() for p in params]

    together = train(True)
    say(f"trained rank {r}")
    if r == 0:
        alone = train(False)
        worst = max(float(np.max(np.abs(a - b) / (np.abs(b) + 1e-3))) for a, b in zip(together, alone))
        for a, b in zip(together, alone):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        moved = max(float(np.max(np.abs(a))) for a in together)
        say(f"PASS digits rank {r} worst relative difference {worst:.2e} (max |param| {moved:.3f})")
    else:
        say(f"PASS digits rank {r}")


if __name__ == "__main__":
    scenario, args = sys.argv[1], sys.argv[2:]
    if scenario == "collectives":
        collectives()
    elif scenario == "mismatch":
        mismatch()
    elif scenario == "lost":
        lost(int(args[0]), args[1])
    elif scenario == "digits":
        digits(int(args[0]) if args else 20)
    else:
        sys.exit(f"unknown scenario {scenario!r}")
