"""The ``AMD`` compilers: HIP-style C++ to a linked AMDGPU code object (``.hsaco``) for one ``gfx`` arch.

- `HIPRTCCompiler`: ROCm's runtime compiler, hipRTC (`tinycore_amd.hiprtc`), with ``--offload-arch=ARCH -O3
  -std=c++17``. The source is the same as clang's: it needs no HIP header, and hipRTC's own pre-included ones don't
  clash with it (checked with Debian 12's ROCm 5.2: every kernel case builds for gfx90a and gfx1030). An arch that
  hipRTC's comgr does not list is refused before hipRTC sees it (hipRTC 5.2 aborts the process on one).
- `HIPCompiler`: clang. No GPU or ROCm install is needed: ``clang -x hip --offload-arch=ARCH -nogpulib -nogpuinc
  --cuda-device-only --no-gpu-bundle-output`` compiles and links (with lld) in one step. The compiler is
  ``AMD_CLANG`` if set, else the newest of ``clang-19`` .. ``clang-15``, ``clang`` on ``PATH`` (clang 19 knows
  gfx90a, gfx942, gfx1100-1103, gfx1150-1152, gfx1200/1201; clang 15 stops at gfx1100); clang's refusal of an arch it
  does not know is a `CompileError` naming the fix.

Which one (`make_compiler`): ``AMD_COMPILER=clang`` or ``hiprtc`` forces it; unset, the device (a GPU) uses hipRTC
when ROCm's hipRTC loads and clang otherwise, and ``tinycore_compile_target`` (no GPU) uses clang. An arch is checked
against ``gfx`` names before any compiler sees it. The disk-cache key holds the compiler (clang's path and version,
or hipRTC's version and library file), the flags and the arch; the two compilers never share an entry.

A stored binary is a `tinycore.sdk.KernelImage`: the kernel's parameter kinds and the code object, whichever compiler
built it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from tinycore.sdk import CompileError, Compiler, KernelImage
from tinycore_amd import hiprtc

ARCH_PATTERN = re.compile(r"^gfx[0-9]{2,3}[0-9a-f]?$")
CLANG_NAMES = ("clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang")
INSTALL_CLANG = "apt-get install -y --no-install-recommends clang-19 lld-19 (or set AMD_CLANG to a clang with lld)"
FLAGS = ("-x", "hip", "-nogpulib", "-nogpuinc", "--cuda-device-only", "--no-gpu-bundle-output", "-O3", "-std=c++17")
HIPRTC_FLAGS = ("-O3", "-std=c++17")  # hipRTC pre-includes its own HIP headers: no -nogpuinc, nothing to link
COMPILER_VARIABLE = "AMD_COMPILER"
COMPILERS = ("clang", "hiprtc")
HIPRTC_ARCH_FIX = f"a ROCm whose hipRTC knows the arch, or {COMPILER_VARIABLE}=clang and {INSTALL_CLANG}"


def check_arch(arch: str) -> str:
    """`arch` if it looks like an AMDGPU processor name (``gfx90a``, ``gfx1100``), else a ValueError.

    >>> check_arch("gfx90a"), check_arch("gfx1201")
    ('gfx90a', 'gfx1201')
    """
    if not ARCH_PATTERN.match(arch):
        raise ValueError(f"AMD: {arch!r} is not an AMDGPU architecture: use a gfx name such as gfx90a or gfx1100")
    return arch


@cache
def find_clang() -> str | None:
    """The clang that builds AMDGPU code objects (`AMD_CLANG`, else the newest on PATH), or None."""
    chosen = os.environ.get("AMD_CLANG")
    if chosen:
        return shutil.which(chosen) or (chosen if Path(chosen).exists() else None)
    return next((path for name in CLANG_NAMES if (path := shutil.which(name))), None)


@cache
def clang_version(clang: str) -> str:
    """The first line of ``clang --version``."""
    done = subprocess.run([clang, "--version"], capture_output=True, text=True, timeout=30)
    return done.stdout.splitlines()[0] if done.stdout else "unknown"


@cache
def known_archs(clang: str) -> frozenset[str]:
    """The ``gfx`` names `clang` can build for (``--print-supported-cpus`` for the amdgcn target)."""
    command = [clang, "--target=amdgcn-amd-amdhsa", "-nogpulib", "--print-supported-cpus"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    return frozenset(re.findall(r"\bgfx[0-9a-f]+\b", done.stdout + done.stderr))


def supports_arch(arch: str) -> str | None:
    """None when the installed clang builds for `arch`, else why not (no clang; a clang that doesn't know it)."""
    clang = find_clang()
    if clang is None:
        return f"no clang found ({', '.join(CLANG_NAMES)})"
    if arch not in known_archs(clang):
        return f"{clang} ({clang_version(clang)}) does not know {arch}"
    return None


def kernel_signature(src: str) -> tuple[str, list[str]]:
    """(kernel name, parameter kinds) of rendered HIP source; a `CompileError` when it has no kernel.

    >>> kernel_signature('extern "C" __attribute__((global)) void k(float* __restrict__ a, const long long n) {}')
    ('k', ['buffer', 'long'])
    """
    from tinycore_amd.renderer import HIP_C

    try:
        return HIP_C.signature_of(src)
    except ValueError as error:
        raise CompileError(f"AMD compiler: {error}") from None


class HIPCompiler(Compiler):
    """HIP-style C++ to a ``.hsaco`` for `arch`, through clang; cached by core."""

    def __init__(self, arch: str):
        self.arch = check_arch(arch)
        super().__init__(cachekey=f"amd_{arch}")

    @property
    def clang(self) -> str:
        """The clang in use; a `CompileError` naming the fix when there is none."""
        clang = find_clang()
        if clang is None:
            raise CompileError(f"AMD compiler: no clang found ({', '.join(CLANG_NAMES)}); fix: {INSTALL_CLANG}")
        return clang

    def cache_key_parts(self) -> Sequence[str]:
        """clang's path and version, the flags, the arch and the stored format."""
        return (self.clang, clang_version(self.clang), *FLAGS, self.arch, KernelImage.MAGIC.decode())

    def compile(self, src: str) -> bytes:
        """Build `src`; a `CompileError` names the kernel and carries clang's messages."""
        name, kinds = kernel_signature(src)
        with tempfile.TemporaryDirectory(prefix="tinycore-amd-") as folder:
            source, output = Path(folder) / f"{name}.hip", Path(folder) / f"{name}.hsaco"
            source.write_text(src)
            command = [self.clang, *FLAGS, f"--offload-arch={self.arch}", "-o", str(output), str(source)]
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            if done.returncode != 0 or not output.exists():
                hint = f"; fix: {INSTALL_CLANG}" if "invalid target ID" in done.stderr else ""
                raise CompileError(
                    f"AMD (tinycore-amd): kernel {name} failed to compile for {self.arch} with {self.clang}:\n"
                    + done.stderr.strip()
                    + hint
                )
            return KernelImage.pack(kinds, output.read_bytes())


class HIPRTCCompiler(Compiler):
    """HIP-style C++ to a code object for `arch`, through ROCm's hipRTC (`rtc`: a `tinycore_amd.hiprtc.HIPRTCApi`;
    None: the installed one, a `HIPRTCMissing` naming the fix without it); cached by core."""

    def __init__(self, arch: str, rtc: hiprtc.HIPRTCApi | None = None):
        self.arch = check_arch(arch)
        self.rtc = rtc if rtc is not None else hiprtc.load_hiprtc()
        major, minor = self.rtc.version()
        self.version = f"{major}.{minor}"
        self.options = (f"--offload-arch={self.arch}", *HIPRTC_FLAGS)
        self._archs: frozenset[str] | None = None
        super().__init__(cachekey=f"amd_hiprtc_{arch}")

    def cache_key_parts(self) -> Sequence[str]:
        """``hiprtc``, its version and library file (the exact ROCm build), the options, the arch and the stored
        format."""
        return ("hiprtc", self.version, self.rtc.library, *self.options, self.arch, KernelImage.MAGIC.decode())

    def unknown_arch(self) -> str | None:
        """Why hipRTC can't build for `arch` (its comgr does not list it), or None (listed, or comgr can't be asked)."""
        if self._archs is None:
            self._archs = self.rtc.archs() or frozenset()
        if not self._archs or self.arch in self._archs:
            return None
        return f"hipRTC {self.version} ({self.rtc.library}) does not know {self.arch}"

    def compile(self, src: str) -> bytes:
        """Build `src`; a `CompileError` names the kernel and the arch and carries hipRTC's log. The program is
        destroyed whatever happens once it exists."""
        name, kinds = kernel_signature(src)
        failed = f"AMD (tinycore-amd): kernel {name} failed to compile for {self.arch} with hipRTC {self.version}"
        if (problem := self.unknown_arch()) is not None:
            raise CompileError(f"{failed}: {problem}; fix: {HIPRTC_ARCH_FIX}")
        try:
            program = self.rtc.create_program(src, f"{name}.hip")
        except hiprtc.HIPRTCError as error:
            raise CompileError(f"{failed}: {error}") from None
        try:
            try:
                self.rtc.compile_program(program, self.options)
            except hiprtc.HIPRTCError as error:
                raise CompileError(f"{failed} ({error.error}):\n{self._log(program)}") from None
            try:
                code = self.rtc.code(program)
            except hiprtc.HIPRTCError as error:
                raise CompileError(f"{failed}: {error}") from None
        finally:
            self.rtc.destroy_program(program)
        if not code:
            raise CompileError(f"{failed}: hipRTC returned no code object")
        return KernelImage.pack(kinds, code)

    def _log(self, program: Any) -> str:
        try:
            return self.rtc.program_log(program).strip() or "(hipRTC wrote no log)"
        except hiprtc.HIPRTCError as error:
            return f"(no log: {error})"


def compiler_choice() -> str | None:
    """``AMD_COMPILER`` (``clang`` or ``hiprtc``, any case), None when unset or empty; a ValueError naming the variable
    and the allowed values for anything else."""
    value = os.environ.get(COMPILER_VARIABLE, "").strip()
    if not value:
        return None
    if value.lower() not in COMPILERS:
        raise ValueError(
            f"{COMPILER_VARIABLE}={value!r} is not an AMD compiler: use one of {', '.join(COMPILERS)} (or leave it "
            "unset: hipRTC when ROCm's hipRTC loads, else clang)"
        )
    return value.lower()


def pick_hiprtc(on_gpu: bool = True) -> hiprtc.HIPRTCApi | None:
    """The hipRTC to build with, or None for clang. ``AMD_COMPILER`` forces one (``hiprtc`` without hipRTC: the
    `HIPRTCMissing` naming the fix); unset, hipRTC when `on_gpu` (a device, not a compile-only target) and it loads."""
    choice = compiler_choice()
    if choice == "clang" or (choice is None and not on_gpu):
        return None
    try:
        return hiprtc.load_hiprtc()
    except hiprtc.HIPRTCMissing as error:
        if choice == "hiprtc":
            reason, fix = (
                f"{COMPILER_VARIABLE}=hiprtc, but {error.reason}",
                f"{error.fix}; or unset {COMPILER_VARIABLE}",
            )
            raise hiprtc.HIPRTCMissing(reason, fix) from None
        return None


def make_compiler(arch: str, on_gpu: bool = True) -> Compiler:
    """The compiler for `arch` (see `pick_hiprtc`): `HIPRTCCompiler` or `HIPCompiler`."""
    arch = check_arch(arch)
    rtc = pick_hiprtc(on_gpu)
    return HIPCompiler(arch) if rtc is None else HIPRTCCompiler(arch, rtc)


def compiler_problem(arch: str) -> tuple[str, str] | None:
    """Why the GPU's compiler can't build for `arch`, as (reason, fix), or None. For the probe: never raises."""
    try:
        compiler = make_compiler(arch)
    except ValueError as error:
        return str(error), f"set {COMPILER_VARIABLE} to one of {', '.join(COMPILERS)}, or unset it"
    except hiprtc.HIPRTCMissing as error:
        return error.reason, error.fix
    except CompileError as error:  # hipRTC loaded but failed (hiprtcVersion)
        return str(error), hiprtc.INSTALL_HIPRTC
    if isinstance(compiler, HIPRTCCompiler):
        problem, fix = compiler.unknown_arch(), HIPRTC_ARCH_FIX
    else:
        problem, fix = (
            supports_arch(arch),
            "apt-get install clang-19 lld-19 (or set AMD_CLANG to a clang that knows it)",
        )
    return None if problem is None else (f"GPU arch {arch} not supported by this build: {problem}", fix)


def describe_compiler(on_gpu: bool = True) -> str:
    """Which compiler a GPU (`on_gpu`) or a compile-only target uses, and its version, for ``tinycore doctor``."""
    try:
        rtc = pick_hiprtc(on_gpu)
    except (ValueError, CompileError) as error:
        return f"none: {error}"
    if rtc is not None:
        major, minor = rtc.version()
        return f"hipRTC {major}.{minor} ({rtc.path})"
    clang = find_clang()
    return (
        f"clang: not found ({', '.join(CLANG_NAMES)})" if clang is None else f"clang {clang} ({clang_version(clang)})"
    )
