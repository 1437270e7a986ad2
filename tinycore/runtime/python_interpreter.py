"""The PYTHON device's interpreter: runs a linearized UOp program (docs/pipeline.md §4) with GPU semantics.

How it runs a program:

- **Vectorized over work-items.** Every value is a numpy array over all work-items of the launch (all groups x all
  local lanes; a uniform value is a numpy scalar). ``SPECIAL`` ids are such arrays (``core_id``, the CPU thread id
  of THREAD-split kernels, counts like ``gidx0``). The program is translated once
  into Python source (one numpy statement per UOp) and compiled, so a launch costs a few microseconds per UOp.
- **Loops.** ``RANGE``/``END`` run as Python loops. A loop whose body carries no state between iterations except
  register accumulators (``acc = acc op x``), touches no shared memory, has no barrier and doesn't read a global
  buffer it writes is *vectorized*: its iterations become one more (leading) array axis, processed in chunks, and
  accumulator updates become numpy reductions. Reductions over a million elements therefore run at numpy speed.
- **Control flow.** ``IF``/``ENDIF`` are masks: stores and loads of inactive work-items don't happen.
- **Memory.** Every global, shared (``DEFINE_LOCAL``) and register access is bounds-checked (`IndexError` naming the
  kernel, the buffer and the index); a gated load returns its alt value without touching memory.
- **Shared memory** is poisoned when a launch starts (NaN for floats, ``0xAB`` bytes otherwise) and tracked per
  slot: reading a slot no one wrote, reading a slot another lane wrote since the last ``BARRIER`` (a missing
  barrier), or writing a slot another lane wrote or read since the last barrier raises `RaceError`. Barriers must
  be reached by all lanes of a group or none. Lanes of a group run in a shuffled order, so conflicting writes don't
  get a stable winner. Global buffers that a kernel both reads and writes get the same writer tracking between
  work-items.
- **Semantics** follow C like `tinycore.uop.ops.exec_alu`: integers wrap, IDIV/MOD truncate toward zero (x/0 gives
  0), float->int casts truncate (non-finite gives 0), float16 is numpy's half, bfloat16 values live in float32
  rounded to bfloat16 after every op and are stored as 16-bit words.
- ``VECTORIZE``/``GEP`` vectors are tuples of lanes; ``WMMA`` is emulated from the renderer's `TensorCore`
  layouts (its ``arg`` holds the `TensorCore`, or its name first). ``SHUFFLE`` (a warp's XOR shuffle) gives each
  work-item the value of the lane of its group whose local id is its own XOR the mask.

>>> from tinycore.dtype import dtypes
>>> import numpy as np
>>> from tinycore.uop.ops import Ops
>>> prog = [(Ops.DEFINE_GLOBAL, dtypes.int.ptr(4), (), 0), (Ops.CONST, dtypes.int, (), 4),
...         (Ops.SPECIAL, dtypes.int, (1,), "gidx0"), (Ops.MUL, dtypes.int, (2, 2), None),
...         (Ops.INDEX, dtypes.int.ptr(4), (0, 2), None), (Ops.STORE, dtypes.void, (4, 3), None)]
>>> out = np.zeros(4, np.int32)
>>> Interpreter(prog, "square")([memoryview(out)], (4, 1, 1), (1, 1, 1), ())
>>> out.tolist()
[0, 1, 4, 9]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.helpers import prod
from tinycore.uop.ops import GroupOp, Ops, UOp

__all__ = ["Interpreter", "InterpreterError", "RaceError"]

VECTOR_LIMIT = 1 << 18  # elements per array when a loop is vectorized (iterations x work-items)


class InterpreterError(RuntimeError):
    """A program the interpreter can't run, or that did something undefined (uninitialized read, bad launch)."""


class RaceError(InterpreterError):
    """A data race between work-items: a missing BARRIER, or conflicting unsynchronized accesses."""


# ---------------------------------------------------------------------------------------------------------------
# dtypes


def _np_value_dtype(dt: DType) -> Any:
    """The numpy dtype values of `dt` are computed in (bfloat16 lives in float32)."""
    s = dt.scalar()
    if s == dtypes.bfloat16:
        return np.dtype(np.float32)
    if s == dtypes.index:
        return np.dtype(np.int64)
    return np.dtype(s.fmt)


def _np_storage_dtype(dt: DType) -> Any:
    s = dt.scalar()
    return np.dtype(np.uint16) if s == dtypes.bfloat16 else _np_value_dtype(s)


def _rbf16(x: Any) -> Any:
    """Round float32 values to bfloat16 precision (nearest even), keeping them in float32."""
    a = np.asarray(x, dtype=np.float32)
    bits = a.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    out = np.where(np.isnan(a), a, rounded.view(np.float32))
    return out if out.ndim else np.float32(out)


