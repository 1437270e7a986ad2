"""The linearized program: structure (ENDs balance RANGEs, defines first, IF/ENDIF), hoisting, index dtypes."""

from __future__ import annotations

import pytest

from tinycore.codegen import Opt, OptOps, get_program
from tinycore.codegen.linearize import linearize
from tinycore.dtype import AddrSpace, PtrDType, dtypes
from tinycore.runtime.python_device import PythonRenderer
from tinycore.uop.ops import AxisType, Ops, UOp, Variable
from tinycore.uop.spec import type_verify


class LoopRenderer(PythonRenderer):
    has_local = False
    has_shared = False


def load(arg: int, size: int, dt=dtypes.float) -> UOp:
    return UOp(Ops.LOAD, dt, (UOp.define_global(arg, dt, size),))


def matmul_ast(m=4, k=8, n=3) -> UOp:
    x = load(1, m * k).reshape((m, k, 1)).expand((m, k, n))
    y = load(2, k * n).reshape((1, k, n)).expand((m, k, n))
    return UOp.sink(UOp.define_global(0, dtypes.float, m * n).reshape((m, 1, n)).store((x * y).r(Ops.ADD, (1,))))


def symbolic_ast() -> UOp:
    n = Variable("n", 1, 16)
    m = Variable("m", 1, 4)
    x = load(2, 64).shrink(((0, n * m),)).reshape((n, m)).r(Ops.ADD, (1,))
    return UOp.sink(UOp.define_global(1, dtypes.float, 16).shrink(((0, n),)).reshape((n, 1)).store(x))


def padded_ast() -> UOp:
    x = load(1, 12).reshape((3, 4)).pad(((1, 1), (2, 0))).flip((True, False))
    return UOp.sink(UOp.define_global(0, dtypes.float, 30).reshape((5, 6)).store(x + x))


def nested_ast() -> UOp:
    x = load(1, 32).reshape((8, 4))
    return UOp.sink(
        UOp.define_global(0, dtypes.float, 1)
        .reshape((1, 1))
        .store(x.r(Ops.MAX, (1,)).r(Ops.ADD, (0,)) + x.r(Ops.ADD, (0, 1)))
    )


KERNELS = {
    "matmul": (matmul_ast, None),
    "matmul_local_group": (matmul_ast, [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 0, 4)]),
    "matmul_upcast_unroll": (matmul_ast, [Opt(OptOps.UPCAST, 1, 3), Opt(OptOps.UNROLL, 0, 2)]),
    "symbolic": (symbolic_ast, None),
    "padded": (padded_ast, None),
    "nested": (nested_ast, None),
}
RENDERERS = {"gpu": PythonRenderer(), "loops": LoopRenderer()}


def programs():
    for kname, (make, opts) in KERNELS.items():
        for rname, ren in RENDERERS.items():
            if opts and not ren.has_local and any(o.op in (OptOps.LOCAL, OptOps.GROUP) for o in opts):
                continue
            yield pytest.param(make(), ren, opts, id=f"{kname}-{rname}")


@pytest.mark.parametrize("ast,renderer,opts", list(programs()))
def test_program_structure(ast, renderer, opts):
    uops = get_program(ast, renderer, opts).uops
    type_verify(uops, "program")  # every source earlier, ENDs close the innermost RANGE, IF/ENDIF nest
    depth = 0
    for u in uops:
        depth += (u.op is Ops.RANGE) - (u.op is Ops.END)
        assert depth >= 0
    assert depth == 0 and sum(u.op is Ops.RANGE for u in uops) == sum(u.op is Ops.END for u in uops)
    # definitions first: DEFINE_GLOBALs in argument order, then DEFINE_VARs
    kinds = [u.op for u in uops]
    n_glob = kinds.count(Ops.DEFINE_GLOBAL)
    assert kinds[:n_glob] == [Ops.DEFINE_GLOBAL] * n_glob
    assert [u.arg for u in uops[:n_glob]] == sorted(u.arg for u in uops[:n_glob])
    n_var = kinds.count(Ops.DEFINE_VAR)
    assert kinds[n_glob : n_glob + n_var] == [Ops.DEFINE_VAR] * n_var
    # dtypes.index never reaches the renderer
    for u in uops:
        dt = u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype
        assert dt.scalar() != dtypes.index, u
    assert not any(u.op in (Ops.REDUCE, Ops.REDUCE_AXIS, Ops.SINK) or u.op in (Ops.RESHAPE, Ops.PERMUTE) for u in uops)


def test_symbolic_program_vars_in_order():
    p = get_program(symbolic_ast(), PythonRenderer())
    assert p.vars == ["m", "n"]
    assert [u.arg[0] for u in p.uops if u.op is Ops.DEFINE_VAR] == ["m", "n"]
    assert all(u.dtype == dtypes.int for u in p.uops if u.op is Ops.DEFINE_VAR)


def test_range_independent_work_is_hoisted_out_of_inner_loops():
    # out[i, j] = exp2(a[i]) * b[j]: a's load and the exp2 don't depend on j, so they sit before RANGE j
    a = load(1, 4).reshape((4, 1)).expand((4, 5))
    b = load(2, 5).reshape((1, 5)).expand((4, 5))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, 20).reshape((4, 5)).store(UOp(Ops.EXP2, dtypes.float, (a,)) * b))
    uops = get_program(ast, LoopRenderer(), []).uops
    ranges = [i for i, u in enumerate(uops) if u.op is Ops.RANGE]
    assert len(ranges) == 2
    outer, inner = ranges
    [exp] = [i for i, u in enumerate(uops) if u.op is Ops.EXP2] or [None]
    if exp is not None:  # (a decomposition may have replaced EXP2 by basic ops; then check the load)
        assert outer < exp < inner
    load_a = [i for i, u in enumerate(uops) if u.op is Ops.LOAD and u.src[0].src[0].arg == 1]
    assert outer < load_a[0] < inner
    # and constants live before every loop
    assert all(i < outer for i, u in enumerate(uops) if u.op is Ops.CONST)


