"""`tinycore.nn.state`: state dicts, parameters, load_state_dict checks, and the safetensors format."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from tinycore import nn
from tinycore.dtype import dtypes
from tinycore.nn.state import (
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
)
from tinycore.tensor import Tensor


class Net:
    def __init__(self, device: str) -> None:
        self.l1 = nn.Linear(3, 4, device=device)
        self.blocks = [nn.LayerNorm(4, device=device), {"out": nn.Linear(4, 2, bias=False, device=device)}]
        self.name = "not a tensor"


def test_get_state_dict_names(device: str) -> None:
    sd = get_state_dict(Net(device))
    assert list(sd) == ["l1.weight", "l1.bias", "blocks.0.weight", "blocks.0.bias", "blocks.1.out.weight"]
    assert sd["l1.weight"].shape == (4, 3)


def test_get_parameters_dedups(device: str) -> None:
    net = Net(device)
    net.alias = net.l1.weight
    params = get_parameters(net)
    assert len(params) == 5
    assert sum(p is net.l1.weight for p in params) == 1


def test_load_state_dict_roundtrip(device: str) -> None:
    a, b = Net(device), Net(device)
    load_state_dict(b, get_state_dict(a))
    for k, v in get_state_dict(a).items():
        np.testing.assert_array_equal(get_state_dict(b)[k].numpy(), v.numpy(), err_msg=k)


def test_load_state_dict_errors(device: str) -> None:
    net = Net(device)
    sd = dict(get_state_dict(Net(device)))
    del sd["l1.bias"]
    with pytest.raises(KeyError, match="missing keys \\['l1.bias'\\]"):
        load_state_dict(net, sd)
    load_state_dict(net, sd, strict=False)  # missing keys are left alone
    sd = dict(get_state_dict(Net(device)))
    sd["extra"] = Tensor([1.0], device=device)
    with pytest.raises(KeyError, match="unexpected keys \\['extra'\\]"):
        load_state_dict(net, sd)
    sd = dict(get_state_dict(Net(device)))
    sd["l1.weight"] = Tensor.zeros(3, 4, device=device)
    with pytest.raises(ValueError, match="shape mismatch for 'l1.weight'"):
        load_state_dict(net, sd)
    sd["l1.weight"] = Tensor.zeros(4, 3, device=device, dtype=dtypes.int32)
    with pytest.raises(TypeError, match="dtype mismatch for 'l1.weight'"):
        load_state_dict(net, sd)


def test_load_state_dict_casts_floats(device: str) -> None:
    net = Net(device)
    sd = {k: v.cast(dtypes.float16) for k, v in get_state_dict(Net(device)).items()}
    load_state_dict(net, sd)
    assert net.l1.weight.dtype == dtypes.float32
    np.testing.assert_allclose(net.l1.weight.numpy(), sd["l1.weight"].numpy().astype(np.float32))


def test_safetensors_roundtrip(device: str, tmp_path: Path) -> None:
    tensors = {
        "f32": Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=device),
        "f16": Tensor(np.array([1.5, -2.0], dtype=np.float16), device=device),
        "i32": Tensor(np.array([[1, -2], [3, 4]], dtype=np.int32), device=device),
        "u8": Tensor(np.array([0, 255], dtype=np.uint8), device=device),
        "bool": Tensor(np.array([True, False, True]), device=device),
        "bf16": Tensor([1.0, -3.5], device=device, dtype=dtypes.bfloat16),
    }
    path = tmp_path / "model.safetensors"
    safe_save(tensors, path, metadata={"format": "pt"})
    loaded = safe_load(path, device=device)
    assert set(loaded) == set(tensors)
    for k, v in tensors.items():
        assert loaded[k].dtype == v.dtype and loaded[k].shape == v.shape, k
        np.testing.assert_array_equal(loaded[k].numpy(), v.numpy(), err_msg=k)
    assert safe_load_metadata(path) == {"format": "pt"}


def test_safetensors_layout_matches_the_spec(device: str, tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    safe_save({"b": Tensor([1, 2], device=device, dtype=dtypes.int16), "a": Tensor([0.5], device=device)}, path)
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    header = json.loads(raw[8 : 8 + n])
    assert header == {
        "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
        "b": {"dtype": "I16", "shape": [2], "data_offsets": [4, 8]},
    }
    assert raw[8 + n :] == struct.pack("<f", 0.5) + struct.pack("<hh", 1, 2)


def test_safe_load_reads_a_handmade_file(device: str, tmp_path: Path) -> None:
    header = json.dumps({"x": {"dtype": "F64", "shape": [2, 1], "data_offsets": [0, 16]}}).encode()
    path = tmp_path / "hand.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + struct.pack("<dd", 2.5, -1.0))
    x = safe_load(path, device=device)["x"]
    assert x.dtype == dtypes.float64 and x.shape == (2, 1)
    assert x.numpy().tolist() == [[2.5], [-1.0]]


def test_safe_load_rejects_garbage(tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(ValueError, match="not a safetensors file"):
        safe_load(path)


def test_against_the_safetensors_package(device: str, tmp_path: Path) -> None:
    st = pytest.importorskip("safetensors.numpy", reason="cross-check needs the safetensors package")
    path = tmp_path / "x.safetensors"
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    safe_save({"w": Tensor(arr, device=device)}, path)
    np.testing.assert_array_equal(st.load_file(str(path))["w"], arr)
    st.save_file({"v": arr * 2}, str(tmp_path / "y.safetensors"))
    np.testing.assert_array_equal(safe_load(tmp_path / "y.safetensors", device=device)["v"].numpy(), arr * 2)
