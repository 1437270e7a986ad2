"""Op parity with PyTorch for `tinycore/frontend/processing.py` (and core matmul): convolutions, pooling, resize,
einsum, attention, normalization. Forward and backward (float32) on every installed device.

Tolerances, per op family (|ours - torch| <= atol + rtol*|torch|), chosen from the number of float32 products summed:
- matmul / linear / einsum with K <= 16: atol 1e-5, rtol 1e-5
- convolutions (sums of up to ~150 products of values in [-2, 2]): atol 1e-4, rtol 1e-5
- pools, interpolate, one_hot, norms: atol 1e-5 / 1e-6 as stated at each call
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from op_helpers import check_op, make_inputs, torch

from tinycore.dtype import dtypes
from tinycore.helpers import GlobalCounters
from tinycore.tensor import Tensor

F = torch.nn.functional
CONV_TOL = dict(atol=1e-4, rtol=1e-5)
MM_TOL = dict(atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# matmul / dot / linear


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((3, 5), (5, 4)),
        ((5,), (5,)),
        ((5,), (5, 3)),
        ((3, 5), (5,)),
        ((2, 3, 5), (5, 4)),
        ((2, 1, 3, 5), (4, 5, 2)),
        ((5,), (2, 5, 3)),
        ((1, 1), (1, 1)),
        ((0, 4), (4, 3)),
    ],
)
def test_matmul(device: str, sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    check_op(device, [sa, sb], lambda a, b: a @ b, **MM_TOL)


def test_matmul_dtype_arg(device: str) -> None:
    a, b = make_inputs([(2, 3), (3, 2)])
    out = Tensor(a, device=device).dot(Tensor(b, device=device), dtype=dtypes.float16)
    assert out.dtype == dtypes.float16
    np.testing.assert_allclose(out.numpy(), (a @ b).astype(np.float16), atol=1e-2, rtol=1e-3)


def test_matmul_noncontiguous(device: str) -> None:
    check_op(device, [(5, 3), (4, 5)], lambda a, b: a.T @ b.T, **MM_TOL)
    check_op(device, [(4, 6)], lambda a: a @ a.T, lambda a: a.dot(a.T), **MM_TOL)


def test_matmul_errors(device: str) -> None:
    a, b = Tensor.ones(2, 3, device=device), Tensor.ones(4, 5, device=device)
    with pytest.raises(RuntimeError, match=r"2x3 and 4x5.*\[2, 3\] @ \[4, 5\]"):
        a @ b
    with pytest.raises(RuntimeError, match=r"\[2, 3, 4\] and \[5, 4, 2\] do not broadcast"):
        Tensor.ones(2, 3, 4, device=device) @ Tensor.ones(5, 4, 2, device=device)
    with pytest.raises(RuntimeError, match="at least 1D"):
        Tensor(2.0, device=device) @ a


@pytest.mark.parametrize("bias", [True, False])
def test_linear(device: str, bias: bool) -> None:
    if bias:
        check_op(device, [(2, 3, 6), (5, 6), (5,)], lambda x, w, b: F.linear(x, w, b),
                 lambda x, w, b: x.linear(w.T, b), **MM_TOL)  # fmt: skip
    else:
        check_op(device, [(4, 6), (5, 6)], lambda x, w: F.linear(x, w), lambda x, w: x.linear(w.T), **MM_TOL)


def test_linear_1d_weight(device: str) -> None:
    check_op(device, [(3, 4), (4,), (4,)], lambda x, w, b: x * w + b, lambda x, w, b: x.linear(w, b), **MM_TOL)


def _realized(device: str, *shapes: tuple[int, ...]) -> list[Tensor]:
    return [Tensor(a, device=device).realize() for a in make_inputs(shapes)]


def test_matmul_bias_relu_one_kernel(device: str) -> None:
    x, w, b = _realized(device, (4, 8), (8, 5), (5,))
    assert len(((x @ w) + b).relu().schedule()) == 1


# ---------------------------------------------------------------------------------------------------------------
# einsum


@pytest.mark.parametrize(
    "formula,shapes",
    [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("ij,jk", [(3, 4), (4, 5)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]),
        ("i,i->", [(5,), (5,)]),
        ("i,j->ij", [(3,), (4,)]),
        ("ii->i", [(4, 4)]),
        ("ii", [(4, 4)]),
        ("iij->j", [(3, 3, 2)]),
        ("ij->ji", [(3, 4)]),
        ("ij->", [(3, 4)]),
        ("...ij,...jk->...ik", [(2, 3, 4), (4, 2)]),
        ("b...,b->...", [(2, 3, 4), (2,)]),
        ("...i->...", [(2, 3, 4)]),
        ("ijk,kj->i", [(2, 3, 4), (4, 3)]),
        ("abc,cd,de->abe", [(2, 2, 3), (3, 4), (4, 2)]),
        ("ij,ij->ij", [(1, 4), (3, 4)]),
    ],
)
def test_einsum(device: str, formula: str, shapes: list[tuple[int, ...]]) -> None:
    check_op(device, shapes, lambda *xs: torch.einsum(formula, *xs), lambda *xs: Tensor.einsum(formula, *xs), **MM_TOL)


def test_einsum_list_operands(device: str) -> None:
    check_op(device, [(3, 4), (4, 2)], lambda a, b: torch.einsum("ij,jk->ik", [a, b]),
             lambda a, b: Tensor.einsum("ij,jk->ik", [a, b]), **MM_TOL)  # fmt: skip


def test_einsum_errors(device: str) -> None:
    a = Tensor.ones(3, 4, device=device)
    with pytest.raises(RuntimeError, match="subscripts"):
        Tensor.einsum("ijk->i", a)
    with pytest.raises(ValueError, match="operands"):
        Tensor.einsum("ij,jk->ik", a)
    with pytest.raises(RuntimeError, match="subscript j"):
        Tensor.einsum("ij,jk->ik", a, Tensor.ones(5, 2, device=device))


# ---------------------------------------------------------------------------------------------------------------
# convolutions


def _torch_pad_conv(x, w, b, padding, **kw):
    """torch conv with F.pad-order asymmetric padding."""
    return F.conv2d(F.pad(x, padding), w, b, **kw)


@pytest.mark.parametrize(
    "xs,ws,kw",
    [
        ((1, 2, 5, 5), (3, 2, 3, 3), {}),
        ((2, 3, 6, 7), (4, 3, 3, 2), {"stride": 2}),
        ((2, 3, 6, 7), (4, 3, 3, 3), {"padding": 1, "dilation": 2}),
        ((1, 2, 5, 6), (3, 2, 1, 1), {}),
        ((1, 2, 9, 9), (2, 2, 2, 2), {"stride": 3}),  # stride > kernel
        ((1, 2, 7, 8), (2, 2, 1, 1), {"stride": (2, 3)}),  # 1x1 strided
        ((2, 4, 5, 5), (6, 2, 3, 3), {"groups": 2, "padding": (1, 0)}),
        ((1, 4, 6, 6), (4, 1, 3, 3), {"groups": 4, "padding": "same"}),  # depthwise
        ((1, 2, 6, 5), (2, 2, 2, 3), {"padding": "same", "dilation": (2, 1)}),  # even kernel, odd total pad
        ((1, 2, 5, 5), (3, 2, 3, 3), {"padding": "valid"}),
        ((0, 2, 5, 5), (3, 2, 3, 3), {"padding": 1}),  # empty batch
    ],
)
def test_conv2d(device: str, xs: tuple[int, ...], ws: tuple[int, ...], kw: dict) -> None:
    cout = ws[0]
    check_op(device, [xs, ws, (cout,)], lambda x, w, b: F.conv2d(x, w, b, **kw),
             lambda x, w, b: x.conv2d(w, b, **kw), **CONV_TOL)  # fmt: skip


@pytest.mark.parametrize(
    "xs,ws,kw",
    [
        ((2, 6, 9, 8), (5, 6, 1, 1), {}),  # 72 pixels: a product per image
        ((3, 4, 7, 7), (5, 4, 1, 1), {"padding": "same", "dilation": 2}),  # 49 pixels: the batch joins the columns
        ((4, 3, 1, 1), (2, 3, 1, 1), {}),  # one pixel
        ((0, 3, 4, 4), (2, 3, 1, 1), {}),  # empty batch
    ],
)
def test_pointwise_conv2d_is_a_matrix_product_with_torchs_values(device: str, xs, ws, kw) -> None:
    """A 1 x 1 convolution (stride 1, no padding, one group) is built as a matrix product over the merged pixels;
    values and gradients are torch's, bias included."""
    check_op(device, [xs, ws, (ws[0],)], lambda x, w, b: F.conv2d(x, w, b, **kw),
             lambda x, w, b: x.conv2d(w, b, **kw), **CONV_TOL)  # fmt: skip


