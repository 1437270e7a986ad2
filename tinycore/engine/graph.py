"""`GraphRunner`: replay a captured list of `ExecItem`s as one submission, patching only what changes.

The base class does the bookkeeping every device needs; a device's runner (CUDA graphs, Metal indirect command
buffers, one C function on CPU) builds its native graph in ``__init__`` from `items` and implements `submit`,
which receives a `GraphUpdate` naming exactly the buffer pointers, variable values and launch dims that changed
since the previous submission. `SequentialGraphRunner` replays the items one by one (tests, the PYTHON device).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tinycore.engine.exec_item import CompiledRunner, ExecItem, Runner
from tinycore.renderer import Estimates

if TYPE_CHECKING:
    from tinycore.device import Buffer

LaunchDims = tuple[tuple[int, ...], tuple[int, ...] | None]


@dataclass
class GraphUpdate:
    """What changed since the last submission of a `GraphRunner`.

    `buffers`: ``(item index, buffer index, new buffer)`` for every input slot whose buffer changed;
    `vals`: item index to its program's variable values (argument order) for items whose values changed;
    `launch_dims`: item index to new ``(global_size, local_size)`` for items with changed symbolic launch dims;
    `var_vals`: all variable values of this call.
    """

    buffers: list[tuple[int, int, Buffer]] = field(default_factory=list)
    vals: dict[int, tuple[int, ...]] = field(default_factory=dict)
    launch_dims: dict[int, LaunchDims] = field(default_factory=dict)
    var_vals: dict[str, int] = field(default_factory=dict)


class GraphRunner(Runner):
    """Base class of batched replay runners: ``GraphRunner(device, items, input_slots, var_names)``.

    - `items`: the captured exec items (copied: the runner patches its own lists);
    - `input_slots`: ``(item index, buffer index) -> input position``: on each call, ``inputs[position]`` is put
      into that slot (``inputs`` are the JIT's input buffers, the `bufs` an `ExecItem` hands this runner);
    - `var_names`: the variables every call must bind.

    Bookkeeping for subclasses: `slots_by_item` (item -> ``[(buffer index, input position)]``), `item_vars`
    (item -> its program's variable names), `symbolic_items` (items whose launch dims depend on variables),
    `launch_dims` and `vals` (the values last submitted, per item). Non-input buffers are allocated once here.
    """

    def __init__(
        self, device: str, items: list[ExecItem], input_slots: dict[tuple[int, int], int], var_names: list[str]
    ):
        for index, item in enumerate(items):
            if not type(self).supports(item):
                raise ValueError(f"{type(self).__name__} can't batch item {index}: {item.runner!r}")
        for (item_index, buf_index), position in input_slots.items():
            if not (0 <= item_index < len(items) and 0 <= buf_index < len(items[item_index].bufs)) or position < 0:
                raise ValueError(f"input slot {(item_index, buf_index)} -> {position} is outside the captured items")
        self.items = [ExecItem(item.runner, list(item.bufs), dict(item.var_vals or {})) for item in items]
        self.input_slots = dict(input_slots)
        self.var_names = list(var_names)
        self.slots_by_item: dict[int, list[tuple[int, int]]] = {}
        for (item_index, buf_index), position in sorted(self.input_slots.items()):
            self.slots_by_item.setdefault(item_index, []).append((buf_index, position))
        for item_index, item in enumerate(self.items):
            for buf_index, buf in enumerate(item.bufs):
                if buf is not None and (item_index, buf_index) not in self.input_slots:
                    buf.ensure_allocated()
        self.item_vars: dict[int, tuple[str, ...]] = {}
        self.symbolic_items: set[int] = set()
        self.vals: dict[int, tuple[int, ...]] = {}
        self.launch_dims: dict[int, LaunchDims] = {}
        for index, item in enumerate(self.items):
            if isinstance(item.runner, CompiledRunner):
                program = item.runner.p
                self.item_vars[index] = tuple(program.vars)
                if program.has_symbolic_dims:
                    self.symbolic_items.add(index)
                if not program.vars or set(program.vars) <= set(item.var_vals or {}):
                    self.vals[index] = program.var_values(item.var_vals or {})
                if not program.has_symbolic_dims or set(program.vars) <= set(item.var_vals or {}):
                    self.launch_dims[index] = program.launch_dims(item.var_vals or {})
        estimates = sum((item.runner.estimates for item in self.items), Estimates())
        super().__init__(f"<batched {len(self.items)}>", device, estimates)
        self.kernel_count = sum(item.runner.kernel_count for item in self.items)

    @classmethod
    def supports(cls, item: ExecItem) -> bool:
        """Whether this runner can batch `item` (the base: kernels only)."""
        return isinstance(item.runner, CompiledRunner)

    def update(self, inputs: list[Buffer], var_vals: dict[str, int]) -> GraphUpdate:
        """Patch the items with `inputs` and `var_vals`; return what changed since the last call."""
        missing = [name for name in self.var_names if name not in var_vals]
        if missing:
            raise KeyError(f"{self.display_name}: missing values for variables {missing}")
        update = GraphUpdate(var_vals=dict(var_vals))
        for item_index, slots in self.slots_by_item.items():
            bufs = self.items[item_index].bufs
            for buf_index, position in slots:
                new = inputs[position]
                if bufs[buf_index] is not new:
                    bufs[buf_index] = new
                    update.buffers.append((item_index, buf_index, new))
        for item_index, names in self.item_vars.items():
            merged = {**(self.items[item_index].var_vals or {}), **var_vals}
            runner = self.items[item_index].runner
            assert isinstance(runner, CompiledRunner)
            if names:
                vals = runner.p.var_values(merged)
                if self.vals.get(item_index) != vals:
                    self.vals[item_index] = update.vals[item_index] = vals
            if item_index in self.symbolic_items:
                dims = runner.p.launch_dims(merged)
                if self.launch_dims.get(item_index) != dims:
                    self.launch_dims[item_index] = update.launch_dims[item_index] = dims
        return update

    def submit(self, update: GraphUpdate, wait: bool) -> float | None:
        """Apply `update` to the device graph and launch it; with `wait`, block and return seconds."""
        raise NotImplementedError(f"{type(self).__name__} does not implement submit")

    def __call__(self, inputs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        """Replay every item with `inputs` swapped in and `var_vals` bound."""
        return self.submit(self.update(inputs, var_vals), wait)


class SequentialGraphRunner(GraphRunner):
    """Replays the items one after another through their own runners (any runner that is not itself a graph)."""

    @classmethod
    def supports(cls, item: ExecItem) -> bool:
        """Any single runner can be replayed."""
        return not isinstance(item.runner, GraphRunner)

    def submit(self, update: GraphUpdate, wait: bool) -> float | None:
        """Run each item in order; the total time when `wait`."""
        total = 0.0
        for item in self.items:
            bufs = [buf.ensure_allocated() for buf in item.bufs if buf is not None]
            if len(bufs) != len(item.bufs):
                raise RuntimeError(f"{self.display_name}: {item.runner!r} has an unset buffer")
            elapsed = item.runner(bufs, {**(item.var_vals or {}), **update.var_vals}, wait=wait)
            total += elapsed or 0.0
        return total if wait else None
