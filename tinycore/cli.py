"""The ``tinycore`` command: ``tinycore plugins [--json] [-v]``, ``tinycore doctor [DEV ...] [--json]`` and
``tinycore bench [--only ...] [--device DEV] [--json]``.

``plugins`` lists the installed device plugins from entry-point metadata only (it imports no plugin code); ``-v``
loads and probes them and shows state, reason, fix and what each plugin reports about itself. ``doctor`` runs the
checks of :data:`DOCTOR_CHECKS` on each device (probe, open, allocate and copy a buffer) and prints PASS/FAIL with
the reason and one fix. Later features add checks with :func:`add_doctor_check`. ``bench`` times the short suite of
:mod:`tinycore.benchmark` against numpy and torch in the same process and prints the ratios.

Exit codes: 0 success, 1 a requested device failed (or, with no device named, the default device failed),
2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinycore.plugin.manager import DevicePlugins


# ---------------------------------------------------------------------------------------------------------------------
# doctor checks


class CheckFailed(Exception):
    """Raised by a doctor check: ``reason`` says what went wrong, ``fix`` what to do about it."""

    def __init__(self, reason: str, fix: str = "") -> None:
        super().__init__(reason)
        self.reason, self.fix = reason, fix


class CheckSkipped(Exception):
    """Raised by a doctor check that does not apply to this device (the reason is shown, the device still passes)."""


@dataclass
class DoctorContext:
    """What the checks of one device share: its requested name, the manager, and the opened device once known."""

    name: str
    manager: DevicePlugins
    device: Any = None
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DoctorCheck:
    """One named step of ``tinycore doctor``: ``run(ctx)`` returns a short detail or raises to fail/skip.

    When a check fails, the remaining checks of that device are not run (they would fail for the same reason).
    """

    name: str
    run: Callable[[DoctorContext], str]


@dataclass
class CheckResult:
    """The outcome of one check: status ``PASS``, ``FAIL`` or ``SKIP`` with detail, reason and fix."""

    name: str
    status: str
    detail: str = ""
    reason: str = ""
    fix: str = ""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return dict(self.__dict__)


def _check_probe(ctx: DoctorContext) -> str:
    entry, _ = ctx.manager.resolve(ctx.name)
    # set before the availability check, so a device that fails its probe still shows what its plugin reports
    ctx.facts.update(distribution=entry.record.distribution, version=entry.record.version, family=entry.name)
    entry, ordinal = ctx.manager.check_available(ctx.name)
    probe = ctx.manager.probe(entry.name)
    return f"ok, {probe.device_count} device(s)" + (f" ({probe.reason})" if probe.reason else "")


def _check_open(ctx: DoctorContext) -> str:
    from tinycore.device import Device

    ctx.device = Device[ctx.name]
    return f"{type(ctx.device).__name__} {getattr(ctx.device, 'device', ctx.name)}"


def _check_alloc_copy(ctx: DoctorContext) -> str:
    allocator = getattr(ctx.device, "allocator", None)
    if allocator is None:
        raise CheckSkipped("the device has no allocator")
    size = 256
    payload = bytes((i * 7 + 3) & 0xFF for i in range(size))
    opaque = allocator.alloc(size)
    try:
        allocator.copyin(opaque, memoryview(bytearray(payload)))
        back = bytearray(size)
        allocator.copyout(memoryview(back), opaque)
    finally:
        allocator.free(opaque, size)
    if bytes(back) != payload:
        first_bad = next(i for i in range(size) if back[i] != payload[i])
        raise CheckFailed(
            f"copyin/copyout round trip corrupted data (first wrong byte at offset {first_bad})",
            "report this to the device plugin's maintainers with the output of `tinycore doctor --json`",
        )
    return f"{size} bytes round trip"


DOCTOR_CHECKS: list[DoctorCheck] = [
    DoctorCheck("probe", _check_probe),
    DoctorCheck("open", _check_open),
    DoctorCheck("alloc/copy", _check_alloc_copy),
]


def add_doctor_check(check: DoctorCheck, *, after: str | None = None) -> None:
    """Add ``check`` to ``tinycore doctor`` (at the end, or right after the check named ``after``)."""
    if after is None:
        DOCTOR_CHECKS.append(check)
        return
    index = next((i for i, existing in enumerate(DOCTOR_CHECKS) if existing.name == after), None)
    if index is None:
        raise KeyError(f"no doctor check named {after!r}; have {[c.name for c in DOCTOR_CHECKS]}")
    DOCTOR_CHECKS.insert(index + 1, check)


def _plugin_check(check: DoctorCheck, label: str, maintainers: str) -> DoctorCheck:
    """`check` from the plugin `label`, failing with a line naming that plugin when it raises anything unexpected."""
    from tinycore.errors import DeviceError

    def run(ctx: DoctorContext) -> str:
        try:
            return check.run(ctx)
        except (CheckFailed, CheckSkipped, DeviceError):
            raise
        except Exception as exc:  # a plugin's bug: say whose
            raise CheckFailed(
                f"the check {check.name!r} of {label} raised {type(exc).__name__}: {exc}",
                f"report this to the maintainers of {maintainers}",
            ) from exc

    return DoctorCheck(check.name, run)


def doctor_checks(manager: DevicePlugins) -> list[DoctorCheck]:
    """Core's `DOCTOR_CHECKS`, then every plugin's ``tinycore_doctor_checks`` answer, in plugin order (collected like
    every collect hook: a hook that raises is skipped with a RuntimeWarning). An answer that is not a list of
    `DoctorCheck`s becomes a check failing on every device, naming the plugin."""
    checks = list(DOCTOR_CHECKS)
    for rec, answer in manager.collect("tinycore_doctor_checks"):
        maintainers = rec.distribution or rec.module
        items = answer if isinstance(answer, (list, tuple)) else [answer]
        for item in items:
            if isinstance(item, DoctorCheck):
                checks.append(_plugin_check(item, rec.label, maintainers))
            else:
                reason = f"tinycore_doctor_checks of {rec.label} answered {item!r}, not a DoctorCheck"
                checks.append(DoctorCheck(f"{rec.name} doctor checks", _failing(reason, maintainers)))
    return checks


def _failing(reason: str, fix_target: str) -> Callable[[DoctorContext], str]:
    def run(ctx: DoctorContext) -> str:
        raise CheckFailed(reason, f"report this to the maintainers of {fix_target}")

    return run


def run_checks(name: str, manager: DevicePlugins, checks: Sequence[DoctorCheck] | None = None) -> dict[str, Any]:
    """Run the doctor checks on device ``name`` (default: `doctor_checks`, core's and the plugins'); a JSON-ready
    dict with ``status`` PASS or FAIL and each check."""
    from tinycore.errors import DeviceError

    ctx = DoctorContext(name=name, manager=manager)
    results: list[CheckResult] = []
    for check in doctor_checks(manager) if checks is None else checks:
        start = time.perf_counter()
        result = CheckResult(check.name, "PASS")
        try:
            result.detail = check.run(ctx)
        except CheckSkipped as exc:
            result.status, result.reason = "SKIP", str(exc)
        except CheckFailed as exc:
            result.status, result.reason, result.fix = "FAIL", exc.reason, exc.fix
        except DeviceError as exc:
            result.status, result.reason, result.fix = "FAIL", exc.reason, exc.fix
            ctx.facts.setdefault("distribution", exc.distribution)
            ctx.facts.setdefault("version", exc.version)
            ctx.facts["state"] = exc.state
            ctx.facts["error"] = type(exc).__name__
        except Exception as exc:  # a check must never take doctor down
            dist = ctx.facts.get("distribution") or "the device plugin"
            result.status, result.reason = "FAIL", f"{type(exc).__name__}: {exc}"
            result.fix = f"report this to the maintainers of {dist}"
        result.seconds = round(time.perf_counter() - start, 6)
        results.append(result)
        if result.status == "FAIL":
            break
    failed = next((r for r in results if r.status == "FAIL"), None)
    info: dict[str, str] = {}
    family = ctx.facts.get("family")
    if family is not None:
        info = manager.report_info(family)
    return {
        "device": name,
        "status": "FAIL" if failed else "PASS",
        "reason": f"{failed.name}: {failed.reason}" if failed else "",
        "fix": failed.fix if failed else "",
        "distribution": ctx.facts.get("distribution"),
        "version": ctx.facts.get("version"),
        "error": ctx.facts.get("error"),
        "info": info,
        "checks": [r.as_dict() for r in results],
    }


# ---------------------------------------------------------------------------------------------------------------------
# commands


def _header() -> dict[str, Any]:
    import tinycore
    from tinycore.plugin import PLUGIN_API_VERSION

    return {"version": tinycore.__version__, "plugin_api": list(PLUGIN_API_VERSION)}


def _print_table(rows: list[list[str]], out: Any) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip(), file=out)


def cmd_plugins(args: argparse.Namespace) -> int:
    """``tinycore plugins``: list plugins (metadata only), or with ``-v`` load, probe and describe them."""
    from tinycore.errors import DeviceError
    from tinycore.plugin.manager import get_manager

    manager, out, load_error = get_manager(), sys.stdout, None
    if args.verbose:
        try:
            manager.load()
        except DeviceError as exc:  # TINYCORE_STRICT_PLUGINS=1: report it, still list everything
            load_error = exc
    records = manager.list_plugins()
    devices: dict[str, Any] = {}
    default: str | None = None
    if args.verbose and load_error is None:
        for name in manager.device_names():
            entry = manager.device_entry(name)
            manager.probe(name)
            devices[name] = {**entry.as_dict(), "info": manager.report_info(name)}
        try:
            default = manager.default_device()
        except DeviceError as exc:
            default = f"none ({exc.reason})"
    if args.json:
        payload: dict[str, Any] = {"tinycore": _header(), "plugins": [rec.as_dict() for rec in records]}
        if args.verbose:
            payload["devices"] = list(devices.values())
            payload["default"] = default
            payload["error"] = str(load_error) if load_error else None
        json.dump(payload, out, indent=2)
        print(file=out)
        return 1 if load_error else 0
    header = _header()
    print(f"tinycore {header['version']} (plugin API {header['plugin_api'][0]}.{header['plugin_api'][1]})", file=out)
    if not records:
        print("no device plugins installed (entry-point group tinycore.devices is empty)", file=out)
        return 0
    rows = [["DEVICE", "DISTRIBUTION", "VERSION", "MODULE", "STATE"]]
    rows += [[r.name, r.distribution or "-", r.version or "-", r.module, str(r.state)] for r in records]
    _print_table(rows, out)
    if args.verbose:
        for rec in records:
            print(f"\n{rec.name}: {rec.state}" + (f" - {rec.reason}" if rec.reason else ""), file=out)
            if rec.fix:
                print(f"  fix: {rec.fix}", file=out)
            if rec.requires:
                print(f"  requires: {rec.requires}", file=out)
            if rec.api_version:
                print(f"  plugin API: {rec.api_version[0]}.{rec.api_version[1]}", file=out)
            for name in rec.devices:
                if name not in devices:
                    continue
                dev = devices[name]
                aliases = f", aliases {', '.join(dev['aliases'])}" if dev["aliases"] else ""
                probe = dev["probe"] or {}
                verdict = "ok" if probe.get("ok") else f"not ok: {probe.get('reason', '')}"
                print(f"  device {name}: priority {dev['priority']}{aliases}; probe {verdict}", file=out)
                for key, value in dev["info"].items():
                    print(f"    {key}: {value}", file=out)
        if load_error is not None:
            print(f"\nTINYCORE_STRICT_PLUGINS stopped discovery:\n{load_error}", file=out)
        else:
            print(f"\ndefault device: {default}", file=out)
    return 1 if load_error else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """``tinycore doctor``: probe, open and smoke-test devices; non-zero exit when a requested device fails."""
    from tinycore.errors import DeviceError
    from tinycore.plugin.manager import get_manager, parse_device_name

    manager = get_manager()
    load_error: DeviceError | None = None
    try:
        manager.load()
    except DeviceError as exc:
        load_error = exc
    requested = list(args.devices)
    if requested:
        names = []
        for raw in requested:
            try:
                parse_device_name(raw)
            except ValueError as exc:
                print(f"tinycore doctor: {exc}", file=sys.stderr)
                return 2
            names.append(raw)
    else:
        names = [] if load_error else manager.device_names()
        names += [rec.name for rec in manager.list_plugins() if rec.name not in names]
    checks = doctor_checks(manager) if load_error is None else []
    reports = [_strict_failure(name, load_error) if load_error else run_checks(name, manager, checks) for name in names]
    default, default_status = None, None
    if not requested:
        try:
            default = manager.default_device() if load_error is None else None
        except DeviceError as exc:
            default_status = f"FAIL: {exc.reason}"
        except ValueError as exc:  # DEV is not a device name
            default_status = f"FAIL: DEV: {exc}"
        if load_error is not None:
            default_status = f"FAIL: {load_error.reason}"
        if default is not None:
            match = next((r for r in reports if r["device"] == default), None)
            if match is None:
                match = run_checks(default, manager, checks)
                reports.append(match)
            default_status = match["status"]
        ok = default_status == "PASS"
    else:
        ok = all(report["status"] == "PASS" for report in reports)
    if args.json:
        payload = {"tinycore": _header(), "devices": reports, "ok": ok}
        if not requested:
            payload["default"] = default
        json.dump(payload, sys.stdout, indent=2)
        print()
        return 0 if ok else 1
    _print_doctor(reports)
    if not requested:
        print(f"default device: {default or 'none'} ({default_status})")
    return 0 if ok else 1


def _strict_failure(name: str, error: Any) -> dict[str, Any]:
    check = CheckResult("discovery", "FAIL", reason=error.reason, fix=error.fix)
    return {
        "device": name,
        "status": "FAIL",
        "reason": f"discovery: {error.reason}",
        "fix": error.fix,
        "distribution": error.distribution,
        "version": error.version,
        "error": type(error).__name__,
        "info": {},
        "checks": [check.as_dict()],
    }


def _print_doctor(reports: list[dict[str, Any]]) -> None:
    header = _header()
    print(f"tinycore {header['version']} doctor")
    width = max((len(report["device"]) for report in reports), default=6)
    for report in reports:
        dist = ""
        if report["distribution"]:
            dist = f"  [{report['distribution']}" + (f" {report['version']}]" if report["version"] else "]")
        steps = "; ".join(
            f"{c['name']}: skipped ({c['reason']})" if c["status"] == "SKIP" else f"{c['name']}: {c['detail']}"
            for c in report["checks"]
        )
        if report["status"] == "PASS":
            print(f"{report['device'].ljust(width)}  PASS  {steps}{dist}")
        else:
            print(f"{report['device'].ljust(width)}  FAIL  {report['reason']}{dist}")
            if report["fix"]:
                print(f"{' ' * width}        fix: {report['fix']}")
        for key, value in report["info"].items():
            print(f"{' ' * width}        {key}: {value}")


def cmd_bench(args: argparse.Namespace) -> int:
    """``tinycore bench``: run :mod:`tinycore.benchmark` and print its table (or JSON)."""
    from tinycore import benchmark

    names = [name.strip() for name in args.only.split(",") if name.strip()] or list(benchmark.WORKLOADS)
    unknown = sorted(set(names) - set(benchmark.WORKLOADS))
    if unknown:
        print(
            f"tinycore bench: unknown workload(s) {unknown}; choose from {sorted(benchmark.WORKLOADS)}", file=sys.stderr
        )
        return 2
    if args.quick:  # under a minute: one round, short timing, smaller problems
        args.rounds, args.budget, args.scale = 1, 0.2, min(args.scale, 0.25)
    if args.rounds < 1 or args.budget <= 0 or args.scale <= 0:
        print("tinycore bench: --rounds must be >= 1, --budget and --scale > 0", file=sys.stderr)
        return 2
    results = benchmark.run_benchmarks(
        names,
        device=args.device,
        rounds=args.rounds,
        budget_s=args.budget,
        size_scale=args.scale,
        progress=benchmark.print_progress,
    )
    if args.json:
        from tinycore.device import Device

        rows = [
            dict(
                workload=r.workload, size=benchmark.WORKLOADS[r.workload].size(args.scale), library=r.library,
                unit=r.unit, value=r.value, calls=len(r.seconds),
            )
            for r in results
        ]  # fmt: skip
        ratios = {name: benchmark.ratio(results, name) for name in names}
        device = Device.canonicalize(args.device) if args.device else Device.DEFAULT
        meaning = "tinycore against the best peer; > 1: tinycore is better"
        payload = {**_header(), "device": device, "ratio": meaning, "results": rows, "ratios": ratios}
        print(json.dumps(payload, indent=2))
    else:
        from tinycore.device import Device

        device = Device.canonicalize(args.device) if args.device else Device.DEFAULT
        print(benchmark.format_table(results, device, args.scale))
    return 0


def _version() -> str:
    """tinycore's installed version (read from its metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tinycore")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``tinycore`` command."""
    parser = argparse.ArgumentParser(prog="tinycore", description="tinycore: device plugins and diagnostics")
    parser.add_argument("--version", action="version", version=f"tinycore {_version()}", help="print the version")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    plugins = sub.add_parser("plugins", help="list installed device plugins (metadata only unless -v)")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.add_argument("-v", "--verbose", action="store_true", help="import and probe plugins; show state and info")
    plugins.set_defaults(func=cmd_plugins)
    doctor = sub.add_parser("doctor", help="probe, open and smoke-test devices (PASS/FAIL with reason and fix)")
    doctor.add_argument("devices", nargs="*", metavar="DEV", help="devices to check (default: every installed one)")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(func=cmd_doctor)
    bench = sub.add_parser("bench", help="time a short benchmark suite against numpy and torch (when installed)")
    bench.add_argument("--only", default="", help="comma-separated workloads (default: all)")
    bench.add_argument("--device", default=None, help="device for tinycore (default: the default device)")
    bench.add_argument("--rounds", type=int, default=3, help="interleaved rounds per workload (default 3)")
    bench.add_argument("--budget", type=float, default=0.6, help="seconds of timing per workload and library")
    bench.add_argument(
        "--scale", type=float, default=1.0, help="multiply the problem sizes (e.g. 0.01 for a smoke run)"
    )
    bench.add_argument("--quick", action="store_true", help="under a minute: one round, 0.2 s each, sizes x0.25")
    bench.add_argument("--json", action="store_true", help="machine-readable output")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tinycore`` command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `tinycore plugins --json | head`: the reader left; exit quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":  # pragma: no cover - `python -m tinycore` goes through tinycore/__main__.py
    sys.exit(main())
