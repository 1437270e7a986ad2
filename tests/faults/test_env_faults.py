"""Environment knobs with garbage values fail with the variable named (never a bare `invalid literal for int()`),
empty values mean "unset", and `import tinycore` with ``BEAM=abc`` stops with that message."""

from __future__ import annotations

import importlib

import pytest

from tinycore.helpers import ContextVar, getenv, parse_env, temporary_env

# modules defining ContextVars beyond tinycore.helpers: imported so the registry holds every knob
for _module in ("tinycore.engine.jit", "tinycore.codegen.heuristic", "tinycore.uop.patterns"):
    importlib.import_module(_module)

GARBAGE = {int: "abc", float: "fast", bool: "maybe"}
EXPECTED = {int: "is not an integer", float: "is not a number", bool: "is not a boolean"}


def _typed_knobs() -> list[tuple[str, object]]:
    return sorted((key, var.default) for key, var in ContextVar.registry.items() if type(var.default) in GARBAGE)


@pytest.mark.parametrize("key, default", _typed_knobs())
def test_every_contextvar_names_itself_on_garbage(key, default):
    kind = type(default)
    with temporary_env(**{key: GARBAGE[kind]}):
        with pytest.raises(ValueError) as info:
            getenv(key, default)
        message = str(info.value)
        assert message.startswith(f"{key}='{GARBAGE[kind]}' {EXPECTED[kind]}: set {key} ")
        assert "or unset it" in message and f"(default {default})" in message
    with temporary_env(**{key: ""}):
        assert getenv(key, default) == default  # empty means unset
    with temporary_env(**{key: " 3 "}):
        assert getenv(key, default) == kind(3)


def test_a_contextvar_defined_with_garbage_in_the_environment_raises_and_is_not_registered():
    with temporary_env(TINYCORE_FAULTS_FRESH_KNOB="x1"):
        with pytest.raises(ValueError, match="TINYCORE_FAULTS_FRESH_KNOB='x1' is not an integer"):
            ContextVar("TINYCORE_FAULTS_FRESH_KNOB", 0)
    assert "TINYCORE_FAULTS_FRESH_KNOB" not in ContextVar.registry


@pytest.mark.parametrize(
    "raw, default, expected",
    [
        (None, 7, 7),
        ("", 7, 7),
        ("   ", 2.5, 2.5),
        ("-4", 0, -4),
        ("1e-3", 1.0, 0.001),
        ("0", True, False),
        ("2", False, True),
        ("Yes", False, True),
        ("OFF", True, False),
        ("half", "", "half"),
        ("", "x", "x"),
    ],
)
def test_parse_env_values(raw, default, expected):
    got = parse_env("KNOB", raw, default)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("raw, default", [("2.0", 0), ("1,5", 1.0), ("tru", False), ("0x10", 1)])
def test_parse_env_rejects_near_misses(raw, default):
    with pytest.raises(ValueError, match=rf"^KNOB='{raw}' is not"):
        parse_env("KNOB", raw, default)


@pytest.mark.parametrize("key, default", [("BEAM_MAX_STEPS", 16), ("BEAM_PATIENCE", 3), ("LRU", 1)])
def test_other_getenv_knobs_name_themselves(key, default):
    with temporary_env(**{key: "lots"}), pytest.raises(ValueError, match=rf"^{key}='lots' is not an integer"):
        getenv(key, default)


def test_strict_plugins_knob_is_validated(monkeypatch):
    from tinycore.plugin.manager import _strict

    for raw, expected in (("", False), ("0", False), ("no", False), ("1", True), ("true", True)):
        monkeypatch.setenv("TINYCORE_STRICT_PLUGINS", raw)
        assert _strict() is expected
    monkeypatch.setenv("TINYCORE_STRICT_PLUGINS", "sometimes")
    with pytest.raises(ValueError, match="TINYCORE_STRICT_PLUGINS='sometimes' is not a boolean"):
        _strict()


def test_string_knobs_validate_their_values():
    from tinycore.dtype import _set_default_float_from_env
    from tinycore.runtime.python_device import _native_ops

    with temporary_env(DEFAULT_FLOAT="quad"), pytest.raises(ValueError, match="DEFAULT_FLOAT=quad"):
        _set_default_float_from_env()
    from tinycore.helpers import Context

    with Context(PYTHON_NATIVE_OPS="ADD,FROB"), pytest.raises(ValueError, match=r"PYTHON_NATIVE_OPS='ADD,FROB'.*FROB"):
        _native_ops()
    with Context(PYTHON_NATIVE_OPS="add, mul"):
        assert _native_ops() == {"ADD", "MUL"}


def test_clang_threads_knob(monkeypatch):
    toolchain = pytest.importorskip("tinycore_clang.toolchain")
    for raw in ("abc", "-2", "1.5"):
        monkeypatch.setenv("THREADS", raw)
        with pytest.raises(ValueError, match=rf"THREADS='{raw}' is not a thread count"):
            toolchain.default_thread_count()
    for raw in ("", "0"):
        monkeypatch.setenv("THREADS", raw)
        assert toolchain.default_thread_count() == toolchain.cpu_count()
    monkeypatch.setenv("THREADS", "3")
    assert toolchain.default_thread_count() == 3


def test_import_fails_naming_the_variable_and_empty_means_default(run_python):
    bad = run_python("import tinycore", {"BEAM": "abc"}, timeout=60)
    assert bad.returncode != 0
    assert "ValueError: BEAM='abc' is not an integer: set BEAM to a whole number such as BEAM=1" in bad.stderr
    assert "invalid literal" not in bad.stderr
    empty = run_python(
        "from tinycore.helpers import DEBUG, JIT, BEAM; print(DEBUG.value, JIT.value, BEAM.value)",
        {"DEBUG": "", "JIT": "", "BEAM": " "},
        timeout=60,
    )
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout.split() == ["0", "1", "0"]
