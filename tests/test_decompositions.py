"""Decompositions of non-native ops (`tinycore/codegen/decompositions.py`), checked against numpy.

The graphs are evaluated by `evaluate`, a small vectorized numpy interpreter of UOp expression graphs with the
IR's exact dtype semantics: float32 math stays float32, integers wrap, IDIV/MOD truncate like C. It is strict about
C undefined behaviour the decompositions must never rely on (shift counts out of range, float to int casts of NaN
or of out-of-range values), so millions of inputs can be swept per test in a fraction of a second.

`python tests/test_decompositions.py` runs the long sweeps reported in docs/decompositions.md (strided over all
float32 bit patterns, exhaustive for float16/bfloat16).
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable

import numpy as np
import pytest

from tinycore.codegen.decompositions import (
    BASIC_OPS,
    decompose,
    decomposition_rules,
    xexp2,
    xfdiv,
    xidiv,
    xlog2,
    xmod,
    xpow,
    xrecip,
    xsin,
    xsqrt,
    xtrunc,
)
from tinycore.dtype import DType, dtypes
from tinycore.uop.ops import Ops, UOp, exec_alu

# ---------------------------------------------------------------------------------------------------------------
# the numpy evaluator


class UndefinedBehaviour(AssertionError):
    """The graph did something C leaves undefined (a decomposition must never do that, even in unused lanes)."""


def np_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype holding values of `dtype` (bfloat16 is held in float32, index in int64)."""
    scalar = dtype.scalar()
    if scalar == dtypes.bfloat16:
        return np.dtype(np.float32)
    if scalar == dtypes.index:
        return np.dtype(np.int64)
    return dtypes.to_np(scalar)


def round_bf16(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), still held in float32."""
    a = np.asarray(a, np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return np.where(np.isnan(a), a, rounded.view(np.float32))


def _c_idiv(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """C division and remainder (truncating, x/0 = x%0 = 0 as in exec_alu), wrapping like the dtype."""
    zero = b == 0
    bs = np.where(zero, 1, b).astype(a.dtype)
    with np.errstate(all="ignore"):
        q = np.floor_divide(a, bs)  # INT_MIN // -1 wraps to INT_MIN, as in C with wrapping semantics
    r = a - q * bs
    fix = (r != 0) & ((a < 0) != (bs < 0))  # floor and truncation differ: inexact with operands of mixed signs
    q = np.where(fix, q + 1, q).astype(a.dtype)
    q = np.where(zero, 0, q).astype(a.dtype)
    return q, np.where(zero, 0, a - q * bs).astype(a.dtype)


def _cast(a: np.ndarray, src: DType, dst: DType) -> np.ndarray:
    target = np_dtype(dst)
    s, d = src.scalar(), dst.scalar()
    if dtypes.is_float(s) and (dtypes.is_int(d)):
        lo, hi = dtypes.min(d), dtypes.max(d)
        bad = ~np.isfinite(a) | (np.trunc(a.astype(np.float64)) < lo) | (np.trunc(a.astype(np.float64)) > hi)
        if np.any(bad):
            raise UndefinedBehaviour(f"CAST {src} -> {dst} of {a[bad].ravel()[:4]}")
    if d == dtypes.bool:
        return a != 0
    if d == dtypes.bfloat16:
        return round_bf16(a.astype(np.float32))
    return a.astype(target)


def _alu(op: Ops, dtype: DType, srcs: list[np.ndarray], src_dtype: DType, fma: bool = False) -> np.ndarray:
    a = srcs[0]
    is_bool = src_dtype.scalar() == dtypes.bool
    if op is Ops.ADD:
        return a | srcs[1] if is_bool else a + srcs[1]
    if op is Ops.SUB:
        return a - srcs[1]
    if op is Ops.MUL:
        return a & srcs[1] if is_bool else a * srcs[1]
    if op is Ops.FDIV:
        return a / srcs[1]
    if op in (Ops.IDIV, Ops.MOD):
        if dtypes.is_float(dtype):
            q = np.trunc(a / srcs[1])
            return q if op is Ops.IDIV else np.fmod(a, srcs[1])
        q, r = _c_idiv(a, np.broadcast_to(srcs[1], a.shape) if a.shape else srcs[1])
        return q if op is Ops.IDIV else r
    if op is Ops.MAX:
        return np.maximum(a, srcs[1])
    if op is Ops.CMPLT:
        return a < srcs[1]
    if op is Ops.CMPNE:
        return a != srcs[1]
    if op is Ops.CMPEQ:
        return a == srcs[1]
    if op is Ops.AND:
        return a & srcs[1]
    if op is Ops.OR:
        return a | srcs[1]
    if op is Ops.XOR:
        return a ^ srcs[1]
    if op in (Ops.SHL, Ops.SHR):
        bits = 8 * dtype.scalar().itemsize if dtype.scalar() != dtypes.index else 64
        count = srcs[1]
        if np.any((count < 0) | (count >= bits)):
            raise UndefinedBehaviour(f"{op} by {np.unique(count)[:4]} on {bits}-bit values")
        count = count.astype(a.dtype)
        return np.left_shift(a, count) if op is Ops.SHL else np.right_shift(a, count)
    if op is Ops.WHERE:
        return np.where(a, srcs[1], srcs[2])
    if op is Ops.NEG:
        return ~a if is_bool else -a
    if op is Ops.TRUNC:
        return np.trunc(a) if dtypes.is_float(dtype) else a
    if op is Ops.MULACC:
        return _fma_f32(a, srcs[1], srcs[2]) if fma and a.dtype == np.float32 else a * srcs[1] + srcs[2]
    if op is Ops.EXP2:
        return np.exp2(a)
    if op is Ops.LOG2:
        return np.log2(a)
    if op is Ops.SIN:
        return np.sin(a)
    if op is Ops.SQRT:
        return np.sqrt(a)
    if op is Ops.RECIP:
        return 1 / a
    if op is Ops.POW:
        return np.power(a, srcs[1])
    if op is Ops.THREEFRY:  # the reference itself, lane by lane (slow: small inputs only)
        pairs = np.broadcast_arrays(a, srcs[1])
        flat = [exec_alu(op, dtype, (int(p), int(q))) for p, q in zip(pairs[0].ravel(), pairs[1].ravel())]
        return np.array(flat, np.uint64).reshape(pairs[0].shape)
    raise NotImplementedError(f"evaluate: {op}")


def _fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 a*b + c rounded once, like an FMA instruction: the float64 product is exact; the float64 sum is made
    round-to-odd (its exact error from TwoSum picks the direction), so rounding it to float32 is correct."""
    p = np.asarray(a, np.float64) * np.asarray(b, np.float64)
    c64 = np.broadcast_to(np.asarray(c, np.float64), p.shape)
    s = np.asarray(p + c64)
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)
    even = (s.view(np.uint64) & np.uint64(1)) == 0
    fix = np.isfinite(s) & (err != 0) & even
    s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(np.float32)


