"""The Metal calls tinycore-metal makes, behind one small interface: `MetalAPI`.

`PyObjCMetal` implements it with Apple's Metal framework through ``pyobjc-framework-Metal`` (imported by
`PyObjCMetal.load`, never at module import); `tinycore_metal.testing.FakeMetal` implements it on host memory and
records every call, so the device, its programs and its graph runner are tested off macOS. Handles (devices, buffers,
libraries, pipelines, command buffers, encoders, indirect command buffers) are opaque to the rest of the plugin: only
the implementation looks inside them.

Launch dims are ``(x, y, z)`` tuples here; `PyObjCMetal` turns them into ``MTLSize``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Any

from tinycore.sdk import DeviceError
from tinycore_metal import __version__

DISTRIBUTION = "tinycore-metal"
INSTALL = "pip install 'tinycore[metal]' (it installs pyobjc-framework-Metal on macOS)"
Dims = tuple[int, int, int]


class MetalError(DeviceError):
    """A Metal call failed: what was asked, and Metal's own description (made by `metal_error`)."""


def metal_error(reason: str, fix: str = "", device: str = "METAL") -> MetalError:
    """A `MetalError` of this distribution and version."""
    return MetalError(reason, device=device, distribution=DISTRIBUTION, version=__version__, fix=fix)


