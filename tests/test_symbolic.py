"""Symbolic simplification: constant folding per dtype, identities, reassociation, like terms, range-aware
division and modulo (C semantics), comparisons, where, and index dtype lowering."""

from __future__ import annotations

import math

import pytest

from tinycore.dtype import dtypes
from tinycore.helpers import Context
from tinycore.uop.ops import AxisType, Ops, UOp, Variable, sym_infer
from tinycore.uop.patterns import graph_rewrite
from tinycore.uop.symbolic import lower_index_dtype, symbolic, symbolic_flat, symbolic_simple


@pytest.fixture(autouse=True)
def _spec_on():
    with Context(SPEC=1):
        yield


def v(name: str, lo: int, hi: int, dtype=dtypes.index) -> UOp:
    return UOp.variable(name, lo, hi, dtype)


def c(value, dtype=dtypes.index) -> UOp:
    return UOp.const(dtype, value)


def simp(u: UOp) -> UOp:
    return graph_rewrite(u, symbolic, name="test symbolic")


def check_equivalent(a: UOp, b: UOp, ranges: dict[str, range]) -> None:
    """a and b agree on every assignment of the (small) variable ranges."""
    import itertools

    names = sorted(ranges)
    for values in itertools.product(*(ranges[n] for n in names)):
        env = dict(zip(names, values))
        assert sym_infer(a, env) == sym_infer(b, env), (env, a.render(False), b.render(False))


# ----- constant folding with C semantics


@pytest.mark.parametrize(
    "op,a,b,want",
    [
        (Ops.IDIV, -7, 2, -3),
        (Ops.MOD, -7, 2, -1),
        (Ops.IDIV, 7, -2, -3),
        (Ops.MOD, 7, -2, 1),
        (Ops.IDIV, -7, -2, 3),
        (Ops.MOD, -7, -2, -1),
        (Ops.IDIV, -1, 3, 0),
        (Ops.MOD, -1, 3, -1),
    ],
)
def test_int_division_folds_with_truncation(op, a, b, want):
    for dtype in (dtypes.int32, dtypes.int64, dtypes.int8, dtypes.index):
        out = simp(UOp(op, dtype, (c(a, dtype), c(b, dtype))))
        assert out.op is Ops.CONST and out.arg == want and out.dtype == dtype


def test_division_by_zero_is_not_folded():
    e = UOp(Ops.IDIV, dtypes.int, (c(5, dtypes.int), c(0, dtypes.int)))
    assert simp(e) is e
    assert simp(UOp(Ops.MOD, dtypes.int, (c(5, dtypes.int), c(0, dtypes.int)))).op is Ops.MOD


