"""`CUDAGraph`: a TinyJit capture replayed as one CUDA graph launch.

On the first submission (when every input buffer is known) the captured kernels become the nodes of one CUDA graph,
each depending on the one before (the JIT batches only kernels that may run in capture order), and the graph is
instantiated once. A replay patches only the
nodes whose input pointers, variable values or launch dims changed (`GraphUpdate`), with
``cuGraphExecKernelNodeSetParams`` on the instantiated graph, never rebuilding it, then launches it with one
``cuGraphLaunch``. `submissions` counts the launches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinycore.sdk import Device, ExecItem, GraphRunner, GraphUpdate, grid_and_block

if TYPE_CHECKING:
    from tinycore_cuda.device import CUDADevice


class CUDAGraph(GraphRunner):
    """``CUDAGraph(device, items, input_slots, var_names)``: `items` (CUDA kernels) as one instantiated CUDA graph.

    `nodes` are the graph's kernel nodes in capture order; `patched` counts node updates over all replays."""

    family = "CUDA"

    def __init__(
        self, device: str, items: list[ExecItem], input_slots: dict[tuple[int, int], int], var_names: list[str]
    ):
        super().__init__(device, items, input_slots, var_names)
        self.gpu: CUDADevice = Device[device]
        self.graph: Any = None  # built on the first submission, when every input buffer is known
        self.exec: Any = None
        self.nodes: list[Any] = []
        self.submissions = self.patched = 0

    def _build(self) -> None:
        """Add one kernel node per item, each after the previous one, and instantiate the graph."""
        driver = self.gpu.driver
        self.graph = driver.cuGraphCreate(0)
        for index in range(len(self.items)):
            after = self.nodes[-1:]
            self.nodes.append(driver.cuGraphAddKernelNode(self.graph, after or None, len(after), self._params(index)))
        self.exec = driver.cuGraphInstantiate(self.graph, 0)

    def _params(self, index: int) -> Any:
        """The kernel node parameters of item `index` as it stands (buffers, values, launch dims)."""
        item = self.items[index]
        program = item.runner.program  # type: ignore[attr-defined]
        global_size, local_size = self.launch_dims[index]
        grid, block = grid_and_block(global_size, local_size)
        params = self.gpu.driver.bindings.CUDA_KERNEL_NODE_PARAMS()
        params.func = program.function
        params.gridDimX, params.gridDimY, params.gridDimZ = grid
        params.blockDimX, params.blockDimY, params.blockDimZ = block
        params.sharedMemBytes = program.shared_bytes  # dynamic shared memory (set up when loaded)
        pointers = tuple(int(buf.ensure_allocated().opaque) for buf in item.bufs)
        params.kernelParams = (pointers + tuple(int(v) for v in self.vals.get(index, ())), program.types)
        params.extra = 0
        return params

    def submit(self, update: GraphUpdate, wait: bool) -> float | None:
        """Patch the changed nodes, launch the graph once; with `wait`, the seconds between events around it."""
        driver = self.gpu.driver
        self.gpu.activate()
        if self.exec is None:
            self._build()
        else:
            for index in update.changed_items():
                driver.cuGraphExecKernelNodeSetParams(self.exec, self.nodes[index], self._params(index))
                self.patched += 1
        self.submissions += 1
        if wait:
            return driver.timed(lambda: driver.cuGraphLaunch(self.exec, 0))
        driver.cuGraphLaunch(self.exec, 0)
        return None

    def __del__(self) -> None:
        try:
            if self.exec is not None:
                self.gpu.driver.cuGraphExecDestroy(self.exec)
                self.gpu.driver.cuGraphDestroy(self.graph)
        except Exception:  # interpreter shutdown or a failed __init__: nothing left to free
            pass
