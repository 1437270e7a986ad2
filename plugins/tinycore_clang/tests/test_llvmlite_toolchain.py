"""LLVM from the llvmlite wheel (`tinycore_clang.llvmlite_toolchain`): chosen by default, its named pipelines, and
its errors. The kernels of the rest of the suite run on it too (it is the default LLVM)."""

from __future__ import annotations

import ctypes

import pytest
from tinycore_clang import libllvm
from tinycore_clang.libllvm import KERNEL_PIPELINE, LLVMError, PassOptions, find_library
from tinycore_clang.llvm_compiler import LLVMCompiler, open_toolchain
from tinycore_clang.llvmlite_toolchain import PIPELINES, LlvmliteToolchain, pipeline_name
from tinycore_clang.objloader import can_load_objects
from tinycore_clang.runtime import load_kernels

from tinycore.errors import CompileError

pytestmark = pytest.mark.skipif(
    libllvm.llvmlite_library() is None, reason="llvmlite is not installed (pip install llvmlite)"
)

SQUARE = """; tinycore-clang kernel square
define void @square(ptr noalias %out, ptr noalias readonly %inp, i32 %n) nounwind {
entry:
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %next, %loop ]
  %src = getelementptr inbounds float, ptr %inp, i32 %i
  %value = load float, ptr %src, align 4
  %sq = fmul float %value, %value
  %dst = getelementptr inbounds float, ptr %out, i32 %i
  store float %sq, ptr %dst, align 4
  %next = add nsw i32 %i, 1
  %done = icmp sge i32 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
"""


def run_square(obj: bytes, values: list[float]) -> list[float]:
    """Load object file `obj` in-process and run its ``square`` kernel on `values`."""
    address = load_kernels(obj).address("square")
    assert address is not None
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)(address)
    inp = (ctypes.c_float * len(values))(*values)
    out = (ctypes.c_float * len(values))()
    fn(out, inp, len(values))
    return list(out)


def test_llvmlite_is_the_default_and_a_system_library_is_chosen_by_name(tmp_path) -> None:
    choice = find_library({})
    assert choice.ok and choice.source == libllvm.LLVMLITE and choice.path == libllvm.llvmlite_library()
    assert choice.version == 0  # unknown until loaded: finding looks at files only
    system = tmp_path / "libLLVM-19.so"
    system.write_bytes(b"")
    named = find_library({libllvm.LIBRARY_ENV: str(system)})
    assert named.source == libllvm.LIBRARY_ENV and named.version == 19


def test_without_llvmlite_the_system_library_is_searched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(libllvm, "llvmlite_library", lambda: None)
    choice = find_library({"PATH": ""})
    assert choice.source in ("search", "clang")
    assert choice.ok or "neither llvmlite nor a libLLVM" in choice.reason


def test_pipeline_names() -> None:
    assert pipeline_name(KERNEL_PIPELINE) == "kernel"
    assert all(pipeline_name(name) == name for name in PIPELINES)
    with pytest.raises(LLVMError) as info:
        pipeline_name("function(sroa,instcombine)")
    assert "default<O2>" in str(info.value) and "TINYCORE_LLVM_LIB" in str(info.value)


@pytest.mark.skipif(not can_load_objects(), reason="the object loader handles x86-64 Linux only")
@pytest.mark.parametrize("pipeline", PIPELINES)
def test_every_pipeline_compiles_a_correct_kernel(pipeline: str) -> None:
    obj = open_toolchain(find_library({})).compile_object(SQUARE, PassOptions(pipeline=pipeline), "square")
    assert obj[:4] == b"\x7fELF"
    assert run_square(obj, [1.5, -2.0, 0.0, 3.0, 4.0]) == [2.25, 4.0, 0.0, 9.0, 16.0]


def test_the_toolchain_knows_its_llvm_and_host() -> None:
    chain = open_toolchain(find_library({}))
    assert isinstance(chain, LlvmliteToolchain) and chain is LlvmliteToolchain.shared()
    assert chain.version >= 15 and chain.cpu and chain.triple
    if chain.triple.startswith("x86_64"):
        assert "+sse2" in chain.features.split(",")


def test_errors_name_the_line_and_the_choices() -> None:
    compiler = LLVMCompiler(find_library({}))
    with pytest.raises(CompileError) as info:
        compiler.compile(SQUARE.replace("fmul float %value, %value", "fmul float %value, %missing"))
    assert "on kernel square" in str(info.value) and "%missing" in str(info.value)
    text_pipeline = LLVMCompiler(find_library({}), options=PassOptions(pipeline="function(sroa)"))
    with pytest.raises(CompileError, match="llvmlite takes no pipeline text"):
        text_pipeline.compile(SQUARE)


def test_the_cache_key_holds_the_llvmlite_library_stamp() -> None:
    parts = LLVMCompiler(find_library({})).cache_key_parts()
    assert any(str(libllvm.llvmlite_library()) in part for part in parts)
    assert repr(LLVMCompiler(find_library({}))).count("kernel codegen O2") == 1


def test_the_probe_says_when_kernels_would_be_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from tinycore_clang.plugin import tinycore_probe_device

    monkeypatch.delenv("CLANG_BACKEND", raising=False)
    monkeypatch.delenv(libllvm.LIBRARY_ENV, raising=False)
    fast = tinycore_probe_device("CLANG")
    assert fast is not None and fast.ok and fast.slow == ""  # llvmlite's LLVM builds the kernels
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed (the slow C-backend case needs it)")
    monkeypatch.setenv("CC", gcc)
    monkeypatch.setenv("CLANG_BACKEND", "c")
    slow = tinycore_probe_device("CLANG")
    assert slow is not None and slow.ok
    assert "gcc" in slow.slow and "CLANG_BACKEND=c" in slow.slow and "pip install llvmlite" in slow.slow
