"""``CLANG_CPU``: the CLANG device builds every kernel for another x86-64 CPU than this one (the heuristics use that
CPU's vector registers, LLVM or ``-march`` targets it, the cache key says so) and refuses, naming the variable, a CPU
name it doesn't know or a CPU whose instructions this machine lacks. Devices are one per process, so the runs of
whole programs on the device happen in a subprocess."""

from __future__ import annotations

import json
import os
import pickle
import platform
import subprocess
import sys

import numpy as np
import pytest
from tinycore_clang import libllvm, plugin, toolchain
from tinycore_clang.libllvm import find_library
from tinycore_clang.renderer import (
    AVX512_ARCHS,
    CPU_ENV,
    X86_CPUS,
    check_target_cpu,
    host_cpu_flags,
    reduce_streams,
    target_cpu_from_env,
    vector_shape,
)

from tinycore import Tensor
from tinycore.codegen import get_program
from tinycore.errors import CompileError, DeviceUnavailableError

IS_X86 = platform.machine().lower() in ("x86_64", "amd64")
HAS_LLVMLITE = libllvm.llvmlite_library() is not None
HAS_CC = toolchain.find_compiler().ok
needs_llvmlite = pytest.mark.skipif(not HAS_LLVMLITE, reason="llvmlite is not installed (pip install llvmlite)")
needs_cc = pytest.mark.skipif(not HAS_CC, reason="no C compiler (clang, gcc or cc) on PATH")
needs_haswell = pytest.mark.skipif(
    not (IS_X86 and X86_CPUS["haswell"] <= host_cpu_flags()),
    reason="this machine is not an x86-64 CPU with AVX2 (haswell's instructions), so CLANG_CPU=haswell can't run here",
)
BEYOND_HOST_CPUS = [name for name, need in X86_CPUS.items() if IS_X86 and not need <= host_cpu_flags()]
# a CPU whose instructions this machine lacks: sapphirerapids (AMX, AVX512-FP16) unless this machine has them
BEYOND_HOST = "sapphirerapids" if "sapphirerapids" in BEYOND_HOST_CPUS else next(iter(BEYOND_HOST_CPUS), None)

SMALL_IR = "define void @f() {\n  ret void\n}\n"


def matmul_sources(renderer) -> list[str]:
    """The LLVM IR of the kernels of a 64x64 matmul (scheduled on PYTHON) rendered by `renderer`."""
    out = Tensor.empty(64, 64, device="PYTHON") @ Tensor.empty(64, 64, device="PYTHON")
    sources = []
    for item in out.schedule():
        if item.ast is not None:
            program = get_program(item.ast, renderer)
            sources.append(renderer.render(program.uops, program.function_name))
    return sources


# ----- the CPU table and the checks (any machine) -----
def test_a_cpu_is_checked_against_the_machines_features() -> None:
    haswell_flags = X86_CPUS["haswell"]
    assert check_target_cpu("haswell", haswell_flags, "x86_64") == "haswell"
    assert check_target_cpu(" Haswell ", haswell_flags | {"avx512f"}, "x86_64") == "haswell"
    assert check_target_cpu("native", frozenset(), "aarch64") is None  # the host: nothing to check
    with pytest.raises(ValueError) as info:
        check_target_cpu("skylake-avx512", haswell_flags, "x86_64")
    message = str(info.value)
    assert message.startswith("CLANG_CPU=skylake-avx512:") and "lacks avx512bw" in message and "avx512f" in message
    assert "haswell" in message.partition("CPUs it can run:")[2]  # what would work instead
    with pytest.raises(ValueError, match=r"CLANG_CPU=haswell: .*x86-64 machine.*'aarch64'"):
        check_target_cpu("haswell", haswell_flags, "aarch64")
    with pytest.raises(ValueError, match=r"CLANG_CPU=haswell: this machine's CPU features are unknown"):
        check_target_cpu("haswell", frozenset(), "x86_64")


@pytest.mark.parametrize("value", ["bogus", "haswel", "skylake_avx512x", "neoverse-v2"])
def test_an_unknown_name_is_a_value_error_with_examples(value: str) -> None:
    with pytest.raises(ValueError) as info:
        target_cpu_from_env({CPU_ENV: value})
    message = str(info.value)
    assert message.startswith(f"CLANG_CPU={value!r}: not an x86-64 CPU name")
    assert all(name in message for name in ("haswell", "skylake", "znver3", "x86-64-v3", "skylake-avx512"))