def evaluate(root: UOp, inputs: dict[UOp, np.ndarray], fma: bool = False) -> np.ndarray:
    """Evaluate the expression graph `root` over numpy arrays: `inputs` maps leaf UOps to arrays (shape (n,), or
    (n, lanes) for vector dtypes). Constants broadcast. Every intermediate keeps its dtype exactly.

    >>> x = UOp(Ops.DEFINE_VAR, dtypes.uint8, (), ("x", 0, 255))
    >>> evaluate(x * 2 + 1, {x: np.array([3, 200], np.uint8)}).tolist()
    [7, 145]
    """
    vals: dict[UOp, np.ndarray] = {}
    order = list(root.toposort())
    users: dict[UOp, int] = {}
    for u in order:
        for s in u.src:
            users[s] = users.get(s, 0) + 1
    with np.errstate(all="ignore"):
        for u in order:
            if u in inputs:
                vals[u] = np.asarray(inputs[u], np_dtype(u.dtype))
                continue
            target = np_dtype(u.dtype)
            if u.op is Ops.CONST or u.op is Ops.VCONST:
                val = np.array([u.arg], dtype=target)
            elif u.op is Ops.CAST:
                val = _cast(vals[u.src[0]], u.src[0].dtype, u.dtype)
            elif u.op is Ops.BITCAST:
                val = np.ascontiguousarray(vals[u.src[0]]).view(target)
            else:
                src_dtype = u.src[1].dtype if u.op is Ops.WHERE else u.src[0].dtype
                val = _alu(u.op, u.dtype, [vals[s] for s in u.src], src_dtype, fma)
            val = np.asarray(val)
            if val.dtype != target:
                if not (val.dtype.kind == target.kind and u.op not in (Ops.CAST, Ops.BITCAST)):
                    raise AssertionError(f"evaluate: {u.op} produced {val.dtype}, expected {target}")
                val = val.astype(target)
            if u.dtype.scalar() == dtypes.bfloat16 and u.op not in (Ops.CAST, Ops.BITCAST):
                val = round_bf16(val)
            vals[u] = val
            for s in u.src:  # free intermediates after their last use: big sweeps stay small in memory
                users[s] -= 1
                if users[s] == 0 and s is not root:
                    del vals[s]
    return vals[root]


def leaf(dtype: DType, name: str = "x") -> UOp:
    """An input of `dtype` (a leaf the evaluator takes from its `inputs`)."""
    return UOp(Ops.DEFINE_VAR, dtype, (), (name, 0, 1))


# ---------------------------------------------------------------------------------------------------------------
# ULP error against a wide reference

FORMATS = {  # dtype: (precision bits, emin, largest finite)
    dtypes.float16: (11, -14, 65504.0),
    dtypes.bfloat16: (8, -126, float(np.float32(3.3895313892515355e38))),
    dtypes.float32: (24, -126, float(np.finfo(np.float32).max)),
    dtypes.float64: (53, -1022, float(np.finfo(np.float64).max)),
}
WIDE = np.longdouble if np.finfo(np.longdouble).nmant >= 63 else np.float64


def round_to(ref: np.ndarray, dtype: DType) -> np.ndarray:
    """The reference rounded to `dtype` (held in its numpy dtype)."""
    if dtype == dtypes.bfloat16:
        return round_bf16(np.asarray(ref, np.float64).astype(np.float32))
    return np.asarray(ref).astype(np_dtype(dtype))


def ulp_errors(got: np.ndarray, ref: np.ndarray, dtype: DType) -> np.ndarray:
    """|got - ref| in ULPs of the exact value `ref` (wide precision) in `dtype`; inf where special values differ
    from the correctly rounded reference (NaN, +-inf, zeros with their sign)."""
    prec, emin, _ = FORMATS[dtype]
    with np.errstate(all="ignore"):
        rounded = round_to(ref, dtype)
        got_w = np.asarray(got).astype(WIDE)
        ref_w = np.asarray(ref).astype(WIDE)
        _, ex = np.frexp(np.abs(ref_w))
        ulp = np.ldexp(np.ones_like(ref_w), np.maximum(ex - 1, emin) - (prec - 1))
        err = np.abs(got_w - ref_w) / ulp
        special = np.isnan(rounded) | np.isinf(rounded) | (rounded == 0)
        same = (np.isnan(rounded) & np.isnan(got)) | (
            (rounded == got) & (np.signbit(rounded) == np.signbit(np.asarray(got)))
        )
        err = np.where(special, np.where(same, 0.0, np.inf), err)
        err = np.where(~special & ~np.isfinite(np.asarray(got, np.float64)), np.inf, err)
    return np.asarray(err, np.float64)


def float_samples(dtype: DType, stride: int, seed: int = 0) -> np.ndarray:
    """Strided bit patterns over the whole range of `dtype` (all of them for 16-bit types with stride 1), plus
    sampled denormals of both signs and the special values."""
    rng = np.random.default_rng(seed)
    if dtype in (dtypes.float16, dtypes.bfloat16):
        bits = np.arange(0, 1 << 16, stride, dtype=np.uint32).astype(np.uint16)
        if dtype == dtypes.float16:
            return bits.view(np.float16)
        return (bits.astype(np.uint32) << 16).view(np.float32)
    nbits = 32 if dtype == dtypes.float32 else 64
    udt, fdt = (np.uint32, np.float32) if nbits == 32 else (np.uint64, np.float64)
    start = int(rng.integers(0, stride))
    if nbits == 32:
        bits = np.arange(start, 1 << 32, stride, dtype=np.uint64).astype(udt)
    else:
        bits = (np.arange(0, 1 << 20, dtype=np.uint64) * np.uint64(stride) + np.uint64(start)).astype(udt)
        bits = np.concatenate([bits, rng.integers(0, 1 << 63, 1 << 14, dtype=np.uint64) * np.uint64(2)])
    mbits = 23 if nbits == 32 else 52
    den = rng.integers(1, 1 << mbits, 4096, dtype=np.uint64).astype(udt)
    den = np.concatenate([den, den | udt(1 << (nbits - 1))])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0], dtype=fdt)
    return np.concatenate([bits.view(fdt), den.view(fdt), special])


def run_unary(builder: Callable[[UOp], UOp], dtype: DType, xs: np.ndarray, fma: bool = False) -> np.ndarray:
    """The builder's graph for `dtype` evaluated on xs (`fma`: float32 MULACC rounds once, like FMA hardware)."""
    x = leaf(dtype)
    return evaluate(builder(x), {x: xs}, fma)


def wide(xs: np.ndarray, dtype: DType) -> np.ndarray:
    """Inputs converted exactly to the wide reference precision."""
    return np.asarray(xs).astype(np.float64 if dtype != dtypes.float64 else WIDE)


