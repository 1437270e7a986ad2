"""tinycore-cuda: the ``CUDA`` device plugin for tinycore (NVIDIA GPUs).

The entry module is :mod:`tinycore_cuda.plugin`; this package imports nothing heavy.
"""

__version__ = "0.1.0"
