"""Device plugin discovery: entry points, per-plugin state, version checks, default device selection.

Nothing here runs at ``import tinycore``. The first device request (``Device["X"]``, ``Device.DEFAULT``) builds the
process-wide :class:`DevicePlugins` (see :func:`get_manager`), which

1. reads the entry points of group ``tinycore.devices`` and their distributions' metadata (no plugin import):
   knobs (``TINYCORE_PLUGINS``, ``TINYCORE_DISABLE_PLUGINS``), duplicate entry names and the plugin's
   ``Requires-Dist: tinycore`` range are settled here, so ``tinycore plugins`` can list without importing;
2. imports each remaining plugin's light entry module, checks its ``TINYCORE_PLUGIN_API``, and registers it with
   pluggy, which replays the historic ``tinycore_register_devices`` hook into a :class:`DeviceRegistrar`;
3. probes devices lazily (highest priority first for the default device) and opens them on request.

Every plugin has a :class:`PluginRecord` whose ``state`` follows this small machine::

    discovered -> blocked                       (TINYCORE_PLUGINS / TINYCORE_DISABLE_PLUGINS)
    discovered -> duplicate                     (another distribution claims the name)
    discovered -> incompatible                  (Requires-Dist range, TINYCORE_PLUGIN_API, register api_version)
    discovered -> failed                        (import or registration raised, or nothing registered)
    discovered -> registered -> available | unavailable   (its probe)

A failure is recorded on its record, never raised at discovery, unless ``TINYCORE_STRICT_PLUGINS=1``; requesting the
device later raises the matching :mod:`tinycore.errors` exception with the original exception chained.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import pluggy

from tinycore.backend.compiled import set_declared_capabilities
from tinycore.errors import (
    DeviceError,
    DeviceNotInstalledError,
    DevicePluginError,
    DevicePluginIncompatibleError,
    DeviceUnavailableError,
)
from tinycore.helpers import DEBUG, parse_env
from tinycore.plugin.hookspecs import (
    ENTRY_POINT_GROUP,
    PLUGIN_API_VERSION,
    PROJECT_NAME,
    DeviceCapabilities,
    DeviceHookSpecs,
    ProbeResult,
)
from tinycore.renderer import set_renderer_rebuilder
from tinycore.version import __version__

CORE_DISTRIBUTION = "tinycore"
_FAMILY_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")
_DEVICE_NAME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)(?::([0-9]+))?$")
_FACTORY_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
DEVICE_NAME_RULE = "a device name is NAME or NAME:ordinal (letters, digits and _, starting with a letter), e.g. CUDA:1"


def core_version() -> str:
    """The version of the running tinycore core."""
    return __version__


def parse_device_name(name: str) -> tuple[str, int]:
    """Split a device name into its upper-case family and ordinal; raise ValueError naming the rule if invalid.

    >>> parse_device_name("cuda:1"), parse_device_name("CLANG")
    (('CUDA', 1), ('CLANG', 0))
    """
    match = _DEVICE_NAME_RE.match(name) if isinstance(name, str) else None
    if match is None:
        raise ValueError(f"invalid device name {name!r}: {DEVICE_NAME_RULE}")
    return match.group(1).upper(), int(match.group(2) or 0)


def format_device_name(family: str, ordinal: int) -> str:
    """The canonical spelling of ``family`` number ``ordinal``: ordinal 0 is the bare family name.

    >>> format_device_name("CUDA", 0), format_device_name("CUDA", 2)
    ('CUDA', 'CUDA:2')
    """
    return family if ordinal == 0 else f"{family}:{ordinal}"


class PluginState(str, Enum):
    """Where a plugin is in discovery; see the module docstring for the transitions."""

    DISCOVERED = "discovered"
    BLOCKED = "blocked"
    DUPLICATE = "duplicate"
    INCOMPATIBLE = "incompatible"
    FAILED = "failed"
    REGISTERED = "registered"
    AVAILABLE = "available"
    UNAVAILABLE = "unavailable"

    def __str__(self) -> str:
        return self.value


FAILURE_STATES = frozenset({PluginState.DUPLICATE, PluginState.INCOMPATIBLE, PluginState.FAILED})
_LOADED_STATES = frozenset({PluginState.REGISTERED, PluginState.AVAILABLE, PluginState.UNAVAILABLE})


@dataclass
class PluginRecord:
    """One entry point of group ``tinycore.devices`` and what became of it.

    ``name`` is the entry-point name (the canonical device name), ``module`` its value, ``distribution`` and
    ``version`` come from the distribution's metadata, ``requires`` is its ``Requires-Dist: tinycore`` line.
    ``reason``/``fix``/``exception`` explain the current state; ``devices`` lists the families it registered.
    """

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    requires: str | None = None
    state: PluginState = PluginState.DISCOVERED
    reason: str = ""
    fix: str = ""
    exception: BaseException | None = field(default=None, repr=False)
    api_version: tuple[int, int] | None = None
    devices: list[str] = field(default_factory=list)
    plugin: Any = field(default=None, repr=False)
    entry_point: Any = field(default=None, repr=False)

    def set_state(self, state: PluginState, reason: str = "", fix: str = "", exc: BaseException | None = None) -> None:
        """Move to ``state`` with an explanation (and the exception that caused it, if any)."""
        self.state, self.reason, self.fix, self.exception = state, reason, fix, exc

    @property
    def label(self) -> str:
        """``distribution version`` for messages (or the module name when there is no distribution)."""
        if self.distribution is None:
            return f"module {self.module}"
        return f"{self.distribution} {self.version}" if self.version else self.distribution

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready facts (used by ``tinycore plugins --json``)."""
        return {
            "name": self.name,
            "module": self.module,
            "distribution": self.distribution,
            "version": self.version,
            "requires": self.requires,
            "state": self.state.value,
            "reason": self.reason,
            "fix": self.fix,
            "api_version": list(self.api_version) if self.api_version else None,
            "devices": list(self.devices),
        }