class MetalAPI:
    """The interface: every method a Metal runtime must answer (each raises `NotImplementedError` here).

    Devices: `devices`, `device_name`, `apple_family`, `max_threadgroup_memory`, `max_threads_per_threadgroup`,
    `new_queue`, `os_version`. Memory: `new_buffer` (shared storage: CPU and GPU see the same bytes),
    `buffer_memory`. Code: `compile_source`, `load_library`, `new_pipeline`, `pipeline_max_threads`. Work:
    `command_buffer`, `compute_encoder`, `set_pipeline`, `set_buffer`, `set_bytes`, `dispatch`, `end_encoding`,
    `commit`, `wait`, `command_buffer_error`, `gpu_times`. Indirect command buffers: `new_icb`, `icb_command`,
    `icb_set_pipeline`, `icb_set_buffer`, `icb_dispatch`, `icb_barrier`, `use_resources`, `execute_icb`.
    """

    def _missing(self, name: str) -> NotImplementedError:
        return NotImplementedError(f"{type(self).__name__} does not implement MetalAPI.{name}")

    # ----- devices
    def devices(self) -> list[Any]:
        """Every Metal device of this machine (empty: none)."""
        raise self._missing("devices")

    def device_name(self, dev: Any) -> str:
        """The device's name (``"Apple M3 Max"``)."""
        raise self._missing("device_name")

    def apple_family(self, dev: Any) -> int:
        """The highest ``N`` with ``supportsFamily(MTLGPUFamilyAppleN)``; 0 for a GPU that is not Apple's."""
        raise self._missing("apple_family")

    def max_threadgroup_memory(self, dev: Any) -> int:
        """Bytes of threadgroup memory one threadgroup may use."""
        raise self._missing("max_threadgroup_memory")

    def max_threads_per_threadgroup(self, dev: Any) -> Dims:
        """The largest threadgroup per axis."""
        raise self._missing("max_threads_per_threadgroup")

    def new_queue(self, dev: Any) -> Any:
        """A new command queue."""
        raise self._missing("new_queue")

    def os_version(self) -> str:
        """The operating system's version (part of the runtime compiler's cache key)."""
        raise self._missing("os_version")

    # ----- memory
    def new_buffer(self, dev: Any, size: int) -> Any:
        """A buffer of `size` bytes in shared storage; None when the device is out of memory."""
        raise self._missing("new_buffer")

    def buffer_memory(self, buf: Any, size: int) -> memoryview:
        """The first `size` bytes of `buf` as a writable host view of unsigned bytes (zero-copy)."""
        raise self._missing("buffer_memory")

    # ----- code
    def compile_source(self, dev: Any, src: str) -> Any:
        """A library built from MSL `src` by the Metal compiler at run time, fast math off; a `MetalError` carrying
        the compiler's log when it fails."""
        raise self._missing("compile_source")

    def load_library(self, dev: Any, data: bytes) -> Any:
        """A library from ``.metallib`` bytes."""
        raise self._missing("load_library")

    def new_pipeline(self, dev: Any, library: Any, name: str) -> Any:
        """A compute pipeline for kernel `name` of `library`, usable in indirect command buffers."""
        raise self._missing("new_pipeline")

    def pipeline_max_threads(self, pipeline: Any) -> int:
        """The most threads per threadgroup `pipeline` can be launched with."""
        raise self._missing("pipeline_max_threads")

    # ----- work
    def command_buffer(self, queue: Any) -> Any:
        """A new command buffer on `queue`."""
        raise self._missing("command_buffer")

    def compute_encoder(self, cb: Any) -> Any:
        """A compute command encoder on `cb`."""
        raise self._missing("compute_encoder")

    def set_pipeline(self, enc: Any, pipeline: Any) -> None:
        """Use `pipeline` for the next dispatches of `enc`."""
        raise self._missing("set_pipeline")

    def set_buffer(self, enc: Any, buf: Any, offset: int, index: int) -> None:
        """Bind `buf` from byte `offset` to ``[[buffer(index)]]``."""
        raise self._missing("set_buffer")

    def set_bytes(self, enc: Any, data: bytes, index: int) -> None:
        """Bind a copy of `data` (a variable's value) to ``[[buffer(index)]]``."""
        raise self._missing("set_bytes")

    def dispatch(self, enc: Any, grid: Dims, block: Dims) -> None:
        """Launch `grid` threadgroups of `block` threads."""
        raise self._missing("dispatch")

    def end_encoding(self, enc: Any) -> None:
        """Close `enc`."""
        raise self._missing("end_encoding")

    def commit(self, cb: Any) -> None:
        """Submit `cb` to the GPU."""
        raise self._missing("commit")

    def wait(self, cb: Any) -> None:
        """Block until `cb` has completed (or failed)."""
        raise self._missing("wait")

    def command_buffer_error(self, cb: Any) -> str | None:
        """Why the completed `cb` failed; None when it did not."""
        raise self._missing("command_buffer_error")

    def gpu_times(self, cb: Any) -> tuple[float, float]:
        """``(GPUStartTime, GPUEndTime)`` of the completed `cb`, in seconds."""
        raise self._missing("gpu_times")

    # ----- indirect command buffers
    def new_icb(self, dev: Any, count: int) -> Any:
        """An indirect command buffer of `count` compute commands (concurrent dispatch, buffers and pipelines set per
        command, not inherited)."""
        raise self._missing("new_icb")

    def icb_command(self, icb: Any, index: int) -> Any:
        """Command `index` of `icb`."""
        raise self._missing("icb_command")

    def icb_set_pipeline(self, cmd: Any, pipeline: Any) -> None:
        """The command's pipeline."""
        raise self._missing("icb_set_pipeline")

    def icb_set_buffer(self, cmd: Any, buf: Any, offset: int, index: int) -> None:
        """Bind `buf` from byte `offset` to the command's ``[[buffer(index)]]``."""
        raise self._missing("icb_set_buffer")

    def icb_dispatch(self, cmd: Any, grid: Dims, block: Dims) -> None:
        """The command's launch dims."""
        raise self._missing("icb_dispatch")

    def icb_barrier(self, cmd: Any) -> None:
        """Make the command wait for the commands before it."""
        raise self._missing("icb_barrier")

    def use_resources(self, enc: Any, bufs: Sequence[Any]) -> None:
        """Make `bufs` resident (read and write) for the indirect commands `enc` executes."""
        raise self._missing("use_resources")

    def execute_icb(self, enc: Any, icb: Any, count: int) -> None:
        """Run the first `count` commands of `icb` on `enc`."""
        raise self._missing("execute_icb")


