"""Every plugin state and device error, each in a fresh interpreter over hand-made distributions.

Each scenario writes throwaway distributions (``*.dist-info`` + module) into a temporary site folder, runs a child
Python with the knobs of the scenario, and asserts the error class, its facts and that its text names the fix.
"""

from __future__ import annotations

import json

import pytest

REQUEST = """
import json, sys
from tinycore.device import Device

def describe(exc):
    facts = exc.as_dict() if hasattr(exc, "as_dict") else {"error": type(exc).__name__}
    facts["message"] = str(exc)
    facts["cause"] = repr(exc.__cause__) if exc.__cause__ is not None else None
    return facts

def request(name):
    try:
        device = Device[name]
    except Exception as exc:
        return describe(exc)
    return {"ok": True, "device": getattr(device, "device", repr(device)), "type": type(device).__name__}

def default():
    try:
        return {"ok": True, "device": Device.DEFAULT}
    except Exception as exc:
        return describe(exc)

result = {"requests": {name: request(name) for name in sys.argv[1:] if not name.startswith("@")}}
if "@default" in sys.argv:
    result["default"] = default()
result["imported"] = sorted(m for m in sys.modules if m.startswith("fake"))
from tinycore.plugin.manager import get_manager
result["states"] = {f"{r.name}/{r.distribution}": r.state.value for r in get_manager().list_plugins()}
print(json.dumps(result))
"""


def plugin_source(
    device: str,
    *,
    priority: int = 50,
    probe: str = "ok",
    api: object = (1, 0),
    aliases: tuple[str, ...] = (),
    register: str | None = None,
    device_count: int = 2,
) -> str:
    """A plugin entry module for ``device``: probe ``ok``/``fail``/``raise``, an open hook and a factory class."""
    register = register or (
        f"registry.register({device!r}, priority={priority}, aliases={aliases!r}, factory=__name__ + ':FakeDevice')"
    )
    probes = {
        "ok": f"ProbeResult(ok=True, device_count={device_count})",
        "fail": 'ProbeResult(ok=False, reason="no FAKE hardware found", hint="plug in the FAKE card")',
        "raise": "exec(\"raise RuntimeError('kaboom in probe')\")",
    }
    return f"""
from tinycore.plugin import ProbeResult, hookimpl
TINYCORE_PLUGIN_API = {api!r}

class FakeDevice:
    def __init__(self, device):
        self.device = device

@hookimpl
def tinycore_register_devices(registry):
    {register}

@hookimpl
def tinycore_probe_device(name):
    if name != {device!r}:
        return None
    return {probes[probe]}
"""


def add_plugin(site, dist: str, device: str, *, module: str | None = None, requires=("tinycore>=0.1",), **kw) -> str:
    """Install a hand-made distribution ``dist`` whose entry point ``device`` names a generated plugin module."""
    module = module or f"fake_{dist.replace('-', '_')}_plugin"
    site.add_distribution(
        dist,
        entry_points={"tinycore.devices": {device: module}},
        requires=requires,
        modules={module: plugin_source(device, **kw)},
    )
    return module


def ask(site, *names: str, env: dict[str, str] | None = None, default: bool = False) -> dict:
    """Request ``names`` (and the default device) in a fresh interpreter; the JSON facts of each outcome."""
    argv = [*names, *(["@default"] if default else [])]
    out = site.run(f"import sys\nsys.argv[1:] = {argv!r}\n{REQUEST}", env)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for facts in [*result["requests"].values(), result.get("default") or {}]:
        if facts.get("error", "").startswith("Device"):  # every device error names one concrete fix, in its text too
            assert facts["fix"] and f"fix: {facts['fix']}" in facts["message"], facts
            assert f"state: {facts['state']}" in facts["message"] and facts["device"] in facts["message"]
    return result


