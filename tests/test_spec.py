"""The IR verifier: stage op sets, per-op dtype/source/arg rules, program order, and SPEC=1 in graph_rewrite."""

from __future__ import annotations

import pytest

from tinycore.dtype import AddrSpace, dtypes
from tinycore.helpers import Context
from tinycore.uop.ops import AxisType, Ops, UOp, Variable
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.spec import SpecError, type_verify


@pytest.fixture(autouse=True)
def _spec_on():
    with Context(SPEC=1):
        yield


def a_kernel() -> UOp:
    out = UOp.define_global(0, dtypes.float, 64)
    inp = UOp.define_global(1, dtypes.float, 256)
    i = UOp.range(64, 0, AxisType.GLOBAL)
    r = UOp.range(4, 1, AxisType.REDUCE)
    n = Variable("n", 1, 4)
    val = inp.index(i * 4 + r, r < n).load(UOp.const(dtypes.float, 0.0))
    acc = val.reduce(r, op=Ops.ADD)
    return UOp.sink(out.index(i).store(acc.cast(dtypes.float) * 2.0))


def a_program() -> list[UOp]:
    buf = UOp.define_global(0, dtypes.int, 16)
    r = UOp.range(16, 0)
    gate = r < 8
    store = buf.index(r).store(r.cast(dtypes.int))
    iff = UOp(Ops.IF, dtypes.void, (gate,))
    endif = UOp(Ops.ENDIF, dtypes.void, (iff,))
    end = store.end(r)
    return [
        buf,
        UOp.const(dtypes.index, 16),
        r,
        UOp.const(dtypes.index, 8),
        gate,
        iff,
        buf.index(r),
        r.cast(dtypes.int),
        store,
        endif,
        end,
    ]


def tensor_graph() -> UOp:
    b = UOp.new_buffer("PYTHON", 12, dtypes.float, 0)
    t = b.reshape((3, 4)).permute((1, 0)).pad(((0, 1), (1, 0))).r(Ops.ADD, (0,))
    c = UOp.const(dtypes.float, 2.0, device="PYTHON").reshape((1, 1)).expand((1, 4))
    return UOp.sink((t * c).contiguous().copy_to_device("CLANG"), b.assign(b.detach()))


# ----- valid graphs pass


def test_valid_graphs_pass_their_stage():
    type_verify(a_kernel(), "kernel")
    type_verify(a_program(), "program")
    type_verify(tensor_graph(), "tensor")
    for g in (a_kernel(), tensor_graph()):
        type_verify(g, "any")


def test_unknown_stage_is_an_error():
    with pytest.raises(ValueError, match="unknown spec"):
        type_verify(a_kernel(), "lowered")


# ----- stage op sets


def test_ops_outside_the_stage_are_rejected():
    with pytest.raises(SpecError, match="Ops.DEFINE_GLOBAL is not allowed in a tensor graph"):
        type_verify(a_kernel(), "tensor")
    with pytest.raises(SpecError, match="Ops.(BUFFER|UNIQUE|DEVICE) is not allowed in a kernel graph"):
        type_verify(tensor_graph(), "kernel")
    with pytest.raises(SpecError, match="Ops.REDUCE is not allowed in a program"):
        type_verify(list(a_kernel().toposort()), "program")


# ----- per-op rules (one broken node each)


x = UOp.variable("x", 0, 9)
fx = UOp.const(dtypes.float, 1.0)
buf = UOp.define_global(0, dtypes.float, 16)


