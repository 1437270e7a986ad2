"""Scheduler realize decisions that keep work from being recomputed: a costly value of other kernels' outputs that
is broadcast into a reduce is computed once (`FusionGraph._mark_broadcast_into_reduce`), the max of a softmax builds
no gradient graph, and an optimizer update reads its target's old contents without copying it first."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore.device import renderer_setting
from tinycore.engine.realize import run_schedule
from tinycore.engine.realized import buffer_of
from tinycore.engine.schedule import ScheduleItem
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops


@pytest.fixture
def python_default(python_default_device: None) -> None:
    """PYTHON as the default device for this test."""


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _ops(si: ScheduleItem) -> list[Ops]:
    return [u.op for u in si.ast.toposort()]


def _matmul_kernels(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """Kernels reducing a 3-d product (a matrix product before its reduce)."""
    return [si for si in items if any(u.op is Ops.REDUCE_AXIS and len(u.src[0].shape) == 3 for u in si.ast.toposort())]


def _softmax_ce_step(device: str, batch: int = 8, hidden: int = 16, classes: int = 5):
    """The last layer of an MLP with a softmax cross-entropy loss, backward built: (h, w, labels, loss)."""
    h = Tensor(_data(batch, hidden), device=device, requires_grad=True).realize()
    w = Tensor(_data(hidden, classes, seed=1), device=device, requires_grad=True).realize()
    labels = np.random.default_rng(2).integers(0, classes, batch).astype(np.int32)
    y = Tensor(labels, device=device).realize()
    logits = h @ w
    onehot = (Tensor.arange(classes, device=device).reshape(1, classes) == y.reshape(batch, 1)).cast(logits.dtype)
    loss = -(logits.log_softmax(1) * onehot).sum() / batch
    loss.backward()
    return h, w, labels, loss


# ---------------------------------------------------------------------------------------------------------------
# a costly value broadcast into a reduce is computed once


def test_softmax_cross_entropy_gradient_is_computed_once_not_inside_the_matmuls(device: str) -> None:
    h, w, labels, loss = _softmax_ce_step(device)
    assert h.grad is not None and w.grad is not None
    items = w.grad.schedule(h.grad)
    matmuls = _matmul_kernels(items)
    assert len(matmuls) == 3  # the forward logits, dW = h^T @ dlogits, dh = dlogits @ w^T
    for si in matmuls:  # neither gradient matmul recomputes the softmax per element of its broadcast
        assert Ops.EXP2 not in _ops(si) and Ops.FDIV not in _ops(si)
    exps = [si for si in items if Ops.EXP2 in _ops(si)]
    assert len(exps) == 2  # the sum of exps (forward) and the stored gradient of the logits
    run_schedule(items)
    hg, wg = h.grad.numpy(), w.grad.numpy()

    th = torch.tensor(_data(8, 16), requires_grad=True)
    tw = torch.tensor(_data(16, 5, seed=1), requires_grad=True)
    tloss = torch.nn.functional.cross_entropy(th @ tw, torch.from_numpy(labels).long())
    tloss.backward()
    assert th.grad is not None and tw.grad is not None
    np.testing.assert_allclose(float(loss.item()), float(tloss.detach()), rtol=1e-5)
    np.testing.assert_allclose(wg, tw.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(hg, th.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_softmax_broadcast_into_a_matmul_is_stored_once(device: str) -> None:
    a, b = _data(8, 10), _data(10, 6, seed=1)
    x, w = Tensor(a, device=device).realize(), Tensor(b, device=device).realize()
    out = x.softmax(1) @ w
    items = out.schedule()
    # max, sum of exps, the softmax, the matmul reading it; one kernel for the softmax where rows fuse (CLANG)
    assert len(items) == (2 if renderer_setting(device, "row_reduce_bytes", 0) else 4)
    (matmul,) = _matmul_kernels(items)
    assert Ops.EXP2 not in _ops(matmul)
    run_schedule(items)
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(out.numpy(), (e / e.sum(1, keepdims=True)) @ b, rtol=1e-5, atol=1e-5)


def test_cheap_value_of_a_reduction_stays_fused_into_the_matmul(python_default: None) -> None:
    x, w = Tensor.empty(8, 10), Tensor.empty(10, 6)
    items = ((x - x.mean(1, keepdim=True)) @ w).schedule()
    assert len(items) == 2  # the mean; the centering is recomputed inside the matmul (one load, one op)
    assert Ops.SUB in _ops(_matmul_kernels(items)[0])


def test_costly_value_of_input_buffers_only_stays_fused(python_default: None) -> None:
    x, w = Tensor.empty(8, 10), Tensor.empty(10, 6)
    assert len((x.exp() @ w).schedule()) == 1
    assert len(((x @ w) + 1).relu().schedule()) == 1


def test_mlp_train_step_kernel_count_and_update(device: str) -> None:
    """A two-layer SGD step: every gradient matmul reads stored gradients, and the update matches torch."""
    from tinycore.nn.optim import SGD

    shapes = [(12, 16), (16,), (16, 5), (5,)]
    init = [_data(*s, seed=i) * 0.3 for i, s in enumerate(shapes)]
    params = [Tensor(p, device=device, requires_grad=True).realize() for p in init]
    xa, labels = _data(8, 12, seed=9), np.random.default_rng(3).integers(0, 5, 8)
    x, y = Tensor(xa, device=device).realize(), Tensor(labels.astype(np.int32), device=device).realize()
    opt = SGD(params, lr=0.1)
    w1, b1, w2, b2 = params
    logits = (x @ w1 + b1).relu() @ w2 + b2
    onehot = (Tensor.arange(5, device=device).reshape(1, 5) == y.reshape(8, 1)).cast(logits.dtype)
    loss = -(logits.log_softmax(1) * onehot).sum() / 8
    loss.backward()
    items = loss.schedule(*opt.schedule_step())
    for si in _matmul_kernels(items):
        assert Ops.EXP2 not in _ops(si)
    assert not any(si.ast.op is Ops.COPY for si in items)
    run_schedule(items)

    tp = [torch.tensor(p, requires_grad=True) for p in init]
    tloss = torch.nn.functional.cross_entropy(
        torch.relu(torch.from_numpy(xa) @ tp[0] + tp[1]) @ tp[2] + tp[3], torch.from_numpy(labels).long()
    )
    tloss.backward()
    np.testing.assert_allclose(float(loss.item()), float(tloss.detach()), rtol=1e-5)  # the loss before the update
    for p, tparam in zip(params, tp):
        assert tparam.grad is not None
        np.testing.assert_allclose(p.numpy(), (tparam - 0.1 * tparam.grad).detach().numpy(), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# softmax: the max is a shift, so it builds no gradient graph


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_gradient_has_no_max_backward_and_matches_torch(device: str, fn: str) -> None:
    a = _data(6, 7)
    a[0, :3] = 2.5  # a tied maximum: the max's own gradient would spread over the ties
    g = _data(6, 7, seed=4)
    x = Tensor(a, device=device, requires_grad=True).realize()
    (getattr(x, fn)(1) * Tensor(g, device=device)).sum().backward()
    assert x.grad is not None
    items = x.grad.schedule()
    assert not any(Ops.CMPEQ in _ops(si) or Ops.CMPNE in _ops(si) for si in items)  # no tie mask of a max
    run_schedule(items)
    tx = torch.tensor(a, requires_grad=True)
    (getattr(tx, fn)(1) * torch.from_numpy(g)).sum().backward()
    assert tx.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_softmax_forward_is_still_three_kernels(python_default: None) -> None:
    assert len(Tensor.empty(8, 16).softmax(-1).schedule()) == 3
    assert len(Tensor.empty(8, 16).log_softmax(-1).schedule()) <= 3


# ---------------------------------------------------------------------------------------------------------------
# assign after read: the old contents are read by earlier kernels, no copy of the target


def test_update_reading_old_weights_in_earlier_kernels_needs_no_copy(device: str) -> None:
    a, b = _data(5, 4), _data(4, 3, seed=1) * 0.5
    x = Tensor(a, device=device).realize()
    w = Tensor(b, device=device, requires_grad=True).realize()
    target = buffer_of(w.uop)
    loss = (x @ w).square().sum()  # its gradient reads x @ w, computed from the old w
    loss.backward()
    assert w.grad is not None
    grad, w.grad = w.grad, None
    w.assign(w.detach() - 0.01 * grad)
    # nothing else alive reads the old w (a live lazy loss or .grad would be computed first, into its own buffer:
    # tests/faults/test_evaluation_order.py)
    del loss, grad
    items = w.schedule()
    writes = [si for si in items if target in si.outputs]
    assert len(writes) == 1 and len(items) == 2  # x @ w, then the update (with dW fused in) straight into w
    assert not any(si.ast.op is Ops.COPY or si.bufs[0].size == target.size and si is not writes[0] for si in items)
    assert all(target not in si.outputs for si in items[: items.index(writes[0])])
    run_schedule(items)
    np.testing.assert_allclose(w.numpy(), b - 0.01 * (2 * a.T @ (a @ b)), rtol=1e-5, atol=1e-5)
