"""Core tier of the conformance kit: the device's memory, dtypes, ops, TinyJit and graph runner.

Every op result is compared with the same computation on the ``PYTHON`` reference device (core's numpy interpreter,
the oracle of the kit), so a plugin is checked against core's semantics rather than a second implementation's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tinycore.testkit.target import KitTarget, KitTargetFixture

REFERENCE = "PYTHON"


def _inputs(seed: int, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    """Float32 inputs in [-2, 2) (away from 0 where ops like log/sqrt take abs first)."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, size=shape).astype(np.float32) for shape in shapes]


# name -> (input shapes, op on Tensors, relative tolerance). Small shapes keep the interpreted reference fast;
# odd sizes (7, 13, 33) make vectorized and threaded kernels handle their tails.
OP_TABLE: dict[str, tuple[tuple[tuple[int, ...], ...], Callable, float]] = {
    "add_broadcast": (((7, 13), (13,)), lambda a, b: a + b, 1e-6),
    "mul_sub_chain": (((33,), (33,)), lambda a, b: (a * b - a) * 0.5 + b, 1e-6),
    "div": (((33,), (33,)), lambda a, b: a / (b.abs() + 0.5), 1e-6),
    "max_min_where": (((7, 13), (7, 13)), lambda a, b: (a > b).where(a.maximum(b), a.minimum(b)), 0.0),
    "exp_log": (((33,),), lambda a: a.exp() + (a.abs() + 0.1).log(), 1e-5),
    "sqrt_recip": (((33,),), lambda a: (a.abs() + 0.1).sqrt() + (a.abs() + 0.5).reciprocal(), 1e-5),
    "sin_cos": (((33,),), lambda a: a.sin() * a.cos(), 1e-5),
    "relu_sigmoid_tanh": (((33,),), lambda a: a.relu() + a.sigmoid() + a.tanh(), 1e-5),
    "sum_axis": (((7, 13),), lambda a: a.sum(axis=1), 1e-5),
    "sum_all": (((65, 33),), lambda a: a.sum(), 1e-5),
    "max_axis": (((7, 13),), lambda a: a.max(axis=0), 0.0),
    "mean_keepdim": (((7, 13),), lambda a: a.mean(axis=1, keepdim=True), 1e-5),
    "softmax": (((5, 17),), lambda a: a.softmax(-1), 1e-5),
    "matmul": (((9, 17), (17, 11)), lambda a, b: a @ b, 1e-5),
    "matmul_bias_relu": (((4, 8), (8, 6), (6,)), lambda a, b, c: (a @ b + c).relu(), 1e-5),
    "permute_contiguous": (((3, 5, 7),), lambda a: a.permute(2, 0, 1).contiguous() * 2, 0.0),
    "pad_shrink_flip": (((5, 6),), lambda a: a.pad(((1, 2), (0, 3))).flip(1)[1:6, 2:7] + 1, 0.0),
    "expand_reshape": (((1, 6),), lambda a: a.expand(4, 6).reshape(3, 8) * 3, 0.0),
    "conv2d": (((1, 2, 6, 6), (3, 2, 3, 3)), lambda x, w: x.conv2d(w, padding=1), 1e-5),
    "cumsum": (((2, 9),), lambda a: a.cumsum(1), 1e-5),
    "cast_int_roundtrip": (((33,),), lambda a: (a * 10).cast("int32").cast("float32"), 0.0),
    "argmax": (((7, 13),), lambda a: a.argmax(axis=1), 0.0),
}