REFERENCES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp2": np.exp2,
    "log2": np.log2,
    "sin": np.sin,
    "sqrt": np.sqrt,
    "recip": lambda a: 1 / a,
}
BUILDERS: dict[str, Callable[[UOp], UOp]] = {
    "exp2": xexp2,
    "log2": xlog2,
    "sin": xsin,
    "sqrt": xsqrt,
    "recip": xrecip,
}


def unary_errors(name: str, dtype: DType, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ULP errors, outputs) of decomposition `name` on xs."""
    got = run_unary(BUILDERS[name], dtype, xs)
    with np.errstate(all="ignore"):
        ref = REFERENCES[name](wide(xs, dtype))
    return ulp_errors(got, ref, dtype), got


def worst(errs: np.ndarray, xs: np.ndarray) -> str:
    """'max E ULP at x=X' for the largest error."""
    i = int(np.argmax(errs))
    return f"max {errs[i]:.3f} ULP at x={xs.ravel()[i]!r}"


def pow_samples(dtype: DType, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) pairs whose x**y is mostly finite and non-zero: x over the whole positive range with y chosen so that
    y*log2(x) spans the representable range (over/underflow edges included), x near 1 with large y, and negative
    x with integer y."""
    rng = np.random.default_rng(seed)
    fd = np_dtype(dtype)
    _, emin, _ = FORMATS[dtype]
    lo, hi = (emin - 30, 130) if dtype != dtypes.float64 else (-1080, 1026)
    if dtype == dtypes.bfloat16:
        lo, hi = -133, 128
    if dtype == dtypes.float16:
        lo, hi = -26, 17
    with np.errstate(all="ignore"):
        x1 = np.exp2(rng.uniform(lo + 4, hi - 2, n)).astype(fd)
        y1 = (rng.uniform(lo, hi, n) / np.log2(x1.astype(np.float64))).astype(fd)
        x2 = (1 + rng.uniform(-1e-3, 1e-3, n)).astype(fd)
        y2 = (rng.uniform(lo, hi, n) / np.log2(x2.astype(np.float64))).astype(fd)
        x3 = (-rng.uniform(0.5, 2, n)).astype(fd)
        y3 = np.round(rng.uniform(-100, 100, n)).astype(fd)
    xs, ys = np.concatenate([x1, x2, x3]), np.concatenate([y1, y2, y3])
    if dtype == dtypes.bfloat16:
        xs, ys = round_bf16(xs), round_bf16(ys)
    return xs, ys


SPECIAL_OPERANDS = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -0.5,
    2.0,
    -2.0,
    3.0,
    -3.0,
    2.5,
    -2.5,
    1e-30,
    -1e-30,
    7.0,
    -7.0,
    np.inf,
    -np.inf,
    np.nan,
    1e30,
    -1e30,
    1.5,
    0.75,
]


def special_pairs(dtype: DType) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of special operands (zeros, ones, halves, odd/even integers, infinities, NaN...)."""
    with np.errstate(over="ignore"):
        vals = np.array(SPECIAL_OPERANDS, np.float64).astype(np_dtype(dtype))
    if dtype == dtypes.bfloat16:
        vals = round_bf16(vals)
    a, b = np.meshgrid(vals, vals)
    return a.ravel(), b.ravel()


def run_binary(builder: Callable[[UOp, UOp], UOp], dtype: DType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The builder's graph for `dtype` evaluated on pairs (a, b)."""
    x, y = leaf(dtype, "x"), leaf(dtype, "y")
    return np.broadcast_to(evaluate(builder(x, y), {x: a, y: b}), np.shape(a))


