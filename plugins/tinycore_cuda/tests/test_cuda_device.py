"""The CUDA device driven by a fake driver (`tinycore_cuda.testing.FakeDriver`): opening, memory, the allocator's
cache and out-of-memory retry, launches and timing, driver errors, and the probe's diagnoses. No GPU needed."""

from __future__ import annotations

import ctypes
import sys
import types

import numpy as np
import pytest

pytest.importorskip("tinycore_cuda", reason="tinycore-cuda is not installed (pip install -e plugins/tinycore_cuda)")
from tinycore_cuda import plugin  # noqa: E402
from tinycore_cuda.device import CUDADevice, CUDAError  # noqa: E402
from tinycore_cuda.testing import NO_DEVICE, OUT_OF_MEMORY, FakeDriver  # noqa: E402

from tinycore.sdk import KernelImage  # noqa: E402


@pytest.fixture
def fake() -> FakeDriver:
    return FakeDriver(gpus=2, memory=1 << 16)


def test_opening_reads_arch_and_limits_from_the_gpu(fake: FakeDriver) -> None:
    dev = CUDADevice("CUDA:1", driver=fake)
    assert dev.device == "CUDA:1" and dev.arch == "sm_90" and dev.compiler.arch == "sm_90"
    assert dev.renderer.local_max == (1024, 1024, 64) and dev.renderer.shared_max == 232448  # the opt-in limit
    assert ("cuDevicePrimaryCtxRetain", (1,)) in fake.calls and dev.name == "Fake H100"
    with pytest.raises(Exception, match="there are 2 CUDA GPUs here, no ordinal 5"):
        CUDADevice("CUDA:5", driver=fake)


def test_memory_round_trips_and_views_offset(fake: FakeDriver) -> None:
    alloc = CUDADevice("CUDA", driver=fake).allocator
    data = np.arange(100, dtype=np.float32)
    buf = alloc.alloc(data.nbytes)
    alloc.copyin(buf, memoryview(data.tobytes()))  # read-only host memory is fine
    out = np.empty_like(data)
    alloc.copyout(memoryview(out).cast("B"), buf)
    np.testing.assert_array_equal(out, data)
    part = np.empty(10, dtype=np.float32)
    alloc.copyout(memoryview(part).cast("B"), alloc.offset(buf, 40, 4 * 50))
    np.testing.assert_array_equal(part, data[50:60])


def test_freed_blocks_are_reused_and_out_of_memory_empties_the_cache_then_retries(fake: FakeDriver) -> None:
    alloc = CUDADevice("CUDA", driver=fake).allocator
    first = alloc.alloc(40000)
    alloc.free(first, 40000)
    assert alloc.alloc(40000) == first and fake.used() == 40000  # the cached block, no new cuMemAlloc
    alloc.free(first, 40000)
    second = alloc.alloc(30000)  # does not fit beside the cached 40000: the cache is emptied, then it fits
    assert fake.used() == 30000 and second != 0
    with pytest.raises(MemoryError, match=r"out of GPU memory allocating 60000 bytes \(\d+ of 65536 bytes free\)"):
        alloc.alloc(60000)


@pytest.mark.parametrize("nbytes", [(1 << 20) - 4, 1 << 20, 5 * (1 << 20) + 12, 17 * (1 << 20) + 4])
def test_large_host_copies_go_through_pinned_staging_chunk_by_chunk(
    fake: FakeDriver, monkeypatch: pytest.MonkeyPatch, nbytes: int
) -> None:
    from tinycore_cuda import device as cuda_device

    monkeypatch.setattr(cuda_device, "STAGING_CHUNK", 2 << 20)  # several chunks without a big fake GPU
    fake.memory = 1 << 26
    alloc = CUDADevice("CUDA", driver=fake).allocator
    data = np.random.default_rng(nbytes).integers(0, 255, nbytes, dtype=np.uint8)
    buf = alloc.alloc(nbytes)
    alloc.copyin(buf, memoryview(data))
    out = np.zeros_like(data)
    alloc.copyout(memoryview(out), buf)
    np.testing.assert_array_equal(out, data)
    names = [name for name, _ in fake.calls]
    chunks = -(-nbytes // (2 << 20))
    if nbytes < cuda_device.STAGING_MIN:  # small copies go straight from pageable memory
        assert "cuMemHostAlloc" not in names and names.count("cuMemcpyHtoD") == 1
        return
    assert names.count("cuMemHostAlloc") == 2 and "cuMemcpyHtoD" not in names and "cuMemcpyDtoH" not in names
    assert names.count("cuMemcpyHtoDAsync") == chunks and names.count("cuMemcpyDtoHAsync") == chunks
    # every DMA is followed by its buffer's event; a buffer is refilled only after waiting for it
    records = [args for name, args in fake.calls if name == "cuEventRecord"]
    assert len(records) == 2 * chunks and all(stream == 0 for _, stream in records)
    if chunks > 2:
        assert names.index("cuEventSynchronize") < [i for i, n in enumerate(names) if n == "cuMemcpyHtoDAsync"][2]


@pytest.mark.parametrize("threads", [1, 3, 4])
def test_the_staged_host_copy_is_split_over_threads_in_whole_pages(fake: FakeDriver, threads: int) -> None:
    from tinycore_cuda.device import PinnedStaging

    staging = PinnedStaging(CUDADevice("CUDA", driver=fake), threads=threads)
    for size in (1, 4096 * 2 * threads - 1, 4096 * 2 * threads, 1_000_003, 3 << 20):
        src = np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8)
        dest = np.zeros(size + 8, dtype=np.uint8)  # a guard past the end
        staging._memmove(dest.ctypes.data, src.ctypes.data, size)
        np.testing.assert_array_equal(dest[:size], src)
        assert not dest[size:].any()
    assert (staging.pool is None) == (threads == 1)


