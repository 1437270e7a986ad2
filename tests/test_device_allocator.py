"""Allocator and LRUAllocator: reuse, flush-and-retry on OOM, LRU=0, mem_used accounting, capability discovery."""

from __future__ import annotations

import pytest

from tinycore.device import Allocator, BufferSpec, LRUAllocator
from tinycore.helpers import GlobalCounters, temporary_env
from tinycore.runtime.python_device import PythonAllocator


class CountingAllocator(LRUAllocator):
    """Host memory with a byte budget: `_alloc` raises MemoryError past `capacity` live raw bytes."""

    def __init__(self, capacity: int = 1 << 30):
        super().__init__()
        self.capacity, self.raw_bytes = capacity, 0
        self.allocs: list[int] = []
        self.frees: list[int] = []

    def _alloc(self, size, options):
        if self.raw_bytes + size > self.capacity:
            raise MemoryError(f"out of memory: {self.raw_bytes} + {size} > {self.capacity}")
        self.raw_bytes += size
        self.allocs.append(size)
        return bytearray(size)

    def _free(self, opaque, size, options):
        self.raw_bytes -= size
        self.frees.append(size)

    def copyin(self, dest, src):
        dest[:] = src

    def copyout(self, dest, src):
        dest[:] = src


class PlainAllocator(Allocator):
    """No cache, no optional methods."""

    def _alloc(self, size, options):
        return bytearray(size)

    def copyin(self, dest, src):
        dest[:] = src

    def copyout(self, dest, src):
        dest[:] = src


def test_lru_reuses_freed_buffer_of_same_size_and_options():
    a = CountingAllocator()
    first = a.alloc(64)
    a.free(first, 64)
    assert a.cached_bytes == 64
    again = a.alloc(64)
    assert again is first
    assert a.allocs == [64] and a.frees == []
    assert a.cached_bytes == 0


def test_lru_does_not_reuse_across_sizes_or_options():
    a = CountingAllocator()
    buf = a.alloc(64)
    a.free(buf, 64)
    other_size = a.alloc(32)
    other_options = a.alloc(64, BufferSpec(host=True))
    assert other_size is not buf and other_options is not buf
    assert a.allocs == [64, 32, 64]
    assert a.alloc(64) is buf  # the plain (64, None) entry is still there


def test_lru_flushes_cache_and_retries_once_on_oom():
    a = CountingAllocator(capacity=100)
    x, y = a.alloc(40), a.alloc(40)
    a.free(x, 40)
    a.free(y, 40)
    assert a.raw_bytes == 80 and a.cached_bytes == 80
    z = a.alloc(60)  # 80 cached + 60 > 100: the cache must be released first
    assert isinstance(z, bytearray) and len(z) == 60
    assert sorted(a.frees) == [40, 40]
    assert a.cached_bytes == 0 and a.raw_bytes == 60


def test_lru_oom_after_flush_propagates():
    a = CountingAllocator(capacity=100)
    keep = a.alloc(80)
    spare = a.alloc(10)
    a.free(spare, 10)
    with pytest.raises(MemoryError):
        a.alloc(50)
    assert a.frees == [10]  # the cache was flushed before the single retry
    assert keep is not None and a.mem_used == 80


def test_lru_zero_env_disables_caching():
    a = CountingAllocator()
    with temporary_env(LRU="0"):
        buf = a.alloc(16)
        a.free(buf, 16)
        assert a.frees == [16] and a.cached_bytes == 0
        assert a.alloc(16) is not buf
    assert a.allocs == [16, 16]


@pytest.mark.parametrize("options", [BufferSpec(nolru=True), BufferSpec(external_ptr=1234)])
def test_nolru_and_external_buffers_are_not_cached(options):
    a = CountingAllocator()
    buf = a.alloc(8, options)
    a.free(buf, 8, options)
    assert a.cached_bytes == 0
    if options.external_ptr is None:
        assert a.frees == [8]
    else:
        assert a.frees == []  # someone else owns external memory: never released by us


def test_free_cache_releases_everything():
    a = CountingAllocator()
    bufs = [a.alloc(n) for n in (8, 8, 16)]
    for buf, n in zip(bufs, (8, 8, 16)):
        a.free(buf, n)
    a.free_cache()
    assert sorted(a.frees) == [8, 8, 16] and a.cached_bytes == 0 and a.raw_bytes == 0
    a.alloc(8)
    assert a.allocs == [8, 8, 16, 8]


def test_mem_used_counts_live_bytes_not_cache():
    a = CountingAllocator()
    start = GlobalCounters.mem_used
    x = a.alloc(100)
    y = a.alloc(28)
    assert GlobalCounters.mem_used - start == 128 and a.mem_used == 128
    a.free(x, 100)
    assert GlobalCounters.mem_used - start == 28 and a.mem_used == 28
    x2 = a.alloc(100)  # from the cache: live again
    assert GlobalCounters.mem_used - start == 128
    a.free(x2, 100)
    a.free(y, 28)
    assert GlobalCounters.mem_used == start and a.mem_used == 0
    ext = BufferSpec(external_ptr=42)
    a.free(a.alloc(64, ext), 64, ext)
    assert GlobalCounters.mem_used == start


def test_plain_allocator_frees_immediately_and_accounts():
    a = PlainAllocator()
    start = GlobalCounters.mem_used
    buf = a.alloc(10)
    assert GlobalCounters.mem_used - start == 10
    a.free(buf, 10)
    assert GlobalCounters.mem_used == start


def test_invalid_sizes_are_rejected():
    for a in (PlainAllocator(), CountingAllocator()):
        with pytest.raises(ValueError):
            a.alloc(-1)
        with pytest.raises(ValueError):
            a.alloc(3.0)  # type: ignore[arg-type]


def test_optional_methods_are_discovered_by_override():
    plain = PlainAllocator()
    assert not (plain.supports_transfer or plain.supports_offset or plain.supports_as_buffer)
    with pytest.raises(NotImplementedError):
        plain.offset(bytearray(4), 2, 0)
    py = PythonAllocator()
    assert py.supports_transfer and py.supports_offset and py.supports_as_buffer


def test_buffer_spec_is_hashable_and_compares_by_value():
    assert BufferSpec(host=True) == BufferSpec(host=True)
    assert len({BufferSpec(), BufferSpec(), BufferSpec(nolru=True)}) == 2
