"""Every hook of the spec is used: doctor checks arrive through ``tinycore_doctor_checks``, capabilities through
``tinycore_device_capabilities`` (tests/test_device_compiled.py), and device rewrite rules through
``tinycore_rewrite_rules(stage, device)``, collected when a device is opened into its renderer's ``extra_rules`` and
run at the named lowering stages."""

from __future__ import annotations

import pytest

from tinycore.cli import DOCTOR_CHECKS, CheckFailed, CheckSkipped, DoctorCheck, doctor_checks, run_checks
from tinycore.codegen import REWRITE_STAGES, get_program
from tinycore.dtype import dtypes
from tinycore.errors import DevicePluginError
from tinycore.plugin import ProbeResult, hookimpl
from tinycore.plugin.hookspecs import DeviceHookSpecs
from tinycore.plugin.manager import DevicePlugins
from tinycore.runtime.python_device import PythonRenderer
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.patterns import PatternMatcher, UPat

CORE_CHECKS = {check.name for check in DOCTOR_CHECKS}


def test_the_spec_has_no_unused_hooks():
    hooks = {name for name in dir(DeviceHookSpecs) if name.startswith("tinycore_")}
    assert {"tinycore_device_capabilities", "tinycore_doctor_checks", "tinycore_rewrite_rules"} <= hooks


# ----- rewrite rules


TIMES_TWO_AS_ADD = PatternMatcher([(UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar(arg=2)]), lambda x: x + x)])


class DoublingRenderer(PythonRenderer):
    def __init__(self, stage: str):
        super().__init__()
        self.extra_rules = {stage: TIMES_TWO_AS_ADD}


def times_two_kernel() -> UOp:
    out, inp = UOp.define_global(0, dtypes.float, 16), UOp.define_global(1, dtypes.float, 16)
    x = UOp(Ops.LOAD, dtypes.float, (inp,)).reshape((4, 4))
    return UOp.sink(out.reshape((4, 4)).store(x * 2))


def arithmetic(uops: list[UOp]) -> set[Ops]:
    return {u.op for u in uops if u.op in (Ops.MUL, Ops.ADD) and u.dtype == dtypes.float}


def test_without_rules_the_kernel_multiplies():
    assert Ops.MUL in arithmetic(get_program(times_two_kernel(), PythonRenderer(), opts=[]).uops)


@pytest.mark.parametrize("stage", REWRITE_STAGES)
def test_a_renderer_rule_reaches_its_stage(stage):
    ops = arithmetic(get_program(times_two_kernel(), DoublingRenderer(stage), opts=[]).uops)
    assert Ops.MUL not in ops and Ops.ADD in ops


def test_an_unknown_stage_names_the_renderer_and_the_valid_stages():
    with pytest.raises(ValueError, match=r"DoublingRenderer \(device PYTHON\).*'lowering'.*lower, expand"):
        get_program(times_two_kernel(), DoublingRenderer("lowering"), opts=[])


class RulesPlugin:
    """Registers DOUBLER (a PYTHON renderer) and adds `rules` for `stage` on it through the hook."""

    TINYCORE_PLUGIN_API = (1, 0)

    def __init__(self, stage, rules):
        self.stage, self.rules = stage, rules

    @hookimpl
    def tinycore_register_devices(self, registry):
        registry.register("DOUBLER", priority=5)

    @hookimpl
    def tinycore_probe_device(self, name):
        return ProbeResult(ok=True)

    @hookimpl
    def tinycore_open_device(self, name, ordinal):
        class Opened:
            renderer = PythonRenderer()

        return Opened()

    @hookimpl
    def tinycore_rewrite_rules(self, stage, device):
        return self.rules if (stage, device) == (self.stage, "DOUBLER") else None


def opened_with(plugin):
    manager = DevicePlugins(entry_points=[])
    manager.register_plugin(plugin, "DOUBLER", distribution="tinycore-doubler", version="0.1.0")
    return manager.open_device("DOUBLER")


@pytest.mark.parametrize("stage", REWRITE_STAGES)
def test_a_plugin_hook_rule_reaches_its_stage_on_its_device(stage):
    device = opened_with(RulesPlugin(stage, TIMES_TWO_AS_ADD))
    assert set(device.renderer.extra_rules) == {stage}
    ops = arithmetic(get_program(times_two_kernel(), device.renderer, opts=[]).uops)
    assert Ops.MUL not in ops and Ops.ADD in ops
    assert PythonRenderer.extra_rules == {}  # the class default is untouched


def test_a_hook_answer_that_is_not_a_pattern_matcher_names_the_plugin():
    with pytest.raises(DevicePluginError, match=r"tinycore-doubler.*returned str for stage 'expand'"):
        opened_with(RulesPlugin("expand", "not rules"))


