"""Compiler.compile_cached: hits, damaged entries recompile, the key pins CPU features/flags/version, concurrency."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tinycore.backend.compiler import Compiler
from tinycore.backend.disk_cache import disk_get
from tinycore.errors import CompileError
from tinycore.helpers import Context

REPO_ROOT = Path(__file__).resolve().parents[1]


class FakeCCompiler(Compiler):
    """'Compiles' to bytes that record the target features, like -march=native code would depend on them."""

    def __init__(self, features: str = "avx2", flags: str = "-O2", version: str = "cc 17.0", cachekey="fakecc"):
        super().__init__(cachekey)
        self.features, self.flags, self.version = features, flags, version
        self.compiled: list[str] = []

    def cache_key_parts(self):
        return (self.version, self.flags, f"cpu={self.features}")

    def compile(self, src: str) -> bytes:
        self.compiled.append(src)
        return f"[{self.features}] {src}".encode()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path))
    return tmp_path


def cache_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_second_compiler_instance_hits_the_disk_cache(cache):
    first = FakeCCompiler()
    assert first.compile_cached("int main;") == b"[avx2] int main;"
    second = FakeCCompiler()
    assert second.compile_cached("int main;") == b"[avx2] int main;"
    assert first.compiled == ["int main;"] and second.compiled == []
    files = cache_files(cache)
    assert len(files) == 1 and files[0].parts[-3] == "compile_fakecc"


def test_other_cpu_features_never_reuse_an_entry(cache):
    avx2 = FakeCCompiler(features="avx2")
    assert avx2.compile_cached("kernel") == b"[avx2] kernel"
    avx512 = FakeCCompiler(features="avx2,avx512f")
    assert avx512.compile_cached("kernel") == b"[avx2,avx512f] kernel"
    assert avx512.compiled == ["kernel"]
    again = FakeCCompiler(features="avx2")  # back on the first machine: its own entry is still there
    assert again.compile_cached("kernel") == b"[avx2] kernel" and again.compiled == []
    # changing the features of a live compiler changes its key too
    again.features = "neon"
    assert again.compile_cached("kernel") == b"[neon] kernel" and again.compiled == ["kernel"]


@pytest.mark.parametrize("change", [{"flags": "-O3"}, {"version": "cc 18.1"}, {"cachekey": "othercc"}])
def test_flags_version_and_table_are_part_of_the_key(cache, change):
    FakeCCompiler().compile_cached("k")
    other = FakeCCompiler(**change)
    other.compile_cached("k")
    assert other.compiled == ["k"]


@pytest.mark.parametrize("damage", ["truncate", "corrupt"])
def test_damaged_entry_is_recompiled_not_loaded(cache, damage):
    FakeCCompiler().compile_cached("src")
    [path] = cache_files(cache)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    fresh = FakeCCompiler()
    assert fresh.compile_cached("src") == b"[avx2] src"
    assert fresh.compiled == ["src"]
    assert FakeCCompiler().compile_cached("src") == b"[avx2] src"  # the rewritten entry is valid again
    [path] = cache_files(cache)
    assert path.read_bytes().endswith(b"[avx2] src")


def test_cachekey_none_and_cachelevel_zero_compile_every_time(cache):
    uncached = FakeCCompiler(cachekey=None)
    uncached.compile_cached("a")
    uncached.compile_cached("a")
    assert uncached.compiled == ["a", "a"] and cache_files(cache) == []
    cached = FakeCCompiler()
    with Context(CACHELEVEL=0):
        cached.compile_cached("a")
        cached.compile_cached("a")
    assert cached.compiled == ["a", "a"] and cache_files(cache) == []


def test_cache_key_is_stable_and_distinguishes_sources():
    c = FakeCCompiler()
    assert c.cache_key("x") == FakeCCompiler().cache_key("x")
    assert c.cache_key("x") != c.cache_key("y")
    assert len(c.cache_key("x")) == 64


class Failing(Compiler):
    def __init__(self, error):
        super().__init__("failing")
        self.error = error

    def compile(self, src):
        raise self.error


def test_compile_errors_propagate_and_others_are_wrapped(cache):
    original = CompileError("error: expected ';'")
    with pytest.raises(CompileError) as info:
        Failing(original).compile_cached("x")
    assert info.value is original
    with pytest.raises(CompileError, match="Failing failed: OSError: no cc") as info:
        Failing(OSError("no cc")).compile_cached("x")
    assert isinstance(info.value.__cause__, OSError)
    assert cache_files(cache) == []


def test_non_bytes_result_is_a_compile_error(cache):
    class Bad(Compiler):
        def compile(self, src):
            return src

    with pytest.raises(CompileError, match="expected bytes"):
        Bad("bad").compile_cached("x")


def test_base_compile_is_abstract():
    with pytest.raises(NotImplementedError):
        Compiler("x").compile_cached("src")
    with pytest.raises(NotImplementedError):
        Compiler("x").disassemble(b"")


RACER = r"""
import sys, time
from tinycore.backend.compiler import Compiler

class SlowCompiler(Compiler):
    def cache_key_parts(self):
        return ("racecc 1.0", "cpu=avx2")

    def compile(self, src):
        time.sleep(0.001)
        return ("bin:" + src + ";").encode() * 40

tag, iterations = sys.argv[1], int(sys.argv[2])
compiler = SlowCompiler("race")
for i in range(iterations):
    src = f"kernel {i}"
    lib = compiler.compile_cached(src)
    assert lib == ("bin:" + src + ";").encode() * 40, f"{tag}: wrong binary for {src}"
print("ok", tag)
"""


def test_two_processes_compiling_the_same_keys_concurrently(cache):
    iterations = 300
    env = {**os.environ, "TINYCORE_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO_ROOT)}
    env.pop("CACHELEVEL", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, tag, str(iterations)],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("A", "B")
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        assert out.startswith("ok")

    class SlowCompiler(Compiler):  # the writers' configuration, but every compile is a failure: all must hit
        def cache_key_parts(self):
            return ("racecc 1.0", "cpu=avx2")

        def compile(self, src):
            raise AssertionError(f"cache miss for {src}")

    reader = SlowCompiler("race")
    for i in range(iterations):
        assert reader.compile_cached(f"kernel {i}") == (f"bin:kernel {i};").encode() * 40
        assert disk_get("compile_race", reader.cache_key(f"kernel {i}")) is not None
    assert not [p for p in cache.rglob(".tmp-*")]