def binary_errors(name: str, dtype: DType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ULP errors of `xpow` / `xfdiv` on pairs against numpy in wide precision."""
    builder, ref_fn = {"pow": (xpow, np.power), "fdiv": (xfdiv, np.divide)}[name]
    got = run_binary(builder, dtype, a, b)
    with np.errstate(all="ignore"):
        ref = ref_fn(wide(a, dtype), wide(b, dtype))
    return ulp_errors(got, ref, dtype)


# ---------------------------------------------------------------------------------------------------------------
# the evaluator itself


def test_evaluator_matches_exec_alu() -> None:
    rng = np.random.default_rng(0)
    cases = [
        (Ops.ADD, dtypes.int8), (Ops.MUL, dtypes.int16), (Ops.SUB, dtypes.uint8), (Ops.IDIV, dtypes.int32),
        (Ops.MOD, dtypes.int32), (Ops.IDIV, dtypes.int8), (Ops.MOD, dtypes.int8), (Ops.IDIV, dtypes.uint16),
        (Ops.SHR, dtypes.int16), (Ops.SHL, dtypes.uint32), (Ops.MAX, dtypes.int64), (Ops.XOR, dtypes.uint64),
        (Ops.ADD, dtypes.float32), (Ops.MUL, dtypes.float16), (Ops.FDIV, dtypes.float32),
    ]  # fmt: skip
    for op, dt in cases:
        nd = np_dtype(dt)
        if dtypes.is_float(dt):
            a = rng.standard_normal(300).astype(nd) * 100
            b = rng.standard_normal(300).astype(nd)
        else:
            info = np.iinfo(nd)
            a = rng.integers(info.min, info.max, 300, dtype=nd, endpoint=True)
            b = rng.integers(info.min, info.max, 300, dtype=nd, endpoint=True)
            a[:4] = [info.min, info.min, info.max, 0]
            b[:4] = [-1 if info.min < 0 else 1, 0, 1, 0]
            if op in (Ops.SHL, Ops.SHR):
                b = (b.astype(np.int64) % (8 * nd.itemsize)).astype(nd)
        x, y = leaf(dt, "x"), leaf(dt, "y")
        got = evaluate(x.alu(op, y), {x: a, y: b})
        ref = [exec_alu(op, dt, (p.item(), q.item())) for p, q in zip(a, b)]
        assert np.array_equal(got, np.array(ref, nd)), (op, dt)


def test_evaluator_keeps_float32_and_rejects_undefined_behaviour() -> None:
    x = leaf(dtypes.float32)
    out = evaluate(x * 3.0 + 1e-8, {x: np.array([1.0, 2.0], np.float32)})
    assert out.dtype == np.float32 and out.tolist() == [3.0, 6.0]  # 1e-8 vanishes in float32, not in float64
    with pytest.raises(UndefinedBehaviour):
        evaluate(x.cast(dtypes.int32), {x: np.array([np.nan], np.float32)})
    with pytest.raises(UndefinedBehaviour):
        evaluate(x.cast(dtypes.int8), {x: np.array([300.0], np.float32)})
    i = leaf(dtypes.int32)
    with pytest.raises(UndefinedBehaviour):
        evaluate(i << 32, {i: np.array([1], np.int32)})


def test_ulp_metric() -> None:
    one = np.float32(1.0)
    nxt = np.nextafter(one, np.float32(2))
    errs = ulp_errors(np.array([one, nxt, 0.0, -0.0, np.inf], np.float32),
                      np.array([1.0, 1.0, 0.0, 0.0, np.inf]), dtypes.float32)  # fmt: skip
    assert errs.tolist() == [0.0, 1.0, 0.0, np.inf, 0.0]  # -0 vs +0 is a special-value mismatch
    assert ulp_errors(np.array([2.0**-149], np.float32), np.array([0.0]), dtypes.float32)[0] == np.inf
    assert ulp_errors(np.array([2.0**-149], np.float32), np.array([1.4 * 2.0**-149]), dtypes.float32)[0] == (
        pytest.approx(0.4)
    )


# ---------------------------------------------------------------------------------------------------------------
# accuracy over the whole float range (bounds: the worst case measured by the long sweeps of docs/decompositions.md)

HALF = 0.5 + 1e-6  # correctly rounded (the reference itself is rounded at 2^-53 or 2^-64 relative)
HALF16 = 0.5 + 2.0**-12  # 16-bit types: correctly rounded float32 results rounded again (double rounding)
DENORMAL_DOUBLE = 0.75 + 1e-6  # results in the denormal range are rounded twice (to p bits, then to the grid)
ULP_BOUNDS = {  # function: {dtype: max ULP error}, the worst case of the long sweeps (docs/decompositions.md)
    "exp2": {dtypes.float32: 1.08, dtypes.float64: 0.85, dtypes.float16: HALF16, dtypes.bfloat16: HALF16},
    "log2": {dtypes.float32: 1.08, dtypes.float64: HALF, dtypes.float16: HALF16, dtypes.bfloat16: HALF16},
    "sin": {dtypes.float32: 0.81, dtypes.float64: 0.8, dtypes.float16: HALF16, dtypes.bfloat16: HALF16},
    "sqrt": {dtypes.float32: HALF, dtypes.float64: HALF, dtypes.float16: HALF16, dtypes.bfloat16: HALF16},
    "recip": {dtypes.float32: DENORMAL_DOUBLE, dtypes.float64: DENORMAL_DOUBLE, dtypes.float16: HALF16,
              dtypes.bfloat16: HALF16},
    "pow": {dtypes.float32: 0.78, dtypes.float64: 0.8, dtypes.float16: HALF16, dtypes.bfloat16: HALF16},
    "fdiv": {dtypes.float32: DENORMAL_DOUBLE, dtypes.float64: DENORMAL_DOUBLE, dtypes.float16: HALF16,
             dtypes.bfloat16: HALF16},
}  # fmt: skip
SWEEP_STRIDE = {dtypes.float32: 4099, dtypes.float64: 1 << 47, dtypes.float16: 1, dtypes.bfloat16: 1}

BOUNDARIES = {
    "exp2": [127.99, 127.99999, 128.0, 128.00002, 127.5, -126.0, -126.5, -149.0, -149.5, -149.9, -150.0, -150.0001,
             -151.0, -160.0, 1023.99, 1024.0, -1074.0, -1074.5, -1075.0, -1075.5, 15.99, 16.0, -24.0, -25.0, 0.5,
             -0.5, 1e-30, -1e-30, 0.49999997, -0.49999997],
    "log2": [2.0**-149, 3 * 2.0**-149, 2.0**-127, 2.0**-126, 2.0**-1074, 2.0**-1022, 1 - 2.0**-24, 1 + 2.0**-23,
             1 - 2.0**-53, 1 + 2.0**-52, 0.70710677, 0.7071068, 1.4142135, 1.4142137, 2.0**127, 3.4e38, 65504.0,
             6e-8, 0.9999, 1.0001],
    "sin": [np.pi, 2 * np.pi, np.pi / 2, 1e4 * np.pi, 8191.9, 8192.0, 8192.01, 1048575.9, 1048576.0, 1e30, -1e30,
            3.4028235e38, 1.7976931348623157e308, 1e300, 22.0, 355.0, 103993.0, 2.0**-149, 1e-40, 65504.0,
            16367173.0 * 2.0**72, 6381956970095103.0 * 2.0**797],
    "sqrt": [2.0**-149, 2.0**-148, 2.0**-1074, 2.0**-1022, 3.4028235e38, 1.7976931348623157e308, 2.0, 0.5,
             1 - 2.0**-24, 1 + 2.0**-23, 2.0**-32, 2.0**32, 2.0**127],
    "recip": [2.0**-128, 2.0**-128 + 2.0**-149, 2.0**-127, 2.0**-126, 2.0**126, 2.0**127, 3.4028235e38, 2.0**-149,
              2.0**-1022, 2.0**-1023, 2.0**-1024 + 2.0**-1074, 2.0**1022, 1.7976931348623157e308, 3.0, 1 / 3],
}  # fmt: skip


def boundary_values(name: str, dtype: DType) -> np.ndarray:
    """The boundary inputs of `name` (and their negatives, and the floats next to them) in `dtype`."""
    with np.errstate(all="ignore"):
        base = np.array(BOUNDARIES[name], np.float64).astype(np_dtype(dtype))
        if dtype == dtypes.bfloat16:
            base = round_bf16(base)
        near = [base, np.nextafter(base, base.dtype.type(np.inf)), np.nextafter(base, base.dtype.type(-np.inf))]
        if name == "sin":  # the floats nearest to multiples of pi/2, the hardest reductions
            k = np.arange(1, 2000, dtype=np.float64)
            near.append((k * (np.pi / 2)).astype(base.dtype))
        out = np.concatenate(near)
        return np.concatenate([out, -out])


DOMAINS = {  # where bit-pattern sweeps are thin but results are interesting: (low, high) per dtype kind
    "exp2": {32: [(-152.0, 129.0), (-1.0, 1.0)], 64: [(-1077.0, 1025.0), (-1.0, 1.0)]},
    "log2": {32: [(0.5, 2.0), (0.999, 1.001)], 64: [(0.5, 2.0), (0.999, 1.001)]},
    "sin": {32: [(-10.0, 10.0), (-1e5, 1e5)], 64: [(-10.0, 10.0), (-1e7, 1e7)]},
    "sqrt": {32: [(0.25, 4.0)], 64: [(0.25, 4.0)]},
    "recip": {32: [(0.5, 2.0)], 64: [(0.5, 2.0)]},
}


def domain_samples(name: str, dtype: DType, n: int, seed: int = 2) -> np.ndarray:
    """`n` uniform samples in each interesting interval of `name` (empty for 16-bit types: they are exhaustive)."""
    if dtype in (dtypes.float16, dtypes.bfloat16):
        return np.zeros(0, np_dtype(dtype))
    rng = np.random.default_rng(seed)
    parts = [rng.uniform(lo, hi, n) for lo, hi in DOMAINS[name][8 * dtype.itemsize]]
    return np.concatenate(parts).astype(np_dtype(dtype))


def sweep_samples(name: str, dtype: DType) -> np.ndarray:
    """The test sweep of `name` in `dtype`: strided bit patterns, boundaries and interval samples."""
    stride = SWEEP_STRIDE[dtype]
    xs = float_samples(dtype, stride) if dtype != dtypes.float64 else float_samples_f64(stride)
    return np.concatenate([xs, boundary_values(name, dtype), domain_samples(name, dtype, 1 << 14)])


def float_samples_f64(stride: int) -> np.ndarray:
    """A smaller float64 sweep for the tests: strided bit patterns, random patterns, denormals, specials."""
    rng = np.random.default_rng(1)
    bits = np.arange(0, 1 << 17, dtype=np.uint64) * np.uint64(stride) + np.uint64(int(rng.integers(0, stride)))
    rand = rng.integers(0, 1 << 63, 1 << 13, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, 1 << 13, np.uint64)
    den = rng.integers(1, 1 << 52, 1024, dtype=np.uint64)
    den = np.concatenate([den, den | np.uint64(1 << 63)])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0])
    return np.concatenate([np.concatenate([bits, rand, den]).view(np.float64), special])


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16])
def test_unary_accuracy_and_special_values(name: str, dtype: DType) -> None:
    xs = sweep_samples(name, dtype)
    errs, _ = unary_errors(name, dtype, xs)
    assert np.isfinite(errs).all(), f"special values differ from numpy at x={xs[~np.isfinite(errs)][:8]}"
    assert errs.max() <= ULP_BOUNDS[name][dtype], worst(errs, xs)


def test_special_values_exactly_like_numpy() -> None:
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -(2.0**-149), 2.0**-149, 1.0], np.float32)
    for name in BUILDERS:
        got = run_unary(BUILDERS[name], dtypes.float32, specials)
        with np.errstate(all="ignore"):
            ref = REFERENCES[name](specials.astype(np.float64)).astype(np.float32)
        same = (np.isnan(got) & np.isnan(ref)) | ((got == ref) & (np.signbit(got) == np.signbit(ref)))
        assert same.all(), (name, specials[~same], got[~same], ref[~same])
    # the documented edges, exactly
    exp2 = run_unary(xexp2, dtypes.float32, np.array([128.0, 127.99999, -149.0, -150.0, -149.5, -140.0], np.float32))
    assert exp2[0] == np.inf and np.isfinite(exp2[1]) and exp2[2] == 2.0**-149 and exp2[3] == 0.0
    assert exp2[4] == 2.0**-149 and exp2[5] == 2.0**-140  # a denormal result, exact
    log2 = run_unary(xlog2, dtypes.float32, np.array([2.0**-149, 2.0**-140, 1.0, 1 + 2.0**-23], np.float32))
    assert log2[:3].tolist() == [-149.0, -140.0, 0.0] and log2[3] == np.float32(np.log2(1 + 2.0**-23))


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16])
def test_pow(dtype: DType) -> None:
    n = {dtypes.float32: 1 << 15, dtypes.float64: 1 << 12, dtypes.float16: 1 << 14, dtypes.bfloat16: 1 << 14}[dtype]
    a, b = pow_samples(dtype, n)
    errs = binary_errors("pow", dtype, a, b)
    assert np.isfinite(errs).all(), (
        f"special values differ at {list(zip(a[~np.isfinite(errs)], b[~np.isfinite(errs)]))[:5]}"
    )
    bound = ULP_BOUNDS["pow"][dtype]
    assert errs.max() <= bound, worst(errs, a)
    # every combination of special operands: NaN, infinities, zeros and signs exactly as numpy (C99 pow)
    sa, sb = special_pairs(dtype)
    errs = binary_errors("pow", dtype, sa, sb)
    bad = ~(errs <= bound)
    assert not bad.any(), list(zip(sa[bad], sb[bad]))[:8]


def test_pow_special_cases_match_torch() -> None:
    """PyTorch is the project's oracle: torch.pow on every pair of special operands (NaN, infinities, signed zeros,
    negative bases with odd/even/non-integer exponents) gives the same specials and values within the ULP bound."""
    torch = pytest.importorskip("torch")
    a, b = special_pairs(dtypes.float32)
    got = run_binary(xpow, dtypes.float32, a, b)
    ref = torch.pow(torch.from_numpy(a.copy()), torch.from_numpy(b.copy())).numpy()
    errs = ulp_errors(got, ref.astype(np.float64), dtypes.float32)  # torch's own float32 rounding: allow 1 ULP more
    bad = ~(errs <= ULP_BOUNDS["pow"][dtypes.float32] + 1)
    assert not bad.any(), list(zip(a[bad], b[bad], got[bad], ref[bad]))[:8]


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16])
def test_fdiv(dtype: DType) -> None:
    xs = sweep_samples("recip", dtype)[:: 1 if dtype in (dtypes.float32, dtypes.float64) else 2]
    ys = np.random.default_rng(3).permutation(xs)
    sa, sb = special_pairs(dtype)
    a, b = np.concatenate([xs, sa]), np.concatenate([ys, sb])
    errs = binary_errors("fdiv", dtype, a, b)
    assert np.isfinite(errs).all(), list(zip(a[~np.isfinite(errs)], b[~np.isfinite(errs)]))[:5]
    assert errs.max() <= ULP_BOUNDS["fdiv"][dtype], worst(errs, a)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16])
def test_trunc_is_exact(dtype: DType) -> None:
    xs = sweep_samples("sqrt", dtype)
    got = run_unary(xtrunc, dtype, xs)
    with np.errstate(all="ignore"):
        ref = np.trunc(xs)
    assert np.array_equal(got, ref, equal_nan=True) and np.array_equal(np.signbit(got), np.signbit(ref))


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64])
def test_decompositions_survive_symbolic_simplification(dtype: DType) -> None:
    from tinycore.uop.patterns import graph_rewrite
    from tinycore.uop.symbolic import symbolic

    xs = float_samples(dtype, 1 << 16 if dtype == dtypes.float32 else 1 << 52)[::4]
    x = leaf(dtype)
    for name, builder in BUILDERS.items():
        graph = builder(x)
        simplified = graph_rewrite(graph, symbolic)
        a, b = evaluate(graph, {x: xs}), evaluate(simplified, {x: xs})
        assert np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}")), name  # bit-identical


def test_exp2_stays_cheap() -> None:
    """float32 exp2 is the op softmax spends its time in: a short graph with no float-to-int conversion."""
    graph = xexp2(leaf(dtypes.float32))
    ops = [u for u in graph.toposort() if u.op not in (Ops.CONST, Ops.DEFINE_VAR)]
    assert len(ops) <= 36
    assert not any(u.op is Ops.CAST and dtypes.is_float(u.src[0].dtype) and dtypes.is_int(u.dtype) for u in ops)


def test_vector_dtypes_match_scalar_lanes() -> None:
    xs = float_samples(dtypes.float32, 1 << 20)
    xs = xs[: len(xs) // 4 * 4]
    for name in ("exp2", "sin", "recip"):
        scalar = run_unary(BUILDERS[name], dtypes.float32, xs)
        vec = run_unary(BUILDERS[name], dtypes.float32.vec(4), xs.reshape(-1, 4))
        assert vec.shape == (len(xs) // 4, 4)
        assert np.array_equal(vec.ravel().view(np.uint32), scalar.view(np.uint32)), name


# ---------------------------------------------------------------------------------------------------------------
# integer division and remainder


def c_divmod(a: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The reference: C truncating division of an array by a constant (checked against exec_alu below)."""
    return _c_idiv(a, np.array([d], a.dtype))


