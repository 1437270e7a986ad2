"""The LLVM IR renderer of the CLANG device's ``llvm`` backend (`tinycore_clang.llvm_renderer.LLVMRenderer`).

- render level (no compile): the ABI (signatures, trampoline, info string equal to the C renderer's), the marker,
  pointer attributes, non-temporal stores, CUSTOM refused;
- the hand-built kernel suite of ``test_clang_kernels.py`` (every dtype and ALU op against `exec_alu`, the cast matrix,
  wrap-around, division, shifts, 16-bit floats, constants, loops, gated loads/stores, vectors, variables) run again
  with its ``run_uops`` fixture pointing at an llvm-backed device;
- bit-for-bit agreement with the C backend on the same programs (integer edge cases of every width, 16-bit floats,
  bool, vectors);
- real Tensor programs (matmul, conv, reductions, softmax, half, ints, padding, streaming stores) realized on an
  llvm-backed device and compared with numpy, and the conformance kit's core and full tiers in a child process with
  ``CLANG_BACKEND=llvm``;
- opaque-pointer IR (the form for LLVM >= 15) compiled and run by LLVM 15 when it is installed.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from tinycore_clang.renderer import ClangRenderer, ClangRenderError
from tinycore_clang.testing import ProgramBuilder, Runner, elementwise, linearize, loop, np_dtype

from tinycore.dtype import ALL_SCALARS, AddrSpace, dtypes
from tinycore.uop.ops import AxisType, Ops, UOp

NO_LLVM = "no libLLVM (>= 14) shared library on this machine (apt-get install clang)"
NO_LINKER = "no linker (ld) on PATH (apt-get install binutils)"
LLVM_DEVICE = "CLANG:7"  # an instance of CLANG opened with CLANG_BACKEND=llvm for the Tensor-level tests
RNG = np.random.default_rng(77)
I32 = dtypes.int32


def c32(value: int) -> UOp:
    """An int32 constant."""
    return UOp.const(I32, value)


def renderer(typed: bool | None = None):
    """An LLVMRenderer (pointer form of the installed library unless `typed` says)."""
    from tinycore_clang.llvm_renderer import LLVMRenderer

    return LLVMRenderer(typed_pointers=typed)


def require_llvm() -> None:
    """Skip unless libLLVM and a linker are installed."""
    from tinycore_clang.libllvm import find_library
    from tinycore_clang.toolchain import find_linker

    if not find_library().ok:
        pytest.skip(NO_LLVM)
    if find_linker() is None:
        pytest.skip(NO_LINKER)


@pytest.fixture(scope="module")
def llvm_clang():
    """A CLANG device with the llvm backend (IR renderer + in-process LLVM compiler)."""
    require_llvm()
    from tinycore_clang.device import ClangDevice

    device = ClangDevice("CLANG", backend="llvm")
    assert type(device.renderer).__name__ == "LLVMRenderer"
    return device


@pytest.fixture(scope="module")
def run_uops(llvm_clang):
    """`Runner` on the llvm-backed device (overrides conftest's C one for the suite imported below)."""
    return Runner(llvm_clang)


@pytest.fixture(scope="module")
def run_c(clang_c):
    """`Runner` on the C backend (pinned: the session's `clang` device follows ``CLANG_BACKEND``)."""
    return Runner(clang_c)


@pytest.fixture(scope="module")
def llvm_device(request):
    """The name of an llvm-backed CLANG instance opened through the device registry (for Tensor programs)."""
    require_llvm()
    from tinycore.device import Device

    patch = pytest.MonkeyPatch()
    patch.setenv("CLANG_BACKEND", "llvm")
    try:
        device = Device[LLVM_DEVICE]
    finally:
        patch.undo()
    if getattr(device, "backend", None) != "llvm":
        pytest.skip(f"{LLVM_DEVICE} was already opened with the C backend in this process")
    return LLVM_DEVICE


# ----- the C backend's hand-built kernel suite, on the llvm backend -----
def _load_kernel_suite():
    path = pathlib.Path(__file__).with_name("test_clang_kernels.py")
    spec = importlib.util.spec_from_file_location("_tinycore_clang_kernel_suite", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


_SUITE = _load_kernel_suite()
for _name in dir(_SUITE):  # collected here again; their `run_uops` is this module's llvm fixture
    if _name.startswith("test_") and _name != "test_gated_load_never_touches_memory":
        globals()[f"{_name}_llvm"] = getattr(_SUITE, _name)
sample, to_py, same_value = _SUITE.sample, _SUITE.to_py, _SUITE.same_value


# ----- render level -----
def matmul_like_program() -> list[UOp]:
    """A threaded kernel with a register accumulator, a variable and a read-only input."""
    out = UOp.define_global(0, dtypes.float32, 64)
    inp = UOp.define_global(1, dtypes.float32, 64)
    unused_gap = UOp.define_global(3, dtypes.int64, 4)
    n_var = UOp.variable("n", 1, 8, I32)
    q_var = UOp.variable("q", 0, 8, dtypes.index)
    core = UOp(Ops.SPECIAL, I32, (c32(4),), "core_id")
    acc = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1, AddrSpace.REG), (), 0)
    b = ProgramBuilder()
    b.add(out, inp, unused_gap, acc)
    init = b.add(acc.index(c32(0)).store(UOp.const(dtypes.float32, 0.0)))
    j = b.add(UOp(Ops.RANGE, I32, (n_var,), (1, AxisType.REDUCE)))
    x = inp.index(core * c32(8) + j).load()
    b.add(acc.index(c32(0)).store(acc.after(init).index(c32(0)).load() + x).end(j))
    total = acc.after(b.uops[-1]).index(c32(0)).load()
    b.add(out.index(core + q_var.cast(I32)).store(total))
    b.add(unused_gap.index(c32(0)).store(UOp.const(dtypes.int64, 1)))
    return b.uops


