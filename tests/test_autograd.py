"""Autograd: every derivative rule of `tinycore.gradient` against PyTorch, plus the Tensor API (`backward`,
`gradient`, `requires_grad`, `detach`) and whole-model gradients (matmul chains, softmax, an MLP)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from op_helpers import check_op, torch

from tinycore.dtype import dtypes
from tinycore.gradient import compute_gradient, full_like
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops, UOp

# ----- one test per derivative rule (ops built from the core Tensor methods)


def test_add(device: str) -> None:
    check_op(device, [(3, 4), (3, 4)], lambda a, b: a + b)


def test_sub(device: str) -> None:
    check_op(device, [(3, 4), (3, 4)], lambda a, b: a - b)


def test_mul(device: str) -> None:
    check_op(device, [(3, 4), (3, 4)], lambda a, b: a * b)


def test_div(device: str) -> None:
    check_op(device, [(3, 4), (3, 4)], lambda a, b: a / b, low=0.5, high=2.0, atol=1e-5, rtol=1e-5)


def test_neg(device: str) -> None:
    check_op(device, [(5,)], lambda a: -a)


def test_maximum(device: str) -> None:
    check_op(device, [(3, 4), (3, 4)], torch.maximum, Tensor.maximum)


def test_maximum_ties_split_like_torch(device: str) -> None:
    a = np.array([1.0, 2.0, 3.0, -1.0], dtype=np.float32)
    b = np.array([1.0, 5.0, 3.0, -2.0], dtype=np.float32)
    check_op(device, None, torch.maximum, Tensor.maximum, values=[a, b])


def test_exp2(device: str) -> None:
    check_op(device, [(6,)], torch.exp2, Tensor.exp2, atol=1e-5, rtol=1e-5)


def test_log2(device: str) -> None:
    check_op(device, [(6,)], torch.log2, Tensor.log2, low=0.1, high=3.0, atol=1e-5, rtol=1e-5)


def test_sin(device: str) -> None:
    check_op(device, [(6,)], torch.sin, Tensor.sin, atol=1e-5, rtol=1e-5)


def test_sqrt(device: str) -> None:
    check_op(device, [(6,)], torch.sqrt, Tensor.sqrt, low=0.1, high=3.0, atol=1e-5, rtol=1e-5)


def test_reciprocal(device: str) -> None:
    check_op(device, [(6,)], torch.reciprocal, Tensor.reciprocal, low=0.5, high=3.0, atol=1e-5, rtol=1e-5)


def test_exp_log(device: str) -> None:
    check_op(device, [(6,)], lambda a: a.exp() * 2 + (a * a + 1).log(), atol=1e-5, rtol=1e-5)


def test_where_and_comparison(device: str) -> None:
    check_op(
        device,
        [(3, 4), (3, 4)],
        lambda a, b: torch.where(a < b, a * 2, b * 3),
        lambda a, b: (a < b).where(a * 2, b * 3),
    )


def test_cast_roundtrip(device: str) -> None:
    check_op(
        device, [(8,)], lambda a: (a.double() * 3).float(), lambda a: (a.cast(dtypes.float64) * 3).cast(dtypes.float32)
    )


def test_cast_to_int_has_no_gradient(device: str) -> None:
    x = Tensor([1.5, 2.5], device=device, requires_grad=True)
    loss = x.cast(dtypes.int32).cast(dtypes.float32).sum() + x.sum()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 1.0])


def test_reshape(device: str) -> None:
    check_op(device, [(3, 4)], lambda a: a.reshape(2, 6) * 2)


def test_expand(device: str) -> None:
    check_op(device, [(3, 1)], lambda a: a.expand(3, 4) * 2)


def test_permute(device: str) -> None:
    check_op(device, [(2, 3, 4)], lambda a: a.permute(2, 0, 1) * 2)


def test_pad(device: str) -> None:
    check_op(
        device, [(3, 4)], lambda a: torch.nn.functional.pad(a, (1, 2, 0, 1)) * 2, lambda a: a.pad((1, 2, 0, 1)) * 2
    )


def test_shrink(device: str) -> None:
    check_op(device, [(5, 6)], lambda a: a[1:4, 2:5] * 2, lambda a: a.shrink(((1, 4), (2, 5))) * 2)


def test_flip(device: str) -> None:
    check_op(device, [(3, 4)], lambda a: a.flip(1) * 2, lambda a: a.flip(1) * 2)


def test_sum(device: str) -> None:
    check_op(device, [(3, 4, 5)], lambda a: a.sum(1), atol=1e-5)


def test_sum_all(device: str) -> None:
    check_op(device, [(3, 4)], lambda a: a.sum(), atol=1e-5)


def test_max_reduce(device: str) -> None:
    check_op(device, [(3, 4, 5)], lambda a: a.amax(2), lambda a: a.max(2))


def test_max_reduce_ties_split_like_amax(device: str) -> None:
    a = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]], dtype=np.float32)
    check_op(device, None, lambda t: t.amax(1), lambda t: t.max(1), values=[a])


def test_min_reduce(device: str) -> None:
    check_op(device, [(4, 5)], lambda a: a.amin(0), lambda a: a.min(0))


def test_contiguous(device: str) -> None:
    check_op(device, [(3, 4)], lambda a: (a.T.contiguous() * 2).sum(0))


def test_contiguous_backward_rule() -> None:
    x = UOp.new_buffer("PYTHON", 4, dtypes.float, 0)
    y = UOp(Ops.CONTIGUOUS_BACKWARD, dtypes.float, (x,))
    g = compute_gradient(y, full_like(y, 1.0), [x])
    assert g[x].op is Ops.CONTIGUOUS


def test_detach_stops_gradient(device: str) -> None:
    x = Tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    (x * x.detach()).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0, 3.0])


# ----- broadcasting, reuse, views, chains


def test_broadcasting(device: str) -> None:
    check_op(device, [(3, 1), (1, 4)], lambda a, b: a * b + a)


def test_broadcast_scalar_tensor(device: str) -> None:
    a = Tensor(2.0, device=device, requires_grad=True)
    b = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=device, requires_grad=True)
    assert a.shape == ()
    (a * b).sum().backward()
    assert a.grad.shape == ()
    assert a.grad.item() == pytest.approx(21.0)
    np.testing.assert_allclose(b.grad.numpy(), np.full((2, 3), 2.0))


def test_reuse(device: str) -> None:
    check_op(device, [(4,)], lambda a: a * a * a + a)


def test_views(device: str) -> None:
    check_op(device, [(3, 4)], lambda a: a.T @ a, atol=1e-5)


def test_matmul_chain(device: str) -> None:
    check_op(device, [(2, 3), (3, 4), (4, 5)], lambda a, b, c: (a @ b).relu() @ c, atol=1e-5, rtol=1e-5)


def test_softmax(device: str) -> None:
    check_op(device, [(3, 5)], lambda a: a.softmax(-1), lambda a: a.softmax(-1), atol=1e-6, rtol=1e-5)


def test_log_softmax(device: str) -> None:
    check_op(device, [(3, 5)], lambda a: a.log_softmax(-1), lambda a: a.log_softmax(-1), atol=1e-5, rtol=1e-5)


def test_mean(device: str) -> None:
    check_op(device, [(3, 5)], lambda a: a.mean(0))


# ----- the Tensor API


def test_backward_non_scalar_needs_gradient(device: str) -> None:
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()


def test_backward_with_explicit_gradient(device: str) -> None:
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    (x * x).backward(Tensor([1.0, 10.0], device=device))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 40.0])


def test_backward_gradient_shape_mismatch(device: str) -> None:
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * x).backward(Tensor([1.0, 2.0, 3.0], device=device))


def test_backward_accumulates(device: str) -> None:
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    (x * 3).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0])


def test_backward_accumulates_into_realized_grad(device: str) -> None:
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    (x * 3).sum().backward()
    x.grad.realize()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 7.0])


def test_only_requires_grad_true_gets_grad(device: str) -> None:
    a = Tensor([1.0, 2.0], device=device, requires_grad=True)
    b = Tensor([3.0, 4.0], device=device)
    c = Tensor([5.0, 6.0], device=device, requires_grad=False)
    assert b.requires_grad is None and c.requires_grad is False
    (a * b * c).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), [15.0, 24.0])
    assert b.grad is None and c.grad is None


def test_backward_without_any_requires_grad_raises(device: str) -> None:
    with pytest.raises(RuntimeError, match="does not require grad"):
        (Tensor([1.0, 2.0], device=device) * 2).sum().backward()


def test_requires_grad_(device: str) -> None:
    x = Tensor([1.0, 2.0], device=device)
    assert x.requires_grad_() is x and x.requires_grad is True
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


def test_marked_intermediate_gets_grad(device: str) -> None:
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    y = (x * 2).requires_grad_()
    (y * y).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [4.0, 8.0])
    np.testing.assert_allclose(x.grad.numpy(), [8.0, 16.0])


def test_gradient_api(device: str) -> None:
    x = Tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
    y = Tensor([4.0, 5.0, 6.0], device=device)
    dx, dy = (x * y).sum().gradient(x, y)
    np.testing.assert_allclose(dx.numpy(), [4.0, 5.0, 6.0])
    np.testing.assert_allclose(dy.numpy(), [1.0, 2.0, 3.0])
    assert x.grad is None


def test_gradient_unused_target(device: str) -> None:
    x = Tensor([1.0, 2.0], device=device, requires_grad=True)
    z = Tensor([7.0, 8.0], device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="not used in the graph"):
        (x * 2).sum().gradient(z)
    (gz,) = (x * 2).sum().gradient(z, materialize_grads=True)
    np.testing.assert_allclose(gz.numpy(), [0.0, 0.0])


def test_constant_parameters_do_not_alias(device: str) -> None:
    a = Tensor.zeros(3, device=device, requires_grad=True)
    b = Tensor.zeros(3, device=device, requires_grad=True)
    assert a.uop is not b.uop
    ((a * 2).sum() + (b * 5).sum()).backward()
    np.testing.assert_allclose(a.grad.numpy(), [2.0] * 3)
    np.testing.assert_allclose(b.grad.numpy(), [5.0] * 3)


def test_target_realized_after_graph_was_built(device: str) -> None:
    w = Tensor.ones(3, device=device, requires_grad=True) * 1  # a lazy (non-buffer) value
    w.requires_grad = True
    loss = (w * w).sum()
    w.realize()
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), [2.0] * 3)


def test_train_mode_flag() -> None:
    assert Tensor.training is False
    with Tensor.train():
        assert Tensor.training is True
        with Tensor.test():
            assert Tensor.training is False
        assert Tensor.training is True
    assert Tensor.training is False


# ----- the MLP of the README, gradients vs torch


def _mlp_grads_torch(x: np.ndarray, y: np.ndarray, ws: list[np.ndarray]) -> tuple[float, list[np.ndarray]]:
    params = [torch.tensor(w, requires_grad=True) for w in ws]
    h = torch.tensor(x)
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i + 2 < len(params):
            h = h.relu()
    loss = torch.nn.functional.cross_entropy(h, torch.tensor(y))
    loss.backward()
    return float(loss.detach()), [p.grad.numpy() for p in params]


def test_mlp_784_512_512_10_gradients(device: str) -> None:
    rng = np.random.default_rng(0)
    sizes = [784, 512, 512, 10]
    ws: list[np.ndarray] = []
    for a, b in zip(sizes, sizes[1:]):
        bound = 1 / math.sqrt(a)
        ws += [
            rng.uniform(-bound, bound, (a, b)).astype(np.float32),
            rng.uniform(-bound, bound, (b,)).astype(np.float32),
        ]
    batch = 4
    x = rng.standard_normal((batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    ref_loss, ref_grads = _mlp_grads_torch(x, y, ws)

    params = [Tensor(w, device=device, requires_grad=True) for w in ws]
    h = Tensor(x, device=device)
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i + 2 < len(params):
            h = h.relu()
    onehot = Tensor(np.eye(10, dtype=np.float32)[y], device=device)
    loss = -(h.log_softmax(-1) * onehot).sum() / batch
    loss.backward()
    np.testing.assert_allclose(loss.item(), ref_loss, rtol=1e-5, atol=1e-5)
    for i, (p, ref) in enumerate(zip(params, ref_grads)):
        np.testing.assert_allclose(p.grad.numpy(), ref, atol=2e-5, rtol=1e-4, err_msg=f"parameter {i}")


def test_a_failed_construction_leaves_no_tensor_needing_gradients() -> None:
    """`Tensor(bad, requires_grad=True)` raising must not leave a half-made tensor among those autograd walks (a
    later realize read its missing value: AttributeError), even while the traceback keeps it alive."""
    with pytest.raises(TypeError) as info:
        Tensor(object(), requires_grad=True)
    w = Tensor([1.0, 2.0], requires_grad=True)
    y = (w * 3).realize()
    y.sum().backward()
    assert w.grad.tolist() == [3.0, 3.0] and info.value is not None
