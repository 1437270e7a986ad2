"""TinyJit: capture, replay, input swapping, variables, pruning, memory planning, batching, errors, pickling."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tinycore import Tensor, TinyJit, Variable
from tinycore.device import Device
from tinycore.dtype import dtypes
from tinycore.engine.jit import CapturedJit, jit_stats
from tinycore.errors import JitError
from tinycore.helpers import Context, GlobalCounters


def _device_or_skip(name: str) -> str:
    try:
        Device[name]
    except Exception as error:  # noqa: BLE001 - any failure to open means "not here"
        pytest.skip(f"no C compiler ({name} unavailable: {type(error).__name__})")
    return name


@pytest.fixture(params=["PYTHON", "CLANG"])
def dev(request: pytest.FixtureRequest) -> str:
    return _device_or_skip(request.param)


def rand(*shape: int, dev: str, seed: int | None = None) -> tuple[Tensor, np.ndarray]:
    arr = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return Tensor(arr, device=dev), arr


# ---------------------------------------------------------------------------------------------------------------
# the state machine and replay


def test_call0_eager_call1_captures_then_replays(dev: str) -> None:
    calls = []

    @TinyJit
    def f(a: Tensor, b: Tensor) -> Tensor:
        calls.append(1)
        return (a + b).relu() * 2

    captures = jit_stats.captures
    for i in range(5):
        (a, an), (b, bn) = rand(8, dev=dev, seed=i), rand(8, dev=dev, seed=100 + i)
        out = f(a, b)
        np.testing.assert_allclose(out.numpy(), np.maximum(an + bn, 0) * 2, rtol=1e-6)
        assert f.cnt == i + 1
        assert (f.captured is None) == (i == 0)
    assert len(calls) == 2  # the Python body ran for call 0 and the capture only
    assert jit_stats.captures == captures + 1


def test_jit_off_always_eager(dev: str) -> None:
    calls = []

    @TinyJit
    def f(a: Tensor) -> Tensor:
        calls.append(1)
        return a * 3

    with Context(JIT=0):
        for i in range(4):
            a, an = rand(4, dev=dev, seed=i)
            np.testing.assert_allclose(f(a).numpy(), an * 3, rtol=1e-6)
    assert len(calls) == 4 and f.captured is None


def test_keyword_list_dict_inputs(dev: str) -> None:
    @TinyJit
    def f(xs: list, d: dict, *, scale: Tensor) -> Tensor:
        return (xs[0] * xs[1] + d["k"]) * scale

    for i in range(4):
        (a, an), (b, bn), (c, cn), (s, sn) = (rand(3, dev=dev, seed=i * 4 + k) for k in range(4))
        out = f([a, b], {"k": c}, scale=s)
        np.testing.assert_allclose(out.numpy(), (an * bn + cn) * sn, rtol=1e-5)


def test_method_and_multiple_outputs(dev: str) -> None:
    class Model:
        def __init__(self) -> None:
            self.w = Tensor(np.arange(4, dtype=np.float32), device=dev).realize()

        @TinyJit
        def __call__(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor], None]:
            y = x * self.w
            return y, {"sum": y.sum()}, None

    m = Model()
    for i in range(4):
        x, xn = rand(4, dev=dev, seed=i)
        y, d, none = m(x)
        assert none is None and isinstance(d, dict)
        np.testing.assert_allclose(y.numpy(), xn * np.arange(4), rtol=1e-6)
        np.testing.assert_allclose(d["sum"].numpy(), (xn * np.arange(4)).sum(), rtol=1e-5)


def test_views_of_inputs_and_shared_inputs(dev: str) -> None:
    @TinyJit
    def f(a: Tensor, b: Tensor) -> Tensor:
        return a + b

    for i in range(4):
        x, xn = rand(2, 4, dev=dev, seed=i)
        x.realize()
        out = f(x[0], x[1])  # two views of one buffer
        np.testing.assert_allclose(out.numpy(), xn[0] + xn[1], rtol=1e-6)
    assert f.captured is not None and f.captured.aliases == (0, 0)


def test_changed_view_is_an_error(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a * 2

    for i in range(3):
        x, _ = rand(2, 4, dev=dev, seed=i)
        f(x.realize()[0])
    y, _ = rand(4, 2, dev=dev)
    with pytest.raises(JitError, match="argument 0 changed view"):
        f(y.realize().T[0])


def test_unrealized_and_constant_inputs(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a + 1

    for i in range(4):
        x, xn = rand(4, dev=dev, seed=i)
        np.testing.assert_allclose(f(x * 2).numpy(), xn * 2 + 1, rtol=1e-6)  # lazy input: realized first
    for value in (1.0, 5.0, 7.0):
        np.testing.assert_allclose(f(Tensor.full((4,), value, device=dev)).numpy(), value + 1)


def test_outputs_overwritten_and_no_stale_reads(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a * 2

    for i in range(3):
        f(Tensor([float(i)] * 4, device=dev))
    out = f(Tensor([1.0] * 4, device=dev))
    derived = (out + 1).realize()  # computed from the JIT's output buffer
    assert derived.tolist() == [3.0] * 4
    out2 = f(Tensor([10.0] * 4, device=dev))
    assert out2.tolist() == [20.0] * 4
    assert out.tolist() == [20.0] * 4  # same buffer: documented overwrite
    again = out + 1  # the same expression as `derived`: must not come from the realized table
    assert again.tolist() == [21.0] * 4


def test_state_updated_by_replays(dev: str) -> None:
    w = Tensor(np.ones(4, dtype=np.float32), device=dev).realize()

    @TinyJit
    def step(x: Tensor) -> Tensor:
        loss = (w * x).sum().realize()  # before the update (an unrealized loss would read the new w)
        w.assign(w - x * 0.5).realize()
        return loss

    expected = np.ones(4, dtype=np.float32)
    for i in range(5):
        x = np.full(4, i + 1, dtype=np.float32)
        loss = step(Tensor(x, device=dev))
        np.testing.assert_allclose(loss.numpy(), (expected * x).sum(), rtol=1e-6)
        expected = expected - x * 0.5
        np.testing.assert_allclose(w.numpy(), expected, rtol=1e-6)
        np.testing.assert_allclose((w * 1).numpy(), expected, rtol=1e-6)  # graphs on w see the new contents


def test_writes_left_lazy_in_the_function_are_replayed(dev: str) -> None:
    """An SGD step that realizes only its loss (the weight writes stay lazy): the capture must hold the writes, or
    every replay would leave the weights as they were (the loss would stop changing; torch updates every step)."""
    w = Tensor(np.ones(4, dtype=np.float32), device=dev).realize()
    w.requires_grad = True

    @TinyJit
    def step(x: Tensor) -> Tensor:
        w.grad = None
        loss = ((w * x).sum() ** 2).realize()
        loss.backward()
        w.assign(w.detach() - 0.01 * w.grad)  # not realized here
        return loss

    expected = np.ones(4, dtype=np.float64)
    for i in range(5):
        x = np.arange(4, dtype=np.float32) + i
        loss = step(Tensor(x, device=dev))
        np.testing.assert_allclose(loss.numpy(), (expected @ x) ** 2, rtol=1e-4, atol=1e-6)
        expected = expected - 0.01 * 2 * (expected @ x) * x
        np.testing.assert_allclose(w.numpy(), expected, rtol=1e-5)


def test_output_is_input_view(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> tuple[Tensor, Tensor]:
        return a.reshape(2, 2), a + 1

    for i in range(4):
        x, xn = rand(4, dev=dev, seed=i)
        view, plus = f(x)
        np.testing.assert_allclose(view.numpy(), xn.reshape(2, 2))
        np.testing.assert_allclose(plus.numpy(), xn + 1, rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# variables


def test_bound_variable_replays_at_other_values(dev: str) -> None:
    @TinyJit
    def f(x: Tensor, n: object) -> Tensor:
        return x.shrink(((0, n),)).sum()

    x, xn = rand(10, dev=dev)
    x.realize()
    for value in (3, 5, 7, 1, 10, 4):
        out = f(x, Variable("n", 1, 10).bind(value))
        np.testing.assert_allclose(out.numpy(), xn[:value].sum(), rtol=1e-5)
    assert f.cnt == 6 and jit_stats.replays > 0


def test_symbolic_input_shape(dev: str) -> None:
    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x * 2).sum()

    base, bn = rand(10, dev=dev)
    base.realize()
    captured = None
    for value in (2, 6, 9, 3):
        n = Variable("n", 1, 10).bind(value)
        out = f(base.shrink(((0, n),)))
        np.testing.assert_allclose(out.numpy(), (bn[:value] * 2).sum(), rtol=1e-5)
        if f.captured is not None:
            captured = captured or f.captured
            assert f.captured is captured  # no recapture for a new value


# ---------------------------------------------------------------------------------------------------------------
# errors


def _warm(f: TinyJit, *args: Tensor) -> None:
    for _ in range(2):
        f(*args)


def test_changed_shape_dtype_device_errors(dev: str) -> None:
    @TinyJit
    def f(a: Tensor, b: Tensor) -> Tensor:
        return a + b

    _warm(f, Tensor.ones(4, device=dev).contiguous(), Tensor.ones(4, device=dev).contiguous())
    with pytest.raises(JitError, match=r"argument 1 changed shape.*\(4,\).*\(5,\)"):
        f(Tensor.ones(4, device=dev).contiguous(), Tensor.ones(5, device=dev).contiguous())
    with pytest.raises(JitError, match="argument 0 changed dtype"):
        f(Tensor.ones(4, device=dev, dtype=dtypes.int32).contiguous(), Tensor.ones(4, device=dev).contiguous())
    other = "PYTHON:1" if dev == "PYTHON" else "CLANG:1"
    with pytest.raises(JitError, match="argument 0 changed device"):
        f(Tensor.ones(4, device=other).contiguous(), Tensor.ones(4, device=dev).contiguous())
    with pytest.raises(JitError, match="tensor input"):
        f(Tensor.ones(4, device=dev).contiguous())


def test_non_tensor_return_is_an_error(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> tuple[Tensor, int]:
        return a + 1, 3

    with pytest.raises(JitError, match=r"the return value\[1\] is a int"):
        f(Tensor.ones(4, device=dev))


def test_nested_jit_is_an_error(dev: str) -> None:
    @TinyJit
    def inner(a: Tensor) -> Tensor:
        return a * 2

    @TinyJit
    def outer(a: Tensor) -> Tensor:
        return inner(a) + 1

    outer(Tensor.ones(4, device=dev))
    with pytest.raises(JitError, match="nested"):
        outer(Tensor.ones(4, device=dev))


def test_assign_into_input_is_an_error(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        a.assign(a + 1).realize()
        return a * 2

    f(Tensor.ones(4, device=dev).contiguous())
    with pytest.raises(JitError, match="writes into its input argument 0"):
        f(Tensor.ones(4, device=dev).contiguous())


def test_no_kernels_is_an_error(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a

    f(Tensor.ones(4, device=dev).contiguous())
    with pytest.raises(JitError, match="no kernels"):
        f(Tensor.ones(4, device=dev).contiguous())


def test_reading_data_during_capture_is_an_error(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        b = (a + 1).realize()
        b.numpy()
        return b

    f(Tensor.ones(4, device=dev))
    with pytest.raises(JitError, match="read a tensor's data"):
        f(Tensor.ones(4, device=dev))


# ---------------------------------------------------------------------------------------------------------------
# pruning, memory planning, batching


def test_unused_kernels_are_pruned(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        (a * 3).realize()  # nobody sees this value
        return a + 1

    for i in range(3):
        x, xn = rand(4, dev=dev, seed=i)
        np.testing.assert_allclose(f(x).numpy(), xn + 1, rtol=1e-6)
    assert f.captured is not None and len(f.captured.items) == 1


def test_side_output_kept_when_alive(dev: str) -> None:
    kept: dict[str, Tensor] = {}

    @TinyJit
    def f(a: Tensor) -> Tensor:
        kept["side"] = (a * 3).realize()
        return a + 1

    for i in range(3):
        x, xn = rand(4, dev=dev, seed=i)
        f(x)
        np.testing.assert_allclose(kept["side"].numpy(), xn * 3, rtol=1e-6)
    assert f.captured is not None and len(f.captured.items) == 2


def test_prune_runs_input_independent_kernels_once(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        table = (Tensor.arange(4, device=dev).cast(dtypes.float) * 2).contiguous().realize()
        return a + table

    g = TinyJit(f.fn, prune=True)
    for i in range(4):
        x, xn = rand(4, dev=dev, seed=i)
        np.testing.assert_allclose(g(x).numpy(), xn + np.arange(4) * 2, rtol=1e-6)
        np.testing.assert_allclose(f(x).numpy(), xn + np.arange(4) * 2, rtol=1e-6)
    assert g.captured is not None and f.captured is not None
    assert len(g.captured.items) == len(f.captured.items) - 1


def test_internal_buffers_are_memory_planned(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        for _ in range(6):
            a = (a * 1.5 + 1).contiguous().realize()
        return a.sum()

    for i in range(3):
        x, xn = rand(256, dev=dev, seed=i)
        expected = xn.astype(np.float64)
        for _ in range(6):
            expected = expected * 1.5 + 1
        np.testing.assert_allclose(f(x).numpy(), expected.sum(), rtol=1e-4)
    captured = f.captured
    assert captured is not None
    internal = {id(b.base) for item in captured.items for b in item.bufs[1:2] if b is not None}
    planned = [b for item in captured.items for b in item.bufs if b is not None and b.base is not b]
    assert planned, "internal buffers should be views of a planned arena"
    # six 1 KiB intermediates alternate between two places of one arena
    assert len(internal) <= 3
    assert max(b.base.nbytes for b in planned) <= 3 * 1024


def test_graph_batches(dev: str) -> None:
    if Device[dev].graph is None:
        pytest.skip(f"{dev} has no graph runner")

    def body(a: Tensor) -> Tensor:
        for _ in range(10):
            a = (a + 1).contiguous().realize()
        return a

    for batch, graphs in ((64, 1), (4, 3)):
        with Context(JIT_BATCH_SIZE=batch):
            f = TinyJit(body)
            for i in range(3):
                x, xn = rand(16, dev=dev, seed=i)
                np.testing.assert_allclose(f(x).numpy(), xn + 10, rtol=1e-6)
        assert f.captured is not None and len(f.captured.graphs) == graphs
    before = GlobalCounters.kernel_count
    f(rand(16, dev=dev)[0])
    assert GlobalCounters.kernel_count - before == 10
    x, xn = rand(16, dev=dev, seed=9)
    x.realize()
    for _ in range(3):  # the same input: every one of the 3 graphs resubmits
        before = GlobalCounters.kernel_count
        np.testing.assert_allclose(f(x).numpy(), xn + 10, rtol=1e-6)
        assert GlobalCounters.kernel_count - before == 10


def test_reset_recaptures(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a * 2

    _warm(f, Tensor.ones(4, device=dev).contiguous())
    f.reset()
    assert f.captured is None
    for _ in range(3):
        assert f(Tensor.ones(5, device=dev).contiguous()).tolist() == [2.0] * 5


# ---------------------------------------------------------------------------------------------------------------
# pickling


def test_captured_jit_pickles_in_process(dev: str) -> None:
    w = Tensor(np.arange(4, dtype=np.float32), device=dev).realize()

    @TinyJit
    def f(a: Tensor) -> Tensor:
        return (a * w + 1).sum()

    _warm(f, Tensor.ones(4, device=dev).contiguous())
    assert f.captured is not None
    clone = pickle.loads(pickle.dumps(f.captured))
    assert isinstance(clone, CapturedJit)
    g = TinyJit(captured=clone)
    x, xn = rand(4, dev=dev)
    np.testing.assert_allclose(g(x).numpy(), (xn * np.arange(4) + 1).sum(), rtol=1e-5)


def test_captured_jit_replays_in_fresh_process(dev: str, tmp_path: object) -> None:
    @TinyJit
    def f(a: Tensor, b: Tensor) -> Tensor:
        return ((a + b) * Tensor([1.0, 2.0, 3.0, 4.0], device=dev)).relu()

    _warm(f, Tensor([1.0, 2, 3, 4], device=dev), Tensor([5.0, 6, 7, 8], device=dev))
    path = f"{tmp_path}/jit.pkl"
    with open(path, "wb") as file:
        pickle.dump(f.captured, file)
    code = textwrap.dedent(
        f"""
        import pickle
        from tinycore import Tensor, TinyJit
        with open({path!r}, "rb") as file:
            g = TinyJit(captured=pickle.load(file))
        out = g(Tensor([1.0, -5.0, 2.0, 0.0], device={dev!r}), Tensor([1.0, 1.0, 1.0, 1.0], device={dev!r}))
        print(out.tolist())
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[2.0, 0.0, 9.0, 4.0]"


