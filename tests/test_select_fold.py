"""A one-hot selection summed over its range is one indexed load (`tinycore.codegen.select_fold`): indexing with
tensors, `gather` and embeddings read each picked element once instead of comparing every candidate, give the same
values (torch's, -0.0 included), and the optimizer never vectorizes the lanes of a gather's addresses."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore import Tensor, nn
from tinycore.codegen import get_kernel
from tinycore.codegen.kernel import KernelOptError, Opt, OptOps
from tinycore.device import Device
from tinycore.uop.ops import Ops


def _kernels(t: Tensor, device: str) -> list:
    return [get_kernel(s.ast, Device[device].renderer) for s in t.schedule() if s.ast is not None]


@pytest.mark.parametrize("device", ["PYTHON", "CLANG"])
def test_indexing_by_a_tensor_reads_each_row_once(device: str) -> None:
    m = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    idx = np.array([3, -1, 63, 0, -64, 7], dtype=np.int32)
    (k,) = _kernels(Tensor(m, device=device)[Tensor(idx, device=device)], device)  # (schedule() hands it over)
    assert not any(u.op is Ops.REDUCE for u in k.sink.toposort())  # no sum over the 64 candidate rows
    np.testing.assert_array_equal(Tensor(m, device=device)[Tensor(idx, device=device)].numpy(), m[idx])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64, np.uint8, np.bool_])
def test_gather_matches_torch_for_every_dtype(dtype: type) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((5, 7)) * 10).astype(dtype)
    index = rng.integers(0, 7, (5, 4))
    got = Tensor(x).gather(1, Tensor(index.astype(np.int32))).numpy()
    want = torch.from_numpy(x).gather(1, torch.from_numpy(index)).numpy()
    np.testing.assert_array_equal(got, want)
    index0 = rng.integers(0, 5, (3, 7))
    got0 = Tensor(x).gather(0, Tensor(index0.astype(np.int32))).numpy()
    np.testing.assert_array_equal(got0, torch.from_numpy(x).gather(0, torch.from_numpy(index0)).numpy())


def test_picked_special_values_keep_their_bits() -> None:
    x = np.array([-0.0, np.inf, -np.inf, np.nan, 1e-45, -3.5], dtype=np.float32)
    idx = np.array([0, 3, 1, 2, 4, 5, 0], dtype=np.int32)
    got = Tensor(x)[Tensor(idx)].numpy()
    want = torch.from_numpy(x)[torch.from_numpy(idx.astype(np.int64))].numpy()
    assert got.tobytes() == want.tobytes()  # -0.0 stays -0.0 (the one-hot sum made it +0.0), NaN stays NaN


def test_embedding_forward_and_backward_match_torch() -> None:
    rng = np.random.default_rng(2)
    emb = nn.Embedding(50, 8)
    weight = rng.standard_normal((50, 8)).astype(np.float32)
    emb.weight = Tensor(weight, requires_grad=True)
    tokens = rng.integers(0, 50, (3, 9)).astype(np.int32)
    out = emb(Tensor(tokens))
    (out * out).sum().backward()
    w = torch.tensor(weight, requires_grad=True)
    ref = torch.nn.functional.embedding(torch.from_numpy(tokens.astype(np.int64)), w)
    (ref * ref).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(emb.weight.grad.numpy(), w.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", ["PYTHON", "CLANG"])
def test_an_embedding_reads_its_rows_and_copies_no_table(device: str) -> None:
    """`nn.Embedding` is a one-hot matrix product: code generation folds it into one load per output, and the
    scheduler does not pack (copy) the table for a product whose left side is a one-hot."""
    rng = np.random.default_rng(4)
    emb = nn.Embedding(1000, 16, device=device)
    weight = emb.weight.numpy()
    tokens = rng.integers(0, 1000, (2, 5)).astype(np.int64)
    tokens[0, :3] = 7  # duplicates
    out = emb(Tensor(tokens, device=device))
    kernels = _kernels(out, device)
    assert len(kernels) == 1  # the lookup alone: no panel copy of the 1000 x 16 table
    assert not any(u.op is Ops.REDUCE for u in kernels[0].sink.toposort())  # no sum over the 1000 rows
    np.testing.assert_array_equal(emb(Tensor(tokens, device=device)).numpy(), weight[tokens])


def test_a_one_hot_product_picks_torchs_value_beside_non_finite_rows() -> None:
    """The product ``onehot @ table`` summed ``0 * inf`` (NaN) for every row it did not pick; the fold reads the
    picked row only, as torch's embedding does."""
    emb = nn.Embedding(4, 3)
    table = np.array([[1, 2, 3], [np.inf, 0, 0], [np.nan, 1, 1], [-0.0, 5, 6]], dtype=np.float32)
    emb.weight = Tensor(table)
    tokens = np.array([0, 3, 2, 1], dtype=np.int32)
    got = emb(Tensor(tokens)).numpy()
    want = torch.nn.functional.embedding(torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(table)).numpy()
    assert got.tobytes() == want.tobytes()


