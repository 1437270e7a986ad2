"""Kernel opts one by one: vector upcasts (vs the scalar path and numpy), tensor cores on PYTHON (each declared
one), PADTO, SWAP, and the same vector code compiled by CLANG when a C compiler exists."""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.codegen import KernelOptError, Opt, OptOps, get_kernel, get_program
from tinycore.device import Buffer, Device
from tinycore.dtype import AddrSpace, PtrDType, dtypes
from tinycore.engine.exec_item import CompiledRunner
from tinycore.runtime.python_device import PYTHON_TENSOR_CORES, PythonRenderer
from tinycore.uop.ops import AxisType, Ops, UOp

U, R, T, P, S, L = OptOps.UPCAST, OptOps.UNROLL, OptOps.TC, OptOps.PADTO, OptOps.SWAP, OptOps.LOCAL


class LoopRenderer(PythonRenderer):
    """CPU style (no launch ids), with vectors: the PYTHON interpreter runs its programs."""

    has_local = False
    has_shared = False


class UnmaskedLoopRenderer(LoopRenderer):
    """CPU style without masked vector access (like the C backend)."""

    masked_access = False


class ScalarLoopRenderer(LoopRenderer):
    """CPU style without vectors: upcasts become scalar copies."""

    supports_float4 = False


def load(arg: int, dt, size: int) -> UOp:
    return UOp(Ops.LOAD, dt, (UOp.define_global(arg, dt, size),))


def run(ast: UOp, arrays: list[np.ndarray], opts, renderer=None, device: str = "PYTHON"):
    """Run `ast` (buffer 0 = output, then `arrays`) and return (output array, program)."""
    out = next(u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL and u.arg == 0)
    p = get_program(ast, renderer or Device[device].renderer, opts)
    bufs = [Buffer(device, out.dtype.size, out.dtype.base).copyin(bytes(out.dtype.size * out.dtype.base.itemsize))]
    bufs += [Buffer(device, a.size, dtypes.from_np(a.dtype)).copyin(np.ascontiguousarray(a).tobytes()) for a in arrays]
    CompiledRunner(p)(bufs, {})
    return bufs[0].numpy(), p


def matmul_ast(m: int, k: int, n: int, din=dtypes.float, dout=dtypes.float) -> UOp:
    a = load(1, din, m * k).reshape((m, k, 1)).expand((m, k, n))
    b = load(2, din, k * n).reshape((1, k, n)).expand((m, k, n))
    if din != dout:
        a, b = a.cast(dout), b.cast(dout)
    return UOp.sink(UOp.define_global(0, dout, m * n).reshape((m, 1, n)).store((a * b).r(Ops.ADD, (1,))))


def vector_loads(p) -> list[UOp]:
    return [u for u in p.uops if u.op is Ops.LOAD and u.dtype.count > 1]


def vector_stores(p) -> list[UOp]:
    return [u for u in p.uops if u.op is Ops.STORE and u.src[1].dtype.count > 1]


# ----- vector upcasts


def test_upcast_gives_vector_loads_alu_and_stores_equal_to_the_scalar_path():
    a, b = np.random.randn(8, 16).astype(np.float32), np.random.randn(8, 16).astype(np.float32)
    x, y = load(1, dtypes.float, 128).reshape((8, 16)), load(2, dtypes.float, 128).reshape((8, 16))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, 128).reshape((8, 16)).store(x * y + x))
    opts = [Opt(U, 1, 8), Opt(U, 0, 2)]
    vec, p = run(ast, [a, b], opts, LoopRenderer())
    scal, ps = run(ast, [a, b], opts, ScalarLoopRenderer())
    np.testing.assert_array_equal(vec, scal)
    np.testing.assert_allclose(vec.reshape(8, 16), a * b + a, rtol=1e-6)
    assert {u.dtype.count for u in vector_loads(p)} == {8} and len(vector_stores(p)) == 2
    assert any(u.op is Ops.MUL and u.dtype == dtypes.float.vec(16) for u in p.uops)
    assert not vector_loads(ps) and not any(u.dtype.count > 1 for u in ps.uops if u.op in (Ops.MUL, Ops.ADD))


