"""tinycore-clang: the ``CLANG`` device plugin for tinycore (CPU through C).

The entry module is :mod:`tinycore_clang.plugin`; this package imports nothing heavy.
"""

__version__ = "0.1.0"
