"""`MetalCompiler`: Metal Shading Language to a Metal library, and `syntax_check`: an approximate check that works
anywhere clang is.

Two toolchains, both Apple's and both macOS only:

- ``xcrun``: ``xcrun -sdk macosx metal`` (Xcode) builds AIR, ``metallib`` links it; the stored binary is the
  ``.metallib`` (it starts with ``MTLB``), so core's disk cache holds real libraries;
- ``runtime``: the Metal framework's compiler, ``newLibraryWithSource:options:error:`` (through pyobjc, on the
  opened device's `tinycore_metal.api.MetalAPI`). Metal hands out no bytes for such a library, so the stored binary
  is the source the compiler accepted; the program builds it again when it is loaded (the library of this process's
  own compile is reused, and Metal keeps its own shader cache).

``auto`` picks ``xcrun`` where Xcode's Metal compiler is installed, else ``runtime``. Both compile with fast math off
(``-fno-fast-math``; ``MTLCompileOptions.mathMode = .safe``, or ``fastMathEnabled = NO`` before macOS 15): the
renderer's decompositions rely on IEEE semantics. Off macOS, compiling raises a `CompileError` naming what is
missing and the fix; `syntax_check` is the check that works there (clang with the stand-in header in
``tinycore_metal/stdlib_stub``).

A stored binary is a `tinycore.sdk.KernelImage`: the kernel's parameter kinds, then the library (or source).
"""

from __future__ import annotations

import functools
import platform
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tinycore.sdk import CompileError, Compiler, DeviceError, KernelImage
from tinycore_metal.renderer import METAL_MSL, check_arch

STDLIB_STUB = Path(__file__).parent / "stdlib_stub"  # the stand-in <metal_stdlib>
CLANG_NAMES = ("clang-19", "clang-18", "clang-17", "clang-16", "clang")
SYNTAX_FLAGS = ("-x", "c++", "-std=c++17", "-fsyntax-only", "-Werror", "-Wno-unknown-attributes")
XCRUN_FLAGS = ("-std=metal3.1", "-fno-fast-math")  # MSL 3.1 (macOS 14) for bfloat
METALLIB_MAGIC = b"MTLB"
INSTALL = "pip install 'tinycore[metal]'"
NOT_MACOS = (
    "Metal Shading Language compiles only on macOS (Apple's Metal compiler: the Metal framework through "
    "pyobjc-framework-Metal, or `xcrun metal` from Xcode)"
)
NOT_MACOS_FIX = (
    "compile on macOS with an Apple GPU (pip install 'tinycore[metal]' there); here, "
    "tinycore_metal.compiler.syntax_check(src) checks the source approximately with clang-19"
)


def parameter_kinds(src: str) -> tuple[str, list[str]]:
    """(kernel name, parameter kinds) of rendered MSL: buffers, then variables; the attribute-bound launch ids
    (``gid``, ``lid``) are not arguments. A CompileError without a kernel.

    >>> parameter_kinds("kernel void k(device float* data0 [[buffer(0)]], constant long& n [[buffer(1)]], "
    ...                 "uint3 gid [[threadgroup_position_in_grid]]) {}")
    ('k', ['buffer', 'long'])
    """
    try:
        name, kinds = METAL_MSL.signature_of(re.sub(r"\[\[[^\]]*\]\]", "", src))  # without the [[...]] bindings
    except ValueError as error:
        raise CompileError(f"Metal compiler: {error}") from None
    extra = len(METAL_MSL.extra_params)
    return name, kinds[: len(kinds) - extra] if extra else kinds


def find_clang() -> str | None:
    """The newest clang on PATH (clang-19 first), None without one."""
    return next((path for path in map(shutil.which, CLANG_NAMES) if path), None)


def syntax_check(src: str, clang: str | None = None) -> None:
    """Check MSL `src` (one or several kernels) with ``clang -x c++ -std=c++17 -fsyntax-only`` against the stand-in
    ``metal_stdlib`` of ``tinycore_metal/stdlib_stub``: undeclared names, bad lanes, wrong types and argument counts
    fail, Metal's address-space rules are not checked. A `CompileError` with clang's log on failure, or naming the
    fix when no clang is installed."""
    clang = clang or find_clang()
    if clang is None:
        raise CompileError(
            "Metal syntax check: clang-19 not installed (the stand-in check runs clang); fix: apt-get install clang-19"
        )
    cmd = [clang, *SYNTAX_FLAGS, "-I", str(STDLIB_STUB), "-"]
    done = subprocess.run(cmd, input=src, capture_output=True, text=True)
    if done.returncode != 0:
        raise CompileError(f"Metal syntax check ({Path(clang).name}, stand-in metal_stdlib) failed:\n{done.stderr}")


