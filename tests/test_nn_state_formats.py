"""`tinycore.nn.state` beyond safetensors paths (issue 21 B): sources other than a path, `load_state_dict`'s
tinygrad keywords, `tar_extract`, `torch_load` (files written by torch, read without it), `gguf_load` (files written
here by hand with struct) and `TensorIO`. Every malformed file must raise an error naming the file."""

from __future__ import annotations

import io
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest

from tinycore import nn
from tinycore.dtype import dtypes
from tinycore.nn.state import (
    TensorIO,
    accept_filename,
    get_state_dict,
    ggml_data_to_tensor,
    gguf_load,
    inverse_safe_dtypes,
    load_state_dict,
    safe_dtypes,
    safe_load,
    safe_load_metadata,
    safe_save,
    tar_extract,
    torch_load,
)
from tinycore.tensor import Tensor

# ----- safetensors from bytes, file objects and tensors


@pytest.fixture
def st_file(tmp_path: Path) -> Path:
    path = tmp_path / "m.safetensors"
    safe_save({"w": Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)), "i": Tensor([1, 2])}, path, {"k": "v"})
    return path


def test_safe_load_sources(st_file: Path) -> None:
    raw = st_file.read_bytes()
    sources = [st_file, str(st_file), raw, bytearray(raw), memoryview(raw), io.BytesIO(raw)]
    sources.append(Tensor(np.frombuffer(raw, dtype=np.uint8)))
    for src in sources:
        loaded = safe_load(src)
        assert loaded["w"].numpy().tolist() == [[0, 1, 2], [3, 4, 5]], type(src)
        assert loaded["i"].numpy().tolist() == [1, 2]
    with open(st_file, "rb") as f:
        assert safe_load(f)["i"].numpy().tolist() == [1, 2]
        f.seek(0)
        assert safe_load_metadata(f) == {"k": "v"}
    for src in (raw, io.BytesIO(raw), Tensor(np.frombuffer(raw, dtype=np.uint8))):
        assert safe_load_metadata(src) == {"k": "v"}


def test_safe_load_errors_name_the_source(st_file: Path) -> None:
    raw = st_file.read_bytes()
    with pytest.raises(ValueError, match=r"<\d+ bytes>: .*bytes are missing"):
        safe_load(raw[:-3])
    buf = io.BytesIO(raw[:-3])
    buf.name = "upload.safetensors"
    with pytest.raises(ValueError, match="upload.safetensors"):
        safe_load(buf)
    with open(st_file) as f, pytest.raises(TypeError, match="text-mode"):
        safe_load(f)
    with pytest.raises(TypeError, match="expected a path, bytes"):
        safe_load(3.5)


def test_safe_dtype_tables() -> None:
    assert safe_dtypes["F32"] == dtypes.float32 and safe_dtypes["BF16"] == dtypes.bfloat16
    assert inverse_safe_dtypes[dtypes.int64] == "I64"
    assert all(inverse_safe_dtypes[dt] == code for code, dt in safe_dtypes.items())


def test_accept_filename(st_file: Path) -> None:
    seen = accept_filename(lambda t: t)(st_file)
    assert isinstance(seen, Tensor) and seen.dtype == dtypes.uint8 and seen.shape == (st_file.stat().st_size,)


# ----- load_state_dict keywords


class Net:
    def __init__(self) -> None:
        self.a = nn.Linear(3, 2)
        self.b = nn.LayerNorm(2)


def test_load_state_dict_returns_consumes_and_prints(capsys: pytest.CaptureFixture[str]) -> None:
    src, dst = Net(), Net()
    sd = dict(get_state_dict(src))
    out = load_state_dict(dst, sd, consume=True)
    assert [id(t) for t in out] == [id(t) for t in get_state_dict(dst).values()]
    assert sd == {}  # every loaded key was popped
    assert "loaded 4 tensors" in capsys.readouterr().out  # verbose is on by default, as in tinygrad
    for k, v in get_state_dict(src).items():
        np.testing.assert_array_equal(get_state_dict(dst)[k].numpy(), v.numpy())
    sd = {"a.weight": Tensor.ones(2, 3), "extra": Tensor([1.0])}
    load_state_dict(dst, sd, strict=False, verbose=False, consume=True)
    assert list(sd) == ["extra"] and capsys.readouterr().out == ""  # unused keys stay


