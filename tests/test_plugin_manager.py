"""In-process unit tests of the plugin manager: names, version checks, errors, registration, probing, opening."""

from __future__ import annotations

import pickle
import warnings

import pytest

from tinycore.device import DeviceRegistry
from tinycore.errors import (
    CompileError,
    DeviceError,
    DeviceNotInstalledError,
    DevicePluginError,
    DevicePluginIncompatibleError,
    DeviceUnavailableError,
    JitError,
    TinycoreError,
)
from tinycore.plugin import PLUGIN_API_VERSION, ProbeResult, hookimpl
from tinycore.plugin.manager import (
    DevicePlugins,
    PluginState,
    _fallback_spec_contains,
    _install_fix,
    check_api_version,
    format_device_name,
    parse_device_name,
    requirement_applies,
    unmet_specifiers,
)

# -- names -------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, expected",
    [("cuda:1", ("CUDA", 1)), ("CUDA", ("CUDA", 0)), ("CUDA:0", ("CUDA", 0)), ("my_npu2:07", ("MY_NPU2", 7))],
)
def test_parse_device_name(name, expected):
    assert parse_device_name(name) == expected
    assert format_device_name(*expected) == (expected[0] if expected[1] == 0 else f"{expected[0]}:{expected[1]}")


@pytest.mark.parametrize("name", ["", "CUDA:", ":1", "CUDA:x", "CUDA:-1", "CU DA", "CUDA:1:2", "1CUDA", "cu-da", None])
def test_invalid_device_names_raise_value_error_with_the_rule(name):
    with pytest.raises(ValueError, match=r"NAME or NAME:ordinal"):
        parse_device_name(name)


# -- version checks ----------------------------------------------------------------------------------------------------

VERSIONS = ["0.1", "0.1.0", "0.1.5", "0.2.0", "1.0", "1.4.2", "2.0.0", "10.0"]
SPECS = [
    ">=0.1",
    ">0.1",
    "<0.2",
    "<=0.1.5",
    "==0.1.0",
    "==0.1.*",
    "!=0.1.*",
    "!=1.0",
    "~=0.1",
    "~=1.4.0",
    "~=0.1.0",
    ">=0.1,<0.2",
]


@pytest.mark.parametrize("spec", SPECS)
def test_fallback_specifiers_agree_with_packaging(spec):
    packaging = pytest.importorskip("packaging.specifiers", reason="needs the packaging package as the oracle")
    for version in VERSIONS:
        oracle = packaging.SpecifierSet(spec).contains(version, prereleases=True)
        mine = not unmet_specifiers(f"tinycore{spec}", version, use_packaging=False)
        assert mine == oracle, (spec, version)


def test_fallback_handles_parenthesised_and_arbitrary_equality():
    assert unmet_specifiers("tinycore (>=0.1, <0.2)", "0.1.3", use_packaging=False) == []
    assert unmet_specifiers("tinycore>=9", "0.1.0", use_packaging=False) == [(">=", "9")]
    assert _fallback_spec_contains("===", "0.1.0", "0.1.0") and not _fallback_spec_contains("===", "0.1", "0.1.0")
    with pytest.raises(ValueError):
        unmet_specifiers("tinycore=>1", "0.1.0", use_packaging=False)


def test_requirement_applies_only_to_core_without_extra():
    assert requirement_applies("tinycore>=0.1,<0.2")
    assert requirement_applies("TinyCore (>=0.1)")
    assert not requirement_applies("tinycore-clang>=0.1")
    assert not requirement_applies('tinycore>=0.1; extra == "test"')


def test_api_version_rule():
    assert check_api_version(PLUGIN_API_VERSION, who="p") is None
    assert check_api_version((PLUGIN_API_VERSION[0], 0), who="p") is None
    newer = check_api_version((PLUGIN_API_VERSION[0], PLUGIN_API_VERSION[1] + 1), who="p")
    assert newer is not None and newer[1] == "pip install --upgrade tinycore"
    older = check_api_version((PLUGIN_API_VERSION[0] - 1, 9), who="p", distribution="tinycore-x")
    assert older is not None and older[1] == "pip install --upgrade tinycore-x" and "(plugin is older)" in older[0]
    malformed = check_api_version("1.0", who="p")
    assert malformed is not None and "TINYCORE_PLUGIN_API = (1, 0)" in malformed[1]


def test_install_fix_prefers_core_extra():
    pytest.importorskip("importlib.metadata")
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        extras = metadata("tinycore").get_all("Provides-Extra") or []
    except PackageNotFoundError:
        pytest.skip("the tinycore distribution is not installed (pip install -e .)")
    assert "cuda" in extras
    assert _install_fix("CUDA").startswith("pip install 'tinycore[cuda]'")  # plus the checkout path in a checkout
    assert _install_fix("MY_NPU").startswith("pip install tinycore-my-npu")