class PyObjCMetal(MetalAPI):
    """`MetalAPI` on Apple's Metal framework through pyobjc (macOS only). ``PyObjCMetal.load()`` imports it."""

    def __init__(self, metal: Any, foundation: Any = None):
        self.metal, self.foundation = metal, foundation

    @classmethod
    def load(cls) -> PyObjCMetal:
        """Import ``Metal`` (and ``Foundation``) from pyobjc; ImportError when pyobjc-framework-Metal is missing."""
        import Metal

        try:
            import Foundation
        except ImportError:  # only `load_library` needs it (a file URL)
            Foundation = None  # noqa: N806 - the framework's name
        return cls(Metal, Foundation)

    def _size(self, dims: Dims) -> Any:
        return self.metal.MTLSize(*dims)

    # ----- devices
    def devices(self) -> list[Any]:
        """``MTLCopyAllDevices()``, else the system default device."""
        copy_all = getattr(self.metal, "MTLCopyAllDevices", None)
        found = list(copy_all() or []) if copy_all is not None else []
        if not found:
            default = self.metal.MTLCreateSystemDefaultDevice()
            found = [default] if default is not None else []
        return found

    def device_name(self, dev: Any) -> str:
        """``device.name``."""
        return str(dev.name())

    def apple_family(self, dev: Any) -> int:
        """``supportsFamily:`` from ``MTLGPUFamilyApple12`` down (``MTLGPUFamilyAppleN`` is ``1000 + N``)."""
        for n in range(12, 0, -1):
            if dev.supportsFamily_(1000 + n):
                return n
        return 0

    def max_threadgroup_memory(self, dev: Any) -> int:
        """``maxThreadgroupMemoryLength``."""
        return int(dev.maxThreadgroupMemoryLength())

    def max_threads_per_threadgroup(self, dev: Any) -> Dims:
        """``maxThreadsPerThreadgroup``."""
        size = dev.maxThreadsPerThreadgroup()
        return int(size.width), int(size.height), int(size.depth)

    def new_queue(self, dev: Any) -> Any:
        """``newCommandQueue``."""
        return dev.newCommandQueue()

    def os_version(self) -> str:
        """``platform.mac_ver()``'s release."""
        import platform

        return f"macOS {platform.mac_ver()[0]}"

    # ----- memory
    def new_buffer(self, dev: Any, size: int) -> Any:
        """``newBufferWithLength:options:`` with ``MTLResourceStorageModeShared``."""
        return dev.newBufferWithLength_options_(max(size, 1), self.metal.MTLResourceStorageModeShared)

    def buffer_memory(self, buf: Any, size: int) -> memoryview:
        """``contents`` as a buffer of `size` bytes."""
        if size == 0:
            return memoryview(bytearray(0))
        return memoryview(buf.contents().as_buffer(size)).cast("B")

    # ----- code
    def compile_source(self, dev: Any, src: str) -> Any:
        """``newLibraryWithSource:options:error:`` with ``mathMode = .safe`` (macOS 15), else fast math off."""
        options = self.metal.MTLCompileOptions.new()
        if hasattr(options, "setMathMode_") and hasattr(self.metal, "MTLMathModeSafe"):
            options.setMathMode_(self.metal.MTLMathModeSafe)
        else:
            options.setFastMathEnabled_(False)
        library, error = dev.newLibraryWithSource_options_error_(src, options, None)
        if library is None:
            raise metal_error(f"the Metal compiler failed:\n{_describe(error)}")
        return library

    def load_library(self, dev: Any, data: bytes) -> Any:
        """``newLibraryWithURL:error:`` on a temporary ``.metallib`` file."""
        if self.foundation is None:
            raise metal_error("loading a .metallib needs pyobjc's Foundation", fix=INSTALL)
        handle, path = tempfile.mkstemp(suffix=".metallib")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(data)
            url = self.foundation.NSURL.fileURLWithPath_(path)
            library, error = dev.newLibraryWithURL_error_(url, None)
        finally:
            os.unlink(path)
        if library is None:
            raise metal_error(f"Metal could not load a .metallib:\n{_describe(error)}")
        return library

    def new_pipeline(self, dev: Any, library: Any, name: str) -> Any:
        """``newComputePipelineStateWithDescriptor:options:reflection:error:``, indirect command buffers allowed."""
        function = library.newFunctionWithName_(name)
        if function is None:
            raise metal_error(f"the library has no kernel {name}")
        descriptor = self.metal.MTLComputePipelineDescriptor.new()
        descriptor.setComputeFunction_(function)
        descriptor.setSupportIndirectCommandBuffers_(True)
        pipeline, _, error = dev.newComputePipelineStateWithDescriptor_options_reflection_error_(
            descriptor, self.metal.MTLPipelineOptionNone, None, None
        )
        if pipeline is None:
            raise metal_error(f"Metal could not build the pipeline of kernel {name}:\n{_describe(error)}")
        return pipeline

    def pipeline_max_threads(self, pipeline: Any) -> int:
        """``maxTotalThreadsPerThreadgroup``."""
        return int(pipeline.maxTotalThreadsPerThreadgroup())

    # ----- work
    def command_buffer(self, queue: Any) -> Any:
        """``commandBuffer``."""
        return queue.commandBuffer()

    def compute_encoder(self, cb: Any) -> Any:
        """``computeCommandEncoder``."""
        return cb.computeCommandEncoder()

    def set_pipeline(self, enc: Any, pipeline: Any) -> None:
        """``setComputePipelineState:``."""
        enc.setComputePipelineState_(pipeline)

    def set_buffer(self, enc: Any, buf: Any, offset: int, index: int) -> None:
        """``setBuffer:offset:atIndex:``."""
        enc.setBuffer_offset_atIndex_(buf, offset, index)

    def set_bytes(self, enc: Any, data: bytes, index: int) -> None:
        """``setBytes:length:atIndex:``."""
        enc.setBytes_length_atIndex_(data, len(data), index)

    def dispatch(self, enc: Any, grid: Dims, block: Dims) -> None:
        """``dispatchThreadgroups:threadsPerThreadgroup:``."""
        enc.dispatchThreadgroups_threadsPerThreadgroup_(self._size(grid), self._size(block))

    def end_encoding(self, enc: Any) -> None:
        """``endEncoding``."""
        enc.endEncoding()

    def commit(self, cb: Any) -> None:
        """``commit``."""
        cb.commit()

    def wait(self, cb: Any) -> None:
        """``waitUntilCompleted``."""
        cb.waitUntilCompleted()

    def command_buffer_error(self, cb: Any) -> str | None:
        """``error``'s description, None without one."""
        error = cb.error()
        return None if error is None else _describe(error)

    def gpu_times(self, cb: Any) -> tuple[float, float]:
        """``GPUStartTime`` and ``GPUEndTime``."""
        return float(cb.GPUStartTime()), float(cb.GPUEndTime())

    # ----- indirect command buffers
    def new_icb(self, dev: Any, count: int) -> Any:
        """``newIndirectCommandBufferWithDescriptor:maxCommandCount:options:`` for concurrent dispatches."""
        descriptor = self.metal.MTLIndirectCommandBufferDescriptor.new()
        descriptor.setCommandTypes_(self.metal.MTLIndirectCommandTypeConcurrentDispatch)
        descriptor.setInheritBuffers_(False)
        descriptor.setInheritPipelineState_(False)
        descriptor.setMaxKernelBufferBindCount_(31)
        icb = dev.newIndirectCommandBufferWithDescriptor_maxCommandCount_options_(
            descriptor, count, self.metal.MTLResourceCPUCacheModeDefaultCache
        )
        if icb is None:
            raise metal_error(f"Metal could not make an indirect command buffer of {count} commands")
        return icb

    def icb_command(self, icb: Any, index: int) -> Any:
        """``indirectComputeCommandAtIndex:``."""
        return icb.indirectComputeCommandAtIndex_(index)

    def icb_set_pipeline(self, cmd: Any, pipeline: Any) -> None:
        """``setComputePipelineState:``."""
        cmd.setComputePipelineState_(pipeline)

    def icb_set_buffer(self, cmd: Any, buf: Any, offset: int, index: int) -> None:
        """``setKernelBuffer:offset:atIndex:``."""
        cmd.setKernelBuffer_offset_atIndex_(buf, offset, index)

    def icb_dispatch(self, cmd: Any, grid: Dims, block: Dims) -> None:
        """``concurrentDispatchThreadgroups:threadsPerThreadgroup:``."""
        cmd.concurrentDispatchThreadgroups_threadsPerThreadgroup_(self._size(grid), self._size(block))

    def icb_barrier(self, cmd: Any) -> None:
        """``setBarrier``."""
        cmd.setBarrier()

    def use_resources(self, enc: Any, bufs: Sequence[Any]) -> None:
        """``useResources:count:usage:`` for reading and writing."""
        usage = self.metal.MTLResourceUsageRead | self.metal.MTLResourceUsageWrite
        enc.useResources_count_usage_(list(bufs), len(bufs), usage)

    def execute_icb(self, enc: Any, icb: Any, count: int) -> None:
        """``executeCommandsInBuffer:withRange:``."""
        enc.executeCommandsInBuffer_withRange_(icb, (0, count))


def _describe(error: Any) -> str:
    """An NSError's description (its text when it is not one)."""
    if error is None:
        return "(no error description)"
    describe = getattr(error, "localizedDescription", None)
    return str(describe()) if callable(describe) else str(error)
