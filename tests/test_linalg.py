"""`Tensor.qr` and `Tensor.svd` against `torch.linalg.qr` / `torch.linalg.svd`: values, shapes, LAPACK's sign
convention for QR, orthogonality, reconstruction, batches, gradients and TinyJit capture (float32)."""

from __future__ import annotations

import numpy as np
import pytest
from op_helpers import torch

from tinycore import Tensor, TinyJit
from tinycore.dtype import dtypes

SHAPES = [(1, 1), (3, 3), (4, 4), (5, 3), (3, 5), (2, 3, 4), (2, 1, 4, 2)]


def _rand(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _eye_like(n: int, batch: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(np.eye(n, dtype=np.float32), (*batch, n, n))


def _t(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_qr_matches_torch(device: str, shape: tuple[int, ...]) -> None:
    """Q (m x m) and R (m x n) equal torch's mode="complete" result: LAPACK's Householder signs."""
    a = _rand(shape)
    q, r = Tensor(a, device=device).qr()
    Tensor.realize(q, r)
    qn, rn = q.numpy(), r.numpy()
    tq, tr = torch.linalg.qr(torch.tensor(a), mode="complete")
    *batch, m, n = shape
    assert qn.shape == (*batch, m, m) and rn.shape == (*batch, m, n)
    np.testing.assert_allclose(qn, tq.numpy(), atol=2e-6, rtol=0)
    np.testing.assert_allclose(rn, tr.numpy(), atol=5e-6, rtol=0)
    np.testing.assert_allclose(qn @ rn, a, atol=5e-6, rtol=0)
    np.testing.assert_allclose(_t(qn) @ qn, _eye_like(m, tuple(batch)), atol=2e-6, rtol=0)
    assert (np.tril(rn, -1) == 0).all()


@pytest.mark.parametrize(
    "a",
    [
        [[-2.0, 1.0], [0.0, 3.0]],  # already triangular: no reflection, the negative diagonal stays
        [[0.0, 1.0, 2.0], [0.0, 3.0, 1.0], [0.0, -1.0, 4.0]],  # a zero column
        [[0.0, 1.0], [2.0, 3.0]],  # alpha == 0 below a nonzero entry: sign(0) is +1 (beta negative)
        [[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]],  # rank deficient
    ],
    ids=["triangular", "zero-column", "zero-alpha", "rank-1"],
)
def test_qr_lapack_edge_cases(a: list[list[float]]) -> None:
    """Where LAPACK's conventions decide the signs (tau = 0, sign(0) = +1), the result is torch's."""
    arr = np.array(a, dtype=np.float32)
    q, r = Tensor(arr, device="PYTHON").qr()
    tq, tr = torch.linalg.qr(torch.tensor(arr), mode="complete")
    np.testing.assert_allclose(q.numpy(), tq.numpy(), atol=2e-6, rtol=0)
    np.testing.assert_allclose(r.numpy(), tr.numpy(), atol=5e-6, rtol=0)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd_matches_torch(device: str, shape: tuple[int, ...], full_matrices: bool) -> None:
    """Singular values equal torch's (descending); U and Vh have torch's shapes, are orthonormal and rebuild A."""
    a = _rand(shape, seed=1)
    u, s, vh = Tensor(a, device=device).svd(full_matrices=full_matrices)
    Tensor.realize(u, s, vh)
    un, sn, vhn = u.numpy(), s.numpy(), vh.numpy()
    tu, ts, tvh = torch.linalg.svd(torch.tensor(a), full_matrices=full_matrices)
    assert (un.shape, sn.shape, vhn.shape) == (tuple(tu.shape), tuple(ts.shape), tuple(tvh.shape))
    np.testing.assert_allclose(sn, ts.numpy(), atol=2e-6, rtol=1e-5)
    assert (np.diff(sn, axis=-1) <= 0).all()
    *batch, m, n = shape
    k = min(m, n)
    np.testing.assert_allclose((un[..., :, :k] * sn[..., None, :]) @ vhn[..., :k, :], a, atol=5e-6, rtol=0)
    np.testing.assert_allclose(_t(un) @ un, _eye_like(un.shape[-1], tuple(batch)), atol=3e-6, rtol=0)
    np.testing.assert_allclose(vhn @ _t(vhn), _eye_like(vhn.shape[-2], tuple(batch)), atol=3e-6, rtol=0)
    # each singular pair is torch's up to one common sign
    sign = np.sign((un[..., :, :k] * tu.numpy()[..., :, :k]).sum(-2))
    np.testing.assert_allclose(un[..., :, :k] * sign[..., None, :], tu.numpy()[..., :, :k], atol=2e-5, rtol=0)
    np.testing.assert_allclose(vhn[..., :k, :] * sign[..., :, None], tvh.numpy()[..., :k, :], atol=2e-5, rtol=0)


@pytest.mark.parametrize("n", [8, 16])
def test_svd_ill_conditioned(n: int) -> None:
    """A condition number of 1e4 still converges to float32 accuracy in the fixed number of sweeps."""
    rng = np.random.default_rng(2)
    left, _ = np.linalg.qr(rng.standard_normal((n, n)))
    right, _ = np.linalg.qr(rng.standard_normal((n, n)))
    a = ((left * np.logspace(0, -4, n)) @ right.T).astype(np.float32)
    u, s, vh = Tensor(a, device="CLANG" if n > 8 else "PYTHON").svd()
    Tensor.realize(u, s, vh)
    un, sn, vhn = u.numpy(), s.numpy(), vh.numpy()
    ref = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    assert np.abs(sn - ref).max() < 1e-5 * ref[0]
    np.testing.assert_allclose(un.T @ un, np.eye(n), atol=5e-6, rtol=0)
    np.testing.assert_allclose(vhn @ vhn.T, np.eye(n), atol=1e-5, rtol=0)
    np.testing.assert_allclose((un * sn) @ vhn, a, atol=3e-6, rtol=0)


def test_qr_backward_matches_torch(device: str) -> None:
    """Gradients flow through the reflections and equal torch's (square input)."""
    a, w1, w2 = _rand((3, 3), 3), _rand((3, 3), 4), _rand((3, 3), 5)
    x = Tensor(a, device=device, requires_grad=True)
    q, r = x.qr()
    ((q * Tensor(w1, device=device)).sum() + (r * Tensor(w2, device=device)).sum()).backward()
    tx = torch.tensor(a, requires_grad=True)
    tq, tr = torch.linalg.qr(tx, mode="complete")
    ((tq * torch.tensor(w1)).sum() + (tr * torch.tensor(w2)).sum()).backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 3)], ids=str)
