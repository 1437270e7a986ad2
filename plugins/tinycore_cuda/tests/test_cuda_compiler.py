"""NVRTC builds every kernel core renders for CUDA (the testkit's kernel cases) to CUBIN for sm_80 and sm_90, without
a GPU; compile errors carry the kernel's name and NVRTC's log; the compile target needs no GPU."""

from __future__ import annotations

import pytest

pytest.importorskip("tinycore_cuda", reason="tinycore-cuda is not installed (pip install -e plugins/tinycore_cuda)")
pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC is not installed (pip install 'tinycore[cuda]')")
from tinycore_cuda import plugin  # noqa: E402
from tinycore_cuda.compiler import NVRTCCompiler, check_arch, parameter_kinds  # noqa: E402
from tinycore_cuda.renderer import CUDARenderer  # noqa: E402

from tinycore.errors import CompileError, DevicePluginError  # noqa: E402
from tinycore.plugin.manager import get_manager  # noqa: E402
from tinycore.sdk import KernelImage  # noqa: E402
from tinycore.testkit.kernels import render_cases  # noqa: E402


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_kernel_case_builds_to_cubin(arch: str) -> None:
    compiler = NVRTCCompiler(arch)
    sources = render_cases(CUDARenderer(arch))
    assert len(sources) >= 20
    for name, src in sources.items():
        kinds, image = KernelImage.unpack(compiler.compile(src))
        assert image[:4] == b"\x7fELF", f"{name}: not a CUBIN"
        assert kinds == parameter_kinds(src)[1] and kinds[0] == "buffer"
    assert parameter_kinds(sources["variable"])[1][-1] == "int"  # the symbolic variable, after the buffers


def test_ptx_on_request() -> None:
    _, image = KernelImage.unpack(
        NVRTCCompiler("compute_90").compile(render_cases(CUDARenderer("sm_90"), ["broadcast"])["broadcast"])
    )
    assert b".target sm_90" in image and b".entry k_broadcast" in image


def test_a_build_error_names_the_kernel_and_shows_the_log() -> None:
    with pytest.raises(CompileError, match=r'(?s)kernel broken failed to compile for sm_90.*identifier "nope"'):
        NVRTCCompiler("sm_90").compile('extern "C" __global__ void broken(float* a) { a[0] = nope; }')


def test_the_cache_key_holds_nvrtc_version_options_and_arch() -> None:
    parts = NVRTCCompiler("sm_80").cache_key_parts()
    assert parts[0].startswith("nvrtc (") and "--gpu-architecture=sm_80" in parts and "--fmad=false" in parts
    assert NVRTCCompiler("sm_80").cache_key("x") != NVRTCCompiler("sm_90").cache_key("x")


def test_the_compile_target_needs_no_gpu_and_checks_the_arch() -> None:
    renderer, compiler = get_manager().compile_target("CUDA", None)
    assert (renderer.arch, compiler.arch) == (plugin.DEFAULT_ARCH, plugin.DEFAULT_ARCH)
    assert get_manager().compile_target("CUDA", "sm_80")[1].arch == "sm_80"
    with pytest.raises(DevicePluginError, match=r"'sm9' is not a GPU architecture: use sm_NN"):
        get_manager().compile_target("CUDA", "sm9")
    assert check_arch("sm_90a") == "sm_90a"
