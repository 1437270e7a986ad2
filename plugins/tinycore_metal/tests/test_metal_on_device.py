"""On a real Apple GPU (macOS with pyobjc-framework-Metal; skipped everywhere else, with the probe's reason): the
Metal compiler builds every kernel of the op-parity suite and each runs on the GPU to the PYTHON reference result;
the simdgroup lane layout declared to core is the hardware's (a tensor-core matmul per input dtype matches numpy);
TinyJit replays through the indirect command buffer with new inputs and variable values; the doctor's smoke test
passes with a GPU time."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tinycore_metal", reason="tinycore-metal is not installed (pip install -e plugins/tinycore_metal)")
from tinycore_metal import plugin  # noqa: E402
from tinycore_metal.renderer import METAL_TENSOR_CORES  # noqa: E402

from tinycore.codegen.kernel import Opt, OptOps  # noqa: E402
from tinycore.dtype import dtypes  # noqa: E402
from tinycore.tensor import Tensor  # noqa: E402
from tinycore.testkit.kernels import check_case_on_device, kernel_cases, run_item_on_device  # noqa: E402

_PROBE = plugin.probe()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _PROBE.ok, reason=f"needs macOS with an Apple GPU (METAL here: {_PROBE.reason})"),
]


@pytest.fixture(scope="module")
def metal():
    """The opened METAL device."""
    from tinycore.device import Device

    return Device["METAL"]


@pytest.mark.parametrize("name", sorted(kernel_cases()))
def test_every_kernel_of_the_suite_runs_to_the_reference_result(name: str) -> None:
    check_case_on_device("METAL", name)


@pytest.mark.parametrize("din", [dtypes.float16, dtypes.bfloat16, dtypes.float32], ids=["half", "bfloat", "float"])
def test_simdgroup_matrices_have_the_declared_layout(metal, din) -> None:
    rng = np.random.default_rng(0)
    a_np, b_np = rng.uniform(-2, 2, (32, 24)).astype(np.float32), rng.uniform(-2, 2, (24, 16)).astype(np.float32)
    a = Tensor(a_np, device="PYTHON").cast(din).realize()
    b = Tensor(b_np, device="PYTHON").cast(din).realize()
    out = a @ b if din == dtypes.float32 else a.cast(dtypes.float32) @ b.cast(dtypes.float32)
    (item,) = [i for i in out.schedule() if i.ast is not None]
    index = [tc.dtype_in for tc in METAL_TENSOR_CORES].index(din)
    raw, program = run_item_on_device(metal, item, [Opt(OptOps.TC, 0, index)], {})
    assert any(u.op.name == "WMMA" for u in program.uops)
    want = a.cast(dtypes.float32).numpy() @ b.cast(dtypes.float32).numpy()
    got = np.frombuffer(bytes(raw), dtype=np.float32)[: want.size].reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # a wrong layout scrambles whole fragments


def test_a_jit_replays_through_the_icb_with_new_inputs_and_values(metal) -> None:
    from tinycore_metal.graph import MetalGraph

    from tinycore import TinyJit, Variable

    @TinyJit
    def step(x: Tensor, n: Variable) -> Tensor:
        return ((x * 2).contiguous().realize() + Tensor(n, device="METAL").cast(dtypes.float32)).sum(axis=1)

    n = Variable("n", 1, 10)
    for k in range(5):
        x = np.full((8, 16), k, np.float32)
        got = step(Tensor(x, device="METAL").realize(), n.bind(k + 1)).numpy()
        np.testing.assert_allclose(got, (x * 2 + k + 1).sum(axis=1))
    assert any(isinstance(g, MetalGraph) for g in step.captured.graphs)


def test_the_doctor_smoke_test_runs_a_timed_kernel(metal) -> None:
    from tinycore.cli import DoctorContext
    from tinycore.plugin.manager import get_manager

    detail = plugin.smoke_test(DoctorContext(name="METAL", manager=get_manager(), device=metal))
    assert "4x32 threads in" in detail and metal.name in detail
