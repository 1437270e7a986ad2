"""CLANG device through core: allocator (alignment, views, zero-copy, transfers), separate CLANG:0/CLANG:1 devices,
kernels through `CompiledRunner`/`ExecItem`, launch argument checks, compile targets, doctor."""

from __future__ import annotations

import ctypes
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from tinycore_clang.testing import elementwise, linearize, loop

from tinycore.device import Buffer
from tinycore.dtype import dtypes
from tinycore.engine.exec_item import BufferCopy, CompiledRunner, ExecItem
from tinycore.renderer import ProgramSpec
from tinycore.uop.ops import AxisType, Ops, UOp


@pytest.fixture(scope="module")
def registry():
    """Core's device registry (skips when CLANG can't run here)."""
    from tinycore_clang.testing import unavailable_reason

    if reason := unavailable_reason():
        pytest.skip(reason)
    from tinycore.device import Device

    return Device


def test_allocations_are_aligned_and_round_trip(clang):
    alloc = clang.allocator
    sizes = [1, 3, 64, 1000, 9 << 20]
    handles = [alloc.alloc(size) for size in sizes]
    try:
        for size, handle in zip(sizes, handles):
            assert handle.ptr % 64 == 0
            if size >= 8 << 20:
                assert handle.ptr % (2 << 20) == 0
            payload = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
            alloc.copyin(handle, memoryview(payload))
            back = np.zeros(size, np.uint8)
            alloc.copyout(memoryview(back), handle)
            assert (back == payload).all()
    finally:
        for size, handle in zip(sizes, handles):
            alloc.free(handle, size)


def test_as_buffer_is_zero_copy_and_views_share_memory(clang):
    alloc = clang.allocator
    base = alloc.alloc(64)
    view = alloc.offset(base, 16, 32)
    mv = alloc.as_buffer(base)
    mv[32:48] = bytes(range(16))
    assert bytes(alloc.as_buffer(view)) == bytes(range(16))
    assert view.ptr == base.ptr + 32
    alloc.as_buffer(view)[0] = 99
    assert mv[32] == 99
    with pytest.raises(ValueError):
        alloc.offset(base, 64, 8)
    alloc.free(base, 64)


def test_external_pointer_is_wrapped_not_owned(registry):
    backing = (ctypes.c_float * 4)(1, 2, 3, 4)
    buf = Buffer("CLANG", 4, dtypes.float32).allocate(external_ptr=ctypes.addressof(backing))
    assert buf._buf.ptr == ctypes.addressof(backing)
    assert buf.numpy().tolist() == [1, 2, 3, 4]
    buf.copyin(np.array([5, 6, 7, 8], np.float32).data)
    assert list(backing) == [5, 6, 7, 8]


def test_freed_memory_is_reused(clang):
    alloc = clang.allocator
    first = alloc.alloc(4096)
    alloc.free(first, 4096)
    second = alloc.alloc(4096)
    assert second is first  # LRU cache hands the same allocation back
    alloc.free(second, 4096)


def test_clang_0_and_clang_1_are_distinct_devices_with_copies(registry):
    d0, d1 = registry["CLANG"], registry["CLANG:1"]
    assert d0 is not d1 and d0.allocator is not d1.allocator
    assert d0.device == "CLANG" and d1.device == "CLANG:1" and registry["cpu:1"] is d1
    src = Buffer("CLANG", 16, dtypes.int32).copyin(np.arange(16, dtype=np.int32).data)
    dst = Buffer("CLANG:1", 16, dtypes.int32)
    copy = BufferCopy(64, "CLANG:1", "CLANG")
    assert copy.can_transfer(dst, src)
    copy.copy(dst, src)
    assert dst.numpy().tolist() == list(range(16))
    src.copyin(np.zeros(16, np.int32).data)  # separate memory: the copy keeps its data
    assert dst.numpy().tolist() == list(range(16)) and dst._buf.ptr != src._buf.ptr


def test_kernel_through_compiled_runner_and_exec_item(registry):
    prog = elementwise(Ops.MUL, [dtypes.float32] * 2, dtypes.float32, 16)
    runner = CompiledRunner(ProgramSpec("E_16_mul", prog, "CLANG"))
    a = Buffer("CLANG", 16, dtypes.float32).copyin(np.arange(16, dtype=np.float32).data)
    b = Buffer("CLANG", 16, dtypes.float32).copyin(np.full(16, 3, np.float32).data)
    out = Buffer("CLANG", 16, dtypes.float32)
    elapsed = ExecItem(runner, [out, a, b]).run(wait=True)
    assert isinstance(elapsed, float) and elapsed >= 0
    assert out.numpy().tolist() == [3.0 * i for i in range(16)]
    assert runner.lib[:4] == b"\x7fELF"


