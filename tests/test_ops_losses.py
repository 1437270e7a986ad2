"""Op parity with PyTorch for the losses of `tinycore/frontend/processing.py`, forward and backward (float32), on
every installed device. Tolerances: atol 1e-6 / rtol 1e-5 for losses of a handful of terms (one log/exp each),
atol 1e-5 where a mean or sum over up to ~60 terms is taken."""

from __future__ import annotations

import numpy as np
import pytest
from op_helpers import check_op, make_inputs, torch

from tinycore.tensor import Tensor

F = torch.nn.functional
TOL = dict(atol=1e-5, rtol=1e-5)
REDUCTIONS = ["mean", "sum", "none"]


def _labels(shape: tuple[int, ...], n_classes: int, seed: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n_classes, shape).astype(np.int64)


def _check_with_labels(device, x_shape, y, torch_fn, tiny_fn, **tol) -> None:
    """check_op on the float input only, with integer labels ``y`` closed over (no gradient for labels)."""
    ty, yy = torch.tensor(y), Tensor(y, device=device)
    check_op(device, [x_shape], lambda x: torch_fn(x, ty), lambda x: tiny_fn(x, yy), **tol)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_crossentropy(device: str, reduction: str) -> None:
    p = make_inputs([(3, 5)], low=0.02, high=0.98)[0]
    y = make_inputs([(3, 5)], low=0.0, high=1.0, seed=2)[0]
    check_op(device, None, lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction),
             lambda a, b: a.binary_crossentropy(b, reduction=reduction), values=[p, y], **TOL)  # fmt: skip


def test_binary_crossentropy_clamps_log(device: str) -> None:
    p = np.array([0.0, 1.0, 0.5], dtype=np.float32)
    y = np.array([1.0, 0.0, 1.0], dtype=np.float32)
    ours = Tensor(p, device=device).binary_crossentropy(Tensor(y, device=device), reduction="none").numpy()
    ref = F.binary_cross_entropy(torch.tensor(p), torch.tensor(y), reduction="none").numpy()
    np.testing.assert_allclose(ours, ref, atol=1e-6, rtol=1e-6)  # 100 where log(0) is clamped


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_crossentropy_logits(device: str, reduction: str) -> None:
    x = make_inputs([(4, 3)], low=-30.0, high=30.0)[0]  # large logits: the stable form must not overflow
    y = make_inputs([(4, 3)], low=0.0, high=1.0, seed=2)[0]
    check_op(device, None, lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction=reduction),
             lambda a, b: a.binary_crossentropy_logits(b, reduction=reduction), values=[x, y], **TOL)  # fmt: skip


def test_binary_crossentropy_logits_pos_weight(device: str) -> None:
    x, y = make_inputs([(4, 3), (4, 3)], low=-3.0, high=3.0)
    y = (y > 0).astype(np.float32)
    pw = make_inputs([(3,)], low=0.5, high=3.0, seed=7)[0]  # torch does not differentiate pos_weight: a constant
    tw, yw = torch.tensor(pw), Tensor(pw, device=device)
    check_op(device, None, lambda a, b: F.binary_cross_entropy_with_logits(a, b, pos_weight=tw),
             lambda a, b: a.binary_crossentropy_logits(b, pos_weight=yw), values=[x, y], **TOL)  # fmt: skip


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_sparse_categorical_crossentropy(device: str, reduction: str, smoothing: float) -> None:
    y = _labels((6,), 5)
    y[2] = -1  # ignored (tinygrad's default ignore_index)
    _check_with_labels(
        device, (6, 5), y,
        lambda x, t: F.cross_entropy(x, t, ignore_index=-1, label_smoothing=smoothing, reduction=reduction),
        lambda x, t: x.sparse_categorical_crossentropy(t, label_smoothing=smoothing, reduction=reduction),
        **TOL,
    )  # fmt: skip


def test_sparse_categorical_crossentropy_ignore_index(device: str) -> None:
    y = _labels((2, 4), 3)
    y[0, 1] = y[1, 3] = 7
    _check_with_labels(device, (2, 4, 3), y,
                       lambda x, t: F.cross_entropy(x.permute(0, 2, 1), t, ignore_index=7),
                       lambda x, t: x.sparse_categorical_crossentropy(t, ignore_index=7), **TOL)  # fmt: skip


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_indices(device: str, reduction: str) -> None:
    _check_with_labels(device, (5, 4), _labels((5,), 4), lambda x, t: F.cross_entropy(x, t, reduction=reduction),
                       lambda x, t: x.cross_entropy(t, reduction=reduction), **TOL)  # fmt: skip


def test_cross_entropy_indices_spatial_smoothing(device: str) -> None:
    _check_with_labels(device, (2, 4, 3, 2), _labels((2, 3, 2), 4),
                       lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
                       lambda x, t: x.cross_entropy(t, label_smoothing=0.1), **TOL)  # fmt: skip


def test_cross_entropy_unbatched(device: str) -> None:
    ty, yy = torch.tensor(2), Tensor(2, device=device)
    check_op(device, [(4,)], lambda x: F.cross_entropy(x, ty), lambda x: x.cross_entropy(yy), **TOL)


def test_tensor_from_0d_numpy_keeps_shape(device: str) -> None:
    assert Tensor(np.array(2, dtype=np.int64), device=device).shape == ()


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_probabilities(device: str, reduction: str) -> None:
    x = make_inputs([(3, 4)])[0]
    p = torch.softmax(torch.tensor(make_inputs([(3, 4)], seed=9)[0]), 1).numpy()
    check_op(device, None, lambda a, b: F.cross_entropy(a, b, reduction=reduction, label_smoothing=0.3),
             lambda a, b: a.cross_entropy(b, reduction=reduction, label_smoothing=0.3),
             values=[x, p], **TOL)  # fmt: skip


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss(device: str, reduction: str) -> None:
    _check_with_labels(device, (5, 4), _labels((5,), 4), lambda x, t: F.nll_loss(x, t, reduction=reduction),
                       lambda x, t: x.nll_loss(t, reduction=reduction), **TOL)  # fmt: skip


def test_nll_loss_weight_ignore_index(device: str) -> None:
    y = _labels((2, 3, 2), 4)
    y[0, 0, 1] = 2
    w = make_inputs([(4,)], low=0.5, high=2.0, seed=4)[0]  # torch does not differentiate the class weight
    tw, yw = torch.tensor(w), Tensor(w, device=device)
    _check_with_labels(device, (2, 4, 3, 2), y, lambda x, t: F.nll_loss(x, t, weight=tw, ignore_index=2),
                       lambda x, t: x.nll_loss(t, weight=yw, ignore_index=2), **TOL)  # fmt: skip


def test_bad_reduction(device: str) -> None:
    x, y = Tensor.ones(2, 3, device=device), Tensor([0, 1], device=device)
    for fn in (
        lambda: x.cross_entropy(y, reduction="avg"),
        lambda: x.nll_loss(y, reduction="avg"),
        lambda: x.sparse_categorical_crossentropy(y, reduction="avg"),
        lambda: x.binary_crossentropy(x, reduction="avg"),
        lambda: x.binary_crossentropy_logits(x, reduction="avg"),
    ):
        with pytest.raises(ValueError, match="must be one of"):
            fn()
