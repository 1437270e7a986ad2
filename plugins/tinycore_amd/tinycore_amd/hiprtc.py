"""ROCm's runtime compiler, hipRTC, behind one small interface (`HIPRTCApi`), so `tinycore_amd.compiler.HIPRTCCompiler`
builds with the real library (`CtypesHIPRTC`: ctypes on ``libhiprtc``, no Python bindings needed) or with a recording
fake in tests (`tinycore_amd.testing.FakeHIPRTC`).

The library is ``AMD_HIPRTC_LIB`` if set, else ``libhiprtc`` from the loader's search or ``/opt/rocm/lib``, else the
HIP runtime ``libamdhip64`` itself (ROCm before 5.3, Debian 12's ROCm 5.2 among them, built hipRTC into it). hipRTC
compiles through comgr, whose ISA list (`HIPRTCApi.archs`) says which ``gfx`` archs it builds for: hipRTC 5.2 aborts
the whole process on an arch it does not know, so the compiler asks before it compiles.

Every call raises `HIPRTCError` (a `CompileError`) naming the call and hipRTC's error name on failure; a library that
is missing or does not load raises `HIPRTCMissing`, whose message names the fix.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from tinycore.sdk import CompileError

LIBRARY_VARIABLE = "AMD_HIPRTC_LIB"
ROCM_FOLDERS = ("/opt/rocm/lib", "/opt/rocm/lib64")
INSTALL_HIPRTC = (
    f"install ROCm (https://rocm.docs.amd.com; it has libhiprtc), or set {LIBRARY_VARIABLE} to the path of libhiprtc.so"
)


class HIPRTCError(CompileError):
    """A hipRTC call failed: the call and hipRTC's error name (``HIPRTC_ERROR_COMPILATION``)."""

    def __init__(self, call: str, error: str):
        self.call, self.error = call, error
        super().__init__(f"{call} failed: {error}")


class HIPRTCMissing(CompileError):
    """ROCm's hipRTC is not installed, or its library does not load: `reason`, and the `fix`."""

    def __init__(self, reason: str, fix: str = INSTALL_HIPRTC):
        self.reason, self.fix = reason, fix
        super().__init__(f"AMD: {reason}; fix: {fix}")


class HIPRTCApi:
    """What `HIPRTCCompiler` needs from hipRTC. Programs are opaque handles to callers. `path` is the library's file
    (for reports); `library` the name of the file it resolves to (``libhiprtc.so.6.2.60200``: the exact build)."""

    path = ""

    @property
    def library(self) -> str:
        """The file name `path` resolves to (links followed), which names the exact ROCm build."""
        return os.path.basename(os.path.realpath(self.path)) if self.path else ""

    def version(self) -> tuple[int, int]:
        """hipRTC's (major, minor) (``hiprtcVersion``)."""
        raise NotImplementedError

    def archs(self) -> frozenset[str] | None:
        """The ``gfx`` archs this hipRTC's comgr builds for; None when comgr can't be asked (its library not found)."""
        raise NotImplementedError

    def create_program(self, source: str, name: str) -> Any:
        """A program of `source` named `name` (the file name in its messages), no extra headers
        (``hiprtcCreateProgram``)."""
        raise NotImplementedError

    def compile_program(self, program: Any, options: Sequence[str]) -> None:
        """Compile `program` with command-line `options` (``hiprtcCompileProgram``); `HIPRTCError` on failure."""
        raise NotImplementedError

    def program_log(self, program: Any) -> str:
        """The compile log of `program`: errors and warnings (``hiprtcGetProgramLogSize`` / ``hiprtcGetProgramLog``)."""
        raise NotImplementedError

    def code(self, program: Any) -> bytes:
        """The code object of a compiled `program` (``hiprtcGetCodeSize`` / ``hiprtcGetCode``)."""
        raise NotImplementedError

    def destroy_program(self, program: Any) -> None:
        """Free `program` (``hiprtcDestroyProgram``)."""
        raise NotImplementedError


def find_hiprtc() -> str | None:
    """Where hipRTC may be: ``AMD_HIPRTC_LIB`` if set (None when that file is missing), else ``libhiprtc`` (the loader's
    search, then ``/opt/rocm/lib``), else the HIP runtime (hipRTC was part of it before ROCm 5.3); None when none."""
    chosen = os.environ.get(LIBRARY_VARIABLE)
    if chosen:
        return chosen if os.path.exists(chosen) else None
    found = ctypes.util.find_library("hiprtc") or _first_file(ROCM_FOLDERS, "libhiprtc.so*")
    if found:
        return found
    from tinycore_amd.hip import find_runtime

    return find_runtime()


def load_hiprtc() -> HIPRTCApi:
    """hipRTC on the library `find_hiprtc` finds (loaded once per path); `HIPRTCMissing` naming the fix when there is
    none, or it does not load, or it has no hipRTC in it."""
    path = find_hiprtc()
    if path is None:
        chosen = os.environ.get(LIBRARY_VARIABLE)
        where = f"{LIBRARY_VARIABLE}={chosen} does not exist" if chosen else "libhiprtc not found"
        raise HIPRTCMissing(f"ROCm's hipRTC is not available ({where})")
    return _open(path)


@cache
def _open(path: str) -> CtypesHIPRTC:
    try:
        return CtypesHIPRTC(path)
    except OSError as error:
        raise HIPRTCMissing(f"hipRTC at {path} does not load ({error})") from None
    except AttributeError:
        raise HIPRTCMissing(f"{path} has no hipRTC in it (no hiprtcCreateProgram)") from None


