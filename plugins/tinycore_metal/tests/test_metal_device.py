"""The METAL device driven by a fake Metal runtime (`tinycore_metal.testing.FakeMetal`, recording every call):
opening, shared-storage buffers (round trips, views, zero-copy, out of memory), launches through compute encoders
(buffers, variable bytes, launch dims, limits), timing from the command buffer's GPU times, failures, the runtime
compiler, and TinyJit replay through one indirect command buffer patched per replay. Then the probe's diagnoses and
``tinycore doctor METAL`` here. No Mac needed."""

from __future__ import annotations

import os
import platform
import struct
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tinycore_metal", reason="tinycore-metal is not installed (pip install -e plugins/tinycore_metal)")
from tinycore_metal import plugin  # noqa: E402
from tinycore_metal.api import MetalError  # noqa: E402
from tinycore_metal.device import MetalBuffer, MetalDevice  # noqa: E402
from tinycore_metal.testing import DISPATCH_SECONDS, FakeMetal  # noqa: E402

from tinycore.errors import CompileError, DeviceError  # noqa: E402
from tinycore.sdk import KernelImage  # noqa: E402

SRC = (
    "#include <metal_stdlib>\nusing namespace metal;\nkernel void k_add(device float* data0 [[buffer(0)]], "
    "const device float* data1 [[buffer(1)]], constant int& n [[buffer(2)]], constant long& m [[buffer(3)]], "
    "uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {\n"
    "  data0[gid.x] = data1[gid.x] + n;\n}\n"
)


@pytest.fixture
def fake() -> FakeMetal:
    return FakeMetal(gpus=(("Fake AMD Radeon", 0), ("Fake Apple M2", 8), ("Fake Apple M3", 9)), memory=1 << 16)


def test_opening_takes_apple_gpus_their_family_and_limits(fake: FakeMetal) -> None:
    dev = MetalDevice("METAL:1", api=fake)
    assert dev.device == "METAL:1" and dev.name == "Fake Apple M3" and dev.arch == "apple9"
    assert dev.renderer.local_max == (1024, 1024, 1024) and dev.renderer.shared_max == 32768
    assert dev.compiler.arch == "apple9" and MetalDevice("METAL", api=fake).name == "Fake Apple M2"
    with pytest.raises(DeviceError, match="there are 2 Apple GPUs here, no ordinal 2"):
        MetalDevice("METAL:2", api=fake)  # the Radeon is no Apple GPU


def test_buffers_are_shared_memory_round_trips_views_and_zero_copy(fake: FakeMetal) -> None:
    dev = MetalDevice("METAL", api=fake)
    alloc = dev.allocator
    data = np.arange(100, dtype=np.float32)
    buf = alloc.alloc(data.nbytes)
    assert isinstance(buf, MetalBuffer) and buf.offset == 0 and ("new_buffer", (400,)) in fake.calls
    alloc.copyin(buf, memoryview(data.tobytes()))  # read-only host memory is fine
    out = np.empty_like(data)
    alloc.copyout(memoryview(out).cast("B"), buf)
    np.testing.assert_array_equal(out, data)
    view = alloc.offset(buf, 40, 4 * 50)
    assert view.buf is buf.buf and view.offset == 200
    part = np.empty(10, dtype=np.float32)
    alloc.copyout(memoryview(part).cast("B"), view)
    np.testing.assert_array_equal(part, data[50:60])
    mem = alloc.as_buffer(view)  # zero-copy: writing the view writes the buffer
    mem[:4] = struct.pack("<f", -1.0)
    alloc.copyout(memoryview(out).cast("B"), buf)
    assert out[50] == -1.0 and out[49] == 49.0
    assert alloc.supports_as_buffer and alloc.supports_offset and not alloc.supports_transfer


def test_out_of_memory_empties_the_cache_then_retries_then_says_so(fake: FakeMetal) -> None:
    alloc = MetalDevice("METAL", api=fake).allocator
    first = alloc.alloc(40000)
    alloc.free(first, 40000)
    assert alloc.alloc(40000) is first and fake.count("new_buffer") == 1  # the cached buffer
    with pytest.raises(MemoryError, match="out of GPU memory allocating 60000 bytes on Fake Apple M2"):
        alloc.alloc(60000)


def _program(dev: MetalDevice, fake: FakeMetal, src: str = SRC):
    lib = dev.compiler.compile(src)  # the runtime toolchain: the fake's compiler
    return dev.runtime("k_add", lib)


