"""The plugin conformance kit: the tests every device plugin must pass, in three tiers.

- ``StaticTier``: packaging and hooks, no device opened (metadata, entry point, API version, core version range,
  re-entrant registration, probe/report answers, import cost of the entry module, how core reports the device).
- ``CoreTier``: the device itself (allocation and copies, the dtype matrix from its declared capabilities, a table of
  ops against the ``PYTHON`` reference device, TinyJit replay, the graph runner when one is declared).
- ``FullTier``: stress (allocation churn, many launches) and several instances of the device (``NAME:0``/``NAME:1``).

Run it against any installed device, without writing a line::

    pytest --pyargs tinycore.testkit --tinycore-device=MYNPU

or inherit the tiers in a plugin's own test suite (each distribution then tests itself)::

    from tinycore.testkit import CoreTier, StaticTier

    class TestMyNpuConformance(StaticTier, CoreTier):
        device = "MYNPU"

Skips come from the device: an unavailable device (no hardware, no driver, not implemented) skips the core and full
tiers with its probe's reason, and dtypes it does not declare are not tested.
"""

from tinycore.testkit.core import CoreTier
from tinycore.testkit.full import FullTier
from tinycore.testkit.static import StaticTier
from tinycore.testkit.target import KitTarget

__all__ = ["CoreTier", "FullTier", "KitTarget", "StaticTier"]
