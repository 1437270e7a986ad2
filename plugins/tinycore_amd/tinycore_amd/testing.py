"""`FakeHIP`: a `tinycore_amd.hip.HIPApi` on host memory for tests without an AMD GPU: every call is recorded in
`calls`; launches record their function, dims and typed arguments (kernels are not executed)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from tinycore_amd.hip import HIPApi, HIPError


class FakeHIP(HIPApi):
    """`gpus` GPUs of arch `arch` with `memory` bytes each; `fail` maps a method name to an error it raises once."""

    def __init__(self, gpus: int = 1, arch: str = "gfx1100", memory: int = 1 << 20):
        self.gpus, self.gfx, self.memory = gpus, arch, memory
        self.calls: list[tuple[str, tuple]] = []
        self.fail: dict[str, str] = {}
        self.blocks: dict[int, bytearray] = {}
        self.next_address = 0x20000
        self.modules: list[bytes] = []
        self.launches: list[dict[str, Any]] = []
        self.current = 0

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if name in self.fail:
            raise HIPError(f"{name} failed: {self.fail.pop(name)}", device="AMD", distribution="tinycore-amd")

    def _block(self, address: int) -> tuple[bytearray, int]:
        for base, block in self.blocks.items():
            if base <= address < base + len(block):
                return block, address - base
        raise AssertionError(f"fake HIP: address {address:#x} is not allocated")

    def used(self) -> int:
        """Bytes allocated now."""
        return sum(len(b) for b in self.blocks.values())

    def device_count(self) -> int:
        self._call("device_count")
        return self.gpus

    def set_device(self, ordinal: int) -> None:
        self._call("set_device", ordinal)
        self.current = ordinal

    def device_name(self, ordinal: int) -> str:
        return "Fake Radeon"

    def arch(self, ordinal: int) -> str:
        return self.gfx

    def malloc(self, size: int) -> int:
        self._call("malloc", size)
        if self.used() + size > self.memory:
            raise MemoryError(f"AMD: out of GPU memory ({self.memory - self.used()} of {self.memory} bytes free)")
        address, self.next_address = self.next_address, self.next_address + ((size + 255) // 256 + 1) * 256
        self.blocks[address] = bytearray(size)
        return address

    def free(self, pointer: int) -> None:
        self._call("free", pointer)
        del self.blocks[pointer]

    def mem_info(self) -> tuple[int, int]:
        return self.memory - self.used(), self.memory

    def copy_to_device(self, dest: int, host: int, size: int) -> None:
        self._call("copy_to_device", dest, size)
        block, at = self._block(dest)
        block[at : at + size] = ctypes.string_at(host, size)

    def copy_to_host(self, host: int, src: int, size: int) -> None:
        self._call("copy_to_host", src, size)
        block, at = self._block(src)
        ctypes.memmove(host, bytes(block[at : at + size]), size)

    def copy_device(self, dest: int, src: int, size: int) -> None:
        self._call("copy_device", dest, src, size)
        (block_d, at_d), (block_s, at_s) = self._block(dest), self._block(src)
        block_d[at_d : at_d + size] = block_s[at_s : at_s + size]

    def load_module(self, image: bytes) -> int:
        self._call("load_module", len(image))
        self.modules.append(bytes(image))
        return len(self.modules) - 1

    def get_function(self, module: Any, name: str) -> tuple[Any, str]:
        self._call("get_function", module, name)
        return module, name

    def launch(self, function: Any, grid: Sequence[int], block: Sequence[int], args: Sequence[int],
               kinds: Sequence[str]) -> None:  # fmt: skip
        self._call("launch", function)
        self.launches.append(dict(function=function, grid=tuple(grid), block=tuple(block), args=tuple(args),
                                  kinds=tuple(kinds)))  # fmt: skip

    def timed_launch(self, function: Any, grid: Sequence[int], block: Sequence[int], args: Sequence[int],
                     kinds: Sequence[str]) -> float:  # fmt: skip
        self.launch(function, grid, block, args, kinds)
        return 2.5e-3

    def synchronize(self) -> None:
        self._call("synchronize")
