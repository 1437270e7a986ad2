"""The tinygrad-0.11 names added for issue 21 (part A), checked against PyTorch: in-place operators, named ops,
new keyword arguments, `diag diagonal meshgrid rearrange newton_schulz`, data entry points and dtype groups.

Ops that compile kernels run on every installed device (the ``device`` fixture); forward and backward are compared
with torch by `op_helpers.check_op` where the op is differentiable.
"""

from __future__ import annotations

import gzip
import hashlib
import operator

import numpy as np
import pytest
from op_helpers import check_op, torch

import tinycore
from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

F = torch.nn.functional

# ----- in-place operators

_INPLACE = {
    "iadd": (operator.iadd, 3),
    "isub": (operator.isub, 3),
    "imul": (operator.imul, 3),
    "itruediv": (operator.itruediv, 2.0),
    "ifloordiv": (operator.ifloordiv, 2),
    "imod": (operator.imod, 3),
    "ipow": (operator.ipow, 2),
}
_INPLACE_INT = {
    "iand": (operator.iand, 6),
    "ior": (operator.ior, 6),
    "ixor": (operator.ixor, 6),
    "ilshift": (operator.ilshift, 2),
    "irshift": (operator.irshift, 1),
}


@pytest.mark.parametrize("name", sorted(_INPLACE))
def test_inplace_float_matches_torch_and_updates_aliases(device: str, name: str) -> None:
    op, operand = _INPLACE[name]
    values = np.array([[1.5, -2.0, 3.25], [0.5, 4.0, -1.0]], dtype=np.float32)
    t = Tensor(values, device=device)
    alias = t
    ref = torch.tensor(values)
    result = op(t, operand)
    op(ref, operand)
    assert result is t and alias is t
    np.testing.assert_allclose(alias.numpy(), ref.numpy(), rtol=1e-6)
    assert t.dtype == dtypes.float32


@pytest.mark.parametrize("name", sorted(_INPLACE_INT) + ["iadd", "isub", "imul", "ifloordiv", "imod"])
def test_inplace_int_matches_torch(device: str, name: str) -> None:
    op, operand = {**_INPLACE, **_INPLACE_INT}[name]
    values = np.array([7, -3, 12, 0], dtype=np.int32)
    t = Tensor(values, device=device)
    ref = torch.tensor(values)
    op(t, operand)
    op(ref, operand)
    assert t.dtype == dtypes.int32
    assert t.numpy().tolist() == ref.numpy().tolist()


def test_inplace_writes_a_realized_buffer_and_keeps_earlier_values(device: str) -> None:
    a = Tensor(np.ones(4, dtype=np.float32), device=device).contiguous().realize()
    before = a.sum()
    view = a[1:3]
    a += 1
    a.realize()
    assert before.item() == 4.0  # a lazy value computed before the write keeps the old value
    assert a.numpy().tolist() == [2.0] * 4
    assert view.numpy().tolist() == [2.0, 2.0]  # a view aliases the buffer, as in torch


def test_inplace_with_tensor_operand_and_broadcast(device: str) -> None:
    t = Tensor(np.zeros((2, 3), dtype=np.float32), device=device)
    t += Tensor(np.array([1.0, 2.0, 3.0], dtype=np.float32), device=device)
    assert t.numpy().tolist() == [[1, 2, 3], [1, 2, 3]]
    h = Tensor(np.ones(3, dtype=np.float16), device=device)
    h *= Tensor(np.full(3, 2.5, dtype=np.float32), device=device)  # narrowing within floats is allowed, as torch
    assert h.dtype == dtypes.float16 and h.numpy().tolist() == [2.5] * 3


def test_imatmul_square(device: str) -> None:
    a = np.arange(4, dtype=np.float32).reshape(2, 2)
    t = Tensor(a, device=device)
    t @= Tensor(a, device=device)
    np.testing.assert_allclose(t.numpy(), a @ a)


