"""The ``CUDA`` device through NVIDIA's driver API (``cuda.bindings.driver``): allocator, program runtime, device.

Every driver call goes through `Driver`, which turns the bindings' ``(CUresult, *values)`` answers into values or a
`CUDAError` naming the call. The bindings module is a constructor argument (`CUDADevice(driver=...)`), so the tests
drive the whole device with a fake driver that records what it is asked to do.

``CUDA`` is GPU 0, ``CUDA:n`` GPU n; each device uses its GPU's primary context. tinycore's ``global_size`` counts
blocks and ``local_size`` threads per block, exactly CUDA's grid and block dims.

Host copies: a copy of at least `STAGING_MIN` bytes goes through two page-locked host buffers of `STAGING_CHUNK` bytes
(`PinnedStaging`, made on the first large copy): the host copies one chunk into one buffer (on up to
`STAGING_THREADS` threads) while the DMA engine moves the previous chunk out of the other. ``CUDA_STAGING=0`` copies
straight from pageable memory instead (the driver then stages every copy itself, on one thread).

Shared memory: the renderer's `shared_max` is the GPU's opt-in maximum per block
(``CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN``). A kernel over 48 KB uses dynamic shared memory: its
program sets ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` once when loaded and passes the bytes with every
launch (and in graph nodes); one over the GPU's limit is a `CUDAError` naming the kernel, the bytes and the limit.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

from tinycore.sdk import Compiled, DeviceError, KernelImage, LRUAllocator, grid_and_block, host_address
from tinycore_cuda import __version__
from tinycore_cuda.compiler import NVRTCCompiler, split_dynamic_shared
from tinycore_cuda.graph import CUDAGraph
from tinycore_cuda.renderer import CUDARenderer

FAMILY = "CUDA"
DISTRIBUTION = "tinycore-cuda"
OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY
_ARG_TYPES = {"buffer": ctypes.c_void_p, "int": ctypes.c_int, "long": ctypes.c_longlong}
STAGING_MIN = 1 << 20  # host copies at least this large are staged through page-locked memory
STAGING_CHUNK = 8 << 20  # the size of each of the two page-locked staging buffers
STAGING_THREADS = 4  # host threads copying each staged chunk (at most the CPU count)
STAGING_VARIABLE = "CUDA_STAGING"
_EVENT_DISABLE_TIMING = 2  # CU_EVENT_DISABLE_TIMING: the staging events only order, never time


def staging_enabled(environ: Any = None) -> bool:
    """Whether large host copies go through page-locked staging (``CUDA_STAGING``: 1, the default, or 0)."""
    value = (os.environ if environ is None else environ).get(STAGING_VARIABLE, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{STAGING_VARIABLE}={value!r}: use 1 (stage large host copies, the default) or 0 (don't)")
    return value == "1"


_current = threading.local()  # .context: the context `CUDADevice.activate` last made current on this thread


class CUDAError(DeviceError):
    """A driver call failed: the call, the driver's error name and what it means."""


class Driver:
    """The driver API with checked results: ``Driver(bindings).cuMemAlloc(n)`` returns the pointer or raises."""

    def __init__(self, bindings: Any, device: str = FAMILY):
        self.bindings, self.device = bindings, device

    def __getattr__(self, call: str) -> Any:
        fn = getattr(self.bindings, call)

        def checked(*args: Any) -> Any:
            err, *values = fn(*args)
            if err != 0:
                raise self.error(call, err)
            return values[0] if len(values) == 1 else tuple(values) if values else None

        setattr(self, call, checked)  # built once per call name: the launch path looks it up on every kernel
        return checked

    def timed(self, launch: Any) -> float:
        """Seconds between two events recorded around `launch()` on the default stream (waits for the second)."""
        start, end = self.cuEventCreate(0), self.cuEventCreate(0)
        self.cuEventRecord(start, 0)
        launch()
        self.cuEventRecord(end, 0)
        self.cuEventSynchronize(end)
        milliseconds = self.cuEventElapsedTime(start, end)
        self.cuEventDestroy(start)
        self.cuEventDestroy(end)
        return float(milliseconds) * 1e-3

    def error(self, call: str, err: Any) -> CUDAError:
        """A `CUDAError` for `call` failing with `err`."""
        try:
            _, name = self.bindings.cuGetErrorName(err)
            text = name.decode() if isinstance(name, bytes) else str(name)
        except Exception:  # an unknown code: show the number
            text = str(int(err))
        return CUDAError(f"{call} failed: {text}", device=self.device, distribution=DISTRIBUTION, version=__version__)


