"""The ``CUDA`` device through NVIDIA's driver API (``cuda.bindings.driver``): allocator, program runtime, device.

Every driver call goes through `Driver`, which turns the bindings' ``(CUresult, *values)`` answers into values or a
`CUDAError` naming the call. The bindings module is a constructor argument (`CUDADevice(driver=...)`), so the tests
drive the whole device with a fake driver that records what it is asked to do.

``CUDA`` is GPU 0, ``CUDA:n`` GPU n; each device uses its GPU's primary context. tinycore's ``global_size`` counts
blocks and ``local_size`` threads per block, exactly CUDA's grid and block dims.

Shared memory: the renderer's `shared_max` is the GPU's opt-in maximum per block
(``CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN``). A kernel over 48 KB uses dynamic shared memory: its
program sets ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` once when loaded and passes the bytes with every
launch (and in graph nodes); one over the GPU's limit is a `CUDAError` naming the kernel, the bytes and the limit.
"""

from __future__ import annotations

import ctypes
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
        """Host bytes into device memory (synchronous)."""
        if src.nbytes:
            self.dev.activate()
            self.dev.driver.cuMemcpyHtoD(dest, host_address(src), src.nbytes)

    def copyout(self, dest: memoryview, src: Any) -> None:
        """Device memory to host bytes (waits for queued kernels: the default stream is in order)."""
        if dest.nbytes:
            self.dev.activate()
            self.dev.driver.cuMemcpyDtoH(host_address(dest), src, dest.nbytes)

    def transfer(self, dest: Any, src: Any, size: int, src_dev: Compiled, dest_dev: Compiled) -> None:
        """A copy between two CUDA devices (peer copy; the driver stages it when peer access is off)."""
        self.dev.activate()
        self.dev.driver.cuMemcpyPeer(dest, dest_dev.context, src, src_dev.context, size)

    def offset(self, opaque: Any, size: int, offset: int) -> Any:
        """A view `offset` bytes into an allocation (device pointers are plain addresses)."""
        return int(opaque) + offset


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
        args = ((*map(int, bufs), *map(int, vals)), self.types)
        driver = self.dev.driver
        self.dev.activate()
        shared = self.shared_bytes
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
