"""The C-family renderer base (`tinycore.renderer.cstyle`): rule tables, dialect fields, errors, and semantics.

Semantics are checked without any plugin: a plain-C dialect of the base is compiled with the system C compiler and
run on whole schedules, and every result is compared with the PYTHON reference device.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tinycore.codegen import get_program
from tinycore.dtype import ALL_SCALARS, AddrSpace, dtypes
from tinycore.renderer.cstyle import (
    CDialect,
    CRenderError,
    CStyleRenderer,
    alu_rules,
    control_rules,
    memory_rules,
    value_rules,
)
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.patterns import PatternMatcher, UPat

PRELUDE = """#include <math.h>
#include <stdbool.h>
typedef float tc_float4 __attribute__((vector_size(16), aligned(4)));
typedef int tc_int4 __attribute__((vector_size(16), aligned(4)));
typedef double tc_double4 __attribute__((vector_size(32), aligned(8)));
"""
TEST_C = CDialect(
    name="test C",
    prelude=PRELUDE,
    types={dtypes.float16: "_Float16"},
    vector_widths=(4,),
    vector_widths_by_dtype={d: () for d in ALL_SCALARS if d not in (dtypes.float32, dtypes.int32, dtypes.float64)},
    vector_type="tc_{scalar}{n}",
    vector_make="(({type}){{{lanes}}})",
    lane_access="{v}[{i}]",
    intrinsics={
        "SQRT": "sqrtf({0})",
        "SQRT_DOUBLE": "sqrt({0})",
        "TRUNC": "truncf({0})",
        "TRUNC_DOUBLE": "trunc({0})",
    },
)


class CPUStyleC(CStyleRenderer):
    """Plain C, loops only (no launch ids): what the base renders for a CPU-style device."""

    device = "TESTC"
    dialect = TEST_C
    has_local = has_shared = False
    supports_float4 = True
    native_ops = frozenset({"SQRT", "TRUNC", "FDIV"})
    supported_dtypes = CStyleRenderer.supported_dtypes - {dtypes.bfloat16}


CC = shutil.which("gcc") or shutil.which("cc") or shutil.which("clang")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (gcc, cc or clang) on PATH")


def test_rule_tables_are_named_and_the_dialect_rules_come_first() -> None:
    for table, name in ((control_rules, "c_control"), (memory_rules, "c_memory"), (value_rules, "c_values")):
        assert isinstance(table, PatternMatcher) and table.name == name
    assert Ops.ADD in alu_rules.ops and Ops.STORE in memory_rules.ops and Ops.RANGE in control_rules.ops
    loud_sqrt = PatternMatcher([(UPat(Ops.SQRT, name="x"), lambda ctx, x: f"my_sqrt({ctx.scalar(x.src[0])})")])

    class WithRules(CPUStyleC):
        dialect = CDialect(name="ruled", extra_rules=loud_sqrt)

    out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(1), (), 0)
    zero = UOp.const(dtypes.int32, 0)
    root = UOp(Ops.SQRT, dtypes.float32, (UOp.const(dtypes.float32, 2.0),))
    store = out.index(zero).store(root)
    src = WithRules().render([out, zero, out.index(zero), root.src[0], root, store], "k")
    assert "my_sqrt(2.0f)" in src


def _store_program(value: UOp, extra: list[UOp] | None = None) -> list[UOp]:
    out = UOp(Ops.DEFINE_GLOBAL, value.dtype.ptr(1), (), 0)
    zero = UOp.const(dtypes.int32, 0)
    return [out, zero, *(extra or []), *value.toposort(), out.index(zero), out.index(zero).store(value)]


def test_missing_dialect_features_are_clear_errors() -> None:
    lid = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, 4),), "lidx0")
    with pytest.raises(
        CRenderError, match=r"test C renderer \(TESTC\): can't render Ops.SPECIAL.*no launch id 'lidx0'"
    ):
        CPUStyleC().render(_store_program(lid.cast(dtypes.float32)))
    barrier = UOp(Ops.BARRIER, dtypes.void, ())
    with pytest.raises(CRenderError, match="no work-group barrier"):
        CPUStyleC().render([barrier])
    wmma = UOp(Ops.WMMA, dtypes.float32.vec(2), (), ("tc",))
    with pytest.raises(CRenderError, match="renders no tensor cores"):
        CPUStyleC().render([wmma])


def test_gpu_style_kernel_uses_every_dialect_field() -> None:
    class Gpu(CStyleRenderer):
        device = "TOYGPU"
        dialect = CDialect(
            name="toy",
            kernel_prefix="__kernel void",
            address_spaces={AddrSpace.GLOBAL: "__global "},
            launch_ids={"gidx": "group({dim})", "lidx": "local({dim})"},
            barrier="sync();",
            shared_decl="__shared {type} {name}[{size}];",
            vector_widths=(4,),
            vector_load="load{n}({ptr})",
            vector_store="store{n}({ptr}, {value});",
            lane_access="{v}.s{i}",
        )

    from tinycore.codegen.kernel import Opt, OptOps

    a = Tensor.empty(64, 256, device="PYTHON")
    (item,) = [i for i in a.sum(1).schedule() if i.ast is not None]
    src = Gpu().render(get_program(item.ast, Gpu(), [Opt(OptOps.GROUP, 0, 16)]).uops, "k")
    for needle in ("__kernel void k(", "__global float* data0", "group(0)", "local(0)", "sync();", "__shared float"):
        assert needle in src, f"{needle!r} missing from\n{src}"
    (item,) = [i for i in (Tensor.empty(1024, device="PYTHON") * 2).schedule() if i.ast is not None]
    src = Gpu().render(get_program(item.ast, Gpu(), [Opt(OptOps.UPCAST, 0, 4)]).uops, "k")
    assert "load4(" in src and "store4(" in src and ".s3" in src


# ----- semantics: compiled plain C against the PYTHON reference device -----
def _run_schedule(result: Tensor, tmp_path: Path) -> np.ndarray:
    """Run every kernel of `result`'s schedule as compiled C on host arrays; return the result's array."""
    arrays: dict[int, np.ndarray] = {}

    def host(buf) -> np.ndarray:
        if id(buf) not in arrays:
            arrays[id(buf)] = buf.numpy().copy() if buf.is_allocated() else np.zeros(buf.size, dtypes.to_np(buf.dtype))
        return arrays[id(buf)]

    renderer = CPUStyleC()
    items = result.schedule()
    for n, item in enumerate(items):
        if item.ast is None or item.ast.op is not Ops.SINK:
            continue
        prog = get_program(item.ast, renderer)
        src = renderer.render(prog.uops, f"k{n}")
        c_file, lib = tmp_path / f"k{n}.c", tmp_path / f"k{n}.so"
        c_file.write_text(src)
        done = subprocess.run(
            [CC, "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-o", lib, c_file], capture_output=True
        )
        assert done.returncode == 0, f"{done.stderr.decode()}\n{src}"
        args = [host(b).ctypes.data_as(ctypes.c_void_p) for b in item.bufs]
        getattr(ctypes.CDLL(str(lib)), f"k{n}")(*args)
    return host(items[-1].bufs[0]).reshape(result.shape)


CASES = {
    "float_chain": (lambda a, b: (a * b - a) / (b.abs() + 0.5) + a.maximum(b), np.float32),
    "float_nan_max": (lambda a, b: (a / (a * 0)).maximum(b), np.float32),
    "float64_sqrt_trunc": (lambda a, b: (a.abs() + 1).sqrt() + (a * 3.7).trunc(), np.float64),
    "float16_round_each_op": (lambda a, b: (a * b + a) * 0.1, np.float16),
    "int_wraps": (lambda a, b: a * 1000003 * 1000003 + b, np.int32),
    "int_div_mod_by_zero": (lambda a, b: a // (b % 3) + a % (b % 3), np.int32),
    "int_div_truncates": (lambda a, b: a // 7 + a % -5, np.int32),
    "int_shifts": (lambda a, b: (a << 3) + (a >> 2), np.int32),
    "int64_mix": (lambda a, b: a * 3_000_000_000 - b, np.int64),
    "uint8_wraps": (lambda a, b: a * b + 200, np.uint8),
    "bool_logic": (lambda a, b: ((a > 0) & (b < 1)) | ((a == b) ^ (a < b)), np.int32),
    "bitcasts": (lambda a, b: a.bitcast(dtypes.int32) + (b * 2).bitcast(dtypes.int32), np.float32),
    "casts": (
        lambda a, b: (a * 2.5).cast(dtypes.int32).cast(dtypes.float32) + (b > 0).cast(dtypes.float32),
        np.float32,
    ),
    "where_sum_broadcast": (lambda a, b: (a > b).where(a, b).sum(axis=1, keepdim=True) + a, np.float32),
    "reduce_max_axis0": (lambda a, b: (a + b).max(axis=0), np.float32),
}


@needs_cc
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_c_matches_the_reference_device(case: str, tmp_path: Path) -> None:
    fn, np_dtype = CASES[case]
    rng = np.random.default_rng(len(case))
    if np.issubdtype(np_dtype, np.integer):
        lo, hi = (0, 255) if np_dtype == np.uint8 else (-1000, 1000)
        data = [rng.integers(lo, hi, size=(5, 12)).astype(np_dtype) for _ in range(2)]
    else:
        data = [rng.uniform(-3, 3, size=(5, 12)).astype(np_dtype) for _ in range(2)]
    want = fn(*(Tensor(d, device="PYTHON") for d in data)).numpy()
    got = _run_schedule(fn(*(Tensor(d, device="PYTHON").realize() for d in data)), tmp_path)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6 if want.dtype != np.float16 else 1e-3, equal_nan=True)
