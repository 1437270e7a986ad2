"""Optimizers (tinygrad's API, PyTorch's update rules): `SGD`, `Adam`, `AdamW`, `LAMB`.

Every update is written with `Tensor.assign` into the parameters' and the state's own buffers, and `step()`
realizes all of them at once, so a `TinyJit` around a whole training step (forward, `backward()`, `step()`)
captures the update kernels and replays them. The learning rate is a one-element tensor (`opt.lr`): assign to it
to change it without invalidating a captured step.

>>> from tinycore.tensor import Tensor
>>> w = Tensor([1.0, 2.0])
>>> opt = SGD([w], lr=0.1)
>>> opt.zero_grad(); (w * w).sum().backward(); opt.step()  # doctest: +SKIP
>>> w.tolist()  # doctest: +SKIP
[0.8, 1.6]
"""

from __future__ import annotations

from collections.abc import Sequence

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

__all__ = ["SGD", "Adam", "AdamW", "LAMB", "OptimizerGroup", "Optimizer"]


def _state_like(t: Tensor, value: float = 0.0) -> Tensor:
    """A realized buffer of `t`'s shape filled with `value` (its own buffer: never shared with another tensor)."""
    out = Tensor.empty(*t.shape, dtype=t.dtype, device=t.device)
    out.requires_grad = False
    return out.assign(Tensor.full(t.shape, value, device=t.device, dtype=t.dtype)).realize()


def _scalar(value: float, device: str) -> Tensor:
    out = Tensor.empty(1, dtype=dtypes.float32, device=device)
    out.requires_grad = False
    return out.assign(Tensor([value], device=device, dtype=dtypes.float32)).realize()


class Optimizer:
    """Base class: holds the parameters (`requires_grad` True; those left None are set to True) and the buffers
    (the tensors passed with `requires_grad` False, e.g. BatchNorm running statistics, realized with each step)."""

    def __init__(self, params: Sequence[Tensor], lr: float) -> None:
        for p in params:
            if p.requires_grad is None:
                p.requires_grad = True
        self.params: list[Tensor] = list({id(p): p for p in params if p.requires_grad}.values())
        self.buffers: list[Tensor] = list({id(p): p for p in params if not p.requires_grad}.values())
        if not self.params:
            raise ValueError("optimizer got an empty parameter list (no tensor with requires_grad True)")
        self.device = self.params[0].device
        self.lr = _scalar(lr, self.device)

    def zero_grad(self) -> None:
        """Drop the gradients (`.grad = None`), so the next `backward()` starts from zero."""
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Apply one update to every parameter that has a gradient, and realize parameters, state and buffers."""
        Tensor.realize(*self.schedule_step())

    def schedule_step(self) -> list[Tensor]:
        """Build the (lazy) updates with `assign`; returns every tensor that must be realized for the step."""
        updated = self._update([p for p in self.params if p.grad is not None])
        return [*updated, *self.params, *self.buffers]

    def _lr(self, p: Tensor) -> Tensor:
        return self.lr.cast(p.dtype) if p.dtype != self.lr.dtype else self.lr

    def _update(self, params: list[Tensor]) -> list[Tensor]:
        raise NotImplementedError


class OptimizerGroup(Optimizer):
    """Several optimizers stepped together (e.g. different learning rates for two parameter groups)."""

    def __init__(self, *optimizers: Optimizer) -> None:
        self.optimizers = optimizers
        self.params = [p for o in optimizers for p in o.params]
        self.buffers = [b for o in optimizers for b in o.buffers]

    def zero_grad(self) -> None:
        """Zero the gradients of every member optimizer."""
        for o in self.optimizers:
            o.zero_grad()

    def schedule_step(self) -> list[Tensor]:
        """Every member's step."""
        return [t for o in self.optimizers for t in o.schedule_step()]


class SGD(Optimizer):
    """Stochastic gradient descent like `torch.optim.SGD` (dampening 0):

    ``g = grad + weight_decay * p``; with momentum ``b = momentum * b + g`` and ``g = g + momentum * b``
    (nesterov) or ``g = b``; then ``p -= lr * g``.
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        super().__init__(params, lr)
        if nesterov and momentum <= 0:
            raise ValueError("nesterov momentum needs momentum > 0")
        self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
        self.b = [_state_like(p) for p in self.params] if momentum else []

    def _update(self, params: list[Tensor]) -> list[Tensor]:
        out: list[Tensor] = []
        index = {id(p): i for i, p in enumerate(self.params)}
        for p in params:
            g = p.grad.detach()
            if self.wd:
                g = g + p.detach() * self.wd
            if self.momentum:
                b = self.b[index[id(p)]]
                b.assign(b * self.momentum + g)
                g = g + b * self.momentum if self.nesterov else b
                out.append(b)
            p.assign(p.detach() - g * self._lr(p))
        return out


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
    ) -> None:
        super().__init__(params, lr)
        self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
        self.b1_t, self.b2_t = _scalar(1.0, self.device), _scalar(1.0, self.device)
        self.m = [_state_like(p) for p in self.params]
        self.v = [_state_like(p) for p in self.params]

    def _grad(self, p: Tensor) -> Tensor:
        return p.grad.detach()

    def _update(self, params: list[Tensor]) -> list[Tensor]:
        self.b1_t.assign(self.b1_t * self.b1)
        self.b2_t.assign(self.b2_t * self.b2)
        out: list[Tensor] = [self.b1_t, self.b2_t]
        index = {id(p): i for i, p in enumerate(self.params)}
        for p in params:
            i = index[id(p)]
            g = self._grad(p)
            m, v = self.m[i], self.v[i]
            m.assign(m * self.b1 + g * (1.0 - self.b1))
            v.assign(v * self.b2 + g * g * (1.0 - self.b2))
            m_hat = m / (1.0 - self.b1_t).cast(p.dtype)
            v_hat = v / (1.0 - self.b2_t).cast(p.dtype)
            up = m_hat / (v_hat.sqrt() + self.eps)
            pd = p.detach()
            if self.wd:
                up = up + pd * self.wd
            if not self.adam:
                p_norm = (pd * pd).sum().sqrt()
                u_norm = (up * up).sum().sqrt()
                ok = (p_norm > 0) & (u_norm > 0)
                ratio = ok.where(p_norm / u_norm.maximum(1e-30), 1.0).cast(p.dtype)
                up = up * ratio
            p.assign(pd - up * self._lr(p))
            out += [m, v]
        return out


def AdamW(  # noqa: N802 - tinygrad's name
    params: Sequence[Tensor],
    lr: float = 0.001,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.01,
) -> LAMB:
    """Adam with decoupled weight decay, like `torch.optim.AdamW` (same defaults)."""
    return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True)


class Adam(LAMB):
    """Adam like `torch.optim.Adam`: ``weight_decay`` is L2 (added to the gradient), not decoupled."""

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr, b1, b2, eps, 0.0, adam=True)
        self.l2 = weight_decay

    def _grad(self, p: Tensor) -> Tensor:
        g = p.grad.detach()
        return g + p.detach() * self.l2 if self.l2 else g
