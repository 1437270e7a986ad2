"""`tinycore.fetch`: download a URL into a local cache file (tinygrad's `fetch`), used by `Tensor.from_url`."""

from __future__ import annotations

import gzip
import hashlib
import os
import pathlib
import tempfile
import urllib.request


def _cache_dir() -> pathlib.Path:
    """``$XDG_CACHE_HOME/tinycore/downloads`` (``~/.cache`` by default; ``TINYCORE_CACHE_DIR`` overrides)."""
    base = os.environ.get("TINYCORE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tinycore"
    )
    return pathlib.Path(base) / "downloads"


def fetch(
    url: str,
    name: str | pathlib.Path | None = None,
    subdir: str | None = None,
    gunzip: bool = False,
    allow_caching: bool = True,
) -> pathlib.Path:
    """Download ``url`` (any scheme `urllib` opens: http(s), file...) and return the path of the local copy.

    The file goes to the download cache (``name`` or a hash of the URL, under ``subdir`` when given; an absolute
    ``name`` is used as is); an existing file there is returned without downloading unless ``allow_caching`` is
    False. ``gunzip`` stores the decompressed bytes. A plain local path (no scheme) is returned unchanged.
    """
    if "://" not in url:
        path = pathlib.Path(url)
        if not path.exists():
            raise FileNotFoundError(f"fetch: {url} is neither a URL nor an existing file")
        return path
    if name is not None and pathlib.Path(name).is_absolute():
        target = pathlib.Path(name)
    else:
        folder = _cache_dir() / subdir if subdir else _cache_dir()
        key = hashlib.md5(url.encode() + (b"\x00gunzip" if gunzip else b"")).hexdigest()
        target = folder / (str(name) if name is not None else key)
    if allow_caching and target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(url, timeout=60) as response:
        data = response.read()
    if gunzip:
        data = gzip.decompress(data)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:  # atomic: no half-written cache file
        tmp.write(data)
    os.replace(tmp.name, target)
    return target
