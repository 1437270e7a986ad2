"""CLANG renderer + compiler + runtime on hand-built linearized programs, checked against numpy and against core's
C-semantics reference (`exec_alu`, `cast_value`): every dtype, wrap-around, truncating division, casts and
bitcasts, 16-bit floats, inf/nan constants, loops with accumulators, gated loads/stores, vectors, variables."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tinycore_clang.testing import ProgramBuilder, elementwise, linearize, loop, np_dtype

from tinycore.dtype import ALL_SCALARS, AddrSpace, dtypes, truncate_to_dtype
from tinycore.uop.ops import AxisType, Ops, UOp, cast_value, exec_alu

RNG = np.random.default_rng(1234)
I32 = dtypes.int32


def c32(v: int) -> UOp:
    """An int32 constant."""
    return UOp.const(I32, v)


def sample(dtype, n):
    """Random values covering the whole range of an int dtype; normal-ish floats; raw bits for bfloat16."""
    if dtype == dtypes.bool:
        return RNG.integers(0, 2, n).astype(bool)
    if dtypes.is_int(dtype):
        info = np.iinfo(np_dtype(dtype))
        vals = RNG.integers(info.min, info.max, n, endpoint=True, dtype=np_dtype(dtype))
        vals[:4] = [info.min, info.max, 0, -1 if info.min < 0 else 1]
        return vals
    if dtype == dtypes.bfloat16:
        return (RNG.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return (RNG.standard_normal(n) * 10).astype(np_dtype(dtype))


def to_py(x, dtype):
    """A stored element as the Python value the reference works with."""
    if dtype == dtypes.bfloat16:
        return float(np.array([int(x) << 16], np.uint32).view(np.float32)[0])
    return x.item()


def same_value(expected, got, dtype) -> bool:
    """Equal values, NaN equal to NaN, and the sign of float zeros compared."""
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(got, float) and math.isnan(got)
    if dtypes.is_float(dtype):
        return expected == got and math.copysign(1.0, expected) == math.copysign(1.0, got)
    return expected == got


BINARY = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR]
COMPARE = [Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ]
UNARY = [Ops.NEG, Ops.SQRT, Ops.RECIP, Ops.TRUNC]


def applicable(op, dtype) -> bool:
    """Whether `op` is defined on `dtype`."""
    if dtype == dtypes.bool:
        return op in (Ops.ADD, Ops.MUL, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR, Ops.NEG, *COMPARE)
    if dtypes.is_float(dtype):
        return op not in (Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.IDIV, Ops.MOD)
    return op not in (Ops.FDIV, Ops.SQRT, Ops.RECIP)


def test_every_dtype_and_alu_op_matches_the_c_semantics_reference(run_uops):
    """All ALU ops on all scalar dtypes, full-range random operands (overflow, shifts out of range, division by
    zero included), compiled in one batch and compared element by element with `exec_alu`."""
    n = 48
    programs, cases = [], []
    for dtype in ALL_SCALARS:
        for op in BINARY + COMPARE + UNARY:
            if not applicable(op, dtype):
                continue
            nin = 1 if op in UNARY else 2
            out_dtype = dtypes.bool if op in COMPARE else dtype
            ins = [sample(dtype, n) for _ in range(nin)]
            if op in (Ops.SHL, Ops.SHR):
                ins[1] = RNG.integers(-2, dtype.itemsize * 8 + 3, n).astype(np_dtype(dtype))
            if op in (Ops.IDIV, Ops.MOD):
                ins[1][:3] = [0, -1 if dtype in (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64) else 1, 7]
            programs.append((elementwise(op, [dtype] * nin, out_dtype, n), [np.zeros(n, np_dtype(out_dtype)), *ins]))
            cases.append((dtype, op, out_dtype))
    results = run_uops.many(programs)
    wrong = []
    for (dtype, op, out_dtype), outs, (_, bufs) in zip(cases, results, programs):
        for k in range(n):
            operands = [to_py(b[k], dtype) for b in bufs[1:]]
            expected = exec_alu(op, dtype, operands)
            got = to_py(outs[0][k], out_dtype)
            ok = same_value(expected, got, out_dtype)
            if not ok and op is Ops.TRUNC and expected == 0 and got == 0:
                ok = True  # C/numpy/torch give -0.0 for trunc(-0.3); exec_alu drops the sign of zero
            if not ok and dtypes.is_float(out_dtype) and op in (Ops.SQRT, Ops.FDIV, Ops.RECIP):
                ok = out_dtype in (dtypes.float32, dtypes.float64) and math.isclose(expected, got, rel_tol=1e-6)
            if not ok:
                wrong.append(f"{op.name} {dtype}: {operands} -> {got}, expected {expected}")
    assert len(cases) > 120
    assert not wrong, "\n".join(wrong[:20])


FLOATS = [0.0, -0.0, 0.5, 1.5, -1.5, 2.5, -2.7, 300.7, -300.7, 65504.0, 65520.0, 1e10, -1e10, 3e9, 0.1, 1e-8,
          float("inf"), float("-inf"), float("nan")]  # fmt: skip
INTS = [0, 1, -1, 127, -128, 255, 256, 300, -300, 65535, 2**31 - 1, -(2**31), 2**32 - 1, 16777217, 2**53 + 1,
        2**63 - 1, -(2**63), 2**64 - 1]  # fmt: skip


def cast_inputs(dtype):
    """Values of `dtype` that stress conversions (inf/nan, out of range, ties)."""
    if dtype == dtypes.bool:
        return [False, True]
    if dtypes.is_float(dtype):
        return [truncate_to_dtype(v, dtype) if dtype != dtypes.float64 else v for v in FLOATS]
    return sorted({dtypes.as_const(v, dtype) for v in INTS})


def encode(values, dtype):
    """`values` as a numpy array in `dtype`'s storage format."""
    if dtype == dtypes.bfloat16:
        return np.array([np.float32(v).view(np.uint32) >> 16 for v in values], np.uint16)
    return np.array(values, np_dtype(dtype))


