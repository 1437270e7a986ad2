"""Device memory: `BufferSpec`, the `Allocator` base a device plugin subclasses, `LRUAllocator` (a cache of freed
blocks), and `host_address`.

An `Allocator` subclass (one per device family, written by its plugin) implements:

- ``_alloc(size, options) -> opaque`` and ``_free(opaque, size, options)``: raw device memory; `_alloc` raises
  `MemoryError` when the device is out of memory (an `LRUAllocator` then empties its cache and retries once);
- ``copyin(dest, src: memoryview)`` host to device, ``copyout(dest: memoryview, src)`` device to host;
- optionally ``transfer(dest, src, size, src_dev, dest_dev)`` (device to device inside the family),
  ``offset(opaque, size, offset) -> opaque`` (a view into an allocation, for zero-copy buffer views) and
  ``as_buffer(opaque) -> memoryview`` (zero-copy host access, unified memory). Core discovers them by whether the
  subclass overrides them: `Allocator.supports_transfer`, `supports_offset`, `supports_as_buffer`.

Core calls the public ``alloc``/``free``, which validate and account `GlobalCounters.mem_used` (bytes handed out
and not yet freed, on all devices).

>>> BufferSpec(nolru=True).nolru
True
"""

from __future__ import annotations

import sys
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tinycore.helpers import DEBUG, GlobalCounters, getenv

if TYPE_CHECKING:
    from tinycore.backend.compiled import Compiled

__all__ = ["Allocator", "BufferSpec", "LRUAllocator", "host_address"]


@dataclass(frozen=True)
class BufferSpec:
    """How a buffer's memory is requested (hashable: the LRU cache is keyed by size and spec).

    `image`: an image dtype for texture memory (None: plain memory); `uncached`: bypass device caches;
    `cpu_access`: the host maps it; `host`: allocate in (pinned) host memory; `nolru`: never keep it in an
    `LRUAllocator`'s cache after free; `external_ptr`: wrap memory at this address that someone else owns (never
    freed, never cached, not counted in `mem_used`).
    """

    image: Any = None
    uncached: bool = False
    cpu_access: bool = False
    host: bool = False
    nolru: bool = False
    external_ptr: int | None = None


