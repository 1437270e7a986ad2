"""Model state: finding parameters, state dicts, and the safetensors file format.

- `get_state_dict(obj)`: ``{"layer.0.weight": Tensor, ...}`` found by walking attributes, lists, tuples and dicts.
- `get_parameters(obj)`: the tensors of the state dict (each once).
- `load_state_dict(model, state_dict, strict=True)`: copies values into the model's tensors, checking names, shapes
  and dtype kinds (float values are cast between float dtypes, as PyTorch's `copy_` does).
- `safe_save(tensors, path, metadata=None)` / `safe_load(path)`: the safetensors format, written and read here:
  an 8-byte little-endian header length, a JSON header ``{name: {"dtype", "shape", "data_offsets"}, "__metadata__":
  {...}}`` padded with spaces to 8 bytes, then the raw little-endian tensor bytes.

Checkpoint guarantees: `safe_save` replaces the file atomically (a temporary file in the same folder, fsynced, then
``os.replace``), so an interrupted or failed save leaves the previous file as it was and no temporary file behind.
`safe_load` / `safe_load_metadata` accept only files the `safetensors` package accepts (all of them, but for dtypes
tinycore can't hold and headers that give a key twice): anything else raises ValueError (TypeError for a header field
of the wrong JSON type or a dtype tinycore does not support) naming the file, the tensor and what was expected, never
another exception type.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import tempfile
from collections import OrderedDict
from typing import Any, NamedTuple

import numpy as np

from tinycore.dtype import DType, dtypes
from tinycore.tensor import Tensor

__all__ = ["get_parameters", "get_state_dict", "load_state_dict", "safe_load", "safe_load_metadata", "safe_save"]

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


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = False) -> None:
    """Copy `state_dict`'s values into `model`'s tensors (by name), realized.

    Raises KeyError for missing (and, with `strict`, unexpected) names, ValueError for a shape mismatch and TypeError
    for a dtype of another kind (float vs integer vs bool); float values are cast to the model's float dtype.
    """
    own = get_state_dict(model)
    missing = [k for k in own if k not in state_dict]
    unexpected = [k for k in state_dict if k not in own]
    if strict and (missing or unexpected):
        raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
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
        new = value.realize().to(target.device).cast(target.dtype).contiguous().realize()
        target.realize()  # a pending initialization is written first (one ASSIGN at a time)
        target.assign(new).realize()


def _kind(dt: DType) -> str:
    return "float" if dtypes.is_float(dt) else "bool" if dt == dtypes.bool else "int"


def safe_save(tensors: dict[str, Tensor], path: str | os.PathLike[str], metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` to `path` in the safetensors format (names sorted; `metadata` as ``__metadata__``).

    The save is atomic: every tensor is computed first (a failing realize never touches the file), the bytes go to a
    temporary file in the target's folder, which is flushed, fsynced and then renamed over `path` (``os.replace``; the
    folder is fsynced too where the OS allows). An exception or interrupt (KeyboardInterrupt included) at any point
    leaves the previous file at `path` byte for byte as it was and removes the temporary file. A new file gets the
    permissions ``open()`` would give it (0o666 less the umask); a replaced file keeps its mode; a symlink at `path`
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
    _atomic_write(os.path.realpath(os.fspath(path)), [struct.pack("<Q", len(text)), text, *blobs])


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


def safe_load_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file ({} when it has none).

    Reads only the header, but validates it as `safe_load` does (against the file's size), with the same errors.
    """
    where = os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) == 8:
            (n,) = struct.unpack("<Q", head)
            if n <= _MAX_HEADER and 8 + n <= size:
                head += f.read(n)
        metadata, _, _ = _parse_header(head, size, where)
    return metadata


def safe_load(path: str | os.PathLike[str], device: str | None = None) -> dict[str, Tensor]:
    """Read a safetensors file into ``{name: Tensor}`` on `device` (the default device when None), in header order.

    The file is validated before any tensor is made, to the rules of the safetensors package: a file it refuses is
    refused here too, with a ValueError (TypeError for a header value of the wrong JSON type) naming the file, the
    tensor and what was expected -- overlapping or out-of-range ``data_offsets``, a size that doesn't match the shape,
    a missing field, a truncated file (with how many bytes are missing). A tensor whose dtype tinycore can't hold
    (F8, F4, C64, ...) raises TypeError. BOOL bytes other than 0 read as True.
    """
    where = os.fspath(path)
    with open(path, "rb") as f:
        raw = memoryview(f.read())
    _, entries, start = _parse_header(raw, len(raw), where)
    out: dict[str, Tensor] = {}
    for name, code, shape, begin, end in entries:
        if code not in _ST_DTYPES:
            raise TypeError(
                f"{where}: tensor '{name}' has dtype {code}, which tinycore does not support (it reads "
                f"{', '.join(_ST_DTYPES)})"
            )
        dt = _ST_DTYPES[code]
        blob = raw[start + begin : start + end]
        if dt == dtypes.bfloat16:
            bits = np.frombuffer(blob, dtype="<u2").reshape(shape).astype("=u2")
            out[name] = Tensor(bits, device=device, dtype=dtypes.uint16).bitcast(dtypes.bfloat16)
            continue
        if dt == dtypes.bool:
            arr = np.frombuffer(blob, dtype=np.uint8).reshape(shape).astype(np.bool_)  # any nonzero byte is True
        else:
            np_dt = np.dtype(dtypes.to_np(dt)).newbyteorder("<")
            arr = np.frombuffer(blob, dtype=np_dt).reshape(shape).astype(np_dt.newbyteorder("="))
        t = Tensor(arr, device=device, dtype=dt)
        out[name] = t.reshape(shape) if tuple(t.shape) != shape else t
    return out
