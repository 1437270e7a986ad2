"""`KitTarget`: what the conformance kit knows about the device family under test, found from installed metadata."""

from __future__ import annotations

import importlib
import importlib.metadata as md
from dataclasses import dataclass
from functools import cached_property
from types import ModuleType
from typing import Any

import pytest

from tinycore.plugin import ENTRY_POINT_GROUP, ProbeResult
from tinycore.plugin.manager import parse_device_name

KIT_OPTION = "--tinycore-device"


@dataclass(frozen=True)
class KitTarget:
    """A device family and the installed distribution whose entry point provides it.

    >>> KitTarget.find("python").family
    'PYTHON'
    """

    family: str
    entry_module_name: str
    distribution: md.Distribution

    @classmethod
    def find(cls, name: str) -> KitTarget:
        """The target for device ``name`` (``"CUDA"``, ``"cuda:1"``...); fails the test when nothing provides it."""
        family, _ = parse_device_name(name)
        points = [ep for ep in md.entry_points(group=ENTRY_POINT_GROUP) if ep.name.upper() == family]
        if not points:
            pytest.fail(f"no installed distribution declares device {family!r} (entry-point group {ENTRY_POINT_GROUP})")
        if len(points) > 1:
            owners = sorted(ep.dist.name for ep in points if ep.dist is not None)
            pytest.fail(f"device {family!r} is declared by several distributions: {owners}")
        point = points[0]
        return cls(family=family, entry_module_name=point.value, distribution=point.dist)

    @property
    def distribution_name(self) -> str:
        """The distribution's project name, as written in its metadata."""
        return self.distribution.metadata["Name"]

    @cached_property
    def entry_module(self) -> ModuleType:
        """The imported entry module (the hook implementations)."""
        return importlib.import_module(self.entry_module_name)

    def hook(self, hook_name: str) -> Any:
        """The entry module's implementation of ``hook_name``, or None when it does not implement it."""
        return getattr(self.entry_module, hook_name, None)

    def probe(self) -> ProbeResult:
        """The plugin's own answer to ``tinycore_probe_device`` for this family."""
        result = self.hook("tinycore_probe_device")(name=self.family)
        assert isinstance(result, ProbeResult), f"{self.family}: probe returned {result!r}, not a ProbeResult"
        return result

    def require_available(self, count: int = 1) -> ProbeResult:
        """Skip the calling test unless the device is usable here (with at least ``count`` instances)."""
        result = self.probe()
        if not result.ok:
            pytest.skip(f"{self.family} unavailable here: {result.reason}")
        if result.device_count < count:
            pytest.skip(f"{self.family} has {result.device_count} instance(s) here; this test needs {count}")
        return result


class KitTargetFixture:
    """Mixin giving a tier class its ``target`` fixture from the class's ``device`` or the command-line option."""

    device: str | None = None

    @pytest.fixture(scope="class")
    def target(self, request: pytest.FixtureRequest) -> KitTarget:
        """The device family under test."""
        name = self.device or request.config.getoption(KIT_OPTION, default=None)
        if not name:
            pytest.fail(f"the conformance kit needs a device: set `device =` on the class or pass {KIT_OPTION}=NAME")
        return KitTarget.find(name)
