"""Code quality of the CUBIN NVRTC builds, read without a GPU: ``ptxas -v`` (NVRTC's own ptxas, through
``--ptxas-options=-v``) reports no register spills for any kernel of `tinycore.testkit.kernels` nor for a
register-blocked tensor-core matmul or a softmax row kernel, on sm_80 and sm_90; the SASS (``cuobjdump -sass``,
or ``nvdisasm``) shows ``HMMA`` in the tensor-core kernel, 128-bit global loads (``LDG.E.128``) in the float4
kernels, butterfly warp shuffles (``SHFL.BFLY``) in a warp-reduced sum, and the softmax row read once by 128-bit
loads. The SASS checks skip, naming the tool, where it is missing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tinycore_cuda", reason="tinycore-cuda is not installed (pip install -e plugins/tinycore_cuda)")
pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC (with its built-in ptxas) is not installed")
from tinycore_cuda.compiler import NVRTCCompiler, split_dynamic_shared  # noqa: E402
from tinycore_cuda.renderer import CUDARenderer  # noqa: E402

from tinycore.codegen import get_program  # noqa: E402
from tinycore.codegen.kernel import Opt, OptOps  # noqa: E402
from tinycore.dtype import dtypes  # noqa: E402
from tinycore.sdk import KernelImage  # noqa: E402
from tinycore.tensor import Tensor  # noqa: E402
from tinycore.testkit.kernels import render_cases  # noqa: E402

ARCHS = ["sm_80", "sm_90"]


def tensor_core_matmul(arch: str) -> str:
    """A 128x128x128 fp16 matmul (fp32 accumulate) on tensor cores, register-blocked: each warp computes two
    m16n8k16 tiles per k step (the TC opt, then an UPCAST of the output rows)."""
    a, b = (Tensor(np.ones((128, 128), np.float32), device="PYTHON").cast(dtypes.float16).realize() for _ in "ab")
    (item,) = [i for i in (a.cast(dtypes.float32) @ b.cast(dtypes.float32)).schedule() if i.ast is not None]
    renderer = CUDARenderer(arch)
    program = get_program(item.ast, renderer, [Opt(OptOps.TC, 0, 0), Opt(OptOps.UPCAST, 0, 2)])
    src = renderer.render(program.uops, "k_tc_matmul")
    assert src.count("mma.sync.aligned.m16n8k16") == 2, "expected two mma per k step (register blocking)"
    return src


def warp_sum(arch: str) -> str:
    """A row sum whose 256-lane groups reduce within each warp by shuffles first."""
    x = Tensor(np.ones((16, 1024), np.float32), device="PYTHON")
    (item,) = [i for i in x.sum(axis=1).schedule() if i.ast is not None]
    renderer = CUDARenderer(arch)
    return renderer.render(get_program(item.ast, renderer, [Opt(OptOps.GROUPTOP, 0, 256)]).uops, "k_warp_sum")


def softmax_rows(arch: str) -> str:
    """A softmax over rows of 4096 floats as one row kernel (``row_reduce_bytes``: a work-group per row, the row in
    registers, shuffles for both reduces), optimized by the heuristic as on a GPU."""
    from tinycore.engine.schedule_cache import clear_schedule_cache
    from tinycore.runtime.python_device import PythonRenderer

    saved = PythonRenderer.row_reduce_bytes, PythonRenderer.warp_size
    PythonRenderer.row_reduce_bytes, PythonRenderer.warp_size = CUDARenderer.row_reduce_bytes, CUDARenderer.warp_size
    clear_schedule_cache()
    try:
        x = Tensor(np.ones((64, 4096), np.float32), device="PYTHON")
        (item,) = [i for i in x.softmax(-1).schedule() if i.ast is not None]
    finally:
        PythonRenderer.row_reduce_bytes, PythonRenderer.warp_size = saved
        clear_schedule_cache()
    renderer = CUDARenderer(arch)
    src = renderer.render(get_program(item.ast, renderer).uops, "k_softmax_rows")
    assert src.count("*((const float4*)((data1") == 4, "each work-item reads its share of the row once"
    assert src.count("__syncthreads()") == 2, "two reduces, each meeting in shared memory once"
    return src


@pytest.fixture(scope="module", params=ARCHS)
def built(request) -> tuple[str, dict[str, str], dict[str, bytes], NVRTCCompiler]:
    """(arch, {kernel: source}, {kernel: CUBIN}, compiler): every testkit kernel plus the tensor-core and
    warp-shuffle kernels."""
    arch = request.param
    compiler = NVRTCCompiler(arch)
    sources = render_cases(CUDARenderer(arch))
    sources["tc_matmul"], sources["warp_sum"] = tensor_core_matmul(arch), warp_sum(arch)
    sources["softmax_rows"] = softmax_rows(arch)
    cubins = {name: split_dynamic_shared(KernelImage.unpack(compiler.compile(s))[1])[1] for name, s in sources.items()}
    return arch, sources, cubins, compiler


def test_no_kernel_spills_registers(built) -> None:
    arch, sources, _, compiler = built
    assert len(sources) >= 22
    for name, src in sources.items():
        report = compiler.resource_usage(src)
        spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report)]
        assert spills and not any(spills), f"{name} on {arch} spills registers:\n{report}"
        used = re.search(r"Used (\d+) registers", report)
        assert used and int(used.group(1)) <= 255, f"{name}: {report}"


def find_tool(tool: str) -> str | None:
    """`tool` on PATH, in the CUDA toolkit (``$CUDA_HOME/bin``, ``/usr/local/cuda/bin``) or NVIDIA's wheels
    (``nvidia/cu13/bin``: ``nvidia-cuda-cuobjdump``, ``nvidia-cuda-nvdisasm``)."""
    folders = [os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/bin", "/usr/local/cuda/bin"]
    try:
        import nvidia

        folders += [str(Path(p) / "cu13" / "bin") for p in nvidia.__path__]
    except ImportError:
        pass
    return shutil.which(tool) or next((f"{d}/{tool}" for d in folders if os.access(f"{d}/{tool}", os.X_OK)), None)


def sass(cubin: bytes, tmp_path: Path) -> str:
    """The SASS of one CUBIN: ``cuobjdump -sass`` (which runs nvdisasm), else ``nvdisasm``; the test is skipped,
    naming the tool, where nvdisasm is missing."""
    nvdisasm, cuobjdump = find_tool("nvdisasm"), find_tool("cuobjdump")
    if nvdisasm is None:
        pytest.skip(
            "nvdisasm is not installed (cuobjdump -sass needs it too): pip install nvidia-cuda-nvdisasm "
            "nvidia-cuda-cuobjdump, or install the CUDA toolkit"
        )
    path = tmp_path / "kernel.cubin"
    path.write_bytes(cubin)
    env = {**os.environ, "PATH": f"{Path(nvdisasm).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [cuobjdump, "-sass", str(path)] if cuobjdump else [nvdisasm, str(path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, f"{' '.join(command)}: {done.stderr}"
    return done.stdout


def test_the_tensor_core_kernel_runs_hmma(built, tmp_path) -> None:
    arch, _, cubins, _ = built
    code = sass(cubins["tc_matmul"], tmp_path)
    assert len(re.findall(r"\bHMMA\.16816\.F32\b", code)) >= 2, f"no m16n8k16 HMMA on {arch}"


def test_float4_kernels_use_128_bit_loads(built, tmp_path) -> None:
    arch, _, cubins, _ = built
    wide = re.compile(r"\bLDG\.E(?:\.[A-Z0-9_]+)*\.128\b")
    for name in ("broadcast", "matmul"):
        assert wide.search(sass(cubins[name], tmp_path)), f"{name} on {arch}: no 128-bit global load"
    assert not wide.search(sass(cubins["add_int8"], tmp_path))  # 4 x int8 is a 32-bit load


def test_the_warp_reduce_uses_butterfly_shuffles(built, tmp_path) -> None:
    code = sass(built[2]["warp_sum"], tmp_path)
    assert len(re.findall(r"\bSHFL\.BFLY\b", code)) >= 5 and re.search(r"\bBAR\.SYNC\b", code)


def test_the_softmax_row_kernel_reads_its_row_once_with_wide_loads_and_shuffles(built, tmp_path) -> None:
    code = sass(built[2]["softmax_rows"], tmp_path)
    assert len(re.findall(r"\bLDG\.E(?:\.[A-Z0-9_]+)*\.128\b", code)) == 4  # 16 floats per work-item, read once
    assert len(re.findall(r"\bSHFL\.BFLY\b", code)) >= 2 * 5 and len(re.findall(r"\bBAR\.SYNC\b", code)) >= 2
