"""Entry module of the ``CUDA`` device (entry point ``CUDA = "tinycore_cuda.plugin"``, group ``tinycore.devices``).

Light by contract: importing it imports only `tinycore.sdk`; the driver bindings are imported by the probe, NVRTC by
the first compile. ``tinycore_compile_target`` needs no GPU: ``arch=None`` is `DEFAULT_ARCH`.
"""

from __future__ import annotations

import glob
import os
from typing import TYPE_CHECKING, Any

from tinycore.sdk import ALL_SCALARS, DeviceCapabilities, ProbeResult, hookimpl
from tinycore_cuda import __version__

if TYPE_CHECKING:
    from tinycore.sdk import Compiled, Compiler, Renderer

TINYCORE_PLUGIN_API = (1, 0)
DEVICE = "CUDA"
PRIORITY = 35
DISTRIBUTION = "tinycore-cuda"
DEFAULT_ARCH = "sm_90"  # the compile target without a GPU to ask
NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE

INSTALL = "pip install 'tinycore[cuda]'"
DRIVER_HINT = "install the NVIDIA driver (https://www.nvidia.com/drivers), or use another device (DEV=CLANG)"


def _is_cuda(name: str) -> bool:
    return name.upper().partition(":")[0] == DEVICE


def nvrtc_major() -> int | None:
    """NVRTC's major version, None when NVRTC is not installed (the probe then leaves the check to the compiler)."""
    try:
        from tinycore_cuda.compiler import nvrtc_version

        return nvrtc_version()[0]
    except Exception:  # not installed, or not loadable: the first compile says so with its fix
        return None


def nvidia_gpu_nodes() -> bool:
    """True when the kernel driver shows an NVIDIA GPU (``/dev/nvidia0`` or ``/proc/driver/nvidia/gpus/*``): the
    hardware is here even when the user-space driver or the bindings are missing. Files only."""
    return os.path.exists("/dev/nvidia0") or bool(glob.glob("/proc/driver/nvidia/gpus/*"))


def probe() -> ProbeResult:
    """Tell apart: cuda-bindings missing, no NVIDIA driver (no libcuda), no GPU, a driver older than NVRTC. A failure
    with a GPU in the machine is marked `ProbeResult.hardware_present` (core then says why CUDA was passed over)."""
    try:
        from cuda.bindings import driver
    except ImportError as error:
        return ProbeResult(
            ok=False, device_count=0, reason=f"cuda-bindings is not installed ({error})", hint=INSTALL,
            hardware_present=nvidia_gpu_nodes(),
        )  # fmt: skip
    try:
        (err,) = driver.cuInit(0)
    except RuntimeError as error:  # cuda.pathfinder's DynamicLibNotFoundError: there is no libcuda
        return ProbeResult(
            ok=False, device_count=0, reason=f"no NVIDIA driver: {error}", hint=DRIVER_HINT,
            hardware_present=nvidia_gpu_nodes(),
        )  # fmt: skip
    if err == NO_DEVICE:
        return ProbeResult(ok=False, device_count=0, reason="no GPU: the NVIDIA driver sees none", hint=DRIVER_HINT)
    if err != 0:
        return ProbeResult(
            ok=False, device_count=0, reason=f"cuInit failed with CUresult {int(err)}", hint=DRIVER_HINT,
            hardware_present=True,
        )  # fmt: skip
    _, version = driver.cuDriverGetVersion()
    major = nvrtc_major()
    if major is not None and version // 1000 < major:
        return ProbeResult(
            ok=False,
            device_count=0,
            reason=f"driver too old for this NVRTC: the driver supports CUDA {version // 1000}.{version % 1000 // 10}, "
            f"NVRTC is CUDA {major}",
            hint=f"update the NVIDIA driver to one for CUDA {major} or newer (https://www.nvidia.com/drivers); "
            f"tinycore-cuda builds with NVRTC {major}",
            hardware_present=True,
        )
    _, count = driver.cuDeviceGetCount()
    if count == 0:
        return ProbeResult(ok=False, device_count=0, reason="no GPU: the NVIDIA driver sees none", hint=DRIVER_HINT)
    return ProbeResult(ok=True, device_count=int(count))


@hookimpl
def tinycore_register_devices(registry: Any) -> None:
    """Register ``CUDA`` with its lazy factory."""
    registry.register(
        DEVICE, priority=PRIORITY, api_version=TINYCORE_PLUGIN_API, factory="tinycore_cuda.device:CUDADevice"
    )


@hookimpl
def tinycore_probe_device(name: str) -> ProbeResult | None:
    """See `probe`."""
    return probe() if _is_cuda(name) else None


