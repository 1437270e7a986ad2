"""Dynamic shared memory above 48 KB: the renderer carves big kernels' shared arrays out of one ``extern
__shared__`` array, NVRTC builds them and the stored binary carries the byte count; the program opts in with
``cuFuncSetAttribute`` and launches with those bytes (checked on `FakeDriver`, whose launches fail without the
opt-in, as the driver's do); over the limit is an error naming the kernel, the bytes and the limit. No GPU needed."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("tinycore_cuda", reason="tinycore-cuda is not installed (pip install -e plugins/tinycore_cuda)")
from tinycore_cuda.compiler import split_dynamic_shared, with_dynamic_shared  # noqa: E402
from tinycore_cuda.device import CUDADevice, CUDAError  # noqa: E402
from tinycore_cuda.renderer import STATIC_SHARED_MAX, CUDARenderer, dynamic_shared_bytes  # noqa: E402
from tinycore_cuda.testing import FakeDriver  # noqa: E402

from tinycore.sdk import AddrSpace, CRenderError, KernelImage, Ops, UOp, dtypes  # noqa: E402

THREADS = 1024


def shared_kernel(floats: int, arrays: int = 1) -> list[UOp]:
    """A linearized kernel over one block of `THREADS` threads: each thread writes its slice of `arrays` shared
    float arrays of `floats` each, a barrier, then reads another thread's slice back (reversed) into data0:
    ``data0[i] = data1[THREADS*k - 1 - i]`` summed over the arrays, with every element of data1 stored in each."""
    per = floats // THREADS
    out = UOp.define_global(0, dtypes.float32, floats)
    inp = UOp.define_global(1, dtypes.float32, floats)
    lid = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, THREADS),), "lidx0")
    smems = [UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(floats, AddrSpace.LOCAL), (), k) for k in range(arrays)]
    stores = []
    for k in range(per):
        i = lid * UOp.const(dtypes.int32, per) + UOp.const(dtypes.int32, k)
        value = inp.index(i).load()
        stores += [s.index(i).store(value) for s in smems]
    barrier = UOp(Ops.BARRIER, dtypes.void, tuple(stores))
    results = []
    for k in range(per):
        i = lid * UOp.const(dtypes.int32, per) + UOp.const(dtypes.int32, k)
        mirror = UOp.const(dtypes.int32, floats - 1) - i
        total = None
        for s in smems:
            v = s.after(barrier).index(mirror).load()
            total = v if total is None else total + v
        results.append(out.index(i).store(total))
    return list(UOp(Ops.SINK, dtypes.void, tuple(results)).toposort())


def big_renderer(limit: int = 232448) -> CUDARenderer:
    """A compile-only renderer with an opened H100's opt-in limit."""
    renderer = CUDARenderer("sm_90")
    renderer.shared_max = limit
    return renderer


def test_small_kernels_keep_static_shared_arrays() -> None:
    src = big_renderer().render(shared_kernel(4096), "k_small")  # 16 KB
    assert "__shared__ __align__(16) float smem0[4096];" in src and "extern __shared__" not in src
    assert dynamic_shared_bytes(src) == 0


def test_over_48_kb_the_arrays_are_slices_of_dynamic_shared_memory() -> None:
    src = big_renderer().render(shared_kernel(16384, arrays=2), "k_big")  # 2 x 64 KB
    body = src[src.index('extern "C"') :]
    assert body.count("extern __shared__") == 1 and "__shared__ __align__(16) float smem" not in body
    offsets = [int(m) for m in re.findall(r"float\* smem\d+ = \(float\*\)\(tc_dynamic_smem \+ (\d+)\);", body)]
    assert offsets == [0, 65536]  # each array after the previous one, 16-byte aligned
    assert dynamic_shared_bytes(src) == 2 * 65536


