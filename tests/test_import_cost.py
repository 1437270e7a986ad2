"""`import tinycore` is cheap: under 0.15 s, and it imports no plugin, no numpy, no vendor library, no discovery."""

from __future__ import annotations

import json

IMPORT_BUDGET_US = 150_000
# top-level modules that must never be imported by `import tinycore` (vendor runtimes and heavy libraries)
FORBIDDEN_TOPS = {
    "numpy",
    "torch",
    "cuda",
    "pycuda",
    "cupy",
    "nvidia",
    "Metal",
    "objc",
    "hip",
    "pyopencl",
    "llvmlite",
    "ctypes",
    "pluggy",
    "platformdirs",
}


def _cumulative_us(stderr: str, module: str) -> int:
    for line in stderr.splitlines():
        # "import time:       self [us] |   cumulative | imported package"
        if line.startswith("import time:") and line.rsplit("|", 1)[-1].strip() == module:
            return int(line.split("|")[1].strip())
    raise AssertionError(f"no importtime line for {module!r} in:\n{stderr[-2000:]}")


def test_import_tinycore_is_under_budget(run_python, tmp_path):
    timings = []
    for _ in range(3):  # the best of three: a shared CI machine adds noise, never speed
        out = run_python("import tinycore", args=["-X", "importtime"], cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        timings.append(_cumulative_us(out.stderr, "tinycore"))
    assert min(timings) < IMPORT_BUDGET_US, f"import tinycore took {min(timings)} us (budget {IMPORT_BUDGET_US} us)"


def test_import_tinycore_imports_no_plugin_numpy_or_vendor_library(run_python, tmp_path):
    code = """
    import json, sys
    before = set(sys.modules)
    import tinycore
    print(json.dumps(sorted(set(sys.modules) - before)))
    """
    out = run_python(code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    new = json.loads(out.stdout)
    assert "tinycore" in new  # the diff really covers the import
    plugins = [m for m in new if m.startswith("tinycore_") or m == "tinycore.runtime.python_plugin"]
    assert plugins == []
    assert [m for m in new if m.split(".")[0] in FORBIDDEN_TOPS] == []
    assert "tinycore.plugin.manager" not in new and "importlib.metadata" not in new  # no discovery at import


def test_importing_the_registry_discovers_nothing(run_python, tmp_path):
    code = """
    import sys
    from tinycore.device import Device
    from tinycore.plugin.manager import get_manager
    print(sorted(m for m in sys.modules if m.startswith("tinycore_") or m.endswith("python_plugin")))
    print(get_manager()._records is None)
    """
    out = run_python(code, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "True"]
