"""The scheduler's copy of a convolution's padded input (`tinycore.engine.gemm_packing`, `find_conv_inputs`): which
inputs it copies (large, padded, on a device whose renderer declares ``gemm_panel_bytes``), the kernels that result
(one copy, read by the convolution kernel instead of the input), the graph `Tensor.conv2d` builds (a plain padded
view: no device settings read), and forward and backward numerics against torch."""

from __future__ import annotations

import numpy as np
import pytest

import tinycore.frontend.processing as processing
from tinycore import Tensor
from tinycore.engine.gemm_packing import PACK_MIN_ELEMENTS, copies_conv_input, find_conv_inputs, pack_gemm_operands
from tinycore.engine.realize import capture_exec_items
from tinycore.uop.ops import Ops, UOp


def rand(*shape: int, seed: int = 0, dtype: str = "float32") -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 0.5).astype(dtype)


def kernels(*tensors: Tensor) -> list:
    """The exec items realizing `tensors` runs (they run too)."""
    items: list = []
    with capture_exec_items(items.append):
        Tensor.realize(*tensors)
    return items


def test_conv2d_builds_the_plain_padded_view():
    """The front end pads with a view whatever the device, and reads no device setting to decide on a copy."""
    x, w = Tensor.empty(8, 64, 56, 56, device="CLANG"), Tensor.empty(64, 64, 3, 3, device="CLANG")
    nodes = x.conv2d(w, padding=1).uop.toposort()
    assert not any(n.op is Ops.CONTIGUOUS for n in nodes)
    assert sum(n.op is Ops.PAD for n in nodes) == 1
    assert not hasattr(processing, "gemm_panel") and not hasattr(processing, "PACK_MIN_ELEMENTS")


@pytest.mark.parametrize(
    "xs,ws,kw",
    [
        ((2, 16, 32, 32), (32, 16, 3, 3), {"padding": 1}),
        ((2, 16, 33, 33), (32, 16, 3, 3), {"padding": 1, "stride": 2}),  # the strided window pads a tail as well
        ((4, 16, 1025), (16, 16, 5), {"padding": 2, "stride": 2}),  # that tail pad sits right on the input's pad
        ((2, 16, 32, 32), (32, 8, 3, 3), {"padding": 1, "groups": 2}),
        ((2, 16, 32, 32), (16, 16, 1, 1), {"padding": 1}),
        ((16, 64, 64), (16, 16, 3, 3), {"padding": 1}),  # unbatched
    ],
)
def test_large_padded_input_is_copied_once(clang, xs, ws, kw):
    """One copy kernel writes the padded input; the convolution kernel reads the copy, not the input."""
    x, w = Tensor(rand(*xs), device="CLANG").realize(), Tensor(rand(*ws, seed=1), device="CLANG").realize()
    out = x.conv2d(w, **kw)
    sink = UOp.sink(out.uop)
    [pad] = find_conv_inputs(sink)
    batched = xs if len(xs) == len(ws) else (1, *xs)
    assert pad.op is Ops.PAD and pad.src[0].shape == batched  # the input's own padding, not a window's tail
    rewritten = pack_gemm_operands(sink).toposort()
    assert [n.src[0] for n in rewritten if n.op is Ops.CONTIGUOUS] == [pad]
    items = kernels(out)
    assert len(items) == 2
    copy, conv = items
    assert len(copy.bufs) == 2 and copy.bufs[0].size == int(np.prod(pad.shape))  # copy: padded input <- input
    assert copy.bufs[0] in conv.bufs[1:] and copy.bufs[1] not in conv.bufs  # the conv reads the copy only


def test_padded_input_copy_is_read_by_the_weight_gradient(clang):
    """The weight gradient's product reads the padded input through the same node: the one copy serves both."""
    x = Tensor(rand(4, 16, 32, 32), device="CLANG", requires_grad=True).realize()
    w = Tensor(rand(32, 16, 3, 3, seed=1), device="CLANG", requires_grad=True).realize()
    out = x.conv2d(w, padding=1).relu()
    out.sum().backward()
    items = kernels(out, x.grad, w.grad)
    copies = [ei for ei in items if ei.bufs[0].size == 4 * 16 * 34 * 34]
    assert len(copies) == 1
    assert sum(copies[0].bufs[0] in ei.bufs[1:] for ei in items) == 2  # the forward and the weight gradient


@pytest.mark.parametrize(
    "xs,ws,kw",
    [
        ((1, 4, 8, 8), (8, 4, 3, 3), {"padding": 1}),  # padded, but below PACK_MIN_ELEMENTS
        ((2, 16, 32, 32), (32, 16, 3, 3), {}),  # large, unpadded
    ],
)
def test_small_or_unpadded_inputs_are_read_in_place(clang, xs, ws, kw):
    x, w = Tensor(rand(*xs), device="CLANG").realize(), Tensor(rand(*ws, seed=1), device="CLANG").realize()
    out = x.conv2d(w, **kw)
    sink = UOp.sink(out.uop)
    assert not find_conv_inputs(sink) and pack_gemm_operands(sink) is sink
    assert len(kernels(out)) == 1


