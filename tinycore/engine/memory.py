"""The memory planner: buffers that live only inside a schedule (or a captured JIT) share memory by lifetime.

A buffer is *live* from the first step that touches it to the last. Buffers whose lifetimes overlap need disjoint
memory; the others may share. The planner places every such buffer at a byte offset of one arena per device
(greedy by size, lowest fitting offset: within a few percent of the liveness lower bound on typical networks), and
each planned buffer becomes a view of its arena. A device whose allocator can't make views (`Allocator.offset`)
gets a pool instead: buffers of the same size and dtype with disjoint lifetimes share one buffer.

Two entry points:

- `plan_slots` plans the internal slots of a cached schedule once; `SlotPlan.buffers` makes the arena and views on
  every run (the scheduler does this);
- `memory_planner` maps concrete `Buffer`s of a list of steps (schedule items, exec items) to shared ones (TinyJit).

``NO_MEMORY_PLANNER=1`` (`tinycore.helpers.NO_MEMORY_PLANNER`) turns both off when they run: every internal buffer
gets memory of its own (a cached plan is ignored, so the flag can change between calls; for debugging and for
checking that planning never changes results).

>>> plan = plan_lifetimes([(100, 0, 1), (100, 1, 2), (100, 2, 3)])
>>> plan.offsets, plan.total
([0, 128, 0], 256)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from tinycore.device import Buffer
from tinycore.dtype import DType, dtypes
from tinycore.helpers import NO_MEMORY_PLANNER, round_up

__all__ = ["ALIGNMENT", "LifetimePlan", "SlotPlan", "lower_bound", "memory_planner", "plan_lifetimes", "plan_slots"]

ALIGNMENT = 64  # bytes: every planned buffer starts at a multiple of this (enough for any vector load)


@dataclass
class LifetimePlan:
    """Byte offsets for buffers given as ``(nbytes, first step, last step)``; `total` is the arena size."""

    offsets: list[int]
    total: int


def plan_lifetimes(buffers: Sequence[tuple[int, int, int]], alignment: int = ALIGNMENT) -> LifetimePlan:
    """Place buffers ``(nbytes, first, last)`` (steps inclusive) in one arena so that buffers live at the same step
    never overlap. Greedy: largest first, each at the lowest offset that fits between the already placed buffers
    whose lifetimes overlap its own.

    >>> plan_lifetimes([(10, 0, 0), (10, 1, 1)]).total
    64
    """
    order = sorted(range(len(buffers)), key=lambda i: (-buffers[i][0], buffers[i][1], i))
    offsets = [0] * len(buffers)
    placed: list[int] = []
    total = 0
    for i in order:
        size = round_up(max(buffers[i][0], 1), alignment)
        first, last = buffers[i][1], buffers[i][2]
        busy = sorted(
            (offsets[j], offsets[j] + round_up(max(buffers[j][0], 1), alignment))
            for j in placed
            if buffers[j][1] <= last and first <= buffers[j][2]
        )
        offset = 0
        for start, end in busy:
            if offset + size <= start:
                break
            offset = max(offset, end)
        offsets[i] = offset
        placed.append(i)
        total = max(total, offset + size)
    return LifetimePlan(offsets, total)


def lower_bound(buffers: Sequence[tuple[int, int, int]]) -> int:
    """The liveness lower bound of any plan: the largest total size of buffers live at one step.

    >>> lower_bound([(10, 0, 1), (20, 1, 2), (5, 2, 2)])
    30
    """
    steps = {step for _, first, last in buffers for step in (first, last)}
    return max((sum(n for n, f, l in buffers if f <= s <= l) for s in steps), default=0)


def _lifetimes(steps: Sequence[Sequence[object]], wanted: Callable[[object], bool]) -> dict[object, list[int]]:
    """`{thing: [first step, last step]}` for every thing of `steps` that `wanted` accepts."""
    spans: dict[object, list[int]] = {}
    for i, things in enumerate(steps):
        for thing in things:
            if thing is None or not wanted(thing):
                continue
            span = spans.get(thing)
            if span is None:
                spans[thing] = [i, i]
            else:
                span[1] = i
    return spans


def _supports_views(device: str) -> bool:
    from tinycore.device import _device_lookup

    return _device_lookup(device).allocator.supports_offset


@dataclass
class SlotPlan:
    """Where the internal slots of a cached schedule live: `placement` maps a slot to ``(device, byte offset)`` in
    that device's arena of `arena_bytes[device]`; `shared` maps a slot to the slot whose buffer it reuses (devices
    without views)."""

    arena_bytes: dict[str, int] = field(default_factory=dict)
    placement: dict[int, tuple[str, int]] = field(default_factory=dict)
    shared: dict[int, int] = field(default_factory=dict)

    def buffers(self, new_specs: Sequence[tuple[str, int, DType]], n_inputs: int) -> dict[int, Buffer]:
        """Fresh buffers for the planned slots of one run: views of new arenas (and pooled buffers); none with
        ``NO_MEMORY_PLANNER=1`` (the caller then makes a buffer of its own per slot)."""
        if NO_MEMORY_PLANNER:
            return {}
        arenas = {dev: Buffer(dev, nbytes, dtypes.uint8) for dev, nbytes in self.arena_bytes.items()}
        out: dict[int, Buffer] = {}
        for slot, (dev, offset) in self.placement.items():
            _, size, dtype = new_specs[slot - n_inputs]
            out[slot] = Buffer(dev, size, dtype, base=arenas[dev], offset=offset)
        for slot, owner in sorted(self.shared.items()):
            if owner == slot:
                out[slot] = Buffer(*new_specs[slot - n_inputs])
        for slot, owner in self.shared.items():
            out[slot] = out[owner]
        return out

    @property
    def total_bytes(self) -> int:
        """Bytes of all arenas (pooled buffers not included)."""
        return sum(self.arena_bytes.values())


def plan_slots(
    steps: Sequence[Sequence[int]],
    internal: Collection[int],
    spec: Callable[[int], tuple[str, int, DType]],
    alignment: int = ALIGNMENT,
) -> SlotPlan:
    """Plan the `internal` slots used by `steps` (each step: the slots it touches). `spec(slot)` gives
    ``(device, size, dtype)``."""
    internal = set(internal)
    spans = _lifetimes(steps, lambda s: s in internal)
    plan = SlotPlan()
    by_device: dict[str, list[int]] = {}
    for slot in spans:
        by_device.setdefault(spec(slot)[0], []).append(slot)  # type: ignore[index]
    for device, slots in by_device.items():
        if _supports_views(device):
            sizes = [(spec(s)[1] * spec(s)[2].itemsize, spans[s][0], spans[s][1]) for s in slots]
            lp = plan_lifetimes(sizes, alignment)
            plan.arena_bytes[device] = lp.total
            for s, off in zip(slots, lp.offsets):
                plan.placement[s] = (device, off)
        else:
            for s, owner in _pool(slots, spans, lambda s: (spec(s)[1], spec(s)[2])).items():
                plan.shared[s] = owner
    return plan


def _pool(things: Sequence[object], spans: dict[object, list[int]], kind: Callable[[object], object]) -> dict:
    """Reuse: each thing maps to the earliest-placed thing of the same `kind` whose lifetime ended before it starts."""
    owner_of: dict[object, object] = {}
    free_at: dict[object, list[tuple[int, object]]] = {}  # kind -> [(last step, owner)]
    for t in sorted(things, key=lambda t: spans[t][0]):
        first, last = spans[t]
        pool = free_at.setdefault(kind(t), [])
        for i, (end, owner) in enumerate(pool):
            if end < first:
                owner_of[t] = owner
                pool[i] = (last, owner)
                break
        else:
            owner_of[t] = t
            pool.append((last, t))
    return owner_of


def memory_planner(
    steps: Sequence[Sequence[Buffer | None]], keep: Collection[Buffer] = (), alignment: int = ALIGNMENT
) -> dict[Buffer, Buffer]:
    """Map the internal buffers of `steps` (each step: the buffers it touches, e.g. an `ExecItem`'s `bufs`) to shared
    memory. A buffer is planned unless it is in `keep` (inputs, outputs), already allocated (it may hold data) or a
    view. Returns ``{old buffer: replacement}`` for the planned ones; use the replacements in place of the old.
    """
    if NO_MEMORY_PLANNER:
        return {}
    keep_ids = {id(b) for b in keep}

    def wanted(b: object) -> bool:
        assert isinstance(b, Buffer)
        return id(b) not in keep_ids and not b.is_allocated() and b.base is b

    spans = _lifetimes(steps, wanted)
    out: dict[Buffer, Buffer] = {}
    by_device: dict[str, list[Buffer]] = {}
    for b in spans:
        assert isinstance(b, Buffer)
        by_device.setdefault(b.device, []).append(b)
    for device, bufs in by_device.items():
        if _supports_views(device):
            lp = plan_lifetimes([(b.nbytes, spans[b][0], spans[b][1]) for b in bufs], alignment)
            arena = Buffer(device, lp.total, dtypes.uint8)
            for b, off in zip(bufs, lp.offsets):
                out[b] = Buffer(device, b.size, b.dtype, base=arena, offset=off)
        else:
            owners = _pool(bufs, spans, lambda b: (b.nbytes, b.dtype))  # type: ignore[attr-defined]
            for b, owner in owners.items():
                if owner is not b:
                    out[b] = owner  # type: ignore[assignment]
    return out
