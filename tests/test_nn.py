"""`tinycore.nn` layers against `torch.nn` with identical parameters: forward values and the gradients of the
input and of every parameter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from op_helpers import torch

from tinycore import nn
from tinycore.dtype import dtypes
from tinycore.nn.state import get_state_dict
from tinycore.tensor import Tensor


def _compare(
    device: str,
    ours: Any,
    ref: Any,
    x: np.ndarray,
    names: dict[str, str],
    atol: float = 1e-5,
    rtol: float = 1e-5,
    prep: Callable[[Any], Any] | None = None,
) -> None:
    """Copy `ref`'s parameters into `ours` (`names`: ours -> torch name), run both on `x`, compare the output and
    the gradients of the input and parameters for a random cotangent."""
    ref_params = dict(ref.named_parameters())
    our_state = get_state_dict(ours)
    for mine, theirs in names.items():
        our_state[mine].assign(Tensor(ref_params[theirs].detach().numpy(), device=device)).realize()
        our_state[mine].requires_grad = True
    tx = torch.tensor(x, requires_grad=x.dtype.kind == "f")
    ox = Tensor(x, device=device, requires_grad=True if x.dtype.kind == "f" else None)
    t_out, o_out = ref(tx), ours(ox)
    np.testing.assert_allclose(o_out.numpy(), t_out.detach().numpy(), atol=atol, rtol=rtol, err_msg="forward")
    cot = np.random.default_rng(1).uniform(-1, 1, t_out.shape).astype(np.float32)
    (t_out * torch.tensor(cot)).sum().backward()
    (o_out * Tensor(cot, device=device)).sum().backward()
    if x.dtype.kind == "f":
        np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), atol=atol, rtol=rtol, err_msg="input grad")
    for mine, theirs in names.items():
        np.testing.assert_allclose(
            our_state[mine].grad.numpy(), ref_params[theirs].grad.numpy(), atol=atol, rtol=rtol, err_msg=mine
        )


def _x(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def test_linear(device: str) -> None:
    _compare(
        device, nn.Linear(5, 3, device=device), torch.nn.Linear(5, 3), _x(4, 5), {"weight": "weight", "bias": "bias"}
    )


def test_linear_no_bias_3d_input(device: str) -> None:
    ours, ref = nn.Linear(5, 3, bias=False, device=device), torch.nn.Linear(5, 3, bias=False)
    assert ours.bias is None
    _compare(device, ours, ref, _x(2, 4, 5), {"weight": "weight"})


def test_linear_init_bounds(device: str) -> None:
    layer = nn.Linear(16, 32, device=device)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert w.shape == (32, 16) and b.shape == (32,)
    assert np.abs(w).max() <= 0.25 and np.abs(b).max() <= 0.25
    assert w.std() > 0.05  # not constant
    other = nn.Linear(16, 32, device=device)
    assert not np.array_equal(other.weight.numpy(), w)


def test_layernorm(device: str) -> None:
    _compare(
        device, nn.LayerNorm(6, device=device), torch.nn.LayerNorm(6), _x(3, 6), {"weight": "weight", "bias": "bias"}
    )


def test_layernorm_2d_shape(device: str) -> None:
    _compare(
        device,
        nn.LayerNorm((4, 6), device=device),
        torch.nn.LayerNorm((4, 6)),
        _x(2, 4, 6),
        {"weight": "weight", "bias": "bias"},
    )


def test_groupnorm(device: str) -> None:
    ref = torch.nn.GroupNorm(2, 4)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    _compare(
        device, nn.GroupNorm(2, 4, device=device), ref, _x(2, 4, 3, 3), {"weight": "weight", "bias": "bias"}, atol=2e-5
    )


def test_rmsnorm(device: str) -> None:
    ref = torch.nn.RMSNorm(6, eps=1e-6)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
    _compare(device, nn.RMSNorm(6, device=device), ref, _x(3, 6), {"weight": "weight"})


def test_batchnorm_train_and_running_stats(device: str) -> None:
    ref = torch.nn.BatchNorm2d(3)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    ours = nn.BatchNorm2d(3, device=device)
    x = _x(4, 3, 2, 2)
    ref.train()
    with Tensor.train():
        _compare(device, ours, ref, x, {"weight": "weight", "bias": "bias"}, atol=2e-5)
    np.testing.assert_allclose(ours.running_mean.numpy(), ref.running_mean.numpy(), atol=1e-6)
    np.testing.assert_allclose(ours.running_var.numpy(), ref.running_var.numpy(), atol=1e-5)
    assert ours.num_batches_tracked.numpy().tolist() == [1]
    ref.eval()
    out = ours(Tensor(x, device=device)).numpy()
    np.testing.assert_allclose(out, ref(torch.tensor(x)).detach().numpy(), atol=1e-5)


def test_batchnorm1d_eval(device: str) -> None:
    ref = torch.nn.BatchNorm1d(5).eval()
    ours = nn.BatchNorm(5, device=device)
    assert Tensor.training is False
    _compare(device, ours, ref, _x(6, 5), {"weight": "weight", "bias": "bias"})


def test_embedding(device: str) -> None:
    ref = torch.nn.Embedding(7, 4)
    ours = nn.Embedding(7, 4, device=device)
    bound = np.sqrt(6 / 11)
    assert np.abs(ours.weight.numpy()).max() <= bound
    idx = np.array([[0, 3, 6], [3, 3, 1]], dtype=np.int32)
    _compare(device, ours, ref, idx, {"weight": "weight"})


def test_embedding_rejects_float_indices(device: str) -> None:
    with pytest.raises(TypeError, match="integer indices"):
        nn.Embedding(3, 2, device=device)(Tensor([1.0], device=device))


def test_conv2d(device: str) -> None:
    if not hasattr(Tensor, "conv2d"):
        pytest.skip("Tensor.conv2d (processing mixin) is not there yet")
    ref = torch.nn.Conv2d(2, 3, 3, stride=1, padding=1)
    ours = nn.Conv2d(2, 3, 3, stride=1, padding=1, device=device)
    assert ours.weight.shape == (3, 2, 3, 3) and ours.bias.shape == (3,)
    _compare(device, ours, ref, _x(1, 2, 5, 5), {"weight": "weight", "bias": "bias"}, atol=2e-5)


def test_layers_own_their_buffers(device: str) -> None:
    a, b = nn.LayerNorm(4, device=device), nn.LayerNorm(4, device=device)
    assert a.weight.uop is not b.weight.uop and a.bias.uop is not b.bias.uop
    a.weight.assign(Tensor.full((4,), 3.0, device=device)).realize()
    assert b.weight.numpy().tolist() == [1.0] * 4
    assert a.weight.dtype == dtypes.float32
