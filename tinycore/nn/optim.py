"""Optimizers (tinygrad's API, PyTorch's update rules): `SGD`, `LARS`, `Muon`, `Adam`, `AdamW`, `LAMB`.

Every update is written with `Tensor.assign` into the parameters' and the state's own buffers, and `step()`
realizes all of them at once, so a `TinyJit` around a whole training step (forward, `backward()`, `step()`)
captures the update kernels and replays them. The learning rate is a one-element tensor (`opt.lr`): assign to it
to change it without invalidating a captured step.

``fused=True`` (default: the `FUSE_OPTIM` knob, 0) is tinygrad's optimizer fusion: the parameters and gradients are
flattened and concatenated into one vector, the update runs once on it (one state buffer per kind instead of one
per parameter) and the result is split back. Elementwise rules (SGD, Adam, AdamW) give the same numbers either way;
rules with a per-tensor norm (LARS, LAMB trust ratios) then use one norm over all parameters, as in tinygrad. A
fused step needs a gradient for every parameter. Muon can't be fused (its orthogonalization is per matrix).

>>> from tinycore.tensor import Tensor
>>> w = Tensor([1.0, 2.0])
>>> opt = SGD([w], lr=0.1)
>>> opt.zero_grad(); (w * w).sum().backward(); opt.step()  # doctest: +SKIP
>>> w.tolist()  # doctest: +SKIP
[0.8, 1.6]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tinycore.dtype import dtypes
from tinycore.helpers import ContextVar
from tinycore.tensor import Tensor

__all__ = ["FUSE_OPTIM", "LAMB", "LARS", "SGD", "Adam", "AdamW", "Muon", "Optimizer", "OptimizerGroup"]

FUSE_OPTIM = ContextVar("FUSE_OPTIM", 0)  # 1: optimizers fuse their parameters into one vector by default


def _zeros(shape: tuple[int, ...], dtype: Any, device: str) -> Tensor:
    """A realized zero buffer of its own (never shared with another tensor), outside autograd."""
    out = Tensor.empty(*shape, dtype=dtype, device=device)
    out.requires_grad = False
    return out.assign(Tensor.full(shape, 0.0, device=device, dtype=dtype)).realize()


def _scalar(value: float, device: str) -> Tensor:
    out = Tensor.empty(1, dtype=dtypes.float32, device=device)
    out.requires_grad = False
    return out.assign(Tensor([value], device=device, dtype=dtypes.float32)).realize()


def newton_schulz(g: Tensor, steps: int, params: Sequence[float], eps: float = 1e-7) -> Tensor:
    """Approximate orthogonalization of a matrix (Muon's): ``X = G / (|G|_F + eps)``, then `steps` times
    ``X = sum_i params[i] * (X X^T)^i X`` (for 3 coefficients a, b, c: ``aX + (bA + cA^2) X`` with ``A = X X^T``);
    a tall matrix is transposed first so that ``X X^T`` is the smaller Gram matrix. (tinygrad: `Tensor.newton_schulz`.)
    """
    if g.ndim != 2:
        raise ValueError(f"newton_schulz needs a matrix, got shape {tuple(g.shape)}")
    if g.shape[0] > g.shape[1]:
        return newton_schulz(g.T, steps, params, eps).T
    x = g / ((g * g).sum().sqrt() + eps)
    for _ in range(steps):
        gram, term, acc = x @ x.T, x, x * params[0]
        for p in params[1:]:
            term = gram @ term
            acc = acc + term * p
        x = acc
    return x


class Optimizer:
    """Base class: holds the parameters (`requires_grad` True; those left None are set to True) and the buffers
    (the tensors passed with `requires_grad` False, e.g. BatchNorm running statistics, realized with each step).
    `fused`: see the module docstring."""

    def __init__(self, params: Sequence[Tensor], lr: float, fused: Any = FUSE_OPTIM) -> None:
        for p in params:
            if p.requires_grad is None:
                p.requires_grad = True
        self.params: list[Tensor] = list({id(p): p for p in params if p.requires_grad}.values())
        self.buffers: list[Tensor] = list({id(p): p for p in params if not p.requires_grad}.values())
        if not self.params:
            raise ValueError("optimizer got an empty parameter list (no tensor with requires_grad True)")
        self.device = self.params[0].device
        self.lr = _scalar(lr, self.device)
        self.fused = bool(fused)
        if self.fused and len({p.dtype for p in self.params}) > 1:
            raise ValueError("fused=True needs every parameter to have the same dtype")

    def _new_state(self) -> list[Tensor]:
        """Zero state buffers: one per parameter (its shape and dtype), or one flat one when fused."""
        if self.fused:
            total = sum(p.numel() for p in self.params)
            return [_zeros((total,), self.params[0].dtype, self.device)]
        return [_zeros(tuple(p.shape), p.dtype, p.device) for p in self.params]

    def zero_grad(self) -> None:
        """Drop the gradients (`.grad = None`), so the next `backward()` starts from zero."""
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Apply one update to every parameter that has a gradient, and realize parameters, state and buffers."""
        Tensor.realize(*self.schedule_step())

    def schedule_step(self) -> list[Tensor]:
        """Build the (lazy) updates with `assign`; returns every tensor that must be realized for the step."""
        extra = self._begin_step()
        if self.fused:
            missing = [i for i, p in enumerate(self.params) if p.grad is None]
            if missing:
                raise RuntimeError(
                    f"fused optimizer step: parameters {missing} have no gradient (a fused step needs all)"
                )
            flat = Tensor.cat(*[p.detach().reshape(-1) for p in self.params])
            grad = Tensor.cat(*[p.grad.detach().reshape(-1) for p in self.params])
            new, pos = self._step_one(0, flat, grad), 0
            for p in self.params:
                p.assign(new[pos : pos + p.numel()].reshape(p.shape).cast(p.dtype))
                pos += p.numel()
        else:
            for i, p in enumerate(self.params):
                if p.grad is not None:
                    p.assign(self._step_one(i, p.detach(), p.grad.detach()).cast(p.dtype))
        return [*extra, *self._state(), *self.params, *self.buffers]

    def _lr(self, p: Tensor) -> Tensor:
        return self.lr.cast(p.dtype) if p.dtype != self.lr.dtype else self.lr

    def _begin_step(self) -> list[Tensor]:
        """Per-step updates shared by every parameter (e.g. Adam's bias corrections); the tensors to realize."""
        return []

    def _state(self) -> list[Tensor]:
        return []

    def _step_one(self, i: int, t: Tensor, g: Tensor) -> Tensor:
        """The new value of parameter `t` (detached) with gradient `g`, using state slot `i`; updates the state."""
        raise NotImplementedError


class OptimizerGroup(Optimizer):
    """Several optimizers stepped together (e.g. different learning rates for two parameter groups)."""

    def __init__(self, *optimizers: Optimizer) -> None:
        self.optimizers = optimizers
        self.params = [p for o in optimizers for p in o.params]
        self.buffers = [b for o in optimizers for b in o.buffers]

    def __getitem__(self, i: int) -> Optimizer:
        """The `i`-th member optimizer."""
        return self.optimizers[i]

    def zero_grad(self) -> None:
        """Zero the gradients of every member optimizer."""
        for o in self.optimizers:
            o.zero_grad()

    def schedule_step(self) -> list[Tensor]:
        """Every member's step."""
        return [t for o in self.optimizers for t in o.schedule_step()]


class LARS(Optimizer):
    """LARS (layer-wise adaptive rate scaling), tinygrad's general momentum optimizer; `SGD` and `Muon` are LARS
    with particular settings. For each parameter ``t`` with gradient ``g``:

    - trust ratio ``r = tcoef*|t| / (|g| + wd*|t|)`` (1 when either norm is 0; ``r = 1`` when ``tcoef == 0``)
    - ``pre_wd``: ``g += wd * t``
    - ``classic``: ``g = g * r * lr`` before the momentum (the buffer holds lr-scaled steps)
    - momentum: ``b = momentum*b + g``; ``g = g + momentum*b`` (nesterov) or ``b``
    - ``ns_params``: ``g = newton_schulz(g as a (rows, -1) matrix, ns_steps, ns_params)``
    - not ``pre_wd``: ``t *= 1 - wd*lr`` (decoupled decay, Muon's)
    - not ``classic``: ``g = g * r * lr``; then ``t -= g``
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        ns_steps: int = 0,
        ns_params: Sequence[float] | None = None,
        nesterov: bool = False,
        classic: bool = True,
        pre_wd: bool = True,
        tcoef: float = 0.001,
        fused: Any = FUSE_OPTIM,
    ) -> None:
        super().__init__(params, lr, fused)
        if ns_params and self.fused:
            raise ValueError("Newton-Schulz updates (Muon) can't be fused: they orthogonalize each matrix on its own")
        self.momentum, self.wd, self.ns_steps, self.ns_params = momentum, weight_decay, ns_steps, ns_params
        self.nesterov, self.classic, self.pre_wd, self.tcoef = nesterov, classic, pre_wd, tcoef
        self.b = self._new_state() if momentum else []

    def _state(self) -> list[Tensor]:
        return self.b

    def _step_one(self, i: int, t: Tensor, g: Tensor) -> Tensor:
        lr = self._lr(t)
        r: Tensor | float = 1.0
        if self.tcoef != 0:
            r1, r2 = (t * t).sum().sqrt(), (g * g).sum().sqrt()
            r = (r1 > 0).where((r2 > 0).where(r1 * self.tcoef / (r2 + r1 * self.wd), 1.0), 1.0)
        if self.pre_wd and self.wd > 0:
            g = g + t * self.wd
        if self.classic:
            g = (g * r if isinstance(r, Tensor) else g) * lr
        if self.momentum:
            b = self.b[i]
            b.assign(b * self.momentum + g)
            g = g + b * self.momentum if self.nesterov else b
        if self.ns_params:
            g = newton_schulz(g.reshape(g.shape[0], -1), self.ns_steps, self.ns_params).reshape(g.shape)
        if not self.pre_wd and self.wd > 0:
            t = t * (1.0 - lr * self.wd)
        if not self.classic:
            g = (g * r if isinstance(r, Tensor) else g) * lr
        return t - g


class SGD(LARS):
    """Stochastic gradient descent like `torch.optim.SGD` (dampening 0); a `LARS` without trust ratio:

    ``g = grad + weight_decay * p``; with momentum ``b = momentum * b + g`` and ``g = g + momentum * b``
    (nesterov) or ``g = b``; then ``p -= lr * g``. ``classic=True`` scales by lr before the momentum
    (``b = momentum*b + lr*g``, ``p -= b``): the same steps while lr is constant, different after lr changes.
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        classic: bool = False,
        fused: Any = FUSE_OPTIM,
    ) -> None:
        if nesterov and momentum <= 0:
            raise ValueError("nesterov momentum needs momentum > 0")
        super().__init__(params, lr, momentum, weight_decay, 0, None, nesterov, classic, True, 0.0, fused)