def check_const_divisors(dtype: DType, xs: np.ndarray, divisors: list[int]) -> None:
    x = leaf(dtype)
    for d in divisors:
        q_ref, r_ref = c_divmod(xs, d)
        q = np.broadcast_to(evaluate(xidiv(x, d), {x: xs}), xs.shape)
        r = np.broadcast_to(evaluate(xmod(x, d), {x: xs}), xs.shape)
        if not (np.array_equal(q, q_ref) and np.array_equal(r, r_ref)):
            i = int(np.nonzero((q != q_ref) | (r != r_ref))[0][0])
            raise AssertionError(f"{dtype} {xs[i]} / {d}: got ({q[i]}, {r[i]}), want ({q_ref[i]}, {r_ref[i]})")


def test_c_division_reference_is_exec_alu() -> None:
    rng = np.random.default_rng(5)
    for dt in (dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint64):
        info = np.iinfo(np_dtype(dt))
        xs = rng.integers(info.min, info.max, 200, dtype=np_dtype(dt), endpoint=True)
        xs[:2] = [info.min, info.max]
        for d in (int(info.min), -1, 0, 1, 7, -7, int(info.max)):
            if not info.min <= d <= info.max:
                continue
            q, r = c_divmod(xs, d)
            assert q.tolist() == [exec_alu(Ops.IDIV, dt, (int(v), d)) for v in xs]
            assert r.tolist() == [exec_alu(Ops.MOD, dt, (int(v), d)) for v in xs]


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8])
def test_division_by_constants_exhaustive_8bit(dtype: DType) -> None:
    info = np.iinfo(np_dtype(dtype))
    xs = np.arange(info.min, info.max + 1).astype(np_dtype(dtype))
    check_const_divisors(dtype, xs, list(range(info.min, info.max + 1)))  # every dividend by every divisor


