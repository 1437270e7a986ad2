"""tinycore-metal runs the plugin conformance kit; the core and full tiers skip with the probe's reason while the
METAL device is not implemented."""

import pytest

pytest.importorskip("tinycore_metal", reason="tinycore-metal is not installed (pip install -e plugins/tinycore_metal)")
from tinycore.testkit import CoreTier, FullTier, StaticTier  # noqa: E402


class TestMetalConformance(StaticTier, CoreTier, FullTier):
    """Every tier of the kit on METAL."""

    device = "METAL"