def _one_hot_sum(size: int, cast_to, product: bool):
    from tinycore.codegen.select_fold import fold_one_hot_selects
    from tinycore.dtype import dtypes
    from tinycore.uop.ops import AxisType, UOp

    out, src = UOp.define_global(0, dtypes.float, 4), UOp.define_global(1, dtypes.float, size)
    ind = UOp.define_global(2, cast_to, 4)
    i, r = UOp.range(4, 0, AxisType.LOOP), UOp.range(size, 1, AxisType.REDUCE)
    hot = ind.index(i).load().eq(r.cast(dtypes.int).cast(cast_to))
    picked = hot.cast(dtypes.float) * src.index(r).load() if product else hot.where(src.index(r).load(), 0.0)
    sink = UOp.sink(out.index(i).store(UOp(Ops.REDUCE, dtypes.float, (picked, r), Ops.ADD)))
    return [u.op for u in fold_one_hot_selects(sink).toposort()]


@pytest.mark.parametrize("product", [False, True])
def test_the_fold_takes_casts_that_keep_every_index_distinct(product: bool) -> None:
    from tinycore.dtype import dtypes

    assert Ops.REDUCE not in _one_hot_sum(1000, dtypes.long, product)  # int -> long keeps 0..999 apart: one load
    assert Ops.REDUCE in _one_hot_sum(1000, dtypes.int8, product)  # int8 wraps 0..999: not one-hot, left alone


def test_a_gathers_address_lanes_are_never_upcast() -> None:
    m = Tensor(np.zeros((64, 32), dtype=np.float32))
    idx = Tensor(np.arange(16, dtype=np.int32))
    (k,) = _kernels(m[idx].contiguous(), "CLANG")
    gather = k._gather_ranges()
    assert gather  # the range walking the index buffer reaches the row address through the loaded index
    axis = next(i for i, r in enumerate(k.output_axes) if r in gather)
    with pytest.raises(KernelOptError, match="gather"):
        k.apply_opt(Opt(OptOps.UPCAST, axis, 4))
    assert m[idx].numpy().shape == (16, 32)


def test_indexing_writes_its_output_in_order_and_vectorizes_the_rows() -> None:
    from tinycore.codegen.heuristic import hand_coded_optimizations

    m = Tensor(np.random.default_rng(3).standard_normal((64, 32)).astype(np.float32))
    idx = Tensor(np.arange(16, dtype=np.int32)[::-1].copy())
    (k,) = _kernels(m[idx].contiguous(), "CLANG")
    opts = hand_coded_optimizations(k)
    assert any(o.op is OptOps.UPCAST for o in opts)  # whole vectors along each picked row (not the gather axis)
    out = m[idx]
    assert out.uop.op is not Ops.PERMUTE  # built in its final order, no transposing view over the kernel's output
    np.testing.assert_array_equal(out.numpy(), m.numpy()[::-1][48:])