def test_threshold_is_on_the_padded_element_count(clang):
    """``PACK_MIN_ELEMENTS`` counts the padded input: 1x16x31x31 (15376) is copied once padded to 33x33 (17424)."""
    x = Tensor.empty(1, 16, 31, 31, device="CLANG")
    assert 16 * 31 * 31 < PACK_MIN_ELEMENTS <= 16 * 33 * 33
    pad = x.uop.pad(((0, 0), (0, 0), (1, 1), (1, 1)))
    assert copies_conv_input(pad) and not copies_conv_input(x.uop.pad(((0, 0), (0, 0), (0, 0), (0, 1))))


def test_device_without_panels_is_left_alone():
    """PYTHON declares no ``gemm_panel_bytes``: the same large padded convolution is recognized but not copied."""
    x, w = Tensor.empty(2, 16, 32, 32, device="PYTHON"), Tensor.empty(32, 16, 3, 3, device="PYTHON")
    sink = UOp.sink(x.conv2d(w, padding=1).uop)
    assert not find_conv_inputs(sink) and pack_gemm_operands(sink) is sink
    a, b = rand(1, 2, 6, 6), rand(3, 2, 3, 3, seed=1)  # numerics on the interpreter
    out = Tensor(a, device="PYTHON").conv2d(Tensor(b, device="PYTHON"), padding=1).numpy()
    ref = Tensor(a, device="CLANG").conv2d(Tensor(b, device="CLANG"), padding=1).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_other_padded_reductions_are_not_convolutions(clang):
    """A matmul of a padded matrix, a padded average pool and a padded elementwise sum are not copied."""
    a, b = Tensor.empty(300, 300, device="CLANG"), Tensor.empty(310, 256, device="CLANG")
    x = Tensor.empty(2, 16, 64, 64, device="CLANG")
    for out in (
        a.pad(((0, 0), (5, 5))) @ b,
        x.avg_pool2d(3, stride=1, padding=1),
        (x.pad(((0, 0), (0, 0), (1, 1), (1, 1))) * 2).sum((2, 3)),
    ):
        assert not find_conv_inputs(UOp.sink(out.uop))


def test_a_prepadded_input_is_the_same_graph():
    """``x.pad(p).conv2d(w)`` builds the very graph ``x.conv2d(w, padding=p)`` does, so it is copied alike."""
    x, w = Tensor.empty(2, 16, 32, 32, device="CLANG"), Tensor.empty(32, 16, 3, 3, device="CLANG")
    pre = x.pad(((0, 0), (0, 0), (1, 1), (1, 1))).conv2d(w)
    assert pre.uop is x.conv2d(w, padding=1).uop


@pytest.mark.parametrize(
    "xs,ws,kw,dtype",
    [
        ((2, 16, 32, 32), (32, 16, 3, 3), {"padding": 1}, "float32"),
        ((2, 16, 33, 33), (32, 16, 3, 3), {"padding": 1, "stride": 2}, "float32"),
        ((2, 16, 32, 32), (32, 8, 3, 3), {"padding": 1, "groups": 2}, "float32"),
        ((2, 16, 32, 32), (32, 16, 3, 3), {"padding": 2, "dilation": 2}, "float32"),
        ((2, 16, 32, 32), (32, 16, 3, 3), {"padding": 1}, "float16"),
        ((2, 16, 33, 33), (32, 8, 3, 3), {"padding": 1, "stride": 2, "groups": 2}, "float16"),
    ],
)
def test_copied_convolutions_forward_and_backward_match_torch(clang, xs, ws, kw, dtype):
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    x, w, b = rand(*xs, dtype=dtype), rand(*ws, seed=1, dtype=dtype), rand(ws[0], seed=3, dtype=dtype)
    tx, tw, tb = (Tensor(v, device="CLANG", requires_grad=True) for v in (x, w, b))
    out = tx.conv2d(tw, tb, **kw)  # no relu: a 16-bit output near 0 could flip its mask against torch's
    up = rand(*out.shape, seed=2)
    assert find_conv_inputs(UOp.sink(out.uop))  # the case under test is one the pass copies
    (out.float() * Tensor(up, device="CLANG")).sum().backward()
    rx, rw, rb = (torch.tensor(v.astype(np.float32), requires_grad=True) for v in (x, w, b))
    rout = f.conv2d(rx, rw, rb, **kw).to(getattr(torch, dtype)).float()
    (rout * torch.tensor(up)).sum().backward()
    tol = {"rtol": 1e-4, "atol": 1e-3} if dtype == "float32" else {"rtol": 2e-2, "atol": 2.5e-1}
    np.testing.assert_allclose(out.float().numpy(), rout.detach().numpy(), **tol)
    for got, ref in ((tx, rx), (tw, rw), (tb, rb)):
        np.testing.assert_allclose(got.grad.float().numpy(), ref.grad.numpy(), **tol)
