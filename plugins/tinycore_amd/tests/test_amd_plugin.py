"""tinycore-amd runs the plugin conformance kit; the core and full tiers skip with the probe's reason while the
AMD device is not implemented."""

import pytest

pytest.importorskip("tinycore_amd", reason="tinycore-amd is not installed (pip install -e plugins/tinycore_amd)")
from tinycore.testkit import CoreTier, FullTier, StaticTier  # noqa: E402


class TestAMDConformance(StaticTier, CoreTier, FullTier):
    """Every tier of the kit on AMD."""

    device = "AMD"
