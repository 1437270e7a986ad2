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
    # lane 5 = group 1, thread 1: PTX ISA's rows and n; k renumbered so the thread's k are 4..7 (see below)
    layout_a, layout_b, layout_c = fp16.swizzle
    assert layout_a[5][0] == (1, 4) and layout_a[5][7] == (9, 7) and layout_b[5][3] == (7, 1)
    assert layout_c[5][2] == (9, 2)


def test_the_k_renumbering_is_one_bijection_shared_by_a_and_b() -> None:
    """PTX pairs a's and b's registers by logical k (a: 2t + (p & 1) + 8 * (p >> 2) for register element p; b:
    2t + (q & 1) + 8 * (q >> 1)); the layouts may store any k there as long as A and B agree lane by lane, and
    each thread's four k in a row of A are neighbours in memory (one 8-byte load)."""
    from tinycore_cuda.renderer import _MMA_A_PAIRS

    layout_a, layout_b, _ = CUDA_TENSOR_CORES[0].swizzle
    for lane in range(32):
        t = lane & 3
        ptx_order = [e for pair in _MMA_A_PAIRS for e in pair]  # our element at each PTX register element
        physical: dict[int, int] = {}
        for p, element in enumerate(ptx_order):
            row, k = layout_a[lane][element]
            assert row == (lane >> 2) + 8 * ((p >> 1) & 1)  # a0a1 row g, a2a3 row g+8, a4a5 g, a6a7 g+8
            assert physical.setdefault(2 * t + (p & 1) + 8 * (p >> 2), k) == k
        for q in range(4):
            k, _ = layout_b[lane][q]
            assert physical[2 * t + (q & 1) + 8 * (q >> 1)] == k
        assert sorted(physical.values()) == [4 * t + i for i in range(4)]


@pytest.mark.parametrize("din", [dtypes.float16, dtypes.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_tensor_core_kernel_runs_right_on_the_reference_interpreter(shape, din) -> None:
    item, want = matmul_case(*shape, din)
    program = get_program(item.ast, PythonWithCUDATensorCores(), [Opt(OptOps.TC, 0, 0 if din == dtypes.float16 else 1)])
    assert any(u.op.name == "WMMA" for u in program.uops) and program.local_size[0] == 32
    out = run_on_interpreter(program, item, CUDA_TENSOR_CORES)
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("din", [dtypes.float16, dtypes.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("tiles", [2, 4])
def test_tiles_interleaved_along_n_run_right_and_load_b_as_vectors(tiles, din) -> None:
    # TC with (index, tiles): column c of tile u is n = c * tiles + u, so a lane's B values for one k are neighbours
    item, want = matmul_case(32, 32, 8 * tiles * 2, din)
    opts = [Opt(OptOps.TC, 0, (0 if din == dtypes.float16 else 1, tiles))]
    program = get_program(item.ast, PythonWithCUDATensorCores(), opts)
    assert sum(u.op.name == "WMMA" for u in program.uops) == tiles
    out = run_on_interpreter(program, item, CUDA_TENSOR_CORES)
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-5, atol=1e-5)
    renderer = CUDARenderer("sm_90")
    src = renderer.render(get_program(item.ast, renderer, opts).uops, "k_tiles")
    stem = {dtypes.float16: "half", dtypes.bfloat16: "tc_bf16_"}[din]
    assert src.count(f"(const {stem}{tiles}*)((data2") == 4  # B: one vector of all tiles per k row
    assert src.count(f"(const {stem}4*)((data1") == 2  # A: one 8-byte row piece per row (renumbered k)


@pytest.mark.parametrize("din", [dtypes.float16, dtypes.bfloat16], ids=["fp16", "bf16"])
def test_the_heuristics_block_tensor_core_tiles_per_warp_and_warps_per_group(din) -> None:
    # heuristic.TC_BLOCK: a block of instruction tiles per warp (M x N), a few warps per work-group; then TC_STAGE k
    # steps per shared-memory stage (K: two stages)
    from tinycore.codegen.heuristic import TC_BLOCK, TC_STAGE

    n_up, m_up, n_warps, m_warps = TC_BLOCK
    item, want = matmul_case(16 * m_up * m_warps, 32 * TC_STAGE, 8 * n_up * n_warps, din)
    program = get_program(item.ast, PythonWithCUDATensorCores())
    assert sum(u.op.name == "WMMA" for u in program.uops) == n_up * m_up
    assert program.local_size == (32, n_warps, m_warps)
    shared = [u for u in program.uops if u.op.name == "DEFINE_LOCAL"]
    assert len(shared) == 2 and sum(u.op.name == "BARRIER" for u in program.uops) == 2  # A and B, staged
    assert [r.src[0].arg for r in program.uops if r.op.name == "RANGE"] == [2, TC_STAGE]
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


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True), (True, True)])
def test_staged_tiles_of_transposed_operands_run_right_and_load_vectors(trans_a, trans_b) -> None:
    # the heuristics stage both operands through shared memory (STAGE); a transposed operand's tile is copied in
    # 4-element chunks down its columns (contiguous in memory), so every global load of the copy is a half4
    from tinycore.tensor import Tensor

    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((128, 128)).astype(np.float16) for _ in "ab")
    ta = Tensor(np.ascontiguousarray(a.T), device="PYTHON").T if trans_a else Tensor(a, device="PYTHON")
    tb = Tensor(np.ascontiguousarray(b.T), device="PYTHON").T if trans_b else Tensor(b, device="PYTHON")
    (item,) = [i for i in (ta.cast(dtypes.float32) @ tb.cast(dtypes.float32)).schedule() if i.ast is not None]
    out = run_on_interpreter(get_program(item.ast, PythonWithCUDATensorCores()), item, CUDA_TENSOR_CORES)
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
    renderer = CUDARenderer("sm_90")
    src = renderer.render(get_program(item.ast, renderer).uops, "k_staged")
    # a stage holds (M block x 16 k steps) of A and (k x N block) of B; each thread copies its share in chunks of 4
    from tinycore.codegen.heuristic import TC_BLOCK, TC_STAGE

    n_up, m_up, n_warps, m_warps = TC_BLOCK
    k_stage = 16 * min(TC_STAGE, 128 // 16)
    chunks = (16 * m_up * m_warps * k_stage + k_stage * 8 * n_up * n_warps) // 4 // (32 * n_warps * m_warps)
    assert "__shared__" in src and src.count("(const half4*)((data") == chunks
    assert "(const half*)" not in src and "*(data1+" not in src and "*(data2+" not in src  # no scalar global loads
