"""Creation and random tensors: methods of `Tensor` (see `tinycore/frontend/__init__.py`).

Every random tensor is built from `Tensor.rand` (Threefry-2x32 of an element counter and the seed), so the same
`manual_seed` and the same sequence of calls give the same numbers on every device. Derived distributions:

- `randn`: Box-Muller on two uniform draws, ``sqrt(-2 log(1 - u1)) * cos(2 pi u2)`` (``1 - u1`` is in (0, 1]).
- `randint`: ``floor(u * (high - low)) + low`` (23 random bits: ranges wider than 2**23 are slightly uneven).
- `randperm`: the argsort of ``n`` uniform draws (int32, as tinygrad; ties have probability ~n^2 / 2**24).
- `multinomial`: with replacement, inverse CDF of the normalized weights; without, the `k` smallest exponential
  races ``-log(u) / w`` (equivalent to sequential sampling without replacement).

`Tensor.training` (False by default) switches `dropout` on; `with Tensor.train():` sets it for a block (also a
decorator) and `Tensor.test()` clears it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from tinycore.dtype import dtypes
from tinycore.helpers import prod

if TYPE_CHECKING:
    from tinycore.frontend.tensor import Tensor


def _tensor_cls() -> type[Tensor]:
    from tinycore.frontend.tensor import Tensor

    return Tensor


def _shape(shape: tuple[Any, ...]) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def _like_kwargs(t: Tensor, kwargs: dict[str, Any]) -> dict[str, Any]:
    out = dict(kwargs)
    out.setdefault("device", t.device)
    out.setdefault("dtype", t.dtype)
    return out


class CreationMixin:
    """Creation and random tensors, mixed into `tinycore.tensor.Tensor`."""

    __slots__ = ()

    training: ClassVar[bool] = False

    # ----- *_like

    def zeros_like(self: Tensor, **kwargs: Any) -> Tensor:  # type: ignore[misc]
        """Zeros of this tensor's shape (and device/dtype unless given)."""
        return _tensor_cls().zeros(*self.shape, **_like_kwargs(self, kwargs))

    def ones_like(self: Tensor, **kwargs: Any) -> Tensor:  # type: ignore[misc]
        """Ones of this tensor's shape (and device/dtype unless given)."""
        return _tensor_cls().ones(*self.shape, **_like_kwargs(self, kwargs))

    def full_like(self: Tensor, fill_value: Any, **kwargs: Any) -> Tensor:  # type: ignore[misc]
        """`fill_value` in this tensor's shape (and device/dtype unless given)."""
        return _tensor_cls().full(self.shape, fill_value, **_like_kwargs(self, kwargs))

    def empty_like(self: Tensor, **kwargs: Any) -> Tensor:  # type: ignore[misc]
        """An uninitialized tensor of this tensor's shape (and device/dtype unless given)."""
        return _tensor_cls().empty(*self.shape, **_like_kwargs(self, kwargs))

    def rand_like(self: Tensor, **kwargs: Any) -> Tensor:  # type: ignore[misc]
        """Uniform [0, 1) numbers of this tensor's shape (float dtype kept, else the default float)."""
        kw = _like_kwargs(self, kwargs)
        if not dtypes.is_float(kw["dtype"]):
            kw["dtype"] = dtypes.default_float
        return _tensor_cls().rand(*self.shape, **kw)

    def randn_like(self: Tensor, dtype: Any = None, requires_grad: bool | None = None, **kwargs: Any) -> Tensor:  # type: ignore[misc]
        """Standard normal numbers of this tensor's shape (float dtype kept, else the default float)."""
        if dtype is not None:
            kwargs["dtype"] = dtype
        if requires_grad is not None:
            kwargs["requires_grad"] = requires_grad
        kw = _like_kwargs(self, kwargs)
        if not dtypes.is_float(kw["dtype"]):
            kw["dtype"] = dtypes.default_float
        return _tensor_cls().randn(*self.shape, **kw)

    # ----- ranges and matrices

    @staticmethod
    def linspace(
        start: float, stop: float, steps: int, device: str | None = None, dtype: Any = None, **kwargs: Any
    ) -> Tensor:  # noqa: E501
        """`steps` evenly spaced values from `start` to `stop` inclusive (the second half is counted back from
        `stop`, like PyTorch, so both ends are exact).

        >>> Tensor.linspace(0, 1, 5).tolist()  # doctest: +SKIP
        [0.0, 0.25, 0.5, 0.75, 1.0]
        """
        T = _tensor_cls()
        if steps < 0:
            raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
        dt = dtype if dtype is not None else dtypes.default_float
        if steps <= 1:
            return T.full((steps,), start, device=device, dtype=dt, **kwargs)
        step = (stop - start) / (steps - 1)
        i = T.arange(steps, device=device, dtype=dtypes.float32 if dt != dtypes.float64 else dtypes.float64)
        front = i * step + start
        back = stop - (steps - 1 - i) * step
        out = (i < steps // 2).where(front, back).cast(dt)
        out.requires_grad = kwargs.get("requires_grad")
        return out

    @staticmethod
    def eye(n: int, m: int | None = None, device: str | None = None, dtype: Any = None, **kwargs: Any) -> Tensor:
        """The `n` x `m` identity matrix (m defaults to n)."""
        T = _tensor_cls()
        m = n if m is None else m
        if n < 0 or m < 0:
            raise RuntimeError(f"eye: n and m must be non-negative, got n={n}, m={m}")
        rows = T.arange(n, device=device).reshape(n, 1)
        cols = T.arange(m, device=device).reshape(1, m)
        out = (rows == cols).cast(dtype if dtype is not None else dtypes.default_float)
        out.requires_grad = kwargs.get("requires_grad")
        return out

    def _tri_mask(self: Tensor, diagonal: int, upper: bool) -> Tensor:  # type: ignore[misc]
        T = _tensor_cls()
        if self.ndim < 2:
            raise RuntimeError(f"triu/tril: input tensor must have at least 2 dimensions, got shape {self.shape}")
        r, c = int(self.shape[-2]), int(self.shape[-1])
        rows = T.arange(r, device=self.device).reshape(r, 1)
        cols = T.arange(c, device=self.device).reshape(1, c)
        # one add and one compare per element: col - row >= d  <=>  row < col + (1 - d), and
        # col - row <= d  <=>  col < row + (d + 1)
        if upper:
            return rows < (cols + (1 - diagonal) if diagonal != 1 else cols)
        return cols < (rows + (diagonal + 1) if diagonal != -1 else rows)

    def triu(self: Tensor, diagonal: int = 0) -> Tensor:  # type: ignore[misc]
        """Zero below the `diagonal`-th diagonal of the last two dimensions."""
        return self._tri_mask(diagonal, True).where(self, self._const_like(0, self.dtype, ()))

    def tril(self: Tensor, diagonal: int = 0) -> Tensor:  # type: ignore[misc]
        """Zero above the `diagonal`-th diagonal of the last two dimensions."""
        return self._tri_mask(diagonal, False).where(self, self._const_like(0, self.dtype, ()))

    # ----- random

    @staticmethod
    def randn(
        *shape: Any, dtype: Any = None, requires_grad: bool | None = None, device: str | None = None, **kwargs: Any
    ) -> Tensor:
        """Standard normal numbers (Box-Muller on `rand`)."""
        T = _tensor_cls()
        shp = _shape(shape)
        dt = dtype if dtype is not None else dtypes.default_float
        u = T.rand(2, *shp, device=device, dtype=dtypes.float32)
        u1 = u.shrink(((0, 1), *((0, s) for s in shp))).reshape(shp)
        u2 = u.shrink(((1, 2), *((0, s) for s in shp))).reshape(shp)
        out = ((1 - u1).log() * -2).sqrt() * (u2 * (2 * math.pi)).cos()
        out = out.cast(dt)
        out.requires_grad = requires_grad
        return out

    @staticmethod
    def randint(
        *shape: Any, low: int = 0, high: int = 10, dtype: Any = dtypes.int, device: str | None = None, **kwargs: Any
    ) -> Tensor:
        """Uniform integers in ``[low, high)`` (int32, tinygrad's ``dtypes.int``, by default)."""
        T = _tensor_cls()
        if not isinstance(low, int) or not isinstance(high, int):
            raise TypeError(f"randint: low and high must be ints, got {low!r} and {high!r}")
        if high <= low:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
        dt = dtype if dtype is not None else dtypes.int32
        u = T.rand(*_shape(shape), device=device, dtype=dtypes.float32)
        out = ((u * (high - low)).floor().cast(dtypes.int64).minimum(high - low - 1) + low).cast(dt)
        return out

    @staticmethod
    def normal(
        *shape: Any, mean: float = 0.0, std: float = 1.0, requires_grad: bool | None = None, **kwargs: Any
    ) -> Tensor:
        """Normal numbers with the given `mean` and `std`."""
        rg = requires_grad
        out = _tensor_cls().randn(*shape, **kwargs) * std + mean
        out.requires_grad = rg
        return out

    @staticmethod
    def uniform(
        *shape: Any,
        low: float = 0.0,
        high: float = 1.0,
        dtype: Any = None,
        requires_grad: bool | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """Uniform numbers in ``[low, high)``."""
        rg = requires_grad
        dt = dtype or dtypes.default_float
        out = (_tensor_cls().rand(*shape, **kwargs) * (high - low) + low).cast(dt)
        out.requires_grad = rg
        return out

    @staticmethod
    def scaled_uniform(*shape: Any, **kwargs: Any) -> Tensor:
        """Uniform in ``[-1, 1)`` scaled by ``prod(shape) ** -0.5``."""
        shp = _shape(shape)
        return _tensor_cls().uniform(*shp, low=-1.0, high=1.0, **kwargs) * (max(prod(shp), 1) ** -0.5)

    @staticmethod
    def glorot_uniform(*shape: Any, **kwargs: Any) -> Tensor:
        """Glorot/Xavier uniform: bound ``sqrt(6 / (shape[0] + prod(shape[1:])))``."""
        shp = _shape(shape)
        bound = math.sqrt(6 / max(shp[0] + prod(shp[1:]), 1))
        return _tensor_cls().uniform(*shp, low=-bound, high=bound, **kwargs)

    @staticmethod
    def kaiming_uniform(*shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
        """He uniform for leaky-relu slope `a`: bound ``sqrt(3) * sqrt(2 / (1 + a*a)) / sqrt(prod(shape[1:]))``."""
        shp = _shape(shape)
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a * a)) / math.sqrt(max(prod(shp[1:]), 1))
        return _tensor_cls().uniform(*shp, low=-bound, high=bound, **kwargs)

    @staticmethod
    def kaiming_normal(*shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
        """He normal for leaky-relu slope `a`: std ``sqrt(2 / (1 + a*a)) / sqrt(prod(shape[1:]))``."""
        shp = _shape(shape)
        std = math.sqrt(2.0 / (1 + a * a)) / math.sqrt(max(prod(shp[1:]), 1))
        return _tensor_cls().normal(*shp, mean=0.0, std=std, **kwargs)

    @staticmethod
    def randperm(n: int, device: str | None = None, dtype: Any = dtypes.int, **kwargs: Any) -> Tensor:
        """A random permutation of ``0..n-1`` (int32 by default)."""
        T = _tensor_cls()
        if n < 0:
            raise RuntimeError(f"randperm: n must be non-negative, got {n}")
        out = T.rand(n, device=device).argsort() if n else T.full((0,), 0, device=device, dtype=dtypes.int32)
        return out.cast(dtype if dtype is not None else dtypes.int32)

    def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:  # type: ignore[misc]
        """Draw `num_samples` category indices per row of the (1-D or 2-D) non-negative weights (int32)."""
        T = _tensor_cls()
        if self.ndim not in (1, 2):
            raise RuntimeError(f"multinomial: prob_dist must be 1 or 2 dim, got shape {self.shape}")
        if num_samples <= 0:
            raise RuntimeError(f"multinomial: cannot sample num_samples={num_samples} <= 0 samples")
        w = self.reshape(1, -1) if self.ndim == 1 else self
        rows, cats = int(w.shape[0]), int(w.shape[1])
        if not replacement and num_samples > cats:
            raise RuntimeError("multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement")
        w = w.cast(least_float(w))
        if replacement:
            cdf = w.cumsum(1)
            cdf = cdf / cdf.shrink(((0, rows), (cats - 1, cats)))
            u = T.rand(rows, num_samples, 1, device=self.device)
            out = (u >= cdf.reshape(rows, 1, cats)).sum(2, acc_dtype=dtypes.int32).minimum(cats - 1)
        else:
            u = T.rand(rows, cats, device=self.device)
            race = -(1 - u).log() / w  # zero weight -> inf: never picked before a positive one
            out = race.topk(num_samples, dim=1, largest=False)[1]
        out = out.cast(dtypes.int32)
        return out.reshape(num_samples) if self.ndim == 1 else out

    def dropout(self: Tensor, p: float = 0.5) -> Tensor:  # type: ignore[misc]
        """Zero each element with probability `p` and scale the rest by ``1 / (1 - p)``, only while
        `Tensor.training` is True (identity otherwise)."""
        T = _tensor_cls()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        if not T.training or p == 0:
            return self
        if p == 1:
            return self * 0
        keep = T.rand(*self.shape, device=self.device) >= p
        return keep.where(self, 0) * (1 / (1 - p))

    @staticmethod
    @contextlib.contextmanager
    def train(mode: bool = True) -> Iterator[None]:
        """Set `Tensor.training` to `mode` inside a ``with`` block (or a decorated function), then restore it.

        >>> with Tensor.train():  # doctest: +SKIP
        ...     y = x.dropout(0.1)
        """
        T = _tensor_cls()
        before = T.training
        T.training = mode
        try:
            yield
        finally:
            T.training = before

    @staticmethod
    def test() -> contextlib.AbstractContextManager[None]:
        """`Tensor.train(False)`: evaluation mode for a block."""
        return _tensor_cls().train(False)


def least_float(t: Tensor) -> Any:
    """The float dtype `t`'s values are computed in (itself when it is a float)."""
    from tinycore.dtype import least_upper_float

    return least_upper_float(t.dtype)