class Allocator:
    """Base class of device memory allocators; see the module docstring for what a subclass implements.

    `mem_used` is this allocator's live bytes (handed out by `alloc`, not yet returned by `free`).
    """

    def __init__(self) -> None:
        self.mem_used = 0

    # ----- what core calls -----
    def alloc(self, size: int, options: BufferSpec | None = None) -> Any:
        """Allocate `size` bytes (0 allowed) and return the device's opaque handle."""
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"allocation size must be a non-negative int, got {size!r}")
        opaque = self._alloc(size, options)
        self._account(size, options, +1)
        return opaque

    def free(self, opaque: Any, size: int, options: BufferSpec | None = None) -> None:
        """Return memory obtained from `alloc(size, options)`."""
        self._account(size, options, -1)
        if options is None or options.external_ptr is None:
            self._free(opaque, size, options)

    def _account(self, size: int, options: BufferSpec | None, sign: int) -> None:
        if options is not None and options.external_ptr is not None:
            return
        self.mem_used += sign * size
        GlobalCounters.mem_used += sign * size

    # ----- what a device implements -----
    def _alloc(self, size: int, options: BufferSpec | None) -> Any:
        """Allocate raw device memory; raise `MemoryError` when out of memory."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _alloc")

    def _free(self, opaque: Any, size: int, options: BufferSpec | None) -> None:
        """Release raw device memory (default: nothing, for garbage-collected host memory)."""

    def copyin(self, dest: Any, src: memoryview) -> None:
        """Copy host bytes `src` into device memory `dest` (exactly ``src.nbytes`` bytes)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement copyin")

    def copyout(self, dest: memoryview, src: Any) -> None:
        """Copy device memory `src` into host bytes `dest` (exactly ``dest.nbytes`` bytes); waits for the device."""
        raise NotImplementedError(f"{type(self).__name__} does not implement copyout")

    def transfer(self, dest: Any, src: Any, size: int, src_dev: Compiled, dest_dev: Compiled) -> None:
        """Optional: copy `size` bytes between two devices of this family without going through the host."""
        raise NotImplementedError(f"{type(self).__name__} does not implement transfer")

    def offset(self, opaque: Any, size: int, offset: int) -> Any:
        """Optional: a handle to `size` bytes at byte `offset` inside allocation `opaque`, sharing its memory."""
        raise NotImplementedError(f"{type(self).__name__} does not implement offset")

    def as_buffer(self, opaque: Any) -> memoryview:
        """Optional: a zero-copy host view of `opaque` (synchronizing first as needed)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement as_buffer")

    # ----- discovery -----
    def _overrides(self, method: str) -> bool:
        return getattr(type(self), method) is not getattr(Allocator, method)

    @property
    def supports_transfer(self) -> bool:
        """True when the subclass implements `transfer`."""
        return self._overrides("transfer")

    @property
    def supports_offset(self) -> bool:
        """True when the subclass implements `offset` (buffer views share memory)."""
        return self._overrides("offset")

    @property
    def supports_as_buffer(self) -> bool:
        """True when the subclass implements zero-copy `as_buffer`."""
        return self._overrides("as_buffer")


_NONE_CACHED: Any = object()


class LRUAllocator(Allocator):
    """An allocator that keeps freed memory in a cache keyed by ``(size, options)`` and hands it out again.

    When `_alloc` raises `MemoryError`, the cache is emptied (`free_cache`) and the allocation retried once.
    ``LRU=0`` in the environment turns caching off; `BufferSpec.nolru`/`external_ptr` buffers are never cached.
    `cached_bytes` is the memory parked in the cache.
    """

    def __init__(self) -> None:
        super().__init__()
        self.cache: defaultdict[tuple[int, BufferSpec | None], list[Any]] = defaultdict(list)
        self.cached_bytes = 0

    def alloc(self, size: int, options: BufferSpec | None = None) -> Any:
        """Reuse a cached allocation of the same size and options, else allocate (flushing the cache on OOM)."""
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"allocation size must be a non-negative int, got {size!r}")
        entries = self.cache.get((size, options))
        try:
            opaque = entries.pop() if entries else _NONE_CACHED
        except IndexError:  # another thread took the last one between the test and the pop
            opaque = _NONE_CACHED
        if opaque is not _NONE_CACHED:
            self.cached_bytes -= size
        else:
            try:
                opaque = self._alloc(size, options)
            except MemoryError:
                if DEBUG >= 1:
                    print(f"{type(self).__name__}: out of memory for {size} bytes, freeing the cache", file=sys.stderr)
                self.free_cache()
                opaque = self._alloc(size, options)
        if options is None or options.external_ptr is None:  # `_account`, inlined: the eager path allocates per op
            self.mem_used += size
            GlobalCounters.mem_used += size
        return opaque

    def free(self, opaque: Any, size: int, options: BufferSpec | None = None) -> None:
        """Park the allocation in the cache (or release it when caching is off for it)."""
        cacheable = options is None or not (options.nolru or options.external_ptr is not None)
        if cacheable and getenv("LRU", 1):
            self.mem_used -= size  # `_account`, inlined (a cacheable allocation has no external_ptr)
            GlobalCounters.mem_used -= size
            self.cache[(size, options)].append(opaque)
            self.cached_bytes += size
        else:
            super().free(opaque, size, options)

    def free_cache(self) -> None:
        """Release every cached allocation to the device."""
        for (size, options), entries in list(self.cache.items()):  # a copy: other threads may free meanwhile
            for opaque in entries:
                self._free(opaque, size, options)
            self.cached_bytes -= size * len(entries)
            entries.clear()
        self.cache.clear()


def _flat_mv(mv: memoryview) -> memoryview:
    """`mv` as a flat view of unsigned bytes (any shape or format, C-contiguous)."""
    if mv.nbytes == 0:
        return memoryview(b"")
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def host_address(mv: memoryview) -> int:
    """The address of a contiguous host buffer, writable or read-only (what a device allocator's ``copyin`` and
    ``copyout`` hand a driver's memcpy)."""
    import numpy as np

    return int(np.frombuffer(mv, dtype=np.uint8).ctypes.data)
