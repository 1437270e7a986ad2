"""Entry module of the ``CUDA`` device (entry point ``CUDA = "tinycore_cuda.plugin"``, group ``tinycore.devices``).

Light by contract: it imports only ``tinycore.sdk``. Until the CUDA device is implemented it registers the name
and answers its probe with ``not implemented yet``, so an installed CUDA never becomes the default device.
"""

from __future__ import annotations

from tinycore.sdk import PlaceholderHooks
from tinycore_cuda import __version__

TINYCORE_PLUGIN_API = (1, 0)
DEVICE = "CUDA"
PRIORITY = 35
DISTRIBUTION = "tinycore-cuda"

tinycore_register_devices, tinycore_probe_device, tinycore_report_info = PlaceholderHooks(
    DEVICE, priority=PRIORITY, distribution=DISTRIBUTION, version=__version__
).hooks()
