"""Multi-device values: `MULTI` graphs rewritten into one single-device graph per device.

A sharded tensor's uop is ``MULTI(shard_0, ..., shard_{n-1})`` (``arg`` = the sharded axis, ``None`` = replicated:
every device holds the whole value). Each shard is an ordinary single-device graph. The invariant this module keeps
is that **MULTI only appears at the top** of a tensor's graph: whenever the tensor layer builds an op over MULTI
sources, `to_multi` pushes the op below the MULTI at once (one step per new node, no graph walk):

- elementwise ops (and ``CONTIGUOUS DETACH CONTIGUOUS_BACKWARD ASSIGN``) run per shard. Sources sharded on the same
  axis with the same shard bounds pair up directly (no copies); a replicated source is cut per device to the shard's
  bounds with a SHRINK (no copies); two sources sharded on *different* axes, or with different bounds, or on different
  device tuples raise `MultiDeviceError` (reshard explicitly with ``.shard(devices, axis)``);
- movement ops are translated per shard when they keep the sharded axis whole: RESHAPE (the sharded axis may merge
  with or split into inner axes when every shard boundary survives), PERMUTE, EXPAND, PAD and FLIP of other axes,
  SHRINK of other axes, and a SHRINK of the sharded axis that stays inside one shard (the result is a single-device
  value on that shard's device). Everything else raises `MultiDeviceError`;
- REDUCE_AXIS over axes that don't include the sharded one stays sharded; over the sharded axis it reduces each shard
  to a partial result and then **all-reduces** (`allreduce`): the result is replicated;
- a tensor-level CONST (or IOTA) on a tuple of devices becomes one constant (IOTA) per device (replicated).

**All-reduce** is lowered when the graph is built, to explicit COPY and elementwise nodes (the naive all-to-all
algorithm): device j receives the n-1 other partials (COPY) and combines all n in device order 0..n-1, so every
replica is bit-identical. It costs n(n-1) copies and n combining kernels; for the 2-8 devices we target the copies
run back to back and the latency is that of one copy; a ring (reduce-scatter + all-gather, 2(n-1) steps of 1/n of
the data per device) is the natural next step for large n and large tensors.

**Gather** (`gather`, used by ``Tensor.to(device)`` and ``numpy()``): a replicated value takes the shard already on
the target device (or copies shard 0); a sharded one copies every shard to the target and concatenates them with
PAD + WHERE (one fused kernel).

**Splits.** `shard_sizes` splits an axis as evenly as possible (the first ``size % n`` shards get one more
element), so uneven sizes are allowed; every device must get at least one element.

**Scheduling.** `schedule_multi` (called by `tinycore.engine.schedule.schedule_outputs` when a root is a MULTI)
schedules every shard as one more root of a single schedule, so copies and kernels of all devices are ordered by the
ordinary dependency sort (a kernel reading a copied buffer runs after the copy), hit the schedule cache together, and
the realized table remembers each shard.

**Autograd.** Ops are pushed below MULTI when they are built, so a sharded parameter is not itself a node of the
loss graph: its shards are. `gradient_of_shards` differentiates with respect to the shards and reassembles each
parameter's gradient sharded like the parameter: a sharded parameter gets the MULTI of its shards' gradients (zeros
for a shard the loss doesn't use); a replicated parameter is one logical value used on every device, so its gradient
is the **all-reduce (sum)** of its replicas' gradients, replicated (the data-parallel gradient sync). The loss
itself (a MULTI root) seeds its shards through `multi_source_grads`: a replicated loss is one logical value, so only
its first replica is seeded (seeding every replica would count the loss once per device); the all-reduce that
produced it carries the gradient back to every device through the COPY rule.

TinyJit captures sharded inputs as one input per shard (see `tinycore.engine.jit`).

**Not yet supported.** Movement ops that cut through shard boundaries, and a ring all-reduce.

>>> shard_sizes(10, 4)
[3, 3, 2, 2]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tinycore.dtype import dtypes
from tinycore.errors import MultiDeviceError
from tinycore.helpers import all_int, prod
from tinycore.uop.ops import GroupOp, Ops, UOp

__all__ = [
    "MultiDeviceError",
    "allreduce",
    "gather",
    "gradient_of_shards",
    "multi_uop",
    "multi_source_grads",
    "schedule_multi",
    "shard_bounds",
    "shard_sizes",
    "shard_uop",
    "to_multi",
]


# ---------------------------------------------------------------------------------------------------------------
# helpers


def shard_sizes(size: int, n: int) -> list[int]:
    """Sizes of `n` shards of an axis of `size` elements: as even as possible, the first ``size % n`` one larger.

    >>> shard_sizes(8, 2), shard_sizes(5, 2)
    ([4, 4], [3, 2])
    """
    if not isinstance(size, int):
        raise MultiDeviceError(f"can't shard a symbolic axis of size {size}")
    if size < n:
        raise MultiDeviceError(f"can't shard an axis of size {size} across {n} devices: every device needs an element")
    return [size // n + (1 if i < size % n else 0) for i in range(n)]


def shard_bounds(m: UOp) -> list[tuple[int, int]]:
    """``[(start, end), ...]`` of each shard of a sharded MULTI `m` along its sharded axis."""
    if m.arg is None:
        raise MultiDeviceError("a replicated value has no shard bounds")
    out, start = [], 0
    for s in m.src:
        n = s.shape[m.arg]
        out.append((start, start + n))
        start += n
    return out


def multi_uop(shards: Sequence[UOp], axis: int | None) -> UOp:
    """``MULTI(*shards)`` sharded along `axis` (None: replicated). The shards must be on distinct devices."""
    if not shards:
        raise MultiDeviceError("a multi-device value needs at least one shard")
    return UOp(Ops.MULTI, shards[0].dtype, tuple(shards), axis)


def _devices(m: UOp) -> tuple[str, ...]:
    return tuple(s.device for s in m.src)  # type: ignore[misc]


def _cut(shape: tuple[Any, ...], axis: int, bounds: tuple[int, int]) -> tuple[tuple[Any, Any], ...]:
    return tuple(bounds if d == axis else (0, dim) for d, dim in enumerate(shape))


def _with(shape: tuple[Any, ...], axis: int, value: Any) -> tuple[Any, ...]:
    return tuple(value if d == axis else dim for d, dim in enumerate(shape))


# ---------------------------------------------------------------------------------------------------------------
# building multi-device values


def shard_uop(u: UOp, devices: tuple[str, ...], axis: int | None) -> UOp:
    """`u` (a single-device tensor-level uop, or a replicated MULTI on `devices`) split along `axis` across
    `devices` (None: a copy on every device). Copies are lazy COPY nodes; a shard on `u`'s own device is a view."""
    if len(set(devices)) != len(devices) or not devices:
        raise MultiDeviceError(f"shard needs distinct devices, got {devices}")
    shape = u.shape
    if shape is None:
        raise MultiDeviceError(f"can't shard a {u.op} without a shape")
    if axis is not None and not 0 <= axis < len(shape):
        raise MultiDeviceError(f"shard axis {axis} out of range for a tensor of {len(shape)} dimensions")
    if u.op is Ops.MULTI:
        if _devices(u) != devices or u.arg is not None:
            raise MultiDeviceError("shard_uop reshards only a replicated value on the same devices")
        if axis is None:
            return u
        sizes = shard_sizes(shape[axis], len(devices))
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return multi_uop(
            [s.shrink(_cut(shape, axis, (b, b + n))) for s, b, n in zip(u.src, starts, sizes)], axis
        )  # local cuts: no copies
    shards = []
    sizes = shard_sizes(shape[axis], len(devices)) if axis is not None else [0] * len(devices)
    start = 0
    for dev, n in zip(devices, sizes):
        piece = u.shrink(_cut(shape, axis, (start, start + n))) if axis is not None and n != shape[axis] else u
        start += n
        shards.append(piece if piece.device == dev else piece.copy_to_device(dev))
    return multi_uop(shards, axis)


