"""Keccak on the host: the sponge behind `Tensor.keccak` and the 16-byte content hash behind `Tensor.hash`.

A sponge is named by its ``(rate, dsbyte)``: the bytes absorbed per permutation and the domain-separation byte that
starts the padding (SHA-3: ``0x06``, SHAKE: ``0x1f``). As in tinygrad, the output is the first ``(200 - rate) // 2``
bytes of the state after absorbing (SHA-3's digest size; 16 bytes for ``shake_128``). The named configurations go
through `hashlib`; any other ``(rate, dsbyte)`` runs `keccak_rows`, a numpy Keccak-f[1600] over many messages at
once, written from the FIPS 202 description (round constants and rotation offsets are derived, not tabulated).

`tree_hash` is tinygrad's content hash: the bytes split into 1 MiB chunks (zero-padded), each chunk's 256 blocks of
4 KiB hashed with ``shake_128``, the 256 block hashes hashed again into the chunk's 16 bytes, and the chunk hashes
hashed the same way, level by level, until one 16-byte hash remains.
"""

from __future__ import annotations

import hashlib
from functools import cache

import numpy as np

# name -> (rate in bytes, domain-separation byte)
NAMED = {
    "sha3_224": (144, 0x06),
    "sha3_256": (136, 0x06),
    "sha3_384": (104, 0x06),
    "sha3_512": (72, 0x06),
    "shake_128": (168, 0x1F),
    "shake_256": (136, 0x1F),
}
CHUNK, BLOCK, FANOUT = 1 << 20, 4096, 256  # tree_hash: chunk bytes, block bytes, blocks per chunk


def sponge_of(cfg: str | tuple[int, int]) -> tuple[int, int]:
    """``(rate, dsbyte)`` of a configuration name or pair; a ValueError names the accepted forms."""
    if isinstance(cfg, str):
        if cfg not in NAMED:
            raise ValueError(f"keccak: cfg must be one of {sorted(NAMED)} or a (rate, dsbyte) pair, got {cfg!r}")
        return NAMED[cfg]
    if not (isinstance(cfg, (tuple, list)) and len(cfg) == 2 and all(isinstance(v, int) for v in cfg)):
        raise ValueError(f"keccak: cfg must be one of {sorted(NAMED)} or a (rate, dsbyte) pair, got {cfg!r}")
    rate, dsbyte = cfg
    if not (0 < rate < 200 and rate % 8 == 0 and (200 - rate) // 2 <= rate):
        raise ValueError(f"keccak: rate {rate} must be a multiple of 8 in [72, 192] (bytes per absorbed block)")
    if not 0 < dsbyte < 0x80:
        raise ValueError(f"keccak: dsbyte {dsbyte:#x} must be in [0x01, 0x7f] (the padding's first bits)")
    return rate, dsbyte


def digest_size(rate: int) -> int:
    """Output bytes of a sponge with this rate: ``(200 - rate) // 2``."""
    return (200 - rate) // 2


@cache
def _round_constants() -> np.ndarray:
    """The 24 iota constants, from the degree-8 LFSR of FIPS 202 (rc(t))."""
    bits, reg = [], 1
    for _ in range(7 * 24):
        bits.append(reg & 1)
        reg = ((reg << 1) ^ (0x171 if reg & 0x80 else 0)) & 0xFF
    return np.array([sum(bits[7 * i + j] << ((1 << j) - 1) for j in range(7)) for i in range(24)], dtype=np.uint64)


@cache
def _rotations() -> np.ndarray:
    """rho's rotation of lane (y, x), walking (x, y) -> (y, 2x + 3y) from (1, 0)."""
    rot, x, y = np.zeros((5, 5), dtype=np.uint64), 1, 0
    for t in range(24):
        rot[y, x] = ((t + 1) * (t + 2) // 2) % 64
        x, y = y, (2 * x + 3 * y) % 5
    return rot


def _permute(state: np.ndarray) -> np.ndarray:
    """Keccak-f[1600] on ``state`` of shape ``(n, 5, 5)`` (lane ``[y, x]``), all messages at once."""
    rot = _rotations()
    back = (np.uint64(64) - rot) % np.uint64(64)
    # pi as a gather: the lane landing at (x, y) comes from (x + 3y, x)
    src_y = np.array([[x for x in range(5)] for _ in range(5)])
    src_x = np.array([[(x + 3 * y) % 5 for x in range(5)] for y in range(5)])
    one = np.uint64(1)
    for rc in _round_constants():
        c = np.bitwise_xor.reduce(state, axis=1)  # (n, 5): column parities
        d = np.roll(c, 1, axis=1) ^ ((np.roll(c, -1, axis=1) << one) | (np.roll(c, -1, axis=1) >> np.uint64(63)))
        state = state ^ d[:, None, :]
        state = (state << rot) | (state >> back)
        state = state[:, src_y, src_x]
        state = state ^ (~np.roll(state, -1, axis=2) & np.roll(state, -2, axis=2))
        state[:, 0, 0] ^= rc
    return state


def keccak_rows(rows: np.ndarray, rate: int, dsbyte: int) -> np.ndarray:
    """The sponge ``(rate, dsbyte)`` of each row of a 2-d uint8 array: ``(n, digest_size(rate))`` uint8."""
    n, length = rows.shape
    blocks = length // rate + 1
    padded = np.zeros((n, blocks * rate), dtype=np.uint8)
    padded[:, :length] = rows
    padded[:, length] ^= np.uint8(dsbyte)
    padded[:, -1] ^= np.uint8(0x80)
    state = np.zeros((n, 5, 5), dtype=np.uint64)
    lanes = rate // 8
    for b in range(blocks):
        words = padded[:, b * rate : (b + 1) * rate].copy().view("<u8")  # (n, lanes)
        flat = state.reshape(n, 25)
        flat[:, :lanes] ^= words
        state = _permute(flat.reshape(n, 5, 5))
    return np.ascontiguousarray(state.reshape(n, 25), dtype="<u8").view(np.uint8)[:, : digest_size(rate)].copy()


def keccak(rows: np.ndarray, cfg: str | tuple[int, int]) -> np.ndarray:
    """The sponge ``cfg`` of each row of a 2-d uint8 array (hashlib where it has the function)."""
    sponge = sponge_of(cfg)
    name = next((k for k, v in NAMED.items() if v == sponge), None)
    if name is None:
        return keccak_rows(rows, *sponge)
    size = digest_size(sponge[0])
    out = np.empty((rows.shape[0], size), dtype=np.uint8)
    for i, row in enumerate(rows):
        h = hashlib.new(name, row.tobytes())
        out[i] = np.frombuffer(h.digest(size) if name.startswith("shake") else h.digest(), np.uint8)  # type: ignore[call-arg]
    return out


def _hash_chunks(data: bytes) -> bytes:
    """16 bytes per 1 MiB chunk of ``data`` (a multiple of the chunk size): shake_128 of the chunk's 4 KiB blocks'
    shake_128 hashes."""
    view, out = memoryview(data), bytearray()
    for start in range(0, len(data), CHUNK):
        blocks = b"".join(hashlib.shake_128(view[b : b + BLOCK]).digest(16) for b in range(start, start + CHUNK, BLOCK))
        out += hashlib.shake_128(blocks).digest(16)
    return bytes(out)


def tree_hash(data: bytes) -> bytes:
    """tinygrad's 16-byte content hash of ``data`` (see the module docstring); empty data hashes one zero chunk."""
    level = data or bytes(CHUNK)
    while True:
        level = _hash_chunks(level + bytes(-len(level) % CHUNK))
        if len(level) == 16:
            return level
