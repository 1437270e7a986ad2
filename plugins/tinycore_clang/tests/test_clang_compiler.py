"""ClangCompiler: disk cache (hits run no subprocess), cache key (CPU target, flags), errors with line numbers,
compiler choice (CC, clang, gcc; none on PATH), batched compilation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from tinycore_clang import toolchain
from tinycore_clang.compiler import ClangCompiler
from tinycore_clang.testing import Runner, elementwise

from tinycore.dtype import dtypes
from tinycore.errors import CompileError
from tinycore.uop.ops import Ops

NO_CLANG = "clang not installed"
NO_GCC = "gcc not installed"


@pytest.fixture(scope="module")
def clang(clang_c):
    """This file is about the C backend's compiler: the CLANG device pinned to it, whatever ``CLANG_BACKEND`` says."""
    return clang_c


def _kernel_src(clang, name: str = "kadd", n: int = 8) -> str:
    return clang.renderer.render(elementwise(Ops.ADD, [dtypes.float32] * 2, dtypes.float32, n), name=name)


def _forbid_subprocesses(monkeypatch):
    def boom(*args, **kwargs):
        """Fail the test on any subprocess."""
        raise AssertionError(f"unexpected subprocess: {args[0] if args else kwargs}")

    monkeypatch.setattr(subprocess, "run", boom)
    monkeypatch.setattr(subprocess, "Popen", boom)


def test_second_compile_is_a_cache_hit_without_subprocess(clang, monkeypatch, tmp_path):
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path))
    compiler = ClangCompiler(cc=clang.compiler.cc)
    src = _kernel_src(clang, "kcache")
    first = compiler.compile_cached(src)
    assert first[:4] == b"\x7fELF"
    _forbid_subprocesses(monkeypatch)
    assert compiler.compile_cached(src) == first
    assert ClangCompiler(cc=clang.compiler.cc).compile_cached(src) == first  # a new instance (new process) too
    assert compiler.compile_cached_many([src, src]) == [first, first]


def test_cache_key_changes_with_the_cpu_target(clang, monkeypatch, tmp_path):
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path))
    src = _kernel_src(clang, "kfeat")
    # two machines sharing one cache folder: the resolved target is cached per machine, never handed across
    monkeypatch.setattr(toolchain, "machine_identity", lambda: "AMD EPYC | avx2")
    monkeypatch.setattr(toolchain, "read_cpu_features", lambda cc, flags: "-march=znver3 -mavx2 -mno-avx512f")
    avx2 = ClangCompiler(cc=clang.compiler.cc)
    avx2_key = avx2.cache_key(src)  # the target is resolved once per compiler, on first use
    monkeypatch.setattr(toolchain, "machine_identity", lambda: "Intel Xeon | avx2 avx512f")
    monkeypatch.setattr(toolchain, "read_cpu_features", lambda cc, flags: "-march=sapphirerapids -mavx2 -mavx512f")
    avx512 = ClangCompiler(cc=clang.compiler.cc)
    assert avx2_key != avx512.cache_key(src) and avx2.cache_key(src) == avx2_key
    assert "avx512f" in " ".join(avx512.cache_key_parts())
    avx2.compile_cached(src)
    calls = []
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a) or real_run(*a, **k))
    avx512.compile_cached(src)  # different key: must build again, never reuse the AVX2 binary
    assert len([c for c in calls if c[0][0] == avx512.cc and "-###" not in c[0]]) == 1  # (clang: + the linker)


def test_cache_key_names_compiler_version_flags_and_resolved_target(clang):
    parts = ClangCompiler(cc=clang.compiler.cc).cache_key_parts()
    path, version, flags, target = parts
    assert os.path.isabs(path) and version
    assert "-march=native" in flags and "-O2" in flags
    assert target and "native" not in target  # the resolved CPU, not the word "native"


