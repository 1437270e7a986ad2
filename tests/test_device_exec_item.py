"""ExecItem and GlobalCounters, CompiledRunner (render, compile, launch), BufferCopy/BufferXfer, ViewOp."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import tinycore.device as device_module
from tinycore.backend.compiler import Compiler
from tinycore.device import Buffer, Compiled, LRUAllocator
from tinycore.dtype import dtypes
from tinycore.engine.exec_item import BufferCopy, BufferXfer, CompiledRunner, ExecItem, Runner, ViewOp
from tinycore.helpers import Context, GlobalCounters
from tinycore.renderer import Estimates, ProgramSpec, Renderer
from tinycore.runtime.python_device import PythonDevice


class TextRenderer(Renderer):
    device = "FAKE"

    def __init__(self):
        self.rendered = 0

    def render(self, uops, name=None):
        self.rendered += 1
        return "program:" + ",".join(uops)


class TextCompiler(Compiler):
    def __init__(self):
        super().__init__(None)
        self.compiled = 0

    def compile(self, src):
        self.compiled += 1
        return src.encode()


class RecordingProgram:
    calls: list = []

    def __init__(self, device, name, lib):
        self.device, self.name, self.lib = device, name, lib

    def __call__(self, *bufs, global_size, local_size, vals=(), wait=False):
        RecordingProgram.calls.append((self.name, bufs, global_size, local_size, vals, wait))
        return 0.25 if wait else None


class HostOnlyAllocator(LRUAllocator):
    """Memory with neither transfer nor as_buffer: copies must go through copyout/copyin."""

    def _alloc(self, size, options):
        return bytearray(size)

    def copyin(self, dest, src):
        dest[:] = src

    def copyout(self, dest, src):
        dest[:] = src


@pytest.fixture
def devices(monkeypatch):
    RecordingProgram.calls = []
    fake = Compiled("FAKE", HostOnlyAllocator(), TextRenderer(), TextCompiler(), RecordingProgram)
    table = {"FAKE": fake, "PYTHON": PythonDevice("PYTHON"), "PYTHON:1": PythonDevice("PYTHON:1")}
    monkeypatch.setattr(device_module, "_device_lookup", lambda name: table[name])
    return table


@pytest.fixture
def counters():
    saved = (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem)
    saved_time = GlobalCounters.time_sum_s
    GlobalCounters.reset()
    yield GlobalCounters
    GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem = saved
    GlobalCounters.time_sum_s = saved_time


class FakeRunner(Runner):
    def __init__(self, seconds=0.5, estimates=None):
        super().__init__("fake_kernel", "PYTHON", estimates or Estimates(ops=1000, lds=10, mem=400))
        self.seconds = seconds
        self.calls: list = []

    def __call__(self, bufs, var_vals, wait=False):
        self.calls.append((list(bufs), dict(var_vals), wait))
        return self.seconds if wait else None


def test_exec_item_updates_global_counters(devices, counters):
    runner = FakeRunner()
    buf = Buffer("PYTHON", 4, dtypes.float32)
    item = ExecItem(runner, [buf])
    assert item.run() is None
    assert buf.is_allocated()  # run allocates its buffers
    assert (counters.kernel_count, counters.global_ops, counters.global_mem, counters.time_sum_s) == (1, 1000, 400, 0)
    assert item.run(wait=True) == 0.5
    assert (counters.kernel_count, counters.global_ops, counters.global_mem, counters.time_sum_s) == (2, 2000, 800, 0.5)
    item.run(wait=True, do_update_stats=False)
    assert (counters.kernel_count, counters.time_sum_s) == (2, 0.5)
    assert [call[2] for call in runner.calls] == [False, True, True]


def test_exec_item_merges_var_vals(devices, counters):
    runner = FakeRunner()
    item = ExecItem(runner, [], {"a": 1, "b": 2})
    item.run({"b": 5, "c": 7})
    assert runner.calls[-1][1] == {"a": 1, "b": 5, "c": 7}
    assert ExecItem(runner, [], None).var_vals == {}


def test_exec_item_debug_line(devices, counters, capsys):
    runner = FakeRunner(seconds=2e-6, estimates=Estimates(ops=6000, mem=10000))
    with Context(DEBUG=2):
        ExecItem(runner, [Buffer("PYTHON", 1, dtypes.int8)]).run()
    line = capsys.readouterr().out.strip()
    assert runner.calls[-1][2] is True  # DEBUG>=2 times every item
    assert "fake_kernel" in line and "PYTHON" in line
    assert "3.00 GFLOPS" in line and "5.00 GB/s" in line and "2.00us" in line


def test_exec_item_with_unset_buffer_raises(devices):
    with pytest.raises(RuntimeError, match="buffer 1"):
        ExecItem(FakeRunner(), [Buffer("PYTHON", 1, dtypes.int8), None]).run()


def test_compiled_runner_renders_compiles_and_launches(devices, counters):
    spec = ProgramSpec(
        "E_4:2", ["a", "b"], "FAKE", global_size=(4, 2, 1), local_size=(2, 1, 1), vars=["n", "m"],
        estimates=Estimates(ops=8, mem=32),
    )  # fmt: skip
    runner = CompiledRunner(spec)
    fake = devices["FAKE"]
    assert runner.p.src == "program:a,b" and runner.lib == b"program:a,b" and runner.p.lib == runner.lib
    assert spec.src is None  # the caller's spec is not mutated
    assert fake.renderer.rendered == 1 and fake.compiler.compiled == 1
    out, inp = Buffer("FAKE", 4, dtypes.float32), Buffer("FAKE", 4, dtypes.float32)
    elapsed = ExecItem(runner, [out, inp], {"n": 3}).run({"m": 9}, wait=True)
    assert elapsed == 0.25
    name, bufs, global_size, local_size, vals, wait = RecordingProgram.calls[-1]
    assert name == "E_4_2" and bufs[0] is out._buf and bufs[1] is inp._buf
    assert (global_size, local_size, vals, wait) == ((4, 2, 1), (2, 1, 1), (3, 9), True)
    assert (counters.kernel_count, counters.global_ops, counters.global_mem) == (1, 8, 32)


def test_compiled_runner_uses_src_or_precompiled(devices):
    fake = devices["FAKE"]
    CompiledRunner(ProgramSpec("k", [], "FAKE", src="given source"))
    assert fake.renderer.rendered == 0 and fake.compiler.compiled == 1
    runner = CompiledRunner(ProgramSpec("k", [], "FAKE"), precompiled=b"prebuilt")
    assert runner.lib == b"prebuilt" and fake.compiler.compiled == 1 and fake.renderer.rendered == 0


def test_compiled_runner_pickles_with_its_binary(devices):
    runner = CompiledRunner(ProgramSpec("k", ["x"], "FAKE"))
    compiled_before = devices["FAKE"].compiler.compiled
    clone = pickle.loads(pickle.dumps(runner))
    assert clone.lib == runner.lib and clone.p.name == "k"
    assert devices["FAKE"].compiler.compiled == compiled_before


def test_compiled_runner_on_python_device_runs_an_empty_program(devices):
    runner = CompiledRunner(ProgramSpec("k", [], "PYTHON"))
    assert runner.lib == pickle.dumps([], protocol=pickle.HIGHEST_PROTOCOL)
    assert runner([], {}, wait=True) >= 0.0  # the interpreter runs it (and times it when asked)


def _filled(device, values, dtype=dtypes.int32):
    data = np.asarray(values, dtypes.to_np(dtype))
    return Buffer(device, len(values), dtype).copyin(memoryview(data))


@pytest.mark.parametrize(
    ("src_dev", "dest_dev"),
    [("PYTHON", "PYTHON:1"), ("FAKE", "PYTHON"), ("PYTHON", "FAKE"), ("FAKE", "FAKE"), ("PYTHON", "PYTHON")],
)
def test_buffer_copy_between_any_devices(devices, counters, src_dev, dest_dev):
    src = _filled(src_dev, [1, 2, 3, 4])
    dest = Buffer(dest_dev, 4, dtypes.int32)
    copy = BufferCopy(16, dest_dev, src_dev)
    item = ExecItem(copy, [dest, src])
    assert item.run(wait=True) >= 0
    assert dest.numpy().tolist() == [1, 2, 3, 4]
    assert counters.global_mem == 16 and counters.kernel_count == 1
    assert dest_dev[:6] in copy.display_name and "copy" in copy.display_name


def test_buffer_copy_uses_transfer_inside_a_family(devices, monkeypatch):
    used = []
    allocator = devices["PYTHON:1"].allocator
    original = type(allocator).transfer
    monkeypatch.setattr(type(allocator), "transfer", lambda self, *a, **k: used.append(k) or original(self, *a, **k))
    src, dest = _filled("PYTHON", [5, 6]), Buffer("PYTHON:1", 2, dtypes.int32)
    BufferCopy(8, "PYTHON:1", "PYTHON")([dest, src], {})
    assert dest.numpy().tolist() == [5, 6]
    assert used and used[0]["src_dev"] is devices["PYTHON"] and used[0]["dest_dev"] is devices["PYTHON:1"]


def test_buffer_copy_checks_sizes_and_xfer_needs_transfer(devices):
    with pytest.raises(ValueError):
        BufferCopy(8, "PYTHON", "PYTHON")([Buffer("PYTHON", 2, dtypes.int32), _filled("PYTHON", [1, 2, 3])], {})
    src, dest = _filled("PYTHON", [7, 8]), Buffer("PYTHON:1", 2, dtypes.int32)
    BufferXfer(8, "PYTHON:1", "PYTHON")([dest, src], {})
    assert dest.numpy().tolist() == [7, 8]
    with pytest.raises(RuntimeError, match="transfer"):
        BufferXfer(8, "FAKE", "PYTHON")([Buffer("FAKE", 2, dtypes.int32), src], {})


def test_view_op_counts_no_kernel_and_checks_sharing(devices, counters):
    base = _filled("PYTHON", [1, 2, 3, 4])
    view = base.view(2, dtypes.int32, offset=8)
    ExecItem(ViewOp("PYTHON"), [view, base]).run()
    assert counters.kernel_count == 0 and view.numpy().tolist() == [3, 4]
    with pytest.raises(RuntimeError):
        ViewOp("PYTHON")([Buffer("PYTHON", 1, dtypes.int32), base], {})


def test_runner_base_is_abstract_and_resolves_device(devices):
    runner = Runner("x", "PYTHON")
    assert runner.dev is devices["PYTHON"] and runner.estimates == Estimates()
    with pytest.raises(NotImplementedError):
        runner([], {})
