"""Register-blocked matmul/conv on CPU-style devices: the TILE opt, fused multiply-add accumulation, the heuristics'
blocking, packed right operands (`Renderer.gemm_panel_bytes`; which ones are packed: tests/test_gemm_packing.py),
padded conv input, and two-kernel full reductions. Every optimization is checked against numpy on odd shapes
(non-multiples of the block sizes, one element, larger than a block)."""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.codegen import KernelOptError, Opt, OptOps, get_kernel, get_program
from tinycore.codegen.heuristic import hand_coded_optimizations
from tinycore.device import Buffer, Device
from tinycore.dtype import dtypes
from tinycore.engine.exec_item import CompiledRunner
from tinycore.runtime.python_device import PythonRenderer
from tinycore.uop.ops import AxisType, Ops, UOp


class LoopRenderer(PythonRenderer):
    """CPU style (no launch ids, 2 threads, 32-byte vectors, no packing); the PYTHON interpreter runs it."""

    has_local = False
    has_shared = False
    threads = 2


class NoFmaRenderer(LoopRenderer):
    @property
    def native_ops(self) -> frozenset[str]:
        return super().native_ops - {"MULACC"}


def load(arg: int, size: int) -> UOp:
    return UOp(Ops.LOAD, dtypes.float, (UOp.define_global(arg, dtypes.float, size),))


def matmul_ast(m: int, k: int, n: int) -> UOp:
    a = load(1, m * k).reshape((m, k, 1)).expand((m, k, n))
    b = load(2, k * n).reshape((1, k, n)).expand((m, k, n))
    return UOp.sink(UOp.define_global(0, dtypes.float, m * n).reshape((m, 1, n)).store((a * b).r(Ops.ADD, (1,))))


def run(ast: UOp, arrays: list[np.ndarray], opts, renderer=None, device: str = "PYTHON") -> tuple[np.ndarray, object]:
    out = next(u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL and u.arg == 0)
    p = get_program(ast, renderer or Device[device].renderer, opts)
    bufs = [Buffer(device, out.dtype.size, dtypes.float).copyin(bytes(4 * out.dtype.size))]
    bufs += [Buffer(device, a.size, dtypes.float).copyin(np.ascontiguousarray(a).tobytes()) for a in arrays]
    CompiledRunner(p)(bufs, {})
    return bufs[0].numpy(), p


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ----- the TILE opt


def test_tile_splits_an_output_loop_and_swap_moves_a_loop_between():
    k = get_kernel(matmul_ast(32, 8, 16), LoopRenderer())
    k.apply_opt(Opt(OptOps.TILE, 0, 8))
    assert k.full_shape == (4, 8, 16, 8)
    assert [r.arg[1] for r in k.output_axes] == [AxisType.LOOP] * 3
    k.apply_opt(Opt(OptOps.SWAP, 1, 2))  # rows-of-a-block loop now inside the column loop
    assert [int(r.src[0].arg) for r in k.output_axes] == [4, 16, 8]
    for bad in (Opt(OptOps.TILE, 0, 3), Opt(OptOps.TILE, 0, 4), Opt(OptOps.TILE, 5, 2), Opt(OptOps.TILE, 2, 8)):
        with pytest.raises(KernelOptError):
            k.apply_opt(bad)  # not a divisor / the whole axis / no such axis


@pytest.mark.parametrize(
    "opts",
    [
        [Opt(OptOps.TILE, 0, 4)],
        [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.TILE, 0, 3), Opt(OptOps.SWAP, 1, 2)],
        [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.THREAD, 0, 2), Opt(OptOps.TILE, 0, 3), Opt(OptOps.SWAP, 1, 2)],
    ],
)
def test_tiled_matmul_matches_numpy(opts):
    a, b = rand(12, 7), rand(7, 20, seed=1)
    got, _ = run(matmul_ast(12, 7, 20), [a, b], opts, LoopRenderer())
    np.testing.assert_allclose(got.reshape(12, 20), a @ b, rtol=1e-5, atol=1e-5)


# ----- fused multiply-add accumulation


