"""`ClangAllocator`: host memory for the CLANG device.

Each allocation is 64-byte aligned memory from ``posix_memalign`` (allocations of 8 MiB and more are 2 MiB aligned
and marked ``MADV_HUGEPAGE``, which saves most page faults on first touch). Memory is not zeroed. Handles are
`ClangMemory` objects (address, size, owner); views share the memory (`offset`), `as_buffer` is a zero-copy
memoryview, `copyin`/`copyout`/`transfer` are ``memmove``.
"""

from __future__ import annotations

import ctypes
from typing import Any

from tinycore.sdk import BufferSpec, LRUAllocator

_libc = ctypes.CDLL(None, use_errno=True)
_posix_memalign = _libc.posix_memalign
_posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
_posix_memalign.restype = ctypes.c_int
_free = _libc.free
_free.argtypes = [ctypes.c_void_p]
_free.restype = None
_madvise = getattr(_libc, "madvise", None)
if _madvise is not None:
    _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _madvise.restype = ctypes.c_int
_memory_view = ctypes.pythonapi.PyMemoryView_FromMemory
_memory_view.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
_memory_view.restype = ctypes.py_object
_PYBUF_WRITE = 0x200
_MADV_HUGEPAGE = 14
ALIGNMENT = 64
HUGE_ALIGNMENT = 2 << 20
HUGE_THRESHOLD = 8 << 20


class ClangMemory:
    """A CLANG device allocation or view: raw address `ptr`, `size` in bytes; `owner` keeps a view's base alive."""

    __slots__ = ("ptr", "size", "owner")

    def __init__(self, ptr: int, size: int, owner: Any = None):
        self.ptr, self.size, self.owner = ptr, size, owner

    def __repr__(self) -> str:
        return f"<ClangMemory {self.ptr:#x} size={self.size}>"


def _address_of(mv: memoryview) -> int:
    """Address of a C-contiguous buffer (read-only ones too)."""
    import numpy as np

    return int(np.frombuffer(mv, dtype=np.uint8).ctypes.data) if mv.nbytes else 0


class ClangAllocator(LRUAllocator):
    """Aligned host memory (see the module docstring); freed memory is cached by size (`LRUAllocator`)."""

    def _alloc(self, size: int, options: BufferSpec | None) -> ClangMemory:
        if options is not None and options.external_ptr is not None:
            return ClangMemory(int(options.external_ptr), size)
        align = HUGE_ALIGNMENT if size >= HUGE_THRESHOLD else ALIGNMENT
        ptr = ctypes.c_void_p()
        if _posix_memalign(ctypes.byref(ptr), align, max(size, 1)) != 0 or not ptr.value:
            raise MemoryError(f"CLANG: can't allocate {size} bytes of host memory")
        if align == HUGE_ALIGNMENT and _madvise is not None:
            _madvise(ptr.value, size - size % 4096, _MADV_HUGEPAGE)  # best effort
        return ClangMemory(ptr.value, size)

    def _free(self, opaque: ClangMemory, size: int, options: BufferSpec | None) -> None:
        if opaque.owner is None and opaque.ptr:
            _free(opaque.ptr)
            opaque.ptr = 0

    def as_buffer(self, opaque: ClangMemory) -> memoryview:
        """A writable memoryview (format ``B``) aliasing the memory."""
        return _memory_view(opaque.ptr, opaque.size, _PYBUF_WRITE)

    def copyin(self, dest: ClangMemory, src: memoryview) -> None:
        """Copy host bytes into device memory."""
        if src.nbytes > dest.size:
            raise ValueError(f"copyin of {src.nbytes} bytes into {dest.size}")
        if src.nbytes >= 1 << 16:
            ctypes.memmove(dest.ptr, _address_of(src), src.nbytes)
        elif src.nbytes:
            self.as_buffer(dest)[: src.nbytes] = src if src.format == "B" and src.ndim == 1 else src.cast("B")

    def copyout(self, dest: memoryview, src: ClangMemory) -> None:
        """Copy device memory into host bytes."""
        if dest.nbytes > src.size:
            raise ValueError(f"copyout of {src.size} bytes into {dest.nbytes}")
        if dest.readonly:
            raise ValueError("copyout needs a writable destination")
        if dest.nbytes >= 1 << 16:
            ctypes.memmove(_address_of(dest), src.ptr, dest.nbytes)
        elif dest.nbytes:
            flat = dest if dest.format == "B" and dest.ndim == 1 else dest.cast("B")
            flat[:] = _memory_view(src.ptr, dest.nbytes, _PYBUF_WRITE)

    def transfer(self, dest: ClangMemory, src: ClangMemory, size: int, src_dev: Any, dest_dev: Any) -> None:
        """Copy `size` bytes between two CLANG devices (both host memory)."""
        ctypes.memmove(dest.ptr, src.ptr, size)

    def offset(self, opaque: ClangMemory, size: int, offset: int) -> ClangMemory:
        """A view of `size` bytes at byte `offset` of `opaque`, sharing its memory."""
        if offset < 0 or offset + size > opaque.size:
            raise ValueError(f"view of {size} bytes at {offset} exceeds an allocation of {opaque.size}")
        return ClangMemory(opaque.ptr + offset, size, opaque)