@pytest.mark.parametrize(
    ("dtype", "op", "operand"),
    [
        ("int32", operator.iadd, 0.5),
        ("int32", operator.itruediv, 2),
        ("int32", operator.ipow, 0.5),
        ("int32", operator.ifloordiv, 0.5),
        ("bool", operator.iadd, 1),
        ("float32", operator.iand, 1),
        ("float32", operator.ilshift, 1),
    ],
)
def test_inplace_invalid_raises_like_torch(dtype: str, op, operand) -> None:
    ref = torch.tensor([1, 2, 3], dtype=getattr(torch, dtype))
    with pytest.raises(Exception) as torch_error:
        op(ref, operand)
    t = Tensor(np.array([1, 2, 3], dtype=dtype))
    with pytest.raises(type(torch_error.value)):
        op(t, operand)


def test_inplace_shape_mismatch_raises() -> None:
    t = Tensor(np.ones(3, dtype=np.float32))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        t += Tensor(np.ones((2, 3), dtype=np.float32))
    assert t.shape == (3,)


def test_inplace_cast_error_message_names_types() -> None:
    t = Tensor([1, 2, 3])
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Int"):
        t += 0.5
    assert t.numpy().tolist() == [1, 2, 3]


# ----- named ops


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_])
def test_named_bitwise(device: str, dtype: type) -> None:
    for torch_fn, name in ((torch.bitwise_and, "bitwise_and"), (torch.bitwise_or, "bitwise_or"),
                           (torch.bitwise_xor, "bitwise_xor")):  # fmt: skip
        check_op(device, [(3, 4), (3, 4)], torch_fn, getattr(Tensor, name), dtype=dtype, low=0, high=60)
        check_op(
            device,
            [(3, 4)],
            lambda x, f=torch_fn: f(x, 5 if dtype is not np.bool_ else True),
            lambda x, n=name: getattr(x, n)(5 if dtype is not np.bool_ else True),
            dtype=dtype,
            low=0,
            high=60,
        )
    check_op(device, [(3, 4)], torch.bitwise_not, Tensor.bitwise_not, dtype=dtype, low=0, high=60)


def test_named_bitwise_reverse_and_shifts(device: str) -> None:
    a = np.array([1, 2, 3, 7], dtype=np.int32)
    check_op(device, None, lambda x: torch.bitwise_and(torch.tensor(6, dtype=torch.int32), x),
             lambda x: x.bitwise_and(6, reverse=True), values=[a])  # fmt: skip
    check_op(device, None, lambda x: x << 2, lambda x: x.lshift(2), values=[a])
    check_op(device, None, lambda x: x >> 1, lambda x: x.rshift(1), values=[a])
    check_op(device, None, lambda x: 1 << x, lambda x: 1 << x, values=[a])
    check_op(device, None, lambda x: 256 >> x, lambda x: 256 >> x, values=[a])
    check_op(device, None, lambda x: 1 << x, lambda x: x.lshift(1, reverse=True), values=[a])
    check_op(device, None, lambda x: -64 >> x, lambda x: x.rshift(-64, reverse=True), values=[a])


@pytest.mark.parametrize("name", ["bitwise_and", "bitwise_or", "bitwise_xor", "lshift", "rshift"])
def test_bitwise_on_float_raises_torchs_type(name: str) -> None:
    torch_name = {"lshift": "__lshift__", "rshift": "__rshift__"}.get(name, name)
    with pytest.raises(NotImplementedError):
        getattr(torch.ones(2), torch_name)(1)
    with pytest.raises(NotImplementedError):
        getattr(Tensor.ones(2), name)(1)
    with pytest.raises(NotImplementedError):
        Tensor.ones(2).bitwise_not()
    with pytest.raises(TypeError):  # still a TypeError, as tinycore raised before
        Tensor.ones(2) & 1


def test_neg_eq_ne(device: str) -> None:
    check_op(device, [(2, 3)], torch.neg, Tensor.neg)
    check_op(device, [(0, 3)], torch.neg, Tensor.neg)
    a = np.array([1.0, np.nan, 2.0, -0.0], dtype=np.float32)
    b = np.array([1.0, np.nan, 3.0, 0.0], dtype=np.float32)
    check_op(device, None, torch.eq, Tensor.eq, values=[a, b], forward_only=True)
    check_op(device, None, torch.ne, Tensor.ne, values=[a, b], forward_only=True)
    check_op(device, None, lambda x: x.eq(2.0), lambda x: x.eq(2.0), values=[a], forward_only=True)


