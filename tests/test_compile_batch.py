"""Building the new kernels of a schedule together: `build_kernel_runners` (one batch compile per device whose
compiler batches, overlapped with lowering), the `Compiler` batch API (`compile_many`, `batches`,
`compile_cached_many`), rendering with the program's name, and the code-generation stage timer."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pytest

from tinycore.backend.compiler import Compiler
from tinycore.codegen import get_program, record_stage_times
from tinycore.device import Device
from tinycore.engine import realize
from tinycore.engine.exec_item import CompiledRunner, build_kernel_runners, render_program
from tinycore.engine.realize import clear_runner_cache, run_schedule, runner_cache_info
from tinycore.engine.realized import buffer_of
from tinycore.errors import CompileError
from tinycore.runtime.python_device import PythonCompiler
from tinycore.tensor import Tensor


class BatchingCompiler(PythonCompiler):
    """The PYTHON compiler with a `compile_many` that records each batch (and can be told to fail)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches_seen: list[int] = []
        self.singles = 0
        self.fail = False

    def compile(self, src: str) -> bytes:
        """Count one-by-one builds."""
        self.singles += 1
        return super().compile(src)

    def compile_many(self, srcs: Sequence[str]) -> list[bytes]:
        """Record the batch size; raise when `fail` is set."""
        self.batches_seen.append(len(srcs))
        if self.fail:
            raise CompileError("batch refused")
        return [PythonCompiler.compile(self, src) for src in srcs]


@pytest.fixture
def batching() -> Iterator[BatchingCompiler]:
    dev = Device["PYTHON"]
    saved, saved_default = dev.compiler, Device.DEFAULT
    compiler = BatchingCompiler()
    dev.compiler = compiler
    Device.DEFAULT = "PYTHON"
    clear_runner_cache()
    try:
        yield compiler
    finally:
        dev.compiler = saved
        Device.DEFAULT = saved_default
        clear_runner_cache()


def _three_kernels() -> tuple[list[Tensor], list[np.ndarray]]:
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
    outs = [(a * 2 + 1).exp(), a.sum(axis=1), a @ b]
    return outs, [np.exp(a_np * 2 + 1), a_np.sum(axis=1), a_np @ b_np]


def test_compiler_batch_defaults() -> None:
    assert not PythonCompiler().batches and BatchingCompiler().batches
    upper = type("Upper", (Compiler,), {"compile": lambda self, src: src.upper().encode()})(None)
    assert upper.compile_many(["a", "b"]) == [b"A", b"B"]
    assert upper.compile_cached_many(["a", "b", "a"]) == [b"A", b"B", b"A"]


def test_schedule_kernels_are_built_in_one_batch(batching: BatchingCompiler) -> None:
    outs, refs = _three_kernels()
    items, var_vals = outs[0].schedule_with_vars(*outs[1:])
    assert sum(si.ast.op.name == "SINK" for si in items) == 3
    run_schedule(items, var_vals)
    assert sum(batching.batches_seen) + batching.singles == 3  # each kernel compiled once, in batches of any size
    for out, ref in zip(outs, refs):
        np.testing.assert_allclose(buffer_of(out.uop).numpy().reshape(ref.shape), ref, rtol=1e-5, atol=1e-5)
    assert runner_cache_info()["misses"] == 3 and runner_cache_info()["hits"] == 0
    built = build_kernel_runners([(si.ast, si.bufs[0].device) for si in items], realize._kernel_runners)
    assert built == {}  # nothing new


def test_without_overlap_the_kernels_form_one_batch(batching: BatchingCompiler) -> None:
    from tinycore.engine.exec_item import _build_batched

    outs, _ = _three_kernels()
    items, _ = outs[0].schedule_with_vars(*outs[1:])
    asts = [si.ast for si in items if si.ast.op.name == "SINK"]
    built = _build_batched("PYTHON", Device["PYTHON"], asts, overlap=False)
    assert batching.batches_seen == [3] and batching.singles == 0 and len(built) == 3


def test_with_overlap_the_first_kernel_compiles_alone_and_the_rest_in_one_batch(batching: BatchingCompiler) -> None:
    from tinycore.engine.exec_item import _build_batched

    rng = np.random.default_rng(1)
    a = Tensor(rng.standard_normal((4, 5)).astype(np.float32)).realize()
    b = Tensor(rng.standard_normal((5, 3)).astype(np.float32)).realize()
    outs = [(a * 2 + 1).exp(), a.sum(axis=1), a.max(axis=0), a @ b]
    items, _ = outs[0].schedule_with_vars(*outs[1:])
    asts = [si.ast for si in items if si.ast.op.name == "SINK"]
    assert len(asts) == 4
    built = _build_batched("PYTHON", Device["PYTHON"], asts, overlap=True)
    assert batching.singles == 1 and batching.batches_seen == [3] and len(built) == 4  # 2 compiler calls, not 4


