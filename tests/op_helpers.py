"""Op-parity helpers: run one op in tinycore and in PyTorch on the same inputs, compare forward and backward.

Usage in a test (the ``device`` fixture from conftest.py runs it on every installed device)::

    from op_helpers import check_op

    def test_exp(device):
        check_op(device, [(45, 65)], torch.exp, Tensor.exp, atol=1e-6, rtol=1e-5)

Tolerances are stated per call, absolute plus relative (``|ours - torch| <= atol + rtol * |torch|``), and the
same pair applies to the gradients unless ``grad_atol``/``grad_rtol`` are given. Never loosen one to pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

torch = __import__("pytest").importorskip("torch", reason="op-parity tests need PyTorch (pip install torch==2.13.0)")

from tinycore.dtype import dtypes  # noqa: E402
from tinycore.tensor import Tensor  # noqa: E402

TORCH_DTYPES = {
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.float16): torch.float16,
    np.dtype(np.int32): torch.int32,
    np.dtype(np.int64): torch.int64,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.int16): torch.int16,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.bool_): torch.bool,
}


def make_inputs(
    shapes: Sequence[tuple[int, ...]], dtype: Any = np.float32, low: float = -2.0, high: float = 2.0, seed: int = 0
) -> list[np.ndarray]:
    """Deterministic random numpy inputs of the given shapes (uniform in [low, high), rounded for int dtypes)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    arrays = []
    for shape in shapes:
        if dtype == np.bool_:
            arrays.append(rng.random(shape) < 0.5)
        elif np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            arrays.append(rng.integers(max(int(low), info.min), min(int(high), info.max) + 1, shape).astype(dtype))
        else:
            arrays.append(rng.uniform(low, high, shape).astype(dtype))
    return arrays


def assert_close(ours: np.ndarray, ref: np.ndarray, atol: float, rtol: float, what: str) -> None:
    """Shapes, dtypes' kinds and values must match (NaN where the reference has NaN)."""
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != torch {ref.shape}"
    if ref.dtype == np.bool_ or np.issubdtype(ref.dtype, np.integer):
        np.testing.assert_array_equal(ours, ref, err_msg=what)
        return
    np.testing.assert_allclose(ours.astype(np.float64), ref.astype(np.float64), atol=atol, rtol=rtol, err_msg=what)


def check_op(
    device: str,
    shapes: Sequence[tuple[int, ...]] | None,
    torch_fn: Callable[..., Any],
    tiny_fn: Callable[..., Any] | None = None,
    *,
    values: Sequence[np.ndarray] | None = None,
    dtype: Any = np.float32,
    atol: float = 1e-6,
    rtol: float = 1e-5,
    grad_atol: float | None = None,
    grad_rtol: float | None = None,
    low: float = -2.0,
    high: float = 2.0,
    forward_only: bool = False,
) -> None:
    """Compare ``tiny_fn(*tensors)`` with ``torch_fn(*torch_tensors)`` (``tiny_fn`` defaults to ``torch_fn``).

    Inputs come from ``values`` or are made from ``shapes``. For float inputs the backward pass is checked too:
    both sides backpropagate the same random cotangent and the input gradients are compared.
    """
    arrays = list(values) if values is not None else make_inputs(shapes or [], dtype, low, high)
    tiny_fn = tiny_fn or torch_fn
    floating = all(np.issubdtype(a.dtype, np.floating) for a in arrays) and arrays
    want_grad = bool(floating) and not forward_only
    torch_inputs = [torch.tensor(a, requires_grad=want_grad) for a in arrays]
    tiny_inputs = [Tensor(a, device=device, requires_grad=want_grad or None) for a in arrays]
    torch_out = torch_fn(*torch_inputs)
    tiny_out = tiny_fn(*tiny_inputs)
    ref = torch_out.detach().numpy()
    ours = tiny_out.numpy()
    assert_close(ours, ref, atol, rtol, f"forward on {device}")
    if tiny_out.dtype != dtypes.bool and not dtypes.is_float(tiny_out.dtype):
        assert np.dtype(ours.dtype) == np.dtype(ref.dtype), f"dtype {ours.dtype} != torch {ref.dtype}"
    if not want_grad or not ref.dtype.kind == "f" or ref.size == 0:
        return
    cotangent = make_inputs([ref.shape], ref.dtype, -1.0, 1.0, seed=1)[0]
    (torch_out * torch.tensor(cotangent)).sum().backward()
    (tiny_out * Tensor(cotangent, device=device)).sum().backward()
    for index, (torch_in, tiny_in) in enumerate(zip(torch_inputs, tiny_inputs)):
        if torch_in.grad is None:
            continue
        assert tiny_in.grad is not None, f"input {index} got no gradient on {device}"
        assert_close(
            tiny_in.grad.numpy(),
            torch_in.grad.numpy(),
            atol if grad_atol is None else grad_atol,
            rtol if grad_rtol is None else grad_rtol,
            f"gradient of input {index} on {device}",
        )
