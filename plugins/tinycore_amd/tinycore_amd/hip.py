"""The slice of the HIP runtime the ``AMD`` device uses, behind one small interface (`HIPApi`), so the device runs on
the real runtime (`CtypesHIP`: ctypes on ``libamdhip64``, no Python bindings needed) or on a recording fake in tests
(`tinycore_amd.testing.FakeHIP`).

Every method raises `HIPError` naming the call and HIP's error name on failure; `malloc` raises `MemoryError` when
the GPU is out of memory, so the allocator's cache can be emptied and the allocation retried.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Sequence
from typing import Any

from tinycore.sdk import DeviceError

DISTRIBUTION = "tinycore-amd"
OUT_OF_MEMORY, NO_DEVICE = 2, 100  # hipErrorOutOfMemory, hipErrorNoDevice
ARG_TYPES = {"buffer": ctypes.c_void_p, "int": ctypes.c_int, "long": ctypes.c_longlong}


class HIPError(DeviceError):
    """A HIP runtime call failed: the call and HIP's error name."""


class HIPApi:
    """What the AMD device needs from HIP. Handles (pointers, modules, functions, events) are opaque to callers."""

    def device_count(self) -> int:
        """GPUs the runtime sees (0 when none)."""
        raise NotImplementedError

    def set_device(self, ordinal: int) -> None:
        """Make GPU `ordinal` current on this thread."""
        raise NotImplementedError

    def device_name(self, ordinal: int) -> str:
        """The GPU's marketing name."""
        raise NotImplementedError

    def arch(self, ordinal: int) -> str:
        """The GPU's ``gfx`` target name (``gfx1100``)."""
        raise NotImplementedError

    def malloc(self, size: int) -> int:
        """Device memory of `size` bytes (`MemoryError` when out of memory)."""
        raise NotImplementedError

    def free(self, pointer: int) -> None:
        """Release device memory."""
        raise NotImplementedError

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current GPU."""
        raise NotImplementedError

    def copy_to_device(self, dest: int, host: int, size: int) -> None:
        """Host bytes into device memory (synchronous)."""
        raise NotImplementedError

    def copy_to_host(self, host: int, src: int, size: int) -> None:
        """Device bytes to the host (waits for queued work)."""
        raise NotImplementedError

    def copy_device(self, dest: int, src: int, size: int) -> None:
        """Device to device, also between GPUs (peer copy)."""
        raise NotImplementedError

    def load_module(self, image: bytes) -> Any:
        """Load a code object."""
        raise NotImplementedError

    def get_function(self, module: Any, name: str) -> Any:
        """A kernel of a loaded module."""
        raise NotImplementedError

    def launch(
        self, function: Any, grid: Sequence[int], block: Sequence[int], args: Sequence[int], kinds: Sequence[str]
    ):
        """Queue the kernel with `args` (pointers and integers, typed by `kinds`)."""
        raise NotImplementedError

    def timed_launch(self, function: Any, grid: Sequence[int], block: Sequence[int], args: Sequence[int],
                     kinds: Sequence[str]) -> float:  # fmt: skip
        """Launch between two events and wait; the seconds between them."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for all queued work of the current GPU."""
        raise NotImplementedError


def find_runtime() -> str | None:
    """The path of ``libamdhip64`` (``HIP_LIBRARY`` if set, else the loader's search and ``/opt/rocm/lib``), or None."""
    chosen = os.environ.get("HIP_LIBRARY")
    if chosen:
        return chosen if os.path.exists(chosen) else None
    found = ctypes.util.find_library("amdhip64")
    if found:
        return found
    for folder in ("/opt/rocm/lib", "/opt/rocm/lib64"):
        for name in ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"):
            if os.path.exists(path := os.path.join(folder, name)):
                return path
    return None