def Muon(  # noqa: N802 - tinygrad's name (a function returning a LARS)
    params: Sequence[Tensor],
    lr: float = 0.02,
    momentum: float = 0.95,
    weight_decay: float = 0.0,
    ns_steps: int = 5,
    ns_params: Sequence[float] = (3.4445, -4.775, 2.0315),
    nesterov: bool = True,
    fused: Any = FUSE_OPTIM,
) -> LARS:
    """Muon (momentum orthogonalized by Newton-Schulz), tinygrad's formulation: nesterov momentum on the raw
    gradient, the update of each parameter (seen as a ``(rows, -1)`` matrix) orthogonalized with `newton_schulz`,
    decoupled weight decay ``p *= 1 - lr*wd``, then ``p -= lr * update`` (no shape-dependent scale factor)."""
    if fused:
        raise ValueError("Muon can't be fused (FUSE_OPTIM / fused=True): it orthogonalizes each matrix on its own")
    return LARS(params, lr, momentum, weight_decay, ns_steps, ns_params, nesterov, False, False, 0.0, False)


class LAMB(Optimizer):
    """LAMB (layer-wise adaptive moments); with ``adam=True`` it is Adam with decoupled weight decay (AdamW).

    ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g*g``, ``u = (m/(1-b1**t)) / (sqrt(v/(1-b2**t)) + eps)``;
    LAMB: ``u += wd*p`` and ``p -= lr * (|p|/|u|) * u`` (ratio 1 when a norm is 0);
    Adam(W): ``p -= lr * (u + wd*p)`` (the decay scaled by lr, as `torch.optim.AdamW`).
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        adam: bool = False,
        fused: Any = FUSE_OPTIM,
    ) -> None:
        super().__init__(params, lr, fused)
        self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
        self.b1_t, self.b2_t = _scalar(1.0, self.device), _scalar(1.0, self.device)
        self.m = self._new_state()
        self.v = self._new_state()

    def _grad(self, t: Tensor, g: Tensor) -> Tensor:
        return g

    def _begin_step(self) -> list[Tensor]:
        self.b1_t.assign(self.b1_t * self.b1)
        self.b2_t.assign(self.b2_t * self.b2)
        return [self.b1_t, self.b2_t]

    def _state(self) -> list[Tensor]:
        return [*self.m, *self.v]

    def _step_one(self, i: int, t: Tensor, g: Tensor) -> Tensor:
        g = self._grad(t, g)
        m, v = self.m[i], self.v[i]
        m.assign(m * self.b1 + g * (1.0 - self.b1))
        v.assign(v * self.b2 + g * g * (1.0 - self.b2))
        m_hat = m / (1.0 - self.b1_t).cast(t.dtype)
        v_hat = v / (1.0 - self.b2_t).cast(t.dtype)
        up = m_hat / (v_hat.sqrt() + self.eps)
        if self.wd:
            up = up + t * self.wd
        if not self.adam:
            p_norm = (t * t).sum().sqrt()
            u_norm = (up * up).sum().sqrt()
            ok = (p_norm > 0) & (u_norm > 0)
            up = up * ok.where(p_norm / u_norm.maximum(1e-30), 1.0).cast(t.dtype)
        return t - up * self._lr(t)


def AdamW(  # noqa: N802 - tinygrad's name
    params: Sequence[Tensor],
    lr: float = 0.001,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.01,
    fused: Any = FUSE_OPTIM,
) -> LAMB:
    """Adam with decoupled weight decay, like `torch.optim.AdamW` (same defaults)."""
    return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True, fused=fused)


class Adam(LAMB):
    """Adam like `torch.optim.Adam` (a `LAMB` with ``adam=True``, as in tinygrad). The keyword-only
    ``weight_decay`` (a tinycore extra, tinygrad's Adam has none) is L2 as in PyTorch: added to the gradient, not
    decoupled."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        fused: Any = FUSE_OPTIM,
        *,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr, b1, b2, eps, 0.0, adam=True, fused=fused)
        self.l2 = weight_decay

    def _grad(self, t: Tensor, g: Tensor) -> Tensor:
        return g + t * self.l2 if self.l2 else g
