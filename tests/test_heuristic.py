"""The hand-coded heuristics: what they pick on CPU-style and GPU-style renderers, and that their kernels compute
the right values."""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.codegen import Opt, OptOps, get_kernel, get_program
from tinycore.codegen.heuristic import hand_coded_optimizations, thread_count, vector_width
from tinycore.codegen.kernel import KernelOptError
from tinycore.device import Buffer
from tinycore.dtype import dtypes
from tinycore.engine.exec_item import CompiledRunner
from tinycore.helpers import Context
from tinycore.runtime.python_device import PythonRenderer
from tinycore.uop.ops import AxisType, Ops, UOp


class CPURenderer(PythonRenderer):
    """CPU style with 4 threads and 32-byte vectors; the PYTHON interpreter runs its programs."""

    has_local = False
    has_shared = False
    threads = 4


class WideCPURenderer(CPURenderer):
    vector_bytes = 64


class UnmaskedCPURenderer(CPURenderer):
    """A CPU renderer without masked vector loads (like the C backend)."""

    masked_access = False


class OneThreadCPURenderer(CPURenderer):
    threads = 1


class NoThreadsRenderer(PythonRenderer):
    has_local = False
    has_shared = False


def load(arg: int, size: int, dt=dtypes.float) -> UOp:
    return UOp(Ops.LOAD, dt, (UOp.define_global(arg, dt, size),))


def matmul_ast(m: int, k: int, n: int) -> UOp:
    a = load(1, m * k).reshape((m, k, 1)).expand((m, k, n))
    b = load(2, k * n).reshape((1, k, n)).expand((m, k, n))
    return UOp.sink(UOp.define_global(0, dtypes.float, m * n).reshape((m, 1, n)).store((a * b).r(Ops.ADD, (1,))))


def elementwise_ast(r: int, c: int) -> UOp:
    x = load(1, r * c).reshape((r, c))
    return UOp.sink(UOp.define_global(0, dtypes.float, r * c).reshape((r, c)).store(x * x + x))


def rowsum_ast(r: int, c: int) -> UOp:
    x = load(1, r * c).reshape((r, c))
    return UOp.sink(UOp.define_global(0, dtypes.float, r).reshape((r, 1)).store(x.r(Ops.ADD, (1,))))


def opts_of(ast: UOp, renderer) -> list:
    return hand_coded_optimizations(get_kernel(ast, renderer))


def run(ast: UOp, arrays: list[np.ndarray], renderer) -> np.ndarray:
    out = next(u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL and u.arg == 0)
    p = get_program(ast, renderer)  # default opts: the heuristics
    bufs = [Buffer("PYTHON", out.dtype.size, dtypes.float).copyin(bytes(4 * out.dtype.size))]
    bufs += [Buffer("PYTHON", a.size, dtypes.float).copyin(a.tobytes()) for a in arrays]
    CompiledRunner(p)(bufs, {})
    return bufs[0].numpy()


# ----- CPU


def test_cpu_matmul_gets_a_register_tile_and_threads():
    opts = opts_of(matmul_ast(64, 32, 64), CPURenderer())
    ups = [o for o in opts if o.op is OptOps.UPCAST]
    assert [o.arg for o in ups] == [16, 4]  # two 8-float vectors along the contiguous axis, 4 rows
    assert [o for o in opts if o.op is OptOps.THREAD][0].arg == 4
    assert not any(o.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.UNROLL) for o in opts)
    k = get_kernel(matmul_ast(64, 32, 64), CPURenderer()).apply_opts(opts)
    assert [r.arg[1] for r in k.rngs].count(AxisType.REDUCE) == 1  # the reduce loop stays a loop (innermost)
    a, b = np.random.randn(64, 32).astype(np.float32), np.random.randn(32, 64).astype(np.float32)
    np.testing.assert_allclose(
        run(matmul_ast(64, 32, 64), [a.ravel(), b.ravel()], CPURenderer()).reshape(64, 64), a @ b, rtol=1e-4, atol=1e-4
    )


