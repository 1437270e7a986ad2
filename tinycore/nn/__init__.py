"""Neural-network layers with tinygrad's API and initializations (PyTorch's math).

Layers are plain classes: parameters are `Tensor` attributes (found by `tinycore.nn.state.get_parameters`), and
calling the layer applies it. Parameters start with `requires_grad` None; an optimizer sets it to True for the
tensors it updates. Every parameter and running statistic has a buffer of its own (two layers never share one),
so optimizers can update them in place with `assign` and a `TinyJit` can capture a whole training step.

Initializations (tinygrad's, which equal PyTorch's defaults):

- `Linear`, `Conv2d`: weight and bias uniform in ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` (kaiming uniform, a=sqrt(5))
- norms: weight 1, bias 0; `BatchNorm` running mean 0, running var 1
- `Embedding`: glorot (xavier) uniform, ``bound = sqrt(6 / (vocab_size + embed_size))``
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tinycore.dtype import dtypes
from tinycore.helpers import prod
from tinycore.nn import optim, state  # noqa: F401 - tinycore.nn.optim / tinycore.nn.state
from tinycore.tensor import Tensor

__all__ = [
    "BatchNorm",
    "BatchNorm2d",
    "Conv2d",
    "Embedding",
    "GroupNorm",
    "LayerNorm",
    "Linear",
    "RMSNorm",
    "optim",
    "state",
]


def _own_buffer(value: Tensor) -> Tensor:
    """`value` written into a fresh buffer of its own (constants are shared, hash-consed nodes otherwise)."""
    out = Tensor.empty(*value.shape, dtype=value.dtype, device=value.device)
    return out.assign(value)


def _uniform(shape: tuple[int, ...], bound: float, device: str | None = None) -> Tensor:
    return _own_buffer(Tensor.rand(*shape, device=device) * (2 * bound) - bound)


def _const(shape: tuple[int, ...], value: float, device: str | None = None, dtype: Any = None) -> Tensor:
    return _own_buffer(Tensor.full(shape, value, device=device, dtype=dtype or dtypes.default_float))


def _pair(x: int | Sequence[int], n: int = 2) -> tuple[int, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,) * n


def _normalize(x: Tensor, axes: tuple[int, ...], eps: float) -> Tensor:
    mean = x.mean(axes, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(axes, keepdim=True)
    return centered * (var + eps).sqrt().reciprocal()


class Linear:
    """``y = x @ weight.T + bias``; weight ``(out_features, in_features)``, like `torch.nn.Linear`."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: str | None = None) -> None:
        bound = 1 / math.sqrt(in_features)
        self.weight = _uniform((out_features, in_features), bound, device)
        self.bias: Tensor | None = _uniform((out_features,), bound, device) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        out = x @ self.weight.T
        return out + self.bias if self.bias is not None else out


