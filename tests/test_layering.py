"""The core's package layering (docs/architecture.md, "Layers"): every import points down, and no package import
cycle exists, function-level imports included.

Imports inside ``if TYPE_CHECKING:`` blocks count too: they never run, but a type named from a layer above is the
same dependency in the reader's head. Dynamic imports of core modules (``importlib.import_module("tinycore...")``)
are forbidden outside the lazy public namespace of ``tinycore/__init__.py``, so that no cycle hides behind one.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[1] / "tinycore"

# bottom to top; a module may import its own layer (without forming a package cycle) and the layers below it
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("version", "helpers", "errors", "dtype")),
    ("IR", ("uop",)),
    ("device contract", ("backend", "renderer")),
    ("code generation", ("codegen",)),
    ("plugins and device registry", ("plugin", "device")),
    ("engine", ("engine",)),
    ("reference device", ("runtime",)),
    ("front end", ("tensor", "frontend", "gradient", "nn")),
    ("applications", ("distributed", "sdk", "cli", "benchmark", "testkit", "__main__", "")),
]
LAYER_OF = {package: i for i, (_, packages) in enumerate(LAYERS) for package in packages}


@dataclass(frozen=True)
class Import:
    """One import of a core module by another: where it is and whether it runs at module level."""

    source: str  # the importing module's dotted name
    target: str  # the imported core module's dotted name
    path: str
    line: int
    top_level: bool


def _module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_of(path: Path) -> tuple[list[Import], list[tuple[int, str]]]:
    """The core imports of the module at `path`, and its dynamic imports of core modules (line, name)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    top = {id(n) for n in tree.body}
    found, dynamic = [], []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from tinycore import device` imports the module tinycore.device
            targets = [f"{base}.{a.name}" for a in node.names] if base == "tinycore" else [base]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).startswith("tinycore")
        ):
            dynamic.append((node.lineno, str(node.args[0].value)))
        for target in targets:
            if target == "tinycore" or target.startswith("tinycore."):
                found.append(Import(module, target, str(path.relative_to(CORE.parent)), node.lineno, id(node) in top))
    return found, dynamic


def _package(module: str) -> str:
    """The top-level part of core a module belongs to: ``tinycore.engine.jit`` -> ``engine``, ``tinycore`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.fixture(scope="module")
def core_imports() -> tuple[list[Import], list[str]]:
    imports, dynamic = [], []
    for path in sorted(CORE.rglob("*.py")):
        found, dyn = _imports_of(path)
        imports += found
        dynamic += [f"{path.relative_to(CORE.parent)}:{line} imports {name!r} dynamically" for line, name in dyn]
    return imports, dynamic


def test_every_part_of_core_has_a_layer():
    parts = {
        p.stem if p.is_file() else p.name for p in CORE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    parts = {"" if part == "__init__" else part for part in parts}
    assert sorted(parts - set(LAYER_OF)) == [], "add the new module or package to LAYERS (and docs/architecture.md)"


def test_imports_point_down(core_imports):
    imports, _ = core_imports
    upward = [
        f"{i.path}:{i.line} ({'module level' if i.top_level else 'in a function'}): {i.source} "
        f"(layer {LAYERS[LAYER_OF[_package(i.source)]][0]!r}) imports {i.target} "
        f"(layer {LAYERS[LAYER_OF[_package(i.target)]][0]!r})"
        for i in imports
        if LAYER_OF[_package(i.target)] > LAYER_OF[_package(i.source)]
    ]
    assert upward == [], "imports from a lower layer into a higher one:\n" + "\n".join(upward)


def _find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph `edges` as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_package_import_cycle(core_imports):
    imports, _ = core_imports
    edges: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], Import] = {}
    for i in imports:
        a, b = _package(i.source), _package(i.target)
        if a != b:
            edges[a].add(b)
            where.setdefault((a, b), i)
    cycle = _find_cycle(edges)
    detail = [f"{where[a, b].path}:{where[a, b].line}: {a or 'tinycore'} -> {b or 'tinycore'}"
              for a, b in zip(cycle or [], (cycle or [])[1:])]  # fmt: skip
    assert cycle is None, "package import cycle:\n" + "\n".join(detail)


def test_no_dynamic_imports_of_core_modules(core_imports):
    _, dynamic = core_imports
    allowed = [d for d in dynamic if d.startswith("tinycore/__init__.py:")]
    assert sorted(set(dynamic) - set(allowed)) == []


def test_the_cycle_finder_finds_cycles():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}}) is None


def test_only_the_ir_writes_uop_slots():
    """`UOp` is immutable: only `tinycore.uop` may set its attributes through ``object.__setattr__``."""
    writers = [
        f"{path.relative_to(CORE.parent)}:{n}"
        for path in sorted(CORE.rglob("*.py"))
        if path.parent.name != "uop" and path.name != "dtype.py"  # DType caches its own hash the same way
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "object.__setattr__(" in line
    ]
    assert writers == []
