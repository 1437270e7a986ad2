"""In-process LLVM for the CLANG device's ``llvm`` backend: which LLVM to use (`find_library`), and the system
``libLLVM``'s C API through ctypes (`LLVMToolchain`), turning LLVM IR text into an object file in-process.

This is what makes the ``llvm`` backend fast to compile: no compiler process is started per kernel (clang's start
alone costs ~40 ms, because it loads and initializes ~100 MB of LLVM), the library is loaded once per process and each
kernel then costs only LLVM's own optimization and code generation.

Which LLVM (`find_library`, cheap: no loading): ``TINYCORE_LLVM_LIB`` (a path to a system ``libLLVM``) when set, else
the LLVM bundled in the ``llvmlite`` wheel (a dependency of tinycore-clang: the same LLVM on every machine, driven by
`tinycore_clang.llvmlite_toolchain`), else the ``libLLVM`` next to the ``clang`` on ``PATH``
(``/usr/lib/llvm-N/lib``), else the newest ``libLLVM-N.so`` in the usual system folders. LLVM 14 or newer is needed.
A system library takes any pass pipeline text (`PassOptions.pipeline`) and compiles from several threads at once;
llvmlite offers LLVM's standard pipelines only and one compile at a time (`bench/bench_llvm_pipeline.py` measures
what each costs).

Pointer types: LLVM 15 and newer use opaque pointers (``ptr``; 17+ accept nothing else), LLVM 14 typed pointers
(``float*``). LLVM 14 can parse opaque pointers behind an option, but its optimizer crashes the process on them, so
IR for LLVM 14 must use typed pointers: `LLVMToolchain.compile_object` refuses ``ptr`` IR there with an `LLVMError`
instead of crashing, and `uses_typed_pointers` tells a renderer which form to write.

Each thread gets its own ``LLVMContext`` and target machine (neither is thread-safe), so several kernels compile in
parallel: ctypes releases the GIL during each foreign call.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import platform
import re
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MIN_VERSION = 14
# the oldest LLVM that knows every CPU of `tinycore_clang.renderer.X86_CPUS` (znver5 is the newest; LLVM 15 lacks
# raptorlake too): an older one warns about an unknown CPU, targets a generic one, and may abort the process
TARGET_CPU_MIN_VERSION = 19
LIBRARY_ENV = "TINYCORE_LLVM_LIB"
LLVMLITE = "llvmlite"  # the `LibraryChoice.source` of the LLVM bundled with llvmlite
INSTALL_HINT = (
    "pip install llvmlite (its wheels bundle LLVM; tinycore-clang depends on it), or install LLVM's shared library "
    f"(apt-get install libllvm19) and set {LIBRARY_ENV}=/path/to/libLLVM-N.so, or use the C backend (CLANG_BACKEND=c)"
)
_SEARCH_GLOBS = (
    "/usr/lib/llvm-*/lib/libLLVM*.so*",
    "/usr/lib/x86_64-linux-gnu/libLLVM*.so*",
    "/usr/lib/aarch64-linux-gnu/libLLVM*.so*",
    "/usr/lib64/libLLVM*.so*",
    "/usr/lib/libLLVM*.so*",
    "/usr/local/lib/libLLVM*.so*",
)
# the LLVM target whose Initialize* functions set up code generation for this machine
_NATIVE_TARGETS = {"x86_64": "X86", "amd64": "X86", "aarch64": "AArch64", "arm64": "AArch64", "ppc64le": "PowerPC"}
_RELOC_PIC = 2  # LLVMRelocMode: LLVMRelocPIC
_CODE_MODEL_DEFAULT = 0
_OBJECT_FILE = 1  # LLVMCodeGenFileType: LLVMObjectFile


class LLVMError(RuntimeError):
    """LLVM rejected the IR or failed to compile it; the message is LLVM's."""


@dataclass(frozen=True)
class LibraryChoice:
    """Which LLVM the backend would load: `path` (None when none was found; `reason` says why), its major
    `version` (0 when unknown before loading: always for llvmlite) and where the choice came from
    (``TINYCORE_LLVM_LIB``, ``llvmlite``, ``clang``, ``search``)."""

    path: str | None
    version: int
    source: str
    reason: str = ""

    @property
    def ok(self) -> bool:
        """True when a usable library file was found."""
        return self.path is not None


