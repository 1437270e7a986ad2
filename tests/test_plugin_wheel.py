"""The real packaging path: build a throwaway plugin distribution with pip, install it, discover and open it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "tinycore-wheeltest"
version = "0.3.1"
dependencies = ["tinycore>=0.1,<0.2"]

[project.entry-points."tinycore.devices"]
WHEELTEST = "tinycore_wheeltest.plugin"

[tool.setuptools]
packages = ["tinycore_wheeltest"]
"""

PLUGIN = """
from tinycore.plugin import ProbeResult, hookimpl

TINYCORE_PLUGIN_API = (1, 0)


class WheelDevice:
    def __init__(self, device):
        self.device = device


@hookimpl
def tinycore_register_devices(registry):
    registry.register("WHEELTEST", priority=7, aliases=("WT",), factory="tinycore_wheeltest.plugin:WheelDevice")


@hookimpl
def tinycore_probe_device(name):
    return ProbeResult(ok=True, device_count=2) if name == "WHEELTEST" else None


@hookimpl
def tinycore_report_info(name):
    return {"wheeltest": "built by pip"} if name == "WHEELTEST" else None
"""


def _pip(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _has_setuptools() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= 68


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheeltest")
    source = root / "src"
    (source / "tinycore_wheeltest").mkdir(parents=True)
    (source / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    (source / "tinycore_wheeltest" / "__init__.py").write_text("")
    (source / "tinycore_wheeltest" / "plugin.py").write_text(textwrap.dedent(PLUGIN))
    # an installed setuptools builds offline; without it pip fetches one into an isolated build environment
    isolation = ["--no-build-isolation"] if _has_setuptools() else []
    built = _pip("wheel", "--no-deps", *isolation, "-w", str(root / "wheels"), str(source), cwd=root)
    assert built.returncode == 0, built.stdout + built.stderr
    wheels = list((root / "wheels").glob("tinycore_wheeltest-0.3.1-*.whl"))
    assert len(wheels) == 1, list((root / "wheels").iterdir())
    installed = _pip("install", "--no-deps", "--no-index", "--target", str(root / "site"), str(wheels[0]), cwd=root)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return root / "site"


def test_pip_installed_plugin_is_listed_from_metadata(wheel_site, run_python):
    out = run_python("from tinycore.cli import main; main(['plugins', '--json'])", paths=[wheel_site], cwd=wheel_site)
    assert out.returncode == 0, out.stderr
    record = next(p for p in json.loads(out.stdout)["plugins"] if p["name"] == "WHEELTEST")
    assert record["distribution"] == "tinycore-wheeltest" and record["version"] == "0.3.1"
    assert record["module"] == "tinycore_wheeltest.plugin" and record["state"] == "discovered"
    assert record["requires"].replace(" ", "") in ("tinycore>=0.1,<0.2", "tinycore<0.2,>=0.1")


def test_pip_installed_plugin_opens_and_reports(wheel_site, run_python):
    code = """
    import sys
    import tinycore
    assert not [m for m in sys.modules if m.startswith("tinycore_wheeltest")], "import tinycore imported a plugin"
    from tinycore.device import Device
    device = Device["wt:1"]
    print(type(device).__name__, device.device, Device.canonicalize("wt"), Device.manager.report_info("WHEELTEST"))
    """
    out = run_python(code, paths=[wheel_site], cwd=wheel_site)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "WheelDevice WHEELTEST:1 WHEELTEST {'wheeltest': 'built by pip'}"
