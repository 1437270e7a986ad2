"""`LLVMCompiler`: LLVM IR text to loadable machine code, compiled in-process (the ``llvm`` backend) by the LLVM
bundled in llvmlite or a system libLLVM (`tinycore_clang.libllvm.find_library` picks).

The kernel's IR (from `tinycore_clang.llvm_renderer.LLVMRenderer`) is parsed, optimized and compiled to an object
file inside this process (`tinycore_clang.llvmlite_toolchain.LlvmliteToolchain` or
`tinycore_clang.libllvm.LLVMToolchain`). On x86-64 Linux that object file is the compiled
kernel: `tinycore_clang.runtime.load_kernels` relocates it into memory itself (`tinycore_clang.objloader`), so no
other program runs. Elsewhere (or with ``in_process=False``) the objects are linked into a shared object by the
system linker (``ld -shared``: a few milliseconds per run) and ``dlopen``ed like the C backend's. Nothing else
changes between the two backends: same kernel ABI, same thread pool, same graph runner.

Options (environment, read when the compiler is made):

- ``CLANG_LLVM_PIPELINE``: the optimizer pipeline (default `tinycore_clang.libllvm.KERNEL_PIPELINE`: the
  function passes tinycore's kernels need; ``default<O2>`` is what ``clang -O2`` runs); any new-pass-manager
  pipeline text with a system libLLVM, one of `tinycore_clang.llvmlite_toolchain.PIPELINES` with llvmlite;
- ``CLANG_LLVM_CODEGEN``: the code generator's optimization level 0-3 (default 2);
- ``CLANG_LLVM_UNROLL=1``: let LLVM unroll loops again (off by default, see `tinycore_clang.libllvm.PassOptions`);
- ``CLANG_LLVM_ARGS``: LLVM command-line options, space-separated (default `tinycore_clang.libllvm.CODEGEN_ARGS`;
  ``CLANG_LLVM_ARGS=none`` sets none). LLVM keeps them per process: set them before the first compile.

The target is the host CPU (LLVM's host CPU name and features, the equivalent of ``-march=native``), or the x86-64
CPU ``CLANG_CPU`` names (with that CPU's default features; checked against this machine, since the kernels run
here: `tinycore_clang.renderer.check_target_cpu`). The cache key holds the library's path, version and file stamp
(size and time: a new llvmlite wheel is a new compiler), that CPU name and feature list, and the options. The host's
target facts are kept in the disk cache (keyed by the library file's stamp and
`tinycore_clang.toolchain.machine_identity`), so a process whose kernels are all cached never loads libLLVM; a
``CLANG_CPU`` target needs no look-up at all.

IR for LLVM 14 must use typed pointers (``float*``): its optimizer crashes on opaque ``ptr`` IR, which
`tinycore_clang.libllvm.LLVMToolchain.compile_object` therefore refuses with an error
(`tinycore_clang.libllvm.uses_typed_pointers`).

`compile_many` compiles the kernels of one schedule on `jobs` threads (LLVM runs without the GIL), each as soon as
it is rendered (`streams`); when linking, each group of kernels with distinct names becomes one shared object made
by one linker run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from tinycore.sdk import CompileError, Compiler
from tinycore_clang import toolchain
from tinycore_clang.compiler import cached_facts, disassemble_library, scratch_path
from tinycore_clang.libllvm import (
    INSTALL_HINT,
    LLVMLITE,
    TARGET_CPU_MIN_VERSION,
    LibraryChoice,
    LLVMError,
    LLVMToolchain,
    PassOptions,
    find_library,
    target_cpu_version_problem,
)
from tinycore_clang.llvmlite_toolchain import LlvmliteToolchain
from tinycore_clang.objloader import can_load_objects
from tinycore_clang.renderer import HOST_CPU, check_target_cpu, target_cpu_from_env
from tinycore_clang.toolchain import LINKER_HINT, find_linker

LLVM_MARKER = "; tinycore-clang kernel "
_MARKER = re.compile("^" + re.escape(LLVM_MARKER) + r"(\w+)\s*$", re.M)
_ERROR_LINE = re.compile(r"^[^:\n]*:(\d+):(\d+): error", re.M)


def options_from_env(env: dict[str, str] | None = None) -> PassOptions:
    """`PassOptions` from ``CLANG_LLVM_PIPELINE``, ``CLANG_LLVM_CODEGEN``, ``CLANG_LLVM_UNROLL`` and
    ``CLANG_LLVM_ARGS`` (defaults when unset).

    >>> options_from_env({"CLANG_LLVM_CODEGEN": "3"}).codegen_level
    3
    """
    environ = os.environ if env is None else env
    pipeline = environ.get("CLANG_LLVM_PIPELINE", "").strip() or PassOptions.pipeline
    raw_level = environ.get("CLANG_LLVM_CODEGEN", "").strip() or str(PassOptions.codegen_level)
    if raw_level not in ("0", "1", "2", "3"):
        raise CompileError(f"CLANG_LLVM_CODEGEN={raw_level!r}: expected 0, 1, 2 or 3")
    raw_unroll = environ.get("CLANG_LLVM_UNROLL", "").strip() or "0"
    if raw_unroll not in ("0", "1"):
        raise CompileError(f"CLANG_LLVM_UNROLL={raw_unroll!r}: expected 0 or 1")
    raw_args = environ.get("CLANG_LLVM_ARGS", "").strip()
    args = PassOptions.codegen_args if not raw_args else () if raw_args == "none" else tuple(raw_args.split())
    return PassOptions(
        pipeline=pipeline, codegen_level=int(raw_level), loop_unrolling=raw_unroll == "1", codegen_args=args
    )


def _format_error(message: str, src: str) -> str:
    """LLVM's message followed by the IR lines it points at, numbered."""
    lines = src.splitlines()
    excerpt: list[str] = []
    for match in list(_ERROR_LINE.finditer(message))[:3]:
        number = int(match.group(1))
        for n in range(max(1, number - 2), min(len(lines), number + 2) + 1):
            excerpt.append(f"{'>>' if n == number else '  '}{n:5d} | {lines[n - 1]}")
    kernels = _MARKER.findall(src)
    what = f" on kernel {kernels[0]}" if len(kernels) == 1 else ""
    text = f"LLVM failed{what}:\n{message.strip()}"
    return text + ("\nsource:\n" + "\n".join(excerpt) if excerpt else "")