def test_reduce_of_products_accumulates_with_mulacc_when_the_renderer_has_it():
    a, b = rand(5, 9), rand(9, 3, seed=1)
    got, p = run(matmul_ast(5, 9, 3), [a, b], [], LoopRenderer())
    assert any(u.op is Ops.MULACC for u in p.uops)
    np.testing.assert_allclose(got.reshape(5, 3), a @ b, rtol=1e-5, atol=1e-5)
    got, p = run(matmul_ast(5, 9, 3), [a, b], [], NoFmaRenderer())
    assert not any(u.op is Ops.MULACC for u in p.uops)
    np.testing.assert_allclose(got.reshape(5, 3), a @ b, rtol=1e-5, atol=1e-5)


def test_vector_accumulators_use_mulacc():
    _, p = run(matmul_ast(8, 4, 16), [rand(8, 4), rand(4, 16)], [Opt(OptOps.UPCAST, 1, 8)], LoopRenderer())
    assert any(u.op is Ops.MULACC and u.dtype.count == 8 for u in p.uops)


# ----- the heuristics' register blocking


def test_heuristic_blocks_a_matmul_with_an_8_to_12_vector_tile_and_cache_blocks():
    k = get_kernel(matmul_ast(512, 512, 512), LoopRenderer())
    opts = hand_coded_optimizations(k)
    ups = [o.arg for o in opts if o.op is OptOps.UPCAST]
    assert ups == [16, 4]  # 2 vectors x 4 rows = 8 accumulators
    assert OptOps.THREAD in [o.op for o in opts]
    assert OptOps.TILE in [o.op for o in opts] and OptOps.SWAP in [o.op for o in opts]
    # one vector of columns: more rows so there are still 8 accumulators
    narrow = [o.arg for o in hand_coded_optimizations(get_kernel(matmul_ast(64, 64, 8), LoopRenderer()))]
    assert narrow[:2] == [8, 8]


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (36, 17, 48), (40, 64, 24), (130, 33, 96)])
def test_heuristic_matmul_odd_shapes_match_numpy(shape):
    m, kk, n = shape
    a, b = rand(m, kk), rand(kk, n, seed=1)
    got, _ = run(matmul_ast(m, kk, n), [a, b], None, LoopRenderer())
    np.testing.assert_allclose(got.reshape(m, n), a @ b, rtol=1e-4, atol=1e-4)


# ----- CLANG end to end: packing, conv, split reductions


def test_clang_declares_vector_and_panel_widths(clang):
    ren = clang.renderer
    assert ren.vector_bytes in (16, 32, 64)
    # a register tile four vectors wide with AVX-512's 32 registers, two with 16
    assert ren.gemm_panel_bytes == (4 if ren.vector_registers >= 32 else 2) * ren.vector_bytes


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((1, 1), (1, 1)),
        ((17, 33), (33, 47)),
        ((64, 100), (100, 48)),  # packed: 48 columns = 3 panels of 16
        ((130, 64), (64, 256)),  # packed; 130 rows: not a multiple of the 4-row tile
        ((5, 3, 64), (64, 32)),  # batched left operand
        ((3, 1, 40, 32), (2, 32, 64)),  # broadcast batch dims, packed batched right operand
        ((256, 256), (256, 256)),
        ((217, 186), (186, 171)),  # zero-filled last panel (171 -> 176 columns), rows padded 217 -> 224
        ((101, 163), (163, 107)),  # both padded, prime-ish sizes
        ((2, 65, 97), (97, 133)),  # batched left operand, padded panels
        ((3, 48, 70), (3, 70, 150)),  # batched right operand padded per batch
    ],
)
def test_clang_matmul_matches_numpy(clang, sa, sb):
    from tinycore import Tensor

    a, b = rand(*sa), rand(*sb, seed=1)
    got = (Tensor(a, device="CLANG") @ Tensor(b, device="CLANG")).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)


