"""Cold-compile paths of the CLANG compiler: clang kernels compiled (``-c``) and linked in two steps with the
linker command read from ``clang -###``, the default flags, and the new kernels of a schedule built in one batch
(one library holding several kernels, each found by its own name)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from tinycore_clang.compiler import DEFAULT_FLAGS, ClangCompiler
from tinycore_clang.testing import Runner, elementwise

from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops

NO_CLANG = "clang not installed"
NO_GCC = "gcc not installed"


def _src(clang, name: str, n: int = 8) -> str:
    return clang.renderer.render(elementwise(Ops.ADD, [dtypes.float32] * 2, dtypes.float32, n), name=name)


def test_clang_links_with_the_drivers_own_linker_command(clang_c):
    path = shutil.which("clang")
    if path is None:
        pytest.skip(NO_CLANG)
    compiler = ClangCompiler(cc=path)
    command = compiler.link_command()
    assert command and os.path.isabs(command[0]) and command.count("{obj}") == 1 and command.count("{out}") == 1
    assert command.index("{obj}") < command.index("-lgcc")  # the object before the libraries it needs
    lib = compiler.compile(_src(clang_c, "ksplit"))
    a, b = np.arange(8, dtype=np.float32), np.full(8, 2, np.float32)
    assert (
        Runner(clang_c).launch(_src(clang_c, "ksplit"), lib, [np.zeros(8, np.float32), a, b])[0].tolist()
        == (a + b).tolist()
    )


def test_gcc_links_through_its_driver(clang_c):
    path = shutil.which("gcc")
    if path is None:
        pytest.skip(NO_GCC)
    compiler = ClangCompiler(cc=path)
    assert compiler.link_command() == []
    assert compiler.compile(_src(clang_c, "kgcc"))[:4] == b"\x7fELF"


def test_default_flags_keep_kernels_out_of_their_wrappers():
    assert "-fno-inline-functions" in DEFAULT_FLAGS and "-O2" in DEFAULT_FLAGS


def test_a_schedules_kernels_share_one_library(clang_c, monkeypatch):
    """The C backend compiles a schedule's kernels as one shared object (the llvm backend loads one object file per
    kernel in-process: test_llvm_compiler.py)."""
    from tinycore.engine.exec_item import _build_batched
    from tinycore.tensor import Tensor

    dev = clang_c
    calls: list[int] = []
    real = type(dev.compiler).compile_many

    def counting(self, srcs):
        """Record the batch size."""
        calls.append(len(srcs))
        return real(self, srcs)

    monkeypatch.setattr(type(dev.compiler), "compile_many", counting)
    monkeypatch.setattr(dev.compiler, "jobs", 1)  # one translation unit for the whole batch
    rng = np.random.default_rng(3)
    a_np, b_np = rng.standard_normal((6, 7)).astype(np.float32), rng.standard_normal((7, 5)).astype(np.float32)
    a, b = Tensor(a_np, device="CLANG").realize(), Tensor(b_np, device="CLANG").realize()
    outs = [(a * 3 - 1).exp(), a.max(axis=0), a @ b]
    items, _ = outs[0].schedule_with_vars(*outs[1:])
    asts = [si.ast for si in items if si.ast.op.name == "SINK"]
    built = _build_batched("CLANG", dev, asts, overlap=False)
    assert calls == [3] and len(built) == 3
    runners = list(built.values())
    assert runners[0].lib == runners[1].lib == runners[2].lib
    assert len({r.p.function_name for r in runners}) == 3
    for si in items:
        if si.ast.op.name == "SINK":
            si.bufs[0].ensure_allocated()
            built[(si.ast, "CLANG")]([buf.ensure_allocated() for buf in si.bufs], {})
    from tinycore.engine.realized import buffer_of

    want = [np.exp(a_np * 3 - 1), a_np.max(axis=0), a_np @ b_np]
    for out, ref in zip(outs, want):
        got = buffer_of(out.uop).numpy().reshape(ref.shape)
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_a_compile_error_in_a_batch_names_its_kernel(clang, monkeypatch):
    import tinycore.engine.exec_item as exec_item
    from tinycore.errors import CompileError
    from tinycore.tensor import Tensor

    real = exec_item.render_program
    broken: list[str] = []

    def render_breaking_the_reduce(renderer, p):
        """Render normally, but put an error (C or LLVM IR, as the backend renders) into the (first) reduce kernel."""
        src = real(renderer, p)
        if not broken and p.function_name.startswith("r_"):
            broken.append(p.function_name)
        if broken and p.function_name == broken[0]:
            name = p.function_name
            ir_head = f"define dso_local void @{name}("
            if ir_head in src:
                src = src.replace(ir_head, f"@broken_{name} = global i32 nowhere\n{ir_head}", 1)
            else:
                src = src.replace(f"void {name}(", f"int broken_{name} = nowhere;\nvoid {name}(", 1)
        return src

    monkeypatch.setattr(exec_item, "render_program", render_breaking_the_reduce)
    rng = np.random.default_rng(11)
    a = Tensor(rng.standard_normal((13, 17)).astype(np.float32), device="CLANG").realize()
    outs = [(a * 5 - 2).exp(), a.sum(axis=1), (a + 7).relu()]  # three new kernels: one batch
    with pytest.raises(CompileError) as info:
        outs[0].realize(*outs[1:])
    assert broken and f"on kernel {broken[0]}" in str(info.value) and "nowhere" in str(info.value)
