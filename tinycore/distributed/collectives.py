"""The collectives on Tensors, and the `CollectiveRunner` that TinyJit records and replays.

A collective realizes its input into one contiguous buffer, then runs a `CollectiveRunner` on ``[out, in]`` through
`tinycore.engine.realize.run_exec_items`: eagerly it runs at once; inside a TinyJit capture it is recorded between
the kernels that produce its input and those that read its output, and every replay runs it again (the header check,
then the backend). The result is a new tensor backed by `out`; the input is not modified.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from tinycore.distributed.backend import REDUCE_OPS, np_name
from tinycore.distributed.group import (
    DEFAULT_TIMEOUT,
    DistributedError,
    LaunchInfo,
    ProcessGroup,
    header_fields,
    launch_info,
)
from tinycore.engine.exec_item import Runner
from tinycore.renderer import Estimates

if TYPE_CHECKING:
    from tinycore.device import Buffer
    from tinycore.tensor import Tensor

__all__ = [
    "CollectiveRunner",
    "all_gather",
    "all_reduce",
    "barrier",
    "broadcast",
    "get_group",
    "init",
    "is_initialized",
    "local_rank",
    "rank",
    "reduce_scatter",
    "shutdown",
    "world_size",
]

_group: ProcessGroup | None = None


# ---------------------------------------------------------------------------------------------------------------
# the process group


def init(timeout: float | None = None, mpi: bool | None = None) -> ProcessGroup:
    """Join the job the launcher started (``mpirun``, ``srun``...): rank, world size and local rank come from its
    environment (`launch_info`), MPI (mpi4py) connects the ranks. Idempotent: a second call returns the group.

    `timeout` (seconds; default ``TINYCORE_DIST_TIMEOUT`` or 300) bounds every collective: a rank that does not
    arrive within it makes the others raise `CollectiveTimeoutError` naming it. `mpi`: None uses MPI when the job
    has several processes or mpi4py is installed; False allows only a job of one process (collectives are copies).
    """
    global _group
    if _group is not None:
        return _group
    if timeout is None:
        raw = os.environ.get("TINYCORE_DIST_TIMEOUT", "")
        try:
            timeout = float(raw) if raw else DEFAULT_TIMEOUT
        except ValueError:
            raise DistributedError(f"TINYCORE_DIST_TIMEOUT={raw!r} is not a number of seconds (e.g. 300)") from None
    if not timeout > 0:
        raise DistributedError(f"the collective timeout must be a positive number of seconds, got {timeout!r}")
    info = launch_info()
    comm = None
    if mpi is not False:
        comm = _mpi_world(info, required=info.world_size > 1 or mpi is True)
    elif info.world_size > 1:
        raise DistributedError(f"init(mpi=False) in a job of {info.world_size} processes: only MPI connects them")
    if comm is not None:
        if comm.Get_size() != info.world_size and info.launcher != "none":
            raise DistributedError(
                f"the {info.launcher} launcher says {info.world_size} processes but MPI's world has {comm.Get_size()}: "
                "mpi4py is built against a different MPI than the one that launched the job (reinstall mpi4py, or "
                "launch with that MPI's mpirun)"
            )
        if info.launcher == "none":
            info = LaunchInfo(comm.Get_rank(), comm.Get_size(), comm.Get_rank(), "MPI")
    _group = ProcessGroup(comm, info, timeout)
    return _group


def _mpi_world(info: LaunchInfo, required: bool) -> Any:
    try:
        from mpi4py import MPI
    except ImportError as error:
        if not required:
            return None
        raise DistributedError(
            f"tinycore.distributed needs mpi4py to connect the {info.world_size} processes of this job ({error}): "
            "pip install 'tinycore[mpi]' (and an MPI: apt-get install openmpi-bin libopenmpi-dev)"
        ) from error
    return MPI.COMM_WORLD


def is_initialized() -> bool:
    """Whether `init` ran (and `shutdown` did not)."""
    return _group is not None


def get_group() -> ProcessGroup:
    """The group `init` made; raises with the fix when there is none."""
    if _group is None:
        raise DistributedError("tinycore.distributed is not initialized: call tinycore.distributed.init() first")
    return _group


def shutdown() -> None:
    """Release the group's communicators and backends (a later `init` makes a new group)."""
    global _group
    if _group is not None:
        _group.close()
        _group = None