def library_version(path: str) -> int:
    """The LLVM major version in a library file name (``libLLVM-14.so.1``, ``libLLVM.so.18.1``); 0 when absent.

    >>> library_version("/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1"), library_version("/x/libLLVM.so.18.1")
    (14, 18)
    """
    name = os.path.basename(path)
    match = re.match(r"libLLVM-(\d+)", name) or re.match(r"libLLVM\.so\.(\d+)", name)
    if match is None:
        match = re.search(r"llvm-(\d+)", path)
    return int(match.group(1)) if match else 0


def find_library(env: dict[str, str] | None = None) -> LibraryChoice:
    """The LLVM to compile with (see the module docstring); looks at files only, loads nothing.

    >>> find_library({"TINYCORE_LLVM_LIB": "/surely/not/libLLVM-15.so"}).reason
    'TINYCORE_LLVM_LIB=/surely/not/libLLVM-15.so is not a file'
    """
    environ = os.environ if env is None else env
    requested = environ.get(LIBRARY_ENV, "").strip()
    if requested:
        if not os.path.isfile(requested):
            return LibraryChoice(None, 0, LIBRARY_ENV, f"{LIBRARY_ENV}={requested} is not a file")
        return LibraryChoice(os.path.abspath(requested), library_version(requested), LIBRARY_ENV)
    bundled = llvmlite_library()
    if bundled is not None:
        return LibraryChoice(bundled, 0, LLVMLITE)
    return find_system_library(environ)


def find_system_library(env: dict[str, str] | None = None) -> LibraryChoice:
    """The system's ``libLLVM``: the one next to the ``clang`` on ``PATH``, else the newest in the usual folders."""
    environ = os.environ if env is None else env
    clang = shutil.which("clang", path=environ.get("PATH", os.defpath))
    if clang is not None:  # /usr/lib/llvm-N/bin/clang -> /usr/lib/llvm-N/lib/libLLVM*.so*
        lib_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(clang))), "lib")
        found = _newest(glob.glob(os.path.join(lib_dir, "libLLVM*.so*")))
        if found is not None:
            return LibraryChoice(found, library_version(found), "clang")
    found = _newest([path for pattern in _SEARCH_GLOBS for path in glob.glob(pattern)])
    if found is not None:
        return LibraryChoice(found, library_version(found), "search")
    return LibraryChoice(
        None, 0, "search", f"neither llvmlite nor a libLLVM (>= {MIN_VERSION}) shared library was found"
    )


def llvmlite_library() -> str | None:
    """The path of the LLVM library bundled in the ``llvmlite`` wheel (``libllvmlite.so``), found without importing
    llvmlite (that costs ~60 ms); None when llvmlite is not installed."""
    spec = importlib.util.find_spec("llvmlite")
    if spec is None or not spec.submodule_search_locations:
        return None
    binding = os.path.join(list(spec.submodule_search_locations)[0], "binding")
    for name in ("libllvmlite.so", "libllvmlite.dylib", "llvmlite.dll"):
        path = os.path.join(binding, name)
        if os.path.isfile(path):
            return path
    return None


def _newest(paths: list[str]) -> str | None:
    usable = [p for p in paths if os.path.isfile(p) and library_version(p) >= MIN_VERSION]
    if not usable:
        return None
    return max(usable, key=lambda p: (library_version(p), -len(p)))


_OPAQUE_POINTER = re.compile(r"(?<![%@\w.])ptr\b")


def uses_typed_pointers(version: int) -> bool:
    """True when IR for LLVM `version` must use typed pointers (``float*``) rather than ``ptr``: LLVM 14.

    >>> uses_typed_pointers(14), uses_typed_pointers(15), uses_typed_pointers(18)
    (True, False, False)
    """
    return 0 < version < 15


