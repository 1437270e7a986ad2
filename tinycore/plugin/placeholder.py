"""Hooks for a device plugin that registers its name before its device exists.

A plugin distribution whose device is not implemented yet still registers the name (so `tinycore plugins` and
`tinycore doctor` show it, and `DEV=NAME` fails with a clear reason), and its probe answers ``not implemented yet``
so it never becomes the default device. Its entry module is then three lines::

    from tinycore.sdk import PlaceholderHooks
    TINYCORE_PLUGIN_API = (1, 0)
    tinycore_register_devices, tinycore_probe_device, tinycore_report_info = PlaceholderHooks(
        "CUDA", priority=35, distribution="tinycore-cuda", version="0.1.0").hooks()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tinycore.plugin.hookspecs import PLUGIN_API_VERSION, ProbeResult, hookimpl


class PlaceholderHooks:
    """The register/probe/report hooks of a not-yet-implemented device ``device`` from ``distribution``.

    >>> register, probe, info = PlaceholderHooks("NPU", priority=5, distribution="tinycore-npu", version="0.1").hooks()
    >>> probe("NPU").reason, probe("OTHER") is None
    ('not implemented yet', True)
    """

    def __init__(self, device: str, *, priority: int, distribution: str, version: str):
        self.device, self.priority, self.distribution, self.version = device, priority, distribution, version

    def hooks(self) -> tuple[Callable[..., Any], ...]:
        """``(tinycore_register_devices, tinycore_probe_device, tinycore_report_info)`` for the entry module."""
        return self.tinycore_register_devices, self.tinycore_probe_device, self.tinycore_report_info

    @hookimpl
    def tinycore_register_devices(self, registry: Any) -> None:
        """Register the device name (no factory: nothing can be opened yet)."""
        registry.register(self.device, priority=self.priority, api_version=PLUGIN_API_VERSION)

    @hookimpl
    def tinycore_probe_device(self, name: str) -> ProbeResult | None:
        """``ok=False`` with reason ``not implemented yet``; None for other devices' names."""
        if name != self.device:
            return None
        return ProbeResult(
            ok=False,
            reason="not implemented yet",
            hint=f"use another device until {self.distribution} implements {self.device}",
            device_count=0,
        )

    @hookimpl
    def tinycore_report_info(self, name: str) -> dict[str, str] | None:
        """Version facts for ``tinycore plugins -v`` and ``tinycore doctor``."""
        if name != self.device:
            return None
        return {self.distribution: self.version, f"{self.device.lower()} status": "registration only"}
