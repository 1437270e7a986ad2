"""The thread pool as LLVM IR shipped with the plugin, so the CLANG device needs no C compiler at all.

The pool (`tinycore_clang.threadpool.RUNTIME_SRC`) is C. Where a C compiler exists it is compiled like a kernel;
where none does, the llvm backend compiles `IR_FILE` instead: the IR ``clang`` makes of the same source for x86-64
Linux (glibc), with ``TC_LSB_ATFORK`` defined so it needs no link step (see the C source). The file's first line
records the sha256 of the C source it was made from; `shipped_ir` refuses a file that does not match the source
(a test checks it on every machine), and ``python -m tinycore_clang.pool_ir`` regenerates it with the ``clang`` on
``PATH`` (or ``CC``) after the C changes.

`usable_here` says whether this machine can run it: x86-64 Linux with glibc, and an LLVM that reads clang 19's IR
(llvmlite's bundled one, or a system ``libLLVM`` >= `MIN_LLVM`).
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from importlib import resources

from tinycore_clang.libllvm import LLVMLITE
from tinycore_clang.threadpool import RUNTIME_SRC

IR_FILE = "threadpool_x86_64_linux.ll"
TRIPLE = "x86_64-unknown-linux-gnu"
MIN_LLVM = 19
HEADER = "; tinycore-clang thread pool, made by `python -m tinycore_clang.pool_ir` from RUNTIME_SRC sha256="


def source_digest(src: str = RUNTIME_SRC) -> str:
    """The sha256 (hex) of the C source the IR is made from."""
    return hashlib.sha256(src.encode()).hexdigest()


def usable_here(library_source: str = LLVMLITE, library_version: int = 0) -> str | None:
    """None when the shipped IR can be compiled and run here with the given LLVM (``source``/``version`` of a
    `tinycore_clang.libllvm.LibraryChoice`), else why not."""
    if not sys.platform.startswith("linux") or platform.machine().lower() not in ("x86_64", "amd64"):
        return f"the shipped thread pool IR is for x86-64 Linux, this is {sys.platform} on {platform.machine()}"
    libc = _libc_name()
    if libc != "glibc":
        return f"the shipped thread pool IR is for glibc, this system's C library is {libc or 'unknown'}"
    if library_source != LLVMLITE and library_version < MIN_LLVM:
        return f"the shipped thread pool IR needs LLVM >= {MIN_LLVM} (clang 19's IR); the system's is {library_version}"
    return None


def _libc_name() -> str:
    """``glibc`` on a glibc system (asked of the C library itself, so a static or relocated python can't hide
    it), else what `platform.libc_ver` finds ('' when nothing)."""
    try:
        if os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc"):
            return "glibc"
    except (AttributeError, ValueError, OSError):  # not a glibc system (or no confstr at all)
        pass
    return platform.libc_ver()[0]


def shipped_ir() -> str:
    """The shipped IR text; a RuntimeError naming the fix when it was made from another version of the C source."""
    text = resources.files("tinycore_clang").joinpath(IR_FILE).read_text(encoding="utf-8")
    first = text.partition("\n")[0]
    if first != HEADER + source_digest():
        raise RuntimeError(
            f"tinycore_clang/{IR_FILE} was made from another version of threadpool.RUNTIME_SRC; regenerate it: "
            "python -m tinycore_clang.pool_ir (needs clang)"
        )
    return text


def render_ir(cc: str) -> str:
    """The IR `cc` (a clang) makes of `RUNTIME_SRC` for `TRIPLE`, headed by the source's digest."""
    flags = ["-O2", "-fPIC", f"--target={TRIPLE}", "-DTC_LSB_ATFORK", "-S", "-emit-llvm"]
    command = [cc, *flags, "-x", "c", "-", "-o", "-"]
    try:
        proc = subprocess.run(command, input=RUNTIME_SRC, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as error:
        raise RuntimeError(f"running {cc} failed: {error}") from error
    if proc.returncode != 0:
        raise RuntimeError(f"{cc} could not make LLVM IR of the thread pool (a clang is needed):\n{proc.stderr}")
    body = [line for line in proc.stdout.splitlines() if not line.startswith(("; ModuleID", "source_filename"))]
    return HEADER + source_digest() + "\n" + "\n".join(body).strip() + "\n"


def main() -> int:
    """Regenerate `IR_FILE` next to this module with ``CC`` or the ``clang`` on ``PATH``."""
    cc = os.environ.get("CC", "").strip() or "clang"
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), IR_FILE)
    with open(path, "w", encoding="utf-8") as file:
        file.write(render_ir(cc))
    print(f"wrote {path} (RUNTIME_SRC sha256 {source_digest()[:16]}...)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
