"""The NCCL collective backend against `FakeNCCL` (no GPU, no libnccl): device pointers in the fake driver's memory,
two ranks in two threads of one process sharing one fake communicator."""

from __future__ import annotations

import threading
import types

import numpy as np
import pytest
from tinycore_cuda import nccl as nccl_module
from tinycore_cuda import plugin
from tinycore_cuda.nccl import NCCL, NCCLBackend, NCCLError
from tinycore_cuda.testing import FakeDriver, FakeNCCL, FakeNCCLWorld

from tinycore.sdk import DistributedError, dtypes


class Group:
    """The part of a process group NCCLBackend uses, for rank `rank` of `shared` (ids go through it)."""

    def __init__(self, rank: int, world_size: int, shared: dict):
        self.rank, self.world_size, self.shared, self.broken = rank, world_size, shared, None

    def broadcast_bytes(self, data, root=0):
        if self.rank == root:
            self.shared["uid"] = data
        while "uid" not in self.shared:
            pass
        return self.shared["uid"]


class Device:
    """The part of a CUDA device NCCLBackend uses; the stream of rank `rank` of `world` is busy while its
    collective waits for the other rank."""

    def __init__(self, world, rank):
        bindings = types.SimpleNamespace(cuStreamQuery=lambda stream: world.stream_query(rank))
        self.driver = types.SimpleNamespace(bindings=bindings)
        self.device = "CUDA"

    def activate(self):
        pass


class Buf:
    """A device buffer as the backend sees it: a pointer (`opaque`), a size and a dtype."""

    def __init__(self, driver, values, dtype=dtypes.float32):
        arr = np.asarray(values, dtype=np.dtype(dtype.fmt))
        self.driver, self.size, self.dtype = driver, arr.size, dtype
        _, self.opaque = driver.cuMemAlloc(max(arr.nbytes, 1))
        block, offset = driver._block(self.opaque)
        block[offset : offset + arr.nbytes] = arr.tobytes()

    def numpy(self):
        block, offset = self.driver._block(self.opaque)
        return np.frombuffer(block, np.dtype(self.dtype.fmt), self.size, offset).copy()


def call(name="all_reduce #1", timeout=5.0):
    from tinycore.sdk import CollectiveCall

    return CollectiveCall(types.SimpleNamespace(broken=None), name, timeout)


@pytest.fixture
def world():
    driver = FakeDriver(memory=1 << 24)
    world = FakeNCCLWorld(driver)
    return driver, world


def two_ranks(world, run):
    """Build a backend per rank (threads: joining a communicator waits for the id), then run `run(rank, backend)`."""
    driver, fake_world = world
    shared: dict = {}
    fakes = [FakeNCCL(fake_world) for _ in range(2)]
    backends: list = [None, None]

    def join(r):
        backends[r] = NCCLBackend(Device(fake_world, r), Group(r, 2, shared), NCCL(fakes[r]))

    threads = [threading.Thread(target=join, args=(r,)) for r in range(2)]
    [t.start() for t in threads]
    [t.join(5) for t in threads]
    errors: list = []

    def go(r):
        try:
            run(r, backends[r])
        except Exception as error:  # noqa: BLE001 - reported by the test
            errors.append(error)

    threads = [threading.Thread(target=go, args=(r,)) for r in range(2)]
    [t.start() for t in threads]
    [t.join(10) for t in threads]
    assert not errors, errors
    return fakes, backends


def test_every_collective_on_device_pointers(world):
    driver = world[0]
    data = {r: np.arange(6, dtype=np.float32) * (r + 1) for r in range(2)}
    results: dict = {}

    def run(r, backend):
        inp = Buf(driver, data[r])
        out = Buf(driver, np.zeros(6))
        backend.all_reduce(out, inp, "sum", call())
        results[("sum", r)] = out.numpy()
        backend.all_reduce(out, inp, "max", call())
        results[("max", r)] = out.numpy()
        backend.broadcast(out, inp, 1, call())
        results[("bcast", r)] = out.numpy()
        gathered = Buf(driver, np.zeros(12))
        backend.all_gather(gathered, inp, call())
        results[("gather", r)] = gathered.numpy()
        block = Buf(driver, np.zeros(3))
        backend.reduce_scatter(block, inp, "sum", call())
        results[("scatter", r)] = block.numpy()

    fakes, backends = two_ranks(world, run)
    total = data[0] + data[1]
    for r in range(2):
        np.testing.assert_array_equal(results[("sum", r)], total)
        np.testing.assert_array_equal(results[("max", r)], np.maximum(data[0], data[1]))
        np.testing.assert_array_equal(results[("bcast", r)], data[1])
        np.testing.assert_array_equal(results[("gather", r)], np.concatenate([data[0], data[1]]))
        np.testing.assert_array_equal(results[("scatter", r)], total[r * 3 : (r + 1) * 3])
    assert fakes[0].calls[0] == "ncclGetUniqueId" and "ncclGetUniqueId" not in fakes[1].calls
    assert backends[0].comm != backends[1].comm
    backends[0].close()
    assert "ncclCommDestroy" in fakes[0].calls


def test_a_rank_that_never_arrives_times_out_and_aborts(world):
    driver, fake_world = world
    shared = {"uid": b"x" * 128}
    fake = FakeNCCL(fake_world)
    backend = NCCLBackend(Device(fake_world, 1), Group(1, 2, shared), NCCL(fake))  # rank 1 of 2: rank 0 never comes
    inp, out = Buf(driver, [1.0, 2.0]), Buf(driver, [0.0, 0.0])
    with pytest.raises(DistributedError, match=r"all_reduce #7 did not finish within 0.2 s"):
        backend.all_reduce(out, inp, "sum", call("all_reduce #7", timeout=0.2))
    assert "ncclCommAbort" in fake.calls


def test_an_asynchronous_nccl_error_names_the_collective(world):
    driver, fake_world = world
    fake = FakeNCCL(fake_world)
    backend = NCCLBackend(Device(fake_world, 1), Group(1, 2, {"uid": b"y" * 128}), NCCL(fake))
    fake_world.async_errors[backend.comm] = 6
    with pytest.raises(DistributedError, match=r"broadcast #2 failed on NCCL: NCCL reported: remote process exited"):
        backend.broadcast(Buf(driver, [0.0]), Buf(driver, [1.0]), 0, call("broadcast #2"))
    assert "ncclCommAbort" in fake.calls


def test_a_failing_call_and_an_unsupported_dtype_are_clear(world):
    driver, fake_world = world
    fake = FakeNCCL(fake_world)
    fake.fail["ncclCommInitRank"] = 2
    with pytest.raises(NCCLError, match="ncclCommInitRank failed: unhandled system error"):
        NCCLBackend(Device(fake_world, 1), Group(1, 2, {"uid": b"z" * 128}), NCCL(fake))
    backend = NCCLBackend(Device(fake_world, 1), Group(1, 2, {"uid": b"z" * 128}), NCCL(FakeNCCL(fake_world)))
    with pytest.raises(NCCLError, match="NCCL can't move int16"):
        backend.all_reduce(Buf(driver, [1], dtypes.int16), Buf(driver, [1], dtypes.int16), "sum", call())


def test_without_the_library_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr(nccl_module, "_library_path", lambda: "/nonexistent/libnccl.so.2")
    with pytest.raises(NCCLError, match=r"tinycore-cuda\[nccl\]"):
        nccl_module.load_nccl()


def test_the_hook_answers_only_for_cuda():
    assert plugin.tinycore_collective_backend(device="CLANG", group=None) is None
    assert plugin.tinycore_collective_backend(device="CLANG:1", group=None) is None
