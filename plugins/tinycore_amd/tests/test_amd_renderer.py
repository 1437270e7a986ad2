"""AMDRenderer on real kernels of the pipeline (ASTs scheduled on PYTHON, lowered for the AMD renderer): the
rendered text (launch ids, barrier, shared arrays, vector types, conversions), then every kernel compiled for gfx90a
in one call by clang (``-x hip -nogpulib -nogpuinc``, no HIP SDK needed) or hipcc, skipped when neither is on PATH.
No GPU needed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("tinycore_amd", reason="tinycore-amd is not installed (pip install -e plugins/tinycore_amd)")
from tinycore_amd.renderer import CDNA_TENSOR_CORES, HIP_C, AMDRenderer  # noqa: E402

from tinycore.testkit.kernels import render_cases  # noqa: E402

ARCH = "gfx90a"  # known to every clang since 13 and to hipcc


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    """Case name -> the HIP source of its (single) kernel, named ``k_<case>``."""
    return render_cases(AMDRenderer(ARCH))


def body(src: str) -> str:
    """The kernel without the prelude."""
    return src[src.index('extern "C"') :]


def test_renderer_attributes():
    r = AMDRenderer(ARCH)
    assert (r.device, r.arch, r.dialect) == ("AMD", ARCH, HIP_C)
    assert r.has_local and r.has_shared and r.shared_max == 65536
    assert r.tensor_cores == CDNA_TENSOR_CORES and AMDRenderer(None).tensor_cores == []  # MFMA: per arch
    assert r.native_ops == {"SQRT", "TRUNC", "MULACC"}  # EXP2/LOG2/SIN: decomposed (no device libraries)


def test_signature_launch_ids_and_vectors(sources):
    src = sources["broadcast"]
    assert src.startswith("#ifndef TINYCORE_HIP_PRELUDE\n") and "#pragma clang fp contract(off)" in src
    assert 'extern "C" __attribute__((global)) void k_broadcast(float* __restrict__ data0, const float*' in src
    assert "= __builtin_amdgcn_workgroup_id_x();" in src and "= __builtin_amdgcn_workitem_id_y();" in src
    assert re.search(r"tc_vec<float, 4> ld\d+ = \*\(\(const tc_vec<float, 4>\*\)\(\(data1\+alu\d+\)\)\);", src)
    assert "= tc_vec<float, 4>{" in src
    assert "#include" not in src  # no HIP headers needed


def test_grouped_reduce_has_shared_memory_and_barrier(sources):
    src = sources["grouped_sum"]
    assert "__attribute__((shared, aligned(16))) float smem0[16];" in src
    assert src.count("__builtin_amdgcn_s_barrier();") == 1
    assert '__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier();' in src
    assert "*((tc_vec<float, 4>*)((smem0+" in sources["row_sum"]


def test_types_and_conversions(sources):
    half = body(sources["half_bf16"])
    assert "const _Float16* __restrict__ data1" in half and "tc_vec<_Float16, 4> ld" in half
    assert "((tc_bf16)(" in half and "((_Float16)(" in half and "((float)(" in half
    assert "tc_bitcast<unsigned short, tc_bf16>(" in sources["bitcast_bf16"]
    assert "tc_bitcast<int, float>(" in sources["bitcast"]
    assert "long long* __restrict__ data0" in sources["int64"] and "tc_vec<long long, 4>" not in sources["int64"]
    assert "tc_vec<bool" not in sources["bool"]
    assert "tc_vec<unsigned char, 4> ld" in sources["uint8_int8"]
    assert "__builtin_sqrt(" in sources["float64"] and "__builtin_exp2" not in sources["float64"]
    assert "__builtin_sqrtf(" in sources["transcendental"] and "__builtin_sin" not in sources["transcendental"]
    assert "__builtin_fmaf(" in sources["matmul"]
    assert "const int n)" in sources["variable"]
    assert "__builtin_inff()" in sources["specials"] and '__builtin_nanf("")' in sources["specials"]


def test_vector_type_of_every_dtype(sources):
    wanted = {"int8": "signed char, 4", "uint8": "unsigned char, 4", "int16": "short, 4", "uint16": "unsigned short, 4",
              "int32": "int, 4", "uint32": "unsigned int, 4", "int64": "long long, 2",
              "uint64": "unsigned long long, 2", "float64": "double, 2"}  # fmt: skip
    for name, vector in wanted.items():
        src = body(sources[f"add_{name}"])
        assert f"*((const tc_vec<{vector}>*)(" in src and f"= tc_vec<{vector}>{{" in src, name


def _hip_compiler() -> list[str] | None:
    """A command compiling HIP-style device code for AMDGPU without the HIP SDK, or None."""
    for name in ("clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang"):
        if shutil.which(name):
            return [name, "-x", "hip", f"--offload-arch={ARCH}", "-nogpulib", "-nogpuinc", "--cuda-device-only"]
    if shutil.which("hipcc"):
        return ["hipcc", "-x", "hip", f"--offload-arch={ARCH}", "-nogpulib", "-nogpuinc", "--cuda-device-only"]
    return None


@pytest.fixture(scope="module")
def assembly(sources, tmp_path_factory) -> dict[str, str]:
    """Case name -> the AMDGPU assembly of its kernel: all kernels in one translation unit, compiled once."""
    cmd = _hip_compiler()
    if cmd is None:
        pytest.skip("no HIP compiler: neither clang (15 or later) nor hipcc is on PATH")
    folder: Path = tmp_path_factory.mktemp("amd")
    (folder / "kernels.hip").write_text("\n".join(sources.values()))
    done = subprocess.run([*cmd, "-O3", "-S", "kernels.hip", "-o", "kernels.s"], cwd=folder, capture_output=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-4000:]
    text = (folder / "kernels.s").read_text()
    parts = re.split(r"^k_(\w+):", text, flags=re.M)  # each kernel's code runs from its label to the next one
    kernels = {name: code for name, code in zip(parts[1::2], parts[2::2])}
    kernels["<all>"] = text
    return kernels


def test_every_kernel_compiles_for_amdgpu(assembly, sources):
    assert set(assembly) - {"<all>"} == set(sources)  # clang 19 adds a __hip_cuid symbol: not a kernel
    assert all(f".amdhsa_kernel k_{name}" in assembly["<all>"] for name in sources)


def test_assembly_has_the_barrier_the_lds_and_vector_accesses(assembly):
    assert "s_barrier" in assembly["grouped_sum"] and "ds_write_b32" in assembly["grouped_sum"]
    assert "ds_write_b128" in assembly["row_sum"] and "ds_read_b128" in assembly["row_sum"]
    assert "global_load_dwordx4" in assembly["broadcast"] and "global_store_dwordx4" in assembly["broadcast"]
    assert "global_load_dwordx4" in assembly["matmul"] and "s_barrier" not in assembly["broadcast"]
    assert "v_cvt_f32_f16" in assembly["half_bf16"]
    assert re.search(r"v_sqrt_f64|v_rsq_f64", assembly["float64"])  # clang 19 refines v_rsq_f64 to a rounded sqrt
    assert not re.search(r"s_swappc|s_setpc", assembly["<all>"])  # no library calls
