"""The tinygrad 0.11 optimizer surface (issue 21 B): `LARS`, `Muon`, `SGD(classic=)`, `fused=` / `FUSE_OPTIM`.
Steps are checked against `torch.optim` where torch has the optimizer, else against a numpy transcription of
tinygrad's formula (gradients from torch autograd on the same loss)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from op_helpers import torch
from test_optim import B0, W0, T, X, _run

from tinycore.helpers import Context
from tinycore.nn import optim
from tinycore.tensor import Tensor


def _torch_grads(ws: list[np.ndarray]) -> list[np.ndarray]:
    tw = [torch.tensor(w, requires_grad=True) for w in ws]
    loss = ((torch.tensor(X) @ tw[0] + tw[1]).tanh() - torch.tensor(T)).square().sum()
    loss.backward()
    return [t.grad.numpy().astype(np.float64) for t in tw]


def _run_ref(
    device: str,
    ours: Callable[[list[Tensor]], Any],
    update: Callable[[list[np.ndarray], list[np.ndarray], dict, int], list[np.ndarray]],
    steps: int = 4,
    atol: float = 1e-5,
    lr_schedule: Callable[[int], float] | None = None,
) -> None:
    """Run `ours` and the numpy `update(params, grads, state, step) -> params` side by side."""
    ref = [W0.astype(np.float64), B0.astype(np.float64)]
    ow = [Tensor(W0, device=device), Tensor(B0, device=device)]
    opt, state = ours(ow), {}
    x, t = Tensor(X, device=device), Tensor(T, device=device)
    for step in range(steps):
        if lr_schedule is not None:
            state["lr"] = lr_schedule(step)
            opt.lr.assign(Tensor([state["lr"]], device=device)).realize()
        grads = _torch_grads([r.astype(np.float32) for r in ref])
        ref = update(ref, grads, state, step)
        opt.zero_grad()
        h = x @ ow[0] + ow[1]
        th = 1 - 2 / ((h * 2).exp() + 1)
        ((th - t) * (th - t)).sum().backward()
        opt.step()
        for i, (a, b) in enumerate(zip(ow, ref)):
            np.testing.assert_allclose(a.numpy(), b, atol=atol, rtol=1e-4, err_msg=f"p{i} step {step}")


def _lars_ref(lr, momentum, wd, nesterov, classic, pre_wd, tcoef, ns=None, fused=False):
    """tinygrad 0.11's LARS update, transcribed to numpy (float64)."""

    def update(ps: list[np.ndarray], gs: list[np.ndarray], state: dict, step: int) -> list[np.ndarray]:
        cur_lr = state.get("lr", lr)
        if fused:
            shapes = [p.shape for p in ps]
            ps, gs = [np.concatenate([p.ravel() for p in ps])], [np.concatenate([g.ravel() for g in gs])]
        out = []
        for i, (t, g) in enumerate(zip(ps, gs)):
            r = 1.0
            if tcoef:
                r1, r2 = np.linalg.norm(t), np.linalg.norm(g)
                r = tcoef * r1 / (r2 + wd * r1) if r1 > 0 and r2 > 0 else 1.0
            if pre_wd and wd > 0:
                g = g + wd * t
            if classic:
                g = g * r * cur_lr
            if momentum:
                b = state.setdefault(i, np.zeros_like(t))
                b[...] = momentum * b + g
                g = g + momentum * b if nesterov else b.copy()
            if ns is not None:
                g = _ns_ref(g.reshape(g.shape[0], -1), *ns).reshape(g.shape)
            if not pre_wd and wd > 0:
                t = t * (1 - wd * cur_lr)
            if not classic:
                g = g * r * cur_lr
            out.append(t - g)
        if fused:
            sizes = np.cumsum([0] + [int(np.prod(s)) for s in shapes])
            out = [out[0][a:b].reshape(s) for a, b, s in zip(sizes[:-1], sizes[1:], shapes)]
        return out

    return update


def _ns_ref(g: np.ndarray, steps: int, params: tuple[float, ...], eps: float = 1e-7) -> np.ndarray:
    if g.shape[0] > g.shape[1]:
        return _ns_ref(g.T, steps, params, eps).T
    x = g / (np.linalg.norm(g) + eps)
    for _ in range(steps):
        a = x @ x.T
        x = sum(p * np.linalg.matrix_power(a, i) @ x for i, p in enumerate(params))
    return x


# ----- SGD(classic=) and fused= against torch


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_classic_matches_torch_at_constant_lr(device: str, nesterov: bool) -> None:
    _run(
        device,
        lambda p: optim.SGD(p, lr=0.05, momentum=0.8, weight_decay=0.1, nesterov=nesterov, classic=True),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, weight_decay=0.1, nesterov=nesterov),
    )


