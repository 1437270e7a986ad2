"""Entry module of the ``METAL`` device (entry point ``METAL = "tinycore_metal.plugin"``, group ``tinycore.devices``).

Light by contract: importing it imports only `tinycore.sdk` and the standard library; pyobjc's Metal is imported by
the probe on macOS only, and by the device when it opens. ``tinycore_compile_target`` needs no GPU and no Mac to
render (``arch=None`` is `DEFAULT_ARCH`); compiling needs macOS (`tinycore_metal.compiler`).
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tinycore.sdk import ALL_SCALARS, DeviceCapabilities, ProbeResult, dtypes, hookimpl
from tinycore_metal import __version__

if TYPE_CHECKING:
    from tinycore.sdk import Compiled, Compiler, Renderer

TINYCORE_PLUGIN_API = (1, 0)
DEVICE = "METAL"
PRIORITY = 40
DISTRIBUTION = "tinycore-metal"
DEFAULT_ARCH = "apple7"  # the compile target without a GPU to ask: M1 / A14, the first with simdgroup_matrix

INSTALL = "pip install 'tinycore[metal]' (it installs pyobjc-framework-Metal on macOS)"
NOT_MACOS_HINT = (
    "run on a Mac with an Apple GPU (Apple silicon) and pip install 'tinycore[metal]' there; "
    "here use another device (DEV=CLANG for the CPU)"
)
NO_DEVICE_HINT = (
    "run on a Mac with an Apple GPU (Apple silicon), not in a virtual machine or a session without GPU access; "
    "or use another device (DEV=CLANG)"
)


def _is_metal(name: str) -> bool:
    return name.upper().partition(":")[0] == DEVICE


def probe(system: str | None = None, load_api: Callable[[], Any] | None = None) -> ProbeResult:
    """Tell apart: not macOS, pyobjc-framework-Metal missing, no Metal device, no Apple GPU among the devices.

    `system` (default ``platform.system()``) and `load_api` (default: `tinycore_metal.api.PyObjCMetal.load`) are
    for tests."""
    system = system or platform.system()
    if system != "Darwin":
        return ProbeResult(
            ok=False, device_count=0, reason=f"Metal needs macOS with an Apple GPU; this is {system}",
            hint=NOT_MACOS_HINT,
        )  # fmt: skip
    if load_api is None:
        from tinycore_metal.api import PyObjCMetal

        load_api = PyObjCMetal.load
    try:
        api = load_api()
    except ImportError as error:
        return ProbeResult(
            ok=False, device_count=0, reason=f"pyobjc-framework-Metal is not installed ({error})", hint=INSTALL,
            hardware_present=platform.machine() == "arm64",  # Apple silicon always has its GPU: only pyobjc is missing
        )  # fmt: skip
    try:
        devices = api.devices()
        apple = [dev for dev in devices if api.apple_family(dev) > 0]
    except Exception as error:  # a framework that fails to answer: report it, never raise from a probe
        return ProbeResult(ok=False, device_count=0, reason=f"the Metal framework failed: {error}", hint=NO_DEVICE_HINT)
    if not devices:
        return ProbeResult(
            ok=False, device_count=0, reason="no Metal device: macOS reports no GPU", hint=NO_DEVICE_HINT
        )
    if not apple:
        names = ", ".join(api.device_name(dev) for dev in devices)
        return ProbeResult(
            ok=False, device_count=0, reason=f"no Apple GPU: the Metal devices here are {names}",
            hint="tinycore-metal targets Apple GPUs (Apple silicon Macs); use DEV=CLANG on this Mac",
        )  # fmt: skip
    return ProbeResult(ok=True, device_count=len(apple))


@hookimpl
def tinycore_register_devices(registry: Any) -> None:
    """Register ``METAL`` with its lazy factory."""
    registry.register(
        DEVICE, priority=PRIORITY, api_version=TINYCORE_PLUGIN_API, factory="tinycore_metal.device:MetalDevice"
    )


@hookimpl
def tinycore_probe_device(name: str) -> ProbeResult | None:
    """See `probe`."""
    return probe() if _is_metal(name) else None


@hookimpl
def tinycore_open_device(name: str, ordinal: int) -> Compiled | None:
    """Open ``METAL:ordinal`` (the ordinal-th Apple GPU); pyobjc's Metal is imported here."""
    if not _is_metal(name):
        return None
    from tinycore_metal.device import MetalDevice

    return MetalDevice(DEVICE if ordinal == 0 else f"{DEVICE}:{ordinal}")


