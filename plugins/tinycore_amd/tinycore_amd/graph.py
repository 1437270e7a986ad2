"""`HIPGraph`: a TinyJit capture of AMD kernels replayed as one HIP graph launch.

The graph is built on the first submission, when every input buffer is known: one kernel node per captured kernel,
each after the one before (the JIT batches kernels that may run in capture order), then ``hipGraphInstantiate``
once. A later replay patches, with ``hipGraphExecKernelNodeSetParams`` on the executable graph, only the nodes
whose buffers, variable values or launch dims changed (`tinycore.sdk.GraphUpdate`), never rebuilding it, and
launches it with one ``hipGraphLaunch``. `submissions` counts the launches and `patched` the node updates.

Copies are not graph nodes: the JIT batches kernels only (`GraphRunner.supports`), as for CUDA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinycore.sdk import Device, ExecItem, GraphRunner, GraphUpdate, grid_and_block
from tinycore_amd.hip import KernelLaunch

if TYPE_CHECKING:
    from tinycore_amd.device import AMDDevice


class HIPGraph(GraphRunner):
    """``HIPGraph(device, items, input_slots, var_names)``: `items` (AMD kernels) as one executable HIP graph.

    `nodes` are the graph's kernel nodes in capture order, `graph` and `exec` the HIP graph and its executable
    graph (None before the first submission)."""

    family = "AMD"

    def __init__(
        self, device: str, items: list[ExecItem], input_slots: dict[tuple[int, int], int], var_names: list[str]
    ):
        super().__init__(device, items, input_slots, var_names)
        self.gpu: AMDDevice = Device[device]
        self.graph: Any = None
        self.exec: Any = None
        self.nodes: list[Any] = []
        self.submissions = self.patched = 0

    def launch_of(self, index: int) -> KernelLaunch:
        """Item `index`'s launch as it stands now: its function, dims, buffers and variable values."""
        item = self.items[index]
        program = item.runner.program  # type: ignore[attr-defined]
        global_size, local_size = self.launch_dims[index]
        grid, block = grid_and_block(global_size, local_size)
        pointers = tuple(int(buf.ensure_allocated().opaque) for buf in item.bufs)
        args = pointers + tuple(int(v) for v in self.vals.get(index, ()))
        return KernelLaunch(program.function, tuple(grid), tuple(block), args, tuple(program.kinds))  # type: ignore[arg-type]

    def _build(self) -> None:
        """One kernel node per item, each after the previous one; then the executable graph."""
        hip = self.gpu.hip
        self.graph = hip.graph_create()
        for index in range(len(self.items)):
            self.nodes.append(hip.graph_add_kernel_node(self.graph, self.nodes[-1:], self.launch_of(index)))
        self.exec = hip.graph_instantiate(self.graph)

    def submit(self, update: GraphUpdate, wait: bool) -> float | None:
        """Build the graph (first call) or patch the changed nodes, then launch it once; with `wait`, the seconds
        between events around the launch."""
        hip = self.gpu.hip
        self.gpu.activate()
        if self.exec is None:
            self._build()
        else:
            for index in update.changed_items():
                hip.graph_exec_set_kernel_params(self.exec, self.nodes[index], self.launch_of(index))
                self.patched += 1
        self.submissions += 1
        if wait:
            return hip.timed_graph_launch(self.exec)
        hip.graph_launch(self.exec)
        return None

    def __del__(self) -> None:
        try:
            if self.exec is not None:
                self.gpu.hip.graph_destroy(self.graph, self.exec)
        except Exception:  # interpreter shutdown or a failed __init__: nothing left to free
            pass