def test_the_runtime_compiler_stores_the_checked_source_and_compiles_once(fake: FakeMetal) -> None:
    dev = MetalDevice("METAL", api=fake)
    assert dev.compiler.resolve()[0] == "runtime"  # no xcrun here
    lib = dev.compiler.compile(SRC)
    kinds, image = KernelImage.unpack(lib)
    assert kinds == ["buffer", "buffer", "int", "long"] and image == SRC.encode()
    dev.runtime("k_add", lib)
    assert fake.count("compile_source") == 1  # the program reuses the library of the compile
    parts = dev.compiler.cache_key_parts()
    assert parts[0] == "runtime" and "fake macOS 15.0" in parts and "mathMode=safe" in parts
    fake.fail["compile_source"] = "program_source:3:20: error: use of undeclared identifier 'nope'"
    with pytest.raises(CompileError, match=r"(?s)kernel k_add failed to compile.*undeclared identifier 'nope'"):
        dev.compiler.compile(SRC.replace("+ n", "+ nope"))
    with pytest.raises(MetalError, match="the library has no kernel k_other"):
        dev.runtime("k_other", lib)


def test_a_launch_encodes_pipeline_buffers_values_and_dims_then_commits(fake: FakeMetal) -> None:
    dev = MetalDevice("METAL", api=fake)
    a, b = dev.allocator.alloc(64), dev.allocator.alloc(64)
    prg = _program(dev, fake)
    view = dev.allocator.offset(b, 16, 48)
    assert prg(a, view, global_size=(4, 2, 1), local_size=(32, 1, 1), vals=(3, 2**40)) is None
    launch = fake.launches[-1]
    assert launch["kernel"] == "k_add" and launch["grid"] == (4, 2, 1) and launch["block"] == (32, 1, 1)
    assert launch["buffers"] == {0: (a.buf, 0), 1: (b.buf, 48)} and launch["via"] == "encoder"
    assert launch["bytes"] == {2: struct.pack("<i", 3), 3: struct.pack("<q", 2**40)}
    names = [c for c, _ in fake.calls]
    assert names[-10:] == ["command_buffer", "compute_encoder", "set_pipeline", "set_buffer", "set_buffer",
                           "set_bytes", "set_bytes", "dispatch", "end_encoding", "commit"]  # fmt: skip
    assert len(dev.in_flight) == 1 and fake.count("wait") == 0  # not waited for until needed
    dev.synchronize()
    assert dev.in_flight == [] and fake.count("wait") == 1


def test_timing_comes_from_the_command_buffers_gpu_times(fake: FakeMetal) -> None:
    dev = MetalDevice("METAL", api=fake)
    a, b = dev.allocator.alloc(64), dev.allocator.alloc(64)
    seconds = _program(dev, fake)(a, b, global_size=(1,), local_size=None, vals=(1, 1), wait=True)
    assert seconds == pytest.approx(DISPATCH_SECONDS) and fake.launches[-1]["block"] == (1, 1, 1)
    assert fake.calls[-1][0] == "wait" and dev.in_flight == []


def test_empty_launches_do_nothing_and_too_many_threads_is_a_clear_error(fake: FakeMetal) -> None:
    dev = MetalDevice("METAL", api=fake)
    prg = _program(dev, fake)
    assert prg(global_size=(0, 1, 1), local_size=(32, 1, 1), wait=True) == 0.0 and not fake.launches
    with pytest.raises(DeviceError, match=r"threadgroup of \(64, 32, 1\) is 2048 threads, over the 1024"):
        prg(global_size=(1, 1, 1), local_size=(64, 32, 1))


def test_a_failed_command_buffer_names_the_kernel(fake: FakeMetal) -> None:
    dev = MetalDevice("METAL", api=fake)
    a, b = dev.allocator.alloc(64), dev.allocator.alloc(64)
    prg = _program(dev, fake)
    fake.fail["commit"] = "Caused GPU Timeout Error (00000002:kIOGPUCommandBufferCallbackErrorTimeout)"
    prg(a, b, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=(1, 1))
    with pytest.raises(MetalError, match=r"device METAL: kernel k_add failed on Fake Apple M2: Caused GPU Timeout"):
        dev.synchronize()
    assert dev.in_flight == []