def open_toolchain(choice: LibraryChoice | None = None, cpu: str | None = None) -> LLVMToolchain | LlvmliteToolchain:
    """The loaded LLVM for `choice` (default `find_library`): llvmlite's or a system library's, one per process,
    library and target CPU (`cpu`: None reads ``CLANG_CPU``, ``"native"`` is the host); `LLVMError` when it can't be
    loaded, ValueError for a CPU this machine can't run."""
    choice = choice or find_library()
    if choice.source == LLVMLITE:
        return LlvmliteToolchain.shared(cpu)
    return LLVMToolchain.shared(choice, cpu)


class LLVMCompiler(Compiler):
    """Compiles the ``llvm`` backend's IR in-process; see the module docstring.

    `library`: which libLLVM (default `find_library`); `options`: the optimizer's settings (default from the
    environment); `in_process`: hand out object files for the in-process loader instead of linked shared objects
    (default: where `tinycore_clang.objloader.can_load_objects`); `linker`: path of ``ld`` when linking (default
    `find_linker`); `jobs`: compile threads for `compile_many`; `cpu`: the target CPU (None: ``CLANG_CPU``, else
    the host; ``"native"``: the host), kept as `target_cpu` (None for the host). Raises `CompileError` when there is
    no library, no linker where one is needed, or a target CPU this machine can't run or this LLVM doesn't know
    (with the fix), at construction, since a device with this compiler could never run a kernel.
    """

    streams = True  # compile_many starts on each source as it arrives (see `tinycore.backend.compiler.Compiler`)

    def __init__(
        self,
        library: LibraryChoice | None = None,
        options: PassOptions | None = None,
        linker: str | None = None,
        jobs: int | None = None,
        in_process: bool | None = None,
        cpu: str | None = None,
    ):
        super().__init__(cachekey="clang_llvm")
        self.library = library if library is not None else find_library()
        if not self.library.ok:
            raise CompileError(f"CLANG llvm backend: {self.library.reason}; {INSTALL_HINT}")
        try:
            self.target_cpu = target_cpu_from_env() if cpu is None else check_target_cpu(cpu, source="cpu")
        except ValueError as error:
            raise CompileError(f"CLANG llvm backend: {error}") from None
        too_old = self.library.version and self.library.version < TARGET_CPU_MIN_VERSION  # (llvmlite's: 0 until loaded)
        if self.target_cpu is not None and too_old:
            raise CompileError(f"CLANG llvm backend: {target_cpu_version_problem(self.target_cpu, self.library)}")
        self.options = options if options is not None else options_from_env()
        self.in_process = can_load_objects() if in_process is None else in_process
        found = linker or ("" if self.in_process else find_linker())
        if found is None:
            raise CompileError(f"CLANG llvm backend: no linker found (LD, ld, ld.lld, ld.gold); {LINKER_HINT}")
        self.linker: str = found
        self.jobs = jobs if jobs is not None else toolchain.cpu_count()
        self._key_parts: tuple[str, ...] | None = None

    @property
    def toolchain(self) -> LLVMToolchain | LlvmliteToolchain:
        """The loaded LLVM: llvmlite's or a system library's (loaded on first use, shared per process)."""
        try:
            return open_toolchain(self.library, self.target_cpu or HOST_CPU)
        except LLVMError as error:
            raise CompileError(f"CLANG llvm backend: {error}") from error

    # ----- cache key -----
    def cache_key_parts(self) -> Sequence[str]:
        """Library path, version and stamp, target CPU name and features as LLVM gets them (`target_facts`), every
        optimizer option, and whether the result is an object file or a shared object."""
        if self._key_parts is None:
            cpu, features = self.target_facts()
            path = self.library.path or ""
            self._key_parts = (
                os.path.realpath(path),
                str(self.library.version),
                json.dumps(toolchain.compiler_stamp(path)),
                cpu,
                features,
                repr(self.options),
                "object" if self.in_process else "shared",
            )
        return self._key_parts

    def target_facts(self) -> tuple[str, str]:
        """The CPU name and feature string LLVM's target machine gets: with a `target_cpu`, that name and no
        features (its defaults); else LLVM's host CPU name and features, from the disk cache when this library and
        machine were seen before (so a fully cached process never loads libLLVM), else from the loaded library."""
        if self.target_cpu is not None:
            return self.target_cpu, ""
        stamp = toolchain.compiler_stamp(self.library.path or "")
        key = json.dumps(["host cpu", stamp, toolchain.machine_identity()]) if stamp is not None else None
        return cached_facts("toolchain_clang_llvm", key, lambda: ((self.toolchain.cpu, self.toolchain.features), True))

    # ----- compiling -----
    def compile_object(self, src: str) -> bytes:
        """One IR module to the bytes of an object file (raises `CompileError` with LLVM's message)."""
        names = _MARKER.findall(src)
        try:
            return self.toolchain.compile_object(src, self.options, names[0] if names else "kernel")
        except LLVMError as error:
            raise CompileError(_format_error(str(error), src)) from error

    def link(self, objects: Sequence[bytes]) -> bytes:
        """Link object files into one shared object with the system linker."""
        base = scratch_path("_llvm")
        paths = [f"{base}_{i}.o" for i in range(len(objects))]
        out = base + ".so"
        try:
            for path, obj in zip(paths, objects):
                with open(path, "wb") as file:
                    file.write(obj)
            command = [self.linker, "-shared", "-o", out, *paths]
            try:
                proc = subprocess.run(command, capture_output=True, timeout=600)
            except (OSError, subprocess.SubprocessError) as error:
                raise CompileError(f"CLANG llvm backend: running {self.linker} failed: {error}") from error
            if proc.returncode != 0:
                stderr = proc.stderr.decode(errors="replace").strip()
                raise CompileError(f"CLANG llvm backend: {os.path.basename(self.linker)} failed:\n{stderr}")
            with open(out, "rb") as file:
                return file.read()
        finally:
            for path in (*paths, out):
                try:
                    os.unlink(path)
                except OSError:
                    pass

    def compile(self, src: str) -> bytes:
        """IR of one or more kernels to the bytes of an object file (`in_process`) or a shared object."""
        obj = self.compile_object(src)
        return obj if self.in_process else self.link([obj])

    def compile_many(self, srcs: Iterable[str]) -> list[bytes]:
        """Compile several modules on `jobs` threads, each starting as soon as `srcs` yields it (`streams`: the
        caller may still be rendering the next ones). In-process, each entry is that source's object file;
        otherwise each group of distinct kernel names is linked into one shared object (one linker run per group)
        and each entry is the library holding that source's kernel."""
        sources: list[str] = []
        workers = max(1, self.jobs)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tinycore-llvm") as pool:
            futures = []
            for src in srcs:
                sources.append(src)
                futures.append(pool.submit(self.compile_object, src))
            objects = [future.result() for future in futures]
        if self.in_process:
            return objects
        groups: list[list[int]] = []
        names_in: list[set[str]] = []
        for i, src in enumerate(sources):
            names = set(_MARKER.findall(src)) or {f"#{i}"}
            target = next((g for g, used in enumerate(names_in) if not used & names), None)
            if target is None:
                groups.append([])
                names_in.append(set())
                target = len(groups) - 1
            groups[target].append(i)
            names_in[target] |= names
        results: list[bytes] = [b""] * len(sources)
        for members in groups:
            lib = self.link([objects[i] for i in members])
            for i in members:
                results[i] = lib
        return results

    def disassemble(self, lib: bytes) -> str:
        """``objdump -d`` of a compiled library (for ``DEBUG>=6``)."""
        return disassemble_library(lib)

    def __repr__(self) -> str:
        how = "loaded in-process" if self.in_process else f"linked by {self.linker}"
        pipeline = self.options.pipeline
        if self.library.source == LLVMLITE and pipeline == PassOptions.pipeline:
            pipeline = "kernel"  # what llvmlite runs for the default pipeline (see llvmlite_toolchain)
        options = f"{pipeline} codegen O{self.options.codegen_level}"
        target = f" for {self.target_cpu}" if self.target_cpu is not None else ""
        return f"<LLVMCompiler {self.library.path} {options}{target}, {how}>"
