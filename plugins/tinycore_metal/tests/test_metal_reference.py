"""The kernels Metal gets run right: every case of the op-parity kernel suite (`tinycore.testkit.kernels`) is lowered
with the Metal renderer's options (its heuristics, launch limits, vector widths, native ops and simdgroup tensor
cores: exactly the uops `MetalRenderer` renders) and that program runs on the PYTHON reference interpreter (shuffled
threads between barriers, poisoned threadgroup memory, bounds checks, simdgroup matrices emulated from their
declared lane layout); its output must equal the PYTHON device's own result. No GPU needed."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tinycore_metal", reason="tinycore-metal is not installed (pip install -e plugins/tinycore_metal)")
from tinycore_metal.renderer import METAL_TENSOR_CORES, MetalRenderer  # noqa: E402

from tinycore.codegen import get_program  # noqa: E402
from tinycore.runtime.python_device import PythonCompiler, PythonRenderer, decode_program  # noqa: E402
from tinycore.runtime.python_interpreter import Interpreter  # noqa: E402
from tinycore.testkit.kernels import kernel_cases  # noqa: E402

CASES = [n for n, (_, _, used) in kernel_cases().items() if used <= MetalRenderer().supported_dtypes]


def run_with_metal_options(name: str) -> tuple[np.ndarray, object]:
    """Case `name` lowered for Metal and run on the reference interpreter: (its output, the program)."""
    build, opts, _ = kernel_cases()[name]
    items, var_vals = build().schedule_with_vars()
    (item,) = [i for i in items if i.ast is not None]
    program = get_program(item.ast, MetalRenderer(), opts)
    lib = PythonCompiler().compile(PythonRenderer().render(program.uops))
    interpreter = Interpreter(decode_program(lib), program.function_name, METAL_TENSOR_CORES)
    written = set(range(len(item.outputs)))  # outputs come first
    memory = [bytearray(b.nbytes) if i in written else bytearray(b.as_buffer()) for i, b in enumerate(item.bufs)]
    global_size, local_size = program.launch_dims(var_vals)
    interpreter([memoryview(m) for m in memory], global_size, local_size, program.var_values(var_vals))
    want = build().numpy()
    (out,) = [memory[i] for i in sorted(written)]
    return np.frombuffer(bytes(out[: want.nbytes]), dtype=want.dtype).reshape(want.shape), program


@pytest.mark.parametrize("name", CASES)
def test_the_metal_kernel_gives_the_reference_result(name: str) -> None:
    got, program = run_with_metal_options(name)
    want = kernel_cases()[name][0]().numpy()
    if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)
    if name == "matmul":  # the float matmul runs on the emulated simdgroup matrices
        assert any(u.op.name == "WMMA" for u in program.uops)  # type: ignore[attr-defined]
    if name == "grouped_sum":
        assert any(u.op.name == "BARRIER" for u in program.uops)  # type: ignore[attr-defined]
