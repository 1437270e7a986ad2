"""Multi-device tensors: `Tensor.shard`, per-shard ops, all-reduce, gather, and how they are scheduled.

Runs on the two reference devices `PYTHON:0` / `PYTHON:1`, and on `CLANG:0` / `CLANG:1` when the CLANG plugin can
open a device (skip reason "no C compiler").
"""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.engine.multi import MultiDeviceError, shard_sizes
from tinycore.engine.realize import run_schedule
from tinycore.engine.realized import buffer_of
from tinycore.engine.schedule_cache import schedule_stats
from tinycore.helpers import GlobalCounters
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops

PY = ("PYTHON:0", "PYTHON:1")


def _data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _ops(items: list) -> list[Ops]:
    return [si.ast.op for si in items]


def _canon(devs: tuple[str, ...]) -> tuple[str, ...]:
    from tinycore.device import Device

    return tuple(Device.canonicalize(d) for d in devs)


# ---------------------------------------------------------------------------------------------------------------
# shard / gather


def test_shard_sizes() -> None:
    assert shard_sizes(8, 2) == [4, 4]
    assert shard_sizes(5, 2) == [3, 2]
    assert shard_sizes(10, 4) == [3, 3, 2, 2]
    with pytest.raises(MultiDeviceError, match="every device needs an element"):
        shard_sizes(1, 2)


@pytest.mark.parametrize("axis", [0, 1, None])
def test_shard_gather_round_trip(devs: tuple[str, str], axis: int | None) -> None:
    a = _data(4, 6)
    t = Tensor(a, device=devs[0]).shard(devs, axis=axis)
    assert t.device == _canon(devs)
    assert t.shape == (4, 6)
    assert t.uop.op is Ops.MULTI and t.uop.arg == axis
    shard_shape = {0: (2, 6), 1: (4, 3), None: (4, 6)}[axis]
    assert [s.shape for s in t.uop.src] == [shard_shape, shard_shape]
    assert [s.device for s in t.uop.src] == list(_canon(devs))
    np.testing.assert_array_equal(t.numpy(), a)
    back = t.to(devs[1])
    assert back.device == _canon(devs)[1]
    np.testing.assert_array_equal(back.numpy(), a)


def test_realize_realizes_every_shard(devs: tuple[str, str]) -> None:
    a = _data(4, 3)
    t = (Tensor(a, device=devs[0]).shard(devs, axis=0) * 3).realize()
    assert t.uop.op is Ops.MULTI
    for shard, dev, rows in zip(t.uop.src, _canon(devs), (a[:2], a[2:])):
        base = shard
        while base.op is Ops.RESHAPE:
            base = base.src[0]
        assert base.op is Ops.BUFFER and base.src[1].arg == dev
        buf = buffer_of(base)
        assert buf.is_allocated()
        np.testing.assert_allclose(buf.numpy().reshape(rows.shape), rows * 3, rtol=1e-6)
    # a realized multi tensor schedules nothing more
    assert t.schedule() == []


def test_uneven_split_round_trip_and_ops(devs: tuple[str, str]) -> None:
    a = _data(5, 3)
    t = Tensor(a, device=devs[0]).shard(devs, axis=0)
    assert [s.shape[0] for s in t.uop.src] == [3, 2]
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_allclose((t + 1).sum(0).numpy(), (a + 1).sum(0), rtol=1e-5)
    np.testing.assert_allclose(t.reshape(15).numpy(), a.reshape(15))


def test_shard_errors() -> None:
    t = Tensor(_data(1, 4), device=PY[0])
    with pytest.raises(MultiDeviceError, match="every device needs an element"):
        t.shard(PY, axis=0)
    with pytest.raises(MultiDeviceError, match="distinct devices"):
        t.shard(("PYTHON:0", "PYTHON:0"), axis=1)
    with pytest.raises(IndexError):
        t.shard(PY, axis=2)


def test_shard_in_place_and_tuple_device_constructor() -> None:
    a = _data(4, 2)
    t = Tensor(a, device=PY[0])
    assert t.shard_(PY, axis=0) is t
    assert t.device == _canon(PY) and t.uop.arg == 0
    np.testing.assert_array_equal(t.numpy(), a)
    r = Tensor([[1.0, 2.0]], device=PY)
    assert r.device == _canon(PY) and r.uop.arg is None
    assert r.tolist() == [[1.0, 2.0]]
    z = Tensor.zeros(4, 2, device=PY) + t
    assert z.uop.arg == 0
    np.testing.assert_array_equal(z.numpy(), a)


