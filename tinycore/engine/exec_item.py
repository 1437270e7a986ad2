"""What a schedule becomes after lowering: `ExecItem`s, each a `Runner` applied to buffers and variable values.

Runners: `CompiledRunner` (a kernel: render, compile through the disk cache, load with the device's Program
class), `BufferCopy` (any device to any device), `BufferXfer` (device to device inside one family), `ViewOp` (a
buffer view: nothing to run). `ExecItem.run` updates `GlobalCounters` and prints one line per item at ``DEBUG>=2``.
`build_kernel_runners` builds the new kernels of a schedule together (one batch compile, overlapped with lowering).
"""

from __future__ import annotations

import time
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tinycore import device as _device_module
from tinycore.helpers import DEBUG, GlobalCounters
from tinycore.renderer import Estimates, ProgramSpec

if TYPE_CHECKING:
    from concurrent.futures import Future

    from tinycore.backend.compiler import Compiler
    from tinycore.device import Buffer, Compiled
    from tinycore.renderer import Renderer
    from tinycore.uop.ops import UOp


def render_program(renderer: Renderer, p: ProgramSpec) -> str:
    """The source of `p`, with its kernel function named ``p.function_name`` (so sources of different kernels can
    share one translation unit in a batch compile): ``renderer.render(p.uops, name=p.function_name)``."""
    return renderer.render(p.uops, name=p.function_name)


class Runner:
    """Something an `ExecItem` runs: ``runner(bufs, var_vals, wait=False) -> seconds | None``.

    `display_name` is shown in ``DEBUG>=2`` lines, `device` is the device name it runs on, `estimates` its cost,
    `kernel_count` how many kernels one call launches (added to `GlobalCounters.kernel_count`).
    """

    kernel_count: int = 1
    # which buffer indices a call reads and writes; None: a kernel's spec or a copy says, else every buffer (TinyJit
    # uses them to prune, reorder and plan memory). A runner that is neither a kernel nor a copy (a collective across
    # processes, `tinycore.distributed`) declares them so TinyJit records and replays it like a copy.
    reads: tuple[int, ...] | None = None
    writes: tuple[int, ...] | None = None

    def __init__(self, display_name: str, device: str, estimates: Estimates | None = None):
        self.display_name, self.device = display_name, device
        self.estimates = estimates if estimates is not None else Estimates()

    @property
    def dev(self) -> Compiled:
        """The opened device this runner runs on."""
        return _lookup(self.device)

    def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        """Run on `bufs` with variable values `var_vals`; with `wait`, block until done and return seconds."""
        raise NotImplementedError(f"{type(self).__name__} does not implement __call__")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.display_name!r} on {self.device}>"


class CompiledRunner(Runner):
    """A kernel: `p` rendered (unless `p.src` is set) and compiled (unless `precompiled` or `p.lib` is given)
    by its device, loaded as ``device.runtime(function_name, lib)`` and launched with `p`'s launch dims.

    `self.p` is the spec with `src` and `lib` filled in; `self.lib` the binary.
    """

    def __init__(self, p: ProgramSpec, precompiled: bytes | None = None):
        dev = _lookup(p.device)
        lib = precompiled if precompiled is not None else p.lib
        src = p.src
        if lib is None:
            if src is None:
                if dev.renderer is None:
                    raise RuntimeError(f"device {dev.device} has no renderer: can't build kernel {p.name}")
                src = render_program(dev.renderer, p)
            if DEBUG >= 4:
                print(src)
            if dev.compiler is None:
                raise RuntimeError(f"device {dev.device} has no compiler: can't build kernel {p.name}")
            lib = dev.compiler.compile_cached(src)
        if dev.runtime is None:
            raise RuntimeError(f"device {dev.device} has no program runtime: can't load kernel {p.name}")
        self.p = replace(p, src=src, lib=lib)
        self.lib = lib
        self._prg = dev.runtime(self.p.function_name, lib)
        super().__init__(p.name, p.device, p.estimates)

    @property
    def program(self) -> Any:
        """The loaded `Program` (what ``device.runtime(function_name, lib)`` returned): graph runners read its handles
        instead of loading the binary again."""
        return self._prg

    def __reduce__(self) -> tuple[type[CompiledRunner], tuple[ProgramSpec, bytes]]:
        return CompiledRunner, (self.p, self.lib)

    def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        """Launch the kernel on the buffers' device memory."""
        global_size, local_size = self.p.launch_dims(var_vals)
        return self._prg(
            *[buf._buf for buf in bufs],
            global_size=global_size,
            local_size=local_size,
            vals=self.p.var_values(var_vals),
            wait=wait,
        )


KernelKey = tuple["UOp", str]  # (kernel AST, device name): how realize caches kernel runners


