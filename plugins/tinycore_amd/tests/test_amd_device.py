"""The AMD device on a fake HIP runtime (`tinycore_amd.testing.FakeHIP`): opening, memory, the allocator's cache and
out-of-memory retry, launches and timing, runtime errors, and the probe's diagnoses. No AMD GPU needed."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tinycore_amd", reason="tinycore-amd is not installed (pip install -e plugins/tinycore_amd)")
from tinycore_amd import plugin  # noqa: E402
from tinycore_amd.device import AMDDevice  # noqa: E402
from tinycore_amd.hip import HIPError  # noqa: E402
from tinycore_amd.testing import FakeHIP  # noqa: E402

from tinycore.sdk import KernelImage  # noqa: E402


@pytest.fixture
def fake() -> FakeHIP:
    return FakeHIP(gpus=2, arch="gfx942", memory=1 << 16)


def test_opening_takes_the_gpus_arch(fake: FakeHIP) -> None:
    dev = AMDDevice("AMD:1", hip=fake)
    assert dev.device == "AMD:1" and dev.arch == "gfx942" and dev.compiler.arch == "gfx942"
    assert ("set_device", (1,)) in fake.calls and dev.name == "Fake Radeon"
    with pytest.raises(Exception, match="there are 2 AMD GPUs here, no ordinal 3"):
        AMDDevice("AMD:3", hip=fake)


def test_memory_round_trips_and_views_offset(fake: FakeHIP) -> None:
    alloc = AMDDevice("AMD", hip=fake).allocator
    data = np.arange(64, dtype=np.int32)
    buf = alloc.alloc(data.nbytes)
    alloc.copyin(buf, memoryview(data.tobytes()))
    out = np.empty_like(data)
    alloc.copyout(memoryview(out).cast("B"), buf)
    np.testing.assert_array_equal(out, data)
    part = np.empty(4, dtype=np.int32)
    alloc.copyout(memoryview(part).cast("B"), alloc.offset(buf, 16, 4 * 10))
    np.testing.assert_array_equal(part, data[10:14])


def test_out_of_memory_empties_the_cache_then_retries(fake: FakeHIP) -> None:
    alloc = AMDDevice("AMD", hip=fake).allocator
    first = alloc.alloc(40000)
    alloc.free(first, 40000)
    assert alloc.alloc(40000) == first  # reused
    alloc.free(first, 40000)
    assert alloc.alloc(30000) and fake.used() == 30000  # the cached 40000 was released to make room
    with pytest.raises(MemoryError, match=r"out of GPU memory \(\d+ of 65536 bytes free\)"):
        alloc.alloc(60000)


def test_launches_pass_grid_block_and_typed_arguments(fake: FakeHIP) -> None:
    dev = AMDDevice("AMD", hip=fake)
    a = dev.allocator.alloc(64)
    prg = dev.runtime("k_add", KernelImage.pack(["buffer", "int", "long"], b"\x7fELF-hsaco"))
    assert fake.modules == [b"\x7fELF-hsaco"] and prg.function == (0, "k_add")
    assert prg(a, global_size=(8, 2), local_size=(64, 1, 1), vals=(3, 2**40)) is None
    launch = fake.launches[-1]
    assert launch["grid"] == (8, 2, 1) and launch["block"] == (64, 1, 1)
    assert launch["args"] == (a, 3, 2**40) and launch["kinds"] == ("buffer", "int", "long")
    assert prg(a, global_size=(1,), local_size=None, vals=(1, 1), wait=True) == pytest.approx(2.5e-3)
    assert prg(a, global_size=(0, 1, 1), vals=(1, 1), wait=True) == 0.0 and len(fake.launches) == 2


def test_a_failing_runtime_call_names_the_call(fake: FakeHIP) -> None:
    dev = AMDDevice("AMD", hip=fake)
    fake.fail["synchronize"] = "hipErrorLaunchFailure"
    with pytest.raises(HIPError, match="synchronize failed: hipErrorLaunchFailure"):
        dev.synchronize()


@pytest.mark.parametrize("gpu_in_machine", [False, True])
def test_probe_without_a_rocm_runtime(monkeypatch: pytest.MonkeyPatch, gpu_in_machine: bool) -> None:
    from tinycore_amd import hip

    monkeypatch.setattr(hip, "find_runtime", lambda: None)
    monkeypatch.setattr(plugin, "amd_gpu_nodes", lambda: gpu_in_machine)
    result = plugin.probe()
    assert not result.ok and result.device_count == 0 and result.reason.startswith("no ROCm runtime")
    assert "ROCm" in result.hint
    assert result.hardware_present == gpu_in_machine  # a GPU without ROCm: core says why AMD was passed over


def test_probe_without_a_gpu() -> None:
    result = plugin.probe(FakeHIP(gpus=0))
    assert not result.ok and result.reason.startswith("no AMD GPU") and result.device_count == 0
    assert not result.hardware_present  # nobody's mistake: no warning when another device is the default


def test_probe_with_an_arch_the_compiler_does_not_know(monkeypatch: pytest.MonkeyPatch) -> None:
    from tinycore_amd import compiler

    monkeypatch.setenv("AMD_COMPILER", "clang")  # clang's arch list, also where ROCm's hipRTC is installed
    monkeypatch.setattr(compiler, "supports_arch", lambda arch: f"clang 15 does not know {arch}")
    result = plugin.probe(FakeHIP(arch="gfx1201"))
    assert (
        not result.ok
        and result.reason == "GPU arch gfx1201 not supported by this build: clang 15 does not know gfx1201"
    )
    assert "clang-19" in result.hint and result.hardware_present
    monkeypatch.setattr(compiler, "supports_arch", lambda arch: None)
    assert plugin.probe(FakeHIP(gpus=2)).device_count == 2


def test_the_compile_target_needs_no_gpu() -> None:
    renderer, compiler = plugin.tinycore_compile_target(name="AMD", arch=None)
    assert renderer.arch == compiler.arch == plugin.DEFAULT_ARCH
    with pytest.raises(ValueError, match="is not an AMDGPU architecture"):
        plugin.tinycore_compile_target(name="AMD", arch="sm_90")