@pytest.mark.parametrize(("name", "dtype"), [("long", dtypes.int64), ("short", dtypes.int16),
                                             ("double", dtypes.float64), ("bfloat16", dtypes.bfloat16)])  # fmt: skip
def test_cast_shortcuts(device: str, name: str, dtype) -> None:
    if dtype == dtypes.bfloat16:
        from tinycore.device import is_dtype_supported

        if not is_dtype_supported(dtypes.bfloat16, device):
            pytest.skip(f"{device} has no bfloat16")
    t = getattr(Tensor([1.5, -2.5, 3.0], device=device), name)()
    ref = getattr(torch.tensor([1.5, -2.5, 3.0]), name)()
    assert t.dtype == dtype
    np.testing.assert_allclose(t.float().numpy(), ref.float().numpy())


def test_is_floating_point_and_size() -> None:
    assert Tensor([1.0]).is_floating_point() and Tensor([1.0]).half().is_floating_point()
    assert not Tensor([1]).is_floating_point() and not Tensor([True]).is_floating_point()
    t, r = Tensor.ones(2, 0, 5), torch.ones(2, 0, 5)
    assert t.size() == tuple(r.size())
    for d in (0, 1, 2, -1, -3):
        assert t.size(d) == r.size(d)
    for bad in (3, -4):
        with pytest.raises(IndexError, match="Dimension out of range"):
            t.size(bad)
    with pytest.raises(IndexError, match="no dimensions"):
        Tensor(1.0).size(0)
    assert Tensor(1.0).size() == ()
    with pytest.raises(TypeError, match="dim"):
        t.size(1.5)


# ----- keyword arguments


@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_div_rounding_mode(device: str, mode: str) -> None:
    a = np.array([7.5, -7.5, 3.0, -0.5, 0.0, 9.0], dtype=np.float32)
    b = np.array([2.0, 2.0, -2.0, 3.0, 5.0, 0.0], dtype=np.float32)
    check_op(device, None, lambda x, y: torch.div(x, y, rounding_mode=mode),
             lambda x, y: x.div(y, rounding_mode=mode), values=[a, b], forward_only=True)  # fmt: skip
    ai = np.array([7, -7, 3, -1, 0], dtype=np.int32)
    bi = np.array([2, 2, -2, 3, 5], dtype=np.int32)
    check_op(device, None, lambda x, y: torch.div(x, y, rounding_mode=mode),
             lambda x, y: x.div(y, rounding_mode=mode), values=[ai, bi])  # fmt: skip
    check_op(device, None, lambda x: torch.div(x, 3, rounding_mode=mode),
             lambda x: x.div(3, rounding_mode=mode), values=[ai])  # fmt: skip
    check_op(device, None, lambda x: torch.div(10, x, rounding_mode=mode),
             lambda x: x.div(10, reverse=True, rounding_mode=mode), values=[bi])  # fmt: skip
    check_op(device, [(0, 3), (0, 3)], lambda x, y: torch.div(x, y, rounding_mode=mode),
             lambda x, y: x.div(y, rounding_mode=mode), forward_only=True)  # fmt: skip


def test_div_bad_rounding_mode() -> None:
    with pytest.raises(RuntimeError, match="rounding_mode"):
        Tensor([1.0]).div(2, rounding_mode="round")


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32])
def test_sum_prod_dtype(device: str, dtype: type) -> None:
    for torch_fn, name in ((torch.sum, "sum"), (torch.prod, "prod")):
        for out in (torch.float64, torch.int64, torch.float32):
            tiny_out = {torch.float64: dtypes.float64, torch.int64: dtypes.int64, torch.float32: dtypes.float32}[out]
            check_op(device, [(3, 4)], lambda x, f=torch_fn, o=out: f(x, 1, dtype=o),
                     lambda x, n=name, o=tiny_out: getattr(x, n)(1, dtype=o), dtype=dtype, low=-3, high=3,
                     atol=1e-3, rtol=1e-3, forward_only=True)  # fmt: skip
    t = Tensor([1, 2, 3], dtype=dtypes.int8)
    assert t.sum(dtype=dtypes.int16).dtype == dtypes.int16 == t.sum(acc_dtype=dtypes.int16).dtype
    assert t.prod(0, False, dtypes.int32).dtype == dtypes.int32
    with pytest.raises(TypeError, match="acc_dtype"):
        t.sum(dtype=dtypes.int16, acc_dtype=dtypes.int32)


