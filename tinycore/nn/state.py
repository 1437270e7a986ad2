"""Model state: finding parameters, state dicts, and the safetensors file format.

- `get_state_dict(obj)`: ``{"layer.0.weight": Tensor, ...}`` found by walking attributes, lists, tuples and dicts.
- `get_parameters(obj)`: the tensors of the state dict (each once).
- `load_state_dict(model, state_dict, strict=True, verbose=True, consume=False, realize=True)`: copies values into
  the model's tensors, checking names, shapes and dtype kinds (float values are cast between float dtypes, as
  PyTorch's `copy_` does).
- `safe_save(tensors, fn, metadata=None)` / `safe_load(fn)`: the safetensors format, written and read here:
  an 8-byte little-endian header length, a JSON header ``{name: {"dtype", "shape", "data_offsets"}, "__metadata__":
  {...}}`` padded with spaces to 8 bytes, then the raw little-endian tensor bytes.
- `torch_load(fn)`: PyTorch ``.pt``/``.pth`` checkpoints (zip and legacy formats) read without importing torch,
  `gguf_load(fn)` / `ggml_data_to_tensor`: GGUF files (llama.cpp), `tar_extract(fn)`: the files of a tar archive.
  These readers (and `safe_load`, `safe_load_metadata`) take a path, ``bytes``, a binary file object or a uint8
  Tensor holding the file (see `TensorIO`).

Checkpoint guarantees: `safe_save` replaces the file atomically (a temporary file in the same folder, fsynced, then
``os.replace``), so an interrupted or failed save leaves the previous file as it was and no temporary file behind.
`safe_load` / `safe_load_metadata` accept only files the `safetensors` package accepts (all of them, but for dtypes
tinycore can't hold and headers that give a key twice): anything else raises ValueError (TypeError for a header field
of the wrong JSON type or a dtype tinycore does not support) naming the file, the tensor and what was expected, never
another exception type.
"""

from __future__ import annotations

import functools
import io
import json
import os
import pickle
import stat
import struct
import tarfile
import tempfile
import time
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from tinycore.dtype import DType, dtypes
from tinycore.helpers import prod
from tinycore.tensor import Tensor

__all__ = [
    "TensorIO",
    "accept_filename",
    "get_parameters",
    "get_state_dict",
    "ggml_data_to_tensor",
    "gguf_load",
    "inverse_safe_dtypes",
    "load_state_dict",
    "safe_dtypes",
    "safe_load",
    "safe_load_metadata",
    "safe_save",
    "tar_extract",
    "torch_load",
]

_ST_DTYPES: dict[str, DType] = {
    "F64": dtypes.float64,
    "F32": dtypes.float32,
    "F16": dtypes.float16,
    "BF16": dtypes.bfloat16,
    "I64": dtypes.int64,
    "I32": dtypes.int32,
    "I16": dtypes.int16,
    "I8": dtypes.int8,
    "U64": dtypes.uint64,
    "U32": dtypes.uint32,
    "U16": dtypes.uint16,
    "U8": dtypes.uint8,
    "BOOL": dtypes.bool,
}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}
safe_dtypes: dict[str, DType] = dict(_ST_DTYPES)  # tinygrad's names: safetensors code -> DType
inverse_safe_dtypes: dict[DType, str] = dict(_ST_NAMES)  # DType -> safetensors code
# every dtype code the safetensors format (package 0.8) knows, with its size in bits: a file holding the ones tinycore
# can't represent is still validated (and its metadata read); only safe_load refuses those tensors
_ST_BITS: dict[str, int] = {code: dt.itemsize * 8 for code, dt in _ST_DTYPES.items()} | {
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "C64": 64,
}
_MAX_HEADER = 100_000_000  # the safetensors package's limit on the JSON header's length
_MAX_USIZE = 2**64 - 1  # shapes and offsets are u64 in the format (the package refuses a larger element count)


def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
    """Every tensor reachable from `obj` through attributes, lists/tuples (index names) and dicts, by dotted name.

    >>> class Net:
    ...     def __init__(self): self.layers = [Tensor([1.0]), Tensor([2.0])]
    >>> list(get_state_dict(Net()))
    ['layers.0', 'layers.1']
    """
    if isinstance(obj, tensor_type):
        return {prefix.strip("."): obj}
    if hasattr(obj, "_asdict"):
        return get_state_dict(obj._asdict(), prefix, tensor_type)
    if isinstance(obj, (OrderedDict, dict)):
        out: dict[str, Tensor] = {}
        for k, v in obj.items():
            out.update(get_state_dict(v, f"{prefix}{k}.", tensor_type))
        return out
    if isinstance(obj, (list, tuple)):
        out = {}
        for i, v in enumerate(obj):
            out.update(get_state_dict(v, f"{prefix}{i}.", tensor_type))
        return out
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return get_state_dict(vars(obj), prefix, tensor_type)
    return {}


def get_parameters(obj: Any) -> list[Tensor]:
    """The tensors of `get_state_dict(obj)`, each once (in state-dict order)."""
    return list({id(t): t for t in get_state_dict(obj).values()}.values())


