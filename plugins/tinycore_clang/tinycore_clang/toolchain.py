"""Finding the C compiler and describing the machine: compiler choice, version, resolved CPU target, thread count.

Light by contract (stdlib only, nothing runs at import): the probe calls `find_compiler`, which only looks at the
environment and ``PATH``. The facts that need a subprocess (`compiler_version`, `read_cpu_features`) run at most once
per process and compiler, when the first kernel is compiled or ``tinycore plugins -v`` asks; the compiler keeps
them in the disk cache under `compiler_stamp` and `machine_identity`, so a later process runs no subprocess.

Compiler choice: ``CC`` when set (a name looked up on ``PATH`` or a path), else ``clang``, else ``gcc``, else ``cc``.

>>> isinstance(default_thread_count(), int) and default_thread_count() >= 1
True
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass

COMPILER_SEARCH_ORDER = ("clang", "gcc", "cc")
LINKER_SEARCH_ORDER = ("ld", "ld.lld", "ld.gold")
LINKER_HINT = "install binutils (apt-get install binutils) or set LD=/path/to/ld"
INSTALL_HINT = "install a C compiler (apt-get install clang, or apt-get install gcc) or set CC=/path/to/cc"


@dataclass(frozen=True)
class CompilerChoice:
    """The C compiler the device will use: `path` (absolute), the `requested` name and where the choice came from
    (``"CC"`` or ``"PATH"``). `path` is None when nothing usable was found; `reason` then says why."""

    path: str | None
    requested: str
    source: str
    reason: str = ""

    @property
    def ok(self) -> bool:
        """True when a compiler executable was found."""
        return self.path is not None

    @property
    def family(self) -> str:
        """``"clang"`` or ``"gcc"`` judged from the executable name (``"cc"`` when unknown)."""
        base = os.path.basename(os.path.realpath(self.path or self.requested)).lower()
        if "clang" in base:
            return "clang"
        if "gcc" in base or base.startswith("cc1") or "g++" in base:
            return "gcc"
        return "cc"


def find_compiler(env: dict[str, str] | None = None) -> CompilerChoice:
    """The compiler to use, from ``CC`` or ``PATH`` (cheap: no subprocess).

    >>> find_compiler({"CC": "/surely/not/there/cc", "PATH": ""}).reason
    'CC=/surely/not/there/cc is not an executable on PATH'
    """
    environ = os.environ if env is None else env
    search_path = environ.get("PATH", os.defpath)
    requested = environ.get("CC", "").strip()
    if requested:
        parts = shlex.split(requested)
        exe = parts[0] if parts else requested
        found = shutil.which(exe, path=search_path)
        if found is None:
            return CompilerChoice(None, requested, "CC", f"CC={requested} is not an executable on PATH")
        return CompilerChoice(os.path.abspath(found), requested, "CC")
    for name in COMPILER_SEARCH_ORDER:
        found = shutil.which(name, path=search_path)
        if found is not None:
            return CompilerChoice(os.path.abspath(found), name, "PATH")
    return CompilerChoice(None, "", "PATH", "no C compiler found (looked for CC, clang, gcc, cc on PATH)")


def find_linker(env: dict[str, str] | None = None) -> str | None:
    """The linker that makes shared objects of the compiled kernels: ``LD`` when set, else ``ld``, ``ld.lld``,
    ``ld.gold`` on ``PATH``; None when there is none."""
    environ = os.environ if env is None else env
    search_path = environ.get("PATH", os.defpath)
    requested = environ.get("LD", "").strip()
    names = (requested,) if requested else LINKER_SEARCH_ORDER
    for name in names:
        found = shutil.which(name, path=search_path)
        if found is not None:
            return os.path.abspath(found)
    return None


@functools.cache
def compiler_version(path: str) -> str:
    """The compiler's ``--version`` output (first line plus target line), cached per path; '' when it fails."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    keep = [lines[0]] if lines else []
    keep += [line for line in lines[1:] if line.lower().startswith(("target:", "thread model"))]
    return "; ".join(keep)


def _proc_cpuinfo_field(field: str) -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as file:
            for line in file:
                key, _, value = line.partition(":")
                if key.strip() == field:
                    return value.strip()
    except OSError:
        pass
    return ""


@functools.cache
def cpu_vendor() -> str:
    """This machine's CPU vendor string from ``/proc/cpuinfo`` (``GenuineIntel``, ``AuthenticAMD``; '' when unknown)."""
    return _proc_cpuinfo_field("vendor_id")


@functools.cache
def cpu_l2_bytes() -> int | None:
    """One core's L2 cache in bytes, from ``/sys/devices/system/cpu/cpu0/cache`` (None when unknown)."""
    return l2_from_sysfs("/sys/devices/system/cpu/cpu0/cache")


def l2_from_sysfs(root: str) -> int | None:
    """The size of the level-2 data or unified cache among the ``index*`` entries of the sysfs cache folder
    `root` (``level``, ``type``, ``size`` files; sizes such as ``2048K``), or None."""
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return None
    for entry in entries:
        try:
            with open(f"{root}/{entry}/level") as level, open(f"{root}/{entry}/type") as kind:
                if level.read().strip() != "2" or kind.read().strip() not in ("Unified", "Data"):
                    continue
            with open(f"{root}/{entry}/size") as size:
                text = size.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        digits = text.rstrip("KMB")
        return int(digits) * scale if digits.isdigit() else None
    return None