def test_target_facts_are_read_from_the_disk_cache_until_the_compiler_or_machine_changes(monkeypatch, tmp_path):
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path / "cache"))
    fake_cc = tmp_path / "clang"
    fake_cc.write_text("#!/bin/sh\n")  # only stat'ed: the two facts come from the counting stand-ins below
    asked = []
    monkeypatch.setattr(toolchain, "compiler_version", lambda cc: asked.append("version") or "clang version 99")
    monkeypatch.setattr(toolchain, "read_cpu_features", lambda cc, flags: asked.append("target") or "-target-cpu x")
    monkeypatch.setattr(toolchain, "machine_identity", lambda: "cpu A")

    def parts() -> tuple[str, ...]:
        """The key parts of a fresh compiler instance (as in a new process)."""
        return tuple(ClangCompiler(cc=str(fake_cc)).cache_key_parts())

    first = parts()
    assert asked == ["version", "target"] and first[1] == "clang version 99" and first[3] == "-target-cpu x"
    assert parts() == first and len(asked) == 2  # the next process runs no compiler
    os.utime(fake_cc, ns=(1, 1))  # a reinstalled compiler
    assert parts() == first and len(asked) == 4
    monkeypatch.setattr(toolchain, "machine_identity", lambda: "cpu B")  # another machine sharing the cache
    assert parts() == first and len(asked) == 6
    monkeypatch.setenv("CLANG_FLAGS", "-march=x86-64-v3")  # other flags: another target
    parts()
    assert len(asked) == 8
    monkeypatch.setattr(toolchain, "read_cpu_features", lambda cc, flags: "cpuinfo: avx2")  # a failed probe
    monkeypatch.setenv("CLANG_FLAGS", "-march=x86-64-v2")
    parts()
    parts()
    assert asked.count("version") == 6  # not stored: asked again


def test_real_feature_reader_resolves_native(clang):
    features = toolchain.read_cpu_features(clang.compiler.cc, ("-march=native",))
    assert "march" in features or "target-cpu" in features or features.startswith("cpuinfo:")
    if "avx2" in toolchain.cpuinfo_flags().split():
        assert "avx2" in features


def test_flags_from_environment_change_the_key(clang, monkeypatch):
    base = ClangCompiler(cc=clang.compiler.cc)
    monkeypatch.setenv("CLANG_FLAGS", "-O1")
    o1 = ClangCompiler(cc=clang.compiler.cc)
    assert o1.flags[-1] == "-O1" and base.cache_key("x") != o1.cache_key("x")
    assert ClangCompiler(cc=clang.compiler.cc, arch="x86-64-v2").flags.count("-march=x86-64-v2") == 1


def test_compile_error_carries_compiler_message_and_source_lines(clang):
    src = "void broken(float* restrict data0) {\n  data0[0] = 1.0f\n  oops;\n}\n"
    with pytest.raises(CompileError) as info:
        clang.compiler.compile(src)
    text = str(info.value)
    assert "error" in text and "source:" in text
    assert ">>    2 |   data0[0] = 1.0f" in text or ">>    3 |   oops;" in text


def test_compile_many_batches_and_keeps_same_named_kernels_apart(clang, monkeypatch, tmp_path):
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path))
    srcs = [_kernel_src(clang, f"kb{i}", n=4 + i) for i in range(5)] + [_kernel_src(clang, "kb0", n=3)]
    compiler = ClangCompiler(cc=clang.compiler.cc, jobs=1)  # one merged unit, plus the second "kb0" on its own
    spawned = []
    real_popen = subprocess.Popen

    def counting(*args, **kwargs):
        """Record the command, then start the real process."""
        spawned.append(args[0])
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", counting)
    libs = compiler.compile_cached_many(srcs)
    assert len([c for c in spawned if c[0] == compiler.cc and "-###" not in c]) == 2  # (clang: + the linker)
    assert len(libs) == 6 and libs[0] == libs[1] == libs[4] and libs[0] != libs[5]
    runner = Runner(clang)
    for i, (src, lib) in enumerate(zip(srcs, libs)):
        n = 4 + i if i < 5 else 3
        a, b = np.arange(n, dtype=np.float32), np.full(n, 10, np.float32)
        assert runner.launch(src, lib, [np.zeros(n, np.float32), a, b])[0].tolist() == (a + b).tolist()


