"""The tinygrad-0.11 names added for issue 21 (part B): tinygrad's parameter names of the `dtypes` helpers,
`Device.default` / `Device.get_available_devices()`, `TinyJit(fxn, ..., optimize=)` and `Variable`'s default dtype.

`Tensor.qr` / `Tensor.svd` are tested against torch in `tests/test_linalg.py`.
"""

from __future__ import annotations

import numpy as np
import pytest

from tinycore import Tensor, TinyJit
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


# ----- TinyJit(fxn, captured=None, prune=False, optimize=False)


@pytest.mark.parametrize("optimize", [False, True])
def test_tinyjit_tinygrads_parameters(optimize: bool) -> None:
    """`TinyJit(fxn=..., optimize=...)` captures and replays like the plain decorator (optimize changes nothing)."""
    w = Tensor(np.arange(4, dtype=np.float32), device="PYTHON").realize()

    def body(a: Tensor) -> Tensor:
        return (a * w + 1).sum()

    f = TinyJit(fxn=body, optimize=optimize)
    assert f.fxn is body and f.fn is body and f.optimize is optimize and f.prune is False
    for i in range(4):  # eager, capture, replays
        x = np.random.default_rng(i).standard_normal(4).astype(np.float32)
        out = f(Tensor(x, device="PYTHON"))
        np.testing.assert_allclose(out.numpy(), (x * np.arange(4) + 1).sum(), rtol=1e-5)
    assert f.captured is not None
    positional = TinyJit(body, None, True, True)
    assert (positional.prune, positional.optimize) == (True, True)


def test_tinyjit_fn_keyword_still_works() -> None:
    """``fn=`` (tinycore's earlier name for ``fxn``) is accepted; both at once, or neither, raise."""

    def body(a: Tensor) -> Tensor:
        return a + 1

    assert TinyJit(fn=body).fxn is body
    with pytest.raises(TypeError, match="both fxn and fn"):
        TinyJit(body, fn=body)
    with pytest.raises(ValueError, match="needs a function"):
        TinyJit()