def test_svd_backward_matches_torch(shape: tuple[int, ...]) -> None:
    """Gradients of the singular values, through the sweeps, equal torch's (distinct singular values); a loss on
    U and Vh backpropagates too (finite values)."""
    a = _rand(shape, 6)
    k = min(shape)
    w = np.arange(k, 0, -1).astype(np.float32)
    x = Tensor(a, device="CLANG", requires_grad=True)
    _, s, _ = x.svd()
    (s * Tensor(w, device="CLANG")).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    (torch.linalg.svdvals(tx) * torch.tensor(w)).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=2e-5, rtol=1e-4)
    y = Tensor(a, device="CLANG", requires_grad=True)
    u, s, vh = y.svd(full_matrices=False)
    ((u * u).sum() + (vh * 2).sum() + s.sum()).backward()
    assert y.grad is not None and np.isfinite(y.grad.numpy()).all()


def test_svd_and_qr_in_tinyjit() -> None:
    """No data-dependent loop: a TinyJit captures QR and SVD once and replays them on new inputs."""

    @TinyJit
    def f(a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, r = a.qr()
        return q.realize(), r.realize(), a.svd()[1].realize()

    for i in range(4):
        a = _rand((4, 3), 10 + i)
        q, r, s = f(Tensor(a, device="CLANG"))
        tq, tr = torch.linalg.qr(torch.tensor(a), mode="complete")
        np.testing.assert_allclose(q.numpy(), tq.numpy(), atol=2e-6, rtol=0)
        np.testing.assert_allclose(r.numpy(), tr.numpy(), atol=5e-6, rtol=0)
        np.testing.assert_allclose(s.numpy(), torch.linalg.svdvals(torch.tensor(a)).numpy(), atol=2e-6, rtol=1e-5)
    assert f.captured is not None


def test_kernel_counts_stay_linear() -> None:
    """QR takes a few kernels per column, SVD a few per Jacobi round (the rounds are shape-determined)."""
    from tinycore.frontend.linalg import jacobi_sweeps
    from tinycore.helpers import GlobalCounters

    a = Tensor(_rand((6, 6), 7), device="CLANG").realize()
    GlobalCounters.reset()
    Tensor.realize(*a.qr())
    assert GlobalCounters.kernel_count <= 8 * 6 + 4
    GlobalCounters.reset()
    Tensor.realize(*a.svd())
    assert GlobalCounters.kernel_count <= 6 * jacobi_sweeps(6) * 5 + 8 * 6 + 20


def test_errors_match_torch() -> None:
    """A vector or an integer tensor raises torch's RuntimeError."""
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        Tensor([1.0, 2.0]).qr()
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        Tensor([1.0, 2.0]).svd()
    with pytest.raises(RuntimeError, match="floating point"):
        Tensor([[1, 2], [3, 4]], dtype=dtypes.int32).svd()
