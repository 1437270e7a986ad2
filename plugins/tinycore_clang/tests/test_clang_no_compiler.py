"""CLANG on a machine without any C compiler: the thread pool from its shipped LLVM IR (`tinycore_clang.pool_ir`),
the probe, the default device, and what is said when the device can't run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from tinycore_clang import pool_ir
from tinycore_clang.threadpool import RUNTIME_SRC

IR_USABLE = pool_ir.usable_here()
needs_ir = pytest.mark.skipif(IR_USABLE is not None, reason=f"{IR_USABLE}")
CLANG = shutil.which("clang") or shutil.which("clang-19")


def _defined(ir: str) -> set[str]:
    return set(re.findall(r"^define [^@]*@(\w+)\(", ir, re.M))


def _declared(ir: str) -> set[str]:
    return set(re.findall(r"^declare [^@]*@([\w.]+)\(", ir, re.M))


def test_the_shipped_ir_was_made_from_this_c_source():
    """Fails when `RUNTIME_SRC` changed without ``python -m tinycore_clang.pool_ir``."""
    ir = pool_ir.shipped_ir()  # (raises when the file's digest line is not the current source's)
    assert ir.startswith(pool_ir.HEADER + pool_ir.source_digest(RUNTIME_SRC))


def test_the_shipped_ir_exports_the_abi_and_needs_only_what_the_process_has():
    ir = pool_ir.shipped_ir()
    exported = {"tc_abi_version", "tc_run", "tc_run_batch", "tc_run_graph", "tc_workers", "tc_set_spin"}
    assert exported <= _defined(ir)
    external = {name for name in _declared(ir) if not name.startswith("llvm.")}
    # no pthread_atfork: glibc links it statically from libc_nonshared.a, and nothing is linked here
    assert "pthread_atfork" not in external and "__register_atfork" in external
    assert all(name.startswith("pthread_") or name in ("sched_yield", "__register_atfork") for name in external)
    assert f'target triple = "{pool_ir.TRIPLE}"' in ir


def test_a_stale_shipped_ir_is_refused_with_the_command_that_remakes_it(monkeypatch):
    monkeypatch.setattr(pool_ir, "source_digest", lambda src=RUNTIME_SRC: "0" * 64)
    with pytest.raises(RuntimeError, match=r"python -m tinycore_clang.pool_ir"):
        pool_ir.shipped_ir()


@pytest.mark.skipif(CLANG is None, reason="clang is not installed (it makes the IR)")
def test_clang_remakes_the_same_functions_from_the_source():
    fresh = pool_ir.render_ir(CLANG)
    shipped = pool_ir.shipped_ir()
    assert _defined(fresh) == _defined(shipped) and _declared(fresh) == _declared(shipped)


def test_usable_here_names_what_is_missing(monkeypatch):
    assert "LLVM >= 19" in (pool_ir.usable_here("search", 15) or "")
    monkeypatch.setattr(pool_ir, "_libc_name", lambda: "musl")
    assert "glibc" in (pool_ir.usable_here() or "") and "musl" in (pool_ir.usable_here() or "")
    monkeypatch.undo()
    monkeypatch.setattr(pool_ir.sys, "platform", "darwin")
    assert "x86-64 Linux" in (pool_ir.usable_here() or "")


def _bare_env(tmp_path, **extra: str) -> dict[str, str]:
    """The environment of a machine with no C compiler: PATH is an empty folder (python runs by absolute path)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "DEV", "CLANG_BACKEND", "TINYCORE_PLUGINS")}
    env["PATH"] = str(tmp_path)
    env.update(extra)
    return env


def _child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, timeout=300, env=env
    )


@needs_ir
def test_without_any_c_compiler_clang_is_the_default_and_runs_threads_graphs_and_forks(tmp_path):
    code = """
import os
import numpy as np
from tinycore import Device, Tensor, TinyJit
from tinycore_clang import threadpool
print('DEFAULT', Device.DEFAULT, Device[Device.DEFAULT].host_compiler)
a, b = Tensor.rand(256, 300).realize(), Tensor.rand(300, 200).realize()
ok = np.allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-4)
step = TinyJit(lambda x, y: ((x @ y).relu() + 1).sum(axis=0).realize())
for _ in range(3):
    got = step(a, b).numpy()
ok = ok and np.allclose(got, (np.maximum(a.numpy() @ b.numpy(), 0) + 1).sum(0), rtol=1e-4)
pool = threadpool._POOL
print('POOL', type(pool.image).__name__, pool.workers(), ok, flush=True)
pid = os.fork()
if pid == 0:
    fresh = pool.workers()
    child_ok = np.allclose((a @ b + 1).numpy(), a.numpy() @ b.numpy() + 1, rtol=1e-4, atol=1e-4)
    os._exit(0 if fresh == 0 and child_ok and pool.workers() == 1 else 3)
print('CHILD', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""
    proc = _child(code, _bare_env(tmp_path, THREADS="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "DEFAULT CLANG None" in proc.stdout
    assert "POOL LoadedObject 1 True" in proc.stdout  # the pool from the IR, one worker beside the caller
    assert "CHILD 0" in proc.stdout  # the child got a fresh pool (the fork handler ran) and computed right
    assert "tinycore:" not in proc.stderr, proc.stderr  # no warning of ours: CLANG is the default, at full speed


@needs_ir
def test_without_any_c_compiler_the_report_says_none_is_needed(tmp_path):
    code = "from tinycore_clang import plugin; info = plugin.tinycore_report_info(name='CLANG'); print(info)"
    proc = _child(code, _bare_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "shipped LLVM IR (no C compiler needed)" in proc.stdout
    assert "only C kernels need one" in proc.stdout


def test_without_a_compiler_the_c_backend_is_unavailable_with_a_fix(tmp_path):
    code = (
        "from tinycore_clang import plugin\n"
        "r = plugin.tinycore_probe_device(name='CLANG')\n"
        "print('PROBE', r.ok, r.device_count, r.hardware_present, '|', r.reason, '|', r.hint)\n"
    )
    proc = _child(code, _bare_env(tmp_path, CLANG_BACKEND="c"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "PROBE False 0 True | no C compiler found" in proc.stdout
    assert "apt-get install clang" in proc.stdout


def test_without_compiler_and_llvm_a_lower_default_says_why_clang_was_passed_over(tmp_path):
    # TINYCORE_LLVM_LIB naming no file: no usable LLVM, so the c backend, which has no compiler here
    env = _bare_env(tmp_path, TINYCORE_LLVM_LIB=str(tmp_path / "libLLVM-none.so"))
    code = "from tinycore import Device\nprint('DEFAULT', Device.DEFAULT)\n"
    proc = _child(code, env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "DEFAULT CLANG" not in proc.stdout
    assert "CLANG: no C compiler found" in proc.stderr and "apt-get install clang" in proc.stderr
