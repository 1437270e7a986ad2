"""tinygrad 0.11 functions that have no other home: methods of `Tensor` (see `tinycore/frontend/__init__.py`).

Linear algebra helpers (`diag`, `diagonal`, `meshgrid`, `newton_schulz`, and `qr`/`svd`, built in `linalg.py`),
the einops-style `rearrange`, raw-op access (`alu`, `const_like`, `ufix`, `threefry`), graph hints
(`contiguous_backward`, `kernelize`, `fuse`, `replace`) and the ways in of outside data (`from_uop`, `from_blob`,
`from_url`, `keccak`). Each follows PyTorch's meaning where torch has the op (`torch.diag`, `torch.diagonal`,
`torch.meshgrid`, `torch.linalg.qr/svd`); `docs/api.md` lists where
tinycore differs from tinygrad and what it leaves out.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tinycore.dtype import dtypes
from tinycore.helpers import prod
from tinycore.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from tinycore.frontend.tensor import Tensor


def _tensor_cls() -> type[Tensor]:
    from tinycore.frontend.tensor import Tensor

    return Tensor


def _parse_side(side: str, what: str) -> list[list[str] | str]:
    """One side of a `rearrange` formula: a list of axis names (``str``), ``"..."``, ``"1"`` and groups
    (``list[str]``) for parenthesised names."""
    tokens = re.findall(r"\(|\)|\.\.\.|[A-Za-z_][A-Za-z_0-9]*|\d+|\S", side)
    out: list[list[str] | str] = []
    group: list[str] | None = None
    for tok in tokens:
        if tok == "(":
            if group is not None:
                raise ValueError(f"rearrange: nested parentheses in the {what} of the formula")
            group = []
        elif tok == ")":
            if group is None:
                raise ValueError(f"rearrange: unbalanced ')' in the {what} of the formula")
            out.append(group)
            group = None
        elif re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*|\.\.\.|1", tok):
            (out if group is None else group).append(tok)  # type: ignore[arg-type]
        else:
            raise ValueError(f"rearrange: unexpected {tok!r} in the {what} of the formula")
    if group is not None:
        raise ValueError(f"rearrange: unbalanced '(' in the {what} of the formula")
    return out


def _names(side: list[list[str] | str]) -> list[str]:
    """The axis names of a parsed side, in order, without ``1``."""
    flat = [n for item in side for n in (item if isinstance(item, list) else [item])]
    return [n for n in flat if n != "1"]


class CompatMixin:
    """tinygrad-0.11 functions without a themed module, mixed into `tinycore.tensor.Tensor`."""

    __slots__ = ()

    # ----- linear algebra helpers

    def diag(self: Tensor) -> Tensor:  # type: ignore[misc]
        """`torch.diag` without an offset: a 1-d vector becomes the square matrix with it on the diagonal, and a
        2-d matrix gives its main diagonal. Other ranks raise RuntimeError.

        >>> Tensor([1, 2]).diag().tolist()  # doctest: +SKIP
        [[1, 0], [0, 2]]
        """
        if self.ndim == 2:
            return self.diagonal()
        if self.ndim != 1:
            raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {self.ndim}D")
        n = self.shape[0]
        # row i is [v_i, 0 * n]: flattened, v_i lands at i * (n + 1), the diagonal of an (n, n) view
        padded = self.reshape(n, 1).pad(((0, 0), (0, n)))
        return padded.flatten().shrink(((0, n * n),)).reshape(n, n)

    def diagonal(self: Tensor) -> Tensor:  # type: ignore[misc]
        """`torch.diagonal` with its defaults (``offset=0, dim1=0, dim2=1``): the diagonal of the first two
        dimensions, as a new last dimension of length ``min(shape[0], shape[1])`` (a view in torch; movement ops
        here, so gradients flow back to the diagonal)."""
        if self.ndim < 2:
            raise RuntimeError(f"diagonal dimensions requires ndim larger than 1, got {self.ndim}")
        a, b, *rest = self.shape
        n = min(a, b)
        x = self.permute(*range(2, self.ndim), 0, 1).shrink((*((None,) * len(rest)), (0, n), (0, n)))
        if n == 0:
            return x.reshape(*rest, 0)
        # (..., n, n) -> (..., n*n) -> pad to n*(n+1) -> (..., n, n+1): column 0 holds the diagonal
        x = x.reshape(*rest, n * n).pad(((0, 0),) * len(rest) + ((0, n),))
        return x.reshape(*rest, n, n + 1).shrink((*((None,) * len(rest)), None, (0, 1))).reshape(*rest, n)

    def meshgrid(self: Tensor, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:  # type: ignore[misc]
        """`torch.meshgrid(self, *args, indexing=...)`: coordinate grids of 0-d/1-d tensors, each expanded to the
        shape ``(len(self), len(args[0]), ...)`` (``"ij"``) or with the first two swapped (``"xy"``)."""
        if indexing not in ("ij", "xy"):
            raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}')
        tensors = (self, *args)
        for i, t in enumerate(tensors):
            if t.ndim > 1:
                raise RuntimeError(
                    f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: tensor {i} of shape "
                    f"{list(t.shape)}"
                )
        if len({t.dtype for t in tensors}) > 1 or len({str(t.device) for t in tensors}) > 1:
            raise RuntimeError("torch.meshgrid: expects all tensors to have the same dtype and device")
        flat = [t.reshape(-1) for t in tensors]
        shape = tuple(t.shape[0] for t in flat)
        grids = []
        for i, t in enumerate(flat):
            view = [1] * len(flat)
            view[i] = shape[i]
            grids.append(t.reshape(*view).expand(*shape))
        if indexing == "xy" and len(flat) >= 2:  # cartesian: the first two grid dimensions swapped
            grids = [g.transpose(0, 1) for g in grids]
        return tuple(grids)

    def newton_schulz(self: Tensor, steps: int, params: Sequence[float], eps: float = 1.0e-7) -> Tensor:  # type: ignore[misc]
        """Approximate orthogonalization of the last two dimensions (the Muon optimizer's step), as tinygrad:
        ``G = x / (||x||_F + eps)``, then ``steps`` times ``G = sum_i params[i] * (G G^T)^i G`` (for Muon's
        ``(a, b, c)`` this is ``a G + (b A + c A A) G`` with ``A = G G^T``). A tall matrix is handled transposed."""
        if self.ndim < 2:
            raise RuntimeError(f"newton_schulz needs at least 2 dimensions, got {self.ndim}")
        if self.shape[-2] > self.shape[-1]:
            return self.transpose(-2, -1).newton_schulz(steps, params, eps).transpose(-2, -1)
        g = self / (self.square().sum(axis=(-2, -1), keepdim=True).sqrt() + eps)
        for _ in range(steps):
            a = g @ g.transpose(-2, -1)
            term, total = g, None
            for i, p in enumerate(params):
                if i:
                    term = a @ term
                total = term * p if total is None else total + term * p
            if total is not None:
                g = total
        return g

    def qr(self: Tensor) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
        """QR decomposition of the last two dimensions (``m x n``, any leading batch dimensions), as tinygrad's:
        ``(Q, R)`` with ``Q`` ``m x m`` orthogonal and ``R`` ``m x n`` upper triangular, ``Q @ R == self``.

        Householder reflections with LAPACK's sign convention, so the result is torch's
        ``torch.linalg.qr(x, mode="complete")`` up to rounding (see `tinycore.frontend.linalg`). Gradients flow
        through the reflections. Non-float inputs raise RuntimeError (torch's message).
        """
        from tinycore.frontend.linalg import householder_qr

        return householder_qr(self)

    def svd(self: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:  # type: ignore[misc]
        """Singular value decomposition of the last two dimensions (``m x n``, ``k = min(m, n)``, any leading batch
        dimensions), as tinygrad's and ``torch.linalg.svd``: ``(U, S, Vh)`` with ``self == U @ diag(S) @ Vh``,
        ``S`` (``k`` values) sorted descending, ``U`` ``m x m`` and ``Vh`` ``n x n`` (``m x k`` and ``k x n`` with
        ``full_matrices=False``).

        QR, then a fixed number of one-sided Jacobi sweeps (no data-dependent loop: `TinyJit` captures it). Each
        pair ``(U[:, i], Vh[i])`` is unique only up to a common sign, which may differ from torch's; gradients flow
        through the sweeps (for distinct singular values they approach the analytic ones).
        """
        from tinycore.frontend.linalg import jacobi_svd

        return jacobi_svd(self, full_matrices)

    # ----- einops-style rearrange

    def rearrange(self: Tensor, formula: str, **sizes: int) -> Tensor:  # type: ignore[misc]
        """einops' ``rearrange``: ``x.rearrange("b c (h w) -> b (c h) w", h=2)``. Names are axes, parentheses
        split or merge axes (one unknown size per group is inferred; others come from ``sizes``), ``...`` stands
        for the remaining axes and ``1`` for a unit axis. Built from reshape and permute only.
        """
        if formula.count("->") != 1:
            raise ValueError(f"rearrange: the formula needs exactly one '->', got {formula!r}")
        lhs_text, rhs_text = formula.split("->")
        lhs, rhs = _parse_side(lhs_text, "input"), _parse_side(rhs_text, "output")
        lnames, rnames = _names(lhs), _names(rhs)
        for side, names in (("input", lnames), ("output", rnames)):
            if len(set(names)) != len(names):
                raise ValueError(f"rearrange: an axis name appears twice in the {side} of {formula!r}")
        if set(lnames) != set(rnames):
            raise ValueError(f"rearrange: the axes {sorted(set(lnames) ^ set(rnames))} appear on one side only")
        unknown = set(sizes) - set(lnames)
        if unknown:
            raise ValueError(f"rearrange: sizes given for axes not in the formula: {sorted(unknown)}")
        n_ellipsis = sum(1 for item in lhs if item == "...")
        if n_ellipsis > 1 or any(isinstance(g, list) and "..." in g for g in lhs):
            raise ValueError("rearrange: '...' may appear once, outside parentheses, in the input")
        if len(lhs) - n_ellipsis > self.ndim or (not n_ellipsis and len(lhs) != self.ndim):
            raise ValueError(
                f"rearrange: the input pattern has {len(lhs)} axes, the tensor {self.ndim} ({list(self.shape)})"
            )
        ell_dims = self.ndim - (len(lhs) - n_ellipsis)
        known: dict[str, int] = dict(sizes)
        split: list[int] = []  # the input split into one dimension per lhs name (or per '...' axis)
        ell_shape: list[int] = []
        order: list[str] = []
        dim = 0
        for item in lhs:
            if item == "...":
                ell_shape = list(self.shape[dim : dim + ell_dims])
                split.extend(ell_shape)
                order.extend(f"...{i}" for i in range(ell_dims))
                dim += ell_dims
                continue
            group = item if isinstance(item, list) else [item]
            size = self.shape[dim]
            missing = [n for n in group if n != "1" and n not in known]
            if len(missing) > 1:
                raise ValueError(f"rearrange: can't infer the sizes of {missing} from dimension {dim} ({size})")
            rest = prod(known[n] for n in group if n != "1" and n in known)
            if missing:
                if rest == 0 or size % rest:
                    raise ValueError(f"rearrange: dimension {dim} ({size}) is not divisible by {rest}")
                known[missing[0]] = size // rest
            elif rest != size:
                raise ValueError(f"rearrange: the sizes of {group} multiply to {rest}, dimension {dim} is {size}")
            for n in group:
                if n != "1":
                    split.append(known[n])
                    order.append(n)
            dim += 1
        x = self.reshape(*split) if tuple(split) != tuple(self.shape) else self
        rorder: list[str] = []
        out_shape: list[int] = []
        for item in rhs:
            if item == "...":
                rorder.extend(f"...{i}" for i in range(ell_dims))
                out_shape.extend(ell_shape)
                continue
            group = item if isinstance(item, list) else [item]
            names = [n for n in group if n != "1"]
            rorder.extend(names)
            out_shape.append(prod(known[n] for n in names))
        if "..." in rhs and not n_ellipsis:
            raise ValueError("rearrange: '...' in the output needs '...' in the input")
        if n_ellipsis and "..." not in rhs:
            raise ValueError("rearrange: '...' in the input needs '...' in the output")
        perm = [order.index(n) for n in rorder]
        if perm != list(range(len(perm))):
            x = x.permute(*perm)
        return x.reshape(*out_shape)

    # ----- raw ops and constants (tinygrad's MathTrait)

    def alu(self: Tensor, op: Ops, *src: Tensor) -> Tensor:  # type: ignore[misc]
        """Apply the raw tinycore `Ops` ``op`` to this tensor and ``src`` (same shape, device and dtype; no
        promotion or broadcasting, no checks beyond the UOp's): an escape hatch for ops without a Tensor method."""
        from tinycore.frontend.tensor import _grad_of, _wrap

        for s in src:
            if not isinstance(s, _tensor_cls()) or s.shape != self.shape or s.device != self.device:
                raise ValueError(f"alu({op}): the sources must be tensors of shape {list(self.shape)} on {self.device}")
        uop = self.uop.alu(op, *(s.uop for s in src))
        return _wrap(uop, self.device, self._shape, _grad_of(self._requires_grad, *(s._requires_grad for s in src)))

    def const_like(self: Tensor, b: Any) -> Tensor:  # type: ignore[misc]
        """A tensor of this shape, dtype and device filled with the Python scalar ``b``."""
        return self.full_like(b)

    def ufix(self: Tensor, x: Any) -> Tensor:  # type: ignore[misc]
        """``x`` itself when it is a Tensor, else the constant ``x`` in this tensor's shape and dtype."""
        return x if isinstance(x, _tensor_cls()) else self.const_like(x)

    def threefry(self: Tensor, seed: Any) -> Tensor:  # type: ignore[misc]
        """Threefry-2x32 (20 rounds) of this uint64 counter tensor with the uint64 key ``seed`` (a tensor or an
        int): the raw random-bits op that `Tensor.rand` is built on."""
        if self.dtype != dtypes.uint64:
            raise TypeError(f"threefry needs a uint64 counter tensor, got {self.dtype}")
        key = seed if isinstance(seed, _tensor_cls()) else self.const_like(seed)
        if key.dtype != dtypes.uint64:
            raise TypeError(f"threefry needs a uint64 key, got {key.dtype}")
        return self._binop(Ops.THREEFRY, key)

    # ----- graph hints

    def contiguous_backward(self: Tensor) -> Tensor:  # type: ignore[misc]
        """The same value (identity forward); in the backward pass the gradient flowing through it is made
        contiguous, i.e. realized into a buffer of its own (tinygrad's CONTIGUOUS_BACKWARD)."""
        from tinycore.frontend.tensor import _wrap

        uop = UOp(Ops.CONTIGUOUS_BACKWARD, self.uop.dtype, (self.uop,))
        return _wrap(uop, self.device, self._shape, self._requires_grad)

    def kernelize(self: Tensor, *lst: Tensor) -> Tensor:  # type: ignore[misc]
        """tinygrad groups the graph into kernels here without running them. tinycore groups kernels when the
        value is scheduled (`schedule`, `realize`), so this is a no-op that returns self; it never computes."""
        return self

    def fuse(self: Tensor) -> Tensor:  # type: ignore[misc]
        """tinygrad's hint to fuse the graph behind this tensor into one kernel. tinycore's scheduler decides
        fusion itself, so this returns self unchanged."""
        return self

    def replace(self: Tensor, x: Tensor, allow_shape_mismatch: bool = False) -> Tensor:  # type: ignore[misc]
        """Make this Tensor object hold ``x``'s value (its graph), in place; returns self. Unlike `assign`, no
        buffer is written: other tensors that read the old value keep it. The shapes must match unless
        ``allow_shape_mismatch``."""
        if not isinstance(x, _tensor_cls()):
            raise TypeError(f"replace: x must be a Tensor, got {type(x).__name__}")
        if not allow_shape_mismatch and tuple(x.shape) != tuple(self.shape):
            raise RuntimeError(f"replace: shape mismatch {list(self.shape)} != {list(x.shape)}")
        self.uop, self.device, self._shape = x.uop, x.device, x._shape
        return self

    # ----- data from outside

    @staticmethod
    def from_uop(y: UOp, **kwargs: Any) -> Tensor:
        """A Tensor holding the tensor-level UOp ``y`` (``Tensor(y, **kwargs)``)."""
        return _tensor_cls()(y, **kwargs)

    @staticmethod
    def from_blob(ptr: int, shape: tuple[int, ...], **kwargs: Any) -> Tensor:
        """A Tensor of ``shape`` (``dtype=``, ``device=`` as keywords) read from host memory at address ``ptr``.
        tinygrad aliases that memory; tinycore copies it when called, so later writes to the blob are not seen."""
        import numpy as np

        from tinycore.frontend.tensor import _to_dtype

        dtype = _to_dtype(kwargs.pop("dtype", dtypes.default_float))
        shape = tuple(shape)
        nbytes = prod(shape) * dtype.itemsize
        raw = ctypes.string_at(ptr, nbytes) if nbytes else b""
        if dtype == dtypes.bfloat16:
            bits = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << np.uint32(16)
            return _tensor_cls()(bits.view(np.float32).reshape(shape), dtype=dtypes.bfloat16, **kwargs)
        arr = np.frombuffer(raw, dtype=dtypes.to_np(dtype)).reshape(shape).copy()
        return _tensor_cls()(arr, dtype=dtype, **kwargs)

    @staticmethod
    def from_url(url: str, gunzip: bool = False, **kwargs: Any) -> Tensor:
        """The bytes at ``url`` (downloaded through `tinycore.fetch`, so cached) as a 1-d uint8 tensor;
        ``gunzip`` decompresses them first. ``device=`` (and a ``dtype=`` to cast to) as keywords."""
        import numpy as np

        from tinycore.frontend.fetch import fetch

        data = fetch(url, gunzip=gunzip).read_bytes()
        dtype = kwargs.pop("dtype", None)
        t = _tensor_cls()(np.frombuffer(data, dtype=np.uint8).copy(), **kwargs)
        return t.cast(dtype) if dtype is not None else t

    def keccak(self: Tensor, cfg: str | tuple[int, int] = "sha3_256") -> Tensor:  # type: ignore[misc]
        """Keccak of the bytes of each row (the last dimension, any dtype, as stored): a uint8 tensor
        ``(*lead, (200 - rate) // 2)``. ``cfg`` is ``sha3_224/256/384/512``, ``shake_128/256`` or a ``(rate,
        dsbyte)`` pair, as in tinygrad (SHAKE gives ``(200 - rate) // 2`` bytes: 16 for ``shake_128``). Computed on
        the host (`tinycore.frontend.keccak`; the value is realized); tinygrad builds the rounds as tensor ops."""
        import numpy as np

        from tinycore.frontend import keccak as host

        rate, _ = host.sponge_of(cfg)
        raw = np.frombuffer(self.data(), dtype=np.uint8)
        rows = raw.reshape(prod(self.shape[:-1]), -1) if self.ndim else raw.reshape(1, -1)
        digests = host.keccak(rows, cfg)
        return _tensor_cls()(digests.reshape(*self.shape[:-1], host.digest_size(rate)), device=self.device)

    def hash(self: Tensor) -> Tensor:  # type: ignore[misc]
        """tinygrad's 16-byte content hash of the tensor's bytes (row-major, as stored): a 1-d uint8 tensor. A tree
        of ``shake_128`` hashes over 4 KiB blocks and 1 MiB chunks (`tinycore.frontend.keccak.tree_hash`), so equal
        contents hash equal on every device; computed on the host."""
        import numpy as np

        from tinycore.frontend import keccak as host

        digest = host.tree_hash(bytes(self.data()))
        return _tensor_cls()(np.frombuffer(digest, dtype=np.uint8).copy(), device=self.device)
