"""`Tensor.arange` and the tensor-level IOTA op: one kernel, no input buffer, O(n) work, values as numpy.

IOTA (`UOp.iota(n, device)`, docs/ir.md) is the 1-D value ``[0, 1, ..., n-1]``; the lowerer replaces it by the
flattened loop index, so `arange`, `eye`, `triu`/`tril` and `one_hot` cost O(1) operations per element.
Value tests run on every device of `tests/conftest.py` (PYTHON, and CLANG when its plugin and a compiler exist).
"""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.codegen import get_program
from tinycore.device import Device
from tinycore.dtype import dtypes
from tinycore.helpers import GlobalCounters
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.spec import SpecError, type_verify


def _ops_and_kernels(t: Tensor) -> tuple[int, int]:
    GlobalCounters.reset()
    t.realize()
    return GlobalCounters.global_ops, GlobalCounters.kernel_count


# ---------------------------------------------------------------------------------------------------------------
# the IR


def test_iota_uop_shape_device_and_bounds() -> None:
    u = UOp.iota(7, "PYTHON")
    assert u.op is Ops.IOTA and u.shape == (7,) and u.device == "PYTHON" and u.dtype == dtypes.int32
    assert (u.vmin, u.vmax) == (0, 6)
    type_verify(u, "tensor")
    with pytest.raises(TypeError):
        UOp.iota(3, "PYTHON", dtypes.float32)


def test_iota_spec_rejects_bad_forms() -> None:
    with pytest.raises(SpecError):
        type_verify(UOp(Ops.IOTA, dtypes.float32, (), 4), "kernel")
    with pytest.raises(SpecError):
        type_verify(UOp(Ops.IOTA, dtypes.int32, (), -1), "kernel")
    type_verify(UOp(Ops.IOTA, dtypes.int32, (), 4), "kernel")


def test_arange_kernel_has_no_loads_and_program_no_iota() -> None:
    items = Tensor.arange(3, 50, 4, device="PYTHON").schedule()
    assert len(items) == 1 and items[0].inputs == ()
    ast = items[0].ast
    nodes = ast.toposort()
    assert any(n.op is Ops.IOTA for n in nodes) and not any(n.op in (Ops.LOAD, Ops.DEVICE) for n in nodes)
    type_verify(ast, "kernel")
    prog = get_program(ast, Device["PYTHON"].renderer)
    assert not any(u.op in (Ops.IOTA, Ops.LOAD) for u in prog.uops)


# ---------------------------------------------------------------------------------------------------------------
# one kernel, no input buffer, O(n) work


@pytest.mark.parametrize("n", [1, 5, 1000, 4099])
def test_arange_one_kernel_no_input(n: int) -> None:
    items = Tensor.arange(n, device="PYTHON").schedule()
    assert len(items) == 1
    assert items[0].inputs == () and items[0].outputs[0].size == n


def test_arange_empty_needs_no_kernel() -> None:
    ops, kernels = _ops_and_kernels(Tensor.arange(5, 5, device="PYTHON"))
    assert kernels == 0 and Tensor.arange(5, 5).numpy().shape == (0,)


def test_arange_op_count_is_linear() -> None:
    counts = {}
    for n in (1000, 4000, 16000):
        ops, kernels = _ops_and_kernels(Tensor.arange(7, 7 + 3 * n, 3, device="PYTHON"))
        assert kernels == 1
        assert ops <= 2 * n  # one multiply and one add per element at most
        counts[n] = ops
    assert counts[16000] == 16 * counts[1000]  # exactly linear (the old binary-digit build was O(n log n))
    plain, _ = _ops_and_kernels(Tensor.arange(16000, device="PYTHON"))
    assert plain <= 16000


@pytest.mark.parametrize("builder", ["eye", "triu", "tril", "one_hot"])
def test_index_masks_are_one_kernel_and_cheap(builder: str) -> None:
    n = 64
    if builder == "eye":
        t = Tensor.eye(n, device="PYTHON")
        want_inputs = 0
    elif builder == "one_hot":
        t = Tensor(np.arange(n, dtype=np.int32) % 10, device="PYTHON").realize().one_hot(10)
        want_inputs = 1
    else:
        t = getattr(Tensor.ones(n, n, device="PYTHON").contiguous().realize(), builder)(1)
        want_inputs = 1
    items = t.schedule()
    assert len(items) == 1 and len(items[0].inputs) == want_inputs
    GlobalCounters.reset()
    from tinycore.engine.realize import run_schedule

    run_schedule(items)
    assert GlobalCounters.global_ops <= 4 * n * n  # a handful of ops per element: no log factor, no reduce


