"""Warp-shuffle grouped reduces: the CUDA renderer declares ``warp_size = 32``, so core lowers a grouped reduce whose
innermost local lanes fill whole warps to XOR-shuffle steps (``Ops.SHUFFLE``) first, then one shared-memory value
per warp (none when one warp is the whole group). The same lowered kernels run on the PYTHON reference interpreter
(which emulates the shuffles) and match numpy; CUDA renders them as ``__shfl_xor_sync`` and NVRTC builds them."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tinycore_cuda", reason="tinycore-cuda is not installed (pip install -e plugins/tinycore_cuda)")
from tinycore_cuda.renderer import CUDARenderer  # noqa: E402

from tinycore.codegen import get_program  # noqa: E402
from tinycore.codegen.kernel import Opt, OptOps  # noqa: E402
from tinycore.runtime.python_device import PythonCompiler, PythonRenderer, decode_program  # noqa: E402
from tinycore.runtime.python_interpreter import Interpreter  # noqa: E402
from tinycore.sdk import Ops  # noqa: E402
from tinycore.tensor import Tensor  # noqa: E402

RNG = np.random.default_rng(7)
F32 = RNG.uniform(-1, 1, (16, 1024)).astype(np.float32)
I32 = RNG.integers(-1000, 1000, (8, 512)).astype(np.int32)
F16 = RNG.uniform(-1, 1, (4, 256)).astype(np.float16)

# case: (input, reduce, opts, warp partials per group kept in shared memory: 0 = shuffles only)
CASES = {
    "one_warp": (F32, "sum", [Opt(OptOps.GROUP, 0, 32)], 0),
    "eight_warps": (F32, "sum", [Opt(OptOps.GROUPTOP, 0, 256)], 8),
    "local_rows": (F32, "sum", [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 64)], 2),
    "float4_lanes": (F32, "sum", [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.GROUP, 0, 64)], 2),
    "max": (F32, "max", [Opt(OptOps.GROUPTOP, 0, 128)], 4),
    "int_two_groups": (I32, "sum", [Opt(OptOps.GROUP, 0, 32), Opt(OptOps.GROUP, 0, 4)], 4),
    "half": (F16, "sum", [Opt(OptOps.GROUP, 0, 64)], 2),
}


class PythonWithWarps(PythonRenderer):
    """The PYTHON renderer declaring CUDA's warps: core lowers grouped reduces exactly as for CUDA."""

    warp_size = 32


def lowered(case: str, renderer):
    """(schedule item, program, numpy's answer) of `case` lowered for `renderer`."""
    data, op, opts, _ = CASES[case]
    t = Tensor(data, device="PYTHON")
    out = t.sum(axis=1) if op == "sum" else t.max(axis=1)
    (item,) = [i for i in out.schedule() if i.ast is not None]
    want = data.astype(np.float64).sum(1) if op == "sum" else data.max(1)
    out_dtype = np.int64 if data.dtype.kind == "i" and op == "sum" else data.dtype  # int sums widen (numpy's rule)
    return item, get_program(item.ast, renderer, opts), want.astype(out_dtype)


