"""Collectives across processes: tinycore.distributed against mpi4py on the same ranks, in the same run.

    python3 bench/bench_distributed.py            # starts itself under `mpirun -np 2 --oversubscribe`

1. all_reduce of a 64 MB float32 CLANG tensor vs mpi4py's own ``Allreduce`` on numpy arrays (bandwidth, ratio);
2. an MLP train step (TinyJit, SGD) with and without `average_gradients`, and the bucket's all_reduce alone (replayed
   by TinyJit, as in the step), so the cost of averaging beyond the collective itself shows; the three are timed in
   turn, 30 rounds, so the machine's load moves them alike.

Times are medians of several runs; the ranks share this machine's cores, so the figures move with its load. Each
rank runs ``THREADS`` = cores / ranks compute threads unless ``THREADS`` is set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import numpy as np


def median_time(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def worker() -> None:
    # the ranks share this machine: each gets its share of the cores (a rank waiting in a collective spins on its
    # core, so more compute threads than cores would slow the other rank's kernels, not the averaging)
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE") or 1)
    os.environ.setdefault("THREADS", str(max(1, (os.cpu_count() or 1) // local)))
    from mpi4py import MPI

    import tinycore.distributed as dist
    from tinycore import Tensor, TinyJit, nn
    from tinycore.nn.state import get_parameters

    group = dist.init(timeout=120)
    comm = MPI.COMM_WORLD
    say = print if group.rank == 0 else (lambda *a, **k: None)
    n = 16 * 1024 * 1024  # 64 MB of float32
    a, b = np.ones(n, np.float32), np.empty(n, np.float32)
    x = Tensor.ones(n).contiguous().realize()
    reps = 7
    for _ in range(2):  # warm up both
        comm.Allreduce(a, b)
        dist.all_reduce(x).realize()

    def ours() -> None:
        dist.all_reduce(x).realize()
        comm.Barrier()

    def theirs() -> None:
        comm.Allreduce(a, b)
        comm.Barrier()

    t_mpi, t_ours = median_time(theirs, reps), median_time(ours, reps)
    gb = n * 4 / 1e9
    say(f"all_reduce 64 MB float32, {group.world_size} ranks: tinycore {gb / t_ours:.2f} GB/s ({t_ours * 1e3:.1f} ms), "
        f"mpi4py Allreduce {gb / t_mpi:.2f} GB/s ({t_mpi * 1e3:.1f} ms), ratio {t_mpi / t_ours:.2f}x")  # fmt: skip

    class MLP:
        def __init__(self) -> None:
            self.l1, self.l2, self.l3 = nn.Linear(256, 512), nn.Linear(512, 512), nn.Linear(512, 10)

        def __call__(self, x: Tensor) -> Tensor:
            return self.l3(self.l2(self.l1(x).relu()).relu())

    def make_step(average: bool):
        Tensor.manual_seed(0)
        model = MLP()
        params = get_parameters(model)
        Tensor.realize(*params)
        opt = nn.optim.SGD(params, lr=1e-3)

        @TinyJit
        @Tensor.train()
        def step(xb: Tensor, yb: Tensor) -> Tensor:
            opt.zero_grad()
            loss = model(xb).sparse_categorical_crossentropy(yb)
            loss.backward()
            if average:
                dist.average_gradients(params)
            opt.step()
            return loss.realize()

        return step, sum(p.numel() for p in params)

    rng = np.random.default_rng(group.rank)
    xb, yb = Tensor(rng.standard_normal((64, 256)).astype(np.float32)), Tensor(rng.integers(0, 10, 64).astype(np.int32))
    steps = {average: make_step(average) for average in (False, True)}
    count = steps[False][1]
    grads = Tensor.ones(count).contiguous().realize()
    collective = TinyJit(lambda g: dist.all_reduce(g).realize())  # replayed, as it runs inside the step
    runs = {  # each ends when its last kernel has run (TinyJit replays realize their outputs)
        False: lambda: steps[False][0](xb, yb),
        True: lambda: steps[True][0](xb, yb),
        "all_reduce": lambda: collective(grads),
    }
    for run in runs.values():
        for _ in range(5):
            run()
    # interleaved, so a change in the machine's load moves the three alike
    times: dict[object, list[float]] = {key: [] for key in runs}
    for _ in range(30):
        for key, run in runs.items():
            comm.Barrier()
            times[key].append(median_time(lambda run=run: (run(), comm.Barrier()), 1))
    results = {key: float(np.median(t)) for key, t in times.items()}
    t_coll = results["all_reduce"]
    without, with_avg = results[False], results[True]
    extra = with_avg - without - t_coll
    say(f"MLP train step ({count} parameters, batch 64 per rank, THREADS={os.environ['THREADS']} per rank): "
        f"{without * 1e3:.2f} ms without averaging, "
        f"{with_avg * 1e3:.2f} ms with; the bucket's all_reduce alone {t_coll * 1e3:.2f} ms; "
        f"averaging beyond the collective {extra * 1e3:+.2f} ms ({extra / without * 100:+.1f}% of the step)"
    )  # fmt: skip


def main() -> int:
    if os.environ.get("OMPI_COMM_WORLD_SIZE") or "--worker" in sys.argv:
        worker()
        return 0
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("needs Open MPI's mpirun (apt-get install openmpi-bin libopenmpi-dev) and mpi4py (tinycore[mpi])")
        return 1
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return subprocess.call([mpirun, "-np", "2", "--oversubscribe", sys.executable, __file__, "--worker"], env=env)


if __name__ == "__main__":
    sys.exit(main())
