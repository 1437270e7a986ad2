"""`ClangDevice`: the ``CLANG`` device (alias ``CPU``): kernels compiled for the host CPU and run on it.

Two backends, picked by ``CLANG_BACKEND`` (`BACKEND_ENV`) when the device is opened (`backend_from_env`):

- ``llvm`` (the default: LLVM comes with the ``llvmlite`` wheel, a dependency of this plugin, or from a system
  ``libLLVM`` >= 14): kernels rendered to LLVM IR (`tinycore_clang.llvm_renderer.LLVMRenderer`) and compiled
  in-process (`tinycore_clang.llvm_compiler.LLVMCompiler`): no compiler process per kernel, so a new kernel is ready
  in milliseconds. On x86-64 Linux the object files load in-process too; elsewhere it needs a linker (``ld``).
- ``c`` (the default only where no LLVM is found): kernels rendered to C (`tinycore_clang.renderer.ClangRenderer`)
  and compiled by the system C compiler in a subprocess (`tinycore_clang.compiler.ClangCompiler`). Needed for
  ``CUSTOM`` kernels written in C. gcc does not vectorize these kernels: the probe says so (`ProbeResult.slow`) and
  core warns when such a device becomes the default.

``CLANG_BACKEND=auto`` (or unset) makes that choice; ``c`` or ``llvm`` forces one (``llvm`` without LLVM is an
error naming the fix, never a silent switch). ``tinycore plugins -v`` and ``tinycore doctor CLANG`` say which
backend and which LLVM are in use and why.

Both produce the same kernel ABI, so the allocator, programs, thread pool and graph runner are shared. The thread
pool library (compiled once per machine and cached) is built by `pool_compiler`: with the llvm backend on x86-64
Linux, the llvm compiler from the pool's shipped IR (`tinycore_clang.pool_ir`), so **no C compiler is needed at
all**; elsewhere the C compiler (`host_compiler`).

``CLANG_CPU`` (`tinycore_clang.renderer.CPU_ENV`) builds every kernel for another x86-64 CPU than this one (an
LLVM/``-march`` name: ``haswell``, ``znver3``, ``x86-64-v3``...): the optimizer's heuristics use that CPU's vector
registers (`tinycore_clang.renderer.vector_shape`) and LLVM (or ``-march`` with the C backend) targets it. The kernels
still run here, so the CPU must be one whose instructions this machine has (`tinycore_clang.renderer.check_target_cpu`
refuses others, and unknown names, naming the variable); unset or empty means this machine's CPU.

``ClangDevice("CLANG")`` and ``ClangDevice("CLANG:1")`` are separate devices with separate memory (copies between
them are ``memmove``). Opening a device compiles nothing and runs no subprocess: the compiler's version and target
are read when the first kernel is compiled, the thread pool library is built when the first threaded kernel loads.
"""

from __future__ import annotations

import os

from tinycore.sdk import Compiled, CompileError, DeviceUnavailableError
from tinycore_clang import __version__, toolchain
from tinycore_clang.allocator import ClangAllocator
from tinycore_clang.compiler import ClangCompiler
from tinycore_clang.graph import ClangGraph
from tinycore_clang.libllvm import INSTALL_HINT as LLVM_HINT
from tinycore_clang.libllvm import LLVMLITE, TARGET_CPU_MIN_VERSION, find_library, target_cpu_version_problem
from tinycore_clang.llvm_compiler import LLVMCompiler
from tinycore_clang.renderer import CPU_ENV, HOST_CPU, ClangRenderer, target_cpu_from_env
from tinycore_clang.runtime import ClangProgram

FAMILY = "CLANG"
DISTRIBUTION = "tinycore-clang"
BACKEND_ENV = "CLANG_BACKEND"
BACKENDS = ("c", "llvm")
AUTO = "auto"


def llvm_available() -> str | None:
    """None when the llvm backend can run here (llvmlite or a libLLVM >= 14, and a linker unless objects load
    in-process), else why not. Looks at files only; loads nothing."""
    from tinycore_clang.libllvm import find_library
    from tinycore_clang.objloader import can_load_objects

    library = find_library()
    if not library.ok:
        return library.reason
    if not can_load_objects() and toolchain.find_linker() is None:
        return "no linker (ld) found"
    return None


def backend_from_env(env: dict[str, str] | None = None) -> str:
    """The backend ``CLANG_BACKEND`` asks for: ``c`` or ``llvm``; unset or ``auto``: ``llvm`` where
    `llvm_available`, else ``c``. A ValueError naming the choices for anything else.

    >>> backend_from_env({"CLANG_BACKEND": "c"}), backend_from_env({"CLANG_BACKEND": "LLVM"})
    ('c', 'llvm')
    """
    environ = os.environ if env is None else env
    value = environ.get(BACKEND_ENV, "").strip().lower() or AUTO
    if value == AUTO:
        return "llvm" if llvm_available() is None else "c"
    if value not in BACKENDS:
        raise ValueError(f"{BACKEND_ENV}={value!r}: expected one of {', '.join(BACKENDS)} or {AUTO}")
    return value


