"""`tinycore_clang.kernel_params`: the parameter analysis both CLANG renderers share (buffers with gaps, which are
written, variables, core id, the info string), and both renderers spelling the same parameters."""

from __future__ import annotations

import pytest
from tinycore_clang.kernel_params import KernelParams, c_identifier, kernel_params, root_buffer
from tinycore_clang.renderer import ClangRenderer, ClangRenderError
from tinycore_clang.testing import ProgramBuilder, linearize, loop

from tinycore.dtype import AddrSpace, dtypes
from tinycore.uop.ops import Ops, UOp

I32 = dtypes.int32


def c32(value: int) -> UOp:
    """An int32 constant."""
    return UOp.const(I32, value)


def refuse(u: UOp, why: str) -> ClangRenderError:
    """The `fail` callback: an error naming the uop."""
    return ClangRenderError(f"{u.op}: {why}")


def gap_program() -> list[UOp]:
    """Buffers 0 (written), 1 (read), 3 (read; 2 unused), an int32 and an index variable, a 4-way core id."""
    out, inp, far = (UOp.define_global(i, dtypes.float32, 32) for i in (0, 1, 3))
    n_var, q_var = UOp.variable("n", 1, 8, I32), UOp.variable("q", 0, 8, dtypes.index)
    core = UOp(Ops.SPECIAL, I32, (c32(4),), "core_id")
    value = inp.index(core + n_var).load() + far.index(q_var.cast(I32)).load()
    return linearize(out.index(core).store(value))


def test_buffers_variables_core_id_and_info():
    params = kernel_params(gap_program(), refuse)
    assert [b.arg if b is not None else None for b in params.buffers] == [0, 1, None, 3]
    assert params.written == frozenset({0})
    assert [(v.name, v.wide, v.letter) for v in params.variables] == [("var_n", False, "i"), ("var_q", True, "q")]
    assert params.core_id is not None and params.cores == 4
    assert params.info == "tc1 bufs=4 vars=iq cores=4"
    assert KernelParams.pointee(params.buffers[0]) == dtypes.float32


def test_symbolic_core_count_and_no_parameters():
    n_var = UOp.variable("n", 1, 8, I32)
    out = UOp.define_global(0, I32, 8)
    params = kernel_params(linearize(out.index(UOp(Ops.SPECIAL, I32, (n_var,), "core_id")).store(c32(1))), refuse)
    assert params.cores == -1 and params.info == "tc1 bufs=1 vars=i cores=-1"
    assert kernel_params([], refuse).info == "tc1 bufs=0 vars= cores=0"


def test_a_store_through_an_unknown_pointer_makes_every_buffer_writable():
    out, inp = UOp.define_global(0, I32, 4), UOp.define_global(1, I32, 4)
    unknown = UOp(Ops.CUSTOM, dtypes.int32.ptr(4), (), "(int*)0")
    prog = linearize(UOp.sink(out.index(c32(0)).store(inp.index(c32(0)).load()), unknown.store(c32(1))))
    assert kernel_params(prog, refuse).written == frozenset({0, 1})


def test_custom_code_may_write_through_the_pointers_it_gets():
    out, inp = UOp.define_global(0, I32, 4), UOp.define_global(1, I32, 4)
    custom = UOp(Ops.CUSTOM, dtypes.void, (inp.index(c32(0)),), "*{0} = 1")
    prog = linearize(UOp.sink(out.index(c32(0)).store(c32(2)), custom))
    assert kernel_params(prog, refuse).written == frozenset({0, 1})


def test_register_stores_do_not_make_buffers_writable():
    out, inp = UOp.define_global(0, dtypes.float32, 8), UOp.define_global(1, dtypes.float32, 8)
    acc = UOp(Ops.DEFINE_REG, dtypes.float32.ptr(1, AddrSpace.REG), (), 0)
    b = ProgramBuilder()
    b.add(out, inp, acc)
    b.add(acc.index(c32(0)).store(inp.index(c32(0)).load()))
    b.add(out.index(c32(0)).store(acc.after(b.uops[-1]).index(c32(0)).load()))
    assert root_buffer(acc.index(c32(0))) is acc
    assert kernel_params(b.uops, refuse).written == frozenset({0})


def test_programs_no_kernel_can_express_are_refused():
    dup = [UOp.define_global(0, I32, 4), UOp.define_global(0, dtypes.float32, 4)]
    with pytest.raises(ClangRenderError, match="two DEFINE_GLOBALs with index 0"):
        kernel_params(dup, refuse)
    gidx = UOp(Ops.SPECIAL, I32, (c32(4),), "gidx0")
    with pytest.raises(ClangRenderError, match="no GPU-style launch ids"):
        kernel_params(linearize(UOp.define_global(0, I32, 4).index(gidx).store(c32(1))), refuse)


def test_identifiers():
    assert c_identifier("r_3:4") == "r_3_4" and c_identifier("9x") == "k_9x" and c_identifier("") == "k_"
    assert c_identifier("\x1b[34mE_2\x1b[0m") == "E_2"


def test_both_renderers_spell_the_same_parameters():
    from tinycore_clang.llvm_renderer import LLVMRenderer

    prog = gap_program()
    c_src = ClangRenderer().render(prog, name="kp")
    ir = LLVMRenderer(typed_pointers=False).render(prog, name="kp")
    assert (
        "void kp(float* restrict data0, const float* restrict data1, void* restrict unused2, "
        "const float* restrict data3, int var_n, long long var_q, int core_id) {" in c_src
    )
    assert 'kp_tc_info[] = "tc1 bufs=4 vars=iq cores=4"' in c_src
    assert (
        "define dso_local void @kp(ptr noalias nocapture %data0, ptr noalias nocapture readonly %data1, "
        "ptr noalias nocapture readnone %unused2, ptr noalias nocapture readonly %data3, i32 %var_n, i64 %var_q, "
        "i32 %core_id) #0 {" in ir
    )
    assert 'c"tc1 bufs=4 vars=iq cores=4\\00"' in ir


def test_a_loop_program_has_only_buffers():
    i = loop(4)
    prog = linearize(UOp.define_global(0, I32, 4).index(i).store(i).end(i))
    params = kernel_params(prog, refuse)
    assert len(params.buffers) == 1 and params.variables == () and params.core_id is None and params.cores == 0
