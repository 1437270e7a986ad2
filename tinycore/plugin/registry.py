"""The ``Device`` registry: ``Device["CUDA:1"]`` opens (once) and returns a device; ``Device.DEFAULT`` names it.

Importing this module discovers nothing; the first request does (see :mod:`tinycore.plugin.manager`).

>>> Device.canonicalize("python:0")  # doctest: +SKIP
'PYTHON'
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tinycore.plugin.manager import (
    DEVICE_NAME_RULE,
    PluginManager,
    format_device_name,
    get_manager,
    parse_device_name,
    reset_manager,
)

if TYPE_CHECKING:
    from tinycore.device import Compiled

__all__ = ["DEVICE_NAME_RULE", "Device", "DeviceRegistry", "format_device_name", "parse_device_name"]


class DeviceRegistry:
    """Maps device names to opened devices; one instance, :data:`Device`, exists per process.

    - ``Device[name]``: the opened device for ``name`` (cached by canonical name); raises a
      :class:`tinycore.errors.DeviceError` subclass saying why when it cannot, and ValueError for a malformed name.
    - ``Device.canonicalize(name)``: ``"cuda:1"`` -> ``"CUDA:1"``, ``"CUDA:0"`` -> ``"CUDA"``, ``"CPU"`` -> ``"CLANG"``.
    - ``Device.DEFAULT``: ``DEV`` if set (validated, no fallback), else the highest-priority device whose probe passes;
      assignable (``Device.DEFAULT = "CLANG"``).
    - ``iter(Device)``: the available device families, highest priority first.
    """

    def __init__(self, manager: PluginManager | None = None) -> None:
        self._manager = manager  # None: the process-wide manager of get_manager()
        self._opened: dict[str, Compiled] = {}
        self._canonical: dict[str, str] = {}
        self._default: str | None = None
        self._lock = threading.RLock()

    @property
    def manager(self) -> PluginManager:
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
