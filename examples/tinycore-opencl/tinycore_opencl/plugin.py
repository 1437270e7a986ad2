"""Entry module of the ``OPENCL`` device (entry point ``OPENCL = "tinycore_opencl.plugin"``, group
``tinycore.devices``): registers the device, probes for it, opens it and hands out its compile target.

Light by contract: importing it imports only `tinycore.sdk`; pyopencl is imported by the probe.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from tinycore.sdk import DeviceCapabilities, ProbeResult, dtypes, hookimpl
from tinycore_opencl import __version__

if TYPE_CHECKING:
    from tinycore.sdk import Compiled, Compiler, Renderer

TINYCORE_PLUGIN_API = (1, 0)
FAMILY = "OPENCL"
PRIORITY = 5  # an example: below CLANG (10), so installing it never changes the default device (DEV=OPENCL picks it)

INSTALL_PYOPENCL = "pip install pyopencl"
INSTALL_LOADER = "install an OpenCL ICD loader: apt-get install ocl-icd-libopencl1"
INSTALL_PLATFORM = (
    "install an OpenCL driver (an ICD): your GPU vendor's, or PoCL for the CPU: apt-get install pocl-opencl-icd"
)


def _is_opencl(name: str) -> bool:
    return name.upper().partition(":")[0] == FAMILY


def probe() -> ProbeResult:
    """Tell apart: pyopencl missing, no ICD loader, no platform (no driver), no device; else the device count."""
    try:
        import pyopencl as cl
    except ImportError as error:
        if "libOpenCL" in str(error):
            return ProbeResult(ok=False, device_count=0, reason=f"no OpenCL ICD loader: {error}", hint=INSTALL_LOADER)
        return ProbeResult(
            ok=False, device_count=0, reason=f"pyopencl is not installed ({error})", hint=INSTALL_PYOPENCL
        )
    except OSError as error:  # a loader that is present but can't be loaded
        return ProbeResult(
            ok=False, device_count=0, reason=f"no usable OpenCL ICD loader: {error}", hint=INSTALL_LOADER
        )
    try:
        platforms = cl.get_platforms()
    except cl.Error as error:  # PLATFORM_NOT_FOUND_KHR: the loader found no driver
        return ProbeResult(ok=False, device_count=0, reason=f"no OpenCL platform: {error}", hint=INSTALL_PLATFORM)
    if not platforms:
        return ProbeResult(ok=False, device_count=0, reason="no OpenCL platform", hint=INSTALL_PLATFORM)
    count = 0
    for platform in platforms:
        try:
            count += len(platform.get_devices())
        except cl.Error:  # DEVICE_NOT_FOUND on a platform with no devices
            continue
    if count == 0:
        names = ", ".join(p.name for p in platforms)
        return ProbeResult(
            ok=False, device_count=0, reason=f"no OpenCL device on the platforms {names}", hint=INSTALL_PLATFORM
        )
    return ProbeResult(ok=True, device_count=count)


@hookimpl
def tinycore_register_devices(registry: Any) -> None:
    """Register ``OPENCL`` with its lazy factory."""
    registry.register(
        FAMILY, priority=PRIORITY, api_version=TINYCORE_PLUGIN_API, factory="tinycore_opencl.device:OpenCLDevice"
    )


@hookimpl
def tinycore_probe_device(name: str) -> ProbeResult | None:
    """See `probe`."""
    return probe() if _is_opencl(name) else None


@hookimpl
def tinycore_open_device(name: str, ordinal: int) -> Compiled | None:
    """Open ``OPENCL:ordinal``."""
    if not _is_opencl(name):
        return None
    from tinycore_opencl.device import OpenCLDevice

    return OpenCLDevice(FAMILY if ordinal == 0 else f"{FAMILY}:{ordinal}")


@hookimpl
def tinycore_compile_target(name: str, arch: str | None) -> tuple[Renderer, Compiler] | None:
    """The renderer and compiler of the device named `arch` (None: the first device). OpenCL builds need the
    device, so this opens it."""
    if not _is_opencl(name):
        return None
    from tinycore_opencl.device import OpenCLDevice, opencl_devices

    names = [d.name for d in opencl_devices()]
    if arch is not None and arch not in names:
        raise ValueError(f"{FAMILY}: no OpenCL device named {arch!r} here (there are {names})")
    device = OpenCLDevice(FAMILY if arch is None else f"{FAMILY}:{names.index(arch)}")
    assert device.renderer is not None and device.compiler is not None
    return device.renderer, device.compiler


@hookimpl
def tinycore_device_capabilities(name: str) -> DeviceCapabilities | None:
    """Dtypes of the first device (fp16 and fp64 when it has the extensions), work-groups with local memory."""
    if not _is_opencl(name):
        return None
    from tinycore_opencl.device import limits_of, opencl_devices
    from tinycore_opencl.renderer import OpenCLRenderer

    found = opencl_devices()
    limits = limits_of(found[0]) if found else None
    return DeviceCapabilities(
        dtypes=OpenCLRenderer(limits).supported_dtypes if limits else frozenset(),
        features=frozenset({"local", "shared", "float4"}),
        limits={"shared_max": limits.local_mem} if limits else {},
    )


@hookimpl
def tinycore_report_info(name: str) -> dict[str, str] | None:
    """Versions of this plugin, pyopencl and the first device's platform and driver."""
    if not _is_opencl(name):
        return None
    if not probe().ok:
        return {"tinycore-opencl": __version__, "unavailable": probe().reason}
    import pyopencl as cl

    from tinycore_opencl.device import opencl_devices

    info = {"tinycore-opencl": __version__, "pyopencl": cl.VERSION_TEXT}
    found = opencl_devices()
    if found:
        info.update(platform=found[0].platform.version, device=found[0].name, driver=found[0].driver_version)
    return info


