"""The `tinycore.nn` layers added for tinygrad 0.11's surface (issue 21 B) against `torch.nn` with copied weights:
forward values and gradients of the input and every parameter."""

from __future__ import annotations

import numpy as np
import pytest
from op_helpers import torch
from test_nn import _compare, _x

from tinycore import nn
from tinycore.tensor import Tensor


def _randomize(ref: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in ref.parameters():
            p.uniform_(-0.8, 0.8)
    return ref


def test_conv1d(device: str) -> None:
    ours = nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2, device=device)
    assert isinstance(ours, nn.Conv2d) and ours.weight.shape == (6, 2, 3) and ours.bias.shape == (6,)
    ref = torch.nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2)
    _compare(device, ours, ref, _x(2, 4, 9), {"weight": "weight", "bias": "bias"}, atol=2e-5)


def test_conv1d_init_bound(device: str) -> None:
    w = nn.Conv1d(4, 8, 5, device=device).weight.numpy()
    assert np.abs(w).max() <= 1 / np.sqrt(20) and w.std() > 0.03


@pytest.mark.parametrize(
    "kw",
    [
        {"stride": 1},
        {"stride": 2, "padding": 1, "output_padding": 1},
        {"stride": (2, 1), "padding": (0, 1), "dilation": 2, "groups": 2},
    ],
    ids=["plain", "stride2_outpad", "groups_dilation"],
)
def test_conv_transpose2d(device: str, kw: dict) -> None:
    ours = nn.ConvTranspose2d(4, 6, 3, device=device, **kw)
    ref = torch.nn.ConvTranspose2d(4, 6, 3, **kw)
    assert ours.weight.shape == tuple(ref.weight.shape) and ours.bias.shape == (6,)
    _compare(device, ours, ref, _x(2, 4, 4, 5), {"weight": "weight", "bias": "bias"}, atol=3e-5)


def test_conv_transpose2d_init_like_torch(device: str) -> None:
    layer = nn.ConvTranspose2d(3, 8, 2, groups=1, device=device)
    bound = 1 / np.sqrt(8 * 4)  # PyTorch's fan_in of a transposed weight: out_channels/groups * prod(kernel)
    assert np.abs(layer.weight.numpy()).max() <= bound and np.abs(layer.bias.numpy()).max() <= bound


def test_conv_transpose1d(device: str) -> None:
    ours = nn.ConvTranspose1d(3, 2, 4, stride=3, padding=1, output_padding=2, bias=False, device=device)
    assert isinstance(ours, nn.ConvTranspose2d) and ours.weight.shape == (3, 2, 4) and ours.bias is None
    ref = torch.nn.ConvTranspose1d(3, 2, 4, stride=3, padding=1, output_padding=2, bias=False)
    _compare(device, ours, ref, _x(2, 3, 5), {"weight": "weight"}, atol=2e-5)


@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5)], ids=["1d", "2d"])
def test_instancenorm(device: str, shape: tuple[int, ...]) -> None:
    cls = torch.nn.InstanceNorm1d if len(shape) == 3 else torch.nn.InstanceNorm2d
    ref = _randomize(cls(3, affine=True))
    _compare(device, nn.InstanceNorm(3, device=device), ref, _x(*shape), {"weight": "weight", "bias": "bias"}, 3e-5)


def test_instancenorm_without_affine(device: str) -> None:
    ours = nn.InstanceNorm(3, affine=False, device=device)
    assert ours.weight is None and ours.bias is None
    x = _x(2, 3, 6)
    ref = torch.nn.InstanceNorm1d(3)(torch.tensor(x)).numpy()
    np.testing.assert_allclose(ours(Tensor(x, device=device)).numpy(), ref, atol=2e-5)


