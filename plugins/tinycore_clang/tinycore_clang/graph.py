"""`ClangGraph`: the CLANG device's JIT graph runner: a captured list of kernels replayed in **one** foreign call.

On construction the runner builds a table of ``tc_item`` entries (the thread pool's struct, see
`tinycore_clang.threadpool`), one per kernel in capture order: the kernel's uniform entry point ``NAME_tc``, a
pointer into the runner's buffer-pointer table, a pointer into its value table, and the number of core ids. A
replay is one call of the runtime library's ``tc_run_graph``, which calls plain kernels directly on the calling
thread and hands each run of consecutive threaded (``core_id``) kernels to ``tc_run_batch``, so the pool puts
barriers only where needed. Nothing is generated or compiled per graph: capturing a JIT costs no compiler run.

A replay patches the tables in place, only where something changed (`GraphUpdate`: input pointers, variable
values, symbolic core counts), then makes the one call: a `functools.partial` of the foreign function with every
argument already converted (the tables never move), rebuilt only when the device's thread count changes.
`resubmit` (nothing changed since the last call) is just that call. `submissions` counts the calls (and the module's
`graph_stats.submissions` all of them), so tests assert "one submission" without timing anything.
"""

from __future__ import annotations

import ctypes
import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tinycore.sdk import CompiledRunner, ExecItem, GraphRunner, GraphUpdate

if TYPE_CHECKING:
    from tinycore.sdk import Buffer

__all__ = ["ClangGraph", "GraphStats", "graph_stats"]


@dataclass
class GraphStats:
    """Process-wide counters of CLANG graphs: `built` runners, `submissions` (one foreign call each)."""

    built: int = 0
    submissions: int = 0


graph_stats = GraphStats()


def _ptr(buf: Buffer) -> int:
    """The raw address of an allocated CLANG buffer (its allocator handle is a `ClangMemory`)."""
    handle = buf.ensure_allocated().opaque
    return handle if isinstance(handle, int) else handle.ptr


class ClangGraph(GraphRunner):
    """``ClangGraph(device, items, input_slots, var_names)``: replay `items` (CLANG kernels) as one C call.

    `submissions` counts the replays (each one foreign call); `table` is the ``tc_item`` array passed to
    ``tc_run_graph``, `ptrs`/`vals_table` the buffer-pointer and value tables its entries point into.
    """

    family = "CLANG"

    def __init__(
        self, device: str, items: list[ExecItem], input_slots: dict[tuple[int, int], int], var_names: list[str]
    ):
        super().__init__(device, items, input_slots, var_names)
        from tinycore.sdk import Device
        from tinycore_clang.threadpool import TcItem, get_pool

        self.device_obj = Device[device]
        self.programs: list[Any] = []
        for item in self.items:
            runner = item.runner
            assert isinstance(runner, CompiledRunner)
            self.programs.append(self.device_obj.runtime(runner.p.function_name, runner.lib))
        # the tables the items point into
        self.buf_offsets: list[int] = []
        self.var_offsets: list[int] = []
        nbufs = nvars = 0
        for prg in self.programs:
            self.buf_offsets.append(nbufs)
            self.var_offsets.append(nvars)
            nbufs += prg.nbufs
            nvars += prg.nvars
        self.ptrs = (ctypes.c_void_p * max(1, nbufs))()
        self.vals_table = (ctypes.c_int64 * max(1, nvars))()
        self.table = (TcItem * max(1, len(self.programs)))()
        ptrs_at, vals_at = ctypes.addressof(self.ptrs), ctypes.addressof(self.vals_table)
        for index, (item, prg) in enumerate(zip(self.items, self.programs)):
            if len(item.bufs) != prg.nbufs:
                raise ValueError(f"ClangGraph: item {index} has {len(item.bufs)} buffers, its kernel takes {prg.nbufs}")
            entry = self.table[index]
            entry.fn = prg.entry
            entry.bufs = ptrs_at + self.buf_offsets[index] * ctypes.sizeof(ctypes.c_void_p)
            entry.vals = vals_at + self.var_offsets[index] * ctypes.sizeof(ctypes.c_int64)
            for j, buf in enumerate(item.bufs):
                if buf is not None and (index, j) not in self.input_slots:
                    self.ptrs[self.buf_offsets[index] + j] = _ptr(buf)
            for j, value in enumerate(self.vals.get(index, ())):
                self.vals_table[self.var_offsets[index] + j] = value
            cores = prg.info.cores
            if cores > 0:
                entry.ntasks = cores
            elif cores < 0 and index in self.launch_dims:
                entry.ntasks = int(self.launch_dims[index][0][0])
            else:
                entry.ntasks = 1
        self._fn = get_pool(self.device_obj.pool_compiler).run_graph
        self._first = True
        self._launch: Any = None
        self._launch_threads = -1
        self.submissions = 0
        graph_stats.built += 1

    def _launcher(self) -> Any:
        """The foreign call with every argument bound (the tables are patched in place, so only the thread count
        can change what is passed: the call is rebuilt when the device's `threads` changes)."""
        threads = int(self.device_obj.threads)
        if threads != self._launch_threads:
            table = ctypes.c_void_p(ctypes.addressof(self.table))
            self._launch = functools.partial(self._fn, table, ctypes.c_int(len(self.programs)), ctypes.c_int(threads))
            self._launch_threads = threads
        return self._launch

    def submit(self, update: GraphUpdate, wait: bool) -> float | None:
        """Patch the changed table entries, then run the whole batch with one foreign call."""
        ptrs, offsets = self.ptrs, self.buf_offsets
        if self._first:  # every input slot must be written once, even if the base class saw no change
            self._first = False
            for (i, j), _ in self.input_slots.items():
                buf = self.items[i].bufs[j]
                if buf is not None:
                    ptrs[offsets[i] + j] = _ptr(buf)
        for i, j, buf in update.buffers:
            ptrs[offsets[i] + j] = _ptr(buf)
        for i, vals in update.vals.items():
            base = self.var_offsets[i]
            for k, value in enumerate(vals):
                self.vals_table[base + k] = value
        for i, (global_size, _) in update.launch_dims.items():
            if self.programs[i].info.cores < 0:
                self.table[i].ntasks = int(global_size[0])
        return self.resubmit(wait)

    def resubmit(self, wait: bool = False) -> float | None:
        """Run the batch again with the tables as they are: one foreign call."""
        if self._first:
            raise RuntimeError(f"{self.display_name}: resubmit() before the first call")
        launch = self._launch if self._launch_threads == self.device_obj.threads else self._launcher()
        if wait:
            start = time.perf_counter()
            launch()
            elapsed: float | None = time.perf_counter() - start
        else:
            launch()
            elapsed = None
        self.submissions += 1
        graph_stats.submissions += 1
        return elapsed