def load_state_dict(
    model: Any,
    state_dict: dict[str, Tensor],
    strict: bool = True,
    verbose: bool = True,
    consume: bool = False,
    realize: bool = True,
) -> list[Tensor]:
    """Copy `state_dict`'s values into `model`'s tensors (by name); returns the model tensors that were loaded.

    Raises KeyError for missing (and, with `strict`, unexpected: PyTorch's rule) names, ValueError for a shape
    mismatch and TypeError for a dtype of another kind (float vs integer vs bool); float values are cast to the
    model's float dtype. Every check runs before any tensor is written, so a failing call leaves the model as it was.
    `verbose` prints the names left alone (non-strict) and one summary line; `consume` removes each loaded name from
    `state_dict` (to free the source tensors as loading goes); with ``realize=False`` the copies are left pending
    (lazy `assign`s, computed with the next realize of those tensors).
    """
    own = get_state_dict(model)
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    if strict and (missing or unexpected):
        raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
    start = time.perf_counter()
    plan: list[tuple[str, Tensor, Tensor]] = []
    for name, target in own.items():
        if name not in state_dict:
            if verbose:
                print(f"load_state_dict: {name} not in the state dict, left as is")
            continue
        value = state_dict[name]
        if not isinstance(value, Tensor):
            value = Tensor(np.asarray(value), device=target.device)
        if tuple(value.shape) != tuple(target.shape):
            raise ValueError(
                f"load_state_dict: shape mismatch for '{name}': the model has {tuple(target.shape)}, "
                f"the state dict {tuple(value.shape)}"
            )
        if value.dtype != target.dtype and _kind(value.dtype) != _kind(target.dtype):
            raise TypeError(
                f"load_state_dict: dtype mismatch for '{name}': the model has {target.dtype}, the state dict "
                f"{value.dtype} (cast it first)"
            )
        plan.append((name, target, value))
    loaded: list[Tensor] = []
    for _name, target, value in plan:
        if any(t is target for t in loaded):  # a tensor reachable under two names is written once
            continue
        new = value.to(target.device).cast(target.dtype).contiguous()
        target.realize()  # a pending initialization is written first (one ASSIGN at a time)
        target.assign(new.realize() if realize else new)
        if realize:
            target.realize()
        loaded.append(target)
    if consume:
        for name, _, _ in plan:
            state_dict.pop(name, None)
    if verbose:
        print(f"load_state_dict: loaded {len(loaded)} tensors in {(time.perf_counter() - start) * 1e3:.1f} ms")
    return loaded


def _kind(dt: DType) -> str:
    return "float" if dtypes.is_float(dt) else "bool" if dt == dtypes.bool else "int"