def test_pointwise_conv_in_other_ranks_and_unbatched(device: str) -> None:
    check_op(device, [(2, 3, 70), (4, 3, 1)], lambda x, w: F.conv1d(x, w), lambda x, w: x.conv1d(w), **CONV_TOL)
    check_op(device, [(3, 5, 5), (2, 3, 1, 1)], lambda x, w: F.conv2d(x, w), lambda x, w: x.conv2d(w), **CONV_TOL)
    check_op(device, [(1, 2, 3, 4, 5), (3, 2, 1, 1, 1)], lambda x, w: F.conv3d(x, w), lambda x, w: x.conv3d(w),
             **CONV_TOL)  # fmt: skip


def test_conv2d_no_bias(device: str) -> None:
    check_op(device, [(1, 3, 5, 4), (2, 3, 2, 2)], lambda x, w: F.conv2d(x, w, stride=(1, 2)),
             lambda x, w: x.conv2d(w, stride=(1, 2)), **CONV_TOL)  # fmt: skip


def test_conv2d_asymmetric_padding(device: str) -> None:
    pad = (1, 0, 2, 1)  # left, right, top, bottom
    check_op(device, [(1, 2, 5, 6), (3, 2, 3, 3), (3,)], lambda x, w, b: _torch_pad_conv(x, w, b, pad, stride=2),
             lambda x, w, b: x.conv2d(w, b, stride=2, padding=pad), **CONV_TOL)  # fmt: skip


