"""The kernels Metal gets run right: every case of the op-parity kernel suite (`tinycore.testkit.kernels`) is lowered
with the Metal renderer's options (its heuristics, launch limits, vector widths, native ops and simdgroup tensor
cores: exactly the uops `MetalRenderer` renders) and that program runs on the PYTHON reference interpreter (shuffled
threads between barriers, poisoned threadgroup memory, bounds checks, simdgroup matrices emulated from their
declared lane layout); its output must equal the PYTHON device's own result. No GPU needed."""

from __future__ import annotations

import pytest

pytest.importorskip("tinycore_metal", reason="tinycore-metal is not installed (pip install -e plugins/tinycore_metal)")
from tinycore_metal.renderer import METAL_TENSOR_CORES, MetalRenderer  # noqa: E402

from tinycore.testkit.kernels import check_case_result, kernel_cases, run_case_on_interpreter  # noqa: E402

CASES = [n for n, (_, _, used) in kernel_cases().items() if used <= MetalRenderer().supported_dtypes]


@pytest.mark.parametrize("name", CASES)
def test_the_metal_kernel_gives_the_reference_result(name: str) -> None:
    got, program = run_case_on_interpreter(name, MetalRenderer(), METAL_TENSOR_CORES)
    want = kernel_cases()[name][0]().numpy()
    check_case_result(name, got, want)
    if name == "matmul":  # the float matmul runs on the emulated simdgroup matrices
        assert any(u.op.name == "WMMA" for u in program.uops)  # type: ignore[attr-defined]
    if name == "grouped_sum":
        assert any(u.op.name == "BARRIER" for u in program.uops)  # type: ignore[attr-defined]