def _to_bf16_bits(x: Any) -> Any:
    return (np.asarray(_rbf16(x), dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _from_bf16_bits(x: Any) -> Any:
    out = (np.asarray(x, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    return out if out.ndim else np.float32(out)


def _poison(dt: DType) -> Any:
    s = dt.scalar()
    if dtypes.is_float(s):
        return np.float32(np.nan) if s == dtypes.bfloat16 else _np_value_dtype(s).type(np.nan)
    nd = _np_value_dtype(s)
    return np.frombuffer(b"\xab" * nd.itemsize, dtype=nd)[0]


def _const(value: Any, dt: DType) -> Any:
    if isinstance(value, tuple):
        return tuple(_const(v, dt.scalar()) for v in value)
    nd = _np_value_dtype(dt)
    if dt.scalar() == dtypes.bfloat16:
        return _rbf16(value)
    if dt.scalar() == dtypes.index:
        return np.int64(value)
    return nd.type(value)


# ---------------------------------------------------------------------------------------------------------------
# C-semantics helpers used by the generated code


def _idiv(a: Any, b: Any) -> Any:
    a, b = np.asarray(a), np.asarray(b)
    safe = np.where(b == 0, 1, b).astype(b.dtype)
    q = np.floor_divide(a, safe)
    if not np.issubdtype(q.dtype, np.unsignedinteger):
        r = a - q * safe
        q = q + ((r != 0) & ((a < 0) != (safe < 0))).astype(q.dtype)
    out = np.where(b == 0, np.zeros((), q.dtype), q)
    return out if out.ndim else out[()]


def _imod(a: Any, b: Any) -> Any:
    a, b = np.asarray(a), np.asarray(b)
    q = _idiv(a, b)
    out = np.where(b == 0, np.zeros((), a.dtype), a - q * b)
    return out if out.ndim else out[()]


def _f2i(x: Any, nd: Any) -> Any:
    """float -> int like C (truncate), with exec_alu's conventions: non-finite -> 0, out of range wraps."""
    f = np.trunc(np.asarray(x, dtype=np.float64))
    f = np.where(np.isfinite(f), f, 0.0)
    f = np.fmod(f, 18446744073709551616.0)
    f = np.where(f >= 9223372036854775808.0, f - 18446744073709551616.0, f)
    f = np.where(f < -9223372036854775808.0, f + 18446744073709551616.0, f)
    out = f.astype(np.int64).astype(nd)
    return out if out.ndim else out[()]


def _cast(x: Any, src: DType, dst: DType) -> Any:
    s, d = src.scalar(), dst.scalar()
    if s == d:
        return x
    if d == dtypes.bool:
        out = np.asarray(x) != 0
        return out if out.ndim else out[()]
    nd = _np_value_dtype(d)
    if dtypes.is_float(s) and not dtypes.is_float(d):
        return _f2i(x, nd)
    if d == dtypes.bfloat16:
        return _rbf16(np.asarray(x).astype(np.float32))
    out = np.asarray(x).astype(nd)
    return out if out.ndim else out[()]


def _bitcast(x: Any, src: DType, dst: DType) -> Any:
    a = np.ascontiguousarray(_to_bf16_bits(x) if src.scalar() == dtypes.bfloat16 else np.asarray(x))
    if dst.scalar() == dtypes.bfloat16:
        return _from_bf16_bits(a.view(np.uint16))
    out = a.view(_np_value_dtype(dst))
    return out if out.ndim else out[()]


def _mulacc(a: Any, b: Any, c: Any) -> Any:
    a = np.asarray(a)
    if np.issubdtype(a.dtype, np.floating):
        out = (a.astype(np.float64) * b + np.asarray(c, np.float64)).astype(a.dtype)
        return out if out.ndim else out[()]
    return a * b + c


def _threefry(x: Any, key: Any) -> Any:
    x, key = np.asarray(x, np.uint64), np.asarray(key, np.uint64)
    m32 = np.uint64(0xFFFFFFFF)
    x0, x1 = (x & m32).astype(np.uint32), (x >> np.uint64(32)).astype(np.uint32)
    k0, k1 = (key & m32).astype(np.uint32), (key >> np.uint64(32)).astype(np.uint32)
    ks = (k0, k1, np.uint32(0x1BD11BDA) ^ k0 ^ k1)
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for r in rotations[i % 2]:
            x0 = x0 + x1
            x1 = ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))) ^ x0
        x0 = x0 + ks[(i + 1) % 3]
        x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    out = (x1.astype(np.uint64) << np.uint64(32)) | x0.astype(np.uint64)
    return out if out.ndim else out[()]


def _uniform(v: Any, what: str) -> int:
    if np.ndim(v) == 0:
        return int(v)
    flat = np.asarray(v).ravel()
    if flat.size == 0:
        return 0
    if not (flat == flat[0]).all():
        raise InterpreterError(f"{what} differs between work-items; only uniform values are supported")
    return int(flat[0])


def _rng(end: Any, nd: Any) -> Any:
    return np.arange(max(0, _uniform(end, "a loop bound")), dtype=nd)


def _vrng(end: Any, nd: Any, ndim: int, width: int) -> Any:
    n = max(0, _uniform(end, "a loop bound"))
    chunk = max(1, VECTOR_LIMIT // max(1, width))
    shape = (-1,) + (1,) * ndim
    for start in range(0, n, chunk):
        yield np.arange(start, min(n, start + chunk), dtype=nd).reshape(shape)


def _and(m: Any, g: Any) -> Any:
    return g if m is None else (m & g)


def _vector_gate(ptr: UOp) -> bool:
    """Whether the INDEX `ptr` has a bool vector gate (one lane per element of a masked vector access)."""
    return ptr.op is Ops.INDEX and len(ptr.src) > 2 and ptr.src[2].dtype.count > 1


def _active(gate: Any, m: Any) -> Any:
    if gate is None:
        return m
    return gate if m is None else (gate & m)


_REDUCE_FNS = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum}


# ---------------------------------------------------------------------------------------------------------------
# memories


class _Global:
    """A global buffer argument: bounds-checked loads/stores, optional writer tracking between work-items."""

    __slots__ = ("arr", "size", "arg", "kernel", "bf16", "writer", "launch")

    def __init__(
        self,
        mem: memoryview,
        nd: Any,
        bf16: bool,
        declared: int,
        arg: int,
        kernel: str,
        track: bool,
        launch: Any,
        symbolic: bool = False,
    ):
        self.bf16 = bf16
        self.arr = np.frombuffer(mem, dtype=nd) if mem.nbytes else np.zeros(0, nd)
        if declared < 0:
            self.size = len(self.arr)
        elif symbolic:  # sizes follow a variable: each access is checked against the real buffer (a TinyJit
            self.size = len(self.arr)  # capture replays with smaller and larger buffers than it saw)
        else:
            self.size = declared
        if self.size > len(self.arr):
            raise InterpreterError(
                f"kernel {kernel}: buffer arg {arg} has {len(self.arr)} elements, the program declares {declared}"
            )
        self.arg, self.kernel, self.launch = arg, kernel, launch
        self.writer = np.full(self.size, -1, np.int64) if track else None

    def _oob(self, kind: str, idx: Any) -> None:
        raise IndexError(
            f"kernel {self.kernel}: out-of-bounds {kind} buffer arg {self.arg} (DEFINE_GLOBAL "
            f"{self.arg}, {self.size} elements) at index {int(idx)}"
        )

    def _check(self, kind: str, idx: Any) -> None:
        if np.ndim(idx) == 0:
            if not 0 <= idx < self.size:
                self._oob(kind, idx)
        elif idx.size:
            lo, hi = idx.min(), idx.max()
            if lo < 0 or hi >= self.size:
                self._oob(kind, lo if lo < 0 else hi)

    def load(self, idx: Any, gate: Any, alt: Any, m: Any) -> Any:
        """Elements at `idx` (alt where the gate or mask is off, without touching memory there)."""
        act = _active(gate, m)
        if act is None:
            self._check("load from", idx)
            if self.writer is not None:
                self._track_read(idx, None)
            v = self.arr[idx]
        else:
            idx, act = np.broadcast_arrays(idx, act)
            bad = act & ((idx < 0) | (idx >= self.size))
            if bad.any():
                self._oob("load from", idx[bad][0])
            if self.writer is not None:
                self._track_read(idx, act)
            v = self.arr[np.where(act, idx, 0)]
            if alt is None:
                alt = np.zeros((), self.arr.dtype)
            elif self.bf16:
                alt = _to_bf16_bits(alt)
            v = np.where(act, v, alt)
        return _from_bf16_bits(v) if self.bf16 else v

    def store(self, idx: Any, val: Any, gate: Any, m: Any) -> None:
        """Write `val` at `idx` for the active work-items."""
        if self.bf16:
            val = _to_bf16_bits(val)
        act = _active(gate, m)
        if act is None:
            self._check("store to", idx)
            if np.shape(idx) == np.shape(val) or np.ndim(val) == 0:
                if self.writer is not None:
                    self._track_write(np.asarray(idx), None)
                self.arr[idx] = val
                return
            idx_b, val_b = np.broadcast_arrays(idx, val)
            if self.writer is not None:
                self._track_write(idx_b, None)
            self.arr[idx_b] = val_b
            return
        idx_b, val_b, act_b = np.broadcast_arrays(idx, val, act)
        i = idx_b[act_b]
        self._check("store to", i)
        if self.writer is not None:
            self._track_write(idx_b, act_b)
        self.arr[i] = val_b[act_b]

    def _wid(self, shape: tuple) -> Any:
        return np.broadcast_to(self.launch.wid, shape)

    def _accesses(self, idx: Any, act: Any) -> tuple[Any, Any]:
        """The indices accessed by the active work-items, and those work-items' ids."""
        idx = np.asarray(idx)
        wid = self._wid(np.broadcast_shapes(idx.shape, self.launch.wid.shape))
        idx = np.broadcast_to(idx, wid.shape)
        if act is not None:
            act = np.broadcast_to(act, wid.shape)
            idx, wid = idx[act], wid[act]
        return idx, wid

    def _track_read(self, idx: Any, act: Any) -> None:
        idx, wid = self._accesses(idx, act)
        w = self.writer[idx]
        grp = -(2 + wid // self.launch.L)
        bad = (w >= 0) & (w != wid) | (w <= -2) & (w != grp)
        if bad.any():
            j = int(np.argmax(bad))
            raise RaceError(
                f"kernel {self.kernel}: work-item {int(wid.ravel()[j])} reads buffer arg {self.arg} at "
                f"index {int(idx.ravel()[j])}, written by another work-item in this launch (a race)"
            )

    def _track_write(self, idx: Any, act: Any) -> None:
        idx, wid = self._accesses(idx, act)
        self.writer[idx] = wid

    def barrier(self) -> None:
        """Writes before a barrier become visible to the writer's group."""
        if self.writer is not None:
            w = self.writer
            mask = w >= 0
            w[mask] = -(2 + w[mask] // self.launch.L)


class _Local:
    """Shared memory of every group, poisoned at launch, with per-slot writer/reader tracking between barriers."""

    NEVER, SYNCED, NOBODY, MANY = -3, -2, -1, -4

    def __init__(self, launch: Any, dtype: PtrDType, arg: Any, kernel: str):
        self.launch, self.arg, self.kernel = launch, arg, kernel
        self.size = dtype.size
        self.bf16 = dtype.base.scalar() == dtypes.bfloat16
        self.data = np.full((launch.G, self.size), _poison(dtype.base), _np_value_dtype(dtype.base))
        self.writer = np.full((launch.G, self.size), self.NEVER, np.int64)
        self.reader = np.full((launch.G, self.size), self.NOBODY, np.int64)

    def _select(self, idx: Any, act: Any, kind: str, shape: tuple) -> tuple[Any, Any, Any, Any]:
        """Flat (slot, group, lane) of every active access, and the active mask over `shape` (None: all)."""
        launch = self.launch
        idx_b = np.broadcast_to(idx, shape).ravel()
        g_b = np.broadcast_to(launch.group, shape).ravel()
        l_b = np.broadcast_to(launch.lid, shape).ravel()
        act_b = None
        if act is not None:
            act_b = np.broadcast_to(act, shape).ravel()
            idx_b, g_b, l_b = idx_b[act_b], g_b[act_b], l_b[act_b]
        bad = (idx_b < 0) | (idx_b >= self.size)
        if bad.any():
            raise IndexError(
                f"kernel {self.kernel}: out-of-bounds {kind} local buffer {self.arg} ({self.size} "
                f"elements) at index {int(idx_b[bad][0])}"
            )
        return idx_b, g_b, l_b, act_b

    def load(self, idx: Any, gate: Any, alt: Any, m: Any) -> Any:
        """Shared-memory read, checked against never-written slots and unsynchronized writes of other lanes."""
        act = _active(gate, m)
        shape = np.broadcast_shapes(np.shape(idx), np.shape(act), self.launch.group.shape)
        i, g, lane, act_b = self._select(idx, act, "load from", shape)
        w = self.writer[g, i]
        if (w == self.NEVER).any():
            j = int(np.argmax(w == self.NEVER))
            raise InterpreterError(
                f"kernel {self.kernel}: lane {int(lane[j])} of group {int(g[j])} reads local "
                f"buffer {self.arg} at index {int(i[j])}, which was never written (poison)"
            )
        bad = (w >= 0) & (w != lane)
        if bad.any():
            j = int(np.argmax(bad))
            raise RaceError(
                f"kernel {self.kernel}: missing BARRIER: lane {int(lane[j])} of group {int(g[j])} reads "
                f"local buffer {self.arg} at index {int(i[j])}, written by lane {int(w[j])} since the "
                "last barrier"
            )
        r = self.reader[g, i]
        self.reader[g, i] = np.where((r == self.NOBODY) | (r == lane), lane, self.MANY)
        multi = self.reader[g, i] != lane
        if multi.any():
            self.reader[g[multi], i[multi]] = self.MANY
        vals = self.data[g, i]
        if act_b is None:
            return vals.reshape(shape)
        out = np.full(int(np.prod(shape)), alt if alt is not None else np.zeros((), self.data.dtype), self.data.dtype)
        out[act_b] = vals
        return out.reshape(shape)

    def store(self, idx: Any, val: Any, gate: Any, m: Any) -> None:
        """Shared-memory write, checked against accesses of other lanes since the last barrier."""
        act = _active(gate, m)
        shape = np.broadcast_shapes(np.shape(idx), np.shape(val), np.shape(act), self.launch.group.shape)
        i, g, lane, act_b = self._select(idx, act, "store to", shape)
        w, r = self.writer[g, i], self.reader[g, i]
        bad = ((w >= 0) & (w != lane)) | ((r >= 0) & (r != lane)) | (r == self.MANY)
        if bad.any():
            j = int(np.argmax(bad))
            raise RaceError(
                f"kernel {self.kernel}: missing BARRIER: lane {int(lane[j])} of group {int(g[j])} writes "
                f"local buffer {self.arg} at index {int(i[j])}, accessed by another lane since the last "
                "barrier"
            )
        flat = g * self.size + i
        if len(flat) > 1 and len(np.unique(flat)) != len(flat):
            raise RaceError(
                f"kernel {self.kernel}: several lanes write the same slot of local buffer {self.arg} in one store"
            )
        v = np.broadcast_to(val, shape).ravel()
        self.writer[g, i] = lane
        self.data[g, i] = v if act_b is None else v[act_b]

    def barrier(self) -> None:
        """Every write so far is visible to the whole group; reads are forgotten."""
        self.writer[self.writer >= 0] = self.SYNCED
        self.reader[:] = self.NOBODY


class _Reg:
    """A register array: each element holds one value per work-item (or a uniform scalar)."""

    __slots__ = ("data", "size", "arg", "kernel", "poison", "bf16")

    def __init__(self, dtype: PtrDType, arg: Any, kernel: str):
        self.size, self.arg, self.kernel = dtype.size, arg, kernel
        self.data: list[Any] = [None] * max(0, dtype.size)
        self.poison = _poison(dtype.base)
        self.bf16 = dtype.base.scalar() == dtypes.bfloat16

    def _k(self, idx: Any) -> int:
        k = _uniform(idx, "a register index")
        if not 0 <= k < self.size:
            raise IndexError(
                f"kernel {self.kernel}: out-of-bounds access of register {self.arg} ({self.size} elements) at index {k}"
            )
        return k

    def load(self, idx: Any, gate: Any, alt: Any, m: Any) -> Any:
        """The value of register element `idx` (which must have been written)."""
        k = self._k(idx)
        v = self.data[k]
        if v is None:
            raise InterpreterError(f"kernel {self.kernel}: register {self.arg}[{k}] is read before it is written")
        act = _active(gate, m)
        return v if act is None or alt is None else np.where(act, v, alt)

    def store(self, idx: Any, val: Any, gate: Any, m: Any) -> None:
        """Set register element `idx` for the active work-items."""
        k = self._k(idx)
        act = _active(gate, m)
        if act is None:
            self.data[k] = val
        else:
            old = self.data[k] if self.data[k] is not None else self.poison
            self.data[k] = np.where(act, val, old)

    def acc(self, idx: Any, op: Ops, x: Any, nred: int, shape: tuple, m: Any, identity: Any) -> None:
        """``reg[idx] = reg[idx] op x`` for every iteration of the `nred` vectorized loops (leading axes)."""
        k = self._k(idx)
        cur = self.data[k]
        if cur is None:
            raise InterpreterError(
                f"kernel {self.kernel}: register {self.arg}[{k}] is accumulated before it is initialized"
            )
        xb = np.broadcast_to(x, shape)
        if m is not None:
            xb = np.where(np.broadcast_to(m, shape), xb, identity)
        dt = xb.dtype
        fn = _REDUCE_FNS[op]
        if dt == np.bool_:
            fn = np.logical_or if op in (Ops.ADD, Ops.MAX) else np.logical_and
        red = fn.reduce(xb, axis=tuple(range(nred)), dtype=dt)
        new = fn(cur, red)
        self.data[k] = _rbf16(new) if self.bf16 else new


class _Launch:
    """The work-items of one launch: group/lane/work-item ids per array element (lanes of a group shuffled)."""

    def __init__(self, global_size: tuple[int, ...], local_size: tuple[int, ...], seed: int):
        self.global_size, self.local_size = global_size, local_size
        self.G, self.L = prod(global_size), prod(local_size)
        self.N = self.G * self.L
        lanes = np.arange(self.L, dtype=np.int64)
        if self.L > 1:
            lanes = np.random.default_rng(seed).permutation(self.L)
        self.group = np.repeat(np.arange(self.G, dtype=np.int64), self.L)
        self.lid = np.tile(lanes, self.G)
        self.lane_position = np.argsort(lanes)  # local id -> its position among the work-items of a group
        self.wid = self.group * self.L + self.lid
        self._ids: dict[tuple[str, Any], Any] = {}

    def special(self, name: str, size: Any, nd: Any, kernel: str) -> Any:
        """The ids of launch dimension `name` (``gidxN``/``lidxN``) per work-item; `size` must match the launch."""
        kind, dim = ("gidx", 0) if name == "core_id" else (name[:4], int(name[4:]) if name[4:].isdigit() else -1)
        if kind not in ("gidx", "lidx") or not 0 <= dim < 3:
            raise InterpreterError(f"kernel {kernel}: unknown launch id {name!r}")
        dims = self.global_size if kind == "gidx" else self.local_size
        expected = _uniform(size, "a launch id size")
        if dims[dim] != expected:
            raise InterpreterError(
                f"kernel {kernel}: {name} has size {expected} but the launch gives {dims[dim]} "
                f"(global {self.global_size}, local {self.local_size})"
            )
        key = (name, nd)
        ids = self._ids.get(key)
        if ids is None:
            linear = self.group if kind == "gidx" else self.lid
            ids = ((linear // prod(dims[:dim])) % dims[dim]).astype(nd)
            self._ids[key] = ids
        return ids

    def shuffle(self, value: Any, mask: int, kernel: str) -> Any:
        """``SHUFFLE``: each work-item gets `value` of the work-item of its group whose local id is its own XOR
        `mask` (every lane takes part; the partner must exist: the group size a multiple of the warp)."""
        if np.ndim(value) == 0 or np.shape(value)[-1] == 1:
            return value  # uniform over the launch
        partner = self.lid ^ mask
        if (partner >= self.L).any():
            raise InterpreterError(
                f"kernel {kernel}: SHUFFLE with XOR mask {mask} needs the group size {self.L} to be a multiple of "
                f"{2 * mask}"
            )
        return np.take(value, self.group * self.L + self.lane_position[partner], axis=-1)

    def wmma(self, tc: Any, a: tuple, b: tuple, c: tuple, out_nd: Any, kernel: str) -> tuple:
        """Emulate one warp-level matrix multiply: lanes of a group in warps of `tc.threads` (by local id)."""
        threads = tc.threads
        if self.L % threads:
            raise InterpreterError(
                f"kernel {kernel}: WMMA needs the group size {self.L} to be a multiple of {threads} lanes"
            )
        n, m, k = tc.dims
        warps = self.G * (self.L // threads)
        warp = self.group * (self.L // threads) + self.lid // threads
        lane = self.lid % threads
        order = np.argsort(-lane, kind="stable")  # lowest lane written last: its copy of a replicated input wins
        mats = []
        for vals, layout, (rows, cols) in zip((a, b, c), tc.swizzle, ((m, k), (k, n), (m, n))):
            table = np.array(layout, dtype=np.int64).reshape(threads, -1, 2)
            mat = np.zeros((warps, rows, cols), np.float64)
            for i, v in enumerate(vals):
                v = np.broadcast_to(np.asarray(v, np.float64), (self.N,))
                coords = table[lane, i]
                mat[warp[order], coords[order, 0], coords[order, 1]] = v[order]
            mats.append(mat)
        d = mats[0] @ mats[1] + mats[2]
        table = np.array(tc.swizzle[2], dtype=np.int64).reshape(threads, -1, 2)
        out = tuple(d[warp, table[lane, i, 0], table[lane, i, 1]].astype(out_nd) for i in range(table.shape[1]))
        return out


# ---------------------------------------------------------------------------------------------------------------
# static analysis: which loops can be vectorized, which register stores are accumulations


def _analyze(uops: list[UOp]) -> tuple[set[int], dict[int, tuple[int, int, Ops, int]]]:
    pos = {u: i for i, u in enumerate(uops)}
    users: dict[int, list[int]] = {i: [] for i in range(len(uops))}
    for i, u in enumerate(uops):
        for s in u.src:
            users[pos[s]].append(i)
    end_of: dict[int, int] = {}
    for i, u in enumerate(uops):
        if u.op is Ops.END:
            for r in u.src[1:]:
                end_of[pos[r]] = i

    def base(i: int) -> UOp | None:
        return _base(uops[i])

    accform: dict[int, tuple[int, int, Ops, int]] = {}  # store -> (reg pos, load pos, op, x pos)
    for i, u in enumerate(uops):
        b = base(i)
        if u.op is not Ops.STORE or b is None or b.op is not Ops.DEFINE_REG:
            continue
        val = u.src[1]
        if val.op not in _REDUCE_FNS or len(val.src) != 2 or users[pos[val]] != [i]:
            continue
        for j, other in ((0, 1), (1, 0)):
            ld = val.src[j]
            if (
                ld.op is Ops.LOAD
                and len(ld.src) == 1
                and ld.src[0].op is Ops.INDEX
                and len(ld.src[0].src) == 2
                and _base(ld) is b
                and _same_index(ld.src[0].src[1], u.src[0].src[1])
                and users[pos[ld]] == [pos[val]]
            ):
                accform[i] = (pos[b], pos[ld], val.op, pos[val.src[other]])
                break

    vec: set[int] = set()
    for p in sorted(end_of, reverse=True):
        q = end_of[p]
        ok = True
        loads: set[UOp] = set()
        stores: set[UOp] = set()
        reg_access: dict[int, list[tuple[int, str]]] = {}
        for i in range(p + 1, q):
            u = uops[i]
            if u.op in (Ops.BARRIER, Ops.WMMA, Ops.SHUFFLE, Ops.CUSTOM) or (u.op is Ops.RANGE and i not in vec):
                ok = False
                break
            b = base(i)
            if b is None:
                continue
            if b.op is Ops.DEFINE_LOCAL:
                ok = False
                break
            if b.op is Ops.DEFINE_GLOBAL:
                (loads if u.op is Ops.LOAD else stores).add(b)
            elif b.op is Ops.DEFINE_REG:
                kind = "acc" if i in accform else ("store" if u.op is Ops.STORE else "load")
                reg_access.setdefault(pos[b], []).append((i, kind))
        if not ok or loads & stores:
            continue
        acc_loads = {accform[s][1] for s in accform if p < s < q}
        for r, acc in reg_access.items():
            first_pos, first_kind = acc[0]
            if first_kind == "store":
                later = [i for i in range(q + 1, len(uops)) if base(i) is uops[r]]
                if later:
                    ok = False
            elif any(kind == "store" or (kind == "load" and i not in acc_loads) for i, kind in acc):
                ok = False
        if ok:
            vec.add(p)
    return vec, accform


def _base(u: UOp) -> UOp | None:
    """The buffer (DEFINE_GLOBAL/LOCAL/REG) a LOAD or STORE goes through, looking through AFTER."""
    if u.op not in (Ops.LOAD, Ops.STORE) or u.src[0].op is not Ops.INDEX:
        return None
    b = u.src[0].src[0]
    while b.op is Ops.AFTER:
        b = b.src[0]
    return b


def _same_index(a: UOp, b: UOp) -> bool:
    return a is b or (a.op is Ops.CONST and b.op is Ops.CONST and a.arg == b.arg)


# ---------------------------------------------------------------------------------------------------------------
# code generation


_BINARY = {
    Ops.ADD: "+",
    Ops.SUB: "-",
    Ops.MUL: "*",
    Ops.FDIV: "/",
    Ops.CMPLT: "<",
    Ops.CMPNE: "!=",
    Ops.CMPEQ: "==",
    Ops.AND: "&",
    Ops.OR: "|",
    Ops.XOR: "^",
}
_UNARY_FN = {
    Ops.EXP2: "np.exp2",
    Ops.LOG2: "np.log2",
    Ops.SIN: "np.sin",
    Ops.SQRT: "np.sqrt",
    Ops.RECIP: "np.reciprocal",
}
# ops that are one call on all their operands
_CALL_FN = {
    Ops.MAX: "np.maximum",
    Ops.SHL: "np.left_shift",
    Ops.SHR: "np.right_shift",
    Ops.POW: "np.power",
    Ops.WHERE: "_where",
    Ops.MULACC: "_mulacc",
    Ops.THREEFRY: "_threefry",
}


def _alu_expr(u: UOp, a: list[str]) -> str:
    op, dt = u.op, u.dtype.scalar()
    is_bool = dt == dtypes.bool
    if op is Ops.ADD and is_bool:
        return f"({a[0]} | {a[1]})"
    if op is Ops.MUL and is_bool:
        return f"({a[0]} & {a[1]})"
    if op in _BINARY:
        return f"({a[0]} {_BINARY[op]} {a[1]})"
    if op in _UNARY_FN:
        return f"{_UNARY_FN[op]}({a[0]})"
    if op is Ops.NEG:
        return f"np.logical_not({a[0]})" if is_bool else f"np.negative({a[0]})"
    if op is Ops.TRUNC:
        return f"np.trunc({a[0]})" if dtypes.is_float(dt) else a[0]
    if op is Ops.IDIV:
        x, d = u.src
        if x.vmin >= 0 and d.op is Ops.CONST and d.arg > 0:
            return f"({a[0]} // {a[1]})"
        return f"_idiv({a[0]}, {a[1]})"
    if op is Ops.MOD:
        x, d = u.src
        if x.vmin >= 0 and d.op is Ops.CONST and d.arg > 0:
            return f"({a[0]} % {a[1]})"
        return f"_imod({a[0]}, {a[1]})"
    if op in _CALL_FN:
        return f"{_CALL_FN[op]}({', '.join(a)})"
    raise InterpreterError(f"the interpreter can't run {op}")


def _where(g: Any, a: Any, b: Any) -> Any:
    out = np.where(g, a, b)
    return out if out.ndim else out[()]


class Interpreter:
    """A linearized program, translated once to numpy code; call it to run a launch.

    `program` is the list of ``(op, dtype, source positions, arg)`` tuples of `decode_program`; `tensor_cores` are
    the renderer's `TensorCore`s (for WMMA). Calling it runs one launch on the buffers (flat memoryviews, in
    argument order) with the launch dims and variable values, raising `IndexError` / `RaceError` /
    `InterpreterError` for undefined behaviour.
    """

    def __init__(self, program: Sequence[tuple], name: str = "kernel", tensor_cores: Sequence[Any] = ()):
        self.name = name
        self.tensor_cores = list(tensor_cores)
        uops: list[UOp] = []
        for op, dtype, srcs, arg in program:  # tagged by position: equal tuples at two positions stay distinct
            uops.append(UOp(op, dtype, tuple(uops[s] for s in srcs), arg, tag=len(uops)))
        self.uops = uops
        self.vars = [u for u in uops if u.op is Ops.DEFINE_VAR]
        self._var_types = [(v.arg, _np_value_dtype(v.dtype).type) for v in self.vars]
        bases = [(u.op, _base(u)) for u in uops]
        loaded = {b.arg for op, b in bases if op is Ops.LOAD and b is not None and b.op is Ops.DEFINE_GLOBAL}
        stored = {b.arg for op, b in bases if op is Ops.STORE and b is not None and b.op is Ops.DEFINE_GLOBAL}
        self.tracked = loaded & stored
        self.buffers = [
            (u.arg, _np_storage_dtype(u.dtype.base), u.dtype.base.scalar() == dtypes.bfloat16, u.dtype.size,
             u.arg in self.tracked)
            for u in uops
            if u.op is Ops.DEFINE_GLOBAL
        ]  # fmt: skip
        self._nglob = max((b[0] for b in self.buffers), default=-1) + 1
        self.has_locals = any(u.op is Ops.DEFINE_LOCAL for u in uops)
        self._launches = 0
        self.source, self._fn = self._generate()

    # ----- code generation

    def _generate(self) -> tuple[str, Any]:
        uops = self.uops
        pos = {u: i for i, u in enumerate(uops)}
        vec, accform = _analyze(uops)
        ns: dict[str, Any] = {
            "np": np,
            "_idiv": _idiv,
            "_imod": _imod,
            "_cast": _cast,
            "_bitcast": _bitcast,
            "_mulacc": _mulacc,
            "_threefry": _threefry,
            "_where": _where,
            "_rng": _rng,
            "_vrng": _vrng,
            "_and": _and,
            "_rbf16": _rbf16,
            "_Reg": _Reg,
            "_Local": _Local,
            "Ops": Ops,
            "_K": self.name,
            "_InterpreterError": InterpreterError,
        }
        lines = ["def _kernel(_B, _V, _X):", "  _m = None", "  _sh0 = (_X.N,)", "  _w0 = _X.N"]
        indent = 1
        depth = 0  # vectorized loops open
        loop_stack: list[tuple[int, bool]] = []
        if_stack: list[int] = []
        reg_birth: dict[int, int] = {}
        skip: set[int] = set()
        reduced_stores: dict[int, int] = {}
        # which accumulator stores reduce over vectorized axes (decided statically, in program order)
        d = 0
        for i, u in enumerate(uops):
            if u.op is Ops.RANGE:
                d += i in vec
            elif u.op is Ops.END:
                d -= sum(pos[r] in vec for r in u.src[1:])
            elif u.op is Ops.STORE and (b := _base(u)) is not None and b.op is Ops.DEFINE_REG:
                r = pos[b]
                if i in accform and d > reg_birth.get(r, 0):
                    reduced_stores[i] = d - reg_birth.get(r, 0)
                    skip.update((accform[i][1], pos[u.src[1]]))
                elif i not in accform:
                    reg_birth[r] = d
        vn = [f"v{i}" for i in range(len(uops))]
        var_n = 0
        tcs: dict[int, Any] = {}

        def emit(line: str) -> None:
            lines.append("  " * indent + line)

        for i, u in enumerate(uops):
            if i in skip:
                continue
            op, dt, s = u.op, u.dtype, [vn[pos[x]] for x in u.src]
            if op is Ops.DEFINE_GLOBAL:
                emit(f"{vn[i]} = _B[{u.arg}]")
            elif op is Ops.DEFINE_VAR:
                emit(f"{vn[i]} = _V[{var_n}]")
                var_n += 1
            elif op is Ops.DEFINE_LOCAL:
                ns[f"_t{i}"] = dt
                emit(f"{vn[i]} = _X.local({i}, _t{i}, {u.arg!r})")
            elif op is Ops.DEFINE_REG:
                ns[f"_t{i}"] = dt
                emit(f"{vn[i]} = _Reg(_t{i}, {u.arg!r}, _K)")
            elif op in (Ops.CONST, Ops.VCONST):
                ns[f"_c{i}"] = _const(u.arg, dt)
                emit(f"{vn[i]} = _c{i}")
            elif op is Ops.SPECIAL:
                ns[f"_n{i}"] = _np_value_dtype(dt)
                emit(f"{vn[i]} = _X.special({u.arg!r}, {s[0]}, _n{i}, _K)")
            elif op is Ops.RANGE:
                ns[f"_n{i}"] = _np_value_dtype(dt)
                if i in vec:
                    emit(f"for {vn[i]} in _vrng({s[0]}, _n{i}, {depth + 1}, _w{depth}):")
                    indent += 1
                    emit(f"_sh{depth + 1} = ({vn[i]}.shape[0],) + _sh{depth}")
                    emit(f"_w{depth + 1} = _w{depth} * {vn[i]}.shape[0]")
                    depth += 1
                else:
                    emit(f"for {vn[i]} in _rng({s[0]}, _n{i}):")
                    indent += 1
                loop_stack.append((i, i in vec))
                emit("pass")
            elif op is Ops.END:
                for _ in u.src[1:]:  # END(effect, *ranges): innermost first
                    _, was_vec = loop_stack.pop()
                    indent -= 1
                    depth -= was_vec
            elif op is Ops.IF:
                emit(f"_m{i} = _m")
                emit(f"_m = _and(_m, {s[0]})")
                if_stack.append(i)
            elif op is Ops.ENDIF:
                emit(f"_m = _m{if_stack.pop()}")
            elif op is Ops.INDEX:
                emit(f"{vn[i]} = ({s[0]}, {s[1]}, {s[2] if len(s) > 2 else 'None'})")
            elif op is Ops.LOAD:
                alt = s[1] if len(s) > 1 else "None"
                if dt.count > 1 and not isinstance(dt, PtrDType):
                    gate = f"{s[0]}[2]" + ("[_k]" if _vector_gate(u.src[0]) else "")
                    alt += "[_k]" if len(s) > 1 and u.src[1].dtype.count > 1 else ""
                    emit(
                        f"{vn[i]} = tuple({s[0]}[0].load({s[0]}[1] + _k, {gate}, {alt}, _m) "
                        f"for _k in range({dt.count}))"
                    )
                else:
                    emit(f"{vn[i]} = {s[0]}[0].load({s[0]}[1], {s[0]}[2], {alt}, _m)")
            elif op is Ops.STORE:
                if i in reduced_stores:
                    _, _, rop, xpos = accform[i]
                    ns[f"_id{i}"] = _const(_identity(rop, u.src[1].dtype), u.src[1].dtype)
                    emit(
                        f"{s[0]}[0].acc({s[0]}[1], Ops.{rop.name}, {vn[xpos]}, {reduced_stores[i]}, _sh{depth}, _m, "
                        f"_id{i})"
                    )
                elif u.src[1].dtype.count > 1:
                    gate = f"{s[0]}[2]" + ("[_k]" if _vector_gate(u.src[0]) else "")
                    emit(f"for _k, _v in enumerate({s[1]}): {s[0]}[0].store({s[0]}[1] + _k, _v, {gate}, _m)")
                else:
                    emit(f"{s[0]}[0].store({s[0]}[1], {s[1]}, {s[0]}[2], _m)")
            elif op is Ops.BARRIER:
                emit("_X.barrier(_m)")
            elif op in GroupOp.ALU:
                if dt.count > 1:
                    lanes = [
                        _alu_expr(u, [f"{x}[{k}]" if src.dtype.count > 1 else x for x, src in zip(s, u.src)])
                        for k in range(dt.count)
                    ]
                    emit(f"{vn[i]} = ({', '.join(lanes)},)")
                else:
                    expr = _alu_expr(u, s)
                    emit(f"{vn[i]} = {'_rbf16(' + expr + ')' if dt.scalar() == dtypes.bfloat16 else expr}")
            elif op in (Ops.CAST, Ops.BITCAST):
                fn = "_cast" if op is Ops.CAST else "_bitcast"
                ns[f"_f{i}"], ns[f"_t{i}"] = u.src[0].dtype.scalar(), dt.scalar()
                if dt.count > 1:
                    emit(f"{vn[i]} = tuple({fn}(_x, _f{i}, _t{i}) for _x in {s[0]})")
                else:
                    emit(f"{vn[i]} = {fn}({s[0]}, _f{i}, _t{i})")
            elif op is Ops.VECTORIZE:
                emit(f"{vn[i]} = ({', '.join(s)},)")
            elif op is Ops.GEP:
                lanes = u.arg
                emit(
                    f"{vn[i]} = {s[0]}[{lanes[0]}]"
                    if len(lanes) == 1
                    else f"{vn[i]} = ({', '.join(f'{s[0]}[{k}]' for k in lanes)},)"
                )
            elif op is Ops.SHUFFLE:
                if dt.count > 1:
                    emit(f"{vn[i]} = tuple(_X.shuffle(_x, {int(u.arg)}, _K) for _x in {s[0]})")
                else:
                    emit(f"{vn[i]} = _X.shuffle({s[0]}, {int(u.arg)}, _K)")
            elif op is Ops.WMMA:
                tcs[i] = self._find_tc(u.arg)
                ns[f"_tc{i}"], ns[f"_n{i}"] = tcs[i], _np_value_dtype(dt)
                emit(f"{vn[i]} = _X.wmma(_tc{i}, {s[0]}, {s[1]}, {s[2]}, _n{i}, _K)")
            elif op in (Ops.AFTER, Ops.NOOP):
                emit(f"{vn[i]} = {s[0]}")
            elif op in (Ops.SINK, Ops.GROUP):
                continue
            else:
                raise InterpreterError(f"kernel {self.name}: the interpreter can't run {op}")
        source = "\n".join(lines) + "\n"
        exec(compile(source, f"<PYTHON kernel {self.name}>", "exec"), ns)  # noqa: S102
        return source, ns["_kernel"]

    def _find_tc(self, arg: Any) -> Any:
        from tinycore.renderer import TensorCore

        items = arg if isinstance(arg, tuple) else (arg,)
        for a in items:
            if isinstance(a, TensorCore):
                return a
        for tc in self.tensor_cores:
            if items and tc.name == items[0]:
                return tc
        raise InterpreterError(f"kernel {self.name}: WMMA {arg!r} names no tensor core of this device")

    # ----- running

    def __call__(
        self,
        bufs: Sequence[memoryview],
        global_size: Sequence[int] = (1, 1, 1),
        local_size: Sequence[int] | None = (1, 1, 1),
        vals: Sequence[int] = (),
    ) -> None:
        gsz = tuple(global_size) if len(global_size) == 3 else tuple(global_size) + (1,) * (3 - len(global_size))
        lsz = (1, 1, 1) if local_size is None else tuple(local_size)
        lsz = lsz if len(lsz) == 3 else lsz + (1,) * (3 - len(lsz))
        if len(vals) != len(self.vars):
            raise InterpreterError(f"kernel {self.name}: needs {len(self.vars)} variable values, got {len(vals)}")
        if gsz[0] * gsz[1] * gsz[2] * lsz[0] * lsz[1] * lsz[2] == 0:
            return
        self._launches += 1
        launch = _LaunchCtx(gsz, lsz, self._launches, self.name)
        glob: list[Any] = [None] * self._nglob
        if self._nglob > len(bufs):
            raise InterpreterError(f"kernel {self.name}: uses {self._nglob} buffer args but {len(bufs)} were given")
        tracked = []
        for arg, nd, bf16, declared, track in self.buffers:
            glob[arg] = g = _Global(bufs[arg], nd, bf16, declared, arg, self.name, track, launch, bool(self.vars))
            if track:
                tracked.append(g)
        launch.globals = tracked
        values = []
        for ((name, lo, hi), cast), val in zip(self._var_types, vals):
            if not lo <= int(val) <= hi:
                raise InterpreterError(f"kernel {self.name}: variable {name}={val} is outside [{lo}, {hi}]")
            values.append(cast(val))
        with np.errstate(all="ignore"):
            self._fn(glob, values, launch)


def _identity(op: Ops, dt: DType) -> Any:
    if op is Ops.ADD:
        return False if dt.scalar() == dtypes.bool else 0
    if op is Ops.MUL:
        return True if dt.scalar() == dtypes.bool else 1
    return dtypes.min(dt.scalar())


class _LaunchCtx(_Launch):
    """A launch plus its shared memories (created by the program as it runs)."""

    _geometry: dict[tuple, _Launch] = {}

    def __init__(self, gsz: tuple[int, ...], lsz: tuple[int, ...], count: int, kernel: str):
        seed = count % 3 if prod(lsz) > 1 else 0
        key = (gsz, lsz, seed)
        base = _LaunchCtx._geometry.get(key)
        if base is None:
            base = _Launch(gsz, lsz, seed)
            if base.N <= 1 << 18:  # cache small geometries only: a big launch's id arrays cost more to keep
                if len(_LaunchCtx._geometry) >= 32:
                    _LaunchCtx._geometry.clear()
                _LaunchCtx._geometry[key] = base
        self.__dict__.update(base.__dict__)
        self.kernel = kernel
        self.locals: list[_Local] = []
        self.globals: list[_Global] = []

    def local(self, i: int, dtype: PtrDType, arg: Any) -> _Local:
        """A fresh (poisoned) shared memory for every group of this launch."""
        mem = _Local(self, dtype, arg, self.kernel)
        self.locals.append(mem)
        return mem

    def barrier(self, m: Any) -> None:
        """BARRIER: all lanes of a group or none must reach it; synchronizes shared and tracked global memory."""
        if m is not None:
            active = np.broadcast_to(m, self.group.shape)
            per_group = np.bincount(self.group[active], minlength=self.G)
            if ((per_group != 0) & (per_group != self.L)).any():
                raise InterpreterError(f"kernel {self.kernel}: BARRIER reached by only some lanes of a group")
        for mem in self.locals:
            mem.barrier()
        for g in self.globals:
            g.barrier()
