"""Lowering a kernel AST: ranges, index propagation through movement ops, gates, reduces; the Kernel axis API."""

from __future__ import annotations

import math

import pytest

from tinycore.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tinycore.codegen.lowerer import (
    LoweringError,
    kernel_shape,
    lower_ast,
    lower_reduces,
    reduce_identity,
    scopes,
    substitute_ranges,
)
from tinycore.dtype import AddrSpace, dtypes
from tinycore.runtime.python_device import PythonRenderer
from tinycore.uop.ops import AxisType, Ops, UOp, Variable
from tinycore.uop.spec import type_verify


def load(arg: int, size: int, dt=dtypes.float) -> UOp:
    return UOp(Ops.LOAD, dt, (UOp.define_global(arg, dt, size),))


def out(size: int, shape, dt=dtypes.float) -> UOp:
    return UOp.define_global(0, dt, size).reshape(shape)


def ranges(sink: UOp) -> list[UOp]:
    return sorted((u for u in sink.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])


def loads(sink: UOp) -> list[UOp]:
    return [u for u in sink.toposort() if u.op is Ops.LOAD]


def the_load_index(sink: UOp) -> UOp:
    [ld] = [u for u in loads(sink) if u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
    return ld.src[0]


def test_kernel_shape():
    x = load(1, 12).reshape((3, 4))
    assert kernel_shape(x) == (3, 4)
    assert kernel_shape(x.permute((1, 0)).pad(((1, 0), (0, 2)))) == (5, 5)
    assert kernel_shape(x.shrink(((1, 3), (0, 2))).flip((True, False))) == (2, 2)
    assert kernel_shape(x.r(Ops.ADD, (1,))) == (3, 1)
    assert kernel_shape(x + x) == (3, 4) and kernel_shape(UOp.const(dtypes.float, 1.0)) == ()


def test_elementwise_gets_one_loop_range_per_output_axis():
    sink = lower_ast(UOp.sink(out(12, (3, 4)).store(load(1, 12).reshape((3, 4)) * 2.0)))
    r0, r1 = ranges(sink)
    assert [r.arg for r in (r0, r1)] == [(0, AxisType.LOOP), (1, AxisType.LOOP)]
    assert [r.src[0].arg for r in (r0, r1)] == [3, 4]
    [store] = sink.src
    assert store.src[0].src[1] is (r0 * 4 + r1).simplify()
    assert the_load_index(sink).src[1] is store.src[0].src[1]
    type_verify(sink, "kernel")


def test_reshape_artefacts_simplify_away():
    x = load(1, 24).reshape((2, 3, 4)).reshape((6, 4))
    sink = lower_ast(UOp.sink(out(24, (6, 4)).store(x)))
    idx = the_load_index(sink).src[1]
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in idx.toposort())
    x = load(1, 24).reshape((6, 4)).permute((1, 0)).reshape((4, 2, 3))  # a split needs // and %: (a*4+b)//4 -> a
    sink = lower_ast(UOp.sink(out(24, (4, 2, 3)).store(x)))
    r0, r1, r2 = ranges(sink)
    assert the_load_index(sink).src[1] is ((r1 * 3 + r2) * 4 + r0).simplify()


def test_permute_expand_shrink_flip_indices():
    r = lambda s: ranges(s)  # noqa: E731
    sink = lower_ast(UOp.sink(out(12, (3, 4)).store(load(1, 12).reshape((4, 3)).permute((1, 0)))))
    r0, r1 = r(sink)
    assert the_load_index(sink).src[1] is (r1 * 3 + r0).simplify()
    sink = lower_ast(UOp.sink(out(12, (3, 4)).store(load(1, 3).reshape((3, 1)).expand((3, 4)))))
    r0, r1 = r(sink)
    assert the_load_index(sink).src[1] is r0  # the expanded axis indexes 0
    sink = lower_ast(UOp.sink(out(4, (2, 2)).store(load(1, 12).reshape((3, 4)).shrink(((1, 3), (2, 4))))))
    r0, r1 = r(sink)
    assert the_load_index(sink).src[1] is (r0 * 4 + r1 + 6).simplify()
    sink = lower_ast(UOp.sink(out(12, (3, 4)).store(load(1, 12).reshape((3, 4)).flip((False, True)))))
    r0, r1 = r(sink)
    assert the_load_index(sink).src[1] is (r0 * 4 + (3 - r1)).simplify()


