"""TinyJit replays on AMD as one HIP graph (`tinycore_amd.graph.HIPGraph`), on the recording fake runtime: the first
replay builds and instantiates the graph, later replays only patch the nodes whose buffers or variables changed and
launch it once; and `CtypesHIP` hands ``libamdhip64`` the ``hipKernelNodeParams`` of ROCm's headers (checked against a
stand-in library that decodes what it is given). Kernels are built by clang for gfx1100, never run (no AMD GPU)."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tinycore_amd", reason="tinycore-amd is not installed (pip install -e plugins/tinycore_amd)")
from tinycore_amd import hip  # noqa: E402
from tinycore_amd.compiler import find_clang  # noqa: E402
from tinycore_amd.device import AMDDevice  # noqa: E402
from tinycore_amd.graph import HIPGraph  # noqa: E402
from tinycore_amd.hip import CtypesHIP, KernelLaunch, KernelNodeParams  # noqa: E402
from tinycore_amd.testing import FakeHIP  # noqa: E402

needs_clang = pytest.mark.skipif(find_clang() is None, reason="no clang for AMDGPU (apt-get install clang-19 lld-19)")


@pytest.fixture
def amd(monkeypatch: pytest.MonkeyPatch) -> FakeHIP:
    """This test's ``AMD`` is an AMDDevice on a fresh FakeHIP (gfx1100); no kernel runner outlives the test."""
    from tinycore.device import Device
    from tinycore.engine import realize

    fake = FakeHIP(memory=1 << 22)
    monkeypatch.setitem(Device._opened, "AMD", AMDDevice("AMD", hip=fake))
    monkeypatch.setattr(realize, "_kernel_runners", {})
    return fake


def _calls(fake: FakeHIP, name: str) -> list[tuple]:
    return [args for call, args in fake.calls if call == name]


@needs_clang
def test_a_jit_replay_is_one_graph_built_once_then_patched(amd: FakeHIP) -> None:
    from tinycore.engine.jit import TinyJit
    from tinycore.engine.realized import buffer_of
    from tinycore.tensor import Tensor

    @TinyJit
    def step(x: Tensor, w: Tensor) -> Tensor:
        return ((x * 2 + 1).contiguous().realize() * w).sum(axis=1)

    weight = Tensor(np.ones((8, 16), np.float32), device="AMD").realize()
    inputs = [Tensor(np.full((8, 16), k, np.float32), device="AMD").realize() for k in range(3)]
    step(inputs[0], weight).realize()  # call 0 runs kernel by kernel
    assert _calls(amd, "graph_create") == [] and len(amd.launches) >= 2
    step(inputs[1], weight).realize()  # call 1 captures, then replays once: the graph is built
    (graph,) = step.captured.graphs
    assert isinstance(graph, HIPGraph) and len(graph.nodes) >= 2
    assert len(_calls(amd, "graph_create")) == 1 and len(_calls(amd, "graph_instantiate")) == 1
    (record,) = amd.graphs
    assert record["deps"] == [[]] + [[node] for node in graph.nodes[:-1]]  # a chain, in capture order
    for item, launch in zip(graph.items, record["nodes"]):
        assert launch.function == item.runner.program.function and launch.kinds[0] == "buffer"
        assert launch.args[: len(item.bufs)] == tuple(int(b.opaque) for b in item.bufs)
        assert launch.block == tuple(item.runner.p.local_size or (1, 1, 1))
    assert _calls(amd, "graph_launch") == [(graph.exec,)] and graph.submissions == 1 and graph.patched == 0

    launches = len(amd.launches)
    step(inputs[2], weight).realize()  # a new input: only the node reading it is patched
    assert len(_calls(amd, "graph_create")) == 1 and len(_calls(amd, "graph_instantiate")) == 1  # never rebuilt
    (patch,) = _calls(amd, "graph_exec_set_kernel_params")
    first = graph.items[0]
    assert patch[0] == graph.exec and patch[1] == graph.nodes[0]
    assert patch[2].args[: len(first.bufs)] == tuple(int(b.opaque) for b in first.bufs)
    assert int(buffer_of(inputs[2].uop).opaque) in patch[2].args  # the new input's device pointer
    assert graph.submissions == 2 and graph.patched == 1
    assert len(amd.launches) == launches + len(graph.nodes)  # one graph launch runs every node, in order
    assert [entry["function"] for entry in amd.launches[-len(graph.nodes) :]] == [
        node.function for node in amd.execs[graph.exec]["nodes"]
    ]
    step(inputs[2], weight).realize()  # nothing changed: nothing patched, launched once more
    assert len(_calls(amd, "graph_exec_set_kernel_params")) == 1 and graph.submissions == 3
    graph.__del__()  # what the garbage collector calls: the executable graph and the graph are freed
    assert amd.destroyed == [(graph.graph, graph.exec)]


