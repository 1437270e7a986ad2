"""`NVRTCCompiler`: CUDA C to CUBIN (or PTX) for one GPU architecture, with NVRTC from NVIDIA's wheel. No GPU needed.

Options: ``--gpu-architecture=<arch>`` (``sm_90`` gives CUBIN, ``compute_90`` PTX), ``--fmad=false`` (the renderer
writes fused multiply-adds itself: results then match the reference device), ``-I`` the ``include`` folder of the
``nvidia-cuda-runtime`` wheel (``cuda_fp16.h`` and ``cuda_bf16.h`` are not built into NVRTC). The disk-cache key
holds the NVRTC version, the options and the arch. CUBIN for the device's own arch avoids the driver's PTX-version
limits (PTX from a newer NVRTC does not load on an older driver).

A stored binary is a `tinycore.sdk.KernelImage`: the parameter kinds of the kernel (read off its signature) and the
CUBIN, so a program can be launched from core's disk cache without the source. A kernel using dynamic shared memory
(over 48 KB: `tinycore_cuda.renderer.dynamic_shared_bytes`) has its byte count before the CUBIN
(`DYNAMIC_SHARED_HEADER`; `split_dynamic_shared` takes it off), so its program can opt in before launching.

`NVRTCCompiler.resource_usage` is the report of NVRTC's ``ptxas -v`` for a kernel (registers, stack, spill stores
and loads), for tests that check code quality without a GPU.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from tinycore.sdk import CompileError, Compiler, KernelImage

ARCH_PATTERN = re.compile(r"^(sm|compute)_(\d{2,3})[af]?$")
DYNAMIC_SHARED_HEADER = b"TCDSM "  # b"TCDSM <bytes>\n" before the CUBIN of a kernel with dynamic shared memory
INSTALL_NVRTC = "pip install 'tinycore[cuda]' (or: pip install nvidia-cuda-nvrtc nvidia-cuda-runtime cuda-bindings)"


def check_arch(arch: str) -> str:
    """`arch` if it names a GPU architecture NVRTC takes (``sm_90``, ``compute_80``, ``sm_90a``), else a ValueError.

    >>> check_arch("sm_90"), check_arch("compute_80")
    ('sm_90', 'compute_80')
    """
    if not ARCH_PATTERN.match(arch):
        raise ValueError(f"CUDA: {arch!r} is not a GPU architecture: use sm_NN (CUBIN) or compute_NN (PTX), e.g. sm_90")
    return arch


def parameter_kinds(src: str) -> tuple[str, list[str]]:
    """(kernel name, parameter kinds) of rendered CUDA source (`CDialect.signature_of`); a CompileError without one.

    >>> parameter_kinds('extern "C" __global__ void k(float* __restrict__ data0, const int n, const long long m) {}')
    ('k', ['buffer', 'int', 'long'])
    """
    from tinycore_cuda.renderer import CUDA_C

    try:
        return CUDA_C.signature_of(src)
    except ValueError as error:
        raise CompileError(f"CUDA compiler: {error}") from None


def with_dynamic_shared(shared_bytes: int, image: bytes) -> bytes:
    """`image` (CUBIN or PTX) with its kernel's dynamic shared memory in front (unchanged when 0).

    >>> split_dynamic_shared(with_dynamic_shared(65536, b"ELF")), split_dynamic_shared(b"ELF")
    ((65536, b'ELF'), (0, b'ELF'))
    """
    return DYNAMIC_SHARED_HEADER + str(shared_bytes).encode() + b"\n" + image if shared_bytes else image


def split_dynamic_shared(image: bytes) -> tuple[int, bytes]:
    """(bytes of dynamic shared memory per block, the CUBIN or PTX) of what `NVRTCCompiler` stored."""
    if not image.startswith(DYNAMIC_SHARED_HEADER):
        return 0, image
    header, _, binary = image.partition(b"\n")
    return int(header[len(DYNAMIC_SHARED_HEADER) :]), binary


@cache
def nvrtc_module() -> Any:
    """``cuda.bindings.nvrtc`` (imported on first use: ~50 ms); a CompileError naming the fix when missing."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as error:
        raise CompileError(f"CUDA compiler: NVRTC is not installed ({error}); fix: {INSTALL_NVRTC}") from None
    return nvrtc