def test_strided_and_broadcast_lanes_become_scalar_loads():
    a = np.random.randn(16, 8).astype(np.float32)
    x = load(1, dtypes.float, 128).reshape((16, 8)).permute((1, 0))  # lanes along axis 1 have stride 8
    ast = UOp.sink(UOp.define_global(0, dtypes.float, 128).reshape((8, 16)).store(x + x))
    got, p = run(ast, [a], [Opt(U, 1, 4)], LoopRenderer())
    np.testing.assert_array_equal(got.reshape(8, 16), (a + a).T)
    assert not vector_loads(p) and len(vector_stores(p)) == 1
    row = load(1, dtypes.float, 8).reshape((8, 1)).expand((8, 16))  # the same element for every lane
    got, p = run(
        UOp.sink(UOp.define_global(0, dtypes.float, 128).reshape((8, 16)).store(row * 2.0)),
        [a[0]],
        [Opt(U, 1, 16)],
        LoopRenderer(),
    )
    np.testing.assert_array_equal(got.reshape(8, 16), np.repeat(a[0][:, None] * 2, 16, 1))
    assert sum(u.op is Ops.LOAD for u in p.uops) == 1


def test_register_tile_matmul_matches_numpy_with_vector_accumulators():
    m, k, n = 8, 12, 16
    a, b = np.random.randn(m, k).astype(np.float32), np.random.randn(k, n).astype(np.float32)
    opts = [Opt(U, 1, 8), Opt(U, 0, 4), Opt(R, 0, 2)]
    got, p = run(matmul_ast(m, k, n), [a, b], opts, LoopRenderer())
    np.testing.assert_allclose(got.reshape(m, n), a @ b, rtol=1e-5, atol=1e-5)
    regs = [u for u in p.uops if u.op is Ops.DEFINE_REG]
    assert [r.dtype.size for r in regs] == [32]  # a 4 x 8 tile of accumulators
    scal, _ = run(matmul_ast(m, k, n), [a, b], opts, ScalarLoopRenderer())
    np.testing.assert_allclose(got, scal, rtol=1e-6, atol=1e-6)


def test_unrolled_contiguous_reduce_folds_after_the_loop():
    a = np.random.default_rng(7).standard_normal((4, 256)).astype(np.float32)
    ast = UOp.sink(
        UOp.define_global(0, dtypes.float, 4)
        .reshape((4, 1))
        .store(load(1, dtypes.float, 1024).reshape((4, 256)).r(Ops.ADD, (1,)))
    )
    got, p = run(ast, [a], [Opt(R, 0, 8)], LoopRenderer())
    # float32 summation error: 8 partial sums of 32 terms each, then 8 adds (~40 roundings of at most sum|a| * eps)
    bound = 40 * np.finfo(np.float32).eps * np.abs(a).astype(np.float64).sum(1)
    assert np.all(np.abs(got - a.astype(np.float64).sum(1)) <= bound)
    assert [u.dtype.size for u in p.uops if u.op is Ops.DEFINE_REG] == [8]  # 8 partial sums, folded at the end
    mx, p = run(
        UOp.sink(
            UOp.define_global(0, dtypes.float, 4)
            .reshape((4, 1))
            .store(load(1, dtypes.float, 1024).reshape((4, 256)).r(Ops.MAX, (1,)))
        ),
        [a],
        [Opt(R, 0, 16), Opt(U, 0, 4)],
        LoopRenderer(),
    )
    np.testing.assert_array_equal(mx, a.max(1))


def test_gated_loads_under_upcast_stay_in_bounds():
    a = np.arange(24, dtype=np.float32)
    x = load(1, dtypes.float, 24).reshape((4, 6)).pad(((0, 0), (1, 1)))  # 4 x 8 with zero borders
    ast = UOp.sink(UOp.define_global(0, dtypes.float, 32).reshape((4, 8)).store(x + 1.0))
    got, _ = run(ast, [a], [Opt(U, 1, 8), Opt(U, 0, 2)], LoopRenderer())
    np.testing.assert_array_equal(got.reshape(4, 8), np.pad(a.reshape(4, 6), ((0, 0), (1, 1))) + 1)


