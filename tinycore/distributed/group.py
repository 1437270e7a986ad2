"""Process groups: who the ranks are (read from the launcher's environment) and the checked start of every collective.

Every collective starts with a *header exchange* on a control communicator of its own: each rank sends rank 0 a small
header (the collective's sequence number, kind, reduce op, root, dtype, shape and backend), rank 0 compares them and
answers every rank with a verdict. All of it is non-blocking and polled against a deadline, so

- a rank that died or never arrives makes rank 0 stop after ``timeout`` seconds with a `CollectiveTimeoutError`
  naming the missing ranks and the collective, and the verdict carries that error to every rank that did arrive
  (they wait ``timeout`` plus a short grace, so rank 0's verdict reaches them first; if rank 0 itself is gone, they
  name rank 0);
- ranks that disagree (shapes, dtypes, a different collective) all raise a `CollectiveMismatchError` naming both
  ranks and both values;
- only then does the backend move data (it polls its own non-blocking call against the same deadline).

A mismatch leaves the group usable (every rank raised at the same point). A group that timed out is broken: later
collectives raise at once, and at exit the process leaves without MPI's
finalization (which could wait forever on a dead peer).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tinycore.errors import TinycoreError

__all__ = [
    "CollectiveCall",
    "CollectiveMismatchError",
    "CollectiveTimeoutError",
    "DistributedError",
    "LaunchInfo",
    "ProcessGroup",
    "header_fields",
    "launch_info",
]

DEFAULT_TIMEOUT = 300.0
HEADER_BYTES = 1024
_TAG_HEADER, _TAG_VERDICT = 7001, 7002


class DistributedError(TinycoreError, RuntimeError):
    """A collective across processes failed, or `tinycore.distributed` was used wrongly; the message says the fix."""


class CollectiveTimeoutError(DistributedError):
    """A rank did not arrive at (or finish) a collective within the timeout. `collective` names it (``all_reduce
    #3``), `ranks` are the ranks that never arrived (empty when all arrived but the data phase did not finish)."""

    def __init__(self, message: str, collective: str = "", ranks: tuple[int, ...] = ()):
        super().__init__(message)
        self.collective, self.ranks = collective, ranks


class CollectiveMismatchError(DistributedError):
    """Ranks called a collective with different shapes, dtypes, ops or roots, or called different collectives."""


# ---------------------------------------------------------------------------------------------------------------
# the launcher's environment


@dataclass(frozen=True)
class LaunchInfo:
    """This process's place in the job: `rank`, `world_size`, `local_rank` (its index on this node) and `launcher`
    (which environment said so: ``"Open MPI"``, ``"PMI"``, ``"Slurm"``, ``"env"`` or ``"none"`` for one process)."""

    rank: int
    world_size: int
    local_rank: int
    launcher: str


_LAUNCHERS: tuple[tuple[str, str, str, str], ...] = (
    # (launcher, rank variable, size variable, local rank variable)
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("Slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"),
    ("env", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
)


def launch_info(environ: Mapping[str, str] | None = None) -> LaunchInfo:
    """Rank, world size and local rank from the launcher's environment variables (``mpirun`` of Open MPI, MPICH's
    Hydra and other PMI launchers, Slurm's ``srun``, or ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``); one process
    (rank 0 of 1) when none is set.

    >>> launch_info({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"})
    LaunchInfo(rank=1, world_size=2, local_rank=1, launcher='Open MPI')
    """
    env = os.environ if environ is None else environ
    for launcher, rank_var, size_var, local_var in _LAUNCHERS:
        if rank_var not in env or size_var not in env:
            continue
        try:
            rank, size = int(env[rank_var]), int(env[size_var])
            local = int(env.get(local_var, rank))
        except ValueError as error:
            raise DistributedError(
                f"the {launcher} launcher's environment is not numeric ({rank_var}={env.get(rank_var)!r}, "
                f"{size_var}={env.get(size_var)!r}): start the job with the launcher, or unset these variables"
            ) from error
        if not 0 <= rank < size:
            raise DistributedError(f"{rank_var}={rank} is not a rank of a job of {size_var}={size} processes")
        return LaunchInfo(rank, size, local, launcher)
    return LaunchInfo(0, 1, 0, "none")


# ---------------------------------------------------------------------------------------------------------------
# one collective


class CollectiveCall:
    """One collective in flight: its `name` (``all_reduce #3``), its `deadline` (``time.monotonic()``) and
    `timeout`. Backends poll their non-blocking calls with `wait`, which raises `CollectiveTimeoutError` at the
    deadline instead of hanging."""

    def __init__(self, group: ProcessGroup, name: str, timeout: float):
        self.group, self.name, self.timeout = group, name, timeout
        self.deadline = time.monotonic() + timeout

    def wait(self, done: Callable[[], Any], what: str = "") -> None:
        """Poll `done()` until it is true: spinning first (MPI progresses inside its test calls), then sleeping a
        little between polls; at the deadline the group is broken and `CollectiveTimeoutError` raised."""
        spins = 0
        while not done():
            spins += 1
            if spins > 2000:
                if time.monotonic() > self.deadline:
                    self.fail(
                        CollectiveTimeoutError(
                            f"{self.name} did not finish within {self.timeout:g} s although every rank arrived"
                            f"{' (' + what + ')' if what else ''}: a rank died or stopped during it. Raise the "
                            "timeout (init(timeout=) or TINYCORE_DIST_TIMEOUT) if the data is that large",
                            self.name,
                        )
                    )
                time.sleep(min(1e-3, 1e-6 * (spins - 2000)))

    def fail(self, error: DistributedError) -> None:
        """Break the group with `error` and raise it."""
        self.group.broken = str(error)
        raise error


# ---------------------------------------------------------------------------------------------------------------
# the group


_groups: list[ProcessGroup] = []


def _leave_without_finalize() -> None:
    """At exit after a failed collective: flush and leave without MPI_Finalize, which may wait for dead ranks."""
    if any(g.broken for g in _groups):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


class ProcessGroup:
    """Every rank of the job (``COMM_WORLD``): `rank`, `world_size`, `local_rank`, the `timeout` of every
    collective in seconds, and the collective backend of each device (`backend_for`). Made by
    `tinycore.distributed.init`. With `comm` None it is the group of one process (no MPI needed)."""

    def __init__(self, comm: Any, info: LaunchInfo, timeout: float):
        self.info, self.timeout = info, float(timeout)
        self.rank, self.world_size, self.local_rank = info.rank, info.world_size, info.local_rank
        self.comm = self.ctl = None
        self.mpi: Any = None
        if comm is not None:
            from mpi4py import MPI

            self.mpi = MPI
            self.comm, self.ctl = comm.Dup(), comm.Dup()  # data and control traffic never meet
            for c in (self.comm, self.ctl):
                c.Set_errhandler(MPI.ERRORS_RETURN)  # an MPI error raises here instead of aborting the job
            self.rank, self.world_size = comm.Get_rank(), comm.Get_size()
        self.seq = 0
        self.broken: str | None = None
        self._backends: dict[str, Any] = {}
        self._header = bytearray(HEADER_BYTES)
        # the buffers of the header exchange, reused by every collective: rank 0's receives (made on first use), the
        # verdict "all agree" it sends (never written), the verdict the others receive into
        self._received: dict[int, Any] | None = None
        import numpy as np

        self._agreed, self._verdict = np.zeros(HEADER_BYTES, np.uint8), np.empty(HEADER_BYTES, np.uint8)
        if not _groups:
            atexit.register(_leave_without_finalize)
        _groups.append(self)

    def __repr__(self) -> str:
        where = f"rank {self.rank} of {self.world_size} ({self.info.launcher})"
        return f"<ProcessGroup {where}, timeout {self.timeout:g} s>"

    # ----- backends

    def backend_for(self, device: str) -> Any:
        """The collective backend for tensors on `device`: the device plugin's answer to
        ``tinycore_collective_backend``, else core's MPI backend (the only one for a group of one process without
        MPI is a local copy)."""
        backend = self._backends.get(device)
        if backend is not None:
            return backend
        from tinycore.distributed.backend import LocalBackend, MPIBackend

        if self.comm is None:
            backend = LocalBackend()
        else:
            if os.environ.get("TINYCORE_DIST_BACKEND", "").lower() != "mpi":
                from tinycore.device import Device
                from tinycore.plugin.manager import get_manager

                family = Device.canonicalize(device).partition(":")[0]
                hook = "tinycore_collective_backend"
                backend = get_manager().call_device_hook(family, hook, device=device, group=self)
            if backend is None:
                backend = MPIBackend(self)
        self._backends[device] = backend
        return backend

    # ----- the checked start of a collective

    def begin(self, kind: str, **fields: Any) -> CollectiveCall:
        """Start collective `kind` (header `fields`: shape, dtype, op, root, backend): exchange headers with every
        rank through rank 0 (see the module docstring) and return the `CollectiveCall` the backend runs under."""
        return self.begin_encoded(kind, header_fields(kind, **fields))

    def begin_encoded(self, kind: str, fields: bytes) -> CollectiveCall:
        """`begin` with the header's fields encoded once by `header_fields` (a replayed collective's never change:
        only the sequence number is added on each call)."""
        if self.broken:
            raise DistributedError(
                f"this process group is broken by an earlier failure ({self.broken.splitlines()[0]}); "
                "no collective can run after it: restart the job"
            )
        self.seq += 1
        name = f"{kind} #{self.seq}"
        call = CollectiveCall(self, name, self.timeout)
        if self.ctl is None or self.world_size == 1:
            return call
        header = b'{"seq":%d,%s' % (self.seq, fields)
        if len(header) > HEADER_BYTES:
            raise DistributedError(f"{name}: its header is {len(header)} bytes (a shape with too many dimensions?)")
        buf = self._header
        buf[: len(header)] = header
        buf[len(header) :] = bytes(HEADER_BYTES - len(header))
        if self.rank == 0:
            self._check_as_root(call, bytes(buf))
        else:
            self._check_with_root(call, buf)
        return call

    def _check_as_root(self, call: CollectiveCall, mine: bytes) -> None:
        import numpy as np

        MPI, ctl = self.mpi, self.ctl
        if self._received is None:  # reused: every receive completed (or the group broke) before the next begins
            self._received = {r: np.empty(HEADER_BYTES, np.uint8) for r in range(1, self.world_size)}
        bufs = self._received
        reqs = {r: ctl.Irecv([bufs[r], MPI.BYTE], source=r, tag=_TAG_HEADER) for r in bufs}
        pending = set(reqs)

        def all_arrived() -> bool:
            for r in list(pending):
                if reqs[r].Test():
                    pending.discard(r)
            return not pending

        try:
            call.wait(all_arrived)
        except CollectiveTimeoutError:
            pass  # rank 0 names the missing ranks below instead
        except self.mpi.Exception:  # a peer's connection broke: it died
            pending = {r for r in pending if not _test_quietly(reqs[r])}
            if not pending:
                raise
        error: DistributedError | None = None
        if pending:
            for r in pending:
                _cancel_quietly(reqs[r])
            missing = sorted(pending)
            who = f"rank {missing[0]}" if len(missing) == 1 else f"ranks {missing}"
            error = CollectiveTimeoutError(
                f"{who} never arrived at {call.name} within {self.timeout:g} s (died, stuck, or called fewer "
                "collectives than the others): the job stops instead of hanging. Raise the timeout with "
                "init(timeout=) or TINYCORE_DIST_TIMEOUT if that rank is only slow",
                call.name,
                tuple(missing),
            )
        elif any(b.tobytes() != mine for b in bufs.values()):  # equal headers (the usual case) need no parsing
            theirs = {0: _parse(mine)}
            theirs.update({r: _parse(b.tobytes()) for r, b in bufs.items()})
            message = _mismatch(theirs)
            if message:  # every rank learns it at the same point and no data moved: the group stays usable
                error = CollectiveMismatchError(f"{call.name}: {message}")
        if error is None:
            out = self._agreed
        else:
            kind = b"T" if isinstance(error, CollectiveTimeoutError) else b"M"
            verdict = kind + str(error).encode()[: HEADER_BYTES - 1]
            out = np.frombuffer(verdict.ljust(HEADER_BYTES, b"\0"), np.uint8).copy()
        sends = [ctl.Isend([out, MPI.BYTE], dest=r, tag=_TAG_VERDICT) for r in bufs if r not in pending]
        if error is not None:
            end = time.monotonic() + 2.0  # small messages go out at once; don't wait long on the dying
            while not all(_test_quietly(s) for s in sends) and time.monotonic() < end:
                time.sleep(1e-3)
            if isinstance(error, CollectiveMismatchError):
                raise error
            call.fail(error)
        for s in sends:
            call.wait(s.Test, "sending the check's verdict")

    def _check_with_root(self, call: CollectiveCall, buf: bytearray) -> None:
        import numpy as np

        MPI, ctl = self.mpi, self.ctl
        mine = np.frombuffer(buf, np.uint8)
        verdict = self._verdict
        send = ctl.Isend([mine, MPI.BYTE], dest=0, tag=_TAG_HEADER)
        recv = ctl.Irecv([verdict, MPI.BYTE], source=0, tag=_TAG_VERDICT)
        call.deadline += 2.0 + 0.1 * self.timeout  # rank 0 decides first; its verdict names the missing ranks
        try:
            call.wait(recv.Test)
        except CollectiveTimeoutError:
            _cancel_quietly(recv)
            call.fail(
                CollectiveTimeoutError(
                    f"rank 0 (which checks every collective) did not answer at {call.name} within "
                    f"{self.timeout:g} s: rank 0 died or is stuck before it. Raise the timeout with init(timeout=) "
                    "or TINYCORE_DIST_TIMEOUT if it is only slow",
                    call.name,
                    (0,),
                )
            )
        except self.mpi.Exception as error:
            call.fail(CollectiveTimeoutError(f"rank 0 is gone at {call.name} ({error})", call.name, (0,)))
        _test_quietly(send)
        text = bytes(verdict).rstrip(b"\0")
        if text:
            message = text[1:].decode(errors="replace")
            if text[:1] == b"T":
                call.fail(CollectiveTimeoutError(message, call.name, _ranks_in(message)))
            raise CollectiveMismatchError(message)
        call.wait(send.Test, "sending its header")

    # ----- small host collectives

    def broadcast_bytes(self, data: bytes | None, root: int = 0) -> bytes:
        """`data` from rank `root` on every rank, checked and time-limited like any collective (a backend uses it to
        share a communicator id)."""
        import numpy as np

        size = len(data) if self.rank == root and data is not None else -1
        if self.rank == root and data is None:
            raise ValueError(f"broadcast_bytes: rank {root} (the root) must pass the bytes")
        call = self.begin("broadcast_bytes", root=root)
        if self.comm is None:
            return data or b""
        length = np.array([size], np.int64)
        req = self.comm.Ibcast(length, root=root)
        call.wait(req.Test)
        out = np.frombuffer(data, np.uint8).copy() if self.rank == root else np.empty(int(length[0]), np.uint8)
        req = self.comm.Ibcast(out, root=root)
        call.wait(req.Test)
        return out.tobytes()

    def barrier(self) -> None:
        """Wait until every rank arrives (the header exchange alone is a barrier), within the timeout."""
        self.begin("barrier")

    def close(self) -> None:
        """Release the backends and communicators (MPI itself stays initialized until the process exits)."""
        for backend in self._backends.values():
            close = getattr(backend, "close", None)
            if close is not None:
                close()
        self._backends.clear()
        if self.comm is not None and not self.broken:
            self.comm.Free()
            self.ctl.Free()
        self.comm = self.ctl = None
        if self in _groups and not self.broken:
            _groups.remove(self)


def header_fields(kind: str, **fields: Any) -> bytes:
    """The fixed part of a collective's header (kind, shape, dtype, op, root, backend) as `ProcessGroup.begin_encoded`
    takes it: compact JSON after the sequence number (a shape given as a tuple is written as a list)."""
    return json.dumps({"kind": kind, **fields}, separators=(",", ":")).encode()[1:]


def _test_quietly(req: Any) -> bool:
    try:
        return bool(req.Test())
    except Exception:  # noqa: BLE001 - a broken peer: the caller reports the collective, not MPI's internals
        return False


def _cancel_quietly(req: Any) -> None:
    try:
        req.Cancel()
    except Exception:  # noqa: BLE001 - best effort on the way to an error
        pass


def _parse(raw: bytes) -> dict[str, Any]:
    return json.loads(raw.rstrip(b"\0").decode())


def _ranks_in(message: str) -> tuple[int, ...]:
    import re

    match = re.match(r"ranks? \[?([0-9, ]+)\]?", message)
    return tuple(int(r) for r in match.group(1).replace(" ", "").split(",") if r) if match else ()


_DESCRIBE = (("shape", "shape"), ("dtype", "dtype"), ("op", "reduce op"), ("root", "root"), ("backend", "backend"))


def _mismatch(headers: dict[int, dict[str, Any]]) -> str:
    """The first disagreement between rank 0's header and another rank's, as a sentence naming both; "" if none."""
    ref = headers[0]
    for rank, other in sorted(headers.items()):
        if other.get("seq") != ref.get("seq") or other.get("kind") != ref.get("kind"):
            return (
                f"rank 0 is at collective #{ref.get('seq')} ({ref.get('kind')}), rank {rank} at #{other.get('seq')} "
                f"({other.get('kind')}): every rank must call the same collectives in the same order"
            )
        for key, what in _DESCRIBE:
            if other.get(key) != ref.get(key):
                return (
                    f"rank 0 has {_show(ref)} and rank {rank} has {_show(other)} (the {what} differs): every rank "
                    "must pass tensors of the same shape and dtype (and the same op and root)"
                )
    return ""


def _show(header: dict[str, Any]) -> str:
    shape = tuple(header["shape"]) if "shape" in header else ()
    parts = [f"{shape}", str(header.get("dtype", "")), f"op={header.get('op')}" if header.get("op") else "",
             f"root={header.get('root')}" if header.get("root") is not None else "",
             f"backend={header.get('backend')}" if header.get("backend") else ""]  # fmt: skip
    return " ".join(p for p in parts if p)
