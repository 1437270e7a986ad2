"""The tinygrad-0.11 names added for issue 21 (part B): tinygrad's parameter names of the `dtypes` helpers,
`Device.default` / `Device.get_available_devices()`, `TinyJit(fxn, ..., optimize=)` and `Variable`'s default dtype.

`Tensor.qr` / `Tensor.svd` are tested against torch in `tests/test_linalg.py`.
"""

from __future__ import annotations

from tinycore.dtype import dtypes

# ----- dtypes helpers: tinygrad's parameter names


def test_dtypes_helpers_take_tinygrads_keywords() -> None:
    """`as_const(val, dtype)`, `from_py(x)`, `is_*(x)` and `DType.vec(sz)` accept tinygrad's keyword names."""
    assert dtypes.as_const(val=300, dtype=dtypes.uint8) == 44
    assert dtypes.as_const(val=(1.5, 2), dtype=dtypes.int32) == (1, 2)
    assert dtypes.from_py(x=[1, 2.0]) == dtypes.float32
    assert dtypes.is_bool(x=dtypes.bool) and not dtypes.is_bool(x=dtypes.int8)
    assert dtypes.is_float(x=dtypes.half) and not dtypes.is_float(x=dtypes.int32)
    assert dtypes.is_int(x=dtypes.uint16) and not dtypes.is_int(x=dtypes.float32)
    assert dtypes.is_unsigned(x=dtypes.uint64) and not dtypes.is_unsigned(x=dtypes.int64)
    v = dtypes.float32.vec(sz=4)
    assert (v.count, v.itemsize, v.scalar()) == (4, 16, dtypes.float32)
    assert dtypes.float32.ptr().vec(sz=2).v == 2


# ----- Device.default and Device.get_available_devices()


def test_device_default_and_available_devices() -> None:
    """`Device.default` is the opened default device; `get_available_devices()` yields the families that open."""
    from tinycore.device import Device

    assert Device.default is Device[Device.DEFAULT]
    available = Device.get_available_devices()
    assert iter(available) is available  # a generator, like tinygrad's
    names = list(available)
    assert "PYTHON" in names and Device.DEFAULT.split(":")[0] in names
    assert names == list(Device) and set(names) <= set(Device.installed())
    for name in names:  # each one opens
        assert Device[name] is not None
