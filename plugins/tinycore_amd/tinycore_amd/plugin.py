"""Entry module of the ``AMD`` device (entry point ``AMD = "tinycore_amd.plugin"``, group ``tinycore.devices``).

Light by contract: it imports only ``tinycore.sdk``. Until the AMD device is implemented it registers the name
and answers its probe with ``not implemented yet``, so an installed AMD never becomes the default device.
"""

from __future__ import annotations

from tinycore.sdk import PlaceholderHooks
from tinycore_amd import __version__

TINYCORE_PLUGIN_API = (1, 0)
DEVICE = "AMD"
PRIORITY = 30
DISTRIBUTION = "tinycore-amd"

tinycore_register_devices, tinycore_probe_device, tinycore_report_info = PlaceholderHooks(
    DEVICE, priority=PRIORITY, distribution=DISTRIBUTION, version=__version__
).hooks()
