"""The OPENCL example beyond the kit: its probe's diagnoses, GPU-style code on a real OpenCL device, bad input."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from tinycore_opencl import plugin
from tinycore_opencl.renderer import DeviceLimits, OpenCLRenderer

AVAILABLE = plugin.probe()
needs_device = pytest.mark.skipif(
    not AVAILABLE.ok, reason=f"no OpenCL device (PoCL or a GPU driver): {AVAILABLE.reason}"
)


def _fake_pyopencl(monkeypatch: pytest.MonkeyPatch, platforms=None, error: str | None = None) -> None:
    """Stand-in for pyopencl whose get_platforms returns `platforms` or raises `error`."""
    fake = types.ModuleType("pyopencl")

    class Error(Exception):
        pass

    def get_platforms():
        if error is not None:
            raise Error(error)
        return platforms

    fake.Error, fake.get_platforms = Error, get_platforms
    monkeypatch.setitem(sys.modules, "pyopencl", fake)


def test_probe_tells_a_missing_pyopencl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyopencl", None)  # import raises ImportError
    result = plugin.probe()
    assert not result.ok and "pyopencl is not installed" in result.reason and result.hint == plugin.INSTALL_PYOPENCL
    assert result.device_count == 0  # the kit's static tier: an unavailable device has no instances
    assert plugin.tinycore_report_info(name="OPENCL")["unavailable"] == result.reason  # reports, never raises


def test_probe_tells_a_missing_icd_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_loader(name, *args, **kwargs):
        if name == "pyopencl":
            raise ImportError("libOpenCL.so.1: cannot open shared object file")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "pyopencl", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_loader)
    result = plugin.probe()
    assert not result.ok and result.reason.startswith("no OpenCL ICD loader") and "ocl-icd" in result.hint


def test_probe_tells_no_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pyopencl(monkeypatch, error="clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")
    result = plugin.probe()
    assert not result.ok and result.reason.startswith("no OpenCL platform") and "pocl-opencl-icd" in result.hint
    _fake_pyopencl(monkeypatch, platforms=[])
    assert plugin.probe().reason == "no OpenCL platform"


def test_probe_tells_no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    empty = types.SimpleNamespace(name="Empty Platform", get_devices=lambda: [])
    _fake_pyopencl(monkeypatch, platforms=[empty])
    result = plugin.probe()
    assert not result.ok and result.reason == "no OpenCL device on the platforms Empty Platform"


def test_renderer_is_a_dialect_table_of_the_sdk_base() -> None:
    from tinycore.sdk import CStyleRenderer, dtypes

    renderer = OpenCLRenderer(DeviceLimits(name="test", local_mem=4096, fp16=False, fp64=True))
    assert isinstance(renderer, CStyleRenderer) and renderer.shared_max == 4096
    assert dtypes.float16 not in renderer.supported_dtypes and dtypes.float64 in renderer.supported_dtypes


def _program(tensor, renderer, opts=None):
    from tinycore.codegen import get_program

    (item,) = [i for i in tensor.schedule() if i.ast is not None]
    return get_program(item.ast, renderer, opts)


def test_grouped_reduce_renders_local_ids_shared_memory_and_barriers() -> None:
    from tinycore.codegen.kernel import Opt, OptOps
    from tinycore.tensor import Tensor

    renderer = OpenCLRenderer(DeviceLimits(name="test"))
    src = renderer.render(
        _program(Tensor.empty(64, 256, device="PYTHON").sum(1), renderer, [Opt(OptOps.GROUP, 0, 16)]).uops
    )
    for needle in ("get_local_id(0)", "get_group_id(0)", "__local float smem", "barrier(CLK_LOCAL_MEM_FENCE);"):
        assert needle in src, f"{needle!r} missing from\n{src}"


@needs_device
@pytest.mark.parametrize("group", [4, 16, 64])
def test_grouped_reduce_runs_with_real_work_groups(group: int) -> None:
    from tinycore.codegen.kernel import Opt, OptOps
    from tinycore.sdk import Buffer, Device, dtypes
    from tinycore.tensor import Tensor

    dev = Device["OPENCL"]
    data = np.random.default_rng(group).standard_normal((8, 512)).astype(np.float32)
    prog = _program(Tensor.empty(8, 512, device="PYTHON").sum(1), dev.renderer, [Opt(OptOps.GROUP, 0, group)])
    assert prog.local_size is not None and prog.local_size[0] == group
    lib = dev.compiler.compile_cached(dev.renderer.render(prog.uops, prog.function_name))
    runner = dev.runtime(prog.function_name, lib)
    out, inp = Buffer("OPENCL", 8, dtypes.float32).allocate(), Buffer("OPENCL", data.size, dtypes.float32).allocate()
    inp.copyin(memoryview(data.tobytes()))
    seconds = runner(out.opaque, inp.opaque, global_size=prog.global_size, local_size=prog.local_size, wait=True)
    assert seconds is not None and seconds >= 0
    np.testing.assert_allclose(out.numpy(), data.sum(1), rtol=1e-4, atol=1e-4)


@needs_device
def test_a_kernel_that_fails_to_build_shows_the_build_log_and_its_name() -> None:
    from tinycore.sdk import CompileError, Device

    src = "__kernel void broken_kernel(__global float* data0) { data0[0] = undefined_name; }"
    with pytest.raises(CompileError, match=r"(?s)OPENCL.*kernel broken_kernel failed to build.*undefined_name"):
        Device["OPENCL"].compiler.compile(src)


@needs_device
def test_more_local_memory_than_the_device_has_is_a_clear_error() -> None:
    from tinycore.sdk import Device, DeviceError

    dev = Device["OPENCL"]
    floats = dev.limits.local_mem // 4 + 1024
    src = (
        f"__kernel void too_big(__global float* data0) {{ __local float smem0[{floats}]; "
        f"smem0[get_local_id(0)] = 1.0f; barrier(CLK_LOCAL_MEM_FENCE); data0[0] = smem0[{floats - 1}]; }}"
    )
    try:
        lib = dev.compiler.compile(src)
    except Exception as error:  # some drivers reject it at build time: the error must still name the device
        assert "OPENCL" in str(error) and "too_big" in str(error)
        return
    with pytest.raises(DeviceError, match=r"(?s)too_big needs \d+ bytes of local memory.*tinycore-opencl"):
        dev.runtime("too_big", lib)


def test_stored_binaries_carry_their_argument_kinds() -> None:
    from tinycore_opencl.renderer import OPENCL_C

    from tinycore.sdk import KernelImage

    name, kinds = OPENCL_C.signature_of("__kernel void k(__global float* restrict data0, const int n, const long m) {}")
    assert (name, kinds) == ("k", ["buffer", "int", "long"])
    assert KernelImage.unpack(KernelImage.pack(kinds, b"\x00bin")) == (kinds, b"\x00bin")
    with pytest.raises(ValueError, match="clear the kernel cache"):
        KernelImage.unpack(b"ELF...")


@needs_device
def test_a_dtype_the_device_lacks_is_refused_with_the_fix() -> None:
    from tinycore.sdk import Device, dtypes
    from tinycore.tensor import Tensor

    if dtypes.float16 in Device["OPENCL"].renderer.supported_dtypes:
        pytest.skip("this OpenCL device has cl_khr_fp16")
    from tinycore.errors import UnsupportedDTypeError

    with pytest.raises(UnsupportedDTypeError, match=r"device OPENCL does not support dtypes.half"):
        (Tensor(np.ones(4, np.float16), device="OPENCL") * 2).numpy()
