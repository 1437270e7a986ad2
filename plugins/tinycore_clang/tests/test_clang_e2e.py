"""Kernel ASTs (docs/pipeline.md section 2) through core's `tinycore.codegen.get_program`, rendered, compiled and run
on CLANG through `CompiledRunner`, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops, UOp

codegen = pytest.importorskip("tinycore.codegen", reason="tinycore.codegen is not available yet")
if not hasattr(codegen, "get_program"):
    pytest.skip("tinycore.codegen.get_program is not available yet", allow_module_level=True)

RNG = np.random.default_rng(7)


@pytest.fixture(scope="module")
def device():
    """The CLANG device from core's registry (skips when CLANG can't run here)."""
    from tinycore_clang.testing import unavailable_reason

    if reason := unavailable_reason():
        pytest.skip(reason)
    from tinycore.device import Device

    return Device["CLANG"]


def run_ast(device, ast: UOp, arrays: list[np.ndarray], opts=None, var_vals=None) -> list[np.ndarray]:
    """get_program -> CompiledRunner -> ExecItem on Buffers holding `arrays` (index i = DEFINE_GLOBAL i)."""
    from tinycore.device import Buffer
    from tinycore.engine.exec_item import CompiledRunner, ExecItem

    program = codegen.get_program(ast, device.renderer, opts)
    assert program.device.upper().startswith("CLANG")
    runner = CompiledRunner(program)
    bufs = []
    for arr in arrays:
        buf = Buffer("CLANG", arr.size, dtypes.from_np(arr.dtype))
        bufs.append(buf.copyin(memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))))
    ExecItem(runner, bufs, dict(var_vals or {})).run()
    return [buf.numpy().reshape(arr.shape) for buf, arr in zip(bufs, arrays)]


def g(index: int, dtype, size: int) -> UOp:
    """DEFINE_GLOBAL `index` of `size` elements."""
    return UOp.define_global(index, dtype, size)


def load(index: int, dtype, size: int) -> UOp:
    """A tensor-level LOAD of buffer `index` (kernel AST input)."""
    return UOp(Ops.LOAD, dtype, (g(index, dtype, size),))


def test_fused_elementwise(device):
    a, b = RNG.standard_normal((8, 16)).astype(np.float32), RNG.standard_normal((8, 16)).astype(np.float32)
    x, y = load(1, dtypes.float32, 128).reshape((8, 16)), load(2, dtypes.float32, 128).reshape((8, 16))
    ast = UOp.sink(g(0, dtypes.float32, 128).reshape((8, 16)).store(x * y + x))
    out = run_ast(device, ast, [np.zeros((8, 16), np.float32), a, b])[0]
    np.testing.assert_allclose(out, a * b + a, rtol=1e-6)


def test_elementwise_with_upcast_opts(device):
    from tinycore.codegen import Opt, OptOps

    a = RNG.standard_normal((8, 8)).astype(np.float32)
    x = load(1, dtypes.float32, 64).reshape((8, 8))
    ast = UOp.sink(g(0, dtypes.float32, 64).reshape((8, 8)).store(x * x + 1.0))
    opts = [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 2)]
    out = run_ast(device, ast, [np.zeros((8, 8), np.float32), a], opts=opts)[0]
    np.testing.assert_allclose(out, a * a + 1, rtol=1e-6)


@pytest.mark.parametrize("op,ref", [(Ops.ADD, np.sum), (Ops.MAX, np.max)])
def test_reduce_axis(device, op, ref):
    a = RNG.standard_normal((6, 10)).astype(np.float32)
    x = load(1, dtypes.float32, 60).reshape((6, 10)).r(op, (1,))
    ast = UOp.sink(g(0, dtypes.float32, 6).reshape((6, 1)).store(x))
    out = run_ast(device, ast, [np.zeros((6, 1), np.float32), a])[0]
    np.testing.assert_allclose(out[:, 0], ref(a, axis=1), rtol=1e-5)


def test_permute_and_pad_gate_loads(device):
    a = RNG.standard_normal((3, 5)).astype(np.float32)
    x = load(1, dtypes.float32, 15).reshape((3, 5)).permute((1, 0)).pad(((1, 2), (0, 1)))
    ast = UOp.sink(g(0, dtypes.float32, 8 * 4).reshape((8, 4)).store(x))
    out = run_ast(device, ast, [np.zeros((8, 4), np.float32), a])[0]
    np.testing.assert_array_equal(out, np.pad(a.T, ((1, 2), (0, 1))))


def test_integer_wraparound_and_casts(device):
    a = np.array([2**31 - 1, -5, 7, -(2**31)], np.int32)
    f = np.array([2.7, -2.7, 300.5, -1.0], np.float32)
    s = load(1, dtypes.int32, 4) + load(1, dtypes.int32, 4)
    c = load(2, dtypes.float32, 4).cast(dtypes.uint8)
    ast = UOp.sink(g(0, dtypes.int32, 4).store(s), g(3, dtypes.uint8, 4).store(c))
    out, _, _, out8 = run_ast(device, ast, [np.zeros(4, np.int32), a, f, np.zeros(4, np.uint8)])
    assert out.tolist() == (a.astype(np.int64) * 2).astype(np.int32).tolist()
    assert out8.tolist() == [2, 254, 44, 255]


@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2, Ops.SIN])
def test_decomposed_transcendentals(device, op):
    assert op.name not in device.renderer.native_ops  # core rewrites it into basic ops for CLANG
    a = np.linspace(0.1, 6.0, 32).astype(np.float32)
    ast = UOp.sink(g(0, dtypes.float32, 32).store(UOp(op, dtypes.float32, (load(1, dtypes.float32, 32),))))
    try:
        out = run_ast(device, ast, [np.zeros(32, np.float32), a])[0]
    except NotImplementedError as error:
        pytest.skip(f"tinycore.codegen.decompositions can't decompose {op.name} yet: {error}")
    ref = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin}[op](a.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=2e-6)


def test_thread_opt_runs_on_the_pool(device):
    from tinycore.codegen import KernelOptError, Opt, OptOps

    a = RNG.standard_normal((8, 32)).astype(np.float32)
    x = load(1, dtypes.float32, 256).reshape((8, 32))
    ast = UOp.sink(g(0, dtypes.float32, 256).reshape((8, 32)).store(x * 3.0))
    try:
        program = codegen.get_program(ast, device.renderer, [Opt(OptOps.THREAD, 0, 2)])
    except KernelOptError as error:
        pytest.skip(f"tinycore.codegen does not implement the THREAD opt yet: {error}")
    assert any(u.op is Ops.SPECIAL and u.arg == "core_id" for u in program.uops)
    out = run_ast(device, ast, [np.zeros((8, 32), np.float32), a], opts=[Opt(OptOps.THREAD, 0, 2)])[0]
    np.testing.assert_allclose(out, a * 3, rtol=1e-6)
