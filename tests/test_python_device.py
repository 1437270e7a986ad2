"""The PYTHON reference device: allocator, separate instances, renderer/compiler, hooks, and the registry path."""

from __future__ import annotations

import pickle
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest

import tinycore
from tinycore.device import Buffer, Compiled, Device
from tinycore.dtype import ALL_SCALARS, dtypes
from tinycore.errors import CompileError
from tinycore.plugin import ProbeResult
from tinycore.plugin.manager import DevicePlugins, reset_manager
from tinycore.runtime import python_plugin
from tinycore.runtime.python_device import (
    PythonAllocator,
    PythonCompiler,
    PythonDevice,
    PythonProgram,
    PythonRenderer,
    decode_program,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def registry(monkeypatch):
    """The process-wide `Device` registry with only the PYTHON entry point (as pyproject.toml declares it)."""
    monkeypatch.delenv("DEV", raising=False)
    for knob in ("TINYCORE_PLUGINS", "TINYCORE_DISABLE_PLUGINS", "TINYCORE_STRICT_PLUGINS"):
        monkeypatch.delenv(knob, raising=False)
    ep = EntryPoint(name="PYTHON", value="tinycore.runtime.python_plugin", group="tinycore.devices")
    Device.reset()
    reset_manager(DevicePlugins(entry_points=[ep]))
    yield Device
    Device.reset()
    reset_manager()


def test_allocator_round_trip_views_and_zero_copy():
    a = PythonAllocator()
    opaque = a.alloc(8)
    a.copyin(opaque, memoryview(b"01234567"))
    out = bytearray(8)
    a.copyout(memoryview(out), opaque)
    assert out == b"01234567"
    view = a.offset(opaque, 3, 2)
    assert bytes(view) == b"234"
    view[0] = ord("X")
    assert bytes(a.as_buffer(opaque)) == b"01X34567"
    with pytest.raises(ValueError):
        a.offset(opaque, 8, 1)
    dest = a.alloc(8)
    a.transfer(dest, opaque, 8, src_dev=None, dest_dev=None)  # type: ignore[arg-type]
    assert bytes(dest) == b"01X34567"
    assert bytes(a.alloc(0)) == b""


def test_allocations_are_aligned_for_every_dtype():
    a = PythonAllocator()
    for size in (1, 3, 8, 24):
        arr = np.frombuffer(a.alloc(size * 8), dtype=np.float64)
        assert arr.ctypes.data % 8 == 0


def test_python_and_python_1_are_separate_devices_with_separate_memory():
    dev0, dev1 = PythonDevice("PYTHON"), PythonDevice("PYTHON:1")
    assert dev0 is not dev1 and dev0.allocator is not dev1.allocator
    assert (dev0.device, dev1.device) == ("PYTHON", "PYTHON:1")
    x0, x1 = dev0.allocator.alloc(4), dev1.allocator.alloc(4)
    dev0.allocator.copyin(x0, memoryview(b"aaaa"))
    dev1.allocator.copyin(x1, memoryview(b"bbbb"))
    assert bytes(dev0.allocator.as_buffer(x0)) == b"aaaa" and bytes(dev1.allocator.as_buffer(x1)) == b"bbbb"
    dev0.allocator.free(x0, 4)
    assert dev0.allocator.cached_bytes == 4 and dev1.allocator.cached_bytes == 0
    assert dev1.allocator.alloc(4) is not x0  # the cache of one device never serves another


def test_python_device_bundle():
    dev = PythonDevice()
    assert isinstance(dev, Compiled)
    assert isinstance(dev.renderer, PythonRenderer) and isinstance(dev.compiler, PythonCompiler)
    assert dev.program_class is PythonProgram and dev.compiler.cachekey is None
    assert dev.capabilities.dtypes == frozenset(ALL_SCALARS)
    assert {"local", "shared", "graph"} <= dev.capabilities.features
    assert dev.renderer.has_local and dev.renderer.has_shared and dev.renderer.device == "PYTHON"
    with pytest.raises(ValueError):
        PythonDevice("CUDA")


class FakeUOp:
    def __init__(self, op, dtype, src=(), arg=None):
        self.op, self.dtype, self.src, self.arg = op, dtype, tuple(src), arg


def test_render_compile_decode_round_trip():
    buf = FakeUOp("DEFINE_GLOBAL", dtypes.float.ptr(4), arg=0)
    const = FakeUOp("CONST", dtypes.float, arg=1.5)
    store = FakeUOp("STORE", dtypes.void, (buf, const))
    src = PythonRenderer().render([buf, const, store])
    assert isinstance(src, str)
    lib = PythonCompiler().compile_cached(src)
    assert decode_program(lib) == [
        ("DEFINE_GLOBAL", dtypes.float.ptr(4), (), 0),
        ("CONST", dtypes.float, (), 1.5),
        ("STORE", dtypes.void, (0, 1), None),
    ]


def test_render_rejects_sources_that_are_not_earlier():
    a = FakeUOp("CONST", dtypes.int, arg=1)
    b = FakeUOp("NEG", dtypes.int, (a,))
    with pytest.raises(ValueError, match="not earlier"):
        PythonRenderer().render([b, a])
    with pytest.raises(ValueError, match="not earlier"):
        PythonRenderer().render([b])


@pytest.mark.parametrize("src", ["not base64 !!", "aGVsbG8="])
def test_compiler_rejects_malformed_source(src):
    with pytest.raises(CompileError, match="not a PYTHON program"):
        PythonCompiler().compile(src)


# ----- hooks -----


class FakeRegistrar:
    def __init__(self):
        self.calls = []

    def register(self, name, **kwargs):
        self.calls.append((name, kwargs))


def test_register_hook():
    registrar = FakeRegistrar()
    python_plugin.tinycore_register_devices(registrar)
    [(name, kwargs)] = registrar.calls
    assert name == "PYTHON" and kwargs["priority"] == 0
    assert kwargs["factory"] == "tinycore.runtime.python_device:PythonDevice" and kwargs["api_version"] == (1, 0)
    assert python_plugin.TINYCORE_PLUGIN_API == (1, 0)


def test_hooks_answer_only_for_python():
    for other in ("CUDA", "CLANG", "PYTHONX", "CPU:1"):
        assert python_plugin.tinycore_probe_device(other) is None
        assert python_plugin.tinycore_open_device(other, 0) is None
        assert python_plugin.tinycore_compile_target(other, None) is None
        assert python_plugin.tinycore_device_capabilities(other) is None
        assert python_plugin.tinycore_report_info(other) is None


def test_hooks_for_python():
    probe = python_plugin.tinycore_probe_device("PYTHON")
    assert isinstance(probe, ProbeResult) and probe.ok and probe.device_count >= 2
    dev = python_plugin.tinycore_open_device("PYTHON", 1)
    assert isinstance(dev, PythonDevice) and dev.device == "PYTHON:1"
    assert python_plugin.tinycore_open_device("PYTHON", 0).device == "PYTHON"
    renderer, compiler = python_plugin.tinycore_compile_target("PYTHON", None)
    assert isinstance(renderer, PythonRenderer) and isinstance(compiler, PythonCompiler)
    assert python_plugin.tinycore_device_capabilities("PYTHON").dtypes == frozenset(ALL_SCALARS)
    info = python_plugin.tinycore_report_info("PYTHON")
    assert info == {"tinycore": tinycore.__version__, "numpy": np.__version__}


def test_entry_module_is_light(run_python):
    code = (
        "import sys, tinycore.runtime.python_plugin as p; p.tinycore_device_capabilities('PYTHON');"
        "p.tinycore_report_info('PYTHON');"
        "print('numpy' in sys.modules, 'tinycore.runtime.python_device' in sys.modules)"
    )
    result = run_python(code, {"PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


# ----- through the registry -----


def test_device_registry_opens_python_devices(registry):
    dev = registry["PYTHON"]
    assert isinstance(dev, PythonDevice) and dev.device == "PYTHON"
    assert registry["python"] is dev and registry["PYTHON:0"] is dev
    dev1 = registry["PYTHON:1"]
    assert isinstance(dev1, PythonDevice) and dev1 is not dev and dev1.device == "PYTHON:1"
    assert registry.DEFAULT == "PYTHON"


def test_buffers_through_the_registry(registry):
    from tinycore.device import Device as reexported
    from tinycore.device import is_dtype_supported

    assert reexported is registry
    a = Buffer("PYTHON", 3, dtypes.int32).copyin(memoryview(np.array([1, 2, 3], np.int32)))
    b = Buffer("PYTHON:1", 3, dtypes.int32).copyin(memoryview(np.array([4, 5, 6], np.int32)))
    assert a.allocator is registry["PYTHON"].allocator and b.allocator is registry["PYTHON:1"].allocator
    assert a.numpy().tolist() == [1, 2, 3] and b.numpy().tolist() == [4, 5, 6]
    assert is_dtype_supported(dtypes.float64, "PYTHON") and is_dtype_supported(dtypes.bfloat16)


def test_renderer_pickles_through_the_compile_target_hook(registry):
    clone = pickle.loads(pickle.dumps(PythonRenderer()))
    assert isinstance(clone, PythonRenderer) and clone.device == "PYTHON" and clone.arch is None


def test_installed_entry_point_reaches_python(fake_site):
    # what `pip install tinycore` provides: a distribution whose entry point names the light module
    fake_site.add_distribution(
        "tinycore", entry_points={"tinycore.devices": {"PYTHON": "tinycore.runtime.python_plugin"}}
    )
    code = (
        "from tinycore.device import Device, Buffer; from tinycore.dtype import dtypes;"
        "b = Buffer(Device.DEFAULT, 2, dtypes.uint8).copyin(b'hi');"
        "print(Device.DEFAULT, type(Device['PYTHON:1']).__name__, bytes(b.as_buffer()).decode())"
    )
    # other device plugins may be installed in this environment: allow only PYTHON so it must be the default
    env = {"PYTHONPATH": f"{fake_site.root}:{REPO_ROOT}", "TINYCORE_PLUGINS": "PYTHON"}
    result = fake_site.run(code, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["PYTHON", "PythonDevice", "hi"]
