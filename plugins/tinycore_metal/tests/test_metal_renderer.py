"""MetalRenderer on real kernels of the pipeline (every case of `tinycore.testkit.kernels`, ASTs scheduled on PYTHON
and lowered for the Metal renderer): every kernel renders; the rendered text (signature with bound buffers, launch
ids, barrier, aligned threadgroup arrays, vector types, conversions, simdgroup matrices); all kernels pass the
approximate syntax check (clang-19 with the stand-in ``metal_stdlib`` of ``tinycore_metal/stdlib_stub``), which
catches a bad name; and, on macOS only, Apple's compiler (``xcrun metal``) builds them. No GPU needed."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

pytest.importorskip("tinycore_metal", reason="tinycore-metal is not installed (pip install -e plugins/tinycore_metal)")
from tinycore_metal.compiler import find_clang, syntax_check  # noqa: E402
from tinycore_metal.renderer import METAL_MSL, METAL_TENSOR_CORES, MetalRenderer  # noqa: E402

from tinycore.dtype import dtypes  # noqa: E402
from tinycore.errors import CompileError  # noqa: E402
from tinycore.testkit.kernels import kernel_cases, render_cases  # noqa: E402

NO_CLANG = "clang-19 not installed"


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    """Case name -> the MSL source of its (single) kernel, named ``k_<case>``."""
    return render_cases(MetalRenderer())


def test_every_kernel_of_the_op_parity_suite_renders(sources):
    supported = {n for n, (_, _, used) in kernel_cases().items() if used <= MetalRenderer().supported_dtypes}
    assert set(sources) == supported and len(sources) >= 24
    assert "add_float64" not in sources  # Metal has no float64: that case is not for this renderer
    for name, src in sources.items():
        assert f"kernel void k_{name}(" in src, name


def test_renderer_attributes():
    r = MetalRenderer("apple9")
    assert (r.device, r.arch, r.dialect) == ("METAL", "apple9", METAL_MSL)
    assert r.has_local and r.has_shared and r.tensor_cores == METAL_TENSOR_CORES
    assert dtypes.float64 not in r.supported_dtypes and dtypes.bfloat16 in r.supported_dtypes
    assert r.native_ops == {"SQRT", "TRUNC", "EXP2", "LOG2", "SIN", "MULACC"}


def test_signature_binds_buffers_then_variables_then_ids(sources):
    src = sources["broadcast"]
    assert src.startswith("#include <metal_stdlib>\nusing namespace metal;\n")
    assert (
        "kernel void k_broadcast(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], "
        "const device float* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]], "
        "uint3 lid [[thread_position_in_threadgroup]]) {" in src
    )
    assert "= gid.x;" in src and "= lid.x;" in src and "= lid.y;" in src
    assert re.search(r"float4 ld\d+ = \*\(\(const device float4\*\)\(\(data1\+alu\d+\)\)\);", src)
    assert re.search(r"\*\(\(device float4\*\)\(\(data0\+alu\d+\)\)\) = float4\(", src)
    assert "const device float* data1 [[buffer(1)]], constant int& n [[buffer(2)]], uint3 gid" in sources["variable"]


def test_grouped_reduce_has_aligned_threadgroup_memory_and_barrier(sources):
    src = sources["grouped_sum"]
    assert "threadgroup __attribute__((aligned(16))) float smem0[16];" in src
    assert src.count("threadgroup_barrier(mem_flags::mem_threadgroup);") == 1
    row = sources["row_sum"]
    assert "*((threadgroup float4*)((smem0+" in row and "*((const threadgroup float4*)((smem0+" in row


def test_types_and_conversions(sources):
    half = sources["half_bf16"]
    assert "const device half* data1" in half and "half4 ld" in half
    assert "((bfloat)(" in half and "((half)(" in half and "((float)(" in half
    i64 = sources["int64"]
    assert "device long* data0" in i64 and "(ulong)" in i64 and "long long" not in i64 and "ll)" not in i64
    assert "*((device bool4*)(" in sources["bool"]
    assert "uchar4 ld" in sources["uint8_int8"] and "((char)(" in sources["uint8_int8"]
    tr = sources["transcendental"]
    assert "precise::sin(" in tr and "precise::exp2(" in tr and "precise::sqrt(" in tr
    assert "as_type<int>((float)(" in sources["bitcast"] and "as_type<short>((half)(" in sources["bitcast16"]
    assert "as_type<ushort>((bfloat)(" in sources["bitcast_bf16"]
    assert "INFINITY" in sources["specials"] and "NAN" in sources["specials"]


def test_the_float_matmul_uses_simdgroup_matrices(sources):
    src = sources["matmul"]  # the default heuristics pick the float32 simdgroup tensor core
    assert "simdgroup_float8x8 sg_a" in src and "simdgroup_multiply_accumulate(" in src
    assert re.search(r"sg_a\d+\.thread_elements\(\)\[1\] = ", src) and "= sg_c" in src
    assert "= lid.x; /* 32 */" in src  # one SIMD-group of 32 threads per fragment


def test_vector_type_of_every_dtype(sources):
    wanted = {"int8": "char4", "uint8": "uchar4", "int16": "short4", "uint16": "ushort4", "int32": "int4",
              "uint32": "uint4", "int64": "long2", "uint64": "ulong2"}  # fmt: skip
    for name, vector in wanted.items():
        src = sources[f"add_{name}"]
        assert f"*((const device {vector}*)(" in src and f"= {vector}(" in src, name


def test_every_kernel_compiles_with_xcrun_metal(sources, tmp_path):
    if shutil.which("xcrun") is None:
        pytest.skip("xcrun is not on PATH (Apple's Metal compiler runs on macOS only)")
    (tmp_path / "kernels.metal").write_text("\n".join(sources.values()))
    cmd = ["xcrun", "-sdk", "macosx", "metal", "-std=metal3.1", "-c", "kernels.metal", "-o", "kernels.air"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]


def test_every_kernel_passes_the_stand_in_syntax_check(sources):
    if find_clang() is None:
        pytest.skip(NO_CLANG)
    syntax_check("\n".join(sources.values()))  # one translation unit: the kernels also coexist
    for src in sources.values():
        syntax_check(src)  # and each alone, as the runtime compiler sees it


def test_the_stand_in_check_catches_bad_names_lanes_and_types(sources):
    if find_clang() is None:
        pytest.skip(NO_CLANG)
    broken = {
        "a bad lane": sources["broadcast"].replace("lid.y", "lid.q"),
        "an undeclared name": sources["grouped_sum"].replace("threadgroup_barrier(", "threadgroup_barier("),
        "a vector with too many lanes": sources["broadcast"].replace("= float4(", "= float2(", 1),
        "a bad simdgroup call": sources["matmul"].replace("simdgroup_multiply_accumulate(sg_c", "simdgroup_multiply("),
    }
    for what, src in broken.items():
        with pytest.raises(CompileError, match="stand-in metal_stdlib"):
            syntax_check(src)
            pytest.fail(f"the check let {what} through")


def test_a_missing_clang_is_a_clear_error(monkeypatch):
    import tinycore_metal.compiler as compiler

    monkeypatch.setattr(compiler, "find_clang", lambda: None)
    with pytest.raises(CompileError, match="clang-19 not installed.*fix: apt-get install clang-19"):
        syntax_check("kernel void k() {}")