def test_group_reduce_with_upcast_output_on_python():
    a = np.random.randn(8, 64).astype(np.float32)
    x = load(1, dtypes.float, 512).reshape((8, 64)).permute((1, 0))  # reduce over the strided axis
    ast = UOp.sink(UOp.define_global(0, dtypes.float, 8).reshape((1, 8)).store(x.r(Ops.ADD, (0,))))
    got, p = run(ast, [a], [Opt(OptOps.GROUPTOP, 0, 16), Opt(U, 0, 4)])
    np.testing.assert_allclose(got, a.sum(1), rtol=1e-5, atol=1e-5)
    assert any(u.op is Ops.DEFINE_LOCAL for u in p.uops) and vector_stores(p)


def test_upcast_limits():
    k = get_kernel(matmul_ast(16, 16, 16), LoopRenderer())
    k.apply_opts([Opt(U, 0, 16), Opt(U, 0, 16)])  # both output axes: a 16 x 16 tile
    with pytest.raises(KernelOptError, match="256 upcast lanes"):
        k.apply_opt(Opt(R, 0, 2))
    with pytest.raises(KernelOptError, match="more than 16"):
        get_kernel(matmul_ast(32, 8, 8), LoopRenderer()).apply_opt(Opt(U, 0, 32))
    assert k.upcast_size == 256


# ----- tensor cores


@pytest.mark.parametrize("tc", range(len(PYTHON_TENSOR_CORES)), ids=[t.name for t in PYTHON_TENSOR_CORES])
@pytest.mark.parametrize(
    "extra", [[], [Opt(U, 0, 2)], [Opt(L, 0, 2), Opt(U, 0, 2)]], ids=["tc", "tc+upcast", "tc+local+upcast"]
)
def test_tensor_core_matmul_on_python_matches_numpy(tc, extra):
    core = PYTHON_TENSOR_CORES[tc]
    m, k, n = 16, 12, 8
    nd = dtypes.to_np(core.dtype_in)
    a, b = np.random.randn(m, k).astype(nd), np.random.randn(k, n).astype(nd)
    got, p = run(matmul_ast(m, k, n, core.dtype_in, core.dtype_out), [a, b], [Opt(T, 0, tc), *extra])
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got.reshape(m, n), want, rtol=1e-4, atol=1e-4)
    wmmas = [u for u in p.uops if u.op is Ops.WMMA]
    assert len(wmmas) == (2 if extra else 1) and all(w.arg[0] == core.name for w in wmmas)
    assert p.local_size[0] % core.threads == 0


def test_tensor_core_with_padded_axes_and_errors():
    m, k, n = 6, 7, 5
    a, b = np.random.randn(m, k).astype(np.float32), np.random.randn(k, n).astype(np.float32)
    ast = matmul_ast(m, k, n)
    with pytest.raises(KernelOptError, match="no tensor core fits"):
        get_program(ast, PythonRenderer(), [Opt(T, 0, 0)])
    got, p = run(ast, [a, b], [Opt(P, 0, 4), Opt(P, 1, 4), Opt(P, 2, 4), Opt(T, 0, 0)])
    np.testing.assert_allclose(got.reshape(m, n), a @ b, rtol=1e-5, atol=1e-5)
    assert any(u.op is Ops.WMMA for u in p.uops)
    with pytest.raises(KernelOptError, match="tensor cores need local ids"):
        get_program(ast, LoopRenderer(), [Opt(T, 0, 0)])
    summed = UOp.sink(
        UOp.define_global(0, dtypes.float, 4)
        .reshape((4, 1))
        .store(load(1, dtypes.float, 64).reshape((4, 16)).r(Ops.ADD, (1,)))
    )
    with pytest.raises(KernelOptError):
        get_program(summed, PythonRenderer(), [Opt(T, 0, 0)])


# ----- PADTO and SWAP


