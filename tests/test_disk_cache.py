"""disk_cache: layout, atomic replace, damaged entries are misses, CACHELEVEL=0, concurrent writers of one key."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tinycore.backend import disk_cache
from tinycore.backend.disk_cache import disk_get, disk_put
from tinycore.helpers import Context

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(tmp_path))
    return tmp_path


def entry_path(root: Path, table: str, key: str) -> Path:
    digest = hashlib.sha256(key.encode()).hexdigest()
    return root / table / digest[:2] / digest


def test_round_trip_and_miss(cache):
    assert disk_get("t", "k") is None
    disk_put("t", "k", b"\x00payload\xff")
    assert disk_get("t", "k") == b"\x00payload\xff"
    disk_put("t", "k", b"")
    assert disk_get("t", "k") == b""
    assert disk_get("other_table", "k") is None


def test_one_file_per_key_in_sharded_folders(cache):
    disk_put("compile_x", "some key", b"v")
    path = entry_path(cache, "compile_x", "some key")
    assert path.is_file()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary files left behind


def test_last_writer_wins(cache):
    disk_put("t", "k", b"first")
    disk_put("t", "k", b"second, longer")
    assert disk_get("t", "k") == b"second, longer"


@pytest.mark.parametrize("damage", ["truncate", "flip_payload", "flip_header", "empty", "append"])
def test_damaged_entries_are_deleted_and_missed(cache, damage, capsys):
    disk_put("t", "k", b"0123456789" * 10)
    path = entry_path(cache, "t", "k")
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:-7]
    elif damage == "flip_payload":
        data[-3] ^= 0x40
    elif damage == "flip_header":
        data[0] ^= 0x01
    elif damage == "empty":
        data = bytearray()
    else:
        data += b"junk"
    path.write_bytes(bytes(data))
    with Context(DEBUG=1):
        assert disk_get("t", "k") is None
    assert not path.exists()
    assert "damaged" in capsys.readouterr().err
    disk_put("t", "k", b"fresh")
    assert disk_get("t", "k") == b"fresh"


def test_entry_of_another_key_at_this_path_is_a_miss(cache):
    disk_put("t", "key-a", b"value of a")
    src, dst = entry_path(cache, "t", "key-a"), entry_path(cache, "t", "key-b")
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(src.read_bytes())  # as if sha256 collided
    assert disk_get("t", "key-b") is None
    assert disk_get("t", "key-a") == b"value of a"


def test_cachelevel_zero_disables(cache):
    with Context(CACHELEVEL=0):
        disk_put("t", "k", b"v")
        assert disk_get("t", "k") is None
    assert not (cache / "t").exists()
    disk_put("t", "k", b"v")
    with Context(CACHELEVEL=0):
        assert disk_get("t", "k") is None
    assert disk_get("t", "k") == b"v"


def test_bad_table_names_are_rejected(cache):
    for table in ("a/b", "..", "", "x y"):
        with pytest.raises(ValueError):
            disk_put(table, "k", b"v")


def test_unwritable_cache_is_not_fatal(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TINYCORE_CACHE_DIR", str(blocker))
    with Context(DEBUG=1):
        disk_put("t", "k", b"v")
        assert disk_get("t", "k") is None
    assert "can't write" in capsys.readouterr().err


def test_magic_is_versioned():
    assert disk_cache.MAGIC.startswith(b"TCDC") and len(disk_cache.MAGIC) == 5


WRITER = r"""
import sys
from tinycore.backend.disk_cache import disk_get, disk_put

tag, iterations = sys.argv[1], int(sys.argv[2])
for i in range(iterations):
    unit = f"{tag}:{i:05d};".encode()
    disk_put("race", "shared-key", unit * (1 + i % 97))
    got = disk_get("race", "shared-key")
    assert got is not None, f"{tag}: miss right after a put at iteration {i}"
    first = got[: got.index(b";") + 1]
    assert got == first * (len(got) // len(first)), f"{tag}: torn entry at iteration {i}"
print("ok", tag)
"""


def test_concurrent_writers_of_one_key_both_succeed(cache):
    env = {**os.environ, "TINYCORE_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO_ROOT)}
    env.pop("CACHELEVEL", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, tag, "300"],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("A", "B")
    ]
    outputs = [proc.communicate(timeout=240) for proc in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err
        assert out.startswith("ok")
    final = disk_get("race", "shared-key")
    assert final is not None and (final.startswith(b"A:") or final.startswith(b"B:"))
    leftovers = [p.name for p in entry_path(cache, "race", "shared-key").parent.iterdir()]
    assert leftovers == [entry_path(cache, "race", "shared-key").name]