class CUDAAllocator(LRUAllocator):
    """Device memory (``cuMemAlloc``), kept for reuse by size when freed. Out of memory: the cache is emptied and the
    allocation retried once (`LRUAllocator`), then a `MemoryError` with the requested and free sizes."""

    def __init__(self, dev: CUDADevice):
        super().__init__()
        self.dev = dev

    def _alloc(self, size: int, options: Any) -> Any:
        self.dev.activate()
        err, ptr = self.dev.driver.bindings.cuMemAlloc(max(size, 1))
        if err == OUT_OF_MEMORY:
            free, total = self.dev.driver.cuMemGetInfo()
            raise MemoryError(
                f"{self.dev.device}: out of GPU memory allocating {size} bytes ({free} of {total} bytes free); "
                "free tensors or use smaller batches"
            )
        if err != 0:
            raise self.dev.driver.error("cuMemAlloc", err)
        return ptr

    def _free(self, opaque: Any, size: int, options: Any) -> None:
        self.dev.activate()
        self.dev.driver.cuMemFree(opaque)

    def copyin(self, dest: Any, src: memoryview) -> None:
        """Host bytes into device memory. The host memory may be reused as soon as this returns; a large copy
        (`STAGING_MIN`) may still be moving out of the staging buffers then, ahead of every later kernel and copy."""
        if src.nbytes:
            self.dev.activate()
            if src.nbytes >= STAGING_MIN and self.dev.staging is not None:
                self.dev.staging.copyin(int(dest), host_address(src), src.nbytes)
            else:
                self.dev.driver.cuMemcpyHtoD(dest, host_address(src), src.nbytes)

    def copyout(self, dest: memoryview, src: Any) -> None:
        """Device memory to host bytes (waits for queued kernels: the default stream is in order)."""
        if dest.nbytes:
            self.dev.activate()
            if dest.nbytes >= STAGING_MIN and self.dev.staging is not None:
                self.dev.staging.copyout(host_address(dest), int(src), dest.nbytes)
            else:
                self.dev.driver.cuMemcpyDtoH(host_address(dest), src, dest.nbytes)

    def transfer(self, dest: Any, src: Any, size: int, src_dev: Compiled, dest_dev: Compiled) -> None:
        """A copy between two CUDA devices (peer copy; the driver stages it when peer access is off)."""
        self.dev.activate()
        self.dev.driver.cuMemcpyPeer(dest, dest_dev.context, src, src_dev.context, size)

    def offset(self, opaque: Any, size: int, offset: int) -> Any:
        """A view `offset` bytes into an allocation (device pointers are plain addresses)."""
        return int(opaque) + offset


