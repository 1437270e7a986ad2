"""Entry module of the ``AMD`` device (entry point ``AMD = "tinycore_amd.plugin"``, group ``tinycore.devices``).

Light by contract: importing it imports only `tinycore.sdk`; the HIP runtime and the compiler are looked for by the
probe, clang runs at the first compile. A GPU builds with ROCm's hipRTC when it loads, else with clang
(`tinycore_amd.compiler.make_compiler`; ``AMD_COMPILER=clang|hiprtc`` forces one). ``tinycore_compile_target``
needs no GPU and builds with clang unless ``AMD_COMPILER=hiprtc``: ``arch=None`` is `DEFAULT_ARCH`.
"""

from __future__ import annotations

import os
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


def amd_gpu_nodes() -> bool:
    """True when the kernel driver shows an AMD GPU to compute on (``/dev/kfd``, ROCm's device node): the hardware
    is here even when the ROCm runtime is missing. Files only."""
    return os.path.exists("/dev/kfd")


def probe(hip: Any = None) -> ProbeResult:
    """Tell apart: no ROCm runtime (no libamdhip64), no AMD GPU, a GPU arch the compiler can't build for (clang's or
    hipRTC's list), ``AMD_COMPILER`` set wrong or forcing a hipRTC that is missing. A failure with a GPU in the
    machine is marked `ProbeResult.hardware_present` (core then says why AMD was passed over)."""
    from tinycore_amd.hip import CtypesHIP, find_runtime

    if hip is None:
        path = find_runtime()
        if path is None:
            return ProbeResult(
                ok=False, device_count=0, reason="no ROCm runtime (libamdhip64 not found)", hint=ROCM_HINT,
                hardware_present=amd_gpu_nodes(),
            )  # fmt: skip
        try:
            hip = CtypesHIP(path)
        except OSError as error:
            return ProbeResult(
                ok=False, device_count=0, reason=f"no usable ROCm runtime: {error}", hint=ROCM_HINT,
                hardware_present=amd_gpu_nodes(),
            )  # fmt: skip
    try:
        count = hip.device_count()
    except Exception as error:  # a runtime that fails to initialise: report it, never raise from a probe
        return ProbeResult(
            ok=False, device_count=0, reason=f"the HIP runtime failed: {error}", hint=ROCM_HINT,
            hardware_present=amd_gpu_nodes(),
        )  # fmt: skip
    if count == 0:
        return ProbeResult(ok=False, device_count=0, reason="no AMD GPU: the HIP runtime sees none", hint=ROCM_HINT)
    from tinycore_amd.compiler import compiler_problem

    problem = compiler_problem(hip.arch(0))
    if problem is not None:  # a GPU is here: only its compiler is missing or misconfigured
        return ProbeResult(ok=False, device_count=0, reason=problem[0], hint=problem[1], hardware_present=True)
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
    """Renderer and compiler for `arch` (a ``gfx`` name; None: `DEFAULT_ARCH`). No GPU needed: clang, or hipRTC with
    ``AMD_COMPILER=hiprtc``."""
    if not _is_amd(name):
        return None
    from tinycore_amd.compiler import check_arch, make_compiler
    from tinycore_amd.renderer import AMDRenderer

    arch = check_arch(arch or DEFAULT_ARCH)
    return AMDRenderer(arch), make_compiler(arch, on_gpu=False)


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
    """This plugin's version, the compiler a GPU builds with (hipRTC or clang, and its version), the clang and hipRTC
    found, and whether a HIP runtime is there."""
    if not _is_amd(name):
        return None
    from tinycore_amd.compiler import clang_version, describe_compiler, find_clang
    from tinycore_amd.hip import find_runtime
    from tinycore_amd.hiprtc import describe_hiprtc

    clang = find_clang()
    return {
        DISTRIBUTION: __version__,
        "compiler": describe_compiler(),
        "clang": "not found" if clang is None else f"{clang} ({clang_version(clang)})",
        "hiprtc": describe_hiprtc(),
        "hip runtime": find_runtime() or "not found",
    }
