"""NCCL collectives between CUDA devices: the CUDA plugin's answer to ``tinycore_collective_backend``.

`NCCL` wraps NVIDIA's ``libnccl.so.2`` (the ``nvidia-nccl-cu13`` wheel, ``pip install 'tinycore-cuda[nccl]'``) through
ctypes with checked results; `NCCLBackend` runs tinycore's collectives on device pointers: rank 0 makes the unique id,
the process group shares it (``group.broadcast_bytes``), every rank joins one communicator for its GPU, and each
collective is enqueued on the default stream (where tinycore's kernels run, so it follows them) and then polled
(``cuStreamQuery`` and ``ncclCommGetAsyncError``) against the collective's deadline; at the deadline the communicator
is aborted (``ncclCommAbort``) and the collective raises instead of hanging. Imported only when a collective on a
CUDA tensor runs; the library is a constructor argument so the tests drive it with `tinycore_cuda.testing.FakeNCCL`.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from tinycore.sdk import CollectiveBackend, DeviceError, DistributedError

__all__ = ["NCCL", "NCCLBackend", "NCCLError", "load_nccl"]

SUCCESS, IN_PROGRESS = 0, 7
NOT_READY = 600  # CUDA_ERROR_NOT_READY from cuStreamQuery
UNIQUE_ID_BYTES = 128
OPS = {"sum": 0, "max": 2, "min": 3}
DTYPES = {  # ncclDataType_t by numpy-style dtype name
    "int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
    "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9, "bool": 1,
}  # fmt: skip
INSTALL = "pip install 'tinycore-cuda[nccl]' (NVIDIA's nvidia-nccl-cu13 wheel)"


class NCCLError(DeviceError):
    """An NCCL call failed: the call and NCCL's error string."""


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


def _library_path() -> str:
    """``libnccl.so.2`` of the nvidia-nccl wheel when installed, else the name for the system loader."""
    try:
        import nvidia.nccl  # type: ignore[import-not-found]

        for base in getattr(nvidia.nccl, "__path__", []):
            path = os.path.join(base, "lib", "libnccl.so.2")
            if os.path.exists(path):
                return path
    except ImportError:
        pass
    return "libnccl.so.2"


def load_nccl() -> NCCL:
    """`NCCL` on the installed library; raises `NCCLError` with the install line when there is none."""
    path = _library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as error:
        raise NCCLError(f"NCCL is not installed ({error})", device="CUDA", fix=INSTALL) from error
    return NCCL(lib)


class NCCL:
    """The NCCL calls tinycore uses, on plain ints (pointers, handles), each checked: a failure raises `NCCLError`
    naming the call. `lib` is the ctypes library (or a fake with the same functions)."""

    def __init__(self, lib: Any):
        self.lib = lib
        if isinstance(lib, ctypes.CDLL):
            lib.ncclGetErrorString.restype = ctypes.c_char_p

    def _check(self, call: str, result: int) -> None:
        if result not in (SUCCESS, IN_PROGRESS):
            raise NCCLError(f"{call} failed: {self.error_string(result)}", device="CUDA", fix="see NCCL_DEBUG=INFO")

    def error_string(self, code: int) -> str:
        """NCCL's text for result `code`."""
        text = self.lib.ncclGetErrorString(code)
        return text.decode() if isinstance(text, bytes) else str(text)

    def unique_id(self) -> bytes:
        """A new communicator id (rank 0 makes it; every rank joins with it)."""
        uid = _UniqueId()
        self._check("ncclGetUniqueId", self.lib.ncclGetUniqueId(ctypes.byref(uid)))
        return bytes(uid.internal)

    def comm_init_rank(self, nranks: int, uid: bytes, rank: int) -> int:
        """Join the communicator `uid` of `nranks` as `rank` (on the current CUDA context's GPU)."""
        comm = ctypes.c_void_p()
        unique = _UniqueId()
        unique.internal = uid
        self._check("ncclCommInitRank", self.lib.ncclCommInitRank(ctypes.byref(comm), nranks, unique, rank))
        return int(comm.value or 0)

    def _collective(self, call: str, *args: Any) -> None:
        self._check(call, getattr(self.lib, call)(*args))

    def all_reduce(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int, stream: int) -> None:
        """``ncclAllReduce`` (enqueued on `stream`)."""
        args = (ctypes.c_void_p(send), ctypes.c_void_p(recv), ctypes.c_size_t(count), dtype, op)
        self._collective("ncclAllReduce", *args, ctypes.c_void_p(comm), ctypes.c_void_p(stream))

    def broadcast(self, send: int, recv: int, count: int, dtype: int, root: int, comm: int, stream: int) -> None:
        """``ncclBroadcast``."""
        args = (ctypes.c_void_p(send), ctypes.c_void_p(recv), ctypes.c_size_t(count), dtype, root)
        self._collective("ncclBroadcast", *args, ctypes.c_void_p(comm), ctypes.c_void_p(stream))

    def all_gather(self, send: int, recv: int, count: int, dtype: int, comm: int, stream: int) -> None:
        """``ncclAllGather`` (`count` elements per rank)."""
        args = (ctypes.c_void_p(send), ctypes.c_void_p(recv), ctypes.c_size_t(count), dtype)
        self._collective("ncclAllGather", *args, ctypes.c_void_p(comm), ctypes.c_void_p(stream))

    def reduce_scatter(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int, stream: int) -> None:
        """``ncclReduceScatter`` (`count` elements received per rank)."""
        args = (ctypes.c_void_p(send), ctypes.c_void_p(recv), ctypes.c_size_t(count), dtype, op)
        self._collective("ncclReduceScatter", *args, ctypes.c_void_p(comm), ctypes.c_void_p(stream))

    def async_error(self, comm: int) -> int:
        """``ncclCommGetAsyncError``: SUCCESS, IN_PROGRESS, or the error a running collective hit."""
        result = ctypes.c_int(0)
        self._check(
            "ncclCommGetAsyncError", self.lib.ncclCommGetAsyncError(ctypes.c_void_p(comm), ctypes.byref(result))
        )
        return int(result.value)

    def abort(self, comm: int) -> None:
        """``ncclCommAbort``: stop whatever the communicator runs (after a timeout)."""
        self.lib.ncclCommAbort(ctypes.c_void_p(comm))

    def destroy(self, comm: int) -> None:
        """``ncclCommDestroy``."""
        self._check("ncclCommDestroy", self.lib.ncclCommDestroy(ctypes.c_void_p(comm)))


