"""Crash- and concurrency-safe key/value files in tinycore's cache folder (compiled programs, BEAM results).

Each entry is one file ``<cache_dir>/<table>/<h[:2]>/<h>`` where ``h = sha256(key)``. A write goes to a temporary
file in the same folder and is renamed over the entry with `os.replace`, so readers see the old entry, the new
one, or none, never half of one, and concurrent writers of one key both succeed. Every entry starts with a
header (magic, payload length, sha256 of the payload, the key itself): a truncated or corrupted entry, or a hash
collision, is deleted and reported as a miss. ``CACHELEVEL=0`` turns the cache off; ``TINYCORE_CACHE_DIR`` moves
it. A failing cache never fails the caller: errors are reported at ``DEBUG>=1`` and treated as misses.

>>> import tempfile
>>> from tinycore.helpers import temporary_env
>>> with temporary_env(TINYCORE_CACHE_DIR=tempfile.mkdtemp()):
...     disk_put("example", "key", b"value")
...     disk_get("example", "key"), disk_get("example", "other")
(b'value', None)
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import sys
import tempfile

from tinycore.helpers import CACHELEVEL, DEBUG, cache_dir

MAGIC = b"TCDC\x01"  # format version in the last byte: bump it when the layout changes
_HEADER = struct.Struct("<5sQ32sI")  # magic, payload length, sha256(payload), key length; then key, then payload
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _entry_path(table: str, key: str) -> str:
    if not _TABLE_NAME.match(table) or table in (".", ".."):
        raise ValueError(f"cache table name {table!r} must be letters, digits, '_', '-' or '.'")
    digest = hashlib.sha256(key.encode()).hexdigest()
    return os.path.join(cache_dir(), table, digest[:2], digest)


def _warn(message: str) -> None:
    if DEBUG >= 1:
        print(f"tinycore disk cache: {message}", file=sys.stderr)


def _encode(key: str, value: bytes) -> bytes:
    key_bytes = key.encode()
    return _HEADER.pack(MAGIC, len(value), hashlib.sha256(value).digest(), len(key_bytes)) + key_bytes + value


def _decode(key: str, data: bytes) -> bytes | None:
    """The payload of a stored entry, or None when it is damaged or belongs to another key."""
    if len(data) < _HEADER.size:
        return None
    magic, length, digest, key_length = _HEADER.unpack_from(data)
    key_bytes = key.encode()
    start = _HEADER.size + key_length
    if magic != MAGIC or key_length != len(key_bytes) or len(data) != start + length:
        return None
    if data[_HEADER.size : start] != key_bytes:
        return None
    payload = data[start:]
    return payload if hashlib.sha256(payload).digest() == digest else None


def disk_get(table: str, key: str) -> bytes | None:
    """The bytes stored under `key` in `table`, or None (missing, damaged, or the cache is off)."""
    if CACHELEVEL.value <= 0:
        return None
    path = _entry_path(table, key)
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return None
    except OSError as error:
        _warn(f"can't read {path}: {error}")
        return None
    payload = _decode(key, data)
    if payload is None:
        _warn(f"deleting damaged entry {path} ({len(data)} bytes)")
        try:
            os.unlink(path)
        except OSError:
            pass  # a concurrent writer may have replaced or removed it already
    return payload


def disk_put(table: str, key: str, value: bytes) -> None:
    """Store `value` under `key` in `table` atomically (last writer wins; no-op when the cache is off)."""
    if CACHELEVEL.value <= 0:
        return
    path = _entry_path(table, key)
    folder = os.path.dirname(path)
    tmp_path = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp_path = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as file:
            file.write(_encode(key, bytes(value)))
        os.replace(tmp_path, path)
        tmp_path = None
    except OSError as error:
        _warn(f"can't write {path}: {error}")
    finally:
        if tmp_path is not None:
            try:
                os.unlink(tmp_path)
            except OSError:
                pass