def test_conv2d_noncontiguous(device: str) -> None:
    check_op(device, [(1, 2, 6, 5), (3, 2, 3, 3)], lambda x, w: F.conv2d(x.transpose(2, 3), w.flip(3), padding=1),
             lambda x, w: x.transpose(2, 3).conv2d(w.flip(3), padding=1), **CONV_TOL)  # fmt: skip


def test_conv2d_unbatched(device: str) -> None:
    check_op(device, [(2, 5, 5), (3, 2, 3, 3)], lambda x, w: F.conv2d(x, w), lambda x, w: x.conv2d(w), **CONV_TOL)


def test_conv2d_realistic(device: str) -> None:
    """2x8x16x16 input, 16 3x3 filters, padding 1, bias: the usual ResNet-style layer (float32 sums of 72 terms)."""
    check_op(device, [(2, 8, 16, 16), (16, 8, 3, 3), (16,)], lambda x, w, b: F.conv2d(x, w, b, padding=1),
             lambda x, w, b: x.conv2d(w, b, padding=1), **CONV_TOL)  # fmt: skip


def test_conv1d(device: str) -> None:
    check_op(device, [(2, 3, 11), (4, 3, 3), (4,)], lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=2, dilation=2),
             lambda x, w, b: x.conv1d(w, b, stride=2, padding=2, dilation=2), **CONV_TOL)  # fmt: skip