def cpu_model() -> str:
    """The CPU model name from ``/proc/cpuinfo`` ('' when unknown)."""
    return _proc_cpuinfo_field("model name")


def cpuinfo_flags() -> str:
    """The sorted CPU feature flags from ``/proc/cpuinfo`` ('' when unknown)."""
    return " ".join(sorted(_proc_cpuinfo_field("flags").split()))


_TARGET_PREFIXES = ("-m", "--param", "-target-cpu", "-target-feature", "-tune-cpu", "+", "l1-", "l2-")


def _target_tokens(cc1_line: str) -> list[str]:
    """The target-describing arguments of a compiler proper command line printed by ``-###``."""
    try:
        tokens = shlex.split(cc1_line)
    except ValueError:
        tokens = cc1_line.split()
    keep: list[str] = []
    takes_value = {"--param", "-target-cpu", "-target-feature", "-tune-cpu"}
    for i, token in enumerate(tokens):
        previous = tokens[i - 1] if i else ""
        if previous in takes_value or token.startswith(_TARGET_PREFIXES) or token in takes_value:
            if token.startswith(("-mrelax", "-mrelocation", "-mframe-pointer", "-mconstructor")):
                continue
            keep.append(token)
    return keep


_FEATURES: dict[tuple[str, tuple[str, ...]], str] = {}


def read_cpu_features(cc: str, flags: tuple[str, ...]) -> str:
    """What ``-march=native`` (or the given ``-march``) resolves to for compiler `cc` with `flags`: the target
    arguments of the compiler proper (``-march=znver3 -mavx2 -mno-avx512f ...`` for gcc, ``-target-cpu ...
    -target-feature ...`` for clang), sorted. Falls back to the ``/proc/cpuinfo`` flags when ``-###`` fails.

    Part of the compile cache key, so a cache folder shared between an AVX2 and an AVX-512 machine never hands one
    the other's binaries. Cached per process.
    """
    key = (cc, tuple(flags))
    cached = _FEATURES.get(key)
    if cached is not None:
        return cached
    target = [f for f in flags if f.startswith(("-march", "-mcpu", "-mtune", "--target", "-target"))]
    result = ""
    try:
        out = subprocess.run(
            [cc, "-###", *target, "-x", "c", "-c", "-o", os.devnull, "-"],
            input="",
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = [line for line in out.stderr.splitlines() if "cc1" in line or '"-cc1"' in line]
        if out.returncode == 0 and lines:
            result = " ".join(sorted(_target_tokens(lines[0])))
    except (OSError, subprocess.SubprocessError):
        result = ""
    if not result:
        result = "cpuinfo: " + cpuinfo_flags()
    _FEATURES[key] = result
    return result


# Environment variables that change what the compiler driver runs or which compiler libraries load.
TOOLCHAIN_ENV_KNOBS = ("CCC_OVERRIDE_OPTIONS", "COMPILER_PATH", "GCC_EXEC_PREFIX", "LD_LIBRARY_PATH", "LD_PRELOAD")


def compiler_stamp(cc: str) -> list[str] | None:
    """What identifies an installed compiler without running it: its resolved path, size and modification time,
    and the `TOOLCHAIN_ENV_KNOBS` that are set; None when the executable can't be found. A reinstalled or upgraded
    compiler gets a new stamp, so facts cached under the old one (version, resolved target, link command) are read
    again from the compiler.

    >>> compiler_stamp("/surely/not/there/cc") is None
    True
    """
    real = os.path.realpath(cc)
    try:
        info = os.stat(real)
    except OSError:
        return None
    knobs = [f"{name}={os.environ[name]}" for name in TOOLCHAIN_ENV_KNOBS if os.environ.get(name)]
    return [real, str(info.st_size), str(info.st_mtime_ns), *knobs]


@functools.cache
def machine_identity() -> str:
    """The CPU model and feature flags from ``/proc/cpuinfo``: facts about ``-march=native`` cached on disk are
    only reused on a machine with the same identity (a cache folder may be shared between machines)."""
    return f"{cpu_model()} | {cpuinfo_flags()}"


def cpu_count() -> int:
    """The number of CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_thread_count() -> int:
    """``THREADS`` from the environment when set (>= 1), else `cpu_count` (also for ``THREADS=0`` or empty).

    Anything else (``THREADS=abc``, ``THREADS=-1``) raises a ValueError naming the variable and a valid example.
    """
    from tinycore.sdk import parse_env  # here: this module stays standard-library only at import

    raw = os.environ.get("THREADS")
    try:
        value = parse_env("THREADS", raw, 0)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(
            f"THREADS={raw!r} is not a thread count: set THREADS to a whole number such as THREADS=4, or unset it "
            "(then the CPU count is used)"
        )
    return value if value >= 1 else cpu_count()
