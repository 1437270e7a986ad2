"""`tinycore.distributed` across real processes: ``mpirun -np 2 --oversubscribe python3 distributed_worker.py ...``
(skipped, naming what is missing, without Open MPI's ``mpirun`` or mpi4py), plus the parts that need no MPI."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tinycore.distributed as dist
from tinycore import Tensor

WORKER = Path(__file__).resolve().parent / "distributed_worker.py"
MPIRUN = shutil.which("mpirun")
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None

MISSING = (
    "needs Open MPI's mpirun (apt-get install openmpi-bin libopenmpi-dev)"
    if MPIRUN is None
    else "needs mpi4py (pip install 'tinycore[mpi]')"
    if not HAVE_MPI4PY
    else ""
)


def mpirun(
    *args: str, extra: tuple[str, ...] = (), timeout: float = 120
) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    env.pop("TINYCORE_DIST_TIMEOUT", None)
    cmd = [MPIRUN or "mpirun", "-np", "2", "--oversubscribe", *extra, sys.executable, str(WORKER), *args]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return proc, time.monotonic() - start


def passed(proc: subprocess.CompletedProcess[str], scenario: str, ranks: tuple[int, ...] = (0, 1)) -> None:
    for r in ranks:
        assert f"PASS {scenario} rank {r}" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.skipif(bool(MISSING), reason=MISSING)
class TestAcrossProcesses:
    """Each test starts one 2-rank job on localhost."""

    def test_every_collective_matches_numpy_and_replays_in_tinyjit(self) -> None:
        proc, _ = mpirun("collectives")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        passed(proc, "collectives")

    def test_mismatched_shapes_dtypes_and_collectives_name_both_ranks(self) -> None:
        proc, _ = mpirun("mismatch")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        passed(proc, "mismatch")
        for r in (0, 1):
            shape = re.search(rf"MISMATCH shape rank {r}: (.*)", proc.stdout)
            assert shape and "rank 0 has (4,) float32" in shape.group(1)
            assert "rank 1 has (5,) float32" in shape.group(1)
            dtype = re.search(rf"MISMATCH dtype rank {r}: (.*)", proc.stdout)
            assert dtype and "(4,) float32" in dtype.group(1) and "(4,) int32" in dtype.group(1)
            kind = re.search(rf"MISMATCH kind rank {r}: (.*)", proc.stdout)
            assert kind and "(all_reduce)" in kind.group(1) and "(broadcast)" in kind.group(1)
            replay = re.search(rf"MISMATCH replay rank {r}: (.*)", proc.stdout)
            assert replay and "rank 0 has (4,) float32" in replay.group(1) and "rank 1 has (5,)" in replay.group(1)

    @pytest.mark.parametrize(
        "victim, how, extra",
        [(1, "hang", ()), (0, "hang", ()), (1, "kill", ("--enable-recovery",))],
        ids=["rank-1-never-arrives", "rank-0-never-arrives", "rank-1-killed"],
    )
    def test_a_lost_rank_stops_the_other_with_a_named_error_within_the_timeout(
        self, victim: int, how: str, extra: tuple[str, ...]
    ) -> None:
        # timeout 3 s; the survivor of a lost rank 0 waits a 2.3 s grace more for rank 0's verdict
        proc, wall = mpirun("lost", str(victim), how, extra=extra, timeout=90)
        survivor = 1 - victim
        line = re.search(rf"LOST rank {survivor} after ([0-9.]+) s ranks=\[{victim}\]: (.*)", proc.stdout)
        assert line, proc.stdout + proc.stderr
        assert float(line.group(1)) < 3.0 + 2.3 + 1.5
        assert f"rank {victim}" in line.group(2) and "all_reduce #2" in line.group(2) and "within 3 s" in line.group(2)
        passed(proc, "lost", (survivor,))
        assert wall < 60  # the job ended, it did not hang (with --enable-recovery mpirun itself exits 0)
        if how == "hang":
            assert proc.returncode != 0

    def test_the_digits_example_trains_across_two_ranks(self, tmp_path: Path) -> None:
        """The README's example under ``mpirun -np 2 ... --distributed``: rank 0 reports the two ranks, trains,
        saves weights the one-process example loads, and the job exits 0 (2 epochs reach > 80%)."""
        pytest.importorskip("sklearn", reason="the digits example needs scikit-learn (pip install scikit-learn)")
        pytest.importorskip("tqdm", reason="the digits example needs tqdm (pip install tqdm)")
        example = WORKER.parent.parent / "examples" / "digits.py"
        weights = tmp_path / "digits.safetensors"
        env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "THREADS": "1"}
        cmd = [MPIRUN or "mpirun", "-np", "2", "--oversubscribe", sys.executable, str(example), "--distributed"]
        cmd += ["--epochs", "2", "--min-accuracy", "0.8", "--save", str(weights)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "2 ranks" in proc.stdout and proc.stdout.count("test accuracy") == 1, proc.stdout[-2000:]
        check = subprocess.run(
            [sys.executable, str(example), "--load", str(weights), "--min-accuracy", "0.8"],
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]

    def test_two_ranks_train_digits_like_one_process_on_both_batches(self) -> None:
        if importlib.util.find_spec("sklearn") is None:
            pytest.skip("the digits data set needs scikit-learn (pip install '.[examples]')")
        proc, _ = mpirun("digits", "20", timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        passed(proc, "digits")


# ----- without MPI


def test_launch_info_reads_each_launcher() -> None:
    assert dist.launch_info({}) == dist.LaunchInfo(0, 1, 0, "none")
    pmi = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1"}
    assert dist.launch_info(pmi) == dist.LaunchInfo(3, 4, 1, "PMI")
    slurm = {"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1"}
    assert dist.launch_info(slurm) == dist.LaunchInfo(5, 8, 1, "Slurm")
    with pytest.raises(dist.DistributedError, match="OMPI_COMM_WORLD_RANK=4 is not a rank"):
        dist.launch_info({"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "2"})


def test_sampler_shards_are_disjoint_and_cover_the_data() -> None:
    shards = [dist.DistributedSampler(10, rank=r, world_size=3, seed=1) for r in range(3)]
    got = [s.indices() for s in shards]
    assert all(len(g) == 4 == len(s) for g, s in zip(got, shards))
    assert set(sum(got, [])) == set(range(10))
    shards[0].set_epoch(1)
    assert shards[0].indices() != got[0]
    assert len(dist.DistributedSampler(10, rank=0, world_size=3, drop_last=True)) == 3


def test_one_process_group_without_mpi() -> None:
    dist.shutdown()
    try:
        dist.init(mpi=False)
        x = Tensor([1.0, 2.0, 4.0])
        assert dist.all_reduce(x, "mean").tolist() == [1.0, 2.0, 4.0]
        assert dist.all_gather(x).tolist() == [1.0, 2.0, 4.0]
        w = Tensor([1.0, 2.0], requires_grad=True)
        (w * w).sum().backward()
        assert dist.average_gradients([w]) == 1
        np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])
        with pytest.raises(ValueError, match="all_reduce op must be one of"):
            dist.all_reduce(x, "avg")
        with pytest.raises(dist.DistributedError, match="multiple of the world size"):
            dist.reduce_scatter(Tensor(1.0))
    finally:
        dist.shutdown()
    with pytest.raises(dist.DistributedError, match=r"call tinycore.distributed.init\(\) first"):
        dist.all_reduce(Tensor([1.0]))


def test_importing_distributed_imports_no_mpi() -> None:
    code = "import sys, tinycore.distributed; print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_average_gradients_adds_only_the_collective_to_a_captured_step() -> None:
    """A TinyJit training step with `average_gradients` runs the kernels of the step without it (the same kernels:
    the gradients' matmuls keep their tiling when they write into the bucket) plus one collective per bucket, and the
    same work: the loss it returns after ``opt.step()`` is computed with the gradients, not by a second forward pass
    after the update. Results are the same (a group of one process: the mean of one rank is its own gradient)."""
    from tinycore import TinyJit, nn
    from tinycore.helpers import GlobalCounters
    from tinycore.nn.state import get_parameters

    def train(average: bool, bucket_mb: float = 25.0) -> tuple[list[float], int, list[str], list[np.ndarray]]:
        Tensor.manual_seed(0)
        l1, l2 = nn.Linear(16, 32), nn.Linear(32, 4)
        params = get_parameters([l1, l2])
        Tensor.realize(*params)
        opt = nn.optim.SGD(params, lr=0.1)

        @TinyJit
        @Tensor.train()
        def step(x: Tensor, y: Tensor) -> Tensor:
            opt.zero_grad()
            loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
            loss.backward()
            if average:
                dist.average_gradients(params, bucket_mb=bucket_mb)
            opt.step()
            return loss.realize()

        rng = np.random.default_rng(0)
        losses, ops = [], 0
        for i in range(4):
            x = Tensor(rng.standard_normal((8, 16)).astype(np.float32))
            y = Tensor(rng.integers(0, 4, 8).astype(np.int32))
            GlobalCounters.reset()
            losses.append(step(x, y).item())
            ops = GlobalCounters.global_ops if i == 0 else ops  # the first call runs eagerly
        assert step.captured is not None
        # kernel names say each kernel's shape and optimizations; "n1", "n2" only number equal names apart
        kernels = sorted(re.sub(r"n\d+$", "", item.runner.display_name) for item in step.captured.items)
        return losses, ops, kernels, [p.numpy() for p in params]

    dist.shutdown()
    try:
        dist.init(mpi=False)
        alone, ops_alone, kernels_alone, params_alone = train(False)
        # one bucket; then buckets of at most 1 KB: [weight 1] and [bias 1, weight 2, bias 2]
        runs = [
            (train(True), ["all_reduce sum (676,)"]),
            (train(True, 0.001), ["all_reduce sum (164,)", "all_reduce sum (512,)"]),
        ]
    finally:
        dist.shutdown()
    # the division by the world size is the only new work (one op per gradient element); the forward's matmuls
    # again would add 2 * 8 * (16 * 32 + 32 * 4) = 10240
    grads = 16 * 32 + 32 + 32 * 4 + 4
    for (averaged, ops_averaged, kernels, params_averaged), collectives in runs:
        assert kernels == sorted(kernels_alone + collectives)
        assert ops_alone < ops_averaged <= ops_alone + 2 * grads, (ops_alone, ops_averaged)
        np.testing.assert_allclose(averaged, alone, rtol=1e-6)
        for a, b in zip(params_averaged, params_alone):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
