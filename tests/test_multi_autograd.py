"""Autograd through sharded tensors (`Tensor.shard` then `loss.backward()`): gradients equal PyTorch's on one device
and are sharded like their parameters (a sharded parameter's gradient is sharded on the same axis with the same
bounds; a replicated parameter's gradient is the all-reduced sum, replicated).

Runs on `PYTHON:0` / `PYTHON:1`, and on `CLANG:0` / `CLANG:1` when the CLANG plugin can open a device.
"""

from __future__ import annotations

import numpy as np
import torch

from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops


def _canon(devs: tuple[str, ...]) -> tuple[str, ...]:
    from tinycore.device import Device

    return tuple(Device.canonicalize(d) for d in devs)


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _param(a: np.ndarray, devs: tuple[str, str], axis: int | None) -> Tensor:
    t = Tensor(a, device=devs[0]).shard(devs, axis=axis).realize()
    t.requires_grad = True
    return t


def _torch_grads(fn, *arrays: np.ndarray) -> list[np.ndarray]:
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    fn(*ts).backward()
    return [t.grad.numpy() for t in ts]


def _check_sharded_like(grad: Tensor, param: Tensor) -> None:
    assert grad.device == param.device
    assert grad.uop.op is Ops.MULTI and param.uop.op is Ops.MULTI
    assert grad.uop.arg == param.uop.arg
    assert [s.shape for s in grad.uop.src] == [s.shape for s in param.uop.src]
    assert [s.device for s in grad.uop.src] == [s.device for s in param.uop.src]


def test_data_parallel_linear_relu(devs: tuple[str, str]) -> None:
    """Batch sharded, weights replicated: the weight gradient is the all-reduced sum, on every device."""
    x, w, b = _data(6, 4, seed=1), _data(4, 5, seed=2), _data(5, seed=3)
    xs = Tensor(x, device=devs[0]).shard(devs, axis=0)
    tw, tb = _param(w, devs, None), _param(b, devs, None)
    loss = ((xs @ tw + tb).relu() * (xs @ tw)).sum()
    assert loss.device == _canon(devs)
    loss.backward()
    gw, gb = _torch_grads(lambda w_, b_: ((torch.tensor(x) @ w_ + b_).relu() * (torch.tensor(x) @ w_)).sum(), w, b)
    for grad, param, want in ((tw.grad, tw, gw), (tb.grad, tb, gb)):
        _check_sharded_like(grad, param)
        np.testing.assert_allclose(grad.numpy(), want, rtol=1e-5, atol=1e-5)
        replicas = [grad.to(d).numpy() for d in _canon(devs)]
        np.testing.assert_array_equal(replicas[0], replicas[1])  # bit-identical replicas


def test_model_parallel_sharded_weight_columns(devs: tuple[str, str]) -> None:
    """Weight sharded on its output axis (uneven: 5 columns on 2 devices), input replicated."""
    x, w = _data(3, 4, seed=4), _data(4, 5, seed=5)
    xs = Tensor(x, device=devs[0]).shard(devs)
    tw = _param(w, devs, 1)
    loss = (xs @ tw).tanh().square().mean()
    loss.backward()
    (gw,) = _torch_grads(lambda w_: (torch.tensor(x) @ w_).tanh().square().mean(), w)
    _check_sharded_like(tw.grad, tw)
    assert [s.shape for s in tw.grad.uop.src] == [(4, 3), (4, 2)]
    np.testing.assert_allclose(tw.grad.numpy(), gw, rtol=1e-5, atol=1e-6)


