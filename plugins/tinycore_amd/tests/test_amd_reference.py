"""The kernels AMD gets run right, without an AMD GPU: every case of the op-parity kernel suite
(`tinycore.testkit.kernels`) is lowered with the AMD renderer's options for an RDNA3 part (gfx1100: wave32, WMMA) and
a CDNA3 part (gfx942: wave64, MFMA) -- its heuristics, launch limits, LDS size, vector widths and tensor cores, exactly
the uops `AMDRenderer` renders -- and that program runs on the PYTHON reference interpreter (threads shuffled between
barriers, poisoned shared memory, bounds checks). Its output must equal the PYTHON device's own result. (The suite's
matmul is float32, which AMD's tensor cores don't take; `test_amd_tensor_cores.py` runs their half/bfloat16 kernels
on the interpreter the same way.)"""

from __future__ import annotations

import pytest

pytest.importorskip("tinycore_amd", reason="tinycore-amd is not installed (pip install -e plugins/tinycore_amd)")
from tinycore_amd.renderer import AMDRenderer, tensor_cores_for  # noqa: E402

from tinycore.testkit.kernels import check_case_result, kernel_cases, run_case_on_interpreter  # noqa: E402

ARCHS = ["gfx1100", "gfx942"]  # wave32 with WMMA, wave64 with MFMA
CASES = [
    (arch, name)
    for arch in ARCHS
    for name, (_, _, used) in kernel_cases().items()
    if used <= AMDRenderer(arch).supported_dtypes
]


@pytest.mark.parametrize("arch, name", CASES, ids=[f"{a}-{n}" for a, n in CASES])
def test_the_amd_kernel_gives_the_reference_result(arch: str, name: str) -> None:
    got, program = run_case_on_interpreter(name, AMDRenderer(arch), tensor_cores_for(arch))
    want = kernel_cases()[name][0]().numpy()
    check_case_result(name, got, want, exact_exp=False)
    if name == "grouped_sum":
        assert any(u.op.name == "BARRIER" for u in program.uops)  # type: ignore[attr-defined]


def test_every_case_is_checked_on_both_wave_sizes() -> None:
    names = set(kernel_cases())
    for arch in ARCHS:
        checked = {n for a, n in CASES if a == arch}
        assert len(checked) >= 20 and {"matmul", "grouped_sum"} <= checked, (arch, sorted(names - checked))