def test_abi_matches_the_c_renderer():
    prog = matmul_like_program()
    ir = renderer(typed=False).render(prog, name="kern")
    c_src = ClangRenderer().render(prog, name="kern")
    info = next(line for line in c_src.splitlines() if "_tc_info[]" in line).split('"')[1]
    assert info == "tc1 bufs=4 vars=iq cores=4"
    assert f'@kern_tc_info = dso_local constant [{len(info) + 1} x i8] c"{info}\\00"' in ir
    assert ir.splitlines()[0] == "; tinycore-clang kernel kern"
    signature = next(line for line in ir.splitlines() if line.startswith("define dso_local void @kern("))
    assert "ptr noalias nocapture %data0" in signature  # stored to: writable
    assert "ptr noalias nocapture readonly %data1" in signature  # only loaded
    assert "ptr noalias nocapture readnone %unused2" in signature
    assert signature.index("%data3") < signature.index("i32 %var_n") < signature.index("i64 %var_q")
    assert signature.endswith("i32 %core_id) #0 {")
    assert (
        "define dso_local void @kern_tc(ptr nocapture readonly %bufs, ptr nocapture readonly %vals, i32 %core_id)" in ir
    )
    assert "trunc i64 %v0 to i32" in ir and "%v1 = load i64" in ir  # int vars truncated, index vars passed whole
    assert "noinline" in ir.split("attributes #0", 1)[1].splitlines()[0]
    for forbidden in ("target triple", "target datalayout", "fast", "nnan", "ninf", "contract", "reassoc"):
        assert forbidden not in ir


def test_declarations_equal_the_c_renderer():
    """The optimizer reads these: equal values make it take identical decisions for both backends."""
    llvm, c = renderer(), ClangRenderer()
    names = "device native_ops supported_dtypes vector_bytes gemm_panel_bytes threads supports_float4 has_local"
    for attr in (*names.split(), "has_shared", "has_threads", "tensor_cores", "global_max"):
        assert getattr(llvm, attr) == getattr(c, attr), attr


def test_typed_pointer_form_has_no_opaque_pointers():
    ir = renderer(typed=True).render(matmul_like_program(), name="kern")
    code = "\n".join(line for line in ir.splitlines() if not line.startswith(("@", ";")))
    assert not re.search(r"(?<![%@\w.])ptr\b", code)
    assert "float* noalias nocapture readonly %data1" in ir and "i8** nocapture readonly %bufs" in ir


def test_custom_c_code_is_refused_with_the_way_out():
    out = UOp.define_global(0, I32, 1)
    custom = UOp(Ops.CUSTOM, I32, (), "__builtin_popcount(7)")
    with pytest.raises(ClangRenderError, match="CLANG_BACKEND=c"):
        renderer().render(linearize(out.index(c32(0)).store(custom)))


def test_name_from_the_sink_and_identifier_cleanup():
    prog = linearize(UOp.define_global(0, I32, 1).index(c32(0)).store(c32(1)))
    sink = UOp(Ops.SINK, dtypes.void, (prog[-1],), "r_3:4")
    ir = renderer().render([*prog, sink])
    assert ir.startswith("; tinycore-clang kernel r_3_4\n") and "@r_3_4_tc_info" in ir