# ---------------------------------------------------------------------------------------------------------------
# values vs numpy


ARGS = [
    (10,),
    (0, 1),
    (3, 17),
    (-7, 8, 3),
    (5, -5, -1),
    (20, 1, -7),
    (-3, 40, 11),
    (1, 2, 3),
    (4, 4),
    (9, 3),
]


@pytest.mark.parametrize("args", ARGS)
@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.float32])
def test_arange_int_args_match_numpy(device: str, args: tuple[int, ...], dtype) -> None:
    np_dtype = np.int32 if dtype == dtypes.int32 else np.float32
    want = np.arange(*args, dtype=np_dtype)
    got = Tensor.arange(*args, device=device, dtype=dtype).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("args", [(0.5, 3.25, 0.25), (-1.5, 2.0, 0.7), (3.0, -2.0, -0.3), (0, 1, 0.1), (1e3, 1e3 + 9)])
def test_arange_float_args_match_numpy(device: str, args: tuple[float, ...]) -> None:
    start, stop, step = (*args, 1.0)[:3] if len(args) == 2 else args
    got = Tensor.arange(*args, device=device).numpy()
    assert got.dtype == np.float32
    want = np.arange(*args, dtype=np.float64)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # start + i * step, rounded in float32 twice: exactly what the kernel computes
    exact = np.arange(len(want)).astype(np.float32) * np.float32(step) + np.float32(start)
    np.testing.assert_array_equal(got, exact)


def test_arange_default_dtypes() -> None:
    assert Tensor.arange(4).dtype == dtypes.default_int
    assert Tensor.arange(0, 1, 0.5).dtype == dtypes.default_float
    assert Tensor.arange(4, dtype=dtypes.int64).numpy().dtype == np.int64


def test_arange_large_int32_values(device: str) -> None:
    n = 70_000  # past 2**16: the index is not truncated anywhere
    got = Tensor.arange(n, device=device).numpy()
    np.testing.assert_array_equal(got, np.arange(n, dtype=np.int32))


def test_arange_reshaped_and_combined(device: str) -> None:
    t = Tensor.arange(24, device=device).reshape(2, 3, 4).permute(2, 0, 1) * 2 + 1
    np.testing.assert_array_equal(t.numpy(), np.arange(24, dtype=np.int32).reshape(2, 3, 4).transpose(2, 0, 1) * 2 + 1)
    padded = Tensor.arange(5, device=device).pad(((2, 1),))
    np.testing.assert_array_equal(padded.numpy(), np.pad(np.arange(5, dtype=np.int32), (2, 1)))
    flipped = Tensor.arange(6, device=device).flip(0)[1:5]
    np.testing.assert_array_equal(flipped.numpy(), np.arange(6, dtype=np.int32)[::-1][1:5])


@pytest.mark.parametrize("n, m", [(4, None), (3, 5), (6, 2), (1, 1)])
def test_eye_values(device: str, n: int, m: int | None) -> None:
    np.testing.assert_array_equal(Tensor.eye(n, m, device=device).numpy(), np.eye(n, m, dtype=np.float32))


@pytest.mark.parametrize("diagonal", [-2, 0, 1, 3])
def test_triu_tril_values(device: str, diagonal: int) -> None:
    a = np.random.default_rng(diagonal + 5).standard_normal((3, 4, 5)).astype(np.float32)
    t = Tensor(a, device=device)
    np.testing.assert_array_equal(t.triu(diagonal).numpy(), np.triu(a, diagonal))
    np.testing.assert_array_equal(t.tril(diagonal).numpy(), np.tril(a, diagonal))


def test_one_hot_values(device: str) -> None:
    y = np.array([[0, 3], [2, 1], [3, 3]], dtype=np.int32)
    got = Tensor(y, device=device).one_hot(4).numpy()
    np.testing.assert_array_equal(got, np.eye(4, dtype=np.int64)[y])


def test_arange_on_several_devices() -> None:
    devs = ("PYTHON:0", "PYTHON:1")
    t = Tensor.arange(2, 14, 3, device=devs)
    assert t.uop.op is Ops.MULTI and t.uop.arg is None
    assert all(s.device == d for s, d in zip(t.uop.src, ("PYTHON", "PYTHON:1")))
    np.testing.assert_array_equal(t.numpy(), np.arange(2, 14, 3, dtype=np.int32))
