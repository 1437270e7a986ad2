"""Neural-network layers with tinygrad's API and initializations (PyTorch's math).

Layers are plain classes: parameters are `Tensor` attributes (found by `tinycore.nn.state.get_parameters`), and
calling the layer applies it. Parameters start with `requires_grad` None; an optimizer sets it to True for the
tensors it updates. Every parameter and running statistic has a buffer of its own (two layers never share one),
so optimizers can update them in place with `assign` and a `TinyJit` can capture a whole training step.

Initializations (tinygrad's, which equal PyTorch's defaults):

- `Linear`, `Conv1d`, `Conv2d`: weight and bias uniform in ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` (kaiming uniform,
  a=sqrt(5))
- `ConvTranspose1d/2d`: the same with PyTorch's fan_in of a transposed weight, ``out_channels/groups * prod(kernel)``
  (tinygrad uses ``in_channels * prod(kernel)`` for the weight; tinycore follows PyTorch)
- `LSTMCell`: every weight and bias uniform in ``[-1/sqrt(hidden_size), 1/sqrt(hidden_size)]`` (PyTorch's; tinygrad
  starts the biases at 0)
- norms: weight 1, bias 0; `BatchNorm` running mean 0, running var 1
- `Embedding`: glorot (xavier) uniform, ``bound = sqrt(6 / (vocab_size + embed_size))``
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tinycore.device import is_dtype_supported
from tinycore.dtype import dtypes
from tinycore.helpers import flatten, prod
from tinycore.nn import optim, state  # noqa: F401 - tinycore.nn.optim / tinycore.nn.state
from tinycore.tensor import Tensor

__all__ = [
    "BatchNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "Conv1d",
    "Conv2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "Embedding",
    "GroupNorm",
    "InstanceNorm",
    "LSTMCell",
    "LayerNorm",
    "LayerNorm2d",
    "Linear",
    "RMSNorm",
    "flatten",
    "is_dtype_supported",
    "make_tuple",
    "optim",
    "prod",
    "state",
]


def make_tuple(x: int | Sequence[int], cnt: int) -> tuple[int, ...]:
    """`x` repeated `cnt` times when it is an int, else `x` as a tuple (tinygrad's helper, re-exported in nn)."""
    return tuple(x) if isinstance(x, Sequence) else (x,) * cnt


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


def Conv1d(  # noqa: N802 - tinygrad's name (a function returning a Conv2d)
    in_channels: int,
    out_channels: int,
    kernel_size: int,
    stride: int = 1,
    padding: int | str = 0,
    dilation: int = 1,
    groups: int = 1,
    bias: bool = True,
    device: str | None = None,
) -> Conv2d:
    """1-D convolution like `torch.nn.Conv1d`: a `Conv2d` with a one-element kernel (weight ``(out, in/groups, k)``)
    applied to ``(N, C, L)`` input."""
    return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias, device)


class ConvTranspose2d(Conv2d):
    """Transposed 2-D convolution like `torch.nn.ConvTranspose2d` (weight ``(in, out/groups, kh, kw)``), through
    `Tensor.conv_transpose2d`; the output size is ``(in-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        device: str | None = None,
    ) -> None:
        self.kernel_size = _pair(kernel_size)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.output_padding = output_padding
        bound = 1 / math.sqrt((out_channels // groups) * prod(self.kernel_size))
        self.weight = _uniform((in_channels, out_channels // groups, *self.kernel_size), bound, device)
        self.bias = _uniform((out_channels,), bound, device) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv_transpose2d(
            self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding, self.output_padding
        )


def ConvTranspose1d(  # noqa: N802 - tinygrad's name (a function returning a ConvTranspose2d)
    in_channels: int,
    out_channels: int,
    kernel_size: int,
    stride: int = 1,
    padding: int = 0,
    output_padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
    bias: bool = True,
    device: str | None = None,
) -> ConvTranspose2d:
    """Transposed 1-D convolution like `torch.nn.ConvTranspose1d`: a `ConvTranspose2d` with a one-element kernel."""
    return ConvTranspose2d(
        in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation, groups, bias, device
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

    def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The ``(mean, var)`` used to normalize `x`, each of shape ``(C,)``: the batch's (over every axis but 1,
        biased variance) in training or without running statistics, else the running ones."""
        if self.track_running_stats and not Tensor.training:
            return self.running_mean, self.running_var
        axes = tuple(i for i in range(x.ndim) if i != 1)
        shape = tuple(s if i == 1 else 1 for i, s in enumerate(x.shape))
        mean = x.mean(axes)
        centered = x - mean.reshape(shape)
        return mean, (centered * centered).mean(axes)

    def __call__(self, x: Tensor) -> Tensor:
        shape = tuple(s if i == 1 else 1 for i, s in enumerate(x.shape))
        mean, var = self.calc_stats(x)
        if Tensor.training and self.track_running_stats:
            n = prod(x.shape[i] for i in range(x.ndim) if i != 1)
            m = self.momentum
            unbiased = var.detach() * (n / max(n - 1, 1))
            self.running_mean.assign(self.running_mean * (1 - m) + mean.detach() * m)
            self.running_var.assign(self.running_var * (1 - m) + unbiased * m)
            self.num_batches_tracked.assign(self.num_batches_tracked + 1)
        out = (x - mean.reshape(shape)) * (var.reshape(shape) + self.eps).sqrt().reciprocal()
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
        self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
        self.eps, self.elementwise_affine = eps, elementwise_affine
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