@dataclass
class DeviceEntry:
    """A device family as a plugin registered it, plus its (cached) probe result."""

    name: str
    priority: int
    aliases: tuple[str, ...]
    api_version: tuple[int, int]
    factory: str | None
    record: PluginRecord
    probe: ProbeResult | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready facts about the family and its probe (if it ran)."""
        probe = None
        if self.probe is not None:
            probe = {
                "ok": self.probe.ok,
                "reason": self.probe.reason,
                "hint": self.probe.hint,
                "device_count": self.probe.device_count,
            }
        return {
            "name": self.name,
            "priority": self.priority,
            "aliases": list(self.aliases),
            "api_version": list(self.api_version),
            "factory": self.factory,
            "plugin": self.record.name,
            "distribution": self.record.distribution,
            "probe": probe,
        }


# ---------------------------------------------------------------------------------------------------------------------
# version checks


def _normalize_dist_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _release_tuple(version: str) -> tuple[int, ...]:
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    if match is None:
        raise ValueError(f"cannot parse version {version!r}")
    return tuple(int(part) for part in match.group(1).split("."))


def _pad(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def _older(version: str, other: str) -> bool:
    """True when release ``version`` sorts before ``other`` (a trailing ``.*`` of ``other`` is ignored)."""
    have, want = _pad(_release_tuple(version), _release_tuple(other.removesuffix(".*")))
    return have < want


def _fallback_spec_contains(op: str, spec_version: str, version: str) -> bool:
    """PEP 440 comparison on release numbers only (pre/post/dev tags ignored); used when ``packaging`` is absent."""
    if op == "===":
        return version.strip() == spec_version.strip()
    wildcard = spec_version.endswith(".*")
    have = _release_tuple(version)
    want = _release_tuple(spec_version[:-2] if wildcard else spec_version)
    if op in ("==", "!=") and wildcard:
        equal = have[: len(want)] + (0,) * max(0, len(want) - len(have)) == want
        return equal if op == "==" else not equal
    if op == "~=":
        if len(want) < 2:
            raise ValueError(f"~= needs at least two release numbers, got {spec_version!r}")
        prefix = want[:-1]
        padded_have, padded_want = _pad(have, want)
        return padded_have >= padded_want and have[: len(prefix)] + (0,) * max(0, len(prefix) - len(have)) == prefix
    padded_have, padded_want = _pad(have, want)
    compare: dict[str, Callable[[tuple[int, ...], tuple[int, ...]], bool]] = {
        "==": lambda x, y: x == y,
        "!=": lambda x, y: x != y,
        ">=": lambda x, y: x >= y,
        "<=": lambda x, y: x <= y,
        ">": lambda x, y: x > y,
        "<": lambda x, y: x < y,
    }
    if op not in compare:
        raise ValueError(f"unknown version operator {op!r}")
    return compare[op](padded_have, padded_want)


_REQ_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?([^;)]*)\)?\s*(?:;(.*))?$")
_SPEC_RE = re.compile(r"^\s*(===|~=|==|!=|<=|>=|<|>)\s*([^\s,]+)\s*$")


def _fallback_parse_requirement(line: str) -> tuple[str, list[tuple[str, str]], str | None]:
    match = _REQ_RE.match(line)
    if match is None:
        raise ValueError(f"cannot parse requirement {line!r}")
    name, specs, marker = match.group(1), match.group(2).strip(), match.group(3)
    parsed = []
    for part in filter(None, (piece.strip() for piece in specs.split(","))):
        spec = _SPEC_RE.match(part)
        if spec is None:
            raise ValueError(f"cannot parse version specifier {part!r} in {line!r}")
        parsed.append((spec.group(1), spec.group(2)))
    return name, parsed, marker.strip() if marker else None


def requirement_applies(line: str, dist_name: str = CORE_DISTRIBUTION) -> bool:
    """True when ``line`` (a ``Requires-Dist`` value) names ``dist_name`` and is not behind an extra."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pragma: no cover - exercised by the fallback tests through use_packaging=False
        name, _, marker = _fallback_parse_requirement(line)
        return _normalize_dist_name(name) == dist_name and not (marker and "extra" in marker)
    req = Requirement(line)
    if _normalize_dist_name(req.name) != dist_name:
        return False
    return req.marker is None or bool(req.marker.evaluate({"extra": ""}))


def unmet_specifiers(line: str, version: str, *, use_packaging: bool = True) -> list[tuple[str, str]]:
    """The ``(operator, version)`` specifiers of requirement ``line`` that ``version`` does not satisfy.

    Uses ``packaging`` when importable (pre-releases of ``version`` count as satisfying), else a small built-in
    comparison of release numbers supporting ``>= <= < > == != ~= ===`` and ``==X.*``.

    >>> unmet_specifiers("tinycore>=0.1,<0.2", "0.1.3"), unmet_specifiers("tinycore>=9", "0.1.0")
    ([], [('>=', '9')])
    """
    if use_packaging:
        try:
            from packaging.requirements import Requirement
        except ImportError:
            use_packaging = False
    if use_packaging:
        specifier = Requirement(line).specifier
        return [(spec.operator, spec.version) for spec in specifier if not spec.contains(version, prereleases=True)]
    _, specs, _ = _fallback_parse_requirement(line)
    return [(op, want) for op, want in specs if not _fallback_spec_contains(op, want, version)]


def check_api_version(api: object, *, who: str, distribution: str | None = None) -> tuple[str, str] | None:
    """``(reason, fix)`` when plugin API version ``api`` cannot load in this core, else None.

    Compatible means: a ``(major, minor)`` pair of ints, same major as core, minor <= core's minor.

    >>> check_api_version((1, 0), who="x") is None
    True
    """
    core = PLUGIN_API_VERSION
    core_text = f"{core[0]}.{core[1]}"
    upgrade_core = "pip install --upgrade tinycore"
    if not (isinstance(api, tuple) and len(api) == 2 and all(isinstance(part, int) for part in api)):
        reason = f"{who} declares TINYCORE_PLUGIN_API = {api!r}, expected a (major, minor) tuple; core is {core_text}"
        return reason, f"declare TINYCORE_PLUGIN_API = ({core[0]}, {core[1]}) in the plugin's entry module"
    reason = f"{who} needs plugin API {api[0]}.{api[1]} but this tinycore provides {core_text}"
    if api[0] > core[0] or (api[0] == core[0] and api[1] > core[1]):
        return reason + " (plugin is newer)", upgrade_core
    if api[0] < core[0]:
        return reason + " (plugin is older)", f"pip install --upgrade {distribution or who}"
    return None


# ---------------------------------------------------------------------------------------------------------------------
# the object handed to tinycore_register_devices