# -- errors ------------------------------------------------------------------------------------------------------------


def test_error_hierarchy():
    for cls in (DeviceNotInstalledError, DevicePluginError, DevicePluginIncompatibleError, DeviceUnavailableError):
        assert issubclass(cls, DeviceError) and issubclass(cls, RuntimeError) and issubclass(cls, TinycoreError)
    assert issubclass(CompileError, TinycoreError) and issubclass(CompileError, RuntimeError)
    assert issubclass(JitError, TinycoreError) and issubclass(JitError, RuntimeError)


def test_device_error_text_and_attributes_survive_pickling():
    err = DevicePluginIncompatibleError(
        "needs plugin API 2.0 but this tinycore provides 1.0",
        device="CUDA",
        distribution="tinycore-cuda",
        version="0.3.0",
        fix="pip install --upgrade tinycore",
    )
    text = str(err)
    for part in ("CUDA", "tinycore-cuda 0.3.0", "incompatible", "2.0", "1.0", "fix: pip install --upgrade tinycore"):
        assert part in text
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is DevicePluginIncompatibleError and str(clone) == text and clone.as_dict() == err.as_dict()
    assert DeviceUnavailableError("x", device="D", state="blocked").state == "blocked"


# -- the manager in-process ------------------------------------------------------------------------------------------


class FakeDevice:
    """A device object the factory path builds."""

    def __init__(self, device: str) -> None:
        self.device = device


class FakePlugin:
    """An in-process plugin object: registers ``name`` and answers the probe with ``probe``."""

    TINYCORE_PLUGIN_API = (1, 0)

    def __init__(self, name, *, priority=10, probe=None, aliases=(), factory=True, info=None):
        self.name, self.priority, self.aliases, self.info = name, priority, aliases, info
        self.probe = probe if probe is not None else ProbeResult(ok=True, device_count=3)
        self.factory = f"{__name__}:FakeDevice" if factory else None
        self.probes = 0

    @hookimpl
    def tinycore_register_devices(self, registry):
        registry.register(self.name, priority=self.priority, aliases=self.aliases, factory=self.factory)

    @hookimpl
    def tinycore_probe_device(self, name):
        if name != self.name:
            return None
        self.probes += 1
        if isinstance(self.probe, Exception):
            raise self.probe
        return self.probe

    @hookimpl
    def tinycore_report_info(self, name):
        if self.info == "raise":
            raise RuntimeError("info broke")
        return self.info if name == self.name else None


@pytest.fixture
def manager(monkeypatch):
    for knob in ("DEV", "TINYCORE_PLUGINS", "TINYCORE_DISABLE_PLUGINS", "TINYCORE_STRICT_PLUGINS"):
        monkeypatch.delenv(knob, raising=False)
    return DevicePlugins(entry_points=[])


def test_register_probe_open_and_cache(manager):
    plugin = FakePlugin("UNITA", aliases=("UA",), info={"driver": "1.2"})
    record = manager.register_plugin(plugin, "UNITA", distribution="tinycore-unita", version="0.1.0")
    assert record.state is PluginState.REGISTERED and record.devices == ["UNITA"]
    assert manager.canonicalize("ua:2") == "UNITA:2"
    assert manager.probe("UNITA").ok and manager.probe("UNITA").ok and plugin.probes == 1  # probed once
    assert record.state is PluginState.AVAILABLE
    assert manager.open_device("UNITA:2").device == "UNITA:2"
    assert manager.report_info("UNITA") == {"driver": "1.2"}
    assert manager.default_device() == "UNITA"


def test_default_prefers_priority_and_skips_unavailable(manager, monkeypatch):
    manager.register_plugin(FakePlugin("LOW", priority=1), "LOW")
    manager.register_plugin(FakePlugin("HIGH", priority=100, probe=ProbeResult(ok=False, reason="no card")), "HIGH")
    manager.register_plugin(FakePlugin("MID", priority=50), "MID")
    assert manager.device_names() == ["HIGH", "MID", "LOW"]
    assert manager.default_device() == "MID"
    monkeypatch.setenv("DEV", "high")
    with pytest.raises(DeviceUnavailableError, match="no card"):
        manager.default_device()
    monkeypatch.setenv("DEV", "low:2")
    assert manager.default_device() == "LOW:2"