def test_sgd_classic_differs_after_an_lr_change(device: str) -> None:
    lrs = [0.05, 0.05, 0.01, 0.02]
    for classic in (False, True):
        _run_ref(
            device,
            lambda p, c=classic: optim.SGD(p, lr=0.05, momentum=0.9, classic=c),
            _lars_ref(0.05, 0.9, 0.0, False, classic, True, 0.0),
            lr_schedule=lambda s: lrs[s],
        )


@pytest.mark.parametrize(
    "make",
    [
        (lambda p: optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1, fused=True),
         lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1)),
        (lambda p: optim.Adam(p, lr=0.01, fused=True), lambda p: torch.optim.Adam(p, lr=0.01)),
        (lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.1, fused=True),
         lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
    ],
    ids=["sgd", "adam", "adamw"],
)  # fmt: skip
def test_fused_elementwise_optimizers_match_torch(device: str, make: tuple) -> None:
    ours, theirs = make
    assert ours([Tensor(W0, device=device)]).fused is True
    _run(device, ours, theirs)


def test_fuse_optim_knob_sets_the_default(device: str) -> None:
    assert optim.SGD([Tensor([1.0], device=device)]).fused is False
    with Context(FUSE_OPTIM=1):
        opt = optim.AdamW([Tensor([1.0], device=device)])
    assert opt.fused is True and len(opt.m) == 1


def test_fused_step_needs_every_gradient(device: str) -> None:
    a, b = Tensor([1.0, 2.0], device=device), Tensor([3.0], device=device)
    opt = optim.SGD([a, b], lr=0.1, fused=True)
    (a * a).sum().backward()
    with pytest.raises(RuntimeError, match=r"parameters \[1\] have no gradient"):
        opt.step()


# ----- LARS and Muon against tinygrad's formula


@pytest.mark.parametrize(
    "kw",
    [
        {},  # tinygrad's defaults: momentum 0.9, wd 1e-4, classic, tcoef 0.001
        {"lr": 0.5, "momentum": 0.8, "weight_decay": 0.01, "nesterov": True, "classic": False, "tcoef": 0.01},
        {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.05, "pre_wd": False, "tcoef": 0.02},
    ],
    ids=["defaults", "nesterov_popular", "no_momentum_post_wd"],
)
def test_lars(device: str, kw: dict) -> None:
    full = {"lr": 0.001, "momentum": 0.9, "weight_decay": 1e-4, "nesterov": False, "classic": True}
    full |= {"pre_wd": True, "tcoef": 0.001} | kw
    ref = _lars_ref(full["lr"], full["momentum"], full["weight_decay"], full["nesterov"], full["classic"],
                    full["pre_wd"], full["tcoef"])  # fmt: skip
    _run_ref(device, lambda p: optim.LARS(p, **kw), ref)


def test_lars_fused_uses_one_norm_over_all_parameters(device: str) -> None:
    ref = _lars_ref(0.5, 0.9, 0.01, False, True, True, 0.01, fused=True)
    _run_ref(device, lambda p: optim.LARS(p, lr=0.5, weight_decay=0.01, tcoef=0.01, fused=True), ref)


def test_sgd_is_a_lars_and_adam_a_lamb(device: str) -> None:
    w = Tensor([1.0], device=device)
    assert isinstance(optim.SGD([w]), optim.LARS) and isinstance(optim.Adam([w]), optim.LAMB)
    assert isinstance(optim.Muon([w]), optim.LARS)


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_muon(device: str, wd: float) -> None:
    coefs = (3.4445, -4.775, 2.0315)
    ref = _lars_ref(0.02, 0.95, wd, True, False, False, 0.0, ns=(5, coefs))
    # the bias is a vector: as a (3, 1) matrix its orthogonalization is its direction
    _run_ref(device, lambda p: optim.Muon(p, weight_decay=wd), ref, atol=2e-5)


def test_newton_schulz_orthogonalizes(device: str) -> None:
    g = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    out = optim.newton_schulz(Tensor(g, device=device), 5, (3.4445, -4.775, 2.0315)).numpy()
    np.testing.assert_allclose(out, _ns_ref(g.astype(np.float64), 5, (3.4445, -4.775, 2.0315)), atol=1e-5)
    sv = np.linalg.svd(out, compute_uv=False)
    assert 0.6 < sv.min() and sv.max() < 1.25  # singular values pushed towards 1 (Muon's quintic stops near it)
    tall = optim.newton_schulz(Tensor(g.T.copy(), device=device), 5, (3.4445, -4.775, 2.0315)).numpy()
    np.testing.assert_allclose(tall, out.T, atol=1e-5)


def test_muon_refuses_fusion(device: str) -> None:
    with pytest.raises(ValueError, match="Muon can't be fused"):
        optim.Muon([Tensor([[1.0]], device=device)], fused=True)