def test_cast_matrix_matches_cast_value(run_uops):
    """Every dtype to every other dtype, with inf/nan, out-of-range and rounding-tie inputs."""
    programs, cases = [], []
    for src in ALL_SCALARS:
        values = cast_inputs(src)
        for dst in ALL_SCALARS:
            if src != dst:
                prog = elementwise(lambda x, d=dst: x.cast(d), [src], dst, len(values))
                programs.append((prog, [np.zeros(len(values), np_dtype(dst)), encode(values, src)]))
                cases.append((src, dst, values))
    wrong = []
    for (src, dst, values), outs in zip(cases, run_uops.many(programs)):
        for value, raw in zip(values, outs[0]):
            expected, got = cast_value(value, dst), to_py(raw, dst)
            if not same_value(expected, got, dst):
                wrong.append(f"{src} -> {dst}: {value!r} gave {got!r}, expected {expected!r}")
    assert len(cases) == len(ALL_SCALARS) * (len(ALL_SCALARS) - 1)
    assert not wrong, "\n".join(wrong[:20])


def test_casts_follow_c_and_documented_rules(run_uops):
    f = np.array([2.7, -2.7, 300.7, -1.0, float("nan"), float("inf")], np.float32)
    to_int = run_uops(
        elementwise(lambda x: x.cast(dtypes.int32), [dtypes.float32], dtypes.int32, 6), [np.zeros(6, np.int32), f]
    )[0]
    assert to_int.tolist() == [2, -2, 300, -1, 0, 0]  # truncation toward zero; NaN/inf give 0
    to_u8 = run_uops(
        elementwise(lambda x: x.cast(dtypes.uint8), [dtypes.float32], dtypes.uint8, 6), [np.zeros(6, np.uint8), f]
    )[0]
    assert to_u8.tolist() == [2, 254, 44, 255, 0, 0]  # wraps modulo 256
    to_bool = run_uops(
        elementwise(lambda x: x.cast(dtypes.bool), [dtypes.float32], dtypes.bool, 6),
        [np.zeros(6, bool), np.array([0.0, -0.0, 0.5, float("nan"), -3, 0], np.float32)],
    )[0]
    assert to_bool.tolist() == [False, False, True, True, True, False]


