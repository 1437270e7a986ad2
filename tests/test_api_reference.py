"""tinycore offers every Tensor, top-level and `dtypes` name of tinygrad 0.11, with tinygrad's parameters.

The names and signatures come from ``docs/reference/tinygrad-0.11-api.md`` (a copy, kept in the repository, of the
introspection of tinygrad v0.11.0; its "tinycore status" column is a snapshot and is not used here). For each name:

- it exists (a static method where tinygrad's is one);
- where the reference gives a signature, tinycore's parameters start with tinygrad's in the same order, with the
  same names, kinds and defaults; tinycore may add parameters that have defaults after them (``device=`` on
  creation functions), may give a default where tinygrad has none, and may take ``*args``/``**kwargs`` where
  tinygrad does not (it accepts every call tinygrad accepts, and each means the same).

Names tinycore leaves out, or whose parameters differ on purpose, are in `EXCLUDED` with the reason; `docs/api.md`
has the same list. nn/optim/state are checked elsewhere (tests of ``tinycore.nn``).
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import tinycore
from tinycore.dtype import DType, dtypes
from tinycore.tensor import Tensor

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "reference" / "tinygrad-0.11-api.md"

# name -> why tinycore leaves it out or takes other parameters (keep in step with docs/api.md)
EXCLUDED: dict[str, str] = {
    "Tensor.__del__": "tinygrad's finalizer keeps a registry of live tensors; tinycore tracks them with weak "
    "references (no user-visible API), and a finalizer would slow every tensor's release",
    "Tensor.image_conv2d": "tinygrad's IMAGE=1 path for Qualcomm GPUs' image textures; tinycore has no image dtypes",
    "Tensor.image_dot": "tinygrad's IMAGE=1 path (see image_conv2d)",
    "Tensor.llvm_bf16_cast": "a workaround for tinygrad's LLVM backend; tinycore's renderers cast bfloat16 natively",
    "Variable": "tinycore's Variable is a class called with the same positional arguments (name, min_val, max_val, "
    "dtype); its default dtype is dtypes.index (tinygrad's: dtypes.int; tinygrad 0.11 has no index dtype). A variable "
    "made with dtypes.int sizes shapes, shrinks and TinyJit inputs the same (retyped to dtypes.index on the way in)",
    "dtypes.imagef": "image dtypes exist for tinygrad's IMAGE=1 Qualcomm path only",
    "dtypes.imageh": "image dtypes exist for tinygrad's IMAGE=1 Qualcomm path only",
}


# ----- reading the reference


def _rows(section: str) -> list[list[str]]:
    """The table rows (cells, stripped) of the section whose heading starts with ``section``."""
    text = REFERENCE.read_text()
    start = text.index(section)
    end = text.find("\n## ", start + 1)
    rows = []
    for line in text[start : end if end != -1 else None].splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if cells[0] not in ("name",):
                rows.append(cells)
    return rows


def _unquote(cell: str) -> str:
    return cell.strip().strip("`")


def tensor_entries() -> list[tuple[str, str, str]]:
    """(name, kind, signature) of every row of the Tensor table."""
    return [(_unquote(r[0]), r[2], _unquote(r[3])) for r in _rows("## Tensor: full table")]


def toplevel_entries() -> list[tuple[str, str | None]]:
    """(name, signature or None) of the top-level table: a signature is the first ``name(...)`` (a function)
    or ``__init__(...)`` (a class) in the description."""
    out = []
    for r in _rows("## Top-level"):
        name = _unquote(r[0])
        if not re.fullmatch(r"\w+", name):  # the "submodules ..." row
            continue
        sig = None
        for span in re.findall(r"`([^`]*)`", r[1]):
            m = re.match(r"(\w+)(\(.*?\))(?:\s*->.*)?$", span)
            if m and m.group(1) in (name, "__init__"):
                sig = m.group(2)
                break
        out.append((name, sig))
    return out


def dtypes_entries() -> list[tuple[str, str | None]]:
    """(``dtypes.X`` or ``DType.X``, signature or None) for every name in the dtypes table."""
    out: list[tuple[str, str | None]] = []
    for r in _rows("## `dtypes` members"):
        if "not in 0.11" in r[1] or "not on `dtypes` in 0.11" in r[1]:
            continue
        first = r[0]
        owner = "DType" if first.startswith("DType instance") else "dtypes"
        body = first.split(":", 1)[1] if owner == "DType" else first
        for span in re.findall(r"`([^`]*)`", body) or [body]:
            for part in re.split(r",\s*(?![^()]*\))", span):
                for alias in part.split("/"):
                    m = re.fullmatch(r"\s*(\w+)\s*(\(.*\))?\s*", alias)
                    if m:
                        out.append((f"{owner}.{m.group(1)}", m.group(2)))
    return out


# ----- comparing parameters


class _Unevaluable:
    """A default the test can't evaluate (compared by its source text)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _tinygrad_params(sig: str) -> list[tuple[str, Any, Any]]:
    """``(name, kind, default)`` of a signature text such as ``(x, reverse=False, *, dtype=None)``."""
    sig = re.sub(r"\bGLOBAL\b", "AddrSpace.GLOBAL", sig)
    fn = ast.parse(f"def f{sig}: pass").body[0]
    assert isinstance(fn, ast.FunctionDef)
    a = fn.args

    def value(node: ast.expr | None) -> Any:
        if node is None:
            return inspect.Parameter.empty
        try:
            from tinycore.dtype import AddrSpace

            return eval(compile(ast.Expression(node), "<ref>", "eval"), {"dtypes": dtypes, "AddrSpace": AddrSpace})
        except Exception:
            return _Unevaluable(ast.unparse(node))

    P = inspect.Parameter
    out: list[tuple[str, Any, Any]] = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for arg, d in zip(positional, defaults):
        out.append((arg.arg, P.POSITIONAL_OR_KEYWORD, value(d)))
    if a.vararg:
        out.append((a.vararg.arg, P.VAR_POSITIONAL, P.empty))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((arg.arg, P.KEYWORD_ONLY, value(d)))
    if a.kwarg:
        out.append((a.kwarg.arg, P.VAR_KEYWORD, P.empty))
    return out


