"""Real pipeline kernels for checking a renderer without its device: each case is a small tensor program scheduled on
the ``PYTHON`` device and lowered for the renderer under test, so a GPU plugin can render (and compile, where its
compiler is installed) the kernels core really produces before any hardware is at hand.

>>> from tinycore.runtime.python_device import PythonRenderer
>>> sources = render_cases(PythonRenderer(), ["broadcast"])
>>> sorted(sources)
['broadcast']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tinycore.codegen import get_program
from tinycore.codegen.kernel import Opt, OptOps
from tinycore.dtype import DType, dtypes
from tinycore.renderer import Renderer
from tinycore.tensor import Tensor
from tinycore.uop.ops import Variable


def _t(values: Any, dtype: Any) -> Tensor:
    return Tensor(np.asarray(values, dtype=dtype), device="PYTHON")


_INTS = (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64)


def kernel_cases() -> dict[str, tuple[Callable[[], Tensor], list[Opt] | None, frozenset[DType]]]:
    """``{case: (build the result tensor, opts or None for the default heuristics, dtypes the kernel uses)}``.

    The cases: ``x + 1`` for every integer dtype and float64; a broadcast add; a sum with a grouped reduce (shared
    memory and barriers on GPU-style renderers); a row sum; a 64x64 matmul (upcasts: vector loads); a row max (needs
    -inf); half and bfloat16 conversions; int64 division, remainder, where and max; bool logic; uint8/int8 casts;
    transcendentals; float64 math; 32- and 16-bit bitcasts; a symbolic variable; a pad; inf and NaN constants.
    """
    f32, f16, bf16, f64 = dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64
    a = lambda: _t(np.arange(64 * 64).reshape(64, 64), np.float32)  # noqa: E731
    b = lambda: _t(np.arange(64), np.float32)  # noqa: E731
    h = lambda: _t(np.ones(64), np.float16)  # noqa: E731
    i64 = lambda: _t(np.arange(64), np.int64)  # noqa: E731
    u8 = lambda: _t(np.arange(64), np.uint8)  # noqa: E731
    cases: dict[str, tuple[Callable[[], Tensor], list[Opt] | None, frozenset[DType]]] = {
        f"add_{np.dtype(d).name}": ((lambda d=d: _t(np.arange(64), d) + 1), None, frozenset({dtypes.from_np(d)}))
        for d in (*_INTS, np.float64)
    }
    cases.update(
        {
            "broadcast": (lambda: a() + b(), None, frozenset({f32})),
            "grouped_sum": (lambda: _t(np.ones(4096), np.float32).sum(), [Opt(OptOps.GROUP, 0, 16)], frozenset({f32})),
            "row_sum": (lambda: _t(np.ones((256, 256)), np.float32).sum(axis=1), None, frozenset({f32})),
            "matmul": (lambda: (m := a()) @ m, None, frozenset({f32})),
            "row_max": (lambda: a().max(axis=1), None, frozenset({f32})),
            "half_bf16": (lambda: (h() * 2 + 1).cast(bf16).cast(f32), None, frozenset({f16, bf16, f32})),
            "int64": (
                lambda: ((i64() // 3) + (i64() > 10).where(i64(), -i64())).maximum(i64() % 5),
                None,
                frozenset({dtypes.int64}),
            ),
            "bool": (lambda: (b() > 3) & (b() < 40), None, frozenset({f32, dtypes.bool})),
            "uint8_int8": (
                lambda: (u8() + 3).cast(f32) + u8().cast(dtypes.int8).cast(f32),
                None,
                frozenset({dtypes.uint8, dtypes.int8, f32}),
            ),
            "transcendental": (lambda: (b().exp() + b().sqrt()).sin(), None, frozenset({f32})),
            "float64": (lambda: _t(np.arange(64), np.float64).sqrt().exp2() + 1, None, frozenset({f64})),
            "bitcast": (lambda: b().bitcast(dtypes.int32) + 1, None, frozenset({f32, dtypes.int32})),
            "bitcast16": (lambda: h().bitcast(dtypes.int16) + 1, None, frozenset({f16, dtypes.int16})),
            "bitcast_bf16": (
                lambda: _t(np.ones(64), np.float32).cast(bf16).bitcast(dtypes.uint16) + 1,
                None,
                frozenset({f32, bf16, dtypes.uint16}),
            ),
            "variable": (
                lambda: b() + Tensor(Variable("n", 1, 10).bind(3), device="PYTHON").cast(f32),
                None,
                frozenset({f32}),
            ),
            "pad": (lambda: b().pad(((1, 3),)) * 2, None, frozenset({f32})),
            "specials": (
                lambda: (b() > 3).where(b(), float("inf")) + (b() < 2).where(float("-inf"), float("nan")),
                None,
                frozenset({f32}),
            ),
        }
    )
    return cases


def render_cases(renderer: Renderer, names: Iterable[str] | None = None) -> dict[str, str]:
    """``{case: source}`` for `names` (default: every case whose dtypes `renderer` supports), each kernel rendered
    by `renderer` under the function name ``k_<case>``."""
    cases = kernel_cases()
    if names is None:
        names = [n for n, (_, _, used) in cases.items() if used <= renderer.supported_dtypes]
    sources = {}
    for name in names:
        build, opts, _ = cases[name]
        items = [item for item in build().schedule() if item.ast is not None]
        if len(items) != 1:
            raise AssertionError(f"kernel case {name} scheduled {len(items)} kernels, expected one")
        program = get_program(items[0].ast, renderer, opts)
        sources[name] = renderer.render(program.uops, f"k_{name}")
    return sources


def matmul_case(m: int, k: int, n: int, dtype_in: DType, seed: int = 0) -> tuple[Any, np.ndarray]:
    """A one-kernel ``(m, k) @ (k, n)`` product of `dtype_in` inputs accumulated in float32, scheduled on the
    ``PYTHON`` device: its `ScheduleItem` (buffers 1 and 2 hold the inputs) and the product numpy computes in
    float64 from the same rounded inputs. For checking a renderer's tensor cores (`run_on_interpreter`)."""
    rng = np.random.default_rng(seed)
    a = _t(rng.uniform(-2, 2, (m, k)), np.float32).cast(dtype_in).realize()
    b = _t(rng.uniform(-2, 2, (k, n)), np.float32).cast(dtype_in).realize()
    a32, b32 = a.cast(dtypes.float32), b.cast(dtypes.float32)
    (item,) = [i for i in (a32 @ b32).schedule() if i.ast is not None]
    return item, a32.numpy().astype(np.float64) @ b32.numpy().astype(np.float64)


