"""`GraphRunner`: replay a captured list of `ExecItem`s as one submission, patching only what changes.

The base class does the bookkeeping every device needs; a device's runner (CUDA graphs, Metal indirect command
buffers, one C function on CPU) builds its native graph in ``__init__`` from `items` and implements `submit`,
which receives a `GraphUpdate` naming exactly the buffer pointers, variable values and launch dims that changed
since the previous submission. `SequentialGraphRunner` replays the items one by one (tests, the PYTHON device).

`resubmit()` replays with the previous call's inputs and values (the TinyJit fast path, when a call's arguments are
identical to the last one's); the base submits an update with no changes, a device may override it with a cheaper
launch. `update` recomputes variable-dependent values only when the variable values changed.
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

    def changed_items(self) -> list[int]:
        """The indices of the items whose buffers, variable values or launch dims changed, in order (the nodes a
        device graph patches)."""
        return sorted({i for i, _, _ in self.buffers} | set(self.vals) | set(self.launch_dims))


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
        # flat lists for `update`: every input slot, and the items whose variables or launch dims depend on a call
        self._slot_list = [(i, j, p) for i, slots in sorted(self.slots_by_item.items()) for j, p in slots]
        self._var_items = [
            (index, names, index in self.symbolic_items, self.items[index])
            for index, names in self.item_vars.items()
            if names or index in self.symbolic_items
        ]
        self._last_var_vals: dict[str, int] | None = None
        estimates = sum((item.runner.estimates for item in self.items), Estimates())
        super().__init__(f"<batched {len(self.items)}>", device, estimates)
        self.kernel_count = sum(item.runner.kernel_count for item in self.items)

    family: str = ""
    """The device family whose kernels this runner batches (``"CUDA"``); '' batches kernels of any device."""

    @classmethod
    def supports(cls, item: ExecItem) -> bool:
        """Whether this runner can batch `item`: a compiled kernel (of `family`'s devices when it is set); copies and
        other runners run outside the graph."""
        runner = item.runner
        return isinstance(runner, CompiledRunner) and (not cls.family or runner.device.partition(":")[0] == cls.family)

    def update(self, inputs: list[Buffer], var_vals: dict[str, int]) -> GraphUpdate:
        """Patch the items with `inputs` and `var_vals`; return what changed since the last call.

        Variable-dependent values are recomputed only when `var_vals` differ from the previous call's."""
        for name in self.var_names:
            if name not in var_vals:
                missing = [n for n in self.var_names if n not in var_vals]
                raise KeyError(f"{self.display_name}: missing values for variables {missing}")
        update = GraphUpdate(var_vals=dict(var_vals))
        items = self.items
        for item_index, buf_index, position in self._slot_list:
            new = inputs[position]
            bufs = items[item_index].bufs
            if bufs[buf_index] is not new:
                bufs[buf_index] = new
                update.buffers.append((item_index, buf_index, new))
        if self._var_items and var_vals != self._last_var_vals:
            for item_index, names, symbolic, item in self._var_items:
                merged = {**item.var_vals, **var_vals} if item.var_vals else var_vals
                program = item.runner.p  # type: ignore[attr-defined]
                if names:
                    vals = program.var_values(merged)
                    if self.vals.get(item_index) != vals:
                        self.vals[item_index] = update.vals[item_index] = vals
                if symbolic:
                    dims = program.launch_dims(merged)
                    if self.launch_dims.get(item_index) != dims:
                        self.launch_dims[item_index] = update.launch_dims[item_index] = dims
        self._last_var_vals = update.var_vals
        return update

    def submit(self, update: GraphUpdate, wait: bool) -> float | None:
        """Apply `update` to the device graph and launch it; with `wait`, block and return seconds."""
        raise NotImplementedError(f"{type(self).__name__} does not implement submit")

    def __call__(self, inputs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        """Replay every item with `inputs` swapped in and `var_vals` bound."""
        return self.submit(self.update(inputs, var_vals), wait)

    def resubmit(self, wait: bool = False) -> float | None:
        """Replay again with the inputs and variable values of the previous call (nothing to patch).

        Subclasses may override it with a cheaper launch; the base submits an update with no changes."""
        if self._last_var_vals is None:
            raise RuntimeError(f"{self.display_name}: resubmit() before the first call")
        return self.submit(GraphUpdate(var_vals=self._last_var_vals), wait)


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