def rank() -> int:
    """This process's rank (0 .. world_size-1)."""
    return get_group().rank


def world_size() -> int:
    """The number of processes in the job."""
    return get_group().world_size


def local_rank() -> int:
    """This process's index among the ranks on its node (pick a GPU with it: ``f"CUDA:{local_rank()}"``)."""
    return get_group().local_rank


# ---------------------------------------------------------------------------------------------------------------
# the runner


class CollectiveRunner(Runner):
    """Runs collective `kind` on ``bufs = [out, in]``: the header check across ranks, then the device's backend.
    Reads buffer 1 and writes buffer 0, so TinyJit prunes, orders and plans memory around it like a copy."""

    kernel_count = 0
    reads, writes = (1,), (0,)

    def __init__(self, kind: str, device: str, dtype: Any, shape: tuple[int, ...], op: str | None, root: int | None):
        self.kind, self.dtype, self.shape, self.op, self.root = kind, dtype, shape, op, root
        nbytes = dtype.itemsize
        for d in shape:
            nbytes *= d
        what = op if op is not None else f"root {root}" if root is not None else ""
        super().__init__(f"{kind} {what} {shape}".replace("  ", " "), device, Estimates(lds=nbytes, mem=nbytes))
        self._header: tuple[ProcessGroup, Any, bytes] | None = None  # (group, its backend, encoded header fields)

    def __reduce__(self) -> tuple[Any, ...]:
        return CollectiveRunner, (self.kind, self.device, self.dtype, self.shape, self.op, self.root)

    def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        """Check the headers across ranks, then run the backend on ``bufs[0] <- bufs[1]``."""
        start = time.perf_counter()
        group = get_group()
        header = self._header
        if header is None or header[0] is not group:  # encoded once per group: a replay sends the same header
            backend = group.backend_for(self.device)
            fields = header_fields(
                self.kind,
                shape=list(self.shape),
                dtype=np_name(self.dtype),
                op=self.op,
                root=self.root,
                backend=backend.name,
            )
            header = self._header = (group, backend, fields)
        _, backend, fields = header
        call = group.begin_encoded(self.kind, fields)
        out, inp = bufs
        if inp.size:
            if self.kind == "all_reduce":
                backend.all_reduce(out, inp, self.op, call)
            elif self.kind == "broadcast":
                backend.broadcast(out, inp, self.root, call)
            elif self.kind == "all_gather":
                backend.all_gather(out, inp, call)
            else:
                backend.reduce_scatter(out, inp, self.op, call)
        return time.perf_counter() - start if wait else None


# ---------------------------------------------------------------------------------------------------------------
# on tensors


def _contiguous_buffer(t: Tensor, what: str) -> Buffer:
    """`t` realized into one buffer holding exactly its elements in order."""
    from tinycore.engine.realized import buffer_of
    from tinycore.tensor import Tensor
    from tinycore.uop.ops import Ops

    if not isinstance(t, Tensor):
        raise TypeError(f"{what} takes a Tensor, got {type(t).__name__}")
    if not isinstance(t.device, str):
        raise DistributedError(
            f"{what} of a tensor sharded over {t.device}: collectives across processes take a tensor on one device "
            "(gather it first with .to(device))"
        )
    if not all(isinstance(d, int) for d in t.shape):
        raise DistributedError(f"{what} of a tensor of symbolic shape {t.shape}: bind its variables first")
    flat = t.reshape(-1).contiguous().realize()
    base = flat.uop
    while base.op in (Ops.RESHAPE,):
        base = base.src[0]
    if base.op is not Ops.BUFFER or base.arg != flat.numel():
        flat = (t.reshape(-1) + 0).contiguous().realize()  # pragma: no cover - contiguous always gives a buffer
        base = flat.uop
    return buffer_of(base)