def test_conv3d(device: str) -> None:
    check_op(device, [(1, 2, 4, 5, 4), (3, 2, 2, 3, 2), (3,)],
             lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=(1, 0, 1)),
             lambda x, w, b: x.conv3d(w, b, stride=(1, 2, 1), padding=(1, 0, 1)), **CONV_TOL)  # fmt: skip


def test_conv2d_one_kernel(device: str) -> None:
    x, w, b = _realized(device, (2, 8, 16, 16), (16, 8, 3, 3), (16,))
    sched = x.conv2d(w, b, padding=1).schedule()
    assert len(sched) == 1
    GlobalCounters.reset()
    out = x.conv2d(w, b, padding=1, stride=2)
    out.realize()
    assert GlobalCounters.kernel_count == 1


def test_conv2d_errors(device: str) -> None:
    x = Tensor.ones(1, 4, 5, 5, device=device)
    with pytest.raises(RuntimeError, match="expected input\\[1, 4, 5, 5\\] to have 3 channels, but got 4"):
        x.conv2d(Tensor.ones(2, 3, 3, 3, device=device))
    with pytest.raises(RuntimeError, match="divisible by groups"):
        x.conv2d(Tensor.ones(3, 2, 3, 3, device=device), groups=2)
    with pytest.raises(RuntimeError, match="smaller than the kernel"):
        x.conv2d(Tensor.ones(2, 4, 7, 7, device=device))
    with pytest.raises(ValueError, match="same"):
        x.conv2d(Tensor.ones(2, 4, 3, 3, device=device), stride=2, padding="same")
    with pytest.raises(RuntimeError, match="Expected 3D"):
        Tensor.ones(4, 5, device=device).conv2d(Tensor.ones(2, 4, 3, 3, device=device))