def build_kernel_runners(
    kernels: Sequence[KernelKey], known: Container[KernelKey] = ()
) -> dict[KernelKey, CompiledRunner]:
    """Runners for the kernels `(ast, device)` of `kernels` that are not in `known`, built together: on a device
    whose compiler `batches`, the first kernel compiles in the background while the others are lowered, and those
    are then compiled in one `Compiler.compile_cached_many` call, so lowering overlaps compiling and the compiler
    starts about once per CPU for the whole schedule (every extra batch costs more compiler starts).

    Best effort: nothing is built for a device with fewer than two new kernels or a compiler that doesn't batch;
    building stops at the first kernel that fails to lower, and a batch that fails to compile is dropped, so the
    caller's one-by-one path raises for the right kernel (the item that would have failed anyway).
    """
    from tinycore.helpers import BEAM
    from tinycore.uop.ops import Ops

    by_device: dict[str, list[UOp]] = {}
    for ast, device in dict.fromkeys(kernels):
        if ast.op is Ops.SINK and (ast, device) not in known:
            by_device.setdefault(device, []).append(ast)
    built: dict[KernelKey, CompiledRunner] = {}
    for device, asts in by_device.items():
        dev = _lookup(device)
        if len(asts) < 2 or dev.compiler is None or dev.renderer is None or not dev.compiler.batches:
            continue
        built.update(_build_batched(device, dev, asts, overlap=not BEAM))
    return built


def _build_batched(device: str, dev: Compiled, asts: list[UOp], overlap: bool) -> dict[KernelKey, CompiledRunner]:
    from concurrent.futures import ThreadPoolExecutor  # here: importing it costs more than a small realize

    compiler, renderer = dev.compiler, dev.renderer
    assert compiler is not None and renderer is not None
    if compiler.streams and overlap:
        return _build_streamed(device, compiler, renderer, asts)
    batches: list[tuple[list[tuple[UOp, ProgramSpec]], Future[list[bytes]]]] = []
    pending: list[tuple[UOp, ProgramSpec]] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinycore-compile") as pool:

        def submit() -> None:
            batch = list(pending)
            pending.clear()
            batches.append((batch, pool.submit(_compile_specs, compiler, [spec for _, spec in batch])))

        for ast, spec in _rendered(device, renderer, asts):
            pending.append((ast, spec))
            if overlap and not batches:  # the first kernel compiles while the rest lower; they form one batch
                submit()
        if pending:
            submit()
    return _runners(device, batches)


def _build_streamed(
    device: str, compiler: Compiler, renderer: Renderer, asts: list[UOp]
) -> dict[KernelKey, CompiledRunner]:
    """One `Compiler.compile_stream` call fed each source as soon as it is rendered (a compiler that `streams`
    compiles on its own threads while this thread lowers the next kernel)."""
    import queue
    from concurrent.futures import ThreadPoolExecutor

    sources: queue.SimpleQueue[str | None] = queue.SimpleQueue()

    def stream() -> Iterator[str]:
        while (src := sources.get()) is not None:
            yield src

    done: list[tuple[UOp, ProgramSpec]] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinycore-compile") as pool:
        future = pool.submit(compiler.compile_stream, stream())
        try:
            for ast, spec in _rendered(device, renderer, asts):
                done.append((ast, spec))
                sources.put(spec.src)
        finally:
            sources.put(None)
    return _runners(device, [(done, future)])


def _rendered(device: str, renderer: Renderer, asts: list[UOp]) -> Iterator[tuple[UOp, ProgramSpec]]:
    """Lower and render `asts` in order; stops at the first kernel that fails (the one-by-one path raises it)."""
    from tinycore.engine.search import kernel_program

    for ast in asts:
        if DEBUG >= 5:
            print(f"kernel AST for {device}:\n{ast}")
        try:
            spec = kernel_program(ast, renderer)
        except Exception:  # noqa: BLE001 - the one-by-one path raises it again, at its item
            return
        if spec.device != device:
            spec = replace(spec, device=device)
        spec = replace(spec, src=render_program(renderer, spec))
        if DEBUG >= 4:
            print(spec.src)
        yield ast, spec


def _runners(
    device: str, batches: list[tuple[list[tuple[UOp, ProgramSpec]], Future[list[bytes]]]]
) -> dict[KernelKey, CompiledRunner]:
    """Runners of the batches whose compile succeeded (a failed batch is left to the one-by-one path)."""
    from tinycore.errors import CompileError

    built: dict[KernelKey, CompiledRunner] = {}
    for batch, future in batches:
        try:
            libs = future.result()
        except CompileError:
            continue
        for (ast, spec), lib in zip(batch, libs):
            built[(ast, device)] = CompiledRunner(spec, precompiled=lib)
    return built


def _compile_specs(compiler: Compiler, specs: list[ProgramSpec]) -> list[bytes]:
    return compiler.compile_cached_many([spec.src for spec in specs if spec.src is not None])


def _lookup(name: str) -> Compiled:
    # resolved at call time, so the registry (or a test's stand-in) is consulted on every lookup
    return _device_module._device_lookup(name)


def _family(device: str) -> str:
    return device.upper().partition(":")[0]


