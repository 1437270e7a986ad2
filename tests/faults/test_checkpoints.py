"""Checkpoint faults (issue 18, item 5): `safe_save` is atomic, `safe_load` accepts what the safetensors package does.

- an interrupted or failed save leaves the previous checkpoint byte for byte and no temporary file behind;
- every dtype round-trips both ways against the `safetensors` package (0-size, 1-element, scalar, bfloat16);
- each malformed header or truncated file raises ValueError/TypeError naming the file and the tensor (and the package
  refuses the same bytes);
- a seeded fuzz of header mutations: we accept exactly what the package accepts (less tinycore's unsupported dtypes
  and duplicate JSON keys) with the same bytes, and raise only ValueError/TypeError otherwise.
"""

from __future__ import annotations

import json
import os
import random
import stat
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tinycore.dtype import dtypes
from tinycore.nn.state import safe_load, safe_load_metadata, safe_save
from tinycore.tensor import Tensor

safetensors = pytest.importorskip("safetensors", reason="the cross-checks need the safetensors package")
st_numpy = pytest.importorskip("safetensors.numpy")

# tinycore dtype -> (safetensors code, the package's TensorSpec dtype name)
DTYPES = {
    dtypes.float64: ("F64", "float64"),
    dtypes.float32: ("F32", "float32"),
    dtypes.float16: ("F16", "float16"),
    dtypes.bfloat16: ("BF16", "bfloat16"),
    dtypes.int64: ("I64", "int64"),
    dtypes.int32: ("I32", "int32"),
    dtypes.int16: ("I16", "int16"),
    dtypes.int8: ("I8", "int8"),
    dtypes.uint64: ("U64", "uint64"),
    dtypes.uint32: ("U32", "uint32"),
    dtypes.uint16: ("U16", "uint16"),
    dtypes.uint8: ("U8", "uint8"),
    dtypes.bool: ("BOOL", "bool"),
}
SHAPES = [(), (0,), (1,), (2, 3), (3, 0, 2)]


def _raw(t: Tensor) -> bytes:
    return bytes(t.contiguous().data()) if t.numel() else b""