def test_sum_dtype_backward(device: str) -> None:
    check_op(device, [(3, 4)], lambda x: x.sum(0, dtype=torch.float64), lambda x: x.sum(0, dtype=dtypes.float64))


@pytest.mark.parametrize(("beta", "threshold"), [(1.0, 20.0), (2.0, 1.0), (0.5, 0.2), (1.0, -1.0)])
def test_softplus_threshold(device: str, beta: float, threshold: float) -> None:
    values = np.array([-30.0, -1.0, -0.1, 0.0, 0.3, 0.6, 1.0, 5.0, 25.0, 100.0], dtype=np.float32)
    check_op(device, None, lambda x: F.softplus(x, beta, threshold), lambda x: x.softplus(beta, threshold),
             values=[values])  # fmt: skip


@pytest.mark.parametrize(("alpha", "gamma"), [(None, None), (1.0, 1.0), (2.0, 0.5)])
def test_selu_parameters(device: str, alpha, gamma) -> None:
    def ref(x):
        if alpha is None:
            return F.selu(x)
        return gamma * F.elu(x, alpha)

    def ours(x):
        return x.selu() if alpha is None else x.selu(alpha, gamma)

    check_op(device, [(4, 5)], ref, ours, low=-3, high=3)
    check_op(device, [(0,)], ref, ours)


def test_softmax_dtype(device: str) -> None:
    check_op(device, [(3, 5)], lambda x: torch.softmax(x, -1, dtype=torch.float64),
             lambda x: x.softmax(-1, dtype=dtypes.float64))  # fmt: skip
    check_op(device, [(3, 5)], lambda x: torch.log_softmax(x, 0, dtype=torch.float64),
             lambda x: x.log_softmax(0, dtype=dtypes.float64))  # fmt: skip
    assert Tensor.ones(2, 3).softmax(dtype=dtypes.float64).dtype == dtypes.float64


def test_matmul_reverse_and_dtype(device: str) -> None:
    check_op(device, [(3, 4), (5, 3)], lambda a, b: b @ a, lambda a, b: a.matmul(b, True), atol=1e-5)
    check_op(device, [(3, 4), (4, 2)], lambda a, b: (a @ b).double(), lambda a, b: a.matmul(b, dtype=dtypes.float64),
             atol=1e-5)  # fmt: skip
    check_op(device, [(1, 4), (4, 1)], lambda a, b: a @ b, lambda a, b: a.matmul(b), atol=1e-5)


def test_linear_einsum_conv2d_dtype(device: str) -> None:
    x = Tensor.ones(2, 3, device=device)
    w = Tensor.ones(3, 4, device=device)
    assert x.linear(w, dtype=dtypes.float64).dtype == dtypes.float64
    assert x.linear(Tensor.ones(3, device=device), dtype=dtypes.float64).dtype == dtypes.float64
    assert Tensor.einsum("ij,jk->ik", x, w, dtype=dtypes.float64).dtype == dtypes.float64
    assert Tensor.einsum("ij->ji", x, dtype=dtypes.float16).dtype == dtypes.float16
    np.testing.assert_allclose(x.linear(w, dtype=dtypes.float64).numpy(), np.full((2, 4), 3.0))
    xi = Tensor(np.full((1, 2, 4, 4), 10, dtype=np.int8), device=device)
    wi = Tensor(np.full((1, 2, 3, 3), 3, dtype=np.int8), device=device)
    out = xi.conv2d(wi, dtype=dtypes.int32)  # each product fits int8, their sum (540) only the int32 accumulator
    assert out.dtype == dtypes.int32 and out.numpy().flatten().tolist() == [540] * 4
    check_op(device, [(1, 2, 5, 5), (3, 2, 3, 3)], lambda a, b: F.conv2d(a, b).double(),
             lambda a, b: a.conv2d(b, dtype=dtypes.float64), atol=1e-5)  # fmt: skip


