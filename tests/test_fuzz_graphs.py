"""Graph-level fuzzing (issue 5's acceptance): random Tensor graphs of elementwise, movement, reduce and matmul ops,
with shared sub-graphs, realize points (`contiguous`) and several outputs realized together, give

- numpy's result when scheduled, fused and optimized as usual (the heuristics' opts),
- the same result with ``NOOPT=1`` (no kernel optimizations),
- bit-identical results with the memory planner off (``NO_MEMORY_PLANNER=1``) and on.

A drawn graph is a *recipe* (a list of steps over a pool of values), replayed on fresh input buffers for each mode,
so no mode reads what another one computed (the realized table) and each mode schedules and lowers on its own.
Bounded: a few dozen small examples, no deadline (the whole file runs in well under a minute on 2 cores).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinycore.engine.realize import clear_runner_cache
from tinycore.helpers import Context, prod
from tinycore.tensor import Tensor

MAX_NUMEL = 384  # keeps the PYTHON interpreter fast
DIMS = st.sampled_from([1, 2, 3, 4, 5, 6, 8])

# ---------------------------------------------------------------------------------------------------------------
# steps: each works on numpy arrays and on Tensors alike (the pool holds one or the other)

UNARY: dict[str, Callable[[Any], Any]] = {
    "relu": lambda x: x.relu() if isinstance(x, Tensor) else np.maximum(x, 0),
    "neg": lambda x: -x,
    "scale": lambda x: x * 0.75 + 0.5,
    "square": lambda x: x * x,
    "sin": lambda x: x.sin() if isinstance(x, Tensor) else np.sin(x),
    "clip": lambda x: x.maximum(-1.0).minimum(1.0) if isinstance(x, Tensor) else np.clip(x, -1.0, 1.0),
}
BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "max": lambda a, b: a.maximum(b) if isinstance(a, Tensor) else np.maximum(a, b),
    "where": lambda a, b: (a < b).where(a, b) if isinstance(a, Tensor) else np.where(a < b, a, b),
}


def _reduce(x: Any, op: str, axis: int, keepdim: bool) -> Any:
    if isinstance(x, Tensor):
        return x.sum(axis, keepdim=keepdim) if op == "sum" else x.max(axis, keepdim=keepdim)
    fn = np.sum if op == "sum" else np.max
    return fn(x, axis=axis, keepdims=keepdim).astype(np.float32)


def _movement(x: Any, kind: str, arg: Any) -> Any:
    is_t = isinstance(x, Tensor)
    if kind == "reshape":
        return x.reshape(*arg) if is_t else x.reshape(arg)
    if kind == "permute":
        return x.permute(*arg) if is_t else x.transpose(arg)
    if kind == "pad":
        return x.pad(arg) if is_t else np.pad(x, arg)
    if kind == "shrink":
        return x.shrink(arg) if is_t else x[tuple(slice(b, e) for b, e in arg)]
    if kind == "flip":
        return x.flip(arg) if is_t else np.flip(x, arg)
    if kind == "expand":
        return x.expand(*arg) if is_t else np.broadcast_to(x, arg)
    raise AssertionError(kind)


def apply_step(step: tuple, pool: list[Any], fresh: Callable[[tuple[int, ...], int], Any]) -> Any:
    """Apply one recipe step to `pool` (numpy arrays or Tensors); `fresh(shape, seed)` makes a new input."""
    kind = step[0]
    if kind == "unary":
        return UNARY[step[2]](pool[step[1]])
    if kind == "binary":
        return BINARY[step[3]](pool[step[1]], pool[step[2]])
    if kind == "fresh_binary":
        x = pool[step[1]]
        return BINARY[step[2]](x, fresh(tuple(x.shape), step[3]))
    if kind == "movement":
        return _movement(pool[step[1]], step[2], step[3])
    if kind == "reduce":
        return _reduce(pool[step[1]], step[2], step[3], step[4])
    if kind == "broadcast_reduce":  # x op reduce(x) broadcast back: a reduce feeding an expand
        x = pool[step[1]]
        return BINARY[step[4]](x, _reduce(x, step[2], step[3], True))
    if kind == "matmul":
        x = pool[step[1]]
        w = fresh((int(x.shape[-1]), step[2]), step[3])
        return x @ w
    if kind == "contiguous":
        x = pool[step[1]]
        return x.contiguous() if isinstance(x, Tensor) else x
    raise AssertionError(kind)


def _fresh_np(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.5, 1.5, shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------------
# drawing a recipe (shapes are tracked with the numpy values while drawing)


def _factorizations(n: int, ndim: int) -> list[tuple[int, ...]]:
    if ndim == 1:
        return [(n,)]
    return [(d, *rest) for d in range(1, n + 1) if n % d == 0 for rest in _factorizations(n // d, ndim - 1)]


@st.composite
def recipes(draw: st.DrawFn) -> tuple[list[tuple[int, ...]], list[tuple], list[int]]:
    """``(input shapes, steps, output indices)`` of a random graph."""
    n_inputs = draw(st.integers(1, 2))
    shapes = [tuple(draw(st.lists(DIMS, min_size=1, max_size=3))) for _ in range(n_inputs)]
    pool: list[np.ndarray] = [_fresh_np(s, i) for i, s in enumerate(shapes)]
    steps: list[tuple] = []
    seed = 100
    for _ in range(draw(st.integers(2, 10))):
        i = draw(st.integers(0, len(pool) - 1))
        x = pool[i]
        kind = draw(
            st.sampled_from(
                [
                    "unary",
                    "binary",
                    "fresh_binary",
                    "movement",
                    "movement",
                    "reduce",
                    "broadcast_reduce",
                    "matmul",
                    "contiguous",
                ]
            )
        )
        step: tuple | None = None
        if kind == "unary":
            step = ("unary", i, draw(st.sampled_from(sorted(UNARY))))
        elif kind == "binary":
            same = [j for j, y in enumerate(pool) if y.shape == x.shape]
            step = ("binary", i, draw(st.sampled_from(same)), draw(st.sampled_from(sorted(BINARY))))
        elif kind == "fresh_binary":
            seed += 1
            step = ("fresh_binary", i, draw(st.sampled_from(sorted(BINARY))), seed)
        elif kind == "movement" and x.ndim:
            step = _draw_movement(draw, i, x)
        elif kind in ("reduce", "broadcast_reduce") and x.ndim:
            op, axis = draw(st.sampled_from(["sum", "max"])), draw(st.integers(0, x.ndim - 1))
            if kind == "reduce":
                step = ("reduce", i, op, axis, draw(st.booleans()))
            else:
                step = ("broadcast_reduce", i, op, axis, draw(st.sampled_from(["add", "sub", "mul"])))
        elif kind == "matmul" and x.ndim and prod(x.shape[:-1]) * 8 <= MAX_NUMEL:
            seed += 1
            step = ("matmul", i, draw(st.sampled_from([1, 3, 4, 8])), seed)
        elif kind == "contiguous":
            step = ("contiguous", i)
        if step is None:
            continue
        out = apply_step(step, pool, _fresh_np)
        if out.size > MAX_NUMEL or out.ndim > 4:
            continue
        steps.append(step)
        pool.append(np.array(out, dtype=np.float32))
    n_values = len(pool)
    outputs = [n_values - 1]
    if n_values > 1 and draw(st.booleans()):  # a second output realized in the same schedule
        other = draw(st.integers(0, n_values - 2))
        if other >= n_inputs:
            outputs.append(other)
    return shapes, steps, outputs


def _draw_movement(draw: st.DrawFn, i: int, x: np.ndarray) -> tuple | None:
    shape = x.shape
    kind = draw(st.sampled_from(["reshape", "permute", "pad", "shrink", "flip", "expand"]))
    if kind == "reshape":
        options = _factorizations(int(x.size), draw(st.integers(1, 3))) if x.size else []
        return ("movement", i, "reshape", draw(st.sampled_from(options))) if options else None
    if kind == "permute":
        return ("movement", i, "permute", tuple(draw(st.permutations(range(x.ndim)))))
    if kind == "pad":
        return ("movement", i, "pad", tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape))
    if kind == "shrink":
        bounds = []
        for s in shape:
            b = draw(st.integers(0, s - 1))
            bounds.append((b, draw(st.integers(b + 1, s))))
        return ("movement", i, "shrink", tuple(bounds))
    if kind == "flip":
        axes = tuple(a for a in range(x.ndim) if draw(st.booleans()))
        return ("movement", i, "flip", axes) if axes else None
    ones = [a for a, s in enumerate(shape) if s == 1]
    if not ones:
        return None
    new = tuple(draw(st.sampled_from([2, 3, 4])) if a in ones else s for a, s in enumerate(shape))
    return ("movement", i, "expand", new)


# ---------------------------------------------------------------------------------------------------------------
# running a recipe


def run_recipe(
    shapes: list[tuple[int, ...]], steps: list[tuple], outputs: list[int], device: str
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(tinycore results, numpy results) of the recipe, on fresh input buffers."""

    def fresh(shape: tuple[int, ...], seed: int) -> Tensor:
        return Tensor(_fresh_np(shape, seed), device=device)

    pool_t: list[Any] = [fresh(s, i) for i, s in enumerate(shapes)]
    pool_np: list[Any] = [_fresh_np(s, i) for i, s in enumerate(shapes)]
    for step in steps:
        pool_t.append(apply_step(step, pool_t, fresh))
        pool_np.append(apply_step(step, pool_np, _fresh_np))
    outs = [pool_t[i] for i in outputs]
    Tensor.realize(*outs)
    return [o.numpy() for o in outs], [np.asarray(pool_np[i], dtype=np.float32) for i in outputs]


