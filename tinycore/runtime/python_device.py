"""The ``PYTHON`` reference device: host memory, a serializing renderer and compiler, and (in a later issue) a
numpy interpreter of linearized UOp programs with GPU semantics.

``PythonDevice("PYTHON")`` and ``PythonDevice("PYTHON:1")`` are separate devices with separate memory.

>>> dev = PythonDevice("PYTHON:1")
>>> buf = dev.allocator.alloc(4)
>>> dev.allocator.copyin(buf, memoryview(b"abcd")); bytes(dev.allocator.as_buffer(buf))
b'abcd'
"""

from __future__ import annotations

import base64
import binascii
import pickle
from typing import TYPE_CHECKING, Any

import numpy as np

from tinycore.device import BufferSpec, Compiled, LRUAllocator
from tinycore.engine.graph import SequentialGraphRunner
from tinycore.renderer import Renderer
from tinycore.runtime.compiler import Compiler
from tinycore.runtime.python_plugin import FAMILY, python_capabilities

if TYPE_CHECKING:
    from tinycore.uop.ops import UOp


class PythonAllocator(LRUAllocator):
    """Host memory for the PYTHON device: each allocation is a flat byte memoryview over a zeroed numpy array
    (aligned for every dtype). Views share memory (`offset`), `as_buffer` is zero-copy, `transfer` copies
    between PYTHON devices."""

    def _alloc(self, size: int, options: BufferSpec | None) -> memoryview:
        if options is not None and options.external_ptr is not None:
            raise NotImplementedError("the PYTHON device can't wrap external pointers")
        return memoryview(np.zeros(size, dtype=np.uint8)).cast("B")

    def copyin(self, dest: memoryview, src: memoryview) -> None:
        """Copy host bytes into a PYTHON allocation."""
        dest[: src.nbytes] = src

    def copyout(self, dest: memoryview, src: memoryview) -> None:
        """Copy a PYTHON allocation into host bytes."""
        dest[:] = src[: dest.nbytes]

    def transfer(self, dest: memoryview, src: memoryview, size: int, src_dev: Compiled, dest_dev: Compiled) -> None:
        """Copy `size` bytes between two PYTHON devices."""
        dest[:size] = src[:size]

    def offset(self, opaque: memoryview, size: int, offset: int) -> memoryview:
        """A view of `size` bytes at `offset`, sharing memory with `opaque`."""
        if offset < 0 or offset + size > opaque.nbytes:
            raise ValueError(f"view of {size} bytes at {offset} exceeds an allocation of {opaque.nbytes}")
        return opaque[offset : offset + size]

    def as_buffer(self, opaque: memoryview) -> memoryview:
        """The allocation itself (zero-copy)."""
        return opaque


class PythonRenderer(Renderer):
    """Serializes a linearized program for the interpreter: a base64 pickle of one tuple per UOp,
    ``(op, dtype, source positions, arg)``, with sources referring to earlier positions in the list."""

    device = FAMILY
    suffix = "PY"
    has_local = True
    has_shared = True
    supports_float4 = True
    global_max = (0x8FFFFFFF,) * 3
    local_max = (1024, 1024, 64)
    shared_max = 65536
    # names of Ops the interpreter executes directly; core decomposes the others
    native_ops = frozenset(
        {
            "ADD", "SUB", "MUL", "IDIV", "MOD", "FDIV", "MAX", "NEG", "RECIPROCAL", "SQRT", "EXP2", "LOG2", "SIN",
            "TRUNC", "CMPLT", "CMPNE", "CMPEQ", "AND", "OR", "XOR", "SHL", "SHR", "WHERE", "MULACC",
        }
    )  # fmt: skip

    def __init__(self, arch: str | None = None):
        self.arch = arch
        self.supported_dtypes = python_capabilities().dtypes

    def render(self, uops: list[UOp]) -> str:
        """The program as text the `PythonCompiler` turns back into bytes."""
        position = {id(u): i for i, u in enumerate(uops)}
        flat = []
        for i, u in enumerate(uops):
            try:
                srcs = tuple(position[id(s)] for s in u.src)
            except KeyError:
                raise ValueError(f"uop {i} ({u.op}) uses a source that is not earlier in the program") from None
            if any(j >= i for j in srcs):
                raise ValueError(f"uop {i} ({u.op}) uses a source that is not earlier in the program")
            flat.append((u.op, u.dtype, srcs, u.arg))
        return base64.b64encode(pickle.dumps(flat, protocol=pickle.HIGHEST_PROTOCOL)).decode()


def decode_program(lib: bytes) -> list[tuple[Any, Any, tuple[int, ...], Any]]:
    """The ``(op, dtype, source positions, arg)`` tuples of a compiled PYTHON program."""
    return pickle.loads(lib)


class PythonCompiler(Compiler):
    """Checks and decodes the renderer's text into the pickled program (no disk cache: it costs nothing)."""

    def __init__(self) -> None:
        super().__init__(cachekey=None)

    def compile(self, src: str) -> bytes:
        """base64 text to pickle bytes; a malformed source raises `CompileError`."""
        from tinycore.errors import CompileError

        try:
            lib = base64.b64decode(src.encode(), validate=True)
        except (binascii.Error, ValueError) as error:
            raise CompileError(f"not a PYTHON program: {error}") from error
        if not lib.startswith(b"\x80"):
            raise CompileError("not a PYTHON program: the payload is not a pickle")
        return lib


class PythonProgram:
    """A loaded PYTHON program. Executing it comes with the interpreter (the scheduler issue)."""

    def __init__(self, device: Compiled, name: str, lib: bytes):
        self.device, self.name, self.lib = device, name, lib

    def __call__(
        self,
        *bufs: memoryview,
        global_size: tuple[int, ...] = (1, 1, 1),
        local_size: tuple[int, ...] | None = (1, 1, 1),
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Run the program (not yet available)."""
        raise NotImplementedError("the PYTHON interpreter comes with the scheduler issue")


class PythonDevice(Compiled):
    """The PYTHON reference device ``PYTHON`` or ``PYTHON:n``: each instance owns its memory."""

    def __init__(self, device: str = FAMILY):
        if device.upper().partition(":")[0] != FAMILY:
            raise ValueError(f"PythonDevice is for {FAMILY} or {FAMILY}:n, not {device!r}")
        super().__init__(
            device,
            PythonAllocator(),
            PythonRenderer(),
            PythonCompiler(),
            PythonProgram,
            SequentialGraphRunner,
            capabilities=python_capabilities(),
        )
