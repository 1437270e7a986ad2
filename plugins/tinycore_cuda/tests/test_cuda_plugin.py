"""tinycore-cuda runs the plugin conformance kit; the core and full tiers skip with the probe's reason while the
CUDA device is not implemented."""

import pytest

pytest.importorskip("tinycore_cuda", reason="tinycore-cuda is not installed (pip install -e plugins/tinycore_cuda)")
from tinycore.testkit import CoreTier, FullTier, StaticTier  # noqa: E402


class TestCUDAConformance(StaticTier, CoreTier, FullTier):
    """Every tier of the kit on CUDA."""

    device = "CUDA"
