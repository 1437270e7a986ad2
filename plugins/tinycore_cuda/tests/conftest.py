"""Fixtures of the CUDA plugin's tests: `gpu` (the opened ``CUDA`` device; skips without one) and `launch` (build a
rendered kernel for it and run it on host arrays). Tests using them run only on a machine with an NVIDIA GPU
(``bench/device_check.sh``); everything else here needs none."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest


@pytest.fixture(scope="session")
def gpu() -> Any:
    """``Device["CUDA"]``, or a skip naming why there is none (the probe's reason)."""
    pytest.importorskip("tinycore_cuda", reason="tinycore-cuda is not installed (pip install -e plugins/tinycore_cuda)")
    from tinycore_cuda.plugin import probe

    result = probe()
    if not result.ok:
        pytest.skip(f"no CUDA GPU here: {result.reason}")
    from tinycore.sdk import Device

    return Device["CUDA"]


@pytest.fixture
def launch(gpu: Any) -> Callable[..., np.ndarray]:
    """``launch(src, name, out, inputs, global_size, local_size)``: compile `src` (kernel `name`) for the GPU, run
    it with `out` (an array whose dtype and size the output has) then the `inputs` as buffers, and return the
    output read back."""
    from tinycore.sdk import Buffer, dtypes

    def run(
        src: str, name: str, out: np.ndarray, inputs: Sequence[np.ndarray], global_size: Sequence[int],
        local_size: Sequence[int],
    ) -> np.ndarray:  # fmt: skip
        program = gpu.runtime(name, gpu.compiler.compile(src))
        buffers = []
        for array in (out, *inputs):
            buf = Buffer(gpu.device, array.nbytes, dtypes.uint8).allocate()
            buf.copyin(memoryview(np.ascontiguousarray(array)).cast("B"))
            buffers.append(buf)
        program(*(b.opaque for b in buffers), global_size=tuple(global_size), local_size=tuple(local_size), wait=True)
        result = np.empty_like(out)
        buffers[0].copyout(memoryview(result).cast("B"))
        return result

    return run