def test_work_no_loop_needs_goes_after_the_loops_of_its_block():
    """out[i] = old[i] - sum_k(a[i, k]) (an in-place update's epilogue): the load of `old` and the output's address
    are needed by no loop, so they come after the reduce loop's END, not before it (held across the loop they
    would take registers the loop needs); the reduce's own inputs stay inside it."""
    old = load(1, 4)
    total = load(2, 32).reshape((4, 8)).r(Ops.ADD, (1,)).reshape((4,))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, 4).store(old - total))
    uops = get_program(ast, LoopRenderer(), []).uops
    [outer, inner] = [i for i, u in enumerate(uops) if u.op is Ops.RANGE]
    inner_end = next(i for i, u in enumerate(uops) if u.op is Ops.END and u.src[-1] is uops[inner])
    load_old = next(i for i, u in enumerate(uops) if u.op is Ops.LOAD and u.src[0].src[0].arg == 1)
    load_a = next(i for i, u in enumerate(uops) if u.op is Ops.LOAD and u.src[0].src[0].arg == 2)
    assert outer < inner < load_a < inner_end < load_old


def test_loop_invariant_reduce_is_outside_the_output_loop():
    # out[i] = a[i] + sum(b): the sum doesn't depend on i
    a = load(1, 4)
    s = load(2, 8).reshape((1, 8)).r(Ops.ADD, (1,)).reshape((1,)).expand((4,))
    uops = get_program(UOp.sink(UOp.define_global(0, dtypes.float, 4).store(a + s)), LoopRenderer(), []).uops
    rngs = [u for u in uops if u.op is Ops.RANGE]
    assert [r.arg[1] for r in rngs] == [AxisType.REDUCE, AxisType.LOOP]
    first_end = next(i for i, u in enumerate(uops) if u.op is Ops.END)
    assert first_end < uops.index(rngs[1])  # the reduce loop closes before the output loop opens


def test_separate_and_nested_reduce_loops():
    uops = get_program(nested_ast(), LoopRenderer(), []).uops
    opened, nest = [], []
    for u in uops:
        if u.op is Ops.RANGE:
            opened.append(u)
            nest.append(len(opened))
        elif u.op is Ops.END:
            opened.pop()
    assert max(nest) == 2  # max over k nested in the sum over rows
    assert nest.count(1) == 2  # two top-level reduce loops (the nested one and the separate full sum)


def test_gated_store_becomes_if_endif():
    uops = get_program(matmul_ast(), PythonRenderer(), [Opt(OptOps.GROUP, 0, 4)]).uops
    ifs = [i for i, u in enumerate(uops) if u.op is Ops.IF]
    assert len(ifs) == 1
    i = ifs[0]
    assert uops[i + 1].op is Ops.INDEX and uops[i + 2].op is Ops.STORE and uops[i + 3].op is Ops.ENDIF
    assert len(uops[i + 1].src) == 2 and uops[i + 3].src[0] is uops[i]
    assert uops[i].src[0].dtype == dtypes.bool


def test_accumulator_reads_before_and_after_the_loop_stay_distinct():
    uops = get_program(matmul_ast(), LoopRenderer(), []).uops
    reg_loads = [i for i, u in enumerate(uops) if u.op is Ops.LOAD and u.src[0].dtype.addrspace is AddrSpace.REG]
    assert len(reg_loads) == 2
    ends = [i for i, u in enumerate(uops) if u.op is Ops.END]
    red_end = next(i for i in ends if uops[i].src[1].arg[1] is AxisType.REDUCE)
    assert reg_loads[0] < red_end < reg_loads[1]


def test_int64_indices_when_a_range_reaches_2_31():
    big = 2**31 + 8
    x = load(1, big)
    uops = get_program(UOp.sink(UOp.define_global(0, dtypes.float, big).store(x + x)), PythonRenderer(), []).uops
    [special] = [u for u in uops if u.op is Ops.SPECIAL]
    assert special.dtype == dtypes.int64
    small = get_program(
        UOp.sink(UOp.define_global(0, dtypes.float, 8).store(load(1, 8) + load(1, 8))), PythonRenderer(), []
    ).uops
    assert all(u.dtype == dtypes.int for u in small if u.op in (Ops.SPECIAL, Ops.CONST) and u.dtype != dtypes.float)


def test_linearize_direct_graph():
    buf = UOp.define_global(0, dtypes.int, 12)
    r0, r1 = UOp.range(3, 0, AxisType.LOOP), UOp.range(4, 1, AxisType.LOOP)
    uops = linearize(UOp.sink(buf.index(r0 * 4 + r1).store((r0 * 10).cast(dtypes.int) + r1.cast(dtypes.int))))
    names = [u.op for u in uops]
    assert names.index(Ops.RANGE) < names.index(Ops.MUL) < len(names) - names[::-1].index(Ops.RANGE) - 1
    assert names[-2:] == [Ops.END, Ops.END]
    assert uops[-1].src[1] is r0 and uops[-2].src[1] is r1
