"""The plugin conformance kit: `pytest --pyargs tinycore.testkit --tinycore-device=NAME` passes on a good device
and names what is wrong with a bad one (each check can fail)."""

from __future__ import annotations

import re

GOOD_PLUGIN = """
from tinycore.plugin import ProbeResult, hookimpl
TINYCORE_PLUGIN_API = (1, 0)

@hookimpl
def tinycore_register_devices(registry):
    registry.register("KITGOOD", priority=7, api_version=TINYCORE_PLUGIN_API)

@hookimpl
def tinycore_probe_device(name):
    if name != "KITGOOD":
        return None
    return ProbeResult(ok=False, reason="no KITGOOD card", hint="plug in a KITGOOD card", device_count=0)

@hookimpl
def tinycore_report_info(name):
    return {"tinycore-kitgood": "0.3.0"} if name == "KITGOOD" else None
"""

# The good plugin with five faults: a heavy import, the reference device's priority, an unavailable probe without a
# reason or hint, a report with the wrong version (and, below, a core requirement without an upper bound).
BAD_PLUGIN = "import kitbad_vendor_sdk\n" + GOOD_PLUGIN.replace("KITGOOD", "KITBAD").replace(
    "priority=7", "priority=0"
).replace('reason="no KITBAD card", hint="plug in a KITBAD card"', 'reason="", hint=""').replace(
    '"tinycore-kitgood": "0.3.0"', '"tinycore-kitbad": "9.9"'
)


def run_kit(fake_site, device: str, *selection: str):
    """Run the kit's static tier on ``device`` in a fresh pytest process that sees ``fake_site``."""
    args = ["-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "--pyargs", "tinycore.testkit"]
    args.append(f"--tinycore-device={device}")
    return fake_site.run("", args=[*args, "-k", " or ".join(selection) or "Static"], timeout=300)


def add_kit_plugin(fake_site, name: str, device: str, source: str, requires=("tinycore>=0.1,<0.2",)):
    module = name.replace("-", "_")
    fake_site.add_distribution(
        name,
        "0.3.0",
        entry_points={"tinycore.devices": {device: f"{module}.plugin"}},
        requires=requires,
        modules={f"{module}.plugin": source, "kitbad_vendor_sdk": "LOADED = True\n"},
    )


def test_kit_passes_on_the_reference_device(fake_site):
    result = run_kit(fake_site, "PYTHON", "Static", "Core")
    assert result.returncode == 0, result.stdout[-3000:]
    assert re.search(r"\b(\d+) passed\b", result.stdout) and "failed" not in result.stdout


def test_kit_passes_a_well_behaved_unavailable_plugin(fake_site):
    add_kit_plugin(fake_site, "tinycore-kitgood", "KITGOOD", GOOD_PLUGIN)
    result = run_kit(fake_site, "KITGOOD", "Static", "Core")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "KITGOOD unavailable here: no KITGOOD card" in result.stdout  # the core tier skips with the probe's reason


def test_kit_names_each_fault_of_a_bad_plugin(fake_site):
    add_kit_plugin(fake_site, "tinycore-kitbad", "KITBAD", BAD_PLUGIN, requires=("tinycore>=0.1",))
    result = run_kit(fake_site, "KITBAD", "Static")
    assert result.returncode == 1, result.stdout[-3000:]
    failed = set(re.findall(r"FAILED \S+::TestStatic::(\w+)", result.stdout))
    assert failed == {
        "test_entry_module_import_is_light",
        "test_registers_its_family_with_a_priority",
        "test_probe_answers_for_its_family_only",
        "test_report_info_names_the_distribution_version",
        "test_distribution_requires_a_core_range_containing_this_core",
        "test_core_opens_the_device_or_explains_why_not",
    }, result.stdout[-3000:]


def test_kit_fails_clearly_without_a_device(fake_site):
    result = fake_site.run("", args=["-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "tinycore.testkit"])
    assert result.returncode == 1
    assert "--tinycore-device=NAME" in result.stdout