def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` to the file `fn` in the safetensors format (names sorted; `metadata` as ``__metadata__``).

    The save is atomic: every tensor is computed first (a failing realize never touches the file), the bytes go to a
    temporary file in the target's folder, which is flushed, fsynced and then renamed over `path` (``os.replace``; the
    folder is fsynced too where the OS allows). An exception or interrupt (KeyboardInterrupt included) at any point
    leaves the previous file at `fn` byte for byte as it was and removes the temporary file. A new file gets the
    permissions ``open()`` would give it (0o666 less the umask); a replaced file keeps its mode; a symlink at `fn`
    is followed (its target is replaced).
    """
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in tensors:
        if not isinstance(name, str):
            raise TypeError(f"safe_save: tensor names must be str, got {name!r} ({type(name).__name__})")
        if name == "__metadata__":
            raise ValueError("safe_save: '__metadata__' is reserved by the safetensors format; rename that tensor")
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in _ST_NAMES:
            raise TypeError(f"safe_save: {name} has dtype {t.dtype}, which safetensors can't store")
        data = bytes(t.contiguous().data()) if t.numel() else b""
        header[name] = {"dtype": _ST_NAMES[t.dtype], "shape": [int(d) for d in t.shape]}
        header[name]["data_offsets"] = [offset, offset + len(data)]
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    _atomic_write(os.path.realpath(os.fspath(fn)), [struct.pack("<Q", len(text)), text, *blobs])


def _atomic_write(target: str, chunks: list[bytes]) -> None:
    """Write `chunks` to a temporary file next to `target`, fsync it and rename it over `target` (see safe_save)."""
    folder = os.path.dirname(target) or "."
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            fd = -1  # the file object owns (and closes) it now
            os.chmod(tmp, mode)
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        if fd != -1:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable; some systems (Windows) can't open or fsync a folder
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _umask() -> int:
    """The process umask, read without changing it where the OS tells it (Linux), else by setting it back at once."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class _Entry(NamedTuple):
    name: str
    code: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _json_kind(value: Any) -> str:
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _no_constant(word: str) -> Any:
    raise ValueError(f"{word} is not valid JSON")


def _is_uint(x: Any) -> bool:
    return type(x) is int and 0 <= x <= _MAX_USIZE


def _parse_header(raw: bytes | memoryview, size: int, where: str) -> tuple[dict[str, str], list[_Entry], int]:
    """Validate a safetensors file's header against its size: (metadata, entries in header order, data start).

    `raw` holds at least the file's first 8 + header-length bytes when the file has them; `size` is the file's size.
    The rules are those of the safetensors package (0.8): a header of at most 100 MB of UTF-8 JSON holding an object;
    each entry an object with a known ``dtype``, a ``shape`` of non-negative integers and ``data_offsets`` [begin,
    end] with end - begin = numel * itemsize; the entries' ranges, sorted, cover the data section exactly (no overlap,
    no gap, nothing after the last one). ``__metadata__`` is null or an object of strings.
    """
    if size < 8:
        raise ValueError(
            f"{where}: not a safetensors file: it has {size} bytes, fewer than the 8-byte header length "
            f"(the file is empty, truncated or was written incompletely)"
        )
    (n,) = struct.unpack("<Q", bytes(raw[:8]))
    if n > _MAX_HEADER:
        raise ValueError(
            f"{where}: not a safetensors file: the header length field says {n} bytes, more than the format's "
            f"limit of {_MAX_HEADER} (the file is corrupt or in another format)"
        )
    if 8 + n > size:
        raise ValueError(
            f"{where}: the header length field says {n} bytes but only {size - 8} follow it: {8 + n - size} bytes "
            f"are missing (the file is truncated or was written incompletely, or it is not a safetensors file)"
        )
    try:
        header = json.loads(
            bytes(raw[8 : 8 + n]).decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constant
        )
    except _DuplicateKey as error:
        raise ValueError(
            f"{where}: the safetensors header gives the key '{error}' twice (a tensor or a field listed twice is "
            f"ambiguous; the file is corrupt)"
        ) from None
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        kind = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else "not valid JSON"
        raise ValueError(f"{where}: not a safetensors file: the {n}-byte header is {kind} ({error})") from error
    if not isinstance(header, dict):
        raise TypeError(
            f"{where}: the safetensors header is a JSON {_json_kind(header)}; expected an object "
            f'{{"tensor name": {{"dtype", "shape", "data_offsets"}}, "__metadata__": {{...}}}}'
        )
    metadata = header.get("__metadata__")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise TypeError(f"{where}: __metadata__ is a JSON {_json_kind(metadata)}; expected an object of string values")
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise TypeError(
                f"{where}: __metadata__ entry '{key}' is a JSON {_json_kind(value)}; the format allows only strings"
            )
    entries = [_check_entry(name, info, where) for name, info in header.items() if name != "__metadata__"]
    data_len = size - 8 - n
    cursor, last = 0, None
    for e in sorted(entries, key=lambda e: (e.begin, e.end)):
        if e.begin < cursor and last is not None:
            raise ValueError(
                f"{where}: tensor '{e.name}': data_offsets [{e.begin}, {e.end}] overlap tensor '{last.name}' "
                f"[{last.begin}, {last.end}]; each tensor needs its own byte range of the data section (the file is "
                f"corrupt)"
            )
        if e.begin > cursor:
            raise ValueError(
                f"{where}: tensor '{e.name}': data_offsets [{e.begin}, {e.end}] leave bytes [{cursor}, {e.begin}) of "
                f"the data section to no tensor; safetensors requires the tensors to cover it without gaps (the file "
                f"is corrupt)"
            )
        if e.end > cursor:
            cursor, last = e.end, e
    if cursor > data_len:
        e = min((e for e in entries if e.end > data_len), key=lambda e: (e.begin, e.end))
        raise ValueError(
            f"{where}: tensor '{e.name}': data_offsets [{e.begin}, {e.end}] reach past the end of the data section, "
            f"which has {data_len} bytes: {cursor - data_len} bytes are missing (the file is truncated or was "
            f"written incompletely)"
        )
    if cursor < data_len:
        after = f"after tensor '{last.name}' " if last is not None else ""
        raise ValueError(
            f"{where}: {data_len - cursor} bytes {after}at the end of the data section belong to no tensor (the "
            f"header's tensors end at byte {cursor} of {data_len}); safetensors rejects such files (the file is "
            f"corrupt or was appended to)"
        )
    return dict(metadata), entries, 8 + n


def _check_entry(name: str, info: Any, where: str) -> _Entry:
    """One header entry, checked on its own (types, dtype, shape, offsets, size)."""
    at = f"{where}: tensor '{name}'"
    if not isinstance(info, dict):
        raise TypeError(
            f"{at}: its header entry is a JSON {_json_kind(info)}; expected an object with dtype, shape and "
            f"data_offsets"
        )
    for key in ("dtype", "shape", "data_offsets"):
        if key not in info:
            raise ValueError(
                f"{at}: the header entry has no '{key}'; each tensor needs dtype, shape and data_offsets [begin, end]"
            )
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(code, str):
        raise TypeError(f'{at}: dtype is a JSON {_json_kind(code)}; expected a string such as "F32"')
    if code not in _ST_BITS:
        raise TypeError(f"{at}: dtype {code!r} is not a safetensors dtype (expected one of {', '.join(_ST_BITS)})")
    if not isinstance(shape, list) or not all(type(d) is int for d in shape):
        raise TypeError(f"{at}: shape {shape!r} is not a list of integers; expected e.g. [2, 3] ([] for a scalar)")
    if not all(_is_uint(d) for d in shape):
        raise ValueError(f"{at}: shape {shape} has a negative or too large dimension; dimensions are in [0, 2**64)")
    numel = 1
    for d in shape:  # in order, as the package checks it: a count past u64 is refused even when a later dim is 0
        numel *= d
        if numel > _MAX_USIZE:
            raise ValueError(f"{at}: shape {shape} has more than 2**64 elements")
    if not isinstance(offsets, list) or not all(type(x) is int for x in offsets):
        raise TypeError(f"{at}: data_offsets {offsets!r} is not a list of integers; expected [begin, end]")
    if len(offsets) != 2:
        raise ValueError(f"{at}: data_offsets {offsets} has {len(offsets)} numbers; expected two, [begin, end]")
    begin, end = offsets
    if begin < 0 or end < 0:
        raise ValueError(
            f"{at}: data_offsets {offsets} point before the data section; they count bytes from the end of the "
            f"header, so they must be >= 0"
        )
    if end < begin:
        raise ValueError(f"{at}: data_offsets {offsets} end before they begin; expected begin <= end")
    bits = numel * _ST_BITS[code]
    if bits % 8:
        raise ValueError(f"{at}: shape {shape} of {code} is {bits} bits, not a whole number of bytes")
    if end - begin != bits // 8:
        raise ValueError(
            f"{at}: data_offsets {offsets} hold {end - begin} bytes but shape {shape} of {code} needs {bits // 8} "
            f"(elements x item size); the header is corrupt"
        )
    return _Entry(name, code, tuple(shape), begin, end)


Source = Any  # str | os.PathLike | bytes | bytearray | memoryview | a binary file object | Tensor


def _is_path(fn: Any) -> bool:
    return isinstance(fn, (str, os.PathLike))


def _describe(fn: Any) -> str:
    """How errors name a source: the path, the file object's name, or what kind of in-memory data it was."""
    if _is_path(fn):
        return os.fspath(fn)
    if isinstance(fn, Tensor):
        return f"<Tensor {tuple(fn.shape)} {fn.dtype}>"
    if isinstance(fn, (bytes, bytearray, memoryview)):
        return f"<{len(fn)} bytes>"
    name = getattr(fn, "name", None)
    return str(name) if isinstance(name, (str, bytes, os.PathLike)) else f"<{type(fn).__name__}>"


def _read_all(fn: Source, who: str) -> tuple[memoryview, str]:
    """The whole content of `fn` (path, bytes-like, binary file object read from its current position, or a Tensor's
    raw bytes) and the name errors give it."""
    where = _describe(fn)
    if _is_path(fn):
        with open(fn, "rb") as f:
            return memoryview(f.read()), where
    if isinstance(fn, Tensor):
        return memoryview(bytes(fn.contiguous().data()) if fn.numel() else b""), where
    if isinstance(fn, (bytes, bytearray, memoryview)):
        return memoryview(fn).cast("B"), where
    if isinstance(fn, io.TextIOBase):
        raise TypeError(f"{who}: {where} is a text-mode file; open it with 'rb'")
    if callable(getattr(fn, "read", None)):
        data = fn.read()
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"{who}: {where} is a text-mode file ({type(data).__name__} read); open it with 'rb'")
        return memoryview(data).cast("B"), where
    raise TypeError(f"{who}: expected a path, bytes, a binary file object or a uint8 Tensor, got {type(fn).__name__}")


def accept_filename(fxn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator (tinygrad's): a str/PathLike first argument is replaced by a uint8 Tensor of the file's bytes."""

    @functools.wraps(fxn)
    def wrapper(fn: Any, *args: Any, **kwargs: Any) -> Any:
        if _is_path(fn):
            with open(fn, "rb") as f:
                fn = Tensor(np.frombuffer(f.read(), dtype=np.uint8))
        return fxn(fn, *args, **kwargs)

    return wrapper


def safe_load_metadata(t: Source) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file ({} when it has none); `t` is a path, bytes, a binary file object
    or a uint8 Tensor holding the file.

    Validates the header as `safe_load` does (against the file's size), with the same errors; from a path it reads
    only the header. (tinygrad returns ``(tensor, json_len, metadata)``; this returns the metadata dict only.)
    """
    if not _is_path(t):
        raw, where = _read_all(t, "safe_load_metadata")
        return _parse_header(raw, len(raw), where)[0]
    where = os.fspath(t)
    with open(t, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) == 8:
            (n,) = struct.unpack("<Q", head)
            if n <= _MAX_HEADER and 8 + n <= size:
                head += f.read(n)
        metadata, _, _ = _parse_header(head, size, where)
    return metadata


def safe_load(fn: Source, device: str | None = None) -> dict[str, Tensor]:
    """Read a safetensors file into ``{name: Tensor}`` on `device` (the default device when None), in header order.

    `fn` is a path, bytes, a binary file object or a uint8 Tensor holding the file. The file is validated before any
    tensor is made, to the rules of the safetensors package: a file it refuses is refused here too, with a ValueError
    (TypeError for a header value of the wrong JSON type) naming the file, the tensor and what was expected --
    overlapping or out-of-range ``data_offsets``, a size that doesn't match the shape, a missing field, a truncated
    file (with how many bytes are missing). A tensor whose dtype tinycore can't hold (F8, F4, C64, ...) raises
    TypeError. BOOL bytes other than 0 read as True.
    """
    raw, where = _read_all(fn, "safe_load")
    _, entries, start = _parse_header(raw, len(raw), where)
    out: dict[str, Tensor] = {}
    for name, code, shape, begin, end in entries:
        if code not in _ST_DTYPES:
            raise TypeError(
                f"{where}: tensor '{name}' has dtype {code}, which tinycore does not support (it reads "
                f"{', '.join(_ST_DTYPES)})"
            )
        out[name] = _from_le_bytes(raw[start + begin : start + end], _ST_DTYPES[code], shape, device)
    return out


def _from_le_bytes(blob: Any, dt: DType, shape: tuple[int, ...], device: str | None) -> Tensor:
    """A Tensor of `dt` and `shape` from little-endian bytes (bool: any nonzero byte is True; bfloat16 via bits)."""
    if dt == dtypes.bfloat16:
        bits = np.frombuffer(blob, dtype="<u2").reshape(shape).astype("=u2")
        return Tensor(bits, device=device, dtype=dtypes.uint16).bitcast(dtypes.bfloat16)
    if dt == dtypes.bool:
        arr = np.frombuffer(blob, dtype=np.uint8).reshape(shape).astype(np.bool_)
    else:
        np_dt = np.dtype(dtypes.to_np(dt)).newbyteorder("<")
        arr = np.frombuffer(blob, dtype=np_dt).reshape(shape).astype(np_dt.newbyteorder("="))
    t = Tensor(arr, device=device, dtype=dt)
    return t.reshape(shape) if tuple(t.shape) != shape else t


# ----- tar archives


def tar_extract(t: Source) -> dict[str, Tensor]:
    """The regular files of a tar archive (plain or gzip/bz2/xz-compressed) as ``{member name: uint8 Tensor}``.

    `t` is a path, bytes, a binary file object or a uint8 Tensor holding the archive. Directories, links and other
    special members are skipped. A file that is not a tar archive, is truncated or has a garbled member header raises
    ValueError naming it.
    """
    raw, where = _read_all(t, "tar_extract")
    out: dict[str, Tensor] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                f = tar.extractfile(member)
                data = f.read() if f is not None else b""
                if len(data) != member.size:
                    raise ValueError(f"member '{member.name}' has {len(data)} of its {member.size} bytes")
                out[member.name] = Tensor(np.frombuffer(data, dtype=np.uint8).copy())
            # tarfile ends quietly at a cut or garbled header after the first: what follows the last member must be
            # the end-of-archive zero blocks, else members would be silently lost
            tar.fileobj.seek(tar.offset)
            rest = tar.fileobj.read()
            if rest.strip(b"\0"):
                raise ValueError(f"{len(rest)} bytes after the last readable member are not a tar header or the end")
    except (tarfile.TarError, EOFError, OSError, ValueError) as error:
        raise ValueError(f"{where}: not a valid tar archive ({error})") from error
    return out


# ----- PyTorch checkpoints (.pt / .pth), read without torch

_TORCH_STORAGES: dict[str, DType] = {
    "DoubleStorage": dtypes.float64,
    "FloatStorage": dtypes.float32,
    "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16,
    "LongStorage": dtypes.int64,
    "IntStorage": dtypes.int32,
    "ShortStorage": dtypes.int16,
    "CharStorage": dtypes.int8,
    "ByteStorage": dtypes.uint8,
    "BoolStorage": dtypes.bool,
}
_TORCH_DTYPES: dict[str, DType] = {
    "float64": dtypes.float64,
    "float32": dtypes.float32,
    "float16": dtypes.float16,
    "bfloat16": dtypes.bfloat16,
    "int64": dtypes.int64,
    "int32": dtypes.int32,
    "int16": dtypes.int16,
    "int8": dtypes.int8,
    "uint8": dtypes.uint8,
    "bool": dtypes.bool,
}
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001


class _StorageType(NamedTuple):
    name: str
    dtype: DType


class _Storage(NamedTuple):
    """One storage of a checkpoint: its element dtype and its bytes (filled later in the legacy format)."""

    key: str
    dtype: DType
    numel: int
    data: bytearray


class _Rebuilt(NamedTuple):
    storage: _Storage
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor(storage: Any, storage_offset: Any, size: Any, stride: Any, *_: Any, **__: Any) -> _Rebuilt:
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError(f"a tensor is built from {type(storage).__name__}, not a storage")
    return _Rebuilt(storage, int(storage_offset), tuple(int(d) for d in size), tuple(int(d) for d in stride))


def _rebuild_parameter(data: Any, *_: Any, **__: Any) -> Any:
    return data


def _storage_type(name: str) -> Callable[..., Any]:
    def refuse(*_: Any) -> Any:
        raise pickle.UnpicklingError(f"torch.{name} is constructed directly (expected a persistent storage)")

    refuse.storage = _StorageType(name, _TORCH_STORAGES[name])  # type: ignore[attr-defined]
    return refuse


_TORCH_GLOBALS: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch", "Size"): tuple,
    ("_codecs", "encode"): lambda text, encoding="utf-8": str(text).encode(str(encoding)),
} | {("torch", name): _storage_type(name) for name in _TORCH_STORAGES}


class _TorchUnpickler(pickle.Unpickler):
    """An Unpickler that builds only plain containers, OrderedDicts and tensors: any other global (a class, a
    function) is refused, so loading a checkpoint never runs code from it."""

    def __init__(self, f: io.BytesIO, where: str, storage: Callable[[tuple[Any, ...]], _Storage] | None) -> None:
        super().__init__(f)
        self.where, self.storage = where, storage

    def find_class(self, module: str, name: str) -> Any:
        """The allowed globals: OrderedDict, torch's tensor/parameter rebuild functions and storage types."""
        if (module, name) in _TORCH_GLOBALS:
            return _TORCH_GLOBALS[(module, name)]
        if module == "torch" and name in _TORCH_DTYPES:
            return _TORCH_DTYPES[name]
        raise pickle.UnpicklingError(
            f"{self.where}: the checkpoint needs the Python object {module}.{name}, which torch_load does not build "
            f"(it reads tensors, dicts, lists and numbers only; a pickled module or custom class needs torch.load)"
        )

    def persistent_load(self, pid: Any) -> Any:
        """A ``('storage', storage type, key, location, numel, ...)`` reference to a storage of the checkpoint."""
        if self.storage is None or not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
            raise pickle.UnpicklingError(f"{self.where}: unknown persistent id {pid!r} (expected a torch storage)")
        return self.storage(pid)


def _storage_dtype(kind: Any, where: str) -> DType:
    if isinstance(kind, DType):
        return kind
    st = getattr(kind, "storage", None)
    if isinstance(st, _StorageType):
        return st.dtype
    raise pickle.UnpicklingError(f"{where}: unsupported storage type {kind!r}")


def _materialize(obj: Any, where: str, device: str | None) -> Any:
    """Replace every rebuilt tensor in `obj` (dicts, lists, tuples) by a Tensor read from its storage."""
    if isinstance(obj, _Rebuilt):
        st, offset, size, stride = obj
        if any(d < 0 for d in size) or any(s < 0 for s in stride) or len(size) != len(stride) or offset < 0:
            raise ValueError(f"{where}: storage {st.key}: invalid tensor view size={size} stride={stride}")
        numel = prod(size)
        last = offset + sum((d - 1) * s for d, s in zip(size, stride)) if numel else offset - 1
        if last >= st.numel:
            raise ValueError(
                f"{where}: storage {st.key} has {st.numel} elements but a tensor of size {list(size)}, stride "
                f"{list(stride)} at offset {offset} reads element {last} (the file is truncated or corrupt)"
            )
        item = st.dtype.itemsize
        np_dt = np.dtype("<u2") if st.dtype == dtypes.bfloat16 else np.dtype(dtypes.to_np(st.dtype)).newbyteorder("<")
        if st.dtype == dtypes.bool:
            np_dt = np.dtype(np.uint8)
        flat = np.frombuffer(bytes(st.data), dtype=np_dt, count=st.numel)
        view = np.lib.stride_tricks.as_strided(
            flat[offset:] if numel else flat[:0], shape=size, strides=[s * item for s in stride]
        )
        return _from_le_bytes(np.ascontiguousarray(view).tobytes(), st.dtype, size, device)
    if isinstance(obj, OrderedDict):
        return OrderedDict((k, _materialize(v, where, device)) for k, v in obj.items())
    if isinstance(obj, dict):
        return {k: _materialize(v, where, device) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_materialize(v, where, device) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_materialize(v, where, device) for v in obj)
    return obj


def torch_load(t: Source, device: str | None = None) -> Any:
    """Read a PyTorch checkpoint (``torch.save``: the zip format, and the legacy pre-1.6 format) without torch.

    `t` is a path, bytes, a binary file object or a uint8 Tensor holding the file. Returns what was saved (usually a
    dict of name -> Tensor) with every tensor as a tinycore Tensor on `device` (views keep their values: a tensor
    saved as a slice of a bigger storage reads only its own elements). The pickle is read with a restricted
    Unpickler: only containers, numbers, strings, OrderedDicts and tensors are built, anything else (a pickled
    `nn.Module`, a custom class) raises `pickle.UnpicklingError` naming the file and the object. A file that is not
    a checkpoint, a truncated one, or a tensor reading past its storage raises ValueError naming the file.
    """
    raw, where = _read_all(t, "torch_load")
    try:
        if zipfile.is_zipfile(io.BytesIO(raw)):
            return _torch_load_zip(raw, where, device)
        return _torch_load_legacy(raw, where, device)
    except (pickle.UnpicklingError, ValueError, TypeError):
        raise
    except (EOFError, IndexError, KeyError, AttributeError, struct.error, zipfile.BadZipFile, OSError) as error:
        raise ValueError(
            f"{where}: not a readable PyTorch checkpoint ({type(error).__name__}: {error}); the file is truncated, "
            f"corrupt or in another format"
        ) from error


def _torch_load_zip(raw: memoryview, where: str, device: str | None) -> Any:
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        names = z.namelist()
        pkl = [n for n in names if n == "data.pkl" or n.endswith("/data.pkl")]
        if not pkl:
            raise ValueError(f"{where}: a zip file without data.pkl: not a PyTorch checkpoint")
        prefix = pkl[0][: -len("data.pkl")]
        if f"{prefix}byteorder" in names and z.read(f"{prefix}byteorder").strip() not in (b"little", b""):
            raise ValueError(f"{where}: a big-endian checkpoint; torch_load reads little-endian ones only")
        storages: dict[str, _Storage] = {}

        def storage(pid: tuple[Any, ...]) -> _Storage:
            _, kind, key, _location, numel = pid[:5]
            key = str(key)
            if key not in storages:
                dt = _storage_dtype(kind, where)
                member = f"{prefix}data/{key}"
                if member not in names:
                    raise ValueError(f"{where}: storage {key} is missing from the archive ({member})")
                data = bytearray(z.read(member))
                if len(data) < int(numel) * dt.itemsize:
                    raise ValueError(
                        f"{where}: storage {key} has {len(data)} bytes, fewer than its {numel} {dt} elements need "
                        f"({int(numel) * dt.itemsize})"
                    )
                storages[key] = _Storage(key, dt, len(data) // dt.itemsize, data)
            return storages[key]

        obj = _TorchUnpickler(io.BytesIO(z.read(pkl[0])), where, storage).load()
    return _materialize(obj, where, device)


def _torch_load_legacy(raw: memoryview, where: str, device: str | None) -> Any:
    """The legacy format: pickles of the magic number, the protocol version and sys info, then the object (storages
    as persistent ids), then the list of storage keys, then each storage as an int64 element count and its bytes."""
    f = io.BytesIO(raw)
    try:
        magic = _TorchUnpickler(f, where, None).load()
    except (pickle.UnpicklingError, EOFError, ValueError, IndexError, KeyError, TypeError):
        magic = None
    if magic != _LEGACY_MAGIC:
        raise ValueError(
            f"{where}: not a PyTorch checkpoint (neither a zip archive with data.pkl nor the legacy format, which "
            f"starts with a pickled magic number)"
        )
    if _TorchUnpickler(f, where, None).load() != _LEGACY_PROTOCOL:
        raise ValueError(f"{where}: legacy checkpoint of an unknown protocol version")
    sys_info = _TorchUnpickler(f, where, None).load()
    if isinstance(sys_info, dict) and not sys_info.get("little_endian", True):
        raise ValueError(f"{where}: a big-endian checkpoint; torch_load reads little-endian ones only")
    storages: dict[str, _Storage] = {}

    def storage(pid: tuple[Any, ...]) -> _Storage:
        _, kind, key, _location, numel = pid[:5]
        if len(pid) > 5 and pid[5] is not None:  # (view key, offset, size): storage views of torch < 1.0
            raise pickle.UnpicklingError(f"{where}: storage views (checkpoints of torch < 1.0) are not supported")
        key = str(key)
        if key not in storages:
            storages[key] = _Storage(key, _storage_dtype(kind, where), int(numel), bytearray())
        return storages[key]

    obj = _TorchUnpickler(f, where, storage).load()
    keys = _TorchUnpickler(f, where, None).load()
    if not isinstance(keys, list):
        raise ValueError(f"{where}: the legacy checkpoint's storage key list is a {type(keys).__name__}")
    pos = f.tell()
    for key in keys:
        st = storages.get(str(key))
        if st is None:
            raise ValueError(f"{where}: storage key {key!r} is listed but no tensor uses it")
        if pos + 8 > len(raw):
            raise ValueError(f"{where}: storage {key}: the file ends before its size field (truncated)")
        (numel,) = struct.unpack("<q", bytes(raw[pos : pos + 8]))
        nbytes = numel * st.dtype.itemsize
        if numel != st.numel or pos + 8 + nbytes > len(raw):
            raise ValueError(
                f"{where}: storage {key}: {numel} elements of {st.dtype} ({nbytes} bytes) announced, expected "
                f"{st.numel}, {len(raw) - pos - 8} bytes left (the file is truncated or corrupt)"
            )
        st.data[:] = raw[pos + 8 : pos + 8 + nbytes]
        pos += 8 + nbytes
    missing = [k for k, st in storages.items() if len(st.data) != st.numel * st.dtype.itemsize]
    if missing:
        raise ValueError(f"{where}: storages {missing} have no data (the file is truncated or corrupt)")
    return _materialize(obj, where, device)


# ----- GGUF (llama.cpp) files

# ggml type -> (elements per block, bytes per block); the codes of ggml.h / the GGUF spec
_GGML_BLOCKS: dict[int, tuple[int, int]] = {2: (32, 18), 3: (32, 20), 8: (32, 34)}
_GGML_PLAIN: dict[int, DType] = {
    0: dtypes.float32,
    1: dtypes.float16,
    24: dtypes.int8,
    25: dtypes.int16,
    26: dtypes.int32,
    27: dtypes.int64,
    28: dtypes.float64,
    30: dtypes.bfloat16,
}
_GGML_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 8: "Q8_0", 24: "I8", 25: "I16", 26: "I32", 27: "I64"}
_GGML_NAMES |= {28: "F64", 30: "BF16"}
# GGUF metadata value types: code -> struct format (8: string, 9: array are read specially)
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def ggml_data_to_tensor(t: Tensor, n: int, ggml_type: int) -> Tensor:
    """Decode `n` elements of ggml type `ggml_type` from the uint8 Tensor `t` (its first bytes) into a flat Tensor.

    Plain types keep their dtype (F32, F16, BF16, F64, I8..I64); the block-quantized Q4_0, Q4_1 and Q8_0 decode to
    float32 (``d * q`` with the block's float16 scale ``d``; Q4_1 adds its minimum ``m``). Other types (the K-quants,
    IQ types, ...) raise ValueError naming the type.
    """
    if ggml_type in _GGML_PLAIN:
        dt = _GGML_PLAIN[ggml_type]
        need = n * dt.itemsize
    elif ggml_type in _GGML_BLOCKS:
        per, size = _GGML_BLOCKS[ggml_type]
        if n % per:
            raise ValueError(f"ggml type {_GGML_NAMES[ggml_type]}: {n} elements is not a multiple of the block ({per})")
        need = n // per * size
    else:
        raise ValueError(f"ggml type {ggml_type} is not supported (tinycore decodes {', '.join(_GGML_NAMES.values())})")
    raw = bytes(t[:need].contiguous().data()) if isinstance(t, Tensor) else bytes(memoryview(t)[:need])
    if len(raw) < need:
        raise ValueError(f"ggml data: {n} elements of {_GGML_NAMES[ggml_type]} need {need} bytes, got {len(raw)}")
    return _ggml_decode(raw, n, ggml_type)


def _ggml_decode(raw: bytes | memoryview, n: int, ggml_type: int) -> Tensor:
    if ggml_type in _GGML_PLAIN:
        dt = _GGML_PLAIN[ggml_type]
        return _from_le_bytes(raw[: n * dt.itemsize], dt, (n,), None)
    per, size = _GGML_BLOCKS[ggml_type]
    blocks = np.frombuffer(raw, dtype=np.uint8, count=n // per * size).reshape(-1, size)
    d = blocks[:, :2].copy().view("<f2").astype(np.float32)
    if ggml_type == 8:  # Q8_0: f16 d, int8 q[32]
        out = d * blocks[:, 2:].view(np.int8).astype(np.float32)
    else:  # Q4_0: f16 d, 16 bytes of nibbles (low nibbles = elements 0..15, high = 16..31), value (q - 8) * d
        qs = blocks[:, 2:] if ggml_type == 2 else blocks[:, 4:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
        if ggml_type == 2:
            out = (q - 8) * d
        else:  # Q4_1: f16 d, f16 m, nibbles; value q * d + m
            out = q * d + blocks[:, 2:4].copy().view("<f2").astype(np.float32)
    return Tensor(out.reshape(-1).astype(np.float32))


class _Reader:
    """Little-endian reads from a byte buffer, with errors naming the file and what was being read."""

    def __init__(self, raw: memoryview, where: str) -> None:
        self.raw, self.where, self.pos = raw, where, 0

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or self.pos + n > len(self.raw):
            raise ValueError(
                f"{self.where}: the file ends inside {what} (at byte {self.pos}, {n} bytes needed, "
                f"{len(self.raw) - self.pos} left): truncated or not a GGUF file"
            )
        out = self.raw[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.unpack("<Q", what)
        try:
            return bytes(self.take(n, what)).decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{self.where}: {what} is not UTF-8 ({error})") from None

    def value(self, kind: int, what: str, depth: int = 0) -> Any:
        if kind in _GGUF_SCALARS:
            return self.unpack(_GGUF_SCALARS[kind], what)
        if kind == 8:
            return self.string(what)
        if kind == 9 and depth < 8:
            item, count = self.unpack("<I", what), self.unpack("<Q", what)
            if count > len(self.raw):
                raise ValueError(f"{self.where}: {what}: an array of {count} items is longer than the file")
            return [self.value(item, what, depth + 1) for _ in range(count)]
        raise ValueError(f"{self.where}: {what} has the unknown GGUF value type {kind}")


def gguf_load(tensor: Source) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Read a GGUF file (llama.cpp's format, versions 2 and 3): ``(metadata key -> value, name -> Tensor)``.

    `tensor` is a path, bytes, a binary file object or a uint8 Tensor holding the file. Tensor shapes are the GGUF
    dims reversed (GGUF lists the fastest-varying dim first), so a ``[cols, rows]`` matrix loads as ``(rows, cols)``.
    Quantized tensors (Q4_0, Q4_1, Q8_0) decode to float32 (see `ggml_data_to_tensor`). A file that is not GGUF, is
    truncated, or holds a tensor past its end or of an unsupported type raises ValueError naming the file (and the
    tensor).
    """
    raw, where = _read_all(tensor, "gguf_load")
    r = _Reader(raw, where)
    if bytes(raw[:4]) != b"GGUF":
        raise ValueError(f"{where}: not a GGUF file (it starts with {bytes(raw[:4])!r}, not b'GGUF')")
    r.pos = 4
    version = r.unpack("<I", "the version")
    if version not in (2, 3):
        raise ValueError(f"{where}: GGUF version {version} is not supported (2 and 3 are)")
    n_tensors, n_kv = r.unpack("<Q", "the tensor count"), r.unpack("<Q", "the metadata count")
    kv: dict[str, Any] = {}
    for i in range(n_kv):
        key = r.string(f"metadata key {i}")
        kv[key] = r.value(r.unpack("<I", f"the type of metadata '{key}'"), f"metadata '{key}'")
    infos = []
    for i in range(n_tensors):
        name = r.string(f"tensor name {i}")
        n_dims = r.unpack("<I", f"tensor '{name}' dims")
        if n_dims > 8:
            raise ValueError(f"{where}: tensor '{name}' has {n_dims} dims (GGUF allows at most 4)")
        dims = [r.unpack("<Q", f"tensor '{name}' dims") for _ in range(n_dims)]
        infos.append((name, dims, r.unpack("<I", f"tensor '{name}' type"), r.unpack("<Q", f"tensor '{name}' offset")))
    alignment = kv.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment <= 0:
        raise ValueError(f"{where}: general.alignment is {alignment!r}; expected a positive integer")
    data_start = -(-r.pos // alignment) * alignment
    state: dict[str, Tensor] = {}
    for name, dims, kind, offset in infos:
        n = prod(dims)
        if kind not in _GGML_PLAIN and kind not in _GGML_BLOCKS:
            raise ValueError(
                f"{where}: tensor '{name}' has ggml type {kind}, which tinycore does not decode (it reads "
                f"{', '.join(_GGML_NAMES.values())})"
            )
        if kind in _GGML_BLOCKS:
            per, size = _GGML_BLOCKS[kind]
            if n % per:
                raise ValueError(f"{where}: tensor '{name}': {n} elements is not a whole number of {per}-blocks")
            nbytes = n // per * size
        else:
            nbytes = n * _GGML_PLAIN[kind].itemsize
        begin = data_start + offset
        if begin + nbytes > len(raw):
            raise ValueError(
                f"{where}: tensor '{name}' ({_GGML_NAMES[kind]}, dims {dims}) spans bytes [{begin}, {begin + nbytes})"
                f" but the file has {len(raw)}: truncated or corrupt"
            )
        state[name] = _ggml_decode(raw[begin : begin + nbytes], n, kind).reshape(*reversed(dims))
    return kv, state


# ----- a file-like view of a Tensor


class TensorIO(io.RawIOBase):
    """A binary file over a 1-d uint8 Tensor (tinygrad's `TensorIO`): read, seek and write its bytes in place.

    Reads come from the tensor's data (realized once when opened); `write` updates the tensor with `assign`.
    """

    def __init__(self, t: Tensor) -> None:
        if t.ndim != 1 or t.dtype != dtypes.uint8:
            raise ValueError(f"TensorIO needs a 1-d uint8 Tensor, got shape {tuple(t.shape)} {t.dtype}")
        super().__init__()
        self._tensor, self._position = t, 0
        self._data = bytearray(t.contiguous().data()) if t.numel() else bytearray()

    def readable(self) -> bool:
        """True: the tensor's bytes can be read."""
        return True

    def seekable(self) -> bool:
        """True: the position can be moved with `seek`."""
        return True

    def writable(self) -> bool:
        """True: `write` overwrites the tensor's bytes (its size is fixed)."""
        return True

    def tell(self) -> int:
        """The current position."""
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move to `offset` from the start (SEEK_SET), the current position (SEEK_CUR) or the end (SEEK_END)."""
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: len(self._data)}[whence]
        self._position = max(0, min(len(self._data), base + offset))
        return self._position

    def readinto(self, buffer: Any) -> int:
        """Copy the next bytes into `buffer`; returns how many (0 at the end)."""
        view = memoryview(buffer).cast("B")
        chunk = self._data[self._position : self._position + len(view)]
        view[: len(chunk)] = chunk
        self._position += len(chunk)
        return len(chunk)

    def read(self, size: int = -1) -> bytes:
        """The next `size` bytes (all the rest when negative)."""
        end = len(self._data) if size is None or size < 0 else min(len(self._data), self._position + size)
        out = bytes(self._data[self._position : end])
        self._position = max(self._position, end)
        return out

    def write(self, b: Any) -> int:
        """Overwrite bytes at the position (never past the tensor's end); returns how many were written."""
        data = bytes(memoryview(b).cast("B"))[: len(self._data) - self._position]
        self._data[self._position : self._position + len(data)] = data
        self._position += len(data)
        new = Tensor(np.frombuffer(bytes(self._data), dtype=np.uint8), device=self._tensor.device)
        self._tensor.assign(new).realize()
        return len(data)
