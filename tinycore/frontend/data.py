"""Data-side Tensor methods: copies and dtype shorthands (`clone`, `to_`, `float`, `half`, `int`, `bool`).

Mixed into `Tensor`; each follows PyTorch's meaning of the same name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tinycore.dtype import dtypes

if TYPE_CHECKING:
    from tinycore.frontend.tensor import Tensor


class DataMixin:
    """`clone`, in-place `to_`, and the cast shorthands `float half int bool`."""

    def clone(self: Tensor) -> Tensor:
        """A copy of this value in a buffer of its own: writing to one never changes the other. Gradients flow
        through it like through ``torch.clone``.

        >>> from tinycore import Tensor
        >>> a = Tensor([1.0, 2.0]).realize()
        >>> b = a.clone()
        >>> _ = b.assign(Tensor([5.0, 6.0])).realize()
        >>> a.tolist(), b.tolist()
        ([1.0, 2.0], [5.0, 6.0])
        """
        from tinycore.frontend.tensor import Tensor

        if isinstance(self.device, tuple):
            raise NotImplementedError("clone of a sharded tensor: use .to(device) first")
        out = Tensor.empty(*self.shape, device=self.device, dtype=self.dtype).assign(self)
        out.requires_grad = self.requires_grad
        return out

    def to_(self: Tensor, device: str | tuple[str, ...] | None) -> Tensor:
        """Move this tensor to ``device`` in place (its gradient too, when it has one); returns self."""
        moved = self.to(device)
        if moved is self:
            return self
        grad = self.grad.to(device) if self.grad is not None else None
        self.uop, self.device = moved.uop, moved.device
        self.grad = grad
        return self

    def float(self: Tensor) -> Tensor:
        """``self.cast(dtypes.float32)``."""
        return self.cast(dtypes.float32)

    def half(self: Tensor) -> Tensor:
        """``self.cast(dtypes.float16)``."""
        return self.cast(dtypes.float16)

    def int(self: Tensor) -> Tensor:
        """``self.cast(dtypes.int32)``."""
        return self.cast(dtypes.int32)

    def bool(self: Tensor) -> Tensor:
        """``self.cast(dtypes.bool)``."""
        return self.cast(dtypes.bool)

    def long(self: Tensor) -> Tensor:
        """``self.cast(dtypes.int64)``."""
        return self.cast(dtypes.int64)

    def short(self: Tensor) -> Tensor:
        """``self.cast(dtypes.int16)``."""
        return self.cast(dtypes.int16)

    def double(self: Tensor) -> Tensor:
        """``self.cast(dtypes.float64)``."""
        return self.cast(dtypes.float64)

    def bfloat16(self: Tensor) -> Tensor:
        """``self.cast(dtypes.bfloat16)``."""
        return self.cast(dtypes.bfloat16)
