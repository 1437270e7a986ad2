"""Op parity with PyTorch for movement and joining ops: pad (all modes), squeeze/unsqueeze, split/chunk, repeat,
repeat_interleave, roll, unfold, unflatten, cat/stack, and their errors.

Forward and backward are compared through `check_op` on every device. Tolerances: these ops move values without
arithmetic, so forward results must match exactly (``atol=0, rtol=0``); gradients sum at most a few cotangents
per element, so they get ``atol=1e-6, rtol=1e-6``.
"""

from __future__ import annotations

import numpy as np
import pytest
from op_helpers import check_op, make_inputs, torch

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

F = torch.nn.functional

# gradients are checked once autograd exists (tinycore/gradient.py, Tensor.backward); forward only until then
HAS_GRAD = hasattr(Tensor, "backward")
EXACT = {"atol": 0.0, "rtol": 0.0, "grad_atol": 1e-6, "grad_rtol": 1e-6, "forward_only": not HAS_GRAD}


@pytest.mark.parametrize(
    "tiny_fn,torch_fn",
    [(lambda x: x.unsqueeze(0), lambda x: x.unsqueeze(0)), (lambda x: x.squeeze(), lambda x: x.squeeze()),
     (lambda x: x.repeat(2, 3), lambda x: x.repeat(2, 3)), (lambda x: x.unfold(0, 1, 1), lambda x: x.unfold(0, 1, 1)),
     (lambda x: x.stack(x * 2), lambda x: torch.stack([x, x * 2])),
     (lambda x: x.repeat_interleave(3), lambda x: x.repeat_interleave(3)),
     (lambda x: x[None, ..., None], lambda x: x[None, ..., None]), (lambda x: x[True], lambda x: x[True])],
)  # fmt: skip
def test_zero_dim_inputs(device: str, tiny_fn: object, torch_fn: object) -> None:
    """0-d inputs built from a Python scalar (a CONST leaf rather than a buffer), forward and backward (exact)."""
    x = Tensor(1.5, device=device, requires_grad=True)
    xt = torch.tensor(1.5, requires_grad=True)
    out, ref = tiny_fn(x), torch_fn(xt)  # type: ignore[operator]
    assert out.shape == tuple(ref.shape)
    np.testing.assert_array_equal(out.numpy(), ref.detach().numpy())
    if HAS_GRAD:
        ref.sum().backward()
        out.sum().backward()
        assert x.grad is not None and x.grad.shape == ()
        np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())


def test_gradients_are_checked() -> None:
    """Reminder that stays visible while the backward half of this suite is off."""
    if not HAS_GRAD:
        pytest.skip("autograd (tinycore/gradient.py, Tensor.backward) not landed yet: backward checks are off")
    assert not EXACT["forward_only"]


# ---------------------------------------------------------------------------------------------------------------
# pad

PAD_CASES = [
    ((2, 3, 5), (1, 2)),
    ((2, 3, 5), (0, 0, 2, 1)),
    ((2, 3, 5), (-1, 2)),
    ((2, 3, 5), (2, -2, -1, 1)),
    ((1, 2, 3, 4), (1, 1, 2, 0, 1, 1)),
    ((1, 1, 1), (1, 0)),
    ((2, 3, 4), (0, 0)),
]


