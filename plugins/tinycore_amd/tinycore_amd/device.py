"""The ``AMD`` device: allocator, program runtime and the `Compiled` bundle over `tinycore_amd.hip.HIPApi`.

``AMD`` is GPU 0 and ``AMD:n`` GPU n. Kernels are built for the GPU's own ``gfx`` arch by ROCm's hipRTC when it loads,
else by clang (`tinycore_amd.compiler.make_compiler`: `HIPRTCCompiler` or `HIPCompiler`); TinyJit
replays go through one HIP graph (`tinycore_amd.graph.HIPGraph`).
tinycore's ``global_size`` counts work-groups and ``local_size`` work-items per group: HIP's grid and block.
"""

from __future__ import annotations

from typing import Any

from tinycore.sdk import Compiled, DeviceError, KernelImage, LRUAllocator, grid_and_block, host_address
from tinycore_amd import __version__
from tinycore_amd.compiler import make_compiler
from tinycore_amd.graph import HIPGraph
from tinycore_amd.hip import DISTRIBUTION, CtypesHIP, HIPApi, find_runtime
from tinycore_amd.renderer import AMDRenderer

FAMILY = "AMD"


class AMDAllocator(LRUAllocator):
    """Device memory, kept for reuse by size when freed; out of memory empties the cache and retries once."""

    def __init__(self, dev: AMDDevice):
        super().__init__()
        self.dev = dev

    def _alloc(self, size: int, options: Any) -> int:
        self.dev.activate()
        return self.dev.hip.malloc(max(size, 1))

    def _free(self, opaque: Any, size: int, options: Any) -> None:
        self.dev.activate()
        self.dev.hip.free(opaque)

    def copyin(self, dest: Any, src: memoryview) -> None:
        """Host bytes into device memory."""
        if src.nbytes:
            self.dev.activate()
            self.dev.hip.copy_to_device(dest, host_address(src), src.nbytes)

    def copyout(self, dest: memoryview, src: Any) -> None:
        """Device memory to host bytes (after the queued kernels)."""
        if dest.nbytes:
            self.dev.activate()
            self.dev.hip.copy_to_host(host_address(dest), src, dest.nbytes)

    def transfer(self, dest: Any, src: Any, size: int, src_dev: Compiled, dest_dev: Compiled) -> None:
        """A copy between two AMD GPUs."""
        self.dev.activate()
        self.dev.hip.copy_device(dest, src, size)

    def offset(self, opaque: Any, size: int, offset: int) -> int:
        """A view `offset` bytes into an allocation (device pointers are plain addresses)."""
        return int(opaque) + offset


class AMDProgram:
    """One loaded kernel, called as ``prg(*bufs, global_size=, local_size=, vals=, wait=False)`` (DESIGN §4)."""

    def __init__(self, dev: AMDDevice, name: str, lib: bytes):
        self.dev, self.name = dev, name
        self.kinds, image = KernelImage.unpack(lib)
        dev.activate()
        self.module = dev.hip.load_module(image)
        self.function = dev.hip.get_function(self.module, name)

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] = (1, 1, 1),
        local_size: tuple[int, ...] | None = (1, 1, 1),
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Launch on the GPU's null stream; with `wait`, the seconds between events around it."""
        grid, block = grid_and_block(global_size, local_size)
        if 0 in grid or 0 in block:
            return 0.0 if wait else None
        args = [int(b) for b in bufs] + [int(v) for v in vals]
        self.dev.activate()
        if wait:
            return self.dev.hip.timed_launch(self.function, grid, block, args, self.kinds)
        self.dev.hip.launch(self.function, grid, block, args, self.kinds)
        return None


class AMDDevice(Compiled):
    """``AMD`` or ``AMD:n``: one AMD GPU through the HIP runtime (`hip`: a `HIPApi`, `CtypesHIP` by default)."""

    def __init__(self, device: str = FAMILY, hip: HIPApi | None = None):
        if hip is None:
            path = find_runtime()
            if path is None:
                raise DeviceError("no ROCm runtime (libamdhip64)", device=device.upper(), distribution=DISTRIBUTION,
                                  version=__version__, fix="install ROCm's HIP runtime")  # fmt: skip
            hip = CtypesHIP(path, device.upper())
        self.hip = hip
        self.gpu = int(device.partition(":")[2] or 0)  # the HIP device number
        count = hip.device_count()
        if self.gpu >= count:
            raise DeviceError(f"there are {count} AMD GPUs here, no ordinal {self.gpu}", device=device.upper(),
                              distribution=DISTRIBUTION, version=__version__)  # fmt: skip
        self.activate()
        self.name = hip.device_name(self.gpu)
        arch = hip.arch(self.gpu)
        renderer = AMDRenderer(arch)
        super().__init__(device, AMDAllocator(self), renderer, make_compiler(arch), AMDProgram, HIPGraph)

    def activate(self) -> None:
        """Make this GPU current on the calling thread."""
        self.hip.set_device(self.gpu)

    def synchronize(self) -> None:
        """Wait for every queued kernel and copy."""
        self.activate()
        self.hip.synchronize()
