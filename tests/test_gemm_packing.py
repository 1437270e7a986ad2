"""The scheduler's panel packing of matmul right operands (`tinycore.engine.gemm_packing`): which operands it packs,
the kernels that result (a packing copy, read by the matmul kernel instead of the operand), the graph `Tensor.dot`
builds (a plain product: no device settings read), and forward and backward numerics against numpy and torch."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tinycore import Tensor
from tinycore.dtype import dtypes
from tinycore.engine.gemm_packing import (
    PACK_MIN_ROWS_IN_PLACE,
    find_gradient_products,
    find_products,
    gemm_panel,
    pack_gemm_operands,
    packed_operand,
    pm_pack_gemm,
)
from tinycore.engine.realize import capture_exec_items
from tinycore.uop.ops import Ops, UOp


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def kernels(*tensors: Tensor) -> list:
    """The exec items realizing `tensors` runs (they run too)."""
    items: list = []
    with capture_exec_items(items.append):
        Tensor.realize(*tensors)
    return items


def test_dot_builds_the_plain_product():
    """The front end builds ``sum(x * w.T)`` whatever the device: no packing copy in the tensor graph."""
    a, b = Tensor.empty(512, 512, device="CLANG"), Tensor.empty(512, 512, device="CLANG")
    nodes = (a @ b).uop.toposort()
    assert not any(n.op is Ops.CONTIGUOUS for n in nodes)
    (side, rows), *rest = find_products(UOp.sink((a @ b).uop)).items()
    assert not rest and rows == 512 and side.op is Ops.EXPAND and side.shape == (512, 512, 512)
    right = side.src[0]  # the operand's reshape, (..., 1, N, K), of its transpose
    assert right.op is Ops.RESHAPE and right.shape == (1, 512, 512)
    assert right.src[0].op is Ops.PERMUTE and right.src[0].src[0] is b.uop


@pytest.mark.parametrize(
    "sa,sb,rows",
    [
        ((64, 32), (32, 48), 64),
        ((3, 8, 32), (32, 48), 24),  # a batched left operand: its rows are all the rows
        ((8, 32), (3, 32, 48), 8),  # a batched right operand: x's own rows
        ((2, 1, 8, 32), (3, 32, 48), 16),
    ],
)
def test_products_are_found_with_their_rows(sa, sb, rows):
    for dtype in (dtypes.float, dtypes.half, dtypes.int8):
        a, b = Tensor.empty(*sa, device="PYTHON", dtype=dtype), Tensor.empty(*sb, device="PYTHON", dtype=dtype)
        assert list(find_products(UOp.sink((a @ b).uop)).values()) == [rows]


def test_reductions_that_are_not_products_are_left_alone():
    a, b = Tensor.empty(64, 32, device="CLANG"), Tensor.empty(32, 48, device="CLANG")
    not_products = [
        (a.reshape(64, 1, 32) * b.T.reshape(1, 48, 32)).max(-1),  # not a sum
        (a.reshape(64, 32, 1) * b.reshape(1, 32, 48)).sum(1),  # over the middle axis
        (a * a).sum(-1),  # a row-wise dot product
        Tensor.empty(16, 32, device="CLANG") @ Tensor.empty(32, device="CLANG"),  # matrix-vector
        Tensor.empty(32, device="CLANG") @ b,  # vector-matrix
    ]
    for t in not_products:
        assert find_products(UOp.sink(t.uop)) == {}


def test_the_decision(clang):
    """A row-major right operand is packed when it is beyond a core's L2 or many rows reuse it (a small one with a
    partial last panel is not: the kernel's last column tile overlaps the one before); a transposed one always."""

    def operand(*shape: int, device: str = "CLANG") -> UOp:
        return Tensor.empty(*shape, device=device).uop

    big = operand(384, 512)  # 768 KiB: beyond L2
    assert packed_operand(big, 64) is not None
    assert packed_operand(big, 1) is None  # a matrix-vector product: no reuse
    cached = operand(256, 256)  # 256 KiB: read from L2, packed only for many rows
    assert packed_operand(cached, PACK_MIN_ROWS_IN_PLACE // 2) is None
    assert packed_operand(cached, PACK_MIN_ROWS_IN_PLACE) is not None
    assert packed_operand(operand(8, 8), 64) is None
    panel = gemm_panel("CLANG", 4)  # the panel width follows the host's vector width (AVX2: 16, AVX-512: 32)
    odd = packed_operand(operand(512, 513), 256)  # 513 columns: the last panel zero-filled
    assert odd is not None and odd.op is Ops.SHRINK and odd.shape == (512, 513)
    assert odd.src[0].shape == (512, -(-513 // panel) * panel)
    assert packed_operand(operand(128, 129), 64) is None
    assert packed_operand(operand(2048, 10), 4096) is None  # one panel or less: nothing to pack
    assert packed_operand(operand(128, 128).permute((1, 0)), 64) is not None  # 64 KiB, but its columns are strided
    assert gemm_panel("PYTHON", 4) == 0 and packed_operand(operand(384, 512, device="PYTHON"), 4096) is None
    half = Tensor.empty(512, 1024, device="CLANG", dtype=dtypes.half).uop  # 1 MiB of 2-byte elements
    packed = packed_operand(half, 64)
    assert packed is not None and gemm_panel("CLANG", 2) == 2 * panel
    copy = next(n for n in packed.toposort() if n.op is Ops.CONTIGUOUS)
    assert copy.src[0].shape == (1024 // (2 * panel), 512, 2 * panel)  # (N / p, K, p) panels of 2-byte elements


def test_large_right_operand_is_read_through_a_packing_kernel(clang):
    a, b = rand(512, 256), rand(256, 512, seed=1)
    ta, tb = Tensor(a, device="CLANG").realize(), Tensor(b, device="CLANG").realize()
    out = ta @ tb
    items = kernels(out)
    assert len(items) == 2
    pack, matmul = items
    assert pack.bufs[0].size == 256 * 512 and pack.bufs[1] not in matmul.bufs  # the matmul never reads `b` itself
    assert pack.bufs[0] in matmul.bufs[1:]
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-3)
    a2 = rand(512, 256, seed=2)
    again = Tensor(a2, device="CLANG") @ tb  # the same structure: a schedule-cache hit, still packed
    assert len(kernels(again)) == 2
    np.testing.assert_allclose(again.numpy(), a2 @ b, rtol=1e-4, atol=1e-3)


def test_ragged_last_panel_is_zero_filled(clang):
    a, b = rand(512, 512), rand(512, 513, seed=1)
    out = Tensor(a, device="CLANG") @ Tensor(b, device="CLANG")
    pack, matmul = kernels(out)
    wide = -(-513 // gemm_panel("CLANG", 4)) * gemm_panel("CLANG", 4)
    assert pack.bufs[0].size == 512 * wide and pack.bufs[0] in matmul.bufs[1:]
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-3)


def test_transposed_right_operand_is_packed_even_when_small(clang):
    a, b = rand(64, 128), rand(128, 128, seed=1)
    out = Tensor(a, device="CLANG") @ Tensor(b, device="CLANG").T
    pack, matmul = kernels(out)
    assert pack.bufs[0] in matmul.bufs[1:] and pack.bufs[1] not in matmul.bufs
    np.testing.assert_allclose(out.numpy(), a @ b.T, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((64, 64), (64, 64)),  # small
        ((256, 256), (256, 256)),  # row-major, in L2, too few rows
        ((1, 1024), (1024, 1024)),  # matrix-vector
        ((8, 1024), (1024, 1024)),  # fewer rows than PACK_MIN_ROWS
        ((128, 150), (150, 171)),  # a small operand with a ragged last panel
    ],
)
def test_operands_that_stay_in_place(clang, sa, sb):
    a, b = rand(*sa), rand(*sb, seed=1)
    out = Tensor(a, device="CLANG") @ Tensor(b, device="CLANG")
    sink = UOp.sink(out.uop)
    assert pack_gemm_operands(sink) is sink
    assert len(kernels(out)) == 1
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-3)


def test_device_without_panels_is_left_alone():
    a, b = Tensor.empty(512, 512, device="PYTHON"), Tensor.empty(512, 512, device="PYTHON")
    sink = UOp.sink((a @ b).uop, (a @ b.T).uop)
    assert find_products(sink) and pack_gemm_operands(sink) is sink
    a, b = rand(20, 24), rand(24, 40, seed=1)  # numerics on the interpreter (too small to pack anywhere)
    out = Tensor(a, device="PYTHON") @ Tensor(b, device="PYTHON")
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-5)


