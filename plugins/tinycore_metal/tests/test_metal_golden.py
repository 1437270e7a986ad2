"""Golden files: the exact MSL of a few representative kernels, so any change to what Metal gets is seen in review.

- ``broadcast.metal``: elementwise, vector loads and stores (``float4``);
- ``grouped_sum.metal``: a reduce through threadgroup memory with a barrier;
- ``matmul.metal``: a float32 matmul on ``simdgroup_float8x8`` tensor cores (the default heuristics);
- ``matmul_half.metal``: a half matmul on ``simdgroup_half8x8`` with a float accumulator.

Regenerate them after an intended change, then review the diff:

    TINYCORE_UPDATE_GOLDEN=1 python -m pytest plugins/tinycore_metal/tests/test_metal_golden.py

Every golden file also passes the stand-in syntax check (skipped without clang-19).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tinycore_metal", reason="tinycore-metal is not installed (pip install -e plugins/tinycore_metal)")
from tinycore_metal.compiler import find_clang, syntax_check  # noqa: E402
from tinycore_metal.renderer import MetalRenderer  # noqa: E402

from tinycore.codegen import get_program  # noqa: E402
from tinycore.dtype import dtypes  # noqa: E402
from tinycore.tensor import Tensor  # noqa: E402
from tinycore.testkit.kernels import render_cases  # noqa: E402

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("TINYCORE_UPDATE_GOLDEN", "") not in ("", "0")
CASES = ("broadcast", "grouped_sum", "matmul")


def _half_matmul() -> str:
    """A 32x32x32 half matmul (float accumulate), rendered with the default heuristics."""
    rng = np.random.default_rng(0)
    a, b = (Tensor(rng.uniform(-1, 1, (32, 32)).astype(np.float16), device="PYTHON") for _ in range(2))
    (item,) = [i for i in (a.cast(dtypes.float32) @ b.cast(dtypes.float32)).schedule() if i.ast is not None]
    renderer = MetalRenderer()
    return renderer.render(get_program(item.ast, renderer).uops, "k_matmul_half")


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    """Golden name -> the source rendered now."""
    return {**render_cases(MetalRenderer(), CASES), "matmul_half": _half_matmul()}


@pytest.mark.parametrize("name", [*CASES, "matmul_half"])
def test_the_kernel_matches_its_golden_file(rendered: dict[str, str], name: str) -> None:
    path = GOLDEN / f"{name}.metal"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(rendered[name])
    assert path.exists(), f"{path} is missing: regenerate with TINYCORE_UPDATE_GOLDEN=1 (see this file's docstring)"
    assert rendered[name] == path.read_text(), (
        f"the MSL of {name} changed: if intended, regenerate with TINYCORE_UPDATE_GOLDEN=1 and review the diff"
    )


def test_the_golden_files_pass_the_stand_in_syntax_check() -> None:
    if find_clang() is None:
        pytest.skip("clang-19 not installed")
    files = sorted(GOLDEN.glob("*.metal"))
    assert len(files) == 4
    syntax_check("\n".join(f.read_text() for f in files))
    assert "simdgroup_half8x8" in (GOLDEN / "matmul_half.metal").read_text()
    assert "threadgroup_barrier" in (GOLDEN / "grouped_sum.metal").read_text()