def run_on_interpreter(program: Any, item: Any, tensor_cores: Sequence[Any] = ()) -> np.ndarray:
    """Run `program` (a `ProgramSpec` lowered for any renderer, e.g. with its tensor cores) on the ``PYTHON`` reference
    interpreter with the input buffers of `item` (from `matmul_case`); returns the float32 output, flat. The
    interpreter emulates `tensor_cores` (the renderer's declarations) with their lane layouts."""
    from tinycore.runtime.python_device import PythonCompiler, PythonRenderer, decode_program
    from tinycore.runtime.python_interpreter import Interpreter

    lib = PythonCompiler().compile(PythonRenderer().render(program.uops))
    interpreter = Interpreter(decode_program(lib), program.function_name, list(tensor_cores))
    out = np.zeros(item.bufs[0].size, np.float32)
    inputs = [bytearray(b.as_buffer()) for b in item.bufs[1:]]  # the raw bytes (numpy has no bfloat16)
    interpreter([memoryview(out).cast("B"), *(memoryview(x) for x in inputs)], program.global_size, program.local_size)
    return out


def run_case_on_interpreter(name: str, renderer: Renderer, tensor_cores: Sequence[Any] = ()) -> tuple[Any, Any]:
    """Kernel case `name` lowered with `renderer`'s options (its heuristics, launch limits, vector widths, native
    ops and tensor cores: exactly the uops that renderer would render) and run on the ``PYTHON`` reference
    interpreter (threads shuffled between barriers, poisoned shared memory, bounds checks, `tensor_cores` emulated
    from their declared lane layouts). Returns ``(output as a numpy array shaped like the case's result, the
    program)``; compare it with ``kernel_cases()[name][0]().numpy()``. For checking a GPU renderer without its GPU."""
    from tinycore.runtime.python_device import PythonCompiler, PythonRenderer, decode_program
    from tinycore.runtime.python_interpreter import Interpreter

    build, opts, _ = kernel_cases()[name]
    items, var_vals = build().schedule_with_vars()
    (item,) = [i for i in items if i.ast is not None]
    program = get_program(item.ast, renderer, opts)
    lib = PythonCompiler().compile(PythonRenderer().render(program.uops))
    interpreter = Interpreter(decode_program(lib), program.function_name, list(tensor_cores))
    written = set(range(len(item.outputs)))  # outputs come first
    memory = [bytearray(b.nbytes) if i in written else bytearray(b.as_buffer()) for i, b in enumerate(item.bufs)]
    global_size, local_size = program.launch_dims(var_vals)
    interpreter([memoryview(m) for m in memory], global_size, local_size, program.var_values(var_vals))
    want = build().numpy()
    (out,) = [memory[i] for i in sorted(written)]
    return np.frombuffer(bytes(out[: want.nbytes]), dtype=want.dtype).reshape(want.shape), program


