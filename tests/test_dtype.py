"""dtypes: identity/hash/equality (they key the UOp cache), vector and pointer dtypes, promotion, constants."""

from __future__ import annotations

import math
import pickle
import subprocess
import sys

import numpy as np
import pytest

from tinycore.dtype import (
    AddrSpace,
    DType,
    PtrDType,
    dtypes,
    least_upper_dtype,
    least_upper_float,
    narrow_acc_dtype,
    sum_acc_dtype,
    truncate_to_dtype,
)

SCALARS = [
    dtypes.bool,
    dtypes.int8,
    dtypes.uint8,
    dtypes.int16,
    dtypes.uint16,
    dtypes.int32,
    dtypes.uint32,
    dtypes.int64,
    dtypes.uint64,
    dtypes.float16,
    dtypes.bfloat16,
    dtypes.float32,
    dtypes.float64,
]


def test_equality_and_hash_are_structural():
    assert dtypes.float.vec(4) == dtypes.float.vec(4) and dtypes.float.vec(4) is not dtypes.float.vec(4)
    assert hash(dtypes.float.vec(4)) == hash(dtypes.float.vec(4))
    assert dtypes.float.vec(4) != dtypes.float.vec(2) and dtypes.float.vec(4) != dtypes.int.vec(4)
    assert dtypes.float.ptr(16) == dtypes.float.ptr(16) and dtypes.float.ptr(16) != dtypes.float.ptr(8)
    assert dtypes.float.ptr(16) != dtypes.float.ptr(16, AddrSpace.LOCAL)
    assert dtypes.float.ptr() != dtypes.float and dtypes.float != dtypes.float.ptr()
    assert len({dtypes.int, dtypes.int32, dtypes.int.vec(1)}) == 1
    assert len(set(SCALARS)) == len(SCALARS)
    table = {d: i for i, d in enumerate(SCALARS)}
    assert all(table[d] == i for i, d in enumerate(SCALARS))


def test_equal_dtypes_built_by_hand_match():
    handmade = DType(11, 4, "float", "f", 1, None)
    assert handmade == dtypes.float and hash(handmade) == hash(dtypes.float)
    assert DType(11, 4, "float2", "f", 1, None) != dtypes.float  # same hash inputs, different field


def test_hash_is_the_same_in_every_process():
    code = "from tinycore.dtype import dtypes; print(hash(dtypes.half.vec(4)), hash(dtypes.int.ptr(8)))"
    outs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
        for _ in range(2)
    }
    assert len(outs) == 1 and outs.pop().strip() == f"{hash(dtypes.half.vec(4))} {hash(dtypes.int.ptr(8))}"


def test_pickle_round_trip():
    for d in [*SCALARS, dtypes.float.vec(4), dtypes.half.ptr(32, AddrSpace.LOCAL), dtypes.int.ptr(4).vec(2)]:
        back = pickle.loads(pickle.dumps(d))
        assert back == d and hash(back) == hash(d) and type(back) is type(d)


def test_vec_scalar_ptr():
    v = dtypes.float.vec(4)
    assert v.count == 4 and v.itemsize == 16 and v.scalar() is dtypes.float and v.vcount == 4
    assert dtypes.float.vec(1) is dtypes.float
    with pytest.raises(ValueError):
        v.vec(2)
    p = dtypes.int.ptr(8)
    assert isinstance(p, PtrDType) and p.base == dtypes.int and p.size == 8 and p.addrspace is AddrSpace.GLOBAL
    assert p.vec(4).vcount == 4 and p.vec(4).scalar() == p
    with pytest.raises(TypeError):
        p.ptr()
    assert repr(v) == "dtypes.float.vec(4)" and repr(dtypes.half.ptr(2, AddrSpace.LOCAL)) == (
        "dtypes.half.ptr(2, AddrSpace.LOCAL)"
    )


def test_predicates():
    assert dtypes.is_int(dtypes.index) and dtypes.is_int(dtypes.uint8.vec(4)) and not dtypes.is_int(dtypes.bool)
    assert dtypes.is_float(dtypes.bfloat16) and not dtypes.is_float(dtypes.int32)
    assert dtypes.is_unsigned(dtypes.uint64) and not dtypes.is_unsigned(dtypes.int64)
    assert dtypes.is_bool(dtypes.bool.vec(2))


def test_promotion():
    assert least_upper_dtype(dtypes.int8, dtypes.uint8) == dtypes.int16
    assert least_upper_dtype(dtypes.int32, dtypes.float16) == dtypes.float16
    assert least_upper_dtype(dtypes.bool, dtypes.int8) == dtypes.int8
    assert least_upper_dtype(dtypes.float16, dtypes.bfloat16) == dtypes.float32
    assert least_upper_dtype(dtypes.uint64, dtypes.int64) == dtypes.float16
    assert least_upper_float(dtypes.int32) == dtypes.default_float
    assert sum_acc_dtype(dtypes.half) == dtypes.float32 and sum_acc_dtype(dtypes.bfloat16) == dtypes.float32


@pytest.mark.parametrize(
    "dtype", [dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.uint8, dtypes.uint16, dtypes.uint32]
)
def test_sum_acc_dtype_is_int64_like_torch(dtype):
    """issue 18: PyTorch sums every bool/integer dtype into int64 (tinygrad's int32 wrapped at 2**31)."""
    assert sum_acc_dtype(dtype) == dtypes.int64
    assert sum_acc_dtype(dtypes.int64) == dtypes.int64 and sum_acc_dtype(dtypes.uint64) == dtypes.uint64
    assert narrow_acc_dtype(dtype) in (dtypes.int32, dtypes.uint32)
    assert narrow_acc_dtype(dtypes.float16) == dtypes.float32 and narrow_acc_dtype(dtypes.float32) == dtypes.float32


def test_constants_convert_like_c():
    assert dtypes.as_const(300, dtypes.uint8) == 44 and dtypes.as_const(-1, dtypes.uint32) == 2**32 - 1
    assert dtypes.as_const(2**31, dtypes.int32) == -(2**31)
    assert dtypes.as_const(3.9, dtypes.int32) == 3 and dtypes.as_const(2, dtypes.bool) is True
    assert dtypes.as_const(2**70, dtypes.index) == 2**70
    assert truncate_to_dtype(0.1, dtypes.float32) == np.float32(0.1)
    assert truncate_to_dtype(0.1, dtypes.float16) == np.float16(0.1)
    assert truncate_to_dtype(1e6, dtypes.float16) == math.inf
    assert truncate_to_dtype(1.0 + 2**-9, dtypes.bfloat16) == 1.0


def test_min_max_and_numpy():
    assert (dtypes.min(dtypes.int8), dtypes.max(dtypes.int8)) == (-128, 127)
    assert (dtypes.min(dtypes.uint16), dtypes.max(dtypes.uint16)) == (0, 65535)
    assert dtypes.max(dtypes.float) == math.inf and dtypes.finfo(dtypes.half) == (5, 10)
    for d in SCALARS:
        if d != dtypes.bfloat16:
            assert dtypes.from_np(dtypes.to_np(d)) == d
    assert dtypes.from_py(True) == dtypes.bool and dtypes.from_py([1, 2.5]) == dtypes.default_float
