"""Interchange with torch, numpy and DLPack; and errors that say what to do (issue 23)."""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.dtype import dtypes
from tinycore.errors import DeviceNotInstalledError, DeviceUnavailableError
from tinycore.plugin.manager import _install_fix
from tinycore.tensor import Tensor

torch = pytest.importorskip("torch", reason="interop tests need PyTorch (pip install torch==2.13.0)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64, torch.uint8, torch.bool])
def test_a_tensor_from_a_torch_tensor_keeps_values_and_dtype(dtype, device: str) -> None:
    source = (torch.arange(12) % 7).to(dtype).reshape(3, 4).t()  # non-contiguous
    ours = Tensor(source, device=device)
    assert ours.shape == (4, 3) and ours.dtype == dtypes.from_np(source.numpy().dtype)
    np.testing.assert_array_equal(ours.numpy(), source.numpy())


def test_bfloat16_and_grad_carrying_torch_tensors() -> None:
    bf = torch.tensor([1.5, -2.25, 3.0e38], dtype=torch.bfloat16)
    ours = Tensor(bf)
    assert ours.dtype == dtypes.bfloat16 and ours.numpy().tolist() == bf.float().tolist()
    leaf = torch.ones(3, requires_grad=True)
    assert Tensor(leaf * 2).numpy().tolist() == [2.0, 2.0, 2.0] and not Tensor(leaf).requires_grad
    assert Tensor(torch.ones(2, dtype=torch.int64), dtype=dtypes.float32).dtype == dtypes.float32


def test_dlpack_both_ways() -> None:
    t = Tensor([[1.0, 2.0], [3.0, 4.0]])
    assert torch.equal(torch.from_dlpack(t), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    np.testing.assert_array_equal(np.from_dlpack(Tensor([1, 2, 3])), [1, 2, 3])
    assert Tensor(np.arange(4).astype(np.int16)).dtype == dtypes.int16
    with pytest.raises(BufferError, match=r"bfloat16.*t\.float\(\)"):
        torch.from_dlpack(Tensor([1.0]).cast(dtypes.bfloat16))


def test_an_unsupported_object_names_what_works() -> None:
    with pytest.raises(TypeError, match=r"can't make a Tensor from object: pass a number, a \(nested\) list, .*dl"):
        Tensor(object())


def test_an_unknown_device_fails_where_it_is_named() -> None:
    t = Tensor([1.0, 2.0])
    with pytest.raises(DeviceNotInstalledError, match=r"(?s)no installed plugin provides device NOPE.*fix: pip"):
        t.to("NOPE")
    with pytest.raises(DeviceNotInstalledError, match="NOPE2"):
        Tensor([1.0], device="nope2")


def test_an_unavailable_device_names_the_devices_that_work_here() -> None:
    from tinycore.device import Device

    unavailable = [name for name in Device.manager.device_names() if not Device.manager.probe(name).ok]
    if not unavailable:
        pytest.skip("every installed device works on this machine")
    with pytest.raises(DeviceUnavailableError, match=r"devices that work here: .*\(DEV=\w+\)") as caught:
        Tensor([1.0], device=unavailable[0]).numpy()
    assert "fix: " in str(caught.value).splitlines()[-1]  # the traceback's last line says what to do


def test_install_hints_work_from_a_source_checkout() -> None:
    hint = _install_fix("CUDA")
    assert hint.startswith("pip install 'tinycore[cuda]'") and "plugins/tinycore_cuda" in hint
    assert _install_fix("NOPE") == "pip install tinycore-nope (or the distribution that provides NOPE)"