def test_working_plugin_opens_through_factory_and_ordinals(fake_site):
    add_plugin(fake_site, "tinycore-fakeok", "FAKEOK", priority=5000)
    result = ask(fake_site, "FAKEOK", "fakeok:1", "FAKEOK:0", "FAKEOK:2", default=True)
    assert result["requests"]["FAKEOK"] == {"ok": True, "device": "FAKEOK", "type": "FakeDevice"}
    assert result["requests"]["fakeok:1"]["device"] == "FAKEOK:1"
    assert result["requests"]["FAKEOK:0"]["device"] == "FAKEOK"
    beyond = result["requests"]["FAKEOK:2"]  # the probe reported two devices
    assert beyond["error"] == "DeviceUnavailableError" and "found 2 device(s)" in beyond["reason"]
    assert "use FAKEOK .. FAKEOK:1" in beyond["message"]
    assert result["default"] == {"ok": True, "device": "FAKEOK"}  # highest priority whose probe passes
    assert result["states"]["FAKEOK/tinycore-fakeok"] == "available"


def test_not_installed_names_pip_install(fake_site):
    result = ask(fake_site, "NOSUCH")
    err = result["requests"]["NOSUCH"]
    assert err["error"] == "DeviceNotInstalledError" and err["state"] == "not installed"
    assert err["device"] == "NOSUCH" and err["distribution"] is None
    assert "pip install tinycore-nosuch" in err["fix"] and "fix: pip install" in err["message"]


def test_import_failure_is_isolated_and_chained(fake_site, run_python):
    fake_site.add_distribution(
        "tinycore-fakebroken",
        entry_points={"tinycore.devices": {"FAKEBROKEN": "fake_broken_plugin"}},
        requires=["tinycore>=0.1"],
        modules={"fake_broken_plugin": "raise ImportError('libfakevendor.so: cannot open shared object file')\n"},
    )
    add_plugin(fake_site, "tinycore-fakefine", "FAKEFINE")
    result = ask(fake_site, "FAKEBROKEN", "FAKEFINE", "PYTHON")
    err = result["requests"]["FAKEBROKEN"]
    assert err["error"] == "DevicePluginError" and err["state"] == "failed"
    assert err["distribution"] == "tinycore-fakebroken" and err["version"] == "0.1.0"
    assert "libfakevendor.so" in err["reason"] and "ImportError" in err["cause"]
    assert "pip install --force-reinstall tinycore-fakebroken==0.1.0" in err["fix"]
    assert "TINYCORE_DISABLE_PLUGINS=FAKEBROKEN" in err["message"]
    assert result["requests"]["FAKEFINE"]["ok"]  # other plugins are unaffected
    assert result["requests"]["PYTHON"]["ok"]
    # import tinycore and the metadata listing never import the broken module
    listing = fake_site.run("import tinycore; from tinycore.cli import main; main(['plugins', '--json'])")
    assert listing.returncode == 0, listing.stderr
    states = {p["name"]: p["state"] for p in json.loads(listing.stdout)["plugins"]}
    assert states["FAKEBROKEN"] == "discovered"


def test_incompatible_core_range_is_checked_before_import(fake_site):
    module = add_plugin(fake_site, "tinycore-fakefuture", "FAKEFUTURE", requires=("tinycore>=9",))
    result = ask(fake_site, "FAKEFUTURE")
    err = result["requests"]["FAKEFUTURE"]
    assert err["error"] == "DevicePluginIncompatibleError" and err["state"] == "incompatible"
    assert "requires tinycore>=9 but tinycore 0.1.0 is installed" in err["reason"]
    assert err["fix"] == "pip install 'tinycore>=9'"
    assert module not in result["imported"]  # decided from metadata alone


def test_incompatible_upper_bound_suggests_upgrading_plugin(fake_site):
    add_plugin(fake_site, "tinycore-fakeold", "FAKEOLD", requires=("tinycore<0.1", 'numpy; extra == "x"'))
    err = ask(fake_site, "FAKEOLD")["requests"]["FAKEOLD"]
    assert err["error"] == "DevicePluginIncompatibleError"
    assert err["fix"] == "pip install --upgrade tinycore-fakeold"


