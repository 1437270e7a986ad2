"""Entry module of the ``METAL`` device (entry point ``METAL = "tinycore_metal.plugin"``, group ``tinycore.devices``).

Light by contract: it imports only ``tinycore.sdk``. Until the METAL device is implemented it registers the name
and answers its probe with ``not implemented yet``, so an installed METAL never becomes the default device.
"""

from __future__ import annotations

from tinycore.sdk import PlaceholderHooks
from tinycore_metal import __version__

TINYCORE_PLUGIN_API = (1, 0)
DEVICE = "METAL"
PRIORITY = 40
DISTRIBUTION = "tinycore-metal"

tinycore_register_devices, tinycore_probe_device, tinycore_report_info = PlaceholderHooks(
    DEVICE, priority=PRIORITY, distribution=DISTRIBUTION, version=__version__
).hooks()