def test_pad_gates_the_load_and_keeps_zero_outside():
    sink = lower_ast(UOp.sink(out(6, (6,)).store(load(1, 4).pad(((1, 1),)))))
    [r0] = ranges(sink)
    ptr = the_load_index(sink)
    assert len(ptr.src) == 3 and ptr.src[1] is (r0 - 1).simplify()
    gate = ptr.src[2]
    assert [bool(gate.substitute({r0: UOp.const(dtypes.index, i)}).simplify().arg) for i in range(6)] == [
        False,
        True,
        True,
        True,
        True,
        False,
    ]
    [ld] = loads(sink)
    assert len(ld.src) == 2 and ld.src[1].arg == 0.0
    assert not any(u.op is Ops.WHERE for u in sink.toposort())  # the gated load is the padded value itself
    # a padded expression that isn't 0 at the border keeps a where()
    x = (load(1, 4) + UOp.const(dtypes.float, 1.0).reshape((1,)).expand((4,))).pad(((2, 0),))
    sink = lower_ast(UOp.sink(out(6, (6,)).store(x)))
    assert any(u.op is Ops.WHERE for u in sink.toposort())


def test_region_entirely_in_padding_has_no_load():
    x = load(1, 4).pad(((0, 4),)).shrink(((4, 8),))
    sink = lower_ast(UOp.sink(out(4, (4,)).store(x)))
    assert not loads(sink)
    assert sink.src[0].src[1].op is Ops.CONST and sink.src[0].src[1].arg == 0.0


def test_reduce_axis_becomes_reduce_over_new_ranges():
    x = load(1, 60).reshape((3, 4, 5)).r(Ops.MAX, (0, 2))
    sink = lower_ast(UOp.sink(out(4, (1, 4, 1)).store(x)))
    rs = ranges(sink)
    assert [(r.arg[1], r.src[0].arg) for r in rs] == [(AxisType.LOOP, 4), (AxisType.REDUCE, 3), (AxisType.REDUCE, 5)]
    [red] = [u for u in sink.toposort() if u.op is Ops.REDUCE]
    assert red.arg is Ops.MAX and red.src[1:] == tuple(rs[1:])
    type_verify(sink, "kernel")
    one = lower_ast(UOp.sink(out(4, (4, 1)).store(load(1, 4).reshape((4, 1)).r(Ops.ADD, (1,)))))
    assert not any(u.op is Ops.REDUCE for u in one.toposort())  # a size-1 reduce is no reduce


def test_reduce_of_nothing_is_the_identity():
    x = load(1, 0).reshape((2, 0)).r(Ops.MAX, (1,))
    sink = lower_ast(UOp.sink(out(2, (2, 1)).store(x)))
    assert sink.src[0].src[1].op is Ops.CONST and sink.src[0].src[1].arg == -math.inf
    assert reduce_identity(Ops.MAX, dtypes.uint8) == 0 and reduce_identity(Ops.MUL, dtypes.int) == 1


def test_size_one_and_zero_size_outputs():
    sink = lower_ast(UOp.sink(out(4, (1, 4, 1)).store(load(1, 4).reshape((1, 4, 1)))))
    assert len(ranges(sink)) == 1
    assert lower_ast(UOp.sink(out(0, (3, 0)).store(load(1, 0).reshape((3, 0))))) is UOp.sink()


def test_multiple_stores_share_ranges():
    x = load(2, 12).reshape((3, 4))
    ast = UOp.sink(out(12, (3, 4)).store(x + x), UOp.define_global(1, dtypes.float, 12).reshape((3, 4)).store(x * x))
    sink = lower_ast(ast)
    assert len(ranges(sink)) == 2 and len(sink.src) == 2
    assert sink.src[0].src[0].src[1] is sink.src[1].src[0].src[1]