class Conv2d:
    """2-D convolution like `torch.nn.Conv2d` (weight ``(out, in/groups, kh, kw)``), through `Tensor.conv2d`."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | str | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        device: str | None = None,
    ) -> None:
        self.kernel_size = _pair(kernel_size)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        fan_in = (in_channels // groups) * prod(self.kernel_size)
        bound = 1 / math.sqrt(fan_in)
        self.weight = _uniform((out_channels, in_channels // groups, *self.kernel_size), bound, device)
        self.bias: Tensor | None = _uniform((out_channels,), bound, device) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv2d(
            self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation, padding=self.padding
        )


class BatchNorm:
    """Batch normalization over every axis but 1 (`torch.nn.BatchNorm1d/2d/3d`).

    With `Tensor.training` set, normalizes with the batch statistics and updates the running ones (the variance
    unbiased, as PyTorch does) with `assign`; otherwise uses the running statistics.
    """

    def __init__(
        self,
        sz: int,
        eps: float = 1e-5,
        affine: bool = True,
        track_running_stats: bool = True,
        momentum: float = 0.1,
        device: str | None = None,
    ) -> None:
        self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
        self.weight: Tensor | None = _const((sz,), 1.0, device) if affine else None
        self.bias: Tensor | None = _const((sz,), 0.0, device) if affine else None
        self.num_batches_tracked = _const((1,), 0, device, dtypes.int32)
        if track_running_stats:
            self.running_mean = _const((sz,), 0.0, device)
            self.running_var = _const((sz,), 1.0, device)
            for t in (self.running_mean, self.running_var, self.num_batches_tracked):
                t.requires_grad = False
        else:
            self.num_batches_tracked.requires_grad = False

    def __call__(self, x: Tensor) -> Tensor:
        axes = tuple(i for i in range(x.ndim) if i != 1)
        shape = tuple(s if i == 1 else 1 for i, s in enumerate(x.shape))
        if Tensor.training or not self.track_running_stats:
            mean = x.mean(axes, keepdim=True)
            centered = x - mean
            var = (centered * centered).mean(axes, keepdim=True)
            if Tensor.training and self.track_running_stats:
                n = prod(x.shape[i] for i in axes)
                m = self.momentum
                unbiased = var.detach().reshape(-1) * (n / max(n - 1, 1))
                self.running_mean.assign(self.running_mean * (1 - m) + mean.detach().reshape(-1) * m)
                self.running_var.assign(self.running_var * (1 - m) + unbiased * m)
                self.num_batches_tracked.assign(self.num_batches_tracked + 1)
        else:
            mean = self.running_mean.reshape(shape)
            var = self.running_var.reshape(shape)
            centered = x - mean
        out = centered * (var + self.eps).sqrt().reciprocal()
        if self.weight is not None:
            out = out * self.weight.reshape(shape)
        if self.bias is not None:
            out = out + self.bias.reshape(shape)
        return out


BatchNorm2d = BatchNorm
BatchNorm1d = BatchNorm
BatchNorm3d = BatchNorm


class LayerNorm:
    """Normalization over the last ``len(normalized_shape)`` axes (`torch.nn.LayerNorm`)."""

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        device: str | None = None,
    ) -> None:
        self.normalized_shape = _pair(normalized_shape, 1)
        self.eps = eps
        self.weight: Tensor | None = _const(self.normalized_shape, 1.0, device) if elementwise_affine else None
        self.bias: Tensor | None = _const(self.normalized_shape, 0.0, device) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        n = len(self.normalized_shape)
        if tuple(x.shape[-n:]) != self.normalized_shape:
            raise ValueError(f"LayerNorm: the last dims of {tuple(x.shape)} are not {self.normalized_shape}")
        out = _normalize(x, tuple(range(x.ndim - n, x.ndim)), self.eps)
        if self.weight is not None:
            out = out * self.weight
        if self.bias is not None:
            out = out + self.bias
        return out


class GroupNorm:
    """Normalization over groups of channels (`torch.nn.GroupNorm`); input ``(N, C, ...)``."""

    def __init__(
        self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device: str | None = None
    ) -> None:
        if num_channels % num_groups:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight: Tensor | None = _const((num_channels,), 1.0, device) if affine else None
        self.bias: Tensor | None = _const((num_channels,), 0.0, device) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        grouped = x.reshape(x.shape[0], self.num_groups, -1)
        out = _normalize(grouped, (2,), self.eps).reshape(x.shape)
        shape = (1, self.num_channels) + (1,) * (x.ndim - 2)
        if self.weight is not None:
            out = out * self.weight.reshape(shape)
        if self.bias is not None:
            out = out + self.bias.reshape(shape)
        return out


class RMSNorm:
    """``x / sqrt(mean(x**2, last axis) + eps) * weight`` (`torch.nn.RMSNorm` over the last axis)."""

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True, device: str | None = None) -> None:
        self.eps = eps
        self.weight: Tensor | None = _const((dim,), 1.0, device) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        out = x * ((x * x).mean(-1, keepdim=True) + self.eps).sqrt().reciprocal()
        return out * self.weight if self.weight is not None else out


class Embedding:
    """A lookup table: `emb(idx)` has shape ``idx.shape + (embed_size,)`` (`torch.nn.Embedding`).

    Computed as a one-hot matrix product, so the gradient flows to the weight with the ordinary rules.
    """

    def __init__(self, vocab_size: int, embed_size: int, device: str | None = None) -> None:
        self.vocab_sz, self.embed_sz = vocab_size, embed_size
        self.weight = _uniform((vocab_size, embed_size), math.sqrt(6 / (vocab_size + embed_size)), device)

    def __call__(self, idx: Tensor) -> Tensor:
        if dtypes.is_float(idx.dtype):
            raise TypeError(f"Embedding needs integer indices, got {idx.dtype}")
        classes = Tensor.arange(self.vocab_sz, device=idx.device, dtype=idx.dtype)
        onehot = (idx.reshape(*idx.shape, 1) == classes).cast(self.weight.dtype)
        return onehot @ self.weight