@pytest.mark.parametrize(
    "bad,message",
    [
        (UOp(Ops.ADD, dtypes.index, (x, fx)), "ADD sources must have the node's dtype"),
        (UOp(Ops.CMPLT, dtypes.index, (x, x)), "CMPLT must return dtypes.bool"),
        (UOp(Ops.WHERE, dtypes.index, (x, x, x)), "WHERE gate must be bool"),
        (UOp(Ops.IDIV, dtypes.float, (fx, fx)), "IDIV needs an integer dtype"),
        (UOp(Ops.SQRT, dtypes.index, (x,)), "SQRT needs a float dtype"),
        (UOp(Ops.ADD, dtypes.index, (x,)), "ADD needs 2 sources"),
        (UOp(Ops.CONST, dtypes.int, (), 1.5), "doesn't match dtype"),
        (UOp(Ops.CONST, dtypes.uint8, (), 300), "outside the range"),
        (UOp(Ops.BIND, dtypes.index, (x, UOp.const(dtypes.index, 12))), "outside"),
        (UOp(Ops.INDEX, dtypes.float.ptr(16), (buf, fx)), "index must be an integer"),
        (UOp(Ops.INDEX, dtypes.int.ptr(16), (buf, x)), "must be a pointer to dtypes.float"),
        (UOp(Ops.LOAD, dtypes.int, (buf.index(x),)), "must return dtypes.float"),
        (UOp(Ops.LOAD, dtypes.float, (x,)), "LOAD source must be a pointer"),
        (UOp(Ops.LOAD, dtypes.float, (buf.index(x), fx)), "needs a gated INDEX"),
        (UOp(Ops.STORE, dtypes.float, (buf.index(x), fx)), "STORE returns void"),
        (UOp(Ops.STORE, dtypes.void, (buf.index(x), x)), "STORE of dtypes.index"),
        (
            UOp(Ops.STORE, dtypes.void, (buf.index(x, UOp.const(dtypes.bool.vec(2), True)), UOp.vectorize(fx, fx, fx))),
            "one gate lane per element",
        ),
        (
            UOp(Ops.LOAD, dtypes.float.vec(4), (buf.index(x, UOp.const(dtypes.bool.vec(2), True)),)),
            "a 2-lane gate on an access of dtypes.float.vec",
        ),
        (UOp(Ops.RANGE, dtypes.index, (fx,), (0, AxisType.LOOP)), "one integer source"),
        (UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, 4),), 0), "RANGE arg must be"),
        (UOp(Ops.DEFINE_GLOBAL, dtypes.float, (), 0), "global pointer dtype"),
        (UOp(Ops.DEFINE_LOCAL, dtypes.float.ptr(4), (), "s"), "local pointer dtype"),
        (UOp(Ops.GEP, dtypes.float, (UOp.vectorize(fx, fx),), (2,)), "out of range"),
        (UOp(Ops.VECTORIZE, dtypes.float.vec(3), (fx, fx)), r"must be dtypes.float.vec\(2\)"),
        (UOp(Ops.BITCAST, dtypes.half, (fx,)), "BITCAST must keep the size"),
        (UOp(Ops.END, dtypes.void, (x, x)), "END takes"),
        (UOp(Ops.REDUCE, dtypes.float, (fx, UOp.range(4, 0)), Ops.SUB), "REDUCE takes"),
        (UOp(Ops.PERMUTE, dtypes.float, (buf,), (0, 0)), "permutation"),
        (UOp(Ops.DEVICE, arg=3), "device name"),
        (UOp(Ops.REDUCE_AXIS, dtypes.float, (fx,), (Ops.SUB, (0,))), "REDUCE_AXIS arg"),
    ],
)
def test_per_op_rules(bad, message):
    with pytest.raises(SpecError, match=message) as info:
        type_verify(UOp.sink(bad), "any")
    assert info.value.uop is bad
    assert "offending UOp" in str(info.value)


def test_local_and_reg_definitions():
    local = UOp(Ops.DEFINE_LOCAL, dtypes.float.ptr(32, AddrSpace.LOCAL), (), "smem")
    reg = UOp(Ops.DEFINE_REG, dtypes.float.ptr(4, AddrSpace.REG), (), 0)
    idx = UOp.range(4, 0)
    g = UOp.sink(
        local.index(idx).store(UOp.const(dtypes.float, 0.0)), reg.index(idx).store(UOp.const(dtypes.float, 1.0))
    )
    type_verify(g, "kernel")


# ----- linearized programs