def test_clang_packed_matmul_gradients_match_numpy(clang):
    from tinycore import Tensor

    a, b = rand(32, 48), rand(48, 64, seed=1)
    ta, tb = Tensor(a, device="CLANG", requires_grad=True), Tensor(b, device="CLANG", requires_grad=True)
    (ta @ tb).sum().backward()
    np.testing.assert_allclose(ta.grad.numpy(), np.ones((32, 64), np.float32) @ b.T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(tb.grad.numpy(), a.T @ np.ones((32, 64), np.float32), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "xs,ws,kwargs",
    [
        ((2, 3, 7, 9), (5, 3, 3, 3), {"padding": 1}),
        ((1, 1, 1, 1), (1, 1, 1, 1), {}),
        ((2, 8, 12, 10), (16, 8, 3, 3), {"padding": 1, "stride": 2}),
        ((1, 4, 9, 9), (6, 2, 3, 3), {"padding": (1, 2), "groups": 2}),
        ((1, 16, 20, 24), (32, 16, 3, 3), {"padding": 1}),
    ],
)
def test_clang_conv2d_matches_torch(clang, xs, ws, kwargs):
    import torch

    from tinycore import Tensor

    x, w = rand(*xs), rand(*ws, seed=1)
    got = Tensor(x, device="CLANG").conv2d(Tensor(w, device="CLANG"), **kwargs).numpy()
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), **kwargs).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("n", [1, 63, 1 << 18, (1 << 18) + 64, (1 << 18) + 1, 3 << 18])
def test_large_full_reductions_match_numpy(n):
    from tinycore import Tensor

    a = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    t = Tensor(a, device="PYTHON" if n < 1000 else Device.DEFAULT)
    np.testing.assert_allclose(t.sum().numpy(), a.astype(np.float64).sum(), rtol=1e-4, atol=1e-2)
    assert float(t.max().numpy()) == a.max()
    assert t.sum(keepdim=True).shape == (1,)
    m = Tensor(a.reshape(1, n)).sum(axis=(0, 1), keepdim=True)
    assert m.shape == (1, 1)
    np.testing.assert_allclose(m.numpy().ravel(), [a.astype(np.float64).sum()], rtol=1e-4, atol=1e-2)


def test_clang_streams_stores_into_large_outputs_only(clang):
    from tinycore_clang.renderer import NT_STORE_MIN_BYTES, ClangRenderer

    c_source = ClangRenderer().render  # the C text, whichever backend (CLANG_BACKEND) runs the kernels

    n = NT_STORE_MIN_BYTES // 4 + 8  # just over the threshold; not a multiple of 16
    a, b = rand(n), rand(n, seed=1)
    ast = UOp.sink(UOp.define_global(0, dtypes.float, n).store(load(1, n) * load(2, n) + load(1, n)))
    got, p = run(ast, [a, b], None, device="CLANG")
    assert "TC_NT_STORE" in c_source(p.uops) and "TC_NT_FENCE();" in c_source(p.uops)
    np.testing.assert_array_equal(got, a * b + a)
    small = UOp.sink(UOp.define_global(0, dtypes.float, 1024).store(load(1, 1024) * 2.0))
    got, p = run(small, [a[:1024]], None, device="CLANG")
    assert "TC_NT_STORE" not in c_source(p.uops)
    np.testing.assert_array_equal(got, a[:1024] * 2.0)


# ----- transposed and skinny forms (the backward pass of an MLP)


def matmul_at_ast(m: int, k: int, n: int) -> UOp:
    """``C = A^T @ B`` with ``A`` stored ``(k, m)`` (a weight gradient ``x^T @ dy``): the reduce runs over A's rows."""
    a = load(1, k * m).reshape((k, m, 1)).permute((1, 0, 2)).expand((m, k, n))
    b = load(2, k * n).reshape((1, k, n)).expand((m, k, n))
    return UOp.sink(UOp.define_global(0, dtypes.float, m * n).reshape((m, 1, n)).store((a * b).r(Ops.ADD, (1,))))


def test_short_output_rows_put_the_vector_lanes_along_the_contiguous_input_axis():
    # 512 x 10 output (N = 10 is no multiple of a vector): the lanes go along the 512 axis, which A^T reads
    # contiguously, four vectors of it (16 lanes, then 2 of those), and the 10 axis is a register tile of 2 rows
    # (a power of two: 5 rows were 7-10x slower); the threads split the long axis
    k = get_kernel(matmul_at_ast(512, 128, 10), LoopRenderer())
    opts = hand_coded_optimizations(k)
    assert opts[0] == Opt(OptOps.SWAP, 0, 1)
    assert [o.arg for o in opts if o.op is OptOps.UPCAST] == [16, 2, 2]
    assert Opt(OptOps.THREAD, 1, 2) in opts
    assert OptOps.TILE not in [o.op for o in opts]


