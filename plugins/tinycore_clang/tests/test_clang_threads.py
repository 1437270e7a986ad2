"""Native thread pool of CLANG: ``core_id`` kernels run their chunks on real pthreads in one foreign call,
`tc_run_batch` honours dependencies between items, ``THREADS=1`` runs everything on the caller, fork is safe.

The programs that read thread ids or spin on an atomic counter are ``CUSTOM`` C code, so their tests pin the C
backend (`clang_c`); the pool itself is the same for both backends."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest
from tinycore_clang.testing import ProgramBuilder, linearize, loop

from tinycore.dtype import dtypes
from tinycore.uop.ops import AxisType, Ops, UOp

I32 = dtypes.int32
LIMIT = 500_000_000  # spin bound of the rendezvous: far above any scheduling delay, finite if run serially


def c32(v: int) -> UOp:
    """An int32 constant."""
    return UOp.const(I32, v)


def core_id(n: int) -> UOp:
    """A SPECIAL core_id over `n` chunks."""
    return UOp(Ops.SPECIAL, I32, (c32(n),), "core_id")


def chunks_program(nchunks: int, chunk: int) -> list[UOp]:
    """data0[core*chunk + i] = core; data1[core] = pthread_self() of the thread running that chunk."""
    out = UOp.define_global(0, I32, nchunks * chunk)
    tids = UOp.define_global(1, dtypes.int64, nchunks)
    core = core_id(nchunks)
    tid = UOp(
        Ops.CUSTOM, dtypes.int64, (), "({{ extern unsigned long pthread_self(void); (long long)pthread_self(); }})"
    )
    b = ProgramBuilder()
    b.add(out, tids, core, tids.index(core).store(tid))
    i = b.add(loop(chunk))
    b.add(out.index(core * c32(chunk) + i).store(core).end(i))
    return b.uops


def rendezvous_program(nchunks: int) -> list[UOp]:
    """Every chunk increments a shared counter, then waits (bounded) until all chunks have arrived: it can only
    succeed when the chunks run at the same time. data0[core] = 1 on success."""
    ok = UOp.define_global(0, I32, nchunks)
    counter = UOp.define_global(1, I32, 1)
    core = core_id(nchunks)
    ptr = counter.index(c32(0))
    arrive = UOp(Ops.CUSTOM, dtypes.void, (ptr,), "__atomic_add_fetch({0}, 1, __ATOMIC_SEQ_CST)")
    wait = UOp(
        Ops.CUSTOM,
        I32,
        (ptr, arrive),
        "({{ long long s = 0; while (__atomic_load_n({0}, __ATOMIC_SEQ_CST) < "
        + str(nchunks)
        + " && s < "
        + str(LIMIT)
        + "ll) s++; (int)(s < "
        + str(LIMIT)
        + "ll); }})",
    )
    b = ProgramBuilder()
    b.add(ok, counter, core, arrive, wait, ok.index(core).store(wait))
    return b.uops


def test_core_id_kernel_runs_each_chunk_on_its_own_thread(clang_c, run_uops_c):
    old = clang_c.threads
    clang_c.threads = 2
    try:
        out, tids = run_uops_c(chunks_program(2, 8), [np.zeros(16, np.int32), np.zeros(2, np.int64)])
    finally:
        clang_c.threads = old
    assert out.tolist() == [0] * 8 + [1] * 8
    assert tids[0] != 0 and tids[1] != 0
    assert tids[0] != tids[1], "both chunks ran on the same thread"


def test_chunks_really_run_concurrently(clang_c, run_uops_c):
    old = clang_c.threads
    clang_c.threads = 2
    try:
        ok, counter = run_uops_c(rendezvous_program(2), [np.zeros(2, np.int32), np.zeros(1, np.int32)])
    finally:
        clang_c.threads = old
    assert counter.tolist() == [2]
    assert ok.tolist() == [1, 1], "the two chunks never ran at the same time"


def test_more_chunks_than_threads_and_oversubscription(clang_c, run_uops_c):
    old = clang_c.threads
    try:
        for threads, nchunks in ((2, 8), (4, 4), (3, 7)):
            clang_c.threads = threads
            out, tids = run_uops_c(
                chunks_program(nchunks, 5), [np.zeros(nchunks * 5, np.int32), np.zeros(nchunks, np.int64)]
            )
            assert out.tolist() == [c for c in range(nchunks) for _ in range(5)]
            used = min(threads, nchunks)
            assert len(set(tids.tolist())) == used  # chunk t runs on thread t % threads
            assert all(tids[t] == tids[t % used] for t in range(nchunks))
    finally:
        clang_c.threads = old


def test_symbolic_core_count_uses_global_size(clang, run_uops):
    n = UOp.variable("n", 1, 8, I32)
    out = UOp.define_global(0, I32, 8)
    core = UOp(Ops.SPECIAL, I32, (n,), "core_id")
    prog = linearize(out.index(core).store(core + c32(100)))
    src = run_uops.source(prog)
    assert "cores=-1" in src
    lib = clang.compiler.compile_cached(src)
    got = run_uops.launch(src, lib, [np.full(8, -1, np.int32)], vals=(5,), global_size=(5, 1, 1))[0]
    assert got.tolist() == [100, 101, 102, 103, 104, -1, -1, -1]


def test_batch_runs_items_in_order_with_barriers(clang, run_uops):
    """Three kernels in one tc_run_batch call (threaded writer, serial doubler, threaded adder), replayed with
    patched pointers like a JIT graph."""
    from tinycore_clang.threadpool import KernelBatch, get_pool

    n = 64
    writer = linearize(_scaled_copy_threaded(n, 2, src_index=None))  # data0[i] = i (threaded)
    doubler = linearize(_scaled_copy(n))  # data0[i] = data1[i] * 2 (serial)
    adder = linearize(_scaled_copy_threaded(n, 4, src_index=1))  # data0[i] = data1[i] + 1 (threaded)
    srcs = [run_uops.source(p) for p in (writer, doubler, adder)]
    libs = clang.compiler.compile_cached_many(srcs)
    writer_p, doubler_p, adder_p = (
        clang.runtime(s.splitlines()[0].rsplit(" ", 1)[-1], lib) for s, lib in zip(srcs, libs)
    )
    alloc = clang.allocator
    a, b, c, c2 = (alloc.alloc(4 * n) for _ in range(4))
    batch = KernelBatch(get_pool(clang.compiler), 2)
    batch.add(writer_p, [a.ptr])
    batch.add(doubler_p, [b.ptr, a.ptr])
    last = batch.add(adder_p, [c.ptr, b.ptr])
    assert len(batch) == 3
    for replay in range(20):
        target = c if replay % 2 == 0 else c2
        batch.set_buffer(last, 0, target.ptr)  # swap the output, as a JIT replay swaps inputs/outputs
        for buf in (a, b, target):
            ctypes.memset(buf.ptr, 0, 4 * n)
        batch()
        assert np.frombuffer(alloc.as_buffer(target), np.int32).tolist() == [2 * i + 1 for i in range(n)]
    for buf in (a, b, c, c2):
        alloc.free(buf, 4 * n)


def _scaled_copy(n: int) -> UOp:
    out, inp = UOp.define_global(0, I32, n), UOp.define_global(1, I32, n)
    i = loop(n)
    return out.index(i).store(inp.index(i).load() * c32(2)).end(i)


def _scaled_copy_threaded(n: int, chunks: int, src_index: int | None) -> UOp:
    out = UOp.define_global(0, I32, n)
    core = core_id(chunks)
    i = UOp(Ops.RANGE, I32, (c32(n // chunks),), (1, AxisType.LOOP))
    idx = core * c32(n // chunks) + i
    value = idx if src_index is None else UOp.define_global(src_index, I32, n).index(idx).load() + c32(1)
    return out.index(idx).store(value).end(i)


def _child(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=full)


CHILD_SETUP = """
import numpy as np
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops, UOp
from tinycore_clang.device import ClangDevice
from tinycore_clang.testing import ProgramBuilder, Runner, loop
c = lambda v: UOp.const(dtypes.int32, v)
out = UOp.define_global(0, dtypes.int32, 16); tids = UOp.define_global(1, dtypes.int64, 2)
core = UOp(Ops.SPECIAL, dtypes.int32, (c(2),), "core_id")
tid = UOp(Ops.CUSTOM, dtypes.int64, (), "({{ extern unsigned long pthread_self(void); (long long)pthread_self(); }})")
b = ProgramBuilder(); b.add(out, tids, core, tids.index(core).store(tid)); i = b.add(loop(8))
b.add(out.index(core * c(8) + i).store(core).end(i))
dev = ClangDevice(backend="c"); run = Runner(dev)  # CUSTOM C code: the C backend
"""


def test_threads_1_runs_all_chunks_on_the_caller(clang):
    code = CHILD_SETUP + (
        "got, t = run(b.uops, [np.zeros(16, np.int32), np.zeros(2, np.int64)])\n"
        "from tinycore_clang.threadpool import get_pool\n"
        "print('THREADS', dev.threads, got.tolist() == [0]*8 + [1]*8, t[0] == t[1], get_pool(dev.compiler).workers())\n"
    )
    proc = _child(code, THREADS="1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "THREADS 1 True True 0" in proc.stdout


def test_pool_survives_fork(clang):
    code = CHILD_SETUP + (
        "import os\n"
        "first, _ = run(b.uops, [np.zeros(16, np.int32), np.zeros(2, np.int64)])\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    got, t = run(b.uops, [np.zeros(16, np.int32), np.zeros(2, np.int64)])\n"
        "    os._exit(0 if got.tolist() == [0]*8 + [1]*8 and t[0] != t[1] else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('CHILD', os.waitstatus_to_exitcode(status), first.tolist() == [0]*8 + [1]*8)\n"
    )
    proc = _child(code, THREADS="2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CHILD 0 True" in proc.stdout


@pytest.mark.parametrize("threads", ["2", "3"])
def test_threads_env_sets_the_device_thread_count(threads):
    from tinycore_clang.testing import unavailable_reason

    if reason := unavailable_reason():
        pytest.skip(reason)
    proc = _child("from tinycore_clang.device import ClangDevice; print(ClangDevice().threads)", THREADS=threads)
    assert proc.stdout.strip() == threads, proc.stderr