def test_bfloat16_rounds_to_nearest_even_and_keeps_nan(run_uops):
    bits = np.array([0x3F808000, 0x3F818000, 0x3F80C000, 0x3F807FFF, 0x7FC00001, 0xFF800000, 0x7F7FFFFF], np.uint32)
    out = run_uops(
        elementwise(lambda x: x.cast(dtypes.bfloat16), [dtypes.float32], dtypes.bfloat16, len(bits)),
        [np.zeros(len(bits), np.uint16), bits.view(np.float32)],
    )[0]
    assert out[:4].tolist() == [0x3F80, 0x3F82, 0x3F81, 0x3F80]  # ties to even, above half up, below half down
    assert (out[4] & 0x7F80) == 0x7F80 and (out[4] & 0x7F) != 0  # NaN stays NaN
    assert out[5] == 0xFF80 and out[6] == 0x7F80  # -inf stays; max float rounds up to inf


def test_float16_arithmetic_matches_numpy(run_uops):
    a = (RNG.standard_normal(64) * 100).astype(np.float16)
    b = (RNG.standard_normal(64) * 100).astype(np.float16)
    for op, ref in ((Ops.ADD, np.add), (Ops.MUL, np.multiply), (Ops.FDIV, np.divide), (Ops.SUB, np.subtract)):
        out = run_uops(elementwise(op, [dtypes.float16] * 2, dtypes.float16, 64), [np.zeros(64, np.float16), a, b])[0]
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(out, ref(a, b))


def test_bitcasts_reinterpret_bits(run_uops):
    f = np.array([1.0, -2.5, float("inf"), 0.0], np.float32)
    out = run_uops(
        elementwise(lambda x: x.bitcast(dtypes.uint32), [dtypes.float32], dtypes.uint32, 4), [np.zeros(4, np.uint32), f]
    )[0]
    np.testing.assert_array_equal(out, f.view(np.uint32))
    i = np.array([0x3C00, 0x7C00, 0xC000, 0x0001], np.uint16).view(np.int16)
    half = run_uops(
        elementwise(lambda x: x.bitcast(dtypes.float16), [dtypes.int16], dtypes.float16, 4),
        [np.zeros(4, np.float16), i],
    )[0]
    np.testing.assert_array_equal(half.view(np.int16), i)
    d = np.array([1.0, -0.0], np.float64)
    q = run_uops(
        elementwise(lambda x: x.bitcast(dtypes.int64), [dtypes.float64], dtypes.int64, 2), [np.zeros(2, np.int64), d]
    )[0]
    np.testing.assert_array_equal(q, d.view(np.int64))


@pytest.mark.parametrize(
    "dtype,op,a,b,expected",
    [
        (dtypes.int32, Ops.ADD, 2**31 - 1, 1, -(2**31)),
        (dtypes.int32, Ops.MUL, 65536, 65536, 0),
        (dtypes.int64, Ops.MUL, 2**62, 4, 0),
        (dtypes.int64, Ops.SUB, -(2**63), 1, 2**63 - 1),
        (dtypes.int8, Ops.ADD, 127, 1, -128),
        (dtypes.uint8, Ops.ADD, 250, 10, 4),
        (dtypes.uint16, Ops.MUL, 65535, 65535, 1),
        (dtypes.uint32, Ops.SUB, 0, 1, 2**32 - 1),
        (dtypes.int32, Ops.SHL, -1, 31, -(2**31)),
        (dtypes.int16, Ops.SHL, 1, 15, -32768),
        (dtypes.int32, Ops.SHL, 1, 32, 0),
        (dtypes.int32, Ops.SHR, -8, 40, -1),
    ],
)
def test_integer_overflow_wraps(run_uops, dtype, op, a, b, expected):
    npd = np_dtype(dtype)
    out = run_uops(
        elementwise(op, [dtype, dtype], dtype, 1), [np.zeros(1, npd), np.array([a], npd), np.array([b], npd)]
    )
    assert out[0][0] == expected


