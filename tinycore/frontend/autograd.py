"""Reverse-mode automatic differentiation: methods of `Tensor` (see `tinycore/frontend/__init__.py`).

Semantics (tinygrad 0.11, PyTorch values):

- `requires_grad` is None ("not set", the default), True or False. An op's result gets True when any input is
  True, else None when any input is None, else False (tinygrad 0.11; PyTorch agrees wherever a flag is True);
  `detach()`, scalar operands and internal constants are False. `backward()` fills `.grad` of the tensors that
  were marked True by the setter (`requires_grad=True`, `requires_grad_()`) and that the loss depends on (usually
  the parameters; a marked intermediate result gets its `.grad` too); results whose flag was only propagated get
  none, as PyTorch's non-leaf tensors.
- `loss.backward(gradient=None)`: a one-element loss is seeded with 1; any other shape needs `gradient`
  (else RuntimeError, as in PyTorch). Gradients accumulate: `.grad` is assigned `grad + new` when it exists, so
  call the optimizer's `zero_grad()` (which sets `.grad = None`) between steps.
- `t.gradient(*targets, gradient=None)` returns the gradients as new tensors and touches no `.grad`.
- The derivative rules live in `tinycore.gradient` (one PatternMatcher rule per UOp op).
- Call `backward()` before realizing the loss: after `loss.realize()` (or `.item()`/`.numpy()`) the loss tensor is
  a buffer and no longer holds the graph it was computed from (the same holds in tinygrad).
- `Tensor.training` (a class flag, set with `with Tensor.train():`) switches layers such as BatchNorm to batch
  statistics and lets optimizers step.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, ClassVar

from tinycore.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from tinycore.frontend.tensor import Tensor

# every live tensor whose requires_grad was set True (not merely propagated to it by an op): `backward()` looks
# here for the tensors a loss depends on; `_marked` is the same set by id (a WeakSet compares with Tensor.__eq__)
_grad_tensors: weakref.WeakSet[Any] = weakref.WeakSet()
_marked: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


class _TrainMode:
    """Context manager (and decorator) setting `Tensor.training` for its block."""

    def __init__(self, mode: bool) -> None:
        self.mode = mode
        self.prev: list[bool] = []

    def __enter__(self) -> _TrainMode:
        from tinycore.frontend.tensor import Tensor

        self.prev.append(Tensor.training)
        Tensor.training = self.mode
        return self

    def __exit__(self, *exc: Any) -> None:
        from tinycore.frontend.tensor import Tensor

        Tensor.training = self.prev.pop()

    def __call__(self, fn: Any) -> Any:
        import functools

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapper


# realized value (the buffer view a tensor holds after realize) -> the graph it was computed from, kept only for
# graphs that reach a tensor with requires_grad True, so that `out.numpy(); out.sum().backward()` still works
_origins: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()
# the same for tensors with requires_grad True: their realized view -> the node they were before
_target_origins: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()


def note_realized(t: Any, new: UOp) -> None:
    """Called by `Tensor.schedule_with_vars` before `t.uop` becomes `new` (its buffer view): remember the graph when
    gradients may need to flow through it. Assignments and tensors with requires_grad True are not remembered (a
    realized tensor with requires_grad True is a leaf from then on), so no history chain builds up across steps."""
    old = t.uop
    if new is old or old.op is Ops.ASSIGN or old.op is Ops.BUFFER:
        return
    if _marked.get(id(t)) is t:  # marked by the setter (a parameter); a result with a propagated flag is no leaf
        _target_origins[new] = old  # a graph built before this realize still finds the tensor
        return
    base = old
    while base.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP):
        base = base.src[0]
    if base.op in (Ops.ASSIGN, Ops.BUFFER):
        return
    grad_uops = {g.uop for g in list(_grad_tensors)}
    if any(n in grad_uops or n in _origins for n in old.toposort()):
        _origins[new] = old


def _expand_realized(root: UOp, stop: set[UOp]) -> tuple[UOp, dict[UOp, UOp]]:
    """`root` with realized values that have a remembered graph replaced by that graph (values in `stop` are kept).
    Returns the new root and ``{realized view: graph it stands for}``."""
    replaced: dict[UOp, UOp] = {}
    for _ in range(64):
        subs = {n: _origins[n] for n in root.toposort() if n not in stop and n not in replaced and n in _origins}
        if not subs:
            break
        replaced.update(subs)
        root = root.substitute(subs)
    return root, replaced


def _is_pure_constant(u: UOp) -> bool:
    """True when `u` reads no buffer (a broadcast constant or index math): equal such graphs are one shared node."""
    return not any(n.op in (Ops.BUFFER, Ops.BUFFER_VIEW) for n in u.toposort())


class AutogradMixin:
    """Reverse-mode automatic differentiation, mixed into `tinycore.tensor.Tensor`."""

    __slots__ = ()

    training: ClassVar[bool] = False

    # ----- requires_grad

    @property
    def requires_grad(self: Any) -> bool | None:
        """None (not set), True or False. Setting True marks the tensor: `backward()` fills its `.grad`. An op's
        result gets the flag propagated from its inputs (True if any is True, else None if any is None, else False)
        but is not marked."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self: Any, value: bool | None) -> None:
        self._requires_grad = value
        if value:
            uop = getattr(self, "uop", None)
            if uop is not None and _is_pure_constant(uop):
                # `Tensor.zeros(3, requires_grad=True)` twice would be the same hash-consed node: give it a buffer
                # of its own so that two parameters never share a node (nor, once realized, a buffer).
                from tinycore.engine.realized import new_buffer_uop

                buf = new_buffer_uop(self.device, int(self.numel()), self.dtype)
                view = buf.reshape(tuple(self.shape)) if tuple(self.shape) != (int(self.numel()),) else buf
                self.uop = view.assign(uop)
            if _marked.get(id(self)) is not self:  # WeakSet.add of a member would compare with Tensor.__eq__
                _grad_tensors.add(self)
                _marked[id(self)] = self
        elif id(self) in _marked.data and _marked.pop(id(self), None) is not None:
            for ref in [r for r in _grad_tensors.data if r() is self]:  # by identity, for the same reason
                _grad_tensors.data.discard(ref)

    def requires_grad_(self: Any, requires_grad: bool = True) -> Tensor:
        """Set `requires_grad` in place; returns self."""
        self.requires_grad = requires_grad
        return self

    # ----- training mode

    @staticmethod
    def train(mode: bool = True) -> _TrainMode:
        """`with Tensor.train():` sets `Tensor.training` to `mode` inside the block (also usable as a decorator)."""
        return _TrainMode(mode)

    @staticmethod
    def test() -> _TrainMode:
        """`with Tensor.test():` clears `Tensor.training` inside the block."""
        return _TrainMode(False)

    # ----- gradients

    def _grad_seed(self: Any, gradient: Tensor | None) -> UOp:
        from tinycore.frontend.tensor import Tensor

        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            gradient = Tensor.full(self.shape, 1.0, device=self.device, dtype=self.dtype)
        if not isinstance(gradient, Tensor):
            gradient = Tensor(gradient, device=self.device, dtype=self.dtype)
        if tuple(gradient.shape) != tuple(self.shape):
            raise RuntimeError(
                f"Mismatch in shape: grad_output has a shape of {tuple(gradient.shape)} and output has a shape "
                f"of {tuple(self.shape)}"
            )
        return gradient.cast(self.dtype).uop

    def _graph_nodes(self: Any, targets: list[Any]) -> tuple[UOp, list[UOp | None]]:
        """The graph to differentiate (realized values expanded back to their graphs where remembered) and the node
        standing for each target: its uop, or the node whose realized buffer the target now holds (the graph was
        built before the target was realized). None: not in the graph."""
        root = self.uop
        if _origins:
            root, replaced = _expand_realized(root, {t.uop for t in targets})
        topo = root.toposort()
        out: list[UOp | None] = []
        by_view: dict[UOp, UOp] | None = None
        for t in targets:
            if t.uop in topo or (t.uop.op is Ops.MULTI and any(s in topo for s in t.uop.src)):  # sharded: by shards
                out.append(t.uop)
                continue
            before = _target_origins.get(t.uop)
            if before is not None and before in topo:
                out.append(before)
                continue
            if by_view is None:
                from tinycore.engine.realized import realized_view

                by_view = {}
                for node in topo:
                    view = realized_view(node)
                    if view is not None:
                        by_view.setdefault(view, node)
            out.append(by_view.get(t.uop))
        return root, out

    def gradient(self: Any, *targets: Tensor, gradient: Tensor | None = None, materialize_grads: bool = False) -> list:
        """The gradients of this tensor with respect to `targets` (new lazy tensors, `.grad` untouched).

        `gradient` seeds a non-scalar output. A target this tensor does not depend on raises RuntimeError unless
        `materialize_grads=True` (then its gradient is zeros).

        >>> from tinycore.frontend.tensor import Tensor
        >>> x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> (dx,) = (x * x).sum().gradient(x)
        >>> dx.tolist()  # doctest: +SKIP
        [2.0, 4.0, 6.0]
        """
        from tinycore.frontend.tensor import Tensor
        from tinycore.gradient import compute_gradient

        root_grad = self._grad_seed(gradient)
        root, nodes = self._graph_nodes(list(targets))
        grads = compute_gradient(root, root_grad, [n for n in nodes if n is not None])
        out: list[Tensor] = []
        for t, node in zip(targets, nodes):
            g = grads.get(node) if node is not None else None
            if g is None:
                if not materialize_grads:
                    raise RuntimeError(
                        f"one of the differentiated tensors ({t!r}) was not used in the graph "
                        "(pass materialize_grads=True for zeros)"
                    )
                out.append(Tensor.full(t.shape, 0.0, device=t.device, dtype=t.dtype))
                continue
            out.append(Tensor(g, device=t.device))
        return out

    def backward(self: Any, gradient: Tensor | None = None, retain_graph: bool = False) -> Tensor:
        """Accumulate d(self)/d(t) into `t.grad` for every tensor `t` with `requires_grad` True in this graph.

        A one-element tensor is seeded with 1; other shapes need `gradient` (RuntimeError otherwise, like PyTorch).
        Returns self. `retain_graph` is accepted for PyTorch compatibility (graphs are never freed here).
        """
        root_grad = self._grad_seed(gradient)  # shape errors first, as in PyTorch
        candidates = [t for t in list(_grad_tensors) if t.requires_grad]
        root, nodes = self._graph_nodes(candidates)
        found = [(t, n) for t, n in zip(candidates, nodes) if n is not None]
        if not found:
            raise RuntimeError(
                "element 0 of tensors does not require grad: no tensor with requires_grad=True is in this graph"
            )
        from tinycore.frontend.tensor import Tensor
        from tinycore.gradient import compute_gradient

        grads = compute_gradient(root, root_grad, [n for _, n in found])
        for t, node in found:
            g = grads.get(node)
            if g is None:
                continue
            new = Tensor(g, device=t.device)
            if t.grad is None:
                t.grad = new
            else:
                t.grad.assign(t.grad + new)
        return self