def test_index_math_is_nsw_and_value_math_wraps():
    n = 16
    out = UOp.define_global(0, I32, n)
    inp = UOp.define_global(1, I32, n)
    i = loop(n)
    value = inp.index(i * c32(1) + c32(0)).load() * c32(3) + c32(1)
    ir = renderer().render(linearize(out.index(i).store(value).end(i)))
    assert "mul i32 %ld" in ir and "add i32 %" in ir  # value arithmetic: no nsw
    assert "add nsw i32 %ridx" in ir  # the loop counter and addresses stay signed
    assert "sdiv" not in ir and "sext i32" in ir


def test_streaming_stores_are_non_temporal_when_aligned():
    n = 4 << 20  # 16 MiB of float32
    f8 = dtypes.float32.vec(8)
    out = UOp.define_global(0, dtypes.float32, n)
    inp = UOp.define_global(1, dtypes.float32, n)
    i = loop(n // 8)
    base = i * c32(8)
    value = UOp(Ops.CAST, f8.ptr(n), (inp.index(base),)).load()
    store = UOp(Ops.CAST, f8.ptr(n), (out.index(base),)).store(value + value)
    ir = renderer().render(linearize(store.end(i)))
    assert "!nontemporal !0" in ir and "align 32, !nontemporal" in ir and "!0 = !{i32 1}" in ir
    assert "and i64" in ir  # the alignment test before the streaming store
    assert ir.count("@llvm.x86.sse.sfence()") == 2  # declared and called once, at the end


def test_every_scalar_dtype_renders():
    for dtype in ALL_SCALARS:
        if dtype == dtypes.bool:
            continue
        prog = elementwise(Ops.ADD, [dtype, dtype], dtype, 8)
        ir = renderer().render(prog)
        assert "ret void" in ir


# ----- against the C backend, bit for bit -----
INT_DTYPES = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
              dtypes.uint64]  # fmt: skip


def edge_ints(dtype, n):
    """Random values of the whole range with the extremes, 0, +-1 and small divisors up front."""
    info = np.iinfo(np_dtype(dtype))
    values = RNG.integers(info.min, info.max, n, endpoint=True, dtype=np_dtype(dtype))
    head = [info.min, info.max, 0, 1, info.max - 1, 2, 3, 7]
    if info.min < 0:
        head += [-1, info.min + 1, -7]
    values[: len(head)] = head
    return values


def test_integer_ops_of_every_width_equal_the_c_backend(run_uops, run_c):
    """Wrap-around, division by 0 and by -1 (also of MIN), shifts by negative and too large amounts, on every
    integer width, scalar and 4-wide: the llvm and C backends agree bit for bit."""
    n = 64
    programs, cases = [], []
    ops = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.SHL, Ops.SHR, Ops.AND, Ops.XOR, Ops.CMPLT]
    for dtype in INT_DTYPES:
        for op in ops:
            a = edge_ints(dtype, n)
            b = edge_ints(dtype, n)[::-1].copy()
            if op in (Ops.SHL, Ops.SHR):
                b = RNG.integers(-3, dtype.itemsize * 8 + 4, n).astype(np_dtype(dtype))
            if op in (Ops.IDIV, Ops.MOD):  # every special divisor against every special dividend
                b[:8] = [0, 0, 0, 0, 1, 1, 1, 1]
                if dtype in (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64):
                    b[8:12] = -1
                    a[8:12] = [np.iinfo(np_dtype(dtype)).min, -1, 5, -5]
            out_dtype = dtypes.bool if op is Ops.CMPLT else dtype
            programs.append((elementwise(op, [dtype, dtype], out_dtype, n), [np.zeros(n, np_dtype(out_dtype)), a, b]))
            cases.append((dtype, op))
    llvm_results = run_uops.many(programs)
    c_results = run_c.many(programs)
    for (dtype, op), got, want in zip(cases, llvm_results, c_results):
        np.testing.assert_array_equal(got[0], want[0], err_msg=f"{op.name} on {dtype}")