def _values(dt: Any, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random values of `dt` as a numpy array (bfloat16 as its uint16 bits)."""
    return np.array(_draw(dt, shape, rng))  # a 0-d array, not a numpy scalar, for shape ()


def _draw(dt: Any, shape: tuple[int, ...], rng: np.random.Generator) -> Any:
    if dt == dtypes.bool:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dt == dtypes.bfloat16:
        return (rng.standard_normal(size=shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    np_dt = np.dtype(dtypes.to_np(dt))
    if np_dt.kind == "f":
        return (rng.standard_normal(size=shape) * 100).astype(np_dt)
    info = np.iinfo(np_dt)
    return rng.integers(info.min, info.max, size=shape, dtype=np_dt, endpoint=True)


def _tensor(arr: np.ndarray, dt: Any, device: str | None = None) -> Tensor:
    if dt == dtypes.bfloat16:
        return Tensor(arr, device=device, dtype=dtypes.uint16).bitcast(dtypes.bfloat16)
    return Tensor(arr, device=device, dtype=dt)


def _file(path: Path, header: Any, data: bytes = b"", *, text: bytes | None = None) -> Path:
    """A hand-made safetensors file: the header object (or raw `text`), its length, then `data`."""
    body = json.dumps(header).encode() if text is None else text
    path.write_bytes(struct.pack("<Q", len(body)) + body + data)
    return path


def _checkpoint(path: Path, scale: float = 1.0) -> Path:
    safe_save(
        {"w": Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) * scale), "b": Tensor([1, 2, 3], dtype=dtypes.int16)},
        path,
        metadata={"step": str(scale)},
    )
    return path


# ---------------------------------------------------------------------------------------------------- atomic saves


def test_interrupted_write_keeps_the_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _checkpoint(tmp_path / "model.safetensors")
    before = path.read_bytes()
    real_fdopen = os.fdopen

    class HalfWriter:
        """Writes the first chunk, half of the second, then the user presses Ctrl-C."""

        def __init__(self, f: Any) -> None:
            self.f, self.calls = f, 0

        def __enter__(self) -> HalfWriter:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

        def write(self, chunk: bytes) -> int:
            self.calls += 1
            if self.calls == 2:
                self.f.write(chunk[: len(chunk) // 2])
                self.f.flush()
                raise KeyboardInterrupt
            return self.f.write(chunk)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.f, name)

    monkeypatch.setattr(os, "fdopen", lambda *a, **k: HalfWriter(real_fdopen(*a, **k)))
    with pytest.raises(KeyboardInterrupt):
        _checkpoint(path, scale=2.0)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.safetensors"]  # no temporary file left
    assert safe_load_metadata(path) == {"step": "1.0"}


@pytest.mark.parametrize("where", ["fsync", "replace"])
def test_interrupt_before_the_rename_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    path = _checkpoint(tmp_path / "model.safetensors")
    before = path.read_bytes()

    def interrupt(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, where, interrupt)
    with pytest.raises(KeyboardInterrupt):
        _checkpoint(path, scale=2.0)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.safetensors"]


def test_failing_realize_never_touches_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _checkpoint(tmp_path / "model.safetensors")
    before = path.read_bytes()
    real_data, calls = Tensor.data, []

    def data(self: Tensor) -> memoryview:
        calls.append(self)
        if len(calls) == 2:
            raise RuntimeError("kernel failed")
        return real_data(self)

    monkeypatch.setattr(Tensor, "data", data)
    opened: list[object] = []
    monkeypatch.setattr(os, "fdopen", lambda *a, **k: opened.append(a) or pytest.fail("the file was opened"))
    with pytest.raises(RuntimeError, match="kernel failed"):
        _checkpoint(path, scale=3.0)
    monkeypatch.undo()
    assert not opened and path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.safetensors"]


def test_save_replaces_and_keeps_sensible_permissions(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "new.safetensors")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # as open() would make it, not mkstemp's 0600
    path.chmod(0o640)
    _checkpoint(path, scale=2.0)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # a replaced checkpoint keeps its mode
    assert safe_load_metadata(path) == {"step": "2.0"}
    link = tmp_path / "latest.safetensors"
    link.symlink_to(path.name)
    _checkpoint(link, scale=4.0)
    assert link.is_symlink() and safe_load_metadata(path) == {"step": "4.0"}  # the link's target was replaced
    assert sorted(os.listdir(tmp_path)) == ["latest.safetensors", "new.safetensors"]


def test_save_refuses_reserved_and_non_string_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="__metadata__"):
        safe_save({"__metadata__": Tensor([1.0])}, tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="names must be str"):
        safe_save({1: Tensor([1.0])}, tmp_path / "x.safetensors")  # type: ignore[dict-item]
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------- round trips with the package


@pytest.mark.parametrize("dt", list(DTYPES), ids=lambda dt: DTYPES[dt][0])
def test_every_dtype_round_trips_with_the_package(dt: Any, tmp_path: Path, device: str) -> None:
    rng = np.random.default_rng(7)
    code, spec_name = DTYPES[dt]
    arrays = {f"t{i}": _values(dt, shape, rng) for i, shape in enumerate(SHAPES)}
    ours = tmp_path / "ours.safetensors"
    safe_save({k: _tensor(a, dt, device) for k, a in arrays.items()}, ours, metadata={"dtype": code})
    theirs = dict(safetensors.deserialize(ours.read_bytes()))
    assert set(theirs) == set(arrays)
    for k, a in arrays.items():
        assert theirs[k]["dtype"] == code and tuple(theirs[k]["shape"]) == a.shape, k
        assert bytes(theirs[k]["data"]) == a.astype(a.dtype.newbyteorder("<")).tobytes(), k
    if dt != dtypes.bfloat16:  # numpy has no bfloat16
        for k, a in st_numpy.load_file(str(ours)).items():
            np.testing.assert_array_equal(a, arrays[k], err_msg=k)
    # the package writes, we read
    specs = {
        k: safetensors.TensorSpec(dtype=spec_name, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
        for k, a in arrays.items()
    }
    path = tmp_path / "theirs.safetensors"
    path.write_bytes(safetensors.serialize(specs, metadata={"by": "package"}))
    loaded = safe_load(path, device=device)
    assert set(loaded) == set(arrays) and safe_load_metadata(path) == {"by": "package"}
    for k, a in arrays.items():
        assert loaded[k].dtype == dt and loaded[k].shape == a.shape, k
        assert _raw(loaded[k]) == a.tobytes(), k


def test_numpy_save_file_is_read(tmp_path: Path) -> None:
    arrays = {"x": np.arange(5, dtype=np.int64), "y": np.array(2.5, dtype=np.float32), "z": np.zeros((0, 4), bool)}
    st_numpy.save_file(arrays, str(tmp_path / "np.safetensors"))
    loaded = safe_load(tmp_path / "np.safetensors")
    for k, a in arrays.items():
        assert loaded[k].shape == a.shape
        np.testing.assert_array_equal(loaded[k].numpy(), a, err_msg=k)


# ------------------------------------------------------------------------------------------------ malformed files

F32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
B8 = bytes(range(8))
MALFORMED: dict[str, tuple[Any, bytes, bytes | None, type[Exception], str | None, str]] = {
    # case: (header, data, raw header text or None, error, tensor named or None, text the message must hold)
    "overlapping offsets": (
        {"a": F32, "b": {**F32, "data_offsets": [4, 12]}},
        bytes(12),
        None,
        ValueError,
        "b",
        "overlap tensor 'a'",
    ),
    "offsets before the data": ({"a": {**F32, "data_offsets": [-8, 0]}}, B8, None, ValueError, "a", "must be >= 0"),
    "offsets into the header": ({"a": {**F32, "data_offsets": [-4, 4]}}, B8, None, ValueError, "a", "before the data"),
    "end before begin": ({"a": {**F32, "data_offsets": [8, 0]}}, B8, None, ValueError, "a", "end before they begin"),
    "missing data_offsets": ({"a": {"dtype": "F32", "shape": [2]}}, B8, None, ValueError, "a", "no 'data_offsets'"),
    "missing dtype": ({"a": {"shape": [2], "data_offsets": [0, 8]}}, B8, None, ValueError, "a", "no 'dtype'"),
    "missing shape": ({"a": {"dtype": "F32", "data_offsets": [0, 8]}}, B8, None, ValueError, "a", "no 'shape'"),
    "list header": ([F32], B8, None, TypeError, None, "expected an object"),
    "string header": ("F32", B8, None, TypeError, None, "header is a JSON string"),
    "non-dict entry": ({"a": [0, 8]}, B8, None, TypeError, "a", "entry is a JSON array"),
    "shape is a string": ({"a": {**F32, "shape": "2"}}, B8, None, TypeError, "a", "not a list of integers"),
    "shape of floats": ({"a": {**F32, "shape": [2.0]}}, B8, None, TypeError, "a", "not a list of integers"),
    "shape of bools": ({"a": {**F32, "shape": [True, True]}}, B8, None, TypeError, "a", "not a list of integers"),
    "negative dim": ({"a": {**F32, "shape": [-2]}}, B8, None, ValueError, "a", "negative"),
    "dtype not a string": ({"a": {**F32, "dtype": 4}}, B8, None, TypeError, "a", "dtype is a JSON integer"),
    "unknown dtype": ({"a": {**F32, "dtype": "f32"}}, B8, None, TypeError, "a", "not a safetensors dtype"),
    "offsets not ints": ({"a": {**F32, "data_offsets": [0, "8"]}}, B8, None, TypeError, "a", "not a list of int"),
    "three offsets": ({"a": {**F32, "data_offsets": [0, 8, 8]}}, B8, None, ValueError, "a", "expected two"),
    "size mismatch": ({"a": {**F32, "shape": [3]}}, B8, None, ValueError, "a", "needs 12"),
    "hole between tensors": (
        {"a": {**F32, "shape": [1], "data_offsets": [0, 4]}, "b": {**F32, "shape": [1], "data_offsets": [8, 12]}},
        bytes(12),
        None,
        ValueError,
        "b",
        "without gaps",
    ),
    "bytes after the last tensor": ({"a": F32}, B8 + b"\0", None, ValueError, "a", "belong to no tensor"),
    "truncated data": ({"a": F32}, B8[:5], None, ValueError, "a", "3 bytes are missing"),
    "duplicate names": (
        {},
        B8,
        b'{"a":' + json.dumps(F32).encode() + b',"a":' + json.dumps(F32).encode() + b"}",
        ValueError,
        None,
        "gives the key 'a' twice",
    ),
    "NaN in the header": ({}, B8, json.dumps(F32).encode()[:-1] + b',"x":NaN}', ValueError, None, "not valid JSON"),
    "metadata not strings": ({"__metadata__": {"step": 3}, "a": F32}, B8, None, TypeError, None, "'step'"),
    "metadata a list": ({"__metadata__": ["x"], "a": F32}, B8, None, TypeError, None, "__metadata__"),
    "non-utf8 header": ({}, B8, b'{"\xff\xfe": ' + json.dumps(F32).encode() + b"}", ValueError, None, "UTF-8"),
}


def _check_error(path: Path, error: type[Exception], tensor: str | None, text: str, load: Any = safe_load) -> str:
    with pytest.raises(error) as info:
        load(path)
    message = str(info.value)
    assert str(path) in message, message
    assert tensor is None or f"tensor '{tensor}'" in message, message
    assert text in message, message
    return message


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_header_is_refused_naming_file_and_tensor(case: str, tmp_path: Path) -> None:
    header, data, text, error, tensor, expected = MALFORMED[case]
    path = _file(tmp_path / "bad.safetensors", header, data, text=text)
    _check_error(path, error, tensor, expected)
    _check_error(path, error, tensor, expected, load=safe_load_metadata)  # the header is checked the same way
    if case != "duplicate names":  # the package keeps the last of two equal keys; we refuse the ambiguity
        with pytest.raises(safetensors.SafetensorError):
            safetensors.deserialize(path.read_bytes())


@pytest.mark.parametrize("cut", range(1, 9))
def test_truncated_checkpoint_names_file_tensor_and_missing_bytes(cut: int, tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "model.safetensors")
    path.write_bytes(path.read_bytes()[:-cut])
    message = _check_error(path, ValueError, "w", f"{cut} bytes are missing")  # 'w' (24 bytes) sorts after 'b'
    assert "truncated or was written incompletely" in message
    _check_error(path, ValueError, "w", f"{cut} bytes are missing", load=safe_load_metadata)


def test_header_cut_short_or_absurd(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "model.safetensors")
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    path.write_bytes(raw[: 8 + n - 3])
    for load in (safe_load, safe_load_metadata):
        _check_error(path, ValueError, None, f"says {n} bytes but only {n - 3} follow it", load)
    path.write_bytes(struct.pack("<Q", 2**63) + raw[8:])
    for load in (safe_load, safe_load_metadata):
        _check_error(path, ValueError, None, "more than the format's limit", load)
    path.write_bytes(raw[:5])
    for load in (safe_load, safe_load_metadata):
        _check_error(path, ValueError, None, "fewer than the 8-byte header length", load)


def test_dtypes_tinycore_cannot_hold_are_validated_then_refused(tmp_path: Path) -> None:
    path = _file(
        tmp_path / "f8.safetensors",
        {"__metadata__": {"k": "v"}, "q": {**F32, "dtype": "F8_E4M3", "data_offsets": [0, 2]}},
        B8[:2],
    )
    assert safe_load_metadata(path) == {"k": "v"}  # a valid file: its metadata reads
    _check_error(path, TypeError, "q", "tinycore does not support")
    bad = _file(tmp_path / "f4.safetensors", {"q": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, B8[:2])
    _check_error(bad, ValueError, "q", "not a whole number of bytes")


def test_edge_cases_the_package_accepts(tmp_path: Path) -> None:
    empty = _file(tmp_path / "empty.safetensors", {})
    assert safe_load(empty) == {} and safe_load_metadata(empty) == {}
    # null metadata, extra fields, zero-size tensors at the end or sharing offset 0, leading/trailing whitespace
    header = {
        "__metadata__": None,
        "z": {"dtype": "I8", "shape": [0, 3], "data_offsets": [8, 8]},
        "a": {**F32, "note": "ignored"},
        "e": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]},
    }
    path = _file(tmp_path / "ok.safetensors", {}, B8, text=b"  " + json.dumps(header).encode() + b"\n ")
    safetensors.deserialize(path.read_bytes())
    loaded = safe_load(path)
    assert list(loaded) == ["z", "a", "e"] and loaded["z"].shape == (0, 3) and loaded["e"].shape == (0,)
    assert _raw(loaded["a"]) == B8 and safe_load_metadata(path) == {}


def test_bool_bytes_other_than_zero_read_as_true(tmp_path: Path) -> None:
    path = _file(
        tmp_path / "b.safetensors", {"m": {"dtype": "BOOL", "shape": [4], "data_offsets": [0, 4]}}, b"\0\1\2\xff"
    )
    assert safe_load(path)["m"].numpy().tolist() == [False, True, True, True]


# --------------------------------------------------------------------------------------------------------- fuzzing

_POOL: list[Any] = [
    0,
    1,
    2,
    3,
    4,
    8,
    12,
    -1,
    -8,
    2**64,
    2**70,
    1.5,
    4.0,
    True,
    None,
    "",
    "F32",
    "BF16",
    "x",
    [],
    [0],
    [0, 4],
    [4, 0],
    [1, 2, 3],
    [True],
    [2, True],
    [2.0, 3],
    [-1, 0],
    {},
    {"k": "v"},
    "F8_E4M3",
    "C64",
    "BOOL",
    "U8",
    "I16",
]


def _mutate_header(header: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    h = json.loads(json.dumps(header))
    names = [k for k in h if k != "__metadata__"]
    if not names:
        return h
    name = rng.choice(names)
    entry = h[name] if isinstance(h[name], dict) else {}
    field = rng.choice(["dtype", "shape", "data_offsets"])
    value = entry.get(field)
    op = rng.randrange(10)
    if op == 0:
        entry.pop(field, None)
    elif op == 1:
        del h[name]
    elif op == 2:
        entry[field] = rng.choice(_POOL)
    elif op == 3 and isinstance(value, list) and value and all(type(x) is int for x in value):
        value[rng.randrange(len(value))] += rng.choice([-8, -4, -2, -1, 1, 2, 4, 8])
    elif op == 4:
        other = h[rng.choice(names)]
        if isinstance(other, dict) and "data_offsets" in entry and "data_offsets" in other:
            entry["data_offsets"], other["data_offsets"] = other["data_offsets"], entry["data_offsets"]
    elif op == 5:
        entry["dtype"] = rng.choice(["F32", "I32", "U32", "F16", "BF16", "I16", "U16", "U8", "I8", "BOOL", "F64"])
    elif op == 6:
        h[name] = rng.choice(_POOL)
    elif op == 7:
        h[name + rng.choice(["", "x"])] = json.loads(json.dumps(h[rng.choice(names)]))  # a copy of some entry
    elif op == 8 and isinstance(value, list):
        if rng.random() < 0.5:
            value.append(rng.choice(_POOL))
        else:
            del value[1:]
    else:
        h["__metadata__"] = rng.choice([None, {}, {"a": "b"}, {"a": 1}, [], "x"])
    return h


def _fuzz_case(base_header: dict[str, Any], data: bytes, rng: random.Random) -> bytes:
    header = _mutate_header(base_header, rng) if rng.random() < 0.6 else base_header
    if rng.random() < 0.3:
        header = _mutate_header(header, rng)
    text = bytearray(json.dumps(header, separators=(",", ":")).encode())
    for _ in range(rng.choice([0, 0, 1, 2])):  # byte-level damage to the header text
        i = rng.randrange(len(text))
        op = rng.randrange(3)
        if op == 0:
            text[i] = rng.randrange(256)
        elif op == 1:
            del text[i]
        else:
            text.insert(i, rng.choice(b'{}[],:"0123456789- \xff'))
    length = len(text) if rng.random() < 0.9 else max(0, len(text) + rng.choice([-3, -1, 1, 5, 2**40]))
    raw = struct.pack("<Q", length) + bytes(text) + data
    if rng.random() < 0.2:
        raw = raw[: -rng.randrange(1, 9)]
    elif rng.random() < 0.1:
        raw += b"\0" * rng.randrange(1, 5)
    return raw


def test_fuzzed_headers_match_the_package(tmp_path: Path) -> None:
    rng = random.Random(18_5)
    tensors = {
        "a": Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5),
        "b": Tensor(np.array([-1, 2, 300], dtype=np.int16)),
        "c": Tensor(np.array([0, 1, 255, 7], dtype=np.uint8)),
        "d": Tensor([1.5, -2.0], dtype=dtypes.bfloat16),
        "e": Tensor(np.zeros((0, 2), dtype=np.int32)),
        "s": Tensor(np.array(3, dtype=np.int64)),
    }
    base = tmp_path / "base.safetensors"
    safe_save(tensors, base, metadata={"step": "1"})
    raw = base.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    base_header, data = json.loads(raw[8 : 8 + n]), raw[8 + n :]
    path = tmp_path / "fuzz.safetensors"
    outcomes = {"both accept": 0, "both refuse": 0, "we are stricter": 0}
    for case in range(400):
        blob = _fuzz_case(base_header, data, rng)
        path.write_bytes(blob)
        try:
            expected = dict(safetensors.deserialize(blob))
        except safetensors.SafetensorError:
            expected = None
        try:
            got = safe_load(path)
        except (ValueError, TypeError) as error:
            message = str(error)
            assert str(path) in message, (case, message)
            if expected is not None:  # only deliberate strictness: dtypes tinycore can't hold, ambiguous JSON
                assert "tinycore does not support" in message or "twice" in message, (case, message)
                outcomes["we are stricter"] += 1
            else:
                outcomes["both refuse"] += 1
            if "tinycore does not support" not in message:
                with pytest.raises(type(error)):
                    safe_load_metadata(path)
            continue
        assert expected is not None, f"case {case}: we accepted bytes the package refuses: {blob[:200]!r}"
        assert set(got) == set(expected), case
        for name, t in got.items():
            want = expected[name]
            assert DTYPES[t.dtype][0] == want["dtype"] and list(t.shape) == want["shape"], (case, name)
            if t.dtype == dtypes.bool:
                assert t.numpy().reshape(-1).tolist() == [b != 0 for b in want["data"]], (case, name)
            else:
                assert _raw(t) == bytes(want["data"]), (case, name)
        assert isinstance(safe_load_metadata(path), dict)
        outcomes["both accept"] += 1
    assert outcomes["both accept"] >= 40 and outcomes["both refuse"] >= 200, outcomes
