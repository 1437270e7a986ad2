"""Compiled: canonical names, runtime binding, capabilities derived from the renderer; is_dtype_supported."""

from __future__ import annotations

import pytest

import tinycore.device as device_module
import tinycore.plugin.manager as manager_module
from tinycore.device import Compiled, is_dtype_supported
from tinycore.dtype import dtypes
from tinycore.engine.graph_runner import SequentialGraphRunner
from tinycore.plugin import DeviceCapabilities, hookimpl
from tinycore.plugin.manager import DevicePlugins
from tinycore.renderer import Renderer
from tinycore.runtime.python_device import PythonAllocator, PythonDevice


class HalfOnlyRenderer(Renderer):
    device = "FAKE"
    has_shared = False
    supports_float4 = False
    local_max = (256, 256, 64)
    shared_max = 0
    supported_dtypes = frozenset({dtypes.float16, dtypes.int32, dtypes.bool})

    def __init__(self, arch=None):
        self.arch = arch


class FakeProgram:
    def __init__(self, device, name, lib):
        self.device, self.name, self.lib = device, name, lib


def make_fake(name="FAKE", **kwargs):
    return Compiled(name, PythonAllocator(), HalfOnlyRenderer("v2"), None, FakeProgram, **kwargs)


@pytest.mark.parametrize(("given", "canonical"), [("fake", "FAKE"), ("FAKE:0", "FAKE"), ("fake:3", "FAKE:3")])
def test_device_name_is_canonical(given, canonical):
    dev = make_fake(given)
    assert dev.device == canonical
    assert dev.family == "FAKE" and dev.ordinal == int(canonical.partition(":")[2] or 0)


def test_runtime_binds_the_device():
    dev = make_fake()
    prg = dev.runtime("kernel", b"lib")
    assert isinstance(prg, FakeProgram) and prg.device is dev and prg.name == "kernel" and prg.lib == b"lib"
    assert dev.program_class is FakeProgram
    assert Compiled("X", PythonAllocator(), None, None, None).runtime is None


def test_arch_and_synchronize():
    dev = make_fake()
    assert dev.arch == "v2"
    assert dev.synchronize() is None
    assert Compiled("X", PythonAllocator(), None, None, None).arch is None


def test_capabilities_derived_from_renderer_allocator_and_graph():
    caps = make_fake(graph=SequentialGraphRunner).capabilities
    assert caps.dtypes == frozenset({dtypes.float16, dtypes.int32, dtypes.bool})
    assert {"local", "graph", "transfer", "views", "zero_copy"} <= caps.features
    assert not {"shared", "float4", "tensor_cores"} & caps.features
    assert caps.limits["local_max0"] == 256 and caps.limits["local_max2"] == 64 and caps.limits["shared_max"] == 0
    assert "graph" not in make_fake().capabilities.features


class CapabilitiesPlugin:
    """Declares FAKE through the register hook and its capabilities through the one capabilities hook."""

    TINYCORE_PLUGIN_API = (1, 0)

    def __init__(self, declared):
        self.declared, self.asked = declared, 0

    @hookimpl
    def tinycore_register_devices(self, registry):
        registry.register("FAKE", priority=5)

    @hookimpl
    def tinycore_device_capabilities(self, name):
        self.asked += 1
        return self.declared if name == "FAKE" else None


def test_declared_capabilities_come_from_the_hook_and_win(monkeypatch):
    declared = DeviceCapabilities(dtypes=frozenset({dtypes.uint8}), features=frozenset({"x"}))
    plugin = CapabilitiesPlugin(declared)
    manager = DevicePlugins(entry_points=[])
    manager.register_plugin(plugin, "FAKE", distribution="tinycore-fake", version="0.1.0")
    monkeypatch.setattr(manager_module, "_manager", manager)
    dev = make_fake()
    assert dev.capabilities is declared and dev.capabilities is declared and plugin.asked == 1  # asked once
    plugin.declared = None  # a plugin answering None: derived from the renderer
    assert make_fake().capabilities.dtypes == frozenset({dtypes.float16, dtypes.int32, dtypes.bool})
    assert Compiled("X", PythonAllocator(), None, None, None).capabilities.dtypes == frozenset()


def test_compiled_takes_no_second_capabilities_declaration():
    with pytest.raises(TypeError):
        make_fake(capabilities=DeviceCapabilities(dtypes=frozenset()))


def test_is_dtype_supported_consults_the_device(monkeypatch):
    table = {"FAKE": make_fake(), "PYTHON": PythonDevice()}
    monkeypatch.setattr(device_module, "_device_lookup", lambda name: table[name])
    assert is_dtype_supported(dtypes.half, "FAKE")
    assert is_dtype_supported(dtypes.half.vec(4), "FAKE")
    assert not is_dtype_supported(dtypes.float64, "FAKE")
    assert not is_dtype_supported(dtypes.void, "FAKE")
    assert all(is_dtype_supported(dt, "PYTHON") for dt in (dtypes.float64, dtypes.bfloat16, dtypes.uint64))
    monkeypatch.setattr(device_module, "_default_device", lambda: "FAKE")
    assert not is_dtype_supported(dtypes.float64)
    assert is_dtype_supported(dtypes.int32)