def test_a_slow_default_device_is_said_once_with_the_reason_and_fix(manager, monkeypatch):
    monkeypatch.delenv("DEV", raising=False)
    manager.register_plugin(FakePlugin("REF", priority=0), "REF")
    cpu = ProbeResult(ok=False, reason="no compiler", hint="pip install llvmlite")
    manager.register_plugin(FakePlugin("FASTCPU", priority=10, probe=cpu), "FASTCPU")
    with pytest.warns(RuntimeWarning) as caught:
        assert manager.default_device() == "REF"
    text = str(caught[0].message)
    assert "REF, the slow reference device" in text and "FASTCPU: no compiler (fix: pip install llvmlite)" in text
    assert "DEV=REF" in text


def test_a_device_whose_probe_says_slow_warns_when_it_becomes_the_default(manager, monkeypatch):
    monkeypatch.delenv("DEV", raising=False)
    slow = ProbeResult(ok=True, slow="kernels built by gcc; fix: pip install llvmlite")
    manager.register_plugin(FakePlugin("GCCCPU", priority=10, probe=slow), "GCCCPU")
    with pytest.warns(RuntimeWarning, match="GCCCPU runs slower than it could here: kernels built by gcc"):
        assert manager.default_device() == "GCCCPU"
    monkeypatch.setenv("DEV", "GCCCPU")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # chosen by name: nothing to say
        assert manager.default_device() == "GCCCPU"


def test_a_device_passed_over_though_its_hardware_is_here_is_said_with_its_fix(manager, monkeypatch):
    monkeypatch.delenv("DEV", raising=False)
    cpu = ProbeResult(ok=False, reason="no compiler", hint="pip install llvmlite", hardware_present=True)
    manager.register_plugin(FakePlugin("FASTCPU", priority=10, probe=cpu), "FASTCPU")
    manager.register_plugin(FakePlugin("GPU", priority=90, probe=ProbeResult(ok=False, reason="no card")), "GPU")
    manager.register_plugin(FakePlugin("OTHER", priority=5), "OTHER")
    with pytest.warns(RuntimeWarning) as caught:
        assert manager.default_device() == "OTHER"
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "default device is OTHER" in text and "FASTCPU: no compiler (fix: pip install llvmlite)" in text
    assert "GPU" not in text  # an absent GPU is nobody's mistake
    assert "DEV=OTHER" in text
    monkeypatch.setenv("DEV", "OTHER")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # chosen by name: nothing to say
        assert manager.default_device() == "OTHER"


def test_a_fast_default_device_says_nothing(manager, monkeypatch):
    monkeypatch.delenv("DEV", raising=False)
    manager.register_plugin(FakePlugin("REF", priority=0), "REF")
    manager.register_plugin(FakePlugin("GPU", priority=90, probe=ProbeResult(ok=False, reason="no card")), "GPU")
    manager.register_plugin(FakePlugin("CPU", priority=10), "CPU")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert manager.default_device() == "CPU"


def test_no_usable_device_lists_every_reason(manager):
    manager.register_plugin(FakePlugin("ONLY", probe=ProbeResult(ok=False, reason="broken wire")), "ONLY")
    with pytest.raises(DeviceUnavailableError) as info:
        manager.default_device()
    assert "ONLY: broken wire" in info.value.reason and "tinycore doctor" in info.value.fix


def test_probe_exception_becomes_unavailable_unless_strict(manager, monkeypatch):
    manager.register_plugin(FakePlugin("BOOM", probe=RuntimeError("probe bug")), "BOOM", distribution="tinycore-boom")
    probe = manager.probe("BOOM")
    assert not probe.ok and "probe bug" in probe.reason and "tinycore-boom" in probe.hint
    strict = DevicePlugins(entry_points=[])
    monkeypatch.setenv("TINYCORE_STRICT_PLUGINS", "1")
    strict.register_plugin(FakePlugin("BOOM", probe=RuntimeError("probe bug")), "BOOM")
    with pytest.raises(DevicePluginError, match="probe bug") as info:
        strict.probe("BOOM")
    assert isinstance(info.value.__cause__, RuntimeError)


def test_missing_api_version_is_incompatible(manager):
    class NoApi:
        @hookimpl
        def tinycore_register_devices(self, registry):
            registry.register("NOAPI", priority=1)

    record = manager.register_plugin(NoApi(), "NOAPI", distribution="tinycore-noapi")
    assert record.state is PluginState.INCOMPATIBLE and "TINYCORE_PLUGIN_API" in record.reason
    with pytest.raises(DevicePluginIncompatibleError, match="does not declare TINYCORE_PLUGIN_API"):
        manager.open_device("NOAPI")


