"""The lazy Tensor core: construction, dtype inference and promotion, errors, movement, reductions, matmul,
realized state and assign, rand. Values are checked against PyTorch (numpy where simpler), with kernels run by the
numpy reference evaluator of kernel ASTs (`test_schedule_ref.py`); `test_end_to_end_with_codegen` repeats a set of
them through the real lowering once `tinycore.codegen.get_program` exists."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tinycore.device import Device
from tinycore.dtype import dtypes
from tinycore.engine import realize as realize_module
from tinycore.engine.realized import buffer_of
from tinycore.helpers import GlobalCounters
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops

torch = pytest.importorskip("torch")
_ORIGINAL_COMPILE = realize_module._compile_kernel  # the real lowering, before any test patches it

_REF_PATH = Path(__file__).with_name("test_schedule_ref.py")


def _load_ref() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("tinycore_test_schedule_ref_for_tensor", _REF_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _load_ref()


@pytest.fixture(autouse=True)
def reference_backend() -> Iterator[None]:
    """Kernels run through the numpy reference evaluator on the PYTHON device; with ``TINYCORE_REAL_KERNELS=1`` they
    go through `get_program` instead (and ``TINYCORE_TEST_DEVICE`` picks the device), so this whole file doubles as
    an end-to-end suite of the lowering."""
    saved = Device.DEFAULT
    Device.DEFAULT = os.environ.get("TINYCORE_TEST_DEVICE", "PYTHON")
    try:
        if os.environ.get("TINYCORE_REAL_KERNELS") == "1":
            yield
        else:
            with ref.use_reference_kernels():
                yield
    finally:
        Device.DEFAULT = saved


def close(t: Tensor, expected: Any, atol: float = 1e-5, rtol: float = 1e-5, dtype: bool = True) -> None:
    got = t.numpy()
    exp = expected.numpy() if hasattr(expected, "numpy") else np.asarray(expected)
    assert got.shape == exp.shape, f"shape {got.shape} != {exp.shape}"
    if dtype and exp.dtype != np.int64:  # torch's default int is int64, tinycore's is int32
        assert got.dtype == exp.dtype, f"dtype {got.dtype} != {exp.dtype}"
    np.testing.assert_allclose(got.astype(np.float64), exp.astype(np.float64), atol=atol, rtol=rtol)


RNG = np.random.default_rng(1234)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------------------------
# construction and dtypes


@pytest.mark.parametrize(
    "data, dtype",
    [
        (1, dtypes.int32),
        (1.5, dtypes.float32),
        (True, dtypes.bool),
        ([1, 2, 3], dtypes.int32),
        ([1, 2.5], dtypes.float32),
        ([[True, False]], dtypes.bool),
        ([], dtypes.float32),
    ],
)
def test_dtype_inference_from_python(data: Any, dtype: Any) -> None:
    t = Tensor(data)
    assert t.dtype == dtype
    assert t.shape == np.array(data).shape


def test_from_numpy_bytes_and_uop() -> None:
    arr = np.arange(6, dtype=np.int16).reshape(2, 3)
    t = Tensor(arr)
    assert t.dtype == dtypes.int16 and t.shape == (2, 3)
    assert t.numpy().tolist() == arr.tolist()
    b = Tensor(b"\x01\x02\xff")
    assert b.dtype == dtypes.uint8 and b.tolist() == [1, 2, 255]
    u = Tensor(t.uop)
    assert u.uop is t.uop and u.tolist() == arr.tolist()
    assert Tensor([1, 2], dtype="float16").dtype == dtypes.float16


def test_data_is_uploaded_into_a_buffer_at_once() -> None:
    t = Tensor([1.0, 2.0, 3.0, 4.0]).reshape(2, 2)
    base = t.uop.src[0]
    assert base.op is Ops.BUFFER and buffer_of(base).is_allocated()


def test_scalar_and_properties() -> None:
    t = Tensor(3.5)
    assert t.shape == () and t.ndim == 0 and t.numel() == 1 and t.item() == 3.5
    x = Tensor.empty(2, 3, 4)
    assert (x.ndim, x.numel(), len(x), x.element_size(), x.nbytes()) == (3, 24, 2, 4, 96)
    assert x.device == Device.DEFAULT


def test_bad_constructor_input() -> None:
    with pytest.raises(TypeError, match="can't make a Tensor"):
        Tensor(object())
    with pytest.raises(TypeError, match="not a dtype"):
        Tensor([1], dtype="nonsense")


@pytest.mark.parametrize(
    "a, b",
    [
        (dtypes.int8, dtypes.uint8),
        (dtypes.int32, dtypes.float16),
        (dtypes.bool, dtypes.int32),
        (dtypes.float16, dtypes.float32),
        (dtypes.uint8, dtypes.int64),
    ],
)
def test_tensor_tensor_promotion_matches_torch(a: Any, b: Any) -> None:
    tt = {dtypes.int8: torch.int8, dtypes.uint8: torch.uint8, dtypes.int32: torch.int32, dtypes.float16: torch.float16,
          dtypes.bool: torch.bool, dtypes.float32: torch.float32, dtypes.int64: torch.int64}  # fmt: skip
    got = (Tensor([1], dtype=a) + Tensor([1], dtype=b)).dtype
    expected = (torch.tensor([1], dtype=tt[a]) + torch.tensor([1], dtype=tt[b])).dtype
    assert dtypes.to_np(got) == torch.empty(0, dtype=expected).numpy().dtype


@pytest.mark.parametrize(
    "tdtype, scalar, expected",
    [
        (dtypes.int8, 1, dtypes.int8),
        (dtypes.int8, 1.5, dtypes.float32),
        (dtypes.float16, 2, dtypes.float16),
        (dtypes.float16, 2.5, dtypes.float16),
        (dtypes.bool, True, dtypes.bool),
        (dtypes.bool, 3, dtypes.int32),
        (dtypes.uint8, -1, dtypes.uint8),
    ],
)
def test_python_scalars_adopt_the_tensor_category(tdtype: Any, scalar: Any, expected: Any) -> None:
    assert (Tensor([1], dtype=tdtype) + scalar).dtype == expected
    assert (scalar * Tensor([1], dtype=tdtype)).dtype == expected


def test_division_promotes_ints_to_float() -> None:
    t = Tensor([1, 2, 3]) / 2
    assert t.dtype == dtypes.float32
    close(t, torch.tensor([1, 2, 3]) / 2)


# ---------------------------------------------------------------------------------------------------------------
# errors name the shapes


def test_broadcast_error_names_the_dimension() -> None:
    with pytest.raises(
        RuntimeError, match=r"size of tensor a \(3\) must match the size of tensor b \(4\) at non-singleton dimension 1"
    ):  # noqa: E501
        Tensor.empty(2, 3) + Tensor.empty(2, 4)


def test_reshape_errors() -> None:
    x = Tensor.empty(2, 3)
    with pytest.raises(RuntimeError, match=r"shape '\[4, 2\]' is invalid for input of size 6"):
        x.reshape(4, 2)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        x.reshape(-1, -1)
    with pytest.raises(RuntimeError, match=r"shape '\[-1, 4\]' is invalid for input of size 6"):
        x.reshape(-1, 4)
    assert x.reshape(-1).shape == (6,) and x.reshape(3, -1).shape == (3, 2)


def test_expand_permute_matmul_errors() -> None:
    x = Tensor.empty(2, 3)
    with pytest.raises(RuntimeError, match=r"expanded size of the tensor \(4\) must match the existing size \(3\)"):
        x.expand(2, 4)
    with pytest.raises(RuntimeError, match="not a permutation"):
        x.permute(0, 0)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.sum(2)
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"):
        x @ Tensor.empty(4, 5)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        x + Tensor.empty(2, 3, device="PYTHON:1")
    with pytest.raises(TypeError, match="ambiguous"):
        bool(Tensor([1.0]))


# ---------------------------------------------------------------------------------------------------------------
# numerics against torch


a_np, b_np, v_np = randn(3, 4), randn(3, 4), randn(4)

ELEMENTWISE: dict[str, Callable[[Any, Any, Any], Any]] = {
    "add": lambda a, b, v: a + b,
    "sub_broadcast": lambda a, b, v: a - v,
    "rsub": lambda a, b, v: 2 - a,
    "mul_scalar": lambda a, b, v: a * 3.0,
    "div": lambda a, b, v: a / (b.abs() + 1),
    "rdiv": lambda a, b, v: 1 / (a.abs() + 1),
    "neg": lambda a, b, v: -a,
    "maximum": lambda a, b, v: a.maximum(b) if isinstance(a, Tensor) else torch.maximum(a, b),
    "relu": lambda a, b, v: a.relu(),
    "exp": lambda a, b, v: a.exp(),
    "log": lambda a, b, v: (a.abs() + 0.5).log(),
    "sqrt": lambda a, b, v: a.abs().sqrt(),
    "where": lambda a, b, v: (a > b).where(a, b) if isinstance(a, Tensor) else torch.where(a > b, a, b),
    "where_scalar": lambda a, b, v: (a > 0).where(a, 0.5) if isinstance(a, Tensor) else torch.where(a > 0, a, 0.5),
    "lt": lambda a, b, v: a < b,
    "le": lambda a, b, v: a <= v,
    "ge": lambda a, b, v: a >= v,
    "eq": lambda a, b, v: a == a,
    "ne": lambda a, b, v: a != b,
    "cast_int": lambda a, b, v: (a * 10).cast(dtypes.int32) if isinstance(a, Tensor) else (a * 10).to(torch.int32),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_matches_torch(name: str) -> None:
    fn = ELEMENTWISE[name]
    mine = fn(Tensor(a_np), Tensor(b_np), Tensor(v_np))
    theirs = fn(torch.tensor(a_np), torch.tensor(b_np), torch.tensor(v_np))
    close(mine, theirs, atol=1e-5, rtol=1e-5)


def test_minimum_and_abs_and_bitwise() -> None:
    close(Tensor(a_np).minimum(Tensor(b_np)), torch.minimum(torch.tensor(a_np), torch.tensor(b_np)))
    close(Tensor([3, 250], dtype=dtypes.uint8).minimum(7), torch.tensor([3, 7], dtype=torch.uint8))
    close(Tensor([-3, 4]).abs(), torch.tensor([3, 4]))
    close(~Tensor([1, 2], dtype=dtypes.uint8), ~torch.tensor([1, 2], dtype=torch.uint8))
    close(Tensor([6, 3]) & 5, torch.tensor([6, 3]) & 5)
    close(Tensor([True, False]) | Tensor([False, False]), torch.tensor([True, False]))
    close(-Tensor([True, False]), torch.tensor([False, True]))


MOVEMENT: dict[str, Callable[[Any], Any]] = {
    "reshape": lambda x: x.reshape(4, 3),
    "permute": lambda x: x.permute(1, 0),
    "T_plus": lambda x: x.T + 1,
    "expand": lambda x: x.reshape(3, 1, 4).expand(3, 2, 4),
    "flip": lambda x: x.flip(1),
    "flip_both": lambda x: x.flip((0, 1)),
    "shrink": lambda x: x.shrink(((1, 3), (0, 2))) if isinstance(x, Tensor) else x[1:3, 0:2],
    "flatten": lambda x: x.reshape(3, 2, 2).flatten(1),
}


@pytest.mark.parametrize("name", sorted(MOVEMENT))
def test_movement_matches_torch(name: str) -> None:
    close(MOVEMENT[name](Tensor(a_np)), MOVEMENT[name](torch.tensor(a_np)))


def test_pad_forms_and_value() -> None:
    f = torch.nn.functional.pad
    ta = torch.tensor(a_np)
    close(Tensor(a_np).pad(((1, 0), (0, 2))), f(ta, (0, 2, 1, 0)))
    close(Tensor(a_np).pad((1, 2)), f(ta, (1, 2)))
    close(Tensor(a_np).pad((1, 1, 2, 0), value=-3.0), f(ta, (1, 1, 2, 0), value=-3.0))
    close(Tensor(a_np).pad((-1, 1)), f(ta, (-1, 1)))
    close(Tensor(a_np).pad((None, (1, 1))), f(ta, (1, 1)))


REDUCE: dict[str, Callable[[Any], Any]] = {
    "sum": lambda x: x.sum(),
    "sum0": lambda x: x.sum(0),
    "sum1_keep": lambda x: x.sum(1, keepdim=True),
    "sum_neg_axis": lambda x: x.sum(-1),
    "sum_tuple": lambda x: x.sum((0, 1)),
    "max": lambda x: x.max(),
    "max1": lambda x: x.max(1) if isinstance(x, Tensor) else x.amax(1),
    "min0": lambda x: x.min(0) if isinstance(x, Tensor) else x.amin(0),
    "mean": lambda x: x.mean(),
    "mean1": lambda x: x.mean(1),
    "softmax": lambda x: x.softmax(-1),
    "softmax0": lambda x: x.softmax(0),
    "log_softmax": lambda x: x.log_softmax(-1),
}


@pytest.mark.parametrize("name", sorted(REDUCE))
def test_reductions_match_torch(name: str) -> None:
    close(REDUCE[name](Tensor(a_np)), REDUCE[name](torch.tensor(a_np)), atol=1e-5)


def test_sum_accumulates_small_ints_in_int64() -> None:
    t = Tensor([[100, 100], [100, 100]], dtype=dtypes.int8)
    s = t.sum()
    assert s.dtype == dtypes.int64 and s.item() == 400  # PyTorch's dtype (issue 18: int32 sums wrapped)
    h = Tensor(a_np, dtype=dtypes.float16).sum(1)
    assert h.dtype == dtypes.float16
    close(h, torch.tensor(a_np).half().float().sum(1).half(), atol=1e-2, rtol=1e-2)
    assert Tensor([True, True, False]).sum().item() == 2


@pytest.mark.parametrize(
    "sa, sb",
    [((3, 4), (4, 5)), ((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5))],
)
def test_matmul_matches_torch(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    x, w = randn(*sa), randn(*sb)
    close(Tensor(x) @ Tensor(w), torch.tensor(x) @ torch.tensor(w), atol=1e-4)
    close(Tensor(x).matmul(Tensor(w)), torch.tensor(x) @ torch.tensor(w), atol=1e-4)


def test_linear_relu_one_kernel_and_correct() -> None:
    x, w, b = Tensor(randn(4, 8)), Tensor(randn(8, 3)), Tensor(randn(3))
    for t in (x, w, b):
        t.realize()
    GlobalCounters.reset()
    out = (x @ w + b).relu()
    out.realize()
    assert GlobalCounters.kernel_count == 1
    expected = torch.relu(torch.tensor(x.numpy()) @ torch.tensor(w.numpy()) + torch.tensor(b.numpy()))
    close(out, expected, atol=1e-5)


def test_kernel_counts_through_realize() -> None:
    a, b, c = (Tensor(randn(4, 4)).realize() for _ in range(3))
    GlobalCounters.reset()
    (a * b + c).sum().realize()
    assert GlobalCounters.kernel_count == 1
    GlobalCounters.reset()
    a.softmax(-1).realize()
    assert GlobalCounters.kernel_count <= 3
    GlobalCounters.reset()
    Tensor.arange(37).realize()
    assert GlobalCounters.kernel_count == 1


# ---------------------------------------------------------------------------------------------------------------
# constructors


@pytest.mark.parametrize("args", [(10,), (3, 20, 3), (0, 1, 0.125), (5, 0, -1), (0,), (1,), (2.5, 7.0)])
def test_arange_matches_torch(args: tuple) -> None:
    close(Tensor.arange(*args), torch.arange(*args))


def test_full_zeros_ones() -> None:
    close(Tensor.full((2, 3), 7), torch.full((2, 3), 7))
    close(Tensor.zeros(2, 2), torch.zeros(2, 2))
    close(Tensor.ones((3,), dtype=dtypes.int8), torch.ones(3, dtype=torch.int8))
    z = Tensor.zeros(4)
    z.realize()
    assert z.uop.op is Ops.EXPAND  # a broadcast constant needs no buffer
    assert z.contiguous().realize().uop.op is Ops.BUFFER


def test_rand_is_uniform_deterministic_and_advances() -> None:
    Tensor.manual_seed(42)
    r1 = Tensor.rand(1000).numpy()
    r2 = Tensor.rand(1000).numpy()
    Tensor.manual_seed(42)
    r1_again = Tensor.rand(1000).numpy()
    assert r1.dtype == np.float32 and (r1 == r1_again).all()
    assert not (r1 == r2).all()
    assert 0.0 <= r1.min() and r1.max() < 1.0
    assert abs(r1.mean() - 0.5) < 0.05 and abs(r1.std() - 0.2887) < 0.03
    assert Tensor.rand(2, 3, dtype=dtypes.float16).dtype == dtypes.float16


def test_rand_is_one_cached_schedule() -> None:
    from tinycore.engine.schedule_cache import schedule_stats

    Tensor.rand(8).realize()
    misses = schedule_stats.misses
    for _ in range(3):
        Tensor.rand(8).realize()
    assert schedule_stats.misses == misses


def test_rand_stream_matches_a_scalar_threefry() -> None:
    from tinycore.uop.ops import _threefry2x32

    Tensor.manual_seed(7)
    got = Tensor.rand(4).numpy()
    expected = []
    for i in range(4):
        bits = _threefry2x32(i, 7) & 0xFFFFFFFF
        expected.append(np.frombuffer(np.uint32((bits >> 9) | 0x3F800000).tobytes(), np.float32)[0] - 1.0)
    assert got.tolist() == expected


# ---------------------------------------------------------------------------------------------------------------
# realize, realized state, assign


def test_realize_replaces_the_uop_with_its_buffer() -> None:
    x = Tensor(a_np)
    y = (x * 2).sum(1)
    assert y.uop.op is Ops.RESHAPE
    y.realize()
    assert y.uop.op is Ops.BUFFER and buffer_of(y.uop).is_allocated()
    close(y, torch.tensor(a_np * 2).sum(1))


def test_live_tensors_sharing_a_realized_node_reuse_it() -> None:
    x = Tensor(a_np)
    y = x.exp()
    twin = Tensor(y.uop)
    z = y + 1
    y.realize()
    GlobalCounters.reset()
    twin.realize()
    assert GlobalCounters.kernel_count == 0 and twin.uop is y.uop
    z.realize()
    assert GlobalCounters.kernel_count == 1
    close(z, torch.tensor(a_np).exp() + 1, atol=1e-5)


def test_realize_several_tensors_at_once() -> None:
    x = Tensor(a_np)
    s, m = x.sum(0), x.max(0)
    Tensor.realize(s, m)
    assert s.uop.op is Ops.BUFFER and m.uop.op is Ops.BUFFER
    close(s, torch.tensor(a_np).sum(0))
    close(m, torch.tensor(a_np).amax(0))


def test_assign_semantics() -> None:
    w = Tensor([1.0, 2.0, 3.0]).realize()
    buf = buffer_of(w.uop)
    old = w * 1
    w.assign(w * 10)
    Tensor.realize(old, w)
    assert buffer_of(w.uop) is buf
    assert old.tolist() == [1.0, 2.0, 3.0] and w.tolist() == [10.0, 20.0, 30.0]
    w.assign(w + 1)
    w.assign(w * 2)  # chained: (10 + 1) * 2
    assert w.tolist() == [22.0, 42.0, 62.0]


def test_assign_after_hash_consing_is_not_stale() -> None:
    x = Tensor([1.0, 2.0]).realize()
    y = x + 1
    keep = y.uop  # the node stays alive
    y.realize()
    x.assign(x * 10).realize()
    assert (x + 1).tolist() == [11.0, 21.0]  # not y's stale buffer
    assert Tensor(keep).tolist() == [11.0, 21.0]  # values computed from x are recomputed after x was written


def test_assign_self_flip_and_into_a_view() -> None:
    v = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
    v.assign(v.flip(0)).realize()
    assert v.tolist() == [4.0, 3.0, 2.0, 1.0]
    u = Tensor.zeros(2, 3).contiguous().realize()
    row = u.shrink(((1, 2), None))
    row.assign(Tensor([[7.0, 8.0, 9.0]])).realize()
    assert u.tolist() == [[0.0, 0.0, 0.0], [7.0, 8.0, 9.0]]


def test_assign_broadcasts_and_casts_and_replaces_lazy_values() -> None:
    w = Tensor.zeros(2, 2).contiguous().realize()
    w.assign(Tensor([1, 2])).realize()
    assert w.dtype == dtypes.float32 and w.tolist() == [[1.0, 2.0], [1.0, 2.0]]
    lazy = Tensor([1.0]) + 1
    lazy.assign(Tensor([5.0]))
    assert lazy.tolist() == [5.0]
    with pytest.raises(RuntimeError, match="can't be written"):
        w.assign(Tensor.empty(3))


def test_to_another_device_and_back() -> None:
    x = Tensor(a_np)
    y = (x * 2).to("PYTHON:1")
    assert y.device == "PYTHON:1"
    close(y + Tensor(b_np, device="PYTHON:1"), torch.tensor(a_np * 2 + b_np))
    close(x.T.to("PYTHON:1"), torch.tensor(a_np).T)
    assert x.to(Device.DEFAULT) is x


def test_numpy_of_a_view_copies_into_order() -> None:
    x = Tensor(a_np).realize()
    assert x.T.numpy().tolist() == a_np.T.tolist()
    assert x.shrink(((1, 2), None)).tolist() == a_np[1:2].tolist()


def test_item_and_tolist() -> None:
    assert Tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert Tensor([2.5]).item() == 2.5
    with pytest.raises(ValueError, match="cannot be converted"):
        Tensor([1, 2]).item()


def test_symbolic_value_in_a_graph() -> None:
    from tinycore.uop.ops import Variable

    n = Variable("n", 1, 100)
    x = Tensor([1.0, 2.0])
    y = x * Tensor(n.bind(3)).cast(dtypes.float32)
    assert y.tolist() == [3.0, 6.0]
    y2 = x * Tensor(n.bind(5)).cast(dtypes.float32)
    assert y2.tolist() == [5.0, 10.0]


# ---------------------------------------------------------------------------------------------------------------
# through the real lowering (once tinycore.codegen.get_program exists)


def test_end_to_end_with_codegen() -> None:
    codegen = pytest.importorskip("tinycore.codegen", reason="kernel lowering is not built yet")
    if not hasattr(codegen, "get_program"):
        pytest.skip("tinycore.codegen.get_program is not there yet")
    from tinycore.engine import realize

    patched = realize._compile_kernel
    realize.clear_runner_cache()
    realize._compile_kernel = _ORIGINAL_COMPILE  # type: ignore[assignment]
    try:
        x, w, b = randn(4, 8), randn(8, 3), randn(3)
        expected = torch.relu(torch.tensor(x) @ torch.tensor(w) + torch.tensor(b))
        close((Tensor(x) @ Tensor(w) + Tensor(b)).relu(), expected, atol=1e-4)
        close(Tensor(x).softmax(-1), torch.tensor(x).softmax(-1), atol=1e-5)
        close(Tensor.arange(10), torch.arange(10))
        close((Tensor(x) * 2 + 1).sum(0), (torch.tensor(x) * 2 + 1).sum(0), atol=1e-4)
        close(Tensor(x).T.pad(((1, 1), None)).flip(0), torch.nn.functional.pad(torch.tensor(x).T, (0, 0, 1, 1)).flip(0))
    finally:
        realize._compile_kernel = patched  # type: ignore[assignment]
        realize.clear_runner_cache()


def test_zero_dim_numpy_array_keeps_its_shape():
    import numpy as np

    t = Tensor(np.array(2.5, dtype=np.float32), device="PYTHON")
    assert t.shape == () and t.numpy().shape == () and float(t.numpy()) == 2.5