def test_incompatible_runtime_api_shows_both_versions(fake_site):
    add_plugin(fake_site, "tinycore-fakeapi", "FAKEAPI", api=(2, 0))
    add_plugin(fake_site, "tinycore-fakeminor", "FAKEMINOR", api=(1, 99))
    result = ask(fake_site, "FAKEAPI", "FAKEMINOR")
    err = result["requests"]["FAKEAPI"]
    assert err["error"] == "DevicePluginIncompatibleError"
    assert "needs plugin API 2.0 but this tinycore provides 1.0" in err["reason"]
    assert err["fix"] == "pip install --upgrade tinycore"
    assert "1.99" in result["requests"]["FAKEMINOR"]["reason"]


def test_register_api_version_is_checked_too(fake_site):
    register = "registry.register('FAKEREGAPI', priority=1, api_version=(3, 1))"
    add_plugin(fake_site, "tinycore-fakeregapi", "FAKEREGAPI", register=register)
    err = ask(fake_site, "FAKEREGAPI")["requests"]["FAKEREGAPI"]
    assert err["error"] == "DevicePluginIncompatibleError" and "3.1" in err["reason"] and "1.0" in err["reason"]


def test_duplicate_entry_points_name_both_distributions(fake_site):
    first = add_plugin(fake_site, "tinycore-fakedup", "FAKEDUP")
    second = add_plugin(fake_site, "tinycore-fakedup-fork", "FAKEDUP")
    result = ask(fake_site, "FAKEDUP", "PYTHON")
    err = result["requests"]["FAKEDUP"]
    assert err["error"] == "DevicePluginError" and err["state"] == "duplicate"
    assert "tinycore-fakedup 0.1.0" in err["reason"] and "tinycore-fakedup-fork 0.1.0" in err["reason"]
    assert err["fix"].startswith("uninstall one of them, e.g. pip uninstall tinycore-fakedup")
    assert first not in result["imported"] and second not in result["imported"]  # neither is picked silently
    assert result["requests"]["PYTHON"]["ok"]


def test_duplicate_registration_names_both_distributions(fake_site):
    add_plugin(fake_site, "tinycore-fakeowner", "FAKEOWNER")
    register = "registry.register('FAKEOWNER', priority=99)"
    add_plugin(fake_site, "tinycore-fakethief", "FAKETHIEF", register=register)
    result = ask(fake_site, "FAKEOWNER", "FAKETHIEF")
    err = result["requests"]["FAKEOWNER"]
    assert err["error"] == "DevicePluginError" and err["state"] == "duplicate"
    assert "tinycore-fakeowner" in err["reason"] and "tinycore-fakethief" in err["reason"]
    assert "pip uninstall" in err["fix"]
    assert result["states"]["FAKETHIEF/tinycore-fakethief"] == "duplicate"


def test_alias_clash_is_a_duplicate(fake_site):
    add_plugin(fake_site, "tinycore-fakealiasa", "FAKEALIASA", aliases=("FAKESHARED",))
    add_plugin(fake_site, "tinycore-fakealiasb", "FAKEALIASB", aliases=("FAKESHARED",))
    err = ask(fake_site, "FAKESHARED")["requests"]["FAKESHARED"]
    assert err["state"] == "duplicate"
    assert "tinycore-fakealiasa" in err["reason"] and "tinycore-fakealiasb" in err["reason"]


def test_probe_failure_gives_reason_and_hint(fake_site):
    add_plugin(fake_site, "tinycore-fakenohw", "FAKENOHW", probe="fail", priority=9000)
    add_plugin(fake_site, "tinycore-fakeraise", "FAKERAISE", probe="raise", priority=8000)
    result = ask(fake_site, "FAKENOHW", "FAKERAISE", default=True)
    err = result["requests"]["FAKENOHW"]
    assert err["error"] == "DeviceUnavailableError" and err["state"] == "unavailable"
    assert err["reason"] == "no FAKE hardware found" and err["fix"].startswith("plug in the FAKE card")
    err = result["requests"]["FAKERAISE"]
    assert err["error"] == "DeviceUnavailableError"
    assert "the probe raised RuntimeError: kaboom in probe" in err["reason"]
    assert "report this to the maintainers of tinycore-fakeraise" in err["fix"]
    assert result["default"]["device"] not in ("FAKENOHW", "FAKERAISE")  # unavailable devices are skipped


