"""The ``PYTHON`` reference device: host memory, a serializing renderer and compiler, and a numpy interpreter of
linearized UOp programs with GPU semantics (`tinycore.runtime.python_interpreter`).

`PythonRenderer.native_ops` is every ALU op by default; the ``PYTHON_NATIVE_OPS`` ContextVar narrows it so tests
can run the decomposition passes end to end: ``basic`` (no transcendentals, no RECIP/POW/IDIV/MOD/MULACC) or a
comma-separated list of op names.

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
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import numpy as np

from tinycore.backend.compiler import Compiler
from tinycore.device import BufferSpec, Compiled, LRUAllocator
from tinycore.dtype import dtypes
from tinycore.engine.graph_runner import SequentialGraphRunner
from tinycore.helpers import ContextVar
from tinycore.renderer import Renderer, TensorCore
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


PYTHON_NATIVE_OPS = ContextVar("PYTHON_NATIVE_OPS", "")  # "" / "all", "basic", or "ADD,MUL,..."

ALL_NATIVE_OPS = frozenset(
    {
        "EXP2", "LOG2", "SIN", "SQRT", "RECIP", "NEG", "TRUNC", "ADD", "SUB", "MUL", "FDIV", "IDIV", "MOD", "MAX",
        "CMPLT", "CMPNE", "CMPEQ", "AND", "OR", "XOR", "SHL", "SHR", "POW", "THREEFRY", "WHERE", "MULACC",
    }
)  # fmt: skip
BASIC_NATIVE_OPS = frozenset(
    {
        "ADD",
        "SUB",
        "MUL",
        "NEG",
        "MAX",
        "CMPLT",
        "CMPNE",
        "CMPEQ",
        "WHERE",
        "AND",
        "OR",
        "XOR",
        "SHL",
        "SHR",
        "FDIV",
        "TRUNC",
    }
)


def _native_ops() -> frozenset[str]:
    choice = str(PYTHON_NATIVE_OPS.value).strip()
    if choice in ("", "all", "ALL"):
        return ALL_NATIVE_OPS
    if choice.lower() == "basic":
        return BASIC_NATIVE_OPS
    names = frozenset(name.strip().upper() for name in choice.split(",") if name.strip())
    unknown = sorted(names - ALL_NATIVE_OPS)
    if unknown:
        raise ValueError(
            f"PYTHON_NATIVE_OPS={choice!r} names unknown ops {', '.join(unknown)}: set it to all, basic or a "
            f"comma-separated list of {', '.join(sorted(ALL_NATIVE_OPS))} (e.g. PYTHON_NATIVE_OPS=ADD,MUL), or unset it"
        )
    return names


# Tensor cores the interpreter emulates (for testing WMMA code generation): 4 lanes compute a 4x4x4 product.
# Lane t holds row t of A, column t of B and column t of C/D.
PYTHON_TENSOR_CORES = [
    TensorCore.from_maps(
        (4, 4, 4), 4, din, dtypes.float, a=lambda t, i: (t, i), b=lambda t, i: (i, t), c=lambda t, i: (i, t)
    )
    for din in (dtypes.float, dtypes.half)
]


class PythonRenderer(Renderer):
    """Serializes a linearized program for the interpreter: a base64 pickle of one tuple per UOp,
    ``(op, dtype, source positions, arg)``, with sources referring to earlier positions in the list."""

    device = FAMILY
    suffix = "PY"
    has_local = True
    has_shared = True
    supports_float4 = True
    masked_access = True
    global_max = (0x8FFFFFFF,) * 3
    local_max = (1024, 1024, 64)
    shared_max = 65536
    tensor_cores = PYTHON_TENSOR_CORES

    @property  # type: ignore[override]
    def native_ops(self) -> frozenset[str]:
        """Names of Ops the interpreter takes directly (all of them, unless ``PYTHON_NATIVE_OPS`` narrows it)."""
        return _native_ops()

    def __init__(self, arch: str | None = None):
        self.arch = arch
        self.supported_dtypes = python_capabilities().dtypes

    def render(self, uops: list[UOp], name: str | None = None) -> str:
        """The program as text the `PythonCompiler` turns back into bytes (`name` is unused: the interpreter runs
        one program per binary, found by position, not by name)."""
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


_INTERPRETERS: OrderedDict[tuple[bytes, str], Any] = OrderedDict()  # documented cache: decoded programs


def _interpreter(lib: bytes, name: str) -> Any:
    key = (lib, name)
    interp = _INTERPRETERS.get(key)
    if interp is None:
        from tinycore.runtime.python_interpreter import Interpreter, InterpreterError

        try:
            program = decode_program(lib)
        except Exception as error:
            raise InterpreterError(f"kernel {name}: not a PYTHON program ({type(error).__name__}: {error})") from error
        interp = Interpreter(program, name, PYTHON_TENSOR_CORES)
        _INTERPRETERS[key] = interp
        if len(_INTERPRETERS) > 512:
            _INTERPRETERS.popitem(last=False)
    else:
        _INTERPRETERS.move_to_end(key)
    return interp


class PythonProgram:
    """A loaded PYTHON program: `lib` (the pickled uops of `PythonCompiler`) run by the numpy interpreter.

    Translated on first call (and cached per `lib`); see `tinycore.runtime.python_interpreter.Interpreter` for the
    execution model and the checks (bounds, shared-memory races, poison).
    """

    def __init__(self, device: Compiled, name: str, lib: bytes):
        self.device, self.name, self.lib = device, name, lib
        self._interp: Any = None

    def __call__(
        self,
        *bufs: memoryview,
        global_size: tuple[int, ...] = (1, 1, 1),
        local_size: tuple[int, ...] | None = (1, 1, 1),
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Run the program on `bufs` (flat memoryviews in argument order); with `wait`, return seconds."""
        start = time.perf_counter()
        if self._interp is None:
            self._interp = _interpreter(self.lib, self.name)
        self._interp(bufs, global_size, local_size, vals)
        return time.perf_counter() - start if wait else None


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
        )
