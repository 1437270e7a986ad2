"""The fp8 dtypes `dtypes.fp8e4m3` (OCP E4M3FN, torch.float8_e4m3fn) and `dtypes.fp8e5m2` (E5M2, torch.float8_e5m2).

No renderer knows them: a buffer holds one byte per element and `tinycore.codegen.decompositions.lower_fp8` turns
every kernel's fp8 values into uint8 bits, converted to and from float32 by bit manipulation. Checked here against
PyTorch bit for bit, on every test device (PYTHON, CLANG): all 256 codes of each type decode like
``torch.tensor(bytes).view(torch.float8_e4m3fn).float()`` (NaN payloads included), and float32 values (a sweep of
random bit patterns, special values, subnormals, rounding ties and out-of-range values) encode like
``.to(torch.float8_e4m3fn)``: round to nearest even, E4M3FN saturating to +-448 (infinities too), E5M2 overflowing
to infinity, NaN keeping its sign. Like PyTorch, fp8 tensors only store values: arithmetic and promotion raise.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore.dtype import (
    FP8S,
    dtypes,
    fp8_decode,
    fp8_decode_bits,
    fp8_decode_np,
    fp8_encode,
    fp8_encode_np,
    least_upper_dtype,
)
from tinycore.tensor import Tensor

TORCH = {dtypes.fp8e4m3: torch.float8_e4m3fn, dtypes.fp8e5m2: torch.float8_e5m2}
FP8 = pytest.mark.parametrize("dt", FP8S, ids=lambda d: d.name)


def _torch_decode_bits(dt) -> np.ndarray:
    return torch.arange(256, dtype=torch.uint8).view(TORCH[dt]).float().numpy().view(np.uint32)


def _torch_encode(x: np.ndarray, dt) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(TORCH[dt]).view(torch.uint8).numpy()


def _sweep(dt) -> np.ndarray:
    """float32 values to encode: random bit patterns, scaled normals around the fp8 range, every fp8 value, the
    midpoints between neighbours (ties) and the floats next to them, and the special cases."""
    rng = np.random.default_rng(21)
    random_bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    scaled = np.float32(rng.standard_normal(20000)) * np.float32(2.0) ** rng.integers(-26, 20, 20000).astype(np.float32)
    values = fp8_decode_np(np.arange(256, dtype=np.uint8), dt).astype(np.float64)
    finite = np.unique(values[np.isfinite(values)])
    mids = ((finite[1:] + finite[:-1]) / 2).astype(np.float32)
    top = float(finite[-1])
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1e-30, 3.4e38, -3.4e38, 1e9, -1e9]
    special += [top, np.nextafter(np.float32(top), np.float32(np.inf)), top * 1.03, top * 1.0625, top * 1.07, top * 2]
    special += [448.0, 449.0, 464.0, 465.0, 479.0, 480.0, 57344.0, 60000.0, 61439.0, 61440.0, 61441.0, 65536.0]
    special += [2.0**-9, 2.0**-10, 2.0**-11, 3 * 2.0**-11, 2.0**-16, 2.0**-17, 3 * 2.0**-18, 2.0**-6, 2.0**-14]
    inf32 = np.float32(np.inf)
    neighbours = [np.nextafter(mids, inf32), np.nextafter(mids, -inf32)]
    parts = [random_bits, scaled, finite.astype(np.float32), mids, *neighbours, np.array(special, np.float32)]
    sweep = np.concatenate(parts).astype(np.float32)
    return np.concatenate([sweep, -sweep])


# ----- the dtypes


def test_dtype_attributes() -> None:
    assert dtypes.fp8s == (dtypes.fp8e4m3, dtypes.fp8e5m2)
    assert dtypes.floats[:2] == dtypes.fp8s and set(dtypes.fp8s) <= set(dtypes.all)
    for dt, (exp, man) in ((dtypes.fp8e4m3, (4, 3)), (dtypes.fp8e5m2, (5, 2))):
        assert dt.itemsize == 1 and dt.fmt is None and dt.count == 1
        assert dtypes.is_float(dt) and not dtypes.is_int(dt) and dtypes.finfo(dt) == (exp, man)
        assert dtypes.fields()[repr(dt).removeprefix("dtypes.")] is dt
        assert dt.vec(4).scalar() == dt and dt.vec(4).itemsize == 4
    assert repr(dtypes.fp8e4m3) == "dtypes.fp8e4m3" and dtypes.fp8e4m3.name == "float8_e4m3"
    assert (
        dtypes.fp8e4m3 != dtypes.fp8e5m2 and sorted([dtypes.half, dtypes.fp8e5m2, dtypes.uint64])[1] is dtypes.fp8e5m2
    )
    assert dtypes.to_np(dtypes.fp8e4m3) == np.float32  # numpy has no fp8: values come back as float32


@FP8
def test_promotion_refused_like_torch(dt) -> None:
    assert least_upper_dtype(dt, dt) == dt
    others = {
        dtypes.float32: torch.float32,
        dtypes.half: torch.half,
        dtypes.int32: torch.int32,
        dtypes.bool: torch.bool,
    }
    others.update({d: TORCH[d] for d in FP8S if d != dt})
    for other, torch_other in others.items():
        with pytest.raises(TypeError, match="fp8"):
            least_upper_dtype(dt, other)
        with pytest.raises(RuntimeError, match="Promotion for Float8"):
            torch.promote_types(TORCH[dt], torch_other)


# ----- the host reference (constant folding, Tensor creation, numpy())


@FP8
def test_host_reference_matches_torch(dt) -> None:
    ref = _torch_decode_bits(dt)
    assert [fp8_decode_bits(c, dt) for c in range(256)] == ref.tolist()
    assert (fp8_decode_np(np.arange(256, dtype=np.uint8), dt).view(np.uint32) == ref).all()
    x = _sweep(dt)
    np.testing.assert_array_equal(fp8_encode_np(x, dt), _torch_encode(x, dt))
    some = x[:: max(1, len(x) // 3000)]
    assert [fp8_encode(float(v), dt) for v in some] == _torch_encode(some, dt).tolist()
    assert fp8_encode(1e300, dt) == fp8_encode(np.inf, dt) and np.isnan(fp8_decode(0x7F, dt))


# ----- on the devices: the kernels' bit manipulation


@FP8
def test_decode_every_code(device: str, dt) -> None:
    codes = Tensor(np.arange(256, dtype=np.uint8), device=device).bitcast(dt)
    got = codes.float().numpy().view(np.uint32)
    np.testing.assert_array_equal(got, _torch_decode_bits(dt))


@FP8
def test_encode_sweep(device: str, dt) -> None:
    x = _sweep(dt)
    got = Tensor(x, device=device).cast(dt).bitcast(dtypes.uint8).numpy()
    np.testing.assert_array_equal(got, _torch_encode(x, dt))


@FP8
def test_casts_from_and_to_other_dtypes(device: str, dt) -> None:
    codes = np.array([c for c in range(256) if np.isfinite(fp8_decode(c, dt))], np.uint8)
    t, ref = Tensor(codes, device=device).bitcast(dt), torch.from_numpy(codes).view(TORCH[dt])
    for target, tt in ((dtypes.int32, torch.int32), (dtypes.int8, torch.int8), (dtypes.bool, torch.bool),
                       (dtypes.half, torch.half), (dtypes.double, torch.double)):  # fmt: skip
        np.testing.assert_array_equal(t.cast(target).numpy(), ref.to(tt).numpy(), err_msg=str(target))
    np.testing.assert_array_equal(t.cast(dtypes.bfloat16).numpy(), ref.to(torch.bfloat16).float().numpy())
    for other in FP8S:  # fp8 -> fp8: through float32, exact then rounded once
        got = t.cast(other).bitcast(dtypes.uint8).numpy()
        np.testing.assert_array_equal(got, ref.to(TORCH[other]).view(torch.uint8).numpy())
    ints = np.array([0, 1, -1, 7, 17, 300, 449, -465, 60000, 70000, 2**31 - 1, -(2**31)], np.int32)
    got = Tensor(ints, device=device).cast(dt).bitcast(dtypes.uint8).numpy()
    np.testing.assert_array_equal(got, torch.from_numpy(ints).to(TORCH[dt]).view(torch.uint8).numpy())
    doubles = np.array([0.1, 1 / 3, -2.5e-3, 1e40, -1e-300, np.inf, np.nan, 447.99, 57343.9])
    got = Tensor(doubles, device=device, dtype=dtypes.double).cast(dt).bitcast(dtypes.uint8).numpy()
    np.testing.assert_array_equal(got, torch.from_numpy(doubles).to(TORCH[dt]).view(torch.uint8).numpy())
    halves = np.array([0.1, -3.0, 65504.0, np.inf, 6e-8, 1e-5], np.float16)
    got = Tensor(halves, device=device).cast(dt).bitcast(dtypes.uint8).numpy()
    np.testing.assert_array_equal(got, torch.from_numpy(halves).to(TORCH[dt]).view(torch.uint8).numpy())
    flags = Tensor([True, False], device=device).cast(dt).numpy()
    np.testing.assert_array_equal(flags, np.array([1.0, 0.0], np.float32))


@FP8
def test_numpy_round_trip_and_creation(device: str, dt) -> None:
    x = np.array([[0.3, -1.75, 1000.0], [2.0**-12, -0.0, np.nan]], np.float32)
    t = Tensor(x, device=device).cast(dt)
    out = t.numpy()
    assert t.dtype == dt and out.dtype == np.float32 and out.shape == (2, 3)  # numpy() gives float32 values
    expect = torch.from_numpy(x).to(TORCH[dt])
    np.testing.assert_array_equal(out, expect.float().numpy())
    np.testing.assert_array_equal(t.bitcast(dtypes.uint8).numpy(), expect.view(torch.uint8).numpy())  # the bits
    assert np.signbit(out[1, 1]) and np.isnan(out[1, 2])
    made = Tensor(x, device=device, dtype=dt)  # encoded on the host: the same bits as the kernel's cast
    np.testing.assert_array_equal(made.bitcast(dtypes.uint8).numpy(), expect.view(torch.uint8).numpy())
    listed = Tensor([[1.0, 500.0], [-0.01, 3.0]], device=device, dtype=dt)
    expect = torch.tensor([[1.0, 500.0], [-0.01, 3.0]], dtype=TORCH[dt]).float()
    np.testing.assert_array_equal(listed.numpy(), expect.numpy())
    assert listed.tolist() == expect.tolist() and listed[0, 1].item() == expect[0, 1].item()
    # a constant, folded through fp8_encode: converted like .to() (torch.full raises on overflow instead)
    full = Tensor.full((3,), 1e6, dtype=dt, device=device).numpy()
    np.testing.assert_array_equal(full, torch.full((3,), 1e6).to(TORCH[dt]).float().numpy())
    assert Tensor.zeros(0, dtype=dt, device=device).numpy().shape == (0,)
    np.testing.assert_array_equal(Tensor(x, device=device).cast(dt).float().cast(dt).numpy(), t.numpy())


@FP8
def test_movement_and_selection_keep_bits(device: str, dt) -> None:
    codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
    t, ref = Tensor(codes, device=device).bitcast(dt), torch.from_numpy(codes).view(TORCH[dt])

    def bits(x: Tensor) -> np.ndarray:
        return x.bitcast(dtypes.uint8).numpy()

    np.testing.assert_array_equal(bits(t.T.contiguous()), ref.T.contiguous().view(torch.uint8).numpy())
    np.testing.assert_array_equal(bits(t[3:5, ::2]), ref[3:5, ::2].contiguous().view(torch.uint8).numpy())
    np.testing.assert_array_equal(bits(t.pad(((1, 0), (0, 2)))), np.pad(codes, ((1, 0), (0, 2))))
    np.testing.assert_array_equal(bits(t.cat(t, dim=0)), np.concatenate([codes, codes]))
    np.testing.assert_array_equal(bits(t.reshape(256).flip(0)), codes.reshape(256)[::-1])
    cond = Tensor(codes % 3 == 0, device=device)
    other = Tensor(codes[::-1].copy(), device=device).bitcast(dt)
    np.testing.assert_array_equal(bits(cond.where(t, other)), np.where(codes % 3 == 0, codes, codes[::-1]))
    np.testing.assert_array_equal(bits(t.clone()), codes)


@FP8
def test_comparisons_like_torch(device: str, dt) -> None:
    codes = np.arange(256, dtype=np.uint8)
    t, ref = Tensor(codes, device=device).bitcast(dt), torch.from_numpy(codes).view(TORCH[dt])
    flipped = Tensor(codes ^ 0x80, device=device).bitcast(dt)  # -x: +0 == -0, NaN != NaN
    ref_flipped = torch.from_numpy(codes ^ 0x80).view(TORCH[dt])
    np.testing.assert_array_equal((t == t).numpy(), (ref == ref).numpy())
    np.testing.assert_array_equal((t == flipped).numpy(), (ref == ref_flipped).numpy())
    np.testing.assert_array_equal((t != flipped).numpy(), (ref != ref_flipped).numpy())
    np.testing.assert_array_equal((t == 1.0).numpy(), (ref == 1.0).numpy())
    np.testing.assert_array_equal(t.isnan().numpy(), ref.isnan().numpy())


@FP8
def test_arithmetic_refused_like_torch(dt) -> None:
    t, ref = Tensor([1.0, 2.0], dtype=dt), torch.tensor([1.0, 2.0], dtype=TORCH[dt])
    refused = {
        "add": (lambda x: x + x, lambda x: x + x),
        "mul": (lambda x: x * 2.0, lambda x: x * 2.0),
        "neg": (lambda x: -x, lambda x: -x),
        "lt": (lambda x: x < x, lambda x: x < x),
        "exp": (lambda x: x.exp(), lambda x: x.exp()),
        "sum": (lambda x: x.sum(), lambda x: x.sum()),
        "max": (lambda x: x.max(), lambda x: x.max()),
        "div": (lambda x: x / x, lambda x: x / x),
        "maximum": (lambda x: x.maximum(x), lambda x: torch.maximum(x, x)),
    }
    for name, (ours, theirs) in refused.items():
        with pytest.raises(NotImplementedError):
            theirs(ref)
        with pytest.raises(NotImplementedError, match=r"dtypes\.fp8e\dm\d.*t\.float\(\)"):
            ours(t)
        np.testing.assert_allclose(ours(t.float()).numpy(), theirs(ref.float()).numpy(), rtol=1e-6, err_msg=name)
    with pytest.raises(NotImplementedError, match="fp8"):
        t & t
    with pytest.raises(TypeError, match="fp8"):
        t + Tensor([1.0, 2.0])  # promotion, refused by torch too
    assert (t.float() + 1).cast(dt).numpy().tolist() == [2.0, 3.0]  # the fix the message gives


def test_kernels_lowered_without_fp8() -> None:
    """`lower_fp8` leaves uint8 buffers and float32 math only; an op on fp8 values built below the front end
    computes in float32 and rounds once."""
    from tinycore.codegen.decompositions import lower_fp8
    from tinycore.uop.ops import Ops, UOp

    out, inp = UOp.define_global(0, dtypes.fp8e4m3, 4), UOp.define_global(1, dtypes.fp8e4m3, 4)
    i = UOp.range(4, 0)
    x = inp.index(i).load()
    sink = UOp.sink(out.index(i).store(x.alu(Ops.MUL, x)).end(i))
    lowered = lower_fp8(sink)
    seen = {(u.dtype.base if hasattr(u.dtype, "base") else u.dtype).scalar() for u in lowered.toposort()}
    assert not seen & set(FP8S) and dtypes.uint8 in seen and dtypes.float32 in seen
    assert any(u.op is Ops.MUL and u.dtype == dtypes.float32 for u in lowered.toposort())