def test_explicit_dev_never_falls_back(fake_site):
    add_plugin(fake_site, "tinycore-fakedev", "FAKEDEV", probe="fail")
    result = ask(fake_site, default=True, env={"DEV": "fakedev"})
    err = result["default"]
    assert err["error"] == "DeviceUnavailableError" and err["device"] == "FAKEDEV"  # not PYTHON
    assert err["fix"].startswith("plug in the FAKE card") and "devices that work here: " in err["fix"]
    err = ask(fake_site, default=True, env={"DEV": "NOSUCH"})["default"]
    assert err["error"] == "DeviceNotInstalledError" and "pip install" in err["fix"]
    err = ask(fake_site, default=True, env={"DEV": "bad name"})["default"]
    assert err["error"] == "ValueError" and "NAME:ordinal" in err["message"]
    add_plugin(fake_site, "tinycore-fakedevok", "FAKEDEVOK")
    assert ask(fake_site, default=True, env={"DEV": "FAKEDEVOK:1"})["default"] == {"ok": True, "device": "FAKEDEVOK:1"}


def test_blocklist_blocks_without_importing(fake_site):
    module = add_plugin(fake_site, "tinycore-fakeblocked", "FAKEBLOCKED")
    result = ask(fake_site, "FAKEBLOCKED", "PYTHON", env={"TINYCORE_DISABLE_PLUGINS": "fakeblocked, OTHER"})
    err = result["requests"]["FAKEBLOCKED"]
    assert err["error"] == "DeviceUnavailableError" and err["state"] == "blocked"
    assert "TINYCORE_DISABLE_PLUGINS" in err["reason"]
    assert err["fix"] == "remove FAKEBLOCKED from TINYCORE_DISABLE_PLUGINS"
    assert module not in result["imported"] and result["requests"]["PYTHON"]["ok"]


def test_allowlist_blocks_everything_else(fake_site):
    add_plugin(fake_site, "tinycore-fakeallowed", "FAKEALLOWED")
    other = add_plugin(fake_site, "tinycore-fakeother", "FAKEOTHER")
    result = ask(fake_site, "FAKEALLOWED", "FAKEOTHER", env={"TINYCORE_PLUGINS": "FAKEALLOWED,PYTHON"}, default=True)
    assert result["requests"]["FAKEALLOWED"]["ok"]
    err = result["requests"]["FAKEOTHER"]
    assert err["state"] == "blocked" and err["fix"] == "add FAKEOTHER to TINYCORE_PLUGINS"
    assert other not in result["imported"]
    blocked = {key for key, state in result["states"].items() if state == "blocked"}
    assert blocked == {key for key in result["states"] if key.split("/")[0] not in ("FAKEALLOWED", "PYTHON")}


def test_strict_mode_raises_any_plugin_failure(fake_site):
    fake_site.add_distribution(
        "tinycore-fakestrict",
        entry_points={"tinycore.devices": {"FAKESTRICT": "fake_strict_plugin"}},
        modules={"fake_strict_plugin": "raise ImportError('missing vendor runtime')\n"},
    )
    relaxed = ask(fake_site, "PYTHON")
    assert relaxed["requests"]["PYTHON"]["ok"]
    strict = ask(fake_site, "PYTHON", env={"TINYCORE_STRICT_PLUGINS": "1"})
    err = strict["requests"]["PYTHON"]
    assert err["error"] == "DevicePluginError" and err["device"] == "FAKESTRICT"
    assert "missing vendor runtime" in err["reason"] and "ImportError" in err["cause"]
    assert "pip install --force-reinstall tinycore-fakestrict" in err["fix"]


def test_strict_mode_raises_probe_exceptions(fake_site):
    add_plugin(fake_site, "tinycore-fakestrictprobe", "FAKESTRICTPROBE", probe="raise")
    err = ask(fake_site, "FAKESTRICTPROBE", env={"TINYCORE_STRICT_PLUGINS": "1"})["requests"]["FAKESTRICTPROBE"]
    assert err["error"] == "DevicePluginError" and "kaboom" in err["reason"] and "RuntimeError" in err["cause"]


