"""Convolutions, pooling, attention, normalization and losses: methods of `Tensor`.

Every op here is written with the core `Tensor` methods only (movement ops, elementwise ops, `sum`/`max`), so each
is a graph the scheduler fuses. The windowed ops (`conv2d`, the pools) share one building block, `_windows`: it
turns the last ``m`` axes of a tensor into ``m`` output axes followed by ``m`` kernel-offset axes using movement ops
only (pad, reshape, expand, shrink, permute), never a copy. A convolution is then a broadcast multiply of that view
with the weight and one sum over ``(cin, *kernel)``: a single reduce kernel, with the bias add fused behind it.

How `_windows` builds a strided, dilated window view of one axis of size ``n`` (kernel ``k``, stride ``s``,
dilation ``d``, ``o`` outputs): fit the axis to length ``P = (k-1)*d + o*s`` (pad or crop), tile it ``e`` times
(``reshape(1, P) -> expand(e, P) -> reshape(e*P)``), keep the first ``k*(P+d)`` elements and read them as
``(k, P+d)``. Row ``j`` then starts ``j*d`` elements further into the tiled data than row ``j-1``, i.e. element
``(j, t)`` is ``x[j*d + t]``; keeping ``t < o*s`` and every ``s``-th of those gives ``x[j*d + i*s]``, shape
``(k, o)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tinycore.dtype import dtypes, least_upper_float, narrow_acc_dtype
from tinycore.helpers import prod

if TYPE_CHECKING:
    from tinycore.frontend.tensor import Tensor

_REDUCTIONS = ("mean", "sum", "none")


# ---------------------------------------------------------------------------------------------------------------
# helpers (module level so they never collide with other mixins' method names)


def _tensor_cls() -> type[Tensor]:
    from tinycore.frontend.tensor import Tensor

    return Tensor


def _tuple(value: int | Sequence[int], n: int, what: str) -> tuple[int, ...]:
    """An int or a sequence of ints, as a tuple of ``n`` ints."""
    if isinstance(value, int):
        return (value,) * n
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise ValueError(f"{what} must be an int or a sequence of {n} ints, got {value}")
    return value


def _unsqueeze(x: Tensor, axis: int) -> Tensor:
    axis = axis if axis >= 0 else x.ndim + 1 + axis
    return x.reshape(*x.shape[:axis], 1, *x.shape[axis:])


def _clamped_log(p: Tensor) -> Tensor:
    """``log(p)`` clamped below at -100 as PyTorch's binary cross entropy does, with a gradient of 0 where clamped
    (not ``inf * 0 = NaN`` at ``p == 0``)."""
    inside = p > math.exp(-100.0)
    return inside.where(inside.where(p, 1.0).log(), -100.0)


def _rsqrt(x: Tensor) -> Tensor:
    return x.sqrt().reciprocal()


def _resolve_padding(
    padding: int | str | Sequence[int], kernel: tuple[int, ...], dilation: tuple[int, ...], stride: tuple[int, ...]
) -> list[tuple[int, int]]:
    """``(before, after)`` per spatial dim, in dim order, from PyTorch/tinygrad padding forms.

    An int pads every side; ``m`` ints pad both sides of each dim; ``2*m`` ints are in `F.pad` order
    (last dim first: ``(left, right, top, bottom, ...)``); ``'valid'`` is no padding; ``'same'`` (stride 1 only)
    pads ``d*(k-1)`` per dim, the odd element after, like PyTorch.
    """
    m = len(kernel)
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * m
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
            return [(t // 2, t - t // 2) for t in totals]
        raise ValueError(f"Invalid padding string {padding!r}, should be one of ('valid', 'same')")
    if isinstance(padding, int):
        return [(padding, padding)] * m
    padding = tuple(int(p) for p in padding)
    if len(padding) == m:
        return [(p, p) for p in padding]
    if len(padding) == 2 * m:
        pairs = [(padding[2 * i], padding[2 * i + 1]) for i in range(m)]
        return pairs[::-1]
    raise ValueError(f"padding must be an int, {m} ints or {2 * m} ints for a {m}-d window, got {padding}")


def _window_1d(x: Tensor, k: int, s: int, d: int) -> Tensor:
    """``(..., n) -> (..., o, k)`` with element ``[..., i, j] = x[..., i*s + j*d]`` (movement ops only)."""
    n = x.shape[-1]
    o = (n - d * (k - 1) - 1) // s + 1
    lead = x.shape[:-1]
    nl = len(lead)
    if o <= 0:
        raise RuntimeError(f"window of size {d * (k - 1) + 1} is larger than the (padded) input of size {n}")

    def fit(t: Tensor, length: int) -> Tensor:
        cur = t.shape[-1]
        if length < cur:
            return t.shrink((*((None,) * nl), (0, length)))
        if length > cur:
            return t.pad((*((None,) * nl), (0, length - cur)))
        return t

    if k == 1:  # plain striding: (o*s) -> (o, s), keep column 0
        y = fit(x, o * s).reshape(*lead, o, s)
        return y.shrink((*((None,) * nl), None, (0, 1))) if s != 1 else y
    if s == 1 and d == 1 and o == 1:  # one window covering the axis
        return x.reshape(*lead, 1, k)
    span = (k - 1) * d + o * s
    row = span + d
    reps = -(-(k * row) // span)
    y = fit(x, span).reshape(*lead, 1, span).expand(*lead, reps, span).reshape(*lead, reps * span)
    y = y.shrink((*((None,) * nl), (0, k * row))).reshape(*lead, k, row)
    y = y.shrink((*((None,) * nl), None, (0, o * s))).reshape(*lead, k, o, s)
    y = y.shrink((*((None,) * nl), None, None, (0, 1))).reshape(*lead, k, o)
    return y.permute(*range(nl), nl + 1, nl)


def _windows(x: Tensor, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> Tensor:
    """The last ``m = len(kernel)`` axes ``(*n)`` of ``x`` as ``(*o, *k)``: output positions then kernel offsets."""
    m = len(kernel)
    nb = x.ndim - m
    for i in range(m):
        # the axis being windowed is at position nb + i; move it last, window it, put o back and k at the end
        ax = nb + i
        order = [a for a in range(x.ndim) if a != ax] + [ax]
        y = _window_1d(x.permute(*order), kernel[i], stride[i], dilation[i])
        # y: (others..., o, k) where others = x axes without ax, in order
        r = y.ndim
        others = list(range(r - 2))
        # put o at position ax, keep the trailing kernel axes (from earlier dims) after all spatial axes, then k
        n_spatial_after = m - i - 1
        head = others[:ax]
        tail = others[ax:]  # remaining spatial axes after ax, then kernel axes of earlier dims
        x = y.permute(*head, r - 2, *tail[:n_spatial_after], *tail[n_spatial_after:], r - 1)
    return x


def _out_size(n: int, k: int, s: int, d: int, before: int, after: int, ceil_mode: bool) -> tuple[int, int]:
    """Output size and the extra right padding that ceil_mode needs (PyTorch's rule: the last window must start
    inside the input or the left padding)."""
    span = d * (k - 1) + 1
    total = n + before + after
    if not ceil_mode:
        return (total - span) // s + 1, 0
    o = -(-(total - span) // s) + 1
    if (o - 1) * s >= n + before:
        o -= 1
    return o, max(0, (o - 1) * s + span - total)


def _check_reduction(reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction={reduction!r} must be one of {_REDUCTIONS}")


def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    _check_reduction(reduction)
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


def _one_hot_along(y: Tensor, num_classes: int, axis: int) -> Tensor:
    """bool one-hot of integer ``y`` with a new class axis of size ``num_classes`` at ``axis``."""
    t = _tensor_cls()
    y = _unsqueeze(y, axis)
    axis = axis if axis >= 0 else y.ndim + axis
    shape = [1] * y.ndim
    shape[axis] = num_classes
    classes = t.arange(num_classes, device=y.device, dtype=y.dtype).reshape(*shape)
    return y == classes


def _interp_matrix(n_in: int, n_out: int, mode: str, align_corners: bool) -> Any:
    """The ``(n_out, n_in)`` float32 matrix of a 1-d resize, computed like PyTorch's CPU kernels (float32 math)."""
    import numpy as np

    f32 = np.float32
    m = np.zeros((n_out, n_in), dtype=np.float32)
    dst = np.arange(n_out, dtype=np.float32)
    if mode in ("nearest", "nearest-exact"):
        scale = f32(n_in) / f32(n_out)
        src = np.floor((dst + f32(0.5)) * scale) if mode == "nearest-exact" else np.floor(dst * scale)
        idx = np.minimum(src.astype(np.int64), n_in - 1)
        m[np.arange(n_out), idx] = 1.0
        return m
    if align_corners:
        scale = f32(n_in - 1) / f32(n_out - 1) if n_out > 1 else f32(0)
        src = dst * scale
    else:
        scale = f32(n_in) / f32(n_out)
        src = np.maximum((dst + f32(0.5)) * scale - f32(0.5), f32(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    lam = (src - i0.astype(np.float32)).astype(np.float32)
    rows = np.arange(n_out)
    np.add.at(m, (rows, i0), f32(1) - lam)
    np.add.at(m, (rows, i1), lam)
    return m


# ---------------------------------------------------------------------------------------------------------------
# the mixin


class ProcessingMixin:
    """Convolutions, pooling, attention, normalization and losses, mixed into `tinycore.tensor.Tensor`."""

    __slots__ = ()

    # ----- linear algebra

    def dot(self: Tensor, w: Tensor, dtype: Any = None) -> Tensor:
        """Matrix product with PyTorch semantics: 1-d operands (vector dot, matrix-vector), broadcast batch dims.
        A broadcast multiply and one sum over the shared dimension, which the scheduler fuses into one kernel
        (with an elementwise epilogue such as ``+ bias`` and ``relu``). ``dtype`` casts the result. 16-bit float
        operands are multiplied and summed in float32 (PyTorch's semantics) and the result rounded once. The layout
        of the operands in memory is the scheduler's business: on a device whose renderer declares
        ``gemm_panel_bytes`` it reads a large or transposed right operand through a panel-packed copy (a second
        kernel, `tinycore.engine.gemm_packing`).

        >>> (Tensor.ones(2, 3) @ Tensor.ones(3, 4)).shape
        (2, 4)
        """
        from tinycore.dtype import least_upper_dtype
        from tinycore.frontend.tensor import _broadcast_shape

        x = self
        n1, n2 = x.ndim, w.ndim
        if n1 == 0 or n2 == 0:
            raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {n1}D and {n2}D")
        k = x.shape[-1]
        kw = w.shape[-2] if n2 >= 2 else w.shape[0]
        if k != kw:
            rows = x.shape[-2] if n1 >= 2 else 1
            cols = w.shape[-1] if n2 >= 2 else 1
            raise RuntimeError(
                f"mat1 and mat2 shapes cannot be multiplied ({rows}x{k} and {kw}x{cols}); "
                f"shapes {list(x.shape)} @ {list(w.shape)}"
            )
        if n1 > 2 or n2 > 2:
            try:
                _broadcast_shape(tuple(x.shape[:-2]), tuple(w.shape[:-2]))
            except RuntimeError as error:
                raise RuntimeError(
                    f"matmul: batch dimensions of shapes {list(x.shape)} and {list(w.shape)} do not broadcast"
                ) from error
        out_dtype = x.dtype if x.dtype == w.dtype else least_upper_dtype(x.dtype, w.dtype)
        acc = narrow_acc_dtype(out_dtype)  # int32 accumulation for ints: their result is cast back anyway
        if dtypes.is_float(out_dtype) and out_dtype.itemsize < acc.itemsize:
            # 16-bit floats: products in float32 as well (PyTorch's result; the form GPU tensor cores compute)
            x, w = x.cast(acc), w.cast(acc)
        if n2 == 1:
            ret = (x * w).sum(-1, acc_dtype=acc)
        elif n1 == 1:
            ret = (x.reshape(k, 1) * w).sum(-2, acc_dtype=acc)
        else:
            xs = x.reshape(*x.shape[:-1], 1, k)
            ws = w.transpose(-1, -2).reshape(*w.shape[:-2], 1, w.shape[-1], k)
            ret = (xs * ws).sum(-1, acc_dtype=acc)
        ret = ret.cast(out_dtype)
        return ret.cast(dtype) if dtype is not None else ret

    def matmul(self: Tensor, x: Tensor, reverse: bool = False, dtype: Any = None) -> Tensor:
        """``self @ x`` (``x @ self`` with ``reverse``), see `dot`; ``dtype`` casts the result."""
        return x.dot(self, dtype=dtype) if reverse else self.dot(x, dtype=dtype)

    def __matmul__(self: Tensor, w: Tensor) -> Tensor:
        return self.dot(w)

    def __rmatmul__(self: Tensor, x: Tensor) -> Tensor:
        return x.dot(self)

    def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None, dtype: Any = None) -> Tensor:
        """``self @ weight + bias`` with tinygrad's layout: ``weight`` is ``(in, out)`` (a 1-d weight multiplies
        elementwise). PyTorch's ``F.linear(x, w, b)`` is ``x.linear(w.T, b)``. ``dtype`` (tinygrad) is the
        product's result dtype, before the bias is added."""
        x = self * weight if weight.ndim == 1 else self.dot(weight, dtype=dtype)
        if dtype is not None and weight.ndim == 1:
            x = x.cast(dtype)
        return x + bias if bias is not None else x

    @staticmethod
    def einsum(formula: str, *operands: Tensor | Sequence[Tensor], dtype: Any = None) -> Tensor:
        """Einstein summation like `torch.einsum`: ``Tensor.einsum("ij,jk->ik", a, b)``.

        Supports implicit output (letters used once, sorted), ``...`` (broadcast dims), repeated letters in one
        operand (diagonals, e.g. ``"ii->i"``) and size-1 broadcasting. Built as one broadcast product and one sum.
        ``dtype`` (tinygrad) is the accumulation and result dtype.
        """
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = tuple(operands[0])
        xs: list[Tensor] = list(operands)  # type: ignore[arg-type]
        formula = formula.replace(" ", "")
        lhs, arrow, rhs = formula.partition("->")
        inputs = lhs.split(",")
        if len(inputs) != len(xs):
            raise ValueError(f"einsum(): the formula has {len(inputs)} operands but {len(xs)} tensors were given")
        # ellipsis: the broadcast of the dims each operand's "..." covers, named by characters no formula uses
        ell_ndim = 0
        for spec, x in zip(inputs, xs):
            if "..." in spec:
                ell_ndim = max(ell_ndim, x.ndim - (len(spec) - 3))
        ell = [chr(0x100 + i) for i in range(ell_ndim)]
        specs: list[str] = []
        for spec, x in zip(inputs, xs):
            if not all(c.isalpha() for c in spec.replace("...", "")) or spec.count("...") > 1:
                raise ValueError(f"einsum(): invalid subscripts {spec!r}")
            if "..." in spec:
                n = x.ndim - (len(spec) - 3)
                spec = spec.replace("...", "".join(ell[ell_ndim - n :]))
            if len(spec) != x.ndim:
                raise RuntimeError(
                    f"einsum(): the number of subscripts in the equation ({len(spec)}) does not match the number of "
                    f"dimensions ({x.ndim}) for operand {len(specs)}"
                )
            specs.append(spec)
        if arrow:
            rhs = rhs.replace("...", "".join(ell))
        else:
            counts: dict[str, int] = {}
            for spec in specs:
                for c in spec:
                    counts[c] = counts.get(c, 0) + 1
            rhs = "".join(ell) + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
        if len(set(rhs)) != len(rhs):
            raise ValueError(f"einsum(): output subscript {rhs!r} repeats a letter")
        # take diagonals of letters repeated inside one operand
        for idx, (spec, x) in enumerate(zip(specs, xs)):
            while len(set(spec)) != len(spec):
                c = next(ch for ch in spec if spec.count(ch) > 1)
                a, b = spec.index(c), spec.index(c, spec.index(c) + 1)
                n = x.shape[a]
                if x.shape[b] != n:
                    raise RuntimeError(f"einsum(): subscript {c} is repeated for operand {idx} but sizes differ")
                order = [i for i in range(x.ndim) if i not in (a, b)] + [a, b]
                x = x.permute(*order)
                lead = x.shape[:-2]
                x = x.reshape(*lead, n * n).pad((*((None,) * len(lead)), (0, n))).reshape(*lead, n, n + 1)
                x = x.shrink((*((None,) * len(lead)), None, (0, 1))).reshape(*lead, n)
                spec = "".join(spec[i] for i in order[:-2]) + c
            specs[idx], xs[idx] = spec, x
        letters = sorted(set("".join(specs)), key=lambda ch: (ch not in rhs, rhs.find(ch), ch))
        for c in rhs:
            if c not in letters:
                raise ValueError(f"einsum(): output subscript {c} does not appear in the inputs")
        sizes: dict[str, int] = {}
        for spec, x in zip(specs, xs):
            for c, s in zip(spec, x.shape):
                if s != 1 and sizes.get(c, 1) not in (1, s):
                    raise RuntimeError(
                        f"einsum(): operands do not broadcast with remapped shapes: subscript {c} has sizes "
                        f"{sizes[c]} and {s}"
                    )
                if s != 1 or c not in sizes:
                    sizes[c] = s
        full = tuple(sizes[c] for c in letters)
        result: Tensor | None = None
        for spec, x in zip(specs, xs):
            order = sorted(range(len(spec)), key=lambda i: letters.index(spec[i]))
            x = x.permute(*order) if order else x
            shape = [1] * len(letters)
            for i in order:
                shape[letters.index(spec[i])] = x.shape[order.index(i)]
            x = x.reshape(*shape).expand(*full) if letters else x
            result = x if result is None else result * x
        assert result is not None
        summed = tuple(range(len(rhs), len(letters)))
        if summed:
            out_dtype = result.dtype
            result = result.sum(summed, acc_dtype=narrow_acc_dtype(out_dtype) if dtype is None else dtype)
            result = result.cast(out_dtype if dtype is None else dtype)
        return result if dtype is None else result.cast(dtype)

    # ----- convolutions

    def conv2d(
        self: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        padding: int | str | Sequence[int] = 0,
        dtype: Any = None,
    ) -> Tensor:
        """N-d cross-correlation like `torch.nn.functional.conv{1,2,3}d`; the number of spatial dims comes from
        ``weight`` (``(cout, cin/groups, *kernel)``). ``padding`` may be an int, one int per dim, ``2*m`` ints in
        `F.pad` order (asymmetric), ``'valid'`` or ``'same'``. One reduce kernel (bias fused). ``dtype`` (tinygrad)
        is the accumulation and result dtype of the products' sum (before the bias). The padded input is a view; where
        it lives in memory is the scheduler's decision: on a device whose renderer declares ``gemm_panel_bytes`` a
        large one is copied first, so the convolution kernel loads whole rows without a bounds check per lane (a
        second kernel, `tinycore.engine.gemm_packing`). A float 1 x 1 convolution with stride 1, no padding and
        one group is built as a matrix product over the merged pixels (the batch joins them as columns below 64
        pixels), which the matmul heuristics tile: its products are summed in float32 like `dot`'s.

        >>> Tensor.ones(1, 2, 5, 5).conv2d(Tensor.ones(3, 2, 3, 3)).shape
        (1, 3, 3, 3)
        """
        x = self
        m = weight.ndim - 2
        if m < 1:
            raise RuntimeError(f"conv: weight must have at least 3 dimensions, got shape {list(weight.shape)}")
        unbatched = x.ndim == m + 1
        if unbatched:
            x = _unsqueeze(x, 0)
        if x.ndim != m + 2:
            raise RuntimeError(
                f"Expected {m + 1}D (unbatched) or {m + 2}D (batched) input to conv{m}d, but got input of size: "
                f"{list(self.shape)}"
            )
        cout, cin_g, *kernel = weight.shape
        bs, cin, *spatial = x.shape
        if groups < 1 or cout % groups:
            raise RuntimeError(f"conv: out_channels ({cout}) must be divisible by groups ({groups})")
        if cin != cin_g * groups:
            raise RuntimeError(
                f"Given groups={groups}, weight of size {list(weight.shape)}, expected input{list(x.shape)} to have "
                f"{cin_g * groups} channels, but got {cin} channels instead"
            )
        if bias is not None and tuple(bias.shape) != (cout,):
            raise RuntimeError(f"conv: bias must have shape [{cout}], got {list(bias.shape)}")
        st, dl = _tuple(stride, m, "stride"), _tuple(dilation, m, "dilation")
        pads = _resolve_padding(padding, tuple(kernel), dl, st)
        pointwise = all(k == 1 for k in kernel) and all(p == (0, 0) for p in pads) and all(s == 1 for s in st)
        if pointwise and groups == 1 and dtype is None and x.dtype == weight.dtype and dtypes.is_float(x.dtype):
            # a 1 x 1 convolution is a matrix product over the merged spatial axes, which the matmul heuristics
            # tile (kept apart, 14 x 14 pixels fit no register tile: 8 x 256 x 14 x 14 ran at 8-24 GFLOPS)
            hw = prod(spatial)
            if hw >= 64:
                ret = (weight.reshape(cout, cin) @ x.reshape(bs, cin, hw)).reshape(bs, cout, *spatial)
            else:  # few pixels (7 x 7): the batch joins them as columns, the product's rows stay whole
                cols = x.reshape(bs, cin, hw).permute(1, 0, 2).reshape(cin, bs * hw)
                ret = (weight.reshape(cout, cin) @ cols).reshape(cout, bs, *spatial).permute(1, 0, *range(2, 2 + m))
            if bias is not None:
                ret = ret + bias.reshape(1, cout, *((1,) * m))
            return ret.reshape(*ret.shape[1:]) if unbatched else ret
        if any(p != (0, 0) for p in pads):
            x = x.pad(((0, 0), (0, 0), *pads))
        for n, k, d, (b, a) in zip(spatial, kernel, dl, pads):
            if n + b + a < d * (k - 1) + 1:
                raise RuntimeError(
                    f"conv: input size per channel {list(spatial)} (padded by {pads}) is smaller than the kernel "
                    f"{list(kernel)} with dilation {list(dl)}"
                )
        win = _windows(x, kernel, st, dl)  # (bs, cin, *o, *k)
        out_sp = win.shape[2 : 2 + m]
        rcout = cout // groups
        # (bs, g, 1, *o, cin/g, *k) * (1, g, rcout, *1, cin/g, *k), summed over (cin/g, *k)
        win = win.reshape(bs, groups, cin_g, *out_sp, *kernel)
        win = win.permute(0, 1, *range(3, 3 + m), 2, *range(3 + m, 3 + 2 * m))
        win = win.reshape(bs, groups, 1, *out_sp, cin_g, *kernel)
        w = weight.reshape(1, groups, rcout, *((1,) * m), cin_g, *kernel)
        prods = win * w
        out_dtype = x.dtype if x.dtype == weight.dtype else prods.dtype
        if dtype is not None:
            from tinycore.frontend.tensor import _to_dtype

            out_dtype = _to_dtype(dtype)
        acc = narrow_acc_dtype(prods.dtype) if dtype is None else out_dtype
        ret = prods.sum(tuple(range(3 + m, 4 + 2 * m)), acc_dtype=acc)
        ret = ret.cast(out_dtype).reshape(bs, cout, *out_sp)
        if bias is not None:
            ret = ret + bias.reshape(1, cout, *((1,) * m))
        return ret.reshape(*ret.shape[1:]) if unbatched else ret

    def conv1d(
        self: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        padding: int | str | Sequence[int] = 0,
    ) -> Tensor:
        """1-d convolution (`conv2d` with a ``(cout, cin/groups, k)`` weight)."""
        if weight.ndim != 3:
            raise RuntimeError(f"conv1d: weight must be 3-d, got shape {list(weight.shape)}")
        return self.conv2d(weight, bias, groups, stride, dilation, padding)

    def conv3d(
        self: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        padding: int | str | Sequence[int] = 0,
    ) -> Tensor:
        """3-d convolution (`conv2d` with a ``(cout, cin/groups, kd, kh, kw)`` weight)."""
        if weight.ndim != 5:
            raise RuntimeError(f"conv3d: weight must be 5-d, got shape {list(weight.shape)}")
        return self.conv2d(weight, bias, groups, stride, dilation, padding)

    def conv_transpose2d(
        self: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
    ) -> Tensor:
        """Transposed N-d convolution like `torch.nn.functional.conv_transpose{1,2,3}d` (weight
        ``(cin, cout/groups, *kernel)``): zeros inserted between input elements (stride), then a convolution with
        the flipped, regrouped weight and padding ``d*(k-1) - p`` (plus ``output_padding`` after)."""
        x = self
        m = weight.ndim - 2
        unbatched = x.ndim == m + 1
        if unbatched:
            x = _unsqueeze(x, 0)
        if x.ndim != m + 2:
            raise RuntimeError(f"conv_transpose: expected a {m + 2}-d input, got shape {list(self.shape)}")
        cin, rcout, *kernel = weight.shape
        if groups < 1 or cin % groups:
            raise RuntimeError(f"conv_transpose: in_channels ({cin}) must be divisible by groups ({groups})")
        if x.shape[1] != cin:
            raise RuntimeError(
                f"Given transposed=1, weight of size {list(weight.shape)}, expected input{list(x.shape)} to have "
                f"{cin} channels, but got {x.shape[1]} channels instead"
            )
        st, dl = _tuple(stride, m, "stride"), _tuple(dilation, m, "dilation")
        pd, op = _tuple(padding, m, "padding"), _tuple(output_padding, m, "output_padding")
        for o, s, d in zip(op, st, dl):
            if o >= max(s, d):
                raise RuntimeError("conv_transpose: output padding must be smaller than either stride or dilation")
        # weight (g*cin_g, rcout, *k) -> (g*rcout, cin_g, *k), spatially flipped
        cin_g = cin // groups
        w = weight.reshape(groups, cin_g, rcout, *kernel).permute(0, 2, 1, *range(3, 3 + m))
        w = w.reshape(groups * rcout, cin_g, *kernel).flip(tuple(range(2, 2 + m)))
        # dilate the input by the stride: (n) -> (n, s) zero padded -> (n*s) -> keep (n-1)*s+1
        bs, _, *spatial = x.shape
        for i, (n, s) in enumerate(zip(spatial, st)):
            if s == 1:
                continue
            ax = 2 + i
            x = _unsqueeze(x, ax + 1)
            x = x.pad((*((None,) * (ax + 1)), (0, s - 1), *((None,) * (m - i - 1))))
            x = x.reshape(*x.shape[:ax], n * s, *x.shape[ax + 2 :])
            x = x.shrink((*((None,) * ax), (0, (n - 1) * s + 1), *((None,) * (m - i - 1))))
        pads: list[int] = []
        for k, d, p, o in zip(kernel, dl, pd, op):
            pads.append((d * (k - 1) - p, d * (k - 1) - p + o))  # type: ignore[arg-type]
        flat = [v for pair in pads[::-1] for v in pair]  # type: ignore[union-attr]
        ret = x.conv2d(w, bias, groups, 1, dl, flat)
        return ret.reshape(*ret.shape[1:]) if unbatched else ret

    def conv_transpose1d(
        self: Tensor,
        weight: Tensor,
        bias: Tensor | None = None,
        groups: int = 1,
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_padding: int | Sequence[int] = 0,
    ) -> Tensor:
        """1-d transposed convolution (`conv_transpose2d` with a 3-d weight)."""
        return self.conv_transpose2d(weight, bias, groups, stride, dilation, padding, output_padding)

    # ----- pooling

    def _pool_setup(
        self: Tensor,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None,
        dilation: int | Sequence[int],
        padding: int | Sequence[int],
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], list[tuple[int, int]]]:
        k = (kernel_size,) * 2 if isinstance(kernel_size, int) else tuple(kernel_size)
        m = len(k)
        if self.ndim < m:
            raise RuntimeError(f"pool: a {m}-d window needs at least {m} dims, got shape {list(self.shape)}")
        st = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _tuple(stride, m, "stride")
        dl = _tuple(dilation, m, "dilation")
        pads = _resolve_padding(padding, k, dl, st)
        for kk, (b, a) in zip(k, pads):
            if b > kk // 2 or a > kk // 2:
                raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={b}, kernel={kk}")
        return k, st, dl, pads

    def avg_pool2d(
        self: Tensor,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> Tensor:
        """Average pooling over the last ``len(kernel_size)`` dims like `F.avg_pool2d` (stride defaults to the
        kernel; ``count_include_pad`` and ``ceil_mode`` as PyTorch: windows reaching past the padding are averaged
        over their part inside the padded input)."""
        k, st, dl, pads = self._pool_setup(kernel_size, stride, dilation, padding)
        m = len(k)
        nb = self.ndim - m
        sp = self.shape[nb:]
        extra = [_out_size(n, kk, s, d, b, a, ceil_mode)[1] for n, kk, s, d, (b, a) in zip(sp, k, st, dl, pads)]
        full = [(b, a + e) for (b, a), e in zip(pads, extra)]
        x = self.cast(least_upper_float(self.dtype))
        summed = _windows(x.pad(((0, 0),) * nb + tuple(full)), k, st, dl).sum(tuple(range(nb + m, nb + 2 * m)))
        if not count_include_pad or any(extra):
            t = _tensor_cls()
            ones = t.ones(*sp, device=self.device, dtype=x.dtype)
            if count_include_pad:
                ones = ones.pad(tuple(pads), value=1.0)
                ones = ones.pad(tuple((0, e) for e in extra))
            else:
                ones = ones.pad(tuple(full))
            count = _windows(ones, k, st, dl).sum(tuple(range(m, 2 * m)))
            return summed / count
        return summed * (1 / prod(k))

    def max_pool2d(
        self: Tensor,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Max pooling over the last ``len(kernel_size)`` dims like `F.max_pool2d`. With ``return_indices`` also
        the int64 index (into the flattened spatial input) of each maximum, the first one in window order."""
        k, st, dl, pads = self._pool_setup(kernel_size, stride, dilation, padding)
        m = len(k)
        nb = self.ndim - m
        sp = self.shape[nb:]
        extra = [_out_size(n, kk, s, d, b, a, ceil_mode)[1] for n, kk, s, d, (b, a) in zip(sp, k, st, dl, pads)]
        full = tuple((b, a + e) for (b, a), e in zip(pads, extra))
        fill = -math.inf if dtypes.is_float(self.dtype) else dtypes.min(self.dtype)
        win = _windows(self.pad(((0, 0),) * nb + full, value=fill), k, st, dl)
        axes = tuple(range(win.ndim - m, win.ndim))
        ret = win.max(axes)
        if not return_indices:
            return ret
        t = _tensor_cls()
        numel = prod(sp)
        idx = t.arange(numel, device=self.device, dtype=dtypes.int32).reshape(*sp).pad(full, value=numel)
        idx_win = _windows(idx, k, st, dl)  # (*o, *k), broadcast over the batch dims
        hit = win.detach() == ret.detach().reshape(*ret.shape, *((1,) * m))
        first = hit.where(idx_win, numel).min(axes)
        return ret, first.cast(dtypes.int64)

    def max_unpool2d(
        self: Tensor,
        indices: Tensor,
        kernel_size: int | Sequence[int] = (2, 2),
        stride: int | Sequence[int] | None = None,
        dilation: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        output_size: Sequence[int] | None = None,
    ) -> Tensor:
        """Inverse of `max_pool2d` like `F.max_unpool2d`: each value goes to its index in the flattened output
        spatial dims (zeros elsewhere); ``output_size`` picks among the sizes the pool could have come from."""
        k = (kernel_size,) * 2 if isinstance(kernel_size, int) else tuple(kernel_size)
        m = len(k)
        if indices.shape != self.shape:
            raise RuntimeError(f"max_unpool: indices shape {list(indices.shape)} != input shape {list(self.shape)}")
        st = k if stride is None else _tuple(stride, m, "stride")
        dl = _tuple(dilation, m, "dilation")
        pd = _tuple(padding, m, "padding")
        nb = self.ndim - m
        sp_in = self.shape[nb:]
        if output_size is None:
            out_sp = tuple((n - 1) * s - 2 * p + d * (kk - 1) + 1 for n, s, p, d, kk in zip(sp_in, st, pd, dl, k))
        else:
            out_sp = tuple(output_size)[-m:]
        lead = self.shape[:nb]
        n_in, n_out = prod(sp_in), prod(out_sp)
        t = _tensor_cls()
        hot = _one_hot_along(indices.reshape(*lead, n_in).cast(dtypes.int32), n_out, -1)  # (*lead, n_in, n_out)
        vals = self.reshape(*lead, n_in, 1)
        # overlapping windows can send one input element to an output position several times: PyTorch writes it
        # once (forward) and gathers the gradient to every copy (backward). The first copy carries the value, the
        # others add ``v - v.detach()`` (exactly 0, but with gradient 1).
        pos = t.arange(n_in, device=self.device, dtype=dtypes.int32).reshape(n_in, 1)
        first = hot.where(pos, n_in).min(nb, keepdim=True)
        primary = hot & (pos == first)
        contrib = primary.where(vals, hot.where(vals - vals.detach(), 0.0))
        return contrib.sum(nb, acc_dtype=narrow_acc_dtype(contrib.dtype)).cast(self.dtype).reshape(*lead, *out_sp)

    def interpolate(self: Tensor, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Tensor:
        """Resize the last ``len(size)`` dims like `F.interpolate`: ``mode`` is ``'nearest'``, ``'nearest-exact'``
        or ``'linear'`` (also spelled ``'bilinear'``/``'trilinear'``), ``align_corners`` as PyTorch. Each dim is a
        small matrix product, so gradients flow as in PyTorch."""
        t = _tensor_cls()
        modes = {
            "linear": "linear",
            "bilinear": "linear",
            "trilinear": "linear",
            "nearest": "nearest",
            "nearest-exact": "nearest-exact",
        }
        if mode not in modes:
            raise ValueError(f"interpolate: mode {mode!r} is not one of {sorted(modes)}")
        if align_corners and modes[mode] != "linear":
            raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear")
        size = tuple(int(s) for s in size)
        if len(size) > self.ndim:
            raise ValueError(f"interpolate: size {size} has more dims than the input {list(self.shape)}")
        x = self.cast(least_upper_float(self.dtype))
        nb = x.ndim - len(size)
        for i, n_out in enumerate(size):
            ax = nb + i
            n_in = x.shape[ax]
            if n_in == n_out and modes[mode] != "linear":
                continue
            mat = t(_interp_matrix(n_in, n_out, modes[mode], align_corners), device=x.device).cast(x.dtype)
            x = x.transpose(ax, -1).dot(mat.T).transpose(ax, -1)
        return x

    # ----- normalization

    def layernorm(self: Tensor, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
        """``(x - mean) / sqrt(var + eps)`` over ``axis`` (biased variance, no affine: see `nn.LayerNorm`)."""
        y = self - self.mean(axis, keepdim=True)
        return y * _rsqrt((y * y).mean(axis, keepdim=True) + eps)

    def batchnorm(
        self: Tensor,
        weight: Tensor | None,
        bias: Tensor | None,
        mean: Tensor,
        invstd: Tensor,
        axis: int | Sequence[int] = 1,
    ) -> Tensor:
        """``(x - mean) * weight * invstd + bias`` with the parameters broadcast along ``axis`` (tinygrad's form;
        ``invstd = 1/sqrt(var + eps)``)."""
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(a % self.ndim for a in axes)
        shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))

        def view(p: Tensor) -> Tensor:
            return p.reshape(*shape) if p.ndim == len(axes) else p

        x = self - view(mean)
        if weight is not None:
            x = x * view(weight)
        x = x * view(invstd)
        return x + view(bias) if bias is not None else x

    # ----- misc

    def one_hot(self: Tensor, num_classes: int = -1) -> Tensor:
        """One-hot int64 encoding along a new last axis, like `F.one_hot` (``-1`` infers ``max + 1``)."""
        if dtypes.is_float(self.dtype):
            raise RuntimeError("one_hot is only applicable to index tensor")
        if num_classes == -1:
            num_classes = int(self.max().item()) + 1 if self.numel() else 0
        return _one_hot_along(self, num_classes, -1).cast(dtypes.int64)

    def scaled_dot_product_attention(
        self: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        enable_gqa: bool = False,
    ) -> Tensor:
        """``softmax(q @ k^T / sqrt(d) + mask) @ v`` like `F.scaled_dot_product_attention`: a bool mask keeps
        where true, a float mask is added; ``is_causal`` masks the upper triangle; ``enable_gqa`` repeats key/value
        heads. ``dropout_p > 0`` needs `Tensor.dropout`."""
        q = self
        if enable_gqa and q.ndim >= 3 and key.shape[-3] != q.shape[-3]:
            rep = q.shape[-3] // key.shape[-3]

            def repeat(x: Tensor) -> Tensor:
                h = x.shape[-3]
                y = x.reshape(*x.shape[:-3], h, 1, *x.shape[-2:]).expand(*x.shape[:-3], h, rep, *x.shape[-2:])
                return y.reshape(*x.shape[:-3], h * rep, *x.shape[-2:])

            key, value = repeat(key), repeat(value)
        scores = q.dot(key.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
        if is_causal:
            if attn_mask is not None:
                raise RuntimeError("scaled_dot_product_attention: pass either attn_mask or is_causal, not both")
            t = _tensor_cls()
            lq, lk = q.shape[-2], key.shape[-2]
            rows = t.arange(lq, device=q.device, dtype=dtypes.int32).reshape(lq, 1)
            cols = t.arange(lk, device=q.device, dtype=dtypes.int32).reshape(1, lk)
            attn_mask = rows >= cols
        if attn_mask is not None:
            if attn_mask.dtype == dtypes.bool:
                scores = attn_mask.where(scores, -math.inf)
            else:
                scores = scores + attn_mask
        weights = scores.softmax(-1)
        if dropout_p:
            weights = weights.dropout(dropout_p)  # type: ignore[attr-defined]
        return weights.dot(value)

    def sequential(self: Tensor, ll: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:
        """Apply the callables in ``ll`` in order: ``x.sequential([f, g]) == g(f(x))``."""
        return functools.reduce(lambda x, f: f(x), ll, self)

    # ----- losses

    def binary_crossentropy(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
        """Binary cross entropy of probabilities ``self`` against targets ``Y`` (logs clamped at -100 like
        PyTorch)."""
        _check_reduction(reduction)
        return _reduce_loss(-(Y * _clamped_log(self) + (1 - Y) * _clamped_log(1 - self)), reduction)

    def binary_crossentropy_logits(
        self: Tensor, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None
    ) -> Tensor:
        """Binary cross entropy of logits ``self`` against ``Y``, computed stably like
        `F.binary_cross_entropy_with_logits` (``pos_weight`` scales the positive term)."""
        _check_reduction(reduction)
        softplus_neg = (1 + (-self.abs()).exp()).log() + (-self).maximum(0)  # log(1 + exp(-x))
        coef = 1 + (pos_weight - 1) * Y if pos_weight is not None else 1
        return _reduce_loss((1 - Y) * self + coef * softplus_neg, reduction)

    def sparse_categorical_crossentropy(
        self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = "mean"
    ) -> Tensor:
        """Cross entropy of logits ``self`` (classes on the last axis) against integer labels ``Y``; labels equal to
        ``ignore_index`` contribute nothing (and are not counted by ``'mean'``)."""
        _check_reduction(reduction)
        log_probs = self.log_softmax(-1)
        keep = Y != ignore_index
        hot = _one_hot_along(Y, self.shape[-1], -1)
        picked = hot.where(log_probs, 0.0).sum(-1)  # not `hot * log_probs`: a -inf logit (a mask) times 0 is NaN
        loss = (1 - label_smoothing) * picked + label_smoothing * log_probs.mean(-1) if label_smoothing else picked
        loss = -keep.where(loss, 0.0)
        if reduction == "mean":
            return loss.sum() / keep.cast(loss.dtype).sum()
        return _reduce_loss(loss, reduction)

    def cross_entropy(self: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
        """`F.cross_entropy` of logits ``self`` (classes on axis 1, or axis 0 for a 1-d input) against class indices
        (an integer ``Y``) or class probabilities (a float ``Y`` of ``self``'s shape)."""
        _check_reduction(reduction)
        axis = 1 if self.ndim >= 2 else 0
        n_classes = self.shape[axis]
        log_probs = self.log_softmax(axis)
        if not dtypes.is_float(Y.dtype):
            # class indices: pick the target's log-probability (a -inf logit elsewhere, a mask, stays out, as in
            # PyTorch, where multiplying by a one-hot would give 0 * -inf = NaN)
            hot = _one_hot_along(Y, n_classes, axis)
            loss = -hot.where(log_probs, 0.0).sum(axis)
            if label_smoothing:
                loss = (1 - label_smoothing) * loss - label_smoothing * log_probs.mean(axis)
            return _reduce_loss(loss, reduction)
        if Y.shape != self.shape:
            raise RuntimeError(
                f"cross_entropy: probability targets of shape {list(Y.shape)} for input {list(self.shape)}"
            )
        if label_smoothing:
            Y = Y * (1 - label_smoothing) + label_smoothing / n_classes
        return _reduce_loss(-(log_probs * Y).sum(axis), reduction)

    def nll_loss(
        self: Tensor,
        Y: Tensor,
        weight: Tensor | None = None,
        ignore_index: int | None = None,
        reduction: str = "mean",
    ) -> Tensor:
        """`F.nll_loss` of log-probabilities ``self`` (classes on axis 1) against integer ``Y``, with optional class
        ``weight`` and ``ignore_index``; ``'mean'`` divides by the total weight of the counted targets."""
        _check_reduction(reduction)
        axis = 1 if self.ndim >= 2 else 0
        hot = _one_hot_along(Y, self.shape[axis], axis)
        w = hot.cast(self.dtype)
        if weight is not None:
            w = w * weight.reshape(-1, *((1,) * (self.ndim - axis - 1)))
        if ignore_index is not None:
            w = w * _unsqueeze(Y != ignore_index, axis).cast(self.dtype)
        w_sum = w.sum(axis)
        loss = -hot.where(self * w, 0.0).sum(axis)  # only the targets' terms: a -inf elsewhere times 0 would be NaN
        if reduction == "mean":
            return loss.sum() / w_sum.sum()
        return _reduce_loss(loss, reduction)
