"""Static tier of the conformance kit: packaging and hooks, checked without opening the device."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from tinycore.plugin import PLUGIN_API_VERSION, ProbeResult
from tinycore.plugin.manager import CORE_DISTRIBUTION, check_api_version, requirement_applies, unmet_specifiers
from tinycore.testkit.target import KitTarget, KitTargetFixture

# What an entry module may pull in besides the standard library: core, pluggy and its own package.
_ALLOWED_IMPORT_ROOTS = ("tinycore", "pluggy")


class RecordingRegistry:
    """Stands in for core's registrar and records every ``register`` call a plugin makes."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def register(self, name: str, *, priority: int, aliases=(), api_version=(1, 0), factory=None) -> None:
        """Record one registration."""
        self.calls.append(
            dict(name=name, priority=priority, aliases=tuple(aliases), api_version=api_version, factory=factory)
        )


def run_python(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (so import side effects of the test process don't leak in)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def _registrations(target: KitTarget) -> list[dict[str, Any]]:
    registry = RecordingRegistry()
    target.hook("tinycore_register_devices")(registry=registry)
    return registry.calls


class StaticTier(KitTargetFixture):
    """Metadata, entry point, API and version range, hook answers, import cost, and core's view of the device."""

    def test_entry_point_names_an_importable_module(self, target: KitTarget):
        module = target.entry_module
        assert module.__name__ == target.entry_module_name
        assert target.hook("tinycore_register_devices") is not None, "the entry module must register its devices"
        assert target.hook("tinycore_probe_device") is not None, "the entry module must answer probes"

    def test_plugin_api_version_is_compatible_with_core(self, target: KitTarget):
        api = getattr(target.entry_module, "TINYCORE_PLUGIN_API", None)
        assert check_api_version(api, who=target.distribution_name) is None
        assert api[0] == PLUGIN_API_VERSION[0]

    def test_distribution_requires_a_core_range_containing_this_core(self, target: KitTarget):
        if target.distribution_name == CORE_DISTRIBUTION:  # core's own reference device ships with core
            assert target.entry_module_name.startswith("tinycore.")
            return
        core_lines = [line for line in target.distribution.requires or [] if requirement_applies(line)]
        assert len(core_lines) == 1, f"declare exactly one unconditional requirement on tinycore, got {core_lines}"
        assert any(op in core_lines[0] for op in ("<", "~=", "==")), "pin an upper bound on tinycore's version"
        from tinycore.plugin.manager import core_version

        assert unmet_specifiers(core_lines[0], core_version()) == []

    def test_registers_its_family_with_a_priority(self, target: KitTarget):
        calls = _registrations(target)
        mine = [call for call in calls if call["name"] == target.family]
        assert len(mine) == 1, f"{target.family} registered {len(mine)} times: {calls}"
        assert isinstance(mine[0]["priority"], int) and mine[0]["priority"] >= 0
        if target.distribution_name != CORE_DISTRIBUTION:
            assert mine[0]["priority"] > 0, "priority 0 belongs to the reference device"
        assert tuple(mine[0]["api_version"]) == tuple(target.entry_module.TINYCORE_PLUGIN_API)

    def test_registration_is_reentrant(self, target: KitTarget):
        assert _registrations(target) == _registrations(target)

    def test_probe_answers_for_its_family_only(self, target: KitTarget):
        result = target.probe()
        if result.ok:
            assert result.device_count >= 1
        else:
            assert result.reason and result.hint, "an unavailable device must say why and what to do"
            assert result.device_count == 0
        probe = target.hook("tinycore_probe_device")
        assert probe(name="NO_SUCH_DEVICE_FAMILY") is None
        assert target.probe() == result, "probing twice must give the same answer"
        assert isinstance(result, ProbeResult)

    def test_report_info_names_the_distribution_version(self, target: KitTarget):
        report = target.hook("tinycore_report_info")
        if report is None:  # optional hook
            assert target.hook("tinycore_probe_device") is not None
            return
        assert report(name="NO_SUCH_DEVICE_FAMILY") is None
        info = report(name=target.family)
        assert info.get(target.distribution_name) == target.distribution.version

    def test_entry_module_import_is_light(self, target: KitTarget):
        own_root = target.entry_module_name.split(".")[0]
        code = (
            "import sys; before = set(sys.modules); "
            f"import {target.entry_module_name}; "
            "new = set(sys.modules) - before; "
            f"print(sorted(m for m in new if m.split('.')[0] not in {(*_ALLOWED_IMPORT_ROOTS, own_root)!r}"
            " and m.split('.')[0] not in sys.stdlib_module_names))"
        )
        out = run_python(code)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "[]", "the entry module must not import vendor or numeric libraries"

    def test_core_opens_the_device_or_explains_why_not(self, target: KitTarget):
        probe = target.probe()
        code = (
            "from tinycore.device import Device\n"
            "from tinycore.errors import DeviceUnavailableError\n"
            "try:\n"
            f"    device = Device[{target.family.lower()!r}]\n"
            "    print('OPEN', device.device)\n"
            "except DeviceUnavailableError as e:\n"
            "    print('ERR', e.device, e.distribution, '|', e.reason, '|', e.fix)\n"
            "try:\n    print('DEFAULT', Device.DEFAULT)\n"
            "except DeviceUnavailableError as e:\n    print('NO DEFAULT', e.reason)\n"
        )
        out = run_python(code)
        assert out.returncode == 0, out.stderr
        if probe.ok:
            assert f"OPEN {target.family}\n" in out.stdout
        else:
            assert f"ERR {target.family} {target.distribution_name} | {probe.reason} | {probe.hint}" in out.stdout
            assert f"DEFAULT {target.family}\n" not in out.stdout, "an unavailable device never becomes the default"
