"""`HIPCompiler`: HIP-style C++ to a linked AMDGPU code object (``.hsaco``) for one ``gfx`` arch, with clang. No GPU or
ROCm install is needed: ``clang -x hip --offload-arch=ARCH -nogpulib -nogpuinc --cuda-device-only
--no-gpu-bundle-output`` compiles and links (with lld) in one step.

The compiler is ``AMD_CLANG`` if set, else the newest of ``clang-19`` .. ``clang-15``, ``clang`` on ``PATH``
(clang 19 knows gfx90a, gfx942, gfx1100-1103, gfx1150-1152, gfx1200/1201; clang 15 stops at gfx1100). An arch is
checked against ``gfx`` names before it reaches clang, and clang's refusal of an arch it does not know is a
`CompileError` naming the fix. The disk-cache key holds clang's path and version, the flags and the arch.

A stored binary is a `tinycore.sdk.KernelImage`: the kernel's parameter kinds and the code object.
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

from tinycore.sdk import CompileError, Compiler, KernelImage

ARCH_PATTERN = re.compile(r"^gfx[0-9]{2,3}[0-9a-f]?$")
CLANG_NAMES = ("clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang")
INSTALL_CLANG = "apt-get install -y --no-install-recommends clang-19 lld-19 (or set AMD_CLANG to a clang with lld)"
FLAGS = ("-x", "hip", "-nogpulib", "-nogpuinc", "--cuda-device-only", "--no-gpu-bundle-output", "-O3", "-std=c++17")


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
        from tinycore_amd.renderer import HIP_C

        name, kinds = HIP_C.signature_of(src)
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