def test_symbolic_kernel_through_core(registry):
    n = UOp.variable("n", 1, 32, dtypes.int32)
    out = UOp.define_global(0, dtypes.int32, 32)
    i = UOp(Ops.RANGE, dtypes.int32, (n,), (0, AxisType.LOOP))
    prog = linearize(out.index(i).store(i * n))
    runner = CompiledRunner(ProgramSpec("E_n", prog, "CLANG", vars=["n"]))
    buf = Buffer("CLANG", 32, dtypes.int32).copyin(np.full(32, -1, np.int32).data)
    ExecItem(runner, [buf], {"n": 5}).run()
    assert buf.numpy().tolist()[:6] == [0, 5, 10, 15, 20, -1]


def test_program_checks_argument_counts(clang):
    prog = elementwise(Ops.ADD, [dtypes.float32] * 2, dtypes.float32, 4)
    src = clang.renderer.render(prog, name="kargs")
    program = clang.runtime("kargs", clang.compiler.compile_cached(src))
    assert (program.nbufs, program.nvars, program.threaded) == (3, 0, False)
    mem = clang.allocator.alloc(16)
    with pytest.raises(TypeError, match="takes 3 buffers"):
        program(mem, mem)
    clang.allocator.free(mem, 16)


def test_loading_the_same_library_twice_reuses_it(clang_c):
    from tinycore_clang.runtime import load_library

    lib = clang_c.compiler.compile_cached(clang_c.renderer.render(linearize(_store_one()), name="kone"))
    assert load_library(lib) is load_library(bytes(lib))  # (objects of the llvm backend: test_objloader.py)


def _store_one() -> UOp:
    out = UOp.define_global(0, dtypes.int32, 4)
    i = loop(4)
    return out.index(i).store(UOp.const(dtypes.int32, 1)).end(i)


def test_compile_target_hook_and_renderer_pickle(registry):
    from tinycore_clang.compiler import ClangCompiler
    from tinycore_clang.renderer import ClangRenderer

    from tinycore.plugin.manager import get_manager

    renderer, compiler = get_manager().call_device_hook(
        "CLANG", "tinycore_compile_target", name="CLANG", arch="x86-64-v3"
    )
    assert isinstance(renderer, ClangRenderer) and isinstance(compiler, ClangCompiler)
    assert "-march=x86-64-v3" in compiler.flags and renderer.arch == "x86-64-v3"
    clone = pickle.loads(pickle.dumps(renderer))
    assert isinstance(clone, ClangRenderer) and clone.arch == "x86-64-v3"
    assert not renderer.has_local and not renderer.has_shared and renderer.supports_float4
    assert {"SQRT", "MULACC", "WHERE"} <= renderer.native_ops and not {"EXP2", "LOG2", "SIN"} & renderer.native_ops


def test_report_info_names_compiler_and_cpu(registry):
    from tinycore.plugin.manager import get_manager

    info = get_manager().report_info("CLANG")
    assert info["tinycore-clang"] and info["compiler"].startswith("/")
    assert info["compiler version"] != "unknown" and info["threads"].isdigit()


def _tinycore(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DEV", "TINYCORE_PLUGINS", "TINYCORE_DISABLE_PLUGINS")}
    return subprocess.run(
        [sys.executable, "-m", "tinycore", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_doctor_clang_passes(registry):
    proc = _tinycore("doctor", "CLANG")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("CLANG"))
    assert "PASS" in line and "clang kernel:" in line and "core_id kernel ran" in line


def test_doctor_json_lists_the_kernel_check(registry):
    import json

    proc = _tinycore("doctor", "CPU", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)["devices"][0]
    names = [check["name"] for check in report["checks"]]
    assert names.index("clang kernel") == names.index("alloc/copy") + 1
    assert report["status"] == "PASS" and report["info"]["compiler"]


def test_clang_is_the_default_device_when_a_compiler_exists(registry):
    env = {k: v for k, v in os.environ.items() if k not in ("DEV", "TINYCORE_PLUGINS", "TINYCORE_DISABLE_PLUGINS")}
    code = "from tinycore.device import Device; print(Device.DEFAULT)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.stdout.strip() == "CLANG", proc.stderr


def test_doctor_notes_that_gcc_builds_slower_kernels(registry):
    import shutil

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    from tinycore_clang.doctor import SLOW_COMPILER_NOTE

    env = {k: v for k, v in os.environ.items() if k not in ("DEV", "TINYCORE_PLUGINS", "TINYCORE_DISABLE_PLUGINS")}
    proc = subprocess.run(
        [sys.executable, "-m", "tinycore", "doctor", "CLANG"],
        capture_output=True,
        text=True,
        env={**env, "CC": "gcc", "CLANG_BACKEND": "c"},  # the note is about gcc compiling the kernels
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gcc: 1 kernel compiled" in proc.stdout and SLOW_COMPILER_NOTE in proc.stdout
    if shutil.which("clang") is not None:
        assert SLOW_COMPILER_NOTE not in _tinycore("doctor", "CLANG").stdout
