"""AMD's tensor cores: WMMA on RDNA3 (``v_wmma_f32_16x16x16_{f16,bf16}``, wave32) and MFMA on CDNA2/3
(``v_mfma_f32_16x16x16{f16,bf16_1k}``, wave64), fp32 accumulate. Each is declared to core with its documented lane
layout, so the very kernel core lowers for the AMD renderer runs on the PYTHON reference interpreter (and matches
numpy), clang builds it for the arch, and the disassembly shows the matrix instruction. No AMD GPU needed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tinycore_amd", reason="tinycore-amd is not installed (pip install -e plugins/tinycore_amd)")
from tinycore_amd.compiler import HIPCompiler, supports_arch  # noqa: E402
from tinycore_amd.renderer import (  # noqa: E402
    CDNA_TENSOR_CORES,
    RDNA3_TENSOR_CORES,
    AMDRenderer,
    tensor_cores_for,
)

from tinycore.codegen import Opt, OptOps, get_kernel, get_program  # noqa: E402
from tinycore.codegen.heuristic import hand_coded_optimizations  # noqa: E402
from tinycore.dtype import dtypes  # noqa: E402
from tinycore.sdk import KernelImage  # noqa: E402
from tinycore.testkit.kernels import matmul_case, run_on_interpreter  # noqa: E402

SHAPES = [(16, 16, 16), (32, 48, 16), (48, 32, 32)]  # (M, K, N): multiples of the 16 x 16 x 16 instruction
ARCHS = {"gfx1100": RDNA3_TENSOR_CORES, "gfx942": CDNA_TENSOR_CORES, "gfx90a": CDNA_TENSOR_CORES}
OBJDUMP = next((shutil.which(n) for n in ("llvm-objdump-19", "llvm-objdump") if shutil.which(n)), None)
IDS = {dtypes.float16: "fp16", dtypes.bfloat16: "bf16"}


def test_the_layouts_are_the_documented_ones() -> None:
    wmma, wmma_bf16 = RDNA3_TENSOR_CORES
    assert wmma.dims == (16, 16, 16) and wmma.threads == 32 and wmma.elements_per_thread == (16, 16, 8)
    assert (wmma.dtype_in, wmma_bf16.dtype_in, wmma.dtype_out) == (dtypes.float16, dtypes.bfloat16, dtypes.float32)
    a, b, c = wmma.swizzle
    assert a[5] == a[21] == tuple((5, k) for k in range(16))  # lanes 16-31 hold copies of lanes 0-15's rows of A
    assert b[21][3] == (3, 5) and c[5][3] == (6, 5) and c[21][3] == (7, 5)  # D: row 2i + lane // 16, col lane % 16
    mfma = CDNA_TENSOR_CORES[0]
    assert mfma.threads == 64 and mfma.elements_per_thread == (4, 4, 4)
    a, b, c = mfma.swizzle
    assert a[37][2] == (5, 10) and b[37][2] == (10, 5) and c[37][2] == (10, 5)  # k / row = 4 * (lane // 16) + i


def test_each_arch_declares_its_own_tensor_cores() -> None:
    assert AMDRenderer("gfx1100").tensor_cores == tensor_cores_for("gfx1101") == RDNA3_TENSOR_CORES
    assert AMDRenderer("gfx90a").tensor_cores == AMDRenderer("gfx942").tensor_cores == CDNA_TENSOR_CORES
    for arch in ("gfx1030", "gfx1201", "gfx908", None):  # RDNA2 has none; RDNA4 and gfx908 are not declared yet
        assert AMDRenderer(arch).tensor_cores == []


@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
@pytest.mark.parametrize("din", [dtypes.float16, dtypes.bfloat16], ids=IDS.get)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_amd_kernel_runs_right_on_the_reference_interpreter(arch: str, din, shape) -> None:
    item, want = matmul_case(*shape, din)
    tcs = ARCHS[arch]
    program = get_program(
        item.ast, AMDRenderer(arch), [Opt(OptOps.TC, 0, tcs.index(next(t for t in tcs if t.dtype_in == din)))]
    )
    assert any(u.op.name == "WMMA" for u in program.uops) and program.local_size[0] == tcs[0].threads
    out = run_on_interpreter(program, item, tcs)  # the same uops, serialized for PYTHON
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def test_the_heuristics_pick_the_tensor_core_for_a_half_matmul() -> None:
    for arch in ("gfx1100", "gfx942"):
        item, _ = matmul_case(32, 32, 32, dtypes.float16)
        opts = hand_coded_optimizations(get_kernel(item.ast, AMDRenderer(arch)))
        assert opts[0].op is OptOps.TC and all(o.op in (OptOps.UPCAST, OptOps.LOCAL, OptOps.STAGE) for o in opts[1:])
        program = get_program(item.ast, AMDRenderer(arch))  # the default: the heuristics
        assert any(u.op.name == "WMMA" for u in program.uops)
    item, _ = matmul_case(32, 32, 32, dtypes.float32)  # float32 inputs: no tensor core takes them
    assert OptOps.TC not in [o.op for o in hand_coded_optimizations(get_kernel(item.ast, AMDRenderer("gfx1100")))]
    item, _ = matmul_case(32, 32, 32, dtypes.float16)
    assert OptOps.TC not in [o.op for o in hand_coded_optimizations(get_kernel(item.ast, AMDRenderer("gfx1030")))]


CASES = [  # (arch, input dtype, the instruction's name in llvm-objdump's disassembly)
    ("gfx1100", dtypes.float16, "v_wmma_f32_16x16x16_f16"),
    ("gfx1100", dtypes.bfloat16, "v_wmma_f32_16x16x16_bf16"),
    ("gfx942", dtypes.float16, "v_mfma_f32_16x16x16_f16"),
    ("gfx942", dtypes.bfloat16, "v_mfma_f32_16x16x16_bf16"),
    ("gfx90a", dtypes.float16, "v_mfma_f32_16x16x16f16"),
    ("gfx90a", dtypes.bfloat16, "v_mfma_f32_16x16x16bf16_1k"),
]


@pytest.mark.skipif(OBJDUMP is None, reason="no llvm-objdump (apt-get install llvm-19)")
@pytest.mark.parametrize("arch,din,instruction", CASES, ids=[f"{a}-{IDS[d]}" for a, d, _ in CASES])
def test_clang_builds_the_matrix_instruction(arch: str, din, instruction: str, tmp_path: Path) -> None:
    if (problem := supports_arch(arch)) is not None:
        pytest.skip(f"{problem} (apt-get install clang-19 lld-19)")
    renderer = AMDRenderer(arch)
    item, _ = matmul_case(32, 48, 16, din)
    program = get_program(item.ast, renderer, [Opt(OptOps.TC, 0, [dtypes.float16, dtypes.bfloat16].index(din))])
    src = renderer.render(program.uops, "k_tc")
    assert "__builtin_amdgcn_" + ("wmma" if arch.startswith("gfx11") else "mfma") in src
    _, image = KernelImage.unpack(HIPCompiler(arch).compile(src))
    path = tmp_path / "k_tc.hsaco"
    path.write_bytes(image)
    text = subprocess.run([OBJDUMP, "-d", str(path)], capture_output=True, text=True, timeout=60).stdout
    assert re.search(rf"\b{instruction}\b", text), f"{arch}: no {instruction} in the disassembly"
