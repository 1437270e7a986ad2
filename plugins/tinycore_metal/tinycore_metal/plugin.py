"""Entry module of the ``METAL`` device (entry point ``METAL = "tinycore_metal.plugin"``, group ``tinycore.devices``).

Light by contract: it imports only ``tinycore.plugin``. Until the METAL device is implemented it registers the name
and answers its probe with ``not implemented yet``, so an installed METAL never becomes the default device.
"""

from __future__ import annotations

from typing import Any

from tinycore.plugin import ProbeResult, hookimpl
from tinycore_metal import __version__

TINYCORE_PLUGIN_API = (1, 0)
DEVICE = "METAL"
PRIORITY = 40
DISTRIBUTION = "tinycore-metal"


@hookimpl
def tinycore_register_devices(registry: Any) -> None:
    """Register ``METAL`` (no factory yet: nothing can be opened)."""
    registry.register(DEVICE, priority=PRIORITY, api_version=TINYCORE_PLUGIN_API)


@hookimpl
def tinycore_probe_device(name: str) -> ProbeResult | None:
    """Not usable yet: ``ok=False`` with reason ``not implemented yet``; None for other devices' names."""
    if name != DEVICE:
        return None
    return ProbeResult(
        ok=False,
        reason="not implemented yet",
        hint=f"use another device (e.g. DEV=PYTHON) until {DISTRIBUTION} implements {DEVICE}",
        device_count=0,
    )


@hookimpl
def tinycore_report_info(name: str) -> dict[str, str] | None:
    """Version facts for ``tinycore plugins -v`` and ``tinycore doctor``."""
    if name != DEVICE:
        return None
    return {DISTRIBUTION: __version__, "metal status": "registration only"}
