"""The device-plugin template (`templates/device-plugin`, a copier template): it renders a distribution whose entry
point, core range and plugin API match core and the in-tree plugins, which imports core only through `tinycore.sdk`,
fails loudly (``NotImplementedError`` naming file and method) wherever the author has work to do, installs into a
fresh venv and passes the conformance kit there (static tier; the others skip with the probe's "not implemented
yet"); and its questions reject bad answers."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import clean_env

copier = pytest.importorskip("copier", reason="copier is not installed (pip install copier; it is in the test extra)")
from tinycore.sdk import PLUGIN_API_VERSION  # noqa: E402
from tinycore.testkit import StaticTier  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "templates" / "device-plugin"
ANSWERS = {"device_name": "TPL_NPU2", "author_name": "Ada Lovelace", "author_email": "ada@example.org"}
DEVICE, DIST, PACKAGE, PREFIX = "TPL_NPU2", "tinycore-tpl-npu2", "tinycore_tpl_npu2", "TplNpu2"  # derived defaults
SDK = "tinycore.sdk"
SKELETONS = ("plugin", "device", "renderer", "compiler", "allocator", "runtime")
# every method the author must write -> (file, what the test calls); each must raise NotImplementedError
TODOS = {
    f"{PREFIX}Renderer.render": ("renderer.py", "renderer.render([], name='k')"),
    f"{PREFIX}Compiler.compile": ("compiler.py", "compiler.compile('src')"),
    f"{PREFIX}Compiler.cache_key_parts": ("compiler.py", "compiler.cache_key_parts()"),
    f"{PREFIX}Allocator._alloc": ("allocator.py", "device.allocator.alloc(16)"),
    f"{PREFIX}Allocator._free": ("allocator.py", "device.allocator._free(None, 16, None)"),
    f"{PREFIX}Allocator.copyin": ("allocator.py", "device.allocator.copyin(None, memoryview(b'x'))"),
    f"{PREFIX}Allocator.copyout": ("allocator.py", "device.allocator.copyout(memoryview(bytearray(1)), None)"),
    f"{PREFIX}Program.__init__": ("runtime.py", "device.runtime('k', b'')"),
    f"{PREFIX}Program.__call__": ("runtime.py", "program(global_size=(1, 1, 1))"),
    f"{PREFIX}Device.synchronize": ("device.py", "device.synchronize()"),
}


def render(destination: Path, data: dict[str, object], source: Path) -> Path:
    """Render the template copy at `source` into `destination` with `data` (defaults for the rest, no prompts)."""
    copier.run_copy(str(source), str(destination), data=data, defaults=True, unsafe=False, quiet=True)
    return destination


@pytest.fixture(scope="module")
def template_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The template copied out of the checkout: a plain folder, so copier never consults this repository's git state
    (committed or not, the working tree is what gets tested)."""
    copy = tmp_path_factory.mktemp("template") / "device-plugin"
    shutil.copytree(TEMPLATE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


@pytest.fixture(scope="module")
def generated(template_copy: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The template rendered with `ANSWERS` (the names derived from the device name by the template's defaults)."""
    return render(tmp_path_factory.mktemp("generated") / DIST, ANSWERS, template_copy)


@pytest.fixture(scope="module")
def venv(generated: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A fresh venv (seeing this interpreter's packages; their pip installs into it) with the generated plugin
    pip-installed in it (offline: no dependencies, no build isolation), and the environment to run it in."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", root / "env"], check=True)
    python = root / "env" / "bin" / "python"
    env = clean_env({"TINYCORE_CACHE_DIR": str(root / "cache"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}, [])
    source = shutil.copytree(generated, root / "src")  # pip builds in the source folder: keep `generated` pristine
    install = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", source]
    done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=300, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    return python, env


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


# ----- the template's own settings


def test_template_defaults_match_core_and_the_in_tree_plugins():
    import yaml

    config = yaml.safe_load((TEMPLATE / "copier.yml").read_text())
    assert config["_subdirectory"] == "template"  # copier.yml and the template's README are never generated
    in_tree = {
        m.group(1)
        for pyproject in ROOT.glob("plugins/*/pyproject.toml")
        for m in re.finditer(r'"tinycore([<>=!~][^"]*)"', pyproject.read_text())
    }
    assert in_tree == {config["core_range"]["default"]}, "the template's core range must be the in-tree plugins'"
    api = tuple(int(part) for part in config["plugin_api"]["default"].split(","))
    assert api == PLUGIN_API_VERSION


# ----- the generated files


def test_generates_a_complete_small_project(generated: Path):
    expected = {
        ".copier-answers.yml", ".gitignore", ".github/workflows/ci.yml", "README.md", "pyproject.toml",
        f"tests/test_{DEVICE.lower()}_conformance.py", f"{PACKAGE}/__init__.py",
        *(f"{PACKAGE}/{name}.py" for name in SKELETONS),
    }  # fmt: skip
    assert _files(generated) == expected
    for path in expected:
        text = (generated / path).read_text()
        leftovers = re.findall(r"\{\{.*?\}\}|\{%.*?%\}", text.replace("${{ matrix.python-version }}", ""))
        assert not leftovers, f"{path}: unrendered template syntax {leftovers}"
    pyproject = (generated / "pyproject.toml").read_text()
    assert f'name = "{DIST}"' in pyproject
    assert f'[project.entry-points."tinycore.devices"]\n{DEVICE} = "{PACKAGE}.plugin"' in pyproject
    assert 'dependencies = ["tinycore>=0.1,<0.2"]' in pyproject
    assert 'authors = [{ name = "Ada Lovelace", email = "ada@example.org" }]' in pyproject
    assert "line-length = 120" in pyproject
    plugin = (generated / PACKAGE / "plugin.py").read_text()
    assert f"TINYCORE_PLUGIN_API = {PLUGIN_API_VERSION}" in plugin
    assert f'DEVICE = "{DEVICE}"' in plugin and "PRIORITY = 50" in plugin
    conformance = (generated / "tests" / f"test_{DEVICE.lower()}_conformance.py").read_text()
    assert f"class Test{PREFIX}Conformance(StaticTier, CoreTier, FullTier):" in conformance
    assert f'device = "{DEVICE}"' in conformance
    ci = (generated / ".github" / "workflows" / "ci.yml").read_text()
    assert "pip install -e '.[test]'" in ci and "python -m pytest" in ci and "${{ matrix.python-version }}" in ci
    assert "`NotImplementedError`" in (generated / "README.md").read_text()


def _core_imports(path: Path) -> list[str]:
    """``file:line: module`` for each import of a core module other than `tinycore.sdk` (tests/test_sdk.py's rule)."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "tinycore" else [f"tinycore.{a.name}" for a in node.names]
        bad += [f"{path.name}:{node.lineno}: {n}" for n in names if n.split(".")[0] == "tinycore" and n != SDK]
    return bad


def test_generated_package_imports_core_only_through_the_sdk(generated: Path):
    sources = sorted((generated / PACKAGE).glob("*.py"))
    assert len(sources) == len(SKELETONS) + 1
    bad = [line for path in sources for line in _core_imports(path)]
    assert not bad, bad


def test_no_silent_stubs(generated: Path):
    """Every function does something: none is only a docstring, ``pass``, ``...`` or ``return None``; and the ones
    that raise ``NotImplementedError`` are exactly the methods `TODOS` calls."""
    raising, silent = set(), []
    for path in sorted((generated / PACKAGE).glob("*.py")):
        module = ast.parse(path.read_text())
        for owner in [module, *(n for n in module.body if isinstance(n, ast.ClassDef))]:
            for fn in (n for n in owner.body if isinstance(n, ast.FunctionDef)):
                name = f"{owner.name}.{fn.name}" if isinstance(owner, ast.ClassDef) else fn.name
                stmts = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                if all(isinstance(s, ast.Pass) or ast.unparse(s) == "return None" for s in stmts):
                    silent.append(f"{path.name}: {name}")
                if any(isinstance(s, ast.Raise) and "NotImplementedError" in ast.unparse(s) for s in fn.body):
                    raising.add(name)
    assert not silent, f"silent stubs: {silent}"
    assert raising == set(TODOS)


def test_generated_project_is_lint_clean(generated: Path):
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    for command in (["check"], ["format", "--check"]):
        done = subprocess.run([ruff, *command, "--no-cache", "."], cwd=generated, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


# ----- the installed plugin

CHECK_TODOS = """
import json, pickle, sys
from tinycore.sdk import Compiled, Compiler, Renderer

package, prefix, family, todos = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
plugin = __import__(f"{package}.plugin", fromlist=["plugin"])
runtime = __import__(f"{package}.runtime", fromlist=["runtime"])
device = plugin.tinycore_open_device(name=family, ordinal=1)
renderer, compiler = plugin.tinycore_compile_target(name=family, arch=None)
program = object.__new__(getattr(runtime, f"{prefix}Program"))
messages = {}
for label, (_, call) in todos.items():
    try:
        eval(call)
        messages[label] = None
    except NotImplementedError as error:
        messages[label] = str(error)
probe = plugin.tinycore_probe_device(name=family)
facts = {
    "device": [type(device).__name__, device.device, isinstance(device, Compiled)],
    "target": [isinstance(renderer, Renderer), isinstance(compiler, Compiler), renderer.device],
    "pickled renderer": type(pickle.loads(pickle.dumps(renderer))).__name__,
    "dtypes": sorted(d.name for d in plugin.tinycore_device_capabilities(name=family).dtypes),
    "renderer dtypes": sorted(d.name for d in renderer.supported_dtypes),
    "optional allocator methods": [device.allocator.supports_transfer, device.allocator.supports_offset,
                                   device.allocator.supports_as_buffer],
    "other names": [plugin.tinycore_open_device(name="NOPE", ordinal=0),
                    plugin.tinycore_compile_target(name="NOPE", arch=None),
                    plugin.tinycore_device_capabilities(name="NOPE")],
    "probe": [probe.ok, probe.reason, probe.device_count],
}
print(json.dumps({"messages": messages, "facts": facts}))
"""


@pytest.mark.slow
def test_unwritten_parts_fail_loudly(venv):
    python, env = venv
    args = [python, "-c", textwrap.dedent(CHECK_TODOS), PACKAGE, PREFIX, DEVICE, json.dumps(TODOS)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    for label, (file, _) in TODOS.items():
        message = out["messages"][label]
        assert message is not None, f"{label} did not raise NotImplementedError"
        assert f"{PACKAGE}/{file}: {label} is not written yet: " in message and "docs/plugins.md" in message, message
    facts = out["facts"]
    assert facts["device"] == [f"{PREFIX}Device", f"{DEVICE}:1", True]
    assert facts["target"] == [True, True, DEVICE] and facts["pickled renderer"] == f"{PREFIX}Renderer"
    assert facts["dtypes"] == facts["renderer dtypes"] == ["bool", "float", "int"]
    assert facts["optional allocator methods"] == [False, False, False], "optional methods are defined only when done"
    assert facts["other names"] == [None, None, None]
    assert facts["probe"] == [False, f"not implemented yet: write tinycore_probe_device in {PACKAGE}/plugin.py", 0]


@pytest.mark.slow
def test_the_conformance_kit_passes_on_the_generated_plugin(venv, generated: Path):
    """The generated project's own test suite (the kit's tiers with ``device = "TPL_NPU2"``) run by the venv's
    python: the static tier passes, the core and full tiers skip with the probe's reason."""
    python, env = venv
    args = [python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
    done = subprocess.run(args, cwd=generated, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    static = sum(name.startswith("test_") for name in dir(StaticTier))
    summary = done.stdout.strip().splitlines()[-1]
    assert re.search(rf"\b{static} passed, \d+ skipped\b", summary) and "failed" not in summary, done.stdout[-4000:]
    assert f"{DEVICE} unavailable here: not implemented yet" in done.stdout


# ----- the questions


@pytest.mark.parametrize(
    "question, answer",
    [
        ("device_name", "my-npu"),
        ("device_name", "mynpu"),
        ("device_name", "9NPU"),
        ("device_name", "PYTHON"),
        ("plugin_name", "Tinycore NPU"),
        ("package_name", "tinycore"),
        ("priority", 0),
        ("core_range", ">=0.1"),
    ],
)
def test_bad_answers_are_rejected(template_copy: Path, tmp_path: Path, question: str, answer: object):
    with pytest.raises(ValueError, match=f"Validation error for question '{question}'"):
        render(tmp_path / "out", {question: answer}, template_copy)
    assert not (tmp_path / "out").exists()
