"""The conformance kit's static and core tiers on OPENCL (the core tier skips, naming why, without an OpenCL device)."""

from tinycore.testkit import CoreTier, StaticTier


class TestOpenCLConformance(StaticTier, CoreTier):
    """Packaging and hooks, then memory, dtypes, the op table against the PYTHON reference device, TinyJit."""

    device = "OPENCL"