def vector_program(op, dtype, count, n):
    """``data0[i*count:(i+1)*count] = op(vector loads)`` over ``n`` elements (vector loads, ALU, vector store)."""
    vec = dtype.vec(count)
    out_dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE) else dtype
    out = UOp.define_global(0, out_dtype, n)
    a = UOp.define_global(1, dtype, n)
    b = UOp.define_global(2, dtype, n)
    i = loop(n // count)
    base = i * c32(count)
    va = UOp(Ops.CAST, vec.ptr(n), (a.index(base),)).load()
    vb = UOp(Ops.CAST, vec.ptr(n), (b.index(base),)).load()
    result = va.alu(op, vb) if op in (Ops.CMPLT, Ops.CMPNE) else UOp(op, vec, (va, vb))
    store = UOp(Ops.CAST, out_dtype.vec(count).ptr(n), (out.index(base),)).store(result)
    return linearize(store.end(i))


def test_vector_ops_equal_the_c_backend(run_uops, run_c):
    """Whole-vector ALU ops (float32, float16, bfloat16, int8, int32, uint64 lanes) and compares to bool lanes."""
    n = 32
    programs, cases = [], []
    for dtype in (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.int8, dtypes.int32, dtypes.uint64):
        ops = [Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE]
        ops += [Ops.FDIV] if dtypes.is_float(dtype) else [Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR]
        for op in ops:
            if dtypes.is_int(dtype):
                a, b = edge_ints(dtype, n), edge_ints(dtype, n)[::-1].copy()
                if op in (Ops.SHL, Ops.SHR):
                    b = RNG.integers(-3, dtype.itemsize * 8 + 4, n).astype(np_dtype(dtype))
            else:
                a, b = sample(dtype, n), sample(dtype, n)
                if dtype != dtypes.bfloat16:
                    a[:4] = [np.nan, 0.0, -0.0, np.inf]
                    b[:4] = [1.0, -0.0, 0.0, np.nan]
            out_dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE) else dtype
            prog = vector_program(op, dtype, 4, n)
            programs.append((prog, [np.zeros(n, np_dtype(out_dtype)), a, b]))
            cases.append((dtype, op))
    for (dtype, op), got, want in zip(cases, run_uops.many(programs), run_c.many(programs)):
        np.testing.assert_array_equal(got[0].view(np.uint8), want[0].view(np.uint8), err_msg=f"{op.name} {dtype}")