def test_negating_int_min_wraps(run_uops):
    out = run_uops(
        elementwise(Ops.NEG, [dtypes.int32], dtypes.int32, 2),
        [np.zeros(2, np.int32), np.array([-(2**31), 5], np.int32)],
    )[0]
    assert out.tolist() == [-(2**31), -5]


def test_integer_division_truncates_like_c_and_never_traps(run_uops):
    a = np.array([-7, 7, -7, 7, 5, -(2**31), 0], np.int32)
    b = np.array([2, -2, -2, 2, 0, -1, 0], np.int32)
    q = run_uops(elementwise(Ops.IDIV, [I32, I32], I32, 7), [np.zeros(7, np.int32), a, b])[0]
    r = run_uops(elementwise(Ops.MOD, [I32, I32], I32, 7), [np.zeros(7, np.int32), a, b])[0]
    assert q.tolist() == [-3, -3, 3, 3, 0, -(2**31), 0]
    assert r.tolist() == [-1, 1, -1, 1, 0, 0, 0]


def test_division_by_constants(run_uops):
    a = np.arange(-10, 10, dtype=np.int32)
    for divisor, expected in (
        (3, [exec_alu(Ops.IDIV, I32, (int(x), 3)) for x in a]),
        (-1, (-a).tolist()),
        (0, [0] * 20),
    ):
        prog = elementwise(lambda x, d=divisor: x // d, [I32], I32, 20)
        assert run_uops(prog, [np.zeros(20, np.int32), a])[0].tolist() == list(expected)


def test_max_propagates_nan_and_prefers_first_on_ties(run_uops):
    a = np.array([1.0, float("nan"), 2.0, -0.0, 0.0, -1.0], np.float32)
    b = np.array([2.0, 1.0, float("nan"), 0.0, -0.0, -2.0], np.float32)
    out = run_uops(elementwise(Ops.MAX, [dtypes.float32] * 2, dtypes.float32, 6), [np.zeros(6, np.float32), a, b])[0]
    assert out[0] == 2.0 and math.isnan(out[1]) and math.isnan(out[2]) and out[5] == -1.0
    assert math.copysign(1, out[3]) == -1.0 and math.copysign(1, out[4]) == 1.0  # ties keep the first operand


def test_mulacc_sqrt_trunc_recip_where(run_uops):
    a, b, c = (RNG.standard_normal(32).astype(np.float32) for _ in range(3))
    out = run_uops(
        elementwise(Ops.MULACC, [dtypes.float32] * 3, dtypes.float32, 32), [np.zeros(32, np.float32), a, b, c]
    )[0]
    exact = a.astype(np.float64) * b + c
    np.testing.assert_allclose(out, exact, rtol=1e-6, atol=1e-6)
    x = np.array([4.0, 2.0, -1.0, 2.7, -2.7, 0.0], np.float32)
    sq = run_uops(elementwise(Ops.SQRT, [dtypes.float32], dtypes.float32, 6), [np.zeros(6, np.float32), x])[0]
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(sq, np.sqrt(x))
    tr = run_uops(elementwise(Ops.TRUNC, [dtypes.float32], dtypes.float32, 6), [np.zeros(6, np.float32), x])[0]
    np.testing.assert_array_equal(tr, np.trunc(x))
    rc = run_uops(elementwise(Ops.RECIP, [dtypes.float64], dtypes.float64, 6), [np.zeros(6), x.astype(np.float64)])[0]
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(rc, 1.0 / x.astype(np.float64))
    g = np.array([True, False, True], bool)
    wh = run_uops(
        elementwise(Ops.WHERE, [dtypes.bool, I32, I32], I32, 3),
        [np.zeros(3, np.int32), g, np.array([1, 2, 3], np.int32), np.array([7, 8, 9], np.int32)],
    )[0]
    assert wh.tolist() == [1, 8, 3]


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16])
def test_inf_nan_and_exact_constants(run_uops, dtype):
    values = [float("inf"), float("-inf"), float("nan"), -0.0, 0.1, 1 / 3, 2.0**-149, 3.4028234663852886e38]
    values = [truncate_to_dtype(v, dtype) if dtype != dtypes.float64 else v for v in values]
    out = UOp.define_global(0, dtype, len(values))
    stores = [out.index(c32(k)).store(UOp.const(dtype, v)) for k, v in enumerate(values)]
    got = run_uops(linearize(*stores), [np.zeros(len(values), np_dtype(dtype))])[0]
    for v, raw in zip(values, got):
        assert same_value(v, to_py(raw, dtype), dtype), (v, raw)