class _Library:
    """The loaded library with the signatures of the functions we call declared."""

    def __init__(self, path: str, version: int):
        self.path, self.version = path, version
        self.lib = ctypes.CDLL(path)
        ptr, text, size = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
        signatures: dict[str, tuple[Any, list[Any]]] = {
            "LLVMContextCreate": (ptr, []),
            "LLVMCreateMemoryBufferWithMemoryRangeCopy": (ptr, [text, size, text]),
            "LLVMParseIRInContext": (ctypes.c_int, [ptr, ptr, ctypes.POINTER(ptr), ctypes.POINTER(ptr)]),
            "LLVMGetDefaultTargetTriple": (ptr, []),
            "LLVMGetHostCPUName": (ptr, []),
            "LLVMGetHostCPUFeatures": (ptr, []),
            "LLVMGetTargetFromTriple": (ctypes.c_int, [text, ctypes.POINTER(ptr), ctypes.POINTER(ptr)]),
            "LLVMCreateTargetMachine": (ptr, [ptr, text, text, text, ctypes.c_int, ctypes.c_int, ctypes.c_int]),
            "LLVMCreateTargetDataLayout": (ptr, [ptr]),
            "LLVMSetModuleDataLayout": (None, [ptr, ptr]),
            "LLVMSetTarget": (None, [ptr, text]),
            "LLVMCreatePassBuilderOptions": (ptr, []),
            "LLVMDisposePassBuilderOptions": (None, [ptr]),
            "LLVMRunPasses": (ptr, [ptr, text, ptr, ptr]),
            "LLVMGetErrorMessage": (ptr, [ptr]),
            "LLVMDisposeErrorMessage": (None, [ptr]),
            "LLVMTargetMachineEmitToMemoryBuffer": (
                ctypes.c_int,
                [ptr, ptr, ctypes.c_int, ctypes.POINTER(ptr), ctypes.POINTER(ptr)],
            ),
            "LLVMGetBufferStart": (ptr, [ptr]),
            "LLVMGetBufferSize": (size, [ptr]),
            "LLVMDisposeMemoryBuffer": (None, [ptr]),
            "LLVMDisposeModule": (None, [ptr]),
            "LLVMDisposeMessage": (None, [ptr]),
            "LLVMParseCommandLineOptions": (None, [ctypes.c_int, ctypes.POINTER(text), text]),
        }
        for option in ("LoopVectorization", "SLPVectorization", "LoopUnrolling", "LoopInterleaving"):
            signatures[f"LLVMPassBuilderOptionsSet{option}"] = (None, [ptr, ctypes.c_int])
        for name, (restype, argtypes) in signatures.items():
            function = getattr(self.lib, name)
            function.restype, function.argtypes = restype, argtypes

    def message(self, pointer: int | None) -> str:
        """Copy and free an LLVM-owned message string."""
        if not pointer:
            return ""
        text = ctypes.string_at(pointer).decode(errors="replace")
        self.lib.LLVMDisposeMessage(pointer)
        return text


KERNEL_PIPELINE = "function({})".format(
    ",".join(
        (
            "sroa,early-cse<memssa>,simplifycfg,instcombine,reassociate",
            "loop-mssa(loop-instsimplify,loop-simplifycfg,licm,loop-rotate,licm),simplifycfg,instcombine",
            "sroa,sccp,bdce,instcombine,adce,simplifycfg,instcombine",
            "slp-vectorizer,simplifycfg",
        )
    )
)
"""The default optimizer pipeline: the function passes of LLVM's ``-O1`` pipeline (accumulators out of memory,
invariant address arithmetic out of the loops, loops rotated, dead code out), plus `reassociate` (elementwise
kernels) and the SLP vectorizer (padding copies, prefix sums). It leaves out what ``default<O2>`` spends its time on
and tinycore's kernels do not need: the inliner's call-graph walk (a kernel calls nothing), the loop vectorizer
(kernels arrive vectorized), GVN, jump threading and a second round of simplification; and ``indvars`` (the
induction variable simplification: a third of the optimizer's time on a register-blocked matmul, and with 64-bit
indices 37 of the 39 benchmark kernels below compile to the same machine code without it, the other two run as
fast). Measured with ``bench/bench_llvm_pipeline.py`` and ``bench/bench_kernels.py``: 27% less compile time than
``default<O2>`` with indvars and 9% less again without it, over the 39 kernels of conv, odd matmul, softmax, layernorm,
argmax, cumsum, MLP training and embedding; their total run time within 1% of ``default<O2>``'s, each kernel over
0.1 ms within about 2% (smaller ones vary by 5-9% from run to run either way)."""