def test_a_compile_only_target_allows_48_kb_and_over_the_limit_names_kernel_bytes_and_limit() -> None:
    assert CUDARenderer("sm_90").shared_max == STATIC_SHARED_MAX == 48 * 1024
    with pytest.raises(CRenderError, match=r"kernel k_huge needs 131072 bytes of shared memory.*limit of 49152"):
        CUDARenderer("sm_90").render(shared_kernel(16384, arrays=2), "k_huge")
    with pytest.raises(CRenderError, match=r"kernel k_huge needs 262144 bytes.*limit of 232448 bytes"):
        big_renderer().render(shared_kernel(65536), "k_huge")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_builds_it_and_the_binary_carries_the_bytes(arch: str) -> None:
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC is not installed (pip install 'tinycore[cuda]')")
    from tinycore_cuda.compiler import NVRTCCompiler

    compiler = NVRTCCompiler(arch)
    src = big_renderer().render(shared_kernel(16384, arrays=2), "k_big")
    kinds, image = KernelImage.unpack(compiler.compile(src))
    shared, cubin = split_dynamic_shared(image)
    assert (kinds, shared, cubin[:4]) == (["buffer", "buffer"], 131072, b"\x7fELF")
    report = compiler.resource_usage(src)
    assert re.search(r"\b0 bytes smem\b", report) or "smem" not in report  # no static shared memory left
    _, small = KernelImage.unpack(compiler.compile(big_renderer().render(shared_kernel(4096), "k_small")))
    assert split_dynamic_shared(small) == (0, small) and small[:4] == b"\x7fELF"


def _program(fake: FakeDriver, shared: int):
    dev = CUDADevice("CUDA", driver=fake)
    return dev, dev.runtime("k_big", KernelImage.pack(["buffer", "buffer"], with_dynamic_shared(shared, b"ELF")))


def test_the_program_opts_in_then_launches_with_the_bytes() -> None:
    fake = FakeDriver()
    dev, prg = _program(fake, 131072)
    attribute = "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"
    assert ("cuFuncSetAttribute", (prg.function, attribute, 131072)) in fake.calls
    buf = dev.allocator.alloc(64)
    prg(buf, buf, global_size=(1, 1, 1), local_size=(1024, 1, 1))
    prg(buf, buf, global_size=(1, 1, 1), local_size=(1024, 1, 1), wait=True)
    assert [launch["shared"] for launch in fake.launches] == [131072, 131072]
    fake.function_attributes.clear()  # without the opt-in the fake driver (like the real one) refuses the launch
    with pytest.raises(CUDAError, match="cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE"):
        prg(buf, buf, global_size=(1, 1, 1), local_size=(1024, 1, 1))


def test_a_static_kernel_sets_no_attribute_and_launches_with_zero_bytes() -> None:
    fake = FakeDriver()
    dev, prg = _program(fake, 0)
    buf = dev.allocator.alloc(64)
    prg(buf, buf, global_size=(2, 1, 1), local_size=(32, 1, 1))
    assert not [c for c in fake.calls if c[0] == "cuFuncSetAttribute"] and fake.launches[0]["shared"] == 0


def test_the_limit_comes_from_the_gpu_and_over_it_names_kernel_bytes_and_limit() -> None:
    fake = FakeDriver()
    fake.attributes["CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"] = 101376  # an sm_86 GPU: 99 KB
    dev = CUDADevice("CUDA", driver=fake)
    assert dev.renderer.shared_max == dev.shared_optin == 101376
    with pytest.raises(CUDAError, match=r"kernel k_big needs 131072 bytes of shared memory.*limit of 101376 bytes"):
        dev.runtime("k_big", KernelImage.pack(["buffer"], with_dynamic_shared(131072, b"ELF")))
    with pytest.raises(CRenderError, match=r"kernel k_big needs 131072 bytes.*limit of 101376 bytes"):
        dev.renderer.render(shared_kernel(16384, arrays=2), "k_big")


# ----- on a GPU (bench/device_check.sh): skipped without one


def test_a_128_kb_kernel_runs_on_the_gpu(gpu, launch) -> None:
    import numpy as np

    assert gpu.renderer.shared_max == gpu.shared_optin > STATIC_SHARED_MAX  # sm_70 and newer opt in above 48 KB
    src = gpu.renderer.render(shared_kernel(16384, arrays=2), "k_big")
    assert dynamic_shared_bytes(src) == 131072
    data = np.arange(16384, dtype=np.float32)
    got = launch(src, "k_big", np.zeros_like(data), [data], (1, 1, 1), (THREADS, 1, 1))
    np.testing.assert_array_equal(got, 2 * data[::-1])


def test_over_the_gpus_limit_loading_names_kernel_bytes_and_limit(gpu) -> None:
    renderer = CUDARenderer(gpu.arch)
    renderer.shared_max = 1 << 30  # past the renderer's check: the program's own check must catch it
    src = renderer.render(shared_kernel(131072), "k_huge")  # 512 KB
    with pytest.raises(CUDAError, match=rf"kernel k_huge needs 524288 bytes.*limit of {gpu.shared_optin} bytes"):
        gpu.runtime("k_huge", gpu.compiler.compile(src))
