"""Reductions, scans and sorting: methods of `Tensor` (see `tinycore/frontend/__init__.py`).

Decisions (PyTorch semantics unless noted):

- **Accumulation dtypes follow PyTorch** (`tinycore.dtype.sum_acc_dtype`): `sum`, `prod`, `cumsum`, `cumprod` of
  bool and every integer dtype accumulate in and return int64, so they don't wrap at 2**31 (uint64 stays uint64,
  where PyTorch's int64 would wrap values >= 2**63). Internal sums whose result is cast back to a narrow integer
  (matmul, einsum, conv, multinomial, max_unpool) accumulate in int32 (`narrow_acc_dtype`): the same low bits,
  without 64-bit arithmetic. float16/bfloat16 add (and multiply: `prod`, `cumprod`) in float32: `sum` casts the
  total back (so 70000 fp16 ones sum to inf, like PyTorch), `mean`/`var`/`std` divide (and take the root) in
  float32 before the cast, so ``ones(70000, dtype=half).mean()`` is 1; a half `prod` whose float16 partial
  products would overflow on the way to a representable result gives that result (PyTorch: inf/NaN).
  `argmax`/`argmin`/`sort` indices are int32 (PyTorch: int64), matching `arange`'s default int.
  `mean`/`var`/`std` of integers give the default float (PyTorch refuses integer input).
- **var/std** are ``sum((x - mean)**2) / (N - correction)`` in float32 (float64 for float64 input); PyTorch's CPU
  kernel accumulates float32 in float64, so deviations past ~1.8e19 give inf here where PyTorch stays finite.
  Gradients come from autograd through that graph, which is PyTorch's closed form wherever the variance is
  finite; where it is 0, `std`'s gradient is 0 (PyTorch masks its root there too).
- **Large float sums are cascaded** (`cascade_sum`): a float sum of more than `_CASCADE_MIN` (2**19) elements per
  output is split in the frontend, with movement ops only: the reduced elements, flattened, are cut into chunks of
  `_CASCADE_CHUNK` (4096) summed by one kernel with many outputs, whose totals are summed in chunks of
  `_CASCADE_TOP` (4096 too: fewer stages, each a kernel whose launch and scheduling cost more than its few
  additions; 64 took four kernels for 2**26 elements, now three) until one is left; what doesn't fill a multiple of
  16 chunks is summed on its own and added last (a padded, masked chunk would keep the big kernel from
  vectorizing). No accumulator adds more than 4096 terms (the rest: < 65536), so a float32 total is not stuck at
  2**24 times the typical term: ``ones(10**10).sum()`` is exactly 1e10 (a broadcast
  constant stays a constant: no buffer, 64-bit index math) and 2**25 + 12345 uniform values sum within ~1e-8 of the
  float64 total (one sequential float32 accumulator: 3e-4). Exception: a full reduction of at most
  `_CASCADE_ALWAYS` (2**24) elements divisible by 64 keeps `Tensor._reduce`'s two kernels (64 partial sums, then
  their total; ~2e-6 relative at 2**24): the `sum 16M` benchmark's path, ~10% faster there than the cascade.
  Measured on CLANG (2 cores), the cascade is both faster and more accurate than one accumulator per output from
  about 2**19 elements up (2**24 - 5: 23 -> 5 ms, 7e-5 -> 7e-8; a BatchNorm-style (64, 8, 128, 128) sum over
  (0, 2, 3): 6.3 -> 3.0 ms), and slower below. `mean` is this sum times 1/N. Scans are blocked anyway (below),
  `max`/`min` are exact, `prod` is not split.
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
from tinycore.helpers import all_int, prod
from tinycore.uop.ops import Ops

if TYPE_CHECKING:
    from tinycore.frontend.tensor import Tensor

_SCAN_BLOCK = 64
_CASCADE_MIN = 1 << 19  # float sums of more elements per output than this are split (see `cascade_sum`) ...
_CASCADE_ALWAYS = 1 << 24  # ... except full reductions `Tensor._reduce` splits into 64 partial sums, up to this
_CASCADE_CHUNK = 1 << 12  # the most elements one accumulator adds in a split sum
_CASCADE_TOP = 1 << 12  # chunk of the later stages, which add the (few, large) chunk totals
_CASCADE_GROUPS = 16  # chunks per stage are a multiple of this (the rest is summed on its own)


def _tensor_cls() -> type[Tensor]:
    from tinycore.frontend.tensor import Tensor

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


def _shift(x: Tensor, axis: int) -> Tensor:
    """The (detached) max of `x` along `axis`, kept, NaNs left out and infinities replaced by 0: the shift that keeps
    ``exp(x - shift)`` finite for a log-sum-exp (an infinite max gives the infinite result through ``exp``)."""
    m = (x != x).where(-math.inf, x)._reduce(Ops.MAX, axis, True).detach()
    return m.isinf().where(0.0, m)


def _logaddexp(a: Tensor, b: Tensor) -> Tensor:
    """``log(exp(a) + exp(b))`` elementwise, shifted by the larger of the two (finite for any finite inputs)."""
    m = a.maximum(b).detach()
    m = (m.isinf() | (m != m)).where(0.0, m)
    return ((a - m).exp() + (b - m).exp()).log() + m


def _logcumsumexp_last(x: Tensor) -> Tensor:
    """Inclusive log-cumsum-exp along the last axis, each prefix shifted by its own max (as PyTorch), blocked like
    `_scan_last`: within a block of `_SCAN_BLOCK` every prefix is a masked log-sum-exp over its row of the block;
    block totals are scanned the same way and combined with `_logaddexp`."""
    n = int(x.shape[-1])
    lead = tuple(x.shape[:-1])
    if n <= _SCAN_BLOCK:
        rows = _lower_tri(n, x.device).where(x.reshape(*lead, 1, n), -math.inf)  # (..., i, j): x_j for j <= i
        m = _shift(rows, -1)
        return ((rows - m).exp()._reduce(Ops.ADD, -1, True).log() + m).reshape(*lead, n)
    nb = -(-n // _SCAN_BLOCK)
    padded = x.pad(((0, 0),) * len(lead) + ((0, nb * _SCAN_BLOCK - n),), value=-math.inf)
    inner = _logcumsumexp_last(padded.reshape(*lead, nb, _SCAN_BLOCK))
    totals = inner.shrink((*((0, s) for s in lead), (0, nb), (_SCAN_BLOCK - 1, _SCAN_BLOCK)))
    prefix = _logcumsumexp_last(totals.reshape(*lead, nb))
    before = prefix.pad(((0, 0),) * len(lead) + ((1, 0),), value=-math.inf).shrink((*((0, s) for s in lead), (0, nb)))
    out = _logaddexp(inner, before.reshape(*lead, nb, 1)).reshape(*lead, nb * _SCAN_BLOCK)
    return out.shrink((*((0, s) for s in lead), (0, n)))


def cascade_sum(x: Tensor, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
    """``x._reduce(ADD, axis, keepdim)``, split into stages when `x` is a float and each output sums more than
    `_CASCADE_MIN` elements, unless it is a full reduction of at most `_CASCADE_ALWAYS` elements that
    `Tensor._reduce` runs as 64 partial sums (see the module notes). The reduced elements, flattened, are cut into
    chunks of `_CASCADE_CHUNK`, each summed (one kernel, many outputs); what doesn't fill a multiple of
    `_CASCADE_GROUPS` chunks is summed on its own; the chunk totals are summed the same way in chunks of
    `_CASCADE_TOP` until one is left. A float32 total thus does not stall at 2**24 times the typical term
    (``ones(10**10).sum()`` is exact). Movement ops only: a broadcast constant stays a constant."""
    if x.ndim == 0 or not dtypes.is_float(x.dtype) or not all_int(x.shape):
        return x._reduce(Ops.ADD, axis, keepdim)
    axes = x._reduce_axes(axis)
    count = prod(x.shape[a] for a in axes)
    if count <= _CASCADE_MIN or (count <= _CASCADE_ALWAYS and len(axes) == x.ndim and count % 64 == 0):
        return x._reduce(Ops.ADD, axis, keepdim)
    kept = [i for i in range(x.ndim) if i not in axes]
    lead = tuple(int(x.shape[i]) for i in kept)
    y = x.permute(*kept, *axes) if kept and kept != list(range(len(kept))) else x
    y = y.reshape(*lead, count)
    chunk, tails = _CASCADE_CHUNK, []
    while count > chunk:
        groups = count // chunk
        groups -= groups % _CASCADE_GROUPS if groups > _CASCADE_GROUPS else 0
        if groups * chunk != count:
            # the rest is summed on its own: a padded (masked) last chunk, or a group count the backend can't split
            # evenly over lanes and threads, would keep the chunk kernel from vectorizing
            rest = y.shrink((*((0, s) for s in lead), (groups * chunk, count)))
            tails.append(rest._reduce(Ops.ADD, -1, False))
            y = y.shrink((*((0, s) for s in lead), (0, groups * chunk)))
        y = y.reshape(*lead, groups, chunk)._reduce(Ops.ADD, -1, False)
        count, chunk = groups, _CASCADE_TOP
    y = y._reduce(Ops.ADD, -1, False)
    for tail in reversed(tails):  # smallest first
        y = y + tail
    return y.reshape(tuple(1 if i in axes else s for i, s in enumerate(x.shape))) if keepdim else y


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
        self: Tensor,
        axis: int | Sequence[int] | None = None,
        keepdim: bool = False,
        dtype: Any = None,
        *,
        acc_dtype: Any = None,
    ) -> Tensor:  # type: ignore[misc]
        """Product over `axis` (all by default; 1 over nothing). Integer accumulation dtypes as `sum`; ``dtype``
        (``acc_dtype`` is an older tinycore alias) casts the input first and is the result's dtype, as `torch.prod`."""
        if dtype is not None and acc_dtype is not None and dtype != acc_dtype:
            raise TypeError(f"prod: dtype={dtype} and acc_dtype={acc_dtype} disagree (acc_dtype is an alias of dtype)")
        acc_dtype = dtype if dtype is not None else acc_dtype
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
        """Variance over `axis`: ``sum((x - mean)**2) / max(0, N - correction)`` (inf/NaN when that is 0).
        float16/bfloat16 are computed in float32 and cast back at the end, like PyTorch."""
        out = least_upper_float(self.dtype)
        return self._var_acc(axis, keepdim, correction).cast(out)

    def _var_acc(self: Tensor, axis: Any, keepdim: bool, correction: int | float) -> Tensor:  # type: ignore[misc]
        x = self.cast(sum_acc_dtype(least_upper_float(self.dtype)))  # float32 for the half types
        n = prod(self.shape[a] for a in self._reduce_axes(axis))
        sq = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
        return sq.div(x._const_like(max(0, n - correction), x.dtype, ()))

    def std(
        self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int | float = 1
    ) -> Tensor:  # type: ignore[misc]
        """Standard deviation over `axis`: ``sqrt(var(axis, keepdim, correction))`` (the square root taken in float32
        for the half types, like PyTorch). Where the variance is 0 the gradient is 0, as in PyTorch (the root's
        derivative is infinite there, and ``inf * 0`` would be NaN)."""
        v = self._var_acc(axis, keepdim, correction)
        zero = v == 0
        return zero.where(0.0, zero.where(1.0, v).sqrt()).cast(least_upper_float(self.dtype))

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
        """``log(cumsum(exp(x)))`` along `axis`, each prefix shifted by its own (detached) max as in PyTorch, so an
        element far below a later maximum still counts; NaNs spoil only the prefixes that contain them.
        float16/bfloat16 are computed in float32. Blocked like `cumsum`: O(n * 64) work."""
        out = least_upper_float(self.dtype)
        x = self.cast(sum_acc_dtype(out))
        if x.ndim == 0:
            return x.cast(out)
        ax = x._axis(axis)
        if x.shape[ax] == 0:
            return x.cast(out)
        y = x.transpose(ax, -1) if ax != x.ndim - 1 else x
        r = _logcumsumexp_last(y)
        return (r.transpose(ax, -1) if ax != x.ndim - 1 else r).cast(out)

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