def _run(kind: str, t: Tensor, out_shape: tuple[int, ...], op: str | None = None, root: int | None = None) -> Tensor:
    from tinycore.device import Buffer
    from tinycore.engine.exec_item import ExecItem
    from tinycore.engine.realize import run_exec_items
    from tinycore.engine.realized import new_buffer_uop
    from tinycore.frontend.tensor import _wrap
    from tinycore.helpers import REALIZE_LOCK

    get_group()  # the error with the fix before any work
    with REALIZE_LOCK:
        inp = _contiguous_buffer(t, kind)
        size = 1
        for d in out_shape:
            size *= d
        out = Buffer(t.device, size, t.dtype)
        runner = CollectiveRunner(kind, t.device, t.dtype, tuple(t.shape), op, root)
        run_exec_items([ExecItem(runner, [out, inp])])
        result = _wrap(new_buffer_uop(t.device, size, t.dtype, out), t.device)
    return result.reshape(out_shape)


def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
    """The elementwise `op` (``"sum"``, ``"mean"``, ``"max"``, ``"min"``) of `t` over every rank, on every rank (a
    new tensor; `t` is unchanged). ``"mean"`` is the sum divided by the world size (floating dtypes only)."""
    if op not in (*REDUCE_OPS, "mean"):
        raise ValueError(f"all_reduce op must be one of {[*REDUCE_OPS, 'mean']}, got {op!r}")
    if op == "mean":
        from tinycore.dtype import dtypes

        if not dtypes.is_float(t.dtype):
            raise DistributedError(f"all_reduce(op='mean') of a {t.dtype} tensor: use op='sum' or cast to a float")
        n = get_group().world_size
        return _run("all_reduce", t, tuple(t.shape), op="sum") / n
    return _run("all_reduce", t, tuple(t.shape), op=op)


def broadcast(t: Tensor, root: int = 0) -> Tensor:
    """Rank `root`'s `t` on every rank (every rank passes a tensor of the same shape and dtype)."""
    n = get_group().world_size
    if not isinstance(root, int) or not 0 <= root < n:
        raise ValueError(f"broadcast root must be a rank in 0..{n - 1}, got {root!r}")
    return _run("broadcast", t, tuple(t.shape), root=root)


def all_gather(t: Tensor) -> Tensor:
    """Every rank's `t` concatenated along dimension 0 in rank order: shape ``(world_size * t.shape[0], ...)``
    (a scalar gathers into shape ``(world_size,)``)."""
    n = get_group().world_size
    shape = tuple(t.shape)
    out_shape = (n * shape[0], *shape[1:]) if shape else (n,)
    return _run("all_gather", t, out_shape)


def reduce_scatter(t: Tensor, op: str = "sum") -> Tensor:
    """Block ``rank`` (along dimension 0) of the elementwise `op` of `t` over every rank: shape
    ``(t.shape[0] // world_size, ...)``; ``t.shape[0]`` must be a multiple of the world size."""
    if op not in REDUCE_OPS:
        raise ValueError(f"reduce_scatter op must be one of {list(REDUCE_OPS)}, got {op!r}")
    n = get_group().world_size
    shape = tuple(t.shape)
    if not shape or shape[0] % n:
        raise DistributedError(
            f"reduce_scatter of shape {shape}: dimension 0 must be a multiple of the world size {n} "
            "(pad the tensor, or reshape it so it is)"
        )
    return _run("reduce_scatter", t, (shape[0] // n, *shape[1:]), op=op)


def barrier() -> None:
    """Return when every rank has called `barrier` (within the timeout). Runs when called: TinyJit does not record
    it (collectives on tensors order a captured step already)."""
    get_group().barrier()
