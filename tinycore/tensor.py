"""`Tensor`, tinycore's lazy tensor, at its public address (``from tinycore.tensor import Tensor``, as in tinygrad).

The class is defined with the rest of the front end in `tinycore.frontend.tensor`; this module only re-exports it,
so the front end package never imports this one.
"""

from tinycore.frontend.tensor import Tensor

__all__ = ["Tensor"]
