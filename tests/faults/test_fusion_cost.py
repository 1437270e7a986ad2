"""Fault suite: fusion never trades a realize for recomputation that grows with the depth of the graph.

For stacks of layers (matmul chains of square and non-square widths, softmax/layernorm stacks, attention blocks,
residual blocks) the summed op estimate of the compiled kernels must grow linearly with depth: ``ops(depth)`` stays
within a constant factor of ``depth * ops(1)``. Before the row-fusion expand check, two square matmuls fused into
one kernel that recomputed the first product for every output element (4 layers of width 128: 21.7 s).
Also the row functions over every row length around the vector widths (a 32-column softmax crashed the linearizer).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinycore.codegen import get_program
from tinycore.device import Device
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops


def _total_ops(out: Tensor) -> int:
    """Summed arithmetic-op estimate of every kernel that realizing `out` would run."""
    renderer = Device[out.device].renderer
    total = 0
    for si in out.schedule():
        if si.ast.op is Ops.SINK:
            total += int(get_program(si.ast, renderer).estimates.evaluate({}).ops)
    return total


def _layernorm(t: Tensor) -> Tensor:
    c = t - t.mean(-1, keepdim=True)
    return c * ((c * c).mean(-1, keepdim=True) + 1e-5).rsqrt()


def _matmul_tanh(width: int):
    ws = [Tensor.rand(width, width).realize() for _ in range(4)]
    return lambda x, d: _fold(x, d, lambda h, i: (h @ ws[i]).tanh())


def _matmul_rect(width: int):
    ws = [Tensor.rand(width, width + 8).realize(), Tensor.rand(width + 8, width).realize()] * 2
    return lambda x, d: _fold(x, d, lambda h, i: (h @ ws[i]).relu())


def _attention(width: int):
    def layer(h: Tensor, i: int) -> Tensor:
        return (h @ h.transpose()).softmax(-1) @ h

    return lambda x, d: _fold(x, d, layer)


def _residual(width: int):
    ws = [Tensor.rand(width, width).realize() for _ in range(4)]
    return lambda x, d: _fold(x, d, lambda h, i: _layernorm(h + (h @ ws[i]).relu()))


def _row_stack(fn):
    return lambda width: lambda x, d: _fold(x, d, lambda h, i: fn(h))


def _fold(x: Tensor, depth: int, layer) -> Tensor:
    for i in range(depth):
        x = layer(x, i)
    return x


PATTERNS = {
    "matmul_tanh_square": _matmul_tanh,
    "matmul_relu_rect": _matmul_rect,
    "attention": _attention,
    "residual_layernorm": _residual,
    "softmax_stack": _row_stack(lambda h: h.softmax(-1)),
    "log_softmax_stack": _row_stack(lambda h: h.log_softmax(-1)),
    "layernorm_stack": _row_stack(_layernorm),
    "centered_stack": _row_stack(lambda h: (h - h.mean(-1, keepdim=True)).exp()),
}


@pytest.mark.parametrize("width", [32, 48, 128])
@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_kernel_cost_is_linear_in_depth(name, width):
    build = PATTERNS[name](width)
    x = Tensor.rand(width, width).realize()
    ops = {d: _total_ops(build(x, d)) for d in (1, 2, 4)}
    assert ops[1] > 0
    # linear: each extra layer costs about what the first did (slack for per-kernel overheads of fusion choices)
    assert ops[2] <= 2.5 * ops[1], ops
    assert ops[4] <= 5 * ops[1], ops


def test_square_matmul_chain_runs_fast_and_right():
    rng = np.random.default_rng(0)
    h = rng.standard_normal((128, 128), dtype=np.float32) * 0.1
    ws = [rng.standard_normal((128, 128), dtype=np.float32) * 0.1 for _ in range(4)]
    wt = [Tensor(w) for w in ws]

    def build() -> Tensor:
        x = Tensor(h)
        for w in wt:
            x = (x @ w).tanh()
        return x

    assert len([si for si in build().schedule() if si.ast.op is Ops.SINK]) >= 4  # one kernel per layer at least
    ref = torch.tensor(h)
    for w in ws:
        ref = (ref @ torch.tensor(w)).tanh()
    np.testing.assert_allclose(build().numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)


def _ref_layernorm(t: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(t, t.shape[-1:], eps=1e-5)


ROW_FUNCTIONS = {
    "softmax": (lambda t: t.softmax(-1), lambda t: torch.softmax(t, -1)),
    "log_softmax": (lambda t: t.log_softmax(-1), lambda t: torch.log_softmax(t, -1)),
    "layernorm": (_layernorm, _ref_layernorm),
}


@pytest.mark.parametrize("cols", [1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 128, 129])
@pytest.mark.parametrize("name", sorted(ROW_FUNCTIONS))
def test_row_functions_at_every_width(name, cols):
    ours, theirs = ROW_FUNCTIONS[name]
    data = np.random.default_rng(cols).standard_normal((5, cols), dtype=np.float32)
    np.testing.assert_allclose(ours(Tensor(data)).numpy(), theirs(torch.tensor(data)).numpy(), rtol=1e-4, atol=1e-5)


def test_a_layernorm_feeding_a_matmul_is_realized_not_its_broadcast_product() -> None:
    """The normalized rows are computed once into their own buffer; the matmul's (rows x out x in) product is never
    written to memory (it was: 270 MB per step of a tiny GPT, 40x slower than without row fusion)."""
    from tinycore.tensor import Tensor

    x = Tensor.randn(64, 32, 64).realize()
    w = Tensor.randn(64, 256).realize()
    items = [i for i in (x.layernorm() @ w).schedule() if i.ast is not None]
    biggest = max(b.size for item in items for b in item.outputs)
    assert biggest <= 64 * 32 * 256, f"a kernel writes {biggest} elements: the broadcast product was realized"