# ---------------------------------------------------------------------------------------------------------------
# the replay fast path (the same arguments as the last replay) and more input forms


def test_tuple_positional_and_dict_keyword_inputs(dev: str) -> None:
    @TinyJit
    def f(pair: tuple, *, extra: dict) -> Tensor:
        return pair[0] - pair[1] * extra["scale"]

    for i in range(4):
        (a, an), (b, bn), (s, sn) = (rand(3, dev=dev, seed=i * 3 + k) for k in range(3))
        np.testing.assert_allclose(f((a, b), extra={"scale": s}).numpy(), an - bn * sn, rtol=1e-5)
    assert f.captured is not None and len(f.captured.specs) == 3


def test_list_mutated_in_place_is_not_stale(dev: str) -> None:
    @TinyJit
    def f(xs: list) -> Tensor:
        return xs[0] + xs[1]

    (a, an), (b, bn) = rand(4, dev=dev, seed=1), rand(4, dev=dev, seed=2)
    xs = [a, b]
    for _ in range(3):
        np.testing.assert_allclose(f(xs).numpy(), an + bn, rtol=1e-6)
    c, cn = rand(4, dev=dev, seed=3)
    xs[1] = c  # the same list object, a new tensor inside: must be swapped in
    np.testing.assert_allclose(f(xs).numpy(), an + cn, rtol=1e-6)


