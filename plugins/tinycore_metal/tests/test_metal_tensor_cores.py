"""Metal's tensor cores (``simdgroup_matrix`` 8x8x8: float, half or bfloat in, float accumulate): declared to core's
optimizer with the SIMD-group lane layout, so the tensor-core kernel the Metal renderer writes runs on the PYTHON
reference interpreter with that layout (and matches numpy), and the MSL it writes passes the stand-in syntax check.
No GPU needed."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tinycore_metal", reason="tinycore-metal is not installed (pip install -e plugins/tinycore_metal)")
from tinycore_metal.compiler import find_clang, syntax_check  # noqa: E402
from tinycore_metal.renderer import METAL_TENSOR_CORES, MetalRenderer, simdgroup_coord  # noqa: E402

from tinycore.codegen import get_program  # noqa: E402
from tinycore.codegen.kernel import Opt, OptOps  # noqa: E402
from tinycore.dtype import dtypes  # noqa: E402
from tinycore.testkit.kernels import matmul_case, run_on_interpreter  # noqa: E402

SHAPES = [(8, 8, 8), (16, 24, 8), (32, 16, 40)]  # (M, K, N): multiples of the 8 x 8 x 8 fragment
DTYPES = {"half": dtypes.float16, "bfloat": dtypes.bfloat16, "float": dtypes.float32}
TC_INDEX = {dtypes.float16: 0, dtypes.bfloat16: 1, dtypes.float32: 2}


def test_the_layout_covers_each_fragment_once_with_two_elements_per_lane() -> None:
    for tc in METAL_TENSOR_CORES:
        assert tc.dims == (8, 8, 8) and tc.threads == 32 and tc.elements_per_thread == (2, 2, 2)
        assert tc.dtype_out == dtypes.float32
    assert [tc.dtype_in for tc in METAL_TENSOR_CORES] == [dtypes.float16, dtypes.bfloat16, dtypes.float32]
    held = sorted(simdgroup_coord(lane, i) for lane in range(32) for i in range(2))
    assert held == [(r, c) for r in range(8) for c in range(8)]
    # a quad of lanes holds a 2x4 block; lanes 8.. the right half, lanes 16.. the lower half
    assert [simdgroup_coord(lane, i) for lane in range(4) for i in range(2)] == [
        (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)
    ]  # fmt: skip
    assert simdgroup_coord(8, 0) == (0, 4) and simdgroup_coord(16, 0) == (4, 0) and simdgroup_coord(31, 1) == (7, 7)
    layout_a, layout_b, layout_c = METAL_TENSOR_CORES[0].swizzle
    assert layout_a == layout_b == layout_c  # A, B and C fragments share it


@pytest.mark.parametrize("din", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_simdgroup_kernel_runs_right_on_the_reference_interpreter(shape, din) -> None:
    item, want = matmul_case(*shape, din)
    program = get_program(item.ast, MetalRenderer(), [Opt(OptOps.TC, 0, TC_INDEX[din])])
    assert any(u.op.name == "WMMA" for u in program.uops) and program.local_size[0] == 32
    out = run_on_interpreter(program, item, METAL_TENSOR_CORES)
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def test_the_heuristics_pick_the_half_tensor_core_for_a_half_matmul() -> None:
    item, want = matmul_case(32, 32, 32, dtypes.float16, seed=1)
    program = get_program(item.ast, MetalRenderer())  # no opts: the default heuristics
    wmma = [u for u in program.uops if u.op.name == "WMMA"]
    assert wmma and wmma[0].arg[0] == METAL_TENSOR_CORES[0].name


@pytest.mark.parametrize("din", list(DTYPES.values()), ids=list(DTYPES))
def test_metal_renders_simdgroup_multiply_accumulate_that_passes_the_syntax_check(din) -> None:
    item, _ = matmul_case(16, 24, 8, din)
    renderer = MetalRenderer("apple9")
    program = get_program(item.ast, renderer, [Opt(OptOps.TC, 0, TC_INDEX[din])])
    src = renderer.render(program.uops, "k_simdgroup")
    kind = {dtypes.float16: "half", dtypes.bfloat16: "bfloat", dtypes.float32: "float"}[din]
    assert f"simdgroup_{kind}8x8 sg_a" in src and "simdgroup_float8x8 sg_c" in src
    assert "simdgroup_multiply_accumulate(" in src and ".thread_elements()[1]" in src
    if find_clang() is None:
        pytest.skip("clang-19 not installed")
    syntax_check(src)


def test_gpus_before_apple7_declare_no_tensor_cores() -> None:
    assert MetalRenderer("apple6").tensor_cores == [] and MetalRenderer("apple7").tensor_cores == METAL_TENSOR_CORES
    assert MetalRenderer(None).tensor_cores == METAL_TENSOR_CORES