def test_reshard() -> None:
    a = _data(4, 6)
    rep = Tensor(a, device=PY[0]).shard(PY).realize()
    GlobalCounters.reset()
    cut = rep.shard(PY, axis=1)  # replicated -> sharded on the same devices: local cuts, no copies
    items = cut.schedule()
    assert Ops.COPY not in _ops(items)
    run_schedule(items)
    np.testing.assert_array_equal(cut.numpy(), a)
    moved = cut.shard(PY, axis=0)  # sharded on another axis: gathered, then split again
    assert moved.uop.arg == 0
    np.testing.assert_array_equal(moved.numpy(), a)
    assert cut.shard(PY, axis=1) is cut
    np.testing.assert_array_equal(cut.to(PY).numpy(), a)


# ---------------------------------------------------------------------------------------------------------------
# elementwise


def test_elementwise_same_sharding_no_copies(devs: tuple[str, str]) -> None:
    a, b = _data(4, 6, seed=1), _data(4, 6, seed=2)
    x = Tensor(a, device=devs[0]).shard(devs, axis=0).realize()
    y = Tensor(b, device=devs[0]).shard(devs, axis=0).realize()
    out = (x * y + 2).relu()
    assert out.device == _canon(devs) and out.uop.arg == 0
    items = out.schedule()
    assert Ops.COPY not in _ops(items)
    assert len(items) == 2  # one fused kernel per device
    assert {si.bufs[0].device for si in items} == set(_canon(devs))
    run_schedule(items)
    np.testing.assert_allclose(out.numpy(), np.maximum(a * b + 2, 0), rtol=1e-6)


def test_elementwise_sharded_with_replicated(devs: tuple[str, str]) -> None:
    a, b = _data(4, 6, seed=3), _data(6, seed=4)
    x = Tensor(a, device=devs[0]).shard(devs, axis=0).realize()
    y = Tensor(b, device=devs[0]).shard(devs).realize()  # replicated, broadcast along the sharded axis
    out = x - y
    assert out.uop.arg == 0
    items = out.schedule()
    assert Ops.COPY not in _ops(items)
    run_schedule(items)
    np.testing.assert_allclose(out.numpy(), a - b, rtol=1e-6)
    np.testing.assert_allclose((y * 2).numpy(), b * 2, rtol=1e-6)  # replicated op replicated


def test_elementwise_mismatch_errors() -> None:
    a = _data(4, 4)
    x0 = Tensor(a, device=PY[0]).shard(PY, axis=0)
    x1 = Tensor(a, device=PY[0]).shard(PY, axis=1)
    with pytest.raises(MultiDeviceError, match="different axes"):
        x0 + x1
    with pytest.raises(RuntimeError, match="same device"):  # the tensor layer checks devices first
        x0 + Tensor(a, device=PY[0]).shard(("PYTHON:1", "PYTHON:0"), axis=0)
    with pytest.raises(RuntimeError, match="same device"):
        x0 + Tensor(a, device=PY[0])


def test_elementwise_different_bounds_error() -> None:
    from tinycore.engine.multi import multi_uop

    a = _data(4, 2)
    x = Tensor(a, device=PY[0]).shard(PY, axis=0)  # shards of 2 and 2 rows
    y = Tensor(multi_uop([Tensor(a[:3], device=PY[0]).uop, Tensor(a[3:], device=PY[1]).uop], 0))  # 3 and 1 rows
    assert y.device == _canon(PY) and y.shape == (4, 2)
    np.testing.assert_array_equal(y.numpy(), a)
    with pytest.raises(MultiDeviceError, match="different shard bounds"):
        x + y


# ---------------------------------------------------------------------------------------------------------------
# reductions


def test_reduce_not_along_sharded_axis_stays_sharded(devs: tuple[str, str]) -> None:
    a = _data(4, 6, seed=5)
    x = Tensor(a, device=devs[0]).shard(devs, axis=0).realize()
    s = x.sum(1)
    assert s.uop.arg == 0 and s.shape == (4,)
    items = s.schedule()
    assert Ops.COPY not in _ops(items)
    run_schedule(items)
    np.testing.assert_allclose(s.numpy(), a.sum(1), rtol=1e-5)
    np.testing.assert_allclose(x.max(1).numpy(), a.max(1))