def allreduce(op: Ops, partials: Sequence[UOp]) -> UOp:
    """A replicated MULTI holding `op` (ADD, MUL or MAX) of `partials` (one single-device value per device).

    Naive all-to-all: device j combines its own partial with COPYs of the others, in device order, so every replica
    computes the very same expression (bit-identical results)."""
    if op not in GroupOp.Reduce:
        raise MultiDeviceError(f"all-reduce needs ADD, MUL or MAX, got {op}")
    out = []
    for j, target in enumerate(partials):
        dev = target.device
        acc: UOp | None = None
        for i, p in enumerate(partials):
            v = p if i == j else p.copy_to_device(dev)
            acc = v if acc is None else acc.alu(op, v)
        assert acc is not None
        out.append(acc)
    return multi_uop(out, None)


def gather(m: UOp, device: str) -> UOp:
    """The whole value of MULTI `m` on one `device` (COPY of each remote shard, concatenated with PAD + WHERE)."""
    if m.op is not Ops.MULTI:
        raise MultiDeviceError(f"gather needs a MULTI, got {m.op}")
    devs = _devices(m)
    if m.arg is None:
        i = devs.index(device) if device in devs else 0
        return m.src[i] if devs[i] == device else m.src[i].copy_to_device(device)
    axis, shape = m.arg, m.shape
    assert shape is not None
    out: UOp | None = None
    for s, dev, (b, e) in zip(m.src, devs, shard_bounds(m)):
        piece = s if dev == device else s.copy_to_device(device)
        pads = tuple((b, shape[axis] - e) if d == axis else (0, 0) for d in range(len(shape)))
        padded = piece.pad(pads)
        if out is None:
            out = padded
            continue
        ones = UOp.const(dtypes.bool, True, device)
        mask = ones.reshape((1,) * len(shape)).expand(s.shape).pad(pads) if shape else ones
        out = mask.where(padded, out)
    assert out is not None
    return out