CODEGEN_ARGS: tuple[str, ...] = ()
"""The LLVM command-line options of the default `PassOptions`: none. (``-disable-lsr`` was measured: it saves a third
of the code generator's time on a register-blocked matmul, but conv2d ran 12% and the MLP's matmuls 5-9% slower.)"""


def pipeline_for(version: int, pipeline: str) -> str:
    """`pipeline` as LLVM `version` must read it: from LLVM 18 a bare ``instcombine`` in a pipeline text checks that
    it reached a fixpoint and aborts the whole process when it did not (seen on LLVM 19 with a conv's backward
    kernel); the ``-O`` pipelines run it without that check, and so does this one.

    >>> pipeline_for(19, "function(sroa,instcombine,instcombine<max-iterations=2>)")
    'function(sroa,instcombine<no-verify-fixpoint>,instcombine<max-iterations=2>)'
    >>> pipeline_for(15, "function(instcombine)")
    'function(instcombine)'
    """
    if version < 18:
        return pipeline
    return re.sub(r"\binstcombine\b(?!<)", "instcombine<no-verify-fixpoint>", pipeline)


@dataclass(frozen=True)
class PassOptions:
    """What the optimizer runs: `pipeline` is a new-pass-manager pipeline text (default `KERNEL_PIPELINE`;
    ``"default<O2>"`` is what ``clang -O2`` runs), `codegen_level` the code generator's optimization level (0-3),
    and the four switches of LLVM's pass builder options. `codegen_args` are LLVM command-line options (``-name`` or
    ``-name=value``, as ``llc`` takes them); LLVM keeps those per process, so every compile of one toolchain must use
    the same ones (`LLVMToolchain.compile_object` raises `LLVMError` otherwise).

    LLVM's own loop unrolling is off by default: the kernels arrive unrolled and vectorized as far as tinycore's
    optimizer chose, and unrolling them again doubled the compile time without making any benchmark kernel faster
    (matmul 512, sum and elementwise 16M, softmax 4096: within 1-2%, measured with ``THREADS=1``)."""

    pipeline: str = KERNEL_PIPELINE
    codegen_level: int = 2
    codegen_args: tuple[str, ...] = CODEGEN_ARGS
    loop_vectorization: bool = True
    slp_vectorization: bool = True
    loop_unrolling: bool = False
    loop_interleaving: bool = True


class CommandLine:
    """LLVM's command-line options (``-name`` or ``-name=value`` words), which LLVM keeps per process: the first
    compile hands them to `apply`, every later one must ask for the same (else `LLVMError`)."""

    def __init__(self, apply: Callable[[tuple[str, ...]], None]):
        self._apply = apply
        self._args: tuple[str, ...] | None = None
        self._lock = threading.Lock()

    def set(self, args: tuple[str, ...]) -> None:
        """Apply `args` on the first call; check later calls ask for the same."""
        with self._lock:
            if self._args is None:
                bad = [arg for arg in args if not arg.startswith("-") or any(c.isspace() for c in arg)]
                if bad:
                    raise LLVMError(f"LLVM options {bad}: each must be one '-name' or '-name=value' word")
                if args:
                    self._apply(args)
                self._args = args
            elif self._args != args:
                raise LLVMError(
                    f"LLVM options {list(args)}: this process already compiled with {list(self._args)} and LLVM "
                    "keeps them per process (use one set of codegen_args per process)"
                )


def target_cpu_version_problem(cpu: str, choice: LibraryChoice) -> str:
    """Why LLVM library `choice` can't build kernels for CPU `cpu` (``CLANG_CPU``): too old to know every CPU name
    (or of unknown version), with the fix."""
    version = f"LLVM {choice.version}" if choice.version else "an LLVM of unknown version"
    return (
        f"CLANG_CPU={cpu} needs LLVM >= {TARGET_CPU_MIN_VERSION} (older ones don't know every CPU name), and "
        f"{choice.path} is {version}; unset {LIBRARY_ENV} to use llvmlite's LLVM, or use CLANG_BACKEND=c"
    )