@needs_clang
def test_a_new_variable_value_patches_the_nodes_that_read_it(amd: FakeHIP) -> None:
    from tinycore import Variable
    from tinycore.engine.jit import TinyJit
    from tinycore.tensor import Tensor

    @TinyJit
    def step(x: Tensor, n: Any) -> Tensor:
        return (x.shrink(((0, n),)) * 2).sum()

    x = Tensor(np.arange(10, dtype=np.float32), device="AMD").realize()
    var = Variable("n", 1, 10)
    for value in (3, 4, 5):
        step(x, var.bind(value)).realize()
    (graph,) = step.captured.graphs
    reading = {i for i, names in graph.item_vars.items() if names}
    assert reading and len(_calls(amd, "graph_create")) == 1
    before = len(_calls(amd, "graph_exec_set_kernel_params"))  # the replay with 5 patched already
    step(x, var.bind(7)).realize()
    patches = _calls(amd, "graph_exec_set_kernel_params")[before:]
    assert {graph.nodes.index(node) for _, node, _ in patches} == reading  # those nodes only
    assert all(launch.args[-1] == 7 and launch.kinds[-1] == "int" for _, _, launch in patches)
    assert amd.execs[graph.exec]["nodes"][min(reading)].args[-1] == 7
    assert len(_calls(amd, "graph_instantiate")) == 1


def test_wait_times_the_graph_launch_and_errors_name_the_call(amd: FakeHIP) -> None:
    from tinycore.device import Device

    dev = Device["AMD"]
    graph = HIPGraph.__new__(HIPGraph)  # the launch path alone, on a prebuilt executable graph
    graph.gpu, graph.exec, graph.nodes, graph.submissions, graph.patched = dev, 0, [], 0, 0
    amd.execs.append({"graph": 0, "nodes": []})
    from tinycore.sdk import GraphUpdate

    assert graph.submit(GraphUpdate(var_vals={}), wait=True) == pytest.approx(4.0e-3)
    amd.fail["graph_launch"] = "hipErrorInvalidValue"
    with pytest.raises(hip.HIPError, match="graph_launch failed: hipErrorInvalidValue"):
        graph.submit(GraphUpdate(var_vals={}), wait=False)
    graph.exec = None  # nothing built: nothing to free


def test_the_kernel_node_params_struct_is_rocms_layout() -> None:
    """ROCm's hip_runtime_api.h: blockDim, extra, func, gridDim, kernelParams, sharedMemBytes (64-bit pointers)."""
    offsets = {name: getattr(KernelNodeParams, name).offset for name, _ in KernelNodeParams._fields_}
    assert offsets == {"blockDim": 0, "extra": 16, "func": 24, "gridDim": 32, "kernelParams": 48, "sharedMemBytes": 56}
    assert ctypes.sizeof(KernelNodeParams) == 64


class _Function:
    """One entry point of the stand-in ``libamdhip64``: records its arguments, fills its out-parameters."""

    def __init__(self, lib: _StandInHIP, name: str):
        self.lib, self.name, self.argtypes, self.restype = lib, name, None, None

    def __call__(self, *args: Any) -> int:
        self.lib.seen.append((self.name, args))
        if self.name in ("hipGraphCreate", "hipGraphAddKernelNode", "hipGraphInstantiate"):
            self.lib.handles += 1
            args[0]._obj.value = 0x1000 * self.lib.handles  # the byref'd handle
        if self.name in ("hipGraphAddKernelNode", "hipGraphExecKernelNodeSetParams"):
            params = args[-1]._obj
            count = len(self.lib.kinds)
            pointers = (ctypes.c_void_p * count).from_address(params.kernelParams)
            values = [
                ctypes.cast(p, ctypes.POINTER(hip.ARG_TYPES[k])).contents.value
                for p, k in zip(pointers, self.lib.kinds)
            ]
            grid, block = params.gridDim, params.blockDim
            self.lib.decoded.append(
                (params.func, (grid.x, grid.y, grid.z), (block.x, block.y, block.z), values, params.extra)
            )
        return 0


