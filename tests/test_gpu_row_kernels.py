"""GPU row kernels: on a GPU-style renderer that fuses rows (`Renderer.row_reduce_bytes` > 0 and a `row_split`),
softmax, log-softmax and layernorm are one kernel per row: a work-group per row, each work-item holding its share
of the row in registers, every reduce split over the same lanes (``GROUPLOCAL``) and met through warp shuffles.

The PYTHON device stands in for a GPU here: its renderer is GPU-style (local ids, shared memory) and, patched to
declare CUDA's 32-lane warps and a row limit, lowers these kernels exactly as the CUDA renderer does; its
interpreter runs them (shuffles, barriers, shared memory) and the results are checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.codegen import get_program
from tinycore.codegen.heuristic import hand_coded_optimizations
from tinycore.codegen.kernel import Kernel, OptOps
from tinycore.codegen.lowerer import lower_ast
from tinycore.engine.realize import clear_runner_cache
from tinycore.engine.schedule_cache import clear_schedule_cache
from tinycore.renderer import Renderer
from tinycore.runtime.python_device import PythonRenderer
from tinycore.tensor import Tensor


@pytest.fixture
def gpu_rows(monkeypatch: pytest.MonkeyPatch):
    """PYTHON's renderer fusing rows of up to 64 KB with 32-lane warps (CUDA's settings)."""
    monkeypatch.setattr(PythonRenderer, "row_reduce_bytes", 65536)
    monkeypatch.setattr(PythonRenderer, "warp_size", 32)
    clear_schedule_cache()
    clear_runner_cache()
    yield
    clear_schedule_cache()
    clear_runner_cache()


class WarpRenderer(Renderer):
    """A GPU-style renderer with 32-lane warps and 1024 work-items per work-group."""

    warp_size = 32
    local_max = (1024, 1024, 64)


@pytest.mark.parametrize(
    "length, itemsize, want",
    [
        (4096, 4, (4, 256)),  # 16 floats per work-item: four float4 loads
        (1024, 4, (4, 64)),  # two warps: one would take 32 elements each
        (768, 4, (4, 64)),
        (16384, 4, (4, 1024)),  # the largest work-group
        (4096, 2, (4, 256)),  # half: 8-byte vectors
        (4096, 8, (2, 256)),  # double: 16-byte vectors of 2
        (10, 4, (2, 5)),  # shorter than a warp: one vector per work-item
        (33, 4, (1, 33)),
        (1, 4, (1, 1)),
    ],
)
def test_row_split_prefers_16_byte_vectors_and_whole_warps(length: int, itemsize: int, want: tuple[int, int]) -> None:
    assert WarpRenderer().row_split(length, itemsize) == want


@pytest.mark.parametrize("length", [4099, 65536, 1 << 20])
def test_rows_no_work_group_can_hold_do_not_split(length: int) -> None:
    # 4099 is prime and over 1024; the others need more than 16 elements per work-item
    assert WarpRenderer().row_split(length, 4) is None
    ren = WarpRenderer()
    ren.row_reduce_bytes = 1 << 30
    assert not ren.fuses_row(length, 4)


def test_fuses_row_respects_the_byte_limit_and_cpu_renderers_skip_the_split() -> None:
    ren = WarpRenderer()
    assert not ren.fuses_row(4096, 4)  # row_reduce_bytes 0: never
    ren.row_reduce_bytes = 16384
    assert ren.fuses_row(4096, 4) and not ren.fuses_row(4097 * 4, 4)
    cpu = WarpRenderer()
    cpu.has_local, cpu.row_reduce_bytes = False, 1 << 30
    assert cpu.fuses_row(4099, 4)  # one CPU thread runs any row


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layernorm(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)


FUNCTIONS = {
    "softmax": (lambda t: t.softmax(-1), _softmax),
    "log_softmax": (lambda t: t.log_softmax(-1), lambda x: np.log(_softmax(x.astype(np.float64)))),
    "layernorm": (lambda t: t.layernorm(), _layernorm),
}


@pytest.mark.parametrize("fn", list(FUNCTIONS))
@pytest.mark.parametrize("shape", [(3, 32), (16, 10), (2, 96), (5, 33), (2, 1024), (1, 4096), (2, 3, 64)])
def test_row_functions_are_one_kernel_per_row_and_match_numpy(gpu_rows, fn: str, shape: tuple[int, ...]) -> None:
    data = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32) * 3
    ours, theirs = FUNCTIONS[fn]
    kernels = [item for item in ours(Tensor(data, device="PYTHON")).schedule() if item.ast is not None]
    assert len(kernels) == 1
    opts = hand_coded_optimizations(Kernel(lower_ast(kernels[0].ast), PythonRenderer()))
    assert any(opt.op is OptOps.GROUPLOCAL for opt in opts)
    program = get_program(kernels[0].ast, PythonRenderer())
    split = PythonRenderer().row_split(shape[-1], 4)
    assert split is not None and program.local_size[0] == split[1]
    np.testing.assert_allclose(ours(Tensor(data, device="PYTHON")).numpy(), theirs(data), rtol=2e-5, atol=2e-6)


def test_a_row_no_work_group_holds_gets_kernels_of_its_own(gpu_rows) -> None:
    data = np.random.default_rng(1).standard_normal((2, 4099)).astype(np.float32)
    schedule = Tensor(data, device="PYTHON").softmax(-1).schedule()
    assert len([item for item in schedule if item.ast is not None]) == 3  # max, sum, divide
    got = Tensor(data, device="PYTHON").softmax(-1).numpy()
    np.testing.assert_allclose(got, _softmax(data), rtol=2e-5, atol=1e-7)


def test_softmax_backward_through_row_kernels(gpu_rows) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch)")
    data = np.random.default_rng(2).standard_normal((6, 256)).astype(np.float32)
    weight = np.random.default_rng(3).standard_normal((6, 256)).astype(np.float32)
    x = Tensor(data, device="PYTHON", requires_grad=True)
    (x.log_softmax(-1) * Tensor(weight, device="PYTHON")).sum().backward()
    tx = torch.tensor(data, requires_grad=True)
    (torch.log_softmax(tx, -1) * torch.tensor(weight)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_special_values_stay_in_their_rows(gpu_rows) -> None:
    data = np.zeros((4, 64), np.float32)
    data[0, 3] = np.inf  # softmax of a row with +inf: nan (as numpy and torch)
    data[1, 5] = np.nan
    data[2, :] = -np.inf
    got = Tensor(data, device="PYTHON").softmax(-1).numpy()
    with np.errstate(invalid="ignore"):
        want = _softmax(data)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[3], np.full(64, 1 / 64, np.float32), rtol=1e-6)


def test_grouplocal_is_refused_where_the_lanes_would_sum_different_values():
    """``out[j] = sum_i a[i] * b[i, j]`` with ``j`` on a LOCAL axis: ``GROUPLOCAL`` would have the lanes of ``j``
    share one sum over ``i``, although each lane's sum differs (a fuzzer found every output equal). It is legal only
    where the reduced value is the same on every lane of the local axis (a softmax row's max, broadcast back)."""
    from tinycore.codegen import Opt, get_kernel
    from tinycore.codegen.kernel import KernelOptError
    from tinycore.dtype import dtypes
    from tinycore.uop.ops import Ops, UOp

    def load(arg: int, size: int) -> UOp:
        return UOp(Ops.LOAD, dtypes.float, (UOp.define_global(arg, dtypes.float, size),))

    a = load(1, 2).reshape((1, 2, 1)).expand((1, 2, 2))
    b = load(2, 4).reshape((1, 2, 2))
    ast = UOp.sink(UOp.define_global(0, dtypes.float, 2).reshape((1, 1, 2)).store((a * b).r(Ops.ADD, (1,))))
    k = get_kernel(ast, PythonRenderer())
    k.apply_opt(Opt(OptOps.LOCAL, 0, 2))
    with pytest.raises(KernelOptError, match="varies along the local axis"):
        k.apply_opt(Opt(OptOps.GROUPLOCAL, 0, 0))
    with pytest.raises(KernelOptError):
        get_program(ast, PythonRenderer(), [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUPLOCAL, 0, 0)])