@cache
def runtime_include_dir() -> str:
    """The ``include`` folder of the CUDA runtime wheel (``cuda_fp16.h``, ``cuda_bf16.h``)."""
    try:
        import cuda.pathfinder as pathfinder

        found = pathfinder.find_nvidia_header_directory("cudart")
    except (ImportError, RuntimeError) as error:
        missing = f"CUDA compiler: the CUDA runtime headers are missing ({error}); fix: {INSTALL_NVRTC}"
        raise CompileError(missing) from None
    if not found:
        raise CompileError(f"CUDA compiler: the CUDA runtime headers are missing; fix: {INSTALL_NVRTC}")
    return str(found)


def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor)."""
    _, major, minor = nvrtc_module().nvrtcVersion()
    return int(major), int(minor)


class NVRTCCompiler(Compiler):
    """CUDA C to CUBIN (``sm_NN``) or PTX (``compute_NN``) for `arch`, through NVRTC; cached by core."""

    def __init__(self, arch: str):
        self.arch = check_arch(arch)
        self.ptx = arch.startswith("compute_")
        super().__init__(cachekey=f"cuda_{arch}")

    @property
    def options(self) -> list[str]:
        """The NVRTC command line (found headers included)."""
        return [f"--gpu-architecture={self.arch}", "--fmad=false", "-std=c++17", f"-I{runtime_include_dir()}"]

    def cache_key_parts(self) -> Sequence[str]:
        """NVRTC's version, the options, and the stored format (`KernelImage.MAGIC`)."""
        return (f"nvrtc {nvrtc_version()}", *self.options, KernelImage.MAGIC.decode())

    def compile(self, src: str) -> bytes:
        """Build `src`; a `CompileError` names the kernel and carries NVRTC's log."""
        from tinycore_cuda.renderer import dynamic_shared_bytes

        _, kinds = parameter_kinds(src)
        image, _ = self._build(src, self.options)
        return KernelImage.pack(kinds, with_dynamic_shared(dynamic_shared_bytes(src), image))

    def resource_usage(self, src: str) -> str:
        """The ``ptxas -v`` report of NVRTC's build of `src` for a CUBIN arch (``Used N registers``, ``N bytes
        stack frame, N bytes spill stores, N bytes spill loads``); not cached. A ValueError for a PTX arch."""
        if self.ptx:
            raise ValueError(f"CUDA compiler: {self.arch} builds PTX, which ptxas does not see: use an sm_NN arch")
        return self._build(src, [*self.options, "--ptxas-options=-v"])[1]

    def _build(self, src: str, option_list: list[str]) -> tuple[bytes, str]:
        """(CUBIN or PTX, NVRTC's log) of `src`; a `CompileError` names the kernel and carries the log."""
        nvrtc = nvrtc_module()
        name, _ = parameter_kinds(src)
        err, program = nvrtc.nvrtcCreateProgram(src.encode(), f"{name}.cu".encode(), 0, [], [])
        _check(nvrtc, err, name, "create the program")
        try:
            options = [o.encode() for o in option_list]
            (err,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
            _, size = nvrtc.nvrtcGetProgramLogSize(program)
            log_bytes = b" " * size
            nvrtc.nvrtcGetProgramLog(program, log_bytes)
            log = log_bytes.decode(errors="replace").rstrip("\x00 \n")
            if err != 0:
                raise CompileError(f"CUDA (tinycore-cuda): kernel {name} failed to compile for {self.arch}:\n" + log)
            if self.ptx:
                get_size, get = nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX
            else:
                get_size, get = nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN
            err, size = get_size(program)
            _check(nvrtc, err, name, "size the output")
            image = b" " * size
            (err,) = get(program, image)
            _check(nvrtc, err, name, "read the output")
        finally:
            nvrtc.nvrtcDestroyProgram(program)
        return image, log


def _check(nvrtc: Any, err: Any, name: str, what: str) -> None:
    if err != 0:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise CompileError(f"CUDA (tinycore-cuda): NVRTC could not {what} of kernel {name}: {text.decode()}")