class StreamingCompiler(BatchingCompiler):
    """A `BatchingCompiler` that `streams`: records, for each source it pulls, how many kernels were rendered."""

    streams = True

    def __init__(self) -> None:
        super().__init__()
        self.rendered = 0
        self.arrivals: list[int] = []
        self.first_arrived = threading.Event()

    def compile_many(self, srcs: Iterable[str]) -> list[bytes]:
        """Pull the sources one by one, noting how far rendering had got when each arrived."""
        libs = []
        for src in srcs:
            self.arrivals.append(self.rendered)
            self.first_arrived.set()
            libs.append(PythonCompiler.compile(self, src))
        self.batches_seen.append(len(libs))
        return libs


def test_a_streaming_compiler_starts_before_the_last_kernel_is_rendered(monkeypatch) -> None:
    from tinycore.engine import exec_item

    compiler = StreamingCompiler()
    real_render = exec_item.render_program

    def counting_render(renderer, spec):  # the second kernel waits until the compiler has the first one
        if compiler.rendered == 1:
            assert compiler.first_arrived.wait(10), "the compiler got nothing before rendering finished"
        compiler.rendered += 1
        return real_render(renderer, spec)

    monkeypatch.setattr(exec_item, "render_program", counting_render)
    dev = Device["PYTHON"]
    monkeypatch.setattr(dev, "compiler", compiler)
    outs, refs = _three_kernels()
    items, _ = outs[0].schedule_with_vars(*outs[1:])
    asts = [si.ast for si in items if si.ast.op.name == "SINK"]
    built = exec_item._build_batched("PYTHON", dev, asts, overlap=True)
    assert len(built) == 3 and compiler.batches_seen == [3] and compiler.singles == 0
    assert compiler.arrivals[0] == 1  # the first source arrived while the other kernels were still unrendered


def test_compile_stream_serves_hits_and_builds_duplicates_once(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path))
    built: list[str] = []

    class Upper(Compiler):
        streams = True

        def compile(self, src: str) -> bytes:
            built.append(src)
            return src.upper().encode()

    upper = Upper("upper_stream_test")
    assert upper.compile_stream(iter(["a", "b", "a"])) == [b"A", b"B", b"A"]
    assert built == ["a", "b"]
    assert upper.compile_stream(iter(["b", "c"])) == [b"B", b"C"] and built == ["a", "b", "c"]  # "b" from disk


def test_a_stream_compiler_returning_too_few_binaries_is_an_error() -> None:
    class Short(Compiler):
        streams = True

        def compile_many(self, srcs: Iterable[str]) -> list[bytes]:
            return [src.encode() for src in srcs][:-1]

    with pytest.raises(CompileError, match="one bytes object per source"):
        Short(None).compile_stream(iter(["a", "b"]))


def test_failed_batch_falls_back_to_one_by_one(batching: BatchingCompiler) -> None:
    from tinycore.engine.exec_item import _build_batched

    batching.fail = True  # compile_many raises; compile (one by one) works
    outs, refs = _three_kernels()
    items, var_vals = outs[0].schedule_with_vars(*outs[1:])
    asts = [si.ast for si in items if si.ast.op.name == "SINK"]
    assert _build_batched("PYTHON", Device["PYTHON"], asts, overlap=False) == {}  # the failed batch is dropped
    assert batching.batches_seen == [3] and batching.singles == 0
    run_schedule(items, var_vals)
    assert batching.singles >= 1
    for out, ref in zip(outs, refs):
        np.testing.assert_allclose(buffer_of(out.uop).numpy().reshape(ref.shape), ref, rtol=1e-5, atol=1e-5)


def test_kernel_that_fails_to_lower_is_left_to_its_item(batching: BatchingCompiler, monkeypatch) -> None:
    outs, _ = _three_kernels()
    items, _ = outs[0].schedule_with_vars(*outs[1:])
    kernels = [(si.ast, si.bufs[0].device) for si in items if si.ast.op.name == "SINK"]
    import tinycore.codegen as codegen

    real = codegen.get_program

    def failing(ast, renderer, opts=None):
        """Fail on the second kernel."""
        if ast is kernels[1][0]:
            raise ValueError("cannot lower")
        return real(ast, renderer, opts)

    monkeypatch.setattr(codegen, "get_program", failing)
    built = build_kernel_runners(kernels)
    assert list(built) == kernels[:1] and isinstance(built[kernels[0]], CompiledRunner)


def test_render_uses_the_program_name() -> None:
    from tinycore.runtime.python_device import PythonRenderer

    class Named(PythonRenderer):
        def render(self, uops, name=None):  # type: ignore[override]
            """Return the name it was given."""
            return f"named {name}"

    a = Tensor(np.ones(4, np.float32)).realize()
    (si,) = [si for si in (a + 1).schedule() if si.ast.op.name == "SINK"]
    spec = get_program(si.ast, PythonRenderer())
    assert render_program(Named(), spec) == f"named {spec.function_name}"
    assert render_program(PythonRenderer(), spec) == PythonRenderer().render(spec.uops)


def test_stage_times_cover_every_stage() -> None:
    from tinycore.runtime.python_device import PythonRenderer

    a = Tensor(np.ones((8, 8), np.float32)).realize()
    (si,) = [si for si in a.sum(axis=0).schedule() if si.ast.op.name == "SINK"]
    with record_stage_times() as times:
        get_program(si.ast, PythonRenderer())
    assert set(times) == {"lower", "optimize", "expand", "decompose", "linearize"}
    assert all(seconds >= 0 for seconds in times.values())
