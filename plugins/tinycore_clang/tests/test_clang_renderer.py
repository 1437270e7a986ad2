"""ClangRenderer at the source level (no compiler needed): ABI of the emitted functions, const/restrict buffers,
signed index math vs wrapping value math, exact literals, what the prelude holds, names, and clear errors."""

from __future__ import annotations

import math

import pytest
from tinycore_clang.renderer import ClangRenderer, ClangRenderError
from tinycore_clang.testing import elementwise, linearize, loop

from tinycore.dtype import AddrSpace, dtypes
from tinycore.uop.ops import AxisType, Ops, UOp

I32 = dtypes.int32


def c32(v: int) -> UOp:
    """An int32 constant."""
    return UOp.const(I32, v)


def render(uops, name="k") -> str:
    """Render `uops` with the CLANG renderer as kernel `name`."""
    return ClangRenderer().render(list(uops), name=name)


def test_signature_trampoline_and_info():
    n = UOp.variable("n", 1, 16, I32)
    big = UOp.variable("big", 0, 2**40, dtypes.int64)
    out, inp = UOp.define_global(0, dtypes.float32, 16), UOp.define_global(2, dtypes.float32, 16)
    i = UOp(Ops.RANGE, I32, (n,), (0, AxisType.LOOP))
    value = inp.index(i).load() * big.cast(dtypes.float32)
    src = render(linearize(out.index(i).store(value).end(i)), "E_sig")
    assert (
        "void E_sig(float* restrict data0, void* restrict unused1, const float* restrict data2, int var_n, "
        "long long var_big) {" in src
    )
    assert "void E_sig_tc(void* const* bufs, const long long* vals, int core_id) {" in src
    assert "E_sig((float*)bufs[0], bufs[1], (const float*)bufs[2], (int)vals[0], (long long)vals[1]);" in src
    assert 'const char E_sig_tc_info[] = "tc1 bufs=3 vars=iq cores=0";' in src
    assert src.startswith("// tinycore-clang kernel E_sig\n")


def test_core_id_kernels_take_core_id_and_record_the_count():
    out = UOp.define_global(0, I32, 4)
    core = UOp(Ops.SPECIAL, I32, (c32(4),), "core_id")
    src = render(linearize(out.index(core).store(core)), "E_core")
    assert "void E_core(int* restrict data0, int core_id) {" in src and "cores=4" in src
    assert "E_core((int*)bufs[0], core_id);" in src


def test_value_math_wraps_but_index_math_stays_signed():
    out, inp = UOp.define_global(0, I32, 64), UOp.define_global(1, I32, 64)
    i = loop(8)
    idx = i * c32(8) + c32(3)
    value = inp.index(idx).load() * c32(3) + c32(1)
    src = render(linearize(out.index(idx).store(value).end(i)))
    assert "((ridx1*8)+3)" in src  # addressing: plain signed arithmetic
    assert "(unsigned int)" in src and "*(unsigned int)3" in src  # values: computed in unsigned, wrap defined


def test_literals_are_exact_hex_and_builtins():
    r = ClangRenderer
    assert r.float_literal(0.1, dtypes.float32) == "0x1.999999999999ap-4f"
    assert r.float_literal(-2.5, dtypes.float64) == "(-0x1.4p+1)"
    assert r.float_literal(math.inf, dtypes.float64) == "__builtin_inf()"
    assert r.float_literal(math.nan, dtypes.float32) == '__builtin_nanf("")'
    assert r.float_literal(-0.0, dtypes.float32) == "(-0x0p+0f)"
    assert float.fromhex("0x1.999999999999ap-4") == 0.1


def test_prelude_only_when_needed():
    plain = render(elementwise(Ops.ADD, [dtypes.float32] * 2, dtypes.float32, 4))
    assert "TC_HALF_1" not in plain and "TC_BF16_1" not in plain and "TC_FMA_1" not in plain
    half = render(elementwise(Ops.ADD, [dtypes.float16] * 2, dtypes.float16, 4))
    assert "TC_HALF_1" in half and "_Float16" in half and "__fp16" in half and "TC_F2H((TC_H2F(" in half
    bf = render(elementwise(Ops.MUL, [dtypes.bfloat16] * 2, dtypes.bfloat16, 4))
    assert "TC_BF16_1" in bf and "tc_f2bf((tc_bf2f(" in bf
    fma = render(elementwise(Ops.MULACC, [dtypes.float32] * 3, dtypes.float32, 4))
    assert "TC_FMAF(" in fma and "__builtin_fmaf" in fma


def test_vector_typedefs_round_up_to_powers_of_two():
    f3 = dtypes.float32.vec(3)
    out = UOp.define_global(0, dtypes.float32, 3)
    vec = UOp.vectorize(*(UOp.const(dtypes.float32, float(k)) for k in range(3)))
    src = render(linearize(UOp(Ops.CAST, f3.ptr(3), (out.index(c32(0)),)).store(vec)))
    assert "typedef float tc_floatx4 __attribute__((vector_size(16)));" in src
    assert "__builtin_memcpy(((tc_floatx4*)(data0)), &st" in src and ", 12); }" in src  # only 3 lanes stored


def test_register_arrays_and_name_from_sink():
    acc = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(4, AddrSpace.REG), (), 0)
    out = UOp.define_global(0, dtypes.float32, 1)
    store = acc.index(c32(1)).store(UOp.const(dtypes.float32, 2.0))
    load = acc.after(store).index(c32(1)).load()
    prog = linearize(UOp.sink(out.index(c32(0)).store(load), arg="r_named"))
    src = ClangRenderer().render(prog)
    assert "float acc1[4];" in src and "void r_named(" in src


def test_unsupported_programs_fail_clearly():
    out = UOp.define_global(0, I32, 4)
    gidx = UOp(Ops.SPECIAL, I32, (c32(4),), "gidx0")
    with pytest.raises(ClangRenderError, match="only SPECIAL 'core_id'"):
        render(linearize(out.index(gidx).store(gidx)))
    local = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(16, AddrSpace.LOCAL), (), "smem")
    with pytest.raises(ClangRenderError, match="not available on the CPU"):
        render([local])