class BufferCopy(Runner):
    """Copy ``bufs[1]`` (on `src_device`) into ``bufs[0]`` (on `dest_device`), `total_sz` bytes.

    Inside one family whose allocator implements `transfer`, the devices copy directly; otherwise the bytes go
    through the host, zero-copy on whichever side supports `as_buffer`.
    """

    def __init__(self, total_sz: int, dest_device: str, src_device: str):
        self.total_sz, self.src_device = total_sz, src_device
        name = f"copy {total_sz:8d}, {dest_device[:10]:>10s} <- {src_device[:10]:10s}"
        super().__init__(name, dest_device, Estimates(lds=total_sz, mem=total_sz))

    def can_transfer(self, dest: Buffer, src: Buffer) -> bool:
        """True when `dest` and `src` are in one family whose allocator implements `transfer`."""
        return _family(dest.device) == _family(src.device) and dest.allocator.supports_transfer

    def copy(self, dest: Buffer, src: Buffer) -> None:
        """Do the copy (both buffers allocated on return)."""
        if dest.nbytes != src.nbytes or dest.nbytes != self.total_sz:
            raise ValueError(f"copy of {self.total_sz} bytes between {src!r} and {dest!r}")
        dest.ensure_allocated()
        src._ensure_readable()
        if self.can_transfer(dest, src):
            src_dev, dest_dev = _lookup(src.device), _lookup(dest.device)
            dest.allocator.transfer(dest._buf, src._buf, dest.nbytes, src_dev=src_dev, dest_dev=dest_dev)
        elif src.allocator.supports_as_buffer:
            dest.copyin(src.as_buffer(allow_zero_copy=True))
        elif dest.allocator.supports_as_buffer:
            src.copyout(dest.as_buffer(allow_zero_copy=True))
        else:
            dest.copyin(src.copyout(memoryview(bytearray(src.nbytes))))

    def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        """Copy ``bufs[1]`` into ``bufs[0]``; with `wait`, synchronize the destination and return seconds."""
        start = time.perf_counter()
        self.copy(bufs[0], bufs[1])
        if wait:
            _lookup(bufs[0].device).synchronize()
            return time.perf_counter() - start
        return None


class BufferXfer(BufferCopy):
    """A `BufferCopy` that must stay on the devices (`Allocator.transfer`); raises if the family can't."""

    def copy(self, dest: Buffer, src: Buffer) -> None:
        """Transfer device to device."""
        if not self.can_transfer(dest, src):
            raise RuntimeError(f"{dest.device} <- {src.device}: no device-to-device transfer in this family")
        super().copy(dest, src)


class ViewOp(Runner):
    """A buffer view realized by sharing memory: checks that ``bufs[0]`` is a view of ``bufs[1]``'s memory."""

    kernel_count = 0

    def __init__(self, device: str):
        super().__init__("view", device)

    def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        """Nothing to run; raises if the two buffers do not share memory."""
        if bufs[0].base is not bufs[1].base:
            raise RuntimeError(f"ViewOp: {bufs[0]!r} is not a view of {bufs[1]!r}")
        return 0.0 if wait else None


@dataclass
class ExecItem:
    """One step of a lowered schedule: `runner` applied to `bufs` with bound `var_vals`.

    `bufs` may hold None in slots a JIT fills on replay; they must be set before `run`.
    """

    runner: Runner
    bufs: list[Buffer | None]
    var_vals: dict[str, int] | None = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.var_vals is None:
            self.var_vals = {}

    def run(
        self, var_vals: dict[str, int] | None = None, wait: bool = False, do_update_stats: bool = True
    ) -> float | None:
        """Run the item (allocating its buffers if needed) with `var_vals` over the bound ones.

        Updates `GlobalCounters` (kernel_count, global_ops, global_mem, time_sum_s) unless `do_update_stats` is
        False; at ``DEBUG>=2`` it times the item and prints one line (name, time, GFLOPS, GB/s).
        """
        merged = {**(self.var_vals or {}), **(var_vals or {})}
        bufs: list[Buffer] = []
        for i, buf in enumerate(self.bufs):
            if buf is None:
                raise RuntimeError(f"{self.runner!r}: buffer {i} is not set")
            bufs.append(buf.ensure_allocated())
        elapsed = self.runner(bufs, merged, wait=wait or DEBUG >= 2)
        if do_update_stats:
            estimates = self.runner.estimates.evaluate(merged)
            GlobalCounters.kernel_count += self.runner.kernel_count
            GlobalCounters.global_ops += estimates.ops
            GlobalCounters.global_mem += estimates.mem
            if elapsed is not None:
                GlobalCounters.time_sum_s += elapsed
            if DEBUG >= 2:
                print(self._stats_line(len(bufs), estimates, elapsed))
        return elapsed

    def _stats_line(self, nbufs: int, estimates: Estimates, elapsed: float | None) -> str:
        line = (
            f"*** {self.runner.device[:10]:10s} {GlobalCounters.kernel_count:5d} {self.runner.display_name[:48]:48s}"
            f" arg {nbufs:3d} mem {GlobalCounters.mem_used / 1e9:6.2f} GB"
        )
        if elapsed is None:
            return line
        rate = 1e-9 / elapsed if elapsed > 0 else 0.0
        return (
            f"{line} tm {elapsed * 1e6:10.2f}us/{GlobalCounters.time_sum_s * 1e3:9.2f}ms"
            f" ({estimates.ops * rate:9.2f} GFLOPS {estimates.mem * rate:7.2f} GB/s)"
        )
