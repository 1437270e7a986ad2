"""`ClangGraph`: the CLANG device's JIT graph runner: a captured list of kernels replayed in **one** foreign call.

On construction the runner generates one C function for the batch::

    void tc_graph(void* const* fns, void** p, const long long* v, const int* nt, tc_batch_fn batch, int nthreads);

It calls the kernels in capture order: a plain kernel through its typed entry point (``fns[k]`` cast to
``void(void*, ..., int/long long ...)``, arguments read from the pointer table `p` and the value table `v`), and
each run of consecutive threaded (``core_id``) kernels through the thread pool's ``tc_run_batch`` (`batch`, from
`tinycore_clang.threadpool`), with the ``tc_item`` array built on the C stack, so the pool puts barriers only where
needed. The function holds no addresses (kernels, buffers and values come in through the tables), so its source
depends only on the batch's structure and its library is compiled once per machine through the compiler's disk
cache.

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

from tinycore.engine.exec_item import CompiledRunner, ExecItem
from tinycore.engine.graph import GraphRunner, GraphUpdate

if TYPE_CHECKING:
    from tinycore.device import Buffer

__all__ = ["ClangGraph", "GraphStats", "graph_stats", "render_graph"]


@dataclass
class GraphStats:
    """Process-wide counters of CLANG graphs: `built` runners, `submissions` (one foreign call each)."""

    built: int = 0
    submissions: int = 0


graph_stats = GraphStats()

_HEADER = """\
typedef void (*tc_entry)(void* const* bufs, const long long* vals, int core_id);
typedef struct { tc_entry fn; void* const* bufs; const long long* vals; int ntasks; int flags; } tc_item;
typedef void (*tc_batch_fn)(const tc_item* items, int nitems, int nthreads);
"""


@dataclass(frozen=True)
class KernelShape:
    """What the generated code needs to know about one kernel: `nbufs`, variable kinds (``i``/``q``), `threaded`."""

    nbufs: int
    vars: str
    threaded: bool


def render_graph(kernels: list[KernelShape], name: str = "tc_graph") -> str:
    """C source of the graph function calling `kernels` in order (see the module docstring).

    >>> print(render_graph([KernelShape(2, "i", False)]).splitlines()[-2])
      ((void (*)(void*, void*, int))fns[0])(p[0], p[1], (int)v[0]);
    """
    lines = [_HEADER, f"void {name}(void* const* fns, void** p, const long long* v, const int* nt, "
             "tc_batch_fn batch, int nthreads) {"]  # fmt: skip
    buf_off = var_off = 0
    offsets = []
    for k in kernels:
        offsets.append((buf_off, var_off))
        buf_off += k.nbufs
        var_off += len(k.vars)
    i = 0
    while i < len(kernels):
        k = kernels[i]
        b, v = offsets[i]
        if not k.threaded:
            params = ["void*"] * k.nbufs + ["int" if kind == "i" else "long long" for kind in k.vars]
            args = [f"p[{b + j}]" for j in range(k.nbufs)]
            args += [f"(int)v[{v + j}]" if kind == "i" else f"v[{v + j}]" for j, kind in enumerate(k.vars)]
            lines.append(f"  ((void (*)({', '.join(params) or 'void'}))fns[{i}])({', '.join(args)});")
            i += 1
            continue
        run = i
        while run < len(kernels) and kernels[run].threaded:
            run += 1
        entries = ", ".join(
            f"{{(tc_entry)fns[{j}], (void* const*)(p + {offsets[j][0]}), v + {offsets[j][1]}, nt[{j}], 0}}"
            for j in range(i, run)
        )
        lines.append(f"  {{ tc_item items[{run - i}] = {{{entries}}}; batch(items, {run - i}, nthreads); }}")
        i = run
    lines.append("}")
    return "\n".join(lines) + "\n"


def _ptr(buf: Buffer) -> int:
    """The raw address of an allocated CLANG buffer (its allocator handle is a `ClangMemory`)."""
    handle = buf.ensure_allocated().opaque
    return handle if isinstance(handle, int) else handle.ptr


class ClangGraph(GraphRunner):
    """``ClangGraph(device, items, input_slots, var_names)``: replay `items` (CLANG kernels) as one C call.

    `submissions` counts the replays (each one foreign call); `src` is the generated C source, `lib` its binary.
    """

    def __init__(
        self, device: str, items: list[ExecItem], input_slots: dict[tuple[int, int], int], var_names: list[str]
    ):
        super().__init__(device, items, input_slots, var_names)
        from tinycore.device import Device
        from tinycore_clang.runtime import load_library

        self.device_obj = Device[device]
        self.programs: list[Any] = []
        for item in self.items:
            runner = item.runner
            assert isinstance(runner, CompiledRunner)
            self.programs.append(self.device_obj.runtime(runner.p.function_name, runner.lib))
        shapes = [KernelShape(prg.nbufs, prg.info.vars, prg.threaded) for prg in self.programs]
        self.src = render_graph(shapes)
        self.lib = self.device_obj.compiler.compile_cached(self.src)
        self._fn = load_library(self.lib).tc_graph
        self._fn.restype = None  # no argtypes: every call passes ready-made ctypes objects (see `_launcher`)
        # the tables the generated code reads
        self.buf_offsets: list[int] = []
        self.var_offsets: list[int] = []
        nbufs = nvars = 0
        for prg in self.programs:
            self.buf_offsets.append(nbufs)
            self.var_offsets.append(nvars)
            nbufs += prg.nbufs
            nvars += prg.nvars
        self.fns = (ctypes.c_void_p * max(1, len(self.programs)))(
            *[prg.entry if prg.threaded else ctypes.cast(prg.fn, ctypes.c_void_p).value for prg in self.programs]
        )
        self.ptrs = (ctypes.c_void_p * max(1, nbufs))()
        self.vals_table = (ctypes.c_int64 * max(1, nvars))()
        self.ntasks = (ctypes.c_int * max(1, len(self.programs)))()
        for index, (item, prg) in enumerate(zip(self.items, self.programs)):
            if len(item.bufs) != prg.nbufs:
                raise ValueError(f"ClangGraph: item {index} has {len(item.bufs)} buffers, its kernel takes {prg.nbufs}")
            for j, buf in enumerate(item.bufs):
                if buf is not None and (index, j) not in self.input_slots:
                    self.ptrs[self.buf_offsets[index] + j] = _ptr(buf)
            for j, value in enumerate(self.vals.get(index, ())):
                self.vals_table[self.var_offsets[index] + j] = value
            cores = prg.info.cores
            if cores > 0:
                self.ntasks[index] = cores
            elif cores < 0 and index in self.launch_dims:
                self.ntasks[index] = int(self.launch_dims[index][0][0])
            else:
                self.ntasks[index] = 1
        self._batch = None
        if any(prg.threaded for prg in self.programs):
            from tinycore_clang.threadpool import get_pool

            self._batch = ctypes.cast(get_pool(self.device_obj.compiler).run_batch, ctypes.c_void_p).value
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
            tables = [ctypes.c_void_p(ctypes.addressof(t)) for t in (self.fns, self.ptrs, self.vals_table, self.ntasks)]
            self._launch = functools.partial(self._fn, *tables, ctypes.c_void_p(self._batch), ctypes.c_int(threads))
            self._launch_threads = threads
        return self._launch

    @classmethod
    def supports(cls, item: ExecItem) -> bool:
        """CLANG kernels (copies and other runners run outside the graph)."""
        runner = item.runner
        return isinstance(runner, CompiledRunner) and runner.device.partition(":")[0] == "CLANG"

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
                self.ntasks[i] = int(global_size[0])
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
