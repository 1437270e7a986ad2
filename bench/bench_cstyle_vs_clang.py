"""Should CLANG's C backend move onto core's C-family renderer base? Measure it (issue 19, item 3).

Each workload's kernels are rendered twice for this CPU, with the same optimizer decisions (the base renderer below
copies every attribute the heuristics read from `ClangRenderer`): by `ClangRenderer` (GCC/clang vector extensions,
whole-vector arithmetic) and by `CStyleRenderer` with a plain-C dialect (vector loads and stores, arithmetic lane by
lane). Both are compiled with the same compiler and flags and called single-threaded through ctypes on the same
arrays; results are checked equal, and the table gives each workload's median time and the base's ratio.

    python3 bench/bench_cstyle_vs_clang.py [--runs 20]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from tinycore_clang.renderer import ClangRenderer
from tinycore_clang.toolchain import find_compiler

from tinycore.codegen import get_program
from tinycore.dtype import dtypes
from tinycore.renderer.cstyle import CDialect, CStyleRenderer
from tinycore.tensor import Tensor

_LANES = {dtypes.float32: "float", dtypes.float64: "double", dtypes.int32: "int", dtypes.int64: "long long"}
_PRELUDE = "\n".join(
    f"typedef {c} tc_{c.replace(' ', '_')}{n} __attribute__((vector_size({n * d.itemsize}), aligned({d.itemsize})));"
    for d, c in _LANES.items()
    for n in (2, 4, 8, 16)
)
PLAIN_C = CDialect(
    name="plain C",
    prelude="#include <math.h>\n#include <stdbool.h>\n" + _PRELUDE,
    buffer_param="{const}{type}* restrict {name}",
    vector_widths=(2, 4, 8, 16),
    vector_widths_by_dtype={d: () for d in dtypes.__dict__.values() if hasattr(d, "itemsize") and d not in _LANES},
    vector_type="tc_{scalar}{n}",
    vector_make="(({type}){{{lanes}}})",
    lane_access="{v}[{i}]",
    intrinsics={
        "SQRT": "__builtin_sqrtf({0})",
        "SQRT_DOUBLE": "__builtin_sqrt({0})",
        "TRUNC": "__builtin_truncf({0})",
        "MULACC": "__builtin_fmaf({0}, {1}, {2})",
    },  # fmt: skip
)
_HEURISTIC_ATTRIBUTES = (
    "supports_float4", "has_local", "has_shared", "global_max", "local_max", "shared_max", "native_ops",
    "supported_dtypes", "index_bits", "vector_bytes", "row_reduce_bytes", "max_vector_access",
)  # fmt: skip


class BaseC(CStyleRenderer):
    """The C-family base with a plain-C dialect, making the optimizer's decisions exactly as CLANG's renderer."""

    device = "CLANG"
    dialect = PLAIN_C

    def __init__(self, like: ClangRenderer):
        for name in _HEURISTIC_ATTRIBUTES:
            setattr(self, name, getattr(like, name))
        self.threads = 1


def _workloads() -> dict[str, Tensor]:
    rng = np.random.default_rng(0)

    def t(*shape: int) -> Tensor:
        return Tensor(rng.standard_normal(shape).astype(np.float32), device="PYTHON").realize()

    a, b = t(1 << 22), t(1 << 22)
    m, w = t(384, 384), t(384, 384)
    rows = t(1024, 1024)
    return {
        "add 4M": a + b,
        "mul-add-relu 4M": (a * b + a).relu(),
        "row sum 1024x1024": rows.sum(1),
        "softmax 1024x1024": rows.softmax(-1),
        "matmul 384": m @ w,
    }


def _build(renderer, items, folder: Path, tag: str, cc: str) -> list:
    calls = []
    for n, item in enumerate(items):
        prog = get_program(item.ast, renderer)
        if any(u.arg == "core_id" for u in prog.uops):
            raise SystemExit(f"{tag}: kernel {n} is threaded; run with THREADS=1")
        src = renderer.render(prog.uops, f"k{n}")
        c_file, lib = folder / f"{tag}{n}.c", folder / f"{tag}{n}.so"
        c_file.write_text(src)
        flags = ["-O2", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC", "-w"]
        subprocess.run([cc, *flags, "-o", str(lib), str(c_file)], check=True)
        calls.append(getattr(ctypes.CDLL(str(lib)), f"k{n}"))
    return calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    cc = find_compiler().path
    clang = ClangRenderer(threads=1)
    print(f"compiler {cc}; vector bytes {clang.vector_bytes}; median of {args.runs} runs, single-threaded")
    print(f"{'workload':22} {'ClangRenderer ms':>17} {'C-family base ms':>17} {'base/clang':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for w, (name, result) in enumerate(_workloads().items()):
            items = [i for i in result.schedule() if i.ast is not None]
            arrays: dict[int, np.ndarray] = {}

            def host(buf, arrays: dict[int, np.ndarray] = arrays) -> np.ndarray:
                if id(buf) not in arrays:
                    known = buf.numpy().copy() if buf.is_allocated() else np.zeros(buf.size, dtypes.to_np(buf.dtype))
                    arrays[id(buf)] = known
                return arrays[id(buf)]

            args_of = [[host(b).ctypes.data_as(ctypes.c_void_p) for b in i.bufs] for i in items]
            times, outputs = {}, {}
            for tag, renderer in (("clang", clang), ("base", BaseC(clang))):
                calls = _build(renderer, items, Path(tmp), f"{tag}_{w}_", cc)  # a new path: dlopen caches by path
                samples = []
                for run in range(args.runs + 2):  # two warm-up runs: first touches of the outputs' pages
                    start = time.perf_counter()
                    for call, call_args in zip(calls, args_of):
                        call(*call_args)
                    if run >= 2:
                        samples.append(time.perf_counter() - start)
                times[tag] = statistics.median(samples) * 1e3
                outputs[tag] = host(items[-1].bufs[0]).copy()
            np.testing.assert_allclose(outputs["base"], outputs["clang"], rtol=1e-5, atol=1e-5, err_msg=name)
            ratio = times["base"] / times["clang"]
            print(f"{name:22} {times['clang']:17.3f} {times['base']:17.3f} {ratio:10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
