"""Devices and buffers as the engine and front end see them: `Buffer` (memory on a named device, allocated lazily
through the device's allocator), `Device` (the registry: ``Device["CUDA:1"]`` opens a device through its plugin),
`is_dtype_supported`, `renderer_setting`; re-exports the device contract of `tinycore.backend` (`Allocator`,
`LRUAllocator`, `BufferSpec`, `Compiled`, `Program`...) for code written against this module.

>>> from tinycore.dtype import dtypes
>>> BufferSpec(nolru=True).nolru, dtypes.float32.itemsize
(True, 4)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tinycore.backend.allocator import Allocator, BufferSpec, LRUAllocator, _flat_mv, host_address
from tinycore.backend.compiled import Compiled, LaunchableProgram, Program, grid_and_block
from tinycore.dtype import DType, dtypes
from tinycore.plugin.manager import (
    DEVICE_NAME_RULE,
    DevicePlugins,
    format_device_name,
    get_manager,
    parse_device_name,
    reset_manager,
)
from tinycore.renderer import Renderer

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DEVICE_NAME_RULE",
    "Allocator",
    "Buffer",
    "BufferSpec",
    "Compiled",
    "Device",
    "DeviceRegistry",
    "LRUAllocator",
    "LaunchableProgram",
    "Program",
    "format_device_name",
    "grid_and_block",
    "host_address",
    "is_dtype_supported",
    "parse_device_name",
    "renderer_setting",
]


class DeviceRegistry:
    """Maps device names to opened devices; one instance, :data:`Device`, exists per process.

    - ``Device[name]``: the opened device for ``name`` (cached by canonical name); raises a
      :class:`tinycore.errors.DeviceError` subclass saying why when it cannot, and ValueError for a malformed name.
    - ``Device.canonicalize(name)``: ``"cuda:1"`` -> ``"CUDA:1"``, ``"CUDA:0"`` -> ``"CUDA"``, ``"CPU"`` -> ``"CLANG"``.
    - ``Device.DEFAULT``: ``DEV`` if set (validated, no fallback), else the highest-priority device whose probe passes;
      assignable (``Device.DEFAULT = "CLANG"``).
    - ``Device.default``: the opened default device; ``Device.get_available_devices()``: the families whose probe
      passes (as tinygrad's, which yields the names of the devices it can open).
    - ``iter(Device)``: the available device families, highest priority first.
    """

    def __init__(self, manager: DevicePlugins | None = None) -> None:
        self._manager = manager  # None: the process-wide manager of get_manager()
        self._opened: dict[str, Compiled] = {}
        self._canonical: dict[str, str] = {}
        self._default: str | None = None
        self._lock = threading.RLock()

    @property
    def manager(self) -> DevicePlugins:
        """The plugin manager behind this registry (the process-wide one unless one was given)."""
        return self._manager if self._manager is not None else get_manager()

    def canonicalize(self, name: str) -> str:
        """The canonical spelling of device ``name``; ValueError (naming the rule) when it is not a device name, and
        the `DeviceError` saying what to install when no plugin provides it (so ``t.to("NOPE")`` fails right there,
        not at the first ``.numpy()``)."""
        canonical = self._canonical.get(name)
        if canonical is None:
            canonical = self.manager.canonicalize(name)
            self.manager.resolve(canonical)
            self._canonical[name] = canonical
        return canonical

    def __getitem__(self, name: str) -> Compiled:
        """The opened device ``name`` (opened on first request, then cached under its canonical name)."""
        device = self._opened.get(name)
        if device is not None:
            return device
        canonical = self.canonicalize(name)
        with self._lock:
            device = self._opened.get(canonical)
            if device is None:
                device = self.manager.open_device(canonical)
                self._opened[canonical] = device
            self._opened[name] = device
        return device

    @property
    def DEFAULT(self) -> str:  # noqa: N802 - tinygrad's spelling
        """The default device's canonical name (resolved on first use, then cached)."""
        if self._default is None:
            with self._lock:
                if self._default is None:
                    self._default = self.manager.default_device()
        return self._default

    @DEFAULT.setter
    def DEFAULT(self, name: str) -> None:  # noqa: N802
        """Set the default device (canonicalized; validated when it is opened)."""
        self._default = self.canonicalize(name)

    def __iter__(self) -> Iterator[str]:
        """The available device families (probe passed), highest priority first."""
        manager = self.manager
        return iter([name for name in manager.device_names() if manager.probe(name).ok])

    def installed(self) -> list[str]:
        """Every registered device family (available or not), highest priority first."""
        return self.manager.device_names()

    @property
    def default(self) -> Compiled:
        """The opened default device, ``Device[Device.DEFAULT]`` (tinygrad's ``Device.default``)."""
        return self[self.DEFAULT]

    def get_available_devices(self) -> Iterator[str]:
        """Yield the device families that can be opened here, highest priority first (tinygrad's
        ``Device.get_available_devices()``). Cheap: it reads the plugin manager's probe results (cached after the
        first probe) and opens nothing, where tinygrad opens each device to find out."""
        yield from self

    def is_opened(self, name: str) -> bool:
        """Whether ``name`` was opened already in this process (no discovery, no probing)."""
        return name in self._opened

    def reset(self) -> None:
        """Forget opened devices and the default; the process-wide manager too when this registry uses it."""
        with self._lock:
            self._opened.clear()
            self._canonical.clear()
            self._default = None
            if self._manager is None:
                reset_manager()

    def __repr__(self) -> str:
        opened = sorted({self.canonicalize(name) for name in self._opened})
        return f"<Device registry opened={opened} default={self._default!r}>"

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"Device has no attribute {name!r}; use Device[{name!r}] to open a device")


Device = DeviceRegistry()


def _device_lookup(name: str) -> Compiled:
    """The opened `Compiled` device for `name` (through the registry; tests may replace this function)."""
    return Device[name]


def _default_device() -> str:
    """`Device.DEFAULT` (a function so that tests may replace it)."""
    return Device.DEFAULT


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

        widen = self.dtype.scalar() == dtypes.bfloat16
        np_dtype = np.dtype(np.uint16 if widen else dtypes.to_np(self.dtype))
        out = np.empty(self.nbytes // np_dtype.itemsize, np_dtype)  # copied into once: no zero fill, no second copy
        self.copyout(memoryview(out).cast("B"))
        return (out.astype(np.uint32) << 16).view(np.float32) if widen else out


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
    if name.startswith("_") or not hasattr(Renderer, name):
        raise AttributeError(f"{name!r} is not declared on tinycore.renderer.Renderer: declare it there first")
    if not isinstance(device, str):
        return default
    try:
        renderer = _device_lookup(device).renderer
        return default if renderer is None else getattr(renderer, name)
    except Exception:  # noqa: BLE001 (a device that can't be opened has no settings to give)
        return default
