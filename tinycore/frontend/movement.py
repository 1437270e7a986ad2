"""Movement, joining and indexing: methods of `Tensor` (see `tinycore/frontend/__init__.py`).

Everything here is written with the core movement ops (`reshape expand permute pad shrink flip`), `where`,
comparisons and reductions, so every result is a lazy graph the scheduler fuses.

How data-dependent reads are built (the IR has no gather op: a kernel only loads at addresses computed from its
loop indices):

- **One-hot selection** (the general path of advanced indexing, `gather`, `scatter*`): compare the index tensor
  with `arange(n)` along a new axis, ``mask.where(x, 0).sum(that axis)``. It stays one fused kernel, and its
  gradient is the transposed one-hot. Code generation turns the pick into one load at the index
  (`tinycore.codegen.select_fold`), so a read costs ``O(numel(out))``; the gradient (a scatter) and `scatter*`
  still cost ``O(numel(out) * n)``, where ``n`` is the size of the indexed dimension(s).
- **Static gather** (indices known on the host: Python ints/lists, numpy arrays): consecutive runs of indices are
  cut out with `shrink` and joined with `cat`, costing ``O(numel(out) * pieces)``. Used when the indices form at
  most `_STATIC_PIECES` runs and the indexed range is larger than the number of pieces (so it is cheaper than the
  one-hot form). Tensor indices always take the one-hot path (their values are unknown until run).
- **Boolean masks** have a data-dependent result size, so, like PyTorch, they synchronize: the mask is realized,
  its ``nonzero`` positions are computed on the host and indexing continues with those (static) indices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tinycore.dtype import dtypes, least_upper_dtype
from tinycore.helpers import prod
from tinycore.uop.ops import Ops

if TYPE_CHECKING:
    from tinycore.frontend.tensor import Tensor

__all__ = ["MovementMixin"]

# at most this many shrink pieces for a host-known index (beyond it the one-hot form is used)
_STATIC_PIECES = 16


def _T() -> Any:  # noqa: N802 - the tensor module, imported lazily (it imports this module)
    import tinycore.frontend.tensor as tensor_module

    return tensor_module


def _fmt(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _dim(d: int, ndim: int) -> int:
    """`d` normalized for a tensor of `ndim` dims (0-d tensors accept -1 and 0), or PyTorch's IndexError."""
    n = max(ndim, 1)
    if not isinstance(d, int) or isinstance(d, bool):
        raise TypeError(f"a dimension must be an int, got {type(d).__name__}")
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return d % n if ndim else 0


def _broadcast_position(dims: list[int]) -> int:
    """Where advanced indexing puts the broadcast index dimensions (numpy's rule): at the first indexed dimension
    when the indexed dimensions are adjacent, else first."""
    return dims[0] if dims == list(range(dims[0], dims[0] + len(dims))) else 0


def _empty_from(x: Tensor, shape: tuple[int, ...], dtype: Any = None) -> Tensor:
    """A 0-element tensor of `shape` still connected to `x` in the graph (so gradients reach `x` as zeros)."""
    flat = x.reshape(-1) if x.ndim != 1 else x
    out = flat.shrink(((0, 0),)).reshape(shape)
    return out if dtype is None else out.cast(dtype)


def _as_index_array(value: Any) -> Any:
    """A host index (Python ints/lists, numpy array) as an int64 or bool numpy array, else None."""
    import numpy as np

    arr = np.asarray(value)
    if arr.dtype == np.bool_ or np.issubdtype(arr.dtype, np.integer):
        return arr.astype(np.int64) if arr.dtype != np.bool_ else arr
    if arr.size == 0:
        return arr.astype(np.int64)
    raise IndexError(
        "tensors used as indices must be long, int, byte or bool tensors, got a list/array of " + str(arr.dtype)
    )


class _Adv:
    """An advanced (integer array) index: a lazy Tensor, or a host numpy array (`host`) whose values are known."""

    __slots__ = ("tensor", "host")

    def __init__(self, tensor: Tensor | None, host: Any) -> None:
        self.tensor, self.host = tensor, host

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.host.shape) if self.host is not None else tuple(self.tensor.shape)  # type: ignore[union-attr]