@hookimpl
def tinycore_compile_target(name: str, arch: str | None) -> tuple[Renderer, Compiler] | None:
    """Renderer and Metal compiler for `arch` (``appleN``; None: `DEFAULT_ARCH`). Rendering needs no Mac; the
    compiler needs macOS (off macOS it raises a `CompileError` naming what is missing)."""
    if not _is_metal(name):
        return None
    from tinycore_metal.compiler import MetalCompiler
    from tinycore_metal.renderer import MetalRenderer, check_arch

    arch = check_arch(arch or DEFAULT_ARCH)
    return MetalRenderer(arch), MetalCompiler(arch)


@hookimpl
def tinycore_device_capabilities(name: str) -> DeviceCapabilities | None:
    """Every scalar dtype but float64, threadgroups with threadgroup memory, simdgroup tensor cores, ICB graphs,
    views and zero-copy shared memory."""
    if not _is_metal(name):
        return None
    return DeviceCapabilities(
        dtypes=frozenset(ALL_SCALARS) - {dtypes.float64},
        features=frozenset({"local", "shared", "float4", "tensor_cores", "graph", "views", "zero_copy"}),
        limits={"shared_max": 32768, "local_max0": 1024, "local_max1": 1024, "local_max2": 1024},
    )


@hookimpl
def tinycore_report_info(name: str) -> dict[str, str] | None:
    """This plugin's version, pyobjc-framework-Metal's, Xcode's Metal compiler, and the probe's answer."""
    if not _is_metal(name):
        return None
    from importlib.metadata import PackageNotFoundError, version

    info = {DISTRIBUTION: __version__}
    try:
        info["pyobjc-framework-Metal"] = version("pyobjc-framework-Metal")
    except PackageNotFoundError:
        info["pyobjc-framework-Metal"] = "not installed"
    if platform.system() == "Darwin":
        from tinycore_metal.compiler import xcrun_metal

        info["xcrun metal"] = xcrun_metal() or "not installed (the runtime compiler is used)"
    result = probe()
    info["metal"] = "ok" if result.ok else result.reason
    return info


def smoke_test(ctx: Any) -> str:
    """``tinycore doctor``'s Metal step: compile ``data0[i] = data1[i] * 2 + 1`` with the Metal compiler, run it on
    the GPU over 4 threadgroups of 32 threads, compare."""
    from tinycore.sdk import Buffer, CheckFailed, CheckSkipped, Ops, UOp

    if ctx.device is None or ctx.device.family != DEVICE:
        raise CheckSkipped("not a METAL device")
    import struct

    groups, threads = 4, 32
    n = groups * threads
    out, inp = (UOp.define_global(k, dtypes.float32, n) for k in range(2))
    gid = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, groups),), "gidx0")
    lid = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, threads),), "lidx0")
    i = gid * UOp.const(dtypes.int32, threads) + lid
    store = out.index(i).store(inp.index(i).load() * UOp.const(dtypes.float32, 2.0) + UOp.const(dtypes.float32, 1.0))
    device = ctx.device
    src = device.renderer.render(list(UOp(Ops.SINK, dtypes.void, (store,)).toposort()), "tc_doctor")
    lib = device.compiler.compile(src)
    a, b = (Buffer(device.device, n, dtypes.float32).allocate() for _ in range(2))
    values = [float(k) for k in range(n)]
    b.copyin(struct.pack(f"{n}f", *values))
    seconds = device.runtime("tc_doctor", lib)(
        a.opaque, b.opaque, global_size=(groups, 1, 1), local_size=(threads, 1, 1), wait=True
    )
    got = list(struct.unpack(f"{n}f", a.copyout(memoryview(bytearray(4 * n)))))
    if got != [v * 2 + 1 for v in values]:
        raise CheckFailed(
            f"wrong results from a 4x32 kernel: {got[:8]}...", "report it with `tinycore doctor METAL --json`"
        )
    return f"{device.name} ({device.arch}): 4x32 threads in {seconds * 1e6:.0f} us"


@hookimpl
def tinycore_doctor_checks() -> list[Any]:
    """`smoke_test`, run by ``tinycore doctor`` after core's checks (other devices skip it)."""
    from tinycore.sdk import DoctorCheck

    return [DoctorCheck("metal kernel", smoke_test)]
