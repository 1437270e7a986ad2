"""A numpy reference evaluator of kernel ASTs (`docs/pipeline.md` section 2), and its tests.

The scheduler's output is checked numerically with it while (and after) `tinycore.codegen` lowers kernels for real:
`use_reference_kernels()` makes the realize engine run every kernel AST through `eval_kernel` instead of
`get_program`. Other test files load this module with `load_reference()` (the test folder is not a package).

The evaluator follows the AST contract literally: `LOAD(DEFINE_GLOBAL)` is a flat array, movement ops are numpy
views, `REDUCE_AXIS` keeps reduced axes, `STORE` writes through the target's movement ops (computed on an index
array), ALU ops use C semantics (IDIV/MOD truncate toward zero, integers wrap).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tinycore.dtype import dtypes
from tinycore.engine import realize
from tinycore.engine.exec_item import Runner
from tinycore.uop.ops import GroupOp, Ops, UOp, _threefry2x32


def load_reference() -> Any:
    """This module, loaded by path (for other test files)."""
    spec = importlib.util.spec_from_file_location("tinycore_test_schedule_ref", Path(__file__))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _np_dtype(dtype: Any) -> Any:
    if dtype.scalar() == dtypes.index:
        return np.dtype(np.int64)
    return dtypes.to_np(dtype)


def _threefry(x: np.ndarray, key: np.ndarray) -> np.ndarray:
    m32 = np.uint64(0xFFFFFFFF)
    x, key = np.broadcast_arrays(x.astype(np.uint64), key.astype(np.uint64))
    x0, x1 = (x & m32).astype(np.uint32), (x >> np.uint64(32)).astype(np.uint32)
    k0, k1 = (key & m32).astype(np.uint32), (key >> np.uint64(32)).astype(np.uint32)
    ks = (k0, k1, np.uint32(0x1BD11BDA) ^ k0 ^ k1)
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    with np.errstate(over="ignore"):
        x0, x1 = x0 + ks[0], x1 + ks[1]
        for i in range(5):
            for r in rotations[i % 2]:
                x0 = x0 + x1
                x1 = ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))) ^ x0
            x0 = x0 + ks[(i + 1) % 3]
            x1 = x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return (x1.astype(np.uint64) << np.uint64(32)) | x0.astype(np.uint64)


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    safe = np.where(b == 0, 1, b)
    q = a // safe
    q = q + ((a % safe != 0) & ((a < 0) != (safe < 0))).astype(q.dtype)
    return np.where(b == 0, 0, q)


def _alu(op: Ops, out_dtype: Any, vals: list[np.ndarray]) -> np.ndarray:
    a = vals[0]
    if op is Ops.NEG:
        return np.logical_not(a) if a.dtype == np.bool_ else np.negative(a)
    if op is Ops.EXP2:
        return np.exp2(a)
    if op is Ops.LOG2:
        return np.log2(a)
    if op is Ops.SIN:
        return np.sin(a)
    if op is Ops.SQRT:
        return np.sqrt(a)
    if op is Ops.RECIP:
        return np.reciprocal(a)
    if op is Ops.TRUNC:
        return np.trunc(a)
    if op is Ops.WHERE:
        return np.where(vals[0], vals[1], vals[2])
    if op is Ops.MULACC:
        return a * vals[1] + vals[2]
    b = vals[1]
    table = {
        Ops.ADD: np.add,
        Ops.SUB: np.subtract,
        Ops.MUL: np.multiply,
        Ops.MAX: np.maximum,
        Ops.CMPLT: np.less,
        Ops.CMPNE: np.not_equal,
        Ops.CMPEQ: np.equal,
        Ops.AND: np.bitwise_and,
        Ops.OR: np.bitwise_or,
        Ops.XOR: np.bitwise_xor,
        Ops.POW: np.power,
    }
    if op in table:
        if a.dtype == np.bool_ and op is Ops.ADD:
            return np.logical_or(a, b)
        return table[op](a, b)
    if op is Ops.FDIV:
        return np.true_divide(a, b)
    if op is Ops.IDIV:
        return _trunc_div(a, b) if a.dtype.kind in "iu" else np.trunc(a / b)
    if op is Ops.MOD:
        return np.fmod(a, np.where(b == 0, 1, b)) if a.dtype.kind in "iu" else np.fmod(a, b)
    if op is Ops.SHL:
        return np.left_shift(a, b.astype(a.dtype))
    if op is Ops.SHR:
        return np.right_shift(a, b.astype(a.dtype))
    if op is Ops.THREEFRY:
        return _threefry(a, b)
    raise NotImplementedError(f"reference evaluator: {op}")


def _movement(u: UOp, x: np.ndarray) -> np.ndarray:
    if u.op is Ops.RESHAPE:
        return x.reshape(u.arg)
    if u.op is Ops.EXPAND:
        return np.broadcast_to(x, u.arg)
    if u.op is Ops.PERMUTE:
        return x.transpose(u.arg)
    if u.op is Ops.PAD:
        return np.pad(x, u.arg)
    if u.op is Ops.SHRINK:
        return x[tuple(slice(b, e) for b, e in u.arg)]
    if u.op is Ops.FLIP:
        return np.flip(x, tuple(i for i, f in enumerate(u.arg) if f)) if any(u.arg) else x
    raise NotImplementedError(u.op)


def _reduce(op: Ops, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    if op is Ops.ADD:
        return np.sum(x, axis=axes, keepdims=True, dtype=x.dtype)
    if op is Ops.MUL:
        return np.prod(x, axis=axes, keepdims=True, dtype=x.dtype)
    initial = -np.inf if x.dtype.kind == "f" else (np.iinfo(x.dtype).min if x.dtype.kind in "iu" else False)
    return np.max(x, axis=axes, keepdims=True, initial=initial)


def eval_value(root: UOp, bufs: list[np.ndarray], var_vals: dict[str, int]) -> dict[UOp, np.ndarray]:
    """Values of every node below `root` (a kernel AST fragment) as numpy arrays."""
    vals: dict[UOp, Any] = {}
    for u in root.toposort():
        op = u.op
        src = [vals[s] for s in u.src if s in vals]
        if op is Ops.DEFINE_GLOBAL:
            vals[u] = bufs[u.arg]
        elif op is Ops.LOAD:
            vals[u] = src[0]
        elif op is Ops.CONST:
            vals[u] = np.array(u.arg, dtype=_np_dtype(u.dtype))
        elif op is Ops.IOTA:
            vals[u] = np.arange(u.arg, dtype=_np_dtype(u.dtype))
        elif op is Ops.DEFINE_VAR:
            vals[u] = np.array(var_vals[u.arg[0]], dtype=_np_dtype(u.dtype))
        elif op in GroupOp.Movement:
            vals[u] = _movement(u, src[0])
        elif op is Ops.REDUCE_AXIS:
            vals[u] = _reduce(u.arg[0], src[0], u.arg[1])
        elif op is Ops.CAST:
            with np.errstate(all="ignore"):
                vals[u] = src[0].astype(_np_dtype(u.dtype))
        elif op is Ops.BITCAST:
            vals[u] = np.ascontiguousarray(src[0]).view(_np_dtype(u.dtype))
        elif op in GroupOp.ALU:
            with np.errstate(all="ignore"):
                out = _alu(op, u.dtype, src)
            vals[u] = np.asarray(out).astype(_np_dtype(u.dtype), copy=False)
        elif op in (Ops.SINK, Ops.STORE, Ops.DEVICE):
            continue
        else:
            raise NotImplementedError(f"reference evaluator: {op} in a kernel AST")
    return vals


def _target_indices(target: UOp) -> tuple[int, np.ndarray]:
    """(DEFINE_GLOBAL index, flat element index of every position of the target view)."""
    chain = []
    node = target
    while node.op in GroupOp.Movement:
        chain.append(node)
        node = node.src[0]
    assert node.op is Ops.DEFINE_GLOBAL, f"STORE target must be movement ops over a DEFINE_GLOBAL, got {node.op}"
    idx = np.arange(node.dtype.size, dtype=np.int64)
    for m in reversed(chain):
        assert m.op is not Ops.PAD, "STORE target can't be padded"
        idx = _movement(m, idx)
    return node.arg, idx


def eval_kernel(ast: UOp, raw: list[memoryview], var_vals: dict[str, int]) -> None:
    """Run kernel `ast` on raw buffer memory (zero-copy memoryviews) with numpy."""
    assert ast.op is Ops.SINK and all(s.op is Ops.STORE for s in ast.src), "a kernel AST is a SINK of STOREs"
    globals_ = {u.arg: u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}
    arrays = [np.empty(0)] * len(raw)
    for i, dg in globals_.items():
        arrays[i] = np.frombuffer(raw[i], dtype=_np_dtype(dg.dtype.base))[: dg.dtype.size]
    results = []
    for store in ast.src:
        target, value = store.src
        vals = eval_value(value, arrays, var_vals)
        results.append((target, np.array(vals[value])))  # computed before any store: reads see old contents
    for target, value in results:
        i, idx = _target_indices(target)
        assert value.shape == idx.shape, f"STORE of shape {value.shape} into a target of shape {idx.shape}"
        arrays[i][idx.reshape(-1)] = value.reshape(-1)


class ReferenceRunner(Runner):
    """Runs a kernel AST with `eval_kernel` (counts its calls in `calls`)."""

    def __init__(self, ast: UOp, device: str):
        super().__init__(f"ref_{len(ast.toposort())}", device)
        self.ast, self.calls = ast, 0

    def __call__(self, bufs: list[Any], var_vals: dict[str, int], wait: bool = False) -> float | None:
        self.calls += 1
        eval_kernel(self.ast, [b.allocator.as_buffer(b._buf) for b in bufs], var_vals)
        return 0.0 if wait else None


@contextlib.contextmanager
def use_reference_kernels() -> Iterator[list[ReferenceRunner]]:
    """Make the realize engine build `ReferenceRunner`s instead of calling `get_program`; yields the runners made."""
    made: list[ReferenceRunner] = []

    def compile_kernel(ast: UOp, device: str) -> ReferenceRunner:
        runner = ReferenceRunner(ast, device)
        made.append(runner)
        return runner

    saved = realize._compile_kernel
    realize.clear_runner_cache()
    realize._compile_kernel = compile_kernel  # type: ignore[assignment]
    try:
        yield made
    finally:
        realize._compile_kernel = saved  # type: ignore[assignment]
        realize.clear_runner_cache()


# ---------------------------------------------------------------------------------------------------------------
# tests of the evaluator itself


def _dg(i: int, n: int, dtype: Any = dtypes.float) -> UOp:
    return UOp.define_global(i, dtype, n)


def test_eval_kernel_elementwise_and_broadcast_const() -> None:
    out, a = np.zeros(4, np.float32), np.arange(4, dtype=np.float32)
    value = UOp(Ops.LOAD, dtypes.float, (_dg(1, 4),)) * UOp.const(dtypes.float, 2.0).reshape((1,)).expand((4,))
    eval_kernel(UOp.sink(UOp(Ops.STORE, dtypes.void, (_dg(0, 4), value))), [out.data, a.data], {})
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_eval_kernel_store_through_a_view_and_reduce() -> None:
    out, a = np.zeros(6, np.float32), np.arange(6, dtype=np.float32)
    loaded = UOp(Ops.LOAD, dtypes.float, (_dg(1, 6),)).reshape((2, 3))
    value = loaded.r(Ops.ADD, (1,))  # (2, 1)
    target = _dg(0, 6).reshape((3, 2)).shrink(((0, 1), (0, 2))).permute((1, 0))  # (2, 1): elements 0 and 1
    eval_kernel(UOp.sink(UOp(Ops.STORE, dtypes.void, (target, value))), [out.data, a.data], {})
    assert out.tolist() == [3.0, 12.0, 0.0, 0.0, 0.0, 0.0]


def test_eval_c_semantics() -> None:
    a, b = np.array([-7, 7], np.int32), np.array([2, -2], np.int32)
    assert _alu(Ops.IDIV, dtypes.int32, [a, b]).tolist() == [-3, -3]
    assert _alu(Ops.MOD, dtypes.int32, [a, b]).tolist() == [-1, 1]


def test_threefry_matches_the_scalar_definition() -> None:
    xs = np.array([0, 1, 2**40 + 5], dtype=np.uint64)
    key = np.array(1234567 << 32, dtype=np.uint64)
    assert _threefry(xs, key).tolist() == [_threefry2x32(int(x), int(key)) for x in xs]


def test_pad_is_zero_and_math_is_float() -> None:
    vals = eval_value(UOp.const(dtypes.float, 1.0).reshape((1,)).pad(((1, 1),)), [], {})
    assert [v.tolist() for v in vals.values()][-1] == [0.0, 1.0, 0.0]
    assert math.isclose(_alu(Ops.EXP2, dtypes.float, [np.float32(3.0)]), 8.0)


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
