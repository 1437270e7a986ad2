"""Entry of ``pytest --pyargs tinycore.testkit --tinycore-device=NAME``: all three tiers on the named device."""

from tinycore.testkit import CoreTier, FullTier, StaticTier


class TestStatic(StaticTier):
    """Static tier on the device from ``--tinycore-device``."""


class TestCore(CoreTier):
    """Core tier on the device from ``--tinycore-device``."""


class TestFull(FullTier):
    """Full tier on the device from ``--tinycore-device``."""
