"""CUDA's tensor cores (``mma.sync`` m16n8k16, fp16/bf16 in, fp32 accumulate): declared to core's optimizer with
PTX's lane layouts, so the same tensor-core kernel the CUDA renderer writes runs on the PYTHON reference
interpreter with those layouts (and matches numpy), and NVRTC turns it into ``mma.sync`` PTX. No GPU needed."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tinycore_cuda", reason="tinycore-cuda is not installed (pip install -e plugins/tinycore_cuda)")
from tinycore_cuda.renderer import CUDA_TENSOR_CORES, CUDARenderer  # noqa: E402

from tinycore.codegen import get_program  # noqa: E402
from tinycore.codegen.kernel import Opt, OptOps  # noqa: E402
from tinycore.dtype import dtypes  # noqa: E402
from tinycore.runtime.python_device import PythonRenderer  # noqa: E402
from tinycore.testkit.kernels import matmul_case, run_on_interpreter  # noqa: E402

SHAPES = [(16, 16, 8), (32, 48, 16), (48, 32, 24)]  # (M, K, N): multiples of the 16 x 16 x 8 instruction


class PythonWithCUDATensorCores(PythonRenderer):
    """The PYTHON renderer declaring CUDA's tensor cores: core builds the kernel exactly as for CUDA."""

    tensor_cores = CUDA_TENSOR_CORES


def test_the_layouts_cover_each_operand_once_per_element() -> None:
    fp16, bf16 = CUDA_TENSOR_CORES
    assert fp16.dims == (8, 16, 16) and fp16.threads == 32 and fp16.elements_per_thread == (8, 4, 4)
    assert (fp16.dtype_in, bf16.dtype_in, fp16.dtype_out) == (dtypes.float16, dtypes.bfloat16, dtypes.float32)
    # lane 5 = group 1, thread 1 (PTX ISA's figures): a0 at (1, 2), a7 at (9, 11); b3 at (11, 1); c2 at (9, 2)
    layout_a, layout_b, layout_c = fp16.swizzle
    assert layout_a[5][0] == (1, 2) and layout_a[5][7] == (9, 11) and layout_b[5][3] == (11, 1)
    assert layout_c[5][2] == (9, 2)


@pytest.mark.parametrize("din", [dtypes.float16, dtypes.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_tensor_core_kernel_runs_right_on_the_reference_interpreter(shape, din) -> None:
    item, want = matmul_case(*shape, din)
    program = get_program(item.ast, PythonWithCUDATensorCores(), [Opt(OptOps.TC, 0, 0 if din == dtypes.float16 else 1)])
    assert any(u.op.name == "WMMA" for u in program.uops) and program.local_size[0] == 32
    out = run_on_interpreter(program, item, CUDA_TENSOR_CORES)
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("din", [dtypes.float16, dtypes.bfloat16], ids=["fp16", "bf16"])
def test_the_heuristics_block_tensor_core_tiles_per_warp_and_warps_per_group(din) -> None:
    # M = 256, N = 64: each warp takes 8 x 4 instruction tiles (M x N), 2 x 2 warps a work-group (heuristic.TC_BLOCK)
    item, want = matmul_case(256, 16, 64, din)
    program = get_program(item.ast, PythonWithCUDATensorCores())
    assert sum(u.op.name == "WMMA" for u in program.uops) == 32 and program.local_size == (32, 2, 2)
    out = run_on_interpreter(program, item, CUDA_TENSOR_CORES)
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def test_cuda_renders_mma_sync_and_nvrtc_builds_it() -> None:
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC is not installed (pip install 'tinycore[cuda]')")
    from tinycore_cuda.compiler import NVRTCCompiler

    from tinycore.sdk import KernelImage

    renderer = CUDARenderer("sm_90")
    for din, kind, tc_index in ((dtypes.float16, b"f16", 0), (dtypes.bfloat16, b"bf16", 1)):
        item, _ = matmul_case(32, 48, 16, din)
        program = get_program(item.ast, renderer, [Opt(OptOps.TC, 0, tc_index)])
        src = renderer.render(program.uops, "k_mma")
        assert "mma.sync.aligned.m16n8k16.row.col.f32" in src
        _, ptx = KernelImage.unpack(NVRTCCompiler("compute_90").compile(src))
        assert b"mma.sync.aligned.m16n8k16.row.col.f32." + kind + b"." + kind + b".f32" in ptx
        _, cubin = KernelImage.unpack(NVRTCCompiler("sm_80").compile(src))
        assert cubin[:4] == b"\x7fELF"


def test_gpus_before_sm_80_declare_no_tensor_cores() -> None:
    assert CUDARenderer("sm_75").tensor_cores == [] and CUDARenderer("sm_80").tensor_cores == CUDA_TENSOR_CORES
    assert CUDARenderer(None).tensor_cores == CUDA_TENSOR_CORES


# ----- on a GPU (bench/device_check.sh): skipped without one


@pytest.mark.parametrize("din", [dtypes.float16, dtypes.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("blocked", [False, True, "heuristic"], ids=["one_tile", "two_tiles", "heuristic"])
def test_the_tensor_core_kernel_runs_right_on_the_gpu(din, blocked, gpu, launch) -> None:
    item, want = matmul_case(64, 64, 32, din)
    opts = [Opt(OptOps.TC, 0, 0 if din == dtypes.float16 else 1)] + ([Opt(OptOps.UPCAST, 0, 2)] if blocked else [])
    program = get_program(item.ast, gpu.renderer, opts if blocked != "heuristic" else None)
    src = gpu.renderer.render(program.uops, "k_mma")
    tiles = sum(u.op.name == "WMMA" for u in program.uops)  # the heuristics: 2 x 4 tiles per warp at M = 64
    assert src.count("mma.sync.aligned.m16n8k16") == {False: 1, True: 2, "heuristic": tiles}[blocked]
    assert blocked != "heuristic" or tiles > 2
    inputs = [np.frombuffer(bytearray(b.as_buffer()), np.uint8) for b in item.bufs[1:]]
    out = launch(src, "k_mma", np.zeros(want.size, np.float32), inputs, program.global_size, program.local_size)
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-5, atol=1e-4)