def test_vector_constants_keep_signed_zeros_and_splats(run_uops):
    """Vector constants: a splat is one constant text repeated, and lanes that compare equal but differ (0.0 and -0.0)
    keep their own bits."""
    out = UOp.define_global(0, dtypes.float32, 8)
    vec = dtypes.float32.vec(4)
    mixed = UOp(Ops.VCONST, vec, (), (0.0, -0.0, 0.0, -0.0))
    splat = UOp(Ops.VCONST, vec, (), (-0.0, -0.0, -0.0, -0.0))
    first = UOp(Ops.CAST, vec.ptr(8), (out.index(c32(0)),)).store(mixed)
    second = UOp(Ops.CAST, vec.ptr(8), (out.index(c32(4)),)).store(splat)
    got = run_uops(linearize(first, second), [np.ones(8, np.float32)])[0]
    want = np.array([0.0, -0.0, 0.0, -0.0, -0.0, -0.0, -0.0, -0.0], np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_sixteen_bit_float_casts_equal_the_c_backend(run_uops, run_c):
    """double/float/int64 -> float16 and bfloat16 (double rounding avoided, ties, overflow, NaN) and back."""
    values = np.array([0.1, 1 / 3, 65504.0, 65520.0, 65519.99, 1e-8, 2.0**-24 * 1.5, -2.5e-5, 1e6, np.nan, -np.inf,
                       1.00048828125, 1.0009765625 + 2**-40, 3.0e38], np.float64)  # fmt: skip
    programs = []
    for src in (dtypes.float64, dtypes.float32, dtypes.int64):
        data = values.astype(np_dtype(src)) if src != dtypes.int64 else np.arange(-7, 7) * 2**59 + 12345
        for dst in (dtypes.float16, dtypes.bfloat16):
            prog = elementwise(lambda x, d=dst: x.cast(d), [src], dst, len(values))
            programs.append((prog, [np.zeros(len(values), np_dtype(dst)), data]))
    for dst in (dtypes.int8, dtypes.uint64, dtypes.bool, dtypes.float64):
        for src in (dtypes.float16, dtypes.bfloat16):
            prog = elementwise(lambda x, d=dst: x.cast(d), [src], dst, 16)
            programs.append((prog, [np.zeros(16, np_dtype(dst)), sample(src, 16)]))
    for got, want in zip(run_uops.many(programs), run_c.many(programs)):
        np.testing.assert_array_equal(got[0].view(np.uint8), want[0].view(np.uint8))


def test_float_division_and_remainder_equal_the_c_backend(run_uops, run_c):
    """Float IDIV (truncated quotient) and MOD (fmod, through frem) on float16/32/64 with zeros, NaN, infinity."""
    programs = []
    for dtype in (dtypes.float16, dtypes.float32, dtypes.float64):
        a = np.array([7.5, -7.5, 1000.0, 3.0, 0.0, np.nan, np.inf, -0.0], np_dtype(dtype))
        b = np.array([2.0, 2.0, 3.0, 0.0, 1.0, 1.0, 2.0, 5.0], np_dtype(dtype))
        for op in (Ops.IDIV, Ops.MOD):
            programs.append((elementwise(op, [dtype, dtype], dtype, 8), [np.zeros(8, np_dtype(dtype)), a, b]))
    for got, want in zip(run_uops.many(programs), run_c.many(programs)):
        np.testing.assert_array_equal(got[0].view(np.uint8), want[0].view(np.uint8))
    assert run_uops.many(programs[2:4])[1][0][:3].tolist() == [1.5, -1.5, 1.0]  # float32 fmod


def test_threaded_kernel_with_variables_and_an_unused_slot(run_uops, run_c):
    """core_id chunks, an int and an index variable through the trampoline, a register accumulator, and a buffer
    slot the kernel never names."""
    prog = matmul_like_program()
    data = RNG.standard_normal(64).astype(np.float32)
    buffers = [np.zeros(64, np.float32), data, np.zeros(4, np.int64), np.zeros(4, np.int64)]
    got = run_uops(prog, buffers, vals=(5, 3), global_size=(4, 1, 1))
    want = run_c(prog, buffers, vals=(5, 3), global_size=(4, 1, 1))
    expected = [data[core * 8 : core * 8 + 5].sum() for core in range(4)]
    np.testing.assert_allclose(got[0][3:7], expected, rtol=1e-6)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[3][0] == 1


def test_gather_scatter_and_gated_vector_loads(run_uops, run_c):
    """Vector-index loads with a per-lane gate and alternative, scatter stores with a per-lane gate, and a vector
    load gated by a scalar gate (memory untouched when off)."""
    n = 16
    f4, i4 = dtypes.float32.vec(4), dtypes.int32.vec(4)
    out = UOp.define_global(0, dtypes.float32, n)
    scattered = UOp.define_global(1, dtypes.float32, n)
    inp = UOp.define_global(2, dtypes.float32, n)
    prog = ProgramBuilder()
    i = prog.add(loop(n // 4))
    lanes = UOp.vectorize(*(i * c32(4) + c32(3 - k) for k in range(4)))
    lane_gate = lanes < UOp.const(i4, 9)
    gathered = UOp(Ops.INDEX, dtypes.float32.ptr(n).vec(4), (inp, lanes, lane_gate)).load(UOp.const(f4, -5.0))
    prog.add(UOp(Ops.CAST, f4.ptr(n), (out.index(i * c32(4)),)).store(gathered))
    odd = lanes.alu(Ops.CMPNE, (lanes // UOp.const(i4, 2)) * UOp.const(i4, 2))
    prog.add(UOp(Ops.INDEX, dtypes.float32.ptr(n).vec(4), (scattered, lanes, odd)).store(gathered * 2.0))
    whole = UOp(Ops.CAST, f4.ptr(n), (inp.index(i * c32(4) + c32(1 << 26), i.eq(c32(9))),)).load(UOp.const(f4, 1.0))
    prog.add(UOp(Ops.CAST, f4.ptr(n), (out.index(i * c32(4)),)).store(gathered + whole))
    prog.add(UOp(Ops.END, dtypes.void, (prog.uops[-1], i)))
    data = np.arange(n, dtype=np.float32) + 1
    got = run_uops(prog.uops, [np.zeros(n, np.float32), np.zeros(n, np.float32), data])
    want = run_c(prog.uops, [np.zeros(n, np.float32), np.zeros(n, np.float32), data])
    expected = np.where(np.arange(n).reshape(4, 4)[:, ::-1] < 9, data.reshape(4, 4)[:, ::-1], -5.0).reshape(-1) + 1
    np.testing.assert_array_equal(got[0], expected)
    np.testing.assert_array_equal(got[1], want[1])
    assert got[1][1] == expected[2] * 2 - 2 and got[1][0] == 0  # odd lanes scattered, even ones gated off


def test_masked_vector_loads_and_stores(run_uops):
    """A vector access gated lane by lane (a bool vector gate, `Renderer.masked_access`): ``llvm.masked.load``
    (lanes that are off take the alt value's lane) and ``llvm.masked.store`` (lanes that are off keep memory), for
    floats and bools."""
    n, width = 16, 8
    out, inp = UOp.define_global(0, dtypes.float32, n), UOp.define_global(1, dtypes.float32, n - 5)
    flags_out, flags = UOp.define_global(2, dtypes.bool, n), UOp.define_global(3, dtypes.bool, n)
    prog = ProgramBuilder()
    i = prog.add(loop(n // width))
    pos = [i * c32(width) + c32(lane) for lane in range(width)]
    inside = UOp.vectorize(*(p < c32(n - 5) for p in pos))  # the second vector's last 5 lanes are past the buffer
    alt = UOp.vectorize(*(UOp.const(dtypes.float32, -lane) for lane in range(width)))
    loaded = UOp(Ops.LOAD, dtypes.float32.vec(width), (inp.index(i * c32(width), inside), alt))
    kept = UOp.vectorize(*((p % c32(3)).ne(c32(0)) for p in pos))
    prog.add(out.index(i * c32(width), kept).store(loaded * 2.0))
    bits = UOp(
        Ops.LOAD, dtypes.bool.vec(width), (flags.index(i * c32(width), kept), UOp.const(dtypes.bool.vec(width), True))
    )
    prog.add(flags_out.index(i * c32(width), inside).store(bits))
    prog.add(UOp(Ops.END, dtypes.void, (prog.uops[-1], i)))
    data = np.arange(1, n - 4, dtype=np.float32)
    bools = RNG.integers(0, 2, n).astype(bool)
    got, _, got_flags, _ = run_uops(prog.uops, [np.full(n, 100, np.float32), data, np.zeros(n, bool), bools])
    j = np.arange(n)
    loaded_ref = np.where(j < n - 5, np.concatenate([data, np.zeros(5, np.float32)]), -(j % width))
    np.testing.assert_array_equal(got, np.where(j % 3 != 0, loaded_ref * 2, 100))
    np.testing.assert_array_equal(got_flags, np.where(j < n - 5, np.where(j % 3 != 0, bools, True), False))
    text = renderer().render(prog.uops, "masked")
    assert "@llvm.masked.load.v8f32" in text and "@llvm.masked.store.v8f32" in text and "@llvm.masked.load.v8i8" in text


def test_index_arithmetic_is_64_bit():
    """`LLVMRenderer.index_bits` is 64 (the C renderer keeps 32): a kernel's index math is i64 from the start, so
    nothing is sign-extended in front of an address and LLVM has no induction variable to widen."""
    from tinycore.codegen import get_program
    from tinycore.tensor import Tensor

    assert renderer().index_bits == 64 and ClangRenderer().index_bits == 32
    ast = (Tensor.empty(37, 41, device="PYTHON").T + 1).schedule()[-1].ast
    program = get_program(ast, renderer())
    text = renderer().render(program.uops, program.function_name)
    assert "mul nsw i64" in text and "sext" not in text.split("_tc(")[0]


def test_constant_index_offsets_are_pointer_offsets(run_uops):
    """``x + c`` (c > 0, x never negative) addresses as the pointer to x moved by c elements, so the code generator
    folds c into the address; a negative or possibly negative part keeps one sum."""
    n = 8
    out, inp = UOp.define_global(0, dtypes.float32, n), UOp.define_global(1, dtypes.float32, 2 * n + 3)
    i = loop(n)
    value = inp.index(i * c32(2) + c32(3)).load() + inp.index(i * c32(2) + c32(-1) + c32(1)).load()
    uops = linearize(out.index(i).store(value).end(i))
    text = renderer().render(uops, "offsets")
    assert re.search(r"getelementptr inbounds float, (float\*|ptr) %p\d+, i64 3", text)  # typed (LLVM 14) or opaque
    data = np.arange(2 * n + 3, dtype=np.float32)
    got, _ = run_uops(uops, [np.zeros(n, np.float32), data])
    np.testing.assert_array_equal(got, data[3::2][:n] + data[0::2][:n])


def test_bool_registers_and_memory(run_uops):
    """Bools are i1 in registers and bytes in memory: loads, logic, where, stores of scalars and vectors."""
    n = 8
    b4 = dtypes.bool.vec(4)
    out = UOp.define_global(0, dtypes.bool, n)
    ints = UOp.define_global(1, I32, n)
    a = UOp.define_global(2, dtypes.bool, n)
    b = UOp.define_global(3, dtypes.bool, n)
    i = loop(n // 4)
    base = i * c32(4)
    va = UOp(Ops.CAST, b4.ptr(n), (a.index(base),)).load()
    vb = UOp(Ops.CAST, b4.ptr(n), (b.index(base),)).load()
    mixed = (va ^ vb) | UOp(Ops.NEG, b4, (va,))
    s1 = UOp(Ops.CAST, b4.ptr(n), (out.index(base),)).store(mixed)
    s2 = UOp(Ops.CAST, I32.vec(4).ptr(n), (ints.index(base),)).store(
        va.alu(Ops.WHERE, UOp.const(I32.vec(4), 7), vb.cast(I32.vec(4)))
    )
    xa, xb = RNG.integers(0, 2, n).astype(bool), RNG.integers(0, 2, n).astype(bool)
    prog = ProgramBuilder()
    prog.add(s1, s2)
    prog.add(UOp(Ops.END, dtypes.void, (s2, i)))
    got, got_ints, _, _ = run_uops(prog.uops, [np.zeros(n, bool), np.zeros(n, np.int32), xa, xb])
    np.testing.assert_array_equal(got, (xa ^ xb) | ~xa)
    assert set(got.view(np.uint8).tolist()) <= {0, 1}
    np.testing.assert_array_equal(got_ints, np.where(xa, 7, xb.astype(np.int32)))


def test_value_computed_in_a_loop_used_after_it(run_uops):
    """A pure value the linearizer placed inside a loop but used after it is computed again after the loop."""
    n = 4
    out = UOp.define_global(0, I32, n + 1)
    scale = UOp.define_global(1, I32, 1)
    k = scale.index(c32(0)).load()
    b = ProgramBuilder()
    b.add(k)
    i = b.add(loop(n))
    doubled = b.add(k * c32(2))  # inside the loop body, independent of i
    b.add(out.index(i).store(i + doubled).end(i))
    b.add(out.index(c32(n)).store(doubled + c32(100)))
    got = run_uops(b.uops, [np.zeros(n + 1, np.int32), np.array([5], np.int32)])[0]
    assert got.tolist() == [10, 11, 12, 13, 110]


def test_gated_load_never_touches_memory_llvm():
    """A gated-off load of an address far outside the buffer is never performed (child process: a wrong renderer
    would crash it)."""
    require_llvm()
    code = """
import numpy as np
from tinycore.dtype import dtypes
from tinycore.uop.ops import UOp
from tinycore_clang.device import ClangDevice
from tinycore_clang.testing import Runner, linearize, loop
c = lambda v: UOp.const(dtypes.int32, v)
out, inp = UOp.define_global(0, dtypes.float32, 4), UOp.define_global(1, dtypes.float32, 4)
i = loop(4)
far = i * c(1 << 28) + c(1 << 29)
value = inp.index(far, i.eq(c(99))).load(UOp.const(dtypes.float32, 7.0))
prog = linearize(out.index(i).store(value).end(i))
got = Runner(ClangDevice(backend="llvm"))(prog, [np.zeros(4, np.float32), np.ones(4, np.float32)])
print("OK", got[0].tolist())
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "OK [7.0, 7.0, 7.0, 7.0]" in proc.stdout


# ----- real Tensor programs on an llvm-backed device -----
TENSOR_CASES = {
    "matmul": (((67, 129), (129, 45)), lambda a, b: a @ b, lambda a, b: a @ b, 1e-4),
    "matmul_square": (((256, 256), (256, 256)), lambda a, b: a @ b, lambda a, b: a @ b, 1e-4),
    "conv2d": (((2, 5, 13, 13), (7, 5, 3, 3)), lambda x, w: x.conv2d(w, padding=1), None, 1e-4),
    "sum_rows": (((300, 77),), lambda a: a.sum(axis=1), lambda a: a.sum(axis=1), 1e-5),
    "sum_cols": (((77, 300),), lambda a: a.sum(axis=0), lambda a: a.sum(axis=0), 1e-5),
    "max_all": (((1000, 33),), lambda a: a.max(), lambda a: a.max(), 0.0),
    "softmax": (((33, 257),), lambda a: a.softmax(-1), None, 1e-5),
    "exp_log_sqrt": (((4099,),), lambda a: a.exp() + (a.abs() + 1).log() + a.abs().sqrt(), None, 1e-5),
    "pad_flip": (
        ((17, 19),),
        lambda a: a[2:, 1:].pad(((2, 1), (0, 3))).flip(0) * 3,
        lambda a: np.flip(np.pad(a[2:, 1:], ((2, 1), (0, 3))), 0) * 3,
        0.0,
    ),
    "argmax": (((65, 31),), lambda a: a.argmax(axis=1), lambda a: a.argmax(axis=1), 0.0),
    "cumsum": (((3, 70),), lambda a: a.cumsum(1), lambda a: a.cumsum(1), 1e-5),
}


def torch_conv(x, w):
    """numpy conv2d (padding 1) through torch."""
    import torch

    return torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()


@pytest.mark.parametrize("case", sorted(TENSOR_CASES))
def test_tensor_programs_match_numpy(llvm_device, case):
    from tinycore.tensor import Tensor

    shapes, op, reference, tol = TENSOR_CASES[case]
    arrays = [RNG.uniform(-2, 2, size=shape).astype(np.float32) for shape in shapes]
    got = op(*(Tensor(array, device=llvm_device) for array in arrays)).numpy()
    if reference is None:
        if case == "conv2d":
            want = torch_conv(*arrays)
        else:
            import torch

            want = op(*(torch.from_numpy(array) for array in arrays)).numpy()
    else:
        want = reference(*arrays)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=case)


def test_tensor_dtypes_match_numpy(llvm_device):
    """float16 matmul, int32 wrap and floor division, uint8 arithmetic, bool logic, float64 reductions."""
    from tinycore.tensor import Tensor

    a = RNG.uniform(-1, 1, (33, 40)).astype(np.float16)
    b = RNG.uniform(-1, 1, (40, 17)).astype(np.float16)
    got = (Tensor(a, device=llvm_device) @ Tensor(b, device=llvm_device)).numpy()
    np.testing.assert_allclose(got.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), atol=3e-2)
    ints = RNG.integers(-(2**31), 2**31 - 1, 100, dtype=np.int32)
    t = Tensor(ints, device=llvm_device)
    np.testing.assert_array_equal((t * 3 + 7).numpy(), ints * np.int32(3) + np.int32(7))
    u8 = RNG.integers(0, 255, 50, dtype=np.uint8)
    np.testing.assert_array_equal((Tensor(u8, device=llvm_device) * 7).numpy(), u8 * np.uint8(7))
    flags = RNG.integers(0, 2, 40).astype(bool)
    tf = Tensor(flags, device=llvm_device)
    np.testing.assert_array_equal((tf ^ tf.logical_not()).numpy(), np.ones(40, bool))
    doubles = RNG.standard_normal((20, 30))
    np.testing.assert_allclose(Tensor(doubles, device=llvm_device).sum(axis=0).numpy(), doubles.sum(0), rtol=1e-12)


def test_streaming_store_kernel_runs(llvm_device):
    """An elementwise kernel over a 16 MiB output (non-temporal stores and the store fence) gives right results."""
    from tinycore.tensor import Tensor

    n = 4 << 20
    a = RNG.standard_normal(n).astype(np.float32)
    got = (Tensor(a, device=llvm_device) * 2 + 1).numpy()
    np.testing.assert_array_equal(got, a * np.float32(2) + np.float32(1))


def test_conformance_kit_core_and_full_tiers_on_the_llvm_backend(tmp_path):
    """The plugin conformance kit's core and full tiers (every op of its table against the PYTHON reference, TinyJit,
    graph runner, stress, two instances) with ``CLANG_BACKEND=llvm``, in a child process."""
    require_llvm()
    env = dict(os.environ, CLANG_BACKEND="llvm", TINYCORE_CACHE_DIR=str(tmp_path))
    code = (
        "import sys, pytest\n"
        "from tinycore.device import Device\n"
        "assert type(Device['CLANG'].renderer).__name__ == 'LLVMRenderer', Device['CLANG'].renderer\n"
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '--pyargs', 'tinycore.testkit',\n"
        "                      '--tinycore-device=CLANG', '-k', 'TestCore or TestFull']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout


# ----- opaque pointers (LLVM >= 15) -----
def test_opaque_pointer_ir_compiles_and_runs_on_llvm_15_or_newer(tmp_path):
    """The ``ptr`` form of the IR (LLVM 15+) through an LLVM >= 15 library (child process: one libLLVM per process)."""
    import glob

    from tinycore_clang.libllvm import library_version

    newer = sorted(
        (
            p
            for p in glob.glob("/usr/lib/*/libLLVM-1*.so*") + glob.glob("/usr/lib/llvm-*/lib/libLLVM*.so*")
            if library_version(p) >= 15
        ),  # fmt: skip
        key=library_version,
    )
    if not newer:
        pytest.skip("no libLLVM >= 15 installed (apt-get install libllvm15)")
    require_llvm()
    code = f"""
import numpy as np
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops
from tinycore_clang.libllvm import LibraryChoice
from tinycore_clang.llvm_compiler import LLVMCompiler
from tinycore_clang.llvm_renderer import LLVMRenderer
from tinycore_clang.testing import Runner, elementwise
from tinycore_clang.device import ClangDevice
device = ClangDevice(backend="llvm")
device.renderer = LLVMRenderer(typed_pointers=False)
device.compiler = LLVMCompiler(library=LibraryChoice({newer[-1]!r}, {library_version(newer[-1])}, "test"))
run = Runner(device)
a = np.arange(-8, 8, dtype=np.int16) * 4099
b = np.array([0, -1, 3, 7] * 4, np.int16)
q = run(elementwise(Ops.IDIV, [dtypes.int16] * 2, dtypes.int16, 16), [np.zeros(16, np.int16), a, b])[0]
h = np.linspace(-3, 3, 16).astype(np.float16)
s = run(elementwise(Ops.MUL, [dtypes.float16] * 2, dtypes.float16, 16), [np.zeros(16, np.float16), h, h])[0]
print("OK", q.tolist() == [0 if y == 0 else int(np.fix(x / y)) for x, y in zip(a.tolist(), b.tolist())],
      (s == h * h).all())
"""
    env = dict(os.environ, TINYCORE_CACHE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK True True" in proc.stdout