def kernel_check(ctx: Any) -> str:
    """``tinycore doctor``'s OpenCL step: render, build and run ``data0[i] = data1[i] * 2 + 1`` over 4 work-groups
    of 8 work-items (group and local ids both used), and compare the result."""
    from tinycore.sdk import Buffer, CheckFailed, CheckSkipped, Ops, UOp

    if ctx.device is None or ctx.device.family != FAMILY:
        raise CheckSkipped("not an OPENCL device")
    groups, local = 4, 8
    out, inp = (
        UOp.define_global(0, dtypes.float32, groups * local),
        UOp.define_global(1, dtypes.float32, groups * local),
    )
    gid = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, groups),), "gidx0")
    lid = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, local),), "lidx0")
    i = gid * UOp.const(dtypes.int32, local) + lid
    store = out.index(i).store(inp.index(i).load() * UOp.const(dtypes.float32, 2.0) + UOp.const(dtypes.float32, 1.0))
    uops = list(UOp(Ops.SINK, dtypes.void, (store,)).toposort())
    device = ctx.device
    lib = device.compiler.compile(device.renderer.render(uops, "tc_doctor_axpy"))
    a, b = (Buffer(FAMILY, groups * local, dtypes.float32).allocate() for _ in range(2))
    values = [float(k) for k in range(groups * local)]
    b.copyin(struct.pack(f"{len(values)}f", *values))
    seconds = device.runtime("tc_doctor_axpy", lib)(
        a.opaque, b.opaque, global_size=(groups, 1, 1), local_size=(local, 1, 1), wait=True
    )
    got = list(struct.unpack(f"{len(values)}f", a.copyout(memoryview(bytearray(4 * len(values))))))
    if got != [v * 2 + 1 for v in values]:
        raise CheckFailed(
            f"wrong results from a 4x8 work-group kernel: {got[:8]}...", "report this with the driver name"
        )
    return f"4x8 work-items in {seconds * 1e6:.0f} us"


@hookimpl
def tinycore_doctor_checks() -> list[Any]:
    """`kernel_check`, run by ``tinycore doctor`` after core's checks (other devices skip it)."""
    from tinycore.sdk import DoctorCheck

    return [DoctorCheck("opencl kernel", kernel_check)]