# ----- doctor checks


class DoctorPlugin:
    TINYCORE_PLUGIN_API = (1, 0)

    def __init__(self, checks):
        self.checks = checks

    @hookimpl
    def tinycore_register_devices(self, registry):
        registry.register("DOCTORED", priority=5)

    @hookimpl
    def tinycore_doctor_checks(self):
        return self.checks


def checks_of(plugin) -> tuple[DevicePlugins, list[DoctorCheck]]:
    manager = DevicePlugins(entry_points=[])
    manager.register_plugin(plugin, "DOCTORED", distribution="tinycore-doctored", version="0.3.0")
    return manager, doctor_checks(manager)


def test_a_plugin_check_runs_after_core_checks():
    seen = []

    def smoke(ctx):
        seen.append(ctx.name)
        return "smoke ok"

    def other(ctx):
        raise CheckSkipped("not mine")

    manager, checks = checks_of(DoctorPlugin([DoctorCheck("smoke", smoke), DoctorCheck("other", other)]))
    assert [c.name for c in checks][: len(DOCTOR_CHECKS)] == [c.name for c in DOCTOR_CHECKS]
    report = run_checks("PYTHON", manager, [c for c in checks if c.name not in CORE_CHECKS])
    assert seen == ["PYTHON"] and report["status"] == "PASS"
    assert [(c["name"], c["status"]) for c in report["checks"]] == [("smoke", "PASS"), ("other", "SKIP")]


def test_a_raising_check_fails_naming_the_plugin():
    def broken(ctx):
        raise ZeroDivisionError("oops")

    def failing(ctx):
        raise CheckFailed("kernel wrong", "reinstall")

    manager, checks = checks_of(DoctorPlugin([DoctorCheck("broken", broken)]))
    report = run_checks("PYTHON", manager, [c for c in checks if c.name not in CORE_CHECKS])
    assert report["status"] == "FAIL"
    assert "broken" in report["reason"] and "tinycore-doctored 0.3.0" in report["reason"]
    assert "ZeroDivisionError: oops" in report["reason"] and "tinycore-doctored" in report["fix"]
    manager, checks = checks_of(DoctorPlugin([DoctorCheck("failing", failing)]))
    report = run_checks("PYTHON", manager, [c for c in checks if c.name not in CORE_CHECKS])
    assert report["reason"] == "failing: kernel wrong" and report["fix"] == "reinstall"  # a plugin's own verdict


def test_an_answer_that_is_not_a_check_fails_naming_the_plugin():
    manager, checks = checks_of(DoctorPlugin(["not a check"]))
    report = run_checks("PYTHON", manager, [c for c in checks if c.name not in CORE_CHECKS])
    assert report["status"] == "FAIL" and "tinycore-doctored 0.3.0" in report["reason"]
    assert "not a DoctorCheck" in report["reason"]


# ----- what a plugin hands core is checked


class BadPartsPlugin:
    """Registers BADPARTS; its compile target and its opened device carry `renderer` (anything)."""

    TINYCORE_PLUGIN_API = (1, 0)

    def __init__(self, renderer):
        self.renderer = renderer

    @hookimpl
    def tinycore_register_devices(self, registry):
        registry.register("BADPARTS", priority=5)

    @hookimpl
    def tinycore_probe_device(self, name):
        return ProbeResult(ok=True)

    @hookimpl
    def tinycore_open_device(self, name, ordinal):
        renderer = self.renderer

        class Opened:
            compiler = None

        Opened.renderer = renderer
        return Opened()

    @hookimpl
    def tinycore_compile_target(self, name, arch):
        return (self.renderer, None)


def bad_parts_manager(renderer) -> DevicePlugins:
    manager = DevicePlugins(entry_points=[])
    manager.register_plugin(BadPartsPlugin(renderer), "BADPARTS", distribution="tinycore-badparts", version="0.2.0")
    return manager


def test_a_compile_target_that_is_not_a_renderer_names_the_device_and_the_plugin():
    with pytest.raises(DevicePluginError, match=r"(?s)tinycore_compile_target of .*tinycore-badparts.*Renderer"):
        bad_parts_manager("a string").compile_target("BADPARTS", None)
    renderer, compiler = bad_parts_manager(PythonRenderer()).compile_target("BADPARTS", None)
    assert isinstance(renderer, PythonRenderer) and compiler is None


def test_an_opened_device_with_a_renderer_of_the_wrong_type_names_the_device_and_the_plugin():
    with pytest.raises(DevicePluginError, match=r"(?s)opened BADPARTS with a renderer of type dict.*tinycore-badparts"):
        bad_parts_manager({}).open_device("BADPARTS")
    assert isinstance(bad_parts_manager(PythonRenderer()).open_device("BADPARTS").renderer, PythonRenderer)