class PinnedStaging:
    """Two page-locked host buffers of `STAGING_CHUNK` bytes (``cuMemHostAlloc``, made on first use, kept for the
    process) that large host copies go through chunk by chunk on the default stream: while the DMA engine moves one
    chunk, the host copies the next one into the other buffer. An event per buffer says when its last DMA is done,
    so a buffer is never refilled under a copy still reading it (also across calls).

    The host side of a copy from pageable memory is what limits it (one core copies ~10 GB/s, a DMA from page-locked
    memory runs several times faster), so each chunk's host copy is split over `threads` threads (``memmove``
    through ctypes runs without the GIL), which also fault in a fresh destination's pages in parallel."""

    def __init__(self, dev: CUDADevice, threads: int | None = None):
        self.dev = dev
        self.threads = threads if threads is not None else max(1, min(STAGING_THREADS, os.cpu_count() or 1))
        self.buffers: list[int] = []
        self.events: list[Any] = []
        self.pending = [False, False]  # a DMA was queued on buffer i since its event was last waited for
        self.pool: Any = None  # concurrent.futures.ThreadPoolExecutor of threads - 1 workers, made with the buffers
        self.lock = threading.Lock()  # one copy at a time: two threads' copies would share the buffers

    def _memmove(self, dest: int, src: int, size: int) -> None:
        """``memmove`` of `size` bytes, in `threads` page-aligned parts copied at once."""
        part = (-(-size // self.threads) + 4095) // 4096 * 4096  # each thread's share, rounded up to whole pages
        if self.threads == 1 or size < 2 * 4096 * self.threads:
            ctypes.memmove(dest, src, size)
            return
        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="tinycore-cuda-staging")
        parts = [self.pool.submit(ctypes.memmove, dest + at, src + at, min(part, size - at))
                 for at in range(part, size, part)]  # fmt: skip
        ctypes.memmove(dest, src, min(part, size))
        for done in parts:
            done.result()

    def _ready(self, i: int) -> int:
        """Buffer `i`'s address, once no queued copy uses it any more."""
        driver = self.dev.driver
        if not self.buffers:
            for _ in range(2):
                self.buffers.append(int(driver.cuMemHostAlloc(STAGING_CHUNK, 0)))
                self.events.append(driver.cuEventCreate(_EVENT_DISABLE_TIMING))
        if self.pending[i]:
            driver.cuEventSynchronize(self.events[i])
            self.pending[i] = False
        return self.buffers[i]

    def _queued(self, i: int) -> None:
        self.dev.driver.cuEventRecord(self.events[i], 0)
        self.pending[i] = True

    def copyin(self, dest: int, src: int, nbytes: int) -> None:
        """`nbytes` from host address `src` to device address `dest`; returns once the host memory was read."""
        driver = self.dev.driver
        with self.lock:
            for k, at in enumerate(range(0, nbytes, STAGING_CHUNK)):
                size, i = min(STAGING_CHUNK, nbytes - at), k % 2
                buffer = self._ready(i)
                self._memmove(buffer, src + at, size)
                driver.cuMemcpyHtoDAsync(dest + at, buffer, size, 0)
                self._queued(i)

    def copyout(self, dest: int, src: int, nbytes: int) -> None:
        """`nbytes` from device address `src` (after every queued kernel) to host address `dest`; returns once the
        host memory holds them."""
        driver = self.dev.driver
        chunks = [(at, min(STAGING_CHUNK, nbytes - at)) for at in range(0, nbytes, STAGING_CHUNK)]

        def queue(k: int) -> None:
            at, size = chunks[k]
            driver.cuMemcpyDtoHAsync(self._ready(k % 2), src + at, size, 0)
            self._queued(k % 2)

        with self.lock:
            queue(0)
            for k, (at, size) in enumerate(chunks):
                if k + 1 < len(chunks):
                    queue(k + 1)  # the next chunk moves while this one is copied out on the host
                buffer = self._ready(k % 2)
                self._memmove(dest + at, buffer, size)


class CUDAProgram:
    """One loaded kernel, called as ``prg(*bufs, global_size=, local_size=, vals=, wait=False)`` (DESIGN §4); with
    `wait`, the seconds between two events around the launch."""

    def __init__(self, dev: CUDADevice, name: str, lib: bytes):
        self.dev, self.name = dev, name
        self.kinds, image = KernelImage.unpack(lib)
        self.shared_bytes, image = split_dynamic_shared(image)  # dynamic shared memory per block (0: none)
        if self.shared_bytes > dev.shared_optin:
            raise CUDAError(
                f"kernel {name} needs {self.shared_bytes} bytes of shared memory per block, over this GPU's limit "
                f"of {dev.shared_optin} bytes (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN); fix: build it "
                "for this device (its renderer knows the limit) or with fewer LOCAL/GROUP opts",
                device=dev.device, distribution=DISTRIBUTION, version=__version__,
            )  # fmt: skip
        dev.activate()
        self.module = dev.driver.cuModuleLoadData(image)
        self.function = dev.driver.cuModuleGetFunction(self.module, name.encode())
        if self.shared_bytes:  # the opt-in above the 48 KB every kernel gets
            attribute = dev.driver.bindings.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            dev.driver.cuFuncSetAttribute(self.function, attribute, self.shared_bytes)
        self.types = tuple(_ARG_TYPES[kind] for kind in self.kinds)
        # the argument block, built once: a launch writes its values into these slots and passes the address of the
        # pointer array (the bindings' tuple form packs a new block on every launch); the lock keeps a second thread
        # launching at the same moment on the tuple form instead
        self.slots = [kind() for kind in self.types]
        pointers = (ctypes.c_void_p * len(self.slots))(*[ctypes.addressof(slot) for slot in self.slots])
        self.block, self.block_address = pointers, ctypes.addressof(pointers) if self.slots else None
        self.block_lock = threading.Lock()

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] = (1, 1, 1),
        local_size: tuple[int, ...] | None = (1, 1, 1),
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Launch on the device's default stream."""
        grid, block = grid_and_block(global_size, local_size)
        if 0 in grid or 0 in block:
            return 0.0 if wait else None
        self.dev.activate()
        shared = self.shared_bytes
        lock = self.block_lock
        if not lock.acquire(False):  # another thread is filling the block: pack this launch's own
            args = ((*map(int, bufs), *map(int, vals)), self.types)
            return self._launch(grid, block, shared, args, wait)
        try:
            for slot, value in zip(self.slots, (*bufs, *vals)):
                slot.value = int(value)
            return self._launch(grid, block, shared, self.block_address, wait)
        finally:
            lock.release()

    def launcher(self, global_size: tuple[int, ...], local_size: tuple[int, ...] | None, vals: tuple[int, ...]) -> Any:
        """The eager path's launch (`tinycore.sdk.LaunchableProgram`): grid, block and values fixed, a call on the
        buffer handles alone fills the argument block and launches."""
        grid, block = grid_and_block(global_size, local_size)
        if 0 in grid or 0 in block:
            return lambda *bufs: None
        function, shared, address, lock, slots = self.function, self.shared_bytes, self.block_address, \
            self.block_lock, self.slots  # fmt: skip
        activate, launch_kernel = self.dev.activate, self.dev.driver.cuLaunchKernel

        def launch(*bufs: Any) -> None:
            activate()
            if not lock.acquire(False):
                self(*bufs, global_size=global_size, local_size=local_size, vals=vals)
                return
            try:
                for slot, value in zip(slots, (*bufs, *vals)):
                    slot.value = int(value)
                launch_kernel(function, *grid, *block, shared, 0, address, 0)
            finally:
                lock.release()

        return launch

    def _launch(self, grid: tuple[int, ...], block: tuple[int, ...], shared: int, args: Any, wait: bool) -> Any:
        driver = self.dev.driver
        if wait:
            return driver.timed(lambda: driver.cuLaunchKernel(self.function, *grid, *block, shared, 0, args, 0))
        driver.cuLaunchKernel(self.function, *grid, *block, shared, 0, args, 0)
        return None


