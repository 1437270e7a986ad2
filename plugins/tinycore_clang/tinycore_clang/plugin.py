"""Entry module of the ``CLANG`` device (entry point ``CLANG = "tinycore_clang.plugin"``, group ``tinycore.devices``).

Light by contract: importing it imports only ``tinycore.sdk`` and the stdlib-only `tinycore_clang.toolchain`.
The device, renderer, compiler and runtime modules are imported when a device is opened or a compile target is
requested. The probe only looks at files and the environment (``CC``, ``PATH``, where LLVM is).

CLANG devices are virtual: ``CLANG:0`` .. ``CLANG:7`` are independent devices with their own memory (all on the
host CPU), which is what multi-device code and its tests need on one machine.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tinycore.sdk import DeviceCapabilities, ProbeResult, hookimpl
from tinycore_clang import __version__, toolchain

if TYPE_CHECKING:
    from tinycore.sdk import Compiled, Compiler, Renderer

TINYCORE_PLUGIN_API = (1, 0)
DEVICE = "CLANG"
PRIORITY = 10
DISTRIBUTION = "tinycore-clang"
VIRTUAL_DEVICE_COUNT = 8
DOCTOR_CHECK_NAME = "clang kernel"


def _is_clang(name: str) -> bool:
    return name.upper().partition(":")[0] == DEVICE


def _run_smoke_test(ctx: Any) -> str:
    """The CLANG kernel smoke test (imported lazily; it skips devices that are not CLANG)."""
    from tinycore_clang.doctor import smoke_test

    return smoke_test(ctx)


@hookimpl
def tinycore_doctor_checks() -> list[Any]:
    """The CLANG kernel smoke test for ``tinycore doctor`` (run after core's checks; other devices skip it)."""
    from tinycore.sdk import DoctorCheck

    return [DoctorCheck(DOCTOR_CHECK_NAME, _run_smoke_test)]


@hookimpl
def tinycore_register_devices(registry: Any) -> None:
    """Register ``CLANG`` (alias ``CPU``) at priority 10 with its lazy factory."""
    registry.register(
        DEVICE,
        priority=PRIORITY,
        aliases=("CPU",),
        api_version=TINYCORE_PLUGIN_API,
        factory="tinycore_clang.device:ClangDevice",
    )


def _unavailable(reason: str, hint: str) -> ProbeResult:
    """A failed probe: the CPU is always here, so every failure is software the user can fix."""
    return ProbeResult(ok=False, reason=reason, hint=hint, device_count=0, hardware_present=True)


def _llvm_backend_problem() -> ProbeResult | None:
    """Why the backend ``CLANG_BACKEND`` asks for can't work here (an unknown name; ``llvm`` forced without libLLVM,
    or without a linker where objects can't load in-process), or the CPU ``CLANG_CPU`` names can't (unknown, not
    runnable here), else None; files only."""
    from tinycore_clang.device import BACKEND_ENV, backend_from_env, llvm_available, target_cpu_problem
    from tinycore_clang.renderer import CPU_ENV

    try:
        backend = backend_from_env()
    except ValueError as error:
        return _unavailable(str(error), f"unset {BACKEND_ENV}")
    cpu_problem = target_cpu_problem(backend)
    if cpu_problem is not None:
        return _unavailable(cpu_problem, f"unset {CPU_ENV}, or name a CPU whose instructions this machine has")
    problem = llvm_available() if backend == "llvm" else None
    if problem is None:
        return None
    from tinycore_clang import libllvm

    hint = libllvm.INSTALL_HINT if "linker" not in problem else toolchain.LINKER_HINT
    return _unavailable(f"{BACKEND_ENV}=llvm: {problem}", hint)


def _backend_report() -> str:
    """Which backend the device will use and why, e.g. ``llvm (auto: LLVM found: llvmlite)``."""
    from tinycore_clang.device import BACKEND_ENV, backend_from_env, llvm_available

    asked = os.environ.get(BACKEND_ENV, "").strip().lower()
    backend = backend_from_env()
    if asked and asked != "auto":
        return f"{backend} ({BACKEND_ENV})"
    if backend == "llvm":
        from tinycore_clang.libllvm import find_library

        why = f"LLVM found: {find_library().source}"
    else:
        why = f"no llvm backend: {llvm_available()}"
    return f"{backend} (auto: {why}; {BACKEND_ENV}=c or llvm forces one)"


def _pool_report(choice: toolchain.CompilerChoice) -> str:
    """Who builds the thread pool library: the llvm backend from its shipped IR, or the C compiler."""
    from tinycore_clang.device import pool_ir_problem

    why = pool_ir_problem()
    if why is None:
        return "built by the llvm backend from its shipped LLVM IR (no C compiler needed)"
    if choice.ok:
        return f"built by {choice.path} ({why})"
    return f"can't be built: {choice.reason} ({why})"


def _target_cpu_report() -> str:
    """Which CPU kernels are built for and why: ``host`` or e.g. ``haswell (CLANG_CPU=haswell)``; the error when
    ``CLANG_CPU`` can't be used."""
    from tinycore_clang.renderer import CPU_ENV, target_cpu_from_env

    asked = os.environ.get(CPU_ENV, "").strip()
    try:
        cpu = target_cpu_from_env()
    except ValueError as error:
        return f"unusable: {error}"
    if cpu is None:
        why = f"{CPU_ENV}={asked}" if asked else f"{CPU_ENV} unset"
        return f"host (-march=native; {why})"
    return f"{cpu} ({CPU_ENV}={asked})"


def _kernel_shape_report() -> str:
    """What the heuristics size kernels from, as the CLANG renderer for the target CPU derives it: vector
    registers, reduce streams, the L2 cache."""
    from tinycore_clang.renderer import ClangRenderer, target_cpu_from_env

    try:
        cpu = target_cpu_from_env()
    except ValueError:
        cpu = None
    r = ClangRenderer(cpu)
    return (
        f"{r.vector_registers} vector registers of {r.vector_bytes} bytes; long reduces read {r.reduce_streams} "
        f"row(s) side by side; matmul row blocks sized for a {r.l2_bytes >> 10} KiB L2"
    )


@hookimpl
def tinycore_probe_device(name: str) -> ProbeResult | None:
    """Usable when kernels and the thread pool can be built: with the llvm backend (the default where llvmlite or a
    libLLVM is found) no C compiler is needed on x86-64 Linux (the pool ships as LLVM IR), elsewhere and with
    ``CLANG_BACKEND=c`` a C compiler (``CC``, else clang, gcc, cc on ``PATH``); ``CLANG_CPU`` must be unset or a CPU
    this machine can run. Every failure is marked `ProbeResult.hardware_present` (the CPU is always here); never
    raises."""
    if not _is_clang(name):
        return None
    try:
        problem = _llvm_backend_problem()
        if problem is not None:
            return problem
        choice = toolchain.find_compiler()
        if not choice.ok:
            from tinycore_clang.device import llvm_available, pool_ir_problem

            why = pool_ir_problem()
            if why is not None:
                hint = toolchain.INSTALL_HINT
                if llvm_available() is not None:
                    hint = f"pip install llvmlite (then no C compiler is needed), or {hint}"
                return _unavailable(f"{choice.reason}; {why}", hint)
    except Exception as error:  # a probe must never raise
        return _unavailable(f"compiler lookup failed: {error}", toolchain.INSTALL_HINT)
    return ProbeResult(ok=True, device_count=VIRTUAL_DEVICE_COUNT, slow=_slow_backend(choice))


def _slow_backend(choice: toolchain.CompilerChoice) -> str:
    """Why kernels will run far below the CPU's speed (the C backend with a compiler that does not vectorize the
    kernels' lane code, e.g. gcc: matmul 6 vs 135 GFLOPS measured), with the fix; '' when they won't."""
    from tinycore_clang.device import backend_from_env, llvm_available

    if backend_from_env() != "c" or choice.family == "clang":
        return ""
    why = llvm_available() or "CLANG_BACKEND=c"
    return (
        f"its kernels are built by {choice.family} through C ({why}), which does not vectorize them (matmul runs "
        "~20x slower); fix: pip install llvmlite (or apt-get install clang)"
    )


@hookimpl
def tinycore_open_device(name: str, ordinal: int) -> Compiled | None:
    """Build ``CLANG`` (ordinal 0) or ``CLANG:n``."""
    if not _is_clang(name):
        return None
    from tinycore_clang.device import ClangDevice

    return ClangDevice(DEVICE if ordinal == 0 else f"{DEVICE}:{ordinal}")


@hookimpl
def tinycore_compile_target(name: str, arch: str | None) -> tuple[Renderer, Compiler] | None:
    """The C renderer and compiler for CPU target `arch` (``-march`` value; None: what the device targets, the
    ``CLANG_CPU`` CPU or the host); with the llvm backend (`tinycore_clang.device.backend_from_env`) and that
    target (no `arch`, or `arch` equal to ``CLANG_CPU``: a pickled device renderer), the LLVM IR renderer and the
    in-process LLVM compiler. A ValueError naming ``CLANG_CPU`` when it is set to a CPU that can't be used."""
    if not _is_clang(name):
        return None
    from tinycore_clang.device import backend_from_env
    from tinycore_clang.renderer import HOST_CPU, target_cpu_from_env

    cpu = target_cpu_from_env()
    if backend_from_env() == "llvm" and arch in (None, cpu):
        from tinycore_clang.llvm_compiler import LLVMCompiler
        from tinycore_clang.llvm_renderer import LLVMRenderer

        return LLVMRenderer(arch=cpu), LLVMCompiler(cpu=cpu or HOST_CPU)
    from tinycore_clang.compiler import ClangCompiler
    from tinycore_clang.renderer import ClangRenderer

    arch = cpu if arch is None else arch
    return ClangRenderer(arch), ClangCompiler(arch=arch)


@hookimpl
def tinycore_device_capabilities(name: str) -> DeviceCapabilities | None:
    """Every scalar dtype, vector types, views, zero-copy, transfers, native threads."""
    if not _is_clang(name):
        return None
    from tinycore.sdk import ALL_SCALARS

    return DeviceCapabilities(
        dtypes=frozenset(ALL_SCALARS),
        features=frozenset({"float4", "multi_device", "transfer", "views", "zero_copy", "threads"}),
        limits={"threads": toolchain.default_thread_count()},
    )


@hookimpl
def tinycore_report_info(name: str) -> dict[str, str] | None:
    """Compiler, its version, CPU model and the vector features that matter, thread count; never raises."""
    if not _is_clang(name):
        return None
    info = {DISTRIBUTION: __version__}
    try:
        choice = toolchain.find_compiler()
        info["compiler"] = (
            f"{choice.path} (from {choice.source})"
            if choice.ok
            else f"none: {choice.reason}; only C kernels need one (CLANG_BACKEND=c, CUSTOM code)"
        )
        info["thread pool"] = _pool_report(choice)
        if choice.ok and choice.path:
            info["compiler version"] = toolchain.compiler_version(choice.path) or "unknown"
        info["cpu"] = toolchain.cpu_model() or "unknown"
        flags = set(toolchain.cpuinfo_flags().split())
        wanted = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_bf16", "avx512fp16")
        info["cpu features"] = " ".join(f for f in wanted if f in flags) or "unknown"
        info["threads"] = str(toolchain.default_thread_count())
        info["backend"] = _backend_report()
        info["target cpu"] = _target_cpu_report()
        info["kernel shape"] = _kernel_shape_report()
        if info["backend"].startswith("llvm"):
            from tinycore_clang import libllvm
            from tinycore_clang.objloader import can_load_objects

            library = libllvm.find_library()
            version = f"LLVM {library.version}" if library.version else "bundled LLVM"
            info["llvm library"] = f"{library.path} ({library.source}, {version})" if library.ok else library.reason
            info["linker"] = (
                "none needed (objects load in-process)" if can_load_objects() else (toolchain.find_linker() or "none")
            )
    except Exception as error:  # never raise from an info hook
        info["error"] = f"{type(error).__name__}: {error}"
    return info