@hookimpl
def tinycore_open_device(name: str, ordinal: int) -> Compiled | None:
    """Open ``CUDA:ordinal`` (its primary context)."""
    if not _is_cuda(name):
        return None
    from tinycore_cuda.device import CUDADevice

    return CUDADevice(DEVICE if ordinal == 0 else f"{DEVICE}:{ordinal}")


@hookimpl
def tinycore_compile_target(name: str, arch: str | None) -> tuple[Renderer, Compiler] | None:
    """Renderer and NVRTC compiler for `arch` (``sm_NN``: CUBIN, ``compute_NN``: PTX; None: `DEFAULT_ARCH`). No GPU
    needed."""
    if not _is_cuda(name):
        return None
    from tinycore_cuda.compiler import NVRTCCompiler, check_arch
    from tinycore_cuda.renderer import CUDARenderer

    arch = check_arch(arch or DEFAULT_ARCH)
    return CUDARenderer(arch), NVRTCCompiler(arch)


@hookimpl
def tinycore_device_capabilities(name: str) -> DeviceCapabilities | None:
    """Every scalar dtype, blocks with shared memory, CUDA graphs, several GPUs with peer copies and views."""
    if not _is_cuda(name):
        return None
    return DeviceCapabilities(
        dtypes=frozenset(ALL_SCALARS),
        features=frozenset({"local", "shared", "float4", "graph", "multi_device", "transfer", "views"}),
        limits={"shared_max": 49152, "local_max0": 1024, "local_max1": 1024, "local_max2": 64},
    )


@hookimpl
def tinycore_collective_backend(device: str, group: Any) -> Any | None:
    """NCCL for CUDA tensors (`tinycore_cuda.nccl.NCCLBackend`; its wheel: ``pip install 'tinycore-cuda[nccl]'``)."""
    if not _is_cuda(device):
        return None
    from tinycore.sdk import Device
    from tinycore_cuda.nccl import NCCLBackend

    return NCCLBackend(Device[device], group)


@hookimpl
def tinycore_report_info(name: str) -> dict[str, str] | None:
    """This plugin's version, NVRTC's, and the driver's when there is one."""
    if not _is_cuda(name):
        return None
    major = nvrtc_major()
    info = {DISTRIBUTION: __version__, "nvrtc": "not installed" if major is None else f"CUDA {major}"}
    result = probe()
    info["driver"] = "ok" if result.ok else result.reason
    return info


def smoke_test(ctx: Any) -> str:
    """``tinycore doctor``'s CUDA step: compile ``data0[i] = data1[i] * 2 + 1`` with NVRTC, run it on the GPU over
    4 blocks of 32 threads, compare."""
    from tinycore.sdk import Buffer, CheckFailed, CheckSkipped, Ops, UOp, dtypes

    if ctx.device is None or ctx.device.family != DEVICE:
        raise CheckSkipped("not a CUDA device")
    import struct

    blocks, threads = 4, 32
    n = blocks * threads
    out, inp = (UOp.define_global(k, dtypes.float32, n) for k in range(2))
    gid = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, blocks),), "gidx0")
    lid = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, threads),), "lidx0")
    i = gid * UOp.const(dtypes.int32, threads) + lid
    store = out.index(i).store(inp.index(i).load() * UOp.const(dtypes.float32, 2.0) + UOp.const(dtypes.float32, 1.0))
    device = ctx.device
    lib = device.compiler.compile(
        device.renderer.render(list(UOp(Ops.SINK, dtypes.void, (store,)).toposort()), "tc_doctor")
    )
    a, b = (Buffer(device.device, n, dtypes.float32).allocate() for _ in range(2))
    values = [float(k) for k in range(n)]
    b.copyin(struct.pack(f"{n}f", *values))
    seconds = device.runtime("tc_doctor", lib)(
        a.opaque, b.opaque, global_size=(blocks, 1, 1), local_size=(threads, 1, 1), wait=True
    )
    got = list(struct.unpack(f"{n}f", a.copyout(memoryview(bytearray(4 * n)))))
    if got != [v * 2 + 1 for v in values]:
        raise CheckFailed(
            f"wrong results from a 4x32 kernel: {got[:8]}...", "report it with `tinycore doctor CUDA --json`"
        )
    return f"{device.name} ({device.arch}): 4x32 threads in {seconds * 1e6:.0f} us"


@hookimpl
def tinycore_doctor_checks() -> list[Any]:
    """`smoke_test`, run by ``tinycore doctor`` after core's checks (other devices skip it)."""
    from tinycore.sdk import DoctorCheck

    return [DoctorCheck("cuda kernel", smoke_test)]
