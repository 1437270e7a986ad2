"""Entry module of the ``AMD`` device (entry point ``AMD = "tinycore_amd.plugin"``, group ``tinycore.devices``).

Light by contract: importing it imports only `tinycore.sdk`; the HIP runtime is looked for by the probe (a file
search: nothing is loaded), clang by the first compile. ``tinycore_compile_target`` needs no GPU: ``arch=None`` is
`DEFAULT_ARCH`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinycore.sdk import ALL_SCALARS, DeviceCapabilities, ProbeResult, hookimpl
from tinycore_amd import __version__

if TYPE_CHECKING:
    from tinycore.sdk import Compiled, Compiler, Renderer

TINYCORE_PLUGIN_API = (1, 0)
DEVICE = "AMD"
PRIORITY = 30
DISTRIBUTION = "tinycore-amd"
DEFAULT_ARCH = "gfx1100"  # the compile target without a GPU to ask
ROCM_HINT = "install ROCm's HIP runtime (libamdhip64; https://rocm.docs.amd.com), or use another device (DEV=CLANG)"


def _is_amd(name: str) -> bool:
    return name.upper().partition(":")[0] == DEVICE


def probe(hip: Any = None) -> ProbeResult:
    """Tell apart: no ROCm runtime (no libamdhip64), no AMD GPU, a GPU arch the installed clang can't build for."""
    from tinycore_amd.hip import CtypesHIP, find_runtime

    if hip is None:
        path = find_runtime()
        if path is None:
            return ProbeResult(
                ok=False, device_count=0, reason="no ROCm runtime (libamdhip64 not found)", hint=ROCM_HINT
            )
        try:
            hip = CtypesHIP(path)
        except OSError as error:
            return ProbeResult(ok=False, device_count=0, reason=f"no usable ROCm runtime: {error}", hint=ROCM_HINT)
    try:
        count = hip.device_count()
    except Exception as error:  # a runtime that fails to initialise: report it, never raise from a probe
        return ProbeResult(ok=False, device_count=0, reason=f"the HIP runtime failed: {error}", hint=ROCM_HINT)
    if count == 0:
        return ProbeResult(ok=False, device_count=0, reason="no AMD GPU: the HIP runtime sees none", hint=ROCM_HINT)
    arch = hip.arch(0)
    from tinycore_amd.compiler import supports_arch

    problem = supports_arch(arch)
    if problem is not None:
        return ProbeResult(
            ok=False,
            device_count=0,
            reason=f"GPU arch {arch} not supported by this build: {problem}",
            hint="apt-get install clang-19 lld-19 (or set AMD_CLANG to a clang that knows it)",
        )
    return ProbeResult(ok=True, device_count=count)


@hookimpl
def tinycore_register_devices(registry: Any) -> None:
    """Register ``AMD`` with its lazy factory."""
    registry.register(
        DEVICE, priority=PRIORITY, api_version=TINYCORE_PLUGIN_API, factory="tinycore_amd.device:AMDDevice"
    )


@hookimpl
def tinycore_probe_device(name: str) -> ProbeResult | None:
    """See `probe`."""
    return probe() if _is_amd(name) else None


@hookimpl
def tinycore_open_device(name: str, ordinal: int) -> Compiled | None:
    """Open ``AMD:ordinal``."""
    if not _is_amd(name):
        return None
    from tinycore_amd.device import AMDDevice

    return AMDDevice(DEVICE if ordinal == 0 else f"{DEVICE}:{ordinal}")


@hookimpl
def tinycore_compile_target(name: str, arch: str | None) -> tuple[Renderer, Compiler] | None:
    """Renderer and clang compiler for `arch` (a ``gfx`` name; None: `DEFAULT_ARCH`). No GPU needed."""
    if not _is_amd(name):
        return None
    from tinycore_amd.compiler import HIPCompiler, check_arch
    from tinycore_amd.renderer import AMDRenderer

    arch = check_arch(arch or DEFAULT_ARCH)
    return AMDRenderer(arch), HIPCompiler(arch)


@hookimpl
def tinycore_device_capabilities(name: str) -> DeviceCapabilities | None:
    """Every scalar dtype, work-groups with LDS, HIP graphs, several GPUs with copies between them and views."""
    if not _is_amd(name):
        return None
    return DeviceCapabilities(
        dtypes=frozenset(ALL_SCALARS),
        features=frozenset({"local", "shared", "float4", "graph", "multi_device", "transfer", "views"}),
        limits={"shared_max": 65536, "local_max0": 1024, "local_max1": 1024, "local_max2": 1024},
    )


@hookimpl
def tinycore_report_info(name: str) -> dict[str, str] | None:
    """This plugin's version, the clang it builds with, and whether a HIP runtime is there."""
    if not _is_amd(name):
        return None
    from tinycore_amd.compiler import clang_version, find_clang
    from tinycore_amd.hip import find_runtime

    clang = find_clang()
    return {
        DISTRIBUTION: __version__,
        "clang": "not found" if clang is None else f"{clang} ({clang_version(clang)})",
        "hip runtime": find_runtime() or "not found",
    }