# ----- TinyJit replays through one indirect command buffer
def test_a_jit_replays_one_icb_patching_buffers_and_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinycore_metal.graph import MetalGraph

    from tinycore.device import Device
    from tinycore.dtype import dtypes
    from tinycore.engine import realize
    from tinycore.engine.jit import TinyJit
    from tinycore.tensor import Tensor
    from tinycore.uop.ops import Variable

    fake = FakeMetal(memory=1 << 22, check_syntax=True)  # every kernel also passes the stand-in syntax check
    dev = MetalDevice("METAL", api=fake)
    monkeypatch.setitem(Device._opened, "METAL", dev)  # this test's METAL is the fake GPU
    monkeypatch.setattr(realize, "_kernel_runners", {})  # and no kernel runner outlives it

    @TinyJit
    def step(x: Tensor, w: Tensor, n: Variable) -> Tensor:
        return ((x * 2 + Tensor(n, device="METAL").cast(dtypes.float32)).contiguous().realize() * w).sum(axis=1)

    weight = Tensor(np.ones((8, 16), np.float32), device="METAL").realize()
    n = Variable("n", 1, 10)
    for k in range(4):
        step(Tensor(np.full((8, 16), k, np.float32), device="METAL").realize(), weight, n.bind(k + 1)).realize()
    (graph,) = step.captured.graphs
    assert isinstance(graph, MetalGraph) and len(graph.commands) >= 2 and fake.count("new_icb") == 1
    assert all(cmd.barrier and cmd.pipeline is not None for cmd in graph.commands)
    launches, patched = graph.submissions, graph.patched
    x = Tensor(np.full((8, 16), 9, np.float32), device="METAL").realize()
    step(x, weight, n.bind(7)).realize()
    assert graph.submissions == launches + 1 and fake.count("new_icb") == 1  # never rebuilt
    assert graph.patched == patched + 1  # only the command reading the new input (and the variable) changed
    for item, cmd in zip(graph.items, graph.commands):  # every command is bound to its item's buffers now
        for slot, buf in enumerate(item.bufs):
            assert cmd.buffers[slot] == (buf.opaque.buf, buf.opaque.offset)
    first = graph.commands[0]
    var_slot = graph.var_offsets[0][0]
    memory = fake.buffer_memory(graph.var_buffer, graph.var_bytes)
    assert struct.unpack_from("<i", memory, var_slot)[0] == 7  # the new value, written in place
    assert first.buffers[len(graph.items[0].bufs)] == (graph.var_buffer, var_slot)
    replay = fake.launches[-len(graph.commands) :]
    assert [launch["via"] for launch in replay] == ["icb"] * len(graph.commands)
    assert ("use_resources", (len(graph.resources()),)) in fake.calls


# ----- the probe tells the failure causes apart, each with its fix
def test_probe_off_macos() -> None:
    result = plugin.probe(system="Linux")
    assert not result.ok and result.device_count == 0
    assert result.reason == "Metal needs macOS with an Apple GPU; this is Linux" and "DEV=CLANG" in result.hint


@pytest.mark.parametrize("machine", ["arm64", "x86_64"])
def test_probe_without_pyobjc(monkeypatch: pytest.MonkeyPatch, machine: str) -> None:
    def missing():
        raise ImportError("No module named 'Metal'")

    monkeypatch.setattr(plugin.platform, "machine", lambda: machine)
    result = plugin.probe(system="Darwin", load_api=missing)
    assert not result.ok and result.reason.startswith("pyobjc-framework-Metal is not installed")
    assert "pip install 'tinycore[metal]'" in result.hint and result.device_count == 0
    assert result.hardware_present == (machine == "arm64")  # Apple silicon's GPU is there: core says so
    assert not plugin.probe(system="Linux").hardware_present  # no Mac: nobody's mistake


def test_probe_without_a_metal_device() -> None:
    result = plugin.probe(system="Darwin", load_api=lambda: FakeMetal(gpus=()))
    assert not result.ok and result.reason.startswith("no Metal device") and "virtual machine" in result.hint


def test_probe_with_no_apple_gpu() -> None:
    result = plugin.probe(system="Darwin", load_api=lambda: FakeMetal(gpus=(("AMD Radeon Pro 5500M", 0),)))
    assert not result.ok and result.reason == "no Apple GPU: the Metal devices here are AMD Radeon Pro 5500M"


def test_probe_with_apple_gpus() -> None:
    result = plugin.probe(system="Darwin", load_api=lambda: FakeMetal(gpus=(("Apple M1", 7), ("Apple M3", 9))))
    assert result.ok and result.device_count == 2


@pytest.mark.skipif(platform.system() == "Darwin", reason="the Linux diagnosis (this is macOS)")
def test_the_probe_and_doctor_on_this_system_say_why_and_what_to_do() -> None:
    result = plugin.tinycore_probe_device(name="METAL")
    assert not result.ok and "Metal needs macOS with an Apple GPU" in result.reason
    env = {**os.environ, "TINYCORE_PLUGINS": "METAL,PYTHON"}
    done = subprocess.run(
        [sys.executable, "-m", "tinycore.cli", "doctor", "METAL"], capture_output=True, text=True, env=env, timeout=120
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "Metal needs macOS with an Apple GPU" in out and "DEV=CLANG" in out, out


def test_the_compiler_off_macos_names_what_is_missing_and_the_fix() -> None:
    from tinycore.plugin.manager import get_manager

    renderer, compiler = get_manager().compile_target("METAL", None)
    assert renderer.arch == compiler.arch == plugin.DEFAULT_ARCH
    if platform.system() == "Darwin":
        pytest.skip("this checks the diagnosis off macOS")
    with pytest.raises(CompileError, match=r"compiles only on macOS.*this is Linux; fix: compile on macOS"):
        compiler.compile_cached(SRC)
    with pytest.raises(Exception, match="'m3' is not an Apple GPU family: use appleN"):
        get_manager().compile_target("METAL", "m3")


def test_the_entry_module_stays_light() -> None:
    code = "import sys, tinycore_metal.plugin; print(sorted(m for m in sys.modules if m.split('.')[0] in " \
           "('Metal', 'Foundation', 'objc', 'numpy', 'tinycore_metal')))"  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['tinycore_metal', 'tinycore_metal.plugin']"
