"""`ClangDevice`: the ``CLANG`` device (alias ``CPU``): C kernels compiled by the system compiler, run on the host.

``ClangDevice("CLANG")`` and ``ClangDevice("CLANG:1")`` are separate devices with separate memory (copies between
them are ``memmove``). Opening a device compiles nothing and runs no subprocess: the compiler's version and target
are read when the first kernel is compiled, the thread pool library is built when the first threaded kernel loads.
"""

from __future__ import annotations

from tinycore.device import Compiled
from tinycore.dtype import ALL_SCALARS
from tinycore.errors import DeviceUnavailableError
from tinycore.plugin import DeviceCapabilities
from tinycore_clang import __version__, toolchain
from tinycore_clang.allocator import ClangAllocator
from tinycore_clang.compiler import ClangCompiler
from tinycore_clang.graph import ClangGraph
from tinycore_clang.renderer import ClangRenderer
from tinycore_clang.runtime import ClangProgram

FAMILY = "CLANG"
DISTRIBUTION = "tinycore-clang"


def clang_capabilities(threads: int | None = None) -> DeviceCapabilities:
    """What CLANG supports: every scalar dtype, vector types, views, zero-copy host access, transfers, threads."""
    return DeviceCapabilities(
        dtypes=frozenset(ALL_SCALARS),
        features=frozenset({"float4", "multi_device", "transfer", "views", "zero_copy", "threads"}),
        limits={"threads": threads if threads is not None else toolchain.default_thread_count()},
    )


class ClangDevice(Compiled):
    """The CLANG device ``CLANG`` or ``CLANG:n``.

    `threads` (``THREADS`` or the CPU count) is how many native threads a ``core_id`` kernel runs on; change it on
    the object to affect later launches. `compiler_choice` records which C compiler was picked and why.
    """

    def __init__(self, device: str = FAMILY):
        if device.upper().partition(":")[0] != FAMILY:
            raise ValueError(f"ClangDevice is for {FAMILY} or {FAMILY}:n, not {device!r}")
        self.compiler_choice = toolchain.find_compiler()
        if not self.compiler_choice.ok:
            raise DeviceUnavailableError(
                self.compiler_choice.reason,
                fix=toolchain.INSTALL_HINT,
                device=device.upper(),
                distribution=DISTRIBUTION,
                version=__version__,
            )
        self.threads = toolchain.default_thread_count()
        renderer = ClangRenderer(threads=self.threads)
        compiler = ClangCompiler(cc=self.compiler_choice.path)
        super().__init__(
            device,
            ClangAllocator(),
            renderer,
            compiler,
            ClangProgram,
            ClangGraph,
            capabilities=clang_capabilities(self.threads),
        )

    def synchronize(self) -> None:
        """Nothing to wait for: every launch returns when the kernel is done."""
