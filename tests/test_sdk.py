"""The device SDK (`tinycore.sdk`): what it exports, that in-tree plugins import core only through it, and that the
`Renderer` base declares every attribute core reads."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tinycore.sdk as sdk
from tinycore.device import Compiled, LaunchableProgram, Program
from tinycore.renderer import Renderer
from tinycore.renderer.cstyle import CStyleRenderer

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "tinycore"

# Every renderer attribute core reads (grep core for `renderer.`, `ren.`, `r.` on a renderer, `renderer_setting`).
RENDERER_ATTRIBUTES = (
    "device",
    "arch",
    "suffix",
    "supports_float4",
    "masked_access",
    "has_local",
    "has_shared",
    "global_max",
    "local_max",
    "shared_max",
    "warp_size",
    "tensor_cores",
    "native_ops",
    "supported_dtypes",
    "index_bits",
    "vector_bytes",
    "vector_registers",
    "reduce_streams",
    "l2_bytes",
    "gemm_panel_bytes",
    "row_reduce_bytes",
    "threads",
    "max_vector_access",
    "extra_rules",
)
# ... and every method of the base it calls (plugins may override them)
RENDERER_METHODS = ("render", "fuses_row", "row_split")


def plugin_sources() -> list[Path]:
    """The modules of the in-tree plugin packages and of any example plugin package (not their tests)."""
    files = [*ROOT.glob("plugins/*/tinycore_*/**/*.py"), *ROOT.glob("examples/*/tinycore_*/**/*.py")]
    return sorted(f for f in files if "tests" not in f.relative_to(ROOT).parts)


# ----- (a) the exports


def test_all_matches_the_lazy_table_and_is_sorted_without_duplicates():
    assert len(sdk.__all__) == len(set(sdk.__all__))
    assert set(sdk.__all__) == set(sdk._EXPORTS)
    assert set(dir(sdk)) >= set(sdk.__all__)


@pytest.mark.parametrize("name", sdk.__all__)
def test_every_export_exists_and_is_documented(name: str):
    value = getattr(sdk, name)
    assert value is getattr(__import__(sdk._EXPORTS[name], fromlist=[name]), name)  # a re-export, not a copy
    if inspect.isclass(value) or inspect.isfunction(value):
        doc = value.__doc__  # its own docstring, not an inherited one
        assert doc and doc.strip(), f"tinycore.sdk.{name} has no docstring"
    else:  # constants and instances are described in the module's guide
        assert f"`{name}`" in (sdk.__doc__ or ""), f"tinycore.sdk.{name} is not described in the module docstring"


def test_every_export_is_named_in_the_module_guide():
    missing = [name for name in sdk.__all__ if f"`{name}`" not in (sdk.__doc__ or "")]
    assert not missing, f"not described in tinycore.sdk's docstring: {missing}"


def test_the_issue_names_are_exported():
    wanted = {
        "hookimpl", "ProbeResult", "DeviceCapabilities", "DeviceRegistrar", "Compiled", "Allocator", "LRUAllocator",
        "BufferSpec", "Renderer", "TensorCore", "ProgramSpec", "Compiler", "GraphRunner", "Program",
        "DeviceNotInstalledError", "DevicePluginError", "DevicePluginIncompatibleError", "DeviceUnavailableError",
        "CompileError", "DoctorCheck", "add_doctor_check", "CheckFailed", "CheckSkipped",
    }  # fmt: skip
    assert wanted <= set(sdk.__all__), wanted - set(sdk.__all__)


def test_unknown_name_raises_attribute_and_import_errors():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        sdk.Nope  # noqa: B018
    with pytest.raises(ImportError):
        from tinycore.sdk import Nope  # noqa: F401


def test_importing_the_sdk_is_light():
    code = (
        "import sys; from tinycore.sdk import hookimpl, ProbeResult, DeviceCapabilities, PlaceholderHooks;"
        "heavy = [m for m in ('numpy', 'tinycore.device', 'tinycore.uop.ops', 'tinycore.cli') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_core_modules_do_not_import_the_sdk():
    offenders = []
    for path in sorted(CORE.rglob("*.py")):
        if path.name == "sdk.py" and path.parent == CORE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n == "tinycore.sdk" or n.startswith("tinycore.sdk.") for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"core modules must not import tinycore.sdk (an import cycle): {offenders}"


# ----- the Program protocol


def test_program_protocol_shape():
    class Good:
        def __init__(self, device, name, lib):
            self.args = (device, name, lib)

        def __call__(self, *bufs, global_size=(1, 1, 1), local_size=None, vals=(), wait=False):
            return 0.0 if wait else None

    class Fast(Good):
        def launcher(self, global_size, local_size, vals):
            return None

    assert isinstance(Good(None, "k", b""), Program) and not isinstance(Good(None, "k", b""), LaunchableProgram)
    assert isinstance(Fast(None, "k", b""), LaunchableProgram)
    params = inspect.signature(Program.__call__).parameters
    assert list(params) == ["self", "bufs", "global_size", "local_size", "vals", "wait"]
    assert all(params[k].kind is inspect.Parameter.KEYWORD_ONLY for k in ("global_size", "local_size", "vals", "wait"))
    assert "Program" in str(inspect.signature(Compiled.__init__).parameters["runtime"].annotation)


def test_in_tree_programs_satisfy_the_protocol():
    from tinycore.runtime.python_device import PythonProgram

    assert isinstance(PythonProgram(None, "k", b""), Program)  # type: ignore[arg-type]
    clang_runtime = pytest.importorskip("tinycore_clang.runtime")
    assert issubclass(clang_runtime.ClangProgram, LaunchableProgram)


# ----- (b) plugins import core only from tinycore.sdk


def _is_core(name: str) -> bool:
    return (name == "tinycore" or name.startswith("tinycore.")) and name != "tinycore.sdk"


def _bad_imports(where: str, src: str) -> list[str]:
    """``file:line: statement`` for every import of a tinycore name from anywhere but tinycore.sdk in `src`."""
    bad = []
    for node in ast.walk(ast.parse(src, where)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "tinycore" and all(a.name == "sdk" for a in node.names):
                continue  # from tinycore import sdk
            if _is_core(node.module):
                bad.append(f"{where}:{node.lineno}: from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            bad += [f"{where}:{node.lineno}: import {a.name}" for a in node.names if _is_core(a.name)]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
            "import_module",
            "__import__",
        ):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and _is_core(arg.value):
                bad.append(f"{where}:{node.lineno}: import_module({arg.value!r})")
    return bad


def test_there_are_plugin_sources_to_check():
    names = {p.relative_to(ROOT).parts[1] for p in plugin_sources()}
    assert {"tinycore_clang", "tinycore_cuda", "tinycore_metal", "tinycore_amd"} <= names


def test_plugins_import_core_only_from_the_sdk():
    bad = [line for path in plugin_sources() for line in _bad_imports(str(path.relative_to(ROOT)), path.read_text())]
    assert not bad, "plugins must import core names from tinycore.sdk only:\n" + "\n".join(bad)


def test_plugin_doctests_use_the_sdk():
    pattern = re.compile(r">>> (from tinycore(\.(?!sdk\b)\w+)* import|import tinycore(?!\.sdk\b))")
    bad = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in plugin_sources()
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not bad, bad


def test_the_import_check_names_file_and_line():
    src = (
        "from tinycore.sdk import Renderer\nimport tinycore.sdk\nfrom tinycore import sdk\n"
        "from tinycore.device import Compiled\nimport tinycore\n"
        "def f():\n    import importlib\n    return importlib.import_module('tinycore.cli')\n"
    )
    assert _bad_imports("p.py", src) == [
        "p.py:4: from tinycore.device import Compiled",
        "p.py:5: import tinycore",
        "p.py:8: import_module('tinycore.cli')",
    ]


# ----- (c) the Renderer base declares what core reads


@pytest.mark.parametrize("name", RENDERER_METHODS)
def test_renderer_base_defines_and_documents_the_methods_core_calls(name: str):
    assert callable(getattr(Renderer, name, None)) and getattr(Renderer, name).__doc__, name


@pytest.mark.parametrize("name", RENDERER_ATTRIBUTES)
def test_renderer_base_declares(name: str):
    assert name in Renderer.__annotations__ and hasattr(Renderer, name), f"Renderer does not declare {name}"
    assert f"`{name}`" in (Renderer.__doc__ or ""), f"Renderer's docstring does not explain `{name}`"


def test_every_renderer_attribute_core_reads_is_declared():
    read = re.compile(r"\b(?:renderer|ren)\.([a-z_]\w*)\b")
    names = {
        m.group(1)
        for path, text in _core_sources()
        for m in read.finditer(text)
        if not (path.name == "cstyle.py" and m.group(1) in vars(CStyleRenderer))  # the C-family base's own
    } - set(RENDERER_METHODS)
    assert names, "expected core to read renderer attributes"
    undeclared = names - set(RENDERER_ATTRIBUTES)
    assert not undeclared, f"core reads renderer attributes missing from the declared list: {undeclared}"


def test_renderer_defaults_match_core():
    from tinycore.codegen.expander import MAX_ACCESS_WIDTH

    assert Renderer.max_vector_access == MAX_ACCESS_WIDTH
    assert Renderer.threads is None and Renderer.vector_bytes == 32 and Renderer.gemm_panel_bytes == 0


def _core_sources() -> list[tuple[Path, str]]:
    return [(p, p.read_text()) for p in sorted(CORE.rglob("*.py")) if p.name != "sdk.py"]


def test_core_reads_declared_renderer_attributes_plainly():
    getattr_read = re.compile(r"getattr\(\s*[\w.]*(renderer|\bren\b)[\w.]*\s*,\s*[\"'](\w+)[\"']")
    bad = [
        f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}: {m.group(0)}"
        for path, text in _core_sources()
        for m in getattr_read.finditer(text)
    ]
    assert not bad, "read declared Renderer attributes as plain attributes:\n" + "\n".join(bad)


def test_renderer_setting_names_are_declared():
    setting = re.compile(r"renderer_setting\([^,]+,\s*[\"'](\w+)[\"']")
    names = {m.group(1) for _, text in _core_sources() for m in setting.finditer(text)}
    assert names, "expected core to read some renderer settings"
    assert names <= set(RENDERER_ATTRIBUTES + RENDERER_METHODS), names - set(RENDERER_ATTRIBUTES + RENDERER_METHODS)


def test_renderer_setting_refuses_undeclared_names():
    from tinycore.device import renderer_setting

    with pytest.raises(AttributeError, match="not declared"):
        renderer_setting("PYTHON", "no_such_knob", 0)
    assert renderer_setting(("CLANG", "CLANG:1"), "row_reduce_bytes", 7) == 7


def test_render_has_one_signature_and_no_inspection():
    params = list(inspect.signature(Renderer.render).parameters)
    assert params == ["self", "uops", "name"]
    from tinycore.runtime.python_device import PythonRenderer

    assert list(inspect.signature(PythonRenderer.render).parameters) == params
    clang = pytest.importorskip("tinycore_clang.renderer")
    assert list(inspect.signature(clang.ClangRenderer.render).parameters) == params
    for path, text in _core_sources():
        assert not re.search(r"signature\([^)]*\.render\b", text), f"{path}: inspects render's signature"
