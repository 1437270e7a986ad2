"""The `Compiler` base class: source text to binary, with a disk cache whose key pins the whole build setup.

A device plugin subclasses `Compiler`, implements `compile` and reports in `cache_key_parts` everything besides
the source that changes the binary: compiler name and version, flags, and the resolved target (GPU arch, or the
CPU features ``-march=native`` expands to). Core caches binaries under ``compile_<cachekey>`` keyed by all of it,
so a cache folder shared between machines never hands AVX-512 code to an AVX2 CPU.

>>> class Upper(Compiler):
...     def compile(self, src: str) -> bytes:
...         return src.upper().encode()
>>> Upper(None).compile_cached("abc")
b'ABC'
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence

from tinycore.backend.disk_cache import disk_get, disk_put


class Compiler:
    """Base class of device compilers.

    `cachekey` names the cache table (``compile_<cachekey>``), conventionally the family and compiler
    (``"clang"``, ``"cuda_sm_90"``); None disables caching. Subclasses implement `compile`, raising
    `tinycore.errors.CompileError` with the compiler's message on failure, and override `cache_key_parts`
    (compute expensive parts once, in ``__init__``: it is consulted on every `compile_cached`).
    """

    # True when `compile_many` starts on each source as its iterable yields it (an in-process compiler with worker
    # threads): callers then hand it a stream of sources while they are still producing them (see `compile_stream`).
    streams: bool = False

    def __init__(self, cachekey: str | None = None):
        self.cachekey = cachekey

    def compile(self, src: str) -> bytes:
        """Compile `src` to the device's binary format (abstract)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement compile")

    def cache_key_parts(self) -> Sequence[str]:
        """Everything besides the source that determines the binary: compiler version, flags, resolved target."""
        return ()

    def cache_key(self, src: str) -> str:
        """The disk-cache key of `src` under this compiler's current configuration."""
        material = json.dumps([type(self).__name__, self.cachekey, [str(p) for p in self.cache_key_parts()], src])
        return hashlib.sha256(material.encode()).hexdigest()

    def compile_cached(self, src: str) -> bytes:
        """`compile(src)`, served from the disk cache when an identical build was done before (here or on any
        machine sharing the cache with the same `cache_key_parts`). Non-`CompileError` failures of `compile` are
        wrapped in a `CompileError` naming this compiler."""
        if self.cachekey is None:
            return self._compile_checked(src)
        table, key = f"compile_{self.cachekey}", self.cache_key(src)
        lib = disk_get(table, key)
        if lib is None:
            lib = self._compile_checked(src)
            disk_put(table, key, lib)
        return lib

    def compile_many(self, srcs: Sequence[str]) -> list[bytes]:
        """Compile several sources: one binary per source, in order (a binary may hold other sources' code too).
        This default compiles them one by one; a compiler that can do better (one process for several sources,
        processes in parallel) overrides it, which makes `batches` True. A compiler with `streams` may be given
        any iterable (a stream that yields sources while they are being rendered) and should start on each source
        as soon as it arrives."""
        return [self.compile(src) for src in srcs]

    @property
    def batches(self) -> bool:
        """True when this compiler overrides `compile_many` (building several sources together is cheaper than one
        by one), so callers should hand it every new kernel of a schedule at once."""
        return type(self).compile_many is not Compiler.compile_many

    def compile_cached_many(self, srcs: Sequence[str]) -> list[bytes]:
        """`compile_many` through the disk cache: hits are read, the distinct misses are built in one batch and
        stored. Failures are wrapped like `compile_cached`'s."""
        srcs = list(srcs)
        if self.cachekey is None:
            return self._checked_many(srcs)
        table = f"compile_{self.cachekey}"
        keys = [self.cache_key(src) for src in srcs]
        libs: list[bytes | None] = [disk_get(table, key) for key in keys]
        missing: dict[str, list[int]] = {}
        for i, lib in enumerate(libs):
            if lib is None:
                missing.setdefault(srcs[i], []).append(i)
        if missing:
            for positions, built in zip(missing.values(), self._checked_many(list(missing))):
                disk_put(table, keys[positions[0]], built)
                for i in positions:
                    libs[i] = built
        return [lib for lib in libs if lib is not None]

    def compile_stream(self, srcs: Iterable[str]) -> list[bytes]:
        """`compile_cached_many` for sources that are still being produced: each one is looked up in the disk cache
        when it arrives and the misses are passed on, as they arrive, to `compile_many` (which a compiler with
        `streams` consumes lazily, compiling while the producer renders the next source). Returns one binary per
        source, in order. A compiler without `streams` gets the misses as one list at the end."""
        table = f"compile_{self.cachekey}" if self.cachekey is not None else None
        libs: list[bytes | None] = []
        misses: dict[str, list[int]] = {}
        keys: dict[str, str] = {}

        def missing() -> Iterator[str]:
            for src in srcs:
                libs.append(None)
                if src in misses:  # the same source twice: built once
                    misses[src].append(len(libs) - 1)
                    continue
                if table is not None:
                    keys[src] = self.cache_key(src)
                    lib = disk_get(table, keys[src])
                    if lib is not None:
                        libs[-1] = lib
                        continue
                misses[src] = [len(libs) - 1]
                yield src

        built = self._checked_many(missing() if self.streams else list(missing()))
        for (src, positions), lib in zip(misses.items(), built):
            if table is not None:
                disk_put(table, keys[src], lib)
            for i in positions:
                libs[i] = lib
        return [lib for lib in libs if lib is not None]

    def _checked_many(self, srcs: Iterable[str]) -> list[bytes]:
        from tinycore.errors import CompileError

        if isinstance(srcs, list) and len(srcs) == 1:
            return [self._compile_checked(srcs[0])]
        counted: list[str] = []
        try:
            libs = self.compile_many(srcs if isinstance(srcs, list) else _counting(srcs, counted))
        except (CompileError, NotImplementedError):
            raise
        except Exception as error:
            raise CompileError(f"{type(self).__name__} failed: {type(error).__name__}: {error}") from error
        expected = len(srcs) if isinstance(srcs, list) else len(counted)
        if len(libs) != expected or not all(isinstance(lib, (bytes, bytearray)) for lib in libs):
            raise CompileError(f"{type(self).__name__}.compile_many must return one bytes object per source")
        return [bytes(lib) for lib in libs]

    def _compile_checked(self, src: str) -> bytes:
        from tinycore.errors import CompileError

        try:
            lib = self.compile(src)
        except (CompileError, NotImplementedError):
            raise
        except Exception as error:
            raise CompileError(f"{type(self).__name__} failed: {type(error).__name__}: {error}") from error
        if not isinstance(lib, (bytes, bytearray)):
            raise CompileError(f"{type(self).__name__}.compile returned {type(lib).__name__}, expected bytes")
        return bytes(lib)

    def disassemble(self, lib: bytes) -> str:
        """Optional: human-readable assembly of a compiled binary (for ``DEBUG>=6``)."""
        raise NotImplementedError(f"{type(self).__name__} can't disassemble")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} cachekey={self.cachekey!r}>"


