"""The memory planner: lifetimes, arena placement, the 10-layer MLP bound, the Buffer-level planner for TinyJit."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tinycore.device import Buffer
from tinycore.dtype import dtypes
from tinycore.engine import memory
from tinycore.engine.memory import ALIGNMENT, lower_bound, memory_planner, plan_lifetimes
from tinycore.engine.realized import buffer_of
from tinycore.engine.schedule import ScheduleItem
from tinycore.tensor import Tensor

pytestmark = pytest.mark.usefixtures("python_default_device")


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_plan_never_overlaps_live_buffers_and_respects_the_bound() -> None:
    rng = random.Random(0)
    for _ in range(50):
        bufs = []
        for _ in range(rng.randint(1, 25)):
            first = rng.randint(0, 20)
            bufs.append((rng.randint(1, 5000), first, first + rng.randint(0, 6)))
        plan = plan_lifetimes(bufs)
        assert all(off % ALIGNMENT == 0 for off in plan.offsets)
        spans = [(off, off + n) for off, (n, _, _) in zip(plan.offsets, bufs)]
        for i in range(len(bufs)):
            assert spans[i][1] <= plan.total
            for j in range(i):
                live_together = bufs[i][1] <= bufs[j][2] and bufs[j][1] <= bufs[i][2]
                if live_together:
                    assert not _overlap(spans[i], spans[j]), f"{bufs[i]} and {bufs[j]} share memory while live"
        assert plan.total >= lower_bound(bufs)


def test_disjoint_lifetimes_share_and_overlapping_do_not() -> None:
    plan = plan_lifetimes([(1000, 0, 0), (1000, 1, 1), (1000, 2, 2)])
    assert plan.offsets == [0, 0, 0] and plan.total == 1024
    plan = plan_lifetimes([(1000, 0, 2), (1000, 1, 1)])
    assert plan.offsets[0] != plan.offsets[1] and plan.total == 2048


def test_lower_bound() -> None:
    assert lower_bound([]) == 0
    assert lower_bound([(10, 0, 1), (20, 1, 2), (5, 2, 2)]) == 30


def _internal_lifetimes(items: list[ScheduleItem], external: set[int]) -> dict[int, tuple[Buffer, int, int]]:
    """Buffers of `items` that are not external (inputs/outputs): {id: (buffer, first step, last step)}."""
    spans: dict[int, list[Any]] = {}
    for step, si in enumerate(items):
        for b in si.bufs:
            if id(b) in external:
                continue
            if id(b) not in spans:
                spans[id(b)] = [b, step, step]
            spans[id(b)][2] = step
    return {k: (v[0], v[1], v[2]) for k, v in spans.items()}


def test_ten_layer_mlp_forward_peak_memory_is_near_the_liveness_bound() -> None:
    widths = [96, 256, 64, 512, 128, 384, 32, 448, 160, 224, 10]
    rng = np.random.default_rng(0)
    weights = [
        (Tensor(rng.standard_normal((i, o)).astype(np.float32)), Tensor(rng.standard_normal(o).astype(np.float32)))
        for i, o in zip(widths[:-1], widths[1:])
    ]
    x_in = Tensor(rng.standard_normal((8, widths[0])).astype(np.float32))
    x = x_in
    for w, b in weights:
        x = (x @ w + b).relu()
    out = x
    items = out.schedule()
    assert len(items) == 10
    external = {id(buffer_of(t.uop)) for wb in weights for t in wb} | {id(buffer_of(x_in.uop))}
    external.add(id(buffer_of(out.uop)))
    spans = _internal_lifetimes(items, external)
    assert len(spans) == 9  # the hidden activations
    bound = lower_bound([(b.nbytes, f, l) for b, f, l in spans.values()])
    arenas = {id(b.base): b.base for b, _, _ in spans.values()}
    assert all(b.base is not b for b, _, _ in spans.values()), "internal buffers are views of an arena"
    peak = sum(a.nbytes for a in arenas.values())
    assert bound <= peak <= 1.1 * bound, f"arena {peak} bytes vs liveness bound {bound}"
    # buffers live at the same step never overlap inside the arena
    entries = list(spans.values())
    for i, (bi, fi, li) in enumerate(entries):
        for bj, fj, lj in entries[:i]:
            if fi <= lj and fj <= li and bi.base is bj.base:
                assert not _overlap((bi.offset, bi.offset + bi.nbytes), (bj.offset, bj.offset + bj.nbytes))


def test_planned_schedule_computes_the_right_values() -> None:
    ref = _load_ref()
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    ws = [rng.standard_normal((16, 16)).astype(np.float32) for _ in range(6)]
    x_np = rng.standard_normal((4, 16)).astype(np.float32)
    with ref.use_reference_kernels():
        x = Tensor(x_np)
        for w in ws:
            x = (x @ Tensor(w)).relu()
        got = x.numpy()
    expected = torch.tensor(x_np)
    for w in ws:
        expected = torch.relu(expected @ torch.tensor(w))
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-4)


def _load_ref() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "tinycore_test_schedule_ref_mem", Path(__file__).with_name("test_schedule_ref.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_memory_planner_on_buffers() -> None:
    inp, out = Buffer("PYTHON", 64, dtypes.float32), Buffer("PYTHON", 64, dtypes.float32)
    t1, t2, t3 = (Buffer("PYTHON", 64, dtypes.float32) for _ in range(3))
    held = Buffer("PYTHON", 64, dtypes.float32).ensure_allocated()  # may hold data: never planned
    steps = [[t1, inp], [t2, t1], [t3, t2, held], [out, t3]]
    mapping = memory_planner(steps, keep=[inp, out])
    assert set(mapping) == {t1, t2, t3}
    assert all(m.base is mapping[t1].base and m.base is not m for m in mapping.values())
    assert mapping[t1].offset == mapping[t3].offset != mapping[t2].offset
    assert mapping[t1].base.nbytes == 2 * 256


def test_pool_for_devices_without_views(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_supports_views", lambda device: False)
    a, b, c = (Buffer("PYTHON", 16, dtypes.int32) for _ in range(3))
    d = Buffer("PYTHON", 8, dtypes.int32)
    mapping = memory_planner([[a], [b, a], [c, b], [d, c]])
    assert mapping == {c: a}  # same size and dtype, a is dead when c starts; d has another size
    plan = memory.plan_slots([[0], [1, 0], [2, 1]], {0, 1, 2}, lambda s: ("PYTHON", 16, dtypes.int32))
    assert plan.shared == {0: 0, 1: 1, 2: 0} and plan.arena_bytes == {}
    bufs = plan.buffers([("PYTHON", 16, dtypes.int32)] * 3, 0)
    assert bufs[2] is bufs[0] and bufs[1] is not bufs[0]