def _same_default(ours: Any, theirs: Any) -> bool:
    if isinstance(theirs, _Unevaluable):
        return repr(ours) == theirs.text
    if theirs is inspect.Parameter.empty:
        return True  # a default where tinygrad has none only accepts more calls
    return type(ours) is type(theirs) and ours == theirs


def signature_problems(func: Any, sig: str, drop_self: bool) -> list[str]:
    """Why ``func``'s parameters don't match tinygrad's ``sig`` (an empty list when they do)."""
    P = inspect.Parameter
    params = list(inspect.signature(func).parameters.values())
    if drop_self and params and params[0].name == "self":
        params = params[1:]
    theirs = _tinygrad_params(sig)
    problems: list[str] = []
    ours_pos = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    ours_var = next((p for p in params if p.kind is P.VAR_POSITIONAL), None)
    ours_kwvar = next((p for p in params if p.kind is P.VAR_KEYWORD), None)
    ours_by_name = {p.name: p for p in params}
    their_pos = [t for t in theirs if t[1] is P.POSITIONAL_OR_KEYWORD]
    for i, (name, _, default) in enumerate(their_pos):
        if i >= len(ours_pos) or ours_pos[i].name != name:
            got = ours_pos[i].name if i < len(ours_pos) else "nothing"
            problems.append(f"positional parameter {i} is {got!r}, tinygrad's is {name!r}")
            continue
        if ours_pos[i].kind is P.POSITIONAL_ONLY:
            problems.append(f"{name!r} is positional-only")
        if not _same_default(ours_pos[i].default, default):
            problems.append(f"{name!r} defaults to {ours_pos[i].default!r}, tinygrad's to {default!r}")
    extra = ours_pos[len(their_pos) :]
    if any(t[1] is P.VAR_POSITIONAL for t in theirs):
        if ours_var is None:
            problems.append("takes no *args")
        elif extra:
            problems.append(f"positional parameters {[p.name for p in extra]} come before *args (tinygrad's go there)")
    for p in extra:
        if p.default is P.empty:
            problems.append(f"extra parameter {p.name!r} has no default")
    for name, kind, default in theirs:
        if kind is not P.KEYWORD_ONLY:
            continue
        ours = ours_by_name.get(name)
        if ours is None or ours.kind not in (P.KEYWORD_ONLY, P.POSITIONAL_OR_KEYWORD):
            problems.append(f"no keyword parameter {name!r}")
        elif not _same_default(ours.default, default):
            problems.append(f"{name!r} defaults to {ours.default!r}, tinygrad's to {default!r}")
    if any(t[1] is P.VAR_KEYWORD for t in theirs) and ours_kwvar is None:
        problems.append("takes no **kwargs")
    return problems


