"""Deferred eager ops (`tinycore.tensor._DeferredOp`, `_DeferredBuffer`): an op of a tensor and a Python scalar on a
chain with an eager schedule-cache key is not built as a UOp until something reads the tensor's `uop`, and a warm
realize of such a chain runs its cached schedule without building it; the result's BUFFER uop is made on first read.

Each test compares a deferred computation with numpy, or with the same computation forced through the built graph
(reading `.uop` before realizing builds the nodes and takes the general path), so a stale or wrong fast path fails.
Nothing here is timed."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from test_eager_chain_key import chain, values  # the peer benchmark's chain and its inputs

import tinycore.frontend.tensor as tensor_module
from tinycore.dtype import dtypes
from tinycore.engine.realized import buffer_of
from tinycore.engine.schedule_cache import clear_schedule_cache, schedule_stats
from tinycore.helpers import GlobalCounters
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops, UOp


def expected(seed: int, n: int = 8) -> np.ndarray:
    return chain(values(seed).astype(np.float64), n)


@pytest.fixture(autouse=True)
def _no_autograd_garbage() -> None:
    """Collect tensors that earlier tests left in reference cycles: while a tensor that requires grad is alive, the
    eager fast path builds graphs (autograd may need them), which these tests check it does not."""
    gc.collect()


def warm(x: Tensor, build=chain) -> None:  # noqa: ANN001 - a callable of one tensor
    """Realize `build(x)` until its chain has a cached schedule (the first build meets new scalar operands)."""
    for _ in range(3):
        build(x).realize()


def is_deferred_op(t: Tensor) -> bool:
    return type(t._deferred) is tensor_module._DeferredOp


def built(t: Tensor) -> Tensor:
    """`t` with its graph built (the general realize path from then on)."""
    assert isinstance(t.uop, UOp)
    return t


def test_a_warm_chain_runs_without_building_its_nodes(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x = Tensor(values(0), device=device).realize()
    warm(x)
    builds = []
    real_build = tensor_module._build_deferred
    monkeypatch.setattr(tensor_module, "_build_deferred", lambda d: builds.append(d) or real_build(d))
    y = chain(x)
    assert is_deferred_op(y) and y.dtype == dtypes.float and y.shape == (16,)
    schedule_stats.reset()
    GlobalCounters.reset()
    y.realize()
    assert builds == [] and schedule_stats.hits == 1 and GlobalCounters.kernel_count == 1
    assert type(y._deferred) is tensor_module._DeferredBuffer
    np.testing.assert_allclose(y.numpy(), expected(0), rtol=1e-5, atol=1e-6)
    assert builds == []  # reading the value copies its buffer out: still no uop
    assert y.uop.op is Ops.BUFFER and len(builds) == 1 and buffer_of(y.uop) is not buffer_of(x.uop)


def test_the_built_graph_is_the_one_built_at_once(device: str) -> None:
    x = Tensor(values(1), device=device).realize()
    x * 2.0 + 1.5  # meets the scalar operands (the first op with a new scalar takes the general path)
    deferred = x * 2.0 + 1.5
    assert is_deferred_op(deferred)
    operand_two = (x * 2.0).uop.src[1]  # built now: the constant operand
    first = UOp(Ops.MUL, dtypes.float, (x.uop, operand_two))
    assert deferred.uop.src[0] is first  # hash-consed: the same node as building it directly
    assert (x * 2.0 + 1.5).uop is deferred.uop
    assert deferred.uop.chain_key is not None  # it keeps its schedule-cache key


def test_results_are_fresh_buffers_and_correct_every_call(device: str) -> None:
    x = Tensor(values(2), device=device).realize()
    warm(x)
    outs = [chain(x).realize() for _ in range(3)]
    assert len({id(buffer_of(o.uop)) for o in outs}) == 3
    for out in outs:
        np.testing.assert_allclose(out.numpy(), expected(2), rtol=1e-5, atol=1e-6)


def test_other_inputs_of_the_same_structure_read_their_own_buffer(device: str) -> None:
    inputs = [Tensor(values(seed), device=device).realize() for seed in range(3, 6)]
    warm(inputs[0])
    for seed, x in zip(range(3, 6), inputs):
        np.testing.assert_allclose(chain(x).realize().numpy(), expected(seed), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "build",
    [
        lambda t: t * 2.0 + 1.0,
        lambda t: 1.0 - t * 2.0,  # reversed operand
        lambda t: (t * 2.0 < 1.0) * 1.0,  # bool, then promoted: the general path
        lambda t: t * 2.0 < 0.5,  # a bool result, deferred
        lambda t: (t + 1.0) * (t - 1.0),  # a pair of deferred chains over one input
        lambda t: t * 3.0 + t,  # a deferred chain and its input
    ],
)
def test_deferred_and_built_paths_agree(device: str, build) -> None:  # noqa: ANN001
    x = Tensor(values(6), device=device).realize()
    for _ in range(3):
        fast = build(x).realize().numpy()
        slow = built(build(x)).realize().numpy()
        np.testing.assert_array_equal(fast, slow)
        assert fast.dtype.kind == build(values(6)).dtype.kind


@pytest.mark.parametrize("op", ["lt", "gt", "eq", "ne", "mul", "add", "rsub"])
def test_ops_on_values_without_a_chain_key(device: str, op: str) -> None:
    """Scalar ops on a value that is not a keyed chain (here a view) are built at once, with the right dtype."""
    base = values(19, 32)
    builds = {
        "lt": lambda t: t < 0.5,
        "gt": lambda t: t > 0.5,
        "eq": lambda t: t == 0.5,
        "ne": lambda t: t != 0.5,
        "mul": lambda t: t * 0.5,
        "add": lambda t: t + 0.5,
        "rsub": lambda t: 0.5 - t,
    }
    x = Tensor(base, device=device).realize()[3:19]
    for _ in range(3):  # the first call meets the scalar, later ones take the fast path
        out = builds[op](x)
        assert not is_deferred_op(out)
        reference = builds[op](base[3:19])
        assert out.dtype == (dtypes.bool if reference.dtype == np.bool_ else dtypes.float)
        np.testing.assert_array_equal(out.numpy(), reference)


def test_dtypes_and_shapes_get_their_own_schedule(device: str) -> None:
    floats = Tensor(values(7).reshape(4, 4), device=device).realize()
    flat = Tensor(values(7), device=device).realize()
    ints = Tensor(np.arange(16, dtype=np.int32).reshape(4, 4), device=device).realize()
    for _ in range(3):
        out = (floats * 2.0 + 1.0).realize()
        assert out.shape == (4, 4) and out.uop.shape == (4, 4)
        np.testing.assert_allclose(out.numpy(), values(7).reshape(4, 4) * 2 + 1, rtol=1e-6)
        out = (flat * 2.0 + 1.0).realize()
        assert out.shape == (16,)
        np.testing.assert_allclose(out.numpy(), values(7) * 2 + 1, rtol=1e-6)
        out = (ints * 2 + 1).realize()
        assert out.dtype == dtypes.int32
        np.testing.assert_array_equal(out.numpy(), np.arange(16).reshape(4, 4) * 2 + 1)


def test_a_repeated_step_tells_int_float_and_promoting_operands_apart(device: str) -> None:
    """The second op of a chain is found by (chain, type of the scalar, scalar) once seen: ``* 2`` and ``* 2.0``
    on an int chain are different ops (the float one promotes), and a float chain's ``* 2`` is its own step too."""
    ints = Tensor(np.arange(6, dtype=np.int32), device=device).realize()
    floats = Tensor(np.arange(6, dtype=np.float32), device=device).realize()
    base = np.arange(6)
    for _ in range(3):
        by_int = ((ints + 1) * 2).realize()
        by_float = ((ints + 1) * 2.0).realize()
        float_chain = ((floats + 1) * 2).realize()
        assert by_int.dtype == dtypes.int32 and by_float.dtype == dtypes.float32
        np.testing.assert_array_equal(by_int.numpy(), (base + 1) * 2)
        np.testing.assert_array_equal(by_float.numpy(), (base + 1) * 2.0)
        np.testing.assert_array_equal(float_chain.numpy(), (base + 1.0) * 2)
        assert is_deferred_op((floats + 1) * 2)