def check_case_result(name: str, got: np.ndarray, want: np.ndarray, exact_exp: bool = True) -> None:
    """Assert that a device's output `got` of kernel case `name` matches the reference `want`: integers exactly,
    floats to 1e-5 (NaN where NaN). ``exact_exp=False`` is for a renderer whose ``exp`` is decomposed by core (it
    may differ from the reference's by an ulp): the ``transcendental`` case computes ``sin(exp(b) + sqrt(b))`` for
    b = 0..63, and sin passes an argument error straight through (``|sin'| <= 1``), so its bound is then a few ulps
    of the argument (no bound at all once one ulp of it exceeds pi)."""
    if name == "transcendental" and not exact_exp:
        arg = np.exp(np.arange(64, dtype=np.float32)) + np.sqrt(np.arange(64, dtype=np.float32))
        bound = np.minimum(4 * np.spacing(np.abs(arg)) + 1e-6, 2.0)
        excess = np.abs(got.astype(np.float64) - want) / bound
        assert np.all(excess <= 1) and np.all(np.abs(got) <= 1), f"{name}: error / bound up to {excess.max()}"
        np.testing.assert_allclose(got[:3], want[:3], rtol=1e-6)  # small arguments: no amplification
    elif np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=name)
    else:
        np.testing.assert_array_equal(got, want, err_msg=name)


def run_item_on_device(device: Any, item: Any, opts: Any, var_vals: dict[str, int]) -> tuple[bytearray, Any]:
    """Lower the `ScheduleItem` `item` (scheduled on ``PYTHON``) for the opened `device`'s renderer with `opts`,
    compile it with the device's compiler, run it on device copies of the item's input buffers and return ``(the
    first output's bytes, the program)``. For on-device tests of a plugin: the kernel core would run there, checked
    against the reference device's result."""
    from tinycore.device import Buffer

    program = get_program(item.ast, device.renderer, opts)
    lib = device.compiler.compile_cached(device.renderer.render(program.uops, program.function_name))
    outputs = len(item.outputs)
    bufs = []
    for index, buf in enumerate(item.bufs):
        on_device = Buffer(device.device, buf.size, buf.dtype).allocate()
        if index >= outputs:
            on_device.copyin(memoryview(bytearray(buf.as_buffer())))
        bufs.append(on_device)
    global_size, local_size = program.launch_dims(var_vals)
    kernel = device.runtime(program.function_name, lib)
    kernel(*(b.opaque for b in bufs), global_size=global_size, local_size=local_size,
           vals=program.var_values(var_vals), wait=True)  # fmt: skip
    return bytearray(bufs[0].as_buffer()), program


def check_case_on_device(device: str, name: str, exact_exp: bool = True) -> None:
    """Run kernel case `name` on the device named `device` (``"AMD"``, ``"METAL"``: opened through ``Device``), lowered
    for its renderer with the case's opts, and check the output against the reference result (`check_case_result`,
    `exact_exp` as there). A case using a dtype the device's renderer lacks is skipped (``pytest.skip``). The body
    of a plugin's on-device test over `kernel_cases`."""
    import pytest

    from tinycore.device import Device

    dev = Device[device]
    build, opts, used = kernel_cases()[name]
    missing = used - dev.renderer.supported_dtypes
    if missing:
        pytest.skip(f"{name}: the {device} renderer has no {sorted(d.name for d in missing)}")
    items, var_vals = build().schedule_with_vars()
    (item,) = [i for i in items if i.ast is not None]
    out, _ = run_item_on_device(dev, item, opts, var_vals)
    want = build().numpy()
    got = np.frombuffer(bytes(out[: want.nbytes]), dtype=want.dtype).reshape(want.shape)
    check_case_result(name, got, want, exact_exp=exact_exp)