def test_padto_output_axis_then_upcast():
    a = np.random.randn(7, 5).astype(np.float32)
    x = load(1, dtypes.float, 35).reshape((7, 5))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, 35).reshape((7, 5)).store(x * 3.0))
    got, p = run(ast, [a], [Opt(P, 1, 4), Opt(U, 1, 8), Opt(P, 0, 4), Opt(U, 0, 8)], LoopRenderer())
    np.testing.assert_allclose(got.reshape(7, 5), a * 3, rtol=1e-6)
    # every lane of the 8 x 8 padded tile is known statically: the 29 padded lanes are never stored
    assert sum(u.src[1].dtype.count for u in p.uops if u.op is Ops.STORE) == 35


def test_padto_output_axes_gate_only_the_stores():
    """Padding a matmul's output axes: the extra lanes' results are never stored, so a right operand whose memory
    is padded too (a zero-filled column panel) is read as whole unmasked vectors, the left operand's extra rows
    read the last real row (clamped, never out of bounds) and only the stores are gated."""
    m, k, n, wide = 7, 5, 10, 16
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = np.zeros((k, wide), np.float32)
    w[:, :n] = rng.standard_normal((k, n))
    x = load(1, dtypes.float, m * k).reshape((m, k, 1)).expand((m, k, n))
    y = load(2, dtypes.float, k * wide).reshape((1, k, wide)).shrink(((0, 1), (0, k), (0, n))).expand((m, k, n))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, m * n).reshape((m, 1, n)).store((x * y).r(Ops.ADD, (1,))))
    opts = [Opt(P, 1, 16), Opt(U, 1, 16), Opt(P, 0, 4), Opt(U, 0, 4)]
    for renderer in (UnmaskedLoopRenderer(), LoopRenderer()):
        got, p = run(ast, [a, w], opts, renderer)
        np.testing.assert_allclose(got.reshape(m, n), a @ w[:, :n], rtol=1e-5, atol=1e-5)
        loads = [u for u in p.uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
        assert loads and all(len(u.src[0].src) == 2 for u in loads)  # no load is gated
        assert any(u.dtype.count == 16 for u in loads)  # the padded operand: one 16-wide load per reduce step
        stores = [u for u in p.uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
        assert sum(u.src[1].dtype.count for u in stores) == 4 * n  # one 4-row tile per loop step: real columns only
        # the padded 4th row is stored only by the first tile: masked lanes join the real ones in one vector
        masks = [u.src[0].src[2].dtype.count for u in stores if len(u.src[0].src) == 3]
        assert masks == ([16] if renderer.masked_access else [])
    # without memory behind the padding, the right operand's lanes are clamped to the last real column instead, or
    # (with masked access) read as one masked vector
    n2 = 26  # two column tiles, the second one with 10 real columns
    w2 = rng.standard_normal((k, n2)).astype(np.float32)
    x2 = load(1, dtypes.float, m * k).reshape((m, k, 1)).expand((m, k, n2))
    tight = load(2, dtypes.float, k * n2).reshape((1, k, n2)).expand((m, k, n2))
    ast2 = UOp.sink(UOp.define_global(0, dtypes.float, m * n2).reshape((m, 1, n2)).store((x2 * tight).r(Ops.ADD, (1,))))
    for renderer in (UnmaskedLoopRenderer(), LoopRenderer()):
        got2, p2 = run(ast2, [a, w2], [Opt(P, 1, 16), Opt(U, 1, 16)], renderer)
        np.testing.assert_allclose(got2.reshape(m, n2), a @ w2, rtol=1e-5, atol=1e-5)
        gated = [u for u in p2.uops if u.op is Ops.LOAD and len(u.src[0].src) == 3]
        if renderer.masked_access:
            assert [(u.dtype.count, u.src[0].src[2].dtype.count) for u in gated] == [(16, 16)]
        else:
            assert not gated


@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
def test_padto_reduce_axis_uses_the_identity(op):
    a = (-np.random.rand(3, 13) - 1).astype(np.float32)  # all negative: a 0 in the padding would win a MAX
    x = load(1, dtypes.float, 39).reshape((3, 13))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, 3).reshape((3, 1)).store(x.r(op, (1,))))
    got, _ = run(ast, [a], [Opt(P, 1, 16), Opt(R, 0, 4)], LoopRenderer())
    want = a.sum(1) if op is Ops.ADD else a.max(1)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_padto_errors():
    k = get_kernel(matmul_ast(8, 8, 8), LoopRenderer())
    for bad in (Opt(P, 0, 4), Opt(P, 0, 1), Opt(P, 5, 16), Opt(P, 0, 64)):  # already a multiple, 1, no axis, >2x
        with pytest.raises(KernelOptError):
            k.apply_opt(bad)
    assert k.applied_opts == [] and k.full_shape == (8, 8, 8)


