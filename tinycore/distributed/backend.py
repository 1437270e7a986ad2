"""Collective backends: what moves the bytes of a collective for the buffers of one device.

A backend implements `CollectiveBackend`'s four methods on `Buffer`s (allocated, holding this rank's data) and polls
its non-blocking calls with ``call.wait(...)`` so a lost rank becomes an error, not a hang. Core has two:

- `MPIBackend`, the fallback of every device: MPI's non-blocking collectives (``Iallreduce``...) through mpi4py on
  host memory. A buffer whose allocator exposes host memory (``Allocator.as_buffer``: CLANG, PYTHON) is handed to MPI
  as it is (zero-copy); any other is copied out to the host and back.
- `LocalBackend`, for a group of one process without MPI: the collectives of one rank are copies.

A device plugin offers its own (NCCL for CUDA) through the ``tinycore_collective_backend`` hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinycore.distributed.group import CollectiveCall, DistributedError

if TYPE_CHECKING:
    import numpy as np

    from tinycore.device import Buffer
    from tinycore.distributed.group import ProcessGroup

__all__ = ["CollectiveBackend", "LocalBackend", "MPIBackend", "REDUCE_OPS"]

REDUCE_OPS = ("sum", "max", "min")  # what a backend reduces with ("mean" is a sum divided by core)
# numpy kinds MPI reduces natively (float16 and bfloat16 have no MPI reduction in Open MPI 4)
_MPI_REDUCIBLE = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"}


class CollectiveBackend:
    """Moves collective data for one device's buffers. Every method gets buffers already allocated (`inp` holds
    this rank's data; `out` is written), the reduce op (one of `REDUCE_OPS`) or root rank, and the
    `CollectiveCall` (``call.name``, ``call.wait(done)``, ``call.fail(error)``); it returns once `out` holds the
    result on this rank. Shapes and dtypes were checked equal across ranks before the call.

    - ``all_reduce(out, inp, op, call)``: `out` (same size as `inp`) = the elementwise `op` over every rank's `inp`;
    - ``broadcast(out, inp, root, call)``: `out` = rank `root`'s `inp`;
    - ``all_gather(out, inp, call)``: `out` (``world_size`` times `inp`) = every rank's `inp`, in rank order;
    - ``reduce_scatter(out, inp, op, call)``: `out` (`inp` / ``world_size``) = block ``rank`` of the reduction.
    """

    name = "backend"

    def all_reduce(self, out: Buffer, inp: Buffer, op: str, call: CollectiveCall) -> None:
        """See the class docstring."""
        raise NotImplementedError(f"{type(self).__name__} has no all_reduce")

    def broadcast(self, out: Buffer, inp: Buffer, root: int, call: CollectiveCall) -> None:
        """See the class docstring."""
        raise NotImplementedError(f"{type(self).__name__} has no broadcast")

    def all_gather(self, out: Buffer, inp: Buffer, call: CollectiveCall) -> None:
        """See the class docstring."""
        raise NotImplementedError(f"{type(self).__name__} has no all_gather")

    def reduce_scatter(self, out: Buffer, inp: Buffer, op: str, call: CollectiveCall) -> None:
        """See the class docstring."""
        raise NotImplementedError(f"{type(self).__name__} has no reduce_scatter")

    def close(self) -> None:
        """Release what the backend holds (communicators); called by `ProcessGroup.close`."""


def np_name(dtype: Any) -> str:
    """A dtype's name as numpy spells it (``float16``, ``int32``; ``bfloat16`` has no numpy name)."""
    import numpy as np

    from tinycore.dtype import dtypes

    scalar = dtype.scalar()
    if scalar == dtypes.bfloat16:
        return "bfloat16"
    return np.dtype(scalar.fmt).name if scalar.fmt is not None else str(scalar)


def _copy(out: Buffer, inp: Buffer) -> None:
    out.copyin(inp.as_buffer(allow_zero_copy=True))


class LocalBackend(CollectiveBackend):
    """The collectives of a group of one process: every result is this rank's own data."""

    name = "local"

    def all_reduce(self, out: Buffer, inp: Buffer, op: str, call: CollectiveCall) -> None:
        """A copy."""
        _copy(out, inp)

    def broadcast(self, out: Buffer, inp: Buffer, root: int, call: CollectiveCall) -> None:
        """A copy."""
        _copy(out, inp)

    def all_gather(self, out: Buffer, inp: Buffer, call: CollectiveCall) -> None:
        """A copy."""
        _copy(out, inp)

    def reduce_scatter(self, out: Buffer, inp: Buffer, op: str, call: CollectiveCall) -> None:
        """A copy."""
        _copy(out, inp)