def test_cpu_matmul_tails_overlap_the_last_tiles():
    """Sizes that don't divide the register tile: the rows are padded to whole 4-row tiles times the threads and the
    columns to whole 16-wide tiles, each by overlapping the last real elements (``OVERLAP``): the rows in blocks of
    one thread's share, the columns tile by tile. Every access stays a plain vector (no gate, no mask)."""
    m, k, n = 131, 8, 42
    opts = opts_of(matmul_ast(m, k, n), CPURenderer())
    assert [(o.op, o.arg) for o in opts[:4]] == [
        (OptOps.OVERLAP, (16, 16)),  # columns: 42 -> 48, the third tile is columns 26..41
        (OptOps.OVERLAP, (16, 36)),  # rows: 131 -> 144 in 4 blocks of 36, the last one rows 95..130
        (OptOps.UPCAST, 16),
        (OptOps.UPCAST, 4),
    ]
    sink = get_kernel(matmul_ast(m, k, n), CPURenderer()).apply_opts(opts).get_optimized_sink()
    assert not [u for u in sink.toposort() if u.op is Ops.INDEX and len(u.src) > 2]  # nothing gated
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    got = run(matmul_ast(m, k, n), [a.ravel(), b.ravel()], CPURenderer()).reshape(m, n)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    one = opts_of(matmul_ast(m, k, n), OneThreadCPURenderer())
    assert (OptOps.OVERLAP, (4, 4)) in [(o.op, o.arg) for o in one]  # one thread: each row tile overlaps
    got = run(matmul_ast(m, k, n), [a.ravel(), b.ravel()], OneThreadCPURenderer()).reshape(m, n)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_cpu_matmul_prefers_a_full_width_tile_over_a_narrow_exact_one():
    """200 columns: one 8-wide vector divides them, but 16-wide tiles (two vectors) overlapping 8 columns at the end
    do the same work with half the broadcasts of the left operand per multiply-add; 24 columns would overlap a third
    of the work, so they keep the exact 8-wide tile."""
    wide = opts_of(matmul_ast(64, 8, 200), CPURenderer())
    assert (OptOps.OVERLAP, (16, 16)) in [(o.op, o.arg) for o in wide]
    assert [o.arg for o in wide if o.op is OptOps.UPCAST][0] == 16
    narrow = opts_of(matmul_ast(64, 8, 24), CPURenderer())
    assert not [o for o in narrow if o.op in (OptOps.OVERLAP, OptOps.PADTO)]
    assert [o.arg for o in narrow if o.op is OptOps.UPCAST][0] == 8
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((64, 8)).astype(np.float32), rng.standard_normal((8, 200)).astype(np.float32)
    got = run(matmul_ast(64, 8, 200), [a.ravel(), b.ravel()], CPURenderer()).reshape(64, 200)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_cpu_matmul_tails_are_padded_where_they_cant_overlap():
    """``PADTO`` instead of ``OVERLAP``: columns of a right operand packed in zero-filled 16-wide panels (the
    frontend's layout: a tile shifted across a panel boundary would be gathered, a padded one reads whole vectors and
    masks only the stores), and rows of a kernel that reads the buffer it writes (a block computed twice would add
    twice)."""
    m, k, n, panel = 131, 8, 42, 16
    wide = -(-n // panel) * panel
    x = load(1, m * k).reshape((m, k, 1)).expand((m, k, n))
    packed = load(2, k * wide).reshape((wide // panel, k, panel)).permute((1, 0, 2)).reshape((k, wide))
    w = packed.shrink(((0, k), (0, n))).reshape((1, k, n)).expand((m, k, n))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, m * n).reshape((m, 1, n)).store((x * w).r(Ops.ADD, (1,))))
    opts = opts_of(ast, CPURenderer())
    assert [(o.op, o.arg) for o in opts[:2]] == [(OptOps.PADTO, 16), (OptOps.OVERLAP, (16, 36))]
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((m, k)).astype(np.float32), np.zeros((k, wide), np.float32)
    b[:, :n] = rng.standard_normal((k, n))
    panels = np.ascontiguousarray(b.reshape(k, wide // panel, panel).transpose(1, 0, 2))
    got = run(ast, [a.ravel(), panels.ravel()], CPURenderer()).reshape(m, n)
    np.testing.assert_allclose(got, a @ b[:, :n], rtol=1e-4, atol=1e-4)

    out = UOp.define_global(0, dtypes.float, m * n)
    acc = UOp(Ops.LOAD, dtypes.float, (out,)).reshape((m, 1, n))
    product = load(1, m * k).reshape((m, k, 1)).expand((m, k, n)) * load(2, k * n).reshape((1, k, n)).expand((m, k, n))
    accumulate = UOp.sink(out.reshape((m, 1, n)).store(acc + product.r(Ops.ADD, (1,))))
    opts = opts_of(accumulate, CPURenderer())
    assert [o.op for o in opts[:2]] == [OptOps.PADTO, OptOps.PADTO]
    kern = get_kernel(accumulate, CPURenderer())
    try:
        kern.apply_opt(Opt(OptOps.OVERLAP, 1, (16, 16)))
    except KernelOptError as error:
        assert "reads a buffer it stores" in str(error)
    else:
        raise AssertionError("OVERLAP applied to a kernel that reads its output")


def test_cpu_elementwise_vectorizes_the_contiguous_axis_and_threads_big_kernels():
    opts = opts_of(elementwise_ast(256, 256), CPURenderer())
    assert [o.op for o in opts] == [OptOps.UPCAST, OptOps.THREAD]
    assert opts[0].arg == 8 and opts[1].arg == 4
    wide = opts_of(elementwise_ast(256, 256), WideCPURenderer())
    assert wide[0].arg == 16  # 64-byte vectors
    small = opts_of(elementwise_ast(4, 8), CPURenderer())
    assert not any(o.op is OptOps.THREAD for o in small)  # too little work for threads


def test_cpu_contiguous_reduce_is_unrolled_into_vector_accumulators():
    opts = opts_of(rowsum_ast(512, 256), CPURenderer())
    unroll = [o for o in opts if o.op is OptOps.UNROLL]
    assert unroll and unroll[0].arg == 32
    assert any(o.op is OptOps.THREAD for o in opts)
    a = np.random.randn(512, 256).astype(np.float32)
    np.testing.assert_allclose(run(rowsum_ast(512, 256), [a.ravel()], CPURenderer()), a.sum(1), rtol=1e-4, atol=1e-4)


def test_cpu_long_rows_are_reduced_four_at_a_time():
    """Rows of at least 64 vectors: four rows per step (four memory streams), on top of the vector accumulators;
    not for short rows, and not when the body computes an exp (its polynomial chains need the registers)."""
    opts = opts_of(rowsum_ast(64, 512), CPURenderer())
    assert [o.arg for o in opts if o.op is OptOps.UNROLL] == [32] and [
        o.arg for o in opts if o.op is OptOps.UPCAST
    ] == [4]
    a = np.random.default_rng(0).standard_normal((64, 512)).astype(np.float32)
    np.testing.assert_allclose(run(rowsum_ast(64, 512), [a.ravel()], CPURenderer()), a.sum(1), rtol=1e-4, atol=1e-4)
    assert not [o for o in opts_of(rowsum_ast(512, 256), CPURenderer()) if o.op is OptOps.UPCAST]  # short rows
    x = load(1, 64 * 512).reshape((64, 512)).alu(Ops.EXP2)
    exp_rows = UOp.sink(UOp.define_global(0, dtypes.float, 64).reshape((64, 1)).store(x.r(Ops.ADD, (1,))))
    assert not [o for o in opts_of(exp_rows, CPURenderer()) if o.op is OptOps.UPCAST]


@pytest.mark.parametrize("streams", [1, 2])
def test_cpu_long_rows_follow_the_renderers_reduce_streams(streams: int) -> None:
    """`reduce_streams` is how many long rows one step reads side by side: 1 keeps one memory stream per thread
    (AMD Zen's prefetchers), 2 upcasts the rows by two; the values are right either way."""
    renderer = type("StreamsRenderer", (CPURenderer,), {"reduce_streams": streams})()
    opts = opts_of(rowsum_ast(64, 512), renderer)
    assert [o.arg for o in opts if o.op is OptOps.UNROLL] == [32]
    assert [o.arg for o in opts if o.op is OptOps.UPCAST] == ([] if streams == 1 else [streams])
    assert any(o.op is OptOps.THREAD for o in opts)  # the rows still split over the threads
    a = np.random.default_rng(1).standard_normal((64, 512)).astype(np.float32)
    np.testing.assert_allclose(run(rowsum_ast(64, 512), [a.ravel()], renderer), a.sum(1), rtol=1e-4, atol=1e-4)


def test_cpu_reduce_gathering_a_narrow_operand_takes_one_vector_per_step():
    """``h @ w`` with a 10-wide ``w``: `h` is read along the reduce, `w` gathered with stride 10. One vector of
    the reduce per step (rows still four at a time): four vectors gathered per step cost compile time for nothing."""
    m, k, n = 128, 512, 10
    h = load(1, m * k).reshape((m, k, 1)).expand((m, k, n))
    w = load(2, k * n).reshape((1, k, n)).expand((m, k, n))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, m * n).reshape((m, 1, n)).store((h * w).r(Ops.ADD, (1,))))
    opts = opts_of(ast, CPURenderer())
    assert [o.arg for o in opts if o.op is OptOps.UNROLL] == [8] and [o.arg for o in opts if o.op is OptOps.UPCAST] == [
        4
    ]
    assert [o.arg for o in opts_of(rowsum_ast(128, 512), CPURenderer()) if o.op is OptOps.UNROLL] == [32]  # no gather
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    got = run(ast, [a.ravel(), b.ravel()], CPURenderer()).reshape(m, n)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)