def test_failed_registration_leaves_no_device_behind(manager):
    class HalfBroken:
        TINYCORE_PLUGIN_API = (1, 0)

        @hookimpl
        def tinycore_register_devices(self, registry):
            registry.register("HALFA", priority=1)
            raise RuntimeError("second registration exploded")

    record = manager.register_plugin(HalfBroken(), "HALFA")
    assert record.state is PluginState.FAILED and isinstance(record.exception, RuntimeError)
    assert "HALFA" not in manager.device_names()
    with pytest.raises(DevicePluginError) as info:
        manager.open_device("HALFA")
    assert info.value.__cause__ is record.exception


def test_open_without_hook_or_factory_is_a_plugin_error(manager):
    manager.register_plugin(FakePlugin("NOFACTORY", factory=False), "NOFACTORY", distribution="tinycore-nofactory")
    with pytest.raises(DevicePluginError, match="neither tinycore_open_device nor a factory"):
        manager.open_device("NOFACTORY")


def test_open_exception_is_wrapped_with_cause(manager):
    class Exploding(FakePlugin):
        @hookimpl
        def tinycore_open_device(self, name, ordinal):
            raise OSError("driver init failed")

    manager.register_plugin(Exploding("EXPLODE"), "EXPLODE", distribution="tinycore-explode", version="1.0")
    with pytest.raises(DevicePluginError) as info:
        manager.open_device("EXPLODE")
    assert "driver init failed" in info.value.reason and isinstance(info.value.__cause__, OSError)
    assert "tinycore doctor EXPLODE" in info.value.fix


def test_collect_isolates_a_failing_plugin(manager):
    manager.register_plugin(FakePlugin("GOODINFO", info={"k": "v"}), "GOODINFO")
    manager.register_plugin(FakePlugin("BADINFO", info="raise"), "BADINFO", distribution="tinycore-badinfo")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = manager.collect("tinycore_report_info", name="GOODINFO")
    assert [answer for _, answer in results] == [{"k": "v"}]
    assert any("info broke" in str(w.message) for w in caught)
    info = manager.report_info("GOODINFO")
    assert info["k"] == "v" and any("info broke" in value for value in info.values())


def test_call_device_hook_asks_only_the_owner(manager):
    class Greedy(FakePlugin):
        @hookimpl
        def tinycore_device_capabilities(self, name):
            return "greedy answer for " + name  # answers for everyone: must not be asked about others

    manager.register_plugin(Greedy("GREEDY"), "GREEDY")
    manager.register_plugin(FakePlugin("POLITE"), "POLITE")
    assert manager.call_device_hook("POLITE", "tinycore_device_capabilities", name="POLITE") is None
    assert (
        manager.call_device_hook("GREEDY", "tinycore_device_capabilities", name="GREEDY") == "greedy answer for GREEDY"
    )


def test_registrar_refuses_calls_outside_the_hook(manager):
    with pytest.raises(RuntimeError, match="tinycore_register_devices"):
        manager._registrar.register("LATE", priority=1)


def test_registry_caches_and_canonicalizes(manager):
    manager.register_plugin(FakePlugin("REGA", aliases=("REGALIAS",)), "REGA")
    registry = DeviceRegistry(manager)
    first = registry["rega"]
    assert registry["REGA"] is first and registry["REGA:0"] is first and registry["regalias"] is first
    assert registry["REGA:1"] is not first and registry["REGA:1"].device == "REGA:1"
    assert registry.canonicalize("regalias:1") == "REGA:1"
    assert registry.DEFAULT == "REGA"
    registry.DEFAULT = "regalias:2"
    assert registry.DEFAULT == "REGA:2"
    assert list(registry) == ["REGA"] and registry.installed() == ["REGA"]
    with pytest.raises(ValueError, match="NAME:ordinal"):
        registry["bad name"]
    with pytest.raises(DeviceNotInstalledError, match="pip install"):
        registry["NOTHERE"]
    with pytest.raises(AttributeError, match=r"Device\['CUDA'\]"):
        registry.CUDA  # noqa: B018
    registry.reset()
    assert not registry.is_opened("REGA") and registry["REGA"] is not first


def test_hook_with_wrong_arguments_fails_registration(manager):
    class Misspelled(FakePlugin):
        @hookimpl
        def tinycore_open_device(self, name, ordinal, extra_argument):
            return None

    record = manager.register_plugin(Misspelled("MISSPELLED"), "MISSPELLED", distribution="tinycore-misspelled")
    assert record.state is PluginState.FAILED and "PluginValidationError" in record.reason
    assert "extra_argument" in record.reason and "MISSPELLED" not in manager.device_names()
    assert manager.register_plugin(FakePlugin("AFTERWARDS"), "AFTERWARDS").state is PluginState.REGISTERED
