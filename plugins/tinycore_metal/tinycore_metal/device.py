"""The ``METAL`` device: allocator, program runtime and device, on a `tinycore_metal.api.MetalAPI`.

The API is a constructor argument (`MetalDevice(api=...)`): `tinycore_metal.api.PyObjCMetal` on macOS (pyobjc is
imported here, when the device opens, never by the entry module), `tinycore_metal.testing.FakeMetal` in tests.

``METAL`` is the first Apple GPU, ``METAL:n`` the n-th. Memory is in shared storage: the CPU reads and writes the
same bytes the GPU does, so copies are memory copies and `MetalAllocator.as_buffer` is zero-copy. A buffer handle is
a `MetalBuffer` (the Metal buffer and a byte offset: views share their base's buffer). Every launch is one command
buffer with one compute encoder, committed at once; the device remembers the command buffers in flight, and
`MetalDevice.synchronize` (called before any host access to memory) waits for them and reports a failed one.
tinycore's ``global_size`` counts threadgroups and ``local_size`` threads per threadgroup, exactly Metal's
``dispatchThreadgroups:threadsPerThreadgroup:``.
"""

from __future__ import annotations

import hashlib
import math
import struct
from typing import Any, NamedTuple

from tinycore.sdk import Compiled, DeviceError, DeviceUnavailableError, KernelImage, LRUAllocator, grid_and_block
from tinycore_metal import __version__
from tinycore_metal.api import INSTALL, MetalAPI, metal_error
from tinycore_metal.compiler import METALLIB_MAGIC, MetalCompiler
from tinycore_metal.graph import MetalGraph
from tinycore_metal.renderer import MetalRenderer

FAMILY = "METAL"
DISTRIBUTION = "tinycore-metal"
MAX_IN_FLIGHT = 32  # command buffers remembered before the oldest are waited for
_VALUE_FORMATS = {"int": "<i", "long": "<q"}


class MetalBuffer(NamedTuple):
    """A buffer handle: the Metal buffer (`buf`), the byte `offset` of this view into it, and its `size` in bytes."""

    buf: Any
    offset: int
    size: int


class MetalAllocator(LRUAllocator):
    """Buffers in shared storage (``MTLResourceStorageModeShared``), kept for reuse by size when freed. Copies and
    `as_buffer` wait for the GPU first."""

    def __init__(self, dev: MetalDevice):
        super().__init__()
        self.dev = dev

    def _alloc(self, size: int, options: Any) -> MetalBuffer:
        buf = self.dev.api.new_buffer(self.dev.mtl, size)
        if buf is None:
            raise MemoryError(f"{self.dev.device}: out of GPU memory allocating {size} bytes on {self.dev.name}")
        return MetalBuffer(buf, 0, size)

    def _free(self, opaque: Any, size: int, options: Any) -> None:
        """Nothing to do: the buffer is released with its last reference (a command buffer keeps its own)."""

    def as_buffer(self, opaque: Any) -> memoryview:
        """The buffer's bytes, zero-copy (after the queued work is done)."""
        self.dev.synchronize()
        whole = self.dev.api.buffer_memory(opaque.buf, opaque.offset + opaque.size)
        return whole[opaque.offset : opaque.offset + opaque.size]

    def copyin(self, dest: Any, src: memoryview) -> None:
        """Host bytes into the buffer (a memory copy)."""
        if src.nbytes:
            self.as_buffer(dest)[: src.nbytes] = src.cast("B") if src.format != "B" or src.ndim != 1 else src

    def copyout(self, dest: memoryview, src: Any) -> None:
        """The buffer's bytes to the host (waits for queued kernels)."""
        if dest.nbytes:
            flat = dest.cast("B") if dest.format != "B" or dest.ndim != 1 else dest
            flat[:] = self.as_buffer(src)[: dest.nbytes]

    def offset(self, opaque: Any, size: int, offset: int) -> MetalBuffer:
        """A view `offset` bytes into an allocation (the same Metal buffer, bound at that offset)."""
        return MetalBuffer(opaque.buf, opaque.offset + offset, size)


