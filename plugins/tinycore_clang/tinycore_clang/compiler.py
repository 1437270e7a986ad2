"""`ClangCompiler`: C source to a shared object (bytes), by running the system C compiler.

Compiler: ``CC`` if set, else ``clang``, else ``gcc``, else ``cc`` (see `tinycore_clang.toolchain.find_compiler`).
Command: ``CC -x c - <flags> -shared -o out.so``. Default flags (`DEFAULT_FLAGS`):

- ``-O2 -march=native`` (``-march=ARCH`` for a compile target with an arch);
- ``-ffp-contract=off``: no silent fusing of ``a*b+c`` (results match the reference device's rounding; explicit
  ``MULACC`` is still an FMA where the CPU has one);
- ``-fno-math-errno``: ``sqrt`` becomes one instruction; ``-fno-semantic-interposition``: calls between the
  kernel's exported functions are direct;
- ``-fPIC -pipe -w -nostdlib -lgcc``: no C runtime start files and no libc link (undefined symbols such as
  ``memcpy`` resolve against the already loaded process when the library is loaded); ``libgcc`` provides the
  float16 conversion helpers some targets call.

``CLANG_FLAGS`` (shell syntax) is appended, so it can override any of them (``CLANG_FLAGS=-O1``,
``CLANG_FLAGS=-march=x86-64-v3``). Integer wrap-around is rendered explicitly, so ``-fwrapv`` is not needed.

The disk-cache key (`cache_key_parts`) holds the compiler's path and ``--version``, the flags, and what the
``-march`` flag resolves to on this machine (`tinycore_clang.toolchain.read_cpu_features`), so a shared cache never
hands AVX-512 code to an AVX2 CPU. `compile_many` builds the kernels of one schedule in one go: the sources are
merged into at most one translation unit per CPU, and those compile in parallel.
"""

from __future__ import annotations

import atexit
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence

from tinycore.errors import CompileError
from tinycore.runtime.compiler import Compiler
from tinycore.runtime.disk_cache import disk_get, disk_put
from tinycore_clang import toolchain
from tinycore_clang.renderer import KERNEL_MARKER

DEFAULT_FLAGS: tuple[str, ...] = (
    "-O2",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fno-semantic-interposition",
    "-fPIC",
    "-pipe",
    "-w",
)
KERNEL_LINK_FLAGS: tuple[str, ...] = ("-shared", "-nostdlib", "-lgcc")
LIBRARY_LINK_FLAGS: tuple[str, ...] = ("-shared", "-pthread")
_MARKER = re.compile("^" + re.escape(KERNEL_MARKER) + r"(\w+)\s*$", re.M)
_ERROR_LINE = re.compile(r"^(?:<stdin>|[^:\s]+\.c):(\d+):(?:\d+:)?", re.M)

_TMPDIR: str | None = None
_TMPDIR_LOCK = threading.Lock()
_COUNTER = [0]


def scratch_path(suffix: str) -> str:
    """A fresh file name in this process's private temporary folder (created on first use, removed at exit)."""
    global _TMPDIR
    with _TMPDIR_LOCK:
        if _TMPDIR is None or not os.path.isdir(_TMPDIR):
            _TMPDIR = tempfile.mkdtemp(prefix="tinycore-clang-")
            atexit.register(shutil.rmtree, _TMPDIR, True)
        _COUNTER[0] += 1
        return os.path.join(_TMPDIR, f"p{os.getpid()}_{_COUNTER[0]}{suffix}")


def format_compile_error(compiler: str, src: str, stderr: str) -> str:
    """The compiler's message followed by the source lines it complains about, numbered."""
    lines = src.splitlines()
    wanted: list[int] = []
    for match in _ERROR_LINE.finditer(stderr):
        number = int(match.group(1))
        if number not in wanted:
            wanted.append(number)
    excerpt: list[str] = []
    for number in wanted[:5]:
        for n in range(max(1, number - 2), min(len(lines), number + 2) + 1):
            mark = ">>" if n == number else "  "
            excerpt.append(f"{mark}{n:5d} | {lines[n - 1]}")
        excerpt.append("   ...")
    text = f"{compiler} failed:\n{stderr.strip()}"
    if excerpt:
        text += "\nsource:\n" + "\n".join(excerpt)
    return text


