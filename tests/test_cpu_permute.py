"""Copies and permutes on CPU-style devices: the heuristics upcast both the output's and the input's contiguous axes
of a transpose (a register-transposed tile) and put the loop that reads the input in order innermost (the packing
copy of a matmul's right operand). Every kernel is checked against numpy on odd shapes."""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.codegen import OptOps, get_kernel, get_program
from tinycore.codegen.heuristic import hand_coded_optimizations
from tinycore.device import Buffer
from tinycore.dtype import dtypes
from tinycore.engine.exec_item import CompiledRunner
from tinycore.runtime.python_device import PythonRenderer
from tinycore.uop.ops import Ops, UOp


class LoopRenderer(PythonRenderer):
    """CPU style (no launch ids, 2 threads, 32-byte vectors); the PYTHON interpreter runs it."""

    has_local = False
    has_shared = False
    threads = 2


def load(arg: int, size: int, dt=dtypes.float) -> UOp:
    return UOp(Ops.LOAD, dt, (UOp.define_global(arg, dt, size),))


def permute_ast(shape: tuple[int, ...], order: tuple[int, ...], dt=dtypes.float) -> UOp:
    """``out = in.permute(order)`` with `in` of `shape` (contiguous) and `out` contiguous."""
    size = int(np.prod(shape))
    out_shape = tuple(shape[i] for i in order)
    return UOp.sink(
        UOp.define_global(0, dt, size).reshape(out_shape).store(load(1, size, dt).reshape(shape).permute(order))
    )


def pack_ast(rows: int, cols: int, panel: int) -> UOp:
    """The packing copy of a matmul's right operand: ``out[p, r, l] = in[r, p * panel + l]``."""
    src = load(1, rows * cols).reshape((rows, cols // panel, panel)).permute((1, 0, 2))
    return UOp.sink(UOp.define_global(0, dtypes.float, rows * cols).reshape((cols // panel, rows, panel)).store(src))


def run(ast: UOp, arrays: list[np.ndarray], renderer, device: str, dt=dtypes.float) -> tuple[np.ndarray, object]:
    out = next(u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL and u.arg == 0)
    p = get_program(ast, renderer, None)
    bufs = [Buffer(device, out.dtype.size, dt).copyin(bytes(dt.itemsize * out.dtype.size))]
    bufs += [Buffer(device, a.size, dt).copyin(np.ascontiguousarray(a).tobytes()) for a in arrays]
    CompiledRunner(p)(bufs, {})
    return bufs[0].numpy(), p


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_transpose_gets_a_register_tile_of_both_contiguous_axes():
    opts = hand_coded_optimizations(get_kernel(permute_ast((64, 48), (1, 0)), LoopRenderer()))
    ups = [(o.axis, o.arg) for o in opts if o.op is OptOps.UPCAST]
    assert [amount for _, amount in ups] == [8, 8]  # 8 output lanes x 8 input lanes
    assert ups[0][1] * ups[1][1] <= 64


def test_pack_copy_reads_its_input_rows_in_order():
    k = get_kernel(pack_ast(256, 64, 16), LoopRenderer())
    opts = hand_coded_optimizations(k)
    assert [o.arg for o in opts if o.op is OptOps.UPCAST] == [16]  # one whole 64-byte panel row per access
    assert OptOps.SWAP in [o.op for o in opts]  # the panel loop (input stride 16) is innermost, not the row loop
    loops = k.output_axes
    assert [int(r.src[0].arg) for r in loops][-1] == 4  # 4 panels innermost


def test_plain_elementwise_and_reduce_kernels_get_no_swap():
    x = load(1, 64 * 48).reshape((64, 48))
    ew = UOp.sink(UOp.define_global(0, dtypes.float, 64 * 48).reshape((64, 48)).store(x * x + x))
    ops = [o.op for o in hand_coded_optimizations(get_kernel(ew, LoopRenderer()))]
    assert OptOps.SWAP not in ops and ops.count(OptOps.UPCAST) == 1
    bcast = load(2, 48).reshape((1, 48)).expand((64, 48))
    ew2 = UOp.sink(UOp.define_global(0, dtypes.float, 64 * 48).reshape((64, 48)).store(x + bcast))
    assert OptOps.SWAP not in [o.op for o in hand_coded_optimizations(get_kernel(ew2, LoopRenderer()))]


@pytest.mark.parametrize(
    "shape,order",
    [
        ((1, 1), (1, 0)),
        ((13, 16), (1, 0)),  # the input's contiguous axis (13) has no vector divisor
        ((16, 13), (1, 0)),
        ((24, 40), (1, 0)),
        ((9, 7), (1, 0)),
        ((2, 16, 5, 8), (0, 2, 3, 1)),  # NCHW -> NHWC
        ((3, 8, 24), (2, 0, 1)),
        ((4, 6, 16), (1, 0, 2)),  # outer permute, contiguous rows kept
    ],
)
def test_permutes_match_numpy_on_the_python_interpreter(shape, order):
    a = rand(*shape)
    got, _ = run(permute_ast(shape, order), [a], LoopRenderer(), "PYTHON")
    np.testing.assert_array_equal(got.reshape(a.transpose(order).shape), a.transpose(order))


@pytest.mark.parametrize("rows,cols,panel", [(1, 16, 16), (5, 32, 16), (33, 64, 8), (256, 64, 16)])
def test_pack_copies_match_numpy(rows, cols, panel):
    a = rand(rows, cols)
    got, _ = run(pack_ast(rows, cols, panel), [a], LoopRenderer(), "PYTHON")
    want = a.reshape(rows, cols // panel, panel).transpose(1, 0, 2)
    np.testing.assert_array_equal(got.reshape(want.shape), want)


@pytest.mark.parametrize(
    "shape,order",
    [
        ((13, 16), (1, 0)),
        ((24, 40), (1, 0)),
        ((256, 200), (1, 0)),
        ((2, 16, 5, 8), (0, 2, 3, 1)),
        ((3, 8, 24), (2, 0, 1)),
    ],
)
def test_clang_permutes_match_numpy(clang, shape, order):
    a = rand(*shape)
    got, p = run(permute_ast(shape, order), [a], clang.renderer, "CLANG")
    np.testing.assert_array_equal(got.reshape(a.transpose(order).shape), a.transpose(order))


@pytest.mark.parametrize("dt,npdt", [(dtypes.int8, np.int8), (dtypes.half, np.float16), (dtypes.int64, np.int64)])
def test_clang_transposes_of_other_dtypes_match_numpy(clang, dt, npdt):
    a = (np.arange(48 * 40) % 101).astype(npdt).reshape(48, 40)
    got, _ = run(permute_ast((48, 40), (1, 0), dt), [a], clang.renderer, "CLANG", dt)
    np.testing.assert_array_equal(got.reshape(40, 48), a.T)


def test_clang_tensor_transposes_and_transposed_sums_match_numpy(clang):
    from tinycore import Tensor

    a, b = rand(72, 40), rand(40, 72, seed=1)
    ta, tb = Tensor(a, device="CLANG"), Tensor(b, device="CLANG")
    np.testing.assert_array_equal(ta.T.contiguous().numpy(), a.T)
    np.testing.assert_allclose((ta + tb.T).numpy(), a + b.T, rtol=1e-6)
    np.testing.assert_array_equal(ta.reshape(8, 9, 40).permute(2, 0, 1).numpy(), a.reshape(8, 9, 40).transpose(2, 0, 1))
