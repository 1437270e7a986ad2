"""Op parity of the elementwise ops (ElementwiseMixin and the core ALU methods) with PyTorch, on every device.

Forward tests run always; backward tests run once autograd (`Tensor.backward`) exists and are skipped before that.
Tolerances are per op (absolute, relative); the polynomial ops (atan family, erf) state theirs next to the table.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from op_helpers import check_op, torch

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

HAS_GRAD = hasattr(Tensor, "backward")
needs_grad = pytest.mark.skipif(not HAS_GRAD, reason="autograd (Tensor.backward, tinycore/gradient.py) not landed yet")
F = torch.nn.functional

# name: (torch fn, tiny fn, low, high, atol, rtol)
UNARY = {
    "exp": (torch.exp, Tensor.exp, -2, 2, 1e-6, 1e-5),
    "exp2": (torch.exp2, Tensor.exp2, -2, 2, 1e-6, 1e-5),
    "log": (torch.log, Tensor.log, 0.05, 4, 1e-6, 1e-5),
    "log2": (torch.log2, Tensor.log2, 0.05, 4, 1e-6, 1e-5),
    "sqrt": (torch.sqrt, Tensor.sqrt, 0.05, 4, 1e-6, 1e-5),
    "rsqrt": (torch.rsqrt, Tensor.rsqrt, 0.05, 4, 1e-6, 1e-5),
    "sin": (torch.sin, Tensor.sin, -4, 4, 1e-6, 1e-5),
    "cos": (torch.cos, Tensor.cos, -4, 4, 1e-6, 1e-5),
    "tan": (torch.tan, Tensor.tan, -1.3, 1.3, 1e-5, 1e-5),
    # polynomial fits: forward error < 2e-7, their derivatives within 2e-6
    "asin": (torch.asin, Tensor.asin, -0.95, 0.95, 1e-6, 1e-5),
    "acos": (torch.acos, Tensor.acos, -0.95, 0.95, 1e-6, 1e-5),
    "atan": (torch.atan, Tensor.atan, -5, 5, 1e-6, 1e-5),
    "erf": (torch.erf, Tensor.erf, -3, 3, 1e-6, 1e-5),
    "sign": (torch.sign, Tensor.sign, -2, 2, 0, 0),
    "abs": (torch.abs, Tensor.abs, -2, 2, 0, 0),
    "ceil": (torch.ceil, Tensor.ceil, -3, 3, 0, 0),
    "floor": (torch.floor, Tensor.floor, -3, 3, 0, 0),
    "round": (torch.round, Tensor.round, -3, 3, 0, 0),
    "trunc": (torch.trunc, Tensor.trunc, -3, 3, 0, 0),
    "frac": (torch.frac, Tensor.frac, -3, 3, 1e-7, 0),
    "reciprocal": (torch.reciprocal, Tensor.reciprocal, 0.2, 3, 1e-6, 1e-5),
    "square": (torch.square, Tensor.square, -2, 2, 1e-6, 1e-6),
    "neg": (torch.neg, Tensor.__neg__, -2, 2, 0, 0),
    "relu": (torch.relu, Tensor.relu, -2, 2, 0, 0),
    "sigmoid": (torch.sigmoid, Tensor.sigmoid, -6, 6, 1e-6, 1e-5),
    "hardsigmoid": (F.hardsigmoid, Tensor.hardsigmoid, -4, 4, 1e-6, 1e-5),
    "gelu": (lambda x: F.gelu(x, approximate="tanh"), Tensor.gelu, -4, 4, 1e-6, 1e-5),
    "quick_gelu": (lambda x: x * torch.sigmoid(1.702 * x), Tensor.quick_gelu, -4, 4, 1e-6, 1e-5),
    "silu": (F.silu, Tensor.silu, -4, 4, 1e-6, 1e-5),
    "swish": (F.silu, Tensor.swish, -4, 4, 1e-6, 1e-5),
    "elu": (F.elu, Tensor.elu, -3, 3, 1e-6, 1e-5),
    "elu_alpha": (lambda x: F.elu(x, 0.5), lambda x: x.elu(0.5), -3, 3, 1e-6, 1e-5),
    "celu": (lambda x: F.celu(x, 1.5), lambda x: x.celu(1.5), -3, 3, 1e-6, 1e-5),
    "selu": (F.selu, Tensor.selu, -3, 3, 1e-6, 1e-5),
    "softplus": (F.softplus, Tensor.softplus, -4, 4, 1e-6, 1e-5),
    "softplus_beta": (lambda x: F.softplus(x, beta=2.0), lambda x: x.softplus(2.0), -4, 4, 1e-6, 1e-5),
    "mish": (F.mish, Tensor.mish, -4, 4, 1e-6, 1e-5),
    "hardswish": (F.hardswish, Tensor.hardswish, -4, 4, 1e-6, 1e-5),
    "hardtanh": (F.hardtanh, Tensor.hardtanh, -2, 2, 0, 0),
    "leaky_relu": (F.leaky_relu, Tensor.leaky_relu, -2, 2, 1e-7, 0),
    "leaky_relu_slope": (lambda x: F.leaky_relu(x, 0.2), lambda x: x.leaky_relu(0.2), -2, 2, 1e-7, 0),
    "logsigmoid": (F.logsigmoid, Tensor.logsigmoid, -6, 6, 1e-6, 1e-5),
    "softsign": (F.softsign, Tensor.softsign, -4, 4, 1e-6, 1e-5),
    "tanh": (torch.tanh, Tensor.tanh, -4, 4, 1e-6, 1e-5),
    "relu6": (F.relu6, Tensor.relu6, -3, 9, 0, 0),
    "sinh": (torch.sinh, Tensor.sinh, -3, 3, 1e-6, 1e-5),
    "cosh": (torch.cosh, Tensor.cosh, -3, 3, 1e-6, 1e-5),
    "atanh": (torch.atanh, Tensor.atanh, -0.9, 0.9, 1e-6, 1e-5),
    "asinh": (torch.asinh, Tensor.asinh, -4, 4, 1e-6, 1e-5),
    "acosh": (torch.acosh, Tensor.acosh, 1.1, 5, 1e-6, 1e-5),
}
# ops whose gradient is 0 almost everywhere (torch agrees) or is not defined: backward not compared
NO_GRAD = {"sign", "ceil", "floor", "round", "trunc"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(device: str, name: str) -> None:
    torch_fn, tiny_fn, low, high, atol, rtol = UNARY[name]
    check_op(device, [(4, 7)], torch_fn, tiny_fn, atol=atol, rtol=rtol, low=low, high=high, forward_only=True)


@needs_grad
@pytest.mark.parametrize("name", sorted(set(UNARY) - NO_GRAD))
def test_unary_backward(device: str, name: str) -> None:
    torch_fn, tiny_fn, low, high, atol, rtol = UNARY[name]
    grad_atol = 2e-6 if name in ("asin", "acos", "atan", "erf") else None
    check_op(device, [(4, 7)], torch_fn, tiny_fn, atol=atol, rtol=rtol, low=low, high=high, grad_atol=grad_atol)


@pytest.mark.parametrize("shape", [(), (1,), (0, 3), (3, 1, 2)], ids=str)
@pytest.mark.parametrize("name", ["exp", "sigmoid", "erf", "round", "atan", "gelu"])
def test_unary_odd_shapes(device: str, name: str, shape: tuple[int, ...]) -> None:
    torch_fn, tiny_fn, low, high, atol, rtol = UNARY[name]
    fwd = not HAS_GRAD or name in NO_GRAD
    check_op(device, [shape], torch_fn, tiny_fn, atol=atol, rtol=rtol, low=low, high=high, forward_only=fwd)


@pytest.mark.parametrize("name", ["exp", "sigmoid", "erf", "round", "atan", "gelu", "pow2"])
def test_unary_scalar(device: str, name: str) -> None:
    """0-d tensors made from a Python float (the constant path, not a buffer)."""
    torch_fn, tiny_fn, _, _, atol, rtol = (
        UNARY[name] if name != "pow2" else (lambda x: x**2, lambda x: x**2, 0, 0, 0, 0)
    )
    ours = tiny_fn(Tensor(0.7, device=device, requires_grad=True))
    ref = torch_fn(torch.tensor(0.7, requires_grad=True))
    assert ours.shape == () and ours.dtype == dtypes.float32
    np.testing.assert_allclose(ours.numpy(), ref.detach().numpy(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("name", ["exp", "sigmoid", "tanh", "softplus", "erf"])
def test_unary_non_contiguous(device: str, name: str) -> None:
    """The op applied to a permuted, sliced view of a bigger tensor."""
    torch_fn, tiny_fn, low, high, atol, rtol = UNARY[name]

    def view(t):  # works on both libraries
        return t.permute(1, 0)[1:4]

    check_op(device, [(6, 5)], lambda x: torch_fn(view(x)), lambda x: tiny_fn(view(x)), atol=atol, rtol=rtol,
             low=low, high=high, forward_only=not HAS_GRAD)  # fmt: skip


def test_unary_large(device: str) -> None:
    """One large case (2**16 elements) through a chain of transcendental ops."""
    check_op(device, [(256, 256)], lambda x: torch.sigmoid(x).log() + torch.sin(x) * torch.exp(x),
             lambda x: x.sigmoid().log() + x.sin() * x.exp(), atol=1e-5, rtol=1e-5, low=-4, high=4,
             forward_only=not HAS_GRAD)  # fmt: skip


@pytest.mark.parametrize("name", ["sigmoid", "softplus", "logsigmoid", "tanh", "silu", "gelu", "mish", "elu", "selu"])
def test_activation_extremes(device: str, name: str) -> None:
    """Stable for large |x|: no inf/NaN in forward or backward where PyTorch is finite."""
    torch_fn, tiny_fn, *_ = UNARY[name]
    values = [np.array([-1000.0, -100.0, -30.0, -1e-8, 0.0, 1e-8, 30.0, 100.0, 1000.0], dtype=np.float32)]
    check_op(device, None, torch_fn, tiny_fn, values=values, atol=1e-6, rtol=1e-5, forward_only=not HAS_GRAD)


def test_special_values(device: str) -> None:
    """inf/NaN/±0 propagate like PyTorch through the rounding and sign ops."""
    x = np.array([math.inf, -math.inf, math.nan, 0.0, -0.0, 2.5, -2.5, 0.5, -0.5, 1e30], dtype=np.float32)
    for name in ("sign", "ceil", "floor", "round", "trunc", "abs", "sigmoid", "tanh", "erf", "atan"):
        torch_fn, tiny_fn, *_ = UNARY[name]
        check_op(device, None, torch_fn, tiny_fn, values=[x], atol=1e-6, rtol=1e-5, forward_only=True)


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8, np.bool_], ids=str)
def test_int_unary(device: str, dtype: type) -> None:
    """Integer inputs: rounding ops are identities, abs/sign/neg keep the dtype, math ops promote to float."""
    for torch_fn, tiny_fn in [(torch.abs, Tensor.abs), (torch.sign, Tensor.sign), (torch.floor, Tensor.floor),
                              (torch.ceil, Tensor.ceil), (torch.round, Tensor.round), (torch.trunc, Tensor.trunc),
                              (torch.square, Tensor.square), (torch.relu, Tensor.relu)]:  # fmt: skip
        if dtype == np.bool_:  # PyTorch implements none of these on bool
            continue
        if dtype == np.uint8 and torch_fn in (torch.abs,):
            continue
        check_op(device, [(3, 4)], torch_fn, tiny_fn, dtype=dtype, low=-9, high=9)
    if dtype != np.bool_:
        check_op(device, [(3, 4)], torch.exp, Tensor.exp, dtype=dtype, low=-3, high=3, atol=1e-5, rtol=1e-5)
        check_op(device, [(3, 4)], torch.sigmoid, Tensor.sigmoid, dtype=dtype, low=-3, high=3, atol=1e-6)


# ----- binary


BINARY = {
    "add": (torch.add, Tensor.add, -2, 2, 1e-6, 1e-6),
    "sub": (torch.sub, Tensor.sub, -2, 2, 1e-6, 1e-6),
    "mul": (torch.mul, Tensor.mul, -2, 2, 1e-6, 1e-6),
    "div": (torch.div, Tensor.div, 0.5, 2, 1e-6, 1e-5),
    "maximum": (torch.maximum, Tensor.maximum, -2, 2, 0, 0),
    "minimum": (torch.minimum, Tensor.minimum, -2, 2, 0, 0),
    "pow": (torch.pow, Tensor.pow, 0.3, 2.5, 1e-6, 1e-5),
    "copysign": (torch.copysign, Tensor.copysign, -2, 2, 0, 0),
    "floordiv": (torch.floor_divide, Tensor.__floordiv__, -5, 5, 0, 0),
    "remainder": (torch.remainder, Tensor.__mod__, -5, 5, 1e-6, 1e-6),
}
BINARY_NO_GRAD = {"floordiv", "remainder", "copysign"}  # copysign: see test_copysign_backward


@pytest.mark.parametrize("shapes", [[(4, 5), (4, 5)], [(4, 1), (1, 5)], [(), (3,)], [(0, 2), (1, 2)]], ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(device: str, name: str, shapes: list[tuple[int, ...]]) -> None:
    torch_fn, tiny_fn, low, high, atol, rtol = BINARY[name]
    if name in ("floordiv", "remainder"):
        rng = np.random.default_rng(0)
        values = [rng.uniform(-5, 5, s).astype(np.float32) for s in shapes]
        values[1] = np.where(np.abs(values[1]) < 0.5, 1.5, values[1]).astype(np.float32)
        check_op(device, None, torch_fn, tiny_fn, values=values, atol=atol, rtol=rtol, forward_only=True)
        return
    check_op(device, shapes, torch_fn, tiny_fn, atol=atol, rtol=rtol, low=low, high=high, forward_only=True)


@needs_grad
@pytest.mark.parametrize("name", sorted(set(BINARY) - BINARY_NO_GRAD))
def test_binary_backward(device: str, name: str) -> None:
    torch_fn, tiny_fn, low, high, atol, rtol = BINARY[name]
    # the broadcast inputs' gradients are sums of 5 / 4 terms: their rounding order differs from PyTorch's
    check_op(device, [(4, 1), (1, 5)], torch_fn, tiny_fn, atol=atol, rtol=rtol, low=low, high=high,
             grad_atol=max(atol, 1e-6), grad_rtol=max(rtol, 1e-6))  # fmt: skip


def test_binary_large(device: str) -> None:
    """2**16 elements; input 1's gradient is a 256-term float32 sum of terms up to ~10 with cancellation, whose
    rounding depends on the summation order: grad_atol 1e-4 (~ 256 * 10 * 2**-24 * 4)."""
    check_op(device, [(256, 256), (256, 1)], lambda a, b: torch.maximum(a * b, a - b).pow(2) / (1 + b * b),
             lambda a, b: (a * b).maximum(a - b).pow(2) / (1 + b * b), atol=1e-5, rtol=1e-5, grad_atol=1e-4,
             forward_only=not HAS_GRAD)  # fmt: skip


# ----- integer arithmetic


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.int64], ids=str)
def test_int_floordiv_mod(device: str, dtype: type) -> None:
    """`//` floors and `%` takes the divisor's sign, like PyTorch (C truncates)."""
    a = np.array([-7, 7, -7, 7, 0, -1, 1, -9, 9, 6], dtype=dtype)
    b = np.array([2, 2, -2, -2, 3, 5, -5, 3, -3, 3], dtype=dtype)
    check_op(device, None, torch.floor_divide, Tensor.__floordiv__, values=[a, b])
    check_op(device, None, torch.remainder, Tensor.__mod__, values=[a, b])
    check_op(device, None, lambda x, y: torch.div(x, y, rounding_mode="trunc"), Tensor.idiv, values=[a, b])
    check_op(device, None, lambda x: x // 3, lambda x: x // 3, values=[a])
    check_op(device, None, lambda x: x % -4, lambda x: x % -4, values=[a])
    check_op(device, None, lambda x: 17 % x, lambda x: 17 % x, values=[b])


def test_idiv_float_raises(device: str) -> None:
    with pytest.raises(TypeError, match="integer"):
        Tensor([1.5], device=device).idiv(2)


_INT_DIVISIONS = {
    "floordiv": (lambda a, b: a // b, torch.floor_divide),
    "remainder": (lambda a, b: a % b, torch.remainder),
    "idiv": (lambda a, b: a.idiv(b), lambda a, b: torch.div(a, b, rounding_mode="trunc")),
}


@pytest.mark.parametrize("name", sorted(_INT_DIVISIONS))
def test_int_division_by_zero_raises(device: str, name: str) -> None:
    """issue 18: integer ``//``, ``%`` and idiv by a zero divisor raise like PyTorch (``RuntimeError:
    ZeroDivisionError``) instead of silently giving 0: a Python 0, a constant 0 tensor, a realized tensor holding a 0
    (either side of the operator), for every integer dtype; the error is a ZeroDivisionError and a RuntimeError."""
    from tinycore.errors import IntegerDivisionByZeroError

    tiny_fn, torch_fn = _INT_DIVISIONS[name]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch_fn(torch.tensor([1, 2, 3]), torch.tensor([0, 1, 0]))  # the behaviour matched
    a = Tensor([1, 2, 3], device=device)
    divisors = [
        0,
        False,
        Tensor.zeros(3, dtype=dtypes.int32, device=device),
        Tensor.full((1,), 0, dtype=dtypes.int8, device=device),
        Tensor(0, device=device),
        Tensor([0, 1, 0], device=device),
        Tensor([[5, 0], [1, 2], [3, 4]], device=device)[:, 1],
        Tensor([1, 1, 0], dtype=dtypes.uint8, device=device),
    ]
    for d in divisors:
        with pytest.raises(IntegerDivisionByZeroError, match="by zero") as info:
            tiny_fn(a, d)
        assert isinstance(info.value, ZeroDivisionError) and isinstance(info.value, RuntimeError)
        assert "(b != 0).where(b, 1)" in str(info.value)
    for dtype in (dtypes.int8, dtypes.int16, dtypes.int64, dtypes.uint8, dtypes.uint32):
        with pytest.raises(ZeroDivisionError):
            tiny_fn(Tensor([4, 5], dtype=dtype, device=device), Tensor([1, 0], dtype=dtype, device=device))
    if name != "idiv":  # reversed operators: the tensor is the divisor
        with pytest.raises(ZeroDivisionError):
            tiny_fn(7, Tensor([1, 0], device=device))


def test_int_division_nonzero_and_float_zero(device: str) -> None:
    """Nonzero divisors (scalar, constant, realized, a view that skips the zero, a lazy result) are not affected,
    and float division by zero keeps IEEE inf/NaN like PyTorch."""
    a = np.array([7, -7, 9], dtype=np.int32)
    b = np.array([2, 3, -4], dtype=np.int32)
    check_op(device, None, torch.floor_divide, Tensor.__floordiv__, values=[a, b])
    view = Tensor([0, 2, 3, -4], device=device)[1:]
    assert (Tensor(a, device=device) // view).tolist() == [3, -3, -3]
    assert (Tensor(a, device=device) % (Tensor(b, device=device) * 1)).tolist() == [1, 2, -3]
    f = np.array([1.0, -2.0, 0.0, 3.5], dtype=np.float32)
    z = np.zeros(4, dtype=np.float32)
    check_op(device, None, torch.floor_divide, Tensor.__floordiv__, values=[f, z], forward_only=True)
    check_op(device, None, torch.remainder, Tensor.__mod__, values=[f, z], forward_only=True)
    check_op(device, None, torch.div, Tensor.div, values=[f, z], forward_only=True)
    check_op(device, None, lambda x: x // 0.0, lambda x: x // 0.0, values=[f], forward_only=True)
    check_op(device, None, lambda x: torch.div(x, 0), lambda x: x.div(0), values=[a], forward_only=True)


def test_int_division_by_zero_jit(device: str) -> None:
    """A TinyJit function dividing by its (realized) input: checked on the calls that run Python (a zero in the
    first call raises), not inside the capture, whose replays skip the check (documented in the module notes)."""
    from tinycore import TinyJit

    @TinyJit
    def f(x: Tensor, y: Tensor) -> Tensor:
        return (x // y).realize()

    x = Tensor([7, 8, 9], device=device).realize()
    with pytest.raises(ZeroDivisionError):
        f(x, Tensor([1, 0, 1], device=device).realize())
    for i in range(1, 4):
        assert f(x, Tensor([i, 2, 3], device=device).realize()).tolist() == [7 // i, 4, 3]


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_], ids=str)
def test_bitwise(device: str, dtype: type) -> None:
    for op in ("__and__", "__or__", "__xor__"):
        check_op(device, [(3, 4), (3, 4)], getattr(torch.Tensor, op), getattr(Tensor, op), dtype=dtype, low=0, high=60)
    check_op(device, [(3, 4)], torch.bitwise_not, Tensor.__invert__, dtype=dtype, low=0, high=60)
    if dtype != np.bool_:
        check_op(device, [(3, 4)], lambda x: x << 2, lambda x: x << 2, dtype=dtype, low=0, high=60)
        check_op(device, [(3, 4)], lambda x: x >> 1, lambda x: x >> 1, dtype=dtype, low=0, high=60)


# ----- pow


def test_pow_negative_base_integer_exponent(device: str) -> None:
    x = np.array([-2.0, -1.5, -0.5, 0.0, 0.5, 3.0], dtype=np.float32)
    for e in (2, 3, 5, -1, -2, 0, 0.5, 2.5, -3.0, 4.0):
        check_op(device, None, lambda t, e=e: t**e, lambda t, e=e: t**e, values=[x], atol=1e-6, rtol=1e-5,
                 forward_only=True)  # fmt: skip
    exps = np.array([2.0, 3.0, 0.5, -1.0, 0.0, 2.5], dtype=np.float32)
    check_op(device, None, torch.pow, Tensor.pow, values=[x, exps], atol=1e-6, rtol=1e-5, forward_only=True)


def test_rpow(device: str) -> None:
    check_op(device, [(3, 4)], lambda t: 2.0**t, lambda t: 2.0**t, atol=1e-6, rtol=1e-5, forward_only=not HAS_GRAD)
    check_op(device, [(3, 4)], lambda t: (-2.0) ** t.round(), lambda t: (-2.0) ** t.round(), atol=1e-6, rtol=1e-5,
             forward_only=True)  # fmt: skip


def test_pow_int(device: str) -> None:
    a = np.array([-3, -2, -1, 0, 1, 2, 3, 5], dtype=np.int32)
    b = np.array([3, 2, 7, 0, 9, 10, 4, 3], dtype=np.int32)
    check_op(device, None, torch.pow, Tensor.pow, values=[a, b])
    check_op(device, None, lambda t: t**3, lambda t: t**3, values=[a])
    check_op(device, None, lambda t: t**2.5, lambda t: t**2.5, values=[np.abs(a)], atol=1e-5, rtol=1e-5)
    with pytest.raises(RuntimeError, match="negative integer powers"):
        Tensor(a, device=device) ** -1


# ----- selection and comparison helpers


def test_clamp(device: str) -> None:
    check_op(device, [(4, 5)], lambda x: x.clamp(-0.5, 0.7), lambda x: x.clamp(-0.5, 0.7), atol=0, rtol=0,
             forward_only=not HAS_GRAD)  # fmt: skip
    check_op(device, [(4, 5)], lambda x: x.clamp(min=0.1), lambda x: x.clamp(min_=0.1), atol=0, rtol=0,
             forward_only=not HAS_GRAD)  # fmt: skip
    check_op(device, [(4, 5)], lambda x: x.clip(max=0.1), lambda x: x.clip(max_=0.1), atol=0, rtol=0,
             forward_only=not HAS_GRAD)  # fmt: skip
    check_op(device, [(4, 5), (1, 5), (4, 1)], torch.clamp, Tensor.clamp, atol=0, rtol=0, forward_only=True)
    check_op(device, [(3, 4)], lambda x: x.clamp(-3, 2), lambda x: x.clamp(-3, 2), dtype=np.int32, low=-9, high=9)
    nan = np.array([math.nan, 1.0, -5.0], dtype=np.float32)
    check_op(device, None, lambda x: x.clamp(-1, 1), lambda x: x.clamp(-1, 1), values=[nan], forward_only=True)
    with pytest.raises(RuntimeError, match="must not be None"):
        Tensor([1.0], device=device).clamp()


def test_clamp_min_above_max(device: str) -> None:
    """min > max gives max everywhere (the whole expression folds to a constant)."""
    check_op(device, [(3, 4)], lambda x: x.clamp(2, -3), lambda x: x.clamp(2, -3), dtype=np.int32, low=-9, high=9)


def test_lerp(device: str) -> None:
    check_op(device, [(4, 5), (4, 5)], lambda a, b: torch.lerp(a, b, 0.3), lambda a, b: a.lerp(b, 0.3), atol=1e-6,
             rtol=1e-5, forward_only=not HAS_GRAD)  # fmt: skip
    check_op(device, [(4, 5), (1, 5), (4, 1)], torch.lerp, Tensor.lerp, atol=1e-6, rtol=1e-5,
             forward_only=not HAS_GRAD)  # fmt: skip


def test_abs_of_signed_zero_is_positive_zero(device: str) -> None:
    """abs(-0.0) is +0.0 and the gradient at both zeros is 0, as in PyTorch (also through copysign's magnitude)."""
    a = np.array([-0.0, 0.0, -1.5, 2.0, -math.inf], dtype=np.float32)
    for dtype in (np.float32, np.float16):
        got = Tensor(a.astype(dtype), device=device).abs().numpy()
        want = torch.tensor(a.astype(dtype)).abs().numpy()
        assert np.array_equal(np.signbit(got), np.signbit(want)) and np.array_equal(got, want)
    magnitude = Tensor(np.array([-0.0, 0.0], dtype=np.float32), device=device).copysign(1.0).numpy()
    assert not np.signbit(magnitude).any()
    if HAS_GRAD:
        x = Tensor(a, device=device, requires_grad=True)
        x.abs().sum().backward()
        t = torch.tensor(a, requires_grad=True)
        t.abs().sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


def test_copysign_zero_sign(device: str) -> None:
    a = np.array([1.0, -2.0, 3.0, -4.0, 0.0, 5.0], dtype=np.float32)
    b = np.array([-0.0, 0.0, -1.0, 2.0, -3.0, math.nan], dtype=np.float32)
    check_op(device, None, torch.copysign, Tensor.copysign, values=[a, b], forward_only=True)
    check_op(device, None, lambda x: torch.copysign(x, -1.0), lambda x: x.copysign(-1.0), values=[a], forward_only=True)


@needs_grad
def test_copysign_backward(device: str) -> None:
    """Both gradients as PyTorch gives them: the magnitude's, and zeros for the sign operand (exactly 0, also where
    the sign operand or the incoming gradient is inf or NaN); the sign of -0.0 and of NaNs is still read."""
    sign = np.array([[-1.0, 2.0, -0.0, 0.0, 3.0]], dtype=np.float32)
    check_op(device, [(4, 5)], lambda a: torch.copysign(a, torch.tensor(sign)),
             lambda a: a.copysign(Tensor(sign, device=device)), atol=0, rtol=0)  # fmt: skip
    magnitude = np.array([[1.0, -2.0, 0.25, 0.5, 4.0, -5.0, 7.0]], dtype=np.float32)  # zeros: test_copysign_zero_sign
    signs = np.array([[-0.0, 0.0, -math.inf, math.inf, math.nan, -math.nan, -1.0]], dtype=np.float32)
    check_op(device, None, torch.copysign, Tensor.copysign, values=[magnitude, signs], atol=0, rtol=0)
    check_op(device, [(3, 5), (5,)], torch.copysign, Tensor.copysign, atol=0, rtol=0)  # broadcast sign operand
    upstream = np.array([[1.0, math.inf, math.nan, -math.inf, 2.0, 1.0, 1.0]], dtype=np.float32)
    a = torch.tensor(magnitude, requires_grad=True)
    b = torch.tensor(signs, requires_grad=True)
    torch_out = torch.copysign(a, b)
    (torch_out * torch.tensor(upstream)).sum().backward()
    x = Tensor(magnitude, device=device, requires_grad=True)
    y = Tensor(signs, device=device, requires_grad=True)
    out = x.copysign(y)
    (out * Tensor(upstream, device=device)).sum().backward()
    ours = out.numpy()
    np.testing.assert_array_equal(ours, torch_out.detach().numpy())
    np.testing.assert_array_equal(np.signbit(ours), np.signbit(torch_out.detach().numpy()))
    np.testing.assert_array_equal(x.grad.numpy(), a.grad.numpy())
    np.testing.assert_array_equal(y.grad.numpy(), b.grad.numpy())
    assert not np.signbit(y.grad.numpy()).any()  # +0.0, as PyTorch


def test_isclose_isnan_isinf(device: str) -> None:
    a = np.array([1.0, math.nan, math.inf, -math.inf, 1e-9, 1.0, 2.0, math.nan], dtype=np.float32)
    b = np.array([1.0 + 1e-6, math.nan, math.inf, math.inf, 0.0, 1.1, 2.0, 1.0], dtype=np.float32)
    check_op(device, None, torch.isclose, Tensor.isclose, values=[a, b])
    check_op(device, None, lambda x, y: torch.isclose(x, y, equal_nan=True), lambda x, y: x.isclose(y, equal_nan=True),
             values=[a, b])  # fmt: skip
    check_op(device, None, lambda x, y: torch.isclose(x, y, rtol=0.2, atol=0.0),
             lambda x, y: x.isclose(y, rtol=0.2, atol=0.0), values=[a, b])  # fmt: skip
    check_op(device, None, torch.isnan, Tensor.isnan, values=[a])
    check_op(device, None, torch.isinf, Tensor.isinf, values=[a])
    check_op(device, None, torch.isposinf, lambda x: x.isinf(detect_negative=False), values=[a])
    check_op(device, None, torch.isneginf, lambda x: x.isinf(detect_positive=False), values=[a])
    check_op(device, None, torch.isfinite, Tensor.isfinite, values=[a])
    check_op(device, [(3,)], torch.isfinite, Tensor.isfinite, dtype=np.int32)


def test_masked_fill(device: str) -> None:
    rng = np.random.default_rng(3)
    mask = rng.random((4, 5)) < 0.5
    check_op(device, [(4, 5)], lambda x: x.masked_fill(torch.tensor(mask), -1.5),
             lambda x: x.masked_fill(Tensor(mask, device=device), -1.5), atol=0, rtol=0,
             forward_only=not HAS_GRAD)  # fmt: skip
    check_op(device, [(4, 5)], lambda x: x.masked_fill(torch.tensor(mask[0]), 7.9),
             lambda x: x.masked_fill(Tensor(mask[0], device=device), 7.9), dtype=np.int32, low=-9, high=9)  # fmt: skip


def test_where(device: str) -> None:
    rng = np.random.default_rng(5)
    cond = rng.random((4, 1)) < 0.5
    check_op(device, [(4, 5), (1, 5)], lambda a, b: torch.where(torch.tensor(cond), a, b),
             lambda a, b: Tensor(cond, device=device).where(a, b), atol=0, rtol=0,
             forward_only=not HAS_GRAD)  # fmt: skip
