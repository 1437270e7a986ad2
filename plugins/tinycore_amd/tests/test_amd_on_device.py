"""On a real AMD GPU (ROCm's HIP runtime and a GPU its clang builds for; skipped everywhere else, with the probe's
reason): clang builds every kernel of the op-parity suite for the GPU's arch and each runs to the PYTHON reference
result; the WMMA (RDNA3 ``gfx11*``, RDNA4 ``gfx1200``/``gfx1201``) or MFMA (CDNA) lane layout declared to core is
the hardware's (a tensor-core matmul per input dtype matches numpy; on RDNA4 the first run of its layout on a GPU);
TinyJit replays through a HIP graph with new inputs and variable values; a tensor moves between the GPU and the host
and back unchanged."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tinycore_amd", reason="tinycore-amd is not installed (pip install -e plugins/tinycore_amd)")
from tinycore_amd import plugin  # noqa: E402
from tinycore_amd.renderer import tensor_cores_for  # noqa: E402

from tinycore.codegen.kernel import Opt, OptOps  # noqa: E402
from tinycore.dtype import dtypes  # noqa: E402
from tinycore.tensor import Tensor  # noqa: E402
from tinycore.testkit.kernels import check_case_on_device, kernel_cases, run_item_on_device  # noqa: E402

_PROBE = plugin.probe()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _PROBE.ok, reason=f"needs an AMD GPU with ROCm's HIP runtime (AMD here: {_PROBE.reason})"),
]


@pytest.fixture(scope="module")
def amd():
    """The opened AMD device."""
    from tinycore.device import Device

    return Device["AMD"]


@pytest.mark.parametrize("name", sorted(kernel_cases()))
def test_every_kernel_of_the_suite_runs_to_the_reference_result(name: str) -> None:
    check_case_on_device("AMD", name, exact_exp=False)


@pytest.mark.parametrize("din", [dtypes.float16, dtypes.bfloat16], ids=["half", "bfloat"])
def test_the_matrix_instructions_have_the_declared_layout(amd, din) -> None:
    """Whatever the GPU's arch declares (`tinycore_amd.renderer.tensor_cores_for`): 2 x 2 instruction tiles along M
    and N, 3 steps along K, so a row or column misplaced in A, B or C/D shows as wrong output fragments (an order of
    K that A and B share can't show: it gives the same product)."""
    if not amd.renderer.tensor_cores:
        pytest.skip(f"{amd.renderer.arch} has no tensor cores declared")
    assert amd.renderer.tensor_cores == tensor_cores_for(amd.renderer.arch)  # gfx1200/gfx1201: RDNA4's WMMA
    rng = np.random.default_rng(0)
    a_np, b_np = rng.uniform(-2, 2, (32, 48)).astype(np.float32), rng.uniform(-2, 2, (48, 32)).astype(np.float32)
    a = Tensor(a_np, device="PYTHON").cast(din).realize()
    b = Tensor(b_np, device="PYTHON").cast(din).realize()
    out = a.cast(dtypes.float32) @ b.cast(dtypes.float32)
    (item,) = [i for i in out.schedule() if i.ast is not None]
    index = [tc.dtype_in for tc in amd.renderer.tensor_cores].index(din)
    raw, program = run_item_on_device(amd, item, [Opt(OptOps.TC, 0, index)], {})
    assert any(u.op.name == "WMMA" for u in program.uops)
    want = a.cast(dtypes.float32).numpy().astype(np.float64) @ b.cast(dtypes.float32).numpy().astype(np.float64)
    got = np.frombuffer(bytes(raw), dtype=np.float32)[: want.size].reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # a wrong layout scrambles whole fragments


def test_a_jit_replays_through_a_hip_graph_with_new_inputs_and_values(amd) -> None:
    from tinycore_amd.graph import HIPGraph

    from tinycore import TinyJit, Variable

    @TinyJit
    def step(x: Tensor, n: Variable) -> Tensor:
        return ((x * 2).contiguous().realize() + Tensor(n, device="AMD").cast(dtypes.float32)).sum(axis=1)

    n = Variable("n", 1, 10)
    for k in range(5):
        x = np.full((8, 16), k, np.float32)
        got = step(Tensor(x, device="AMD").realize(), n.bind(k + 1)).numpy()
        np.testing.assert_allclose(got, (x * 2 + k + 1).sum(axis=1))
    assert any(isinstance(g, HIPGraph) for g in step.captured.graphs)


def test_a_tensor_round_trips_between_gpu_and_host(amd) -> None:
    x = np.random.default_rng(1).standard_normal((3, 1000)).astype(np.float32)
    t = Tensor(x, device="AMD")
    np.testing.assert_array_equal(t.numpy(), x)
    np.testing.assert_array_equal(t.to("CLANG").to("AMD").numpy(), x)
