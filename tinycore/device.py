"""The device contract's memory side and the device bundle: `Allocator`, `LRUAllocator`, `BufferSpec`, `Buffer`,
`Compiled`, the `Program` protocol, `is_dtype_supported`; re-exports the `Device` registry.

An `Allocator` subclass (one per device family, written by its plugin) implements:

- ``_alloc(size, options) -> opaque`` and ``_free(opaque, size, options)``: raw device memory; `_alloc` raises
  `MemoryError` when the device is out of memory (an `LRUAllocator` then empties its cache and retries once);
- ``copyin(dest, src: memoryview)`` host to device, ``copyout(dest: memoryview, src)`` device to host;
- optionally ``transfer(dest, src, size, src_dev, dest_dev)`` (device to device inside the family),
  ``offset(opaque, size, offset) -> opaque`` (a view into an allocation, for zero-copy buffer views) and
  ``as_buffer(opaque) -> memoryview`` (zero-copy host access, unified memory). Core discovers them by whether the
  subclass overrides them: `Allocator.supports_transfer`, `supports_offset`, `supports_as_buffer`.

Core calls the public ``alloc``/``free``, which validate and account `GlobalCounters.mem_used` (bytes handed out
and not yet freed, on all devices).

>>> from tinycore.dtype import dtypes
>>> BufferSpec(nolru=True).nolru, dtypes.float32.itemsize
(True, 4)
"""

from __future__ import annotations

import functools
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tinycore.dtype import DType, dtypes
from tinycore.helpers import DEBUG, GlobalCounters, getenv
from tinycore.plugin.hookspecs import DeviceCapabilities

if TYPE_CHECKING:
    import numpy as np

    from tinycore.engine.graph import GraphRunner
    from tinycore.plugin.registry import Device
    from tinycore.renderer import Renderer
    from tinycore.runtime.compiler import Compiler

__all__ = [
    "Allocator",
    "Buffer",
    "BufferSpec",
    "Compiled",
    "Device",
    "LRUAllocator",
    "LaunchableProgram",
    "Program",
    "grid_and_block",
    "host_address",
    "is_dtype_supported",
    "renderer_setting",
]


def __getattr__(name: str) -> Any:
    # `Device` lives in tinycore.plugin.registry, which imports this module: resolving it on first access (PEP 562)
    # instead of at import time keeps either import order free of cycles. `from tinycore.device import Device` works.
    if name == "Device":
        from tinycore.plugin.registry import Device

        globals()["Device"] = Device
        return Device
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _device_lookup(name: str) -> Compiled:
    """The opened `Compiled` device for `name` (through the registry; tests may replace this function)."""
    return _registry()[name]


@functools.cache
def _registry() -> Any:
    from tinycore.plugin.registry import Device  # imported once, on first use (every new Buffer looks it up)

    return Device


def _default_device() -> str:
    from tinycore.plugin.registry import Device

    return Device.DEFAULT


@dataclass(frozen=True)
class BufferSpec:
    """How a buffer's memory is requested (hashable: the LRU cache is keyed by size and spec).

    `image`: an image dtype for texture memory (None: plain memory); `uncached`: bypass device caches;
    `cpu_access`: the host maps it; `host`: allocate in (pinned) host memory; `nolru`: never keep it in an
    `LRUAllocator`'s cache after free; `external_ptr`: wrap memory at this address that someone else owns (never
    freed, never cached, not counted in `mem_used`).
    """

    image: Any = None
    uncached: bool = False
    cpu_access: bool = False
    host: bool = False
    nolru: bool = False
    external_ptr: int | None = None


