"""Kernel cache faults, end to end (real kernels on the default device, results checked against numpy): entries
overwritten with garbage, table folders replaced by files, a read-only cache folder, the cache folder deleted while
kernels compile, and 4 processes compiling the same kernels into one fresh cache folder at once.

(`tests/test_disk_cache.py` and `tests/test_compiler_cache.py` cover the same faults at the level of
`disk_get`/`disk_put` and `Compiler.compile_cached`; these check that a realize never notices.)"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tinycore import Tensor
from tinycore.backend import disk_cache
from tinycore.engine.realize import clear_runner_cache

REPO_ROOT = Path(__file__).resolve().parents[2]

# a child: a few kernels (elementwise, reduce, matmul) checked against numpy; prints OK and the kernel count
CHILD = r"""
import os, time
go = os.environ.get("FAULTS_GO_FILE")
import numpy as np
from tinycore import Tensor
from tinycore.helpers import GlobalCounters
rng = np.random.default_rng(7)
a, b = rng.random((24, 16), dtype=np.float32), rng.random((16, 8), dtype=np.float32)
if go:  # start together with the other children
    while not os.path.exists(go):
        time.sleep(0.005)
got = [((Tensor(a) * 3 - 1).exp2().sum(axis=1)).numpy(), (Tensor(a) @ Tensor(b)).relu().numpy(),
       (Tensor(a).max(axis=0) + Tensor(a).mean()).numpy()]
want = [np.exp2(a * 3 - 1).sum(axis=1), np.maximum(a @ b, 0), a.max(axis=0) + a.mean()]
for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
print("OK", GlobalCounters.kernel_count)
"""


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DEV", "DEBUG", "CACHELEVEL", "TINYCORE_PLUGINS")}
    env["TINYCORE_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def _child(cache: Path, go: Path | None = None) -> subprocess.Popen[str]:
    env = _env(cache)
    if go is not None:
        env["FAULTS_GO_FILE"] = str(go)
    return subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _check(proc: subprocess.Popen[str]) -> None:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    assert out.startswith("OK"), out


def _entries(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.is_file()]


def _run_child_here() -> None:
    """`CHILD` in this process, its kernels built afresh (through the disk cache of ``TINYCORE_CACHE_DIR``)."""
    clear_runner_cache()
    exec(CHILD, {"__name__": "faults_child"})


def _valid(path: Path) -> bool:
    return path.read_bytes().startswith(disk_cache.MAGIC)


def _realize_fresh_kernels(seed: int) -> None:
    """Compile and run kernels this process has not built (the runner cache is cleared), checked against numpy."""
    clear_runner_cache()
    x = np.random.default_rng(seed).random((20, 12), dtype=np.float32)
    np.testing.assert_allclose((Tensor(x) * 2 + seed).sum(axis=0).numpy(), (x * 2 + seed).sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose((Tensor(x).T @ Tensor(x)).numpy(), x.T @ x, rtol=1e-4)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(folder))
    monkeypatch.delenv("CACHELEVEL", raising=False)
    return folder


def test_garbage_entries_and_tables_that_are_files(cache):
    _realize_fresh_kernels(1)
    entries = _entries(cache)
    assert entries and all(_valid(p) for p in entries)
    rng = np.random.default_rng(0)
    for path in entries:  # every entry becomes random bytes (some of them starting with the right magic)
        junk = rng.integers(0, 256, int(rng.integers(0, 400)), dtype=np.uint8).tobytes()
        path.write_bytes(disk_cache.MAGIC + junk if rng.random() < 0.5 else junk)
    child = _child(cache)
    _realize_fresh_kernels(1)  # in-process too, while the child runs
    _check(child)
    assert all(_valid(p) for p in _entries(cache))  # damaged entries were replaced by good ones
    for table in [p for p in cache.iterdir() if p.is_dir()]:  # now a table folder that is a file
        shutil.rmtree(table)
        table.write_bytes(b"\x00garbage\xff" * 10)
    _run_child_here()
    _realize_fresh_kernels(2)


class _ReadOnly:
    """`module` as the disk cache sees it, with the functions `names` failing with EROFS."""

    def __init__(self, module: object, *names: str) -> None:
        self._module, self._names = module, names

    def __getattr__(self, name: str) -> object:
        if name in self._names:

            def read_only(*args: object, **kwargs: object) -> None:
                raise OSError(errno.EROFS, "Read-only file system")

            return read_only
        return getattr(self._module, name)


def test_read_only_cache_folder(cache, monkeypatch):
    _realize_fresh_kernels(3)
    before = {p: p.read_bytes() for p in _entries(cache)}
    for folder in [cache, *[p for p in cache.rglob("*") if p.is_dir()]]:
        folder.chmod(0o555)
    try:
        if os.geteuid() == 0:  # root ignores the mode bits: the cache's writes fail as on a read-only mount
            monkeypatch.setattr(disk_cache, "os", _ReadOnly(os, "makedirs", "replace", "unlink"))
            monkeypatch.setattr(disk_cache, "tempfile", _ReadOnly(tempfile, "mkstemp"))
        _realize_fresh_kernels(3)  # hits
        _realize_fresh_kernels(4)  # misses that can't be stored
    finally:
        monkeypatch.undo()
        for folder in [cache, *[p for p in cache.rglob("*") if p.is_dir()]]:
            folder.chmod(0o755)
    assert {p: p.read_bytes() for p in _entries(cache)} == before
    assert not list(cache.rglob(".tmp-*"))


def test_cache_folder_deleted_while_compiling(cache):
    stop = threading.Event()

    def vandal() -> None:
        while not stop.is_set():
            shutil.rmtree(cache, ignore_errors=True)
            time.sleep(0.001)

    thread = threading.Thread(target=vandal, daemon=True)
    thread.start()
    try:
        for seed in range(10, 14):
            _realize_fresh_kernels(seed)
    finally:
        stop.set()
        thread.join(10)
    _realize_fresh_kernels(20)  # and afterwards the cache works again
    assert _entries(cache) and all(_valid(p) for p in _entries(cache))


def test_four_processes_compiling_into_one_fresh_cache(tmp_path, monkeypatch):
    cache = tmp_path / "shared-cache"
    go = Path(tempfile.mkdtemp(dir=tmp_path)) / "go"
    children = [_child(cache, go) for _ in range(4)]
    time.sleep(0.5)
    go.write_text("go")
    for child in children:
        _check(child)
    entries = _entries(cache)
    assert entries and all(_valid(p) for p in entries) and not list(cache.rglob(".tmp-*"))
    stored = {p: p.stat().st_mtime_ns for p in entries}
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(cache))
    _run_child_here()  # the same kernels built again here: every compile is a hit, nothing is rewritten
    assert {p: p.stat().st_mtime_ns for p in _entries(cache)} == stored
