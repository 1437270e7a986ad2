"""Entry-point module of the ``PYTHON`` reference device: registers it exactly like an out-of-tree plugin would.

Light on purpose: it imports neither numpy nor `tinycore.runtime.python_device` until a device is opened or a
compile target is asked for. Every hook returns None for names that are not ``PYTHON`` (or ``PYTHON:n``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinycore.dtype import ALL_SCALARS
from tinycore.plugin import DeviceCapabilities, ProbeResult, hookimpl

if TYPE_CHECKING:
    from tinycore.backend.compiler import Compiler
    from tinycore.device import Compiled
    from tinycore.renderer import Renderer

TINYCORE_PLUGIN_API = (1, 0)
FAMILY = "PYTHON"
# PYTHON devices are virtual: each ordinal is an independent device with its own memory.
VIRTUAL_DEVICE_COUNT = 8


def _is_python(name: str) -> bool:
    return name.upper().partition(":")[0] == FAMILY


def python_capabilities() -> DeviceCapabilities:
    """What the PYTHON device supports: every scalar dtype, GPU-style local/shared memory, graphs, views."""
    return DeviceCapabilities(
        dtypes=frozenset(ALL_SCALARS),
        features=frozenset({"local", "shared", "float4", "graph", "multi_device", "transfer", "views", "zero_copy"}),
        limits={"shared_max": 65536, "local_max0": 1024, "local_max1": 1024, "local_max2": 64},
    )


@hookimpl
def tinycore_register_devices(registry: Any) -> None:
    """Register ``PYTHON`` at the lowest priority (it is the fallback every install has)."""
    registry.register(
        FAMILY, priority=0, api_version=TINYCORE_PLUGIN_API, factory="tinycore.runtime.python_device:PythonDevice"
    )


@hookimpl
def tinycore_probe_device(name: str) -> ProbeResult | None:
    """Always available: it needs nothing but numpy."""
    return ProbeResult(ok=True, device_count=VIRTUAL_DEVICE_COUNT) if _is_python(name) else None


@hookimpl
def tinycore_open_device(name: str, ordinal: int) -> Compiled | None:
    """Build ``PYTHON`` (ordinal 0) or ``PYTHON:n``."""
    if not _is_python(name):
        return None
    from tinycore.runtime.python_device import PythonDevice

    return PythonDevice(FAMILY if ordinal == 0 else f"{FAMILY}:{ordinal}")


@hookimpl
def tinycore_compile_target(name: str, arch: str | None) -> tuple[Renderer, Compiler] | None:
    """The PYTHON renderer and compiler (there is a single arch: None)."""
    if not _is_python(name):
        return None
    from tinycore.runtime.python_device import PythonCompiler, PythonRenderer

    return PythonRenderer(), PythonCompiler()


@hookimpl
def tinycore_device_capabilities(name: str) -> DeviceCapabilities | None:
    """See `python_capabilities`."""
    return python_capabilities() if _is_python(name) else None


@hookimpl
def tinycore_report_info(name: str) -> dict[str, str] | None:
    """tinycore's version and the numpy version the interpreter runs on (read from metadata: numpy is not imported)."""
    if not _is_python(name):
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        numpy_version = version("numpy")
    except PackageNotFoundError:
        numpy_version = "not installed"
    return {"tinycore": version("tinycore"), "numpy": numpy_version}