class DeviceRegistrar:
    """What ``tinycore_register_devices(registry)`` receives: call :meth:`register` once per device family.

    Registrations are staged per plugin and committed only when the whole plugin registered cleanly, so a plugin
    that fails half-way leaves no device behind.
    """

    def __init__(self, manager: DevicePlugins) -> None:
        self._manager = manager
        self._current: PluginRecord | None = None
        self._staged: list[DeviceEntry] = []

    def register(
        self,
        name: str,
        *,
        priority: int,
        aliases: Sequence[str] = (),
        api_version: tuple[int, int] = (1, 0),
        factory: str | None = None,
    ) -> None:
        """Declare device family ``name`` (canonical, upper-case, no ordinal).

        ``priority`` ranks it for default selection (PYTHON is 0, higher wins), ``aliases`` are other names that
        resolve to it (``CPU`` for ``CLANG``), ``api_version`` the device contract it implements, and ``factory`` a
        lazy ``"module:Class"`` called as ``Class("NAME:ordinal")`` when no ``tinycore_open_device`` answers.
        """
        record = self._current
        if record is None:
            raise RuntimeError("registry.register() may only be called from a tinycore_register_devices hook")
        who = record.label
        for label, value in [("name", name), *(("alias", alias) for alias in aliases)]:
            if not isinstance(value, str) or not _FAMILY_RE.match(value):
                raise DevicePluginError(
                    f"{who} registered invalid device {label} {value!r}: expected upper-case letters, digits, _",
                    device=str(name),
                    distribution=record.distribution,
                    version=record.version,
                    fix=f"report this to the maintainers of {record.distribution or record.module}",
                )
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise TypeError(f"{who}: priority of {name} must be an int, got {priority!r}")
        if factory is not None and not (isinstance(factory, str) and _FACTORY_RE.match(factory)):
            raise ValueError(f"{who}: factory of {name} must be 'module:Class', got {factory!r}")
        problem = check_api_version(
            tuple(api_version) if isinstance(api_version, list) else api_version,
            who=who,
            distribution=record.distribution,
        )
        if problem is not None:
            raise DevicePluginIncompatibleError(
                problem[0], device=name, distribution=record.distribution, version=record.version, fix=problem[1]
            )
        for claimed in (name, *aliases):
            owner = self._manager._owner_of(claimed, self._staged)
            if owner is not None and owner is not record:
                self._manager._record_conflict(claimed, owner, record)
                raise DevicePluginError(
                    f"device name {claimed} is claimed by two distributions: {owner.label} and {record.label}",
                    device=claimed,
                    distribution=record.distribution,
                    version=record.version,
                    state=PluginState.DUPLICATE.value,
                    fix=_duplicate_fix(owner, record),
                )
            if owner is record:
                raise ValueError(f"{who} registered device name {claimed} twice")
        self._staged.append(DeviceEntry(name, priority, tuple(aliases), tuple(api_version), factory, record))

    def _begin(self, record: PluginRecord) -> None:
        self._current, self._staged = record, []

    def _finish(self, commit: bool) -> list[DeviceEntry]:
        staged, self._current, self._staged = self._staged, None, []
        return staged if commit else []


def _duplicate_fix(first: PluginRecord, second: PluginRecord) -> str:
    uninstall = second.distribution or first.distribution or second.module
    return f"uninstall one of them, e.g. pip uninstall {uninstall}"


# ---------------------------------------------------------------------------------------------------------------------
# the manager


def _env_names(var: str) -> set[str] | None:
    raw = os.environ.get(var)
    if raw is None or not raw.strip():
        return None
    return {part.strip().upper() for part in raw.split(",") if part.strip()}


def _strict() -> bool:
    return parse_env("TINYCORE_STRICT_PLUGINS", os.environ.get("TINYCORE_STRICT_PLUGINS"), False)


PROBE_TIMEOUT_ENV = "TINYCORE_PROBE_TIMEOUT"
DEFAULT_PROBE_TIMEOUT = 10.0  # seconds a probe may take before its device is recorded unavailable
PROBE_PROGRESS_AFTER = 1.5  # seconds of waiting on a probe before "waiting for the probe of X ..." is printed


def probe_timeout() -> float:
    """Seconds a device probe may run: ``TINYCORE_PROBE_TIMEOUT`` (a positive number) or 10. Read on every probe.

    >>> probe_timeout() > 0
    True
    """
    raw = os.environ.get(PROBE_TIMEOUT_ENV)
    value = parse_env(PROBE_TIMEOUT_ENV, raw, DEFAULT_PROBE_TIMEOUT)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"{PROBE_TIMEOUT_ENV}={raw!r} is not a positive number of seconds: set it to e.g. "
            f"{PROBE_TIMEOUT_ENV}=30, or unset it (default {DEFAULT_PROBE_TIMEOUT:g})"
        )
    return value