class _StandInHIP:
    """A stand-in ``libamdhip64`` whose functions are `_Function`s; those named in `missing` don't exist."""

    def __init__(self, kinds: tuple[str, ...], missing: frozenset[str] = frozenset()):
        self.seen: list[tuple[str, tuple]] = []
        self.decoded: list[tuple] = []
        self.handles, self.kinds, self.missing = 0, kinds, missing

    def __getattr__(self, name: str) -> _Function:
        if not name.startswith("hip") or name in self.missing:
            raise AttributeError(name)
        function = _Function(self, name)
        setattr(self, name, function)
        return function


def test_ctypes_hip_passes_node_params_and_dependencies(monkeypatch: pytest.MonkeyPatch) -> None:
    kinds = ("buffer", "int", "long")
    lib = _StandInHIP(kinds)
    monkeypatch.setattr(hip.ctypes, "CDLL", lambda path: lib)
    runtime = CtypesHIP("libamdhip64.so")
    assert lib.hipGraphAddKernelNode.argtypes[-1] == ctypes.POINTER(KernelNodeParams)
    assert lib.hipGraphLaunch.restype is ctypes.c_int
    function = ctypes.c_void_p(0xBEEF0)
    graph = runtime.graph_create()
    first = runtime.graph_add_kernel_node(
        graph, [], KernelLaunch(function, (4, 2, 1), (32, 1, 1), (0x5000, 3, 2**40), kinds)
    )
    second = runtime.graph_add_kernel_node(
        graph, [first], KernelLaunch(function, (1, 1, 1), (64, 1, 1), (0x6000, 1, 2), kinds)
    )
    graph_exec = runtime.graph_instantiate(graph)
    runtime.graph_exec_set_kernel_params(
        graph_exec, second, KernelLaunch(function, (1, 1, 1), (64, 1, 1), (0x7000, 9, 8), kinds)
    )
    runtime.graph_launch(graph_exec)
    assert len(runtime._node_args) == 2
    runtime.graph_destroy(graph, graph_exec)
    assert runtime._node_args == {}  # the argument storage goes with the graph
    assert lib.decoded == [
        (0xBEEF0, (4, 2, 1), (32, 1, 1), [0x5000, 3, 2**40], None),
        (0xBEEF0, (1, 1, 1), (64, 1, 1), [0x6000, 1, 2], None),
        (0xBEEF0, (1, 1, 1), (64, 1, 1), [0x7000, 9, 8], None),
    ]
    adds = [args for name, args in lib.seen if name == "hipGraphAddKernelNode"]
    assert adds[0][2] is None and adds[0][3] == 0  # a root node
    assert adds[1][2][0] == first.value and adds[1][3] == 1  # after the first
    names = [name for name, _ in lib.seen if name.startswith("hipGraph")]
    assert names == [
        "hipGraphCreate",
        "hipGraphAddKernelNode",
        "hipGraphAddKernelNode",
        "hipGraphInstantiate",
        "hipGraphExecKernelNodeSetParams",
        "hipGraphLaunch",
        "hipGraphExecDestroy",
        "hipGraphDestroy",
    ]


def test_a_runtime_without_the_graph_api_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = _StandInHIP(("buffer",), missing=frozenset({"hipGraphExecKernelNodeSetParams"}))
    monkeypatch.setattr(hip.ctypes, "CDLL", lambda path: lib)
    with pytest.raises(
        hip.HIPError, match=r"(?s)no HIP graphs: hipGraphExecKernelNodeSetParams missing.*fix: install ROCm 5\.3"
    ):
        CtypesHIP("libamdhip64.so").graph_create()
