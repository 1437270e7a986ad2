"""Random kernel ASTs (elementwise, movement, reduce, matmul) must give numpy's result with no opts (NOOPT), with the
heuristics' opts and with random legal opts: on PYTHON (GPU style, CPU style with vectors, CPU style without) and
on CLANG when a C compiler exists. Bounded: a few dozen examples each, no deadline."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinycore.codegen import KernelOptError, get_kernel, get_program
from tinycore.device import Buffer
from tinycore.dtype import dtypes
from tinycore.engine.exec_item import CompiledRunner
from tinycore.engine.search import actions
from tinycore.runtime.python_device import PythonRenderer
from tinycore.uop.ops import Ops, UOp


class LoopRenderer(PythonRenderer):
    has_local = False
    has_shared = False
    threads = 2


class ScalarLoopRenderer(LoopRenderer):
    supports_float4 = False


class Twin:
    """A kernel AST value and its numpy value, built in lockstep."""

    def __init__(self, u: UOp, a: np.ndarray):
        self.u, self.a = u, a

    def reshape(self, s: tuple[int, ...]) -> Twin:
        return Twin(self.u.reshape(s), self.a.reshape(s))

    def permute(self, o: tuple[int, ...]) -> Twin:
        return Twin(self.u.permute(o), self.a.transpose(o))

    def pad(self, p: tuple[tuple[int, int], ...]) -> Twin:
        return Twin(self.u.pad(p), np.pad(self.a, p))

    def shrink(self, b: tuple[tuple[int, int], ...]) -> Twin:
        return Twin(self.u.shrink(b), self.a[tuple(slice(s, e) for s, e in b)])

    def flip(self, f: tuple[bool, ...]) -> Twin:
        return Twin(self.u.flip(f), self.a[tuple(slice(None, None, -1) if x else slice(None) for x in f)])

    def expand(self, s: tuple[int, ...]) -> Twin:
        return Twin(self.u.expand(s), np.broadcast_to(self.a, s))

    def alu(self, op: Ops, other: Twin) -> Twin:
        fn = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.SUB: np.subtract}[op]
        return Twin(self.u.alu(op, other.u), fn(self.a, other.a).astype(self.a.dtype))

    def where_less(self, other: Twin) -> Twin:
        return Twin((self.u < other.u).where(self.u, other.u), np.where(self.a < other.a, self.a, other.a))

    def r(self, op: Ops, axes: tuple[int, ...]) -> Twin:
        fn = {Ops.ADD: np.sum, Ops.MAX: np.max}[op]
        return Twin(self.u.r(op, axes), fn(self.a.astype(np.float64), axis=axes, keepdims=True).astype(self.a.dtype))


SIZES = st.sampled_from([1, 2, 3, 4, 5, 8, 12, 16])


@st.composite
def movement(draw: st.DrawFn, t: Twin) -> Twin:
    for _ in range(draw(st.integers(0, 3))):
        shape = t.a.shape
        kind = draw(st.sampled_from(["permute", "pad", "shrink", "flip", "expand"]))
        if kind == "permute":
            t = t.permute(tuple(draw(st.permutations(range(len(shape))))))
        elif kind == "pad":
            t = t.pad(tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape))
        elif kind == "shrink":
            bounds = []
            for s in shape:
                lo = draw(st.integers(0, max(0, s - 1)))
                bounds.append((lo, draw(st.integers(lo + 1, s))))
            t = t.shrink(tuple(bounds))
        elif kind == "flip":
            t = t.flip(tuple(draw(st.booleans()) for _ in shape))
        elif 1 in shape:
            t = t.expand(tuple(draw(st.sampled_from([1, 3, 4])) if s == 1 else s for s in shape))
    return t


@st.composite
def kernels(draw: st.DrawFn) -> tuple[UOp, list[np.ndarray], np.ndarray]:
    """(kernel AST storing into buffer 0, input arrays for buffers 1.., expected output)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["elementwise", "movement", "reduce", "matmul"]))
    inputs: list[np.ndarray] = []

    def leaf(shape: tuple[int, ...], dt=np.float32) -> Twin:
        a = (rng.standard_normal(shape) * 4).astype(dt)
        inputs.append(a.ravel())
        d = dtypes.from_np(a.dtype)
        return Twin(UOp(Ops.LOAD, d, (UOp.define_global(len(inputs), d, a.size),)), a.ravel()).reshape(shape)

    if kind == "matmul":
        m, k, n = draw(SIZES), draw(SIZES), draw(SIZES)
        a, b = leaf((m, k)), leaf((k, n))
        x = a.reshape((m, k, 1)).expand((m, k, n)).alu(Ops.MUL, b.reshape((1, k, n)).expand((m, k, n)))
        out = x.r(Ops.ADD, (1,))
        if draw(st.booleans()):  # an elementwise epilogue
            out = out.alu(
                Ops.MAX,
                Twin(
                    UOp.const(dtypes.float, 0.0).reshape((1, 1, 1)).expand(out.a.shape),
                    np.zeros(out.a.shape, np.float32),
                ),
            )
    else:
        shape = tuple(draw(SIZES) for _ in range(draw(st.integers(1, 3))))
        dt = draw(st.sampled_from([np.float32, np.float32, np.int32]))
        x = leaf(shape, dt)
        if kind in ("movement", "reduce"):
            x = draw(movement(x))
        y = leaf(x.a.shape, dt)
        op = draw(st.sampled_from([Ops.ADD, Ops.MUL, Ops.MAX, Ops.SUB, None]))
        out = x.where_less(y) if op is None else x.alu(op, y)
        if kind == "reduce":
            axes = tuple(sorted(draw(st.sets(st.integers(0, len(out.a.shape) - 1), min_size=1))))
            out = out.r(draw(st.sampled_from([Ops.ADD, Ops.MAX])), axes)
    shape = out.a.shape
    dst = UOp.define_global(0, out.u.dtype, max(1, int(np.prod(shape))))
    return UOp.sink(dst.reshape(shape).store(out.u)), inputs, np.ascontiguousarray(out.a).ravel()


