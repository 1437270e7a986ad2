"""Plugin probe faults: a probe that never returns is cut off by TINYCORE_PROBE_TIMEOUT (device unavailable with that
reason, a warning, default-device selection moves on, `tinycore plugins -v` names it), a probe that raises is
recorded with the exception, strict mode raises, concurrent callers share one probe run."""

from __future__ import annotations

import threading
import time
import warnings

import pytest

from tinycore.errors import DevicePluginError, DeviceUnavailableError
from tinycore.plugin import ProbeResult, hookimpl
from tinycore.plugin import manager as manager_module
from tinycore.plugin.manager import DevicePlugins, PluginState

LIMIT = 0.5  # seconds: TINYCORE_PROBE_TIMEOUT in these tests
SLACK = 3.0  # generous bound on thread start/join overhead on a loaded 2-core machine


class ProbePlugin:
    """Registers device ``name``; its probe blocks on ``gate`` (hangs until released), raises, or answers ok."""

    TINYCORE_PLUGIN_API = (1, 0)

    def __init__(self, name: str, *, priority: int = 10, gate: threading.Event | None = None, error=None):
        self.name, self.priority, self.gate, self.error = name, priority, gate, error
        self.probes = 0

    @hookimpl
    def tinycore_register_devices(self, registry):
        registry.register(self.name, priority=self.priority, factory=f"{__name__}:FakeDevice")

    @hookimpl
    def tinycore_probe_device(self, name):
        if name != self.name:
            return None
        self.probes += 1
        if self.gate is not None:
            self.gate.wait()  # "never returns" until the test releases it
        if self.error is not None:
            raise self.error
        return ProbeResult(ok=True, device_count=2)


class FakeDevice:
    def __init__(self, device: str) -> None:
        self.device = device


@pytest.fixture
def gate():
    event = threading.Event()
    yield event
    event.set()  # let the hung probe threads finish


@pytest.fixture
def manager(monkeypatch):
    for knob in ("DEV", "TINYCORE_PLUGINS", "TINYCORE_DISABLE_PLUGINS", "TINYCORE_STRICT_PLUGINS"):
        monkeypatch.delenv(knob, raising=False)
    monkeypatch.setenv("TINYCORE_PROBE_TIMEOUT", str(LIMIT))
    return DevicePlugins(entry_points=[])


def _register(manager, plugin):
    return manager.register_plugin(plugin, plugin.name, distribution=f"tinycore-{plugin.name.lower()}", version="0.1")


def test_hanging_probe_is_unavailable_with_the_timeout_reason(manager, gate):
    hang = ProbePlugin("HANG", priority=100, gate=gate)
    record = _register(manager, hang)
    start = time.monotonic()
    with pytest.warns(RuntimeWarning, match=r"the probe of HANG did not return within 0.5 s"):
        probe = manager.probe("HANG")
    elapsed = time.monotonic() - start
    assert LIMIT * 0.9 <= elapsed < LIMIT + SLACK
    assert not probe.ok and probe.reason == "the probe of HANG did not return within 0.5 s"
    assert "TINYCORE_PROBE_TIMEOUT=" in probe.hint and "TINYCORE_DISABLE_PLUGINS=HANG" in probe.hint
    assert record.state is PluginState.UNAVAILABLE and record.reason == probe.reason and record.fix == probe.hint
    # cached: no second wait, no second warning, no second probe thread
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        start = time.monotonic()
        assert manager.probe("HANG") is probe
        assert time.monotonic() - start < 0.2
    with pytest.raises(DeviceUnavailableError, match="did not return within") as info:
        manager.open_device("HANG")
    assert "TINYCORE_DISABLE_PLUGINS=HANG" in info.value.fix
    gate.set()  # the late answer changes nothing
    time.sleep(0.05)
    assert manager.probe("HANG") is probe and record.state is PluginState.UNAVAILABLE and hang.probes == 1


def test_default_device_moves_on_past_a_hanging_probe(manager, gate):
    _register(manager, ProbePlugin("HANG", priority=100, gate=gate))
    _register(manager, ProbePlugin("GOOD", priority=10))
    start = time.monotonic()
    with pytest.warns(RuntimeWarning, match="HANG"):
        assert manager.default_device() == "GOOD"
    assert time.monotonic() - start < LIMIT + SLACK
    assert manager.open_device("GOOD:1").device == "GOOD:1"


