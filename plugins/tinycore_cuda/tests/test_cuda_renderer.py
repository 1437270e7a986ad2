"""CUDARenderer on real kernels of the pipeline (ASTs scheduled on PYTHON, lowered for the CUDA renderer): the
rendered text (launch ids, barrier, shared arrays, vector types, conversions), then every kernel compiled to PTX by
nvcc in one call (skipped without nvcc). No GPU needed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("tinycore_cuda", reason="tinycore-cuda is not installed (pip install -e plugins/tinycore_cuda)")
from tinycore_cuda.renderer import CUDA_C, CUDA_TENSOR_CORES, CUDARenderer  # noqa: E402

from tinycore.dtype import dtypes  # noqa: E402
from tinycore.testkit.kernels import render_cases  # noqa: E402
from tinycore.uop.ops import Ops, UOp  # noqa: E402


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    """Case name -> the CUDA source of its (single) kernel, named ``k_<case>``."""
    return render_cases(CUDARenderer("sm_90"))


def body(src: str) -> str:
    """The kernel without the prelude."""
    return src[src.index('extern "C"') :]


def test_renderer_attributes():
    r = CUDARenderer("sm_90")
    assert (r.device, r.arch, r.dialect) == ("CUDA", "sm_90", CUDA_C)
    assert r.has_local and r.has_shared and r.local_max == (1024, 1024, 64) and r.shared_max == 49152
    assert r.tensor_cores == CUDA_TENSOR_CORES
    assert r.supported_dtypes >= {dtypes.float16, dtypes.bfloat16, dtypes.float64}
    assert r.native_ops == {"SQRT", "TRUNC", "EXP2", "LOG2", "SIN", "MULACC", "RECIP", "FDIV", "NEG", "SUB"}


def test_signature_launch_ids_and_float4(sources):
    src = sources["broadcast"]
    assert src.startswith("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n")
    assert (
        'extern "C" __global__ void k_broadcast(float* __restrict__ data0, const float* __restrict__ data1, '
        "const float* __restrict__ data2) {" in src
    )
    assert "= blockIdx.x;" in src and "= threadIdx.x;" in src and "= threadIdx.y;" in src
    assert re.search(r"float4 ld\d+ = \*\(\(const float4\*\)\(\(data1\+alu\d+\)\)\);", src)
    assert re.search(r"\*\(\(float4\*\)\(\(data0\+alu\d+\)\)\) = make_float4\(", src)


def test_grouped_reduce_has_shared_memory_and_barrier(sources):
    src = sources["grouped_sum"]
    assert "__shared__ __align__(16) float smem0[16];" in src
    assert src.count("__syncthreads();") == 1 and "threadIdx.x" in src
    row = body(sources["row_sum"])  # grouped by the heuristics over one warp of lanes: warp shuffles, no shared memory
    assert "__shfl_xor_sync(0xffffffffu, " in row and "__syncthreads();" not in row and "__shared__" not in row


def test_matmul_upcasts_to_vector_loads_and_fmaf(sources):
    src = body(sources["matmul"])
    assert "*((const float4*)((data1+" in src and "make_float4(" in src and "fmaf(" in src


def test_types_and_conversions(sources):
    half = body(sources["half_bf16"])
    assert "const half* __restrict__ data1" in half
    assert "tc_from_float<half>(" in half and "tc_from_float<__nv_bfloat16>(" in half and "tc_to_float(" in half
    assert "half4 ld2 = *((const half4*)((data1+alu1)));" in half  # the prelude's 8-byte half4: one access
    i64 = body(sources["int64"])
    assert "long long* __restrict__ data0" in i64 and "(unsigned long long)" in i64 and "longlong4" not in i64
    assert "*((const longlong2*)(((data1+alu1)+2)))" in i64  # 4 lanes of 8 bytes: two 16-byte pieces
    assert "bool* __restrict__ data0" in sources["bool"] and "bool4" not in sources["bool"]
    u8 = body(sources["uint8_int8"])
    assert "uchar4 ld" in u8 and "*((const uchar4*)(" in u8 and "((signed char)(" in u8
    f64 = body(sources["float64"])
    assert "sqrt(" in f64 and "exp2(" in f64 and "sqrtf" not in f64
    assert "sinf(" in sources["transcendental"] and "exp2f(" in sources["transcendental"]
    assert "tc_bitcast<int, float>(" in sources["bitcast"] and "tc_bitcast<short, half>(" in sources["bitcast16"]
    assert "const int n)" in sources["variable"]
    assert "INFINITY" in body(sources["specials"]) and "NAN" in body(sources["specials"])
    assert "#define INFINITY" in sources["specials"]


def test_vector_type_of_every_dtype(sources):
    wanted = {"int8": "char4", "uint8": "uchar4", "int16": "short4", "uint16": "ushort4", "int32": "int4",
              "uint32": "uint4", "int64": "longlong2", "uint64": "ulonglong2", "float64": "double2"}  # fmt: skip
    for name, vector in wanted.items():
        src = body(sources[f"add_{name}"])
        assert f"*((const {vector}*)(" in src and f"make_{vector}(" in src, name


def test_unaligned_vector_access_goes_lane_by_lane():
    buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(64), (), 0)
    gid = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, 15),), "gidx0")
    base = gid * UOp.const(dtypes.int32, 4)

    def kernel(offset: int) -> str:
        idx = base + UOp.const(dtypes.int32, offset) if offset else base
        ld = UOp(Ops.LOAD, dtypes.float32.vec(4), (buf.index(idx),))
        st = buf.index(idx).store(ld)
        uops = [buf, gid.src[0], gid, base.src[1], base, *([idx.src[1], idx] if offset else []), buf.index(idx), ld, st]
        return body(CUDARenderer().render(uops, "k"))

    assert "float4" in kernel(0) and "float4" in kernel(4)
    assert "float4" not in kernel(1) and "(data0+((gidx0*4)+1))[3] = ld" in kernel(1)


@pytest.fixture(scope="module")
def ptx(sources, tmp_path_factory) -> dict[str, str]:
    """Case name -> the PTX of its kernel: all kernels in one translation unit, compiled by nvcc once."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH (the CUDA toolkit compiles the rendered kernels to PTX)")
    folder: Path = tmp_path_factory.mktemp("cuda")
    (folder / "kernels.cu").write_text("\n".join(sources.values()))
    cmd = [nvcc, "--ptx", "-arch=sm_90", "-x", "cu", "--fmad=false", "-Werror", "all-warnings"]
    done = subprocess.run([*cmd, "kernels.cu", "-o", "kernels.ptx"], cwd=folder, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    text = (folder / "kernels.ptx").read_text()
    parts = re.split(r"^\.visible \.entry (\w+)\(", text, flags=re.M)
    return {name.removeprefix("k_"): code for name, code in zip(parts[1::2], parts[2::2])}


def test_every_kernel_compiles_with_nvcc(ptx, sources):
    assert set(ptx) == set(sources)


def test_ptx_has_the_barrier_the_shared_array_and_vector_accesses(ptx):
    assert "bar.sync" in ptx["grouped_sum"] and ".shared .align 16 .b8" in ptx["grouped_sum"]
    assert "shfl.sync.bfly.b32" in ptx["row_sum"] and "bar.sync" not in ptx["row_sum"]
    assert re.search(r"ld\.global(\.nc)?\.v4\.f32", ptx["broadcast"]) and "st.global.v4.f32" in ptx["broadcast"]
    assert re.search(r"ld\.global(\.nc)?\.v4\.f32", ptx["matmul"]) and "fma.rn.f32" in ptx["matmul"]
    assert re.search(r"ld\.global(\.nc)?\.v4\.u8", ptx["uint8_int8"])
    assert "bar.sync" not in ptx["broadcast"]


def test_ptx_conversions_and_math(ptx):
    assert "cvt.rn.f16.f32" in ptx["half_bf16"] and "cvt.f32.f16" in ptx["half_bf16"]
    assert "cvt.rn.bf16.f32" in ptx["half_bf16"]
    assert "sqrt.rn.f64" in ptx["float64"] and "sqrt.rn.f32" in ptx["transcendental"]
    assert re.search(r"ld\.global(\.nc)?\.v4\.u16", ptx["half_bf16"])  # half4: one 8-byte load
    assert re.search(r"ld\.global(\.nc)?\.v2\.u64", ptx["int64"]) and "st.global.v2.u64" in ptx["int64"]
    assert re.search(r"ld\.global(\.nc)?\.v2\.f64", ptx["add_float64"])
