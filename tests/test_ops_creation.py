"""Creation and random tensors (CreationMixin and the core `zeros/ones/full/arange/rand`), on every device.

Deterministic creators are compared with PyTorch; random ones are checked for device independence (same seed,
same numbers on PYTHON and CLANG) and statistical sanity on 10**5 samples (bounds at > 5 standard errors).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import test_devices
from op_helpers import check_op, torch

from tinycore.dtype import dtypes
from tinycore.tensor import Tensor

HAS_GRAD = hasattr(Tensor, "backward")
N = 100_000


@pytest.mark.skipif("CLANG" not in test_devices(), reason="needs the CLANG device (tinycore-clang)")
def test_repro_clang_vector_threefry() -> None:
    """Regression: an upcast (vectorized) THREEFRY on CLANG is split into lanes and decomposed."""
    Tensor.manual_seed(0)
    assert Tensor.rand(64, device="CLANG").numpy().shape == (64,)


def test_like(device: str) -> None:
    t = Tensor(np.ones((2, 3), dtype=np.int32), device=device)
    for fn, want in ((Tensor.zeros_like, 0), (Tensor.ones_like, 1)):
        out = fn(t)
        assert out.shape == (2, 3) and out.dtype == dtypes.int32 and out.device == device
        assert (out.numpy() == want).all()
    out = t.full_like(7.5, dtype=dtypes.float32)
    assert out.dtype == dtypes.float32 and (out.numpy() == 7.5).all()
    assert t.empty_like().shape == (2, 3)
    r = t.rand_like()
    assert r.dtype == dtypes.float32 and r.shape == (2, 3) and ((r.numpy() >= 0) & (r.numpy() < 1)).all()
    assert t.randn_like(dtype=dtypes.float32).shape == (2, 3)


@pytest.mark.parametrize(
    "args,kwargs",
    [((5,), {}), ((2, 9), {}), ((1, 2, 0.25), {}), ((10, 0, -3), {}), ((0.5, 3.1, 0.7), {}), ((5, 5), {}),
     ((-3, 4), {"dtype": "float32"}), ((0, 10, 3), {"dtype": "int32"})],
    ids=str,
)  # fmt: skip
def test_arange(device: str, args, kwargs) -> None:
    ours = Tensor.arange(*args, device=device, **{k: getattr(dtypes, v) for k, v in kwargs.items()})
    ref = torch.arange(*args, **{k: getattr(torch, v) for k, v in kwargs.items()})
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), atol=1e-6, rtol=1e-6)
    assert ours.shape == tuple(ref.shape)
    assert dtypes.is_float(ours.dtype) == ref.dtype.is_floating_point


@pytest.mark.parametrize("start,stop,steps", [(0, 1, 5), (-2.5, 7, 11), (3, -3, 4), (1, 1, 1), (0, 5, 0), (2, 9, 2)])
def test_linspace(device: str, start, stop, steps) -> None:
    ours = Tensor.linspace(start, stop, steps, device=device)
    np.testing.assert_allclose(ours.numpy(), torch.linspace(start, stop, steps).numpy(), atol=1e-6, rtol=1e-6)
    ints = Tensor.linspace(start, stop, steps, device=device, dtype=dtypes.int32)
    np.testing.assert_array_equal(ints.numpy(), torch.linspace(start, stop, steps, dtype=torch.int32).numpy())


@pytest.mark.parametrize("n,m", [(3, None), (2, 5), (4, 1), (0, 3), (1, None)])
def test_eye(device: str, n: int, m) -> None:
    ours = Tensor.eye(n, m, device=device)
    ref = torch.eye(n, m if m is not None else n)
    assert ours.shape == tuple(ref.shape) and ours.dtype == dtypes.float32
    np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    assert Tensor.eye(2, device=device, dtype=dtypes.bool).numpy().tolist() == [[True, False], [False, True]]


@pytest.mark.parametrize("diagonal", [0, 1, -1, 5])
@pytest.mark.parametrize("name", ["triu", "tril"])
def test_triu_tril(device: str, name: str, diagonal: int) -> None:
    check_op(device, [(4, 5)], lambda t: getattr(torch, name)(t, diagonal), lambda t: getattr(t, name)(diagonal),
             atol=0, rtol=0, forward_only=not HAS_GRAD)  # fmt: skip
    check_op(device, [(2, 3, 3)], lambda t: getattr(torch, name)(t, diagonal), lambda t: getattr(t, name)(diagonal),
             dtype=np.int32, low=-5, high=5)  # fmt: skip
    check_op(device, [(5, 4)], lambda t: getattr(torch, name)(t.T, diagonal), lambda t: getattr(t.T, name)(diagonal),
             atol=0, rtol=0, forward_only=not HAS_GRAD)  # fmt: skip
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        getattr(Tensor([1.0], device=device), name)()


# ----- random: device independence


RANDOMS = {
    "rand": lambda d: Tensor.rand(3, 5, device=d),
    "randn": lambda d: Tensor.randn(3, 5, device=d),
    "randint": lambda d: Tensor.randint(3, 5, low=-4, high=9, device=d),
    "normal": lambda d: Tensor.normal(3, 5, mean=2.0, std=0.5, device=d),
    "uniform": lambda d: Tensor.uniform(3, 5, low=-2.0, high=3.0, device=d),
    "kaiming_normal": lambda d: Tensor.kaiming_normal(3, 5, device=d),
    "randperm": lambda d: Tensor.randperm(17, device=d),
    "dropout": lambda d: _train_dropout(Tensor.ones(4, 6, device=d)),
    "multinomial": lambda d: Tensor([[0.1, 0.5, 0.4], [1.0, 0.0, 2.0]], device=d).multinomial(2),
}


def _train_dropout(t: Tensor) -> Tensor:
    with Tensor.train():
        return t.dropout(0.3)


@pytest.mark.skipif(len(test_devices()) < 2, reason="needs two devices (install tinycore-clang and a C compiler)")
@pytest.mark.parametrize("name", sorted(RANDOMS))
def test_same_stream_on_every_device(name: str) -> None:
    """The same seed and call sequence give the same numbers on every installed device: bit-identical random bits,
    and within a few float32 ulps after the Box-Muller transform (log, cos and sqrt are each device's own: numpy's
    differ between AVX2 and AVX-512 hosts by an ulp)."""
    outs = []
    for dev in test_devices():
        Tensor.manual_seed(1234)
        outs.append(RANDOMS[name](dev).numpy())
    for other in outs[1:]:
        if name in _TRANSCENDENTAL_RANDOMS:
            np.testing.assert_allclose(other, outs[0], rtol=5e-7, atol=1e-7)
        else:
            np.testing.assert_array_equal(other, outs[0])


_TRANSCENDENTAL_RANDOMS = {"randn", "normal", "kaiming_normal"}


def test_seed_reproducible_and_advancing(device: str) -> None:
    Tensor.manual_seed(7)
    a, b = Tensor.rand(50, device=device).numpy(), Tensor.rand(50, device=device).numpy()
    Tensor.manual_seed(7)
    c = Tensor.rand(50, device=device).numpy()
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b)
    Tensor.manual_seed(8)
    assert not np.array_equal(Tensor.rand(50, device=device).numpy(), a)


# ----- random: statistics (10**5 samples; bounds are > 5 standard errors wide)


def _stats(t: Tensor) -> tuple[float, float, np.ndarray]:
    x = t.numpy().astype(np.float64).reshape(-1)
    return float(x.mean()), float(x.std()), x


def test_rand_uniform_stats(device: str) -> None:
    Tensor.manual_seed(0)
    mean, std, x = _stats(Tensor.rand(N, device=device))
    assert 0 <= x.min() and x.max() < 1
    assert abs(mean - 0.5) < 0.005 and abs(std - math.sqrt(1 / 12)) < 0.005
    assert np.histogram(x, bins=10, range=(0, 1))[0].min() > 0.09 * N
    mean, std, x = _stats(Tensor.uniform(N, low=-2.0, high=4.0, device=device))
    assert -2 <= x.min() and x.max() < 4 and abs(mean - 1) < 0.03 and abs(std - math.sqrt(3)) < 0.03


def test_randn_normal_stats(device: str) -> None:
    Tensor.manual_seed(1)
    mean, std, x = _stats(Tensor.randn(N, device=device))
    assert abs(mean) < 0.02 and abs(std - 1) < 0.02
    assert abs((np.abs(x) < 1).mean() - 0.6827) < 0.01 and np.isfinite(x).all()
    mean, std, _ = _stats(Tensor.normal(N, mean=3.0, std=2.0, device=device))
    assert abs(mean - 3) < 0.04 and abs(std - 2) < 0.04
    mean, std, _ = _stats(Tensor.kaiming_normal(N // 100, 100, device=device))
    assert abs(mean) < 0.004 and abs(std - math.sqrt(2 / (1 + 0.01**2)) / 10) < 0.004


def test_initializer_bounds(device: str) -> None:
    Tensor.manual_seed(2)
    for t, bound in (
        (Tensor.scaled_uniform(100, 1000, device=device), 1 / math.sqrt(100 * 1000)),
        (Tensor.glorot_uniform(100, 1000, device=device), math.sqrt(6 / 1100)),
        (Tensor.kaiming_uniform(100, 1000, device=device), math.sqrt(3) * math.sqrt(2 / (1 + 1e-4)) / math.sqrt(1000)),
    ):
        _, std, x = _stats(t)
        assert t.shape == (100, 1000) and np.abs(x).max() <= bound
        assert abs(std - bound / math.sqrt(3)) < 0.01 * bound


def test_randint(device: str) -> None:
    Tensor.manual_seed(3)
    t = Tensor.randint(N, low=-3, high=4, device=device)
    x = t.numpy()
    assert t.dtype == dtypes.int32 and x.min() == -3 and x.max() == 3
    counts = np.bincount(x + 3)
    assert (np.abs(counts / N - 1 / 7) < 0.006).all()
    with pytest.raises(RuntimeError, match="from"):
        Tensor.randint(3, low=5, high=5, device=device)


def test_randperm(device: str) -> None:
    Tensor.manual_seed(4)
    p = Tensor.randperm(100, device=device)
    assert p.dtype == dtypes.int32 and sorted(p.tolist()) == list(range(100)) and p.tolist() != list(range(100))
    assert Tensor.randperm(0, device=device).shape == (0,)
    firsts = [Tensor.randperm(4, device=device).tolist()[0] for _ in range(40)]
    assert len(set(firsts)) == 4


def test_multinomial(device: str) -> None:
    Tensor.manual_seed(5)
    w = Tensor([1.0, 0.0, 3.0, 6.0], device=device)
    s = w.multinomial(20_000, replacement=True).numpy()
    assert s.shape == (20_000,) and s.dtype == np.int32
    freq = np.bincount(s, minlength=4) / 20_000
    np.testing.assert_allclose(freq, [0.1, 0.0, 0.3, 0.6], atol=0.015)
    draws = Tensor([[5.0, 1.0, 0.0, 2.0]] * 2000, device=device).multinomial(3).numpy()
    assert draws.shape == (2000, 3) and (np.sort(draws, 1) == np.sort(draws, 1)).all()
    assert all(len(set(r)) == 3 and 2 not in r for r in draws.tolist())
    first = np.bincount(draws[:, 0], minlength=4) / 2000
    np.testing.assert_allclose(first, [5 / 8, 1 / 8, 0, 2 / 8], atol=0.04)
    with pytest.raises(RuntimeError, match="without replacement"):
        w.multinomial(5)


def test_dropout_and_train_flag(device: str) -> None:
    x = Tensor.ones(N, device=device)
    assert Tensor.training is False
    assert x.dropout(0.5) is x
    with Tensor.train():
        assert Tensor.training is True
        y = x.dropout(0.25).numpy()
        with Tensor.test():
            assert Tensor.training is False
        zero = x.dropout(1.0).numpy()
    assert Tensor.training is False
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01 and np.allclose(y[kept], 1 / 0.75)
    assert (zero == 0).all()

    @Tensor.train()
    def inside() -> bool:
        return Tensor.training

    assert inside() is True and Tensor.training is False
    with pytest.raises(ValueError, match="between 0 and 1"):
        x.dropout(1.5)