@functools.cache
def xcrun_metal() -> str | None:
    """The version line of Xcode's Metal compiler (``xcrun -sdk macosx metal --version``), None where it is not
    installed (every system but macOS with Xcode)."""
    if shutil.which("xcrun") is None:
        return None
    try:
        done = subprocess.run(
            ["xcrun", "-sdk", "macosx", "metal", "--version"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


class MetalCompiler(Compiler):
    """MSL to a Metal library for the Apple GPU family `arch` (``appleN``), cached by core.

    `device`: the opened `tinycore_metal.device.MetalDevice` whose Metal framework the ``runtime`` toolchain uses
    (None: the system's default device, opened on first use); `toolchain`: ``"auto"``, ``"xcrun"`` or
    ``"runtime"`` (see the module docstring)."""

    def __init__(self, arch: str, device: Any = None, toolchain: str = "auto"):
        if toolchain not in ("auto", "xcrun", "runtime"):
            raise ValueError(f"METAL: toolchain must be auto, xcrun or runtime, not {toolchain!r}")
        self.arch, self.device, self.toolchain = check_arch(arch), device, toolchain
        self._resolved: tuple[str, tuple[str, ...]] | None = None
        super().__init__(cachekey=f"metal_{arch}")

    def resolve(self) -> tuple[str, tuple[str, ...]]:
        """``(toolchain, cache key parts)``, found once; a `CompileError` naming what is missing and the fix."""
        if self._resolved is None:
            version = xcrun_metal() if self.toolchain in ("auto", "xcrun") else None
            if version is not None:
                self._resolved = ("xcrun", (version, *XCRUN_FLAGS))
            elif self.toolchain == "xcrun":
                raise CompileError(
                    "Metal compiler: `xcrun metal` is not installed (Xcode's Metal compiler); fix: install Xcode "
                    "(xcode-select --install does not include it), or use toolchain='runtime'"
                )
            else:
                dev = self._runtime()
                self._resolved = ("runtime", (dev.api.os_version(), "mathMode=safe"))
        return self._resolved

    def _runtime(self) -> Any:
        """The device whose Metal framework compiles (the system default one when none was given)."""
        if self.device is not None:
            return self.device
        if platform.system() != "Darwin":
            raise CompileError(f"Metal compiler: {NOT_MACOS}, and this is {platform.system()}; fix: {NOT_MACOS_FIX}")
        from tinycore_metal.device import MetalDevice

        try:
            self.device = MetalDevice()  # a DeviceError without pyobjc-framework-Metal or an Apple GPU
        except DeviceError as error:
            raise CompileError(
                f"Metal compiler: `xcrun metal` is not found and the Metal framework can't compile here "
                f"({error.reason}); fix: {error.fix or INSTALL} (or install Xcode for `xcrun metal`)"
            ) from None
        return self.device

    def cache_key_parts(self) -> Sequence[str]:
        """The toolchain, its version and flags, and the stored format (`KernelImage.MAGIC`)."""
        toolchain, parts = self.resolve()
        return (toolchain, *parts, KernelImage.MAGIC.decode())

    def compile(self, src: str) -> bytes:
        """Build `src`; a `CompileError` names the kernel and carries the Metal compiler's log."""
        name, kinds = parameter_kinds(src)
        toolchain, _ = self.resolve()
        if toolchain == "xcrun":
            return KernelImage.pack(kinds, self._xcrun(name, src))
        from tinycore_metal.api import MetalError

        dev = self._runtime()
        try:
            dev.remember_library(src.encode(), dev.api.compile_source(dev.mtl, src))
        except MetalError as error:
            raise CompileError(f"METAL (tinycore-metal): kernel {name} failed to compile: {error.reason}") from None
        return KernelImage.pack(kinds, src.encode())

    def _xcrun(self, name: str, src: str) -> bytes:
        """``xcrun metal`` to AIR, ``xcrun metallib`` to a library; the library's bytes."""
        with tempfile.TemporaryDirectory() as folder:
            air, lib = Path(folder) / f"{name}.air", Path(folder) / f"{name}.metallib"
            steps = (
                ["xcrun", "-sdk", "macosx", "metal", "-x", "metal", *XCRUN_FLAGS, "-c", "-", "-o", str(air)],
                ["xcrun", "-sdk", "macosx", "metallib", str(air), "-o", str(lib)],
            )
            for cmd, stdin in zip(steps, (src, None)):
                done = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
                if done.returncode != 0:
                    raise CompileError(
                        f"METAL (tinycore-metal): kernel {name} failed to compile ({' '.join(cmd[3:5])}):\n"
                        + done.stderr
                    )
            return lib.read_bytes()
