"""Test utilities of tinycore-clang: build tiny linearized programs by hand and run them on numpy arrays.

Used by this distribution's tests and usable by anyone checking the CLANG renderer against a reference: `Runner`
renders, compiles (through the disk cache, or in one `compile_cached_many` batch) and launches programs with
``data<i>`` bound to ``buffers[i]``. Programs follow docs/pipeline.md section 4; `linearize` orders a simple graph
(one loop nest, effects under END/SINK) by a plain topological sort, which is a valid linearization for those.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tinycore.sdk import AxisType, DType, Ops, UOp, dtypes


def unavailable_reason() -> str | None:
    """Why the CLANG device can't run here (its probe's reason: no LLVM and no C compiler, a bad ``CLANG_CPU``...),
    or None when it can; what tests skip on."""
    from tinycore_clang import plugin

    probe = plugin.tinycore_probe_device(name="CLANG")
    return None if probe.ok else f"CLANG is unavailable: {probe.reason}"


def np_dtype(dtype: DType) -> np.dtype:
    """The numpy storage dtype of a tinycore dtype (bfloat16 is its raw uint16 bits)."""
    if dtype.scalar() == dtypes.bfloat16:
        return np.dtype(np.uint16)
    return np.dtype(dtypes.to_np(dtype.scalar()))


def linearize(*effects: UOp) -> list[UOp]:
    """A topological order of `effects` (END/STORE roots; several are wrapped in a SINK)."""
    root = effects[0] if len(effects) == 1 else UOp.sink(*effects)
    return list(root.toposort())


class ProgramBuilder:
    """Builds a linearized program in the order you add effects: `add(u)` appends every not yet emitted source of
    `u` (sources first), then `u`. Open a loop by adding its RANGE, close it by adding its END.

    >>> b = ProgramBuilder()
    >>> r = b.add(loop(4))
    >>> [u.op.name for u in b.uops]
    ['CONST', 'RANGE']
    """

    def __init__(self) -> None:
        self.uops: list[UOp] = []
        self._seen: set[UOp] = set()

    def add(self, *uops: UOp) -> UOp:
        """Append `uops` (and their missing sources); returns the last one."""
        for u in uops:
            for node in u.toposort():
                if node not in self._seen:
                    self._seen.add(node)
                    self.uops.append(node)
        return uops[-1]


def loop(n: int, axis: int = 0, axis_type: AxisType = AxisType.LOOP) -> UOp:
    """An int32 RANGE over ``0 .. n-1``."""
    return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, n),), (axis, axis_type))


def elementwise(op: Ops | Callable[..., UOp], in_dtypes: Sequence[DType], out_dtype: DType, n: int) -> list[UOp]:
    """``data0[i] = op(data1[i], data2[i], ...)`` for ``i < n``; `op` is an `Ops` member or a UOp builder."""
    out = UOp.define_global(0, out_dtype, n)
    ins = [UOp.define_global(k + 1, dt, n) for k, dt in enumerate(in_dtypes)]
    i = loop(n)
    loads = [g.index(i).load() for g in ins]
    if isinstance(op, Ops):
        if op is Ops.WHERE:
            value = loads[0].alu(Ops.WHERE, *loads[1:])
        elif op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
            value = loads[0].alu(op, *loads[1:])
        else:
            value = UOp(op, out_dtype, tuple(loads))
    else:
        value = op(*loads)
    return linearize(out.index(i).store(value).end(i))


class Runner:
    """Runs hand-built programs on a CLANG device (`device.renderer`, `compiler`, `runtime`, `allocator`)."""

    def __init__(self, device: Any):
        self.device = device
        self.counter = 0

    def source(self, uops: Sequence[UOp], name: str | None = None) -> str:
        """Render `uops` as a kernel with a fresh name."""
        self.counter += 1
        return self.device.renderer.render(list(uops), name=name or f"k{self.counter}")

    def launch(
        self,
        src: str,
        lib: bytes,
        buffers: Sequence[np.ndarray],
        vals: Sequence[int] = (),
        global_size: tuple[int, ...] = (1, 1, 1),
    ) -> list[np.ndarray]:
        """Load `lib` and run its kernel on copies of `buffers`; returns their contents afterwards."""
        name = src.splitlines()[0].rsplit(" ", 1)[-1]
        program = self.device.runtime(name, lib)
        alloc = self.device.allocator
        handles = []
        for arr in buffers:
            arr = np.ascontiguousarray(arr)
            handle = alloc.alloc(max(arr.nbytes, 1))
            if arr.nbytes:
                alloc.copyin(handle, memoryview(arr.reshape(-1).view(np.uint8)))
            handles.append((handle, arr))
        program(*[h for h, _ in handles], global_size=tuple(global_size), vals=tuple(vals))
        out = []
        for handle, arr in handles:
            back = np.empty_like(arr)
            if arr.nbytes:
                alloc.copyout(memoryview(back.reshape(-1).view(np.uint8)), handle)
            alloc.free(handle, max(arr.nbytes, 1))
            out.append(back)
        return out

    def __call__(
        self,
        uops: Sequence[UOp],
        buffers: Sequence[np.ndarray],
        vals: Sequence[int] = (),
        global_size: tuple[int, ...] = (1, 1, 1),
        name: str | None = None,
    ) -> list[np.ndarray]:
        """Render, compile (disk-cached) and run `uops` with `buffers[i]` bound to ``DEFINE_GLOBAL`` i."""
        src = self.source(uops, name)
        lib = self.device.compiler.compile_cached(src)
        return self.launch(src, lib, buffers, vals, global_size)

    def many(self, programs: Sequence[tuple[Sequence[UOp], Sequence[np.ndarray]]]) -> list[list[np.ndarray]]:
        """Run several programs whose kernels are compiled together (`compile_cached_many`)."""
        srcs = [self.source(uops) for uops, _ in programs]
        libs = self.device.compiler.compile_cached_many(srcs)
        return [self.launch(src, lib, bufs) for src, lib, (_, bufs) in zip(srcs, libs, programs)]
