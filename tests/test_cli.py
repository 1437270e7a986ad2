"""The ``tinycore`` command line as a subprocess: ``plugins`` (metadata only, ``--json``, ``-v``) and ``doctor``."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import json
import shutil

import pytest

BROKEN = "raise ImportError('vendor library libfake.so not found')\n"


def _installed(dist: str) -> bool:
    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        return False
    return True


def tinycore(site, *args: str, env=None):
    """Run ``python -m tinycore ARGS`` in a fresh interpreter that sees ``site``."""
    return site.run("", env, args=["-m", "tinycore", *args])


@pytest.fixture
def broken_site(fake_site):
    """A site with a plugin whose entry module raises at import."""
    fake_site.add_distribution(
        "tinycore-fakebroken",
        "2.0.1",
        entry_points={"tinycore.devices": {"FAKEBROKEN": "fake_broken_cli_plugin"}},
        requires=["tinycore>=0.1"],
        modules={"fake_broken_cli_plugin": BROKEN},
    )
    return fake_site


def test_plugins_lists_from_metadata_without_importing(broken_site):
    code = (
        "import sys\nfrom tinycore.cli import main\nmain(['plugins'])\n"
        "print('IMPORTED', sorted(m for m in sys.modules if m.startswith(('fake_', 'tinycore_')) "
        "or m.endswith('python_plugin') or m == 'numpy'))"
    )
    out = broken_site.run(code)
    assert out.returncode == 0, out.stderr
    line = next(row for row in out.stdout.splitlines() if row.startswith("FAKEBROKEN"))
    assert line.split() == ["FAKEBROKEN", "tinycore-fakebroken", "2.0.1", "fake_broken_cli_plugin", "discovered"]
    assert "PYTHON" in out.stdout and "tinycore.runtime.python_plugin" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "IMPORTED []"


def test_plugins_json(broken_site):
    out = tinycore(broken_site, "plugins", "--json")
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert payload["tinycore"]["version"] == "0.1.0" and payload["tinycore"]["plugin_api"][0] == 1
    by_name = {p["name"]: p for p in payload["plugins"]}
    assert by_name["FAKEBROKEN"]["distribution"] == "tinycore-fakebroken"
    assert by_name["FAKEBROKEN"]["state"] == "discovered" and by_name["FAKEBROKEN"]["requires"] == "tinycore>=0.1"
    assert by_name["PYTHON"]["distribution"] == "tinycore"
    assert "devices" not in payload  # -v only


def test_plugins_verbose_shows_failure_state_reason_and_fix(broken_site):
    out = tinycore(broken_site, "plugins", "-v")
    assert out.returncode == 0, out.stderr
    assert "FAKEBROKEN: failed - importing fake_broken_cli_plugin failed: ImportError: vendor library" in out.stdout
    assert "fix: pip install --force-reinstall tinycore-fakebroken==2.0.1" in out.stdout
    assert "PYTHON: available" in out.stdout and "device PYTHON: priority 0; probe ok" in out.stdout
    assert "numpy:" in out.stdout  # PYTHON's tinycore_report_info
    default = next(row for row in out.stdout.splitlines() if row.startswith("default device: "))
    assert default.split(": ")[1] in ("PYTHON", "CLANG", "CUDA", "METAL", "AMD")  # a real, available device


def test_plugins_verbose_json_has_devices_and_info(broken_site):
    out = tinycore(broken_site, "plugins", "-v", "--json")
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    states = {p["name"]: p["state"] for p in payload["plugins"]}
    assert states["FAKEBROKEN"] == "failed" and states["PYTHON"] == "available"
    python = next(d for d in payload["devices"] if d["name"] == "PYTHON")
    assert python["priority"] == 0 and python["probe"]["ok"] and "numpy" in python["info"]
    assert payload["default"] is not None and payload["error"] is None


def test_plugins_verbose_under_strict_mode_reports_and_fails(broken_site):
    out = tinycore(broken_site, "plugins", "-v", env={"TINYCORE_STRICT_PLUGINS": "1"})
    assert out.returncode == 1
    assert "TINYCORE_STRICT_PLUGINS stopped discovery" in out.stdout and "FAKEBROKEN" in out.stdout


def test_doctor_python_passes(fake_site):
    out = tinycore(fake_site, "doctor", "PYTHON")
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(row for row in out.stdout.splitlines() if row.startswith("PYTHON"))
    assert "PASS" in line and "probe: ok" in line and "alloc/copy: 256 bytes round trip" in line


def test_doctor_json_lists_each_check(fake_site):
    out = tinycore(fake_site, "doctor", "python", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    payload = json.loads(out.stdout)
    report = payload["devices"][0]
    assert payload["ok"] and report["status"] == "PASS" and report["distribution"] == "tinycore"
    names = [c["name"] for c in report["checks"]]
    assert names[:3] == ["probe", "open", "alloc/copy"]
    assert all(c["status"] == "PASS" for c in report["checks"][:3])
    # then the checks plugins add through tinycore_doctor_checks (CLANG's kernel smoke test skips PYTHON)
    assert all(c["status"] in ("PASS", "SKIP") for c in report["checks"][3:])


def test_doctor_failing_device_has_reason_fix_and_exit_code(broken_site):
    out = tinycore(broken_site, "doctor", "PYTHON", "FAKEBROKEN", "NOSUCH")
    assert out.returncode == 1
    assert "FAKEBROKEN  FAIL  probe: importing fake_broken_cli_plugin failed" in out.stdout
    assert "fix: pip install --force-reinstall tinycore-fakebroken==2.0.1" in out.stdout
    assert "NOSUCH" in out.stdout and "fix: pip install tinycore-nosuch" in out.stdout
    assert "PASS" in next(row for row in out.stdout.splitlines() if row.startswith("PYTHON"))


def test_doctor_says_metal_needs_macos_and_what_to_do(fake_site):
    # off macOS, doctor must FAIL METAL with the probe's reason and a fix
    if not _installed("tinycore-metal"):
        pytest.skip("tinycore-metal is not installed (pip install -e plugins/tinycore_metal)")
    from tinycore_metal.plugin import probe

    if probe().ok:
        pytest.skip("this machine has an Apple GPU: METAL passes here")
    out = tinycore(fake_site, "doctor", "METAL", "--json")
    assert out.returncode == 1
    report = json.loads(out.stdout)["devices"][0]
    assert report["status"] == "FAIL" and report["reason"] == f"probe: {probe().reason}"
    assert report["distribution"] == "tinycore-metal"
    assert "devices that work here:" in report["fix"] and "DEV=" in report["fix"]


def _doctor_report_of_a_missing_gpu(fake_site, device: str, hardware: str) -> dict:
    """`tinycore doctor DEVICE --json`'s report where the plugin is installed and its GPU is not (else a skip)."""
    dist = f"tinycore-{device.lower()}"
    if not _installed(dist):
        pytest.skip(f"{dist} is not installed (pip install -e plugins/{dist.replace('-', '_')})")
    probe = importlib.import_module(f"tinycore_{device.lower()}.plugin").probe
    if probe().ok:
        pytest.skip(f"this machine has an {hardware} GPU: {device} passes here")
    out = tinycore(fake_site, "doctor", device, "--json")
    report = json.loads(out.stdout)["devices"][0]
    assert out.returncode == 1 and report["status"] == "FAIL" and report["distribution"] == dist
    return report