def test_same_input_replays_see_new_contents(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a * 3 + 1

    x, xn = rand(8, dev=dev, seed=0)
    x.realize()
    outs = []
    for i in range(5):
        new = xn + i
        x.assign(Tensor(new, device=dev)).realize()  # same tensor, new contents (same buffer)
        before = jit_stats.replays
        out = f(x)
        outs.append(out)
        np.testing.assert_allclose(out.numpy(), new * 3 + 1, rtol=1e-6)
        if i >= 2:
            assert jit_stats.replays == before + 1
    assert outs[-1] is not outs[-2]  # a new Tensor per call, over the same buffer
    assert outs[-1].uop is outs[-2].uop
    derived = (outs[-1] - 1).realize()  # computed from the JIT's output buffer, then the same replay again
    np.testing.assert_allclose(derived.numpy(), (xn + 4) * 3, rtol=1e-6)
    x.assign(Tensor(xn - 10, device=dev)).realize()
    f(x)
    np.testing.assert_allclose((outs[-1] - 1).numpy(), (xn - 10) * 3, rtol=1e-5)  # not the realized-table value


def test_same_tensor_with_new_variable_value(dev: str) -> None:
    @TinyJit
    def f(x: Tensor, n: object) -> Tensor:
        return (x.shrink(((0, n),)) * 2).sum()

    x, xn = rand(10, dev=dev, seed=4)
    x.realize()
    var = Variable("n", 1, 10)
    for value in (4, 4, 4, 4, 7, 7, 2, 4):
        np.testing.assert_allclose(f(x, var.bind(value)).numpy(), (xn[:value] * 2).sum(), rtol=1e-5)


def test_symbolic_batch_replays_at_other_batch_sizes(dev: str) -> None:
    wn = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    w = Tensor(wn, device=dev).realize()

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x @ w).relu() * 2

    data, dn = rand(10, 4, dev=dev, seed=2)
    data.realize()
    batch = Variable("batch", 1, 10)
    captures = jit_stats.captures
    for size in (8, 8, 5, 3, 8, 10, 1):
        out = f(data.shrink(((0, batch.bind(size)), (0, 4))))
        assert out.shape[1] == 3 and out.shape[0].unbind()[1] == size  # the call's batch, not the capture's
        expected = np.maximum(dn[:size] @ wn, 0) * 2
        np.testing.assert_allclose(out.shrink(((0, size), (0, 3))).numpy(), expected, rtol=1e-5, atol=1e-6)
    assert jit_stats.captures == captures + 1  # captured at 8, replayed at every other size