def test_cpu_a_small_operand_read_along_the_reduce_does_not_decide_for_the_large_one():
    """``x @ W`` with one row: the 16-float ``x`` walks the reduce contiguously, but ``W`` (64x larger) walks the
    output: the kernel takes whole vectors of ``W``'s rows (output lanes), not vectors of ``x`` with ``W``
    gathered across its rows), and a quarter of the registers as accumulators so each row of ``W`` is read in long
    runs (batch-1 inference, 1 x 4096 @ 4096 x 4096 on CLANG: 63 ms before, 5.2 ms with one vector, 2.9 ms with
    eight; torch 2.8 ms)."""
    k, n = 64, 256
    x = load(1, k).reshape((1, k, 1)).expand((1, k, n))
    w = load(2, k * n).reshape((1, k, n))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, n).reshape((1, 1, n)).store((x * w).r(Ops.ADD, (1,))))
    opts = opts_of(ast, CPURenderer())
    registers = CPURenderer().vector_registers
    assert [o.arg for o in opts if o.op is OptOps.UPCAST] == [8, registers // 4]  # 32-byte vectors of outputs
    assert [o.arg for o in opts if o.op is OptOps.UNROLL] in ([], [4], [2])  # the reduce: a small unroll at most
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((1, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    np.testing.assert_allclose(run(ast, [a.ravel(), b.ravel()], CPURenderer()), (a @ b).ravel(), rtol=1e-4, atol=1e-4)


def test_cpu_x_at_w_transposed_with_few_rows_is_dot_products_of_contiguous_rows():
    """``x @ W.T`` with 4 rows (too few to repack ``W``): each output is a dot product along the contiguous reduce,
    the 4 rows of ``x`` side by side so each vector of ``W`` serves all of them; no register tile gathering ``W``
    across its rows (4 x 4096 @ 4096 x 4096 on a Zen 4: 52 ms as tiles, 8.8 ms as dots, 3.7 ms with the rows
    together; torch 7.6-9.6 ms)."""
    m, k, n = 4, 256, 64
    x = load(1, m * k).reshape((m, 1, k)).expand((m, n, k))
    w = load(2, n * k).reshape((1, n, k)).expand((m, n, k))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, m * n).reshape((m, n, 1)).store((x * w).r(Ops.ADD, (2,))))
    opts = opts_of(ast, CPURenderer())
    assert [(o.axis, o.arg) for o in opts if o.op is OptOps.UPCAST] == [(0, 4)]  # the rows of x, not W's columns
    assert [o.arg for o in opts if o.op is OptOps.UNROLL] == [16]  # 4 rows x 2 vectors: half the 16 registers
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    got = run(ast, [a.ravel(), b.ravel()], CPURenderer()).reshape(m, n)
    np.testing.assert_allclose(got, a @ b.T, rtol=1e-4, atol=1e-3)


def test_cpu_a_one_by_one_convolution_keeps_its_register_tile():
    """A 1 x 1 convolution reads its weight along the reduce like ``x @ W.T`` does, but its image is the large
    operand: it keeps the register tile (a dot product per output ran 2x slower on 8 x 64 x 56 x 56)."""
    co, ci, hw = 32, 64, 256
    img = load(1, ci * hw).reshape((1, ci, hw)).expand((co, ci, hw))
    w = load(2, co * ci).reshape((co, ci, 1)).expand((co, ci, hw))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, co * hw).reshape((co, 1, hw)).store((img * w).r(Ops.ADD, (1,))))
    opts = opts_of(ast, CPURenderer())
    assert {o.axis for o in opts if o.op is OptOps.UPCAST} == {0, 1}  # a tile: output channels x pixels
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((ci, hw)).astype(np.float32), rng.standard_normal((co, ci)).astype(np.float32)
    got = run(ast, [a.ravel(), b.ravel()], CPURenderer()).reshape(co, hw)
    np.testing.assert_allclose(got, b @ a, rtol=1e-4, atol=1e-3)


