"""The ``tinycore doctor`` smoke test of CLANG: render, compile and run two tiny hand-built kernels on the device,
one of them split over ``core_id`` so the native thread pool is exercised too.

Only public core API is used: the UOp constructors, the device's renderer/compiler/runtime/allocator.
"""

from __future__ import annotations

import struct
import time
from typing import Any

from tinycore.sdk import AxisType, Ops, UOp, dtypes


def axpy_program(n: int = 16) -> list[UOp]:
    """``data0[i] = data1[i] * 2 + 1`` for ``i < n``: a linearized program (docs/pipeline.md section 4)."""
    out = UOp.define_global(0, dtypes.float32, n)
    inp = UOp.define_global(1, dtypes.float32, n)
    end = UOp.const(dtypes.int32, n)
    i = UOp(Ops.RANGE, dtypes.int32, (end,), (0, AxisType.LOOP))
    two, one = UOp.const(dtypes.float32, 2.0), UOp.const(dtypes.float32, 1.0)
    load = inp.index(i).load()
    value = load * two + one
    store = out.index(i).store(value)
    return [out, inp, end, i, load.src[0], load, two, value.src[0], one, value, store.src[0], store, store.end(i)]


def core_id_program(chunks: int, chunk: int) -> list[UOp]:
    """Each of `chunks` core ids writes its id into its `chunk` elements of the int32 buffer ``data0``."""
    out = UOp.define_global(0, dtypes.int32, chunks * chunk)
    size = UOp.const(dtypes.int32, chunks)
    core = UOp(Ops.SPECIAL, dtypes.int32, (size,), "core_id")
    end = UOp.const(dtypes.int32, chunk)
    i = UOp(Ops.RANGE, dtypes.int32, (end,), (0, AxisType.LOOP))
    width = UOp.const(dtypes.int32, chunk)
    idx = core * width + i
    store = out.index(idx).store(core)
    return [out, size, core, end, i, width, idx.src[0], idx, store.src[0], store, store.end(i)]


def smoke_test(ctx: Any) -> str:
    """A doctor check: run the two programs on ``ctx.device``; raise ``CheckFailed`` with a fix when wrong."""
    from tinycore.sdk import CheckFailed, CheckSkipped, CompileError

    device = ctx.device
    if device is None or getattr(device, "family", "") != "CLANG":
        raise CheckSkipped("not a CLANG device")
    report = "report this to the tinycore-clang maintainers with the output of `tinycore doctor CLANG --json`"
    n, chunks, chunk = 16, 2, 8
    renderer, compiler, alloc = device.renderer, device.compiler, device.allocator
    try:
        start = time.perf_counter()
        lib = compiler.compile(renderer.render(axpy_program(n), name="tc_doctor_axpy"))
        compile_ms = (time.perf_counter() - start) * 1e3
        lib_threads = compiler.compile_cached(renderer.render(core_id_program(chunks, chunk), name="tc_doctor_cores"))
    except CompileError as error:
        raise CheckFailed(
            f"the kernel compiler failed on a tiny kernel: {str(error).splitlines()[0]}",
            "check that the compiler works (`$CC --version`), or pick another one with CC=gcc / CC=clang "
            "(with the llvm backend: pip install -U llvmlite, TINYCORE_LLVM_LIB=/path/to/libLLVM-N.so, "
            "or CLANG_BACKEND=c)",
        ) from error
    out, inp = alloc.alloc(4 * n), alloc.alloc(4 * n)
    out_i = alloc.alloc(4 * chunks * chunk)
    try:
        alloc.copyin(inp, memoryview(struct.pack(f"{n}f", *range(n))))
        device.runtime("tc_doctor_axpy", lib)(out, inp, global_size=(1, 1, 1), local_size=None, vals=())
        got = memoryview(bytearray(4 * n))
        alloc.copyout(got, out)
        if list(struct.unpack(f"{n}f", got)) != [x * 2.0 + 1.0 for x in range(n)]:
            raise CheckFailed("the compiled kernel computed wrong values", report)
        device.runtime("tc_doctor_cores", lib_threads)(out_i, global_size=(chunks, 1, 1), vals=())
        got_i = memoryview(bytearray(4 * chunks * chunk))
        alloc.copyout(got_i, out_i)
        if list(struct.unpack(f"{chunks * chunk}i", got_i)) != [c for c in range(chunks) for _ in range(chunk)]:
            raise CheckFailed("the threaded (core_id) kernel computed wrong values", report)
    finally:
        for buf, size in ((out, 4 * n), (inp, 4 * n), (out_i, 4 * chunks * chunk)):
            alloc.free(buf, size)
    if getattr(device, "backend", "c") == "llvm":
        name = f"llvm backend, LLVM from {compiler.library.source} ({compiler.library.path})"
        note = ""
    else:
        name = compiler.cc.rsplit("/", 1)[-1]
        note = "" if "clang" in name else f"; {SLOW_COMPILER_NOTE}"
    target = getattr(device, "target_cpu", None)
    name += f" for {target} (CLANG_CPU)" if target is not None else ""
    summary = f"{name}: 1 kernel compiled in {compile_ms:.0f} ms, ran; core_id kernel ran on {device.threads} thread(s)"
    return summary + note


# gcc does not vectorize the per-lane vector code the renderer emits (measured: matmul 512 at 6 vs 135 GFLOPS)
SLOW_COMPILER_NOTE = (
    "note: kernels built by this compiler run much slower than LLVM's (pip install llvmlite, then CLANG_BACKEND=auto)"
)
