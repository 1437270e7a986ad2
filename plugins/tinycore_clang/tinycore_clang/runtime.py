"""Loading compiled kernels and launching them: `load_kernels`, `load_library`, `ClangProgram`.

A compiled kernel is the bytes of a shared object (C backend, or llvm where objects can't be loaded in-process)
or of a relocatable object file (llvm backend). `load_kernels` handles both, once per distinct content per process:

- a shared object: `load_library` writes it to a file named after its sha256 in the process's private temp
  folder, ``dlopen``s it (``RTLD_LOCAL``) and unlinks the file;
- an object file: `tinycore_clang.objloader.load_object` relocates it into executable memory (no linker run).

Nothing is ever unloaded (a kernel may still run on a worker).

`ClangProgram(device, name, lib)` looks up the kernel's three symbols (``NAME``, ``NAME_tc``, ``NAME_tc_info``;
see `tinycore_clang.renderer`), sets ctypes ``argtypes`` once, and launches:

- a kernel without ``core_id``: one direct ctypes call with the raw buffer addresses and variable values;
- a kernel with ``core_id``: one call of the thread pool's ``tc_run`` (`tinycore_clang.threadpool`), which runs the
  ``cores`` chunks on ``device.threads`` native threads and returns when all are done.

Launches are synchronous: with ``wait=True`` the call returns the seconds it took (``time.perf_counter``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tinycore_clang.compiler import scratch_path
from tinycore_clang.objloader import LoadedObject, load_object

_LOADED: dict[str, ctypes.CDLL] = {}
_OBJECTS: dict[str, LoadedObject] = {}
_LOAD_LOCK = threading.Lock()
_MEMFDS: list[int] = []  # kept open: the path /proc/self/fd/N must never name another library later


def load_library(lib: bytes) -> ctypes.CDLL:
    """``dlopen`` the shared object `lib` (once per distinct content per process)."""
    digest = hashlib.sha256(lib).hexdigest()
    dll = _LOADED.get(digest)
    if dll is not None:
        return dll
    with _LOAD_LOCK:
        dll = _LOADED.get(digest)
        if dll is not None:
            return dll
        path = scratch_path(f"_{digest[:32]}.so")
        try:
            with open(path, "wb") as file:
                file.write(lib)
            dll = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as first:
            dll = _load_from_memfd(lib, digest, first)
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
        _LOADED[digest] = dll
        return dll


def _load_from_memfd(lib: bytes, digest: str, first: OSError) -> ctypes.CDLL:
    """Fallback for temp folders mounted ``noexec``: load from an anonymous memory file."""
    if not hasattr(os, "memfd_create"):
        raise first
    fd = os.memfd_create(f"tinycore-clang-{digest[:16]}")
    os.write(fd, lib)
    _MEMFDS.append(fd)
    try:
        return ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as error:
        raise OSError(f"can't load a compiled kernel: {first}; from memory: {error}") from error


class SharedLibrary:
    """A ``dlopen``ed kernel library, answering the same two questions as `LoadedObject`."""

    def __init__(self, dll: ctypes.CDLL, lib: bytes):
        self.dll, self.lib = dll, lib

    def address(self, name: str) -> int | None:
        """The address of exported symbol `name`, or None."""
        try:
            return ctypes.cast(getattr(self.dll, name), ctypes.c_void_p).value
        except AttributeError:
            return None

    @property
    def exports(self) -> list[str]:
        """Names of the global symbols the library exports."""
        return elf_exports(self.lib)


def is_object_file(lib: bytes) -> bool:
    """True for an ELF relocatable object (``.o``), False for a shared object or anything else.

    >>> is_object_file(b"\\x7fELF" + bytes(12) + b"\\x01\\x00"), is_object_file(b"MZ")
    (True, False)
    """
    return len(lib) >= 18 and lib[:4] == b"\x7fELF" and lib[16:18] == b"\x01\x00"


def load_kernels(lib: bytes) -> SharedLibrary | LoadedObject:
    """Load compiled kernels (a shared object or an object file; once per distinct content per process)."""
    if not is_object_file(lib):
        return SharedLibrary(load_library(lib), lib)
    digest = hashlib.sha256(lib).hexdigest()
    with _LOAD_LOCK:
        loaded = _OBJECTS.get(digest)
        if loaded is None:
            loaded = _OBJECTS[digest] = load_object(lib)
        return loaded


def elf_exports(lib: bytes) -> list[str]:
    """Names of the global symbols a 64-bit little-endian ELF shared object defines (its ``.dynsym``).

    >>> elf_exports(b"not an elf")
    []
    """
    if len(lib) < 64 or lib[:4] != b"\x7fELF" or lib[4] != 2 or lib[5] != 1:
        return []
    shoff = struct.unpack_from("<Q", lib, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", lib, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", lib, shoff + i * shentsize) for i in range(shnum)]
    names: list[str] = []
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != 11 or not entsize:  # SHT_DYNSYM
            continue
        strtab = sections[link]
        str_off = strtab[4]
        for k in range(size // entsize):
            st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", lib, offset + k * entsize)
            if st_shndx == 0 or (st_info >> 4) not in (1, 2):  # undefined, or not GLOBAL/WEAK
                continue
            end = lib.index(b"\0", str_off + st_name)
            names.append(lib[str_off + st_name : end].decode(errors="replace"))
    return names


@dataclass(frozen=True)
class KernelInfo:
    """What ``NAME_tc_info`` says: buffer count, variable kinds (``i`` int, ``q`` long long), core ids."""

    bufs: int
    vars: str
    cores: int

    @staticmethod
    def parse(text: str) -> KernelInfo:
        """Parse ``"tc1 bufs=2 vars=iq cores=0"``.

        >>> KernelInfo.parse("tc1 bufs=2 vars=iq cores=-1")
        KernelInfo(bufs=2, vars='iq', cores=-1)
        """
        fields = dict(part.split("=", 1) for part in text.split()[1:] if "=" in part)
        return KernelInfo(int(fields.get("bufs", 0)), fields.get("vars", ""), int(fields.get("cores", 0)))


def _kernel_name(image: SharedLibrary | LoadedObject, name: str) -> str:
    if image.address(f"{name}_tc_info") is not None:
        return name
    kernels = [s[: -len("_tc_info")] for s in image.exports if s.endswith("_tc_info")]
    if len(kernels) == 1:
        return kernels[0]
    raise ValueError(f"CLANG: kernel {name!r} not found in the compiled library (it has {sorted(kernels)})")


class ClangProgram:
    """A loaded CLANG kernel: ``prg(*bufs, global_size=, local_size=, vals=, wait=False)``.

    `bufs` are the allocator's handles (`tinycore_clang.allocator.ClangMemory`) or raw addresses; `vals` the
    variable values in the program's variable order. A kernel with ``core_id`` runs its chunks on the device's
    native thread pool (``cores`` chunks, or ``global_size[0]`` when the count is symbolic); `local_size` is
    ignored (the CPU has no work-groups).
    """

    def __init__(self, device: Any, name: str, lib: bytes):
        self.device, self.lib = device, lib
        self.image = load_kernels(lib)
        self.name = _kernel_name(self.image, name)
        self.info = KernelInfo.parse(ctypes.string_at(self._address(f"{self.name}_tc_info")).decode())
        var_types = [ctypes.c_int if kind == "i" else ctypes.c_int64 for kind in self.info.vars]
        self.nbufs, self.nvars = self.info.bufs, len(self.info.vars)
        self.threaded = self.info.cores != 0
        argtypes = [ctypes.c_void_p] * self.nbufs + var_types + ([ctypes.c_int] if self.threaded else [])
        self.fn = ctypes.CFUNCTYPE(None, *argtypes)(self._address(self.name))
        self.entry = self._address(f"{self.name}_tc")
        self._buf_array = ctypes.c_void_p * max(1, self.nbufs)
        self._val_array = ctypes.c_int64 * max(1, self.nvars)
        self._pool: Any = None

    def _address(self, symbol: str) -> int:
        address = self.image.address(symbol)
        if address is None:
            raise ValueError(f"CLANG: symbol {symbol!r} missing from the compiled kernel library")
        return address

    def _pointers(self, bufs: tuple[Any, ...]) -> list[int]:
        try:
            return [b.ptr for b in bufs]
        except AttributeError:
            return [b if isinstance(b, int) else b.ptr for b in bufs]

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] = (1, 1, 1),
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Run the kernel on `bufs` with variable values `vals`; with `wait`, the elapsed seconds."""
        if len(bufs) != self.nbufs or len(vals) != self.nvars:
            raise TypeError(
                f"CLANG kernel {self.name} takes {self.nbufs} buffers and {self.nvars} variables, "
                f"got {len(bufs)} and {len(vals)}"
            )
        try:  # inlined `_pointers`: this runs on every eager kernel launch
            ptrs = [b.ptr for b in bufs]
        except AttributeError:
            ptrs = self._pointers(bufs)
        if not self.threaded:
            if wait:
                start = time.perf_counter()
                self.fn(*ptrs, *vals)
                return time.perf_counter() - start
            self.fn(*ptrs, *vals)
            return None
        ntasks = self.info.cores if self.info.cores > 0 else int(global_size[0])
        pool = self._pool if self._pool is not None else self._get_pool()
        start = time.perf_counter()
        pool.run(self.entry, self._buf_array(*ptrs), self._val_array(*vals), ntasks, int(self.device.threads))
        return time.perf_counter() - start if wait else None

    def launcher(
        self, global_size: tuple[int, ...], local_size: tuple[int, ...] | None, vals: tuple[int, ...]
    ) -> Callable[..., None] | None:
        """Optional fast path that core's eager realize uses when a Program offers it: a callable running this
        kernel on buffer handles with these launch dims and variable values fixed, the same as
        ``self(*bufs, global_size=, local_size=, vals=, wait=False)`` without the per-call argument handling.
        None for a kernel on the thread pool (it keeps the general call)."""
        if self.threaded or len(vals) != self.nvars:
            return None
        fn, pointers = self.fn, self._pointers

        def launch(*bufs: Any) -> None:
            try:
                ptrs = [b.ptr for b in bufs]
            except AttributeError:  # raw addresses
                ptrs = pointers(bufs)
            fn(*ptrs, *vals)

        return launch

    def _get_pool(self) -> Any:
        from tinycore_clang.threadpool import get_pool

        self._pool = get_pool(self.device.pool_compiler)
        return self._pool

    def __repr__(self) -> str:
        return f"<ClangProgram {self.name} bufs={self.nbufs} vars={self.nvars} cores={self.info.cores}>"