# ----- the tests


def _check_excluded(key: str) -> None:
    if key in EXCLUDED:
        pytest.skip(f"excluded: {EXCLUDED[key]}")


@pytest.mark.parametrize(("name", "kind", "sig"), tensor_entries(), ids=[e[0] for e in tensor_entries()])
def test_tensor_name(name: str, kind: str, sig: str) -> None:
    _check_excluded(f"Tensor.{name}")
    assert hasattr(Tensor, name), f"Tensor.{name} is missing"
    raw = inspect.getattr_static(Tensor, name)
    if kind == "static":
        assert isinstance(raw, staticmethod), f"Tensor.{name} should be a static method"
    if kind in ("property", "attribute") or not sig:
        return
    func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    if (
        name.startswith("__") and name.endswith("__") and name != "__init__"
    ):  # operators are called positionally: only the count matters
        ours = [
            p for p in list(inspect.signature(func).parameters.values())[1:] if p.default is inspect.Parameter.empty
        ]
        assert len(ours) == len(_tinygrad_params(sig)), f"Tensor.{name}{sig}: takes {len(ours)} operands"
        return
    problems = signature_problems(func, sig, drop_self=not isinstance(raw, staticmethod))
    assert not problems, f"Tensor.{name}{sig}: " + "; ".join(problems)


@pytest.mark.parametrize(("name", "sig"), toplevel_entries(), ids=[e[0] for e in toplevel_entries()])
def test_toplevel_name(name: str, sig: str | None) -> None:
    _check_excluded(name)
    assert hasattr(tinycore, name), f"tinycore.{name} is missing"
    obj = getattr(tinycore, name)
    if sig is None:
        return
    problems = signature_problems(obj.__init__ if inspect.isclass(obj) else obj, sig, drop_self=inspect.isclass(obj))
    assert not problems, f"tinycore.{name}{sig}: " + "; ".join(problems)


@pytest.mark.parametrize(("name", "sig"), dtypes_entries(), ids=[e[0] for e in dtypes_entries()])
def test_dtypes_name(name: str, sig: str | None) -> None:
    _check_excluded(name)
    owner_name, attr = name.split(".")
    owner = dtypes if owner_name == "dtypes" else DType
    assert hasattr(owner if owner is dtypes else dtypes.float32, attr), f"{name} is missing"
    if sig is None or sig == "(...)":
        return
    raw = inspect.getattr_static(owner, attr)
    func = raw.__func__ if isinstance(raw, staticmethod) else raw
    problems = signature_problems(func, sig, drop_self=owner is DType)
    assert not problems, f"{name}{sig}: " + "; ".join(problems)


def test_the_reference_is_read() -> None:
    """The parsers find the tables (a reformatted reference must not make every test vanish)."""
    assert len(tensor_entries()) == 288
    assert {n for n, _ in toplevel_entries()} >= {"Tensor", "TinyJit", "fetch", "getenv", "Device", "dtypes"}
    names = {n for n, _ in dtypes_entries()}
    assert {"dtypes.floats", "dtypes.all", "dtypes.int8", "dtypes.long", "DType.itemsize", "DType.ptr"} <= names


def test_exclusions_are_listed_names() -> None:
    """Every exclusion names something the reference lists (stale entries are removed, not kept)."""
    listed = {f"Tensor.{n}" for n, _, _ in tensor_entries()} | {n for n, _ in toplevel_entries()}
    listed |= {n for n, _ in dtypes_entries()}
    assert set(EXCLUDED) <= listed, sorted(set(EXCLUDED) - listed)


def test_excluded_names_are_in_the_docs() -> None:
    """docs/api.md names every exclusion (the table a user reads)."""
    doc = (REFERENCE.parent.parent / "api.md").read_text()
    missing = [n for n in EXCLUDED if f"`{n}`" not in doc]
    assert not missing, missing


def test_the_checker_catches_mismatches() -> None:
    """The signature comparison itself: other names, order, defaults and missing varargs are reported."""

    def f(x, reverse=False, dtype=None): ...

    assert signature_problems(f, "(x, reverse=False, dtype=None)", False) == []
    assert signature_problems(f, "(x, dtype=None)", False)
    assert signature_problems(f, "(x, reverse=True, dtype=None)", False)
    assert signature_problems(f, "(x, *args)", False)
    assert signature_problems(f, "(x, reverse=False, dtype=None, **kwargs)", False)