def test_store_target_through_movement_ops():
    target = UOp.define_global(0, dtypes.float, 20).reshape((4, 5)).shrink(((1, 3), (2, 5)))
    sink = lower_ast(UOp.sink(target.store(load(1, 6).reshape((2, 3)))))
    r0, r1 = ranges(sink)
    assert sink.src[0].src[0].src[1] is (r0 * 5 + r1 + 7).simplify()


def test_symbolic_shapes_give_symbolic_ranges():
    n = Variable("n", 1, 32)
    x = load(1, 32).shrink(((0, n),))
    sink = lower_ast(UOp.sink(UOp.define_global(0, dtypes.float, 32).shrink(((0, n),)).store(x + x)))
    [r] = ranges(sink)
    assert r.src[0] is n


def test_store_only_kernel():
    sink = lower_ast(UOp.sink(out(6, (2, 3)).store(UOp.const(dtypes.float, 3.0).reshape((1, 1)).expand((2, 3)))))
    assert not loads(sink) and sink.src[0].src[1].arg == 3.0 and len(ranges(sink)) == 2


def test_malformed_asts_raise():
    with pytest.raises(LoweringError):
        lower_ast(load(1, 4))
    with pytest.raises(LoweringError):
        lower_ast(UOp.sink(out(4, (4,)).store(load(1, 4).contiguous())))
    with pytest.raises(LoweringError):
        lower_ast(UOp.sink(out(4, (4,)).store(load(1, 4)), out(2, (2,)).store(load(1, 2))))


def test_lower_reduces_makes_register_accumulators():
    x = load(1, 12).reshape((3, 4)).r(Ops.ADD, (1,))
    sink = lower_reduces(lower_ast(UOp.sink(out(3, (3, 1)).store(x))))
    nodes = sink.toposort()
    assert not any(u.op is Ops.REDUCE for u in nodes)
    [reg] = [u for u in nodes if u.op is Ops.DEFINE_REG]
    assert reg.dtype.addrspace is AddrSpace.REG and reg.dtype.size == 1
    stores = [u for u in nodes if u.op is Ops.STORE and u.src[0].dtype.addrspace is AddrSpace.REG]
    assert any(s.src[1].op is Ops.CONST and s.src[1].arg == 0.0 for s in stores)  # the init
    [end] = [u for u in nodes if u.op is Ops.END]
    r_red = [r for r in ranges(sink) if r.arg[1] is AxisType.REDUCE]
    assert end.src[1:] == tuple(r_red)
    sc = scopes(sink)
    assert sc[sink.src[0]] == {r for r in ranges(sink) if r.arg[1] is AxisType.LOOP}


# ----- Kernel: axes and opts


def reduce_kernel(renderer=None) -> Kernel:
    x = load(1, 4 * 64).reshape((4, 64)).r(Ops.ADD, (1,))
    return Kernel(lower_ast(UOp.sink(out(4, (4, 1)).store(x))), renderer or PythonRenderer())


def test_kernel_axes_and_shift_to():
    k = reduce_kernel()
    assert k.full_shape == (4, 64) and k.axis_types == [AxisType.LOOP, AxisType.REDUCE] and k.name == "r_4_64"
    red = k.reduce_axes[0]
    outer, new = k.shift_to(red, 8, AxisType.UNROLL)
    assert k.full_shape == (4, 8, 8) and new.arg[1] is AxisType.UNROLL and outer.arg[0] == red.arg[0]
    assert red not in k.sink.toposort()
    [reduce] = [u for u in k.sink.toposort() if u.op is Ops.REDUCE]
    assert reduce.src[1:] == (outer, new)


