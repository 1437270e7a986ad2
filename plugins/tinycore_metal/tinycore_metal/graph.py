"""`MetalGraph`: a TinyJit capture replayed from one Metal indirect command buffer (ICB).

On the first submission (when every input buffer is known) each captured kernel becomes one concurrent-dispatch
command of the ICB: its pipeline, its buffers, its launch dims and a barrier (the JIT batches kernels that run in
capture order). Variables can't be set as bytes on an indirect command, so every kernel's variables live in one
small shared buffer of the graph (`var_buffer`), bound to each command at that kernel's slot.

A replay patches, never rebuilds: a swapped input buffer is re-bound on the commands that read it
(``setKernelBuffer``), new variable values are written into `var_buffer` (zero-copy), new symbolic launch dims are
re-dispatched on their command. Before patching, the previous replay is waited for (the GPU may still be reading the
ICB and the variables). Each replay is one command buffer with one compute encoder that makes every buffer resident
(``useResources``) and executes the ICB. `submissions` counts replays, `patched` the command updates.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from tinycore.sdk import Device, ExecItem, GraphRunner, GraphUpdate, grid_and_block

if TYPE_CHECKING:
    from tinycore_metal.device import MetalDevice

_VALUE_FORMATS = {"int": "<i", "long": "<q"}
_SLOT = 8  # bytes per variable in `var_buffer` (int and long alike: every slot 8-byte aligned)


class MetalGraph(GraphRunner):
    """``MetalGraph(device, items, input_slots, var_names)``: `items` (Metal kernels) as one indirect command buffer.

    `commands` are the ICB's commands in capture order; `var_offsets[i]` the byte offsets of item ``i``'s variables in
    `var_buffer`."""

    family = "METAL"

    def __init__(
        self, device: str, items: list[ExecItem], input_slots: dict[tuple[int, int], int], var_names: list[str]
    ):
        super().__init__(device, items, input_slots, var_names)
        self.gpu: MetalDevice = Device[device]
        self.icb: Any = None  # built on the first submission, when every input buffer is known
        self.commands: list[Any] = []
        self.var_offsets: list[list[int]] = []
        count = 0
        for index in range(len(self.items)):
            names = self.item_vars.get(index, ())
            self.var_offsets.append([_SLOT * (count + k) for k in range(len(names))])
            count += len(names)
        self.var_buffer: Any = self.gpu.api.new_buffer(self.gpu.mtl, max(_SLOT * count, _SLOT)) if count else None
        self.var_bytes = _SLOT * count
        self.last: Any = None  # the command buffer of the previous replay
        self.submissions = self.patched = 0

    def _program(self, index: int) -> Any:
        return self.items[index].runner.program  # type: ignore[attr-defined]

    def _bind_buffers(self, index: int) -> None:
        """Bind every buffer of item `index` to its command."""
        cmd = self.commands[index]
        for slot, buf in enumerate(self.items[index].bufs):
            handle = buf.ensure_allocated().opaque  # type: ignore[union-attr]
            self.gpu.api.icb_set_buffer(cmd, handle.buf, handle.offset, slot)

    def _dispatch(self, index: int) -> None:
        """Set the launch dims of item `index` on its command (checked against its pipeline's limit)."""
        grid, block = grid_and_block(*self.launch_dims[index])
        self._program(index).check_block(block)
        self.gpu.api.icb_dispatch(self.commands[index], grid, block)

    def _write_vals(self, index: int) -> None:
        """Write item `index`'s variable values into `var_buffer`."""
        if not self.var_offsets[index]:
            return
        memory = self.gpu.api.buffer_memory(self.var_buffer, self.var_bytes)
        program = self._program(index)
        kinds = program.kinds[len(self.items[index].bufs) :]
        for offset, kind, value in zip(self.var_offsets[index], kinds, self.vals[index]):
            struct.pack_into(_VALUE_FORMATS[kind], memory, offset, int(value))

    def _build(self) -> None:
        """One command per item: pipeline, buffers, variables, launch dims, barrier."""
        api = self.gpu.api
        self.icb = api.new_icb(self.gpu.mtl, len(self.items))
        for index, item in enumerate(self.items):
            cmd = api.icb_command(self.icb, index)
            self.commands.append(cmd)
            api.icb_set_pipeline(cmd, self._program(index).pipeline)
            self._bind_buffers(index)
            for k, offset in enumerate(self.var_offsets[index]):
                api.icb_set_buffer(cmd, self.var_buffer, offset, len(item.bufs) + k)
            self._write_vals(index)
            self._dispatch(index)
            api.icb_barrier(cmd)

    def resources(self) -> list[Any]:
        """Every Metal buffer the commands use (once each), the variables' buffer included."""
        seen: dict[int, Any] = {}
        for item in self.items:
            for buf in item.bufs:
                handle = buf.ensure_allocated().opaque  # type: ignore[union-attr]
                seen.setdefault(id(handle.buf), handle.buf)
        if self.var_buffer is not None:
            seen.setdefault(id(self.var_buffer), self.var_buffer)
        return list(seen.values())

    def submit(self, update: GraphUpdate, wait: bool) -> float | None:
        """Patch what changed, then execute the ICB in one command buffer; with `wait`, its GPU time in seconds."""
        api = self.gpu.api
        if self.icb is None:
            self._build()
        else:
            changed = update.changed_items()
            if changed:
                self.gpu.synchronize()  # the previous replay must be done before its commands change
            for index in sorted({i for i, _, _ in update.buffers}):
                self._bind_buffers(index)
            for index in sorted(update.vals):
                self._write_vals(index)
            for index in sorted(update.launch_dims):
                self._dispatch(index)
            self.patched += len(changed)
        cb = api.command_buffer(self.gpu.queue)
        enc = api.compute_encoder(cb)
        api.use_resources(enc, self.resources())
        api.execute_icb(enc, self.icb, len(self.items))
        api.end_encoding(enc)
        self.last = cb
        self.submissions += 1
        return self.gpu.submit(cb, f"a graph of {len(self.items)} kernels", wait)