def test_unfold_dim_keyword_and_flip_varargs(device: str) -> None:
    check_op(device, [(7, 3)], lambda x: x.unfold(0, 3, 2), lambda x: x.unfold(dim=0, size=3, step=2))
    check_op(device, [(2, 3, 4)], lambda x: x.flip(0, 2), lambda x: x.flip(0, 2))
    check_op(device, [(2, 3, 4)], lambda x: x.flip((0, -1)), lambda x: x.flip((0, -1)))
    check_op(device, [(0, 3)], lambda x: x.flip(1), lambda x: x.flip(1))
    with pytest.raises(RuntimeError, match="appears multiple times"):
        Tensor.ones(2, 3).flip(0, -2)


def test_reshape_view_none_entries(device: str) -> None:
    check_op(device, [(2, 3, 4)], lambda x: x.reshape(2, 12), lambda x: x.reshape(None, 12))
    check_op(device, [(2, 3, 4)], lambda x: x.view(2, 3, 2, 2), lambda x: x.view((None, None, 2, 2)))
    check_op(device, [(2, 3, 4)], lambda x: x.reshape(2, 3, 4), lambda x: x.reshape(shape=(None, None, -1)))
    with pytest.raises(RuntimeError, match="None"):
        Tensor.ones(2, 3).reshape(1, 6, None)  # no dimension 2 to keep


def test_shape_varargs_keywords() -> None:
    t = Tensor.ones(2, 3)
    assert t.expand(shape=(4, 2, 3)).shape == (4, 2, 3) == t.expand(4, 2, 3).shape
    assert t.permute(order=(1, 0)).shape == (3, 2) == t.permute(1, 0).shape
    assert t.repeat(repeats=(2, 1)).shape == (4, 3) == t.repeat(2, 1).shape
    assert Tensor(1.0).reshape().shape == () and Tensor(1.0).permute().shape == ()


# ----- new functions


@pytest.mark.parametrize("shape", [(4,), (1,), (0,), (3, 3), (2, 5), (5, 2), (0, 3), (1, 1)])
def test_diag(device: str, shape: tuple[int, ...]) -> None:
    check_op(device, [shape], torch.diag, Tensor.diag)


@pytest.mark.parametrize("shape", [(3, 3), (2, 5), (5, 2), (0, 3), (1, 1), (3, 4, 2), (2, 2, 0)])
def test_diagonal(device: str, shape: tuple[int, ...]) -> None:
    check_op(device, [shape], torch.diagonal, Tensor.diagonal)


def test_diagonal_of_broadcast_and_transposed(device: str) -> None:
    check_op(device, [(3, 1)], lambda x: x.expand(3, 3).diagonal(), lambda x: x.expand(3, 3).diagonal())
    check_op(device, [(3, 4)], lambda x: x.T.diag(), lambda x: x.T.diag())


def test_diag_diagonal_errors() -> None:
    for shape in ((), (2, 2, 2)):
        with pytest.raises(RuntimeError) as torch_error:
            torch.ones(shape).diag()
        with pytest.raises(type(torch_error.value), match="1D or 2D"):
            Tensor.ones(*shape).diag()
    with pytest.raises(RuntimeError, match="ndim"):
        Tensor.ones(3).diagonal()


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(device: str, indexing: str) -> None:
    for shapes in ([(2,), (3,)], [(2,), (3,), (4,)], [(1,), (0,)], [(3,)], [(), (2,)]):
        check_op(device, shapes, lambda *xs: torch.stack(torch.meshgrid(*xs, indexing=indexing)),
                 lambda *xs: Tensor.stack(*xs[0].meshgrid(*xs[1:], indexing=indexing)))  # fmt: skip
    with pytest.raises(RuntimeError, match="indexing"):
        Tensor.ones(2).meshgrid(Tensor.ones(3), indexing="ji")
    with pytest.raises(RuntimeError, match="0D or 1D"):
        Tensor.ones(2).meshgrid(Tensor.ones(3, 1))
    assert isinstance(Tensor.ones(2).meshgrid(Tensor.ones(3)), tuple)