class MPIBackend(CollectiveBackend):
    """MPI's non-blocking collectives on host memory (zero-copy where the device's buffers are host memory)."""

    name = "mpi"

    def __init__(self, group: ProcessGroup):
        self.group, self.comm, self.MPI = group, group.comm, group.mpi
        self._ops = {"sum": self.MPI.SUM, "max": self.MPI.MAX, "min": self.MPI.MIN}

    # ----- host views of device buffers

    def _np(self, buf: Buffer, reduce: bool) -> np.dtype:
        import numpy as np

        from tinycore.dtype import dtypes

        if not reduce:
            return np.dtype(np.uint8)  # data movement: bytes, whatever the dtype (bfloat16 included)
        scalar = buf.dtype.scalar()
        np_dtype = np.dtype(scalar.fmt) if scalar.fmt is not None and scalar != dtypes.bfloat16 else None
        if np_dtype is None or np_dtype.name not in _MPI_REDUCIBLE:
            raise DistributedError(
                f"MPI can't reduce {np_name(buf.dtype)} tensors (it reduces int8..int64, uint8..uint64, float32 and "
                "float64): "
                "cast first, e.g. all_reduce(t.float()), or use a device whose backend reduces it (NCCL on CUDA)"
            )
        return np_dtype

    def _source(self, buf: Buffer, dtype: np.dtype) -> np.ndarray:
        """`buf`'s data as a host array: its own memory when the allocator exposes it, else a copy."""
        import numpy as np

        from tinycore.device import _device_lookup

        if buf.allocator.supports_as_buffer:
            _device_lookup(buf.device).synchronize()  # queued kernels must have written it
            return np.frombuffer(buf.as_buffer(allow_zero_copy=True), dtype)
        return np.frombuffer(buf.as_buffer(allow_zero_copy=False), dtype)

    def _target(self, buf: Buffer, dtype: np.dtype) -> tuple[np.ndarray, bool]:
        """A host array to receive into, and whether it must be copied into `buf` afterwards."""
        import numpy as np

        if buf.allocator.supports_as_buffer:
            view = np.frombuffer(buf.as_buffer(allow_zero_copy=True), dtype)
            if view.flags.writeable:
                return view, False
        return np.empty(buf.nbytes // dtype.itemsize, dtype), True

    def _run(self, out: Buffer, inp: Buffer, reduce: bool, start: Any, call: CollectiveCall) -> None:
        dtype = self._np(inp, reduce)
        src, (dst, copy_back) = self._source(inp, dtype), self._target(out, dtype)
        try:
            req = start(src, dst)
        except self.MPI.Exception as error:
            call.fail(DistributedError(f"{call.name}: MPI failed to start it: {error}"))
        try:
            call.wait(req.Test)
        except self.MPI.Exception as error:
            call.fail(DistributedError(f"{call.name} failed in MPI (a rank died during it?): {error}"))
        if copy_back:
            out.copyin(memoryview(dst).cast("B"))

    def all_reduce(self, out: Buffer, inp: Buffer, op: str, call: CollectiveCall) -> None:
        """``MPI_Iallreduce``."""
        mpi_op = self._ops[op]
        self._run(out, inp, True, lambda s, d: self.comm.Iallreduce(s, d, op=mpi_op), call)

    def broadcast(self, out: Buffer, inp: Buffer, root: int, call: CollectiveCall) -> None:
        """``MPI_Ibcast`` into `out` (the root's data copied there first)."""
        import numpy as np

        def start(src: np.ndarray, dst: np.ndarray) -> Any:
            if self.group.rank == root:
                np.copyto(dst, src)
            return self.comm.Ibcast(dst, root=root)

        self._run(out, inp, False, start, call)

    def all_gather(self, out: Buffer, inp: Buffer, call: CollectiveCall) -> None:
        """``MPI_Iallgather``."""
        self._run(out, inp, False, lambda s, d: self.comm.Iallgather(s, d), call)

    def reduce_scatter(self, out: Buffer, inp: Buffer, op: str, call: CollectiveCall) -> None:
        """``MPI_Ireduce_scatter_block``."""
        mpi_op = self._ops[op]
        self._run(out, inp, True, lambda s, d: self.comm.Ireduce_scatter_block(s, d, op=mpi_op), call)