class CUDADevice(Compiled):
    """``CUDA`` or ``CUDA:n``: one GPU through its primary context; `arch` (``sm_NN``) from its compute capability,
    the renderer's launch and shared-memory limits from its attributes (`shared_optin`: the most shared memory
    one block may opt in to)."""

    def __init__(self, device: str = FAMILY, driver: Any = None):
        if driver is None:
            from cuda.bindings import driver as bindings

            driver = bindings
        self.driver = Driver(driver, device.upper())
        self.driver.cuInit(0)
        ordinal = int(device.partition(":")[2] or 0)
        count = self.driver.cuDeviceGetCount()
        if ordinal >= count:
            raise DeviceError(
                f"there are {count} CUDA GPUs here, no ordinal {ordinal}",
                device=device.upper(), distribution=DISTRIBUTION, version=__version__,
            )  # fmt: skip
        self.cu_device = self.driver.cuDeviceGet(ordinal)
        self.context = self.driver.cuDevicePrimaryCtxRetain(self.cu_device)
        attribute = driver.CUdevice_attribute
        major = self._attribute(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        minor = self._attribute(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        renderer = CUDARenderer(f"sm_{major}{minor}")
        renderer.local_max = (
            self._attribute(attribute.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
            self._attribute(attribute.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
            self._attribute(attribute.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z),
        )
        renderer.global_max = (
            self._attribute(attribute.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
            self._attribute(attribute.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
            self._attribute(attribute.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z),
        )
        self.shared_optin = max(
            self._attribute(attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
            self._attribute(attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        )
        renderer.shared_max = self.shared_optin
        # the driver fills the whole buffer: the name ends at the first NUL
        self.name = bytes(self.driver.cuDeviceGetName(256, self.cu_device)).split(b"\0")[0].decode(errors="replace")
        self.staging = PinnedStaging(self) if staging_enabled() else None
        compiler = NVRTCCompiler(renderer.arch or "sm_90")
        super().__init__(device, CUDAAllocator(self), renderer, compiler, CUDAProgram, CUDAGraph)

    def _attribute(self, attribute: Any) -> int:
        return int(self.driver.cuDeviceGetAttribute(attribute, self.cu_device))

    def activate(self) -> None:
        """Make this GPU's context current on the calling thread (a driver call only when this thread's last
        `activate` was for another GPU: every launch comes through here)."""
        if getattr(_current, "context", None) is not self.context:
            self.driver.cuCtxSetCurrent(self.context)
            _current.context = self.context

    def synchronize(self) -> None:
        """Wait for every queued kernel and copy."""
        self.activate()
        self.driver.cuCtxSynchronize()