@pytest.mark.parametrize(
    ("formula", "shape", "sizes", "ref"),
    [
        ("b c (h w) -> b (c h) w", (2, 3, 4), {"h": 2}, lambda a: a.reshape(2, 3, 2, 2).reshape(2, 6, 2)),
        ("a b c -> c a b", (2, 3, 4), {}, lambda a: a.transpose(2, 0, 1)),
        ("... w -> w ...", (2, 3, 4), {}, lambda a: np.moveaxis(a, -1, 0)),
        ("a b c -> a 1 (b c)", (2, 3, 4), {}, lambda a: a.reshape(2, 1, 12)),
        ("(a b) c -> b a c", (6, 2), {"a": 3}, lambda a: a.reshape(3, 2, 2).transpose(1, 0, 2)),
        ("a 1 c -> a c", (2, 1, 4), {}, lambda a: a.reshape(2, 4)),
        ("a b -> (b a)", (0, 3), {}, lambda a: a.T.reshape(0)),
    ],
)
def test_rearrange(device: str, formula: str, shape, sizes, ref) -> None:
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    out = Tensor(a, device=device).rearrange(formula, **sizes)
    np.testing.assert_array_equal(out.numpy(), ref(a))


@pytest.mark.parametrize(
    ("formula", "sizes"),
    [("a b -> a", {}), ("a b c -> a b c", {}), ("a b -> b a", {"z": 2}), ("(a b) c -> a b c", {}),
     ("a b", {}), ("a a -> a", {}), ("(a b) c -> a b c", {"a": 4})],
)  # fmt: skip
def test_rearrange_errors(formula: str, sizes) -> None:
    with pytest.raises(ValueError):
        Tensor.ones(6, 2).rearrange(formula, **sizes)


def test_rearrange_backward() -> None:
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    (x.rearrange("a (b c) -> c a b", c=2) * Tensor(np.arange(12, dtype=np.float32).reshape(2, 3, 2))).sum().backward()
    expected = np.arange(12, dtype=np.float32).reshape(2, 3, 2).transpose(1, 2, 0).reshape(3, 4)
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def _newton_schulz_ref(g: np.ndarray, steps: int, params, eps: float) -> np.ndarray:
    g = g.astype(np.float64)
    if g.shape[-2] > g.shape[-1]:
        return np.swapaxes(_newton_schulz_ref(np.swapaxes(g, -1, -2), steps, params, eps), -1, -2)
    g = g / (np.sqrt((g * g).sum(axis=(-2, -1), keepdims=True)) + eps)
    for _ in range(steps):
        a = g @ np.swapaxes(g, -1, -2)
        g = sum(p * np.linalg.matrix_power(a, i) @ g for i, p in enumerate(params))
    return g


@pytest.mark.parametrize("shape", [(4, 6), (6, 4), (2, 3, 3), (1, 1)])
def test_newton_schulz(device: str, shape) -> None:
    params = (3.4445, -4.775, 2.0315)
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    out = Tensor(a, device=device).newton_schulz(5, params)
    np.testing.assert_allclose(out.numpy(), _newton_schulz_ref(a, 5, params, 1e-7), atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="2 dimensions"):
        Tensor.ones(3).newton_schulz(1, params)


def test_contiguous_backward_kernelize_fuse_replace(device: str) -> None:
    check_op(device, [(3, 4)], lambda x: x * 2, lambda x: x.contiguous_backward() * 2)
    t = Tensor.ones(3, device=device)
    assert t.kernelize() is t and t.fuse() is t and t.contiguous(tag="x").numpy().tolist() == [1.0] * 3
    other = Tensor([4.0, 5.0, 6.0], device=device)
    before = t * 1
    assert t.replace(other) is t and t.numpy().tolist() == [4.0, 5.0, 6.0]
    assert before.numpy().tolist() == [1.0] * 3
    with pytest.raises(RuntimeError, match="shape"):
        t.replace(Tensor.ones(2, device=device))
    assert t.replace(Tensor.ones(2, device=device), allow_shape_mismatch=True).shape == (2,)