def pool_ir_problem(backend: str | None = None) -> str | None:
    """None when the thread pool can be built from its shipped LLVM IR here (`tinycore_clang.pool_ir`: the llvm
    `backend` (None: ``CLANG_BACKEND``'s), x86-64 Linux with glibc, an LLVM that reads the IR), so no C compiler is
    needed; else why not. Looks at files only."""
    from tinycore_clang import pool_ir

    if (backend or backend_from_env()) != "llvm":
        problem = llvm_available()
        if problem is None:
            return f"{BACKEND_ENV}=c compiles kernels with a C compiler"
        return f"no LLVM for the llvm backend, which needs none: {problem}"
    library = find_library()
    return pool_ir.usable_here(library.source, library.version)


def target_cpu_problem(backend: str) -> str | None:
    """Why ``CLANG_CPU`` can't work with `backend` here (an unknown CPU, one this machine can't run, or a system
    libLLVM too old to know the CPU names), else None; loads nothing."""
    try:
        cpu = target_cpu_from_env()
    except ValueError as error:
        return str(error)
    if cpu is None or backend != "llvm":
        return None
    library = find_library()
    if library.ok and library.source != LLVMLITE and library.version < TARGET_CPU_MIN_VERSION:
        return target_cpu_version_problem(cpu, library)
    return None


class ClangDevice(Compiled):
    """The CLANG device ``CLANG`` or ``CLANG:n``.

    `threads` (``THREADS`` or the CPU count) is how many native threads a ``core_id`` kernel runs on; change it on
    the object to affect later launches. `compiler_choice` records which C compiler was picked and why; `backend`
    (argument, else ``CLANG_BACKEND``) is ``"c"`` or ``"llvm"`` (see the module docstring); `host_compiler` is the C
    compiler (None when there is none: the llvm backend needs none); `pool_compiler` builds the thread pool library
    (`tinycore_clang.threadpool.get_pool`); `target_cpu` is the CPU kernels are built for (``CLANG_CPU``; None: this
    machine's).
    """

    def __init__(self, device: str = FAMILY, backend: str | None = None):
        if device.upper().partition(":")[0] != FAMILY:
            raise ValueError(f"ClangDevice is for {FAMILY} or {FAMILY}:n, not {device!r}")
        self.compiler_choice = toolchain.find_compiler()
        self.threads = toolchain.default_thread_count()
        try:
            self.backend = backend_from_env({BACKEND_ENV: backend} if backend is not None else None)
        except ValueError as error:
            raise DeviceUnavailableError(
                str(error), fix=f"set {BACKEND_ENV} to c, llvm or auto", device=device.upper(),
                distribution=DISTRIBUTION, version=__version__,
            ) from None  # fmt: skip
        ir_problem = pool_ir_problem(self.backend)
        if not self.compiler_choice.ok and ir_problem is not None:
            raise DeviceUnavailableError(
                f"{self.compiler_choice.reason}; {ir_problem}", fix=toolchain.INSTALL_HINT, device=device.upper(),
                distribution=DISTRIBUTION, version=__version__,
            )  # fmt: skip
        try:
            self.target_cpu = target_cpu_from_env()
        except ValueError as error:
            raise DeviceUnavailableError(
                str(error), fix=f"unset {CPU_ENV}, or name a CPU whose instructions this machine has",
                device=device.upper(), distribution=DISTRIBUTION, version=__version__,
            ) from None  # fmt: skip
        self.host_compiler = ClangCompiler(cc=self.compiler_choice.path) if self.compiler_choice.ok else None
        renderer: ClangRenderer
        compiler: ClangCompiler | LLVMCompiler
        if self.backend == "llvm":
            try:
                compiler = LLVMCompiler(cpu=self.target_cpu or HOST_CPU)
            except CompileError as error:
                raise DeviceUnavailableError(
                    f"{BACKEND_ENV}=llvm: {error}", fix=LLVM_HINT, device=device.upper(),
                    distribution=DISTRIBUTION, version=__version__,
                ) from None  # fmt: skip
            from tinycore_clang.llvm_renderer import LLVMRenderer

            renderer = LLVMRenderer(arch=self.target_cpu, threads=self.threads)
            self.pool_compiler = compiler if ir_problem is None else self.host_compiler
        else:
            assert self.host_compiler is not None  # (checked above: the c backend needs a compiler)
            renderer = ClangRenderer(arch=self.target_cpu, threads=self.threads)
            if self.target_cpu is None:
                compiler = self.host_compiler
            else:  # (the thread pool library stays -march=native: `host_compiler`)
                compiler = ClangCompiler(cc=self.compiler_choice.path, arch=self.target_cpu)
            self.pool_compiler = self.host_compiler
        super().__init__(
            device,
            ClangAllocator(),
            renderer,
            compiler,
            ClangProgram,
            ClangGraph,
        )

    def synchronize(self) -> None:
        """Nothing to wait for: every launch returns when the kernel is done."""