def test_sharded_param_elementwise_and_max(devs: tuple[str, str]) -> None:
    """A parameter sharded on axis 0 with a sharded input: reductions across shards (sum and max all-reduce)."""
    p, x = _data(8, 3, seed=6), _data(8, 3, seed=7)
    tp = _param(p, devs, 0)
    xs = Tensor(x, device=devs[0]).shard(devs, axis=0)
    loss = (tp * xs).sum() + (tp.exp() * 0.5).max() - (tp.sum(1) * tp.max(1)).sum()
    loss.backward()

    def ref(p_: torch.Tensor) -> torch.Tensor:
        xt = torch.tensor(x)
        return (p_ * xt).sum() + (p_.exp() * 0.5).max() - (p_.sum(1) * p_.amax(1)).sum()

    (gp,) = _torch_grads(ref, p)
    _check_sharded_like(tp.grad, tp)
    np.testing.assert_allclose(tp.grad.numpy(), gp, rtol=1e-5, atol=1e-5)


def test_two_layer_mlp_matches_single_device(devs: tuple[str, str]) -> None:
    x, w1, b1, w2 = _data(8, 5, seed=8), _data(5, 7, seed=9), _data(7, seed=10), _data(7, 3, seed=11)
    labels = np.array([0, 2, 1, 1, 0, 2, 2, 1], dtype=np.int32)

    def forward(xt: Tensor, params: list[Tensor], y: Tensor) -> Tensor:
        a, b, c = params
        return ((xt @ a + b).relu() @ c).sparse_categorical_crossentropy(y)

    single = [Tensor(v, device=devs[0], requires_grad=True) for v in (w1, b1, w2)]
    forward(Tensor(x, device=devs[0]), single, Tensor(labels, device=devs[0])).backward()
    sharded = [_param(v, devs, None) for v in (w1, b1, w2)]
    xs = Tensor(x, device=devs[0]).shard(devs, axis=0)
    ys = Tensor(labels, device=devs[0]).shard(devs, axis=0)
    forward(xs, sharded, ys).backward()
    for s, ref in zip(sharded, single):
        _check_sharded_like(s.grad, s)
        np.testing.assert_allclose(s.grad.numpy(), ref.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_gradients_accumulate_and_param_used_on_one_shard(devs: tuple[str, str]) -> None:
    p = _data(4, 2, seed=12)
    tp = _param(p, devs, 0)
    (tp * 3).sum().backward()
    (tp * tp).sum().backward()  # accumulates into the sharded .grad
    _check_sharded_like(tp.grad, tp)
    np.testing.assert_allclose(tp.grad.numpy(), 3 + 2 * p, rtol=1e-6)
    tp.grad = None
    tp[3].square().sum().backward()  # row 3 lives on the second device only: the first shard's gradient is zero
    _check_sharded_like(tp.grad, tp)
    want = np.zeros_like(p)
    want[3] = 2 * p[3]
    np.testing.assert_allclose(tp.grad.numpy(), want, rtol=1e-6)


def test_gradient_api_and_non_scalar_seed(devs: tuple[str, str]) -> None:
    p, seed = _data(6, 2, seed=13), _data(6, 2, seed=14)
    tp = _param(p, devs, 0)
    out = tp.sin()
    (g,) = out.gradient(tp, gradient=Tensor(seed, device=devs[0]).shard(devs, axis=0))
    _check_sharded_like(g, tp)
    np.testing.assert_allclose(g.numpy(), np.cos(p) * seed, rtol=1e-5)
    (g2,) = out.sum().gradient(tp)
    np.testing.assert_allclose(g2.numpy(), np.cos(p), rtol=1e-5)


def test_sgd_step_on_sharded_params_matches_single_device(devs: tuple[str, str]) -> None:
    from tinycore.nn.optim import SGD

    x, w = _data(6, 3, seed=15), _data(3, 2, seed=16)
    single = Tensor(w, device=devs[0], requires_grad=True)
    sharded = _param(w, devs, None)
    for param, xt in ((single, Tensor(x, device=devs[0])), (sharded, Tensor(x, device=devs[0]).shard(devs, axis=0))):
        opt = SGD([param], lr=0.1)
        with Tensor.train():
            opt.zero_grad()
            (xt @ param).square().mean().backward()
            opt.step()
    assert sharded.device == _canon(devs) and sharded.uop.op is Ops.MULTI
    np.testing.assert_allclose(sharded.numpy(), single.numpy(), rtol=1e-5, atol=1e-6)
