"""A systematic sweep of PyTorch's semantics at the edges (issue 21): every elementwise float op on the same vector
of special values (signed zeros, infinities, NaN, subnormals, the float32 extremes, domain boundaries), forward and
backward; every binary op on every pair of those values; reductions on 0-d and 0-size tensors along every axis,
negative axes included; result dtypes of every dtype pair; invalid axes. Each op's tolerance is written next to it.

Where torch's own result is not a property of the math (the exact NaN payload, the sign of a NaN), only NaN-ness is
compared; everything else (inf signs) must match. Gradients are compared where the forward value is not NaN: outside
an op's domain torch's gradient is its formula's value at a point where the function has none (acosh at -88 gives
1/sqrt(x*x - 1)), which no decomposition is bound to reproduce.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from op_helpers import torch  # noqa: F401  (skips the module without torch)

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

F32 = np.float32
TINY = np.finfo(F32).tiny  # smallest normal
SUB = float(np.nextafter(F32(0), F32(1)))  # smallest subnormal
BIG = float(np.finfo(F32).max)
SPECIAL = np.array(
    [0.0, -0.0, math.inf, -math.inf, math.nan, SUB, -SUB, TINY, -TINY, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0,
     1e-7, -1e-7, 88.0, -88.0, 100.0, -100.0, BIG, -BIG, 0.999999, -0.999999, 1.000001, -1.000001, 3.0],
    dtype=F32,
)  # fmt: skip

# name: (tinycore fn, torch fn, atol, rtol, gradient checked). Tolerances: float32 results within a few ulps where
# the decomposition is exact enough; transcendentals within the decompositions' documented error.
UNARY = {
    "neg": (lambda x: -x, lambda x: -x, 0, 0, True),
    "abs": (Tensor.abs, torch.abs, 0, 0, True),
    "relu": (Tensor.relu, torch.relu, 0, 0, True),
    "sign": (Tensor.sign, torch.sign, 0, 0, True),
    "square": (Tensor.square, torch.square, 0, 1e-6, True),
    "sqrt": (Tensor.sqrt, torch.sqrt, 0, 1e-6, True),
    "rsqrt": (Tensor.rsqrt, torch.rsqrt, 0, 1e-6, True),
    "reciprocal": (Tensor.reciprocal, torch.reciprocal, 0, 1e-6, True),
    # exp is exp2(x * log2(e)): the product's rounding gives a relative error up to ~|x| * 2^-24 (2e-6 at |x| = 88)
    "exp": (Tensor.exp, torch.exp, 0, 2.5e-6, True),
    "exp2": (Tensor.exp2, torch.exp2, 0, 1e-6, True),
    "log": (Tensor.log, torch.log, 1e-6, 1e-6, True),
    "log2": (Tensor.log2, torch.log2, 1e-6, 1e-6, True),
    "sin": (Tensor.sin, torch.sin, 1e-6, 1e-5, True),
    "cos": (Tensor.cos, torch.cos, 1e-6, 1e-5, True),
    "tanh": (Tensor.tanh, torch.tanh, 1e-6, 1e-5, True),
    "sigmoid": (Tensor.sigmoid, torch.sigmoid, 1e-7, 1e-5, True),
    "softplus": (Tensor.softplus, torch.nn.functional.softplus, 1e-6, 1e-5, True),
    "gelu": (Tensor.gelu, lambda x: torch.nn.functional.gelu(x, approximate="tanh"), 1e-6, 1e-5, True),
    "silu": (Tensor.silu, torch.nn.functional.silu, 1e-6, 1e-5, True),
    "elu": (Tensor.elu, torch.nn.functional.elu, 1e-6, 1e-5, True),
    "leaky_relu": (Tensor.leaky_relu, lambda x: torch.nn.functional.leaky_relu(x, 0.01), 0, 1e-6, True),
    "floor": (Tensor.floor, torch.floor, 0, 0, True),
    "ceil": (Tensor.ceil, torch.ceil, 0, 0, True),
    "trunc": (Tensor.trunc, torch.trunc, 0, 0, True),
    "round": (Tensor.round, torch.round, 0, 0, True),
    "asin": (Tensor.asin, torch.asin, 1e-6, 1e-5, True),
    "acos": (Tensor.acos, torch.acos, 1e-6, 1e-5, True),
    "atan": (Tensor.atan, torch.atan, 1e-6, 1e-5, True),
    "sinh": (Tensor.sinh, torch.sinh, 1e-6, 1e-5, True),
    "cosh": (Tensor.cosh, torch.cosh, 1e-6, 1e-5, True),
    "asinh": (Tensor.asinh, torch.asinh, 1e-6, 1e-5, True),
    "acosh": (Tensor.acosh, torch.acosh, 1e-6, 1e-5, True),
    "atanh": (Tensor.atanh, torch.atanh, 1e-6, 1e-5, True),
    "erf": (Tensor.erf, torch.erf, 1e-6, 1e-5, True),
    "isnan": (Tensor.isnan, torch.isnan, 0, 0, False),
    "isinf": (Tensor.isinf, torch.isinf, 0, 0, False),
}


def _compare(ours: np.ndarray, ref: np.ndarray, atol: float, rtol: float, what: str) -> None:
    """Equal shapes; NaN exactly where torch has NaN; infinities equal; the rest within the tolerance."""
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} vs torch {ref.shape}"
    if ref.dtype == np.bool_ or np.issubdtype(ref.dtype, np.integer):
        np.testing.assert_array_equal(ours, ref, err_msg=what)
        return
    o, r = ours.astype(np.float64), ref.astype(np.float64)
    bad = np.isnan(o) != np.isnan(r)
    finite = np.isfinite(r) & np.isfinite(o)
    bad |= ~np.isnan(r) & ~finite & (o != r)  # an infinity where torch is finite, or the wrong one
    bad |= finite & (np.abs(o - r) > atol + rtol * np.abs(r))
    if bad.any():
        where = np.flatnonzero(bad)[:6]
        raise AssertionError(f"{what}: at {where.tolist()} ours {o.ravel()[where]} vs torch {r.ravel()[where]}")


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_on_special_values(device: str, name: str) -> None:
    tiny_fn, torch_fn, atol, rtol, grad = UNARY[name]
    x = Tensor(SPECIAL, device=device, requires_grad=grad or None)
    tx = torch.tensor(SPECIAL, requires_grad=grad)
    out, ref = tiny_fn(x), torch_fn(tx)
    _compare(out.numpy(), ref.detach().numpy(), atol, rtol, f"{name} forward on {device}")
    if not grad:
        return
    out.sum().backward()
    ref.sum().backward()
    defined = ~np.isnan(ref.detach().numpy())
    ours_grad, ref_grad = x.grad.numpy()[defined], tx.grad.numpy()[defined]
    _compare(ours_grad, ref_grad, max(atol, 1e-6), max(rtol, 1e-5), f"{name} gradient on {device}")


# name: (tinycore fn, torch fn, atol, rtol)
BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b, 0, 1e-7),
    "sub": (lambda a, b: a - b, lambda a, b: a - b, 0, 1e-7),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, 0, 1e-7),
    "div": (lambda a, b: a / b, lambda a, b: a / b, 0, 1e-6),
    "maximum": (Tensor.maximum, torch.maximum, 0, 0),
    "minimum": (Tensor.minimum, torch.minimum, 0, 0),
    "pow": (lambda a, b: a.pow(b), torch.pow, 1e-6, 1e-5),
    "lt": (lambda a, b: a < b, lambda a, b: a < b, 0, 0),
    "eq": (lambda a, b: a == b, lambda a, b: a == b, 0, 0),
    "ne": (lambda a, b: a != b, lambda a, b: a != b, 0, 0),
    "copysign": (Tensor.copysign, torch.copysign, 0, 0),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_on_every_pair_of_special_values(device: str, name: str) -> None:
    tiny_fn, torch_fn, atol, rtol = BINARY[name]
    a, b = np.meshgrid(SPECIAL, SPECIAL, indexing="ij")
    out = tiny_fn(Tensor(a, device=device), Tensor(b, device=device)).numpy()
    ref = torch_fn(torch.tensor(a), torch.tensor(b)).numpy()
    if name == "pow":  # exp2(y * log2|x|): a finite result in the last octave below FLT_MAX (BIG ** 1) may round to
        keep = ~(np.isfinite(ref) & (np.abs(ref.astype(np.float64)) >= 2.0**127))  # inf (documented in pow)
        out, ref = out[keep], ref[keep]
    _compare(out, ref, atol, rtol, f"{name} on {device}")


REDUCTIONS = {
    "sum": (lambda t, ax, kd: t.sum(ax, keepdim=kd), lambda t, ax, kd: t.sum(ax, keepdim=kd)),
    "prod": (lambda t, ax, kd: t.prod(ax, keepdim=kd), lambda t, ax, kd: t.prod(ax, keepdim=kd)),
    "mean": (lambda t, ax, kd: t.mean(ax, keepdim=kd), lambda t, ax, kd: t.mean(ax, keepdim=kd)),
    "max": (lambda t, ax, kd: t.max(ax, keepdim=kd), lambda t, ax, kd: t.amax(ax, keepdim=kd)),
    "min": (lambda t, ax, kd: t.min(ax, keepdim=kd), lambda t, ax, kd: t.amin(ax, keepdim=kd)),
    "logsumexp": (lambda t, ax, kd: t.logsumexp(ax, keepdim=kd), lambda t, ax, kd: t.logsumexp(ax, keepdim=kd)),
    "cumsum": (lambda t, ax, kd: t.cumsum(ax), lambda t, ax, kd: t.cumsum(ax)),
}
SHAPES = [(), (0,), (3, 0), (0, 4), (2, 3, 4)]


def _axes(shape: tuple[int, ...]) -> list[int]:
    return sorted({*range(len(shape)), *range(-len(shape), 0)}) if shape else [0, -1]


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_reductions_on_empty_and_zero_dim_tensors_along_every_axis(device: str, name: str, shape) -> None:
    tiny_fn, torch_fn = REDUCTIONS[name]
    x = np.arange(int(np.prod(shape)), dtype=F32).reshape(shape) / 7 - 1
    for axis in _axes(shape):
        for keepdim in (False, True):
            what = f"{name}(axis={axis}, keepdim={keepdim}) of {shape} on {device}"
            try:
                ref = torch_fn(torch.tensor(x), axis, keepdim).numpy()
            except (RuntimeError, IndexError) as error:  # torch refuses (max of an empty axis): so must we
                with pytest.raises((RuntimeError, IndexError, ValueError)):
                    tiny_fn(Tensor(x, device=device), axis, keepdim).numpy()
                assert type(error).__name__  # (the reference raised)
                continue
            _compare(tiny_fn(Tensor(x, device=device), axis, keepdim).numpy(), ref, 1e-6, 1e-5, what)


@pytest.mark.parametrize("axis", [3, -4, 10])
def test_an_axis_out_of_range_is_an_index_error_naming_it(axis: int) -> None:
    x = Tensor.ones(2, 3, 4)
    with pytest.raises(IndexError, match=str(axis)):
        x.sum(axis)
    with pytest.raises(IndexError):
        torch.ones(2, 3, 4).sum(axis)


DTYPES = {
    "bool": (dtypes.bool, torch.bool),
    "uint8": (dtypes.uint8, torch.uint8),
    "int8": (dtypes.int8, torch.int8),
    "int16": (dtypes.int16, torch.int16),
    "int32": (dtypes.int32, torch.int32),
    "int64": (dtypes.int64, torch.int64),
    "float16": (dtypes.float16, torch.float16),
    "bfloat16": (dtypes.bfloat16, torch.bfloat16),
    "float32": (dtypes.float32, torch.float32),
    "float64": (dtypes.float64, torch.float64),
}
TORCH_TO_TINY = {t: d for d, t in DTYPES.values()}


@pytest.mark.parametrize("left", sorted(DTYPES))
def test_binary_result_dtypes_follow_torch_for_every_pair(left: str) -> None:
    for right in sorted(DTYPES):
        a = Tensor.ones(2, dtype=DTYPES[left][0])
        b = Tensor.ones(2, dtype=DTYPES[right][0])
        ta, tb = torch.ones(2, dtype=DTYPES[left][1]), torch.ones(2, dtype=DTYPES[right][1])
        pairs = (("+", a + b, ta + tb), ("*", a * b, ta * tb), ("max", a.maximum(b), torch.maximum(ta, tb)))
        for op, tiny, ref in pairs:
            assert tiny.dtype == TORCH_TO_TINY[ref.dtype], f"{left} {op} {right}: {tiny.dtype} vs torch {ref.dtype}"


INT_EDGES = {
    np.int8: [-128, -127, -1, 0, 1, 126, 127],
    np.int32: [-(2**31), -(2**31) + 1, -7, -1, 0, 1, 7, 2**31 - 2, 2**31 - 1],
    np.int64: [-(2**63), -1, 0, 1, 2**63 - 1],
    np.uint8: [0, 1, 127, 128, 254, 255],
}
# name: (tinycore fn, torch fn); division and remainder by zero raise (covered in test_ops_elementwise)
INT_BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "floordiv": (lambda a, b: a // b, lambda a, b: torch.div(a, b, rounding_mode="floor")),
    "remainder": (lambda a, b: a % b, lambda a, b: torch.remainder(a, b)),
    "maximum": (Tensor.maximum, torch.maximum),
    "lt": (lambda a, b: a < b, lambda a, b: a < b),
    "bitwise_xor": (lambda a, b: a ^ b, lambda a, b: a ^ b),
}


@pytest.mark.parametrize("dtype", list(INT_EDGES), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(INT_BINARY))
def test_integer_ops_wrap_and_round_like_torch_at_the_type_limits(device: str, name: str, dtype) -> None:
    tiny_fn, torch_fn = INT_BINARY[name]
    values = np.array(INT_EDGES[dtype], dtype=dtype)
    a, b = np.meshgrid(values, values, indexing="ij")
    if name in ("floordiv", "remainder"):  # by zero raises; INT_MIN // -1 overflows (torch: wraps on CPU)
        keep = (b != 0) & ~((a == np.iinfo(dtype).min) & (b == -1))
        a, b = a[keep], b[keep]
    out = tiny_fn(Tensor(a, device=device), Tensor(b, device=device)).numpy()
    ref = torch_fn(torch.tensor(a), torch.tensor(b)).numpy()
    np.testing.assert_array_equal(out, ref, err_msg=f"{name} on {np.dtype(dtype).name} ({device})")


@pytest.mark.parametrize("dtype", list(INT_EDGES), ids=lambda d: np.dtype(d).name)
def test_integer_unary_ops_at_the_type_limits(device: str, dtype) -> None:
    values = np.array(INT_EDGES[dtype], dtype=dtype)
    x, tx = Tensor(values, device=device), torch.tensor(values)
    cases = {"abs": (x.abs(), tx.abs()), "sum": (x.sum(), tx.sum()), "max": (x.max(), tx.max())}
    if np.dtype(dtype).kind == "i":
        cases["neg"] = (-x, -tx)
    for name, (ours, ref) in cases.items():
        assert ours.numpy().tolist() == ref.numpy().tolist(), f"{name} of {np.dtype(dtype).name} on {device}"
        assert ours.numpy().dtype == ref.numpy().dtype, f"{name}: dtype {ours.numpy().dtype} vs {ref.numpy().dtype}"


# invalid calls: (what, tinycore call, torch call); both must raise, with the same exception type
INVALID = {
    "reshape to another size": (lambda: Tensor.ones(2, 3).reshape(4, 2), lambda: torch.ones(2, 3).reshape(4, 2)),
    "matmul inner sizes": (lambda: Tensor.ones(2, 3) @ Tensor.ones(4, 2), lambda: torch.ones(2, 3) @ torch.ones(4, 2)),
    "cat of other sizes": (
        lambda: Tensor.cat(Tensor.ones(2, 3), Tensor.ones(2, 4)),
        lambda: torch.cat([torch.ones(2, 3), torch.ones(2, 4)]),
    ),
    "permute repeats a dim": (lambda: Tensor.ones(2, 3).permute(0, 0), lambda: torch.ones(2, 3).permute(0, 0)),
    "transpose out of range": (lambda: Tensor.ones(2, 3).transpose(0, 2), lambda: torch.ones(2, 3).transpose(0, 2)),
    "index out of range": (lambda: Tensor.ones(2, 3)[2], lambda: torch.ones(2, 3)[2]),
    "too many indices": (lambda: Tensor.ones(2, 3)[0, 0, 0], lambda: torch.ones(2, 3)[0, 0, 0]),
    "expand a non-1 dim": (lambda: Tensor.ones(2, 3).expand(4, 3), lambda: torch.ones(2, 3).expand(4, 3)),
    "broadcast mismatch": (lambda: Tensor.ones(2, 3) + Tensor.ones(4), lambda: torch.ones(2, 3) + torch.ones(4)),
    "softmax dim out of range": (lambda: Tensor.ones(2, 3).softmax(2), lambda: torch.ones(2, 3).softmax(2)),
    "squeeze dim out of range": (lambda: Tensor.ones(2, 1).squeeze(3), lambda: torch.ones(2, 1).squeeze(3)),
    "unsqueeze dim out of range": (lambda: Tensor.ones(2, 1).unsqueeze(4), lambda: torch.ones(2, 1).unsqueeze(4)),
    "flatten start after end": (lambda: Tensor.ones(2, 3, 4).flatten(2, 1), lambda: torch.ones(2, 3, 4).flatten(2, 1)),
    "gather index dims": (
        lambda: Tensor.ones(2, 3).gather(1, Tensor([1, 0])),
        lambda: torch.ones(2, 3).gather(1, torch.tensor([1, 0])),
    ),
}


@pytest.mark.parametrize("what", sorted(INVALID))
def test_invalid_calls_raise_what_torch_raises(what: str) -> None:
    ours, theirs = INVALID[what]
    with pytest.raises(Exception) as expected:
        theirs()
    with pytest.raises(Exception) as got:
        ours().realize()
    assert isinstance(got.value, type(expected.value)) or type(expected.value) in type(got.value).__mro__, (
        f"{what}: tinycore raised {type(got.value).__name__}: {got.value}; torch {type(expected.value).__name__}"
    )


KINKS = {
    # name: (tinycore fn, torch fn, inputs); the gradient at a kink or a tie must be torch's
    "maximum tie": (Tensor.maximum, torch.maximum, [[1.0, 2.0, -0.0, 3.0], [1.0, 1.0, 0.0, 3.0]]),
    "minimum tie": (Tensor.minimum, torch.minimum, [[1.0, 2.0, -0.0, 3.0], [1.0, 1.0, 0.0, 3.0]]),
    "amax tie": (lambda x: x.max(), lambda x: x.amax(), [[3.0, 1.0, 3.0, 2.0]]),
    "amin tie along dim": (lambda x: x.min(1), lambda x: x.amin(1), [[[1.0, 1.0, 2.0], [0.5, 4.0, 0.5]]]),
    "pow at base 0": (lambda x, y: x.pow(y), torch.pow, [[0.0, 0.0, 0.0, 2.0], [2.0, 0.5, 3.0, 0.0]]),
    "pow at negative bases": (lambda x, y: x.pow(y), torch.pow, [[-2.0, -1.5, -3.0], [3.0, 2.0, 1.0]]),
    "abs at 0": (Tensor.abs, torch.abs, [[0.0, -0.0, 1.0, -2.0]]),
    "clamp at its bounds": (lambda x: x.clamp(-1, 1), lambda x: x.clamp(-1, 1), [[-1.0, 1.0, 0.5, 2.0, -3.0]]),
    "sqrt at 0": (Tensor.sqrt, torch.sqrt, [[0.0, 4.0]]),
    "hardtanh at its bounds": (
        lambda x: x.hardtanh(),
        torch.nn.functional.hardtanh,
        [[-1.0, 1.0, 0.5, 2.0]],
    ),
}


POW_GRADIENT = (
    "pow is exp2(y * log2|x|) and its gradient that expression's: at base 0 with 0 < y < 1 it is 0 where torch says "
    "inf, and with respect to y at a negative base it differentiates |x|**y where torch says NaN (docs/api.md)"
)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=POW_GRADIENT)) if n.startswith("pow") else n
        for n in sorted(KINKS)
    ],
)
def test_gradients_at_kinks_and_ties_are_torchs(device: str, name: str) -> None:
    tiny_fn, torch_fn, inputs = KINKS[name]
    arrays = [np.array(v, dtype=F32) for v in inputs]
    ours = [Tensor(a, device=device, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = tiny_fn(*ours), torch_fn(*theirs)
    _compare(out.numpy(), ref.detach().numpy(), 0, 1e-6, f"{name} forward on {device}")
    out.sum().backward()
    ref.sum().backward()
    for i, (o, t) in enumerate(zip(ours, theirs)):
        _compare(o.grad.numpy(), t.grad.numpy(), 1e-6, 1e-5, f"{name}: gradient of input {i} on {device}")


# float16 / bfloat16: forward on the same special values, each within its storage precision (2^-10, 2^-7 relative
# plus a few rounding steps)
HALF_TOLERANCE = {"float16": (1e-3, 2e-3), "bfloat16": (1e-2, 1.6e-2)}


@pytest.mark.parametrize("dtype", sorted(HALF_TOLERANCE))
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_on_special_values_in_16_bit_floats(device: str, name: str, dtype: str) -> None:
    tiny_fn, torch_fn, _, _, _ = UNARY[name]
    values = SPECIAL
    ours = tiny_fn(Tensor(values, device=device).cast(getattr(dtypes, dtype))).cast(dtypes.float32).numpy()
    ref = torch_fn(torch.tensor(values).to(getattr(torch, dtype))).float().numpy()
    atol, rtol = HALF_TOLERANCE[dtype]
    _compare(ours, ref, atol, rtol, f"{name} in {dtype} on {device}")


def test_losses_with_masked_logits_and_saturated_probabilities_are_finite_like_torch() -> None:
    # a -inf logit (a masked class) must stay out of class-index losses: 0 * -inf would make the loss NaN
    import torch.nn.functional as F

    logits = np.array([[0.0, 1.0, 2.0], [-math.inf, 0.0, 1.0], [5.0, 5.0, -math.inf]], dtype=F32)
    target = np.array([2, 1, 0])
    losses = {
        "cross_entropy": (lambda x, y: x.cross_entropy(y), lambda x, y: F.cross_entropy(x, y)),
        "cross_entropy smoothed": (
            lambda x, y: x.cross_entropy(y, label_smoothing=0.1),
            lambda x, y: F.cross_entropy(x, y, label_smoothing=0.1),  # torch: inf (the -inf logit is smoothed in)
        ),
        "sparse_categorical_crossentropy": (
            lambda x, y: x.sparse_categorical_crossentropy(y),
            lambda x, y: F.cross_entropy(x, y),
        ),
        "nll_loss": (lambda x, y: x.log_softmax(1).nll_loss(y), lambda x, y: F.nll_loss(F.log_softmax(x, 1), y)),
    }
    for name, (ours, theirs) in losses.items():
        x, tx = Tensor(logits, requires_grad=True), torch.tensor(logits, requires_grad=True)
        got, want = ours(x, Tensor(target)), theirs(tx, torch.tensor(target))
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, err_msg=name)
        if math.isfinite(want.item()):
            got.backward()
            want.backward()
            np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7, err_msg=name)
    # probabilities at exactly 0 and 1 with matching targets: the loss is 0 and the gradient finite (the log is
    # clamped at -100 as in torch, and the clamped side carries no gradient)
    p = Tensor(np.array([0.0, 1.0, 0.5], dtype=F32), requires_grad=True)
    loss = p.binary_crossentropy(Tensor(np.array([0.0, 1.0, 1.0], dtype=F32)))
    loss.backward()
    assert np.isclose(loss.item(), -math.log(0.5) / 3, rtol=1e-6)
    assert np.isfinite(p.grad.numpy()).all()