class LLVMToolchain:
    """Compiles LLVM IR text to an object file for this machine, in-process (see the module docstring).

    Loading happens on construction (the library and the native target's initialization: ~30 ms once per
    process); use `LLVMToolchain.shared(choice)` to reuse one instance per library. `cpu` and `features` are what
    the host CPU resolves to (the equivalent of ``-march=native``), unless `cpu` is given: then that CPU with its
    default features (``CLANG_CPU``; unchecked here, `shared` checks it). They belong in any cache key.
    """

    _instances: dict[str, LLVMToolchain] = {}
    _instances_lock = threading.Lock()

    def __init__(self, choice: LibraryChoice, cpu: str | None = None):
        if not choice.ok or choice.path is None:
            raise LLVMError(f"no LLVM library: {choice.reason}; {INSTALL_HINT}")
        if choice.version and choice.version < MIN_VERSION:
            raise LLVMError(f"{choice.path} is LLVM {choice.version}; LLVM >= {MIN_VERSION} is needed")
        machine = platform.machine().lower()
        target = _NATIVE_TARGETS.get(machine)
        if target is None:
            raise LLVMError(f"the llvm backend does not know this machine ({machine!r}); use CLANG_BACKEND=c")
        try:
            self._llvm = _Library(choice.path, choice.version)
        except (OSError, AttributeError) as error:
            raise LLVMError(f"loading {choice.path} failed: {error}") from error
        lib = self._llvm.lib
        for part in ("TargetInfo", "Target", "TargetMC", "AsmPrinter", "AsmParser"):
            getattr(lib, f"LLVMInitialize{target}{part}")()
        self.choice = choice
        self.triple: bytes = ctypes.string_at(lib.LLVMGetDefaultTargetTriple())
        self.cpu: str = self._llvm.message(lib.LLVMGetHostCPUName()) if cpu is None else cpu
        self.features: str = self._llvm.message(lib.LLVMGetHostCPUFeatures()) if cpu is None else ""
        target_ref, error = ctypes.c_void_p(), ctypes.c_void_p()
        if lib.LLVMGetTargetFromTriple(self.triple, ctypes.byref(target_ref), ctypes.byref(error)) != 0:
            raise LLVMError(f"no LLVM target for {self.triple.decode()}: {self._llvm.message(error.value)}")
        self._target = target_ref.value
        self._local = threading.local()
        self.command_line = CommandLine(self._parse_command_line)

    @classmethod
    def shared(cls, choice: LibraryChoice | None = None, cpu: str | None = None) -> LLVMToolchain:
        """One toolchain per library path and target CPU per process (`find_library` when `choice` is None). `cpu`:
        None reads ``CLANG_CPU`` (unset: the host), ``"native"`` is the host, else a CPU this machine can run
        (`tinycore_clang.renderer.check_target_cpu`: ValueError otherwise); another CPU than the host's needs LLVM
        >= `TARGET_CPU_MIN_VERSION` (`LLVMError` otherwise)."""
        from tinycore_clang.renderer import check_target_cpu, target_cpu_from_env

        target = target_cpu_from_env() if cpu is None else check_target_cpu(cpu, source="cpu")
        choice = choice or find_library()
        key = choice.path or ""
        if target is not None:
            key = f"{key} cpu={target}"
        with cls._instances_lock:
            if key not in cls._instances:
                chain = cls(choice, cpu=target)
                if target is not None and chain.version < TARGET_CPU_MIN_VERSION:
                    raise LLVMError(target_cpu_version_problem(target, choice))
                cls._instances[key] = chain
            return cls._instances[key]

    @property
    def version(self) -> int:
        """The library's LLVM major version (0 when the file name doesn't say)."""
        return self.choice.version

    def _thread_state(self, codegen_level: int) -> tuple[int, int]:
        """This thread's (context, target machine) for `codegen_level`, created on first use."""
        states: dict[int, tuple[int, int]] = self._local.__dict__.setdefault("states", {})
        if codegen_level not in states:
            lib = self._llvm.lib
            machine = lib.LLVMCreateTargetMachine(
                self._target,
                self.triple,
                self.cpu.encode(),
                self.features.encode(),
                codegen_level,
                _RELOC_PIC,
                _CODE_MODEL_DEFAULT,
            )
            if not machine:
                raise LLVMError(f"LLVM could not create a target machine for {self.triple.decode()} {self.cpu}")
            states[codegen_level] = (lib.LLVMContextCreate(), machine)
        return states[codegen_level]

    def compile_object(self, ir: str, options: PassOptions = PassOptions(), name: str = "kernel") -> bytes:
        """Parse, optimize and compile one LLVM IR module to the bytes of an ELF (or the platform's) object file.

        Raises `LLVMError` with LLVM's message when the IR is invalid or a pass pipeline can't be parsed.
        """
        lib = self._llvm.lib
        if uses_typed_pointers(self.version):
            code = "\n".join(line.split(";", 1)[0] for line in ir.splitlines() if not line.lstrip().startswith("@"))
            if _OPAQUE_POINTER.search(code):
                raise LLVMError(
                    f"LLVM {self.version} needs typed pointers (float*), not ptr: its optimizer crashes on "
                    "opaque-pointer IR (render with typed pointers when libllvm.uses_typed_pointers(version))"
                )
        self.command_line.set(options.codegen_args)
        context, machine = self._thread_state(options.codegen_level)
        data = ir.encode()
        buffer = lib.LLVMCreateMemoryBufferWithMemoryRangeCopy(data, len(data), name.encode())
        module, message = ctypes.c_void_p(), ctypes.c_void_p()
        if lib.LLVMParseIRInContext(context, buffer, ctypes.byref(module), ctypes.byref(message)) != 0:
            raise LLVMError(self._llvm.message(message.value))  # the parser took ownership of the buffer
        try:
            lib.LLVMSetTarget(module, self.triple)
            layout = lib.LLVMCreateTargetDataLayout(machine)
            lib.LLVMSetModuleDataLayout(module, layout)
            self._optimize(module.value, machine, options)
            out = ctypes.c_void_p()
            if lib.LLVMTargetMachineEmitToMemoryBuffer(
                machine, module, _OBJECT_FILE, ctypes.byref(message), ctypes.byref(out)
            ):
                raise LLVMError(self._llvm.message(message.value))
            try:
                return ctypes.string_at(lib.LLVMGetBufferStart(out), lib.LLVMGetBufferSize(out))
            finally:
                lib.LLVMDisposeMemoryBuffer(out)
        finally:
            lib.LLVMDisposeModule(module)

    def _parse_command_line(self, args: tuple[str, ...]) -> None:
        words = [b"tinycore", *(arg.encode() for arg in args)]
        argv = (ctypes.c_char_p * len(words))(*words)
        self._llvm.lib.LLVMParseCommandLineOptions(len(words), argv, None)

    def _optimize(self, module: int, machine: int, options: PassOptions) -> None:
        lib = self._llvm.lib
        builder = lib.LLVMCreatePassBuilderOptions()
        try:
            switches: list[tuple[Callable[..., None], bool]] = [
                (lib.LLVMPassBuilderOptionsSetLoopVectorization, options.loop_vectorization),
                (lib.LLVMPassBuilderOptionsSetSLPVectorization, options.slp_vectorization),
                (lib.LLVMPassBuilderOptionsSetLoopUnrolling, options.loop_unrolling),
                (lib.LLVMPassBuilderOptionsSetLoopInterleaving, options.loop_interleaving),
            ]
            for setter, enabled in switches:
                setter(builder, int(enabled))
            error = lib.LLVMRunPasses(module, pipeline_for(self.version, options.pipeline).encode(), machine, builder)
            if error:
                pointer = lib.LLVMGetErrorMessage(error)
                text = ctypes.string_at(pointer).decode(errors="replace")
                lib.LLVMDisposeErrorMessage(pointer)
                raise LLVMError(f"LLVM pass pipeline {options.pipeline!r}: {text}")
        finally:
            lib.LLVMDisposePassBuilderOptions(builder)
