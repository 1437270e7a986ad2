"""tinycore-amd: the ``AMD`` device plugin for tinycore (AMD GPUs).

The entry module is :mod:`tinycore_amd.plugin`; this package imports nothing heavy.
"""

__version__ = "0.1.0"