class MetalProgram:
    """One kernel's compute pipeline, called as ``prg(*bufs, global_size=, local_size=, vals=, wait=False)``
    (DESIGN §4); with `wait`, the seconds between the command buffer's ``GPUStartTime`` and ``GPUEndTime``."""

    def __init__(self, dev: MetalDevice, name: str, lib: bytes):
        self.dev, self.name = dev, name
        self.kinds, image = KernelImage.unpack(lib)
        self.pipeline = dev.api.new_pipeline(dev.mtl, dev.library(image), name)
        self.max_threads = dev.api.pipeline_max_threads(self.pipeline)

    def values(self, count: int, vals: tuple[int, ...]) -> list[bytes]:
        """The variable values as the bytes of their parameter types (after `count` buffers)."""
        kinds = self.kinds[count:]
        return [struct.pack(_VALUE_FORMATS[kind], int(v)) for kind, v in zip(kinds, vals)]

    def check_block(self, block: tuple[int, int, int]) -> None:
        """A `DeviceError` naming the limit when `block` has more threads than this pipeline takes."""
        if math.prod(block) > self.max_threads:
            raise DeviceError(
                f"kernel {self.name}: a threadgroup of {block} is {math.prod(block)} threads, over the "
                f"{self.max_threads} this kernel's pipeline allows on {self.dev.name}",
                device=self.dev.device, distribution=DISTRIBUTION, version=__version__,
                fix="use fewer local threads (smaller LOCAL/GROUP opts), or let the heuristics pick them",
            )  # fmt: skip

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] = (1, 1, 1),
        local_size: tuple[int, ...] | None = (1, 1, 1),
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Encode one dispatch into a new command buffer and commit it."""
        grid, block = grid_and_block(global_size, local_size)
        if 0 in grid or 0 in block:
            return 0.0 if wait else None
        self.check_block(block)
        api = self.dev.api
        cb = api.command_buffer(self.dev.queue)
        enc = api.compute_encoder(cb)
        api.set_pipeline(enc, self.pipeline)
        for index, buf in enumerate(bufs):
            api.set_buffer(enc, buf.buf, buf.offset, index)
        for index, data in enumerate(self.values(len(bufs), vals), start=len(bufs)):
            api.set_bytes(enc, data, index)
        api.dispatch(enc, grid, block)
        api.end_encoding(enc)
        return self.dev.submit(cb, f"kernel {self.name}", wait)


class MetalDevice(Compiled):
    """``METAL`` or ``METAL:n``: one Apple GPU with its command queue. `arch` is its GPU family (``appleN``); the
    renderer's threadgroup limits come from the device."""

    def __init__(self, device: str = FAMILY, api: MetalAPI | None = None):
        if api is None:
            from tinycore_metal.api import PyObjCMetal

            try:
                api = PyObjCMetal.load()
            except ImportError as error:
                raise DeviceUnavailableError(
                    f"pyobjc-framework-Metal is not installed ({error})",
                    device=device.upper(), distribution=DISTRIBUTION, version=__version__, fix=INSTALL,
                ) from None  # fmt: skip
        self.api = api
        gpus = apple_gpus(api)
        ordinal = int(device.partition(":")[2] or 0)
        if ordinal >= len(gpus):
            raise DeviceError(
                f"there are {len(gpus)} Apple GPUs here, no ordinal {ordinal}",
                device=device.upper(), distribution=DISTRIBUTION, version=__version__,
            )  # fmt: skip
        self.mtl, family = gpus[ordinal]
        self.name = api.device_name(self.mtl)
        renderer = MetalRenderer(f"apple{family}")
        renderer.local_max = api.max_threads_per_threadgroup(self.mtl)
        renderer.shared_max = min(MetalRenderer.shared_max, api.max_threadgroup_memory(self.mtl))
        self.queue = api.new_queue(self.mtl)
        self.in_flight: list[tuple[Any, str]] = []
        self.libraries: dict[str, Any] = {}
        super().__init__(device, MetalAllocator(self), renderer, None, MetalProgram, MetalGraph)
        self.compiler = MetalCompiler(renderer.arch or "apple7", device=self)

    # ----- libraries: one per distinct binary (a .metallib, or source for the runtime compiler)
    def remember_library(self, image: bytes, library: Any) -> None:
        """Keep `library`, built from `image`, for the programs that load `image`."""
        self.libraries[hashlib.sha256(image).hexdigest()] = library

    def library(self, image: bytes) -> Any:
        """The library of a stored binary: a ``.metallib`` is loaded, source is compiled (once per process)."""
        key = hashlib.sha256(image).hexdigest()
        library = self.libraries.get(key)
        if library is None:
            if image[:4] == METALLIB_MAGIC:
                library = self.api.load_library(self.mtl, image)
            else:
                library = self.api.compile_source(self.mtl, image.decode())
            self.libraries[key] = library
        return library

    # ----- command buffers
    def submit(self, cb: Any, what: str, wait: bool) -> float | None:
        """Commit `cb` (running `what`); with `wait`, wait for it and return its GPU time in seconds."""
        self.api.commit(cb)
        if wait:
            self.finish(cb, what)
            start, end = self.api.gpu_times(cb)
            return end - start
        self.in_flight.append((cb, what))
        if len(self.in_flight) > MAX_IN_FLIGHT:
            for old, old_what in self.in_flight[: MAX_IN_FLIGHT // 2]:
                self.finish(old, old_what)
            del self.in_flight[: MAX_IN_FLIGHT // 2]
        return None

    def finish(self, cb: Any, what: str) -> None:
        """Wait for `cb`; a `MetalError` naming `what` when the GPU reports it failed."""
        self.api.wait(cb)
        error = self.api.command_buffer_error(cb)
        if error is not None:
            raise metal_error(
                f"{what} failed on {self.name}: {error}",
                fix="run with DEBUG=4 to see the kernel's source, and report it with `tinycore doctor METAL --json`",
                device=self.device,
            )

    def synchronize(self) -> None:
        """Wait for every committed command buffer."""
        pending, self.in_flight = self.in_flight, []
        for cb, what in pending:
            self.finish(cb, what)


def apple_gpus(api: MetalAPI) -> list[tuple[Any, int]]:
    """``(device, Apple GPU family)`` of every Metal device that is an Apple GPU, in Metal's order."""
    found = []
    for dev in api.devices():
        family = api.apple_family(dev)
        if family > 0:
            found.append((dev, family))
    return found