def _counting(srcs: Iterable[str], seen: list[str]) -> Iterator[str]:
    """`srcs`, remembering what was handed out (to check a streaming `compile_many` returned one binary each)."""
    for src in srcs:
        seen.append(src)
        yield src


class KernelImage:
    """A compiled GPU-style kernel as a compiler stores it: ``b"TCKI1 <json parameter kinds>\\n"`` then the device's
    binary. The kinds (``"buffer"``, ``"int"``, ``"long"``, one per kernel parameter, in order) let a program pass
    its scalar arguments with the right width when it is loaded from the disk cache without its source (see
    the C-family base's `CDialect.signature_of`).

    >>> KernelImage.unpack(KernelImage.pack(["buffer", "int"], b"ELF"))
    (['buffer', 'int'], b'ELF')
    """

    MAGIC = b"TCKI1 "

    @staticmethod
    def pack(kinds: Sequence[str], image: bytes) -> bytes:
        """One stored binary."""
        return KernelImage.MAGIC + json.dumps(list(kinds)).encode() + b"\n" + bytes(image)

    @staticmethod
    def unpack(lib: bytes) -> tuple[list[str], bytes]:
        """(parameter kinds, binary) of a stored binary; a ValueError naming the fix for anything else."""
        if not lib.startswith(KernelImage.MAGIC):
            raise ValueError("not a tinycore kernel image (an old or foreign cache entry: clear the kernel cache)")
        header, _, image = lib.partition(b"\n")
        return json.loads(header[len(KernelImage.MAGIC) :]), image