@pytest.mark.parametrize("dtype", [dtypes.int16, dtypes.uint16])
def test_division_by_constants_exhaustive_16bit(dtype: DType) -> None:
    info = np.iinfo(np_dtype(dtype))
    xs = np.arange(info.min, info.max + 1).astype(np_dtype(dtype))
    divisors = [*range(-40, 41), 100, 641, 1000, 7919, -7919, 4096, -4096, 32767, -32768, -32767, 65535, 65534]
    check_const_divisors(dtype, xs, [d for d in divisors if info.min <= d <= info.max])


@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64])
def test_division_by_constants_random_wide(dtype: DType) -> None:
    nd = np_dtype(dtype)
    info = np.iinfo(nd)
    rng = np.random.default_rng(11)
    edges = [info.min, info.min + 1, info.max, info.max - 1, 0, 1, 2]
    xs = np.concatenate([rng.integers(info.min, info.max, 1 << 13, dtype=nd, endpoint=True),
                         np.array(edges, nd), np.arange(-200, 200).astype(nd)])  # fmt: skip
    bits = 8 * nd.itemsize
    divisors = [0, 1, 2, 3, 5, 6, 7, 10, 25, 641, 6700417, 1 << 20, 1000000007, 3**19, (1 << 31) - 1,
                info.max, info.max - 1, info.max // 3, (1 << (bits - 1)) + 1 if info.min == 0 else 3]  # fmt: skip
    if info.min < 0:
        divisors += [-1, -2, -3, -7, -1000, -(1 << 30), info.min, info.min + 1]
    divisors += [int(v) for v in rng.integers(info.min, info.max, 12, dtype=nd, endpoint=True)]
    check_const_divisors(dtype, xs, [d for d in divisors if info.min <= d <= info.max])


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.uint64])
def test_division_by_variables(dtype: DType) -> None:
    nd = np_dtype(dtype)
    info = np.iinfo(nd)
    if nd.itemsize == 1:  # every pair
        a, b = np.meshgrid(np.arange(info.min, info.max + 1), np.arange(info.min, info.max + 1))
        a, b = a.ravel().astype(nd), b.ravel().astype(nd)
    else:
        rng = np.random.default_rng(13)
        a = rng.integers(info.min, info.max, 4000, dtype=nd, endpoint=True)
        b = rng.integers(info.min, info.max, 4000, dtype=nd, endpoint=True) >> nd.type(
            rng.integers(0, 8 * nd.itemsize - 1, 4000)
        )
        a[:6], b[:6] = [info.min, info.min, info.max, 5, 0, 7], [-1 if info.min else 1, info.min, 0, 0, 3, info.max]
    x, y = leaf(dtype, "x"), leaf(dtype, "y")
    q_ref, r_ref = _c_idiv(a, b)
    assert np.array_equal(evaluate(xidiv(x, y), {x: a, y: b}), q_ref)
    assert np.array_equal(evaluate(xmod(x, y), {x: a, y: b}), r_ref)