def describe_hiprtc() -> str:
    """hipRTC's version and library (``6.2 (/opt/rocm/lib/libhiprtc.so)``), or why it is not available."""
    try:
        rtc = load_hiprtc()
        major, minor = rtc.version()
    except HIPRTCMissing as error:
        return f"not available: {error.reason}"
    except HIPRTCError as error:
        return f"broken: {error}"
    return f"{major}.{minor} ({rtc.path})"


def find_comgr(beside: str = "") -> str | None:
    """ROCm's code object manager (``libamd_comgr``): next to the library `beside`, else the loader's search, else
    ``/opt/rocm/lib``; None when none."""
    if beside and (found := _first_file([os.path.dirname(os.path.realpath(beside))], "libamd_comgr.so*")):
        return found
    return ctypes.util.find_library("amd_comgr") or _first_file(ROCM_FOLDERS, "libamd_comgr.so*")


def _first_file(folders: Sequence[str], pattern: str) -> str | None:
    """The shortest name matching `pattern` in the first of `folders` that has one (``libx.so`` before
    ``libx.so.6``); None when none. ``libhiprtc.so*`` does not match ``libhiprtc-builtins.so``."""
    for folder in folders:
        matches = sorted(glob.glob(os.path.join(folder, pattern)), key=len)
        if matches:
            return matches[0]
    return None


@cache
def comgr_archs(path: str) -> frozenset[str]:
    """The ``gfx`` names in the ISA list of the comgr at `path` (``amdgcn-amd-amdhsa--gfx90a:xnack+``: ``gfx90a``);
    OSError when it can't be read."""
    comgr = ctypes.CDLL(path)
    count, name = ctypes.c_size_t(), ctypes.c_char_p()
    if comgr.amd_comgr_get_isa_count(ctypes.byref(count)) != 0:
        raise OSError(f"amd_comgr_get_isa_count failed in {path}")
    names = set()
    for index in range(count.value):
        if comgr.amd_comgr_get_isa_name(ctypes.c_size_t(index), ctypes.byref(name)) == 0 and name.value:
            names.update(re.findall(r"--(gfx[0-9a-f]+)", name.value.decode()))
    return frozenset(names)


class CtypesHIPRTC(HIPRTCApi):
    """`HIPRTCApi` on hipRTC's C API through ctypes (`path`: ``libhiprtc``, or a ``libamdhip64`` that contains it)."""

    def __init__(self, path: str):
        self.path, self.lib = path, ctypes.CDLL(path)
        program, size, chars = ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_char_p
        text = ctypes.POINTER(chars)
        signatures = {  # from ROCm's hip/hiprtc.h; every one returns hiprtcResult
            "hiprtcVersion": [ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)],
            "hiprtcCreateProgram": [ctypes.POINTER(program), chars, chars, ctypes.c_int, text, text],
            "hiprtcCompileProgram": [program, ctypes.c_int, text],
            "hiprtcGetProgramLogSize": [program, size],
            "hiprtcGetProgramLog": [program, chars],
            "hiprtcGetCodeSize": [program, size],
            "hiprtcGetCode": [program, chars],
            "hiprtcDestroyProgram": [ctypes.POINTER(program)],
        }
        for name, argtypes in signatures.items():
            function = getattr(self.lib, name)  # AttributeError: no hipRTC in this library
            function.argtypes, function.restype = argtypes, ctypes.c_int
        self.lib.hiprtcGetErrorString.argtypes = [ctypes.c_int]
        self.lib.hiprtcGetErrorString.restype = ctypes.c_char_p

    def _call(self, call: str, *args: Any) -> None:
        result = getattr(self.lib, call)(*args)
        if result != 0:
            name = self.lib.hiprtcGetErrorString(result)
            raise HIPRTCError(call, name.decode() if name else f"hiprtcResult {result}")

    def version(self) -> tuple[int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._call("hiprtcVersion", ctypes.byref(major), ctypes.byref(minor))
        return major.value, minor.value

    def archs(self) -> frozenset[str] | None:
        comgr = find_comgr(self.path)
        if comgr is None:
            return None
        try:
            return comgr_archs(comgr)
        except (OSError, AttributeError):  # a comgr too old to list its ISAs: don't guess
            return None

    def create_program(self, source: str, name: str) -> Any:
        program = ctypes.c_void_p()
        self._call("hiprtcCreateProgram", ctypes.byref(program), source.encode(), name.encode(), 0, None, None)
        return program

    def compile_program(self, program: Any, options: Sequence[str]) -> None:
        encoded = (ctypes.c_char_p * max(1, len(options)))(*(o.encode() for o in options))
        self._call("hiprtcCompileProgram", program, len(options), encoded)

    def program_log(self, program: Any) -> str:
        size = ctypes.c_size_t()
        self._call("hiprtcGetProgramLogSize", program, ctypes.byref(size))
        if size.value == 0:
            return ""
        log = ctypes.create_string_buffer(size.value + 1)  # the size counts the trailing NUL; one more to be safe
        self._call("hiprtcGetProgramLog", program, log)
        return log.value.decode(errors="replace")

    def code(self, program: Any) -> bytes:
        size = ctypes.c_size_t()
        self._call("hiprtcGetCodeSize", program, ctypes.byref(size))
        code = ctypes.create_string_buffer(size.value)
        self._call("hiprtcGetCode", program, code)
        return code.raw

    def destroy_program(self, program: Any) -> None:
        self._call("hiprtcDestroyProgram", ctypes.byref(program))