def test_folding_wraps_per_dtype():
    u8 = dtypes.uint8
    assert simp(c(250, u8) + c(10, u8)).arg == 4
    assert simp(c(3, u8) - c(5, u8)).arg == 254
    assert simp(c(16, u8) * c(17, u8)).arg == 16
    i32 = dtypes.int32
    assert simp(c(2**31 - 1, i32) + c(1, i32)).arg == -(2**31)
    assert simp(c(65536, i32) * c(65536, i32)).arg == 0
    assert simp(c(-(2**31), i32) // c(-1, i32)).arg == -(2**31)  # wraps like the hardware (C: UB)
    assert simp(c(2**40) * c(2**20)).arg == 2**60  # index: exact
    assert simp(c(1, dtypes.int8) << c(7, dtypes.int8)).arg == -128


def test_float_folding_rounds_to_the_dtype():
    f32 = dtypes.float32
    assert simp(c(1.0, f32) + c(1e-8, f32)).arg == 1.0
    third = simp(c(1.0, f32) / c(3.0, f32)).arg
    assert third == 0.3333333432674408 and third != 1.0 / 3.0
    assert simp(c(1.0, dtypes.float64) / c(3.0, dtypes.float64)).arg == 1.0 / 3.0
    assert simp(c(65504.0, dtypes.half) * c(2.0, dtypes.half)).arg == math.inf
    assert simp(c(1.0, dtypes.bfloat16) + c(1.0 / 512, dtypes.bfloat16)).arg == 1.0
    assert simp(UOp(Ops.SQRT, f32, (c(2.0, f32),))).arg == 1.4142135381698608
    assert math.isnan(simp(c(0.0, f32) / c(0.0, f32)).arg)
    assert simp(c(2.5, f32).cast(dtypes.int)).arg == 2 and simp(c(-2.5, f32).cast(dtypes.int)).arg == -2
    assert simp(c(300, dtypes.int).cast(dtypes.uint8)).arg == 44
    assert simp(c(1.0, f32).bitcast(dtypes.uint32)).arg == 0x3F800000


def test_comparisons_and_where_fold_on_constants():
    assert simp(c(-1) < c(0)).arg is True
    assert simp(c(3, dtypes.uint8) < c(250, dtypes.uint8)).arg is True
    assert simp((c(1) < c(2)).where(c(5), c(6))).arg == 5
    assert simp(UOp.const(dtypes.bool, False).where(c(5), c(6))).arg == 6


def test_vector_constants_fold_lane_by_lane():
    a = UOp.const(dtypes.int.vec(2), (1, -7))
    b = UOp.const(dtypes.int.vec(2), (2, 2))
    out = simp(UOp(Ops.IDIV, a.dtype, (a, b)))
    assert out.op is Ops.VCONST and out.arg == (0, -3)


def test_tensor_level_constants_keep_their_device():
    a = UOp.const(dtypes.float, 2.0, device="PYTHON")
    out = graph_rewrite(a * a, symbolic_simple)
    assert out.op is Ops.CONST and out.arg == 4.0 and out.src[0].arg == "PYTHON"


# ----- identities


def test_identities():
    x = v("x", -5, 5)
    f = UOp.variable("f", 0, 1).cast(dtypes.float)
    cases = [
        (x + 0, x),
        (0 + x, x),
        (x - 0, x),
        (x * 1, x),
        (1 * x, x),
        (x * 0, c(0)),
        (x // 1, x),
        (x % 1, c(0)),
        (x - x, c(0)),
        (UOp(Ops.NEG, dtypes.index, (-x,)), x),
        (x.maximum(x), x),
        (x < x, UOp.const(dtypes.bool, False)),
        (x.ne(x), UOp.const(dtypes.bool, False)),
        (x.eq(x), UOp.const(dtypes.bool, True)),
        ((x < 3).where(x, x), x),
        (f * 1.0, f),
        (f + 0.0, f),
    ]
    for expr, want in cases:
        assert simp(expr) is want, expr.render(False)
    assert simp(f * 0.0) is not UOp.const(dtypes.float, 0.0)  # NaN * 0 is NaN: not folded for floats
    assert simp(f - f).op is Ops.SUB


def test_boolean_identities():
    g = v("x", 0, 9) < v("y", 0, 9)
    t, f = UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False)
    assert simp(g & t) is g and simp(g & f) is f and simp(g | f) is g and simp(g | t) is t
    assert simp(g.logical_not().logical_not()) is g
    assert simp(g.where(t, f)) is g
    assert simp(g.ne(False)) is g and simp(g.eq(True)) is g


def test_nested_where_with_the_same_gate():
    x, y, z = v("x", 0, 9), v("y", 0, 9), v("z", 0, 9)
    g = x < y
    assert simp(g.where(g.where(x, y), z)) is g.where(x, z)
    assert simp(g.where(x, g.where(y, z))) is g.where(x, z)


def test_constants_move_to_the_right():
    x = v("x", 0, 9)
    assert simp(3 * x) is x * 3 and simp(c(3).maximum(x)).src == (x, c(3))


# ----- reassociation and like terms


def test_reassociate_constants():
    x = v("x", 0, 9)
    assert simp((x + 3) + 4) is x + 7
    assert simp((x - 3) + 4) is x + 1
    assert simp(((x + 3) * 2) * 5) is x * 10 + 30
    assert simp((x * 2) * 3) is x * 6
    assert simp(4 + (x + -4)) is x


def test_combine_like_terms():
    x, y = v("x", 0, 9), v("y", 0, 9)
    assert simp(x * 3 + x * 4) is x * 7
    assert simp(x + x) is x * 2
    assert simp(x + x * 4) is x * 5
    assert simp((x + y) - x) is y
    assert simp(x * 3 + y + x * -3) is y
    assert simp((x * 4 + y) - (y + x * 4)) is c(0)
    assert simp(x - (y + x)) is -y


def test_divmod_recombination():
    x = v("x", -20, 20)
    assert simp((x // 4) * 4 + x % 4) is x  # exact in C semantics, whatever the sign
    assert simp((x // 8) * 16 + (x % 8) * 2) is x * 2


# ----- division and modulo with value ranges


def test_range_aware_divmod():
    x, y = v("x", 0, 15), v("y", 0, 3)
    assert simp((x * 4 + y) // 4) is x
    assert simp((x * 4 + y) % 4) is y
    assert simp((x * 4 + y + 8) // 4) is x + 2
    assert simp(y // 4) is c(0) and simp(y % 4) is y
    assert simp((x * 8) // 4) is x * 2
    assert simp((x * 8 + 4) % 8) is c(4)
    assert simp((x * 6 + 3) // 3) is x * 2 + 1


def test_divmod_needs_nonnegative_operands():
    x, y = v("x", -3, 3), v("y", 0, 3)
    e = (x * 4 + y) // 4  # x=-1, y=3: -1 // 4 == 0 in C, but x + y // 4 == -1
    s = simp(e)
    assert s is not x
    check_equivalent(e, s, {"x": range(-3, 4), "y": range(0, 4)})
    m = (x * 4 + y) % 4
    check_equivalent(m, simp(m), {"x": range(-3, 4), "y": range(0, 4)})


def test_divmod_of_nonpositive_numerators():
    x = v("x", -9, 0)
    e, m = (x * 4 - 1) // 4, (x * 4 - 1) % 4
    assert simp(e) is x and simp(m) is c(-1)
    check_equivalent(e, simp(e), {"x": range(-9, 1)})


def test_nested_division_and_modulo():
    x = v("x", -50, 50)
    assert simp((x // 3) // 4) is x // 12  # exact for truncation too
    assert simp((x % 12) % 4) is x % 4
    assert simp((x % 4) % 12) is x % 4  # range: |x % 4| < 4 < 12
    check_equivalent((x // 3) // 4, x // 12, {"x": range(-50, 51)})
    check_equivalent((x % 12) % 4, x % 4, {"x": range(-50, 51)})


def test_common_factor_nesting():
    x, y = v("x", 0, 31), v("y", 0, 3)
    assert simp((x * 4 + y) // 8) is x // 2
    assert simp((x * 4 + y) % 8) is (x % 2) * 4 + y
    check_equivalent((x * 4 + y) % 8, simp((x * 4 + y) % 8), {"x": range(32), "y": range(4)})


def test_gcd_of_coefficients():
    x, y = v("x", -9, 9), v("y", -9, 9)
    e = (x * 6 + y * 4 + 2) // 8
    s = simp(e)
    assert s is ((x * 3 + y * 2) + 1) // 4
    check_equivalent(e, s, {"x": range(-9, 10), "y": range(-9, 10)})
    assert simp((x * 6 + 4) % 2) is c(0)


def test_negative_divisor_mod():
    x = v("x", -9, 9)
    assert simp(x % -4) is x % 4
    check_equivalent(x % -4, x % 4, {"x": range(-9, 10)})


def test_reshape_index_round_trip_simplifies_away():
    a, b, cc = UOp.range(4, 0), UOp.range(6, 1), UOp.range(5, 2)
    flat = (a * 6 + b) * 5 + cc
    i0, i1, i2 = flat // 30, (flat // 5) % 6, flat % 5
    assert simp(i0) is a and simp(i1) is b and simp(i2) is cc


def test_index_of_a_strided_padded_conv():
    oh, kh = UOp.range(28, 0, AxisType.GLOBAL), UOp.range(3, 1, AxisType.REDUCE)
    ih = oh * 2 + kh - 1
    gate = (ih >= 0) & (ih < 56)
    s = simp(gate)
    assert s.op is Ops.CMPLT  # ih < 56 always holds: only the lower bound survives
    for o in range(28):
        for k in range(3):
            want = 0 <= o * 2 + k - 1 < 56
            got = sym_infer(s.substitute({oh: c(o), kh: c(k)}), {})
            assert got == want


# ----- comparisons


def test_comparisons_fold_from_ranges():
    x = v("x", 0, 9)
    assert simp(x < 10).arg is True and simp(x < 0).arg is False
    assert simp(x.ne(12)).arg is True and simp(x.eq(-1)).arg is False
    assert simp(x < 5) is (x < 5)


def test_comparison_moves_constants_and_divides():
    x, y = v("x", -20, 20), v("y", -20, 20)
    cases = [
        (x + 3 < 7, x < 4),
        (x * 2 < 7, x < 4),
        (x * 2 + y * 4 < 9, x + y * 2 < 5),
        (-x < 3, c(-3) < x),
        (c(3) < x * 2, c(1) < x),
        ((x + 5).ne(7), x.ne(2)),
        ((x * 2).ne(7), UOp.const(dtypes.bool, True)),
        ((x * 2).eq(8), x.eq(4)),
        ((x < 5).logical_not(), c(4) < x),
    ]
    for e, want in cases:
        got = simp(e)
        assert got is want, (e.render(False), got.render(False))
        check_equivalent(e, got, {"x": range(-20, 21), "y": range(-3, 4)})


def test_division_comparison():
    x = v("x", 0, 100)
    assert simp(x // 4 < 3) is (x < 12)
    assert simp(c(2) < x // 4) is (c(11) < x)
    check_equivalent(x // 4 < 3, x < 12, {"x": range(101)})


def test_max_folds_from_ranges():
    x = v("x", 0, 9)
    assert simp(x.maximum(-1)) is x and simp(x.maximum(20)) is c(20)
    assert simp((x + 10).maximum(x)) is x + 10


# ----- sized ints stay exact


def test_sized_int_rules_respect_wraparound():
    x = v("x", 0, 255, dtypes.uint8)
    e = (x + c(1, dtypes.uint8)) < c(10, dtypes.uint8)  # x = 255 wraps to 0
    s = simp(e)
    for val in range(256):
        assert sym_infer(e, {"x": val}) == sym_infer(s, {"x": val})
    # splitting a division needs exact arithmetic: only dtypes.index gets it (z*4 may wrap in int32)
    z = v("z", 0, 2**31 - 1, dtypes.int32)
    wide = (z * c(4, dtypes.int32) + c(3, dtypes.int32)) // c(4, dtypes.int32)
    assert simp(wide) is wide
    # rules that hold in modular arithmetic or follow from sound ranges still apply
    y = v("y", 0, 100, dtypes.int32)
    assert simp((y * 3 + y * 5) + c(1, dtypes.int32)) is y * 8 + 1
    assert simp((y + c(3, dtypes.int32)).ne(10)) is y.ne(7)
    assert simp((y % c(8, dtypes.int32)) // c(8, dtypes.int32)).arg == 0
    assert simp((y // 4) * 4 + y % 4) is y


def test_sized_int_comparisons_stay_exact():
    u8 = dtypes.uint8
    x = v("x", 0, 5, u8)
    e = (x + c(250, u8)) < c(253, u8)  # true math: x < 3 (250 is not "-6" here: nothing wraps)
    s = simp(e)
    assert [sym_infer(s, {"x": val}) for val in range(6)] == [True, True, True, False, False, False]
    i8 = dtypes.int8
    a, b = v("a", 0, 1, i8), v("b", 1, 1, i8)
    e = ((b * c(-100, i8) + a * c(100, i8)) + a * c(100, i8)) < c(50, i8)  # no step overflows...
    s = simp(e)  # ...but combining a*100 + a*100 into a*200 would
    for val in range(2):
        assert sym_infer(s, {"a": val, "b": 1}) == sym_infer(e, {"a": val, "b": 1})


def test_symbolic_flat_distributes():
    x, y = v("x", 0, 9), v("y", 0, 9)
    out = graph_rewrite((x + y) * 3 + 1, symbolic_flat)
    assert out is x * 3 + y * 3 + 1


def test_simplify_method_and_render():
    x = Variable("x", 0, 7)
    assert ((x * 4 + 3) // 4).simplify() is x
    assert (x * 4 + 1).render() == "((x*4)+1)"


# ----- index dtype lowering


def test_lower_index_dtype_picks_int32_or_int64():
    i = UOp.range(1 << 20, 0)
    small = lower_index_dtype(i * 4 + 1)
    assert small.dtype == dtypes.int32 and all(u.dtype != dtypes.index for u in small.toposort())
    big = lower_index_dtype(i * 4096 + 1)
    assert big.dtype == dtypes.int64
    # the range itself fits in int32; it is cast up where it meets the wide product
    mul = big.src[0]
    assert mul.dtype == dtypes.int64 and mul.src[0].op is Ops.CAST
    assert mul.src[0].src[0].op is Ops.RANGE and mul.src[0].src[0].dtype == dtypes.int32


def test_lower_index_dtype_64_bit_everywhere():
    """`Renderer.index_bits` 64: every index node is int64, whatever its range; other widths are refused."""
    buf = UOp.define_global(0, dtypes.float, 1024)
    r = UOp.range(32, 0)
    sink = UOp.sink(buf.index(r * 32 + 1, r < 31).store(UOp.const(dtypes.float, 1.0)))
    out = lower_index_dtype(sink, 64)
    ints = [u for u in out.toposort() if dtypes.is_int(u.dtype.scalar()) and u.op is not Ops.DEFINE_GLOBAL]
    assert ints and all(u.dtype == dtypes.int64 for u in ints)
    with pytest.raises(ValueError, match="index_bits"):
        lower_index_dtype(sink, 16)


def test_lower_index_dtype_in_a_kernel():
    buf = UOp.define_global(0, dtypes.float, 1024)
    r = UOp.range(32, 0)
    n = Variable("n", 1, 32)
    idx = r * 32 + n - 1
    sink = UOp.sink(buf.index(idx, r < n).store(UOp.const(dtypes.float, 1.0)))
    out = lower_index_dtype(sink)
    assert not any(u.dtype.scalar() == dtypes.index for u in out.toposort())
    ops = {u.op: u for u in out.toposort()}
    assert ops[Ops.DEFINE_VAR].dtype == dtypes.int32 and ops[Ops.CMPLT].src[0].dtype == dtypes.int32
    from tinycore.uop.spec import type_verify

    type_verify(out, "kernel")


def test_lower_index_dtype_keeps_values():
    x = Variable("x", 0, 1000)
    e = (x * 3000000) // 7 + (x % 5)
    out = lower_index_dtype(e)
    assert out.dtype == dtypes.int64
    for val in (0, 1, 999, 1000):
        assert sym_infer(out, {"x": val}) == sym_infer(e, {"x": val})
