"""tinycore-metal: the ``METAL`` device plugin for tinycore (Apple GPUs).

The entry module is :mod:`tinycore_metal.plugin`; this package imports nothing heavy.
"""

__version__ = "0.1.0"