class CoreTier(KitTargetFixture):
    """Allocation and copies, the dtype matrix, every op of ``OP_TABLE`` against the reference, TinyJit, graph."""

    def test_buffer_round_trips_bytes(self, target: KitTarget):
        target.require_available()
        from tinycore.device import Buffer
        from tinycore.dtype import dtypes

        for size in (1, 3, 17, 4096):
            data = np.arange(size, dtype=np.float32) * 1.5 - 7
            buffer = Buffer(target.family, size, dtypes.float32).allocate()
            buffer.copyin(memoryview(data.tobytes()))
            out = np.empty_like(data)
            buffer.copyout(memoryview(out).cast("B"))
            np.testing.assert_array_equal(out, data)

    def test_buffer_views_read_their_window(self, target: KitTarget):
        target.require_available()
        from tinycore.device import Buffer, Device
        from tinycore.dtype import dtypes

        if not Device[target.family].allocator.supports_offset:
            pytest.skip(f"{target.family}'s allocator declares no views by offset")
        data = np.arange(32, dtype=np.int32)
        base = Buffer(target.family, 32, dtypes.int32).allocate()
        base.copyin(memoryview(data.tobytes()))
        view = base.view(8, dtypes.int32, offset=4 * 10)
        out = np.empty(8, dtype=np.int32)
        view.copyout(memoryview(out).cast("B"))
        np.testing.assert_array_equal(out, data[10:18])

    def test_every_declared_dtype_round_trips(self, target: KitTarget):
        target.require_available()
        from tinycore.device import Device
        from tinycore.dtype import dtypes
        from tinycore.tensor import Tensor

        declared = Device[target.family].capabilities.dtypes
        assert declared, f"{target.family} declares no dtypes"
        for dtype in sorted(declared, key=lambda d: d.name):
            if dtype.fmt is None:  # no numpy twin (bfloat16): checked through casts by the op suites
                continue
            np_dtype = dtypes.to_np(dtype)
            data = (np.arange(-3, 6) % (2 if dtype.name == "bool" else 100)).astype(np_dtype)
            got = Tensor(data, device=target.family).numpy()
            assert got.dtype == np_dtype, f"{dtype}: came back as {got.dtype}"
            np.testing.assert_array_equal(got, data, err_msg=f"{dtype} did not round-trip")
            doubled = (Tensor(data, device=target.family) + Tensor(data, device=target.family)).numpy()
            reference = (Tensor(data, device=REFERENCE) + Tensor(data, device=REFERENCE)).numpy()
            np.testing.assert_array_equal(doubled, reference, err_msg=f"{dtype}: a + a differs from the reference")

    @pytest.mark.parametrize("op_name", sorted(OP_TABLE))
    def test_op_matches_the_reference_device(self, target: KitTarget, op_name: str):
        target.require_available()
        from tinycore.tensor import Tensor

        shapes, op, rtol = OP_TABLE[op_name]
        arrays = _inputs(len(op_name), *shapes)
        got = op(*(Tensor(array, device=target.family) for array in arrays)).numpy()
        want = op(*(Tensor(array, device=REFERENCE) for array in arrays)).numpy()
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, err_msg=f"{op_name} on {target.family}")

    def test_jit_replays_with_new_inputs(self, target: KitTarget):
        target.require_available()
        from tinycore.engine.jit import TinyJit
        from tinycore.tensor import Tensor

        weight = Tensor(_inputs(1, (8, 4))[0], device=target.family).realize()

        @TinyJit
        def step(x: Tensor) -> Tensor:
            return ((x @ weight).relu() * 2 + 1).sum(axis=1)

        for seed in range(4):
            (array,) = _inputs(seed, (3, 8))
            got = step(Tensor(array, device=target.family)).numpy()
            np.testing.assert_allclose(got, ((np.maximum(array @ weight.numpy(), 0)) * 2 + 1).sum(1), rtol=1e-5)
        assert step.captured is not None, "the third call must replay a captured program"

    def test_graph_runner_replays_a_chain_of_kernels(self, target: KitTarget):
        target.require_available()
        from tinycore.device import Device
        from tinycore.engine.graph_runner import GraphRunner
        from tinycore.engine.jit import TinyJit
        from tinycore.tensor import Tensor

        graph = Device[target.family].graph
        if graph is None:
            pytest.skip(f"{target.family} declares no graph runner")
        assert issubclass(graph, GraphRunner)

        @TinyJit
        def chain(x: Tensor) -> Tensor:
            for _ in range(5):
                x = (x * 2 + 1).contiguous().realize()
            return x

        for seed in range(4):
            (array,) = _inputs(seed, (16,))
            expected = array.copy()
            for _ in range(5):
                expected = expected * 2 + 1
            np.testing.assert_allclose(chain(Tensor(array, device=target.family)).numpy(), expected, rtol=1e-6)
        assert chain.captured is not None and len(chain.captured.graphs) >= 1, "the replay must go through the graph"