@pytest.mark.parametrize("op", ["sum", "max"])
def test_reduce_along_sharded_axis_allreduces(devs: tuple[str, str], op: str) -> None:
    a = _data(4, 6, seed=6)
    x = Tensor(a, device=devs[0]).shard(devs, axis=1).realize()
    r = getattr(x, op)(1)
    assert r.device == _canon(devs) and r.uop.arg is None  # replicated result
    items = r.schedule()
    copies = [si for si in items if si.ast.op is Ops.COPY]
    assert len(copies) == 2  # naive all-to-all on two devices: one copy each way
    assert {(si.bufs[0].device, si.bufs[1].device) for si in copies} == {_canon(devs), _canon(devs)[::-1]}
    run_schedule(items)
    want = getattr(a, op)(1)
    for shard in r.uop.src:  # every replica holds the whole, identical, result
        np.testing.assert_allclose(buffer_of(shard).numpy().reshape(4), want, rtol=1e-5)
    np.testing.assert_array_equal(buffer_of(r.uop.src[0]).numpy(), buffer_of(r.uop.src[1]).numpy())
    np.testing.assert_allclose(r.numpy(), want, rtol=1e-5)


def test_full_reduce_and_mean_of_sharded(devs: tuple[str, str]) -> None:
    a = _data(6, 4, seed=7)
    x = Tensor(a, device=devs[0]).shard(devs, axis=0)
    np.testing.assert_allclose(x.sum().item(), a.sum(), rtol=1e-4)
    np.testing.assert_allclose(x.mean(0).numpy(), a.mean(0), rtol=1e-5)
    np.testing.assert_allclose(x.max().item(), a.max())


