"""tinycore-opencl: an out-of-tree ``OPENCL`` device for tinycore, built only on `tinycore.sdk` (the worked example
of docs/plugins.md)."""

__version__ = "0.1.0"
