"""The ``OPENCL`` device through `pyopencl`: allocator, compiler, program runtime and the `Compiled` bundle.

``OPENCL`` is the first device of the first platform that has one, ``OPENCL:n`` the n-th device counting over all
platforms (`opencl_devices`). Kernels are built for that one device; the binary is what the driver returns for the
built program with the parameter kinds read off the source (`tinycore.sdk.KernelImage`), so a program can be loaded
from core's disk cache without the source.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyopencl as cl

from tinycore.sdk import Compiled, CompileError, Compiler, DeviceError, KernelImage, LRUAllocator
from tinycore_opencl import __version__
from tinycore_opencl.renderer import OPENCL_C, DeviceLimits, OpenCLRenderer

FAMILY = "OPENCL"
DISTRIBUTION = "tinycore-opencl"
BUILD_OPTIONS = "-cl-std=CL1.2"


def opencl_devices() -> list[Any]:
    """Every OpenCL device of every platform, in platform order (the ordinals of ``OPENCL:n``)."""
    return [device for platform in cl.get_platforms() for device in platform.get_devices()]


def limits_of(device: Any) -> DeviceLimits:
    """The renderer's view of `device`: name, work-group limits, local memory, fp16/fp64 support."""
    sizes = tuple(device.max_work_item_sizes) + (1, 1, 1)
    return DeviceLimits(
        name=device.name,
        max_work_group=device.max_work_group_size,
        max_work_items=(sizes[0], sizes[1], sizes[2]),
        local_mem=device.local_mem_size,
        fp16="cl_khr_fp16" in device.extensions,
        fp64="cl_khr_fp64" in device.extensions or device.double_fp_config != 0,
    )


def _error(device: str, reason: str, fix: str = "") -> DeviceError:
    return DeviceError(reason, device=device, distribution=DISTRIBUTION, version=__version__, fix=fix)


class OpenCLAllocator(LRUAllocator):
    """Device buffers (`cl.Buffer`); copies are blocking. Freed buffers are kept for reuse by size (LRU)."""

    def __init__(self, device: OpenCLDevice):
        super().__init__()
        self.dev = device

    def _alloc(self, size: int, options: Any) -> Any:
        try:
            return cl.Buffer(self.dev.context, cl.mem_flags.READ_WRITE, max(size, 1))
        except cl.Error as error:  # a MemoryError makes the LRU cache free its buffers and try once more
            raise MemoryError(f"{self.dev.device} ({DISTRIBUTION}): allocating {size} bytes failed: {error}") from None

    def _free(self, opaque: Any, size: int, options: Any) -> None:
        opaque.release()

    def copyin(self, dest: Any, src: memoryview) -> None:
        """Host bytes into a device buffer."""
        if src.nbytes:
            cl.enqueue_copy(self.dev.queue, dest, np.frombuffer(src, dtype=np.uint8), is_blocking=True)

    def copyout(self, dest: memoryview, src: Any) -> None:
        """A device buffer's bytes to the host (waits for queued kernels first: the queue is in order)."""
        if dest.nbytes:
            cl.enqueue_copy(self.dev.queue, np.frombuffer(dest, dtype=np.uint8), src, is_blocking=True)


class OpenCLCompiler(Compiler):
    """OpenCL C to the driver's binary for one device; cached by core under the platform, driver and device."""

    def __init__(self, device: OpenCLDevice):
        self.dev = device
        cl_device = device.cl_device
        super().__init__(cachekey="opencl")
        self._key = (cl_device.platform.name, cl_device.platform.version, cl_device.driver_version, cl_device.name)

    def cache_key_parts(self) -> Sequence[str]:
        """Platform, driver and device name, and the build options."""
        return (*self._key, BUILD_OPTIONS, KernelImage.MAGIC.decode())

    def compile(self, src: str) -> bytes:
        """Build `src` for the device; a `CompileError` carries the kernel's name and the driver's build log."""
        name, kinds = OPENCL_C.signature_of(src)
        program = cl.Program(self.dev.context, src)
        try:
            program.build(options=BUILD_OPTIONS, devices=[self.dev.cl_device])
        except cl.RuntimeError as error:
            log = program.get_build_info(self.dev.cl_device, cl.program_build_info.LOG)
            raise CompileError(
                f"{self.dev.device} ({DISTRIBUTION}): kernel {name} failed to build: {error}\nbuild log:\n{log}"
            ) from None
        return KernelImage.pack(kinds, program.get_info(cl.program_info.BINARIES)[0])


class OpenCLProgram:
    """One loaded kernel, called as ``prg(*bufs, global_size=, local_size=, vals=, wait=False)`` (DESIGN §4).

    tinycore's `global_size` counts work-groups, OpenCL's counts work-items: the launch multiplies them. With `wait`
    the time comes from the kernel's profiling event."""

    def __init__(self, device: OpenCLDevice, name: str, lib: bytes):
        self.dev, self.name = device, name
        self.kinds, binary = KernelImage.unpack(lib)
        program = cl.Program(device.context, [device.cl_device], [binary]).build()
        self.kernel = getattr(program, name)
        # checked here, not left to the driver: CPU drivers such as PoCL run an oversized kernel anyway
        local = self.kernel.get_work_group_info(cl.kernel_work_group_info.LOCAL_MEM_SIZE, device.cl_device)
        if local > device.limits.local_mem:
            raise _error(
                device.device,
                f"kernel {name} needs {local} bytes of local memory, the device has {device.limits.local_mem}",
                "lower the work-group size or the GROUP/LOCAL opts of this kernel",
            )

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] = (1, 1, 1),
        local_size: tuple[int, ...] | None = (1, 1, 1),
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Launch the kernel; returns seconds when `wait`."""
        local = tuple(local_size) if local_size is not None else (1,) * len(global_size)
        scalars = iter(vals)
        args = [bufs[i] if kind == "buffer" else None for i, kind in enumerate(self.kinds[: len(bufs)])]
        for kind in self.kinds[len(bufs) :]:
            args.append((np.int64 if kind == "long" else np.int32)(next(scalars)))
        work_items = tuple(g * l for g, l in zip(global_size, local))
        if any(n == 0 for n in work_items):
            return 0.0 if wait else None
        try:
            event = self.kernel(self.dev.queue, work_items, local, *args)
        except cl.Error as error:
            raise _error(
                self.dev.device,
                f"launching kernel {self.name} (work-items {work_items}, work-group {local}) failed: {error}",
                "the kernel asks for more than the device has (work-group size or local memory): "
                f"its limits are {self.dev.limits}",
            ) from None
        if not wait:
            return None
        event.wait()
        return (event.profile.end - event.profile.start) * 1e-9


class OpenCLDevice(Compiled):
    """``OPENCL`` or ``OPENCL:n``: one OpenCL device with its own context and in-order profiling queue."""

    def __init__(self, device: str = FAMILY):
        ordinal = int(device.partition(":")[2] or 0)
        found = opencl_devices()
        if ordinal >= len(found):
            raise _error(device.upper(), f"there are {len(found)} OpenCL devices here, no ordinal {ordinal}")
        self.cl_device = found[ordinal]
        self.limits = limits_of(self.cl_device)
        self.context = cl.Context([self.cl_device])
        self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        super().__init__(device, OpenCLAllocator(self), OpenCLRenderer(self.limits), None, OpenCLProgram)
        self.compiler = OpenCLCompiler(self)

    def synchronize(self) -> None:
        """Wait for every queued kernel and copy."""
        self.queue.finish()