def test_loop_with_register_accumulator(run_uops):
    """Row sums: DEFINE_REG accumulator re-initialised per row, a REDUCE range inside a LOOP range."""
    rows, cols = 5, 7
    out = UOp.define_global(0, dtypes.float32, rows)
    inp = UOp.define_global(1, dtypes.float32, rows * cols)
    acc = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1, AddrSpace.REG), (), 0)
    b = ProgramBuilder()
    b.add(out, inp, acc)
    i = b.add(loop(rows, 0))
    init = b.add(acc.index(c32(0)).store(UOp.const(dtypes.float32, 0.0)))
    j = b.add(loop(cols, 1, AxisType.REDUCE))
    x = inp.index(i * c32(cols) + j).load()
    current = acc.after(init).index(c32(0)).load()
    b.add(acc.index(c32(0)).store(current + x).end(j))
    total = acc.after(b.uops[-1]).index(c32(0)).load()
    b.add(out.index(i).store(total).end(i))
    data = RNG.standard_normal(rows * cols).astype(np.float32)
    got = run_uops(b.uops, [np.zeros(rows, np.float32), data])[0]
    np.testing.assert_allclose(got, data.reshape(rows, cols).sum(axis=1), rtol=1e-5)


def test_gated_load_and_gated_stores(run_uops):
    n = 8
    out = UOp.define_global(0, dtypes.float32, n)
    out2 = UOp.define_global(1, dtypes.float32, n)
    inp = UOp.define_global(2, dtypes.float32, n)
    b = ProgramBuilder()
    i = b.add(loop(n))
    valid = i >= 2
    shifted = inp.index(i - c32(2), valid).load(UOp.const(dtypes.float32, -1.0))  # like PAD
    b.add(out.index(i).store(shifted))
    gate = i < c32(3)
    branch = b.add(UOp(Ops.IF, dtypes.void, (gate,)))
    b.add(out2.index(i).store(UOp.const(dtypes.float32, 5.0)))
    b.add(UOp(Ops.ENDIF, dtypes.void, (branch,)))
    b.add(out2.index(i + c32(1), i.eq(c32(6))).store(UOp.const(dtypes.float32, 9.0)))  # store through a gated INDEX
    b.add(UOp(Ops.END, dtypes.void, (b.uops[-1], i)))
    data = np.arange(n, dtype=np.float32) + 10
    got, got2, _ = run_uops(b.uops, [np.zeros(n, np.float32), np.zeros(n, np.float32), data])
    assert got.tolist() == [-1.0, -1.0, 10, 11, 12, 13, 14, 15]
    assert got2.tolist() == [5.0, 5.0, 5.0, 0, 0, 0, 0, 9.0]


