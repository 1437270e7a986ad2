"""Plugin machinery: hook specifications, the marker plugins decorate hooks with, and shared result types.

A device plugin's entry module looks like::

    from tinycore.sdk import hookimpl, ProbeResult
    TINYCORE_PLUGIN_API = (1, 0)

    @hookimpl
    def tinycore_register_devices(registry):
        registry.register("MYNPU", priority=50, factory="tinycore_mynpu.device:MyNpuDevice")
"""

from tinycore.plugin.hookspecs import (
    ENTRY_POINT_GROUP,
    PLUGIN_API_VERSION,
    PROJECT_NAME,
    DeviceCapabilities,
    ProbeResult,
    hookimpl,
    hookspec,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGIN_API_VERSION",
    "PROJECT_NAME",
    "DeviceCapabilities",
    "ProbeResult",
    "hookimpl",
    "hookspec",
]
