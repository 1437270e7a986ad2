"""Shared pytest fixtures for core tests.

- ``fake_site``: a throwaway site folder where tests write hand-made distributions (``*.dist-info`` with ``METADATA``
  and ``entry_points.txt``, plus modules); :meth:`FakeSite.run` runs Python code in a fresh interpreter that sees it
  (discovery through ``importlib.metadata`` works exactly as for pip-installed distributions).
- ``run_python``: run code in a fresh interpreter with a clean tinycore environment (no ``DEV``/``TINYCORE_*`` knobs
  leaking from the caller's shell).
- every test starts with numpy's global random state seeded from its id (``_seeded_numpy``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _seeded_numpy(request: pytest.FixtureRequest) -> None:
    """numpy's global random state seeded from the test's id: tests that draw unseeded data (``np.random.randn``) get
    the same data on every run and in any selection, so a float32 tolerance can't fail on an unlucky draw in CI."""
    np.random.seed(zlib.crc32(request.node.nodeid.encode()))


# knobs a test process must not inherit from the developer's shell: each test sets what it needs
_KNOBS = ("DEV", "DEBUG", "TINYCORE_PLUGINS", "TINYCORE_DISABLE_PLUGINS", "TINYCORE_STRICT_PLUGINS")


def clean_env(extra: Mapping[str, str] | None = None, paths: Sequence[str | os.PathLike[str]] = ()) -> dict[str, str]:
    """The current environment without tinycore knobs, with ``paths`` prepended to PYTHONPATH and ``extra`` set."""
    env = {key: value for key, value in os.environ.items() if key not in _KNOBS}
    env["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in paths), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra or {})
    return env


def run_code(
    code: str,
    env: Mapping[str, str] | None = None,
    *,
    paths: Sequence[str | os.PathLike[str]] = (),
    cwd: str | os.PathLike[str] | None = None,
    args: Sequence[str] = (),
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code`` (or ``python ARGS`` when ``code`` is empty) in a fresh interpreter; text output."""
    command = [sys.executable, *args] if not code else [sys.executable, *args, "-c", textwrap.dedent(code)]
    return subprocess.run(command, env=clean_env(env, paths), cwd=cwd, capture_output=True, text=True, timeout=timeout)


class FakeSite:
    """A folder on ``sys.path`` of child interpreters holding hand-made distributions and modules."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def add_module(self, name: str, source: str) -> Path:
        """Write module ``name`` (dotted names create packages) with ``source``."""
        parts = name.split(".")
        folder = self.root.joinpath(*parts[:-1])
        folder.mkdir(parents=True, exist_ok=True)
        for depth in range(1, len(parts)):
            init = self.root.joinpath(*parts[:depth], "__init__.py")
            if not init.exists():
                init.write_text("")
        path = folder / f"{parts[-1]}.py"
        path.write_text(textwrap.dedent(source))
        return path

    def add_distribution(
        self,
        name: str,
        version: str = "0.1.0",
        *,
        entry_points: Mapping[str, Mapping[str, str]] | None = None,
        requires: Sequence[str] = (),
        modules: Mapping[str, str] | None = None,
    ) -> Path:
        """Create ``<name>-<version>.dist-info`` with ``entry_points`` ``{group: {name: value}}``, ``Requires-Dist``
        lines ``requires``, and the given ``modules`` ``{dotted name: source}``. Returns the dist-info folder."""
        folder = self.root / f"{name.replace('-', '_')}-{version}.dist-info"
        folder.mkdir()
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        lines += [f"Requires-Dist: {req}" for req in requires]
        (folder / "METADATA").write_text("\n".join(lines) + "\n")
        sections = []
        for group, entries in (entry_points or {}).items():
            sections.append(f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items()))
        (folder / "entry_points.txt").write_text("\n".join(sections))
        for module, source in (modules or {}).items():
            self.add_module(module, source)
        return folder

    def run(
        self, code: str, env: Mapping[str, str] | None = None, **kwargs: object
    ) -> subprocess.CompletedProcess[str]:
        """Run ``code`` in a fresh interpreter that sees this site (cwd = the site; knobs only from ``env``)."""
        return run_code(code, env, paths=[self.root], cwd=self.root, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def fake_site(tmp_path: Path) -> FakeSite:
    """An empty :class:`FakeSite` in the test's temporary folder."""
    return FakeSite(tmp_path / "site")


@pytest.fixture
def run_python():
    """:func:`run_code`: run code in a fresh interpreter with a clean tinycore environment."""
    return run_code


def test_devices() -> list[str]:
    """Devices the device-parametrized tests run on: ``TINYCORE_TEST_DEVICES`` (comma list), else every installed
    device family whose probe passes (PYTHON always; CLANG when its plugin and a C compiler are present)."""
    override = os.environ.get("TINYCORE_TEST_DEVICES")
    if override:
        return [name.strip().upper() for name in override.split(",") if name.strip()]
    from tinycore.device import Device

    return [name for name in ("PYTHON", "CLANG") if name in list(Device)]


test_devices.__test__ = False  # a helper, not a test


@pytest.fixture(params=test_devices())
def device(request: pytest.FixtureRequest) -> str:
    """Each device of :func:`test_devices` in turn (op-parity tests run on every installed device)."""
    return request.param


@pytest.fixture(scope="module")
def clang():
    """The CLANG device (skips, naming why, when the plugin or a C compiler is missing)."""
    from tinycore.device import Device

    try:
        dev = Device["CLANG"]
        dev.compiler  # noqa: B018 - opening the compiler is the check
    except Exception as error:  # noqa: BLE001
        pytest.skip(f"no C compiler (CLANG device unavailable: {type(error).__name__})")
    return dev


@pytest.fixture
def python_default_device() -> Iterator[None]:
    """Make PYTHON the default device for one test (restored afterwards)."""
    from tinycore.device import Device

    saved = Device.DEFAULT
    Device.DEFAULT = "PYTHON"
    try:
        yield
    finally:
        Device.DEFAULT = saved


def _clang_pair_available() -> bool:
    try:
        from tinycore.device import Device

        Device["CLANG"]
        Device["CLANG:1"]
        return True
    except Exception:  # noqa: BLE001 - any failure to open means "not here"
        return False


@pytest.fixture(
    params=[
        pytest.param(("PYTHON:0", "PYTHON:1"), id="python"),
        pytest.param(
            ("CLANG:0", "CLANG:1"),
            id="clang",
            marks=pytest.mark.skipif(not _clang_pair_available(), reason="no C compiler / tinycore-clang plugin"),
        ),
    ]
)
def devs(request: pytest.FixtureRequest) -> tuple[str, str]:
    """A pair of devices of one family (multi-device tests)."""
    return request.param
