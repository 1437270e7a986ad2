"""tinygrad 0.11's `nn`, `nn.optim` and `nn.state` surface (issue 21 B), from `tests/data/tinygrad_0_11_nn_api.json`
(a copy of the relevant part of the API reference): every listed name exists in tinycore with tinygrad's parameters
-- the same names in the same order with the same defaults; tinycore may add parameters after them only with a
default (e.g. ``device=None``) -- and the listed methods/attributes. The names in EXCLUDED are documented in
docs/nn.md."""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from tinycore.helpers import ContextVar
from tinycore.tensor import Tensor

API = json.loads((Path(__file__).parent / "data" / "tinygrad_0_11_nn_api.json").read_text())
EXCLUDED = {
    ("tinycore.nn", "datasets"): "downloads MNIST from the internet; tinycore has no network fetch (`fetch` missing)",
}
CASES = [(mod, name, spec) for mod, names in API.items() if mod.startswith("tinycore") for name, spec in names.items()]


def _default_matches(ours: Any, theirs: str) -> bool:
    if theirs == "FUSE_OPTIM":
        return isinstance(ours, ContextVar) and ours.key == "FUSE_OPTIM"
    if theirs == "Tensor":
        return ours is Tensor
    return repr(ours) == theirs


def _instance_of(mod: Any, name: str) -> Any:
    """A small instance of class `name` to check instance attributes and methods on."""
    from tinycore.nn import LayerNorm, optim

    if name == "LayerNorm":
        return LayerNorm(4)
    if name in ("Optimizer", "OptimizerGroup"):
        sgd = optim.SGD([Tensor([1.0])])
        return optim.OptimizerGroup(sgd) if name == "OptimizerGroup" else sgd
    if name == "TensorIO":
        import numpy as np

        return mod.TensorIO(Tensor(np.zeros(4, dtype=np.uint8)))
    return getattr(mod, name)


@pytest.mark.parametrize(("module", "name", "spec"), CASES, ids=[f"{m.split('.')[-1]}.{n}" for m, n, _ in CASES])
def test_name_has_tinygrads_signature(module: str, name: str, spec: dict) -> None:
    if (module, name) in EXCLUDED:
        pytest.skip(f"excluded: {EXCLUDED[module, name]}")
    mod = importlib.import_module(module)
    assert hasattr(mod, name), f"{module}.{name} is missing"
    obj = getattr(mod, name)
    kind = spec["kind"]
    if kind == "alias":
        assert obj is getattr(mod, spec["of"])
        return
    if kind == "contextvar":
        assert isinstance(obj, ContextVar)
        return
    if kind == "dict":
        assert isinstance(obj, dict) and obj
        return
    if kind in ("reexport", "module"):
        return
    assert callable(obj)
    params = list(inspect.signature(obj).parameters.values())
    expected = spec["params"]
    got = [p.name for p in params[: len(expected)]]
    assert got == [e["name"] for e in expected], f"{module}.{name}: parameters {got}, tinygrad {expected}"
    for p, e in zip(params, expected):
        if e.get("var"):
            assert p.kind is inspect.Parameter.VAR_POSITIONAL, f"{name}: *{p.name}"
        elif "default" in e:
            assert p.default is not inspect.Parameter.empty, f"{name}({p.name}=) has no default"
            assert _default_matches(p.default, e["default"]), f"{name}({p.name}={p.default!r}), tinygrad {e['default']}"
        else:
            assert p.default is inspect.Parameter.empty, f"{name}({p.name}) has a default; tinygrad's is required"
        if not e.get("var"):
            assert p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY), f"{name}({p.name}) is not positional"
    for extra in params[len(expected) :]:
        assert extra.default is not inspect.Parameter.empty or extra.kind in (extra.VAR_KEYWORD, extra.VAR_POSITIONAL)
    if spec.get("methods") or spec.get("attrs"):
        inst = _instance_of(mod, name)
        for member in spec.get("methods", []):
            assert callable(getattr(inst, member, None)), f"{name}.{member} is missing"
        for member in spec.get("attrs", []):
            assert hasattr(inst, member), f"{name} instance has no attribute {member}"


def test_the_api_copy_covers_the_three_modules() -> None:
    assert set(API) - {"_source"} == {"tinycore.nn", "tinycore.nn.optim", "tinycore.nn.state"}
    assert len(CASES) >= 40
