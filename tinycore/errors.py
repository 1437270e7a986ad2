"""Every public exception of tinycore.

All derive from :class:`TinycoreError`. The four device errors share one shape: a one-line reason, then the device,
the distribution that provides it (and its version), the plugin state, and one concrete fix. The same facts are
attributes, so tools (``tinycore doctor --json``, test kits) never parse the text.

>>> err = DeviceNotInstalledError("no installed plugin provides it", device="CUDA", fix="pip install 'tinycore[cuda]'")
>>> err.device, err.state, err.fix
('CUDA', 'not installed', "pip install 'tinycore[cuda]'")
>>> print(err)
device CUDA: no installed plugin provides it
  distribution: none, state: not installed
  fix: pip install 'tinycore[cuda]'
"""

from __future__ import annotations

from typing import Any


class TinycoreError(Exception):
    """Base class of every exception tinycore raises on purpose."""


class DeviceError(TinycoreError, RuntimeError):
    """A device could not be used; carries ``device``, ``distribution``, ``version``, ``state``, ``reason``, ``fix``.

    Subclasses set :attr:`default_state`; an explicit ``state=`` overrides it (a blocked device raises
    :class:`DeviceUnavailableError` with state ``"blocked"``).
    """

    default_state = "error"

    def __init__(
        self,
        reason: str,
        *,
        device: str,
        distribution: str | None = None,
        version: str | None = None,
        state: str | None = None,
        fix: str = "",
    ) -> None:
        self.reason, self.device, self.distribution, self.version = reason, device, distribution, version
        self.state = state if state is not None else self.default_state
        self.fix = fix
        super().__init__(self._format())

    def _format(self) -> str:
        dist = "none" if self.distribution is None else self.distribution
        if self.distribution is not None and self.version:
            dist += f" {self.version}"
        lines = [f"device {self.device}: {self.reason}", f"  distribution: {dist}, state: {self.state}"]
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self._format()

    def __reduce__(self) -> tuple[Any, ...]:
        # keyword-only arguments do not survive the default exception pickling (BEAM workers, multiprocessing)
        return _rebuild_device_error, (type(self), self.reason, self.as_dict())

    def as_dict(self) -> dict[str, str | None]:
        """The error's facts as a JSON-ready dict (used by ``tinycore doctor --json``)."""
        return {
            "error": type(self).__name__,
            "device": self.device,
            "distribution": self.distribution,
            "version": self.version,
            "state": self.state,
            "reason": self.reason,
            "fix": self.fix,
        }


def _rebuild_device_error(cls: type[DeviceError], reason: str, facts: dict[str, str | None]) -> DeviceError:
    kwargs = {key: facts[key] for key in ("device", "distribution", "version", "state")}
    return cls(reason, fix=facts["fix"] or "", **kwargs)  # type: ignore[arg-type]


class DeviceNotInstalledError(DeviceError):
    """No installed plugin provides the requested device; ``fix`` is the ``pip install`` line."""

    default_state = "not installed"


class DevicePluginError(DeviceError):
    """The plugin providing the device failed to import, register, or open it (the original error is chained)."""

    default_state = "failed"


class DevicePluginIncompatibleError(DeviceError):
    """The plugin's ``Requires-Dist: tinycore`` range or ``TINYCORE_PLUGIN_API`` does not match this core."""

    default_state = "incompatible"


class DeviceUnavailableError(DeviceError):
    """The plugin is installed but the device cannot run here (its probe's reason), or it was blocked by a knob."""

    default_state = "unavailable"


class CompileError(TinycoreError, RuntimeError):
    """A device compiler rejected generated source (the message carries the compiler output)."""


class UnsupportedDTypeError(TinycoreError, TypeError):
    """A kernel needs a dtype its device's renderer does not declare (``Renderer.supported_dtypes``): raised before
    anything is compiled, naming the device, the dtype and what the device does support."""


class JitError(TinycoreError, RuntimeError):
    """A ``TinyJit`` replay does not match its capture (shapes, dtypes, devices), or capture itself failed."""


class IntegerDivisionByZeroError(TinycoreError, ZeroDivisionError, RuntimeError):
    """Integer ``//``, ``%`` or ``idiv`` by a zero divisor that tinycore can see at call time (a Python 0, a constant
    tensor, or a realized tensor holding a 0). PyTorch raises ``RuntimeError: ZeroDivisionError`` here; this is both a
    ``ZeroDivisionError`` and a ``RuntimeError``, so either ``except`` catches it."""


class MultiDeviceError(TinycoreError, ValueError):
    """An operation on sharded tensors that tinycore can't run without resharding (mismatched shardings, a movement
    op that cuts through the sharded axis, an axis too small to split)."""


__all__ = [
    "CompileError",
    "DeviceError",
    "DeviceNotInstalledError",
    "DevicePluginError",
    "DevicePluginIncompatibleError",
    "DeviceUnavailableError",
    "IntegerDivisionByZeroError",
    "JitError",
    "MultiDeviceError",
    "TinycoreError",
]
