#!/usr/bin/env python3
"""A/B of LLVMs and pass pipelines for the CLANG ``llvm`` backend: every kernel of a few Tensor workloads is
compiled with the default LLVM and pipeline ("base": llvmlite's LLVM, or ``TINYCORE_LLVM_LIB``'s, with
`tinycore_clang.libllvm.KERNEL_PIPELINE`) and with each pipeline given, then the builds of one kernel are timed
interleaved in one process on the same buffers, so the ratios compare code quality and not the machine's mood.

Usage:
    python bench/bench_llvm_pipeline.py "default<O2>;system:function(sroa,instcombine,...);system:" [--only NAME,NAME]

Pipelines are separated by ``;``. A plain pipeline runs on the default LLVM; ``system:PIPELINE`` on the system's
libLLVM (`tinycore_clang.libllvm.find_system_library`), ``system:`` alone with its default pipeline: that compares
llvmlite's LLVM with the system's. Compile time is CPU time (parse, optimize, emit), so a busy machine skews it
less than wall time. Workloads: conv2d 8x64x56x56 (3x3, pad 1), an odd matmul (217x186@186x171),
softmax / layernorm / argmax / cumsum of 1024x1000, an MLP training step (784-512-512-10, batch 128, SGD), an
embedding lookup. Prints per kernel (slower than 20 us) the run time under the base pipeline and each pipeline's
ratio to it, then total run time and total compile time per pipeline. LLVM's command-line options are per process:
compare ``CLANG_LLVM_ARGS`` settings by running this once per setting. Benchmarks are never run as timed tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("TINYCORE_CACHE_DIR", tempfile.mkdtemp())  # every kernel compiled fresh
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from tinycore import Tensor, nn  # noqa: E402
from tinycore.engine.exec_item import CompiledRunner  # noqa: E402


def capture_kernels() -> dict[str, tuple]:
    """Run the workloads once; returns ``{kernel name: (ProgramSpec, buffers, variable values)}`` of each kernel's
    first launch."""
    captured: dict[str, tuple] = {}
    original = CompiledRunner.__call__

    def recording(self, rawbufs, var_vals=None, wait=False, **kwargs):
        captured.setdefault(self.p.name, (self.p, list(rawbufs), dict(var_vals or {})))
        return original(self, rawbufs, var_vals, wait, **kwargs)

    CompiledRunner.__call__ = recording
    try:
        rng = np.random.default_rng(0)

        def rand(*shape: int) -> Tensor:
            return Tensor(rng.standard_normal(shape).astype(np.float32))

        rand(8, 64, 56, 56).conv2d(rand(64, 64, 3, 3), padding=1).realize()
        (rand(217, 186) @ rand(186, 171)).realize()
        rows = rand(1024, 1000)
        for out in (rows.softmax(1), rows.layernorm(), rows.argmax(1), rows.cumsum(1)):
            out.realize()
        layers = [nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)]
        opt = nn.optim.SGD(nn.state.get_parameters(layers), lr=0.01)
        x, y = rand(128, 784), Tensor(rng.integers(0, 10, 128).astype(np.int32))
        with Tensor.train():
            for _ in range(2):
                opt.zero_grad()
                logits = layers[2](layers[1](layers[0](x).relu()).relu())
                logits.sparse_categorical_crossentropy(y).backward()
                opt.step()
        nn.Embedding(1000, 256)(Tensor(rng.integers(0, 1000, (64, 32)).astype(np.int32))).realize()
    finally:
        CompiledRunner.__call__ = original
    return captured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pipelines", help="';'-separated new-pass-manager pipelines to compare with the default")
    parser.add_argument("--only", default="", help="comma-separated kernel names")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    from tinycore_clang.libllvm import PassOptions, find_system_library
    from tinycore_clang.llvm_compiler import LLVMCompiler, options_from_env

    base = replace(options_from_env(), pipeline=PassOptions().pipeline)  # LLVM options (CLANG_LLVM_ARGS): per process
    compilers = {"base": LLVMCompiler(options=base)}
    for i, spec in enumerate(args.pipelines.split(";")):
        on_system = spec.startswith("system:")
        pipeline = spec.removeprefix("system:")
        library = find_system_library() if on_system else None
        if library is not None and not library.ok:
            sys.exit(f"{spec}: {library.reason}")
        options = replace(base, pipeline=pipeline or base.pipeline)
        compilers[f"P{i}"] = LLVMCompiler(library=library, options=options)
    for name, compiler in compilers.items():
        print(f"{name}: {compiler!r}")
    only = set(filter(None, args.only.split(",")))
    run_total = dict.fromkeys(compilers, 0.0)
    compile_total = dict.fromkeys(compilers, 0.0)
    rows = []
    for name, (spec, bufs, var_vals) in capture_kernels().items():
        if only and name not in only:
            continue
        runners = {}
        for key, compiler in compilers.items():
            start = time.thread_time()
            lib = compiler.compile(spec.src)
            compile_total[key] += time.thread_time() - start
            runners[key] = CompiledRunner(spec, precompiled=lib)
        times: dict[str, list[float]] = {key: [] for key in runners}
        for _ in range(args.rounds):
            for key, runner in runners.items():
                runner(bufs, var_vals, wait=True)
                for _ in range(5):
                    start = time.perf_counter()
                    runner(bufs, var_vals, wait=True)
                    times[key].append(time.perf_counter() - start)
        median = {key: statistics.median(values) for key, values in times.items()}
        for key in median:
            run_total[key] += median[key]
        rows.append((max(median[key] / median["base"] for key in median), name, median))
    for _, name, median in sorted(rows, key=lambda row: row[0]):
        if median["base"] > 2e-5:
            ratios = " ".join(f"{key} {median[key] / median['base']:.3f}" for key in median)
            print(f"{median['base'] * 1e3:8.3f} ms  {ratios}  {name}")
    print(f"kernels {len(rows)}; run " + " ".join(f"{k} {v * 1e3:.2f}" for k, v in run_total.items()) + " ms")
    print("compile (CPU) " + " ".join(f"{k} {v * 1e3:.0f}" for k, v in compile_total.items()) + " ms")


if __name__ == "__main__":
    main()