def run_on_interpreter(item, program, want: np.ndarray) -> np.ndarray:
    lib = PythonCompiler().compile(PythonRenderer().render(program.uops))
    out = np.zeros(want.size, want.dtype)
    inputs = [bytearray(b.as_buffer()) for b in item.bufs[1:]]
    Interpreter(decode_program(lib), program.function_name)(
        [memoryview(out).cast("B"), *(memoryview(x) for x in inputs)], program.global_size, program.local_size
    )
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_the_warp_reduce_runs_right_on_the_reference_interpreter(case: str) -> None:
    item, program, want = lowered(case, PythonWithWarps())
    shuffles = [u for u in program.uops if u.op is Ops.SHUFFLE]
    assert sorted({u.arg for u in shuffles}, reverse=True) == [16, 8, 4, 2, 1]
    lanes = shuffles[0].dtype.count
    shared = [u.dtype.size for u in program.uops if u.op is Ops.DEFINE_LOCAL]
    groups = np.prod(program.local_size) // 32 // max(1, CASES[case][3])  # groups of lanes in one block
    assert shared == ([groups * CASES[case][3] * lanes] if CASES[case][3] else [])  # one value per warp
    assert any(u.op is Ops.BARRIER for u in program.uops) == bool(CASES[case][3])
    got = run_on_interpreter(item, program, want)
    tolerance = 2e-2 if want.dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def test_groups_smaller_than_a_warp_keep_shared_memory_per_lane() -> None:
    CASES["sixteen_lanes"] = (F32, "sum", [Opt(OptOps.GROUP, 0, 16)], 0)
    try:
        item, program, want = lowered("sixteen_lanes", PythonWithWarps())
    finally:
        del CASES["sixteen_lanes"]
    assert not any(u.op is Ops.SHUFFLE for u in program.uops)
    assert [u.dtype.size for u in program.uops if u.op is Ops.DEFINE_LOCAL] == [16]
    np.testing.assert_allclose(run_on_interpreter(item, program, want), want, rtol=1e-5, atol=1e-5)


def test_renderers_without_warps_are_unchanged() -> None:
    _, program, _ = lowered("eight_warps", PythonRenderer())
    assert PythonRenderer().warp_size == 0 and not any(u.op is Ops.SHUFFLE for u in program.uops)
    assert [u.dtype.size for u in program.uops if u.op is Ops.DEFINE_LOCAL] == [256]


@pytest.mark.parametrize("case", list(CASES))
def test_cuda_renders_shfl_xor_sync_and_nvrtc_builds_it(case: str) -> None:
    renderer = CUDARenderer("sm_90")
    _, program, _ = lowered(case, renderer)
    src = renderer.render(program.uops, f"k_{case}")
    body = src[src.index('extern "C"') :]
    lanes = next(u.dtype.count for u in program.uops if u.op is Ops.SHUFFLE)
    assert body.count("__shfl_xor_sync(0xffffffffu, ") == 5 * lanes
    assert ("__syncthreads();" in body) == bool(CASES[case][3]) and ("__shared__" in body) == bool(CASES[case][3])
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC is not installed (pip install 'tinycore[cuda]')")
    from tinycore_cuda.compiler import NVRTCCompiler

    from tinycore.sdk import KernelImage

    _, ptx = KernelImage.unpack(NVRTCCompiler("compute_80").compile(src))
    assert ptx.count(b"shfl.sync.bfly.b32") >= 5 * lanes  # 64-bit values take two 32-bit shuffles each


def test_warp_partials_go_through_shared_memory_as_vectors() -> None:
    renderer = CUDARenderer("sm_90")
    _, program, _ = lowered("float4_lanes", renderer)  # two warps per group, 4 lanes each: one float4 per warp
    src = renderer.render(program.uops, "k")
    assert "__shared__ __align__(16) float smem0[8];" in src and "__syncthreads();" in src
    assert "*((float4*)((smem0+" in src and "*((const float4*)((smem0+" in src


# ----- on a GPU (bench/device_check.sh): skipped without one


@pytest.mark.parametrize("case", list(CASES))
def test_the_warp_reduce_runs_right_on_the_gpu(case: str, gpu, launch) -> None:
    item, program, want = lowered(case, gpu.renderer)
    assert any(u.op is Ops.SHUFFLE for u in program.uops)
    src = gpu.renderer.render(program.uops, f"k_{case}")
    inputs = [np.frombuffer(bytearray(b.as_buffer()), np.uint8) for b in item.bufs[1:]]
    got = launch(src, f"k_{case}", np.zeros(want.size, want.dtype), inputs, program.global_size, program.local_size)
    tolerance = 2e-2 if want.dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