def test_doctor_says_there_is_no_nvidia_driver_and_what_to_do(fake_site):
    report = _doctor_report_of_a_missing_gpu(fake_site, "CUDA", "NVIDIA")
    assert report["reason"].startswith(("probe: no NVIDIA driver", "probe: no GPU", "probe: cuda-bindings"))
    assert report["fix"]


def test_doctor_shows_the_plugin_report_of_a_device_that_fails_its_probe(fake_site):
    report = _doctor_report_of_a_missing_gpu(fake_site, "AMD", "AMD")
    assert report["reason"].startswith("probe:")
    assert "compiler" in report["info"] and "hiprtc" in report["info"]  # which compiler AMD would use, and why


def test_doctor_without_arguments_checks_everything_and_passes_on_default(broken_site):
    out = tinycore(broken_site, "doctor", "--json")
    payload = json.loads(out.stdout)
    names = [report["device"] for report in payload["devices"]]
    assert "FAKEBROKEN" in names and "PYTHON" in names
    assert payload["default"] == "PYTHON" or payload["default"] in names
    default_report = next(r for r in payload["devices"] if r["device"] == payload["default"])
    assert out.returncode == (0 if default_report["status"] == "PASS" else 1)
    assert payload["ok"] == (out.returncode == 0)


def test_doctor_without_arguments_fails_when_dev_is_unusable(fake_site):
    out = tinycore(fake_site, "doctor", env={"DEV": "NOSUCH"})
    assert out.returncode == 1
    assert "default device: none (FAIL: no installed plugin provides device NOSUCH" in out.stdout


def test_doctor_rejects_malformed_names(fake_site):
    out = tinycore(fake_site, "doctor", "not a device")
    assert out.returncode == 2 and "NAME:ordinal" in out.stderr


def test_no_command_prints_usage(fake_site):
    out = tinycore(fake_site)
    assert out.returncode == 2 and "plugins" in out.stderr and "doctor" in out.stderr


def test_console_script_is_installed():
    if not _installed("tinycore"):
        pytest.skip("the tinycore distribution is not installed (pip install -e .)")
    assert shutil.which("tinycore") is not None


def test_doctor_without_arguments_reports_malformed_dev(fake_site):
    out = tinycore(fake_site, "doctor", env={"DEV": "not a device"})
    assert out.returncode == 1
    assert "default device: none (FAIL: DEV: invalid device name 'not a device'" in out.stdout


def test_doctor_under_strict_mode_fails_every_device_with_the_discovery_error(broken_site):
    out = tinycore(broken_site, "doctor", "PYTHON", "--json", env={"TINYCORE_STRICT_PLUGINS": "1"})
    assert out.returncode == 1
    report = json.loads(out.stdout)["devices"][0]
    assert report["status"] == "FAIL" and "fake_broken_cli_plugin" in report["reason"]
    assert report["fix"].startswith("pip install --force-reinstall tinycore-fakebroken")
