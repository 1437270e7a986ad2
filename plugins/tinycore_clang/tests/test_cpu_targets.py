"""Kernels for x86-64 CPUs that are not at hand: the heuristics size their tiles from the target's vector registers
(`tinycore_clang.renderer.vector_shape`), and LLVM compiles them for that CPU (`LlvmliteToolchain(cpu=...)`), so the
assembly can be read here: the register-blocked matmul and conv use the target's widest registers, fused
multiply-adds, and spill nothing. Behaviour only: no instruction counts of one LLVM version."""

from __future__ import annotations

import re

import pytest
from tinycore_clang import libllvm
from tinycore_clang.llvm_renderer import LLVMRenderer
from tinycore_clang.llvmlite_toolchain import LlvmliteToolchain
from tinycore_clang.renderer import vector_shape

from tinycore import Tensor
from tinycore.codegen import get_program

pytestmark = pytest.mark.skipif(
    libllvm.llvmlite_library() is None, reason="llvmlite is not installed (pip install llvmlite)"
)

# (-march name, the register class its widest float vectors use, registers of that class)
TARGETS = [("haswell", "ymm", 16), ("skylake-avx512", "zmm", 32), ("znver4", "zmm", 32)]


def kernel_sources(arch: str, build) -> list[tuple[str, str]]:
    """``(kernel name, LLVM IR)`` of every kernel of `build()` (scheduled on PYTHON) lowered for CPU `arch`."""
    renderer = LLVMRenderer(arch=arch, threads=2, typed_pointers=False)
    out = []
    for item in build().schedule():
        if item.ast is not None:
            program = get_program(item.ast, renderer)
            out.append((program.name, renderer.render(program.uops, program.function_name)))
    return out


WORKLOADS = {
    "matmul": lambda: Tensor.empty(512, 512, device="PYTHON") @ Tensor.empty(512, 512, device="PYTHON"),
    "conv": lambda: Tensor.empty(8, 64, 56, 56, device="PYTHON").conv2d(
        Tensor.empty(64, 64, 3, 3, device="PYTHON"), padding=1
    ),
}


def test_vector_shapes_of_known_targets() -> None:
    assert [vector_shape(arch) for arch, _, _ in TARGETS] == [(32, 16), (64, 32), (64, 32)]
    assert vector_shape("some-future-cpu") == (32, 16)  # unknown: AVX2, which every x86-64-v3 CPU has


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
@pytest.mark.parametrize("arch, register, count", TARGETS)
def test_register_blocked_kernels_use_the_targets_registers_and_never_spill(
    arch: str, register: str, count: int, workload: str
) -> None:
    chain = LlvmliteToolchain(cpu=arch)
    for name, src in kernel_sources(arch, WORKLOADS[workload]):
        asm = chain.assembly(src)
        assert not re.search(r"\b(Spill|Reload)\b", asm), f"{name} for {arch} spills registers"
        assert re.search(rf"vfmadd\w*ps\s[^\n]*%{register}", asm), f"{name} for {arch}: no {register} FMA"
        used = {int(n) for n in re.findall(rf"%{register}(\d+)", asm)}
        assert max(used) < count  # (the register file of the target, not a wider one)
        if workload == "matmul":  # the tile holds about half the register file as accumulators
            accumulators = len(set(re.findall(rf"vfmadd231ps\s[^\n]*%({register}\d+)$", asm, re.M)))
            assert count // 2 <= accumulators <= count * 3 // 4, (name, arch, accumulators)


@pytest.mark.parametrize("arch, vectors", [("haswell", 1), ("skylake-avx512", 2)])
def test_a_convolution_row_takes_two_vectors_with_32_registers(arch: str, vectors: int) -> None:
    """A 3x3 convolution's 56 output columns: AVX2 (16 registers) takes one 8-lane vector per tile row (56 = 7 x 8),
    AVX-512 (32 registers) two 16-lane vectors (overlapping tiles of 32 columns; half the weight broadcasts per FMA)."""
    from tinycore.codegen import get_kernel
    from tinycore.codegen.heuristic import hand_coded_optimizations
    from tinycore.codegen.kernel import OptOps

    renderer = LLVMRenderer(arch=arch, threads=2, typed_pointers=False)
    lanes = renderer.vector_bytes // 4
    (item,) = [i for i in WORKLOADS["conv"]().schedule() if i.ast is not None and len(i.ast.toposort()) > 20]
    k = get_kernel(item.ast, renderer)
    hand_coded_optimizations(k)
    overlap = [o.arg[0] for o in k.applied_opts if o.op is OptOps.OVERLAP]
    column_lanes = overlap[0] if overlap else k.applied_opts[0].arg  # the column axis is upcast first
    assert column_lanes == vectors * lanes, k.applied_opts