@pytest.mark.parametrize("shape", [(512, 128, 10), (40, 7, 10), (24, 33, 3), (16, 5, 5), (8, 1, 1)])
def test_transposed_left_operand_matmul_matches_numpy(shape):
    m, kk, n = shape
    a, b = rand(kk, m), rand(kk, n, seed=1)
    got, _ = run(matmul_at_ast(m, kk, n), [a, b], None, LoopRenderer())
    np.testing.assert_allclose(got.reshape(m, n), a.T @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(512, 128, 10), (72, 19, 10), (40, 33, 6)])
def test_clang_transposed_left_operand_matmul_matches_numpy(clang, shape):
    m, kk, n = shape
    a, b = rand(kk, m), rand(kk, n, seed=1)
    got, _ = run(matmul_at_ast(m, kk, n), [a, b], None, device="CLANG")
    np.testing.assert_allclose(got.reshape(m, n), a.T @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "sx,sw",
    [
        ((128, 64), (64, 10)),  # skinny output: dW = h^T @ dout is 64 x 10
        ((37, 48), (48, 10)),
        ((24, 40), (40, 96)),  # packed right operand; dx reads it transposed
        ((130, 33), (33, 48)),
        ((131, 150), (150, 171)),  # padded tiles in the forward and both gradient matmuls
    ],
)
def test_clang_mlp_layer_gradients_match_torch(clang, sx, sw):
    import torch

    from tinycore import Tensor

    x, w = rand(*sx), rand(*sw, seed=1)
    up = rand(sx[0], sw[1], seed=2)
    tx, tw = Tensor(x, device="CLANG", requires_grad=True), Tensor(w, device="CLANG", requires_grad=True)
    ((tx @ tw).relu() * Tensor(up, device="CLANG")).sum().backward()
    rx, rw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ((rx @ rw).relu() * torch.tensor(up)).sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), rx.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(tw.grad.numpy(), rw.grad.numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("m", [10, 15, 6, 50, 3])
def test_row_tiles_are_a_power_of_two_of_rows(m):
    """A row count no tile size divides gets a power-of-two tile (2 or 1 rows), or whole tiles over overlapping
    padded rows when that adds at most an eighth (15 -> 16): 3- and 5-row tiles were 4-10x slower."""
    opts = hand_coded_optimizations(get_kernel(matmul_ast(m, 64, 32), LoopRenderer()))
    ups = [o.arg for o in opts if o.op is OptOps.UPCAST]
    assert all(a & (a - 1) == 0 for a in ups), opts
    if m == 15:
        assert any(o.op is OptOps.OVERLAP for o in opts)
    a, b = rand(m, 64), rand(64, 32, seed=1)
    got, _ = run(matmul_ast(m, 64, 32), [a, b], opts, LoopRenderer())
    np.testing.assert_allclose(got.reshape(m, 32), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,n", [(10, 512), (15, 512), (50, 100)])
def test_clang_odd_row_counts_match_numpy(clang, m, n):
    a, b = rand(m, 256), rand(256, n, seed=1)
    got, _ = run(matmul_ast(m, 256, n), [a, b], None, device="CLANG")
    np.testing.assert_allclose(got.reshape(m, n), a @ b, rtol=1e-4, atol=1e-3)


def test_row_blocks_follow_the_renderers_l2_cache():
    """A block of left-operand rows takes half of the renderer's `l2_bytes`: twice the cache, twice the rows per
    block (``TILE``); when every row fits, the column tiles loop outermost (``SWAP``, no ``TILE``)."""

    def tile_of(l2: int) -> list[Opt]:
        renderer = type("L2Renderer", (LoopRenderer,), {"l2_bytes": l2})()
        return [
            o
            for o in hand_coded_optimizations(get_kernel(matmul_ast(512, 512, 64), renderer))
            if o.op in (OptOps.TILE, OptOps.SWAP)
        ]

    assert tile_of(256 << 10)[0] == Opt(OptOps.TILE, 0, 16) and tile_of(512 << 10)[0] == Opt(OptOps.TILE, 0, 32)
    assert [o.op for o in tile_of(4 << 20)] == [OptOps.SWAP]