# ---------------------------------------------------------------------------------------------------------------
# pushing ops below MULTI


def to_multi(u: UOp) -> tuple[UOp, str | tuple[str, ...]]:
    """`u` with every op over MULTI sources pushed below the MULTI (see the module docstring), and the resulting
    device: a tuple for a MULTI, a single name when a SHRINK selected within one shard."""
    memo: dict[UOp, UOp] = {}
    out = _push(u, memo)
    return out, out.device  # type: ignore[return-value]


def _push(u: UOp, memo: dict[UOp, UOp]) -> UOp:
    if u.op in (Ops.MULTI, Ops.DEVICE):
        return u
    done = memo.get(u)
    if done is not None:
        return done
    if not isinstance(u.device, tuple):
        memo[u] = u
        return u
    if u.op is Ops.CONST:
        out = multi_uop([UOp.const(u.dtype, u.arg, d) for d in u.src[0].arg], None)
    elif u.op is Ops.IOTA:
        out = multi_uop([UOp.iota(u.arg, d, u.dtype) for d in u.src[0].arg], None)
    else:
        srcs = [_push(s, memo) for s in u.src]
        multis = [s for s in srcs if s.op is Ops.MULTI]
        if not multis:
            out = u.replace(src=tuple(srcs))
        elif u.op in GroupOp.Movement:
            out = _movement(u, multis[0])
        elif u.op is Ops.REDUCE_AXIS:
            out = _reduce(u, multis[0])
        elif u.op in GroupOp.Elementwise or u.op in _PER_SHARD:
            out = _elementwise(u, srcs)
        else:
            raise MultiDeviceError(f"{u.op} is not supported on multi-device tensors")
    memo[u] = out
    return out


_PER_SHARD = frozenset({Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD, Ops.ASSIGN})


def _elementwise(u: UOp, srcs: list[UOp]) -> UOp:
    devs: tuple[str, ...] | None = None
    sharded: UOp | None = None
    for s in srcs:
        if s.op is not Ops.MULTI:
            raise MultiDeviceError(f"{u.op} mixes a value on {s.device} with multi-device values")
        d = _devices(s)
        if devs is None:
            devs = d
        elif d != devs:
            raise MultiDeviceError(f"{u.op} of values on different device tuples: {devs} and {d}")
        if s.arg is None:
            continue
        if sharded is None:
            sharded = s
        elif s.arg != sharded.arg:
            raise MultiDeviceError(
                f"{u.op} of tensors sharded on different axes ({sharded.arg} and {s.arg}): reshard one of them "
                "with .shard(devices, axis) first"
            )
        elif shard_bounds(s) != shard_bounds(sharded):
            raise MultiDeviceError(
                f"{u.op} of tensors sharded on axis {s.arg} with different shard bounds "
                f"({shard_bounds(sharded)} and {shard_bounds(s)})"
            )
    assert devs is not None
    if u.op is Ops.ASSIGN and srcs[0].arg is None and sharded is not None:
        raise MultiDeviceError("can't assign a sharded value into a replicated tensor: reshard the value first")
    axis = sharded.arg if sharded is not None else None
    bounds = shard_bounds(sharded) if sharded is not None else None
    shards = []
    for i in range(len(devs)):
        shard_srcs = []
        for s in srcs:
            piece = s.src[i]
            if s.arg is None and bounds is not None:
                piece = piece.shrink(_cut(piece.shape, axis, bounds[i]))  # type: ignore[arg-type]
            shard_srcs.append(piece)
        shards.append(UOp(u.op, u.dtype, tuple(shard_srcs), u.arg, u.tag))
    return multi_uop(shards, axis)


