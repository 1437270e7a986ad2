"""The PYTHON interpreter on hand-written linearized programs: C semantics, memory checks, races, loops, WMMA."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from tinycore.dtype import AddrSpace, dtypes
from tinycore.renderer import TensorCore
from tinycore.runtime.python_device import PYTHON_TENSOR_CORES, PythonCompiler, PythonRenderer, decode_program
from tinycore.runtime.python_interpreter import Interpreter, InterpreterError, RaceError
from tinycore.uop.ops import AxisType, Ops, UOp, exec_alu


def encode(uops: list[UOp]) -> list[tuple]:
    """The (op, dtype, source positions, arg) tuples the PYTHON compiler produces, through the real renderer."""
    return decode_program(PythonCompiler().compile(PythonRenderer().render(uops)))


def flat(sink: UOp) -> list[UOp]:
    """A loop-free graph in execution order (its toposort, without the SINK)."""
    return [u for u in sink.toposort() if u.op is not Ops.SINK]


def run(uops, bufs, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=(), name="test_kernel"):
    Interpreter(encode(uops), name, PYTHON_TENSOR_CORES)(
        [memoryview(b).cast("B") for b in bufs], global_size, local_size, vals
    )


def i32(v: int) -> UOp:
    return UOp.const(dtypes.int, v)


def gid(n: int, name: str = "gidx0") -> UOp:
    return UOp.special(i32(n), name, dtypes.int)


def binop_program(op: Ops, dt, n: int) -> list[UOp]:
    """out[i] = a[i] op b[i] for i < n (one work-item each)."""
    out, a, b = (
        UOp.define_global(i, dt if i or op not in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dtypes.bool, n)
        for i in range(3)
    )
    i = gid(n)
    val = UOp(op, out.dtype.base, (a.index(i).load(), b.index(i).load()))
    return flat(UOp.sink(out.index(i).store(val)))


INT_OPS = [
    Ops.ADD,
    Ops.SUB,
    Ops.MUL,
    Ops.IDIV,
    Ops.MOD,
    Ops.MAX,
    Ops.AND,
    Ops.OR,
    Ops.XOR,
    Ops.CMPLT,
    Ops.CMPNE,
    Ops.CMPEQ,
    Ops.SHL,
    Ops.SHR,
]


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32, dtypes.int64])
@pytest.mark.parametrize("op", INT_OPS)
def test_integer_ops_match_exec_alu(op, dt):
    rng = np.random.default_rng(0)
    nd = np.dtype(dt.fmt)
    info = np.iinfo(nd)
    n = 64
    a = rng.integers(info.min, info.max, n, dtype=nd, endpoint=True)
    b = rng.integers(info.min, info.max, n, dtype=nd, endpoint=True)
    a[:8] = [info.min, info.max, -7 if info.min < 0 else 7, 7, 0, 5, info.min, 1]
    b[:8] = [-1 if info.min < 0 else 1, 1, 2, -2 if info.min < 0 else 2, 0, 0, info.max, 3]
    if op in (Ops.SHL, Ops.SHR):
        b = (b % (8 * nd.itemsize)).astype(nd)
    is_cmp = op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
    out = np.zeros(n, np.bool_ if is_cmp else nd)
    run(binop_program(op, dt, n), [out, a, b], (n, 1, 1))
    want = [exec_alu(op, dt, (int(x), int(y))) for x, y in zip(a, b)]
    assert out.tolist() == want


@pytest.mark.parametrize("op", [Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.CMPLT, Ops.CMPNE])
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16])
def test_float_ops_match_exec_alu(op, dt):
    vals = [0.0, -0.0, 1.5, -2.25, 3e4, math.inf, -math.inf, math.nan, 1e-3, 7.0]
    a = np.array(vals, np.dtype(dt.fmt))
    b = np.array(vals[::-1], np.dtype(dt.fmt))
    n = len(vals)
    is_cmp = op in (Ops.CMPLT, Ops.CMPNE)
    out = np.zeros(n, np.bool_ if is_cmp else np.dtype(dt.fmt))
    run(binop_program(op, dt, n), [out, a, b], (n, 1, 1))
    want = [exec_alu(op, dt, (float(x), float(y))) for x, y in zip(a, b)]
    for got, w in zip(out.tolist(), want):
        assert got == w or (isinstance(w, float) and math.isnan(w) and math.isnan(got)), (got, w)


def test_division_and_modulo_truncate_like_c():
    a = np.array([-7, 7, -7, 7, 5, -5], np.int32)
    b = np.array([2, -2, -2, 2, 0, 0], np.int32)
    q, r = np.zeros(6, np.int32), np.zeros(6, np.int32)
    run(binop_program(Ops.IDIV, dtypes.int, 6), [q, a, b], (6, 1, 1))
    run(binop_program(Ops.MOD, dtypes.int, 6), [r, a, b], (6, 1, 1))
    assert q.tolist() == [-3, -3, 3, 3, 0, 0]
    assert r.tolist() == [-1, 1, -1, 1, 0, 0]


def cast_program(src, dst, n: int, bitcast: bool = False) -> list[UOp]:
    out, a = UOp.define_global(0, dst, n), UOp.define_global(1, src, n)
    i = gid(n)
    v = a.index(i).load()
    return flat(UOp.sink(out.index(i).store(v.bitcast(dst) if bitcast else v.cast(dst))))


def test_casts_follow_c():
    f = np.array([2.7, -2.7, 1e10, -1e10, math.nan, math.inf, 255.9, -0.5], np.float32)
    out = np.zeros(8, np.int32)
    run(cast_program(dtypes.float, dtypes.int, 8), [out, f], (8, 1, 1))
    assert out.tolist() == [exec_alu_cast(x, dtypes.int) for x in f]
    u8 = np.zeros(8, np.uint8)
    run(cast_program(dtypes.float, dtypes.uint8, 8), [u8, f], (8, 1, 1))
    assert u8.tolist() == [exec_alu_cast(x, dtypes.uint8) for x in f]
    b = np.zeros(8, np.bool_)
    run(cast_program(dtypes.float, dtypes.bool, 8), [b, f], (8, 1, 1))
    assert b.tolist() == [True, True, True, True, True, True, True, True]
    ints = np.array([300, -1, 0, 255, 256, -129, 127, 1], np.int32)
    run(cast_program(dtypes.int, dtypes.uint8, 8), [u8, ints], (8, 1, 1))
    assert u8.tolist() == [44, 255, 0, 255, 0, 127, 127, 1]


def exec_alu_cast(x: float, dt) -> int:
    from tinycore.uop.ops import cast_value

    return cast_value(float(x), dt)


def test_bfloat16_storage_and_rounding():
    vals = np.array([1.0, 1.00390625, 3.14159, -2.5e-3, 65504.0, math.inf, 1 / 3, 0.0], np.float32)
    bits = np.zeros(8, np.uint16)
    run(cast_program(dtypes.float, dtypes.bfloat16, 8), [bits, vals], (8, 1, 1))
    want = [struct.unpack("I", struct.pack("f", exec_alu_cast_float(v)))[0] >> 16 for v in vals]
    assert bits.tolist() == want
    back = np.zeros(8, np.float32)
    run(cast_program(dtypes.bfloat16, dtypes.float, 8), [back, bits], (8, 1, 1))
    assert back.tolist() == [exec_alu_cast_float(v) for v in vals]


def exec_alu_cast_float(x: float) -> float:
    from tinycore.uop.ops import cast_value

    return cast_value(float(x), dtypes.bfloat16)


def test_bitcast_and_float16():
    f = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    out = np.zeros(4, np.uint32)
    run(cast_program(dtypes.float, dtypes.uint32, 4, bitcast=True), [out, f], (4, 1, 1))
    assert out.tolist() == f.view(np.uint32).tolist()
    h = np.zeros(4, np.float16)
    run(cast_program(dtypes.float, dtypes.half, 4), [h, np.array([1 / 3, 65504.0, 1e-8, -1.5], np.float32)], (4, 1, 1))
    assert h.tolist() == np.array([1 / 3, 65504.0, 1e-8, -1.5], np.float32).astype(np.float16).tolist()


def test_threefry_matches_exec_alu():
    x = np.array([0, 1, 2**40 + 5, 2**64 - 1], np.uint64)
    k = np.array([0, 7, 123456789, 2**63], np.uint64)
    out = np.zeros(4, np.uint64)
    run(binop_program(Ops.THREEFRY, dtypes.uint64, 4), [out, x, k], (4, 1, 1))
    assert out.tolist() == [exec_alu(Ops.THREEFRY, dtypes.uint64, (int(a), int(b))) for a, b in zip(x, k)]


# ----- memory safety


def test_out_of_bounds_load_and_store_raise_naming_kernel_buffer_and_index():
    out, a = UOp.define_global(0, dtypes.float, 4), UOp.define_global(1, dtypes.float, 4)
    i = gid(4)
    prog = flat(UOp.sink(out.index(i).store(a.index(i + 1).load())))
    with pytest.raises(IndexError, match=r"oob_kernel.*buffer arg 1.*index 4"):
        run(prog, [np.zeros(4, np.float32), np.zeros(4, np.float32)], (4, 1, 1), name="oob_kernel")
    prog = flat(UOp.sink(out.index(i * 2).store(a.index(i).load())))
    with pytest.raises(IndexError, match=r"store to buffer arg 0.*index 6"):
        run(prog, [np.zeros(4, np.float32), np.zeros(4, np.float32)], (4, 1, 1))


def test_gated_load_returns_alt_without_touching_memory():
    out, a = UOp.define_global(0, dtypes.float, 8), UOp.define_global(1, dtypes.float, 4)
    i = gid(8)
    valid = i < 4
    val = a.index(i, valid).load(UOp.const(dtypes.float, -1.0))  # i >= 4 would be out of bounds
    o = np.zeros(8, np.float32)
    run(flat(UOp.sink(out.index(i).store(val))), [o, np.arange(4, dtype=np.float32)], (8, 1, 1))
    assert o.tolist() == [0, 1, 2, 3, -1, -1, -1, -1]
    bad = a.index(i, i < 5).load(UOp.const(dtypes.float, -1.0))  # lane 4 is active and out of bounds
    with pytest.raises(IndexError, match="index 4"):
        run(flat(UOp.sink(out.index(i).store(bad))), [o, np.arange(4, dtype=np.float32)], (8, 1, 1))


def test_if_masks_stores():
    out = UOp.define_global(0, dtypes.int, 8)
    i = gid(8)
    ifu = UOp(Ops.IF, dtypes.void, (i < 3,))
    store = out.index(i).store(i + 100)
    prog = [
        out,
        i32(8),
        i,
        i32(3),
        i < 3,
        ifu,
        i32(100),
        i + 100,
        out.index(i),
        store,
        UOp(Ops.ENDIF, dtypes.void, (ifu,)),
    ]
    o = np.zeros(8, np.int32)
    run(prog, [o], (8, 1, 1))
    assert o.tolist() == [100, 101, 102, 0, 0, 0, 0, 0]


def test_register_bounds_and_uninitialized_reads():
    out = UOp.define_global(0, dtypes.int, 1)
    reg = UOp(Ops.DEFINE_REG, dtypes.int.ptr(2, AddrSpace.REG), (), 0)
    prog = flat(UOp.sink(out.index(i32(0)).store(reg.index(i32(1)).load())))
    with pytest.raises(InterpreterError, match="read before it is written"):
        run(prog, [np.zeros(1, np.int32)])
    prog = flat(UOp.sink(reg.index(i32(2)).store(i32(5))))
    with pytest.raises(IndexError, match="register 0"):
        run(prog, [np.zeros(1, np.int32)])


# ----- shared memory: poison, barriers, races


def group_sum_program(with_barrier: bool, n: int = 8) -> list[UOp]:
    """Each of `n` lanes stores its input to shared memory; lane 0 (all lanes, really) sums the slots."""
    out, a = UOp.define_global(0, dtypes.float, 2), UOp.define_global(1, dtypes.float, 2 * n)
    lbuf = UOp(Ops.DEFINE_LOCAL, dtypes.float.ptr(n, AddrSpace.LOCAL), (), 0)
    acc = UOp(Ops.DEFINE_REG, dtypes.float.ptr(1, AddrSpace.REG), (), 0)
    g, lane = gid(2), UOp.special(i32(n), "lidx0", dtypes.int)
    st = lbuf.index(lane).store(a.index(g * n + lane).load())
    bar = UOp(Ops.BARRIER, dtypes.void, (st,))
    r = UOp.range(i32(n), 0, AxisType.REDUCE, dtypes.int)
    zero = i32(0)
    init = acc.index(zero).store(UOp.const(dtypes.float, 0.0))
    after_init = acc.after(init, r).index(zero)
    lptr = (lbuf.after(bar) if with_barrier else lbuf.after(st)).index(r)
    upd = after_init.store(after_init.load() + lptr.load())
    end = UOp(Ops.END, dtypes.void, (upd, r))
    res = acc.after(end).index(zero).load()
    gate = lane.eq(0)
    ifu = UOp(Ops.IF, dtypes.void, (gate,))
    store = out.index(g).store(res)
    prog = [
        out,
        a,
        lbuf,
        acc,
        i32(2),
        i32(n),
        zero,
        UOp.const(dtypes.float, 0.0),
        g,
        lane,
        g * n,
        g * n + lane,
        a.index(g * n + lane),
        a.index(g * n + lane).load(),
        lbuf.index(lane),
        st,
    ]
    prog += [bar, lbuf.after(bar)] if with_barrier else [lbuf.after(st)]
    prog += [
        acc.index(zero),
        init,
        r,
        acc.after(init, r),
        after_init,
        after_init.load(),
        lptr,
        lptr.load(),
        after_init.load() + lptr.load(),
        upd,
        end,
        acc.after(end),
        acc.after(end).index(zero),
        res,
        gate,
        ifu,
        out.index(g),
        store,
        UOp(Ops.ENDIF, dtypes.void, (ifu,)),
    ]
    return prog


def test_shared_memory_reduction_with_barrier_is_correct():
    a = np.arange(16, dtype=np.float32)
    o = np.zeros(2, np.float32)
    run(group_sum_program(True), [o, a], (2, 1, 1), (8, 1, 1))
    assert o.tolist() == [a[:8].sum(), a[8:].sum()]


def test_missing_barrier_is_caught():
    a = np.arange(16, dtype=np.float32)
    with pytest.raises(RaceError, match="missing BARRIER"):
        run(group_sum_program(False), [np.zeros(2, np.float32), a], (2, 1, 1), (8, 1, 1))


def test_uninitialized_shared_memory_read_is_caught():
    out = UOp.define_global(0, dtypes.float, 4)
    lbuf = UOp(Ops.DEFINE_LOCAL, dtypes.float.ptr(4, AddrSpace.LOCAL), (), 0)
    lane = UOp.special(i32(4), "lidx0", dtypes.int)
    prog = flat(UOp.sink(out.index(lane).store(lbuf.index(lane).load())))
    with pytest.raises(InterpreterError, match="never written"):
        run(prog, [np.zeros(4, np.float32)], (1, 1, 1), (4, 1, 1))


def test_write_after_read_without_barrier_is_a_race():
    out = UOp.define_global(0, dtypes.float, 4)
    lbuf = UOp(Ops.DEFINE_LOCAL, dtypes.float.ptr(4, AddrSpace.LOCAL), (), 0)
    lane = UOp.special(i32(4), "lidx0", dtypes.int)
    st1 = lbuf.index(lane).store(UOp.const(dtypes.float, 1.0))
    bar = UOp(Ops.BARRIER, dtypes.void, (st1,))
    neighbour = (lane + 1) % 4
    read = lbuf.after(bar).index(neighbour).load()
    st2 = lbuf.after(bar).index(lane).store(read + 1.0)  # no barrier between the neighbour's read and this write
    prog = flat(UOp.sink(out.index(lane).store(read), st2))
    with pytest.raises(RaceError):
        run(prog, [np.zeros(4, np.float32)], (1, 1, 1), (4, 1, 1))


def test_barrier_in_divergent_code_is_caught():
    lbuf = UOp(Ops.DEFINE_LOCAL, dtypes.float.ptr(4, AddrSpace.LOCAL), (), 0)
    lane = UOp.special(i32(4), "lidx0", dtypes.int)
    st = lbuf.index(lane).store(UOp.const(dtypes.float, 1.0))
    ifu = UOp(Ops.IF, dtypes.void, (lane < 2,))
    bar = UOp(Ops.BARRIER, dtypes.void, (st, ifu))
    prog = [
        lbuf,
        i32(4),
        lane,
        UOp.const(dtypes.float, 1.0),
        lbuf.index(lane),
        st,
        i32(2),
        lane < 2,
        ifu,
        bar,
        UOp(Ops.ENDIF, dtypes.void, (ifu,)),
    ]
    with pytest.raises(InterpreterError, match="only some lanes"):
        run(prog, [], (1, 1, 1), (4, 1, 1))


def test_shared_memory_is_poisoned_with_nan():
    out = UOp.define_global(0, dtypes.float, 1)
    lbuf = UOp(Ops.DEFINE_LOCAL, dtypes.float.ptr(4, AddrSpace.LOCAL), (), 0)
    from tinycore.runtime.python_interpreter import _LaunchCtx

    ctx = _LaunchCtx((1, 1, 1), (4, 1, 1), 1, "k")
    mem = ctx.local(0, lbuf.dtype, 0)
    assert np.isnan(mem.data).all()
    ictx = ctx.local(1, dtypes.int.ptr(2, AddrSpace.LOCAL), 1)
    assert ictx.data.view(np.uint8).ravel().tolist() == [0xAB] * 8
    assert out.dtype.size == 1


def test_global_read_of_another_work_items_write_is_a_race():
    buf = UOp.define_global(0, dtypes.int, 4)
    i = gid(4)
    st = buf.index(i).store(i)
    rd = buf.index((i + 1) % 4).load()  # reads the neighbour's freshly written element: a race between work-items
    prog = [
        buf,
        i32(4),
        i,
        buf.index(i),
        st,
        i32(1),
        i + 1,
        (i + 1) % 4,
        buf.index((i + 1) % 4),
        rd,
        buf.index(i).store(rd),
    ]
    with pytest.raises(RaceError, match="written by another work-item"):
        run(prog, [np.zeros(4, np.int32)], (4, 1, 1))


def test_launch_size_must_match_special():
    out = UOp.define_global(0, dtypes.int, 8)
    i = gid(4)
    with pytest.raises(InterpreterError, match="gidx0 has size 4 but the launch gives 8"):
        run(flat(UOp.sink(out.index(i).store(i))), [np.zeros(8, np.int32)], (8, 1, 1))


def test_variables_are_checked_and_used():
    out = UOp.define_global(0, dtypes.int, 4)
    n = UOp.variable("n", 1, 4, dtypes.int)
    i = UOp.special(n, "gidx0", dtypes.int)
    prog = flat(UOp.sink(out.index(i).store(i * n)))
    o = np.zeros(4, np.int32)
    run(prog, [o], (3, 1, 1), vals=(3,))
    assert o.tolist() == [0, 3, 6, 0]
    with pytest.raises(InterpreterError, match="outside"):
        run(prog, [o], (9, 1, 1), vals=(9,))


# ----- loops


def loop_sum_program(n: int, rows: int, op: Ops = Ops.ADD, dt=dtypes.float) -> list[UOp]:
    """out[g] = reduce(op, a[g*n : g*n+n]) with a register accumulator and one RANGE."""
    out, a = UOp.define_global(0, dt, rows), UOp.define_global(1, dt, rows * n)
    acc = UOp(Ops.DEFINE_REG, dt.ptr(1, AddrSpace.REG), (), 0)
    g = gid(rows)
    r = UOp.range(i32(n), 0, AxisType.REDUCE, dtypes.int)
    zero = i32(0)
    ident = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtypes.min(dt)}[op]
    init = acc.index(zero).store(UOp.const(dt, ident))
    p = acc.after(init, r).index(zero)
    x = a.index(g * n + r).load()
    upd = p.store(p.load().alu(op, x))
    end = UOp(Ops.END, dtypes.void, (upd, r))
    res = acc.after(end).index(zero).load()
    return [
        out,
        a,
        acc,
        i32(rows),
        i32(n),
        zero,
        UOp.const(dt, ident),
        g,
        acc.index(zero),
        init,
        g * n,
        r,
        acc.after(init, r),
        p,
        p.load(),
        g * n + r,
        a.index(g * n + r),
        x,
        p.load().alu(op, x),
        upd,
        end,
        acc.after(end),
        acc.after(end).index(zero),
        res,
        out.index(g),
        out.index(g).store(res),
    ]


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX, Ops.MUL])
def test_reduction_loop_is_vectorized_and_correct(op):
    rows, n = 3, 5000
    rng = np.random.default_rng(1)
    a = rng.uniform(0.999, 1.001, rows * n).astype(np.float32)
    o = np.zeros(rows, np.float32)
    prog = encode(loop_sum_program(n, rows, op))
    interp = Interpreter(prog, "r")
    assert "_vrng" in interp.source and ".acc(" in interp.source
    interp([memoryview(o).cast("B"), memoryview(a).cast("B")], (rows, 1, 1), (1, 1, 1), ())
    want = {Ops.ADD: np.sum, Ops.MAX: np.max, Ops.MUL: np.prod}[op](a.reshape(rows, n).astype(np.float64), axis=1)
    np.testing.assert_allclose(o, want, rtol=1e-4)


def test_integer_reduction_wraps():
    rows, n = 2, 300
    a = np.full(rows * n, 2**30, np.int32)
    o = np.zeros(rows, np.int32)
    run(loop_sum_program(n, rows, Ops.ADD, dtypes.int), [o, a], (rows, 1, 1))
    assert o.tolist() == [exec_alu(Ops.MUL, dtypes.int, (2**30, n))] * rows


def test_loop_writing_its_own_input_is_not_vectorized():
    # out[i] = out[i-1] + 1 in one work-item: a loop-carried dependence through memory
    buf = UOp.define_global(0, dtypes.int, 8)
    r = UOp.range(i32(7), 0, AxisType.LOOP, dtypes.int)
    prev = buf.index(r).load()
    prog = [
        buf,
        i32(7),
        i32(1),
        r,
        buf.index(r),
        prev,
        r + 1,
        buf.index(r + 1),
        prev + 1,
        buf.index(r + 1).store(prev + 1),
        UOp(Ops.END, dtypes.void, (buf.index(r + 1).store(prev + 1), r)),
    ]
    interp = Interpreter(encode(prog), "chain")
    assert "_vrng" not in interp.source
    o = np.zeros(8, np.int32)
    interp([memoryview(o).cast("B")], (1, 1, 1), (1, 1, 1), ())
    assert o.tolist() == list(range(8))


def test_vectors_vectorize_and_gep():
    out = UOp.define_global(0, dtypes.float, 8)
    i = gid(4)
    v = UOp.vectorize(i.cast(dtypes.float), (i * 10).cast(dtypes.float))
    w = UOp(Ops.ADD, v.dtype, (v, v))
    prog = flat(UOp.sink(out.index(i * 2).store(w.gep(1)), out.index(i * 2 + 1).store(w.gep(0))))
    o = np.zeros(8, np.float32)
    run(prog, [o], (4, 1, 1))
    assert o.tolist() == [0, 0, 20, 2, 40, 4, 60, 6]


# ----- tensor cores


@pytest.mark.parametrize("tc", PYTHON_TENSOR_CORES, ids=lambda t: t.name)
def test_wmma_emulation_matches_numpy(tc: TensorCore):
    n, m, k = tc.dims
    ea, eb, ec = tc.elements_per_thread
    rng = np.random.default_rng(2)
    A, B, C = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal((m, n))
    groups = 2
    lanes = tc.threads
    din = np.dtype(tc.dtype_in.fmt)

    # per-lane register contents from the declared layouts (group 1 gets 2*A)
    def regs(mat, layout, scale):
        return np.array([[mat[r, c] * scale for r, c in layout[t]] for t in range(lanes)])

    a_in = np.concatenate([regs(A, tc.swizzle[0], s) for s in (1, 2)]).astype(din)
    b_in = np.concatenate([regs(B, tc.swizzle[1], 1) for _ in range(groups)]).astype(din)
    c_in = np.concatenate([regs(C, tc.swizzle[2], 1) for _ in range(groups)]).astype(np.float32)
    bufs = [np.zeros(groups * lanes * ec, np.float32), a_in.ravel(), b_in.ravel(), c_in.ravel()]
    out, ga, gb, gc = (
        UOp.define_global(j, dt, len(b))
        for j, (dt, b) in enumerate(zip((dtypes.float, tc.dtype_in, tc.dtype_in, dtypes.float), bufs))
    )
    g, lane = gid(groups), UOp.special(i32(lanes), "lidx0", dtypes.int)
    w = g * lanes + lane

    def vec(buf, cnt):
        return UOp.vectorize(*(buf.index(w * cnt + e).load() for e in range(cnt)))

    d = UOp(Ops.WMMA, dtypes.float.vec(ec), (vec(ga, ea), vec(gb, eb), vec(gc, ec)), (tc.name,))
    prog = flat(UOp.sink(*(out.index(w * ec + e).store(d.gep(e)) for e in range(ec))))
    run(prog, bufs, (groups, 1, 1), (lanes, 1, 1))
    got = bufs[0].reshape(groups, lanes, ec)
    for gi, scale in enumerate((1, 2)):
        a_q = (
            A.astype(din).astype(np.float64) * scale
            if din == np.float32
            else (A * scale).astype(din).astype(np.float64)
        )
        D = a_q @ B.astype(din).astype(np.float64) + C.astype(np.float32)
        want = np.array([[D[r, c] for r, c in tc.swizzle[2][t]] for t in range(lanes)])
        np.testing.assert_allclose(got[gi], want, rtol=1e-3, atol=1e-3)
