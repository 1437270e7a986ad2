"""`FakeMetal`: a stand-in for the Metal framework (a `tinycore_metal.api.MetalAPI`) for tests without a Mac.

It answers every call of the interface on host memory and records it in `calls`. Kernels are not executed: a
dispatch, direct or from an indirect command buffer, is recorded in `launches` with its kernel, launch dims, bound
buffers and bound bytes. A command buffer's GPU time is `DISPATCH_SECONDS` per dispatch it ran. The runtime compiler
accepts MSL that passes `tinycore_metal.compiler.syntax_check` (when `check_syntax` and clang is installed), and a
pipeline exists only for a kernel the library defines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tinycore_metal.api import MetalAPI, metal_error

DISPATCH_SECONDS = 0.5e-3


@dataclass(eq=False)
class FakeDevice:
    """A Metal device: its name, Apple GPU family (0: not an Apple GPU) and limits."""

    name: str
    family: int
    max_threads: tuple[int, int, int] = (1024, 1024, 1024)
    threadgroup_memory: int = 32768


@dataclass(eq=False)
class FakeBuffer:
    """A shared-storage buffer: its bytes."""

    memory: bytearray


@dataclass(eq=False)
class FakeLibrary:
    """A library: its source (runtime compiler) or .metallib bytes, and the kernel names it defines."""

    image: bytes
    kernels: tuple[str, ...]


@dataclass(eq=False)
class FakePipeline:
    """A compute pipeline of one kernel."""

    name: str
    max_threads: int


@dataclass(eq=False)
class FakeEncoder:
    """A compute encoder: the state set so far, and whether it was ended."""

    cb: FakeCommandBuffer
    pipeline: FakePipeline | None = None
    buffers: dict[int, tuple[FakeBuffer, int]] = field(default_factory=dict)
    bytes: dict[int, bytes] = field(default_factory=dict)
    resident: list[FakeBuffer] = field(default_factory=list)
    ended: bool = False


@dataclass(eq=False)
class FakeCommandBuffer:
    """A command buffer: the dispatches it holds, its state, its error and GPU times once completed."""

    number: int
    dispatches: list[dict[str, Any]] = field(default_factory=list)
    committed: bool = False
    completed: bool = False
    error: str | None = None
    times: tuple[float, float] = (0.0, 0.0)


@dataclass(eq=False)
class FakeCommand:
    """One indirect compute command: pipeline, bound buffers, launch dims, barrier."""

    pipeline: FakePipeline | None = None
    buffers: dict[int, tuple[FakeBuffer, int]] = field(default_factory=dict)
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    barrier: bool = False


@dataclass(eq=False)
class FakeICB:
    """An indirect command buffer of `count` commands."""

    commands: list[FakeCommand]


class FakeMetal(MetalAPI):
    """`gpus` fake devices (``(name, Apple family)`` pairs) with `memory` bytes in all.

    `fail` maps a call name to a message: the next such call fails with it (``compile_source``, ``new_pipeline``:
    a `MetalError`; ``new_buffer``: out of memory; ``commit``: the command buffer completes with that error)."""

    def __init__(
        self,
        gpus: tuple[tuple[str, int], ...] = (("Fake Apple M3", 9),),
        memory: int = 1 << 20,
        check_syntax: bool = False,
    ):
        self.gpus = [FakeDevice(name, family) for name, family in gpus]
        self.memory, self.check_syntax = memory, check_syntax
        self.calls: list[tuple[str, tuple]] = []
        self.fail: dict[str, str] = {}
        self.buffers: list[FakeBuffer] = []
        self.launches: list[dict[str, Any]] = []
        self.command_buffers: list[FakeCommandBuffer] = []
        self.clock = 0.0

    def _call(self, name: str, *args: Any) -> str | None:
        self.calls.append((name, args))
        return self.fail.pop(name, None)

    def count(self, name: str) -> int:
        """How many times `name` was called."""
        return sum(1 for call, _ in self.calls if call == name)

    def used(self) -> int:
        """Bytes of the buffers made so far (the fake never frees: Metal frees with the last reference)."""
        return sum(len(b.memory) for b in self.buffers)

    # ----- devices
    def devices(self) -> list[Any]:
        self._call("devices")
        return list(self.gpus)

    def device_name(self, dev: Any) -> str:
        return dev.name

    def apple_family(self, dev: Any) -> int:
        return dev.family

    def max_threadgroup_memory(self, dev: Any) -> int:
        return dev.threadgroup_memory

    def max_threads_per_threadgroup(self, dev: Any) -> tuple[int, int, int]:
        return dev.max_threads

    def new_queue(self, dev: Any) -> Any:
        self._call("new_queue", dev.name)
        return ("queue", dev.name)

    def os_version(self) -> str:
        return "fake macOS 15.0"

    # ----- memory
    def new_buffer(self, dev: Any, size: int) -> Any:
        failed = self._call("new_buffer", size)
        if failed or self.used() + max(size, 1) > self.memory:
            return None
        buf = FakeBuffer(bytearray(max(size, 1)))
        self.buffers.append(buf)
        return buf

    def buffer_memory(self, buf: Any, size: int) -> memoryview:
        return memoryview(buf.memory)[:size]

    # ----- code
    def compile_source(self, dev: Any, src: str) -> Any:
        failed = self._call("compile_source", len(src))
        if failed:
            raise metal_error(f"the Metal compiler failed:\n{failed}")
        if self.check_syntax:
            from tinycore_metal.compiler import find_clang, syntax_check

            if find_clang() is not None:
                try:
                    syntax_check(src)
                except Exception as error:
                    raise metal_error(f"the Metal compiler failed:\n{error}") from None
        return FakeLibrary(src.encode(), tuple(re.findall(r"kernel void (\w+)\(", src)))

    def load_library(self, dev: Any, data: bytes) -> Any:
        self._call("load_library", len(data))
        return FakeLibrary(bytes(data), ())  # a .metallib's kernel names are not read: any name is taken

    def new_pipeline(self, dev: Any, library: Any, name: str) -> Any:
        failed = self._call("new_pipeline", name)
        if failed:
            raise metal_error(f"Metal could not build the pipeline of kernel {name}:\n{failed}")
        if library.kernels and name not in library.kernels:
            raise metal_error(f"the library has no kernel {name}")
        return FakePipeline(name, 1024)

    def pipeline_max_threads(self, pipeline: Any) -> int:
        return pipeline.max_threads

    # ----- work
    def command_buffer(self, queue: Any) -> Any:
        self._call("command_buffer")
        cb = FakeCommandBuffer(len(self.command_buffers))
        self.command_buffers.append(cb)
        return cb

    def compute_encoder(self, cb: Any) -> Any:
        self._call("compute_encoder", cb.number)
        return FakeEncoder(cb)

    def set_pipeline(self, enc: Any, pipeline: Any) -> None:
        self._call("set_pipeline", pipeline.name)
        enc.pipeline = pipeline

    def set_buffer(self, enc: Any, buf: Any, offset: int, index: int) -> None:
        self._call("set_buffer", offset, index)
        enc.buffers[index] = (buf, offset)

    def set_bytes(self, enc: Any, data: bytes, index: int) -> None:
        self._call("set_bytes", bytes(data), index)
        enc.bytes[index] = bytes(data)

    def dispatch(self, enc: Any, grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
        self._call("dispatch", grid, block)
        if enc.pipeline is None or enc.ended:
            raise AssertionError("fake Metal: dispatch without a pipeline, or on an ended encoder")
        enc.cb.dispatches.append(
            dict(kernel=enc.pipeline.name, grid=grid, block=block, buffers=dict(enc.buffers), bytes=dict(enc.bytes),
                 via="encoder")
        )  # fmt: skip

    def end_encoding(self, enc: Any) -> None:
        self._call("end_encoding", enc.cb.number)
        enc.ended = True

    def commit(self, cb: Any) -> None:
        failed = self._call("commit", cb.number)
        if cb.committed:
            raise AssertionError("fake Metal: a command buffer committed twice")
        cb.committed = cb.completed = True
        cb.error = failed
        start = self.clock + 1.0
        self.clock = start + DISPATCH_SECONDS * len(cb.dispatches)
        cb.times = (start, self.clock)
        self.launches.extend(cb.dispatches)

    def wait(self, cb: Any) -> None:
        self._call("wait", cb.number)
        if not cb.committed:
            raise AssertionError("fake Metal: waiting for a command buffer that was never committed")

    def command_buffer_error(self, cb: Any) -> str | None:
        return cb.error

    def gpu_times(self, cb: Any) -> tuple[float, float]:
        return cb.times

    # ----- indirect command buffers
    def new_icb(self, dev: Any, count: int) -> Any:
        self._call("new_icb", count)
        return FakeICB([FakeCommand() for _ in range(count)])

    def icb_command(self, icb: Any, index: int) -> Any:
        return icb.commands[index]

    def icb_set_pipeline(self, cmd: Any, pipeline: Any) -> None:
        self._call("icb_set_pipeline", pipeline.name)
        cmd.pipeline = pipeline

    def icb_set_buffer(self, cmd: Any, buf: Any, offset: int, index: int) -> None:
        self._call("icb_set_buffer", offset, index)
        cmd.buffers[index] = (buf, offset)

    def icb_dispatch(self, cmd: Any, grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
        self._call("icb_dispatch", grid, block)
        cmd.grid, cmd.block = grid, block

    def icb_barrier(self, cmd: Any) -> None:
        self._call("icb_barrier")
        cmd.barrier = True

    def use_resources(self, enc: Any, bufs: Any) -> None:
        self._call("use_resources", len(bufs))
        enc.resident = list(bufs)

    def execute_icb(self, enc: Any, icb: Any, count: int) -> None:
        self._call("execute_icb", count)
        resident = {id(b) for b in enc.resident}
        for cmd in icb.commands[:count]:
            if cmd.pipeline is None or cmd.grid is None:
                raise AssertionError("fake Metal: an indirect command without a pipeline or launch dims")
            missing = [i for i, (buf, _) in cmd.buffers.items() if id(buf) not in resident]
            if missing:
                raise AssertionError(f"fake Metal: buffers {missing} of an indirect command are not resident")
            enc.cb.dispatches.append(
                dict(kernel=cmd.pipeline.name, grid=cmd.grid, block=cmd.block, buffers=dict(cmd.buffers), bytes={},
                     via="icb")
            )  # fmt: skip