def _torch_accepts(mode: str, shape: tuple[int, ...], padding: tuple[int, ...]) -> bool:
    """Whether F.pad takes this case (invalid ones are checked as errors in test_pad_errors)."""
    for i in range(len(padding) // 2):
        b, a = padding[2 * i], padding[2 * i + 1]
        n = shape[-1 - i] + min(b, 0) + min(a, 0)
        if (mode == "reflect" and max(b, a) >= n) or (mode == "circular" and max(b, a) > n):
            return False
    return mode == "constant" or len(shape) >= len(padding) // 2 + 1


PAD_MODE_CASES = [
    (mode, shape, padding)
    for mode in ("constant", "reflect", "replicate", "circular")
    for shape, padding in PAD_CASES
    if _torch_accepts(mode, shape, padding)
]


@pytest.mark.parametrize("mode,shape,padding", PAD_MODE_CASES)
def test_pad_modes(device: str, mode: str, shape: tuple[int, ...], padding: tuple[int, ...]) -> None:
    check_op(device, [shape], lambda x: F.pad(x, padding, mode=mode), lambda x: x.pad(padding, mode=mode), **EXACT)


def test_pad_value_and_dtypes(device: str) -> None:
    check_op(device, [(3, 4)], lambda x: F.pad(x, (1, 2, 2, 0), value=-1.5),
             lambda x: x.pad((1, 2, 2, 0), value=-1.5), **EXACT)  # fmt: skip
    check_op(device, [(3, 4)], lambda x: F.pad(x, (1, 2), value=7), lambda x: x.pad((1, 2), value=7),
             dtype=np.int32, **EXACT)  # fmt: skip
    check_op(device, [(3, 4)], lambda x: F.pad(x, (1, 2), mode="replicate"),
             lambda x: x.pad((1, 2), mode="replicate"), dtype=np.int32, **EXACT)  # fmt: skip
    check_op(device, [(2, 4)], lambda x: F.pad(x, (2, 1), mode="circular"),
             lambda x: x.pad((2, 1), mode="circular"), dtype=np.bool_, **EXACT)  # fmt: skip


def test_pad_pairs_and_any_dim(device: str) -> None:
    """Per-dimension pairs and non-constant modes on a leading dim (beyond torch's last-3 limit): vs a transpose."""
    check_op(device, [(3, 4)], lambda x: F.pad(x, (0, 0, 1, 2)), lambda x: x.pad(((1, 2), None)), **EXACT)
    check_op(device, [(3, 4)], lambda x: F.pad(x.T[None], (2, 1), mode="reflect")[0].T,
             lambda x: x.pad(((2, 1), None), mode="reflect"), **EXACT)  # fmt: skip


def test_pad_non_contiguous(device: str) -> None:
    check_op(device, [(4, 5)], lambda x: F.pad(x.T[None], (2, 3), mode="reflect"),
             lambda x: x.T.reshape(1, 5, 4).pad((2, 3), mode="reflect"), **EXACT)  # fmt: skip


def test_pad_errors() -> None:
    t = Tensor.zeros(1, 2, 3)
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        t.pad((3, 0), mode="reflect")
    with pytest.raises(RuntimeError, match="wrapping around more than once"):
        t.pad((4, 0), mode="circular")
    with pytest.raises(NotImplementedError, match="unknown mode"):
        t.pad((1, 1), mode="wrap")
    with pytest.raises(ValueError, match="even length"):
        t.pad((1, 1, 1))
    with pytest.raises(RuntimeError, match="replicate needs a non-empty"):
        Tensor.zeros(2, 0).pad((1, 0), mode="replicate")


# ---------------------------------------------------------------------------------------------------------------
# squeeze / unsqueeze / unflatten


@pytest.mark.parametrize(
    "shape,dim",
    [((2, 1, 3, 1), None), ((2, 1, 3, 1), 1), ((2, 1, 3, 1), -1), ((2, 1, 3, 1), 0), ((2, 1, 3, 1), (1, 3)),
     ((), None), ((), 0), ((1,), 0), ((0, 1), 1)],
)  # fmt: skip
def test_squeeze(device: str, shape: tuple[int, ...], dim: object) -> None:
    torch_fn = (lambda x: x.squeeze()) if dim is None else (lambda x: x.squeeze(dim))
    check_op(device, [shape], torch_fn, lambda x: x.squeeze(dim), **EXACT)


@pytest.mark.parametrize("shape,dim", [((2, 3), 0), ((2, 3), 2), ((2, 3), -1), ((2, 3), -3), ((), 0), ((0, 2), 1)])
def test_unsqueeze(device: str, shape: tuple[int, ...], dim: int) -> None:
    check_op(device, [shape], lambda x: x.unsqueeze(dim), **EXACT)


@pytest.mark.parametrize("dim,sizes", [(1, (3, 4)), (-2, (2, -1)), (0, (1, 2)), (1, (12,)), (2, (1, 5))])
def test_unflatten(device: str, dim: int, sizes: tuple[int, ...]) -> None:
    check_op(device, [(2, 12, 5)], lambda x: x.unflatten(dim, sizes), **EXACT)


def test_squeeze_unsqueeze_errors() -> None:
    t = Tensor.zeros(2, 3)
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2"):
        t.squeeze(2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        t.unsqueeze(3)
    with pytest.raises(RuntimeError, match="don't multiply up"):
        t.unflatten(1, (2, 2))


# ---------------------------------------------------------------------------------------------------------------
# split / chunk


@pytest.mark.parametrize(
    "shape,sizes,dim",
    [((5, 3), 2, 0), ((5, 3), 1, 1), ((5, 3), [1, 4], 0), ((5, 3), [0, 3], -1), ((5, 3), 7, 0), ((0, 3), 2, 0)],
)
def test_split(device: str, shape: tuple[int, ...], sizes: object, dim: int) -> None:
    for i in range(len(torch.zeros(shape).split(sizes, dim))):
        check_op(device, [shape], lambda x: x.split(sizes, dim)[i], **EXACT)  # noqa: B023


@pytest.mark.parametrize("shape,chunks,dim", [((6, 2), 4, 0), ((5, 2), 3, 0), ((2, 7), 2, 1), ((1,), 3, 0)])
def test_chunk(device: str, shape: tuple[int, ...], chunks: int, dim: int) -> None:
    pieces = torch.zeros(shape).chunk(chunks, dim)
    assert len(Tensor.zeros(*shape).chunk(chunks, dim)) == len(pieces)
    for i in range(len(pieces)):
        check_op(device, [shape], lambda x: x.chunk(chunks, dim)[i], **EXACT)  # noqa: B023


def test_chunk_empty_count() -> None:
    assert [t.shape for t in Tensor.zeros(0).chunk(3)] == [tuple(t.shape) for t in torch.zeros(0).chunk(3)]


def test_split_errors() -> None:
    with pytest.raises(RuntimeError, match=r"split_with_sizes expects split_sizes to sum exactly to 5"):
        Tensor.zeros(5).split([2, 2])
    with pytest.raises(RuntimeError, match="chunk expects `chunks` to be greater than 0"):
        Tensor.zeros(5).chunk(0)


# ---------------------------------------------------------------------------------------------------------------
# repeat / repeat_interleave / roll


@pytest.mark.parametrize(
    "shape,reps",
    [
        ((2, 3), (2, 1)),
        ((2, 3), (1, 3, 2)),
        ((3,), (2,)),
        ((), (3,)),
        ((), (2, 3)),
        ((2, 3), (0, 1)),
        ((1, 1), (2, 2)),
    ],
)
def test_repeat(device: str, shape: tuple[int, ...], reps: tuple[int, ...]) -> None:
    check_op(device, [shape], lambda x: x.repeat(*reps), **EXACT)


@pytest.mark.parametrize(
    "shape,repeats,dim",
    [((2, 3), 2, None), ((2, 3), 3, 1), ((2, 3), 1, 0), ((4,), 0, 0), ((), 2, None), ((2, 3), [1, 0, 2], 1),
     ((3,), [2, 2, 1], 0)],
)  # fmt: skip
def test_repeat_interleave(device: str, shape: tuple[int, ...], repeats: object, dim: int | None) -> None:
    torch_reps = torch.tensor(repeats) if isinstance(repeats, list) else repeats
    check_op(device, [shape], lambda x: x.repeat_interleave(torch_reps, dim=dim),
             lambda x: x.repeat_interleave(repeats, dim=dim), **EXACT)  # fmt: skip


def test_repeat_interleave_tensor_repeats(device: str) -> None:
    reps = Tensor([2, 0, 1], device=device)
    check_op(device, [(3, 2)], lambda x: x.repeat_interleave(torch.tensor([2, 0, 1]), dim=0),
             lambda x: x.repeat_interleave(reps, dim=0), **EXACT)  # fmt: skip


@pytest.mark.parametrize(
    "shape,shifts,dims",
    [((5,), 2, 0), ((5,), -7, 0), ((3, 4), 1, None), ((3, 4), (1, -1), (0, 1)), ((3, 4), 5, 1), ((0, 2), 1, 0),
     ((2, 3), 0, 1)],
)  # fmt: skip
def test_roll(device: str, shape: tuple[int, ...], shifts: object, dims: object) -> None:
    check_op(device, [shape], lambda x: torch.roll(x, shifts, dims), lambda x: x.roll(shifts, dims), **EXACT)


def test_repeat_errors() -> None:
    with pytest.raises(RuntimeError, match="Number of dimensions of repeat dims"):
        Tensor.zeros(2, 3).repeat(2)
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        Tensor.zeros(2, 3).roll((1, 2), 0)


# ---------------------------------------------------------------------------------------------------------------
# unfold


@pytest.mark.parametrize(
    "shape,dim,size,step",
    [((7,), 0, 3, 2), ((7,), 0, 3, 1), ((7,), 0, 7, 1), ((7,), 0, 2, 5), ((2, 6, 3), 1, 2, 2), ((2, 6, 3), 0, 1, 1),
     ((2, 6, 3), -1, 2, 1), ((3, 5), 1, 0, 2), ((), 0, 1, 1), ((5, 4), 0, 2, 3)],
)  # fmt: skip
def test_unfold(device: str, shape: tuple[int, ...], dim: int, size: int, step: int) -> None:
    check_op(device, [shape], lambda x: x.unfold(dim, size, step), **EXACT)


def test_unfold_non_contiguous_int(device: str) -> None:
    check_op(device, [(4, 6)], lambda x: x.T.unfold(0, 3, 2), dtype=np.int32, **EXACT)


def test_unfold_errors() -> None:
    with pytest.raises(RuntimeError, match="maximum size for tensor at dimension 1 is 3 but size is 4"):
        Tensor.zeros(2, 3).unfold(1, 4, 1)
    with pytest.raises(RuntimeError, match="step is 0 but must be > 0"):
        Tensor.zeros(2, 3).unfold(1, 2, 0)


# ---------------------------------------------------------------------------------------------------------------
# cat / stack


@pytest.mark.parametrize(
    "shapes,dim",
    [([(2, 3), (1, 3)], 0), ([(2, 3), (2, 1), (2, 4)], 1), ([(2, 3), (2, 3)], -1), ([(2, 0), (2, 3)], 1),
     ([(3,), (0,)], 0), ([(1,), (1,), (1,)], 0), ([(2, 3, 4), (2, 5, 4)], 1), ([(2, 3), (0,)], 0)],
)  # fmt: skip
def test_cat(device: str, shapes: list[tuple[int, ...]], dim: int) -> None:
    check_op(device, shapes, lambda *xs: torch.cat(xs, dim), lambda *xs: Tensor.cat(*xs, dim=dim), **EXACT)


def test_cat_forms_and_non_contiguous(device: str) -> None:
    check_op(device, [(3, 2), (2, 4)], lambda a, b: torch.cat([a.T, b], 1),
             lambda a, b: a.T.cat(b, dim=1), **EXACT)  # fmt: skip
    check_op(device, [(3, 2), (3, 2)], lambda a, b: torch.cat([a, b]), lambda a, b: Tensor.cat([a, b]), **EXACT)


@pytest.mark.parametrize("dtype", [np.int32, np.bool_, np.float32])
def test_cat_dtypes(device: str, dtype: type) -> None:
    check_op(device, [(2, 3), (4, 3)], lambda a, b: torch.cat([a, b]), lambda a, b: a.cat(b), dtype=dtype, **EXACT)


def test_cat_promotes(device: str) -> None:
    a, b = make_inputs([(2, 2)], np.int32)[0], make_inputs([(1, 2)], np.float32)[0]
    c = make_inputs([(1, 2)], np.bool_)[0]
    out = Tensor(a, device=device).cat(Tensor(b, device=device), Tensor(c, device=device))
    ref = torch.cat([torch.tensor(a), torch.tensor(b), torch.tensor(c)])
    assert out.dtype == dtypes.float32
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    assert Tensor([1], device=device).cat(Tensor([True], device=device)).dtype == dtypes.int32


@pytest.mark.parametrize("shape,n,dim", [((2, 3), 2, 0), ((2, 3), 3, 2), ((2, 3), 2, -1), ((), 3, 0), ((0, 2), 2, 1)])
def test_stack(device: str, shape: tuple[int, ...], n: int, dim: int) -> None:
    check_op(device, [shape] * n, lambda *xs: torch.stack(xs, dim), lambda *xs: Tensor.stack(*xs, dim=dim), **EXACT)


def test_stack_int_non_contiguous(device: str) -> None:
    check_op(device, [(3, 2), (2, 3)], lambda a, b: torch.stack([a.T, b], 1),
             lambda a, b: a.T.stack(b, dim=1), dtype=np.int32, **EXACT)  # fmt: skip


def test_cat_large(device: str) -> None:
    check_op(device, [(64, 33), (64, 31), (64, 64)], lambda *xs: torch.cat(xs, 1),
             lambda *xs: Tensor.cat(*xs, dim=1), **EXACT)  # fmt: skip


def test_cat_stack_errors(device: str) -> None:
    a, b = Tensor.zeros(2, 3, device=device), Tensor.zeros(2, 4, device=device)
    with pytest.raises(
        RuntimeError, match=r"Expected size 3 but got size 4 for tensor number 1.*\[2, 3\] and \[2, 4\]"
    ):
        a.cat(b)
    with pytest.raises(RuntimeError, match=r"stack expects each tensor to be equal size, but got \[2, 3\] at entry 0"):
        a.stack(b)
    with pytest.raises(RuntimeError, match="same number of dimensions: got 2 and 1"):
        a.cat(Tensor.zeros(2, device=device))
    with pytest.raises(IndexError, match="Dimension out of range"):
        a.cat(a, dim=2)
    with pytest.raises(RuntimeError, match="zero-dimensional tensor"):
        Tensor(1.0, device=device).cat(Tensor(2.0, device=device))
    other = "CLANG" if device != "CLANG" else "PYTHON"
    from conftest import test_devices

    if other not in test_devices():
        pytest.skip(f"the device mismatch check needs a second device ({other} is not installed)")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a.cat(Tensor.zeros(1, 3, device=other))


def test_pad_of_empty_buffer(device: str) -> None:
    """Reproducer: padding a realized 0-size tensor up to a non-empty one."""
    out = Tensor(np.zeros((2, 0), np.float32), device=device).pad(((0, 0), (0, 3)))
    np.testing.assert_array_equal(out.numpy(), np.zeros((2, 3), np.float32))