def test_pass_is_a_named_rule_table():
    # gradient products, matmul operands, conv inputs
    assert pm_pack_gemm.name == "pack_gemm_operands" and len(pm_pack_gemm) == 3


def test_the_input_gradient_reads_w_transposed_through_panels_of_its_own(clang):
    """``dx = dout @ w.T``, the product's own gradient, multiplies by the node the forward product reads but sums
    over ``N``: it gets a copy of ``w.T`` packed along ``K`` (read across the forward panels, every lane was a scalar
    load). Only packing kernels read ``w``; the products read vectors."""
    x, w = rand(256, 256), rand(256, 1024, seed=1)
    tx, tw = Tensor(x, device="CLANG", requires_grad=True), Tensor(w, device="CLANG", requires_grad=True)
    tw.realize()
    out = (tx @ tw).relu()
    out.sum().backward()
    sink = UOp.sink(out.uop, tx.grad.uop, tw.grad.uop)
    products = find_products(sink)
    assert list(find_gradient_products(sink, products).values()) == [256]
    items = kernels(out, tx.grad, tw.grad)
    w_buf = next(ei.bufs[1] for ei in items if len(ei.bufs) == 2 and ei.bufs[0].size == 256 * 1024)
    readers = [ei for ei in items if w_buf in ei.bufs[1:]]
    assert readers and all(ei.runner.p.function_name.startswith("E_") for ei in readers)  # copies, no reduce
    products_src = [ei.runner.p.src for ei in items if ei.runner.p.function_name.startswith("r_")]
    assert len(products_src) == 3
    for src in products_src:  # LLVM IR: the only scalar loads left are the left operand's broadcasts (8 tile rows)
        if src.startswith("; tinycore-clang kernel"):
            assert len(re.findall(r"= load float, ", src)) <= 16, src[:200]
    mask = (x @ w > 0).astype(np.float32)
    np.testing.assert_allclose(tx.grad.numpy(), mask @ w.T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(tw.grad.numpy(), x.T @ mask, rtol=1e-4, atol=1e-3)


def test_each_product_of_one_operand_decides_for_itself(clang):
    """A 512-row product reads `w` packed; an 8-row one in the same schedule reads it in place."""
    a, v, w = rand(512, 512), rand(8, 512, seed=2), rand(512, 512, seed=1)
    tw = Tensor(w, device="CLANG").realize()
    big, small = Tensor(a, device="CLANG") @ tw, Tensor(v, device="CLANG") @ tw
    items = kernels(big, small)
    w_buf = next(ei.bufs[1] for ei in items if len(ei.bufs) == 2)  # the packing kernel's input
    readers = [ei for ei in items if w_buf in ei.bufs[1:]]
    assert len(items) == 3 and len(readers) == 2  # the packing kernel and the 8-row product
    np.testing.assert_allclose(big.numpy(), a @ w, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(small.numpy(), v @ w, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "sx,sw,transposed,dtype",
    [
        ((4, 64, 128), (4, 128, 200), False, "float32"),  # batched, N not a multiple of the panel
        ((100, 300), (300, 520), False, "float32"),  # packed (beyond L2), ragged last panel
        ((48, 160), (210, 160), True, "float32"),  # transposed: packed, ragged
        ((3, 40, 64), (64, 400), False, "float32"),  # a batched left operand
        ((64, 256), (256, 1000), False, "float16"),  # products in float32, the operand packed as float32
        ((32, 128), (150, 128), True, "float16"),
    ],
)
def test_packed_products_forward_and_backward_match_torch(clang, sx, sw, transposed, dtype):
    torch = pytest.importorskip("torch")
    x, w = rand(*sx), rand(*sw, seed=1)
    up = rand(*sx[:-1], sw[-2] if transposed else sw[-1], seed=2)
    x, w = x.astype(dtype), w.astype(dtype)
    tx, tw = Tensor(x, device="CLANG", requires_grad=True), Tensor(w, device="CLANG", requires_grad=True)
    out = (tx @ (tw.transpose(-1, -2) if transposed else tw)).relu()
    (out.float() * Tensor(up, device="CLANG")).sum().backward()
    rx, rw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    rout = (rx.float() @ (rw.float().transpose(-1, -2) if transposed else rw.float())).to(rx.dtype).relu().float()
    (rout * torch.tensor(up)).sum().backward()
    tol = {"rtol": 1e-4, "atol": 1e-3} if dtype == "float32" else {"rtol": 2e-2, "atol": 2e-1}
    np.testing.assert_allclose(out.float().numpy(), rout.detach().numpy(), **tol)
    np.testing.assert_allclose(tx.grad.float().numpy(), rx.grad.float().numpy(), **tol)
    np.testing.assert_allclose(tw.grad.float().numpy(), rw.grad.float().numpy(), **tol)
