"""Reductions, scans and sorting: methods of `Tensor` (see `tinycore/frontend/__init__.py`).

Decisions (PyTorch semantics unless noted):

- **Accumulation dtypes follow tinygrad**: `sum`, `prod`, `cumsum`, `cumprod` of bool/int8/int16/int32 give int32
  (unsigned: uint32), int64 stays int64; PyTorch gives int64 for every integer input. `argmax`/`argmin`/`sort`
  indices are int32 (PyTorch: int64), matching `arange`'s default int. `mean`/`var`/`std` of integers give the
  default float (PyTorch refuses integer input).
- **Empty axes**: `sum` of nothing is 0, `prod` 1, `any` False, `all` True, `mean` NaN, `logsumexp` -inf;
  `max`/`min`/`argmax`/`argmin` over a 0-size axis raise like PyTorch (RuntimeError without an axis, IndexError
  with one).
- **Scans** (`cumsum cumprod cummax logcumsumexp`) are blocked: the axis is cut into blocks of `_SCAN_BLOCK`
  elements, each block is scanned with a triangular mask (a broadcast view, O(n * block) work, no O(n^2) buffer),
  and the block totals are scanned recursively and combined. `cummax` returns the values only (as tinygrad).
- **sort** is a bitonic network over the axis padded to a power of two: O(n log^2 n) work in log2(n)(log2(n)+1)/2
  elementwise stages, each realized (`contiguous`) so no kernel recomputes the stages before it. It is stable
  (ties keep their original order) and orders NaN as the largest value, like `torch.sort(stable=True)`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tinycore.dtype import DType, dtypes, least_upper_float, sum_acc_dtype
from tinycore.helpers import prod
from tinycore.uop.ops import Ops

if TYPE_CHECKING:
    from tinycore.tensor import Tensor

_SCAN_BLOCK = 64


def _tensor_cls() -> type[Tensor]:
    from tinycore.tensor import Tensor

    return Tensor


def _identity(op: Ops, dtype: DType) -> Any:
    if op is Ops.ADD:
        return False if dtype == dtypes.bool else 0
    if op is Ops.MUL:
        return True if dtype == dtypes.bool else 1
    if dtypes.is_float(dtype):
        return -math.inf
    return dtypes.min(dtype)


def _combine(op: Ops, a: Tensor, b: Tensor) -> Tensor:
    return a + b if op is Ops.ADD else (a * b if op is Ops.MUL else a.maximum(b))


def _lower_tri(n: int, device: str) -> Tensor:
    """(n, n) bool mask, True where column <= row."""
    T = _tensor_cls()
    r = T.arange(n, device=device)
    return r.reshape(n, 1) >= r.reshape(1, n)


def _scan_last(x: Tensor, op: Ops) -> Tensor:
    """Inclusive scan of `op` along the last axis (see the module notes: blocked, O(n * block) work)."""
    n = int(x.shape[-1])
    lead = tuple(x.shape[:-1])
    ident = _identity(op, x.dtype)
    if n <= _SCAN_BLOCK:
        rows = _lower_tri(n, x.device).where(x.reshape(*lead, 1, n), ident)
        return rows._reduce(op, -1, False)
    nb = -(-n // _SCAN_BLOCK)
    padded = x.pad(((0, 0),) * len(lead) + ((0, nb * _SCAN_BLOCK - n),), value=ident)
    inner = _scan_last(padded.reshape(*lead, nb, _SCAN_BLOCK), op)
    totals = inner.shrink((*((0, s) for s in lead), (0, nb), (_SCAN_BLOCK - 1, _SCAN_BLOCK)))
    prefix = _scan_last(totals.reshape(*lead, nb), op)
    before = prefix.pad(((0, 0),) * len(lead) + ((1, 0),), value=ident).shrink((*((0, s) for s in lead), (0, nb)))
    out = _combine(op, inner, before.reshape(*lead, nb, 1)).reshape(*lead, nb * _SCAN_BLOCK)
    return out.shrink((*((0, s) for s in lead), (0, n)))


class ReduceMixin:
    """Reductions, scans and sorting, mixed into `tinycore.tensor.Tensor`."""

    __slots__ = ()

    # ----- helpers

    def _check_nonempty(self: Tensor, name: str, axis: Any) -> tuple[int, ...]:  # type: ignore[misc]
        axes = self._reduce_axes(axis)
        if axis is None and self.numel() == 0:
            err = IndexError if name.startswith("arg") else RuntimeError
            extra = "" if name.startswith("arg") else " Specify the reduction dim with the 'dim' argument."
            raise err(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.{extra}")
        for a in axes:
            if self.shape[a] == 0:
                raise IndexError(f"{name}(): Expected reduction dim {a} to have non-zero size.")
        return axes

    # ----- basic reductions

    def max(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
        """Maximum over `axis` (all by default). NaN wins; a 0-size reduced axis raises like PyTorch.

        >>> Tensor([[1, 5], [3, 2]]).max(axis=1).tolist()  # doctest: +SKIP
        [5, 3]
        """
        self._check_nonempty("max", axis)
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
        """Minimum over `axis` (all by default); the mirror of `max` (``-max(-x)``, ``~max(~x)`` for integers)."""
        self._check_nonempty("min", axis)
        if dtypes.is_float(self.dtype):
            return -((-self)._reduce(Ops.MAX, axis, keepdim))
        return ~((~self)._reduce(Ops.MAX, axis, keepdim))

    def prod(
        self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, acc_dtype: Any = None
    ) -> Tensor:  # type: ignore[misc]
        """Product over `axis` (all by default; 1 over nothing). Integer accumulation dtypes as `sum`."""
        acc = acc_dtype if acc_dtype is not None else sum_acc_dtype(self.dtype)
        ret = self.cast(acc)._reduce(Ops.MUL, axis, keepdim)
        if acc_dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16):
            ret = ret.cast(self.dtype)
        return ret

    def any(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
        """True where any element along `axis` is nonzero (False over nothing)."""
        return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim)

    def all(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
        """True where every element along `axis` is nonzero (True over nothing)."""
        return self.logical_not().any(axis, keepdim).logical_not()

    # ----- statistics

    def var(
        self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int | float = 1
    ) -> Tensor:  # type: ignore[misc]
        """Variance over `axis`: ``sum((x - mean)**2) / max(0, N - correction)`` (inf/NaN when that is 0)."""
        x = self.cast(least_upper_float(self.dtype))
        n = prod(self.shape[a] for a in self._reduce_axes(axis))
        sq = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
        return sq.div(x._const_like(max(0, n - correction), x.dtype, ()))

    def std(
        self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int | float = 1
    ) -> Tensor:  # type: ignore[misc]
        """Standard deviation over `axis`: ``sqrt(var(axis, keepdim, correction))``."""
        return self.var(axis, keepdim, correction).sqrt()

    def var_mean(
        self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int | float = 1
    ) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        """``(var, mean)`` over `axis`."""
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(
        self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int | float = 1
    ) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        """``(std, mean)`` over `axis`."""
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    def logsumexp(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
        """``log(sum(exp(x)))`` over `axis`, shifted by the (detached) max so it never overflows; -inf over
        nothing."""
        x = self.cast(least_upper_float(self.dtype))
        m = x._reduce(Ops.MAX, axis, True).detach()
        m = m.isinf().where(0.0, m)
        out = (x - m).exp().sum(axis, keepdim=True).log() + m
        if keepdim:
            return out
        axes = self._reduce_axes(axis)
        return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    # ----- arg reductions

    def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
        """Index of the first maximum along `axis` (of the flattened tensor when None), int32. NaN counts as the
        maximum; bool input raises like PyTorch.

        >>> Tensor([1, 3, 3, 2]).argmax().item()  # doctest: +SKIP
        1
        """
        if self.dtype == dtypes.bool:
            raise RuntimeError("argmax(): does not support bool input")
        return self._arg_extreme("argmax", axis, keepdim, self)

    def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
        """Index of the first minimum along `axis` (of the flattened tensor when None), int32."""
        if self.dtype == dtypes.bool:
            raise RuntimeError("argmin(): does not support bool input")
        flipped = -self if dtypes.is_float(self.dtype) else ~self
        return self._arg_extreme("argmin", axis, keepdim, flipped)

    def _arg_extreme(self: Tensor, name: str, axis: int | None, keepdim: bool, key: Tensor) -> Tensor:  # type: ignore[misc]
        T = _tensor_cls()
        if axis is None:
            self._check_nonempty(name, None)
            out = key.reshape(-1)._arg_extreme(name, 0, False, key.reshape(-1))
            return out.reshape((1,) * self.ndim) if keepdim else out
        ax = self._axis(axis)
        if self.ndim == 0:
            return T.full((), 0, dtype=dtypes.int32, device=self.device)
        self._check_nonempty(name, ax)
        n = int(self.shape[ax])
        m = key._reduce(Ops.MAX, ax, True)
        hit = key == m
        if dtypes.is_float(key.dtype):
            hit = hit | (key != key)
        rev = T.arange(n, 0, -1, device=self.device, dtype=dtypes.int32)
        rev = rev.reshape(tuple(n if i == ax else 1 for i in range(self.ndim)))
        first = hit.where(rev, 0)._reduce(Ops.MAX, ax, keepdim)
        return (n - first).cast(dtypes.int32)

    # ----- scans

    def _scan(self: Tensor, axis: int, op: Ops) -> Tensor:  # type: ignore[misc]
        if self.ndim == 0:
            return self
        ax = self._axis(axis)
        if self.shape[ax] == 0:
            return self
        x = self.transpose(ax, -1) if ax != self.ndim - 1 else self
        out = _scan_last(x, op)
        return out.transpose(ax, -1) if ax != self.ndim - 1 else out

    def cumsum(self: Tensor, axis: int = 0) -> Tensor:  # type: ignore[misc]
        """Inclusive running sum along `axis` (integer accumulation dtype as `sum`; blocked, O(n * 64) work).

        >>> Tensor([1, 2, 3]).cumsum().tolist()  # doctest: +SKIP
        [1, 3, 6]
        """
        out = self.cast(sum_acc_dtype(self.dtype))._scan(axis, Ops.ADD)
        return out.cast(self.dtype) if self.dtype in (dtypes.float16, dtypes.bfloat16) else out

    def cumprod(self: Tensor, axis: int = 0) -> Tensor:  # type: ignore[misc]
        """Inclusive running product along `axis`."""
        out = self.cast(sum_acc_dtype(self.dtype))._scan(axis, Ops.MUL)
        return out.cast(self.dtype) if self.dtype in (dtypes.float16, dtypes.bfloat16) else out

    def cummax(self: Tensor, axis: int = 0) -> Tensor:  # type: ignore[misc]
        """Running maximum along `axis` (values only, as tinygrad; `torch.cummax(...).values`)."""
        return self._scan(axis, Ops.MAX)

    def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:  # type: ignore[misc]
        """``log(cumsum(exp(x)))`` along `axis`, shifted by the (detached) max of the axis. Elements more than ~87
        below that max underflow to -inf where PyTorch (which shifts per prefix) stays finite."""
        x = self.cast(least_upper_float(self.dtype))
        if x.ndim == 0:
            return x
        ax = x._axis(axis)
        if x.shape[ax] == 0:
            return x
        m = x._reduce(Ops.MAX, ax, True).detach()
        m = m.isinf().where(0.0, m)
        return (x - m).exp().cumsum(ax).log() + m

    # ----- sorting

    def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        """``(values, indices)`` sorted along `dim` (stable; NaN is the largest value; indices are int32).

        >>> Tensor([3, 1, 2]).sort()[0].tolist()  # doctest: +SKIP
        [1, 2, 3]
        """
        T = _tensor_cls()
        ax = self._axis(dim)
        if self.ndim == 0:
            return self, T.full((), 0, dtype=dtypes.int32, device=self.device)
        n = int(self.shape[ax])
        last = self.ndim - 1
        x = self.transpose(ax, -1) if ax != last else self
        orig_dtype = x.dtype
        if orig_dtype == dtypes.bool:
            x = x.cast(dtypes.uint8)
        size = 1 << max(0, (n - 1).bit_length())
        if dtypes.is_float(x.dtype):
            fill: Any = -math.inf if descending else math.nan
        else:
            fill = dtypes.min(x.dtype) if descending else dtypes.max(x.dtype)
        lead = tuple(x.shape[:-1])
        if size != n:
            x = x.pad(((0, 0),) * len(lead) + ((0, size - n),), value=fill)
        idx = T.arange(size, device=self.device, dtype=dtypes.int32).reshape((1,) * len(lead) + (size,))
        idx = idx.expand(*lead, size)
        k = 2
        while k <= size:
            j = k // 2
            while j >= 1:
                x, idx = _bitonic_stage(x, idx, k, j, descending)
                j //= 2
            k *= 2
        if size != n:
            keep = (*((0, s) for s in lead), (0, n))
            x, idx = x.shrink(keep), idx.shrink(keep)
        if orig_dtype == dtypes.bool:
            x = x.cast(dtypes.bool)
        if ax != last:
            x, idx = x.transpose(ax, -1), idx.transpose(ax, -1)
        return x, idx

    def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:  # type: ignore[misc]
        """Indices that sort the tensor along `dim` (int32)."""
        return self.sort(dim, descending)[1]

    def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        """``(values, indices)`` of the `k` largest (or smallest) elements along `dim`, in sorted order."""
        ax = self._axis(dim)
        n = int(self.shape[ax]) if self.ndim else 1
        if not 0 <= k <= n:
            raise RuntimeError(f"selected index k out of range (k={k}, size {n} along dim {dim})")
        values, indices = self.sort(ax, descending=largest)
        if self.ndim == 0:
            return values, indices
        keep = tuple((0, k) if i == ax else (0, s) for i, s in enumerate(self.shape))
        return values.shrink(keep), indices.shrink(keep)


def _bitonic_stage(x: Tensor, idx: Tensor, k: int, j: int, descending: bool) -> tuple[Tensor, Tensor]:
    """One compare-exchange stage of the bitonic network: element i meets i ^ j, in the order of bit k of i."""
    T = _tensor_cls()
    lead = tuple(x.shape[:-1])
    size = int(x.shape[-1])
    if k < size:
        view = (*lead, size // (2 * k), 2, k // (2 * j), 2, j)
    else:
        view = (*lead, size // (2 * j), 2, j)
    xv, iv = x.reshape(view), idx.reshape(view)
    full = tuple((0, s) for s in view)

    def half(t: Tensor, h: int) -> Tensor:
        return t.shrink((*full[:-2], (h, h + 1), full[-1]))

    a, b, ia, ib = half(xv, 0), half(xv, 1), half(iv, 0), half(iv, 1)
    if dtypes.is_float(a.dtype):
        a_nan, b_nan = a != a, b != b
        if descending:
            strict = (a > b) | (a_nan & b_nan.logical_not())
        else:
            strict = (a < b) | (b_nan & a_nan.logical_not())
        equal = (a == b) | (a_nan & b_nan)
    else:
        strict = (a > b) if descending else (a < b)
        equal = a == b
    a_first = strict | (equal & (ia < ib))
    if k < size:
        flip = T.full((1,), True, device=x.device).pad(((1, 0),)).reshape(2, 1, 1, 1)  # [False, True] on bit k
        a_first = a_first != flip
    lo_x, hi_x = a_first.where(a, b), a_first.where(b, a)
    lo_i, hi_i = a_first.where(ia, ib), a_first.where(ib, ia)
    second = T.full((1,), True, device=x.device).pad(((1, 0),)).reshape(2, 1)  # [False, True] on the pair axis
    out_x = second.where(hi_x, lo_x).reshape(*lead, size).contiguous()
    out_i = second.where(hi_i, lo_i).reshape(*lead, size).contiguous()
    return out_x, out_i