class LayerNorm2d(LayerNorm):
    """`LayerNorm` over the channels of ``(N, C, H, W)`` input (each pixel normalized across C), as in ConvNeXt."""

    def __call__(self, x: Tensor) -> Tensor:
        return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class InstanceNorm:
    """Normalization of each sample's channel over its spatial axes (`torch.nn.InstanceNorm1d/2d/3d` with
    ``affine=True``, tinygrad's default; PyTorch's default is ``affine=False``); no running statistics."""

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True, device: str | None = None) -> None:
        self.num_features, self.eps = num_features, eps
        self.weight: Tensor | None = _const((num_features,), 1.0, device) if affine else None
        self.bias: Tensor | None = _const((num_features,), 0.0, device) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        out = _normalize(x.reshape(x.shape[0], self.num_features, -1), (2,), self.eps).reshape(x.shape)
        shape = (1, self.num_features) + (1,) * (x.ndim - 2)
        if self.weight is not None:
            out = out * self.weight.reshape(shape)
        if self.bias is not None:
            out = out + self.bias.reshape(shape)
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

    Computed as a one-hot matrix product, so the gradient flows to the weight with the ordinary rules (the
    transposed product: a ``vocab x tokens x embed`` matrix product). Code generation turns the forward product
    into one load per output element (`tinycore.codegen.select_fold`), and the scheduler copies no table for it, so
    a lookup costs ``O(numel(out))`` whatever the vocabulary. An index outside ``[0, vocab_size)`` gives a row of
    zeros (torch raises; a lazy kernel can't).
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


class LSTMCell:
    """One step of an LSTM like `torch.nn.LSTMCell`: ``cell(x, (h, c)) -> (h', c')`` with the gates i, f, g, o in
    that order along the rows of ``weight_ih (4*hidden, input)`` and ``weight_hh (4*hidden, hidden)``; ``hc`` None
    starts from zeros."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: str | None = None) -> None:
        bound = 1 / math.sqrt(hidden_size)
        self.weight_ih = _uniform((hidden_size * 4, input_size), bound, device)
        self.weight_hh = _uniform((hidden_size * 4, hidden_size), bound, device)
        self.bias_ih: Tensor | None = _uniform((hidden_size * 4,), bound, device) if bias else None
        self.bias_hh: Tensor | None = _uniform((hidden_size * 4,), bound, device) if bias else None

    def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        if hc is None:
            zeros = Tensor.zeros(x.shape[0], self.weight_hh.shape[1], dtype=x.dtype, device=x.device)
            hc = (zeros, zeros)
        h, c = hc
        gates = x @ self.weight_ih.T + h @ self.weight_hh.T
        if self.bias_ih is not None and self.bias_hh is not None:
            gates = gates + self.bias_ih + self.bias_hh
        i, f, g, o = gates.chunk(4, dim=1)
        new_c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        new_h = o.sigmoid() * new_c.tanh()
        return new_h.contiguous(), new_c.contiguous()