def test_staged_copies_from_two_threads_keep_their_own_bytes(fake: FakeDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from tinycore_cuda import device as cuda_device

    monkeypatch.setattr(cuda_device, "STAGING_CHUNK", 1 << 20)
    fake.memory = 1 << 26
    alloc = CUDADevice("CUDA", driver=fake).allocator
    errors: list[str] = []

    def worker(seed: int) -> None:
        buf = alloc.alloc(3 << 20)
        for k in range(8):
            data = np.full(3 << 20, seed * 16 + k, dtype=np.uint8)
            alloc.copyin(buf, memoryview(data))
            out = np.empty_like(data)
            alloc.copyout(memoryview(out), buf)
            if not np.array_equal(out, data):
                errors.append(f"thread {seed}, copy {k}: read back other bytes")

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_staging_reuses_its_buffers_across_copies_and_can_be_turned_off(
    fake: FakeDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tinycore_cuda import device as cuda_device

    fake.memory = 1 << 25
    alloc = CUDADevice("CUDA", driver=fake).allocator
    data = np.arange(1 << 20, dtype=np.float32)
    buf = alloc.alloc(data.nbytes)
    for k in range(3):
        alloc.copyin(buf, memoryview(data + k).cast("B"))
        out = np.empty_like(data)
        alloc.copyout(memoryview(out).cast("B"), buf)
        np.testing.assert_array_equal(out, data + k)
    assert [name for name, _ in fake.calls].count("cuMemHostAlloc") == 2  # made once per device
    monkeypatch.setenv("CUDA_STAGING", "0")
    fake.calls.clear()
    plain = CUDADevice("CUDA", driver=fake)
    assert plain.staging is None
    plain.allocator.copyin(buf, memoryview(data).cast("B"))
    assert [name for name, _ in fake.calls if name.startswith("cuMemcpy")] == ["cuMemcpyHtoD"]
    monkeypatch.setenv("CUDA_STAGING", "yes")
    with pytest.raises(ValueError, match=r"CUDA_STAGING='yes': use 1 .* or 0"):
        CUDADevice("CUDA", driver=fake)
    assert cuda_device.staging_enabled({}) is True


def test_a_failing_driver_call_names_the_call_and_the_error(fake: FakeDriver) -> None:
    dev = CUDADevice("CUDA", driver=fake)
    fake.fail["cuCtxSynchronize"] = 700
    with pytest.raises(CUDAError, match=r"device CUDA: cuCtxSynchronize failed: CUDA_ERROR_700"):
        dev.synchronize()
    fake.fail["cuMemAlloc"] = 1
    with pytest.raises(CUDAError, match="cuMemAlloc failed: CUDA_ERROR_INVALID_VALUE"):
        dev.allocator.alloc(16)


def test_a_launch_passes_grid_block_pointers_and_typed_values(fake: FakeDriver) -> None:
    dev = CUDADevice("CUDA", driver=fake)
    a, b = dev.allocator.alloc(64), dev.allocator.alloc(64)
    prg = dev.runtime("k_add", KernelImage.pack(["buffer", "buffer", "int", "long"], b"\x7fELF-cubin"))
    assert fake.modules[1] == b"\x7fELF-cubin" and prg.function == (1, "k_add")
    assert prg(a, b, global_size=(4, 2, 1), local_size=(32, 1, 1), vals=(3, 2**40)) is None
    launch = fake.launches[-1]
    assert launch["grid"] == (4, 2, 1) and launch["block"] == (32, 1, 1) and launch["shared"] == 0
    assert prg.types[:2] == (ctypes.c_void_p, ctypes.c_void_p) and [ctypes.sizeof(t) for t in prg.types[2:]] == [4, 8]
    # the program's argument block, filled in place: one address, no per-launch packing
    assert launch["params"] == prg.block_address and isinstance(launch["params"], int)
    assert FakeDriver.kernel_values(launch["params"], prg.types) == (a, b, 3, 2**40)
    prg(b, a, global_size=(1,), local_size=None, vals=(-7, -(2**40)))
    assert FakeDriver.kernel_values(fake.launches[-1]["params"], prg.types) == (b, a, -7, -(2**40))
    with prg.block_lock:  # another thread filling the block: this launch packs its own (the bindings' tuple form)
        prg(a, a, global_size=(1,), local_size=None, vals=(5, 6))
    values, ctypes_types = fake.launches[-1]["params"]
    assert values == (a, a, 5, 6) and ctypes_types == prg.types
    seconds = prg(a, b, global_size=(1,), local_size=None, vals=(1, 1), wait=True)
    assert seconds == pytest.approx(1.5e-3) and fake.launches[-1]["block"] == (1, 1, 1)
    assert FakeDriver.kernel_values(fake.launches[-1]["params"], prg.types) == (a, b, 1, 1)
    # the eager path's launcher: dims and values fixed once, then a call per launch on the buffer handles alone
    launch = prg.launcher((4, 2, 1), (32, 1, 1), (9, 10))
    launch(b, b)
    assert fake.launches[-1]["grid"] == (4, 2, 1) and fake.launches[-1]["block"] == (32, 1, 1)
    assert FakeDriver.kernel_values(fake.launches[-1]["params"], prg.types) == (b, b, 9, 10)
    with prg.block_lock:
        launch(a, b)
    assert fake.launches[-1]["params"] == ((a, b, 9, 10), prg.types)
    count = len(fake.launches)
    prg.launcher((0, 1, 1), (32, 1, 1), (9, 10))(a, b)  # an empty grid launches nothing
    assert len(fake.launches) == count
    no_args = dev.runtime("k_none", KernelImage.pack([], b"\x7fELF-cubin"))
    no_args(global_size=(1,), local_size=(1,))
    assert fake.launches[-1]["params"] is None


def test_an_empty_launch_does_nothing(fake: FakeDriver) -> None:
    dev = CUDADevice("CUDA", driver=fake)
    prg = dev.runtime("k", KernelImage.pack([], b"cubin"))
    assert prg(global_size=(0, 1, 1), local_size=(32, 1, 1), wait=True) == 0.0 and not fake.launches


# ----- the probe tells the failure causes apart, each with its fix
def _bindings(monkeypatch: pytest.MonkeyPatch, driver: object | None) -> None:
    """Make ``from cuda.bindings import driver`` give `driver` (None: cuda-bindings is not installed)."""
    if driver is None:
        monkeypatch.setitem(sys.modules, "cuda.bindings", None)
        return
    package = types.ModuleType("cuda.bindings")
    package.driver = driver
    monkeypatch.setitem(sys.modules, "cuda.bindings", package)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", driver)


def test_probe_without_cuda_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    _bindings(monkeypatch, None)
    result = plugin.probe()
    assert not result.ok and result.device_count == 0 and "cuda-bindings is not installed" in result.reason
    assert "tinycore[cuda]" in result.hint


@pytest.mark.parametrize("gpu_in_machine", [False, True])
def test_probe_without_a_driver(monkeypatch: pytest.MonkeyPatch, gpu_in_machine: bool) -> None:
    class NoLibcuda(FakeDriver):
        def cuInit(self, flags):
            raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found via system search.')

    _bindings(monkeypatch, NoLibcuda())
    monkeypatch.setattr(plugin, "nvidia_gpu_nodes", lambda: gpu_in_machine)
    result = plugin.probe()
    assert not result.ok and result.reason.startswith("no NVIDIA driver") and "driver" in result.hint
    assert result.hardware_present == gpu_in_machine  # a GPU without its driver: core says why CUDA was passed over


def test_probe_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _bindings(monkeypatch, FakeDriver(gpus=0))
    result = plugin.probe()
    assert not result.ok and result.reason.startswith("no GPU") and result.device_count == 0
    assert not result.hardware_present  # nobody's mistake: no warning when another device is the default


def test_probe_with_a_driver_older_than_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    _bindings(monkeypatch, FakeDriver(driver_version=12040))
    monkeypatch.setattr(plugin, "nvrtc_major", lambda: 13)
    result = plugin.probe()
    assert not result.ok and "driver too old" in result.reason and "12.4" in result.reason and "13" in result.reason
    assert result.hardware_present


def test_probe_with_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _bindings(monkeypatch, FakeDriver(gpus=2))
    monkeypatch.setattr(plugin, "nvrtc_major", lambda: 13)
    result = plugin.probe()
    assert result.ok and result.device_count == 2


def test_the_fakes_error_codes_are_the_real_bindings() -> None:
    bindings = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    from tinycore_cuda import device

    assert int(bindings.CUresult.CUDA_ERROR_OUT_OF_MEMORY) == OUT_OF_MEMORY == device.OUT_OF_MEMORY
    assert int(bindings.CUresult.CUDA_ERROR_NO_DEVICE) == NO_DEVICE == plugin.NO_DEVICE


# ----- TinyJit replays through one CUDA graph (kernels built by NVRTC, launched on the fake driver)
def test_a_jit_replays_as_one_graph_launch_patching_only_the_changed_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC is not installed (pip install 'tinycore[cuda]')")
    from tinycore_cuda.graph import CUDAGraph

    from tinycore.device import Device
    from tinycore.engine import realize
    from tinycore.engine.jit import TinyJit
    from tinycore.tensor import Tensor

    fake = FakeDriver(memory=1 << 22)
    dev = CUDADevice("CUDA", driver=fake)
    monkeypatch.setitem(Device._opened, "CUDA", dev)  # this test's CUDA is the fake GPU
    monkeypatch.setattr(realize, "_kernel_runners", {})  # and no kernel runner outlives it

    @TinyJit
    def step(x: Tensor, w: Tensor) -> Tensor:
        return ((x * 2 + 1).contiguous().realize() * w).sum(axis=1)

    weight = Tensor(np.ones((8, 16), np.float32), device="CUDA").realize()
    for k in range(4):
        step(Tensor(np.full((8, 16), k, np.float32), device="CUDA").realize(), weight).realize()
    (graph,) = step.captured.graphs
    assert isinstance(graph, CUDAGraph) and len(graph.nodes) >= 2
    instantiations = [c for c in fake.calls if c[0] == "cuGraphInstantiate"]
    launches, patched = graph.submissions, graph.patched
    step(Tensor(np.full((8, 16), 9, np.float32), device="CUDA").realize(), weight).realize()
    assert graph.submissions == launches + 1
    assert [c for c in fake.calls if c[0] == "cuGraphInstantiate"] == instantiations  # never rebuilt
    assert graph.patched == patched + 1  # only the node reading the new input, never a rebuild
    first = graph.items[0]
    node = fake.launches[-len(graph.nodes)]
    assert node["params"][0][: len(first.bufs)] == tuple(int(b.opaque) for b in first.bufs)


@pytest.mark.parametrize("staged", [True, False])
def test_large_host_copies_round_trip_on_the_gpu(gpu, staged: bool) -> None:
    """On a GPU: copies through the page-locked staging buffers (and straight from pageable memory) keep every byte,
    also when a kernel reads a copy whose last chunk may still be moving, and across back-to-back copies."""
    from tinycore import Tensor

    staging = gpu.staging
    if not staged:
        gpu.staging = None
    try:
        rng = np.random.default_rng(7)
        for n in (5 * (1 << 20) + 3, 40 * (1 << 20) + 1):  # floats: several chunks and an odd tail
            data = rng.standard_normal(n, dtype=np.float32)
            t = Tensor(data, device="CUDA")
            np.testing.assert_array_equal(t.numpy(), data)
            np.testing.assert_allclose((t * 2 + 1).numpy(), data * 2 + 1, rtol=1e-6)
        a, b = rng.random(3 << 20, dtype=np.float32), rng.random(3 << 20, dtype=np.float32)
        ta, tb = Tensor(a, device="CUDA").realize(), Tensor(b, device="CUDA").realize()  # b reuses the buffers
        np.testing.assert_array_equal((ta - tb).numpy(), a - b)
    finally:
        gpu.staging = staging
