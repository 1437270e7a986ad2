"""The in-process LLVM compiler of the ``llvm`` backend: finding LLVM, compiling IR, errors, batching, cache key,
and the device's backend selection. Hand-written IR here, so these tests don't depend on the IR renderer. The tests
taking the `compiler` fixture run once on llvmlite's LLVM and once on the system's libLLVM, each where present."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest
from tinycore_clang import libllvm
from tinycore_clang.libllvm import (
    KERNEL_PIPELINE,
    LibraryChoice,
    PassOptions,
    find_library,
    find_system_library,
    library_version,
)
from tinycore_clang.llvm_compiler import LLVM_MARKER, LLVMCompiler, options_from_env
from tinycore_clang.llvmlite_toolchain import LlvmliteToolchain
from tinycore_clang.runtime import is_object_file
from tinycore_clang.toolchain import find_linker

from tinycore.errors import CompileError, DeviceUnavailableError

NO_LLVM = "neither llvmlite nor a libLLVM (>= 14) shared library on this machine (pip install llvmlite)"
LLVMS = {
    "llvmlite": (lambda: find_library({})),  # {}: no TINYCORE_LLVM_LIB, so llvmlite's LLVM when installed
    "system": find_system_library,
}
NO_LINKER = "no linker (ld) on PATH (apt-get install binutils)"

ADD_ONE = """{marker}{name}
define void @{name}({fp} noalias %out, {fp} noalias readonly %inp, i32 %n) nounwind {{
entry:
  br label %loop
loop:
  %i = phi i32 [ 0, %entry ], [ %next, %loop ]
  %src = getelementptr inbounds float, {fp} %inp, i32 %i
  %value = load float, {fp} %src, align 4
  %plus = fadd float %value, {addend}
  %dst = getelementptr inbounds float, {fp} %out, i32 %i
  store float %plus, {fp} %dst, align 4
  %next = add nsw i32 %i, 1
  %done = icmp sge i32 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}}