def test_raw_ops(device: str) -> None:
    from tinycore.uop.ops import Ops

    a = Tensor([1.0, 2.0], device=device)
    assert a.alu(Ops.ADD, Tensor([3.0, 4.0], device=device)).numpy().tolist() == [4.0, 6.0]
    with pytest.raises(ValueError, match="shape"):
        a.alu(Ops.ADD, Tensor([1.0], device=device))
    c = a.const_like(7)
    assert c.dtype == a.dtype and c.numpy().tolist() == [7.0, 7.0]
    assert a.ufix(a) is a and a.ufix(2).numpy().tolist() == [2.0, 2.0]
    bits = Tensor([0, 1, 2], device=device, dtype=dtypes.uint64).threefry(5)
    assert bits.dtype == dtypes.uint64 and len(set(bits.numpy().tolist())) == 3
    with pytest.raises(TypeError, match="uint64"):
        a.threefry(1)


def test_from_uop_blob_url_and_fetch(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path / "cache"))
    t = Tensor([1.0, 2.0])
    assert Tensor.from_uop(t.uop).numpy().tolist() == [1.0, 2.0]
    arr = np.arange(6, dtype=np.int16)
    blob = Tensor.from_blob(arr.ctypes.data, (2, 3), dtype=dtypes.int16)
    arr[0] = 100  # copied when called
    assert blob.dtype == dtypes.int16 and blob.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert Tensor.from_blob(arr.ctypes.data, (0,), dtype=dtypes.int16).shape == (0,)
    payload = bytes(range(10))
    raw, packed = tmp_path / "raw.bin", tmp_path / "packed.gz"
    raw.write_bytes(payload)
    packed.write_bytes(gzip.compress(payload))
    got = Tensor.from_url(raw.as_uri())
    assert got.dtype == dtypes.uint8 and bytes(got.numpy().tolist()) == payload
    assert bytes(Tensor.from_url(packed.as_uri(), gunzip=True).numpy().tolist()) == payload
    path = tinycore.fetch(raw.as_uri(), name="x.bin", subdir="sub")
    assert path.read_bytes() == payload and path.parent.name == "sub"
    raw.write_bytes(b"new")
    assert tinycore.fetch(raw.as_uri(), name="x.bin", subdir="sub").read_bytes() == payload  # cached
    assert tinycore.fetch(raw.as_uri(), name="x.bin", subdir="sub", allow_caching=False).read_bytes() == b"new"
    with pytest.raises(FileNotFoundError):
        tinycore.fetch(str(tmp_path / "missing"))