class CtypesHIP(HIPApi):
    """`HIPApi` on ``libamdhip64`` through ctypes."""

    def __init__(self, path: str, device: str = "AMD"):
        self.lib, self.device = ctypes.CDLL(path), device
        self.lib.hipGetErrorName.restype = ctypes.c_char_p
        self.lib.hipModuleLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3

    def _check(self, call: str, err: int) -> None:
        if err == OUT_OF_MEMORY and call == "hipMalloc":
            free, total = self.mem_info()
            raise MemoryError(f"{self.device}: out of GPU memory ({free} of {total} bytes free)")
        if err != 0:
            name = self.lib.hipGetErrorName(err).decode()
            raise HIPError(f"{call} failed: {name}", device=self.device, distribution=DISTRIBUTION)

    def _call(self, call: str, *args: Any) -> None:
        self._check(call, getattr(self.lib, call)(*args))

    def device_count(self) -> int:
        count = ctypes.c_int()
        err = self.lib.hipGetDeviceCount(ctypes.byref(count))
        if err == NO_DEVICE:
            return 0
        self._check("hipGetDeviceCount", err)
        return count.value

    def set_device(self, ordinal: int) -> None:
        self._call("hipSetDevice", ordinal)

    def device_name(self, ordinal: int) -> str:
        name = ctypes.create_string_buffer(256)
        self._call("hipDeviceGetName", name, 256, ordinal)
        return name.value.decode(errors="replace")

    def arch(self, ordinal: int) -> str:
        # the KFD topology gives the target version without hipDeviceProp_t's version-dependent layout
        nodes = "/sys/class/kfd/kfd/topology/nodes"
        versions = []
        for node in sorted(os.listdir(nodes), key=int) if os.path.isdir(nodes) else []:
            with open(os.path.join(nodes, node, "properties")) as properties:
                fields = dict(line.split() for line in properties if len(line.split()) == 2)
            if int(fields.get("gfx_target_version", 0)):
                versions.append(int(fields["gfx_target_version"]))
        if ordinal >= len(versions):
            raise HIPError("no KFD topology entry for this GPU", device=self.device, distribution=DISTRIBUTION)
        version = versions[ordinal]
        return f"gfx{version // 10000}{version // 100 % 100:x}{version % 100:x}"

    def malloc(self, size: int) -> int:
        pointer = ctypes.c_void_p()
        self._call("hipMalloc", ctypes.byref(pointer), ctypes.c_size_t(size))
        return int(pointer.value or 0)

    def free(self, pointer: int) -> None:
        self._call("hipFree", ctypes.c_void_p(pointer))

    def mem_info(self) -> tuple[int, int]:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._call("hipMemGetInfo", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def copy_to_device(self, dest: int, host: int, size: int) -> None:
        self._call("hipMemcpy", ctypes.c_void_p(dest), ctypes.c_void_p(host), ctypes.c_size_t(size), 1)

    def copy_to_host(self, host: int, src: int, size: int) -> None:
        self._call("hipMemcpy", ctypes.c_void_p(host), ctypes.c_void_p(src), ctypes.c_size_t(size), 2)

    def copy_device(self, dest: int, src: int, size: int) -> None:
        self._call("hipMemcpy", ctypes.c_void_p(dest), ctypes.c_void_p(src), ctypes.c_size_t(size), 3)

    def load_module(self, image: bytes) -> Any:
        module = ctypes.c_void_p()
        self._image = image  # HIP reads the image during the call only; keep it alive anyway
        self._call("hipModuleLoadData", ctypes.byref(module), ctypes.c_char_p(image))
        return module

    def get_function(self, module: Any, name: str) -> Any:
        function = ctypes.c_void_p()
        self._call("hipModuleGetFunction", ctypes.byref(function), module, name.encode())
        return function

    def _params(self, args: Sequence[int], kinds: Sequence[str]) -> tuple[Any, list[Any]]:
        values = [ARG_TYPES[kind](arg) for arg, kind in zip(args, kinds)]
        pointers = (ctypes.c_void_p * max(1, len(values)))(*(ctypes.addressof(v) for v in values))
        return pointers, values

    def launch(
        self, function: Any, grid: Sequence[int], block: Sequence[int], args: Sequence[int], kinds: Sequence[str]
    ):
        pointers, _keep = self._params(args, kinds)
        self._call("hipModuleLaunchKernel", function, *grid, *block, 0, None, pointers, None)

    def timed_launch(self, function: Any, grid: Sequence[int], block: Sequence[int], args: Sequence[int],
                     kinds: Sequence[str]) -> float:  # fmt: skip
        start, end = ctypes.c_void_p(), ctypes.c_void_p()
        self._call("hipEventCreate", ctypes.byref(start))
        self._call("hipEventCreate", ctypes.byref(end))
        self._call("hipEventRecord", start, None)
        self.launch(function, grid, block, args, kinds)
        self._call("hipEventRecord", end, None)
        self._call("hipEventSynchronize", end)
        milliseconds = ctypes.c_float()
        self._call("hipEventElapsedTime", ctypes.byref(milliseconds), start, end)
        self._call("hipEventDestroy", start)
        self._call("hipEventDestroy", end)
        return milliseconds.value * 1e-3

    def synchronize(self) -> None:
        self._call("hipDeviceSynchronize")
