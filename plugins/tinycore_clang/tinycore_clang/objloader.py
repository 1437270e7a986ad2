"""An in-process loader for relocatable object files: `load_object`, `LoadedObject`, `can_load_objects`.

The llvm backend compiles each kernel to an ELF object file (``.o``). Turning that into a shared object takes a
linker process (~5 ms per run); this module skips it. It copies the object's allocated sections into fresh
anonymous memory, applies the object's relocations, and makes the code executable. That is what ``ld -shared``
followed by ``dlopen`` would do for these small, self-contained objects.

Scope (checked, with an `ObjectLoadError` naming what is missing otherwise): 64-bit little-endian ELF relocatable
objects for x86-64, with the relocation kinds LLVM emits for position-independent code (absolute 64-bit,
PC-relative 32/64-bit, PLT calls, GOT loads). Calls to functions outside the object (e.g. ``sinf`` from libm)
are resolved in the running process and reached through a jump stub placed next to the code. Loaded objects are
never unloaded (a kernel may still be running on a worker thread), like ``dlopen``'d libraries.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import platform
import struct
import sys
from dataclasses import dataclass

# ELF constants (System V ABI, x86-64 psABI)
_ET_REL, _EM_X86_64 = 1, 62
_SHT_SYMTAB, _SHT_RELA, _SHT_NOBITS = 2, 4, 8
_SHF_WRITE, _SHF_ALLOC = 0x1, 0x2
_SHN_UNDEF, _SHN_ABS, _SHN_COMMON = 0, 0xFFF1, 0xFFF2
_STB_GLOBAL, _STB_WEAK = 1, 2
_R_NONE, _R_64, _R_PC32, _R_PLT32, _R_GOTPCREL, _R_32, _R_32S, _R_PC64 = 0, 1, 2, 4, 9, 10, 11, 24
_R_GOTPCRELX, _R_REX_GOTPCRELX = 41, 42
_GOT_KINDS = (_R_GOTPCREL, _R_GOTPCRELX, _R_REX_GOTPCRELX)
_STUB_SIZE = 16  # jmp *0(%rip) followed by the 8-byte target, padded to 16
_PAGE = mmap.PAGESIZE


class ObjectLoadError(RuntimeError):
    """The object file can't be loaded in-process (wrong format, an unsupported relocation, an unknown symbol)."""


def can_load_objects() -> bool:
    """True where `load_object` works: x86-64 Linux."""
    return sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")


@dataclass(frozen=True)
class _Section:
    name: str
    kind: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int


@dataclass(frozen=True)
class _Symbol:
    name: str
    bind: int
    section: int
    value: int


class LoadedObject:
    """An object file copied into executable memory with its relocations applied.

    `address(name)` is the run-time address of a global symbol it defines (None when it defines none of that
    name); `exports` lists those names.
    """

    def __init__(self, base: int, size: int, symbols: dict[str, int]):
        self.base, self.size = base, size
        self._symbols = symbols

    @property
    def exports(self) -> list[str]:
        """Names of the global symbols the object defines."""
        return sorted(self._symbols)

    def address(self, name: str) -> int | None:
        """The address of global symbol `name`, or None."""
        return self._symbols.get(name)

    def __repr__(self) -> str:
        return f"<LoadedObject at {self.base:#x} ({self.size} bytes): {', '.join(self.exports)}>"


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


_LIBC: ctypes.CDLL | None = None
_RESOLVERS: list[ctypes.CDLL] = []


def _resolve_external(name: str, weak: bool = False) -> int:
    """The address of a function or variable the process (or libm / libgcc's helpers) defines (0 for a missing
    weak symbol)."""
    if not _RESOLVERS:
        _RESOLVERS.append(ctypes.CDLL(None))
        for lib in ("m", "gcc_s"):
            path = ctypes.util.find_library(lib)
            if path:
                try:
                    _RESOLVERS.append(ctypes.CDLL(path))
                except OSError:
                    pass
    for resolver in _RESOLVERS:
        try:
            return ctypes.cast(getattr(resolver, name), ctypes.c_void_p).value or 0
        except AttributeError:
            continue
    if weak:
        return 0
    raise ObjectLoadError(f"the kernel refers to {name!r}, which this process does not define")


