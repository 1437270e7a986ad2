"""`tinycore.nn.optim` against `torch.optim`: identical initial parameters, several steps on the same loss, the
parameters must match after every step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from op_helpers import torch

from tinycore.nn import optim
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops

W0 = np.random.default_rng(0).uniform(-1, 1, (4, 3)).astype(np.float32)
B0 = np.random.default_rng(1).uniform(-1, 1, (3,)).astype(np.float32)
X = np.random.default_rng(2).uniform(-1, 1, (5, 4)).astype(np.float32)
T = np.random.default_rng(3).uniform(-1, 1, (5, 3)).astype(np.float32)


def _run(
    device: str, ours: Callable[[list[Tensor]], Any], theirs: Callable[[list[Any]], Any], steps: int = 4, atol=1e-5
) -> None:
    tw = [torch.tensor(W0, requires_grad=True), torch.tensor(B0, requires_grad=True)]
    ow = [Tensor(W0, device=device), Tensor(B0, device=device)]
    topt, oopt = theirs(tw), ours(ow)
    assert all(p.requires_grad is True for p in ow)
    x, t = Tensor(X, device=device), Tensor(T, device=device)
    for step in range(steps):
        topt.zero_grad()
        loss = ((torch.tensor(X) @ tw[0] + tw[1]).tanh() - torch.tensor(T)).square().sum()
        loss.backward()
        topt.step()
        oopt.zero_grad()
        h = x @ ow[0] + ow[1]
        th = 1 - 2 / ((h * 2).exp() + 1)  # tanh from core ops
        ((th - t) * (th - t)).sum().backward()
        oopt.step()
        for i, (a, b) in enumerate(zip(ow, tw)):
            np.testing.assert_allclose(a.numpy(), b.detach().numpy(), atol=atol, rtol=1e-5, err_msg=f"p{i} step {step}")


def test_sgd(device: str) -> None:
    _run(device, lambda p: optim.SGD(p, lr=0.05), lambda p: torch.optim.SGD(p, lr=0.05))


def test_sgd_momentum_weight_decay(device: str) -> None:
    _run(
        device,
        lambda p: optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1),
    )


def test_sgd_nesterov(device: str) -> None:
    _run(
        device,
        lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
    )


def test_adam(device: str) -> None:
    _run(device, lambda p: optim.Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01))


def test_adam_l2(device: str) -> None:
    _run(
        device,
        lambda p: optim.Adam(p, lr=0.01, weight_decay=0.1),
        lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.1),
    )


def test_adamw(device: str) -> None:
    _run(
        device,
        lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.1),
        lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
    )


def test_lamb_decreases_loss(device: str) -> None:
    w = Tensor(W0, device=device)
    opt = optim.LAMB([w], lr=0.01, weight_decay=0.01)
    x, t = Tensor(X, device=device), Tensor(T, device=device)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = ((x @ w - t) * (x @ w - t)).sum()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    # the first LAMB step moves w by lr * |w| along the normalized update direction
    assert np.isfinite(w.numpy()).all()


def test_zero_grad_and_step_skip_params_without_grad(device: str) -> None:
    a, b = Tensor([1.0, 2.0], device=device), Tensor([3.0], device=device)
    opt = optim.SGD([a, b], lr=0.5)
    (a * a).sum().backward()
    opt.step()
    assert a.numpy().tolist() == [0.0, 0.0]
    assert b.numpy().tolist() == [3.0]
    opt.zero_grad()
    assert a.grad is None


def test_lr_is_a_tensor_that_can_be_changed(device: str) -> None:
    a = Tensor([1.0], device=device)
    opt = optim.SGD([a], lr=0.5)
    opt.lr.assign(Tensor([0.25], device=device)).realize()
    (a * 4).sum().backward()
    opt.step()
    assert a.numpy().tolist() == [0.0]


def test_buffers_are_realized_with_the_step(device: str) -> None:
    a = Tensor([1.0], device=device)
    stat = Tensor.empty(1, device=device).assign(Tensor([0.0], device=device)).realize()
    stat.requires_grad = False
    opt = optim.SGD([a, stat], lr=0.1)
    assert opt.buffers == [stat]
    stat.assign(stat + 1)
    (a * 1).sum().backward()
    opt.step()
    assert stat.uop.op in (Ops.BUFFER, Ops.RESHAPE)  # realized by the step, not a pending ASSIGN
    assert stat.numpy().tolist() == [1.0]


def test_empty_parameter_list_raises() -> None:
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)


def test_nesterov_needs_momentum(device: str) -> None:
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([Tensor([1.0], device=device)], nesterov=True)