def test_a_view_input_is_not_read_as_its_whole_buffer(device: str) -> None:
    base = Tensor(values(8, 32), device=device).realize()
    view = base[4:20]
    for _ in range(3):
        np.testing.assert_allclose((view * 2.0 + 1.0).numpy(), values(8, 32)[4:20] * 2 + 1, rtol=1e-6)


def test_writes_to_the_input_are_read(device: str) -> None:
    x = Tensor(values(9), device=device).realize()
    warm(x)
    before = chain(x)  # deferred before the write, read after it: the old contents (PyTorch's order)
    x.assign(Tensor(values(10), device=device)).realize()
    np.testing.assert_allclose(before.numpy(), expected(9), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(chain(x).numpy(), expected(10), rtol=1e-5, atol=1e-6)


def test_a_realized_parent_of_a_deferred_child(device: str) -> None:
    x = Tensor(values(11), device=device).realize()
    warm(x, lambda t: t * 2.0)
    warm(x, lambda t: t * 2.0 + 1.0)
    parent = x * 2.0
    child = parent + 1.0
    parent.realize()  # extended: built, so the realized table serves the child's graph
    GlobalCounters.reset()
    np.testing.assert_allclose(child.numpy(), values(11) * 2 + 1, rtol=1e-6)
    assert GlobalCounters.kernel_count == 1
    assert child.uop.op is not Ops.ADD  # the child's value is a buffer now
    np.testing.assert_allclose(parent.numpy(), values(11) * 2, rtol=1e-6)
    # the parent's stale value is not read after the input changes
    other_child = parent * 3.0
    x.assign(Tensor(values(12), device=device)).realize()
    np.testing.assert_allclose(other_child.numpy(), values(11) * 6, rtol=1e-6)  # built on the realized buffer


def test_a_written_leaf_is_forgotten_with_its_tensor(device: str) -> None:
    """A leaf written in place under a deferred chain is remembered weakly: once its tensors are gone, a new leaf
    (which may reuse its memory, and so its id) keeps the fast path. Kept by id, such reuse made later chains take
    the general path at random (a flaky test)."""
    import gc
    import weakref

    x = Tensor(values(17), device=device).realize()
    warm(x, lambda t: t * 2.0)
    pending = x * 2.0  # a deferred chain over x's buffer, alive across the write below
    assert is_deferred_op(pending)
    leaf = weakref.ref(pending._deferred.leaf)
    x.assign(Tensor(values(18), device=device)).realize()
    assert id(leaf()) in tensor_module._written_leaves
    count = len(tensor_module._written_leaves)
    np.testing.assert_allclose(pending.numpy(), values(17) * 2, rtol=1e-6)  # the old contents, computed first
    del x, pending
    gc.collect()
    assert leaf() is None and len(tensor_module._written_leaves) == count - 1  # forgotten with it


def test_setting_uop_replaces_a_deferred_value(device: str) -> None:
    x = Tensor(values(13), device=device).realize()
    y = x * 2.0
    assert is_deferred_op(y)
    y.uop = Tensor(values(14), device=device).realize().uop
    assert y._deferred is None
    np.testing.assert_allclose((y + 1.0).numpy(), values(14) + 1, rtol=1e-6)


def test_weights_that_need_gradients_leave_other_chains_on_the_fast_path(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model's parameters (requires_grad) alive elsewhere must not send every eager op down the slow path (it
    built the graph and searched it for autograd history: 4x the host time of ``x + 1``)."""
    w = Tensor(values(15), device=device, requires_grad=True).realize()
    x = Tensor(values(0), device=device).realize()
    warm(x)
    builds = []
    real_build = tensor_module._build_deferred
    monkeypatch.setattr(tensor_module, "_build_deferred", lambda d: builds.append(d) or real_build(d))
    y = chain(x).realize()
    assert builds == [] and type(y._deferred) is tensor_module._DeferredBuffer
    np.testing.assert_allclose(y.numpy(), expected(0), rtol=1e-5, atol=1e-6)
    assert w.requires_grad  # still alive: the case this is about


def test_gradients_flow_through_deferred_ops(device: str) -> None:
    w = Tensor(values(15), device=device, requires_grad=True)
    w.realize()
    for _ in range(3):
        w.grad = None
        y = (w * 3.0 + 1.0) * 2.0
        y.realize()  # realized before backward: its history is kept for the gradient
        y.sum().backward()
        np.testing.assert_allclose(w.grad.numpy(), np.full(16, 6.0), rtol=1e-6)


def test_a_cleared_cache_schedules_the_chain_again(device: str) -> None:
    x = Tensor(values(16), device=device).realize()
    warm(x)
    clear_schedule_cache()
    schedule_stats.reset()
    np.testing.assert_allclose(chain(x).realize().numpy(), expected(16), rtol=1e-5, atol=1e-6)
    assert schedule_stats.misses == 1
    np.testing.assert_allclose(chain(x).realize().numpy(), expected(16), rtol=1e-5, atol=1e-6)
    assert schedule_stats.hits == 1 and schedule_stats.misses == 1


def test_a_long_deferred_chain_builds_without_recursion(device: str) -> None:
    x = Tensor(values(17), device=device).realize()
    y = x
    for _ in range(3000):
        y = y + 1.0
    assert is_deferred_op(y)
    node = y.uop
    assert node.op is Ops.ADD and node.depth >= 3000


def test_deferred_values_keep_no_input_alive(device: str) -> None:
    x = Tensor(values(18), device=device).realize()
    warm(x)
    out = chain(x).realize()
    input_buffer = weakref.ref(buffer_of(x.uop))
    del x
    gc.collect()
    assert input_buffer() is None
    result_buffer = weakref.ref(out._deferred.buffer)
    np.testing.assert_allclose(out.numpy(), expected(18), rtol=1e-5, atol=1e-6)
    del out
    gc.collect()
    assert result_buffer() is None


# a leaf that reshapes its buffer: every realized tensor of two or more dimensions


@pytest.mark.parametrize("shape", [(4, 4), (2, 2, 4), (16, 1)])
def test_a_tensor_of_several_dimensions_is_a_chain_leaf(device: str, shape: tuple[int, ...]) -> None:
    x = Tensor(values(20).reshape(shape), device=device).realize()
    assert x.uop.op is Ops.RESHAPE and x.uop.src[0].op is Ops.BUFFER
    warm(x)
    y = chain(x)
    assert is_deferred_op(y) and y.shape == shape
    schedule_stats.reset()
    GlobalCounters.reset()
    y.realize()
    assert schedule_stats.hits == 1 and GlobalCounters.kernel_count == 1
    assert type(y._deferred) is tensor_module._DeferredBuffer
    np.testing.assert_allclose(y.numpy(), expected(20).reshape(shape), rtol=1e-5, atol=1e-6)
    assert y.uop.shape == shape and buffer_of(y.uop.src[0]) is not buffer_of(x.uop.src[0])
    z = x * x  # a tensor-tensor op over the same leaf gets its key too
    assert z.uop.chain_key is not None and z.uop.chain_key[1] is x.uop
    np.testing.assert_allclose(z.numpy(), values(20).reshape(shape) ** 2, rtol=1e-6)


def test_reshaped_leaves_of_one_buffer_size_keep_their_own_schedules(device: str) -> None:
    # (4, 4) and (2, 8) views of 16-element buffers: one structure each, each result in its own shape
    a = Tensor(values(21).reshape(4, 4), device=device).realize()
    b = Tensor(values(22).reshape(2, 8), device=device).realize()
    for _ in range(3):
        ra, rb = (a * 3.0 + 1.0).realize(), (b * 3.0 + 1.0).realize()
        assert ra.shape == (4, 4) and rb.shape == (2, 8)
        np.testing.assert_allclose(ra.numpy(), values(21).reshape(4, 4) * 3 + 1, rtol=1e-6)
        np.testing.assert_allclose(rb.numpy(), values(22).reshape(2, 8) * 3 + 1, rtol=1e-6)
    assert (a * 3.0).uop.chain_key[0] != (b * 3.0).uop.chain_key[0]


def test_writes_to_a_reshaped_leaf_are_read(device: str) -> None:
    x = Tensor(values(23).reshape(4, 4), device=device).realize()
    warm(x)
    before = chain(x)  # deferred before the write, read after it: the old contents (PyTorch's order)
    x.assign(Tensor(values(24).reshape(4, 4), device=device)).realize()
    np.testing.assert_allclose(before.numpy(), expected(23).reshape(4, 4), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(chain(x).numpy(), expected(24).reshape(4, 4), rtol=1e-5, atol=1e-6)
    x[1:3] = 0.0  # a write through a view of the leaf's buffer
    want = expected(24).reshape(4, 4)
    want[1:3] = chain(np.zeros((2, 4)))
    np.testing.assert_allclose(chain(x).numpy(), want, rtol=1e-5, atol=1e-6)


def test_a_reshape_of_a_view_is_not_a_leaf(device: str) -> None:
    base = Tensor(values(25, 32), device=device).realize()
    view = base[4:20].reshape(4, 4)  # a RESHAPE over a SHRINK: its buffer is not read whole
    for _ in range(3):
        np.testing.assert_allclose((view * 2.0 + 1.0).numpy(), values(25, 32)[4:20].reshape(4, 4) * 2 + 1, rtol=1e-6)


# unary ops and casts on a chain keep its key: scalar ops after them are deferred too


@pytest.mark.parametrize(
    "name, build, reference",
    [
        ("exp", lambda t: t.exp() * 2.0 + 1.0, lambda a: np.exp(a) * 2 + 1),
        ("sqrt", lambda t: (t * t + 1.0).sqrt() - 0.5, lambda a: np.sqrt(a * a + 1) - 0.5),
        ("neg", lambda t: -(t * 3.0) + 2.0, lambda a: -(a * 3) + 2),
        ("log", lambda t: (t * t + 2.0).log() * 0.5, lambda a: np.log(a * a + 2) * 0.5),
        ("half", lambda t: (t * 2.0).cast(dtypes.float16) + 1.0, lambda a: (a * 2).astype(np.float16) + np.float16(1)),
        ("int", lambda t: (t * 10.0).cast(dtypes.int32) + 3, lambda a: (a * 10).astype(np.int32) + 3),
    ],
)
@pytest.mark.parametrize("shape", [(16,), (4, 4)])
def test_unary_ops_and_casts_keep_the_chain_deferred(device: str, name: str, build, reference, shape) -> None:  # noqa: ANN001
    data = values(30 + len(name)).reshape(shape)
    x = Tensor(data, device=device).realize()
    warm(x, build)
    y = build(x)
    assert is_deferred_op(y), name
    schedule_stats.reset()
    GlobalCounters.reset()
    y.realize()
    assert schedule_stats.hits == 1 and GlobalCounters.kernel_count == 1
    want = reference(data)
    got = y.numpy()
    assert got.dtype == want.dtype and got.shape == shape
    np.testing.assert_allclose(got, want, rtol=2e-3 if name == "half" else 1e-5, atol=1e-5)
    np.testing.assert_allclose(built(build(x)).numpy(), want, rtol=2e-3 if name == "half" else 1e-5, atol=1e-5)


def test_different_unary_ops_on_one_chain_keep_their_own_schedules(device: str) -> None:
    data = np.abs(values(40)) + 0.5
    x = Tensor(data, device=device).realize()
    ops = {"sqrt": (Tensor.sqrt, np.sqrt), "exp2": (Tensor.exp2, np.exp2), "log2": (Tensor.log2, np.log2),
           "reciprocal": (Tensor.reciprocal, np.reciprocal)}  # fmt: skip
    for _ in range(3):  # each op's chain, warm, reads its own cached schedule
        for fn, ref in ops.values():
            np.testing.assert_allclose((fn(x * 2.0) + 1.0).numpy(), ref(data * 2) + 1, rtol=1e-5)
    keys = {(fn(x * 2.0)).uop.chain_key[0] for fn, _ in ops.values()}
    assert len(keys) == len(ops)
