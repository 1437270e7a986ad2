"""The Tensor API, split by theme into mixin classes that `tinycore.tensor.Tensor` inherits.

Each module holds one family of user-facing operations, written only in terms of the core `Tensor` methods
(elementwise ALU ops, movement ops, reductions, `cast`, `where`) so that every op is a graph the scheduler fuses.

| module | mixin | what |
|---|---|---|
| `creation.py` | `CreationMixin` | `zeros ones full *_like eye linspace triu tril`, random tensors and initializers |
| `elementwise.py` | `ElementwiseMixin` | math and activation functions, comparisons helpers, `clamp lerp isclose...` |
| `movement.py` | `MovementMixin` | `squeeze unsqueeze split chunk repeat roll unfold cat stack`, indexing |
| `reduce.py` | `ReduceMixin` | `prod var std any all argmax logsumexp cumsum sort topk...` |
| `processing.py` | `ProcessingMixin` | `conv2d pools interpolate einsum attention linear norms`, losses |
| `autograd.py` | `AutogradMixin` | `backward gradient requires_grad_` |
| `data.py` | `DataMixin` | `clone to_ float half int bool long short double bfloat16` |
| `compat.py` | `CompatMixin` | `diag diagonal meshgrid rearrange newton_schulz qr svd keccak`, raw ops, graph hints |
| `linalg.py` | (functions) | Householder QR and Jacobi SVD behind `qr`/`svd` |
"""

from tinycore.frontend.autograd import AutogradMixin
from tinycore.frontend.compat import CompatMixin
from tinycore.frontend.creation import CreationMixin
from tinycore.frontend.data import DataMixin
from tinycore.frontend.elementwise import ElementwiseMixin
from tinycore.frontend.movement import MovementMixin
from tinycore.frontend.processing import ProcessingMixin
from tinycore.frontend.reduce import ReduceMixin

__all__ = [
    "AutogradMixin",
    "CompatMixin",
    "CreationMixin",
    "DataMixin",
    "ElementwiseMixin",
    "MovementMixin",
    "ProcessingMixin",
    "ReduceMixin",
]