def _per_shard(m: UOp, op: Ops, args: Sequence[Any], axis: int | None) -> UOp:
    return multi_uop([UOp(op, s.dtype, (s,), a) for s, a in zip(m.src, args)], axis)


def _movement(u: UOp, m: UOp) -> UOp:
    op, arg, axis = u.op, u.arg, m.arg
    n = len(m.src)
    if axis is None:
        return _per_shard(m, op, [arg] * n, None)
    old = m.shape
    assert old is not None
    if op is Ops.RESHAPE:
        return _reshape(m, tuple(arg))
    if op is Ops.PERMUTE:
        return _per_shard(m, op, [arg] * n, tuple(arg).index(axis))
    if op is Ops.EXPAND:
        if arg[axis] != old[axis]:
            raise MultiDeviceError(f"can't expand the sharded axis {axis} ({old[axis]} -> {arg[axis]})")
        return _per_shard(m, op, [_with(tuple(arg), axis, s.shape[axis]) for s in m.src], axis)
    if op is Ops.PAD:
        if tuple(arg[axis]) != (0, 0):
            raise MultiDeviceError(f"can't pad the sharded axis {axis} (pad {arg[axis]}): gather with .to() first")
        return _per_shard(m, op, [arg] * n, axis)
    if op is Ops.FLIP:
        if arg[axis]:
            raise MultiDeviceError(f"can't flip the sharded axis {axis}: gather with .to() first")
        return _per_shard(m, op, [arg] * n, axis)
    if op is Ops.SHRINK:
        b, e = arg[axis]
        if (b, e) == (0, old[axis]):
            return _per_shard(m, op, [_with(tuple(arg), axis, (0, s.shape[axis])) for s in m.src], axis)
        if not all_int((b, e)):
            raise MultiDeviceError(f"can't shrink the sharded axis {axis} with symbolic bounds")
        for s, (lo, hi) in zip(m.src, shard_bounds(m)):
            if lo <= b and e <= hi and b < hi:
                return s.shrink(_with(tuple(arg), axis, (b - lo, e - lo)))
        raise MultiDeviceError(
            f"shrink {(b, e)} of the sharded axis {axis} spans several shards {shard_bounds(m)}: "
            "gather with .to(device) first, or shrink within one shard"
        )
    raise MultiDeviceError(f"{op} is not supported on multi-device tensors")