def test_index_division_uses_value_ranges() -> None:
    for lo, hi in ((0, 5000), (-3000, 3000), (-20000, 10)):
        x = UOp.variable("i", lo, hi)
        xs = np.arange(lo, hi + 1, dtype=np.int64)
        for d in (1, -1, 2, 8, -8, 3, 7, -7, 100, 641):
            q, r = xidiv(x, d), xmod(x, d)
            assert q is not None and r is not None
            assert not {Ops.IDIV, Ops.MOD} & {u.op for u in q.toposort() | r.toposort()}
            q_ref, r_ref = c_divmod(xs, d)
            assert np.array_equal(np.broadcast_to(evaluate(q, {x: xs}), xs.shape), q_ref), (lo, hi, d)
            assert np.array_equal(np.broadcast_to(evaluate(r, {x: xs}), xs.shape), r_ref), (lo, hi, d)
    big = UOp.variable("j", 0, 1 << 40)
    assert xidiv(big, 7) is None and xmod(big, 7) is None  # the magic product could pass 2^31: left alone
    assert xidiv(big, 8) is not None and xmod(big, 8) is not None  # shifts and masks don't care
    assert decompose(big // 7, BASIC_OPS).op is Ops.IDIV


def test_native_index_division_by_a_power_of_two_becomes_a_shift() -> None:
    """A renderer with native IDIV/MOD still gets ``x // 2^k`` and ``x % 2^k`` of a never-negative index as a shift
    and a mask (its signed division would have to round negatives toward zero); anything else stays native."""
    native = {"IDIV", "MOD"}
    x, y = UOp.variable("i", 0, 5000), UOp.variable("j", -50, 5000)
    xs = np.arange(0, 5001, dtype=np.int64)
    q, r = decompose(x // 16, native), decompose(x % 16, native)
    assert q.op is Ops.SHR and r.op is Ops.AND
    assert np.array_equal(evaluate(q, {x: xs}), xs // 16) and np.array_equal(evaluate(r, {x: xs}), xs % 16)
    assert decompose(y // 16, native).op is Ops.IDIV  # may be negative: C rounding needs the real division
    assert decompose(x // 12, native).op is Ops.IDIV and decompose(x % 12, native).op is Ops.MOD
    sized = UOp.variable("k", 0, 100, dtypes.int32)
    assert decompose(sized // 4, native).op is Ops.IDIV  # only index arithmetic, whose range is exact


def test_threefry_matches_exec_alu() -> None:
    from tinycore.codegen.decompositions import xthreefry

    rng = np.random.default_rng(17)
    xs = rng.integers(0, 1 << 64, 500, dtype=np.uint64)
    ks = rng.integers(0, 1 << 64, 500, dtype=np.uint64)
    xs[:2], ks[:2] = [0, (1 << 64) - 1], [0, (1 << 64) - 1]
    x, k = leaf(dtypes.uint64, "x"), leaf(dtypes.uint64, "k")
    got = evaluate(xthreefry(x, k), {x: xs, k: ks})
    assert got.tolist() == [exec_alu(Ops.THREEFRY, dtypes.uint64, (int(a), int(b))) for a, b in zip(xs, ks)]
    xv, kv = leaf(dtypes.uint64.vec(4), "xv"), leaf(dtypes.uint64.vec(4), "kv")  # upcast kernels have vectors
    out = decompose(xv.alu(Ops.THREEFRY, kv), BASIC_OPS)
    assert Ops.THREEFRY not in {u.op for u in out.toposort()}
    assert np.array_equal(evaluate(out, {xv: xs[:100].reshape(-1, 4), kv: ks[:100].reshape(-1, 4)}).ravel(), got[:100])


# ---------------------------------------------------------------------------------------------------------------
# the rules


def test_rules_are_cached_per_native_set_and_check_names() -> None:
    pm = decomposition_rules(frozenset({"ADD", "MUL", "EXP2"}))
    assert decomposition_rules({"EXP2", "MUL", "ADD"}) is pm
    assert decomposition_rules(["RECIPROCAL"]) is decomposition_rules(["RECIP"])  # an alias some renderers use
    assert decomposition_rules(BASIC_OPS) is not pm
    with pytest.raises(ValueError, match="EXPP"):
        decomposition_rules({"EXPP"})
    x = leaf(dtypes.float32)
    assert decompose(x.alu(Ops.EXP2), {"EXP2"}) is x.alu(Ops.EXP2)  # native: untouched
    assert Ops.EXP2 not in {u.op for u in decompose(x.alu(Ops.EXP2), {"LOG2"}).toposort()}


def _every_op_graph(x: UOp, y: UOp) -> UOp:
    f = (x.alu(Ops.EXP2) + x.alu(Ops.LOG2) * x.alu(Ops.SIN) - x.alu(Ops.SQRT)).alu(Ops.MAX, y.alu(Ops.RECIP))
    f = (f / y).alu(Ops.POW, y).alu(Ops.MULACC, x, -x) + x.alu(Ops.TRUNC)
    return f.alu(Ops.CMPEQ, x).where(f, f * 2.0)


def test_decompose_leaves_only_basic_ops_and_keeps_values() -> None:
    rng = np.random.default_rng(19)
    xs = rng.uniform(0.1, 3, 4000).astype(np.float32)
    ys = rng.uniform(0.5, 2, 4000).astype(np.float32)
    x, y = leaf(dtypes.float32, "x"), leaf(dtypes.float32, "y")
    i = leaf(dtypes.int32, "i")
    ints = (i // 7 + i % -3 - i // 8 + (i % 16) * i // i).alu(Ops.MAX, -i)
    u = i.cast(dtypes.uint64)
    ints = ints + u.alu(Ops.THREEFRY, u * 3).cast(dtypes.int32)
    graph = UOp.sink(_every_op_graph(x, y), ints)
    out = decompose(graph, BASIC_OPS)
    assert {u.op.name for u in out.toposort()} <= BASIC_OPS | {"CONST", "DEFINE_VAR", "SINK"}
    ref = evaluate(graph.src[0], {x: xs, y: ys})
    got = evaluate(out.src[0], {x: xs, y: ys})
    assert np.allclose(got, ref, rtol=1e-5, atol=0)  # a few ulps: numpy's exp2/log2/sin differ by host SIMD
    iv = np.concatenate([rng.integers(-(1 << 31), 1 << 31, 5000).astype(np.int32), np.array([-(1 << 31), 1], np.int32)])
    with np.errstate(all="ignore"):
        assert np.array_equal(evaluate(out.src[1], {i: iv}), evaluate(graph.src[1], {i: iv}))


def test_mod_uses_a_native_division() -> None:
    rng = np.random.default_rng(23)
    a = np.concatenate([rng.integers(-(1 << 31), 1 << 31, 3000), [-(1 << 31), 7, -7, 0]]).astype(np.int32)
    b = np.concatenate([rng.integers(-100, 100, 3000), [-1, 0, 0, 0]]).astype(np.int32)
    x, y = leaf(dtypes.int32, "x"), leaf(dtypes.int32, "y")
    for graph in (x % y, x % 7, x % 0, x % -(1 << 31)):
        out = decompose(graph, {"IDIV"})
        ops = {u.op for u in out.toposort()}
        assert Ops.MOD not in ops and (Ops.IDIV in ops or graph.src[1].arg == 0)
        want = np.broadcast_to(evaluate(graph, {x: a, y: b}), a.shape)
        assert np.array_equal(np.broadcast_to(evaluate(out, {x: a, y: b}), a.shape), want)
    assert Ops.IDIV not in {u.op for u in decompose(x.cast(dtypes.uint32) % 8, {"IDIV"}).toposort()}  # a mask


def test_recip_prefers_a_native_division() -> None:
    x = leaf(dtypes.float32)
    out = decompose(x.alu(Ops.RECIP), {"FDIV"})
    assert out.op is Ops.FDIV and out.src[0].op is Ops.CONST and out.src[0].arg == 1.0
    assert decompose(x / 4.0, BASIC_OPS) is x * 0.25  # exact power of two: a multiply
    assert Ops.FDIV not in {u.op for u in decompose(x / 3.0, BASIC_OPS).toposort()}


def test_python_device_runs_decomposed_kernels() -> None:
    """End to end: the PYTHON device told to render only basic ops runs exp2/log2/sin/sqrt/idiv kernels through the
    lowering pipeline, bit-identical to the graphs evaluated here."""
    pytest.importorskip("tinycore.runtime.python_interpreter")
    from tinycore.codegen import get_program
    from tinycore.helpers import Context
    from tinycore.runtime.python_device import PythonDevice, PythonProgram, PythonRenderer

    n = 512
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, 2.0**-149, -3.5], np.float32)
    xs = np.concatenate([float_samples(dtypes.float32, 1 << 24)[: n - 8], specials])
    out_buf, in_buf = UOp.define_global(0, dtypes.float32, n), UOp.define_global(1, dtypes.float32, n)
    x = UOp(Ops.LOAD, dtypes.float32, (in_buf,))
    dev = PythonDevice("PYTHON")
    with Context(PYTHON_NATIVE_OPS="basic"):
        renderer = PythonRenderer()
        for op, builder in ((Ops.EXP2, xexp2), (Ops.LOG2, xlog2), (Ops.SIN, xsin), (Ops.SQRT, xsqrt)):
            prog = get_program(UOp.sink(out_buf.store(x.alu(op))), renderer, opts=[])
            assert op not in {u.op for u in prog.uops}
            lib = dev.compiler.compile(renderer.render(prog.uops))
            out = np.zeros(n, np.float32)
            PythonProgram(dev, prog.name, lib)(memoryview(out), memoryview(xs), global_size=prog.global_size,
                                               local_size=prog.local_size)  # fmt: skip
            want = run_unary(builder, dtypes.float32, xs)
            assert np.array_equal(out.view(np.uint32), want.view(np.uint32)), op


# ---------------------------------------------------------------------------------------------------------------
# the long sweeps behind docs/decompositions.md: python tests/test_decompositions.py [names...]


def _chunked_errors(fn: Callable[[np.ndarray], np.ndarray], xs: np.ndarray, chunk: int = 1 << 22) -> np.ndarray:
    return np.concatenate([fn(xs[i : i + chunk]) for i in range(0, len(xs), chunk)])


def measure(names: list[str]) -> None:
    """Print the max ULP error of every decomposition over long sweeps: every 97th float32 bit pattern (plus
    denormals and boundaries), ~2^24 float64 patterns, all float16 and bfloat16 values, and random pow/fdiv pairs."""
    for name in names:
        for dtype in (dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16):
            start = time.time()
            if name in BUILDERS:
                if dtype == dtypes.float32:
                    xs = float_samples(dtype, 97)
                elif dtype == dtypes.float64:
                    xs = float_samples(dtype, 1 << 40)
                else:
                    xs = float_samples(dtype, 1)
                xs = np.concatenate([xs, boundary_values(name, dtype), domain_samples(name, dtype, 1 << 22, seed=5)])
                errs = _chunked_errors(lambda c, name=name, dtype=dtype: unary_errors(name, dtype, c)[0], xs)
                a = xs
            else:
                n = {dtypes.float32: 1 << 22, dtypes.float64: 1 << 20}.get(dtype, 1 << 20)
                if name == "pow":
                    a, b = pow_samples(dtype, n, seed=7)
                else:
                    rng = np.random.default_rng(7)
                    a = float_samples(
                        dtype, 97 if dtype == dtypes.float32 else 1 << 40 if dtype == dtypes.float64 else 1
                    )
                    b = rng.permutation(a)
                sa, sb = special_pairs(dtype)
                a, b = np.concatenate([a, sa]), np.concatenate([b, sb])
                idx = np.arange(len(a))
                errs = _chunked_errors(
                    lambda i, name=name, dtype=dtype, a=a, b=b: binary_errors(name, dtype, a[i], b[i]), idx
                )
            bad = int((~np.isfinite(errs)).sum())
            ok = np.where(np.isfinite(errs), errs, 0)
            print(
                f"{name:6s} {dtype!r:16s} n={len(errs):>10d} special mismatches={bad} {worst(ok, a)} "
                f"({time.time() - start:.0f}s)",
                flush=True,
            )


def measure_exhaustive(name: str, chunk: int = 1 << 24) -> None:
    """Every float32 bit pattern through the float32 decomposition `name` (minutes per function)."""
    start, top = time.time(), (0.0, 0.0)
    mismatches = 0
    for lo in range(0, 1 << 32, chunk):
        xs = np.arange(lo, lo + chunk, dtype=np.uint64).astype(np.uint32).view(np.float32)
        errs, _ = unary_errors(name, dtypes.float32, xs)
        mismatches += int((~np.isfinite(errs)).sum())
        errs = np.where(np.isfinite(errs), errs, 0)
        i = int(np.argmax(errs))
        if errs[i] > top[0]:
            top = (float(errs[i]), float(xs[i]))
    print(
        f"{name:6s} float32 all 2^32 inputs: special mismatches={mismatches} max {top[0]:.4f} ULP at x={top[1]!r} "
        f"({time.time() - start:.0f}s)",
        flush=True,
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--exhaustive"]:
        for fn_name in sys.argv[2:]:
            measure_exhaustive(fn_name)
    else:
        measure(sys.argv[1:] or [*BUILDERS, "pow", "fdiv"])


def test_clang_device_computes_the_same_bits() -> None:
    """A real C compiler (the CLANG plugin: -O2, -ffp-contract=off) gives bit-identical results to the evaluator:
    no contraction, reassociation or denormal flushing changed the float algorithms."""
    pytest.importorskip("tinycore_clang")
    from tinycore.codegen import get_program
    from tinycore.device import Device

    try:
        dev = Device["CLANG"]
    except Exception as error:  # no compiler here: nothing to compare with
        pytest.skip(f"CLANG device unavailable: {error}")
    n = 4096
    xs = np.concatenate([float_samples(dtypes.float32, 1 << 20)[: n - 64], boundary_values("sin", dtypes.float32)[:64]])
    out_buf, in_buf = UOp.define_global(0, dtypes.float32, n), UOp.define_global(1, dtypes.float32, n)
    x = UOp(Ops.LOAD, dtypes.float32, (in_buf,))
    bo, bi = dev.allocator.alloc(4 * n), dev.allocator.alloc(4 * n)
    dev.allocator.copyin(bi, memoryview(np.ascontiguousarray(xs)))
    fused = "MULACC" in dev.renderer.native_ops  # exp2 then uses fused multiply-adds (xexp2(fused=True))
    for op, builder in ((Ops.EXP2, functools.partial(xexp2, fused=fused)), (Ops.LOG2, xlog2), (Ops.SIN, xsin)):
        assert op.name not in dev.renderer.native_ops  # the renderer relies on the decomposition
        prog = get_program(UOp.sink(out_buf.store(x.alu(op))), dev.renderer)
        prg = dev.runtime(prog.name, dev.compiler.compile(dev.renderer.render(prog.uops)))
        prg(bo, bi, global_size=prog.global_size, local_size=prog.local_size, vals=(), wait=True)
        out = np.empty(n, np.float32)
        dev.allocator.copyout(memoryview(out), bo)
        want = [run_unary(builder, dtypes.float32, xs, fma=True)]
        if op is Ops.EXP2 and fused:  # a target without FMA instructions renders MULACC as a*b + c
            want.append(run_unary(lambda v, b=builder: decompose(b(v), BASIC_OPS), dtypes.float32, xs))
        assert any(np.array_equal(out.view(np.uint32), w.view(np.uint32)) for w in want), op