class NCCLBackend(CollectiveBackend):
    """tinycore's collectives on the buffers of one CUDA device, through one NCCL communicator spanning the group.

    `device` is the opened CUDA device (its ``driver`` and ``activate``), `group` the process group, `nccl` an `NCCL`
    (default: `load_nccl`)."""

    name = "nccl"

    def __init__(self, device: Any, group: Any, nccl: NCCL | None = None):
        self.device, self.group = device, group
        self.nccl = nccl if nccl is not None else load_nccl()
        uid = self.nccl.unique_id() if group.rank == 0 else None
        uid = group.broadcast_bytes(uid, root=0)
        device.activate()
        self.comm = self.nccl.comm_init_rank(group.world_size, uid, group.rank)
        self.stream = 0  # tinycore's kernels run on the default stream: the collective follows them

    def _dtype(self, buf: Any) -> int:
        scalar = buf.dtype.scalar()
        name = "bfloat16" if scalar.name == "__bf16" else _NP_NAMES.get(scalar.fmt or "", scalar.name)
        if name not in DTYPES:
            raise NCCLError(f"NCCL can't move {name} tensors", device=self.device.device, fix="cast to float32 first")
        return DTYPES[name]

    def _finish(self, call: Any) -> None:
        """Poll the stream and the communicator until the collective is done, or abort it at the deadline."""
        bindings = self.device.driver.bindings

        def done() -> bool:
            error = self.nccl.async_error(self.comm)
            if error not in (SUCCESS, IN_PROGRESS):
                self.nccl.abort(self.comm)
                call.fail(_error(call.name, f"NCCL reported: {self.nccl.error_string(error)}"))
            (result,) = bindings.cuStreamQuery(self.stream)[:1]
            if int(result) == NOT_READY:
                return False
            if int(result) != 0:
                call.fail(_error(call.name, f"cuStreamQuery failed with CUresult {int(result)}"))
            return True

        try:
            call.wait(done, "NCCL")
        except Exception:
            self.nccl.abort(self.comm)
            raise

    def all_reduce(self, out: Any, inp: Any, op: str, call: Any) -> None:
        """``ncclAllReduce`` on the device pointers."""
        self.device.activate()
        self.nccl.all_reduce(
            int(inp.opaque), int(out.opaque), inp.size, self._dtype(inp), OPS[op], self.comm, self.stream
        )
        self._finish(call)

    def broadcast(self, out: Any, inp: Any, root: int, call: Any) -> None:
        """``ncclBroadcast``."""
        self.device.activate()
        self.nccl.broadcast(int(inp.opaque), int(out.opaque), inp.size, self._dtype(inp), root, self.comm, self.stream)
        self._finish(call)

    def all_gather(self, out: Any, inp: Any, call: Any) -> None:
        """``ncclAllGather``."""
        self.device.activate()
        self.nccl.all_gather(int(inp.opaque), int(out.opaque), inp.size, self._dtype(inp), self.comm, self.stream)
        self._finish(call)

    def reduce_scatter(self, out: Any, inp: Any, op: str, call: Any) -> None:
        """``ncclReduceScatter``."""
        self.device.activate()
        dtype = self._dtype(inp)
        self.nccl.reduce_scatter(int(inp.opaque), int(out.opaque), out.size, dtype, OPS[op], self.comm, self.stream)
        self._finish(call)

    def close(self) -> None:
        """Destroy the communicator."""
        if self.comm:
            self.nccl.destroy(self.comm)
            self.comm = 0


_NP_NAMES = {"b": "int8", "B": "uint8", "h": "int16", "H": "uint16", "i": "int32", "I": "uint32", "q": "int64",
             "Q": "uint64", "e": "float16", "f": "float32", "d": "float64", "?": "bool"}  # fmt: skip


def _error(collective: str, what: str) -> Exception:
    return DistributedError(f"{collective} failed on NCCL: {what}")