def run(ast: UOp, inputs: list[np.ndarray], renderer, opts, device: str) -> np.ndarray:
    out = next(u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL and u.arg == 0)
    p = get_program(ast, renderer, opts)
    bufs = [Buffer(device, out.dtype.size, out.dtype.base).copyin(bytes(out.dtype.size * out.dtype.base.itemsize))]
    bufs += [Buffer(device, a.size, dtypes.from_np(a.dtype)).copyin(np.ascontiguousarray(a).tobytes()) for a in inputs]
    CompiledRunner(p)(bufs, {})
    return bufs[0].numpy()


def check(got: np.ndarray, want: np.ndarray, what: str) -> None:
    if want.dtype.kind == "f":
        scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
        np.testing.assert_allclose(got[: want.size], want, rtol=1e-4, atol=1e-4 * scale, err_msg=what)
    else:
        np.testing.assert_array_equal(got[: want.size], want, err_msg=what)


def random_opts(draw: st.DrawFn, ast: UOp, renderer) -> list:
    k = get_kernel(ast, renderer)
    for _ in range(draw(st.integers(1, 4))):
        acts = actions(k)
        if not acts:
            break
        kind = draw(st.sampled_from(sorted({a.op for a in acts}, key=lambda o: o.name)))
        opt = draw(st.sampled_from([a for a in acts if a.op is kind]))
        try:
            k.apply_opt(opt)
        except KernelOptError:
            pass
    return list(k.applied_opts)


def fuzz_one(data: st.DataObject, renderer, device: str) -> None:
    ast, inputs, want = data.draw(kernels())
    check(run(ast, inputs, renderer, [], device), want, "no opts")
    check(run(ast, inputs, renderer, None, device), want, "heuristics")
    opts = random_opts(data.draw, ast, renderer)
    check(run(ast, inputs, renderer, opts, device), want, f"random opts {opts}")


FUZZ = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@pytest.mark.parametrize(
    "renderer", [PythonRenderer(), LoopRenderer(), ScalarLoopRenderer()], ids=["gpu", "cpu-vector", "cpu-scalar"]
)
@FUZZ
@given(data=st.data())
def test_fuzz_python(renderer, data):
    fuzz_one(data, renderer, "PYTHON")


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_fuzz_clang(clang, data):
    fuzz_one(data, clang.renderer, "CLANG")
