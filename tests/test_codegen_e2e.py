"""Hand-built kernel ASTs run end to end on PYTHON (get_program -> CompiledRunner -> Buffers) and match numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.codegen import KernelOptError, Opt, OptOps, get_program
from tinycore.codegen.lowerer import LoweringError
from tinycore.device import Buffer, Device
from tinycore.dtype import dtypes
from tinycore.engine.exec_item import CompiledRunner
from tinycore.helpers import Context
from tinycore.runtime.python_device import PythonRenderer
from tinycore.runtime.python_interpreter import RaceError
from tinycore.uop.ops import GroupOp, Ops, UOp, Variable

NP_OPS = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.SUB: np.subtract, Ops.CMPLT: np.less}
REDUCE_NP = {Ops.ADD: np.sum, Ops.MAX: np.max, Ops.MUL: np.prod}


class LoopRenderer(PythonRenderer):
    """A CPU-style renderer (no launch ids): output axes stay loops. The PYTHON interpreter runs its programs too."""

    has_local = False
    has_shared = False


class V:
    """A kernel AST value and the numpy array it must compute, built in lockstep."""

    def __init__(self, u: UOp, a: np.ndarray):
        self.u, self.a = u, a

    @staticmethod
    def load(arg: int, arr: np.ndarray) -> V:
        dt = dtypes.from_np(arr.dtype)
        return V(UOp(Ops.LOAD, dt, (UOp.define_global(arg, dt, arr.size),)), arr.ravel())

    @staticmethod
    def const(value, dt, shape) -> V:
        u = UOp.const(dt, value).reshape((1,) * len(shape)).expand(shape)
        return V(u, np.full(shape, value, dtype=dtypes.to_np(dt)))

    def reshape(self, s):
        return V(self.u.reshape(s), self.a.reshape(s))

    def permute(self, o):
        return V(self.u.permute(o), self.a.transpose(o))

    def expand(self, s):
        return V(self.u.expand(s), np.broadcast_to(self.a, s))

    def pad(self, p):
        return V(self.u.pad(p), np.pad(self.a, p))

    def shrink(self, b):
        return V(self.u.shrink(b), self.a[tuple(slice(s, e) for s, e in b)])

    def flip(self, f):
        return V(self.u.flip(f), self.a[tuple(slice(None, None, -1) if x else slice(None) for x in f)])

    def r(self, op, axes):
        return V(self.u.r(op, axes), REDUCE_NP[op](self.a, axis=axes, keepdims=True).astype(self.a.dtype))

    def alu(self, op, other):
        return V(self.u.alu(op, other.u), NP_OPS[op](self.a, other.a))

    def __add__(self, o):
        return self.alu(Ops.ADD, o)

    def __mul__(self, o):
        return self.alu(Ops.MUL, o)

    def cast(self, dt):
        return V(self.u.cast(dt), self.a.astype(dtypes.to_np(dt)))


def run_ast(
    ast: UOp, outputs: list[tuple[int, object]], inputs: list[np.ndarray], opts=None, var_vals=None, renderer=None
):
    """Run `ast` with output buffers of (size, dtype) then input arrays; returns (output arrays, spec)."""
    p = get_program(ast, renderer or Device["PYTHON"].renderer, opts)
    runner = CompiledRunner(p)
    bufs = [Buffer("PYTHON", size, dt).copyin(bytes(size * dt.itemsize)) for size, dt in outputs]  # zeroed
    bufs += [
        Buffer("PYTHON", a.size, dtypes.from_np(a.dtype)).copyin(np.ascontiguousarray(a).tobytes()) for a in inputs
    ]
    runner(bufs, var_vals or {})
    return [b.numpy() for b in bufs[: len(outputs)]], p


def realize(v: V, inputs: list[np.ndarray], opts=None, renderer=None):
    """Store `v` into buffer 0 (shaped like `v`) and check it against its numpy twin; returns the spec."""
    shape = v.a.shape
    dt = v.u.dtype
    out = UOp.define_global(0, dt, max(1, int(np.prod(shape))) if shape else 1)
    ast = UOp.sink((out.reshape(shape) if shape != (out.dtype.size,) else out).store(v.u))
    (got,), p = run_ast(ast, [(out.dtype.size, dt)], inputs, opts, renderer=renderer)
    want = np.ascontiguousarray(v.a).ravel()
    if dtypes.is_float(dt):
        np.testing.assert_allclose(got[: want.size], want, rtol=2e-3 if dt == dtypes.half else 1e-5, atol=1e-5)
    else:
        assert got[: want.size].tolist() == want.tolist()
    return p


RENDERERS = [pytest.param(None, id="gpu"), pytest.param(LoopRenderer(), id="loops")]


@pytest.mark.parametrize("renderer", RENDERERS)
def test_elementwise_with_broadcast(renderer):
    a, b = np.random.rand(4).astype(np.float32), np.random.rand(5).astype(np.float32)
    x = V.load(1, a).reshape((4, 1)).expand((4, 5))
    y = V.load(2, b).reshape((1, 5)).expand((4, 5))
    realize(x * y + x, [a, b], renderer=renderer)  # with the default (heuristic) opts
    p = realize(x * y + x, [a, b], opts=[], renderer=renderer)
    assert p.name.startswith("E_4_5") and p.ins == [1, 2] and p.outs == [0]  # "E_4_5n1" after another E_4_5 AST
    assert p.global_size == ((5, 4, 1) if renderer is None else (1, 1, 1))


CHAINS = {
    "permute_reshape": lambda x: x.reshape((2, 3, 4)).permute((2, 0, 1)).reshape((8, 3)),
    "pad_shrink": lambda x: x.reshape((4, 6)).pad(((1, 2), (3, 0))).shrink(((0, 6), (2, 8))),
    "flip_pad_permute": lambda x: x.reshape((6, 4)).flip((True, False)).pad(((0, 1), (2, 2))).permute((1, 0)),
    "reshape_of_padded": lambda x: x.reshape((4, 6)).pad(((1, 1), (0, 0))).reshape((3, 12)).flip((False, True)),
    "expand_permute_shrink": lambda x: x.reshape((1, 24)).expand((3, 24)).permute((1, 0)).shrink(((4, 20), (1, 3))),
    "split_merge": lambda x: x.reshape((2, 2, 2, 3)).permute((3, 1, 0, 2)).reshape((6, 4)).shrink(((1, 5), (0, 4))),
}


@pytest.mark.parametrize("chain", CHAINS, ids=list(CHAINS))
@pytest.mark.parametrize("renderer", RENDERERS)
def test_movement_chains(chain, renderer):
    a = np.arange(24, dtype=np.float32) + 1
    realize(
        CHAINS[chain](V.load(1, a)) * V.const(2.0, dtypes.float, CHAINS[chain](V.load(1, a)).a.shape),
        [a],
        renderer=renderer,
    )


def test_contiguous_reshapes_leave_no_division():
    a = np.arange(24, dtype=np.float32)
    p = realize(V.load(1, a).reshape((2, 3, 4)).reshape((6, 4)).reshape((24,)), [a], renderer=LoopRenderer())
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in p.uops)


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 2), (0, 1, 2)])
@pytest.mark.parametrize("renderer", RENDERERS)
def test_reductions_over_axes(op, axes, renderer):
    a = np.random.randn(3, 4, 5).astype(np.float32)
    p = realize(V.load(1, a).reshape((3, 4, 5)).r(op, axes), [a], renderer=renderer)
    assert p.name.startswith("r_")


SUM_OPTS = [
    [Opt(OptOps.GROUP, 0, 8)],
    [Opt(OptOps.GROUPTOP, 0, 16)],
    [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 0, 4)],
    [Opt(OptOps.UNROLL, 0, 4)],
    [Opt(OptOps.UPCAST, 0, 3), Opt(OptOps.UNROLL, 0, 2)],
    [Opt(OptOps.GROUP, 0, 4), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.LOCAL, 0, 2)],
]


@pytest.mark.parametrize("opts", SUM_OPTS, ids=lambda o: "-".join(f"{x.op.name}{x.arg}" for x in o))
def test_local_and_shared_memory_reductions_via_opts(opts):
    a = np.random.randn(6, 64).astype(np.float32)
    p = realize(V.load(1, a).reshape((6, 64)).r(Ops.ADD, (1,)), [a], opts)
    grouped = any(o.op in (OptOps.GROUP, OptOps.GROUPTOP) for o in opts)
    assert any(u.op is Ops.DEFINE_LOCAL for u in p.uops) == grouped
    assert any(u.op is Ops.BARRIER for u in p.uops) == grouped
    if grouped:
        assert p.local_size[0] > 1


def _without_barriers(uops: list[UOp]) -> list[UOp]:
    """The same program with every BARRIER removed (and AFTER edges on barriers dropped)."""
    new: dict[UOp, UOp] = {}
    out = []
    for u in uops:
        if u.op is Ops.BARRIER:
            new[u] = None  # type: ignore[assignment]
            continue
        src = tuple(new[s] for s in u.src if new.get(s, s) is not None)
        if u.op is Ops.AFTER and len(src) == 1:
            new[u] = src[0]
            continue
        new[u] = u.replace(src=src)
        out.append(new[u])
    return out


def test_removing_the_barrier_is_caught():
    a = np.random.default_rng(5).standard_normal((4, 32)).astype(np.float32)
    x = V.load(1, a).reshape((4, 32)).r(Ops.ADD, (1,))
    out = UOp.define_global(0, dtypes.float, 4)
    ast = UOp.sink(out.reshape((4, 1)).store(x.u))
    p = get_program(ast, Device["PYTHON"].renderer, [Opt(OptOps.GROUP, 0, 8)])
    bufs = [
        Buffer("PYTHON", 4, dtypes.float).ensure_allocated(),
        Buffer("PYTHON", 128, dtypes.float).copyin(a.tobytes()),
    ]
    CompiledRunner(p)(bufs, {})
    # a grouped sum adds in another order than numpy: float32 rounding, absolute for sums near zero
    np.testing.assert_allclose(bufs[0].numpy(), a.sum(1), rtol=1e-5, atol=1e-5)
    broken = CompiledRunner(p.__class__(**{**p.__dict__, "uops": _without_barriers(p.uops), "name": "broken"}))
    assert not any(u.op is Ops.BARRIER for u in broken.p.uops)
    with pytest.raises(RaceError, match="missing BARRIER"):
        broken(bufs, {})


@pytest.mark.parametrize(
    "opts",
    [
        None,
        [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 1, 2)],
        [Opt(OptOps.GROUP, 0, 4)],
        [Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 0, 4)],
    ],
)
def test_matmul_as_broadcast_multiply_and_reduce(opts):
    m, k, n = 8, 16, 6
    a, b = np.random.randn(m, k).astype(np.float32), np.random.randn(k, n).astype(np.float32)
    x = V.load(1, a).reshape((m, k, 1)).expand((m, k, n))
    y = V.load(2, b).reshape((1, k, n)).expand((m, k, n))
    p = realize((x * y).r(Ops.ADD, (1,)), [a, b], opts)
    grouped = any(o.op is OptOps.GROUP for o in opts or [])
    flops = 2 * m * n * k
    vectorized = any(u.op in GroupOp.ALU and u.dtype.count > 1 for u in p.uops)
    if grouped:  # a group reduce adds the serial reduction of the partials on top of the multiply-adds
        assert p.estimates.ops > flops
    elif vectorized:  # vector lanes count; an unrolled reduce adds a few horizontal adds per output on top
        assert flops <= p.estimates.ops <= 1.1 * flops
    else:
        assert p.estimates.ops == flops


def test_matmul_on_cpu_style_loops():
    a, b = np.random.randn(5, 7).astype(np.float32), np.random.randn(7, 3).astype(np.float32)
    x = V.load(1, a).reshape((5, 7, 1)).expand((5, 7, 3))
    y = V.load(2, b).reshape((1, 7, 3)).expand((5, 7, 3))
    p = realize((x * y).r(Ops.ADD, (1,)), [a, b], renderer=LoopRenderer())
    assert p.global_size == (1, 1, 1) and not any(u.op is Ops.SPECIAL for u in p.uops)
    assert sum(u.op is Ops.RANGE for u in p.uops) == 3


def test_nested_and_separate_reduces():
    a = np.random.randn(8, 4).astype(np.float32)
    x = V.load(1, a).reshape((8, 4))
    nested = x.r(Ops.MAX, (1,)).r(Ops.ADD, (0,))  # sum over rows of the row maxima: a reduce inside a reduce
    realize(nested, [a])
    realize(nested, [a], renderer=LoopRenderer())
    separate = x.r(Ops.ADD, (0, 1)) + x.r(Ops.MAX, (0, 1))
    realize(separate, [a])
    centered = (x + x.r(Ops.MAX, (1,)).expand((8, 4)) * V.const(-1.0, dtypes.float, (8, 4))).r(Ops.ADD, (1,))
    realize(centered, [a], renderer=LoopRenderer())


def test_zero_size_and_one_element():
    a = np.zeros(0, np.float32)
    out = UOp.define_global(0, dtypes.float, 0)
    ld = UOp(Ops.LOAD, dtypes.float, (UOp.define_global(1, dtypes.float, 0),))
    (got,), p = run_ast(UOp.sink(out.store(ld + ld)), [(0, dtypes.float)], [a])
    assert got.size == 0 and not any(u.op in (Ops.LOAD, Ops.STORE) for u in p.uops)
    # sum over an empty axis is the identity
    (got,), _ = run_ast(
        UOp.sink(UOp.define_global(0, dtypes.float, 3).reshape((3, 1)).store(ld.reshape((3, 0)).r(Ops.ADD, (1,)))),
        [(3, dtypes.float)],
        [a],
    )
    assert got.tolist() == [0.0, 0.0, 0.0]
    one = np.array([2.5], np.float32)
    p = realize(V.load(1, one).reshape((1, 1)) * V.load(1, one).reshape((1, 1)), [one])
    assert not any(u.op in (Ops.RANGE, Ops.SPECIAL) for u in p.uops)


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.uint8, dtypes.float16, dtypes.int64])
def test_dtypes(dt):
    nd = dtypes.to_np(dt)
    a = (np.arange(12) * 37 % 251).astype(nd)
    b = (np.arange(12)[::-1] * 11 % 97).astype(nd)
    x, y = V.load(1, a).reshape((3, 4)), V.load(2, b).reshape((3, 4))
    realize((x * y + x).permute((1, 0)), [a, b])
    realize(x.r(Ops.MAX, (1,)), [a, b])
    if dt != dtypes.float16:  # an integer sum wraps like C
        realize((x * y).r(Ops.ADD, (0,)), [a, b])


def test_bool_and_comparisons():
    a, b = np.array([1, 5, 3, 7], np.int32), np.array([4, 2, 3, 9], np.int32)
    x, y = V.load(1, a), V.load(2, b)
    lt = x.alu(Ops.CMPLT, y)
    realize(lt, [a, b])
    mask = np.array([True, False, True, True])
    m = V.load(3, mask)
    sel = V(m.u.where(x.u, y.u), np.where(mask, a, b))
    realize(sel, [a, b, mask])
    realize(V(m.u.cast(dtypes.int), mask.astype(np.int32)), [a, b, mask])


def test_bfloat16_round_trip():
    a = np.array([1.0, 3.140625, -2.5, 100.0], np.float32)
    bits = (a.view(np.uint32) >> 16).astype(np.uint16)  # exactly representable in bfloat16
    ld = UOp(Ops.LOAD, dtypes.bfloat16, (UOp.define_global(1, dtypes.bfloat16, 4),))
    out = UOp.define_global(0, dtypes.float, 4)
    ast = UOp.sink(out.store((ld * ld).cast(dtypes.float)))
    (got,), _ = run_ast(ast, [(4, dtypes.float)], [bits.view(np.uint16)])
    want = [
        float(np.float32(x * x).view(np.uint32) + 0x7FFF + ((np.float32(x * x).view(np.uint32) >> 16) & 1) >> 16 << 16)
        for x in a
    ]
    assert got.view(np.uint32).tolist() == [int(w) for w in want]


def test_symbolic_dimension_one_program_two_values():
    n = Variable("n", 1, 10)
    buf_in, buf_out = UOp.define_global(1, dtypes.float, 40), UOp.define_global(0, dtypes.float, 10)
    x = UOp(Ops.LOAD, dtypes.float, (buf_in,)).shrink(((0, n * 4),)).reshape((n, 4))
    ast = UOp.sink(buf_out.shrink(((0, n),)).reshape((n, 1)).store((x * x).r(Ops.ADD, (1,))))
    p = get_program(ast, Device["PYTHON"].renderer)
    assert p.vars == ["n"] and p.has_symbolic_dims
    runner = CompiledRunner(p)
    a = np.random.rand(40).astype(np.float32)
    for value in (3, 7):
        out = Buffer("PYTHON", 10, dtypes.float).copyin(bytes(40))  # zeroed: an allocation may reuse memory
        runner([out, Buffer("PYTHON", 40, dtypes.float).copyin(a.tobytes())], {"n": value})
        got = out.numpy()
        np.testing.assert_allclose(got[:value], (a[: value * 4].reshape(value, 4) ** 2).sum(1), rtol=1e-5)
        assert (got[value:] == 0).all()
        assert p.estimates.evaluate({"n": value}).ops == value * 4 * 2
    loops = get_program(ast, LoopRenderer())
    assert any(u.op is Ops.RANGE and u.src[0].op is Ops.DEFINE_VAR for u in loops.uops)


def test_padded_loads_stay_in_bounds():
    # every load of the padded region is gated; the interpreter's bounds checks prove none reads out of bounds
    a = np.arange(1, 7, dtype=np.float32)
    v = V.load(1, a).reshape((2, 3)).pad(((2, 3), (4, 1))).flip((True, True))
    p = realize(v, [a])
    gated = [u for u in p.uops if u.op is Ops.INDEX and len(u.src) == 3]
    assert gated, "the padded load must be gated"
    # the same program with its load gates removed reads out of bounds, and the interpreter says so
    ungated = []
    new: dict[UOp, UOp] = {}
    for u in p.uops:
        src = tuple(new[s] for s in u.src)
        if u.op is Ops.LOAD and len(src) == 2:
            src = src[:1]
        if u.op is Ops.INDEX and len(src) == 3:
            src = src[:2]
        new[u] = u.replace(src=src)
        ungated.append(new[u])
    broken = CompiledRunner(p.__class__(**{**p.__dict__, "uops": ungated, "name": "ungated"}))
    with pytest.raises(IndexError, match="ungated.*buffer arg 1"):
        broken(
            [
                Buffer("PYTHON", v.a.size, dtypes.float).ensure_allocated(),
                Buffer("PYTHON", 6, dtypes.float).copyin(a.tobytes()),
            ],
            {},
        )


def test_out_of_bounds_index_raises():
    # a target view larger than its buffer: the kernel writes past the end and the interpreter catches it
    out = UOp.define_global(0, dtypes.float, 4)
    ld = UOp(Ops.LOAD, dtypes.float, (UOp.define_global(1, dtypes.float, 5),))
    with pytest.raises(IndexError, match="buffer arg 0.*index 4"):
        run_ast(UOp.sink(out.reshape((5,)).store(ld)), [(4, dtypes.float)], [np.zeros(5, np.float32)])


def test_multi_output_kernel_shares_ranges():
    a = np.random.rand(3, 5).astype(np.float32)
    x = UOp(Ops.LOAD, dtypes.float, (UOp.define_global(2, dtypes.float, 15),)).reshape((3, 5))
    o0, o1 = UOp.define_global(0, dtypes.float, 15), UOp.define_global(1, dtypes.float, 15)
    ast = UOp.sink(o0.reshape((3, 5)).store(x + x), o1.reshape((5, 3)).permute((1, 0)).store(x * x))
    for renderer in (None, LoopRenderer()):
        (g0, g1), p = run_ast(ast, [(15, dtypes.float), (15, dtypes.float)], [a], renderer=renderer)
        np.testing.assert_allclose(g0.reshape(3, 5), a + a)
        np.testing.assert_allclose(g1.reshape(5, 3), (a * a).T)
        assert p.outs == [0, 1]
        assert sum(u.op in (Ops.RANGE, Ops.SPECIAL) for u in p.uops) == 2


def test_store_only_kernels():
    full = V.const(7, dtypes.int, (3, 4))
    p = realize(full, [])
    assert p.ins == [] and not any(u.op is Ops.LOAD for u in p.uops)
    # eye(n) from a padded constant: index math and gates only
    n = 5
    ones = UOp.const(dtypes.float, 1.0).reshape((1, 1)).expand((n, 1))
    eye = ones.pad(((0, 0), (0, n))).reshape((n * (n + 1),)).shrink(((0, n * n),)).reshape((n, n))
    p = realize(V(eye, np.eye(n, dtype=np.float32)), [])
    assert not any(u.op is Ops.LOAD for u in p.uops)
    realize(V(eye.r(Ops.ADD, (1,)), np.ones((n, 1), np.float32)), [])


def test_assign_into_a_view_of_the_output():
    a = np.arange(6, dtype=np.float32)
    out = UOp.define_global(0, dtypes.float, 12)
    ld = UOp(Ops.LOAD, dtypes.float, (UOp.define_global(1, dtypes.float, 6),)).reshape((2, 3))
    target = out.reshape((3, 4)).shrink(((1, 3), (1, 4)))  # out[1:3, 1:4] = a
    (got,), _ = run_ast(UOp.sink(target.store(ld)), [(12, dtypes.float)], [a])
    want = np.zeros((3, 4), np.float32)
    want[1:3, 1:4] = a.reshape(2, 3)
    assert got.reshape(3, 4).tolist() == want.tolist()


def test_names_estimates_and_opt_errors():
    a = np.zeros(16, np.float32)
    x = V.load(1, a).reshape((4, 4))
    out = UOp.define_global(0, dtypes.float, 16)
    p1 = get_program(UOp.sink(out.reshape((4, 4)).store((x + x).u)), Device["PYTHON"].renderer)
    p2 = get_program(UOp.sink(out.reshape((4, 4)).store((x * x).u)), Device["PYTHON"].renderer)
    p1b = get_program(UOp.sink(out.reshape((4, 4)).store((x + x).u)), Device["PYTHON"].renderer)
    assert p1.name.startswith("E_4_4") and p2.name.startswith("E_4_4") and p1.name != p2.name and p1.name == p1b.name
    assert p1.estimates.ops == 16 and p1.estimates.mem == 2 * 16 * 4
    red = UOp.sink(UOp.define_global(0, dtypes.float, 4).reshape((4, 1)).store(x.r(Ops.ADD, (1,)).u))
    with pytest.raises(KernelOptError):
        get_program(red, Device["PYTHON"].renderer, [Opt(OptOps.GROUP, 0, 3)])
    with pytest.raises(KernelOptError):
        get_program(red, Device["PYTHON"].renderer, [Opt(OptOps.LOCAL, 5, 2)])
    with pytest.raises(KernelOptError):
        get_program(red, LoopRenderer(), [Opt(OptOps.GROUP, 0, 2)])
    with pytest.raises(LoweringError):
        get_program(UOp.sink(out.store(UOp.const(dtypes.float, 1.0))), Device["PYTHON"].renderer)


def test_decompositions_run_end_to_end_with_basic_native_ops():
    pytest.importorskip("tinycore.codegen.decompositions")
    a = np.linspace(-2, 2, 16).astype(np.float32)
    x = UOp(Ops.LOAD, dtypes.float, (UOp.define_global(1, dtypes.float, 16),))
    out = UOp.define_global(0, dtypes.float, 16)
    ast = UOp.sink(out.store(UOp(Ops.EXP2, dtypes.float, (x,)) + UOp(Ops.SIN, dtypes.float, (x,))))
    with Context(PYTHON_NATIVE_OPS="basic"):
        renderer = Device["PYTHON"].renderer
        (got,), p = run_ast(ast, [(16, dtypes.float)], [a], renderer=renderer)
        assert not any(u.op in (Ops.EXP2, Ops.SIN) for u in p.uops)
    np.testing.assert_allclose(got, np.exp2(a) + np.sin(a), rtol=1e-5, atol=1e-6)


def test_static_bounds_proof_with_ignore_oob_off():
    a = np.arange(1, 7, dtype=np.float32)
    padded = V.load(1, a).reshape((2, 3)).pad(((1, 1), (0, 2)))
    out = UOp.define_global(0, dtypes.float, 20)
    with Context(IGNORE_OOB=0):
        get_program(UOp.sink(out.reshape((4, 5)).store(padded.u)), Device["PYTHON"].renderer)  # gated: fine
        too_small = UOp.define_global(0, dtypes.float, 19)
        with pytest.raises(IndexError, match="out of bounds"):
            get_program(UOp.sink(too_small.reshape((4, 5)).store(padded.u)), Device["PYTHON"].renderer)


def test_random_kernels_with_random_opts_match_numpy():
    from tinycore.codegen import get_kernel

    rng = np.random.default_rng(1234)
    tried = 0
    for _ in range(25):
        shape = tuple(int(s) for s in rng.choice([2, 4, 6, 8], 3))
        dt = [np.float32, np.int32][int(rng.integers(2))]
        a = (rng.random(int(np.prod(shape))) * 10).astype(dt)
        v = V.load(1, a).reshape(shape).permute(tuple(int(i) for i in rng.permutation(3)))
        if rng.random() < 0.4:
            v = v.pad(((0, 2), (2, 0), (0, 0))).flip((True, False, True))
        v = v.r([Ops.ADD, Ops.MAX][int(rng.integers(2))], tuple(sorted(int(i) for i in rng.choice(3, 2, False))))
        renderer = [None, LoopRenderer()][int(rng.integers(2))]
        out = UOp.define_global(0, v.u.dtype, int(np.prod(v.a.shape)))
        k = get_kernel(UOp.sink(out.reshape(v.a.shape).store(v.u)), renderer or Device["PYTHON"].renderer)
        opts = []
        for op in rng.choice([OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.UPCAST, OptOps.UNROLL], 2):
            axes = k.output_axes if op in (OptOps.LOCAL, OptOps.UPCAST) else k.reduce_axes
            if axes:
                try:
                    k.apply_opt(opt := Opt(op, int(rng.integers(len(axes))), 2))
                    opts.append(opt)
                except KernelOptError:
                    pass
        tried += bool(opts)
        realize(v, [a], opts, renderer=renderer)
    assert tried >= 10


def test_thread_opt_on_cpu_style_renderers():
    a, b = np.random.randn(8, 6).astype(np.float32), np.random.randn(6, 4).astype(np.float32)
    x = V.load(1, a).reshape((8, 6, 1)).expand((8, 6, 4))
    y = V.load(2, b).reshape((1, 6, 4)).expand((8, 6, 4))
    p = realize((x * y).r(Ops.ADD, (1,)), [a, b], [Opt(OptOps.THREAD, 0, 4)], renderer=LoopRenderer())
    [core] = [u for u in p.uops if u.op is Ops.SPECIAL]
    assert core.arg == "core_id" and p.global_size == (4, 1, 1)
    with pytest.raises(KernelOptError):
        get_program(
            UOp.sink(UOp.define_global(0, dtypes.float, 8).store(V.load(1, a[0]).u)),
            Device["PYTHON"].renderer,
            [Opt(OptOps.THREAD, 0, 2)],
        )
