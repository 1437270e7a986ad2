"""TinyJit with sharded inputs: capture and replay over `Tensor.shard` values, per-device graph batching, errors
and pickling. Runs on PYTHON:0/PYTHON:1, and on CLANG:0/CLANG:1 when the CLANG plugin can open a device."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tinycore import Tensor, TinyJit
from tinycore.device import Device
from tinycore.engine.exec_item import CompiledRunner
from tinycore.engine.jit import jit_stats
from tinycore.errors import JitError


def _open_or_skip(devices: tuple[str, str]) -> tuple[str, str]:
    try:
        for name in devices:
            Device[name]
    except Exception as error:  # noqa: BLE001 - any failure to open means "not here"
        pytest.skip(f"no C compiler ({devices[0]} unavailable: {type(error).__name__})")
    return devices


@pytest.fixture(params=[("PYTHON", "PYTHON:1"), ("CLANG", "CLANG:1")], ids=["python", "clang"])  # NAME:0 is NAME
def devs(request: pytest.FixtureRequest) -> tuple[str, str]:
    return _open_or_skip(request.param)


def data(*shape: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_sharded_inputs_capture_and_replay(devs: tuple[str, str]) -> None:
    wn = data(6, 3, seed=50)
    w = Tensor(wn).shard(devs, axis=None).realize()  # replicated state read by the program

    @TinyJit
    def f(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        h = (a * 2 + b).relu()
        return h, (h @ w).sum(0), h.sum(1)  # sharded, all-reduced (replicated), sharded

    captures = jit_stats.captures
    for i in range(5):
        an, bn = data(4, 6, seed=i), data(4, 6, seed=10 + i)
        h, total, rows = f(Tensor(an).shard(devs, axis=0), Tensor(bn).shard(devs, axis=0))
        hn = np.maximum(an * 2 + bn, 0)
        assert h.device == total.device == rows.device == devs
        np.testing.assert_allclose(h.numpy(), hn, rtol=1e-6)
        np.testing.assert_allclose(total.numpy(), (hn @ wn).sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(rows.numpy(), hn.sum(1), rtol=1e-5, atol=1e-6)
    assert jit_stats.captures == captures + 1
    captured = f.captured
    assert captured is not None
    assert [spec.device for spec in captured.specs] == [*devs, *devs]  # one input per shard
    assert {it.runner.device for it in captured.items if isinstance(it.runner, CompiledRunner)} == set(devs)


def test_same_sharded_input_replays_see_new_contents(devs: tuple[str, str]) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a * 3

    an = data(4, 2, seed=1)
    a = Tensor(an).shard(devs, axis=0).realize()
    for _ in range(4):  # the same argument each call: the replay fast path
        np.testing.assert_allclose(f(a).numpy(), an * 3, rtol=1e-6)


def test_sharded_kernels_batch_per_device(devs: tuple[str, str]) -> None:
    if any(Device[name].graph is None for name in devs):
        pytest.skip(f"{devs[0]} has no graph runner")

    @TinyJit
    def f(a: Tensor) -> Tensor:
        for _ in range(4):  # each realize schedules one kernel per device: the capture alternates devices
            a = (a * 1.5 + 1).contiguous().realize()
        return a

    for i in range(3):
        an = data(8, 4, seed=i)
        expected = an.astype(np.float64)
        for _ in range(4):
            expected = expected * 1.5 + 1
        np.testing.assert_allclose(f(Tensor(an).shard(devs, axis=0)).numpy(), expected, rtol=1e-5)
    captured = f.captured
    assert captured is not None
    # one graph per device, each replaying that device's four kernels
    assert sorted((g.device, g.kernel_count) for g in captured.graphs) == sorted((d, 4) for d in devs)
    devices = [it.runner.device for it in captured.items]
    assert devices == sorted(devices, key=devices.index)  # grouped: each device's kernels are contiguous


def test_sharded_input_view_as_output(devs: tuple[str, str]) -> None:
    @TinyJit
    def f(a: Tensor) -> tuple[Tensor, Tensor]:
        return a.reshape(4, 2, 2), a + 1

    for i in range(4):
        an = data(4, 4, seed=i)
        view, plus = f(Tensor(an).shard(devs, axis=0))
        np.testing.assert_allclose(view.numpy(), an.reshape(4, 2, 2))
        np.testing.assert_allclose(plus.numpy(), an + 1, rtol=1e-6)


def test_changed_sharding_is_an_error(devs: tuple[str, str]) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a * 2

    for i in range(2):
        f(Tensor(data(4, 4, seed=i)).shard(devs, axis=0))
    with pytest.raises(JitError, match=r"argument 0\[shard 0\] changed shape"):
        f(Tensor(data(4, 4, seed=9)).shard(devs, axis=1))
    with pytest.raises(JitError, match=r"argument 0\[shard 0\] changed .*shard.*replicated"):
        f(Tensor(data(2, 4, seed=9)).shard(devs, axis=None))
    with pytest.raises(JitError, match="tensor input"):
        f(Tensor(data(4, 4, seed=9), device=devs[0]))  # no longer sharded: one input instead of two
    np.testing.assert_allclose(f(Tensor(data(4, 4, seed=3)).shard(devs, axis=0)).numpy(), data(4, 4, seed=3) * 2)


def test_sharded_captured_jit_pickles(devs: tuple[str, str]) -> None:
    w = Tensor(data(4, seed=7)).shard(devs, axis=None).realize()

    @TinyJit
    def f(a: Tensor) -> Tensor:
        return (a * w).sum(1)

    for i in range(2):
        f(Tensor(data(6, 4, seed=i)).shard(devs, axis=0))
    g = TinyJit(captured=pickle.loads(pickle.dumps(f.captured)))
    an = data(6, 4, seed=5)
    out = g(Tensor(an).shard(devs, axis=0))
    assert out.device == devs
    np.testing.assert_allclose(out.numpy(), (an * data(4, seed=7)).sum(1), rtol=1e-5, atol=1e-6)