def test_load_state_dict_lazy_and_atomic_checks() -> None:
    net = Net()
    load_state_dict(net, {"a.weight": Tensor.full((2, 3), 2.0)}, strict=False, verbose=False, realize=False)
    assert net.a.weight.numpy().tolist() == [[2.0] * 3] * 2
    before = net.b.weight.numpy().copy()
    bad = {**get_state_dict(Net()), "a.bias": Tensor.zeros(5)}
    with pytest.raises(ValueError, match="shape mismatch for 'a.bias'"):
        load_state_dict(net, bad, verbose=False)
    np.testing.assert_array_equal(net.b.weight.numpy(), before)  # checked before anything was written


# ----- tar


def _tar(files: dict[str, bytes], mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        tar.addfile(tarfile.TarInfo("folder"), None)  # a plain member of size 0 (a directory below)
        info = tarfile.TarInfo("dir")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_tar_extract(tmp_path: Path) -> None:
    files = {"a.bin": bytes(range(10)), "sub/b.txt": b"hello"}
    for mode in ("w", "w:gz"):
        raw = _tar(files, mode)
        (tmp_path / "x.tar").write_bytes(raw)
        for src in (raw, tmp_path / "x.tar", Tensor(np.frombuffer(raw, dtype=np.uint8))):
            out = tar_extract(src)
            assert set(out) == {"folder", "a.bin", "sub/b.txt"}
            assert bytes(out["a.bin"].numpy()) == files["a.bin"] and out["a.bin"].dtype == dtypes.uint8
            assert bytes(out["sub/b.txt"].numpy()) == b"hello"
    with pytest.raises(ValueError, match="x.bin: not a valid tar archive"):
        (tmp_path / "x.bin").write_bytes(b"garbage" * 100)
        tar_extract(tmp_path / "x.bin")
    with pytest.raises(ValueError, match="not a valid tar archive"):
        tar_extract(_tar(files)[:700])


# ----- torch checkpoints


def _saved(obj: object, legacy: bool = False) -> bytes:
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=not legacy)
    return buf.getvalue()


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_torch_load_matches_torch(legacy: bool, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    sd = {
        **model.state_dict(),
        "transposed": base.T,  # a non-contiguous view
        "slice": base[1:3, 2:5],  # a view at an offset of a bigger storage
        "shared": base,
        "f16": torch.tensor([1.5, -2.25], dtype=torch.float16),
        "bf16": torch.tensor([1.5, -3.0], dtype=torch.bfloat16),
        "f64": torch.tensor([[1e-300]], dtype=torch.float64),
        "i8": torch.tensor([-3, 4], dtype=torch.int8),
        "u8": torch.tensor([250], dtype=torch.uint8),
        "bool": torch.tensor([True, False]),
        "scalar": torch.tensor(7),
        "empty": torch.zeros(0, 3),
        "param": torch.nn.Parameter(torch.ones(2)),
    }
    path = tmp_path / "ckpt.pt"
    path.write_bytes(_saved({"model": sd, "epoch": 3, "names": ["a", "b"]}, legacy))
    out = torch_load(path)
    assert out["epoch"] == 3 and out["names"] == ["a", "b"]
    assert list(out["model"]) == list(sd)
    for name, ref in sd.items():
        got = out["model"][name]
        assert isinstance(got, Tensor) and got.shape == tuple(ref.shape), name
        expected = ref.detach().float().numpy() if ref.dtype == torch.bfloat16 else ref.detach().numpy()
        assert got.dtype == getattr(dtypes, str(ref.dtype).removeprefix("torch.")), name
        np.testing.assert_array_equal(got.numpy().astype(expected.dtype), expected, err_msg=name)
    # a model of tinycore layers loads from it with load_state_dict
    ours = [nn.Linear(3, 4)]
    load_state_dict(ours, {"0.weight": out["model"]["0.weight"], "0.bias": out["model"]["0.bias"]}, verbose=False)
    np.testing.assert_array_equal(ours[0].weight.numpy(), model[0].weight.detach().numpy())


def test_torch_load_sources_and_refusals(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    raw = _saved({"w": torch.ones(3)})
    for src in (raw, io.BytesIO(raw), Tensor(np.frombuffer(raw, dtype=np.uint8))):
        assert torch_load(src)["w"].numpy().tolist() == [1.0, 1.0, 1.0]
    path = tmp_path / "module.pt"
    path.write_bytes(_saved(torch.nn.Linear(2, 2)))
    with pytest.raises(pickle.UnpicklingError, match=r"module.pt: .*torch.nn.modules.linear.Linear"):
        torch_load(path)
    (tmp_path / "evil.pt").write_bytes(pickle.dumps({"x": print}, protocol=2))
    with pytest.raises(ValueError, match="evil.pt: not a PyTorch checkpoint"):
        torch_load(tmp_path / "evil.pt")
    with pytest.raises(ValueError, match="not a PyTorch checkpoint"):
        torch_load(b"hello world, not a checkpoint")


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_torch_load_truncated(legacy: bool, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    raw = _saved({"w": torch.arange(100, dtype=torch.float32)}, legacy)
    for cut in (10, len(raw) // 2, len(raw) - 30):
        path = tmp_path / f"cut{cut}.pt"
        path.write_bytes(raw[:cut])
        with pytest.raises((ValueError, pickle.UnpicklingError), match=f"cut{cut}.pt"):
            torch_load(path)


def test_torch_load_refuses_a_view_past_its_storage() -> None:
    torch = pytest.importorskip("torch")
    raw = bytearray(_saved({"w": torch.arange(4, dtype=torch.float32)}))
    import zipfile

    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as z:
        members = {n: z.read(n) for n in z.namelist()}
    pkl = next(n for n in members if n.endswith("data.pkl"))
    data = next(n for n in members if n.endswith("data/0"))
    members[data] = members[data][:8]  # 2 elements where the tensor reads 4
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n, b in members.items():
            z.writestr(n, b)
    with pytest.raises(ValueError, match="storage 0 has 8 bytes, fewer than its 4"):
        torch_load(buf.getvalue())
    assert pkl


# ----- GGUF


def _gguf_str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _gguf(tensors: list[tuple[str, list[int], int, bytes]], kv: bytes = b"", n_kv: int = 0, align: int = 32) -> bytes:
    """A GGUF v3 file: header, metadata, tensor infos, then the data section (each tensor aligned)."""
    infos, data = b"", b""
    for name, dims, kind, blob in tensors:
        data += b"\0" * (-len(data) % align)
        infos += _gguf_str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        infos += struct.pack("<IQ", kind, len(data))
        data += blob
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), n_kv) + kv + infos
    return head + b"\0" * (-len(head) % align) + data


def _q8_0(x: np.ndarray) -> tuple[bytes, np.ndarray]:
    blocks = x.reshape(-1, 32)
    d = (np.abs(blocks).max(1) / 127).astype(np.float16)
    q = np.round(blocks / np.maximum(d.astype(np.float32), 1e-8)[:, None]).astype(np.int8)
    raw = b"".join(di.tobytes() + qi.tobytes() for di, qi in zip(d, q))
    return raw, (d.astype(np.float32)[:, None] * q).reshape(-1)


def _q4(x: np.ndarray, with_min: bool) -> tuple[bytes, np.ndarray]:
    blocks = x.reshape(-1, 32)
    if with_min:
        m = blocks.min(1).astype(np.float16)
        d = ((blocks.max(1) - m.astype(np.float32)) / 15).astype(np.float16)
        q = np.clip(np.round((blocks - m.astype(np.float32)[:, None]) / d.astype(np.float32)[:, None]), 0, 15)
        ref = q * d.astype(np.float32)[:, None] + m.astype(np.float32)[:, None]
    else:
        d = (np.abs(blocks).max(1) / 8).astype(np.float16)
        q = np.clip(np.round(blocks / d.astype(np.float32)[:, None]) + 8, 0, 15)
        ref = (q - 8) * d.astype(np.float32)[:, None]
    q = q.astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << 4)
    raw = b"".join(
        di.tobytes() + (mi.tobytes() if with_min else b"") + pi.tobytes()
        for di, mi, pi in zip(d, m if with_min else d, packed)
    )
    return raw, ref.reshape(-1)


def test_gguf_load_types_and_metadata(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    f16 = rng.standard_normal(7).astype(np.float16)
    qx = rng.standard_normal(64).astype(np.float32)
    q8, q8_ref = _q8_0(qx)
    q40, q40_ref = _q4(qx, with_min=False)
    q41, q41_ref = _q4(qx, with_min=True)
    kv = _gguf_str("general.name") + struct.pack("<I", 8) + _gguf_str("tiny")
    kv += _gguf_str("llama.block_count") + struct.pack("<II", 4, 12)
    kv += _gguf_str("scale") + struct.pack("<If", 6, 0.5)
    kv += _gguf_str("tokens") + struct.pack("<IIQ", 9, 8, 2) + _gguf_str("a") + _gguf_str("bc")
    tensors = [
        ("w", [5, 3], 0, f32.tobytes()),  # GGUF dims: fastest first
        ("h", [7], 1, f16.tobytes()),
        ("q8", [32, 2], 8, q8),
        ("q40", [64], 2, q40),
        ("q41", [64], 3, q41),
        ("i32", [2], 26, np.array([-5, 9], dtype=np.int32).tobytes()),
    ]
    path = tmp_path / "tiny.gguf"
    path.write_bytes(_gguf(tensors, kv, 4))
    meta, sd = gguf_load(path)
    assert meta == {"general.name": "tiny", "llama.block_count": 12, "scale": 0.5, "tokens": ["a", "bc"]}
    np.testing.assert_array_equal(sd["w"].numpy(), f32)
    assert sd["h"].dtype == dtypes.float16 and sd["h"].numpy().tolist() == f16.tolist()
    assert sd["q8"].shape == (2, 32) and sd["q8"].dtype == dtypes.float32
    np.testing.assert_allclose(sd["q8"].numpy().reshape(-1), q8_ref, rtol=1e-6)
    np.testing.assert_allclose(sd["q40"].numpy(), q40_ref, rtol=1e-6)
    np.testing.assert_allclose(sd["q41"].numpy(), q41_ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(sd["q8"].numpy().reshape(-1), qx, atol=0.03)  # the quantization is close
    assert sd["i32"].numpy().tolist() == [-5, 9]
    raw = path.read_bytes()
    assert set(gguf_load(raw)[1]) == set(sd) and set(gguf_load(io.BytesIO(raw))[1]) == set(sd)
    t = ggml_data_to_tensor(Tensor(np.frombuffer(q8, dtype=np.uint8)), 64, 8)
    np.testing.assert_allclose(t.numpy(), q8_ref, rtol=1e-6)


def test_gguf_errors(tmp_path: Path) -> None:
    good = _gguf([("w", [4], 0, np.ones(4, dtype=np.float32).tobytes())])
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGML" + good[4:])
    with pytest.raises(ValueError, match="bad.gguf: not a GGUF file"):
        gguf_load(path)
    path.write_bytes(good[:-4])
    with pytest.raises(ValueError, match="bad.gguf: tensor 'w' .* truncated"):
        gguf_load(path)
    path.write_bytes(good[:30])
    with pytest.raises(ValueError, match="bad.gguf: the file ends inside"):
        gguf_load(path)
    path.write_bytes(_gguf([("k", [256], 12, b"\0" * 144)]))
    with pytest.raises(ValueError, match="tensor 'k' has ggml type 12"):
        gguf_load(path)
    with pytest.raises(ValueError, match="ggml type 14 is not supported"):
        ggml_data_to_tensor(Tensor(np.zeros(210, dtype=np.uint8)), 256, 14)


# ----- TensorIO


def test_tensor_io() -> None:
    t = Tensor(np.arange(10, dtype=np.uint8))
    with TensorIO(t) as f:
        assert f.readable() and f.seekable() and f.writable()
        assert f.read(3) == bytes([0, 1, 2]) and f.tell() == 3
        buf = bytearray(4)
        assert f.readinto(buf) == 4 and buf == bytes([3, 4, 5, 6])
        assert f.seek(-2, io.SEEK_END) == 8 and f.read() == bytes([8, 9]) and f.read() == b""
        f.seek(1)
        assert f.write(b"\xff\xfe") == 2
    assert t.numpy().tolist()[:4] == [0, 255, 254, 3]
    with pytest.raises(ValueError, match="1-d uint8"):
        TensorIO(Tensor([1.0]))