def test_one_capture_serves_input_buffers_sized_by_the_variable(dev: str) -> None:
    """DESIGN 3: ``a.reshape(3, i)`` of a fresh buffer per call (3*i elements): the capture at i = 7 replays for
    smaller and larger values up to the bound; intermediates of symbolic size were allocated at the bound."""

    @TinyJit
    def f(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        return ((a * 2).contiguous() + b).sum(1), a + 1

    i = Variable("i", 1, 10)
    captures = jit_stats.captures
    for value in (7, 7, 7, 3, 10, 1, 5):
        an = np.arange(3 * value, dtype=np.float32).reshape(3, value)
        bn = np.full((3, value), value, np.float32)
        a = Tensor(an.ravel(), device=dev).realize()
        b = Tensor(bn.ravel(), device=dev).realize()
        total, plus = f(a.reshape(3, i.bind(value)), b.reshape(3, i.bind(value)))
        np.testing.assert_allclose(total.numpy(), (an * 2 + bn).sum(1))
        assert plus.shape[1].unbind()[1] == value
        np.testing.assert_allclose(plus.reshape(3, value).numpy(), an + 1)  # back to a concrete shape
        np.testing.assert_allclose(plus.numpy(), an + 1)  # or read at the bound value
    assert jit_stats.captures == captures + 1 and f.cnt == 7
    with pytest.raises(JitError, match="changed shape"):  # a concrete shape still may not change
        f(Tensor.ones(33, device=dev).realize().reshape(3, 11), Tensor.ones(33, device=dev).realize().reshape(3, 11))


def test_inputs_aliased_differently_is_an_error(dev: str) -> None:
    @TinyJit
    def f(a: Tensor, b: Tensor) -> Tensor:
        return a * b

    _warm(f, rand(4, dev=dev, seed=1)[0], rand(4, dev=dev, seed=2)[0])  # two buffers
    assert f.captured is not None and f.captured.aliases == (0, 1)
    x = rand(4, dev=dev, seed=3)[0].realize()
    with pytest.raises(JitError, match="share buffers differently"):
        f(x, x)


def test_variable_bound_to_two_values_is_an_error(dev: str) -> None:
    @TinyJit
    def f(x: Tensor, n: object) -> Tensor:
        return x.sum() * 2

    data = Tensor.ones(10, device=dev).contiguous().realize()
    var = Variable("m", 1, 10)
    with pytest.raises(JitError, match="bound to both"):
        for _ in range(2):  # call 0 runs eagerly; the capture checks the inputs
            f(data.shrink(((0, var.bind(3)),)), var.bind(4))


def test_reset_of_a_loaded_program_is_an_error(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a + 1

    _warm(f, Tensor.ones(4, device=dev).contiguous())
    g = TinyJit(captured=pickle.loads(pickle.dumps(f.captured)))
    with pytest.raises(JitError, match="no function"):
        g.reset()


def test_changed_shape_after_fast_replays_is_an_error(dev: str) -> None:
    @TinyJit
    def f(a: Tensor) -> Tensor:
        return a * 2

    x = Tensor.ones(4, device=dev).contiguous().realize()
    for _ in range(4):
        f(x)  # the same argument: the fast path
    with pytest.raises(JitError, match="argument 0 changed shape"):
        f(Tensor.ones(6, device=dev).contiguous())
    with pytest.raises(JitError, match="argument 0 changed dtype"):
        f(Tensor.ones(4, device=dev, dtype=dtypes.int32).contiguous())
    assert f(x).tolist() == [2.0] * 4


def test_same_arguments_skip_input_checks_and_graph_update(dev: str, monkeypatch: pytest.MonkeyPatch) -> None:
    @TinyJit
    def f(a: Tensor, n: object) -> Tensor:
        return (a.shrink(((0, n),)) + 1).sum()

    x, xn = rand(8, dev=dev, seed=0)
    y, yn = rand(8, dev=dev, seed=1)
    var = Variable("k", 1, 8)
    for _ in range(3):
        f(x, var.bind(5))
    captured = f.captured
    assert captured is not None and captured.graphs
    calls = {"update": 0, "check": 0}
    graph = captured.graphs[0]
    real_update, real_check = graph.update, captured.check

    def counting_update(*args: object) -> object:
        calls["update"] += 1
        return real_update(*args)  # type: ignore[arg-type]

    def counting_check(*args: object) -> None:
        calls["check"] += 1
        real_check(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(graph, "update", counting_update)
    monkeypatch.setattr(captured, "check", counting_check)
    for _ in range(3):
        np.testing.assert_allclose(f(x, var.bind(5)).numpy(), (xn[:5] + 1).sum(), rtol=1e-5)
    assert calls == {"update": 0, "check": 0}  # identical arguments: straight to the graph
    np.testing.assert_allclose(f(y, var.bind(5)).numpy(), (yn[:5] + 1).sum(), rtol=1e-5)
    np.testing.assert_allclose(f(y, var.bind(3)).numpy(), (yn[:3] + 1).sum(), rtol=1e-5)
    assert calls == {"update": 2, "check": 2}


def test_outputs_with_variable_offsets_follow_each_call(dev: str) -> None:
    @TinyJit
    def f(a: Tensor, n: object) -> tuple[Tensor, Tensor]:
        doubled = (a * 2).contiguous()
        return doubled.shrink(((n, n + 2),)), a.shrink(((n, n + 3),))  # a view of the JIT's buffer, of the input

    xn = np.arange(10, dtype=np.float32)
    x = Tensor(xn, device=dev).realize()
    offset = Variable("offset", 0, 7)
    for value in (1, 1, 4, 2, 5, 0):
        window, input_view = f(x, offset.bind(value))
        assert window.sum().item() == (xn[value : value + 2] * 2).sum()
        assert input_view.sum().item() == xn[value : value + 3].sum()


def test_capturing_off_says_so_instead_of_nothing_to_replay() -> None:
    from tinycore.helpers import Context

    step = TinyJit(lambda x: (x * 2).realize())
    x = Tensor([1.0, 2.0]).realize()
    with Context(CAPTURING=0):
        step(x)  # the first call runs eagerly
        with pytest.raises(JitError, match=r"can't capture with CAPTURING=0 .*unset CAPTURING, or set JIT=0"):
            step(x)


def test_int32_variable_sizes_a_jit_input_like_tinygrads_default(dev: str) -> None:
    # tinygrad's Variable defaults to dtypes.int: such a variable sizes shapes as a dtypes.index one does
    wn = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)
    w = Tensor(wn, device=dev).realize()

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return (x @ w).relu().sum(axis=1)

    data, dn = rand(10, 4, dev=dev, seed=5)
    data.realize()
    batch = Variable("batch", 1, 10, dtypes.int32)
    captures = jit_stats.captures
    for size in (6, 6, 2, 9, 6):
        x = data.shrink(((0, batch.bind(size)), None)).reshape(batch.bind(size), 2, 2).reshape(batch.bind(size), 4)
        assert x.shape[0].dtype == dtypes.index
        out = f(x)
        np.testing.assert_allclose(out.shrink(((0, size),)).numpy(), np.maximum(dn[:size] @ wn, 0).sum(1), rtol=1e-5)
    assert jit_stats.captures == captures + 1
    with pytest.raises(TypeError, match="symbolic size"):
        data.reshape(Variable("f", 1, 10, dtypes.float32), 4)