def check_recipe(recipe: tuple, device: str) -> None:
    shapes, steps, outputs = recipe
    got, want = run_recipe(shapes, steps, outputs, device)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4, err_msg=f"optimized vs numpy: {steps}")
    clear_runner_cache()  # kernels are cached by AST: lower them again without optimizations
    with Context(NOOPT=1):
        noopt, _ = run_recipe(shapes, steps, outputs, device)
    clear_runner_cache()
    for g, n in zip(got, noopt):
        np.testing.assert_allclose(n, g, rtol=2e-4, atol=2e-4, err_msg=f"NOOPT vs optimized: {steps}")
    with Context(NO_MEMORY_PLANNER=1):
        unplanned, _ = run_recipe(shapes, steps, outputs, device)
    for g, u in zip(got, unplanned):
        np.testing.assert_array_equal(u, g, err_msg=f"memory planner off vs on: {steps}")


FUZZ = dict(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@settings(max_examples=60, **FUZZ)
@given(recipe=recipes())
def test_fuzz_graphs_python(recipe: tuple) -> None:
    check_recipe(recipe, "PYTHON")


@pytest.fixture(scope="module")
def clang() -> str:
    try:
        from tinycore.device import Device

        Device["CLANG"].compiler  # noqa: B018
    except Exception as error:  # noqa: BLE001
        pytest.skip(f"no C compiler (CLANG device unavailable: {type(error).__name__})")
    return "CLANG"


@settings(max_examples=12, suppress_health_check=[*FUZZ["suppress_health_check"], HealthCheck.function_scoped_fixture],
          deadline=None, database=None)  # fmt: skip
@given(recipe=recipes())
def test_fuzz_graphs_clang(clang: str, recipe: tuple) -> None:
    check_recipe(recipe, clang)


def test_planner_shares_memory_in_a_chain() -> None:
    """The mode switch really changes something: with the planner, internal buffers of a chain of realize points
    share one arena; without it, each has memory of its own. Results are identical."""
    from tinycore.engine.schedule_cache import clear_schedule_cache

    def build() -> Tensor:
        x = Tensor(_fresh_np((16, 16), 0), device="PYTHON")
        for _ in range(4):
            x = (x * 0.5 + 1).contiguous()
        return x.sum(1)

    clear_schedule_cache()
    planned = build().schedule()
    internal = [b for si in planned for b in si.bufs if b.base is not b]
    assert internal  # views of the planner's arena
    with Context(NO_MEMORY_PLANNER=1):
        unplanned = build().schedule()
    assert all(b.base is b for si in unplanned for b in si.bufs)
    from tinycore.engine.realize import run_schedule

    run_schedule(planned)
    run_schedule(unplanned)
    np.testing.assert_array_equal(planned[-1].bufs[0].numpy(), unplanned[-1].bufs[0].numpy())