class ClangCompiler(Compiler):
    """Compiles C kernels (and the device's runtime library) with the system C compiler; see the module docstring.

    `cc`: compiler path (default: `find_compiler`); `arch`: ``-march`` value (None: ``native``); `flags`: the
    compile flags (default `DEFAULT_FLAGS` + ``-march`` + ``CLANG_FLAGS``); `jobs`: parallel compiler processes for
    `compile_many` (default: CPU count).
    """

    def __init__(
        self,
        cc: str | None = None,
        arch: str | None = None,
        flags: Sequence[str] | None = None,
        jobs: int | None = None,
    ):
        super().__init__(cachekey="clang")
        if cc is None:
            choice = toolchain.find_compiler()
            if not choice.ok:
                raise CompileError(f"CLANG: {choice.reason}; {toolchain.INSTALL_HINT}")
            cc = choice.path
        self.cc: str = cc  # type: ignore[assignment]
        self.arch = arch
        if flags is None:
            extra = shlex.split(os.environ.get("CLANG_FLAGS", ""))
            flags = (*DEFAULT_FLAGS, f"-march={arch or 'native'}", *extra)
        self.flags: tuple[str, ...] = tuple(flags)
        self.jobs = jobs if jobs is not None else toolchain.cpu_count()
        self._key_parts: tuple[str, ...] | None = None

    # ----- cache key -----
    def cache_key_parts(self) -> Sequence[str]:
        """Compiler path and version, flags, and the CPU target ``-march`` resolves to (computed once)."""
        if self._key_parts is None:
            self._key_parts = (
                os.path.realpath(self.cc),
                toolchain.compiler_version(self.cc),
                " ".join(self.flags),
                toolchain.read_cpu_features(self.cc, self.flags),
            )
        return self._key_parts

    # ----- one source -----
    def _command(self, source: str, output: str, link: Sequence[str]) -> list[str]:
        return [self.cc, "-x", "c", source, *self.flags, *link, "-o", output]

    def _run(self, src: str, link: Sequence[str]) -> bytes:
        out = scratch_path(".so")
        try:
            proc = subprocess.run(self._command("-", out, link), input=src.encode(), capture_output=True, timeout=600)
            if proc.returncode != 0:
                stderr = proc.stderr.decode(errors="replace")
                raise CompileError(format_compile_error(os.path.basename(self.cc), src, stderr))
            with open(out, "rb") as file:
                return file.read()
        except (OSError, subprocess.SubprocessError) as error:
            raise CompileError(f"CLANG: running {self.cc} failed: {error}") from error
        finally:
            try:
                os.unlink(out)
            except OSError:
                pass

    def compile(self, src: str) -> bytes:
        """C source of one or more kernels to the bytes of a shared object (raises `CompileError`)."""
        return self._run(src, KERNEL_LINK_FLAGS)

    def compile_runtime_library(self, src: str) -> bytes:
        """Build a library that links libc and pthreads (the thread pool), through the disk cache."""
        key = self.cache_key("runtime-library\n" + " ".join(LIBRARY_LINK_FLAGS) + "\n" + src)
        lib = disk_get(f"compile_{self.cachekey}", key)
        if lib is None:
            lib = self._run(src, LIBRARY_LINK_FLAGS)
            disk_put(f"compile_{self.cachekey}", key, lib)
        return lib

    # ----- batches -----
    def compile_many(self, srcs: Sequence[str]) -> list[bytes]:
        """Compile several kernel sources at once: one shared object per group of sources, at most `jobs` groups
        compiled in parallel. Each returned entry is the library holding that source's kernel (sources of one
        group share a library). Kernels with the same function name never share a group."""
        srcs = list(srcs)
        if len(srcs) <= 1:
            return [self.compile(s) for s in srcs]
        groups = self._group(srcs)
        results: list[bytes | None] = [None] * len(srcs)
        failed: list[list[int]] = []
        procs = []
        for members in groups:
            joined = "\n".join(srcs[i] for i in members)
            base = scratch_path(f"_g{len(procs)}")
            with open(base + ".c", "w") as file:
                file.write(joined)
            err = open(base + ".err", "wb")
            try:
                proc = subprocess.Popen(
                    self._command(base + ".c", base + ".so", KERNEL_LINK_FLAGS),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
            except OSError as error:
                err.close()
                raise CompileError(f"CLANG: running {self.cc} failed: {error}") from error
            procs.append((members, base, proc, err))
        for members, base, proc, err in procs:
            proc.wait()
            err.close()
            try:
                if proc.returncode == 0:
                    with open(base + ".so", "rb") as file:
                        lib = file.read()
                    for i in members:
                        results[i] = lib
                else:
                    failed.append(members)
            finally:
                for ext in (".c", ".so", ".err"):
                    try:
                        os.unlink(base + ext)
                    except OSError:
                        pass
        for members in failed:  # find the culprit with its own message and line numbers
            for i in members:
                results[i] = self.compile(srcs[i])
        return [lib for lib in results if lib is not None]

    def _group(self, srcs: list[str]) -> list[list[int]]:
        ngroups = max(1, min(self.jobs, len(srcs)))
        groups: list[list[int]] = [[] for _ in range(ngroups)]
        sizes = [0] * ngroups
        names: list[set[str]] = [set() for _ in range(ngroups)]
        singles: list[list[int]] = []
        for i in sorted(range(len(srcs)), key=lambda k: -len(srcs[k])):
            found = _MARKER.findall(srcs[i])
            if len(found) != 1:
                singles.append([i])  # not a rendered kernel: build it on its own
                continue
            order = sorted(range(ngroups), key=lambda g: sizes[g])
            target = next((g for g in order if found[0] not in names[g]), None)
            if target is None:
                singles.append([i])
                continue
            groups[target].append(i)
            sizes[target] += len(srcs[i])
            names[target].add(found[0])
        return [g for g in groups if g] + singles

    def compile_cached_many(self, srcs: Sequence[str]) -> list[bytes]:
        """`compile_many` through the disk cache: hits are read, the misses are built in one batch and stored."""
        srcs = list(srcs)
        table = f"compile_{self.cachekey}"
        keys = [self.cache_key(s) for s in srcs]
        libs: list[bytes | None] = [disk_get(table, k) for k in keys]
        missing: dict[str, list[int]] = {}
        for i, lib in enumerate(libs):
            if lib is None:
                missing.setdefault(srcs[i], []).append(i)
        if missing:
            built = self.compile_many(list(missing))
            for positions, lib in zip(missing.values(), built):
                disk_put(table, keys[positions[0]], lib)
                for i in positions:
                    libs[i] = lib
        return [lib for lib in libs if lib is not None]

    def disassemble(self, lib: bytes) -> str:
        """``objdump -d`` of a compiled library (for ``DEBUG>=6``)."""
        path = scratch_path(".so")
        with open(path, "wb") as file:
            file.write(lib)
        try:
            tool = shutil.which("objdump") or "objdump"
            return subprocess.run([tool, "-d", path], capture_output=True, text=True).stdout
        finally:
            os.unlink(path)

    def __repr__(self) -> str:
        return f"<ClangCompiler {self.cc} {' '.join(self.flags)}>"