@pytest.mark.parametrize("renderer", [LoopRenderer(), UnmaskedLoopRenderer(), ScalarLoopRenderer()])
def test_overlap_shifts_the_last_blocks_back(renderer):
    """``OVERLAP``: the padded axis' last blocks end at its last element (they recompute elements of the block
    before), so nothing is gated and every real element is stored with its own value, on vector and scalar paths,
    with the blocks split across a THREAD-style outer axis or tile by tile."""
    a = np.random.randn(37, 21).astype(np.float32)
    x = load(1, dtypes.float, 37 * 21).reshape((37, 21))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, 37 * 21).reshape((37, 21)).store(x * 3.0 + 1.0))
    for opts in (
        [Opt(OptOps.OVERLAP, 1, (8, 8)), Opt(U, 1, 8), Opt(OptOps.OVERLAP, 0, (4, 4)), Opt(U, 0, 4)],
        [Opt(OptOps.OVERLAP, 0, (8, 20)), Opt(OptOps.TILE, 0, 20), Opt(U, 1, 4)],  # 2 blocks of 20 rows: 0..19, 17..36
    ):
        got, p = run(ast, [a], opts, renderer)
        np.testing.assert_allclose(got.reshape(37, 21), a * 3 + 1, rtol=1e-6)
        assert not [u for u in p.uops if u.op is Ops.INDEX and len(u.src) > 2]  # no gate anywhere


def test_overlap_keeps_lane_addresses_affine():
    """A row tile of an OVERLAP axis, upcast: its lanes' addresses are one base plus constant offsets (the shift's
    ``row // 4`` becomes the tile index when the UPCAST splits the row, so no division of a lane is left), so the 4
    rows of the left operand are 4 loads off one base."""
    m, k, n = 37, 8, 16
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    opts = [Opt(OptOps.OVERLAP, 0, (4, 4)), Opt(U, 1, 16), Opt(U, 0, 4)]
    got, p = run(matmul_ast(m, k, n), [a, b], opts, LoopRenderer())
    np.testing.assert_allclose(got.reshape(m, n), a @ b, rtol=1e-5, atol=1e-5)
    left = [u.src[0].src[1] for u in p.uops if u.op is Ops.LOAD and u.src[0].src[0].arg == 1]
    bases = {x.src[0] if x.op is Ops.ADD and x.src[1].op is Ops.CONST else x for x in left}
    assert len(left) == 4 and len(bases) == 1
    kern = get_kernel(matmul_ast(m, k, n), LoopRenderer()).apply_opts(opts[:1])
    assert [u for u in kern.sink.toposort() if u.op is Ops.IDIV]  # the shift divides the row by the block
    kern.apply_opts(opts[1:])
    lanes = [r for r in kern.rngs if r.arg[1] is AxisType.UPCAST]
    divisions = [u for u in kern.sink.toposort() if u.op is Ops.IDIV]
    assert len(lanes) == 2 and not any(lane in d.toposort() for d in divisions for lane in lanes)


