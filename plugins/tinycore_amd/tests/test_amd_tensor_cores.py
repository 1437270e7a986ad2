"""AMD's tensor cores: WMMA on RDNA3 and RDNA4 (``v_wmma_f32_16x16x16_{f16,bf16}``, wave32; RDNA4's takes 8 elements
of A and B per lane where RDNA3's takes 16) and MFMA on CDNA2/3 (``v_mfma_f32_16x16x16{f16,bf16_1k}``, wave64), fp32
accumulate. Each is declared to core with its documented lane layout (checked here element by element against the
documents' formulas), so the very kernel core lowers for the AMD renderer runs on the PYTHON reference interpreter
(and matches numpy: shapes that are multiples of the instruction, padded ones, a batch, the heuristics' blocked and
staged kernel), clang builds it for the arch, and the disassembly shows the matrix instruction with its operand
widths. No AMD GPU needed: the interpreter checks that core's lowering agrees with the declared layouts, not that the
layouts are the hardware's (``test_amd_on_device.py`` does, on a GPU)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tinycore_amd", reason="tinycore-amd is not installed (pip install -e plugins/tinycore_amd)")
from tinycore_amd.compiler import HIPCompiler, supports_arch  # noqa: E402
from tinycore_amd.device import AMDDevice  # noqa: E402
from tinycore_amd.renderer import (  # noqa: E402
    CDNA_TENSOR_CORES,
    RDNA3_TENSOR_CORES,
    RDNA4_ARCHS,
    RDNA4_TENSOR_CORES,
    AMDRenderer,
    tensor_cores_for,
)
from tinycore_amd.testing import FakeHIP  # noqa: E402

from tinycore.codegen import Opt, OptOps, get_kernel, get_program  # noqa: E402
from tinycore.codegen.heuristic import hand_coded_optimizations  # noqa: E402
from tinycore.dtype import dtypes  # noqa: E402
from tinycore.sdk import KernelImage, TensorCore  # noqa: E402
from tinycore.tensor import Tensor  # noqa: E402
from tinycore.testkit.kernels import matmul_case, run_on_interpreter  # noqa: E402

SHAPES = [(16, 16, 16), (32, 48, 16), (48, 32, 32)]  # (M, K, N): multiples of the 16 x 16 x 16 instruction
ARCHS = {
    "gfx1100": RDNA3_TENSOR_CORES,
    "gfx1200": RDNA4_TENSOR_CORES,
    "gfx1201": RDNA4_TENSOR_CORES,
    "gfx942": CDNA_TENSOR_CORES,
    "gfx90a": CDNA_TENSOR_CORES,
}
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


# The documents' layouts, written here apart from the renderer's: (row, col) of element i of lane l in operand A
# (M x K), B (K x N) or C/D (M x N).
def _rdna4_guide(operand: str, lane: int, i: int) -> tuple[int, int]:
    """AMD's RDNA4 ISA guide, 16x16x16 WMMA in wave32: A row l % 16, K 8 * (l // 16) + i; B the same transposed;
    C/D column l % 16, row 8 * (l // 16) + i (lanes 0-15 rows 0-7, lanes 16-31 rows 8-15)."""
    line, step = lane % 16, 8 * (lane // 16) + i
    return (line, step) if operand == "A" else (step, line)


def _rdna3_guide(operand: str, lane: int, i: int) -> tuple[int, int]:
    """AMD's RDNA3 WMMA notes: A row l % 16, all 16 K (lanes 16-31 copy 0-15); B the same transposed; C/D column
    l % 16, row 2 * i + l // 16."""
    return {"A": (lane % 16, i), "B": (i, lane % 16), "C": (2 * i + lane // 16, lane % 16)}[operand]


def _cdna_calculator(operand: str, lane: int, i: int) -> tuple[int, int]:
    """AMD's matrix instruction calculator, 16x16x16 MFMA in wave64: A row l % 16, K 4 * (l // 16) + i; B and C/D
    column l % 16, K or row 4 * (l // 16) + i."""
    line, step = lane % 16, 4 * (lane // 16) + i
    return (line, step) if operand == "A" else (step, line)


def _layouts(tc: TensorCore, formula: Callable[[str, int, int], tuple[int, int]]) -> list[list[list[tuple[int, int]]]]:
    """The tensor core's layouts of A, B, C/D as `formula` gives them, in the shape of ``tc.swizzle``."""
    return [
        [[formula(operand, lane, i) for i in range(count)] for lane in range(tc.threads)]
        for operand, count in zip("ABC", tc.elements_per_thread)
    ]


def _declared(tc: TensorCore) -> list[list[list[tuple[int, int]]]]:
    """``tc.swizzle`` as lists, to compare with `_layouts`."""
    return [[list(lane) for lane in layout] for layout in tc.swizzle]


def test_the_rdna4_layout_is_the_isa_guides() -> None:
    """Every (lane, element) of gfx12's v_wmma_f32_16x16x16_{f16,bf16} in wave32 against the RDNA4 ISA guide's
    formulas (`_rdna4_guide`). The renderer writes the layout once (``_wmma12_a/b/c``): a fix goes there and here."""
    assert [tc.dtype_in for tc in RDNA4_TENSOR_CORES] == [dtypes.float16, dtypes.bfloat16]
    for tc in RDNA4_TENSOR_CORES:
        assert tc.dims == (16, 16, 16) and tc.threads == 32 and tc.elements_per_thread == (8, 8, 8)
        assert tc.dtype_out == dtypes.float32 and tc.opts == ()
        assert _declared(tc) == _layouts(tc, _rdna4_guide)
        for layout in tc.swizzle:  # no copies: every element of A, B and C/D is held by exactly one (lane, element)
            held = [coord for lane in layout for coord in lane]
            assert len(held) == len(set(held)) == 256
    a, b, c = RDNA4_TENSOR_CORES[0].swizzle
    assert a[21] == tuple((5, 8 + k) for k in range(8)) and b[3][7] == (7, 3)  # lane 21: row 5, K 8-15
    assert c[21][3] == (11, 5) and RDNA3_TENSOR_CORES[0].swizzle[2][21][3] == (7, 5)  # not gfx11's interleave


def test_the_rdna3_and_cdna_layouts_are_unchanged() -> None:
    """gfx11's WMMA and CDNA's MFMA, element by element, as they were before RDNA4 was declared."""
    for tc in RDNA3_TENSOR_CORES:
        assert tc.elements_per_thread == (16, 16, 8) and _declared(tc) == _layouts(tc, _rdna3_guide)
    for tc in CDNA_TENSOR_CORES:
        assert tc.elements_per_thread == (4, 4, 4) and _declared(tc) == _layouts(tc, _cdna_calculator)


def test_each_arch_declares_its_own_tensor_cores() -> None:
    assert AMDRenderer("gfx1100").tensor_cores == tensor_cores_for("gfx1101") == RDNA3_TENSOR_CORES
    assert AMDRenderer("gfx90a").tensor_cores == AMDRenderer("gfx942").tensor_cores == CDNA_TENSOR_CORES
    assert RDNA4_ARCHS == ("gfx1200", "gfx1201")
    assert AMDRenderer("gfx1200").tensor_cores == AMDRenderer("gfx1201").tensor_cores == RDNA4_TENSOR_CORES
    # RDNA2 has none; gfx908 is not declared; gfx1250's WMMA is another instruction set, not declared
    for arch in ("gfx1030", "gfx908", "gfx1250", None):
        assert AMDRenderer(arch).tensor_cores == []


@pytest.mark.parametrize("arch", RDNA4_ARCHS)
def test_an_rdna4_gpu_declares_the_rdna4_wmma(arch: str) -> None:
    """The device opened on a gfx1200/gfx1201 GPU (a fake HIP runtime reporting that arch) renders with the RDNA4
    tensor cores, so ``test_amd_on_device.py``'s layout check runs the gfx12 WMMA there instead of skipping."""
    device = AMDDevice("AMD", hip=FakeHIP(arch=arch))
    assert device.renderer.arch == arch and device.renderer.tensor_cores == RDNA4_TENSOR_CORES


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201", "gfx942"])
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


def _matmul(shape_a: tuple[int, ...], shape_b: tuple[int, ...], din: Any, seed: int = 0) -> tuple[Any, np.ndarray]:
    """A one-kernel (batched) ``a @ b`` of `din` inputs accumulated in float32 on PYTHON: its `ScheduleItem` and the
    float64 product of the same rounded inputs (as `matmul_case`, which has no batch)."""
    rng = np.random.default_rng(seed)
    a = Tensor(rng.uniform(-2, 2, shape_a).astype(np.float32), device="PYTHON").cast(din).realize()
    b = Tensor(rng.uniform(-2, 2, shape_b).astype(np.float32), device="PYTHON").cast(din).realize()
    a32, b32 = a.cast(dtypes.float32), b.cast(dtypes.float32)
    (item,) = [i for i in (a32 @ b32).schedule() if i.ast is not None]
    return item, a32.numpy().astype(np.float64) @ b32.numpy().astype(np.float64)


RDNA4_CASES = [  # (batch or None, M, K, N): padded to whole 16 x 16 x 16 tiles where they aren't multiples
    (None, 20, 24, 12),
    (None, 33, 17, 30),
    (None, 16, 40, 9),
    (3, 32, 16, 16),
    (2, 20, 24, 12),
]


@pytest.mark.parametrize("din", [dtypes.float16, dtypes.bfloat16], ids=IDS.get)
@pytest.mark.parametrize("case", RDNA4_CASES, ids=lambda c: "x".join(str(n) for n in c if n is not None))
def test_rdna4_padded_and_batched_matmuls_run_right_on_the_reference_interpreter(din, case) -> None:
    batch, m, k, n = case
    lead = () if batch is None else (batch,)
    item, want = _matmul((*lead, m, k), (*lead, k, n), din, seed=m + k + n)
    first = len(lead)  # the kernel's axes: the batch, M, N (outputs), then K (the reduce)
    pads = [Opt(OptOps.PADTO, first + i, 16) for i, size in enumerate((m, n, k)) if size % 16]
    renderer = AMDRenderer("gfx1201")
    program = get_program(item.ast, renderer, [*pads, Opt(OptOps.TC, 0, [dtypes.float16, dtypes.bfloat16].index(din))])
    wmmas = [u for u in program.uops if u.op.name == "WMMA"]
    assert wmmas and all(u.arg[3] == (8, 8, 8) for u in wmmas) and program.local_size[0] == 32
    out = run_on_interpreter(program, item, RDNA4_TENSOR_CORES)
    np.testing.assert_allclose(out[: want.size].reshape(want.shape), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("din", [dtypes.float16, dtypes.bfloat16], ids=IDS.get)
def test_rdna4_heuristic_kernel_runs_right_on_the_reference_interpreter(din) -> None:
    """The heuristics' kernel for gfx1201: the tensor core, a block of tiles per warp, operands through LDS."""
    item, want = matmul_case(64, 64, 64, din)
    program = get_program(item.ast, AMDRenderer("gfx1201"))
    assert any(u.op.name == "WMMA" for u in program.uops) and any(u.op.name == "DEFINE_LOCAL" for u in program.uops)
    out = run_on_interpreter(program, item, RDNA4_TENSOR_CORES)
    np.testing.assert_allclose(out.reshape(want.shape), want, rtol=1e-5, atol=1e-5)


def test_the_heuristics_pick_the_tensor_core_for_a_half_matmul() -> None:
    for arch in ("gfx1100", "gfx1201", "gfx942"):
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
    ("gfx1200", dtypes.float16, "v_wmma_f32_16x16x16_f16"),
    ("gfx1200", dtypes.bfloat16, "v_wmma_f32_16x16x16_bf16"),
    ("gfx1201", dtypes.float16, "v_wmma_f32_16x16x16_f16"),
    ("gfx1201", dtypes.bfloat16, "v_wmma_f32_16x16x16_bf16"),
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
    family = "mfma" if arch.startswith("gfx9") else "wmma"
    assert f"__builtin_amdgcn_{family}_" in src
    assert ("_w32_gfx12(" in src) == (arch in RDNA4_ARCHS)  # gfx12's own builtins, only there
    _, image = KernelImage.unpack(HIPCompiler(arch).compile(src))
    path = tmp_path / "k_tc.hsaco"
    path.write_bytes(image)
    text = subprocess.run([OBJDUMP, "-d", str(path)], capture_output=True, text=True, timeout=60).stdout
    assert re.search(rf"\b{instruction}\b", text), f"{arch}: no {instruction} in the disassembly"
    if family == "wmma":  # A and B take 8 VGPRs of packed halves on gfx11 (16 per lane), 4 on gfx12 (8 per lane)
        operands = re.findall(rf"\b{instruction}\s+v\[\d+:\d+\],\s*v\[(\d+):(\d+)\],\s*v\[(\d+):(\d+)\]", text)
        widths = {
            int(hi) - int(lo) + 1 for a_lo, a_hi, b_lo, b_hi in operands for lo, hi in ((a_lo, a_hi), (b_lo, b_hi))
        }
        assert operands and widths == {4 if arch in RDNA4_ARCHS else 8}, f"{arch}: A/B operands of {widths} VGPRs"