@pytest.mark.parametrize(
    "register, expect",
    [
        ("raise ValueError('bad registration')", "registering fake_tinycore_fakereg_plugin failed: ValueError"),
        ("pass", "registered no device"),
        ("registry.register('lower', priority=1)", "invalid device name 'lower'"),
        ("registry.register('FAKEREG', priority=1, factory='nocolon')", "factory of FAKEREG must be 'module:Class'"),
    ],
)
def test_registration_failures_are_recorded(fake_site, register, expect):
    add_plugin(fake_site, "tinycore-fakereg", "FAKEREG", register=register)
    result = ask(fake_site, "FAKEREG", "PYTHON")
    err = result["requests"]["FAKEREG"]
    assert err["error"] == "DevicePluginError" and expect in err["reason"], err
    assert err["fix"]  # every failure names a fix
    assert result["requests"]["PYTHON"]["ok"]


def test_invalid_entry_point_name_is_recorded(fake_site):
    add_plugin(fake_site, "tinycore-fakelower", "fake-lower")
    out = fake_site.run("from tinycore.cli import main; main(['plugins', '-v', '--json'])")
    assert out.returncode == 0, out.stderr
    record = next(p for p in json.loads(out.stdout)["plugins"] if p["name"] == "fake-lower")
    assert record["state"] == "failed" and "not a canonical device name" in record["reason"]


def test_open_hook_wins_over_factory_and_gets_ordinal(fake_site):
    source = plugin_source("FAKEHOOK", device_count=4) + (
        "\n@hookimpl\ndef tinycore_open_device(name, ordinal):\n"
        "    return FakeDevice(f'hook:{name}:{ordinal}') if name == 'FAKEHOOK' else None\n"
    )
    fake_site.add_distribution(
        "tinycore-fakehook",
        entry_points={"tinycore.devices": {"FAKEHOOK": "fake_hook_plugin"}},
        modules={"fake_hook_plugin": source},
    )
    result = ask(fake_site, "FAKEHOOK", "fakehook:3")
    assert result["requests"]["FAKEHOOK"]["device"] == "hook:FAKEHOOK:0"
    assert result["requests"]["fakehook:3"]["device"] == "hook:FAKEHOOK:3"


def test_alias_canonicalizes_to_family(fake_site):
    add_plugin(fake_site, "tinycore-fakefamily", "FAKEFAMILY", aliases=("FAKENICK",))
    out = fake_site.run(
        "from tinycore.device import Device\n"
        "print(Device.canonicalize('fakenick:2'), Device.canonicalize('FAKENICK:0'), Device['fakenick'].device)"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["FAKEFAMILY:2", "FAKEFAMILY", "FAKEFAMILY"]


def test_default_skips_failed_plugins_with_warning(fake_site):
    fake_site.add_distribution(
        "tinycore-fakewarn",
        entry_points={"tinycore.devices": {"FAKEWARN": "fake_warn_plugin"}},
        modules={"fake_warn_plugin": "raise ImportError('nope')\n"},
    )
    out = fake_site.run("from tinycore.device import Device; print(Device.DEFAULT)")
    assert out.returncode == 0, out.stderr
    assert "FAKEWARN (failed" in out.stderr and "tinycore plugins -v" in out.stderr


def test_version_check_works_without_packaging(fake_site):
    fake_site.add_module("packaging", "raise ImportError('packaging is hidden for this test')\n")
    add_plugin(fake_site, "tinycore-fakenopkg", "FAKENOPKG", requires=("tinycore >=9", 'tinycore-x; extra == "y"'))
    add_plugin(fake_site, "tinycore-fakenopkgok", "FAKENOPKGOK", requires=("tinycore (>=0.1,<0.2)",))
    result = ask(fake_site, "FAKENOPKG", "FAKENOPKGOK")
    err = result["requests"]["FAKENOPKG"]
    assert err["error"] == "DevicePluginIncompatibleError" and err["fix"] == "pip install 'tinycore >=9'"
    assert result["requests"]["FAKENOPKGOK"]["ok"]
    probe = fake_site.run("import packaging")
    assert "packaging is hidden" in probe.stderr  # the shadow really was in effect
