"""Tests of the tinycore-cuda distribution: registration, probe, metadata, light import, core integration."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys

import pytest

from tinycore.plugin import PLUGIN_API_VERSION, ProbeResult

DIST = "tinycore-cuda"
_MISSING = f"{DIST} is not installed (pip install -e plugins/tinycore_cuda)"
tinycore_cuda = pytest.importorskip("tinycore_cuda", reason=_MISSING)
plugin = pytest.importorskip("tinycore_cuda.plugin", reason=_MISSING)


class RecordingRegistry:
    """Collects registry.register calls like core's registrar would receive them."""

    def __init__(self):
        self.calls = []

    def register(self, name, *, priority, aliases=(), api_version=(1, 0), factory=None):
        self.calls.append(dict(name=name, priority=priority, aliases=tuple(aliases), api_version=api_version))


def installed_or_skip():
    try:
        return md.distribution(DIST)
    except md.PackageNotFoundError:
        pytest.skip(_MISSING)


def run_python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_registers_cuda_above_python():
    registry = RecordingRegistry()
    plugin.tinycore_register_devices(registry)
    assert [call["name"] for call in registry.calls] == ["CUDA"]
    call = registry.calls[0]
    assert call["priority"] > 0  # PYTHON registers at 0
    assert call["aliases"] == ()
    assert call["api_version"] == plugin.TINYCORE_PLUGIN_API


def test_plugin_api_is_compatible_with_core():
    major, minor = plugin.TINYCORE_PLUGIN_API
    assert major == PLUGIN_API_VERSION[0] and minor <= PLUGIN_API_VERSION[1]


def test_probe_reports_not_implemented_and_ignores_other_names():
    result = plugin.tinycore_probe_device(name="CUDA")
    assert isinstance(result, ProbeResult)
    assert not result.ok and result.reason == "not implemented yet" and "DEV=" in result.hint
    assert plugin.tinycore_probe_device(name="SOMETHING_ELSE") is None
    assert plugin.tinycore_report_info(name="SOMETHING_ELSE") is None
    assert plugin.tinycore_report_info(name="CUDA")[DIST] == tinycore_cuda.__version__


def test_distribution_metadata_declares_entry_point_and_core_range():
    dist = installed_or_skip()
    assert dist.version == tinycore_cuda.__version__
    eps = [ep for ep in dist.entry_points if ep.group == "tinycore.devices"]
    assert [(ep.name, ep.value) for ep in eps] == [("CUDA", "tinycore_cuda.plugin")]
    core = [req.replace(" ", "") for req in dist.requires or [] if req.startswith("tinycore") and "-" not in req[:9]]
    assert len(core) == 1 and set(core[0].removeprefix("tinycore").split(",")) == {">=0.1", "<0.2"}


def test_entry_module_import_is_light():
    code = (
        "import sys; before = set(sys.modules); import tinycore_cuda.plugin; "
        "new = set(sys.modules) - before; "
        "print(sorted(m for m in new if m.split('.')[0] not in ('tinycore', 'tinycore_cuda', 'pluggy')"
        " and m.split('.')[0] not in sys.stdlib_module_names))"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_core_reports_cuda_unavailable_with_reason():
    installed_or_skip()
    code = (
        "from tinycore.plugin.registry import Device\n"
        "from tinycore.errors import DeviceUnavailableError\n"
        "try:\n    Device['cuda']\n"
        "except DeviceUnavailableError as e:\n    print('ERR', e.device, e.distribution, '|', e.reason, '|', e.fix)\n"
        "try:\n    print('DEFAULT', Device.DEFAULT)\n"
        "except DeviceUnavailableError as e:\n    print('NO DEFAULT', e.reason)"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert f"ERR CUDA {DIST} | not implemented yet | use another device" in out.stdout
    assert "DEFAULT CUDA" not in out.stdout  # an unfinished device never becomes the default