def test_kernel_opt_validation():
    k = reduce_kernel()
    with pytest.raises(KernelOptError):
        k.apply_opt(Opt(OptOps.GROUP, 0, 5))  # 64 % 5
    with pytest.raises(KernelOptError):
        k.apply_opt(Opt(OptOps.LOCAL, 3, 2))  # no such output axis
    with pytest.raises(KernelOptError):
        k.apply_opt(Opt(OptOps.UPCAST, 0, 32))
    with pytest.raises(KernelOptError):
        k.apply_opt(Opt(OptOps.TC, 0, 0))
    assert k.applied_opts == [] and k.full_shape == (4, 64)
    k2 = k.copy()
    k2.apply_opt(Opt(OptOps.GROUP, 0, 16))
    assert k.full_shape == (4, 64) and k2.full_shape == (4, 4, 16) and k2.applied_opts == [Opt(OptOps.GROUP, 0, 16)]

    class NoLocals(PythonRenderer):
        has_local = False
        has_shared = False

    with pytest.raises(KernelOptError):
        reduce_kernel(NoLocals()).apply_opt(Opt(OptOps.LOCAL, 0, 2))
    k3 = reduce_kernel()
    k3.apply_opt(Opt(OptOps.NOLOCALS))
    with pytest.raises(KernelOptError):
        k3.apply_opt(Opt(OptOps.GROUP, 0, 2))


def test_group_reduce_uses_shared_memory_a_barrier_and_lane_zero():
    k = reduce_kernel()
    k.apply_opt(Opt(OptOps.GROUP, 0, 16))
    sink = k.get_optimized_sink()
    nodes = sink.toposort()
    [lbuf] = [u for u in nodes if u.op is Ops.DEFINE_LOCAL]
    assert lbuf.dtype.size == 16 and lbuf.dtype.addrspace is AddrSpace.LOCAL
    assert any(u.op is Ops.BARRIER for u in nodes)
    [store] = [u for u in sink.src if u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
    gate = store.src[0].src[2]
    assert any(u.op is Ops.SPECIAL and u.arg == "lidx0" for u in gate.toposort())
    assert (k.global_size, k.local_size) == ((4, 1, 1), (16, 1, 1))


def test_launch_ids_merge_beyond_three_dims():
    x = load(1, 2 * 3 * 4 * 5).reshape((2, 3, 4, 5))
    k = Kernel(lower_ast(UOp.sink(out(120, (2, 3, 4, 5)).store(x + x))), PythonRenderer())
    sink = k.get_optimized_sink()
    assert k.global_size == (5, 4, 6) and k.local_size == (1, 1, 1)
    specials = {u.arg for u in sink.toposort() if u.op is Ops.SPECIAL}
    assert specials == {"gidx0", "gidx1", "gidx2"}
    assert not any(u.op is Ops.RANGE for u in sink.toposort())


def test_cpu_style_kernel_keeps_loops():
    class NoLocals(PythonRenderer):
        has_local = False

    k = reduce_kernel(NoLocals())
    sink = k.get_optimized_sink()
    assert k.global_size == (1, 1, 1)
    assert {r.arg[1] for r in ranges(sink)} == {AxisType.LOOP, AxisType.REDUCE}


def test_substitute_ranges_divides_through_a_split():
    """With `splits`, ``r // c`` of a split ``r = high * low_size + low`` becomes a division of ``high`` alone when
    ``c`` is a multiple of ``low_size`` (exact, since ``0 <= low < low_size``); other divisions keep ``low``."""
    r = UOp.range(32, 0)
    high, low = UOp.range(8, 0), UOp.range(4, 1, AxisType.UPCAST)
    sink = UOp.sink(r // 8, r // 4, r // 3)
    got = substitute_ranges(sink, {r: (high * 4 + low, (high, low))}, {r: (high, 4)})
    by8, by4, by3 = got.src
    assert low not in by8.toposort() and by4 is high and low in by3.toposort()
    for h in range(8):
        for lo in range(4):
            values = {high: UOp.const(dtypes.index, h), low: UOp.const(dtypes.index, lo)}
            assert [x.substitute(values).simplify().arg for x in got.src] == [(h * 4 + lo) // c for c in (8, 4, 3)]
