"""Buffer: lazy allocation, round trips per dtype (0-size and 1-element too), views sharing memory, base lifetime."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tinycore.device as device_module
from tinycore.device import Buffer, BufferSpec, Compiled, LRUAllocator
from tinycore.dtype import ALL_SCALARS, dtypes
from tinycore.helpers import GlobalCounters
from tinycore.runtime.python_device import PythonDevice


class TrackingAllocator(LRUAllocator):
    """bytearray memory without the optional methods (no views, no zero-copy); records frees."""

    def __init__(self):
        super().__init__()
        self.frees: list[int] = []

    def _alloc(self, size, options):
        return bytearray(size)

    def _free(self, opaque, size, options):
        self.frees.append(size)

    def copyin(self, dest, src):
        dest[:] = src

    def copyout(self, dest, src):
        dest[:] = src


@pytest.fixture
def devices(monkeypatch):
    """PYTHON (with views) and PLAIN (no optional allocator methods), caching off so frees are observable."""
    monkeypatch.setenv("LRU", "0")
    from tinycore.helpers import getenv

    getenv.cache_clear()
    table = {"PYTHON": PythonDevice("PYTHON"), "PLAIN": Compiled("PLAIN", TrackingAllocator(), None, None, None)}
    monkeypatch.setattr(device_module, "_device_lookup", lambda name: table[name])
    yield table
    getenv.cache_clear()


ROUND_TRIP_DTYPES = [dtype for dtype in ALL_SCALARS if dtype.fmt is not None]  # numpy holds each of them


@pytest.mark.parametrize("device", ["PYTHON", "PLAIN"])
@pytest.mark.parametrize("dtype", ROUND_TRIP_DTYPES, ids=str)
@pytest.mark.parametrize("size", [0, 1, 7])
def test_copyin_copyout_round_trip(devices, device, dtype, size):
    rng = np.random.default_rng(size)
    np_dtype = dtypes.to_np(dtype)
    data = (rng.integers(0, 100, size) % (2 if dtype == dtypes.bool else 100)).astype(np_dtype)
    buf = Buffer(device, size, dtype)
    assert not buf.is_allocated()
    buf.copyin(memoryview(data))
    assert buf.is_allocated()
    out = np.empty(size, np_dtype)
    buf.copyout(memoryview(out))
    np.testing.assert_array_equal(out, data)
    np.testing.assert_array_equal(buf.numpy(), data)
    assert buf.numpy().dtype == np_dtype and buf.nbytes == size * dtype.itemsize


def test_bfloat16_numpy_widens_to_float32(devices):
    values = np.array([1.0, -2.5, 3.140625], np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    buf = Buffer("PYTHON", 3, dtypes.bfloat16, initial_value=bits.tobytes())
    np.testing.assert_array_equal(buf.numpy(), values)


def test_numpy_copies_out_once_into_its_own_array(devices, monkeypatch):
    # one device copy straight into the returned array (no zero-filled staging bytes, no second host copy): a large
    # read's cost is the copy itself
    buf = Buffer("PYTHON", 1000, dtypes.float32, initial_value=np.arange(1000, dtype=np.float32).tobytes())
    calls = []
    original = type(buf.allocator).copyout
    monkeypatch.setattr(
        type(buf.allocator), "copyout", lambda self, dest, src: (calls.append(dest), original(self, dest, src))
    )
    out = buf.numpy()
    assert len(calls) == 1 and np.shares_memory(np.frombuffer(calls[0], np.uint8), out)
    assert out.flags.writeable and out.flags.owndata and out.dtype == np.float32
    np.testing.assert_array_equal(out, np.arange(1000, dtype=np.float32))


def test_copy_size_mismatch_and_unallocated_reads_raise(devices):
    buf = Buffer("PYTHON", 4, dtypes.int32)
    with pytest.raises(ValueError):
        buf.copyin(memoryview(bytearray(15)))
    with pytest.raises(RuntimeError):
        buf.copyout(memoryview(bytearray(16)))
    buf.copyin(bytes(16))
    with pytest.raises(ValueError):
        buf.copyout(memoryview(bytearray(8)))


def test_multidimensional_memoryviews_are_flattened(devices):
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = Buffer("PYTHON", 12, dtypes.float32).copyin(memoryview(data))
    out = np.zeros((3, 4), np.float32)
    buf.copyout(memoryview(out))
    np.testing.assert_array_equal(out, data)


def test_initial_value_and_opaque(devices):
    buf = Buffer("PLAIN", 2, dtypes.uint8, initial_value=b"\x01\x02")
    assert buf.is_allocated() and bytes(buf.as_buffer()) == b"\x01\x02"
    raw = bytearray(b"\x05\x06")
    adopted = Buffer("PLAIN", 2, dtypes.uint8, opaque=raw)
    assert bytes(adopted.as_buffer()) == b"\x05\x06"
    alloc = devices["PLAIN"].allocator
    adopted.deallocate()
    assert alloc.frees == []  # adopted memory is not ours to free


def test_deallocate_frees_and_del_frees(devices):
    alloc = devices["PLAIN"].allocator
    gc.collect()  # buffers other tests left in garbage cycles must not be freed in the middle of this test
    start = GlobalCounters.mem_used
    buf = Buffer("PLAIN", 8, dtypes.float32).ensure_allocated()
    assert GlobalCounters.mem_used - start == 32
    buf.deallocate()
    assert alloc.frees == [32] and not buf.is_allocated() and GlobalCounters.mem_used == start
    with pytest.raises(RuntimeError):
        buf.deallocate()
    Buffer("PLAIN", 4, dtypes.float32).ensure_allocated()  # dropped at once
    gc.collect()
    assert alloc.frees == [32, 16] and GlobalCounters.mem_used == start


def test_allocate_twice_raises(devices):
    buf = Buffer("PYTHON", 1, dtypes.int8).ensure_allocated()
    assert buf.ensure_allocated() is buf
    with pytest.raises(RuntimeError):
        buf.allocate()


def test_views_share_memory_both_ways(devices):
    base = Buffer("PYTHON", 8, dtypes.int32).copyin(memoryview(np.arange(8, dtype=np.int32)))
    view = base.view(3, dtypes.int32, offset=8)
    assert view.base is base and view.offset == 8
    np.testing.assert_array_equal(view.numpy(), [2, 3, 4])
    view.copyin(memoryview(np.array([-1, -2, -3], np.int32)))
    np.testing.assert_array_equal(base.numpy(), [0, 1, -1, -2, -3, 5, 6, 7])
    base.copyin(memoryview(np.zeros(8, np.int32)))
    np.testing.assert_array_equal(view.numpy(), [0, 0, 0])


def test_view_of_view_and_bitcast_view(devices):
    base = Buffer("PYTHON", 4, dtypes.uint32).copyin(memoryview(np.array([1, 2, 3, 4], np.uint32)))
    inner = base.view(2, dtypes.uint32, offset=4).view(1, dtypes.uint32, offset=4)
    assert inner.base is base and inner.offset == 8
    assert inner.numpy().tolist() == [3]
    as_bytes = base.view(4, dtypes.uint8, offset=4)
    assert as_bytes.numpy().tolist() == [2, 0, 0, 0]


def test_view_bounds_are_checked(devices):
    base = Buffer("PYTHON", 4, dtypes.float32)
    with pytest.raises(ValueError):
        base.view(2, dtypes.float32, offset=12)
    with pytest.raises(ValueError):
        base.view(5, dtypes.float32)
    with pytest.raises(ValueError):
        base.view(1, dtypes.float32, offset=-4)
    with pytest.raises(ValueError):
        base.view(2, dtypes.float32, offset=0).view(3, dtypes.float32)  # larger than its parent view


def test_view_keeps_base_alive_and_base_is_freed_after_last_view():
    allocator = _RecordingPythonAllocator()
    table = {"PYTHON": Compiled("PYTHON", allocator, None, None, None)}
    original = device_module._device_lookup
    device_module._device_lookup = lambda name: table[name]
    try:
        base = Buffer("PYTHON", 16, dtypes.uint8, options=BufferSpec(nolru=True))
        base.copyin(bytes(range(16)))
        view = base.view(4, dtypes.uint8, offset=12)
        view.ensure_allocated()
        assert base.view_count == 1
        del base
        gc.collect()
        assert allocator.frees == []
        assert bytes(view.as_buffer(allow_zero_copy=False)) == bytes([12, 13, 14, 15])
        del view
        gc.collect()
        assert allocator.frees == [16]
    finally:
        device_module._device_lookup = original


def test_explicit_deallocate_of_base_waits_for_views(devices):
    alloc = devices["PYTHON"].allocator
    start = alloc.mem_used
    base = Buffer("PYTHON", 4, dtypes.int32).copyin(memoryview(np.array([9, 8, 7, 6], np.int32)))
    view = base.view(2, dtypes.int32, offset=8).ensure_allocated()
    base.deallocate()
    assert base.is_allocated() and alloc.mem_used - start == 16  # still in use by the view
    assert view.numpy().tolist() == [7, 6]
    view.deallocate()
    assert not base.is_allocated() and alloc.mem_used == start


def test_views_need_allocator_offset(devices):
    base = Buffer("PLAIN", 4, dtypes.int32)
    view = base.view(2, dtypes.int32)
    with pytest.raises(NotImplementedError, match="offset"):
        view.ensure_allocated()


def test_view_constructor_validation(devices):
    base = Buffer("PYTHON", 4, dtypes.int32)
    with pytest.raises(ValueError):
        Buffer("PLAIN", 1, dtypes.int32, base=base)
    with pytest.raises(ValueError):
        Buffer("PYTHON", 1, dtypes.int32, base=base.view(2, dtypes.int32))
    with pytest.raises(ValueError):
        Buffer("PYTHON", 1, dtypes.int32, offset=4)
    with pytest.raises(ValueError):
        Buffer("PYTHON", -1, dtypes.int32)


def test_as_buffer_zero_copy_only_where_supported(devices):
    py = Buffer("PYTHON", 4, dtypes.uint8).copyin(b"abcd")
    alias = py.as_buffer()
    alias[0] = ord("z")
    assert bytes(py.as_buffer(allow_zero_copy=False)) == b"zbcd"
    copy = py.as_buffer(allow_zero_copy=False)
    copy[1] = ord("y")
    assert bytes(py.as_buffer()) == b"zbcd"
    plain = Buffer("PLAIN", 4, dtypes.uint8).copyin(b"abcd")
    detached = plain.as_buffer()
    detached[0] = ord("q")
    assert bytes(plain.as_buffer()) == b"abcd"
    with pytest.raises(NotImplementedError):
        plain.as_buffer(force_zero_copy=True)


def test_repr_names_device_size_dtype_and_state(devices):
    buf = Buffer("PYTHON", 3, dtypes.float16)
    assert "PYTHON" in repr(buf) and "size=3" in repr(buf) and "half" in repr(buf) and "lazy" in repr(buf)
    buf.ensure_allocated()
    assert "allocated" in repr(buf)
    assert "offset=2" in repr(buf.view(1, dtypes.float16, offset=2))


class _RecordingPythonAllocator(LRUAllocator):
    """Python-device-like memory (views supported) that records frees."""

    def __init__(self):
        super().__init__()
        self.frees: list[int] = []

    def _alloc(self, size, options):
        return memoryview(bytearray(size))

    def _free(self, opaque, size, options):
        self.frees.append(size)

    def copyin(self, dest, src):
        dest[:] = src

    def copyout(self, dest, src):
        dest[:] = src

    def offset(self, opaque, size, offset):
        return opaque[offset : offset + size]