@pytest.mark.parametrize("cfg", ["sha3_224", "sha3_256", "sha3_384", "sha3_512", "shake_128", "shake_256"])
def test_keccak_named(cfg: str) -> None:
    rate = {"sha3_224": 144, "sha3_256": 136, "sha3_384": 104, "sha3_512": 72, "shake_128": 168, "shake_256": 136}
    for length in (0, 1, rate[cfg] - 1, rate[cfg], rate[cfg] + 1, 400):
        data = np.random.default_rng(length).integers(0, 256, (3, length), dtype=np.uint8)
        out = Tensor(data).keccak(cfg).numpy()
        assert out.shape == (3, (200 - rate[cfg]) // 2) and out.dtype == np.uint8
        for i in range(3):
            h = hashlib.new(cfg, data[i].tobytes())
            want = h.digest((200 - rate[cfg]) // 2) if cfg.startswith("shake") else h.digest()
            assert out[i].tobytes() == want, (cfg, length, i)


def test_keccak_any_sponge_and_dtype() -> None:
    from tinycore.frontend.keccak import keccak_rows

    # a (rate, dsbyte) pair: the numpy permutation, checked against hashlib's SHA3-256 and SHAKE128 (same sponges)
    data = np.random.default_rng(0).integers(0, 256, (4, 300), dtype=np.uint8)
    assert Tensor(data).keccak((136, 0x06)).numpy().tobytes() == Tensor(data).keccak("sha3_256").numpy().tobytes()
    for rate, dsbyte, name in ((136, 0x06, "sha3_256"), (168, 0x1F, "shake_128"), (72, 0x06, "sha3_512")):
        got = keccak_rows(data, rate, dsbyte)
        for i in range(4):
            h = hashlib.new(name, data[i].tobytes())
            assert got[i].tobytes() == (h.digest(16) if name == "shake_128" else h.digest())
    # a sponge hashlib lacks runs on numpy: Keccak-256 as Ethereum uses it (dsbyte 0x01), a known digest
    empty = Tensor(np.zeros((1, 0), dtype=np.uint8)).keccak((136, 0x01)).numpy()[0].tobytes().hex()
    assert empty == "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"
    # any dtype: the bytes of each row as stored, batched over leading dims; a non-contiguous view hashes its values
    x = Tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    out = x.keccak().numpy()
    assert out.shape == (2, 3, 32)
    assert out[1, 2].tobytes() == hashlib.sha3_256(np.arange(20, 24, dtype=np.float32).tobytes()).digest()
    t = x.permute(2, 1, 0).contiguous().numpy()
    assert x.permute(2, 1, 0).keccak().numpy()[3, 1].tobytes() == hashlib.sha3_256(t[3, 1].tobytes()).digest()
    bf = Tensor([1.0, 2.0], dtype=dtypes.bfloat16).keccak().numpy()
    assert bf.tobytes() == hashlib.sha3_256(bytes([0x80, 0x3F, 0x00, 0x40])).digest()
    with pytest.raises(ValueError, match="cfg"):
        Tensor(data).keccak("md5")
    with pytest.raises(ValueError, match="rate"):
        Tensor(data).keccak((100, 6))


def _tree_hash_spec(data: bytes) -> bytes:
    """tinygrad's content hash written out from its description: shake_128 over 4 KiB blocks, then over the 256
    block hashes of each 1 MiB chunk, level by level."""

    def level(buf: bytes) -> bytes:
        buf += bytes(-len(buf) % (1 << 20))
        out = b""
        for c in range(0, len(buf), 1 << 20):
            blocks = b"".join(hashlib.shake_128(buf[b : b + 4096]).digest(16) for b in range(c, c + (1 << 20), 4096))
            out += hashlib.shake_128(blocks).digest(16)
        return out

    buf = level(data or bytes(1 << 20))
    while len(buf) > 16:
        buf = level(buf)
    return buf


# Tensor(x).hash() as tinygrad 0.11.0 computes it (its CPU device, run once beside these tests), for the data below
TINYGRAD_HASHES = {1: "f0f71c1201d9b3b6edff830410d737e0"}


@pytest.mark.parametrize("n", [0, 1, 5000, (1 << 20) + 3])
def test_hash(n: int) -> None:
    data = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
    got = Tensor(data).hash()
    assert got.shape == (16,) and got.dtype == dtypes.uint8
    assert got.numpy().tobytes() == _tree_hash_spec(data.tobytes())
    if n in TINYGRAD_HASHES:
        assert got.numpy().tobytes().hex() == TINYGRAD_HASHES[n]


def test_hash_of_values_not_layout() -> None:
    a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    assert a.hash().numpy().tobytes() == _tree_hash_spec(np.arange(12, dtype=np.float32).tobytes())
    assert a.T.hash().numpy().tobytes() == a.T.contiguous().hash().numpy().tobytes()
    assert a.hash().numpy().tobytes() != a.T.hash().numpy().tobytes()
    assert a.hash().numpy().tobytes() != (a + 0.5).hash().numpy().tobytes()


# ----- dtypes


def test_dtype_groups_and_limits() -> None:
    assert dtypes.fp8s == (dtypes.fp8e4m3, dtypes.fp8e5m2)
    assert dtypes.floats == dtypes.fp8s + (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
    assert dtypes.uints == (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
    assert dtypes.sints == (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
    assert dtypes.ints == dtypes.uints + dtypes.sints
    assert set(dtypes.all) == {*dtypes.floats, *dtypes.ints, dtypes.bool}
    for dt in dtypes.ints:
        info = torch.iinfo(getattr(torch, dt.name if dt.name.startswith("u") and " " not in dt.name else
                                   {"signed char": "int8", "unsigned char": "uint8", "short": "int16", "int": "int32",
                                    "long": "int64", "unsigned short": "uint16", "unsigned int": "uint32",
                                    "unsigned long": "uint64"}[dt.name]))  # fmt: skip
        assert (dt.min, dt.max) == (info.min, info.max)
    assert dtypes.float32.min == -np.inf and dtypes.float32.max == np.inf
    assert (dtypes.bool.min, dtypes.bool.max) == (False, True)
    assert dtypes.float32.nbytes() == 4 and dtypes.float32.ptr(10).nbytes() == 40