class MovementMixin:
    """Movement, joining and indexing, mixed into `tinycore.tensor.Tensor`."""

    __slots__ = ()

    # ------------------------------------------------------------------------------------------------------------
    # padding

    def pad(self: Any, padding: Sequence[Any], mode: Any = "constant", value: Any = 0.0) -> Tensor:
        """Pad like `torch.nn.functional.pad`: `padding` is a flat sequence ``(last_before, last_after,
        prev_before, ...)`` or one ``(before, after)`` pair (or None) per dimension. Negative amounts crop first.

        `mode` is ``"constant"`` (fill with `value`), ``"reflect"`` (mirror without repeating the edge),
        ``"replicate"`` (repeat the edge) or ``"circular"`` (wrap around). Unlike PyTorch, the non-constant modes work
        on any dimensions, not only the last 1-3 of a batched input.

        >>> Tensor([1, 2, 3]).pad((2, 1), mode="reflect").tolist()  # doctest: +SKIP
        [3, 2, 1, 2, 3, 2]
        """
        if not isinstance(mode, str):  # the older signature pad(padding, value)
            mode, value = "constant", mode
        if mode not in ("constant", "reflect", "replicate", "circular"):
            raise NotImplementedError(f"pad: unknown mode {mode!r} (constant, reflect, replicate or circular)")
        if all(isinstance(p, int) for p in padding):
            if len(padding) % 2 or len(padding) // 2 > self.ndim:
                raise ValueError(f"flat padding needs an even length of at most {2 * self.ndim}, got {len(padding)}")
            pairs: list[tuple[Any, Any]] = [(0, 0)] * self.ndim
            for i in range(len(padding) // 2):
                pairs[self.ndim - 1 - i] = (padding[2 * i], padding[2 * i + 1])
        else:
            if len(padding) != self.ndim:
                raise ValueError(f"padding has {len(padding)} entries for a {self.ndim}-d tensor")
            pairs = [(0, 0) if p is None else (p[0], p[1]) for p in padding]
        if all(b == 0 and a == 0 for b, a in pairs):
            return self
        x = self
        if any(b < 0 or a < 0 for b, a in pairs):
            for (b, a), s in zip(pairs, x.shape):
                if s + min(b, 0) + min(a, 0) < 0:
                    raise RuntimeError(
                        f"pad: the negative padding {tuple(p for pr in pairs for p in pr)} crops more than the "
                        f"input shape {_fmt(self.shape)} holds"
                    )
            x = x.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, x.shape)))
            pairs = [(max(b, 0), max(a, 0)) for b, a in pairs]
        if mode == "constant":
            return x._pad_constant(tuple(pairs), value)
        for d, (b, a) in enumerate(pairs):
            if b == 0 and a == 0:
                continue
            n = x.shape[d]
            if mode == "reflect" and (b >= n or a >= n):
                raise RuntimeError(
                    f"Argument #4: Padding size should be less than the corresponding input dimension, but got: "
                    f"padding ({b}, {a}) at dimension {d} of input {_fmt(self.shape)}"
                )
            if mode == "circular" and (b > n or a > n):
                raise RuntimeError(
                    f"Padding value causes wrapping around more than once: padding ({b}, {a}) at dimension {d} of "
                    f"input {_fmt(self.shape)}"
                )
            if mode == "replicate" and n == 0:
                raise RuntimeError(f"pad: replicate needs a non-empty dimension {d}, got input {_fmt(self.shape)}")
            parts = []
            if mode == "reflect":
                if b:
                    parts.append(x._slice_dim(d, 1, b + 1).flip(d))
                parts.append(x)
                if a:
                    parts.append(x._slice_dim(d, n - 1 - a, n - 1).flip(d))
            elif mode == "replicate":
                if b:
                    parts.append(x._slice_dim(d, 0, 1).expand(*[b if i == d else s for i, s in enumerate(x.shape)]))
                parts.append(x)
                if a:
                    parts.append(x._slice_dim(d, n - 1, n).expand(*[a if i == d else s for i, s in enumerate(x.shape)]))
            else:
                if b:
                    parts.append(x._slice_dim(d, n - b, n))
                parts.append(x)
                if a:
                    parts.append(x._slice_dim(d, 0, a))
            x = parts[0].cat(*parts[1:], dim=d)
        return x

    def _pad_constant(self: Any, pairs: tuple[tuple[Any, Any], ...], value: Any) -> Tensor:
        """Zero-padding by the PAD op; other values through a padded mask (pairs are non-negative)."""
        T = _T()
        padded = T._wrap(self.uop.pad(pairs), self.device, None, self._requires_grad)
        if value == 0 and not (isinstance(value, float) and math.copysign(1.0, value) < 0):
            return padded
        if self.dtype != dtypes.bool and dtypes.is_int(self.dtype) and isinstance(value, float):
            value = int(value) if float(value).is_integer() else value
        mask = T.Tensor.ones(*self.shape, dtype=dtypes.bool, device=self.device).uop.pad(pairs)
        mask = T._wrap(mask, self.device, None, False)  # constants never need a gradient (requires_grad False)
        fill = T._wrap(T._const_uop(value, self.dtype, self.device, padded.shape), self.device, None, False)
        return mask.where(padded, fill)

    def _slice_dim(self: Any, d: int, start: Any, stop: Any) -> Tensor:
        """Elements ``[start, stop)`` of dimension `d`."""
        return self.shrink(tuple((start, stop) if i == d else None for i in range(self.ndim)))

    # ------------------------------------------------------------------------------------------------------------
    # reshaping helpers

    def squeeze(self: Any, dim: int | Sequence[int] | None = None) -> Tensor:
        """Remove size-1 dimensions: all of them, or those of `dim` (an int or a tuple) that have size 1.

        >>> Tensor.zeros(2, 1, 3, 1).squeeze().shape, Tensor.zeros(2, 1, 3, 1).squeeze(1).shape
        ((2, 3), (2, 3, 1))
        """
        if dim is None:
            axes = {i for i, s in enumerate(self.shape) if s == 1}
        else:
            axes = {_dim(d, self.ndim) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}
            axes = {i for i in axes if self.ndim and self.shape[i] == 1}
        if not axes:
            return self
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def unsqueeze(self: Any, dim: int) -> Tensor:
        """Insert a size-1 dimension at `dim` (``-ndim-1 <= dim <= ndim``).

        >>> Tensor.zeros(2, 3).unsqueeze(-1).shape
        (2, 3, 1)
        """
        d = _dim(dim, self.ndim + 1)
        return self.reshape(*self.shape[:d], 1, *self.shape[d:])

    def unflatten(self: Any, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split dimension `dim` into `sizes` (one may be -1).

        >>> Tensor.zeros(2, 12).unflatten(1, (3, -1)).shape
        (2, 3, 4)
        """
        d = _dim(dim, self.ndim)
        if self.ndim == 0:
            raise RuntimeError("unflatten: a 0-d tensor has no dimension to unflatten")
        sizes = tuple(sizes)
        if not sizes:
            raise RuntimeError("unflatten: sizes must be non-empty")
        n = self.shape[d]
        if -1 in sizes:
            known = prod(s for s in sizes if s != -1)
            if sizes.count(-1) > 1 or known == 0 or n % known:
                raise RuntimeError(f"unflatten: sizes {list(sizes)} can't split dimension {d} of size {n}")
            sizes = tuple(n // known if s == -1 else s for s in sizes)
        if prod(sizes) != n:
            raise RuntimeError(
                f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of dim {dim} ({n}) in the "
                f"input tensor"
            )
        return self.reshape(*self.shape[:d], *sizes, *self.shape[d + 1 :])

    # ------------------------------------------------------------------------------------------------------------
    # joining and splitting

    def cat(self: Any, *args: Any, dim: int = 0) -> Tensor:
        """Concatenate tensors along `dim`: ``a.cat(b, c, dim=1)``, ``Tensor.cat(a, b)`` or ``Tensor.cat([a, b])``.

        The result dtype is the promotion of all inputs; devices must match. Like PyTorch, 1-d empty tensors
        (shape ``(0,)``) are skipped whatever the others' shapes.

        >>> Tensor.zeros(2, 3).cat(Tensor.ones(1, 3)).shape
        (3, 3)
        """
        T = _T()
        tensors = [*self, *args] if isinstance(self, (list, tuple)) else [self, *args]
        if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
            tensors = list(tensors[0])
        if not tensors:
            raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
        for i, t in enumerate(tensors):
            if not isinstance(t, T.Tensor):
                raise TypeError(f"cat: expected a Tensor at position {i}, got {type(t).__name__}")
        devices = {t.device for t in tensors}
        if len(devices) > 1:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                + " and ".join(sorted(devices))
            )
        dtype = least_upper_dtype(*[t.dtype for t in tensors])
        real = [(i, t) for i, t in enumerate(tensors) if t.shape != (0,)] or [(0, tensors[0])]
        ref = real[0][1]
        if ref.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {real[0][0]}) cannot be concatenated")
        d = _dim(dim, ref.ndim)
        for i, t in real:
            if t.ndim != ref.ndim:
                raise RuntimeError(
                    f"Tensors must have same number of dimensions: got {ref.ndim} and {t.ndim} "
                    f"(shapes {_fmt(ref.shape)} and {_fmt(t.shape)})"
                )
            for j, (a, b) in enumerate(zip(ref.shape, t.shape)):
                if j != d and a != b:
                    raise RuntimeError(
                        f"Sizes of tensors must match except in dimension {d}. Expected size {a} but got size {b} "
                        f"for tensor number {i} in the list (shapes {_fmt(ref.shape)} and {_fmt(t.shape)})."
                    )
        # skipped legacy (0,) tensors still join (as empty slices) so that they get a gradient
        empty = tuple(0 if j == d else s for j, s in enumerate(ref.shape))
        parts = [(t if t.shape != (0,) or ref.ndim == 1 else t.reshape(empty)).cast(dtype) for t in tensors]
        if len(parts) == 1:
            return parts[0]
        total = sum(t.shape[d] for t in parts)
        out: Tensor | None = None
        offset = 0
        for t in parts:
            n = t.shape[d]
            pairs = tuple((offset, total - offset - n) if j == d else (0, 0) for j in range(t.ndim))
            offset += n
            padded = T._wrap(t.uop.pad(pairs), t.device, None, t._requires_grad)
            if out is None:
                out = padded
            else:
                mask = T.Tensor.ones(*t.shape, dtype=dtypes.bool, device=t.device)
                out = T._wrap(mask.uop.pad(pairs), t.device, None, False).where(padded, out)
        assert out is not None
        return out

    def stack(self: Any, *args: Any, dim: int = 0) -> Tensor:
        """Join equally shaped tensors along a new dimension `dim`: ``a.stack(b)``, ``Tensor.stack([a, b], dim=1)``.

        >>> Tensor.zeros(2, 3).stack(Tensor.ones(2, 3), dim=1).shape
        (2, 2, 3)
        """
        T = _T()
        tensors = [*self, *args] if isinstance(self, (list, tuple)) else [self, *args]
        if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
            tensors = list(tensors[0])
        if not tensors:
            raise RuntimeError("stack expects a non-empty TensorList")
        for i, t in enumerate(tensors):
            if not isinstance(t, T.Tensor):
                raise TypeError(f"stack: expected a Tensor at position {i}, got {type(t).__name__}")
            if t.shape != tensors[0].shape:
                raise RuntimeError(
                    f"stack expects each tensor to be equal size, but got {_fmt(tensors[0].shape)} at entry 0 and "
                    f"{_fmt(t.shape)} at entry {i}"
                )
        d = _dim(dim, tensors[0].ndim + 1)
        return tensors[0].unsqueeze(d).cat(*[t.unsqueeze(d) for t in tensors[1:]], dim=d)

    def split(self: Any, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Split along `dim` into pieces of `sizes` elements (an int: equal pieces, the last may be smaller; a list:
        those sizes, which must add up to the dimension).

        >>> [t.shape for t in Tensor.zeros(5, 2).split(2)]
        [(2, 2), (2, 2), (1, 2)]
        """
        d = _dim(dim, self.ndim)
        if self.ndim == 0:
            raise RuntimeError("split: a 0-d tensor can't be split")
        n = self.shape[d]
        if isinstance(sizes, int):
            if sizes <= 0 and not (sizes == 0 and n == 0):
                raise RuntimeError(f"split expects split_size be non-negative, but got split_size={sizes}")
            lengths = [min(sizes, n - i) for i in range(0, n, sizes)] if n else [0]
        else:
            lengths = list(sizes)
            if sum(lengths) != n or any(s < 0 for s in lengths):
                raise RuntimeError(
                    f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at dimension "
                    f"{d}), but got split_sizes={lengths}"
                )
        out, start = [], 0
        for length in lengths:
            out.append(self._slice_dim(d, start, start + length))
            start += length
        return tuple(out)

    def chunk(self: Any, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """Split into `chunks` pieces of ``ceil(size / chunks)`` elements along `dim` (possibly fewer pieces, like
        `torch.chunk`; an empty dimension gives `chunks` empty pieces).

        >>> len(Tensor.zeros(6).chunk(4))
        3
        """
        if chunks <= 0:
            raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
        d = _dim(dim, self.ndim)
        n = self.shape[d]
        if n == 0:
            return tuple(self for _ in range(chunks))
        return self.split(-(-n // chunks), d)

    # ------------------------------------------------------------------------------------------------------------
    # repeating and rolling

    def repeat(self: Any, repeats: Any = (), *args: Any) -> Tensor:
        """Tile the tensor: ``repeats`` gives the number of copies per dimension (leading extra entries add
        dimensions), like `torch.Tensor.repeat`.

        >>> Tensor([1, 2]).repeat(2, 2).shape
        (2, 4)
        """
        reps = tuple(repeats) if not args and isinstance(repeats, (tuple, list)) else (repeats, *args)
        if len(reps) < self.ndim:
            raise RuntimeError(
                "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor"
            )
        if any(r < 0 for r in reps):
            raise RuntimeError(f"Trying to create tensor with negative dimension: repeats {list(reps)}")
        base = (1,) * (len(reps) - self.ndim) + tuple(self.shape)
        final = tuple(r * s for r, s in zip(reps, base))
        if prod(final) == 0:
            return _empty_from(self, final)
        x = self.reshape(tuple(v for s in base for v in (1, s)))
        x = x.expand(tuple(v for r, s in zip(reps, base) for v in (r, s)))
        return x.reshape(final)

    def repeat_interleave(self: Any, repeats: Any, dim: int | None = None) -> Tensor:
        """Repeat each element `repeats` times along `dim` (the flattened tensor when None). `repeats` is an int, or
        one count per element (a list or tensor; a tensor is read back to the host, the result size depends on it).

        >>> Tensor([1, 2]).repeat_interleave(2).tolist()  # doctest: +SKIP
        [1, 1, 2, 2]
        """
        import numpy as np

        T = _T()
        x = self.reshape(-1) if dim is None else self
        d = 0 if dim is None else _dim(dim, x.ndim)
        if x.ndim == 0:
            x = x.reshape(1)
        if isinstance(repeats, T.Tensor):
            repeats = repeats.numpy().reshape(-1).tolist() if repeats.ndim else int(repeats.item())
        if isinstance(repeats, (list, tuple)) and len(repeats) == 1:
            repeats = int(repeats[0])
        if isinstance(repeats, int):
            if repeats < 0:
                raise RuntimeError("repeat_interleave: repeats can not be negative")
            shape = tuple(x.shape)
            final = (*shape[:d], shape[d] * repeats, *shape[d + 1 :])
            if prod(final) == 0:
                return _empty_from(x, final)
            y = x.unsqueeze(d + 1).expand(*shape[: d + 1], repeats, *shape[d + 1 :])
            return y.reshape(final)
        counts = [int(r) for r in repeats]
        if len(counts) != x.shape[d]:
            raise RuntimeError(f"repeats must have the same size as input along dim, but got {len(counts)}")
        if any(c < 0 for c in counts):
            raise RuntimeError("repeat_interleave: repeats can not be negative")
        index = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        return x._index_dim(d, _Adv(None, index))

    def roll(self: Any, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
        """Rotate elements along `dims` by `shifts` (elements leaving the end come back at the start); with `dims`
        None the flattened tensor is rolled, then reshaped.

        >>> Tensor([1, 2, 3]).roll(1).tolist()  # doctest: +SKIP
        [3, 1, 2]
        """
        if dims is None:
            if not isinstance(shifts, int):
                if len(shifts) != 1:
                    raise RuntimeError("roll: with dims=None, shifts must be one int")
                shifts = shifts[0]
            return self.reshape(-1).roll(shifts, 0).reshape(self.shape)
        sh = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        ds = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(sh) != len(ds):
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(sh)}, dims:{len(ds)}")
        x = self
        for s, dd in zip(sh, ds):
            d = _dim(dd, x.ndim)
            if x.ndim == 0:
                continue
            n = x.shape[d]
            k = s % n if n else 0
            if k:
                x = x._slice_dim(d, n - k, n).cat(x._slice_dim(d, 0, n - k), dim=d)
        return x

    def unfold(self: Any, dim: int, size: int, step: int) -> Tensor:
        """All windows of `size` elements, `step` apart, along `dim` (`torch.Tensor.unfold`): that dimension
        becomes the window count and a new last dimension of `size` is added. Movement ops only (no copies):
        the data is tiled, reshaped with rows `step` longer than the dimension, so row ``i`` starts at ``i * step``.

        >>> Tensor.arange(7).unfold(0, 3, 2).tolist()  # doctest: +SKIP
        [[0, 1, 2], [2, 3, 4], [4, 5, 6]]
        """
        d = _dim(dim, self.ndim)
        x = self if self.ndim else self.reshape(1)
        n = x.shape[d]
        if size > n:
            raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
        if step <= 0:
            raise RuntimeError(f"step is {step} but must be > 0")
        if size < 0:
            raise RuntimeError(f"size is {size} but must be >= 0")
        count = (n - size) // step + 1
        final = (*x.shape[:d], count, *x.shape[d + 1 :], size)
        if self.ndim == 0:
            final = (size,)
        if prod(final) == 0:
            return _empty_from(x, final)
        y = x.transpose(d, -1) if d != x.ndim - 1 else x  # window dim last: (..., n)
        lead = tuple(y.shape[:-1])
        width = n + step
        need = count * width
        tiles = -(-need // n)
        z = y.repeat(*([1] * len(lead)), tiles).shrink(tuple([None] * len(lead) + [(0, need)]))
        z = z.reshape(*lead, count, width).shrink(tuple([None] * (len(lead) + 1) + [(0, size)]))  # (..., count, size)
        if d != x.ndim - 1:  # put count back at d (it sits where n was moved to), size stays last
            order = list(range(z.ndim))
            order[d], order[z.ndim - 2] = order[z.ndim - 2], order[d]
            z = z.permute(order)
        return z.reshape(final)

    # ------------------------------------------------------------------------------------------------------------
    # indexing

    def __getitem__(self: Any, indices: Any) -> Tensor:
        """NumPy/PyTorch indexing: ints (negative from the end), slices (any step, negative steps too), None,
        Ellipsis, integer tensors/lists/arrays (advanced indexing, broadcast together; PyTorch's placement of the
        result dimensions) and boolean masks. See the module docstring for how data-dependent reads are built.
        Out-of-range ints and host indices (lists, arrays, masks) raise IndexError; the values of a lazy Tensor
        index are not known here, so an out-of-range one selects nothing (reads 0) instead of raising.

        >>> t = Tensor.arange(24).reshape(2, 3, 4)
        >>> t[1, ::-2, None].shape, t[[0, 1], :, [2, 3]].shape, t[..., Tensor([0, 3])].shape
        ((2, 1, 4), (2, 3), (2, 3, 2))
        """
        return self._getitem(indices)

    def _parse_index(self: Any, indices: Any) -> list[tuple[str, Any]]:
        """The index as a list of ``(kind, value)`` with kind ``int slice none adv`` (bool masks become their
        nonzero positions, Ellipsis is expanded), each ``int slice adv`` consuming one dimension in order."""
        import numpy as np

        T = _T()
        items = list(indices) if isinstance(indices, tuple) else [indices]
        parsed: list[tuple[str, Any]] = []
        for item in items:
            if item is None:
                parsed.append(("none", None))
            elif item is Ellipsis:
                parsed.append(("ellipsis", None))
            elif isinstance(item, bool) or (isinstance(item, np.bool_)):
                parsed.append(("none", None))
                if not item:
                    parsed.append(("empty", None))
            elif isinstance(item, (int, np.integer)):
                parsed.append(("int", int(item)))
            elif isinstance(item, slice):
                parsed.append(("slice", item))
            elif isinstance(item, T.Tensor):
                if item.dtype == dtypes.bool:
                    parsed.append(("mask", item))
                elif dtypes.is_int(item.dtype):
                    if item.device != self.device:
                        raise RuntimeError(
                            f"indices should be either on {self.device} or on the same device as the indexed tensor "
                            f"({item.device})"
                        )
                    parsed.append(("adv", _Adv(item, None)))
                else:
                    raise IndexError(
                        f"tensors used as indices must be long, int, byte or bool tensors, got {item.dtype}"
                    )
            elif isinstance(item, (list, tuple, np.ndarray)):
                arr = _as_index_array(item)
                parsed.append(("mask", arr) if arr.dtype == np.bool_ else ("adv", _Adv(None, arr)))
            else:
                raise IndexError(
                    "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid "
                    f"indices (got {type(item).__name__})"
                )
        # masks consume as many dims as they have; a 0-d mask acts like a Python bool
        consumed = sum(1 for k, _ in parsed if k in ("int", "slice", "adv"))
        consumed += sum(max(len(v.shape), 0) for k, v in parsed if k == "mask")
        if sum(1 for k, _ in parsed if k == "ellipsis") > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if consumed > self.ndim:
            raise IndexError(f"too many indices for tensor of dimension {self.ndim}")
        out: list[tuple[str, Any]] = []
        dim = 0
        for kind, value in parsed:
            if kind == "ellipsis":
                for _ in range(self.ndim - consumed):
                    out.append(("slice", slice(None)))
                    dim += 1
            elif kind == "mask":
                arr = value.numpy() if isinstance(value, T.Tensor) else value
                if arr.ndim == 0:
                    out.append(("none", None))
                    if not bool(arr):
                        out.append(("empty", None))
                    continue
                for j, (ms, xs) in enumerate(zip(arr.shape, self.shape[dim : dim + arr.ndim])):
                    if ms != xs:
                        raise IndexError(
                            f"The shape of the mask {_fmt(arr.shape)} at index {j} does not match the shape of the "
                            f"indexed tensor {_fmt(self.shape)} at index {dim + j}"
                        )
                for positions in np.nonzero(arr):
                    out.append(("adv", _Adv(None, positions.astype(np.int64))))
                dim += arr.ndim
            else:
                out.append((kind, value))
                dim += kind != "none" and kind != "empty"
        if not any(k == "ellipsis" for k, _ in parsed):
            out.extend(("slice", slice(None)) for _ in range(self.ndim - consumed))
        return out

    def _basic_index(self: Any, parsed: list[tuple[str, Any]]) -> tuple[Tensor, list[tuple[int, _Adv]], Any]:
        """Apply ints, slices and None with movement ops. Returns the view, the advanced indices with the dimension
        of the view they index, and `inverse`: a function mapping a tensor of the view's shape back into this
        tensor's shape (zeros outside the view), used by `__setitem__`."""
        x = self
        bounds, flips, strides, steps_out, final_shape = [], [], [], [], []
        adv: list[tuple[int, _Adv]] = []
        dim = 0
        for kind, value in parsed:
            if kind == "none":
                final_shape.append(("new", 1))
                continue
            if kind == "empty":
                final_shape[-1] = ("new", 0)
                continue
            n = x.shape[dim]
            if kind == "int":
                if not -n <= value < n:
                    raise IndexError(f"index {value} is out of bounds for dimension {dim} with size {n}")
                i = value % n
                bounds.append((i, i + 1))
                flips.append(False)
                strides.append(1)
                steps_out.append(1)
            elif kind == "slice":
                if not all(v is None or isinstance(v, (int,)) or hasattr(v, "__index__") for v in
                           (value.start, value.stop, value.step)):  # fmt: skip
                    raise TypeError(f"slice indices must be integers or None, got {value}")
                if value.step == 0:
                    raise ValueError("slice step cannot be zero")
                start, stop, step = value.indices(n)
                count = len(range(start, stop, step))
                if count == 0:
                    bounds.append((0, 0))
                    flips.append(False)
                    strides.append(1)
                elif step > 0:
                    bounds.append((start, start + (count - 1) * step + 1))
                    flips.append(False)
                    strides.append(step)
                else:
                    last = start + (count - 1) * step
                    bounds.append((last, start + 1))
                    flips.append(True)
                    strides.append(-step)
                steps_out.append(count)
                final_shape.append(("dim", dim))
            else:  # adv
                bounds.append((0, n))
                flips.append(False)
                strides.append(1)
                steps_out.append(n)
                adv.append((sum(1 for k, _ in final_shape if k != "drop"), value))
                final_shape.append(("dim", dim))
            if kind == "int":
                final_shape.append(("drop", dim))
            dim += 1
        # 1. shrink, 2. flip, 3. strides (pad to a multiple, reshape, take the first of each group)
        shrunk = x.shrink(tuple(bounds)) if x.ndim else x
        flipped = shrunk.flip(tuple(i for i, f in enumerate(flips) if f)) if any(flips) else shrunk
        strided = flipped
        if any(s != 1 for s in strides):
            sizes = list(flipped.shape)
            pads = tuple((0, c * s - m) if s != 1 else (0, 0) for c, s, m in zip(steps_out, strides, sizes))
            padded = flipped.pad(pads)
            grouped = padded.reshape(tuple(v for c, s, m in zip(steps_out, strides, sizes)
                                           for v in ((c, s) if s != 1 else (m,))))  # fmt: skip
            keep = tuple(v for s in strides for v in (((None), (0, 1)) if s != 1 else (None,)))
            strided = grouped.shrink(keep).reshape(tuple(steps_out))
        view_shape = tuple(strided.shape)
        shape = tuple(view_shape[v] if k == "dim" else 1 for k, v in final_shape if k != "drop")
        out = strided.reshape(shape) if shape != view_shape else strided
        if any(k == "new" and v == 0 for k, v in final_shape):  # a False index: an empty new dimension
            kept = [(k, v) for k, v in final_shape if k != "drop"]
            out = out.shrink(tuple((0, 0) if k == "new" and v == 0 else None for k, v in kept))

        def inverse(v: Tensor) -> Tensor:
            y = v.reshape(view_shape) if tuple(v.shape) != view_shape else v
            if any(s != 1 for s in strides):
                sizes = list(flipped.shape)
                y = y.reshape(tuple(w for c, s in zip(steps_out, strides) for w in ((c, 1) if s != 1 else (c,))))
                y = y.pad(tuple(p for s in strides for p in (((0, 0), (0, s - 1)) if s != 1 else ((0, 0),))))
                y = y.reshape(tuple(c * s for c, s in zip(steps_out, strides)))
                y = y.shrink(tuple((0, m) for m in sizes))
            if any(flips):
                y = y.flip(tuple(i for i, f in enumerate(flips) if f))
            if x.ndim:
                y = y.pad(tuple((b, s - e) for (b, e), s in zip(bounds, x.shape)))
            return y

        return out, adv, inverse

    def _getitem(self: Any, indices: Any) -> Tensor:
        view, adv, _ = self._basic_index(self._parse_index(indices))
        if not adv:
            return view
        return view._advanced(adv)

    def _advanced(self: Any, adv: list[tuple[int, _Adv]]) -> Tensor:
        """Advanced indexing of dimensions ``[d for d, _ in adv]`` of this (basic-indexed) view."""
        import numpy as np

        T = _T()
        dims = [d for d, _ in adv]
        try:
            bshape = T._broadcast_shape(*[a.shape for _, a in adv])
        except RuntimeError:
            raise IndexError(
                "shape mismatch: indexing tensors could not be broadcast together with shapes "
                + ", ".join(_fmt(a.shape) for _, a in adv)
            ) from None
        sizes = [self.shape[d] for d in dims]
        # one linear index over the advanced dims (moved to the end, merged)
        others = [i for i in range(self.ndim) if i not in dims]
        x = self.permute(*others, *dims) if others + dims != list(range(self.ndim)) else self
        other_shape = tuple(self.shape[i] for i in others)
        total = prod(sizes)
        x = x.reshape(*other_shape, total)
        if all(a.host is not None for _, a in adv):
            lin = np.zeros(bshape, dtype=np.int64)
            for (d, a), n in zip(adv, sizes):
                bad = (a.host < -n) | (a.host >= n)
                if bad.any():
                    raise IndexError(
                        f"index {int(a.host[bad].reshape(-1)[0])} is out of bounds for dimension {d} with size {n}"
                    )
                lin = lin * n + np.where(a.host < 0, a.host + n, a.host)
            picked = x._take_last(_Adv(None, lin))
        else:
            lin_t: Tensor | None = None
            for (_, a), n in zip(adv, sizes):
                t = a.tensor if a.tensor is not None else T.Tensor(a.host, device=self.device, dtype=dtypes.int32)
                t = t.cast(dtypes.int32) if t.dtype != dtypes.int32 else t
                t = (t < 0).where(t + n, t)._broadcast_to(bshape)
                lin_t = t if lin_t is None else lin_t * n + t
            assert lin_t is not None
            return x._pick_last_into(lin_t, _broadcast_position(dims))
        # picked: other_shape + bshape; place the broadcast dims
        nb, no = len(bshape), len(other_shape)
        at = _broadcast_position(dims)
        order = list(range(no, no + nb))
        order = list(range(at)) + order + list(range(at, no))
        return picked.permute(order) if order != list(range(no + nb)) else picked

    def _pick_last_into(self: Any, index: Tensor, at: int) -> Tensor:
        """``self[..., index]`` along the last dimension with `index`'s dimensions placed at position `at` of the
        result (``lead[:at] + index.shape + lead[at:]``), built in that order: the kernel (a one-hot sum that code
        generation folds into one load, `tinycore.codegen.select_fold`) then writes its output contiguously instead
        of through a transposing view. Indices must be in range and non-negative."""
        T = _T()
        n, lead, bshape = self.shape[-1], tuple(self.shape[:-1]), tuple(index.shape)
        final = (*lead[:at], *bshape, *lead[at:])
        if prod(final) == 0 or n == 0:
            return _empty_from(self, final)
        arange = T.Tensor.arange(n, device=self.device, dtype=dtypes.int32)
        mask = index.reshape(*([1] * at), *bshape, *([1] * (len(lead) - at)), 1) == arange
        src = self.reshape(*lead[:at], *([1] * len(bshape)), *lead[at:], n)
        return src._select_sum(mask, -1)

    def _take_last(self: Any, index: _Adv) -> Tensor:
        """``out[..., *b] = self[..., index[*b]]`` along the last dimension, for host-known indices (in range and
        non-negative): a few runs of consecutive indices are cut out and joined, more are one-hot picked."""
        import numpy as np

        T = _T()
        n = self.shape[-1]
        lead = tuple(self.shape[:-1])
        bshape = index.shape
        if prod(lead) * prod(bshape) == 0 or n == 0:
            return _empty_from(self, (*lead, *bshape))
        assert index.host is not None, "tensor indices are picked by _pick_last_into"
        runs: list[tuple[int, int]] = []
        for v in index.host.reshape(-1).tolist():
            if runs and runs[-1][1] == v:
                runs[-1] = (runs[-1][0], v + 1)
            else:
                runs.append((v, v + 1))
        if len(runs) <= _STATIC_PIECES and len(runs) < n:
            pieces = [self._slice_dim(self.ndim - 1, a, b) for a, b in runs]
            out = pieces[0].cat(*pieces[1:], dim=-1) if len(pieces) > 1 else pieces[0]
            return out.reshape(*lead, *bshape)
        idx = T.Tensor(np.ascontiguousarray(index.host, dtype=np.int32), device=self.device)
        return self._pick_last_into(idx, len(lead))

    def _select_sum(self: Any, mask: Tensor, axis: int) -> Tensor:
        """``mask.where(self, 0)`` reduced over `axis` when at most one element per row is selected: the picked
        value in this dtype (bool through uint8), or 0 where none is."""
        x = self.cast(dtypes.uint8) if self.dtype == dtypes.bool else self
        out = mask.where(x, x._zero())._reduce(Ops.ADD, axis, False)
        return out.cast(dtypes.bool) if self.dtype == dtypes.bool else out

    def _zero(self: Any) -> Any:
        return False if self.dtype == dtypes.bool else (0.0 if dtypes.is_float(self.dtype) else 0)

    def _index_dim(self: Any, d: int, index: _Adv) -> Tensor:
        """``self`` indexed by `index` (1-d, in range) along dimension `d`."""
        order = [i for i in range(self.ndim) if i != d] + [d]
        x = self.permute(order) if d != self.ndim - 1 else self
        picked = x._take_last(index)  # (..., k)
        return picked.permute([*range(d), picked.ndim - 1, *range(d, picked.ndim - 1)]) if d != self.ndim - 1 \
            else picked  # fmt: skip

    def __setitem__(self: Any, indices: Any, value: Any) -> None:
        """Write `value` (a tensor or scalar, broadcast to the indexed shape and cast to this dtype) into the
        positions `indices` selects, in place: the new value is built lazily (``where(selected, value, self)``)
        and written into this tensor's buffer with `assign`, then realized, so views read before see the change.
        With duplicate advanced indices the written value is unspecified (as in PyTorch).

        >>> t = Tensor.zeros(3, 3).contiguous()
        >>> t[1, ::2] = 5.0  # doctest: +SKIP
        """
        T = _T()
        parsed = self._parse_index(indices)
        view, adv, inverse = self._basic_index(parsed)
        if not isinstance(value, T.Tensor):
            value = T.Tensor(value, device=self.device, dtype=self.dtype)
        if value.device != self.device:
            raise RuntimeError(f"setitem: the value is on {value.device}, the tensor on {self.device}")
        target_shape = tuple(self._getitem(indices).shape) if adv else tuple(view.shape)
        try:
            fits = T._broadcast_shape(tuple(value.shape), target_shape) == target_shape
        except RuntimeError:
            fits = False
        if not fits:
            raise RuntimeError(
                f"shape mismatch: value tensor of shape {_fmt(value.shape)} cannot be broadcast to indexing result "
                f"of shape {_fmt(target_shape)}"
            )
        value = value.cast(self.dtype)._broadcast_to(target_shape)
        if prod(target_shape) == 0:
            return
        ones = T.Tensor.ones(*view.shape, dtype=dtypes.bool, device=self.device)
        if adv:
            new_view, sel_view = view._scatter_advanced(adv, value)
        else:
            new_view, sel_view = value, ones
        selected = inverse(sel_view)
        full = inverse(new_view)
        self.realize()
        self.assign(selected.where(full, self)).realize()

    def _scatter_advanced(self: Any, adv: list[tuple[int, _Adv]], value: Tensor) -> tuple[Tensor, Tensor]:
        """For `__setitem__`: (values, selected) in this view's shape, `value` shaped like the advanced result."""
        T = _T()
        dims = [d for d, _ in adv]
        # positions of every element of the view, indexed like the data: its linear number
        numbers = T.Tensor.arange(max(prod(self.shape), 1), device=self.device, dtype=dtypes.int32)
        numbers = numbers.shrink(((0, prod(self.shape)),)).reshape(self.shape)
        picked = numbers._advanced(adv)  # the view position each value element goes to, shaped like value
        n = prod(self.shape)
        flat_pos = picked.reshape(-1)
        flat_val = value.reshape(-1)
        if flat_pos.shape[0] == 0:
            zeros = T.Tensor.zeros(*self.shape, dtype=dtypes.bool, device=self.device)
            return value.reshape(-1).pad(((0, n),)).shrink(((0, n),)).reshape(self.shape) if n else value, zeros
        arange = T.Tensor.arange(n, device=self.device, dtype=dtypes.int32)
        mask = flat_pos.reshape(-1, 1) == arange  # (k, n)
        hit = mask.cast(dtypes.int32)._reduce(Ops.ADD, 0, False) > 0
        vals = flat_val.reshape(-1, 1)._select_sum_first(mask)
        del dims
        return vals.reshape(self.shape), hit.reshape(self.shape)

    def _select_sum_first(self: Any, mask: Tensor) -> Tensor:
        """Column-wise pick of ``self`` (shape (k, 1)) where `mask` (k, n) is true; duplicates keep the largest."""
        x = self.cast(dtypes.uint8) if self.dtype == dtypes.bool else self
        if dtypes.is_float(x.dtype):
            low = -math.inf
        else:
            low = dtypes.min(x.dtype)
        out = mask.where(x, low)._reduce(Ops.MAX, 0, False)
        return out.cast(dtypes.bool) if self.dtype == dtypes.bool else out

    # ------------------------------------------------------------------------------------------------------------
    # gather / scatter

    def _check_index_like(self: Any, name: str, dim: int, index: Tensor, src: Tensor | None = None) -> int:
        T = _T()
        if not isinstance(index, T.Tensor):
            raise TypeError(f"{name}: index must be a Tensor, got {type(index).__name__}")
        if not dtypes.is_int(index.dtype) or index.dtype == dtypes.bool:
            raise RuntimeError(f"{name}(): Expected dtype int64 for index, got {index.dtype}")
        d = _dim(dim, self.ndim)
        if index.ndim != self.ndim and not (index.ndim <= 1 and self.ndim <= 1):
            raise RuntimeError(f"Index tensor must have the same number of dimensions as input tensor ({name})")
        if index.device != self.device:
            raise RuntimeError(f"{name}: index is on {index.device}, the tensor on {self.device}")
        for i, (a, b) in enumerate(zip(index.shape, self.shape)):
            if i != d and a > b:
                raise RuntimeError(
                    f"Size does not match at dimension {i} expected index {_fmt(index.shape)} to be smaller than "
                    f"self {_fmt(self.shape)} apart from dimension {d}"
                )
        if src is not None:
            for i, (a, b) in enumerate(zip(index.shape, src.shape)):
                if a > b:
                    raise RuntimeError(
                        f"Size does not match at dimension {i} expected index {_fmt(index.shape)} to be smaller than "
                        f"src {_fmt(src.shape)}"
                    )
        return d

    def gather(self: Any, dim: int, index: Tensor) -> Tensor:
        """``out[i][j][k] = self[index[i][j][k]][j][k]`` (for ``dim == 0``), like `torch.gather`: `index` has this
        tensor's number of dimensions and is at most as large outside `dim`. One-hot selection (see module doc).

        >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[0, 0], [1, 0]])).tolist()  # doctest: +SKIP
        [[1, 1], [4, 3]]
        """
        T = _T()
        d = self._check_index_like("gather", dim, index)
        if self.ndim == 0:
            return self.reshape(1).gather(0, index.reshape(1)).reshape(index.shape)
        n = self.shape[d]
        if index.numel() == 0:
            return _empty_from(self, tuple(index.shape))
        x = self.shrink(tuple(None if i == d else (0, s) for i, s in enumerate(index.shape)))
        xt = x.unsqueeze(-1).transpose(d, -1)  # dim d -> size 1, values along the last axis
        idx = index.cast(dtypes.int32) if index.dtype != dtypes.int32 else index
        mask = idx.unsqueeze(-1) == T.Tensor.arange(n, device=self.device, dtype=dtypes.int32)
        return xt._select_sum(mask, -1)

    def _scatter_parts(self: Any, name: str, dim: int, index: Tensor, src: Any) -> tuple[int, Tensor, Tensor]:
        """(dim, one-hot mask of shape ``index[:d+1] + (self.shape[d],) + index[d+1:]``, src shrunk to index's shape
        and unsqueezed after `d`)."""
        T = _T()
        src_t = src if isinstance(src, T.Tensor) else None
        d = self._check_index_like(name, dim, index, src_t)
        if src_t is None:
            src = T.Tensor.full(tuple(index.shape), src, dtype=self.dtype, device=self.device)
        elif src.device != self.device:
            raise RuntimeError(f"{name}: src is on {src.device}, the tensor on {self.device}")
        if src.dtype != self.dtype:
            raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype ({self.dtype} vs {src.dtype})")
        src = src.shrink(tuple((0, s) for s in index.shape)) if src.shape != index.shape else src
        n = self.shape[d]
        idx = index.cast(dtypes.int32) if index.dtype != dtypes.int32 else index
        arange = T.Tensor.arange(n, device=self.device, dtype=dtypes.int32).reshape(n, *([1] * (self.ndim - d - 1)))
        mask = idx.unsqueeze(d + 1) == arange
        return d, mask, src.unsqueeze(d + 1)

    def _scatter_finish(self: Any, d: int, values: Tensor, hit: Tensor) -> Tensor:
        """Pad the per-index-shape results to this shape and keep self where nothing was scattered."""
        pads = tuple((0, s - v) for s, v in zip(self.shape, values.shape))
        if any(p != (0, 0) for p in pads):
            values, hit = values.pad(pads), hit.pad(pads)
        return hit.where(values, self)

    def scatter(self: Any, dim: int, index: Tensor, src: Any, reduce: str | None = None) -> Tensor:
        """``out = self`` with ``out[index[i][j]][j] = src[i][j]`` (for ``dim == 0``), like `torch.scatter`; `src`
        is a tensor or a scalar. `reduce` ``"add"``/``"multiply"`` combines instead of replacing. With duplicate
        indices and no reduce the written value is unspecified (as in PyTorch).

        >>> Tensor.zeros(3).scatter(0, Tensor([2, 0]), Tensor([1.0, 2.0])).tolist()  # doctest: +SKIP
        [2.0, 0.0, 1.0]
        """
        if reduce is not None:
            op = {"add": "sum", "multiply": "prod"}.get(reduce)
            if op is None:
                raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
            return self.scatter_reduce(dim, index, src, op, include_self=True)
        if self.ndim == 0 or index.numel() == 0:
            return self if index.numel() == 0 else self.reshape(1).scatter(0, index.reshape(1), src).reshape(())
        d, mask, src_u = self._scatter_parts("scatter", dim, index, src)
        x = src_u.cast(dtypes.uint8) if src_u.dtype == dtypes.bool else src_u
        low = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
        values = mask.where(x, low)._reduce(Ops.MAX, d, False)
        values = values.cast(dtypes.bool) if src_u.dtype == dtypes.bool else values
        hit = mask.cast(dtypes.int32)._reduce(Ops.ADD, d, False) > 0
        return self._scatter_finish(d, values, hit)

    def scatter_reduce(self: Any, dim: int, index: Tensor, src: Any, reduce: str, include_self: bool = True) -> Tensor:
        """Reduce `src` values into ``self`` at `index` along `dim` (`torch.scatter_reduce`): `reduce` is ``"sum"``,
        ``"prod"``, ``"mean"``, ``"amax"`` or ``"amin"``; with `include_self` the existing value takes part.
        Integer ``"mean"`` rounds down (floor) like PyTorch.

        >>> Tensor([1.0, 1.0]).scatter_reduce(0, Tensor([0, 0]), Tensor([2.0, 3.0]), "sum").tolist()  # doctest: +SKIP
        [6.0, 1.0]
        """
        if reduce not in ("sum", "prod", "mean", "amax", "amin"):
            raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
        if index.numel() == 0:
            return self
        if self.ndim == 0:
            return self.reshape(1).scatter_reduce(0, index.reshape(1), src, reduce, include_self).reshape(())
        d, mask, src_u = self._scatter_parts("scatter_reduce", dim, index, src)
        count = mask.cast(dtypes.int32)._reduce(Ops.ADD, d, False)
        hit = count > 0
        pads = tuple((0, s - v) for s, v in zip(self.shape, count.shape))
        base = self.shrink(tuple((0, v) for v in count.shape)) if any(p != (0, 0) for p in pads) else self
        dt = self.dtype
        if reduce in ("sum", "mean"):
            acc = src_u.cast(dtypes.int32) if dt == dtypes.bool else src_u
            total = mask.where(acc, acc._zero())._reduce(Ops.ADD, d, False)
            if include_self:
                total = total + base.cast(total.dtype)
            if reduce == "sum":
                values = total.cast(dt)
            else:
                cnt = count + 1 if include_self else count.maximum(1)
                if dtypes.is_float(dt):
                    values = (total / cnt.cast(dt)).cast(dt)
                else:  # integer mean: floor division, like PyTorch
                    q = total.cast(dtypes.float64) / cnt.cast(dtypes.float64)
                    trunc = q.cast(total.dtype)
                    values = (trunc.cast(dtypes.float64) > q).where(trunc - 1, trunc).cast(dt)
        elif reduce == "prod":
            acc = src_u.cast(dtypes.int32) if dt == dtypes.bool else src_u
            one = True if acc.dtype == dtypes.bool else (1.0 if dtypes.is_float(acc.dtype) else 1)
            total = mask.where(acc, one)._reduce(Ops.MUL, d, False)
            if include_self:
                total = total * base.cast(total.dtype)
            values = total.cast(dt)
        else:
            x = src_u.cast(dtypes.uint8) if dt == dtypes.bool else src_u
            if reduce == "amax":
                low = -math.inf if dtypes.is_float(x.dtype) else dtypes.min(x.dtype)
                values = mask.where(x, low)._reduce(Ops.MAX, d, False)
                if include_self:
                    values = values.maximum(base.cast(values.dtype))
            else:
                high = math.inf if dtypes.is_float(x.dtype) else dtypes.max(x.dtype)
                neg = mask.where(x, high)
                values = neg.min(d) if not dtypes.is_float(x.dtype) else -((-neg)._reduce(Ops.MAX, d, False))
                if include_self:
                    values = values.minimum(base.cast(values.dtype))
            values = values.cast(dt)
        return self._scatter_finish(d, values, hit)

    def masked_select(self: Any, mask: Any) -> Tensor:
        """The elements where `mask` (broadcast with this tensor) is true, as a 1-d tensor. The result size depends
        on the data, so the mask is read back to the host (a synchronization), as in PyTorch.

        >>> Tensor([1, 2, 3]).masked_select(Tensor([True, False, True])).tolist()  # doctest: +SKIP
        [1, 3]
        """
        T = _T()
        if not isinstance(mask, T.Tensor):
            mask = T.Tensor(mask, device=self.device)
        if mask.dtype != dtypes.bool:
            raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {mask.dtype}")
        shape = T._broadcast_shape(tuple(self.shape), tuple(mask.shape))
        x = self._broadcast_to(shape).reshape(-1)
        m = mask._broadcast_to(shape).reshape(-1)
        return x[m]