class Allocator:
    """Base class of device memory allocators; see the module docstring for what a subclass implements.

    `mem_used` is this allocator's live bytes (handed out by `alloc`, not yet returned by `free`).
    """

    def __init__(self) -> None:
        self.mem_used = 0

    # ----- what core calls -----
    def alloc(self, size: int, options: BufferSpec | None = None) -> Any:
        """Allocate `size` bytes (0 allowed) and return the device's opaque handle."""
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"allocation size must be a non-negative int, got {size!r}")
        opaque = self._alloc(size, options)
        self._account(size, options, +1)
        return opaque

    def free(self, opaque: Any, size: int, options: BufferSpec | None = None) -> None:
        """Return memory obtained from `alloc(size, options)`."""
        self._account(size, options, -1)
        if options is None or options.external_ptr is None:
            self._free(opaque, size, options)

    def _account(self, size: int, options: BufferSpec | None, sign: int) -> None:
        if options is not None and options.external_ptr is not None:
            return
        self.mem_used += sign * size
        GlobalCounters.mem_used += sign * size

    # ----- what a device implements -----
    def _alloc(self, size: int, options: BufferSpec | None) -> Any:
        """Allocate raw device memory; raise `MemoryError` when out of memory."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _alloc")

    def _free(self, opaque: Any, size: int, options: BufferSpec | None) -> None:
        """Release raw device memory (default: nothing, for garbage-collected host memory)."""

    def copyin(self, dest: Any, src: memoryview) -> None:
        """Copy host bytes `src` into device memory `dest` (exactly ``src.nbytes`` bytes)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement copyin")

    def copyout(self, dest: memoryview, src: Any) -> None:
        """Copy device memory `src` into host bytes `dest` (exactly ``dest.nbytes`` bytes); waits for the device."""
        raise NotImplementedError(f"{type(self).__name__} does not implement copyout")

    def transfer(self, dest: Any, src: Any, size: int, src_dev: Compiled, dest_dev: Compiled) -> None:
        """Optional: copy `size` bytes between two devices of this family without going through the host."""
        raise NotImplementedError(f"{type(self).__name__} does not implement transfer")

    def offset(self, opaque: Any, size: int, offset: int) -> Any:
        """Optional: a handle to `size` bytes at byte `offset` inside allocation `opaque`, sharing its memory."""
        raise NotImplementedError(f"{type(self).__name__} does not implement offset")

    def as_buffer(self, opaque: Any) -> memoryview:
        """Optional: a zero-copy host view of `opaque` (synchronizing first as needed)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement as_buffer")

    # ----- discovery -----
    def _overrides(self, method: str) -> bool:
        return getattr(type(self), method) is not getattr(Allocator, method)

    @property
    def supports_transfer(self) -> bool:
        """True when the subclass implements `transfer`."""
        return self._overrides("transfer")

    @property
    def supports_offset(self) -> bool:
        """True when the subclass implements `offset` (buffer views share memory)."""
        return self._overrides("offset")

    @property
    def supports_as_buffer(self) -> bool:
        """True when the subclass implements zero-copy `as_buffer`."""
        return self._overrides("as_buffer")


_NONE_CACHED: Any = object()


class LRUAllocator(Allocator):
    """An allocator that keeps freed memory in a cache keyed by ``(size, options)`` and hands it out again.

    When `_alloc` raises `MemoryError`, the cache is emptied (`free_cache`) and the allocation retried once.
    ``LRU=0`` in the environment turns caching off; `BufferSpec.nolru`/`external_ptr` buffers are never cached.
    `cached_bytes` is the memory parked in the cache.
    """

    def __init__(self) -> None:
        super().__init__()
        self.cache: defaultdict[tuple[int, BufferSpec | None], list[Any]] = defaultdict(list)
        self.cached_bytes = 0

    def alloc(self, size: int, options: BufferSpec | None = None) -> Any:
        """Reuse a cached allocation of the same size and options, else allocate (flushing the cache on OOM)."""
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"allocation size must be a non-negative int, got {size!r}")
        entries = self.cache.get((size, options))
        try:
            opaque = entries.pop() if entries else _NONE_CACHED
        except IndexError:  # another thread took the last one between the test and the pop
            opaque = _NONE_CACHED
        if opaque is not _NONE_CACHED:
            self.cached_bytes -= size
        else:
            try:
                opaque = self._alloc(size, options)
            except MemoryError:
                if DEBUG >= 1:
                    print(f"{type(self).__name__}: out of memory for {size} bytes, freeing the cache", file=sys.stderr)
                self.free_cache()
                opaque = self._alloc(size, options)
        if options is None or options.external_ptr is None:  # `_account`, inlined: the eager path allocates per op
            self.mem_used += size
            GlobalCounters.mem_used += size
        return opaque

    def free(self, opaque: Any, size: int, options: BufferSpec | None = None) -> None:
        """Park the allocation in the cache (or release it when caching is off for it)."""
        cacheable = options is None or not (options.nolru or options.external_ptr is not None)
        if cacheable and getenv("LRU", 1):
            self.mem_used -= size  # `_account`, inlined (a cacheable allocation has no external_ptr)
            GlobalCounters.mem_used -= size
            self.cache[(size, options)].append(opaque)
            self.cached_bytes += size
        else:
            super().free(opaque, size, options)

    def free_cache(self) -> None:
        """Release every cached allocation to the device."""
        for (size, options), entries in list(self.cache.items()):  # a copy: other threads may free meanwhile
            for opaque in entries:
                self._free(opaque, size, options)
            self.cached_bytes -= size * len(entries)
            entries.clear()
        self.cache.clear()


def _flat_mv(mv: memoryview) -> memoryview:
    """`mv` as a flat view of unsigned bytes (any shape or format, C-contiguous)."""
    if mv.nbytes == 0:
        return memoryview(b"")
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


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


def host_address(mv: memoryview) -> int:
    """The address of a contiguous host buffer, writable or read-only (what a device allocator's ``copyin`` and
    ``copyout`` hand a driver's memcpy)."""
    import numpy as np

    return int(np.frombuffer(mv, dtype=np.uint8).ctypes.data)


class Buffer:
    """`size` elements of `dtype` on `device`, allocated lazily through the device's allocator.

    - ``Buffer(device, size, dtype)`` allocates nothing until `allocate`/`ensure_allocated` (or a copy) runs;
      `initial_value` (bytes) allocates and fills it at once;
    - ``opaque=`` adopts an existing device handle: the buffer does not own it (never freed, not in `mem_used`);
    - ``base=``/``offset=`` (bytes) make a view: it shares `base`'s memory through `Allocator.offset`, keeps
      `base` alive, and `base` is released only after its last allocated view is gone (`view_count`).

    Memory a buffer allocated is returned to the allocator by `deallocate` or when the buffer is collected.

    >>> b = Buffer("PYTHON", 4, dtypes.int32)
    >>> b.nbytes, b.is_allocated()
    (16, False)
    """

    def __init__(
        self,
        device: str,
        size: int,
        dtype: DType,
        opaque: Any = None,
        options: BufferSpec | None = None,
        initial_value: bytes | None = None,
        base: Buffer | None = None,
        offset: int = 0,
    ):
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"buffer size must be a non-negative int, got {size!r}")
        if dtype.itemsize == 0:
            raise ValueError(f"can't make a buffer of {dtype}")
        self.device, self.size, self.dtype, self.options, self.offset = device, size, dtype, options, offset
        self._base: Buffer | None = None
        self._allocator: Allocator | None = None  # looked up on first use (`allocator`)
        self.view_count = 0  # allocated views of this base
        self._released = False  # deallocate() was called while views were still allocated
        if base is not None:
            if base._base is not None:
                raise ValueError("a view's base must be a base buffer (use base.base)")
            if base.device != device:
                raise ValueError(f"a view must be on its base's device {base.device}, not {device}")
            if offset < 0 or offset + self.nbytes > base.nbytes:
                raise ValueError(f"view of {self.nbytes} bytes at offset {offset} exceeds its base of {base.nbytes}")
            if opaque is not None or initial_value is not None:
                raise ValueError("a view can't take opaque or initial_value")
            self._base, self.options = base, base.options
        elif offset != 0:
            raise ValueError("offset is only valid for views (pass base=)")
        if opaque is not None:
            self.allocate(opaque)
        if initial_value is not None:
            self.copyin(memoryview(initial_value))

    # ----- identity -----
    @property
    def base(self) -> Buffer:
        """The buffer owning the memory (itself unless this is a view)."""
        return self._base if self._base is not None else self

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.size * self.dtype.itemsize

    @property
    def allocator(self) -> Allocator:
        """The allocator of this buffer's device (opens the device on first use)."""
        allocator = self._allocator  # cached by hand: functools.cached_property takes a lock before Python 3.12
        if allocator is None:
            allocator = self._allocator = _device_lookup(self.device).allocator
        return allocator

    def __repr__(self) -> str:
        state = "allocated" if self.is_allocated() else "lazy"
        extra = f" offset={self.offset} view_of={id(self._base):#x}" if self._base is not None else ""
        opts = f" options={self.options}" if self.options is not None else ""
        return f"<Buffer {self.device} size={self.size} dtype={self.dtype} {state}{extra}{opts}>"

    # ----- memory -----
    def is_allocated(self) -> bool:
        """True once device memory is attached."""
        return hasattr(self, "_buf")

    @property
    def opaque(self) -> Any:
        """The allocator's handle of this buffer's memory (what `Program`s and `Allocator` methods receive).

        Raises RuntimeError when the buffer is not allocated yet (call `ensure_allocated()` first).
        """
        try:
            return self._buf
        except AttributeError:
            raise RuntimeError(f"{self!r} is not allocated") from None

    def allocate(self, opaque: Any = None, external_ptr: int | None = None) -> Buffer:
        """Attach device memory: `opaque` (adopted, not owned), memory at `external_ptr`, or a new allocation."""
        if self.is_allocated():
            raise RuntimeError(f"{self!r} is already allocated")
        if self._base is not None:
            if opaque is not None or external_ptr is not None:
                raise ValueError("a view gets its memory from its base")
            if not self.allocator.supports_offset:
                raise NotImplementedError(f"{type(self.allocator).__name__} can't make views: no Allocator.offset")
            base = self._base.ensure_allocated()
            self._buf = self.allocator.offset(base._buf, self.nbytes, self.offset)
            base.view_count += 1
            return self
        self._owned = opaque is None
        if external_ptr is not None:
            self.options = replace(self.options or BufferSpec(), external_ptr=external_ptr)
        self._buf = opaque if opaque is not None else self.allocator.alloc(self.nbytes, self.options)
        return self

    def ensure_allocated(self) -> Buffer:
        """Allocate unless already allocated; returns self."""
        return self if self.is_allocated() else self.allocate()

    def deallocate(self) -> None:
        """Detach device memory; a base with allocated views keeps its memory until the last view is gone."""
        if not self.is_allocated():
            raise RuntimeError(f"{self!r} is not allocated")
        if self._base is not None:
            del self._buf
            base = self._base
            base.view_count -= 1
            if base.view_count == 0 and base._released:
                base._release()
            return
        if self.view_count > 0:
            self._released = True
            return
        self._release()

    def _release(self) -> None:
        try:
            buf = self._buf
        except AttributeError:  # already released (finalizers of a garbage cycle run in any order)
            return
        del self._buf
        self._released = False
        if self._owned:
            self.allocator.free(buf, self.size * self.dtype.itemsize, self.options)

    def __del__(self) -> None:
        if not hasattr(self, "_buf"):  # `is_allocated()`, inlined: every eager result is collected through here
            return
        try:
            if self._base is not None:
                self.deallocate()
            else:  # live views would hold a reference to us, so none is left: release even if views were counted
                self._release()
        except Exception:  # a finalizer must not raise (e.g. during interpreter shutdown)
            pass

    # ----- views -----
    def view(self, size: int, dtype: DType, offset: int = 0) -> Buffer:
        """A buffer of `size` x `dtype` at byte `offset` inside this one, sharing its memory."""
        if offset < 0 or offset + size * dtype.itemsize > self.nbytes:
            raise ValueError(f"view of {size} x {dtype} at offset {offset} exceeds {self!r}")
        return Buffer(self.device, size, dtype, base=self.base, offset=self.offset + offset)

    # ----- data movement -----
    def copyin(self, mv: memoryview | bytes | bytearray) -> Buffer:
        """Copy host bytes (exactly `nbytes`) into the buffer, allocating it if needed; returns self."""
        mv = _flat_mv(memoryview(mv))
        if mv.nbytes != self.nbytes:
            raise ValueError(f"copyin of {mv.nbytes} bytes into {self!r} of {self.nbytes} bytes")
        self.ensure_allocated()
        if mv.nbytes:
            self.allocator.copyin(self._buf, mv)
        return self

    def copyout(self, mv: memoryview) -> memoryview:
        """Copy the buffer's bytes into the host memoryview `mv` (exactly `nbytes`); returns `mv`."""
        flat = _flat_mv(mv)
        if flat.nbytes != self.nbytes:
            raise ValueError(f"copyout of {self!r} ({self.nbytes} bytes) into {flat.nbytes} bytes")
        self._ensure_readable()
        if flat.nbytes:
            self.allocator.copyout(flat, self._buf)
        return mv

    def _ensure_readable(self) -> None:
        """Attach a lazy view of an allocated base (it holds the base's data); raise if there is no data at all."""
        if self.is_allocated():
            return
        if self._base is not None and self._base.is_allocated():
            self.allocate()
            return
        raise RuntimeError(f"can't read {self!r}: it holds no data yet")

    def as_buffer(self, allow_zero_copy: bool = True, force_zero_copy: bool = False) -> memoryview:
        """The buffer's bytes as a flat host memoryview: zero-copy when allowed and the allocator supports it
        (the view then aliases device memory), else a fresh copy."""
        self._ensure_readable()
        if (allow_zero_copy or force_zero_copy) and self.allocator.supports_as_buffer:
            return self.allocator.as_buffer(self._buf)
        if force_zero_copy:
            raise NotImplementedError(f"{type(self.allocator).__name__} has no zero-copy as_buffer")
        return self.copyout(memoryview(bytearray(self.nbytes)))

    def numpy(self) -> np.ndarray:
        """A numpy copy of the contents, flat, in `dtypes.to_np(dtype)` (bfloat16 widens to float32)."""
        import numpy as np

        raw = np.frombuffer(self.as_buffer(allow_zero_copy=False), dtype=np.uint8)
        if self.dtype.scalar() == dtypes.bfloat16:
            return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        return raw.view(dtypes.to_np(self.dtype)).copy()


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
    - `graph`: a `GraphRunner` subclass for batched JIT replay, or None;
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
        graph: type[GraphRunner] | None = None,
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
        from tinycore.plugin.manager import get_manager

        declared = get_manager().device_capabilities(self.family)
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


