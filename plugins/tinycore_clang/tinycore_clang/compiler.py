"""`ClangCompiler`: C source to a shared object (bytes), by running the system C compiler.

Compiler: ``CC`` if set, else ``clang``, else ``gcc``, else ``cc`` (see `tinycore_clang.toolchain.find_compiler`).
Command: ``CC -x c - <flags> -shared -o out.so``. Default flags (`DEFAULT_FLAGS`):

- ``-O2 -march=native`` (``-march=ARCH`` for a compile target with an arch);
- ``-ffp-contract=off``: no silent fusing of ``a*b+c`` (results match the reference device's rounding; explicit
  ``MULACC`` is still an FMA where the CPU has one);
- ``-fno-math-errno``: ``sqrt`` becomes one instruction; ``-fno-semantic-interposition``: calls between the
  kernel's exported functions are direct;
- ``-fno-inline-functions``: the kernel is not inlined into its exported ``NAME_tc`` wrapper (which would make
  the compiler optimize and emit every kernel twice: a third of clang's time on a training step's kernels; the
  wrapper's one extra call per launch is free);
- ``-fPIC -pipe -w -nostdlib -lgcc``: no C runtime start files and no libc link (undefined symbols such as
  ``memcpy`` resolve against the already loaded process when the library is loaded); ``libgcc`` provides the
  float16 conversion helpers some targets call.

``CLANG_FLAGS`` (shell syntax) is appended, so it can override any of them (``CLANG_FLAGS=-O1``,
``CLANG_FLAGS=-march=x86-64-v3``). Integer wrap-around is rendered explicitly, so ``-fwrapv`` is not needed.

The disk-cache key (`cache_key_parts`) holds the compiler's path and ``--version``, the flags, and what the
``-march`` flag resolves to on this machine (`tinycore_clang.toolchain.read_cpu_features`), so a shared cache never
hands AVX-512 code to an AVX2 CPU. Finding those two out runs the compiler twice, so they are kept in the disk cache
too (`ClangCompiler.target_facts`, keyed by the compiler's path, size and mtime and the machine's CPU): a process
whose kernels are all cached starts no compiler at all. `compile_many` builds the kernels of one schedule in one
go: the sources are merged into at most one translation unit per CPU, and those compile in parallel.

With clang, a kernel is compiled (``-c``) and linked in two steps: the driver runs the compiler proper in its own
process only when it has a single job, so ``clang ... -shared -o out.so`` starts clang twice (each start loads
libLLVM: about 40 ms), while ``clang -c`` + the linker command the driver would have run (read once from
``clang -###``, `ClangCompiler.link_command`) starts it once. gcc's driver is cheap to start and links itself.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence

from tinycore.sdk import CompileError, Compiler, disk_get, disk_put
from tinycore_clang import toolchain
from tinycore_clang.renderer import KERNEL_MARKER

DEFAULT_FLAGS: tuple[str, ...] = (
    "-O2",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fno-semantic-interposition",
    "-fno-inline-functions",
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
    """The compiler's message followed by the source lines it complains about, numbered; it names the kernel when
    `src` is one rendered kernel."""
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
    kernels = _MARKER.findall(src)
    what = f" on kernel {kernels[0]}" if len(kernels) == 1 else ""
    text = f"{compiler} failed{what}:\n{stderr.strip()}"
    if excerpt:
        text += "\nsource:\n" + "\n".join(excerpt)
    return text


def cached_facts(table: str, key: str | None, ask: Callable[[], tuple[str, str] | None]) -> tuple[str, str] | None:
    """A pair of strings about the toolchain from disk-cache `table` under `key`, else `ask()` (stored when it
    gives a complete answer, i.e. not None). `key` None (nothing identifies the toolchain): just `ask()`."""
    if key is not None:
        cached = disk_get(table, key)
        if cached is not None:
            try:
                first, second = json.loads(cached)
                if isinstance(first, str) and isinstance(second, str):
                    return first, second
            except ValueError:
                pass
    answer, complete = ask()
    if key is not None and complete:
        disk_put(table, key, json.dumps(list(answer)).encode())
    return answer


def disassemble_library(lib: bytes) -> str:
    """``objdump -d`` of the bytes of a compiled shared object (both CLANG backends; for ``DEBUG>=6``)."""
    path = scratch_path(".so")
    with open(path, "wb") as file:
        file.write(lib)
    try:
        tool = shutil.which("objdump") or "objdump"
        return subprocess.run([tool, "-d", path], capture_output=True, text=True).stdout
    finally:
        os.unlink(path)


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
        self._link: list[str] | None = None  # the linker command template (`link_command`), [] for the driver

    # ----- cache key -----
    def cache_key_parts(self) -> Sequence[str]:
        """Compiler path and version, flags, and the CPU target ``-march`` resolves to (computed once per process;
        the version and target come from the disk cache when this compiler and machine were seen before, see
        `target_facts`)."""
        if self._key_parts is None:
            version, features = self.target_facts()
            self._key_parts = (os.path.realpath(self.cc), version, " ".join(self.flags), features)
        return self._key_parts

    def target_facts(self) -> tuple[str, str]:
        """The compiler's version and what ``-march`` resolves to (`toolchain.compiler_version`,
        `toolchain.read_cpu_features`: two compiler runs, ~80 ms), kept in the disk cache under the compiler's
        `toolchain.compiler_stamp`, the flags and the `toolchain.machine_identity`. Only complete answers are
        stored (a compiler that failed to answer is asked again by the next process)."""
        stamp = toolchain.compiler_stamp(self.cc)
        key = json.dumps(["version+target", stamp, *self.flags, toolchain.machine_identity()])

        def ask() -> tuple[tuple[str, str], bool]:
            version = toolchain.compiler_version(self.cc)
            features = toolchain.read_cpu_features(self.cc, self.flags)
            return (version, features), bool(version) and not features.startswith("cpuinfo:")

        return cached_facts(f"toolchain_{self.cachekey}", key if stamp is not None else None, ask)

    # ----- linking -----
    def link_command(self) -> list[str]:
        """The command that links a kernel object into a shared object, with ``{obj}`` and ``{out}`` in place of
        the file names, exactly as the clang driver would run it (its ``-###`` output, read once and kept in the
        disk cache); ``[]`` when kernels are linked by the compiler driver itself (gcc, or when that output can't
        be read)."""
        if self._link is None:
            self._link = self._read_link_command()
        return self._link

    def _read_link_command(self) -> list[str]:
        if "clang" not in os.path.basename(os.path.realpath(self.cc)).lower():
            return []
        stamp = toolchain.compiler_stamp(self.cc)  # a reinstalled compiler asks again (no subprocess for the key)
        if stamp is None:
            return []
        table, key = f"link_{self.cachekey}", json.dumps(["obj first", stamp, *self.flags, *KERNEL_LINK_FLAGS])
        cached = disk_get(table, key)
        if cached is not None:
            return json.loads(cached)
        obj, out = scratch_path("_probe.o"), scratch_path("_probe.so")  # the driver checks that its input exists
        try:
            with open(obj, "wb"):
                pass
            proc = subprocess.run(
                [self.cc, "-###", obj, *self.flags, *KERNEL_LINK_FLAGS, "-o", out],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.SubprocessError):
            return []
        finally:
            try:
                os.unlink(obj)
            except OSError:
                pass
        commands = [line for line in proc.stderr.splitlines() if line.startswith(" ") and obj in line]
        if proc.returncode != 0 or len(commands) != 1:
            return []
        try:
            command = shlex.split(commands[0])
        except ValueError:
            return []
        if command.count(obj) != 1 or command.count(out) != 1 or not os.path.isabs(command[0]):
            return []
        command = ["{obj}" if arg == obj else "{out}" if arg == out else arg for arg in command]
        disk_put(table, key, json.dumps(command).encode())
        return command

    def _linked(self, obj: str, out: str) -> list[str]:
        return [out if arg == "{out}" else obj if arg == "{obj}" else arg for arg in self.link_command()]

    # ----- one source -----
    def _command(self, source: str, output: str, link: Sequence[str]) -> list[str]:
        return [self.cc, "-x", "c", source, *self.flags, *link, "-o", output]

    def _kernel_commands(self, source: str, output: str) -> list[list[str]]:
        """The commands building kernel source file `source` (``-`` for stdin) into shared object `output`."""
        if not self.link_command():
            return [self._command(source, output, KERNEL_LINK_FLAGS)]
        return [self._command(source, output + ".o", ("-c",)), self._linked(output + ".o", output)]

    def _run(self, src: str, commands: list[list[str]], out: str) -> bytes:
        try:
            for command in commands:
                stdin = src.encode() if "-" in command else None
                proc = subprocess.run(command, input=stdin, capture_output=True, timeout=600)
                if proc.returncode != 0:
                    stderr = proc.stderr.decode(errors="replace")
                    raise CompileError(format_compile_error(os.path.basename(command[0]), src, stderr))
            with open(out, "rb") as file:
                return file.read()
        except (OSError, subprocess.SubprocessError) as error:
            raise CompileError(f"CLANG: running {self.cc} failed: {error}") from error
        finally:
            for path in (out, out + ".o"):
                try:
                    os.unlink(path)
                except OSError:
                    pass

    def compile(self, src: str) -> bytes:
        """C source of one or more kernels to the bytes of a shared object (raises `CompileError`)."""
        out = scratch_path(".so")
        return self._run(src, self._kernel_commands("-", out), out)

    def compile_runtime_library(self, src: str) -> bytes:
        """Build a library that links libc and pthreads (the thread pool), through the disk cache."""
        key = self.cache_key("runtime-library\n" + " ".join(LIBRARY_LINK_FLAGS) + "\n" + src)
        lib = disk_get(f"compile_{self.cachekey}", key)
        if lib is None:
            out = scratch_path(".so")
            lib = self._run(src, [self._command("-", out, LIBRARY_LINK_FLAGS)], out)
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
            commands = self._kernel_commands(base + ".c", base + ".so")
            err = open(base + ".err", "wb")
            try:
                proc = subprocess.Popen(commands[0], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
            except OSError as error:
                err.close()
                raise CompileError(f"CLANG: running {self.cc} failed: {error}") from error
            procs.append((members, base, proc, err, commands[1:]))
        for members, base, proc, err, rest in procs:
            proc.wait()
            err.close()
            try:
                ok = proc.returncode == 0
                for command in rest if ok else ():
                    ok = subprocess.run(command, capture_output=True, timeout=600).returncode == 0
                if ok:
                    with open(base + ".so", "rb") as file:
                        lib = file.read()
                    for i in members:
                        results[i] = lib
                else:
                    failed.append(members)
            except (OSError, subprocess.SubprocessError):
                failed.append(members)
            finally:
                for ext in (".c", ".so", ".so.o", ".err"):
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

    def disassemble(self, lib: bytes) -> str:
        """``objdump -d`` of a compiled library (for ``DEBUG>=6``)."""
        return disassemble_library(lib)

    def __repr__(self) -> str:
        return f"<ClangCompiler {self.cc} {' '.join(self.flags)}>"
