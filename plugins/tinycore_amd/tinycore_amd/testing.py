"""`FakeHIP`: a `tinycore_amd.hip.HIPApi` on host memory for tests without an AMD GPU: every call is recorded in
`calls`; launches record their function, dims and typed arguments (kernels are not executed). Graphs are recorded
too: `graphs` holds each graph's nodes (their `KernelLaunch`) and dependencies, an executable graph its own copy of
the nodes (patched by ``graph_exec_set_kernel_params``), and a graph launch records one launch per node, in order.

`FakeHIPRTC`: a `tinycore_amd.hiprtc.HIPRTCApi` that builds nothing: it records every call in `calls`, keeps each
program's source, name and options, hands back a fixed code object, and fails a call on request."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from tinycore_amd.hip import HIPApi, HIPError, KernelLaunch
from tinycore_amd.hiprtc import HIPRTCApi, HIPRTCError


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
        self.graphs: list[dict[str, Any]] = []  # {"nodes": [KernelLaunch], "deps": [[node]]} per hipGraphCreate
        self.execs: list[dict[str, Any]] = []  # {"graph": index, "nodes": [KernelLaunch]} per hipGraphInstantiate
        self.destroyed: list[tuple[int, int]] = []  # (graph, exec) pairs freed

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

    # ----- graphs: handles are indices into `graphs` / `execs`, nodes are (graph, position) pairs
    def graph_create(self) -> int:
        self._call("graph_create")
        self.graphs.append({"nodes": [], "deps": []})
        return len(self.graphs) - 1

    def graph_add_kernel_node(self, graph: int, after: Sequence[Any], launch: KernelLaunch) -> tuple[int, int]:
        self._call("graph_add_kernel_node", graph, tuple(after), launch)
        record = self.graphs[graph]
        if any(g != graph or not 0 <= n < len(record["nodes"]) for g, n in after):
            raise AssertionError(f"fake HIP: dependencies {after} are not nodes of graph {graph}")
        record["nodes"].append(launch)
        record["deps"].append(list(after))
        return graph, len(record["nodes"]) - 1

    def graph_instantiate(self, graph: int) -> int:
        self._call("graph_instantiate", graph)
        self.execs.append({"graph": graph, "nodes": list(self.graphs[graph]["nodes"])})
        return len(self.execs) - 1

    def graph_exec_set_kernel_params(self, graph_exec: int, node: tuple[int, int], launch: KernelLaunch) -> None:
        self._call("graph_exec_set_kernel_params", graph_exec, node, launch)
        record = self.execs[graph_exec]
        if node[0] != record["graph"]:
            raise AssertionError(f"fake HIP: node {node} is not in the graph of executable graph {graph_exec}")
        if record["nodes"][node[1]].function != launch.function:
            raise AssertionError("fake HIP: hipGraphExecKernelNodeSetParams can't change a node's function")
        record["nodes"][node[1]] = launch

    def graph_launch(self, graph_exec: int) -> None:
        self._call("graph_launch", graph_exec)
        for node in self.execs[graph_exec]["nodes"]:
            self.launches.append(dict(function=node.function, grid=node.grid, block=node.block, args=node.args,
                                      kinds=node.kinds, graph=graph_exec))  # fmt: skip

    def timed_graph_launch(self, graph_exec: int) -> float:
        self.graph_launch(graph_exec)
        return 4.0e-3

    def graph_destroy(self, graph: int, graph_exec: int) -> None:
        self._call("graph_destroy", graph, graph_exec)
        self.destroyed.append((graph, graph_exec))


class FakeHIPRTC(HIPRTCApi):
    """hipRTC `version` whose comgr knows `archs` (None: can't be asked); every compiled program's code is `image`.
    `fail` maps a method name to the hipRTC error it raises once; a failed compile leaves `log` as the program's log.
    `programs` holds each created program (its ``source``, ``name``, ``options``); `live` the ones not destroyed."""

    path = "/fake/rocm/lib/libhiprtc.so.6.2.60200"

    def __init__(self, version: tuple[int, int] = (6, 2), archs: frozenset[str] | None = frozenset({"gfx90a",
                 "gfx942", "gfx1100"}), image: bytes = b"\x7fELF fake code object", log: str = ""):  # fmt: skip
        self.major_minor, self.known, self.image, self.log = version, archs, image, log
        self.calls: list[tuple[str, tuple]] = []
        self.fail: dict[str, str] = {}
        self.programs: list[dict[str, Any]] = []
        self.live: set[int] = set()

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if name in self.fail:
            raise HIPRTCError(name, self.fail.pop(name))

    def version(self) -> tuple[int, int]:
        self._call("version")
        return self.major_minor

    def archs(self) -> frozenset[str] | None:
        return self.known

    def create_program(self, source: str, name: str) -> int:
        self._call("create_program", source, name)
        self.programs.append({"source": source, "name": name, "options": None, "log": ""})
        self.live.add(len(self.programs) - 1)
        return len(self.programs) - 1

    def compile_program(self, program: int, options: Sequence[str]) -> None:
        self.programs[program]["options"] = tuple(options)
        try:
            self._call("compile_program", program, tuple(options))
        except HIPRTCError:
            self.programs[program]["log"] = self.log
            raise

    def program_log(self, program: int) -> str:
        self._call("program_log", program)
        return self.programs[program]["log"]

    def code(self, program: int) -> bytes:
        self._call("code", program)
        if self.programs[program]["options"] is None:
            raise AssertionError(f"fake hipRTC: program {program} was never compiled")
        return self.image

    def destroy_program(self, program: int) -> None:
        self._call("destroy_program", program)
        if program not in self.live:
            raise AssertionError(f"fake hipRTC: program {program} destroyed twice or never created")
        self.live.discard(program)