@pytest.mark.parametrize(
    "xs,ws,kw",
    [
        ((1, 2, 4, 4), (2, 3, 3, 3), {}),
        ((2, 2, 3, 4), (2, 3, 3, 2), {"stride": 2}),
        ((1, 2, 4, 3), (2, 2, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
        ((1, 4, 3, 3), (4, 1, 2, 2), {"groups": 2, "stride": (2, 3), "dilation": 2, "output_padding": (1, 0)}),
        ((1, 2, 3, 3), (2, 2, 1, 1), {"stride": 3}),  # stride > kernel
    ],
)
def test_conv_transpose2d(device: str, xs: tuple[int, ...], ws: tuple[int, ...], kw: dict) -> None:
    cout = ws[1] * kw.get("groups", 1)
    check_op(device, [xs, ws, (cout,)], lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
             lambda x, w, b: x.conv_transpose2d(w, b, **kw), **CONV_TOL)  # fmt: skip


def test_conv_transpose1d(device: str) -> None:
    check_op(device, [(1, 2, 5), (2, 3, 3)], lambda x, w: F.conv_transpose1d(x, w, stride=2, padding=1),
             lambda x, w: x.conv_transpose1d(w, stride=2, padding=1), **CONV_TOL)  # fmt: skip


def test_conv_transpose_errors(device: str) -> None:
    x = Tensor.ones(1, 3, 4, 4, device=device)
    with pytest.raises(RuntimeError, match="to have 2 channels, but got 3"):
        x.conv_transpose2d(Tensor.ones(2, 2, 3, 3, device=device))
    with pytest.raises(RuntimeError, match="output padding"):
        x.conv_transpose2d(Tensor.ones(3, 2, 3, 3, device=device), output_padding=1)


# ---------------------------------------------------------------------------------------------------------------
# pooling


@pytest.mark.parametrize(
    "shape,kw",
    [
        ((1, 2, 6, 6), {"kernel_size": 2}),
        ((2, 1, 7, 5), {"kernel_size": (3, 2), "stride": (2, 1)}),
        ((1, 2, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
        ((1, 2, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
        ((1, 2, 6, 7), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
        ((1, 1, 6, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
        ((1, 1, 6, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}),
        ((1, 1, 8, 8), {"kernel_size": 1, "stride": 3}),  # 1x1, stride > kernel
        ((0, 2, 4, 4), {"kernel_size": 2}),
    ],
)
def test_avg_pool2d(device: str, shape: tuple[int, ...], kw: dict) -> None:
    check_op(device, [shape], lambda x: F.avg_pool2d(x, **kw), lambda x: x.avg_pool2d(**kw), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "shape,kw",
    [
        ((1, 2, 6, 6), {"kernel_size": 2}),
        ((2, 1, 7, 5), {"kernel_size": (3, 2), "stride": (2, 1)}),
        ((1, 2, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
        ((1, 2, 9, 8), {"kernel_size": 2, "dilation": 2, "stride": 1}),
        ((1, 2, 6, 7), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
        ((1, 1, 8, 8), {"kernel_size": 2, "stride": 3}),  # stride > kernel
        ((1, 1, 5, 5), {"kernel_size": 1}),
        ((0, 2, 4, 4), {"kernel_size": 2}),
    ],
)
def test_max_pool2d(device: str, shape: tuple[int, ...], kw: dict) -> None:
    # the forward picks elements: exact. The gradient of an element that is the max of overlapping windows is a sum
    # of cotangents, added in a different order than PyTorch: 1 ulp.
    check_op(device, [shape], lambda x: F.max_pool2d(x, **kw), lambda x: x.max_pool2d(**kw), atol=0, rtol=0,
             grad_atol=1e-7, grad_rtol=1e-6)  # fmt: skip


def test_max_pool2d_noncontiguous(device: str) -> None:
    check_op(device, [(1, 2, 5, 6)], lambda x: F.max_pool2d(x.transpose(2, 3), 2),
             lambda x: x.transpose(2, 3).max_pool2d(2), atol=0, rtol=0)  # fmt: skip


def test_max_pool1d_via_1d_kernel(device: str) -> None:
    check_op(device, [(2, 3, 9)], lambda x: F.max_pool1d(x, 3, 2, 1), lambda x: x.max_pool2d((3,), 2, 1, 1),
             atol=0, rtol=0)  # fmt: skip


@pytest.mark.parametrize(
    "kw",
    [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1}, {"kernel_size": 2, "stride": 1, "dilation": 2}],
)
def test_max_pool2d_indices(device: str, kw: dict) -> None:
    (x,) = make_inputs([(2, 2, 7, 6)])
    ref_v, ref_i = F.max_pool2d(torch.tensor(x), return_indices=True, **kw)
    v, i = Tensor(x, device=device).max_pool2d(return_indices=True, **kw)
    np.testing.assert_array_equal(v.numpy(), ref_v.numpy())
    assert i.dtype == dtypes.int64
    np.testing.assert_array_equal(i.numpy(), ref_i.numpy())


def test_max_pool2d_indices_ties_pick_first(device: str) -> None:
    x = np.zeros((1, 1, 4, 4), dtype=np.float32)
    _, ref_i = F.max_pool2d(torch.tensor(x), 2, return_indices=True)
    _, i = Tensor(x, device=device).max_pool2d(2, return_indices=True)
    np.testing.assert_array_equal(i.numpy(), ref_i.numpy())


@pytest.mark.parametrize("kw", [{"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1}])
def test_max_unpool2d(device: str, kw: dict) -> None:
    (x,) = make_inputs([(2, 2, 6, 7)])
    v, i = F.max_pool2d(torch.tensor(x), return_indices=True, **kw)
    size = (6, 7)
    check_op(device, None, lambda v_: F.max_unpool2d(v_, i, output_size=size, **kw),
             lambda v_: v_.max_unpool2d(Tensor(i.numpy(), device=device), output_size=size, **kw),
             values=[v.numpy()], atol=0, rtol=0)  # fmt: skip


def test_max_unpool2d_default_size(device: str) -> None:
    (x,) = make_inputs([(1, 2, 4, 6)])
    v, i = F.max_pool2d(torch.tensor(x), 2, return_indices=True)
    ours = Tensor(v.numpy(), device=device).max_unpool2d(Tensor(i.numpy(), device=device), 2)
    np.testing.assert_array_equal(ours.numpy(), F.max_unpool2d(v, i, 2).numpy())


def test_pool_errors(device: str) -> None:
    x = Tensor.ones(1, 1, 4, 4, device=device)
    with pytest.raises(RuntimeError, match="half of effective kernel"):
        x.max_pool2d(2, padding=2)


# ---------------------------------------------------------------------------------------------------------------
# interpolate


@pytest.mark.parametrize(
    "shape,size,mode,align",
    [
        ((1, 2, 4, 5), (7, 3), "bilinear", False),
        ((1, 2, 4, 5), (7, 3), "bilinear", True),
        ((2, 1, 5, 3), (2, 8), "bilinear", False),
        ((1, 1, 3, 3), (1, 1), "bilinear", True),
        ((1, 2, 7), (4,), "linear", False),
        ((1, 2, 7), (10,), "linear", True),
        ((1, 2, 4, 5), (7, 3), "nearest", False),
        ((1, 2, 5, 3), (2, 9), "nearest", False),
        ((1, 2, 5, 3), (3, 7), "nearest-exact", False),
        ((1, 1, 2, 3, 2), (3, 2, 4), "trilinear", False),
    ],
)
def test_interpolate(device: str, shape, size, mode: str, align: bool) -> None:
    kw = {"align_corners": align} if "linear" in mode else {}
    check_op(device, [shape], lambda x: F.interpolate(x, size=size, mode=mode, **kw),
             lambda x: x.interpolate(size, mode=mode, **kw), atol=1e-6, rtol=1e-5)  # fmt: skip


def test_interpolate_errors(device: str) -> None:
    with pytest.raises(ValueError, match="mode"):
        Tensor.ones(1, 1, 2, 2, device=device).interpolate((3, 3), mode="cubic-ish")


# ---------------------------------------------------------------------------------------------------------------
# normalization


@pytest.mark.parametrize("shape,axis", [((3, 7), -1), ((2, 3, 5), -1), ((2, 3, 4), (1, 2))])
def test_layernorm(device: str, shape: tuple[int, ...], axis) -> None:
    nshape = shape[-1:] if axis == -1 else shape[1:]
    check_op(device, [shape], lambda x: F.layer_norm(x, nshape, eps=1e-5), lambda x: x.layernorm(axis, eps=1e-5),
             atol=1e-5, rtol=1e-5)  # fmt: skip


def test_batchnorm(device: str) -> None:
    # forward value checked against F.batch_norm in eval mode once, the op parity (with mean/var gradients) below
    xs, w, b, mean = make_inputs([(2, 3, 4, 2), (3,), (3,), (3,)])
    var = make_inputs([(3,)], low=0.5, high=2.0, seed=3)[0]
    tt = [torch.tensor(a) for a in (xs, w, b, mean, var)]
    ref = F.batch_norm(tt[0], tt[3], tt[4], tt[1], tt[2], training=False, eps=1e-5).numpy()
    ours = Tensor(xs, device=device).batchnorm(*(Tensor(a, device=device) for a in (w, b, mean)),
                                               Tensor(1 / np.sqrt(var + 1e-5), device=device))  # fmt: skip
    np.testing.assert_allclose(ours.numpy(), ref, atol=1e-5, rtol=1e-5)

    def torch_fn(x, w, b, mean, var):  # F.batch_norm does not differentiate mean/var: the same formula, spelled out
        view = (1, -1, 1, 1)
        return (x - mean.reshape(view)) * w.reshape(view) / (var.reshape(view) + 1e-5).sqrt() + b.reshape(view)

    def tiny_fn(x, w, b, mean, var):
        return x.batchnorm(w, b, mean, (var + 1e-5).sqrt().reciprocal())

    check_op(device, None, torch_fn, tiny_fn, values=[xs, w, b, mean, var], atol=1e-5, rtol=1e-5)


def test_batchnorm_no_affine(device: str) -> None:
    xs, mean = make_inputs([(4, 3), (3,)])
    var = make_inputs([(3,)], low=0.5, high=2.0, seed=3)[0]
    check_op(device, None, lambda x, m, v: (x - m) / v.sqrt(),
             lambda x, m, v: x.batchnorm(None, None, m, v.sqrt().reciprocal()),
             values=[xs, mean, var], atol=1e-5, rtol=1e-5)  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# one_hot, attention, sequential


def test_one_hot(device: str) -> None:
    y = np.array([[0, 3], [2, 1]], dtype=np.int64)
    check_op(device, None, lambda t: F.one_hot(t, 5), lambda t: t.one_hot(5), values=[y])
    check_op(device, None, lambda t: F.one_hot(t), lambda t: t.one_hot(), values=[y])
    check_op(device, None, lambda t: F.one_hot(t, 3), lambda t: t.one_hot(3), values=[np.zeros((0,), np.int64)])


@pytest.mark.parametrize(
    "kw",
    [{}, {"is_causal": True}, {"mask": "bool"}, {"mask": "float"}],
)
def test_scaled_dot_product_attention(device: str, kw: dict) -> None:
    q, k, v = make_inputs([(2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3)])
    values = [q, k, v]
    mask_kind = kw.pop("mask", None)
    if mask_kind == "bool":
        m = make_inputs([(3, 5)], dtype=np.bool_, seed=4)[0]
        m[:, 0] = True  # every row keeps at least one key
        tm, ym = torch.tensor(m), Tensor(m, device=device)
    elif mask_kind == "float":
        m = make_inputs([(3, 5)], seed=4)[0]
        tm, ym = torch.tensor(m), Tensor(m, device=device)
    else:
        tm = ym = None
    check_op(device, None, lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=tm, **kw),
             lambda a, b, c: a.scaled_dot_product_attention(b, c, attn_mask=ym, **kw),
             values=values, atol=1e-5, rtol=1e-5)  # fmt: skip


def test_scaled_dot_product_attention_gqa(device: str) -> None:
    check_op(device, [(1, 4, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)],
             lambda a, b, c: F.scaled_dot_product_attention(a, b, c, enable_gqa=True),
             lambda a, b, c: a.scaled_dot_product_attention(b, c, enable_gqa=True), atol=1e-5, rtol=1e-5)  # fmt: skip


def test_sequential(device: str) -> None:
    check_op(device, [(3, 4)], lambda x: torch.relu(x * 2 + 1), lambda x: x.sequential([lambda t: t * 2 + 1,
             Tensor.relu]))  # fmt: skip
    assert math.isclose(Tensor(2.0, device=device).sequential([]).item(), 2.0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_matmul_multiplies_in_float32_like_torch(device: str, dtype: str) -> None:
    import torch as _torch

    from tinycore.dtype import dtypes as _dtypes

    rng = np.random.default_rng(7)
    a, b = rng.uniform(-3, 3, (19, 70)).astype(np.float32), rng.uniform(-3, 3, (70, 23)).astype(np.float32)
    tdt, ours = getattr(_torch, dtype), getattr(_dtypes, dtype)
    want = (_torch.tensor(a).to(tdt) @ _torch.tensor(b).to(tdt)).float().numpy()
    got = (Tensor(a, device=device).cast(ours) @ Tensor(b, device=device).cast(ours)).cast(_dtypes.float32).numpy()
    # both round the float32 sum once: equal up to that last rounding (one ulp of the 16-bit result)
    np.testing.assert_allclose(got, want, rtol=2 ** -7 if dtype == "bfloat16" else 2**-10, atol=1e-2)