def test_copies_counted_and_ordered() -> None:
    a = _data(4, 6, seed=8)
    x = Tensor(a, device=PY[0]).shard(PY, axis=1).realize()
    r = (x * 2).sum(1) + 1
    items = r.schedule()
    copy_pos = {id(si.bufs[0]): i for i, si in enumerate(items) if si.ast.op is Ops.COPY}
    assert len(copy_pos) == 2
    for i, si in enumerate(items):  # a kernel reading a copied buffer runs after the copy
        for b in si.inputs:
            if id(b) in copy_pos:
                assert copy_pos[id(b)] < i
    for i, si in enumerate(items):  # a copy runs after the kernel computing its source
        if si.ast.op is Ops.COPY:
            writers = [j for j, o in enumerate(items) if si.bufs[1] in o.outputs]
            assert writers and max(writers) < i
    GlobalCounters.reset()
    run_schedule(items)
    assert GlobalCounters.kernel_count == len(items)  # copies count as kernels
    np.testing.assert_allclose(r.numpy(), (a * 2).sum(1) + 1, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# matmul


def test_matmul_data_parallel_no_communication(devs: tuple[str, str]) -> None:
    a, w = _data(4, 6, seed=9), _data(6, 3, seed=10)
    x = Tensor(a, device=devs[0]).shard(devs, axis=0).realize()
    wt = Tensor(w, device=devs[0]).shard(devs).realize()
    out = x @ wt
    assert out.uop.arg == 0 and out.shape == (4, 3)
    items = out.schedule()
    assert Ops.COPY not in _ops(items)
    run_schedule(items)
    np.testing.assert_allclose(out.numpy(), a @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [6, 5])
def test_matmul_k_sharded_allreduce(devs: tuple[str, str], k: int) -> None:
    a, w = _data(4, k, seed=11), _data(k, 3, seed=12)
    x = Tensor(a, device=devs[0]).shard(devs, axis=1).realize()
    wt = Tensor(w, device=devs[0]).shard(devs, axis=0).realize()
    out = x @ wt
    assert out.uop.arg is None and out.shape == (4, 3)
    items = out.schedule()
    assert sum(1 for si in items if si.ast.op is Ops.COPY) == 2
    run_schedule(items)
    np.testing.assert_allclose(out.numpy(), a @ w, rtol=1e-5, atol=1e-5)


def test_mlp_data_parallel_equals_single_device(devs: tuple[str, str]) -> None:
    x, w1, b1, w2, b2 = _data(8, 5, seed=13), _data(5, 7, seed=14), _data(7, seed=15), _data(7, 3, seed=16), _data(3)

    def forward(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
        return ((x @ w1 + b1).relu() @ w2 + b2).log_softmax(-1)

    single = forward(*(Tensor(v, device=devs[0]) for v in (x, w1, b1, w2, b2))).numpy()
    xs = Tensor(x, device=devs[0]).shard(devs, axis=0)
    params = [Tensor(v, device=devs[0]).shard(devs) for v in (w1, b1, w2, b2)]
    out = forward(xs, *params)
    assert out.device == _canon(devs) and out.uop.arg == 0
    np.testing.assert_allclose(out.numpy(), single, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# movement


def test_movement_keeping_sharded_axis(devs: tuple[str, str]) -> None:
    a = _data(4, 6, seed=17)
    x = Tensor(a, device=devs[0]).shard(devs, axis=0)
    r = x.reshape(2, 12)
    assert r.uop.arg == 0 and [s.shape for s in r.uop.src] == [(1, 12), (1, 12)]
    np.testing.assert_array_equal(r.numpy(), a.reshape(2, 12))
    np.testing.assert_array_equal(x.reshape(24).numpy(), a.reshape(24))
    np.testing.assert_array_equal(x.reshape(4, 2, 3).numpy(), a.reshape(4, 2, 3))
    np.testing.assert_array_equal(x.reshape(1, 4, 6).numpy(), a.reshape(1, 4, 6))
    p = x.permute(1, 0)
    assert p.uop.arg == 1
    np.testing.assert_array_equal(p.numpy(), a.T)
    e = Tensor(a[:, :1], device=devs[0]).shard(devs, axis=0).expand(4, 5)
    np.testing.assert_array_equal(e.numpy(), np.broadcast_to(a[:, :1], (4, 5)))
    np.testing.assert_array_equal(x.pad(((0, 0), (1, 2))).numpy(), np.pad(a, ((0, 0), (1, 2))))
    np.testing.assert_array_equal(x.shrink((None, (1, 4))).numpy(), a[:, 1:4])
    np.testing.assert_array_equal(x.flip(1).numpy(), a[:, ::-1])


def test_shrink_within_one_shard(devs: tuple[str, str]) -> None:
    a = _data(4, 6, seed=18)
    x = Tensor(a, device=devs[0]).shard(devs, axis=0)
    part = x.shrink(((2, 4), (0, 3)))
    assert part.device == _canon(devs)[1]  # lives on the second device only: a single-device tensor
    np.testing.assert_array_equal(part.numpy(), a[2:4, :3])
    np.testing.assert_array_equal(x[3].numpy(), a[3])


def test_movement_errors() -> None:
    x = Tensor(_data(4, 6), device=PY[0]).shard(PY, axis=0)
    with pytest.raises(MultiDeviceError, match="spans several shards"):
        x.shrink(((1, 3), None))
    with pytest.raises(MultiDeviceError, match="cuts through shard boundaries"):
        x.reshape(3, 8)
    with pytest.raises(MultiDeviceError, match="pad the sharded axis"):
        x.pad(((1, 0), (0, 0)))
    with pytest.raises(MultiDeviceError, match="flip the sharded axis"):
        x.flip(0)


# ---------------------------------------------------------------------------------------------------------------
# schedule cache, assign


def test_repeated_sharded_computation_hits_schedule_cache() -> None:
    def step(seed: int) -> np.ndarray:
        x = Tensor(_data(4, 6, seed=seed), device=PY[0]).shard(PY, axis=1).realize()
        w = Tensor(_data(6, 2, seed=seed + 1), device=PY[0]).shard(PY, axis=0).realize()
        return (x @ w).relu().numpy()

    step(20)
    hits = schedule_stats.hits
    misses = schedule_stats.misses
    got = step(30)
    assert schedule_stats.hits > hits
    assert schedule_stats.misses == misses  # nothing scheduled from scratch the second time
    want = np.maximum(_data(4, 6, seed=30) @ _data(6, 2, seed=31), 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_assign_into_sharded_tensor() -> None:
    a = _data(4, 2, seed=21)
    x = Tensor(a, device=PY[0]).shard(PY, axis=0).realize()
    bufs = [buffer_of(s) for s in x.uop.src]
    x.assign(x * 2).realize()
    assert [buffer_of(s) for s in x.uop.src] == bufs  # written in place, shard by shard
    np.testing.assert_allclose(x.numpy(), a * 2, rtol=1e-6)
    lazy = Tensor(a, device=PY[0]).shard(PY, axis=0) + 0
    lazy.assign(Tensor(a, device=PY[0]).shard(PY))  # no buffers yet: takes the value, resharded like the target
    assert lazy.uop.arg == 0
    np.testing.assert_array_equal(lazy.numpy(), a)