def _parse(data: bytes) -> tuple[list[_Section], list[_Symbol]]:
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ObjectLoadError("not a 64-bit little-endian ELF file")
    kind, machine = struct.unpack_from("<HH", data, 0x10)
    if kind != _ET_REL or machine != _EM_X86_64:
        raise ObjectLoadError(
            f"expected an x86-64 relocatable object (type 1, machine 62), got type {kind} machine {machine}"
        )
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = raw[shstrndx][4]

    def cstring(offset: int) -> str:
        return data[offset : data.index(b"\0", offset)].decode(errors="replace")

    sections = [_Section(cstring(names_at + r[0]), r[1], r[2], r[4], r[5], r[6], r[7], max(1, r[8]), r[9]) for r in raw]
    symbols: list[_Symbol] = []
    for section in sections:
        if section.kind != _SHT_SYMTAB:
            continue
        strings = sections[section.link].offset
        for k in range(section.size // section.entsize):
            st_name, st_info, _other, st_shndx, st_value, _size = struct.unpack_from(
                "<IBBHQQ", data, section.offset + k * section.entsize
            )
            symbols.append(_Symbol(cstring(strings + st_name), st_info >> 4, st_shndx, st_value))
    return sections, symbols


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _place(sections: list[_Section], placed: dict[int, int], cursor: int, writable: bool) -> int:
    """Give each allocated section of the given writability an offset from `cursor` on; return the end."""
    for index, section in enumerate(sections):
        if section.flags & _SHF_ALLOC and bool(section.flags & _SHF_WRITE) == writable:
            cursor = _align(cursor, section.align)
            placed[index] = cursor
            cursor += section.size
    return cursor


def load_object(data: bytes) -> LoadedObject:
    """Load the relocatable object `data` into this process and return where its symbols are.

    Raises `ObjectLoadError` for anything outside the scope in the module docstring.
    """
    sections, symbols = _parse(data)
    relocations = []
    for section in sections:
        if section.kind == _SHT_RELA and sections[section.info].flags & _SHF_ALLOC:
            for k in range(section.size // section.entsize):
                offset, info, addend = struct.unpack_from("<QQq", data, section.offset + k * section.entsize)
                relocations.append((section.info, offset, info & 0xFFFFFFFF, info >> 32, addend))

    externals = sorted(
        {sym for _, _, kind, sym, _ in relocations if kind == _R_PLT32 and symbols[sym].section == _SHN_UNDEF}
    )
    got_symbols = sorted({sym for _, _, kind, sym, _ in relocations if kind in _GOT_KINDS})
    # layout: code and read-only data, then jump stubs and GOT slots (all of it made read+execute), then writable data
    placed: dict[int, int] = {}
    stubs_at = _align(_place(sections, placed, 0, writable=False), _STUB_SIZE)
    got_at = stubs_at + _STUB_SIZE * len(externals)
    executable_size = _align(got_at + 8 * len(got_symbols), _PAGE)
    total = _align(max(_place(sections, placed, executable_size, writable=True), 1), _PAGE)

    global _LIBC
    libc = _LIBC = _LIBC or _libc()
    base = libc.mmap(None, total, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise ObjectLoadError(f"mmap of {total} bytes failed (errno {ctypes.get_errno()})")
    for index, at in placed.items():
        section = sections[index]
        if section.kind != _SHT_NOBITS:  # anonymous memory is already zero for .bss
            ctypes.memmove(base + at, data[section.offset : section.offset + section.size], section.size)

    def symbol_address(sym: int) -> int:
        symbol = symbols[sym]
        if symbol.section == _SHN_UNDEF:
            return _resolve_external(symbol.name, weak=symbol.bind == _STB_WEAK)
        if symbol.section == _SHN_ABS:
            return symbol.value
        if symbol.section == _SHN_COMMON or symbol.section not in placed:
            raise ObjectLoadError(f"symbol {symbol.name!r} is in a section the loader does not place")
        return base + placed[symbol.section] + symbol.value

    stub_of: dict[int, int] = {}
    for k, sym in enumerate(externals):
        stub = base + stubs_at + k * _STUB_SIZE
        ctypes.memmove(stub, b"\xff\x25\x00\x00\x00\x00" + struct.pack("<Q", symbol_address(sym)), 14)
        stub_of[sym] = stub
    got_of: dict[int, int] = {}
    for k, sym in enumerate(got_symbols):
        slot = base + got_at + 8 * k
        ctypes.memmove(slot, struct.pack("<Q", symbol_address(sym)), 8)
        got_of[sym] = slot

    for target, offset, kind, sym, addend in relocations:
        place = base + placed[target] + offset
        if kind == _R_NONE:
            continue
        if kind in _GOT_KINDS:
            _write_pc32(place, got_of[sym] + addend - place, kind)
            continue
        value = symbol_address(sym)
        if kind == _R_64:
            ctypes.memmove(place, struct.pack("<Q", (value + addend) & (2**64 - 1)), 8)
        elif kind in (_R_PC32, _R_PLT32):
            relative = value + addend - place
            if kind == _R_PLT32 and not -(2**31) <= relative < 2**31 and sym in stub_of:
                relative = stub_of[sym] + addend - place
            _write_pc32(place, relative, kind)
        elif kind == _R_PC64:
            ctypes.memmove(place, struct.pack("<q", value + addend - place), 8)
        elif kind in (_R_32, _R_32S):
            absolute = value + addend
            low, high = (0, 2**32) if kind == _R_32 else (-(2**31), 2**31)
            if not low <= absolute < high:
                raise ObjectLoadError(f"relocation type {kind} needs {absolute:#x} in 32 bits (compile as PIC)")
            ctypes.memmove(place, struct.pack("<I", absolute & 0xFFFFFFFF), 4)
        else:
            raise ObjectLoadError(f"relocation type {kind} (against {symbols[sym].name!r}) is not supported")

    if executable_size and libc.mprotect(base, executable_size, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
        raise ObjectLoadError(f"mprotect(read+exec) failed (errno {ctypes.get_errno()})")
    exports = {
        symbol.name: symbol_address(index)
        for index, symbol in enumerate(symbols)
        if symbol.bind in (_STB_GLOBAL, _STB_WEAK) and symbol.section not in (_SHN_UNDEF, _SHN_COMMON) and symbol.name
    }
    return LoadedObject(base, total, exports)


def _write_pc32(place: int, relative: int, kind: int) -> None:
    if not -(2**31) <= relative < 2**31:
        raise ObjectLoadError(f"relocation type {kind}: target {relative:+#x} bytes away, out of 32-bit range")
    ctypes.memmove(place, struct.pack("<i", relative), 4)