def test_program_order_is_checked():
    prog = a_program()
    type_verify(prog, "program")
    swapped = [prog[1], prog[0], *prog[2:]]  # reordering two independent leaves is fine
    type_verify(swapped, "program")
    with pytest.raises(SpecError, match="not earlier in the program"):
        type_verify([prog[0], prog[2], prog[1], *prog[3:]], "program")
    with pytest.raises(SpecError, match="RANGE never closed"):
        type_verify(prog[:-1], "program")
    with pytest.raises(SpecError, match="innermost open range"):  # END(r) while the IF inside r is open
        type_verify([*prog[:9], prog[10], prog[9]], "program")
    with pytest.raises(SpecError, match="IF never closed"):
        type_verify(prog[:9], "program")


def test_end_must_close_the_innermost_range():
    buf = UOp.define_global(0, dtypes.int, 16)
    r0, r1 = UOp.range(4, 0), UOp.range(4, 1)
    store = buf.index(r0 * 4 + r1).store(UOp.const(dtypes.int, 1))
    body = [
        buf,
        UOp.const(dtypes.index, 4),
        r0,
        r1,
        r0 * 4,
        r0 * 4 + r1,
        buf.index(r0 * 4 + r1),
        UOp.const(dtypes.int, 1),
        store,
    ]
    good = [*body, store.end(r1), store.end(r1).end(r0)]
    type_verify(good, "program")
    bad = [*body, store.end(r0), store.end(r0).end(r1)]
    with pytest.raises(SpecError, match="not the innermost open range"):
        type_verify(bad, "program")


# ----- SPEC=1 inside graph_rewrite


def test_an_ill_formed_rewrite_fails_naming_the_pass():
    # a buggy rule: turns integer MUL into FDIV (a float op on integers)
    broken = PatternMatcher([(UPat(Ops.MUL, name="m"), lambda m: UOp(Ops.FDIV, m.dtype, m.src))])
    g = UOp.sink((x * 2) + 1)
    with pytest.raises(SpecError, match="after rewrite pass 'make fdiv'") as info:
        graph_rewrite(g, broken, name="make fdiv")
    assert info.value.pass_name == "make fdiv" and info.value.uop.op is Ops.FDIV
    assert "FDIV needs a float dtype" in str(info.value)


def test_spec_off_or_unnamed_passes_are_not_verified():
    broken = PatternMatcher([(UPat(Ops.MUL, name="m"), lambda m: UOp(Ops.FDIV, m.dtype, m.src))])
    g = UOp.sink(x * 2)
    assert graph_rewrite(g, broken).src[0].op is Ops.FDIV  # no name: not verified
    with Context(SPEC=0):
        assert graph_rewrite(g, broken, name="unchecked").src[0].op is Ops.FDIV


def test_the_pass_stage_is_used():
    to_buffer = PatternMatcher(
        [(UPat(Ops.DEFINE_GLOBAL, name="d"), lambda d: UOp.new_buffer("PYTHON", 64, dtypes.float, 0))]
    )
    # the rewritten kernel now has a BUFFER under STORE/INDEX: fine for "any" dtype rules? no: INDEX of a
    # non-pointer keeps the value dtype, so the graph is structurally wrong for a kernel
    with pytest.raises(SpecError, match="kernel"):
        graph_rewrite(a_kernel(), to_buffer, name="bufferize", spec="kernel")


def test_threefry_is_valid_on_uint64_vectors_and_random_kernels_pass_the_spec(run_python) -> None:
    key = UOp(Ops.VCONST, dtypes.uint64.vec(4), (), (1, 2, 3, 4))
    type_verify([key, UOp(Ops.THREEFRY, dtypes.uint64.vec(4), (key, key))], "any")
    with pytest.raises(SpecError, match="THREEFRY works on uint64"):
        bad = UOp(Ops.CONST, dtypes.uint32, (), 1)
        type_verify([bad, UOp(Ops.THREEFRY, dtypes.uint32, (bad, bad))], "any")
    out = run_python("from tinycore import Tensor\nprint(Tensor.rand(4).numpy().shape)", env={"SPEC": "1"})
    assert out.returncode == 0 and "(4,)" in out.stdout, out.stderr[-2000:]
