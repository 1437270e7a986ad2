"""Model state: finding parameters, state dicts, and the safetensors file format.

- `get_state_dict(obj)`: ``{"layer.0.weight": Tensor, ...}`` found by walking attributes, lists, tuples and dicts.
- `get_parameters(obj)`: the tensors of the state dict (each once).
- `load_state_dict(model, state_dict, strict=True)`: copies values into the model's tensors, checking names, shapes
  and dtype kinds (float values are cast between float dtypes, as PyTorch's `copy_` does).
- `safe_save(tensors, path, metadata=None)` / `safe_load(path)`: the safetensors format, written and read here:
  an 8-byte little-endian header length, a JSON header ``{name: {"dtype", "shape", "data_offsets"}, "__metadata__":
  {...}}`` padded with spaces to 8 bytes, then the raw little-endian tensor bytes.
"""

from __future__ import annotations

import json
import os
import struct
from collections import OrderedDict
from typing import Any

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
    """Write `tensors` to `path` in the safetensors format (names sorted; `metadata` as ``__metadata__``)."""
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
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
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def _read_header(raw: bytes | memoryview, where: str) -> tuple[dict[str, Any], int]:
    if len(raw) < 8:
        raise ValueError(f"{where}: not a safetensors file (shorter than 8 bytes)")
    (n,) = struct.unpack("<Q", bytes(raw[:8]))
    if n > len(raw) - 8:
        raise ValueError(f"{where}: not a safetensors file (header length {n} exceeds the file)")
    try:
        header = json.loads(bytes(raw[8 : 8 + n]).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{where}: not a safetensors file (bad JSON header: {error})") from error
    return header, 8 + n


def safe_load_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file ({} when it has none)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        (n,) = struct.unpack("<Q", raw) if len(raw) == 8 else (0,)
        header, _ = _read_header(raw + f.read(n), str(path))
    return dict(header.get("__metadata__", {}))


def safe_load(path: str | os.PathLike[str], device: str | None = None) -> dict[str, Tensor]:
    """Read a safetensors file into ``{name: Tensor}`` on `device` (the default device when None)."""
    with open(path, "rb") as f:
        raw = f.read()
    header, start = _read_header(raw, str(path))
    out: dict[str, Tensor] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        code = info["dtype"]
        if code not in _ST_DTYPES:
            raise TypeError(f"safe_load: {name} has dtype {code}, which tinycore does not support")
        dt = _ST_DTYPES[code]
        lo, hi = info["data_offsets"]
        shape = tuple(info["shape"])
        blob = raw[start + lo : start + hi]
        if dt == dtypes.bfloat16:
            bits = np.frombuffer(blob, dtype="<u2").reshape(shape)
            out[name] = Tensor(bits.copy(), device=device, dtype=dtypes.uint16).bitcast(dtypes.bfloat16)
            continue
        np_dt = np.dtype(dtypes.to_np(dt)).newbyteorder("<")
        arr = np.frombuffer(blob, dtype=np_dt).reshape(shape).astype(np_dt.newbyteorder("="))
        t = Tensor(arr, device=device, dtype=dt)
        out[name] = t.reshape(shape) if tuple(t.shape) != shape else t
    return out
