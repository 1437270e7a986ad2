"""exp2 with fused multiply-adds on renderers with a native ``MULACC`` (the CLANG device): accuracy over the float32
range, special values, softmax against torch on odd shapes; and the convolution's register tile without the
matmul's loop reordering."""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.codegen import OptOps, get_kernel, get_program
from tinycore.codegen.decompositions import xexp2
from tinycore.codegen.heuristic import hand_coded_optimizations
from tinycore.device import Buffer, Device
from tinycore.dtype import dtypes
from tinycore.engine.exec_item import CompiledRunner
from tinycore.uop.ops import Ops, UOp

EXP2_F32_ULP_BOUND = 1.08  # the bound tests/test_decompositions.py holds the unfused float32 exp2 to


def exp2_on(device: str, xs: np.ndarray) -> tuple[np.ndarray, object]:
    n = xs.size
    out, inp = UOp.define_global(0, dtypes.float32, n), UOp.define_global(1, dtypes.float32, n)
    p = get_program(UOp.sink(out.store(UOp(Ops.LOAD, dtypes.float32, (inp,)).alu(Ops.EXP2))), Device[device].renderer)
    bufs = [Buffer(device, n, dtypes.float32).allocate(), Buffer(device, n, dtypes.float32).copyin(xs.tobytes())]
    CompiledRunner(p)(bufs, {})
    return bufs[0].numpy(), p


def ulps(got: np.ndarray, x: np.ndarray) -> np.ndarray:
    """|got - 2^x| in float32 ULPs of the exact value (float64 reference; denormal ULP below 2^-126)."""
    ref = np.exp2(x.astype(np.float64))
    _, ex = np.frexp(ref)
    ulp = np.ldexp(1.0, np.maximum(ex - 1, -126) - 23)
    return np.abs(got.astype(np.float64) - ref) / ulp


def test_fused_exp2_graph_is_shorter_and_has_no_nan_select():
    x = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 1))
    plain = [u for u in xexp2(x).toposort() if u.op not in (Ops.CONST, Ops.DEFINE_VAR)]
    fused = [u for u in xexp2(x, fused=True).toposort() if u.op not in (Ops.CONST, Ops.DEFINE_VAR)]
    assert sum(u.op is Ops.MULACC for u in fused) == 7  # the degree-7 polynomial plus the "+ 1"
    assert len(fused) <= len(plain) - 8
    assert not any(u.op is Ops.CMPNE for u in fused)  # no isnan(x) select: NaN propagates
    x64 = UOp(Ops.DEFINE_VAR, dtypes.float64, (), ("x", 0, 1))
    assert not any(u.op is Ops.MULACC for u in xexp2(x64, fused=True).toposort())  # float64 keeps its accurate form


def test_clang_exp2_uses_fma_and_stays_within_the_ulp_bound(clang):
    assert "MULACC" in clang.renderer.native_ops
    rng = np.random.default_rng(0)
    xs = np.concatenate(
        [
            rng.uniform(-151.0, 128.5, 1 << 18),
            rng.uniform(-1.0, 1.0, 1 << 16),
            rng.standard_normal(1 << 16) * 1e-6,
            [127.99, 127.99999, 127.5, -126.0, -126.5, -149.0, -149.5, -149.9, 0.49999997, -0.49999997, 0.5, -0.5],
        ]
    ).astype(np.float32)
    got, p = exp2_on("CLANG", xs)
    assert any(u.op is Ops.MULACC for u in p.uops)
    finite = np.isfinite(np.exp2(xs.astype(np.float64))) & (xs < 128)
    errs = ulps(got[finite], xs[finite])
    assert errs.max() <= EXP2_F32_ULP_BOUND, xs[finite][errs.argmax()]


def test_clang_exp2_special_values_like_numpy(clang):
    xs = np.array(
        [np.nan, np.inf, -np.inf, 0.0, -0.0, 128.0, 128.00002, 1e30, -150.0, -150.0001, -160.0, -1e30, -149.0, 1.0]
        + [-140.0, 3.0, -3.0],
        np.float32,
    )
    got, _ = exp2_on("CLANG", xs)
    with np.errstate(all="ignore"):
        want = np.exp2(xs.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(got, want)  # NaN where NaN, inf, exact zeros, exact powers of two


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (17, 1000), (4, 4096), (2, 3, 33)])
def test_clang_softmax_matches_torch(clang, shape):
    import torch

    from tinycore import Tensor

    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 20
    x.ravel()[:: max(1, x.size // 7)] = -np.inf  # masked entries (never a whole row: rows have > 1 entry or none)
    if x.shape[-1] == 1:
        x[...] = 1.5
    got = Tensor(x, device="CLANG").softmax(-1).numpy()
    want = torch.from_numpy(x).softmax(-1).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    got_exp = Tensor(x, device="CLANG").exp().numpy().astype(np.float64)
    want_exp = np.exp(x.astype(np.float64))
    # exp(x) = exp2(x * log2(e)): the rounded product adds |x * log2(e)| * 2^-24 relative error to exp2's ULP
    finite = np.isfinite(x)
    tolerance = (1.2e-7 + np.abs(x[finite]) * 1.5 * 2.0**-24) * want_exp[finite]
    assert (np.abs(got_exp[finite] - want_exp[finite]) <= tolerance).all()
    assert (got_exp[~finite] == 0).all()  # exp(-inf)


# ----- convolution: the register tile without the matmul's loop reordering


def test_heuristic_gives_a_convolution_a_register_tile_and_keeps_its_loop_order(clang):
    from tinycore import Tensor

    x = Tensor(np.zeros((2, 16, 12, 16), np.float32), device="CLANG")
    w = Tensor(np.zeros((32, 16, 3, 3), np.float32), device="CLANG")
    conv = next(si for si in x.conv2d(w, padding=1).schedule() if _has_reduce(si.ast))
    k = get_kernel(conv.ast, clang.renderer)
    opts = hand_coded_optimizations(k)
    assert [o.op for o in opts if o.op is OptOps.UPCAST] == [OptOps.UPCAST] * 2
    assert OptOps.SWAP not in [o.op for o in opts] and OptOps.TILE not in [o.op for o in opts]


def _has_reduce(ast: UOp) -> bool:
    return any(u.op is Ops.REDUCE_AXIS for u in ast.toposort())


def test_clang_copies_the_padded_input_of_large_convolutions_only(clang):
    from tinycore import Tensor

    small = Tensor(np.zeros((2, 8, 16, 16), np.float32), device="CLANG").conv2d(
        Tensor(np.zeros((16, 8, 3, 3), np.float32), device="CLANG"), padding=1
    )
    assert len(small.schedule()) == 1  # stays in cache: the conv reads the padded view directly
    x, w = (
        np.random.default_rng(2).standard_normal((2, 16, 40, 30)).astype(np.float32),
        np.ones((8, 16, 3, 3), np.float32),
    )
    big = Tensor(x, device="CLANG").conv2d(Tensor(w, device="CLANG"), padding=1)
    assert len(big.schedule()) == 2  # the contiguous padded copy, then the convolution
    import torch

    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    got = Tensor(x, device="CLANG").conv2d(Tensor(w, device="CLANG"), padding=1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