def test_vector_types_loads_stores_vectorize_gep(run_uops):
    """float4 loads/stores through vector pointers (both INDEX and CAST forms), whole-vector arithmetic, lane
    shuffles with GEP, VECTORIZE, and a gather through a vector of indices."""
    n = 16
    f4 = dtypes.float32.vec(4)
    out = UOp.define_global(0, dtypes.float32, n)
    a = UOp.define_global(1, dtypes.float32, n)
    bb = UOp.define_global(2, dtypes.float32, n)
    gathered = UOp.define_global(3, dtypes.float32, n)
    prog = ProgramBuilder()
    i = prog.add(loop(n // 4))
    base = i * c32(4)
    va = UOp(Ops.CAST, f4.ptr(n), (a.index(base),)).load()
    vb = UOp(Ops.INDEX, f4.ptr(n), (bb, base)).load()
    total = va + vb
    reversed_ = total.gep((3, 2, 1, 0))
    mixed = UOp.vectorize(reversed_.gep(0) * UOp.const(dtypes.float32, 2.0), *(reversed_.gep(k) for k in (1, 2, 3)))
    prog.add(UOp(Ops.CAST, f4.ptr(n), (out.index(base),)).store(mixed))
    lanes = UOp.vectorize(*(i + c32(4 * k) for k in range(4)))  # column i of a 4x4 matrix
    column = UOp(Ops.INDEX, dtypes.float32.ptr(n).vec(4), (a, lanes)).load()
    prog.add(UOp(Ops.INDEX, dtypes.float32.ptr(n).vec(4), (gathered, lanes)).store(column * UOp.const(f4, 1.0)))
    prog.add(UOp(Ops.END, dtypes.void, (prog.uops[-1], i)))
    xa = np.arange(n, dtype=np.float32)
    xb = np.arange(n, dtype=np.float32) * 100
    got, _, _, gath = run_uops(prog.uops, [np.zeros(n, np.float32), xa, xb, np.zeros(n, np.float32)])
    expected = (xa + xb).reshape(4, 4)[:, ::-1].copy()
    expected[:, 0] *= 2
    np.testing.assert_array_equal(got.reshape(4, 4), expected)
    np.testing.assert_array_equal(gath, xa)


def test_vector_integer_math_wraps_and_compares_lanewise(run_uops):
    i4 = dtypes.int32.vec(4)
    out = UOp.define_global(0, dtypes.int32, 4)
    flags = UOp.define_global(1, dtypes.bool, 4)
    a = UOp.define_global(2, dtypes.int32, 4)
    va = UOp(Ops.CAST, i4.ptr(4), (a.index(c32(0)),)).load()
    big = UOp.const(i4, (2**31 - 1, 5, -(2**31), 0))
    s1 = UOp(Ops.CAST, i4.ptr(4), (out.index(c32(0)),)).store(va + big)
    s2 = UOp(Ops.CAST, dtypes.bool.vec(4).ptr(4), (flags.index(c32(0)),)).store(va < UOp.const(i4, 2))
    got, got_flags, _ = run_uops(
        linearize(s1, s2), [np.zeros(4, np.int32), np.zeros(4, bool), np.array([1, 2, 3, -4], np.int32)]
    )
    assert got.tolist() == [-(2**31), 7, -(2**31) + 3, -4]
    assert got_flags.tolist() == [True, False, False, True]


def test_define_var_arguments(run_uops):
    n_var = UOp.variable("n", 1, 64, I32)
    k_var = UOp.variable("k", -100, 100, I32)
    out = UOp.define_global(0, I32, 64)
    i = UOp(Ops.RANGE, I32, (n_var,), (0, AxisType.LOOP))
    prog = linearize(out.index(i).store(i * k_var).end(i))
    got = run_uops(prog, [np.full(64, -1, np.int32)], vals=(10, -3))[0]
    assert got[:10].tolist() == [x * -3 for x in range(10)] and (got[10:] == -1).all()


def test_gated_load_never_touches_memory(tmp_path):
    """A gated-off load of an address far outside the buffer must not be performed (run in a child process: a
    wrong renderer would crash it)."""
    from tinycore_clang import toolchain

    if not toolchain.find_compiler().ok:
        pytest.skip("no C compiler (clang, gcc or cc) on PATH")
    code = """
import numpy as np
from tinycore.dtype import dtypes
from tinycore.uop.ops import UOp
from tinycore_clang.device import ClangDevice
from tinycore_clang.testing import Runner, linearize, loop
c = lambda v: UOp.const(dtypes.int32, v)
out, inp = UOp.define_global(0, dtypes.float32, 4), UOp.define_global(1, dtypes.float32, 4)
i = loop(4)
far = i * c(1 << 28) + c(1 << 29)  # at least 2 GiB past the buffer; the gate below is false for every i
value = inp.index(far, i.eq(c(99))).load(UOp.const(dtypes.float32, 7.0))
prog = linearize(out.index(i).store(value).end(i))
got = Runner(ClangDevice())(prog, [np.zeros(4, np.float32), np.ones(4, np.float32)])
print("OK", got[0].tolist())
"""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "OK [7.0, 7.0, 7.0, 7.0]" in proc.stdout


def _matmul_ast(m: int, k: int, n: int, panel: int = 0) -> UOp:
    """``out = a @ b`` with ``b`` row-major, or (``panel``) packed in zero-filled column panels like the frontend's."""
    a = UOp(Ops.LOAD, dtypes.float, (UOp.define_global(1, dtypes.float, m * k),)).reshape((m, k, 1)).expand((m, k, n))
    if panel:
        wide = -(-n // panel) * panel
        packed = UOp(Ops.LOAD, dtypes.float, (UOp.define_global(2, dtypes.float, k * wide),))
        b = packed.reshape((wide // panel, k, panel)).permute((1, 0, 2)).reshape((k, wide)).shrink(((0, k), (0, n)))
    else:
        b = UOp(Ops.LOAD, dtypes.float, (UOp.define_global(2, dtypes.float, k * n),)).reshape((k, n))
    b = b.reshape((1, k, n)).expand((m, k, n))
    out = UOp.define_global(0, dtypes.float, m * n).reshape((m, 1, n))
    return UOp.sink(out.store((a * b).r(Ops.ADD, (1,))))


def test_matmul_tail_accumulators_are_read_through_a_barrier(run_uops_c):
    """The C backend: a register tile whose stores are gated (the masked tail of a panel-packed operand) reads its
    accumulator after the loop through a compiler barrier (clang then vectorizes all of the tile's FMAs); one without
    gates reads it directly. Both compute ``a @ b``."""
    from tinycore.codegen import get_program

    def run(ast: UOp, out_size: int, inputs: list[np.ndarray]) -> tuple[str, np.ndarray]:
        program = get_program(ast, run_uops_c.device.renderer)
        src = run_uops_c.source(program.uops)
        lib = run_uops_c.device.compiler.compile_cached(src)
        out = np.zeros(out_size, np.float32)
        return src, run_uops_c.launch(src, lib, [out, *inputs], global_size=program.global_size)[0]

    panel = run_uops_c.device.renderer.gemm_panel_bytes // 4  # the host's: 16 floats on AVX2, 32 on AVX-512
    m, k, n = 64, 8, 2 * panel + 10
    wide = -(-n // panel) * panel
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = np.zeros((k, wide), np.float32)
    b[:, :n] = RNG.standard_normal((k, n))
    panels = np.ascontiguousarray(b.reshape(k, wide // panel, panel).transpose(1, 0, 2))
    src, got = run(_matmul_ast(m, k, n, panel), m * n, [a, panels])
    assert '__asm__ volatile("" : : "r"(' in src
    np.testing.assert_allclose(got.reshape(m, n), a @ b[:, :n], rtol=1e-4, atol=1e-4)
    full = 4 * panel
    b_full = RNG.standard_normal((k, full)).astype(np.float32)
    src, got = run(_matmul_ast(m, k, full), m * full, [a, b_full])
    assert "__asm__" not in src
    np.testing.assert_allclose(got.reshape(m, full), a @ b_full, rtol=1e-4, atol=1e-4)
