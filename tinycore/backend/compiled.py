"""The device bundle and the program contract: `Compiled` (allocator, renderer, compiler, program runtime, graph
runner), the `Program` and `LaunchableProgram` protocols, `grid_and_block`, and what a plugin declares about a
family (`DeviceCapabilities`) and finds when probing (`ProbeResult`).

A `Compiled` device's capabilities come from the plugin that owns its family. This module sits below the plugin
manager, so the manager hands it the lookup when it is imported (`set_declared_capabilities`) instead of this
module importing the manager.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tinycore.backend.allocator import Allocator
    from tinycore.backend.compiler import Compiler
    from tinycore.dtype import DType
    from tinycore.renderer import Renderer

__all__ = [
    "Compiled",
    "DeviceCapabilities",
    "LaunchableProgram",
    "ProbeResult",
    "Program",
    "grid_and_block",
    "set_declared_capabilities",
]


@dataclass(frozen=True)
class ProbeResult:
    """What a cheap probe found: ``ok`` with the number of devices, or why not (`reason`) and one concrete fix
    (`hint`). `slow`: for a device that works but runs far below its speed here, why and the fix (e.g. a CPU device
    left with a C compiler that does not vectorize); core says it once when such a device becomes the default.
    `hardware_present`: for a probe that fails, True when the hardware is here and only software is missing or
    misconfigured (a compiler, a runtime library, an environment variable): when a lower-priority device becomes
    the default instead, core says which device was passed over, why and the fix. Leave it False when the hardware
    itself is absent (no GPU): that is no user's mistake and gets no warning.

    >>> ProbeResult(ok=False, reason="no NVIDIA driver", hint="install the NVIDIA driver").ok
    False
    """

    ok: bool
    reason: str = ""
    hint: str = ""
    device_count: int = 1
    slow: str = ""
    hardware_present: bool = False


@dataclass(frozen=True)
class DeviceCapabilities:
    """What a device family supports, for legality checks and for the test kit to derive skips.

    ``dtypes`` are the supported element dtypes, ``features`` free-form flags (``"local"``, ``"shared"``,
    ``"tensor_cores"``, ``"graph"``, ``"multi_device"``...), ``limits`` numbers such as ``"local_max"``.
    """

    dtypes: frozenset[DType]
    features: frozenset[str] = frozenset()
    limits: dict[str, int] = field(default_factory=dict)


def _no_declared_capabilities(family: str) -> DeviceCapabilities | None:
    return None


_declared_capabilities: Callable[[str], DeviceCapabilities | None] = _no_declared_capabilities


def set_declared_capabilities(lookup: Callable[[str], DeviceCapabilities | None] | None) -> None:
    """Install `lookup(family)`, the capabilities the plugin owning a family declares (None: none declared), which
    `Compiled.capabilities` asks first; the plugin manager installs its own when imported. None restores the
    default (nothing declared: capabilities are derived from the renderer and allocator)."""
    global _declared_capabilities
    _declared_capabilities = lookup if lookup is not None else _no_declared_capabilities


def grid_and_block(
    global_size: tuple[int, ...], local_size: tuple[int, ...] | None
) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """A launch's ``(global_size, local_size)`` as two 3-tuples (missing dims are 1; ``local_size=None`` is one
    work-item per group): the grid and block a CUDA/HIP-style launch takes.

    >>> grid_and_block((4, 2), None)
    ((4, 2, 1), (1, 1, 1))
    """
    grid = (tuple(global_size) + (1, 1, 1))[:3]
    block = (tuple(local_size or (1, 1, 1)) + (1, 1, 1))[:3]
    return grid, block  # type: ignore[return-value]


@runtime_checkable
class Program(Protocol):
    """A loaded kernel (DESIGN §4): the device's program class is constructed as ``Program(device, name, lib)``
    (`device` the opened `Compiled`, `name` the kernel's function name, `lib` the compiler's bytes) and called as
    ``prg(*bufs, global_size=, local_size=, vals=, wait=False)``.

    `bufs` are the buffers' opaque handles (what the `Allocator` returned), in argument order; `global_size` and
    `local_size` the launch dims as ints (`local_size` None: the device chooses); `vals` the values of the
    program's variables, in `ProgramSpec.vars` order. Returns the seconds the kernel took when `wait` is true (BEAM
    search times candidates this way, on the real device), else None (it may still be running).

    A program may also offer a fast path for eager launches: see `LaunchableProgram`.
    """

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] = ...,
        local_size: tuple[int, ...] | None = ...,
        vals: tuple[int, ...] = ...,
        wait: bool = False,
    ) -> float | None:
        """Run the kernel on `bufs`; with `wait`, block until done and return the seconds it took."""
        ...


@runtime_checkable
class LaunchableProgram(Program, Protocol):
    """A `Program` with the optional ``launcher`` method: core's eager realize path calls
    ``prg.launcher(global_size, local_size, vals)`` once per kernel and then, for every launch, the callable it returns
    on the buffer handles alone. It must do what ``prg(*bufs, global_size=, local_size=, vals=, wait=False)`` does;
    returning None declines (core keeps the plain call)."""

    def launcher(
        self, global_size: tuple[int, ...], local_size: tuple[int, ...] | None, vals: tuple[int, ...]
    ) -> Callable[..., Any] | None:
        """A callable running this kernel on buffer handles with these launch dims and values fixed, or None."""
        ...


class Compiled:
    """A device bundle: allocator, renderer, compiler, program runtime and optional graph runner.

    - `device`: the canonical device name (``NAME`` or ``NAME:ordinal``, ``NAME:0`` becomes ``NAME``);
    - `runtime`: the device's `Program` class (or factory), constructed as ``Program(device, name, lib)`` where
      `device` is this object; ``compiled.runtime(name, lib)`` is that class with this device bound (`program_class`
      is the class);
    - `graph`: a `tinycore.engine.graph_runner.GraphRunner` subclass for batched JIT replay, or None (typed
      `type` here: the engine sits above this module);
    - `capabilities`: what the family supports: the owning plugin's ``tinycore_device_capabilities`` answer (the
      one way a plugin declares them), else derived from the renderer and allocator.

    Subclasses override `synchronize` (wait for all queued work) and add device properties.
    """

    def __init__(
        self,
        device: str,
        allocator: Allocator,
        renderer: Renderer | None,
        compiler: Compiler | None,
        runtime: Callable[[Compiled, str, bytes], Program] | None,
        graph: type | None = None,
    ):
        family, _, ordinal = device.upper().partition(":")
        self.device = family if ordinal in ("", "0") else f"{family}:{int(ordinal)}"
        self.allocator, self.renderer, self.compiler, self.graph = allocator, renderer, compiler, graph
        self.program_class = runtime
        self.runtime: Callable[[str, bytes], Program] | None = (
            functools.partial(runtime, self) if runtime is not None else None
        )
        self._capabilities: DeviceCapabilities | None = None

    @property
    def family(self) -> str:
        """The device family (``CUDA`` for ``CUDA:1``)."""
        return self.device.partition(":")[0]

    @property
    def ordinal(self) -> int:
        """The device number within its family."""
        return int(self.device.partition(":")[2] or 0)

    @property
    def arch(self) -> str | None:
        """The renderer's target architecture (None when the device has no renderer or arch)."""
        return self.renderer.arch if self.renderer is not None else None

    def synchronize(self) -> None:
        """Wait until all work queued on the device is done (no-op for synchronous devices)."""

    @property
    def capabilities(self) -> DeviceCapabilities:
        """The capabilities the owning plugin declares (its ``tinycore_device_capabilities`` hook), else ones derived
        from the renderer, allocator and graph support; computed once."""
        if self._capabilities is not None:
            return self._capabilities
        declared = _declared_capabilities(self.family)
        if declared is not None:
            self._capabilities = declared
            return declared
        r = self.renderer
        if r is None:
            return DeviceCapabilities(dtypes=frozenset())
        flags = {
            "local": r.has_local,
            "shared": r.has_shared,
            "float4": r.supports_float4,
            "tensor_cores": bool(r.tensor_cores),
            "graph": self.graph is not None,
            "transfer": self.allocator.supports_transfer,
            "views": self.allocator.supports_offset,
            "zero_copy": self.allocator.supports_as_buffer,
        }
        limits = {"shared_max": r.shared_max}
        for key, dims in (("global_max", r.global_max), ("local_max", r.local_max)):
            limits.update({f"{key}{i}": d for i, d in enumerate(dims or ())})
        self._capabilities = DeviceCapabilities(
            dtypes=frozenset(r.supported_dtypes),
            features=frozenset(name for name, on in flags.items() if on),
            limits=limits,
        )
        return self._capabilities

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device}>"