class _ProbeRun:
    """One probe running in its own daemon thread (a probe that never returns must not block its caller)."""

    def __init__(self, call: Callable[[], Any], family: str) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.started = time.monotonic()
        self.announced = False  # the "waiting for the probe" line was printed
        self.thread = threading.Thread(target=self._run, args=(call,), name=f"tinycore-probe-{family}", daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.result = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            self.error = exc


class DevicePlugins:
    """The device plugins of this process: discovers them and answers every device question (names, states,
    probes, opening, defaults). It wraps a ``pluggy.PluginManager`` (`_pm`), which calls the hooks.

    ``entry_points`` replaces the installed entry points of group ``tinycore.devices`` (tests, embedding).
    Most code uses the process-wide instance from :func:`get_manager` through ``tinycore.Device``.
    """

    def __init__(self, entry_points: Iterable[Any] | None = None) -> None:
        self._pm = pluggy.PluginManager(PROJECT_NAME)
        self._pm.add_hookspecs(DeviceHookSpecs)
        self._registrar = DeviceRegistrar(self)
        # historic: every plugin registered later gets this call as it registers
        self._pm.hook.tinycore_register_devices.call_historic(kwargs={"registry": self._registrar})
        self._given_entry_points = None if entry_points is None else list(entry_points)
        self._records: list[PluginRecord] | None = None
        self._devices: dict[str, DeviceEntry] = {}
        self._aliases: dict[str, str] = {}
        self._conflicts: dict[str, tuple[PluginRecord, PluginRecord]] = {}
        self._loaded = self._loading = False
        self._strict_error: DeviceError | None = None
        self._lock = threading.RLock()
        self._probing: dict[str, _ProbeRun] = {}  # probes running now, shared by concurrent callers
        self._probe_timeouts: dict[str, DevicePluginError] = {}  # families whose probe hung (raised in strict mode)

    # -- discovery -------------------------------------------------------------------------------------------------

    @property
    def hook(self) -> Any:
        """pluggy's hook relay, for core code calling collect hooks such as ``tinycore_doctor_checks``."""
        self.load()
        return self._pm.hook

    def list_plugins(self) -> list[PluginRecord]:
        """Every plugin record, reading entry-point and distribution metadata only (imports no plugin).

        Before :meth:`load` the states are the metadata-level ones (discovered, blocked, duplicate, incompatible).
        """
        with self._lock:
            if self._records is None:
                self._records = self._read_metadata()
            return list(self._records)

    def _read_metadata(self) -> list[PluginRecord]:
        if self._given_entry_points is not None:
            eps = self._given_entry_points
        else:
            eps = list(importlib_metadata.entry_points(group=ENTRY_POINT_GROUP))
        records = [self._record_from_entry_point(ep) for ep in eps]
        records.sort(key=lambda rec: (rec.name, rec.distribution or ""))
        allow, deny = _env_names("TINYCORE_PLUGINS"), _env_names("TINYCORE_DISABLE_PLUGINS")
        for rec in records:
            if not _FAMILY_RE.match(rec.name):
                rec.set_state(
                    PluginState.FAILED,
                    f"entry point name {rec.name!r} is not a canonical device name ({DEVICE_NAME_RULE})",
                    f"report this to {rec.distribution or rec.module}: the entry point must be named in upper case",
                )
            elif deny is not None and rec.name in deny:
                rec.set_state(
                    PluginState.BLOCKED,
                    f"disabled by TINYCORE_DISABLE_PLUGINS={os.environ['TINYCORE_DISABLE_PLUGINS']}",
                    f"remove {rec.name} from TINYCORE_DISABLE_PLUGINS",
                )
            elif allow is not None and rec.name not in allow:
                rec.set_state(
                    PluginState.BLOCKED,
                    f"not listed in TINYCORE_PLUGINS={os.environ['TINYCORE_PLUGINS']}",
                    f"add {rec.name} to TINYCORE_PLUGINS",
                )
        by_name: dict[str, list[PluginRecord]] = {}
        for rec in records:
            if rec.state is PluginState.DISCOVERED:
                by_name.setdefault(rec.name, []).append(rec)
        for name, claimants in by_name.items():
            if len(claimants) > 1:
                for other in claimants[1:]:
                    self._record_conflict(name, claimants[0], other)
        for rec in records:
            if rec.state is PluginState.DISCOVERED:
                self._check_requirement(rec)
        return records

    @staticmethod
    def _record_from_entry_point(ep: Any) -> PluginRecord:
        dist = getattr(ep, "dist", None)
        rec = PluginRecord(name=ep.name, module=ep.value, entry_point=ep)
        if dist is not None:
            rec.distribution, rec.version = dist.metadata["Name"], dist.version
            for line in dist.requires or ():
                try:
                    if requirement_applies(line):
                        rec.requires = line.split(";")[0].strip()
                        break
                except Exception:  # an unparsable line about some other package is not our business
                    continue
        return rec

    def _check_requirement(self, rec: PluginRecord) -> None:
        if rec.requires is None or _normalize_dist_name(rec.distribution or "") == CORE_DISTRIBUTION:
            return
        version = core_version()
        try:
            unmet = unmet_specifiers(rec.requires, version)
        except Exception as exc:
            rec.set_state(
                PluginState.INCOMPATIBLE,
                f"{rec.label} declares an unreadable requirement {rec.requires!r}: {exc}",
                f"pip install --upgrade {rec.distribution}",
                exc,
            )
            return
        if not unmet:
            return
        too_old = any(op in (">=", ">", "~=") or (op.startswith("==") and _older(version, want)) for op, want in unmet)
        fix = f"pip install '{rec.requires}'" if too_old else f"pip install --upgrade {rec.distribution}"
        rec.set_state(
            PluginState.INCOMPATIBLE,
            f"{rec.label} requires {rec.requires} but tinycore {version} is installed",
            fix,
        )

    def _record_conflict(self, name: str, first: PluginRecord, second: PluginRecord) -> None:
        self._conflicts[name] = (first, second)
        fix = _duplicate_fix(first, second)
        reason = f"device name {name} is claimed by two distributions: {first.label} and {second.label}"
        for rec in (first, second):
            rec.set_state(PluginState.DUPLICATE, reason, fix)
        entry = self._devices.pop(name, None)
        if entry is None and name in self._aliases:
            self._aliases.pop(name)

    def _owner_of(self, name: str, staged: Sequence[DeviceEntry]) -> PluginRecord | None:
        if name in self._conflicts:
            return self._conflicts[name][0]
        family = self._aliases.get(name, name)
        if family in self._devices:
            return self._devices[family].record
        for entry in staged:
            if name == entry.name or name in entry.aliases:
                return entry.record
        return None

    def load(self) -> None:
        """Import and register every plugin that passed the metadata checks (once; later calls return at once).

        With ``TINYCORE_STRICT_PLUGINS=1`` the first plugin failure is raised (and raised again on every later call).
        """
        if not self._loaded:
            with self._lock:
                if not self._loaded and not self._loading:  # _loading: a plugin hook asking for a device meanwhile
                    self._loading = True
                    try:
                        self._load_all()
                    finally:
                        self._loading, self._loaded = False, True
        if self._strict_error is not None:
            raise self._strict_error

    def _load_all(self) -> None:
        for rec in self.list_plugins():
            if rec.state is PluginState.DISCOVERED:
                self._load_record(rec)
        if _strict():
            for rec in self.list_plugins():
                if rec.state in FAILURE_STATES:
                    self._strict_error = self.error_for(rec, rec.name)
                    self._strict_error.__cause__ = rec.exception
                    break
        if DEBUG >= 1:
            for rec in self.list_plugins():
                detail = f": {rec.reason}" if rec.reason else ""
                print(f"tinycore plugin {rec.name} ({rec.label}): {rec.state}{detail}", file=sys.stderr)

    def register_plugin(
        self, plugin: object, name: str, *, distribution: str | None = None, version: str | None = None
    ) -> PluginRecord:
        """Register an already-imported plugin object (module or instance) as if an entry point named it.

        For embedding and tests; the same checks apply (``TINYCORE_PLUGIN_API``, duplicates). Returns its record.
        """
        with self._lock:
            self.load()
            module_name = getattr(plugin, "__name__", type(plugin).__name__)
            rec = PluginRecord(name=name, module=module_name, distribution=distribution, version=version)
            self._records = [*self.list_plugins(), rec]
            self._load_record(rec, plugin)
            return rec

    def _load_record(self, rec: PluginRecord, plugin: object = None) -> None:
        if plugin is None:
            try:
                plugin = rec.entry_point.load()
            except Exception as exc:
                rec.set_state(
                    PluginState.FAILED,
                    f"importing {rec.module} failed: {type(exc).__name__}: {exc}",
                    _reinstall_fix(rec),
                    exc,
                )
                return
        api = getattr(plugin, "TINYCORE_PLUGIN_API", None)
        if api is None:
            rec.set_state(
                PluginState.INCOMPATIBLE,
                f"{rec.label} does not declare TINYCORE_PLUGIN_API (this tinycore provides plugin API "
                f"{PLUGIN_API_VERSION[0]}.{PLUGIN_API_VERSION[1]})",
                f"pip install --upgrade {rec.distribution or rec.module}",
            )
            return
        problem = check_api_version(api, who=rec.label, distribution=rec.distribution)
        if problem is not None:
            rec.set_state(PluginState.INCOMPATIBLE, problem[0], problem[1])
            return
        rec.api_version = api
        plugin_name = f"{rec.distribution or 'local'}:{rec.name}"
        self._registrar._begin(rec)
        ok = False
        try:
            self._pm.register(plugin, name=plugin_name)
            ok = True
        except DeviceError as exc:
            state = next((known for known in PluginState if known.value == exc.state), PluginState.FAILED)
            rec.set_state(state, exc.reason, exc.fix, exc)
        except Exception as exc:
            rec.set_state(
                PluginState.FAILED,
                f"registering {rec.module} failed: {type(exc).__name__}: {exc}",
                _reinstall_fix(rec),
                exc,
            )
        finally:
            staged = self._registrar._finish(ok)
            if not ok and self._pm.has_plugin(plugin_name):
                self._pm.unregister(name=plugin_name)
        if not ok:
            return
        if not staged:
            self._pm.unregister(name=plugin_name)
            rec.set_state(
                PluginState.FAILED,
                f"{rec.module} registered no device (tinycore_register_devices never called registry.register)",
                f"report this to the maintainers of {rec.distribution or rec.module}",
            )
            return
        for entry in staged:
            self._devices[entry.name] = entry
            for alias in entry.aliases:
                self._aliases[alias] = entry.name
            rec.devices.append(entry.name)
        rec.plugin = plugin
        if rec.state is PluginState.DISCOVERED:  # a later conflict may have marked it duplicate meanwhile
            rec.set_state(PluginState.REGISTERED)

    # -- names -----------------------------------------------------------------------------------------------------

    def canonicalize(self, name: str) -> str:
        """``"cuda:1"`` -> ``"CUDA:1"``, ``"CUDA:0"`` -> ``"CUDA"``, aliases to their family (``CPU`` -> ``CLANG``)."""
        family, ordinal = parse_device_name(name)
        self.load()
        return format_device_name(self._aliases.get(family, family), ordinal)

    def device_names(self) -> list[str]:
        """Registered device families, highest priority first (ties by name)."""
        self.load()
        return [entry.name for entry in sorted(self._devices.values(), key=lambda e: (-e.priority, e.name))]

    def device_entry(self, family: str) -> DeviceEntry:
        """The registration of ``family`` (canonical family name, no ordinal); raises the matching DeviceError."""
        return self.resolve(family)[0]

    def resolve(self, name: str) -> tuple[DeviceEntry, int]:
        """The registration and ordinal behind device ``name``; raises the DeviceError explaining why there is none."""
        family, ordinal = parse_device_name(name)
        self.load()
        family = self._aliases.get(family, family)
        if family in self._conflicts:
            first, second = self._conflicts[family]
            raise self.error_for(second, family) from second.exception
        entry = self._devices.get(family)
        if entry is None:
            raise self._missing(family)
        return entry, ordinal

    def _missing(self, family: str) -> DeviceError:
        for rec in self.list_plugins():
            if rec.name == family and rec.state not in _LOADED_STATES:
                err = self.error_for(rec, family)
                err.__cause__ = rec.exception
                return err
        broken = [
            f"{rec.name} ({rec.label}: {rec.state})" for rec in self.list_plugins() if rec.state in FAILURE_STATES
        ]
        installed = ", ".join(self.device_names()) or "none"
        reason = f"no installed plugin provides device {family} (installed devices: {installed})"
        if broken:
            reason += "; plugins that failed to load and might provide it: " + ", ".join(broken)
        return DeviceNotInstalledError(reason, device=family, fix=_install_fix(family))

    def error_for(self, rec: PluginRecord, device: str) -> DeviceError:
        """The exception that explains ``rec``'s state to someone who asked for ``device`` (not raised here)."""
        classes: dict[PluginState, type[DeviceError]] = {
            PluginState.FAILED: DevicePluginError,
            PluginState.DUPLICATE: DevicePluginError,
            PluginState.INCOMPATIBLE: DevicePluginIncompatibleError,
            PluginState.BLOCKED: DeviceUnavailableError,
            PluginState.UNAVAILABLE: DeviceUnavailableError,
        }
        cls = classes.get(rec.state, DevicePluginError)
        fix = rec.fix or f"run `tinycore doctor {device}`"
        return cls(
            rec.reason or str(rec.state),
            device=device,
            distribution=rec.distribution,
            version=rec.version,
            state=rec.state.value,
            fix=fix,
        )

    # -- calling a plugin's hooks ----------------------------------------------------------------------------------

    def _call_plugin(self, rec: PluginRecord, hook_name: str, **kwargs: Any) -> Any:
        others = [plugin for plugin in self._pm.get_plugins() if plugin is not rec.plugin]
        return self._pm.subset_hook_caller(hook_name, others)(**kwargs)

    def call_device_hook(self, family: str, hook_name: str, **kwargs: Any) -> Any:
        """Call a firstresult hook of the plugin that owns ``family`` only (one plugin's bug cannot break another).

        >>> # get_manager().call_device_hook("CUDA", "tinycore_device_capabilities", name="CUDA")  # doctest: +SKIP
        """
        entry = self.device_entry(family)
        try:
            return self._call_plugin(entry.record, hook_name, **kwargs)
        except DeviceError:
            raise
        except Exception as exc:
            raise DevicePluginError(
                f"{hook_name} of {entry.record.label} raised {type(exc).__name__}: {exc}",
                device=family,
                distribution=entry.record.distribution,
                version=entry.record.version,
                fix=f"report this to the maintainers of {entry.record.distribution or entry.record.module}",
            ) from exc

    def device_capabilities(self, family: str) -> DeviceCapabilities | None:
        """The ``tinycore_device_capabilities`` answer of the plugin owning ``family`` (None: no such family, or the
        plugin declares none; core then derives them from the device's renderer). A raising hook is a
        `DevicePluginError` naming the plugin."""
        self.load()
        family = self._aliases.get(family, family)
        if family not in self._devices or family in self._conflicts:
            return None
        return self.call_device_hook(family, "tinycore_device_capabilities", name=family)

    def collect(self, hook_name: str, **kwargs: Any) -> list[tuple[PluginRecord, Any]]:
        """Call a collect hook on every loaded plugin, isolating failures: ``[(record, result), ...]``.

        A plugin that raises is skipped with a RuntimeWarning (raised under ``TINYCORE_STRICT_PLUGINS=1``);
        None results are dropped.
        """
        self.load()
        results = []
        for rec in self.list_plugins():
            if rec.plugin is None or not hasattr(rec.plugin, hook_name):
                continue
            try:
                answer = self._call_plugin(rec, hook_name, **kwargs)
            except Exception as exc:
                if _strict():
                    raise DevicePluginError(
                        f"{hook_name} of {rec.label} raised {type(exc).__name__}: {exc}",
                        device=rec.name,
                        distribution=rec.distribution,
                        version=rec.version,
                        fix=f"report this to the maintainers of {rec.distribution or rec.module}",
                    ) from exc
                warnings.warn(f"tinycore: {hook_name} of {rec.label} raised {exc!r}", RuntimeWarning, stacklevel=2)
                continue
            results.extend(
                (rec, item) for item in (answer if isinstance(answer, list) else [answer]) if item is not None
            )
        return results

    def report_info(self, family: str) -> dict[str, str]:
        """Merged ``tinycore_report_info`` answers about ``family`` from every plugin (failures are reported inline)."""
        info: dict[str, str] = {}
        self.load()
        for rec in self.list_plugins():
            if rec.plugin is None or not hasattr(rec.plugin, "tinycore_report_info"):
                continue
            try:
                answer = self._call_plugin(rec, "tinycore_report_info", name=family)
            except Exception as exc:
                info[f"error ({rec.label})"] = f"tinycore_report_info raised {type(exc).__name__}: {exc}"
                continue
            for item in answer or ():
                if isinstance(item, dict):
                    info.update({str(key): str(value) for key, value in item.items()})
        return info

    # -- probing, opening, the default device -----------------------------------------------------------------------

    def probe(self, family: str) -> ProbeResult:
        """The (cached) probe result of ``family``. Never raises for a registered family (except in strict mode).

        The probe runs in a daemon thread for at most ``TINYCORE_PROBE_TIMEOUT`` seconds (default 10); one that does
        not return by then leaves its device unavailable with that reason (and a RuntimeWarning, once), and under
        ``TINYCORE_STRICT_PLUGINS=1`` raises DevicePluginError. Concurrent callers share one probe run.
        """
        entry = self.device_entry(family)
        result = entry.probe
        if result is None:
            result = self._run_probe(entry)
            with self._lock:
                if entry.probe is None:  # the first finisher's answer is the one kept
                    entry.probe = result
                    self._update_state_after_probe(entry.record)
                result = entry.probe
        hung = self._probe_timeouts.get(entry.name)
        if hung is not None and _strict():
            raise hung
        return result

    def _wait_for_probe(self, entry: DeviceEntry, limit: float) -> tuple[bool, Any, BaseException | None]:
        """Run (or join the running) probe of ``entry`` for at most ``limit`` seconds since it started:
        ``(finished, result, exception)``."""
        rec = entry.record
        with self._lock:
            run = self._probing.get(entry.name)
            if run is None:
                call = functools.partial(self._call_plugin, rec, "tinycore_probe_device", name=entry.name)
                run = self._probing[entry.name] = _ProbeRun(call, entry.name)
        deadline = run.started + limit
        run.thread.join(max(min(deadline, run.started + PROBE_PROGRESS_AFTER) - time.monotonic(), 0.0))
        if run.thread.is_alive() and time.monotonic() < deadline:
            if not run.announced:
                run.announced = True
                print(
                    f"tinycore: waiting for the probe of {entry.name} ({rec.label}) ... (gives up after {limit:g} s; "
                    f"{PROBE_TIMEOUT_ENV} sets the limit)",
                    file=sys.stderr,
                    flush=True,
                )
            run.thread.join(max(deadline - time.monotonic(), 0.0))
        with self._lock:
            if self._probing.get(entry.name) is run:
                del self._probing[entry.name]
        if run.thread.is_alive():
            return False, None, None
        return True, run.result, run.error

    def _run_probe(self, entry: DeviceEntry) -> ProbeResult:
        rec = entry.record
        report = f"report this to the maintainers of {rec.distribution or rec.module}"
        limit = probe_timeout()
        finished, result, exc = self._wait_for_probe(entry, limit)
        if not finished:
            return self._probe_timed_out(entry, limit)
        if exc is not None and not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: not the plugin's answer
            raise exc
        if exc is not None:
            if _strict():
                raise DevicePluginError(
                    f"the probe of {entry.name} raised {type(exc).__name__}: {exc}",
                    device=entry.name,
                    distribution=rec.distribution,
                    version=rec.version,
                    fix=report,
                ) from exc
            return ProbeResult(ok=False, reason=f"the probe raised {type(exc).__name__}: {exc}", hint=report)
        if result is None:
            return ProbeResult(ok=True, reason="the plugin has no probe")
        if not isinstance(getattr(result, "ok", None), bool):
            return ProbeResult(ok=False, reason=f"the probe returned {result!r}, not a ProbeResult", hint=report)
        return result

    def _probe_timed_out(self, entry: DeviceEntry, limit: float) -> ProbeResult:
        """The unavailable result of a probe that did not return within ``limit`` s (warned about once per manager)."""
        rec = entry.record
        reason = f"the probe of {entry.name} did not return within {limit:g} s"
        hint = (
            f"raise the limit ({PROBE_TIMEOUT_ENV}={max(limit * 3, 30):g}), or disable the plugin "
            f"(TINYCORE_DISABLE_PLUGINS={rec.name}); report the hang to the maintainers of "
            f"{rec.distribution or rec.module}"
        )
        error = DevicePluginError(
            reason,
            device=entry.name,
            distribution=rec.distribution,
            version=rec.version,
            state=PluginState.UNAVAILABLE.value,
            fix=hint,
        )
        with self._lock:
            first = self._probe_timeouts.setdefault(entry.name, error) is error
        if first:
            warnings.warn(
                f"tinycore: {reason} ({rec.label}); {entry.name} is unavailable. Fix: {hint}",
                RuntimeWarning,
                stacklevel=4,
            )
        return ProbeResult(ok=False, reason=reason, hint=hint, device_count=0)

    def _update_state_after_probe(self, rec: PluginRecord) -> None:
        if rec.state not in _LOADED_STATES:
            return
        probes = [self._devices[name].probe for name in rec.devices if name in self._devices]
        probes = [probe for probe in probes if probe is not None]
        if any(probe.ok for probe in probes):
            rec.set_state(PluginState.AVAILABLE)
        elif probes:
            rec.set_state(PluginState.UNAVAILABLE, probes[0].reason, probes[0].hint)

    def probe_all(self) -> dict[str, ProbeResult]:
        """Probe every registered family; ``{family: ProbeResult}`` in priority order."""
        return {name: self.probe(name) for name in self.device_names()}

    def working_devices(self, exclude: str = "") -> list[str]:
        """Registered families whose probe passes, best first (priority order), without `exclude`; a probe that
        raises counts as not working."""
        working = []
        for name in self.device_names():
            if name == exclude:
                continue
            try:
                if self.probe(name).ok:
                    working.append(name)
            except Exception:  # a broken plugin is reported where it is asked for, not here
                continue
        return working

    def check_available(self, name: str) -> tuple[DeviceEntry, int]:
        """Resolve ``name`` and make sure its probe passed and its ordinal exists; raise the matching DeviceError."""
        entry, ordinal = self.resolve(name)
        probe, rec = self.probe(entry.name), entry.record
        display = format_device_name(entry.name, ordinal)
        facts = {"device": display, "distribution": rec.distribution, "version": rec.version}
        if not probe.ok:
            fix = probe.hint or f"run `tinycore doctor {entry.name}` for details"
            working = self.working_devices(exclude=entry.name)
            if working:
                fix += f"; devices that work here: {', '.join(working)} (DEV={working[0]})"
            raise DeviceUnavailableError(probe.reason or "its probe did not pass", fix=fix, **facts)
        if ordinal >= probe.device_count:
            raise DeviceUnavailableError(
                f"{display} requested but the probe found {probe.device_count} device(s) "
                f"(ordinals 0..{probe.device_count - 1})",
                fix=f"use {entry.name}"
                + (f" .. {entry.name}:{probe.device_count - 1}" if probe.device_count > 1 else ""),
                **facts,
            )
        return entry, ordinal

    def open_device(self, name: str) -> Any:
        """Build the device object for ``name`` (not cached here; ``Device[...]`` caches).

        Asks the owning plugin's ``tinycore_open_device(name=FAMILY, ordinal=N)``; if it answers None, the registered
        ``factory`` class is called with the canonical name. Raises a DeviceError when the device cannot be opened.
        """
        entry, ordinal = self.check_available(name)
        rec, display = entry.record, format_device_name(entry.name, ordinal)
        try:
            device = self._call_plugin(rec, "tinycore_open_device", name=entry.name, ordinal=ordinal)
            if device is None and entry.factory is not None:
                module_name, _, attr = entry.factory.partition(":")
                target: Any = importlib.import_module(module_name)
                for part in attr.split("."):
                    target = getattr(target, part)
                device = target(display)
        except DeviceError:
            raise
        except Exception as exc:
            raise DevicePluginError(
                f"opening {display} failed: {type(exc).__name__}: {exc}",
                device=display,
                distribution=rec.distribution,
                version=rec.version,
                fix=f"run `tinycore doctor {entry.name}`; if it persists report it to {rec.distribution or rec.module}",
            ) from exc
        if device is None:
            raise DevicePluginError(
                f"{rec.label} registered {entry.name} but neither tinycore_open_device nor a factory built it",
                device=display,
                distribution=rec.distribution,
                version=rec.version,
                fix=f"report this to the maintainers of {rec.distribution or rec.module}",
            )
        self._check_device_parts(device, display, rec)
        self._install_rewrite_rules(device, entry.name)
        return device

    @staticmethod
    def _check_device_parts(device: Any, display: str, rec: PluginRecord) -> None:
        """A `DevicePluginError` naming the device and the plugin when the opened device's renderer or compiler is
        not core's type (a plugin bug that would otherwise surface as an AttributeError deep in code generation)."""
        from tinycore.backend.compiler import Compiler
        from tinycore.renderer import Renderer

        for part, kind in (("renderer", Renderer), ("compiler", Compiler)):
            value = getattr(device, part, None)
            if value is not None and not isinstance(value, kind):
                raise DevicePluginError(
                    f"{rec.label} opened {display} with a {part} of type {type(value).__name__}, not a "
                    f"tinycore.sdk.{kind.__name__} subclass",
                    device=display,
                    distribution=rec.distribution,
                    version=rec.version,
                    fix=f"report this to the maintainers of {rec.distribution or rec.module}",
                )

    def compile_target(self, family: str, arch: str | None) -> tuple[Any, Any]:
        """The ``(Renderer, Compiler)`` the plugin owning ``family`` builds for ``arch`` (its
        ``tinycore_compile_target``), checked: anything else is a `DevicePluginError` naming the plugin."""
        entry = self.device_entry(family)
        rec = entry.record
        target = self.call_device_hook(entry.name, "tinycore_compile_target", name=entry.name, arch=arch)
        from tinycore.backend.compiler import Compiler
        from tinycore.renderer import Renderer

        ok = isinstance(target, tuple) and len(target) == 2
        if not (ok and isinstance(target[0], Renderer) and (target[1] is None or isinstance(target[1], Compiler))):
            raise DevicePluginError(
                f"tinycore_compile_target of {rec.label} returned {target!r} for arch {arch!r}; expected a "
                "(tinycore.sdk.Renderer, tinycore.sdk.Compiler) tuple",
                device=entry.name,
                distribution=rec.distribution,
                version=rec.version,
                fix=f"report this to the maintainers of {rec.distribution or rec.module}",
            )
        return target

    def _install_rewrite_rules(self, device: Any, family: str) -> None:
        """Collect every plugin's ``tinycore_rewrite_rules(stage, device)`` for each lowering stage and hand the
        combined rules to the device's renderer (`Renderer.extra_rules`, which core applies at those stages)."""
        renderer = getattr(device, "renderer", None)
        if renderer is None or not any(hasattr(r.plugin, "tinycore_rewrite_rules") for r in self.list_plugins()):
            return
        from tinycore.codegen import REWRITE_STAGES
        from tinycore.uop.patterns import PatternMatcher

        rules = dict(renderer.extra_rules)
        for stage in REWRITE_STAGES:
            for rec, answer in self.collect("tinycore_rewrite_rules", stage=stage, device=family):
                if not isinstance(answer, PatternMatcher):
                    raise DevicePluginError(
                        f"tinycore_rewrite_rules of {rec.label} returned {type(answer).__name__} for stage {stage!r}, "
                        "not a PatternMatcher",
                        device=family,
                        distribution=rec.distribution,
                        version=rec.version,
                        fix=f"report this to the maintainers of {rec.distribution or rec.module}",
                    )
                rules[stage] = rules[stage] + answer if stage in rules else answer
        renderer.extra_rules = rules

    def default_device(self) -> str:
        """``DEV`` (validated, never silently replaced) or the highest-priority family whose probe passes."""
        explicit = os.environ.get("DEV", "").strip()
        if explicit:
            entry, ordinal = self.check_available(explicit)
            return format_device_name(entry.name, ordinal)
        skipped: list[str] = []
        passed_over: list[str] = []  # skipped devices whose hardware is here (`ProbeResult.hardware_present`)
        for name in self.device_names():
            probe = self.probe(name)
            if probe.ok:
                broken = [rec for rec in self.list_plugins() if rec.state in FAILURE_STATES]
                if broken:
                    listing = ", ".join(f"{rec.name} ({rec.state}: {rec.reason})" for rec in broken)
                    warnings.warn(
                        f"tinycore: default device is {name}; these plugins could not load: {listing}. "
                        "Run `tinycore plugins -v` for details.",
                        RuntimeWarning,
                        stacklevel=3,
                    )
                self._warn_if_slow_default(name, probe, skipped, passed_over)
                return name
            skipped.append(f"{name}: {probe.reason}" + (f" (fix: {probe.hint})" if probe.hint else ""))
            if probe.hardware_present:
                passed_over.append(skipped[-1])
        reasons = "; ".join(skipped) or "no device plugin is registered"
        raise DeviceUnavailableError(
            f"no usable device ({reasons})",
            device="DEFAULT",
            state="unavailable",
            fix="run `tinycore doctor` to see why each device fails, then install or fix a device plugin",
        )

    def _warn_if_slow_default(self, name: str, probe: ProbeResult, skipped: list[str], passed_over: list[str]) -> None:
        """Say (once per process: the default is resolved once) why the default device may not be the one meant:
        the reference device (priority 0) because every faster device was skipped; a device chosen because a
        higher one whose hardware is here can't run (`ProbeResult.hardware_present`, e.g. the CPU device without
        a compiler); a device whose probe reports `ProbeResult.slow`. Never when ``DEV`` chose it."""
        entry = self._devices.get(name)
        if entry is not None and entry.priority <= 0 and skipped:
            warnings.warn(
                f"tinycore: the default device is {name}, the slow reference device, because no faster device works "
                f"here: {'; '.join(skipped)}. Fix one of those, or set DEV={name} to choose it and silence this.",
                RuntimeWarning,
                stacklevel=4,
            )
        elif passed_over:
            warnings.warn(
                f"tinycore: the default device is {name} because a higher-priority device can't run here: "
                f"{'; '.join(passed_over)}. Fix that, or set DEV={name} to choose {name} and silence this.",
                RuntimeWarning,
                stacklevel=4,
            )
        if probe.slow:
            warnings.warn(
                f"tinycore: the default device {name} runs slower than it could here: {probe.slow}",
                RuntimeWarning,
                stacklevel=4,
            )


def _reinstall_fix(rec: PluginRecord) -> str:
    if rec.distribution is None:
        return f"fix the import error in {rec.module}"
    return (
        f"pip install --force-reinstall {rec.distribution}=={rec.version} "
        f"(or disable it: TINYCORE_DISABLE_PLUGINS={rec.name})"
    )


def _install_fix(family: str) -> str:
    extra = family.lower()
    try:
        extras = importlib_metadata.metadata(CORE_DISTRIBUTION).get_all("Provides-Extra") or []
    except importlib_metadata.PackageNotFoundError:
        extras = []
    checkout = Path(__file__).resolve().parents[2] / "plugins" / f"tinycore_{extra}"
    local = f" (from this source checkout: pip install -e {checkout})" if (checkout / "pyproject.toml").exists() else ""
    if extra in extras:
        return f"pip install 'tinycore[{extra}]'{local}"
    return f"pip install tinycore-{extra.replace('_', '-')} (or the distribution that provides {family}){local}"


_manager: DevicePlugins | None = None
_manager_lock = threading.Lock()


def get_manager() -> DevicePlugins:
    """The process-wide manager (created on first use; creating it imports no plugin)."""
    global _manager
    if _manager is None:
        with _manager_lock:
            if _manager is None:
                _manager = DevicePlugins()
    return _manager


def reset_manager(manager: DevicePlugins | None = None) -> None:
    """Replace the process-wide manager (a fresh one is built on next use); for tests and embedding."""
    global _manager
    with _manager_lock:
        _manager = manager


def rebuild_renderer(family: str, arch: str | None) -> Any:
    """The renderer the plugin owning `family` builds for `arch` (its `tinycore_compile_target`; no hardware needed):
    what unpickling a `tinycore.renderer.Renderer` calls."""
    return get_manager().compile_target(family, arch)[0]


def declared_capabilities(family: str) -> DeviceCapabilities | None:
    """The capabilities the plugin owning `family` declares (None: none), what `Compiled.capabilities` asks first."""
    return get_manager().device_capabilities(family)


# the layers below ask these two questions of the plugins without importing this module
set_renderer_rebuilder(rebuild_renderer)
set_declared_capabilities(declared_capabilities)