"""


def add_one_ir(name: str = "add_one", addend: str = "1.0", library: LibraryChoice | None = None) -> str:
    """A kernel ``out[i] = inp[i] + addend`` for ``i < n`` (n >= 1) in LLVM IR, with the pointer types the
    LLVM of `library` (default: the one the backend picks) wants."""
    typed = libllvm.uses_typed_pointers((library or find_library()).version)
    return ADD_ONE.format(marker=LLVM_MARKER, name=name, addend=addend, fp="float*" if typed else "ptr")


@pytest.fixture(scope="module", params=sorted(LLVMS))
def compiler(request: pytest.FixtureRequest) -> LLVMCompiler:
    """An LLVM compiler on llvmlite's LLVM, then on the system's libLLVM (each skipped when absent)."""
    library = LLVMS[request.param]()
    if not library.ok or (request.param == "llvmlite") != (library.source == libllvm.LLVMLITE):
        pytest.skip(f"no {request.param} LLVM here: {library.reason or library.path}")
    if find_linker() is None:
        pytest.skip(NO_LINKER)
    return LLVMCompiler(library=library, jobs=2)


def run_add(lib: bytes, name: str, values: list[float]) -> list[float]:
    """Load `lib` and run kernel `name` on `values`."""
    from tinycore_clang.runtime import load_kernels

    address = load_kernels(lib).address(name)
    assert address is not None, f"{name} not in the compiled library"
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)(address)
    inp = (ctypes.c_float * len(values))(*values)
    out = (ctypes.c_float * len(values))()
    fn(out, inp, len(values))
    return list(out)


def test_library_version_from_file_names() -> None:
    assert library_version("/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1") == 14
    assert library_version("/usr/lib/llvm-17/lib/libLLVM.so.17.0") == 17
    assert library_version("/opt/libLLVM.so") == 0


def test_find_library_honours_the_environment(tmp_path) -> None:
    fake = tmp_path / "libLLVM-18.so.1"
    fake.write_bytes(b"")
    choice = find_library({libllvm.LIBRARY_ENV: str(fake), "PATH": ""})
    assert choice.ok and choice.path == str(fake) and choice.version == 18 and choice.source == libllvm.LIBRARY_ENV
    missing = find_library({libllvm.LIBRARY_ENV: str(tmp_path / "nope.so")})
    assert not missing.ok and "is not a file" in missing.reason


def test_options_from_env() -> None:
    assert options_from_env({}) == PassOptions()
    assert options_from_env({"CLANG_LLVM_PIPELINE": "default<O1>"}).pipeline == "default<O1>"
    assert options_from_env({"CLANG_LLVM_UNROLL": "1"}).loop_unrolling and not options_from_env({}).loop_unrolling
    with pytest.raises(CompileError, match="CLANG_LLVM_CODEGEN"):
        options_from_env({"CLANG_LLVM_CODEGEN": "fast"})
    with pytest.raises(CompileError, match="CLANG_LLVM_UNROLL"):
        options_from_env({"CLANG_LLVM_UNROLL": "yes"})
    assert options_from_env({}).codegen_args == libllvm.CODEGEN_ARGS
    assert options_from_env({"CLANG_LLVM_ARGS": "-a -b=1"}).codegen_args == ("-a", "-b=1")
    assert options_from_env({"CLANG_LLVM_ARGS": "none"}).codegen_args == ()


def test_llvm_options_are_one_set_per_process(compiler: LLVMCompiler) -> None:
    """LLVM keeps its command-line options per process: a toolchain refuses malformed ones, and a second set after
    the first compile (its own instance here, so the shared one's state is untouched)."""
    library = compiler.library
    own = LlvmliteToolchain() if library.source == libllvm.LLVMLITE else libllvm.LLVMToolchain(library)
    ir = add_one_ir(library=compiler.library)
    with pytest.raises(libllvm.LLVMError, match="'-name'"):
        own.compile_object(ir, PassOptions(codegen_args=("disable-lsr",)))
    assert own.compile_object(ir, PassOptions(codegen_args=()))[:4] == b"\x7fELF"
    with pytest.raises(libllvm.LLVMError, match="per process"):
        own.compile_object(ir, PassOptions(codegen_args=("-disable-lsr",)))


def test_llvm_options_reach_llvm(compiler: LLVMCompiler) -> None:
    """``CLANG_LLVM_ARGS`` is given to LLVM: ``-print-after-all`` makes it print the IR after each pass."""
    code = (
        "from tinycore_clang.llvm_compiler import LLVMCompiler\n"
        f"LLVMCompiler(in_process=True).compile({add_one_ir('printed', library=compiler.library)!r})\n"
    )
    env = {**os.environ, "CLANG_LLVM_ARGS": "-print-after-all", "CACHELEVEL": "0"}
    if compiler.library.source != libllvm.LLVMLITE:
        env[libllvm.LIBRARY_ENV] = compiler.library.path or ""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "IR Dump After" in out.stderr and "@printed" in out.stderr


def test_opaque_pointers_are_refused_where_they_would_crash(compiler: LLVMCompiler) -> None:
    if not libllvm.uses_typed_pointers(compiler.library.version):
        version = compiler.library.version or compiler.library.source
        pytest.skip(f"LLVM {version} handles opaque pointers (the crash is LLVM 14's)")
    with pytest.raises(CompileError, match="typed pointers"):
        compiler.compile(add_one_ir("opaque", library=compiler.library).replace("float*", "ptr"))


def test_compiles_and_runs(compiler: LLVMCompiler) -> None:
    lib = compiler.compile(add_one_ir(library=compiler.library))
    assert lib[:4] == b"\x7fELF"
    assert run_add(lib, "add_one", [1.0, 2.5, -3.0]) == [2.0, 3.5, -2.0]


def test_invalid_ir_names_the_kernel_and_the_line(compiler: LLVMCompiler) -> None:
    bad = add_one_ir("broken", library=compiler.library).replace("fadd float %value", "fadd float %nothing")
    with pytest.raises(CompileError) as info:
        compiler.compile(bad)
    text = str(info.value)
    assert "on kernel broken" in text and "%nothing" in text and ">>" in text


def test_unknown_pipeline_is_a_compile_error() -> None:
    if not find_library().ok or find_linker() is None:
        pytest.skip(NO_LLVM)
    odd = LLVMCompiler(options=PassOptions(pipeline="no-such-pass"))
    with pytest.raises(CompileError, match="no-such-pass"):
        odd.compile(add_one_ir("odd"))


def test_compile_many_links_distinct_names_together() -> None:
    if not find_library().ok or find_linker() is None:
        pytest.skip(NO_LLVM if not find_library().ok else NO_LINKER)
    linking = LLVMCompiler(jobs=2, in_process=False)
    srcs = [add_one_ir("k_a", "1.0"), add_one_ir("k_b", "2.0"), add_one_ir("k_a", "3.0")]
    libs = linking.compile_many(srcs)
    assert len(libs) == 3
    assert all(not is_object_file(lib) for lib in libs)
    assert libs[0] == libs[1] and libs[2] != libs[0]  # the second k_a can't share a library with the first
    assert run_add(libs[0], "k_a", [1.0]) == [2.0]
    assert run_add(libs[1], "k_b", [1.0]) == [3.0]
    assert run_add(libs[2], "k_a", [1.0]) == [4.0]


def test_compile_many_in_process_gives_one_object_per_source(compiler: LLVMCompiler) -> None:
    if not compiler.in_process:
        pytest.skip("objects load in-process only on x86-64 Linux")
    cases = (("k_a", "1.0"), ("k_b", "2.0"), ("k_a", "3.0"))
    srcs = [add_one_ir(name, addend, compiler.library) for name, addend in cases]
    libs = compiler.compile_many(srcs)
    assert len(libs) == 3 and all(is_object_file(lib) for lib in libs)
    assert [run_add(lib, name, [1.0]) for lib, name in zip(libs, ("k_a", "k_b", "k_a"))] == [[2.0], [3.0], [4.0]]
    assert compiler.compile(srcs[1]) == libs[1]  # compile and compile_many agree


def test_cache_key_pins_library_cpu_and_options(compiler: LLVMCompiler) -> None:
    parts = compiler.cache_key_parts()
    chain = compiler.toolchain
    assert chain.cpu in parts and chain.features in parts and any(KERNEL_PIPELINE in part for part in parts)
    for changed in (PassOptions(codegen_level=3), PassOptions(loop_unrolling=True), PassOptions("default<O2>")):
        assert LLVMCompiler(compiler.library, options=changed).cache_key("x") != compiler.cache_key("x")
    other_output = LLVMCompiler(compiler.library, in_process=not compiler.in_process, linker="ld")
    assert other_output.cache_key("x") != compiler.cache_key("x")  # object files and shared objects never mix


def test_missing_linker_is_reported() -> None:
    if not find_library().ok:
        pytest.skip(NO_LLVM)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", "")
        patch.delenv("LD", raising=False)
        with pytest.raises(CompileError, match="no linker"):
            LLVMCompiler(in_process=False)
        assert LLVMCompiler(in_process=True).linker == ""  # loading objects in-process needs none


def test_target_facts_come_from_disk_in_a_new_process(compiler: LLVMCompiler) -> None:
    compiler.cache_key_parts()  # stores the facts
    code = (
        "from tinycore_clang.llvm_compiler import LLVMCompiler\n"
        "from tinycore_clang.libllvm import LLVMToolchain\n"
        "from tinycore_clang.llvmlite_toolchain import LlvmliteToolchain\n"
        "LLVMCompiler().cache_key_parts()\n"
        "import sys\n"
        "print(len(LLVMToolchain._instances), LlvmliteToolchain._instance, 'llvmlite.binding' in sys.modules)\n"
    )
    env = dict(os.environ)
    if compiler.library.source != libllvm.LLVMLITE:
        env[libllvm.LIBRARY_ENV] = compiler.library.path or ""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0 None False"  # no LLVM was loaded


def test_device_rejects_an_unknown_backend() -> None:
    from tinycore_clang.device import ClangDevice

    with pytest.raises(DeviceUnavailableError, match="CLANG_BACKEND"):
        ClangDevice("CLANG", backend="fortran")


def test_device_without_libllvm_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from tinycore_clang.device import ClangDevice

    monkeypatch.setenv(libllvm.LIBRARY_ENV, str(tmp_path / "libLLVM-99.so"))
    with pytest.raises(DeviceUnavailableError) as info:
        ClangDevice("CLANG", backend="llvm")
    assert "is not a file" in str(info.value) and "CLANG_BACKEND=c" in str(info.value)


def test_probe_reports_the_llvm_backend_problem(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from tinycore_clang.plugin import tinycore_probe_device

    monkeypatch.setenv("CLANG_BACKEND", "llvm")
    monkeypatch.setenv(libllvm.LIBRARY_ENV, str(tmp_path / "libLLVM-99.so"))
    result = tinycore_probe_device("CLANG")
    assert result is not None and not result.ok and "is not a file" in result.reason
    monkeypatch.setenv("CLANG_BACKEND", "cobol")
    result = tinycore_probe_device("CLANG")
    assert result is not None and not result.ok and "expected one of c, llvm or auto" in result.reason


def test_auto_backend_is_llvm_exactly_where_libllvm_is(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from tinycore_clang.device import ClangDevice, backend_from_env
    from tinycore_clang.plugin import tinycore_probe_device, tinycore_report_info

    monkeypatch.delenv("CLANG_BACKEND", raising=False)
    if find_library().ok:
        assert backend_from_env() == "llvm" and backend_from_env({"CLANG_BACKEND": "auto"}) == "llvm"
        assert ClangDevice("CLANG").backend == "llvm"
        assert tinycore_report_info("CLANG")["backend"].startswith("llvm (auto: LLVM found")
    monkeypatch.setenv(libllvm.LIBRARY_ENV, str(tmp_path / "libLLVM-99.so"))  # no usable libLLVM
    assert backend_from_env() == "c"
    assert ClangDevice("CLANG").backend == "c"
    probe = tinycore_probe_device("CLANG")
    assert probe is not None and probe.ok  # auto never picks a backend that can't run
    report = tinycore_report_info("CLANG")["backend"]
    assert report.startswith("c (auto: no llvm backend:") and "is not a file" in report


def test_llvm_18_and_newer_run_instcombine_without_the_fixpoint_abort():
    from tinycore_clang.libllvm import pipeline_for

    new = pipeline_for(19, KERNEL_PIPELINE)
    assert "instcombine<no-verify-fixpoint>" in new and new.count("instcombine") == KERNEL_PIPELINE.count("instcombine")
    assert pipeline_for(17, KERNEL_PIPELINE) == KERNEL_PIPELINE
    assert pipeline_for(19, "function(instcombine<max-iterations=1>)") == "function(instcombine<max-iterations=1>)"