def _reshape(m: UOp, new: tuple[Any, ...]) -> UOp:
    """RESHAPE of a sharded MULTI: the sharded axis maps to the new axis whose outer elements are the same, when
    every shard's block of elements is a whole number of that axis' rows."""
    old, axis = m.shape, m.arg
    assert old is not None
    if not all_int(old) or not all_int(new):
        raise MultiDeviceError("reshape of a sharded tensor needs concrete shapes")
    sizes = [s.shape[axis] for s in m.src]
    outer, inner = prod(old[:axis]), prod(old[axis + 1 :])
    for a2 in range(len(new)):
        if prod(new[:a2]) != outer or new[a2] == 1:
            continue
        inner2 = prod(new[a2 + 1 :])
        if inner2 == 0 or any((k * inner) % inner2 for k in sizes):
            continue
        new_sizes = [k * inner // inner2 for k in sizes]
        if sum(new_sizes) != new[a2]:
            continue
        return _per_shard(m, Ops.RESHAPE, [_with(new, a2, k) for k in new_sizes], a2)
    raise MultiDeviceError(
        f"can't reshape a tensor of shape {tuple(old)} sharded on axis {axis} (shards {sizes}) to {new}: the reshape "
        "cuts through shard boundaries; gather with .to(device) first"
    )


def _reduce(u: UOp, m: UOp) -> UOp:
    op, axes = u.arg
    partials = [s.r(op, tuple(axes)) for s in m.src]
    if m.arg is None or m.arg not in axes:
        return multi_uop(partials, m.arg)
    return allreduce(op, partials)


# ---------------------------------------------------------------------------------------------------------------
# autograd


def multi_source_grads(grad: UOp, m: UOp) -> tuple[UOp | None, ...]:
    """The gradient of each shard of MULTI `m`, given `grad`, the gradient of the whole value (a MULTI on the same
    devices, or a single-device value). A replicated `m` is one logical value: only its first replica gets it."""
    devs = _devices(m)
    if grad.op is not Ops.MULTI:
        grad = shard_uop(grad, devs, m.arg)
    elif _devices(grad) != devs:
        raise MultiDeviceError(f"gradient on {_devices(grad)} for a value on {devs}")
    rest: tuple[None, ...] = (None,) * (len(m.src) - 1)
    if m.arg is None:
        return (gather(grad, devs[0]) if grad.arg is not None else grad.src[0], *rest)
    if grad.arg is None:  # one replicated gradient: each shard takes its own part
        shape = grad.src[0].shape
        assert shape is not None
        return tuple(g.shrink(_cut(shape, m.arg, b)) for g, b in zip(grad.src, shard_bounds(m)))
    if grad.arg != m.arg or shard_bounds(grad) != shard_bounds(m):
        raise MultiDeviceError(f"gradient sharded on axis {grad.arg} for a value sharded on axis {m.arg}")
    return tuple(grad.src)


def gradient_of_shards(
    root: UOp,
    root_grad: UOp,
    targets: Sequence[UOp],
    compute: Callable[[UOp, UOp, list[UOp]], dict[UOp, UOp]],
) -> dict[UOp, UOp]:
    """`compute(root, root_grad, targets)` (`tinycore.gradient.compute_gradient`) for targets that may be MULTI:
    each MULTI target is differentiated through its shards, and its gradient is a MULTI sharded like it (a
    replicated target: the all-reduced sum of its replicas' gradients). Targets not reached are absent."""
    shard_targets: list[UOp] = []
    for t in targets:
        shard_targets.extend(t.src if t.op is Ops.MULTI else (t,))
    grads = compute(root, root_grad, shard_targets)
    out: dict[UOp, UOp] = {}
    for t in targets:
        if t.op is not Ops.MULTI:
            if t in grads:
                out[t] = grads[t]
            continue
        parts = [grads.get(s) for s in t.src]
        if all(p is None for p in parts):
            continue
        if t.arg is None:
            out[t] = _sum_replicas(parts, _devices(t))
        else:
            out[t] = multi_uop([p if p is not None else _zeros_like(s) for p, s in zip(parts, t.src)], t.arg)
    return out


def _zeros_like(u: UOp) -> UOp:
    shape = u.shape
    assert shape is not None
    zero = UOp.const(u.dtype, 0, u.device)
    return zero.reshape((1,) * len(shape)).expand(shape) if shape else zero


def _sum_replicas(parts: Sequence[UOp | None], devs: tuple[str, ...]) -> UOp:
    """A replicated MULTI of the sum of the present `parts` (one per device, None: no contribution), added in device
    order on every device (so the replicas are bit-identical), like `allreduce`."""
    out = []
    for dev in devs:
        acc: UOp | None = None
        for p in parts:
            if p is None:
                continue
            v = p if p.device == dev else p.copy_to_device(dev)
            acc = v if acc is None else acc.alu(Ops.ADD, v)
        assert acc is not None
        out.append(acc)
    return multi_uop(out, None)


# ---------------------------------------------------------------------------------------------------------------
# scheduling


def schedule_multi(
    roots: Sequence[UOp], schedule: Callable[[Sequence[UOp]], tuple[list[Any], dict[str, int], list[UOp | None]]]
) -> tuple[list[Any], dict[str, int], list[UOp | None]]:
    """Schedule `roots`, some of them MULTI: every shard becomes a root of one call of `schedule` (the scheduler's
    `schedule_outputs`), and each MULTI root's new uop is the MULTI of its shards' new uops."""
    flat: list[UOp] = []
    spans: list[tuple[int, int | None]] = []
    for r in roots:
        if r.op is Ops.MULTI:
            spans.append((len(flat), len(r.src)))
            flat.extend(r.src)
        else:
            spans.append((len(flat), None))
            flat.append(r)
    items, var_vals, new = schedule(flat)
    out: list[UOp | None] = []
    for r, (start, n) in zip(roots, spans):
        if n is None:
            out.append(new[start])
            continue
        got = new[start : start + n]
        if all(g is None for g in got):
            out.append(None)
            continue
        out.append(multi_uop([g if g is not None else s for g, s in zip(got, r.src)], r.arg))
    return items, var_vals, out