def test_compile_many_reports_the_failing_kernel(clang):
    good = _kernel_src(clang, "kgood")
    bad = "// tinycore-clang kernel kbad\nvoid kbad(void) { this is not C; }\n"
    with pytest.raises(CompileError) as info:
        ClangCompiler(cc=clang.compiler.cc, jobs=2).compile_many([good, bad, _kernel_src(clang, "kgood2")])
    assert "this is not C" in str(info.value)


def test_runtime_library_is_cached(clang, monkeypatch, tmp_path):
    from tinycore_clang.threadpool import RUNTIME_SRC

    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path))
    compiler = ClangCompiler(cc=clang.compiler.cc)
    lib = compiler.compile_runtime_library(RUNTIME_SRC)
    _forbid_subprocesses(monkeypatch)
    assert compiler.compile_runtime_library(RUNTIME_SRC) == lib


def test_find_compiler_order_and_cc_override(tmp_path):
    for name in ("gcc", "clang"):
        exe = tmp_path / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    assert toolchain.find_compiler({"PATH": str(tmp_path)}).requested == "clang"
    (tmp_path / "clang").unlink()
    assert toolchain.find_compiler({"PATH": str(tmp_path)}).requested == "gcc"
    choice = toolchain.find_compiler({"PATH": str(tmp_path), "CC": "gcc"})
    assert choice.source == "CC" and choice.path == str(tmp_path / "gcc")
    missing = toolchain.find_compiler({"PATH": str(tmp_path), "CC": "tcc"})
    assert not missing.ok and "CC=tcc" in missing.reason
    (tmp_path / "gcc").unlink()
    assert toolchain.find_compiler({"PATH": str(tmp_path)}).reason.startswith("no C compiler found")


def _child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)


def test_no_compiler_on_path_makes_the_c_backend_unavailable_with_a_fix(tmp_path):
    """(The llvm backend needs no compiler at all: test_clang_no_compiler.py.)"""
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "DEV", "TINYCORE_PLUGINS")}
    env["PATH"] = str(tmp_path)  # an empty folder: no clang, gcc or cc
    env["CLANG_BACKEND"] = "c"
    code = (
        "from tinycore.device import Device\n"
        "from tinycore.errors import DeviceUnavailableError\n"
        "try:\n    Device['CLANG']\n    print('OPENED')\n"
        "except DeviceUnavailableError as e:\n    print('UNAVAILABLE|', e.reason, '|', e.fix)\n"
        "print('DEFAULT', Device.DEFAULT)\n"
    )
    proc = _child(code, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "UNAVAILABLE| no C compiler found" in proc.stdout and "CLANG_BACKEND=c compiles kernels" in proc.stdout
    assert "apt-get install clang" in proc.stdout and "CC=" in proc.stdout
    assert "DEFAULT CLANG" not in proc.stdout


def _run_with_cc(cc: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CC": cc, "CLANG_BACKEND": "c"}
    env.pop("DEV", None)
    code = (
        "import numpy as np\n"
        "from tinycore.device import Device\n"
        "from tinycore.dtype import dtypes\n"
        "from tinycore.uop.ops import Ops\n"
        "from tinycore_clang.testing import Runner, elementwise\n"
        "dev = Device['CLANG']\n"
        "prog = elementwise(Ops.MUL, [dtypes.half, dtypes.half], dtypes.half, 4)\n"
        "a = np.array([1.5, 2, -3, 65504], np.float16)\n"
        "got = Runner(dev)(prog, [np.zeros(4, np.float16), a, np.full(4, 2, np.float16)])[0]\n"
        "print('CC', dev.compiler.cc, got.tolist())\n"
    )
    return _child(code, env)


def test_cc_gcc_works():
    if shutil.which("gcc") is None:
        pytest.skip(NO_GCC)
    proc = _run_with_cc("gcc")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[1].endswith("gcc") and "[3.0, 4.0, -6.0, inf]" in proc.stdout


def test_cc_clang_works():
    if shutil.which("clang") is None:
        pytest.skip(NO_CLANG)
    proc = _run_with_cc("clang")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[1].endswith("clang") and "[3.0, 4.0, -6.0, inf]" in proc.stdout
