"""MetalRenderer on real kernels of the pipeline (ASTs scheduled on PYTHON, lowered for the Metal renderer): the
rendered text (signature with bound buffers, launch ids, barrier, threadgroup arrays, vector types, conversions);
then all kernels compiled by Apple's compiler (``xcrun metal``, macOS only) and, anywhere clang is, an approximate
syntax and name check against a small stand-in ``metal_stdlib`` (it catches undeclared names and bad swizzles, not
Metal's address-space rules). No GPU needed."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

pytest.importorskip("tinycore_metal", reason="tinycore-metal is not installed (pip install -e plugins/tinycore_metal)")
from tinycore_metal.renderer import METAL_MSL, MetalRenderer  # noqa: E402

from tinycore.dtype import dtypes  # noqa: E402
from tinycore.testkit.kernels import render_cases  # noqa: E402


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    """Case name -> the MSL source of its (single) kernel, named ``k_<case>``."""
    return render_cases(MetalRenderer())


def test_renderer_attributes():
    r = MetalRenderer("apple9")
    assert (r.device, r.arch, r.dialect) == ("METAL", "apple9", METAL_MSL)
    assert r.has_local and r.has_shared and r.tensor_cores == []
    assert dtypes.float64 not in r.supported_dtypes and dtypes.bfloat16 in r.supported_dtypes


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


def test_grouped_reduce_has_threadgroup_memory_and_barrier(sources):
    src = sources["grouped_sum"]
    assert "threadgroup float smem0[16];" in src
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
    assert "fma(" in sources["matmul"]
    assert "as_type<int>((float)(" in sources["bitcast"] and "as_type<short>((half)(" in sources["bitcast16"]
    assert "INFINITY" in sources["specials"] and "NAN" in sources["specials"]


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


# An approximate Metal for clang: address spaces defined away, `kernel` as `extern "C"`, vectors as small structs
# with Metal's constructors and swizzle-free lanes, the `metal::` functions used by the dialect declared.
STAND_IN_METAL_STDLIB = """\
#pragma once
#define kernel extern "C"
#define device
#define threadgroup
#define constant
#define INFINITY __builtin_inff()
#define NAN __builtin_nanf("")
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef _Float16 half;
struct bfloat { unsigned short bits; bfloat() = default; explicit bfloat(float); explicit operator float() const; };
template <typename T> struct tc_vec2 { T x, y; tc_vec2() = default; tc_vec2(T a, T b); };
template <typename T> struct tc_vec3 { T x, y, z; tc_vec3() = default; tc_vec3(T a, T b, T c); };
template <typename T> struct tc_vec4 { T x, y, z, w; tc_vec4() = default; tc_vec4(T a, T b, T c, T d); };
#define TC_VECTORS(T) typedef tc_vec2<T> T##2; typedef tc_vec3<T> T##3; typedef tc_vec4<T> T##4;
TC_VECTORS(bool) TC_VECTORS(char) TC_VECTORS(uchar) TC_VECTORS(short) TC_VECTORS(ushort) TC_VECTORS(int)
TC_VECTORS(uint) TC_VECTORS(long) TC_VECTORS(ulong) TC_VECTORS(half) TC_VECTORS(bfloat) TC_VECTORS(float)
namespace metal {
enum class mem_flags { mem_none, mem_device, mem_threadgroup };
void threadgroup_barrier(mem_flags flags);
template <typename T, typename F> T as_type(F x) {
  static_assert(sizeof(T) == sizeof(F), "as_type keeps the size");
  return __builtin_bit_cast(T, x);
}
float trunc(float x);
float fma(float a, float b, float c);
namespace precise { float sqrt(float x); float exp2(float x); float log2(float x); float sin(float x); }
}
"""


def _clang() -> str | None:
    names = ("clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang")
    return next((path for path in map(shutil.which, names) if path), None)


def test_every_kernel_passes_a_stand_in_metal_syntax_check(sources, tmp_path):
    clang = _clang()
    if clang is None:
        pytest.skip("clang (15 or later) is not on PATH (the stand-in Metal syntax check needs it)")
    (tmp_path / "metal_stdlib").write_text(STAND_IN_METAL_STDLIB)
    (tmp_path / "kernels.cpp").write_text("\n".join(sources.values()))
    cmd = [clang, "-x", "c++", "-std=c++17", "-fsyntax-only", "-Werror", "-Wno-unknown-attributes", "-I", "."]
    done = subprocess.run([*cmd, "kernels.cpp"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]


def test_the_stand_in_check_catches_a_bad_name(sources, tmp_path):
    clang = _clang()
    if clang is None:
        pytest.skip("clang (15 or later) is not on PATH (the stand-in Metal syntax check needs it)")
    (tmp_path / "metal_stdlib").write_text(STAND_IN_METAL_STDLIB)
    (tmp_path / "bad.cpp").write_text(sources["broadcast"].replace("lid.y", "lid.q"))
    cmd = [clang, "-x", "c++", "-std=c++17", "-fsyntax-only", "-Wno-unknown-attributes", "-I", ".", "bad.cpp"]
    assert subprocess.run(cmd, cwd=tmp_path, capture_output=True).returncode != 0