def test_cpu_long_elementwise_exp_takes_two_vectors_per_step():
    x = load(1, 64 * 1024).reshape((64, 1024))
    out = UOp.define_global(0, dtypes.float, 64 * 1024).reshape((64, 1024))
    opts = opts_of(UOp.sink(out.store(x.alu(Ops.EXP2))), CPURenderer())
    assert [o.arg for o in opts if o.op is OptOps.UPCAST] == [16]  # two 8-float vectors: two exp chains overlap
    plain = opts_of(UOp.sink(out.store(x * x + x)), CPURenderer())
    assert [o.arg for o in plain if o.op is OptOps.UPCAST] == [8]
    small = UOp.sink(UOp.define_global(0, dtypes.float, 64).store(load(1, 64).alu(Ops.EXP2)))
    assert [o.arg for o in opts_of(small, CPURenderer()) if o.op is OptOps.UPCAST] == [8]  # too short to bother
    a = np.random.default_rng(1).standard_normal((64, 1024)).astype(np.float32)
    got = run(UOp.sink(out.store(x.alu(Ops.EXP2))), [a.ravel()], CPURenderer())
    np.testing.assert_allclose(got, np.exp2(a.ravel()), rtol=1e-5)


def test_cpu_wide_vectors_fall_back_to_one_vector_where_two_exceed_an_axis_upcast():
    # with 64-byte vectors two vectors of floats are 32 lanes, more than one UPCAST takes (16): the output must still
    # get one whole vector (AVX-512 had none: exp over 16M floats 59 -> 8 ms, softmax's output pass scalar)
    x = load(1, 64 * 1024).reshape((64, 1024))
    out = UOp.define_global(0, dtypes.float, 64 * 1024).reshape((64, 1024))
    opts = opts_of(UOp.sink(out.store(x.alu(Ops.EXP2))), WideCPURenderer())
    assert [o.arg for o in opts if o.op is OptOps.UPCAST] == [16]
    rows = load(1, 64 * 1024).reshape((64, 1024))
    m = rows.r(Ops.MAX, (1,))
    e = (rows - m).alu(Ops.EXP2)
    softmax = UOp.sink(out.store(e * e.r(Ops.ADD, (1,)).alu(Ops.RECIP)))
    opts = opts_of(softmax, WideCPURenderer())
    assert [o.arg for o in opts if o.op is OptOps.UPCAST] == [16]  # the output pass: whole vectors
    a = np.random.default_rng(2).standard_normal((64, 1024)).astype(np.float32)
    got = run(softmax, [a.ravel()], WideCPURenderer()).reshape(64, 1024)
    want = np.exp2(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(got, want / want.sum(1, keepdims=True), rtol=1e-5, atol=1e-8)


def test_thread_count_and_vector_width_sources():
    k = get_kernel(elementwise_ast(4, 4), CPURenderer())
    assert thread_count(k) == 4 and vector_width(k, 4) == 8 and vector_width(k, 2) == 16
    import os

    assert thread_count(get_kernel(elementwise_ast(4, 4), NoThreadsRenderer())) == max(1, os.cpu_count() or 1)

    class NoVectors(CPURenderer):
        supports_float4 = False

    assert vector_width(get_kernel(elementwise_ast(4, 4), NoVectors()), 4) == 1


# ----- GPU


def test_gpu_matmul_uses_the_tensor_core_unless_disabled():
    opts = opts_of(matmul_ast(16, 16, 16), PythonRenderer())
    assert opts[0].op is OptOps.TC and all(o.op in (OptOps.UPCAST, OptOps.LOCAL, OptOps.STAGE) for o in opts[1:])
    with Context(USE_TC=0):
        opts = opts_of(matmul_ast(16, 16, 16), PythonRenderer())
    assert OptOps.TC not in [o.op for o in opts] and any(o.op is OptOps.LOCAL for o in opts)
    a, b = np.random.randn(16, 16).astype(np.float32), np.random.randn(16, 16).astype(np.float32)
    np.testing.assert_allclose(
        run(matmul_ast(16, 16, 16), [a.ravel(), b.ravel()], PythonRenderer()).reshape(16, 16),
        a @ b,
        rtol=1e-4,
        atol=1e-4,
    )


def test_gpu_long_reduce_with_few_outputs_is_grouped():
    # contiguous rows: vector lanes along the row, then a work-group across it (neighbours read neighbouring vectors)
    opts = opts_of(rowsum_ast(4, 1024), PythonRenderer())
    assert [(o.op, o.arg) for o in opts[:2]] == [(OptOps.UNROLL, 4), (OptOps.GROUP, 32)]
    a = np.random.randn(4, 1024).astype(np.float32)
    np.testing.assert_allclose(run(rowsum_ast(4, 1024), [a.ravel()], PythonRenderer()), a.sum(1), rtol=1e-4, atol=1e-4)


def test_gpu_elementwise_gets_locals_and_a_small_upcast():
    opts = opts_of(elementwise_ast(64, 64), PythonRenderer())
    assert opts[0].op is OptOps.UPCAST and opts[0].arg == 4
    k = get_kernel(elementwise_ast(64, 64), PythonRenderer()).apply_opts(opts)
    locals_ = [r for r in k.rngs if r.arg[1] is AxisType.LOCAL]
    assert locals_ and 64 <= np.prod([r.src[0].arg for r in locals_]) <= 256
    a = np.random.randn(64 * 64).astype(np.float32)
    np.testing.assert_allclose(run(elementwise_ast(64, 64), [a], PythonRenderer()), a * a + a, rtol=1e-6)


def test_gpu_long_elementwise_takes_two_vectors_per_work_item(monkeypatch):
    from tinycore.codegen import heuristic

    monkeypatch.setattr(heuristic, "_GPU_BIG_COPY", 1024)  # the interpreter runs a small one
    opts = opts_of(elementwise_ast(64, 64), PythonRenderer())
    assert [(o.op, o.arg) for o in opts if o.op is OptOps.UPCAST] == [(OptOps.UPCAST, 4), (OptOps.UPCAST, 2)]
    a = np.random.randn(64 * 64).astype(np.float32)
    k = get_kernel(elementwise_ast(64, 64), PythonRenderer()).apply_opts(opts)
    np.testing.assert_allclose(run(elementwise_ast(64, 64), [a], PythonRenderer()), a * a + a, rtol=1e-6)
    assert any(r.arg[1] is AxisType.LOCAL for r in k.rngs)


def test_gpu_grouped_rows_take_sixteen_vectors_per_work_item_and_share_a_group():
    opts = opts_of(rowsum_ast(64, 4096), PythonRenderer())
    assert [(o.op, o.arg) for o in opts[:2]] == [(OptOps.UNROLL, 4), (OptOps.GROUP, 64)]
    assert any(o.op is OptOps.LOCAL and o.arg == 4 for o in opts[2:])  # four rows per 256-wide work-group


def test_heuristics_keep_opts_already_applied_and_noopt_disables_them():
    k = get_kernel(elementwise_ast(64, 64), PythonRenderer())
    k.apply_opt(k_opt := hand_coded_optimizations(k.copy())[0])
    assert hand_coded_optimizations(k) == [k_opt]
    with Context(NOOPT=1):
        p = get_program(elementwise_ast(64, 64), PythonRenderer())
    assert p.local_size == (1, 1, 1) and not any(u.dtype.count > 1 for u in p.uops if u.op is Ops.LOAD)


def test_clang_renderer_gets_cpu_opts(clang):
    opts = hand_coded_optimizations(get_kernel(matmul_ast(64, 64, 64), clang.renderer))
    threads = getattr(clang.renderer, "threads", 1)
    assert [o.op for o in opts][:2] == [OptOps.UPCAST, OptOps.UPCAST]
    assert any(o.op is OptOps.THREAD for o in opts) == (threads > 1)


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True), (True, True)])
def test_gpu_matmul_staged_through_shared_memory_is_right_for_transposed_operands(trans_a, trans_b):
    # PYTHON's tensor cores: TC, its block of tiles, then STAGE; a transposed operand's tile rows are strided in
    # memory, so its stage is copied element by element (4-element chunks read the wrong elements there)
    from tinycore.tensor import Tensor

    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 128)).astype(np.float32)
    ta = Tensor(np.ascontiguousarray(a.T), device="PYTHON").T if trans_a else Tensor(a, device="PYTHON")
    tb = Tensor(np.ascontiguousarray(b.T), device="PYTHON").T if trans_b else Tensor(b, device="PYTHON")
    (item,) = [i for i in (ta @ tb).schedule() if i.ast is not None]
    opts = opts_of(item.ast, PythonRenderer())
    assert OptOps.TC in [o.op for o in opts] and OptOps.STAGE in [o.op for o in opts]
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch, m, k, n", [(2, 4, 4, 8), (3, 32, 64, 128)])
def test_gpu_batched_matmul_on_tensor_cores_is_right(batch, m, k, n):
    # a batch axis of the left operand: where the heuristics upcast it (small M), STAGE must refuse (one shared tile
    # per stage can't serve two batch lanes); where it stays a launch axis, the stage's copy follows it
    from tinycore.tensor import Tensor

    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((batch, m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    (item,) = [i for i in (Tensor(x, device="PYTHON") @ Tensor(w, device="PYTHON")).schedule() if i.ast is not None]
    opts = opts_of(item.ast, PythonRenderer())
    assert (OptOps.STAGE in [o.op for o in opts]) == (m >= 32)
    got = (Tensor(x, device="PYTHON") @ Tensor(w, device="PYTHON")).numpy()
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4)