def test_overlap_errors():
    kern = get_kernel(matmul_ast(10, 8, 10), LoopRenderer())
    o = OptOps.OVERLAP
    for bad in (
        Opt(o, 0, 4),  # arg is (multiple, block)
        Opt(o, 0, (5, 5)),  # 10 is already a multiple of 5
        Opt(o, 0, (4, 5)),  # blocks of 5 don't tile 12
        Opt(o, 0, (4, 12)),  # a block longer than the axis
        Opt(o, 0, (32, 4)),  # more than doubles the work
        Opt(o, 2, (4, 4)),  # a reduce axis
    ):
        with pytest.raises(KernelOptError):
            kern.apply_opt(bad)
    assert kern.applied_opts == [] and kern.full_shape == (10, 10, 8)
    out = UOp.define_global(0, dtypes.float, 10)
    accumulate = UOp.sink(out.store(UOp(Ops.LOAD, dtypes.float, (out,)) + load(1, dtypes.float, 10)))
    with pytest.raises(KernelOptError, match="reads a buffer it stores"):
        get_kernel(accumulate, LoopRenderer()).apply_opt(Opt(o, 0, (4, 4)))


def test_swap_exchanges_the_loop_nesting():
    a = np.random.randn(4, 6).astype(np.float32)
    ast = UOp.sink(
        UOp.define_global(0, dtypes.float, 24).reshape((4, 6)).store(load(1, dtypes.float, 24).reshape((4, 6)) + 1.0)
    )
    _, p0 = run(ast, [a], [], LoopRenderer())
    got, p1 = run(ast, [a], [Opt(S, 0, 1)], LoopRenderer())
    np.testing.assert_array_equal(got.reshape(4, 6), a + 1)
    sizes = [[u.src[0].arg for u in p.uops if u.op is Ops.RANGE] for p in (p0, p1)]
    assert sizes == [[4, 6], [6, 4]]
    with pytest.raises(KernelOptError):
        get_program(ast, LoopRenderer(), [Opt(S, 0, 0)])


def test_child_axes_order_lanes_like_memory():
    k = get_kernel(matmul_ast(8, 8, 16), LoopRenderer())
    k.apply_opts([Opt(U, 1, 4), Opt(U, 0, 2), Opt(U, 1, 2)])
    ups = [r for r in k.rngs if r.arg[1] is AxisType.UPCAST]
    # i's upcast first, then j's outer (later) split, then j's first (innermost) split
    assert [r.src[0].arg for r in ups] == [2, 2, 4]


# ----- CLANG


def test_clang_vector_code_matches_numpy(clang):
    m, k, n = 8, 16, 32
    a, b = np.random.randn(m, k).astype(np.float32), np.random.randn(k, n).astype(np.float32)
    opts = [Opt(U, 1, 16), Opt(U, 0, 4), Opt(R, 0, 4), Opt(OptOps.THREAD, 0, 2)]
    got, p = run(matmul_ast(m, k, n), [a, b], opts, device="CLANG")
    np.testing.assert_allclose(got.reshape(m, n), a @ b, rtol=1e-5, atol=1e-5)
    from tinycore_clang.renderer import ClangRenderer

    src = ClangRenderer().render(p.uops)  # the C text, whichever backend (CLANG_BACKEND) ran the kernel
    assert "vector_size(64)" in src and "__builtin_memcpy" in src
    x = load(1, dtypes.float, 1000).reshape((10, 100))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, 10).reshape((10, 1)).store(x.r(Ops.ADD, (1,))))
    arr = np.random.randn(10, 100).astype(np.float32)
    got, _ = run(ast, [arr], [Opt(P, 1, 16), Opt(R, 0, 16)], device="CLANG")
    np.testing.assert_allclose(got, arr.sum(1), rtol=1e-4, atol=1e-4)


def test_vector_reduce_register_dtype_is_scalar():
    k = get_kernel(matmul_ast(4, 8, 8), LoopRenderer()).apply_opts([Opt(U, 1, 8)])
    regs = [u for u in k.get_optimized_sink().toposort() if u.op is Ops.DEFINE_REG]
    assert regs and all(isinstance(r.dtype, PtrDType) and r.dtype.addrspace is AddrSpace.REG for r in regs)
    assert all(r.dtype.base == dtypes.float and r.dtype.size == 8 for r in regs)
