"""Renderer, TensorCore layouts and emulation, ProgramSpec helpers, Estimates."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from tinycore.dtype import dtypes
from tinycore.renderer import Estimates, ProgramSpec, Renderer, TensorCore, eval_dim


def _tc_8x8x4() -> TensorCore:
    """An 8x8x4 (N, M, K) instruction on 8 lanes: lane t owns row t of A and of C, column t of B."""
    return TensorCore.from_maps(
        (8, 8, 4),
        8,
        dtypes.half,
        dtypes.float,
        a=lambda lane, i: (lane, i),
        b=lambda lane, i: (i, lane),
        c=lambda lane, i: (lane, i),
        opts=("l0", "l0", "l0"),
    )


def test_tensor_core_emulation_matches_matmul():
    tc = _tc_8x8x4()
    assert tc.elements_per_thread == (4, 4, 8) and tc.name == "WMMA_8_8_4_half_float"
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((8, 4)), rng.standard_normal((4, 8)), rng.standard_normal((8, 8))
    lanes_a = [[a[r, col] for r, col in lane] for lane in tc.swizzle[0]]
    lanes_b = [[b[r, col] for r, col in lane] for lane in tc.swizzle[1]]
    lanes_c = [[c[r, col] for r, col in lane] for lane in tc.swizzle[2]]
    out = tc.emulate(lanes_a, lanes_b, lanes_c)
    expected = a @ b + c
    for lane, coords in enumerate(tc.swizzle[2]):
        for i, (row, col) in enumerate(coords):
            assert out[lane][i] == pytest.approx(expected[row, col])


def test_tensor_core_with_replicated_inputs():
    # 2x2x2 on 4 lanes; A and B are held twice (lanes 0-1 and 2-3 hold the same halves, as on RDNA3)
    tc = TensorCore.from_maps(
        (2, 2, 2),
        4,
        dtypes.half,
        dtypes.half,
        a=lambda lane, i: (lane % 2, i),
        b=lambda lane, i: (i, lane % 2),
        c=lambda lane, i: (lane // 2, lane % 2),
        replication=(2, 2),
    )
    assert tc.elements_per_thread == (2, 2, 1)
    a, b = [[1, 2], [3, 4]], [[5, 6], [7, 8]]
    out = tc.emulate(
        [[a[r][k] for r, k in lane] for lane in tc.swizzle[0]],
        [[b[k][col] for k, col in lane] for lane in tc.swizzle[1]],
        [[0] for _ in range(4)],
    )
    assert out == [[19], [22], [43], [50]]


def test_tensor_core_layout_validation():
    with pytest.raises(ValueError, match="cover"):
        TensorCore.from_maps(
            (2, 2, 1), 2, dtypes.half, dtypes.float, a=lambda t, i: (0, 0), b=lambda t, i: (0, t), c=lambda t, i: (t, i)
        )
    with pytest.raises(ValueError, match="leaves"):
        TensorCore.from_maps(
            (2, 2, 1), 2, dtypes.half, dtypes.float, a=lambda t, i: (t, 1), b=lambda t, i: (0, t), c=lambda t, i: (t, i)
        )
    a_layout = (((0, 0),), ((1, 0),))
    b_layout = (((0, 0),), ((0, 1),))
    c_layout = (((0, 0), (0, 1), (1, 0)), ((1, 1), (0, 0), (1, 0)))  # covers C, but (0, 0) and (1, 0) twice
    with pytest.raises(ValueError, match="exactly one"):
        TensorCore((2, 2, 1), 2, (1, 1, 3), dtypes.half, dtypes.float, (a_layout, b_layout, c_layout))
    with pytest.raises(ValueError, match="lanes"):
        TensorCore((2, 2, 1), 2, (1, 1, 2), dtypes.half, dtypes.float, (a_layout, b_layout, c_layout))
    with pytest.raises(ValueError, match="divisible"):
        TensorCore.from_maps(
            (3, 3, 3), 2, dtypes.half, dtypes.float, a=lambda t, i: (0, 0), b=lambda t, i: (0, 0), c=lambda t, i: (0, 0)
        )


def test_program_spec_function_name_and_launch_dims():
    spec = ProgramSpec("\x1b[33mr_16:4\x1b[0m", [], "PYTHON", global_size=(16, 2, 1), local_size=None, vars=["n"])
    assert spec.function_name == "r_16_4"
    assert ProgramSpec("3x", [], "PYTHON").function_name == "k_3x"
    assert spec.launch_dims({"n": 5}) == ((16, 2, 1), None)
    assert not spec.has_symbolic_dims
    assert spec.var_values({"n": 5, "other": 1}) == (5,)
    with pytest.raises(KeyError, match="'n'"):
        spec.var_values({})
    assert spec.src is None and spec.lib is None


class _Sym:
    """Stands in for a symbolic size expression: `n * factor`."""

    def __init__(self, factor):
        self.factor = factor


@pytest.fixture
def fake_sym_infer(monkeypatch):
    module = types.ModuleType("tinycore.uop.ops")
    module.sym_infer = lambda expr, var_vals: expr.factor * var_vals["n"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tinycore.uop.ops", module)


def test_symbolic_launch_dims_and_estimates_go_through_sym_infer(fake_sym_infer):
    spec = ProgramSpec("E_n", [], "PYTHON", global_size=(_Sym(2), 1, 1), local_size=(_Sym(1), 1, 1), vars=["n"])
    assert spec.has_symbolic_dims
    assert spec.launch_dims({"n": 3}) == ((6, 1, 1), (3, 1, 1))
    assert spec.launch_dims({"n": 7}) == ((14, 1, 1), (7, 1, 1))
    assert Estimates(ops=_Sym(10), lds=4, mem=_Sym(1)).evaluate({"n": 2}) == Estimates(20, 4, 2)
    assert eval_dim(5, {}) == 5


def test_estimates_add():
    total = Estimates(1, 2, 3) + Estimates(10, 20, 30)
    assert total == Estimates(ops=11, lds=22, mem=33)


def test_renderer_defaults_and_abstract_render():
    class R(Renderer):
        device = "FAKE"

    r = R()
    assert r.has_local and r.has_shared and r.tensor_cores == [] and dtypes.float32 in r.supported_dtypes
    assert isinstance(r.native_ops, frozenset)
    with pytest.raises(NotImplementedError):
        r.render([])
    assert "FAKE" in repr(r)


def test_renderer_reduce_names_family_and_arch():
    class R(Renderer):
        device = "FAKE"

        def __init__(self, arch):
            self.arch = arch

    from tinycore.plugin.manager import rebuild_renderer

    func, args = R("sm_90").__reduce__()
    assert func is rebuild_renderer and args == ("FAKE", "sm_90")  # installed by the manager, a layer above


def test_pickling_a_renderer_without_the_plugin_manager_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    import tinycore.renderer as renderer_module

    monkeypatch.setattr(renderer_module, "_rebuilder", None)
    with pytest.raises(TypeError, match=r"cannot pickle .*open the device first"):
        pickle.dumps(Renderer())


def test_a_dtype_the_renderer_does_not_declare_is_refused_before_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from tinycore.device import Device
    from tinycore.dtype import dtypes
    from tinycore.errors import UnsupportedDTypeError
    from tinycore.tensor import Tensor

    renderer = Device["PYTHON"].renderer
    monkeypatch.setattr(renderer, "supported_dtypes", renderer.supported_dtypes - {dtypes.float16})
    with pytest.raises(UnsupportedDTypeError, match=r"device PYTHON does not support dtypes.half.*\.cast\("):
        (Tensor(np.ones(3, np.float16), device="PYTHON") * 3).numpy()
    assert (Tensor(np.ones(3, np.float32), device="PYTHON") * 3).numpy().tolist() == [3.0, 3.0, 3.0]