def is_dtype_supported(dtype: DType, device: str | None = None) -> bool:
    """Whether `device` (default: `Device.DEFAULT`) can store and compute in `dtype` (its scalar for vectors).

    Asks the device's declared capabilities; core has no per-device tables.
    """
    if dtype.scalar() == dtypes.void:
        return False
    name = device if device is not None else _default_device()
    return dtype.scalar() in _device_lookup(name).capabilities.dtypes


def renderer_setting(device: Any, name: str, default: Any = None) -> Any:
    """Attribute `name` of `device`'s renderer, or `default` when the device can't be asked (not a single device
    name, no plugin, no hardware, no renderer). `name` must be declared on `tinycore.renderer.Renderer` (its
    default is there); core reads renderer tuning knobs through this (``gemm_panel_bytes``, ``row_reduce_bytes``)
    without naming a device.

    >>> renderer_setting(("CLANG:0", "CLANG:1"), "row_reduce_bytes", 0)  # a multi-device value has no one renderer
    0
    """
    from tinycore.renderer import Renderer

    if name.startswith("_") or not hasattr(Renderer, name):
        raise AttributeError(f"{name!r} is not declared on tinycore.renderer.Renderer: declare it there first")
    if not isinstance(device, str):
        return default
    try:
        renderer = _device_lookup(device).renderer
        return default if renderer is None else getattr(renderer, name)
    except Exception:  # noqa: BLE001 (a device that can't be opened has no settings to give)
        return default