def test_unset_empty_or_native_means_the_host() -> None:
    assert target_cpu_from_env({}) is None
    assert target_cpu_from_env({CPU_ENV: ""}) is None
    assert target_cpu_from_env({CPU_ENV: "  "}) is None
    assert target_cpu_from_env({CPU_ENV: "native"}) is None


def test_reduce_streams_follow_the_cpu_vendor(monkeypatch: pytest.MonkeyPatch) -> None:
    """AMD Zen targets read one long row at a time, the others four side by side; the host's vendor decides for
    ``-march=native``, and a renderer carries what its target says."""
    from tinycore_clang.renderer import ClangRenderer

    assert [reduce_streams(cpu) for cpu in ("znver2", "znver4", "haswell", "skylake-avx512", "x86-64-v3")] == [
        1, 1, 4, 4, 4
    ]  # fmt: skip
    for vendor, streams in (("AuthenticAMD", 1), ("GenuineIntel", 4), ("", 4)):
        monkeypatch.setattr("tinycore_clang.renderer.cpu_vendor", lambda vendor=vendor: vendor)
        assert reduce_streams(None) == streams, vendor
        assert ClangRenderer().reduce_streams == streams and ClangRenderer("znver3").reduce_streams == 1


def test_the_l2_cache_is_read_from_sysfs(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The level-2 entry of the sysfs cache folder gives the size (K or M suffix); a named target or a machine that
    doesn't say gets 512 KiB; the renderer carries it."""
    from tinycore_clang.renderer import DEFAULT_L2_BYTES, ClangRenderer, l2_bytes
    from tinycore_clang.toolchain import l2_from_sysfs

    for name, (level, kind, size) in {"index0": ("1", "Data", "48K"), "index2": ("2", "Unified", "2048K")}.items():
        (tmp_path / name).mkdir()
        for field, value in (("level", level), ("type", kind), ("size", size)):
            (tmp_path / name / field).write_text(value + "\n")
    assert l2_from_sysfs(str(tmp_path)) == 2 << 20
    (tmp_path / "index2" / "size").write_text("1M\n")
    assert l2_from_sysfs(str(tmp_path)) == 1 << 20
    assert l2_from_sysfs(str(tmp_path / "missing")) is None
    monkeypatch.setattr("tinycore_clang.renderer.cpu_l2_bytes", lambda: 2 << 20)
    assert l2_bytes(None) == ClangRenderer().l2_bytes == 2 << 20
    assert l2_bytes("skylake-avx512") == ClangRenderer("haswell").l2_bytes == DEFAULT_L2_BYTES
    monkeypatch.setattr("tinycore_clang.renderer.cpu_l2_bytes", lambda: None)
    assert ClangRenderer().l2_bytes == DEFAULT_L2_BYTES


@needs_haswell
def test_doctor_reports_the_kernel_shape_the_renderer_derives(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tinycore doctor CLANG``'s "kernel shape" line says what the renderer for the target CPU sizes kernels from."""
    from tinycore_clang.renderer import ClangRenderer

    monkeypatch.setenv(CPU_ENV, "haswell")
    shape = plugin.tinycore_report_info(name="CLANG")["kernel shape"]
    r = ClangRenderer("haswell")
    assert shape.startswith(f"{r.vector_registers} vector registers of {r.vector_bytes} bytes; ")
    assert f"read {r.reduce_streams} row(s)" in shape and f"{r.l2_bytes >> 10} KiB L2" in shape


def test_the_table_gives_each_cpu_its_vector_registers() -> None:
    assert vector_shape("haswell") == (32, 16) and vector_shape("skylake-avx512") == (64, 32)
    assert vector_shape("x86-64") == vector_shape("x86-64-v2") == (16, 16)  # SSE only
    assert vector_shape("sandybridge") == (32, 16)
    for name, flags in X86_CPUS.items():
        assert ("avx512f" in flags) == (name in AVX512_ARCHS), name
        assert X86_CPUS["x86-64"] <= flags, name
        if "avx2" in flags:
            assert X86_CPUS["x86-64-v3"] <= flags, name
        if "avx512f" in flags:
            assert X86_CPUS["x86-64-v4"] <= flags, name


def system_llvm() -> str | None:
    """The system libLLVM the llvm backend would use without llvmlite, if it is new enough for ``CLANG_CPU``."""
    choice = libllvm.find_system_library()
    return choice.path if choice.ok and choice.version >= libllvm.TARGET_CPU_MIN_VERSION else None


KNOWS_EVERY_CPU = r"""
import sys
from tinycore_clang.libllvm import LLVMToolchain, PassOptions, find_library
from tinycore_clang.llvmlite_toolchain import LlvmliteToolchain
from tinycore_clang.renderer import X86_CPUS

ir = "define void @f() {\n  ret void\n}\n"
for name in X86_CPUS:
    print("checking", name, file=sys.stderr, flush=True)
    if sys.argv[1] == "llvmlite":
        chain = LlvmliteToolchain(cpu=name, features="")
    else:
        chain = LLVMToolchain(find_library({"TINYCORE_LLVM_LIB": sys.argv[1]}), cpu=name)
    print(name, chain.compile_object(ir, PassOptions())[:4] == b"\x7fELF", flush=True)
"""


@pytest.mark.skipif(not IS_X86, reason="the table is of x86-64 CPUs")
@pytest.mark.parametrize("llvm", ["llvmlite", "system"])
def test_llvm_knows_every_cpu_of_the_table(llvm: str) -> None:
    """An unknown name makes LLVM warn and target a generic CPU, or abort the process: so in a subprocess."""
    if llvm == "llvmlite" and not HAS_LLVMLITE:
        pytest.skip("llvmlite is not installed (pip install llvmlite)")
    library = "llvmlite" if llvm == "llvmlite" else system_llvm()
    if library is None:
        pytest.skip(f"no system libLLVM >= {libllvm.TARGET_CPU_MIN_VERSION}")
    out = subprocess.run([sys.executable, "-c", KNOWS_EVERY_CPU, library], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "not a recognized processor" not in out.stderr, out.stderr[-2000:]
    assert out.stdout.split() == [word for name in X86_CPUS for word in (name, "True")]


# ----- what CLANG_CPU changes (needs a machine that runs haswell code) -----
def _llvmlite_backend_for(monkeypatch: pytest.MonkeyPatch, cpu: str) -> None:
    """The llvm backend on llvmlite's LLVM, building for `cpu`."""
    monkeypatch.setenv("CLANG_BACKEND", "llvm")
    monkeypatch.delenv(libllvm.LIBRARY_ENV, raising=False)
    monkeypatch.setenv(CPU_ENV, cpu)


@needs_llvmlite
@needs_haswell
def test_the_llvm_target_follows_clang_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinycore_clang.llvm_renderer import LLVMRenderer
    from tinycore_clang.llvmlite_toolchain import LlvmliteToolchain

    _llvmlite_backend_for(monkeypatch, "haswell")
    renderer, compiler = plugin.tinycore_compile_target(name="CLANG", arch=None)
    assert isinstance(renderer, LLVMRenderer) and renderer.arch == "haswell"
    assert (renderer.vector_bytes, renderer.vector_registers) == (32, 16)
    assert compiler.target_cpu == "haswell" and compiler.target_facts() == ("haswell", "")
    chain = compiler.toolchain
    assert chain is LlvmliteToolchain.shared() and (chain.cpu, chain.features) == ("haswell", "")
    assert LlvmliteToolchain.shared("native") is not chain and LlvmliteToolchain.shared("native").features
    import tinycore.plugin.manager  # noqa: F401  (installs the renderer rebuilder that unpickling needs)

    again = pickle.loads(pickle.dumps(renderer))  # what a BEAM worker gets: the same renderer for haswell
    assert isinstance(again, LLVMRenderer) and again.arch == "haswell" and again.vector_bytes == 32


@needs_llvmlite
@needs_haswell
def test_haswell_kernels_use_ymm_registers_and_no_zmm(monkeypatch: pytest.MonkeyPatch) -> None:
    _llvmlite_backend_for(monkeypatch, "haswell")
    renderer, compiler = plugin.tinycore_compile_target(name="CLANG", arch=None)
    sources = matmul_sources(renderer)
    assert sources
    for src in sources:
        asm = compiler.toolchain.assembly(src, compiler.options)
        assert "%ymm" in asm and "%zmm" not in asm
        assert compiler.compile(src)  # and it compiles to an object


@needs_llvmlite
@needs_haswell
def test_the_cache_key_holds_the_target_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinycore_clang.llvm_compiler import LLVMCompiler

    monkeypatch.delenv(CPU_ENV, raising=False)
    host = LLVMCompiler(find_library({}), in_process=True)
    host_parts = tuple(host.cache_key_parts())  # stores the host's facts in the disk cache
    monkeypatch.setenv(CPU_ENV, "haswell")
    haswell = LLVMCompiler(find_library({}), in_process=True)
    parts = tuple(haswell.cache_key_parts())  # never the host's facts from the disk cache
    assert parts != host_parts and parts[3:5] == ("haswell", "") and parts[:3] == host_parts[:3]
    src = "; tinycore-clang kernel f\n" + SMALL_IR
    assert haswell.cache_key(src) != host.cache_key(src)
    for value in ("", " ", "native"):  # the host, with exactly today's key
        monkeypatch.setenv(CPU_ENV, value)
        assert tuple(LLVMCompiler(find_library({}), in_process=True).cache_key_parts()) == host_parts
    assert tuple(LLVMCompiler(find_library({}), in_process=True, cpu="native").cache_key_parts()) == host_parts


@needs_llvmlite
def test_unset_clang_cpu_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLANG_BACKEND", "llvm")
    monkeypatch.delenv(libllvm.LIBRARY_ENV, raising=False)
    for value in (None, ""):
        if value is None:
            monkeypatch.delenv(CPU_ENV, raising=False)
        else:
            monkeypatch.setenv(CPU_ENV, value)
        renderer, compiler = plugin.tinycore_compile_target(name="CLANG", arch=None)
        assert renderer.arch is None and (renderer.vector_bytes, renderer.vector_registers) == vector_shape(None)
        assert compiler.target_cpu is None and compiler.toolchain.features  # the host's features
        assert plugin._target_cpu_report().startswith("host")


@needs_cc
@needs_haswell
def test_the_c_backend_builds_kernels_with_march(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinycore_clang.device import ClangDevice

    monkeypatch.setenv(CPU_ENV, "haswell")
    device = ClangDevice("CLANG", backend="c")
    assert device.target_cpu == "haswell" and device.renderer.arch == "haswell"
    assert (device.renderer.vector_bytes, device.renderer.vector_registers) == (32, 16)
    assert "-march=haswell" in device.compiler.flags
    assert "-march=native" in device.host_compiler.flags  # the thread pool library is this machine's


@needs_haswell
def test_doctor_says_which_cpu_kernels_are_built_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CPU_ENV, raising=False)
    assert plugin._target_cpu_report() == "host (-march=native; CLANG_CPU unset)"
    monkeypatch.setenv(CPU_ENV, "haswell")
    assert plugin._target_cpu_report() == "haswell (CLANG_CPU=haswell)"
    assert plugin.tinycore_report_info(name="CLANG")["target cpu"] == "haswell (CLANG_CPU=haswell)"
    monkeypatch.setenv(CPU_ENV, "bogus")
    assert plugin._target_cpu_report().startswith("unusable: CLANG_CPU='bogus'")


RUN_ON_DEVICE = """
import json, sys
import numpy as np
from tinycore import Tensor
from tinycore.device import Device

rng = np.random.default_rng(0)
a, b = rng.standard_normal((64, 64), dtype=np.float32), rng.standard_normal((64, 64), dtype=np.float32)
x, w = rng.standard_normal((2, 3, 10, 10), dtype=np.float32), rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
matmul = (Tensor(a, device="CLANG") @ Tensor(b, device="CLANG")).numpy()
conv = Tensor(x, device="CLANG").conv2d(Tensor(w, device="CLANG"), padding=1).numpy()
np.savez(sys.argv[1], a=a, b=b, x=x, w=w, matmul=matmul, conv=conv)
device = Device["CLANG"]
print(json.dumps({"backend": device.backend, "target": device.target_cpu, "arch": device.renderer.arch,
                  "shape": [device.renderer.vector_bytes, device.renderer.vector_registers]}))
"""


def conv2d_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A 3x3 convolution with padding 1 in numpy."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w)


@needs_cc
@needs_haswell
@pytest.mark.parametrize("backend", ["llvm", "c"])
def test_matmul_and_conv_for_haswell_compute_numpys_values(backend: str, tmp_path) -> None:
    if backend == "llvm" and not HAS_LLVMLITE:
        pytest.skip("llvmlite is not installed (pip install llvmlite)")
    env = {**os.environ, CPU_ENV: "haswell", "CLANG_BACKEND": backend}
    env.pop(libllvm.LIBRARY_ENV, None)
    out = tmp_path / "out.npz"
    run = subprocess.run(
        [sys.executable, "-c", RUN_ON_DEVICE, str(out)], capture_output=True, text=True, env=env, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    assert facts == {"backend": backend, "target": "haswell", "arch": "haswell", "shape": [32, 16]}
    got = np.load(out)
    np.testing.assert_allclose(got["matmul"], got["a"] @ got["b"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["conv"], conv2d_reference(got["x"], got["w"]), rtol=1e-4, atol=1e-4)


# ----- refusals -----
def refusals(monkeypatch: pytest.MonkeyPatch, value: str) -> list[str]:
    """The error messages of every way into the device with ``CLANG_CPU=value`` (each one must refuse it)."""
    monkeypatch.setenv(CPU_ENV, value)
    monkeypatch.delenv(libllvm.LIBRARY_ENV, raising=False)
    messages = []
    with pytest.raises(ValueError) as error:
        target_cpu_from_env()
    messages.append(str(error.value))
    with pytest.raises(ValueError) as error:
        plugin.tinycore_compile_target(name="CLANG", arch=None)
    messages.append(str(error.value))
    if HAS_CC:
        from tinycore_clang.device import ClangDevice

        probe = plugin.tinycore_probe_device(name="CLANG")
        assert probe is not None and not probe.ok and CPU_ENV in probe.hint
        messages.append(probe.reason)
        for backend in ("c", "llvm") if HAS_LLVMLITE else ("c",):
            with pytest.raises(DeviceUnavailableError) as unavailable:
                ClangDevice("CLANG", backend=backend)
            messages.append(str(unavailable.value))
    if HAS_LLVMLITE:
        from tinycore_clang.llvm_compiler import LLVMCompiler
        from tinycore_clang.llvmlite_toolchain import LlvmliteToolchain

        targets = dict(LlvmliteToolchain._targets)
        with pytest.raises(ValueError) as error:
            LlvmliteToolchain.shared()
        messages.append(str(error.value))
        with pytest.raises(CompileError) as compile_error:
            LLVMCompiler(find_library({}), in_process=True)
        messages.append(str(compile_error.value))
        assert LlvmliteToolchain._targets == targets  # LLVM never saw the name
    return messages


def test_an_unknown_cpu_is_refused_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    for message in refusals(monkeypatch, "bogus"):
        assert "CLANG_CPU='bogus'" in message and "haswell" in message and "x86-64-v3" in message, message


@pytest.mark.skipif(not IS_X86, reason="the table is of x86-64 CPUs")
@pytest.mark.skipif(BEYOND_HOST is None, reason="this machine has the instructions of every CPU in the table")
def test_a_cpu_with_instructions_this_machine_lacks_is_refused_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    assert BEYOND_HOST is not None
    missing = sorted(X86_CPUS[BEYOND_HOST] - host_cpu_flags())
    for message in refusals(monkeypatch, BEYOND_HOST):
        assert f"CLANG_CPU={BEYOND_HOST}: this machine lacks " in message and missing[0] in message, message


@needs_haswell
def test_a_system_llvm_too_old_to_know_the_names_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from tinycore_clang.llvm_compiler import LLVMCompiler

    old = tmp_path / "libLLVM-15.so"
    old.write_bytes(b"")  # never loaded: the version in the name is enough
    monkeypatch.setenv(libllvm.LIBRARY_ENV, str(old))
    monkeypatch.setenv(CPU_ENV, "haswell")
    with pytest.raises(CompileError, match=r"CLANG_CPU=haswell needs LLVM >= 19 .* is LLVM 15"):
        LLVMCompiler(in_process=True)
    if HAS_CC:
        monkeypatch.setenv("CLANG_BACKEND", "llvm")
        probe = plugin.tinycore_probe_device(name="CLANG")
        assert probe is not None and not probe.ok and "CLANG_CPU=haswell needs LLVM >= 19" in probe.reason
