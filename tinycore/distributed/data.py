"""Data parallelism for users: `average_gradients` after ``backward()``, `broadcast_parameters` at the start, and a
`DistributedSampler` giving each rank its shard of a data set."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from tinycore.distributed.collectives import all_reduce, broadcast, get_group

if TYPE_CHECKING:
    from tinycore.device import Buffer
    from tinycore.tensor import Tensor
    from tinycore.uop.ops import UOp

__all__ = ["DistributedSampler", "average_gradients", "broadcast_parameters"]

DEFAULT_BUCKET_MB = 25.0


def average_gradients(params: Iterable[Tensor], bucket_mb: float = DEFAULT_BUCKET_MB) -> int:
    """Replace each parameter's ``.grad`` by its mean over every rank; call it between ``loss.backward()`` and
    ``opt.step()``. Returns the number of collectives it ran.

    Bucketed: the gradients of one device and dtype are flattened into one tensor of up to `bucket_mb` megabytes
    (in parameter order) and reduced with one `all_reduce`, so a model of many small tensors costs a few collectives,
    not one per tensor; each ``.grad`` becomes a lazy view of its bucket divided by the world size (the division
    fuses into the optimizer's kernels). The gradients of every bucket are computed in one schedule together with the
    live values that read the parameters (the loss the step returns), so the forward and backward passes run once,
    as they do without averaging. Works eagerly and inside `TinyJit`: a captured training step replays its
    collectives. Parameters without a gradient are skipped; every rank must pass the same parameters in the same
    order (a mismatch is a `CollectiveMismatchError`).
    """
    from tinycore.tensor import Tensor

    if not bucket_mb > 0:
        raise ValueError(f"bucket_mb must be positive, got {bucket_mb!r}")
    n = get_group().world_size
    limit = int(bucket_mb * 1024 * 1024)
    buckets: dict[tuple[str, object], list[list[Tensor]]] = {}
    for p in params:
        if p.grad is None:
            continue
        if not isinstance(p.grad.device, str):
            raise ValueError(f"average_gradients: a gradient on {p.grad.device} is sharded; use one device per rank")
        lists = buckets.setdefault((p.grad.device, p.grad.dtype), [[]])
        size = sum(q.grad.numel() for q in lists[-1]) * p.grad.dtype.itemsize  # type: ignore[union-attr]
        if lists[-1] and size + p.grad.numel() * p.grad.dtype.itemsize > limit:
            lists.append([])
        lists[-1].append(p)
    bucketed = [p for lists in buckets.values() for bucket in lists for p in bucket]
    grad_uops = {p.grad.uop for p in bucketed}  # type: ignore[union-attr]
    filled: list[tuple[list[Tensor], Tensor]] = []  # (a bucket's parameters, its buffer)
    writes: list[Tensor] = []
    for lists in buckets.values():
        for bucket in lists:
            grads = [p.grad for p in bucket]
            # each gradient's kernels write straight into its slice of one bucket buffer (a materialized cat is one
            # kernel selecting among every input per element, and an extra copy: measured 12% slower per step)
            first = grads[0]
            assert first is not None
            buf = Tensor.empty(sum(g.numel() for g in grads), device=first.device, dtype=first.dtype)  # type: ignore[union-attr]
            offset = 0
            for g in grads:
                size = g.numel()  # type: ignore[union-attr]
                # the slice is viewed in the gradient's shape: a matmul's kernel then keeps its 2-d tiling (written
                # through a flat view it ran 2-4x slower)
                writes.append(buf[offset : offset + size].reshape(g.shape).assign(g))  # type: ignore[union-attr]
                offset += size
            filled.append((bucket, buf))
    # every bucket in one schedule, with what else reads the parameters (the loss...): the backward's shared work
    # runs once, and the optimizer's write doesn't repeat the forward pass to compute the loss (measured +40%/step)
    _realize_with_readers(writes, _param_buffers(bucketed), grad_uops)
    count = 0
    for bucket, buf in filled:
        total = all_reduce(buf, "sum")
        count += 1
        offset = 0
        for p in bucket:
            g = p.grad
            size = g.numel()  # type: ignore[union-attr]
            p.grad = (total[offset : offset + size] / n).reshape(g.shape).cast(g.dtype)  # type: ignore[union-attr]
            offset += size
    return count


def _param_buffers(params: Iterable[Tensor]) -> list[Buffer]:
    """The buffers behind the realized parameters among `params` (a lazy parameter has none yet)."""
    from tinycore.engine.realized import buffer_of
    from tinycore.uop.ops import GroupOp, Ops

    out: dict[int, Buffer] = {}
    for p in params:
        base = p.uop
        while base.op in GroupOp.Movement:
            base = base.src[0]
        if base.op is Ops.BUFFER:
            buf = buffer_of(base).base
            out.setdefault(id(buf), buf)
    return list(out.values())


def _realize_with_readers(writes: list[Tensor], params: list[Buffer], skip: set[UOp]) -> None:
    """Realize `writes` in one schedule with the live lazy values that read the buffers `params` (which the
    optimizer is about to write: the engine would compute those values then, before the write, sharing nothing
    with these kernels), except the values `skip` (the gradients: they go into the bucket, not buffers of their own)."""
    from tinycore.engine.schedule import readers_of
    from tinycore.tensor import Tensor

    readers = readers_of(params, [w.uop for w in writes]) if params else None
    if readers is None:
        Tensor.realize(*writes)
        return
    uops, deliver = readers
    values = {u: Tensor(u) for u in uops if u not in skip}
    Tensor.realize(*writes, *values.values())
    deliver([values[u].uop if u in values else None for u in uops])


def broadcast_parameters(params: Iterable[Tensor], root: int = 0) -> None:
    """Give every rank rank `root`'s values of `params` (assigned in place), so training starts from the same
    weights whatever each rank's random initialization was."""
    for p in params:
        p.assign(broadcast(p.detach(), root)).realize()


class DistributedSampler:
    """The indices of this rank's shard of a data set of `size` items, for one epoch at a time.

    Each epoch every rank draws the same permutation (`seed` plus the epoch, with `shuffle`), pads it by wrapping
    around to a multiple of the world size (or drops the tail with `drop_last`), and takes every ``world_size``-th
    index starting at its rank: the shards are disjoint and equally long, so batch ``i`` of all ranks together is
    ``world_size`` consecutive batches of the permutation. Call `set_epoch` before each epoch for a new order.

    >>> list(DistributedSampler(10, rank=1, world_size=2, shuffle=False))
    [1, 3, 5, 7, 9]
    """

    def __init__(
        self,
        size: int,
        rank: int | None = None,
        world_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ):
        if rank is None or world_size is None:
            group = get_group()
            rank = group.rank if rank is None else rank
            world_size = group.world_size if world_size is None else world_size
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"DistributedSampler size must be a non-negative int, got {size!r}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
        self.size, self.rank, self.world_size = size, rank, world_size
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0

    def set_epoch(self, epoch: int) -> None:
        """Use the permutation of `epoch` from now on."""
        self.epoch = epoch

    def __len__(self) -> int:
        if self.drop_last:
            return self.size // self.world_size
        return -(-self.size // self.world_size)

    def indices(self) -> list[int]:
        """This rank's indices for the current epoch."""
        import numpy as np

        order = (
            np.random.default_rng(self.seed + self.epoch).permutation(self.size)
            if self.shuffle
            else np.arange(self.size)
        )
        total = len(self) * self.world_size
        if total > self.size and self.size:
            order = np.resize(order, total)  # wraps around to the start
        return [int(i) for i in order[:total][self.rank :: self.world_size]]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices())