def test_layernorm2d(device: str) -> None:
    class Ref(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = _randomize(torch.nn.LayerNorm(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    ours = nn.LayerNorm2d(4, device=device)
    assert isinstance(ours, nn.LayerNorm) and ours.axis == (-1,) and ours.elementwise_affine is True
    _compare(device, ours, Ref(), _x(2, 4, 3, 3), {"weight": "ln.weight", "bias": "ln.bias"}, atol=3e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell(device: str, bias: bool) -> None:
    ours = nn.LSTMCell(5, 3, bias=bias, device=device)
    ref = torch.nn.LSTMCell(5, 3, bias=bias)
    names = {"weight_ih": "weight_ih", "weight_hh": "weight_hh"}
    if bias:
        names |= {"bias_ih": "bias_ih", "bias_hh": "bias_hh"}
    for mine, theirs in names.items():
        assert getattr(ours, mine).shape == tuple(getattr(ref, theirs).shape)
        getattr(ours, mine).assign(Tensor(getattr(ref, theirs).detach().numpy(), device=device)).realize()
    x, h0, c0 = _x(2, 5), _x(2, 3) * 0.5, _x(2, 3) * 0.3
    # two steps, the second from the first's state; then gradients of a loss over both outputs
    th, tc = ref(torch.tensor(x), (torch.tensor(h0), torch.tensor(c0)))
    th2, tc2 = ref(torch.tensor(x) * 2, (th, tc))
    oh, oc = ours(Tensor(x, device=device), (Tensor(h0, device=device), Tensor(c0, device=device)))
    oh2, oc2 = ours(Tensor(x, device=device) * 2, (oh, oc))
    for a, b in ((oh, th), (oc, tc), (oh2, th2), (oc2, tc2)):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), atol=1e-5)
    (th2.sum() + (tc2 * tc2).sum()).backward()
    for mine in names:
        getattr(ours, mine).requires_grad = True
    oh, oc = ours(Tensor(x, device=device), (Tensor(h0, device=device), Tensor(c0, device=device)))
    oh2, oc2 = ours(Tensor(x, device=device) * 2, (oh, oc))
    (oh2.sum() + (oc2 * oc2).sum()).backward()
    for mine, theirs in names.items():
        np.testing.assert_allclose(
            getattr(ours, mine).grad.numpy(), getattr(ref, theirs).grad.numpy(), atol=2e-5, err_msg=mine
        )


def test_lstm_cell_zero_state_and_init(device: str) -> None:
    cell = nn.LSTMCell(4, 6, device=device)
    bound = 1 / np.sqrt(6)
    for t in (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh):
        assert np.abs(t.numpy()).max() <= bound
    h, c = cell(Tensor(_x(3, 4), device=device))
    h0, c0 = cell(Tensor(_x(3, 4), device=device), (Tensor.zeros(3, 6, device=device),) * 2)
    np.testing.assert_allclose(h.numpy(), h0.numpy(), atol=1e-6)
    np.testing.assert_allclose(c.numpy(), c0.numpy(), atol=1e-6)
    assert h.shape == c.shape == (3, 6)


def test_batchnorm_calc_stats(device: str) -> None:
    bn = nn.BatchNorm(3, device=device)
    x = _x(4, 3, 2, 2)
    mean, var = bn.calc_stats(Tensor(x, device=device))  # eval mode: the running statistics
    assert mean.numpy().tolist() == [0.0] * 3 and var.numpy().tolist() == [1.0] * 3
    with Tensor.train():
        mean, var = bn.calc_stats(Tensor(x, device=device))
    assert mean.shape == var.shape == (3,)
    np.testing.assert_allclose(mean.numpy(), x.mean((0, 2, 3)), atol=1e-6)
    np.testing.assert_allclose(var.numpy(), x.var((0, 2, 3)), atol=1e-5)  # biased, as used to normalize
    assert bn.num_batches_tracked.numpy().tolist() == [0]  # calc_stats alone updates nothing


def test_nn_reexports() -> None:
    assert nn.make_tuple(3, 2) == (3, 3) and nn.make_tuple((1, 2), 2) == (1, 2)
    assert nn.flatten([[1], [2, 3]]) == [1, 2, 3] and nn.prod((2, 3)) == 6
    from tinycore.dtype import dtypes

    assert nn.is_dtype_supported(dtypes.float32)