def test_only_a_hanging_device_gives_no_usable_device_naming_it(manager, gate):
    _register(manager, ProbePlugin("HANG", gate=gate))
    with pytest.warns(RuntimeWarning), pytest.raises(DeviceUnavailableError, match="HANG: the probe of HANG did not"):
        manager.default_device()


def test_strict_mode_raises_the_timeout_every_time(manager, gate, monkeypatch):
    monkeypatch.setenv("TINYCORE_STRICT_PLUGINS", "1")
    _register(manager, ProbePlugin("HANG", gate=gate))
    with pytest.warns(RuntimeWarning), pytest.raises(DevicePluginError, match="did not return within 0.5 s") as info:
        manager.probe("HANG")
    assert "TINYCORE_PROBE_TIMEOUT" in info.value.fix and info.value.state == "unavailable"
    start = time.monotonic()
    with pytest.raises(DevicePluginError, match="did not return within"):
        manager.probe("HANG")  # no second wait
    assert time.monotonic() - start < 0.2


def test_concurrent_callers_share_one_probe_run(manager, gate):
    hang = ProbePlugin("HANG", gate=gate)
    _register(manager, hang)
    results, errors = [], []

    def ask():
        try:
            results.append(manager.probe("HANG"))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    start = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(LIMIT + 2 * SLACK)
    assert time.monotonic() - start < LIMIT + 2 * SLACK and not errors
    assert len(results) == 4 and all(result is results[0] for result in results) and not results[0].ok
    assert hang.probes == 1


def test_waiting_prints_a_progress_line(manager, gate, monkeypatch, capsys):
    monkeypatch.setattr(manager_module, "PROBE_PROGRESS_AFTER", 0.1)
    _register(manager, ProbePlugin("HANG", gate=gate))
    with pytest.warns(RuntimeWarning):
        manager.probe("HANG")
    err = capsys.readouterr().err
    assert err.count("waiting for the probe of HANG (tinycore-hang 0.1) ...") == 1 and "gives up after 0.5 s" in err


def test_a_quick_probe_prints_nothing_and_passes(manager, capsys):
    _register(manager, ProbePlugin("GOOD"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert manager.probe("GOOD").ok
    assert capsys.readouterr().err == ""


def test_raising_probe_is_unavailable_with_the_exception_named(manager):
    record = _register(manager, ProbePlugin("BOOM", error=OSError("driver socket closed")))
    probe = manager.probe("BOOM")
    assert not probe.ok and probe.reason == "the probe raised OSError: driver socket closed"
    assert "tinycore-boom" in probe.hint and record.state is PluginState.UNAVAILABLE


@pytest.mark.parametrize("value", ["abc", "0", "-1", "inf", "nan"])
def test_bad_probe_timeout_is_a_clear_error(manager, monkeypatch, value):
    _register(manager, ProbePlugin("GOOD"))
    monkeypatch.setenv("TINYCORE_PROBE_TIMEOUT", value)
    with pytest.raises(ValueError, match=rf"TINYCORE_PROBE_TIMEOUT='{value}' is not a"):
        manager.probe("GOOD")
    monkeypatch.setenv("TINYCORE_PROBE_TIMEOUT", "")  # empty: the default
    assert manager.probe("GOOD").ok


def test_plugins_verbose_names_the_hanging_probe(manager, gate, capsys):
    from tinycore.cli import main

    _register(manager, ProbePlugin("HANG", priority=100, gate=gate))
    _register(manager, ProbePlugin("GOOD", priority=10))
    previous = manager_module._manager
    manager_module.reset_manager(manager)
    try:
        start = time.monotonic()
        with pytest.warns(RuntimeWarning):
            assert main(["plugins", "-v"]) == 0
        assert time.monotonic() - start < LIMIT + SLACK
    finally:
        manager_module.reset_manager(previous)
    out = capsys.readouterr().out
    assert "HANG: unavailable - the probe of HANG did not return within 0.5 s" in out
    assert "probe not ok: the probe of HANG did not return within 0.5 s" in out
    assert "fix: raise the limit (TINYCORE_PROBE_TIMEOUT=" in out and "default device: GOOD" in out
