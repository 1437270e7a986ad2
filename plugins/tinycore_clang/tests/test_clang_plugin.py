"""Tests of the tinycore-clang distribution: the plugin conformance kit (every tier), plus what is CLANG's own:
the CPU alias, the compiler probe, capabilities, the doctor check."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys

import pytest

from tinycore.plugin import ProbeResult
from tinycore.testkit import CoreTier, FullTier, StaticTier

DIST = "tinycore-clang"
_MISSING = f"{DIST} is not installed (pip install -e plugins/tinycore_clang)"
tinycore_clang = pytest.importorskip("tinycore_clang", reason=_MISSING)
plugin = pytest.importorskip("tinycore_clang.plugin", reason=_MISSING)


class TestClangConformance(StaticTier, CoreTier, FullTier):
    """Every tier of the kit on CLANG."""

    device = "CLANG"


class RecordingRegistry:
    """Collects registry.register calls like core's registrar would receive them."""

    def __init__(self):
        self.calls = []

    def register(self, name, *, priority, aliases=(), api_version=(1, 0), factory=None):
        """Record one registration."""
        self.calls.append(
            dict(name=name, priority=priority, aliases=tuple(aliases), api_version=api_version, factory=factory)
        )


def installed_or_skip():
    """The installed distribution's metadata (skips when it is not installed)."""
    try:
        return md.distribution(DIST)
    except md.PackageNotFoundError:
        pytest.skip(_MISSING)


def run_python(code):
    """Run `code` in a fresh interpreter."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_registers_clang_above_python():
    registry = RecordingRegistry()
    plugin.tinycore_register_devices(registry)
    assert [call["name"] for call in registry.calls] == ["CLANG"]
    call = registry.calls[0]
    assert call["priority"] > 0  # PYTHON registers at 0
    assert call["aliases"] == ("CPU",)
    assert call["api_version"] == plugin.TINYCORE_PLUGIN_API
    assert call["factory"] == "tinycore_clang.device:ClangDevice"


def test_probe_is_ok_with_a_compiler_and_ignores_other_names(monkeypatch):
    from tinycore_clang import toolchain

    monkeypatch.delenv("CC", raising=False)
    result = plugin.tinycore_probe_device(name="CLANG")
    assert isinstance(result, ProbeResult)
    assert result.ok == toolchain.find_compiler().ok
    if result.ok:
        assert result.device_count >= 2  # virtual devices CLANG, CLANG:1, ...
    assert plugin.tinycore_probe_device(name="SOMETHING_ELSE") is None
    assert plugin.tinycore_report_info(name="SOMETHING_ELSE") is None
    assert plugin.tinycore_device_capabilities(name="SOMETHING_ELSE") is None
    assert plugin.tinycore_report_info(name="CLANG")[DIST] == tinycore_clang.__version__


def test_probe_names_a_missing_cc_and_the_fix(monkeypatch):
    monkeypatch.setenv("CC", "/surely/not/a/compiler")
    monkeypatch.setenv("CLANG_BACKEND", "c")  # (the llvm backend needs no C compiler: test_clang_no_compiler.py)
    result = plugin.tinycore_probe_device(name="CLANG")
    assert not result.ok and result.device_count == 0
    assert "CC=/surely/not/a/compiler" in result.reason
    assert "apt-get install clang" in result.hint and "CC=" in result.hint


def test_capabilities_declare_every_dtype_and_threads():
    from tinycore.dtype import ALL_SCALARS

    caps = plugin.tinycore_device_capabilities(name="CLANG")
    assert caps.dtypes == frozenset(ALL_SCALARS)
    assert {"threads", "transfer", "views", "zero_copy"} <= caps.features and caps.limits["threads"] >= 1


def test_doctor_check_arrives_through_the_hook_and_skips_other_devices():
    from tinycore.cli import DOCTOR_CHECKS, CheckSkipped, DoctorCheck, DoctorContext

    checks = plugin.tinycore_doctor_checks()
    assert [type(c) for c in checks] == [DoctorCheck] and checks[0].name == plugin.DOCTOR_CHECK_NAME
    assert plugin.DOCTOR_CHECK_NAME not in [c.name for c in DOCTOR_CHECKS]  # nothing installed behind core's back
    with pytest.raises(CheckSkipped):
        checks[0].run(DoctorContext(name="PYTHON", manager=None))


def test_core_opens_clang_when_it_can_run():
    installed_or_skip()
    from tinycore_clang.testing import unavailable_reason

    if reason := unavailable_reason():
        pytest.skip(reason)
    out = run_python(
        "from tinycore.device import Device; d = Device['clang']; print(type(d).__name__, d.device)"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ClangDevice CLANG"


def test_alias_resolves_to_clang_through_core():
    installed_or_skip()
    out = run_python("from tinycore.device import Device; print(Device.canonicalize('cpu:1'))")
    assert out.stdout.strip() == "CLANG:1", out.stderr
