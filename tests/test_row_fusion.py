"""One-pass rows on CPU-style devices: a reduce over the last axis of short rows whose result is only broadcast back
stays in the kernel that uses it (`Renderer.row_reduce_bytes`, `FusionGraph._row_reduces`), and a reduce body the
output needs again is kept in a row-sized register array (`tinycore.codegen.stash`). Softmax, log-softmax, layernorm
become one kernel each; numerics against torch, forward and backward, on odd shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore.codegen import KernelOptError, Opt, OptOps, get_kernel
from tinycore.codegen.stash import is_stash_read, stash_reduce_values
from tinycore.device import Device, renderer_setting
from tinycore.dtype import dtypes
from tinycore.helpers import Context
from tinycore.tensor import Tensor
from tinycore.uop.ops import AxisType, Ops, UOp


def _layernorm(t):
    c = t - t.mean(-1, keepdim=True)
    return c * ((c * c).mean(-1, keepdim=True) + 1e-5).rsqrt()


FUNCTIONS = {
    "softmax": (lambda t: t.softmax(-1), lambda t: torch.softmax(t, -1)),
    "log_softmax": (lambda t: t.log_softmax(-1), lambda t: torch.log_softmax(t, -1)),
    "layernorm": (_layernorm, lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:], eps=1e-5)),
}


def _kernels(out: Tensor) -> list:
    return [si for si in out.schedule() if si.ast.op is Ops.SINK]


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_row_functions_are_one_kernel_on_clang_and_three_without_fusion(clang, name):
    fn = FUNCTIONS[name][0]
    assert renderer_setting("CLANG", "row_reduce_bytes", 0) > 0
    x = Tensor(np.random.randn(6, 40).astype(np.float32), device="CLANG").realize()
    assert len(_kernels(fn(x))) == 1
    with Context(FUSE_ROWS=0):
        assert len(_kernels(fn(x))) >= 2  # the knob turns it off (and the cached one-kernel schedule is dropped)
    assert len(_kernels(fn(x))) == 1


def test_rows_too_long_or_reduced_over_another_axis_are_not_fused(clang):
    limit = renderer_setting("CLANG", "row_reduce_bytes", 0)
    long_rows = Tensor.empty(2, limit // 4 + 1, device="CLANG")
    assert len(_kernels(long_rows.softmax(-1))) == 3
    assert len(_kernels(Tensor.empty(4, 8, device="CLANG").softmax(0))) == 3  # not the last axis
    x = Tensor.empty(4, 8, device="CLANG")
    assert len(_kernels(x - x.sum(-1, keepdim=True).sum(0, keepdim=True))) == 3  # the row sum is reduced again


def test_devices_without_row_reduce_bytes_keep_one_reduce_per_kernel(python_default_device):
    assert renderer_setting("PYTHON", "row_reduce_bytes", 0) == 0
    assert len(_kernels(Tensor.empty(4, 8).softmax(-1))) == 3


def test_a_row_reduce_used_by_several_kernels_is_realized_once(clang):
    x = Tensor(np.random.randn(5, 6).astype(np.float32), device="CLANG").realize()
    mean = x.mean(1, keepdim=True)
    outs = [(x - mean) * 2, (x - mean).abs()]
    items = outs[0].schedule(*outs[1:])
    assert len(items) == 2 and len(items[1].outputs) == 2  # the row sum once; both outputs in one kernel


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("shape", [(1, 1), (3, 1), (1, 7), (5, 37), (2, 4096), (33, 1000), (4, 2, 24), (0, 8)])
def test_row_functions_match_torch_forward_and_backward(clang, name, shape):
    fn, ref = FUNCTIONS[name]
    data = np.random.randn(*shape).astype(np.float32) * 3
    weights = np.random.randn(*shape).astype(np.float32)
    x = Tensor(data, device="CLANG", requires_grad=True)
    out = fn(x)
    (out * Tensor(weights, device="CLANG")).sum().backward()
    tx = torch.tensor(data, requires_grad=True)
    tout = ref(tx)
    (tout * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=2e-5, atol=2e-6)
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=2e-5)


def test_softmax_of_a_transposed_view_and_of_half_floats(clang):
    data = np.random.randn(48, 20).astype(np.float32)
    x = Tensor(data, device="CLANG").realize()
    np.testing.assert_allclose(x.T.softmax(-1).numpy(), torch.softmax(torch.tensor(data).T, -1).numpy(), atol=1e-6)
    half = Tensor(data.astype(np.float16), device="CLANG").softmax(-1)
    assert half.dtype == dtypes.half
    want = torch.softmax(torch.tensor(data.astype(np.float16)).float(), -1).numpy()
    np.testing.assert_allclose(half.numpy().astype(np.float32), want, rtol=2e-3, atol=2e-4)


def test_softmax_of_large_and_tiny_values_is_exact_where_torch_is(clang):
    data = np.array([[1000.0, 0.0, -1000.0, 1000.0], [-np.inf, 0.0, 1.0, -np.inf]], dtype=np.float32)
    got = Tensor(data, device="CLANG").softmax(-1).numpy()
    np.testing.assert_array_equal(got[:, [1, 2]][0], [0.0, 0.0])
    np.testing.assert_allclose(got, torch.softmax(torch.tensor(data), -1).numpy(), rtol=1e-6, atol=0)


# ---------------------------------------------------------------------------------------------------------------
# the stash


def _softmax_kernel(rows: int, cols: int):
    x = Tensor.empty(rows, cols, device="CLANG")
    (si,) = _kernels(x.softmax(-1))
    return get_kernel(si.ast, Device["CLANG"].renderer)


def test_the_softmax_kernel_keeps_its_exps_in_a_row_sized_register_array(clang):
    k = _softmax_kernel(8, 64)
    stashes = [u for u in k.sink.toposort() if u.op is Ops.DEFINE_REG]
    assert len(stashes) == 1 and stashes[0].dtype.size == 64
    reads = [u for u in k.sink.toposort() if is_stash_read(u)]
    assert len(reads) == 1
    exps = [u for u in k.sink.toposort() if u.op is Ops.EXP2]
    assert len(exps) == 1  # computed once per element: in the sum's loop, not again by the output


def test_no_thread_split_of_the_axis_that_reads_the_stash(clang):
    k = _softmax_kernel(2, 256)
    axes = k.output_axes
    row, col = (axes[0], axes[1]) if axes[0].src[0].arg == 2 else (axes[1], axes[0])
    with pytest.raises(KernelOptError, match="stash"):
        k.copy().apply_opt(Opt(OptOps.THREAD, axes.index(col), 2))
    k.apply_opt(Opt(OptOps.THREAD, axes.index(row), 2))  # whole rows per thread are fine
    assert k.axes_of(AxisType.THREAD)


def test_stash_leaves_kernels_without_a_recomputed_costly_body_alone():
    out, inp = UOp.define_global(0, dtypes.float, 8), UOp.define_global(1, dtypes.float, 8)
    i, r = UOp.range(8, 0, AxisType.LOOP), UOp.range(8, 1, AxisType.REDUCE)

    def load(x):
        return inp.index(x).load()

    cheap = UOp.sink(out.index(i).store(load(i) - UOp(Ops.REDUCE, dtypes.float, (load(r), r), Ops.ADD)))
    assert stash_reduce_values(cheap, 1 << 15) is cheap  # x - sum(x): nothing costly to keep
    costly = UOp.sink(
        out.index(i).store(load(i).alu(Ops.EXP2) * UOp(Ops.REDUCE, dtypes.float, (load(r).alu(Ops.EXP2), r), Ops.ADD))
    )
    assert stash_reduce_values(costly, 16) is costly  # 8 floats don't fit 16 bytes
    assert stash_reduce_values(costly, 1 << 15) is not costly


def test_beam_search_on_a_one_kernel_softmax_keeps_it_right(clang, tmp_path, monkeypatch):
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path))  # no BEAM result from another run
    data = np.random.randn(16, 96).astype(np.float32)
    with Context(BEAM=1, IGNORE_BEAM_CACHE=1):
        got = Tensor(data, device="CLANG").softmax(-1).numpy()
    np.testing.assert_allclose(got, torch.softmax(torch.tensor(data), -1).numpy(), rtol=1e-5, atol=1e-7)
