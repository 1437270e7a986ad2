"""`TinyJit`: capture the kernels of one call of a function and replay them with new inputs; `CapturedJit`.

A `TinyJit`-wrapped function goes through three states:

1. **call 0** runs the function eagerly (inputs and outputs realized), so caches warm up and lazily created state
   (optimizer buffers, constants) exists before capture;
2. **call 1** captures: the function runs with `capture_exec_items(..., run=False)`, so every realize inside it
   records its `ExecItem`s instead of running them. The recorded program is then
   - checked (no kernels, an input argument written by the program: `JitError`),
   - pruned: kernels whose outputs nobody can observe are dropped (with ``prune=True`` kernels that do not depend
     on the inputs run once now and are dropped too),
   - memory planned as a whole with `memory_planner` (buffers only the captured program can see share memory),
   - batched: runs of kernels of a device with a `GraphRunner` (``Compiled.graph``) become one runner each,
     ``JIT_BATCH_SIZE`` kernels at most (default 64), everything else runs item by item,
   and finally run once with this call's inputs;
3. **later calls** replay: the inputs are realized, checked against the capture (shape, dtype, device, view,
   aliasing; a mismatch is a `JitError` naming the input, old vs new), swapped into the captured kernels by
   position, and the program runs. Variables bound at call time (``Variable("n", 1, 10).bind(5)`` passed as an
   argument, or symbolic views of input tensors) are passed as values, so one capture serves every value.

Decisions:

- **Inputs** are the Tensor arguments: positional and keyword, and one level inside lists, tuples and dicts. Other
  Python values are *not* inputs: they are baked into the capture (a changed int does not recapture). Inputs are
  realized before the call; a constant input (no buffer) is made contiguous first.
- **Outputs**: the function must return None, a Tensor, or a (possibly nested) tuple/list/dict of those; any other
  value raises `JitError` (a Python number computed from tensors would be frozen at its captured value). The
  returned tensors are backed by the JIT's own buffers: the next call overwrites them (copy what you keep, e.g.
  ``out.contiguous().realize()`` or ``out.numpy()``). Every replay tells the scheduler (`buffer_written`) about each
  buffer it writes, so graphs built on old outputs or on updated state never read a stale realized value.
- **State vs inputs**: buffers the function reads that are not inputs (model weights, optimizer state) are captured
  by identity; the program may update them (``w.assign(...)``, an optimizer step) and replays keep updating them.
  Writing into an *input argument* is a `JitError`: the next call would pass a different buffer.
- **Errors**: nested TinyJit (a TinyJit called while another captures), a function that launched no kernel,
  non-Tensor return values, changed inputs, reading a tensor's data inside the capture call.
- ``JIT=0`` runs the function eagerly on every call.

>>> from tinycore import Tensor, TinyJit
>>> @TinyJit
... def step(x):
...     return (x * 2 + 1).relu()
>>> [step(Tensor([1.0, -3.0])).tolist() for _ in range(3)][-1]  # doctest: +SKIP
[3.0, 0.0]
"""

from __future__ import annotations

import functools
import gc
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tinycore.device import Buffer
from tinycore.engine.exec_item import BufferCopy, CompiledRunner, ExecItem
from tinycore.engine.graph import GraphRunner
from tinycore.engine.memory import memory_planner
from tinycore.engine.realize import capture_exec_items
from tinycore.engine.schedule import buffer_of, buffer_written, new_buffer_uop
from tinycore.errors import JitError
from tinycore.helpers import JIT, ContextVar, GlobalCounters
from tinycore.uop.ops import GroupOp, Ops, UOp

__all__ = ["CapturedJit", "TinyJit", "jit_stats"]

ReturnType = TypeVar("ReturnType")

_MOVEMENT = GroupOp.Movement
JIT_BATCH_SIZE = ContextVar("JIT_BATCH_SIZE", 64)  # kernels per graph-runner batch (0: no graph runners)
_capturing: list[TinyJit] = []  # the TinyJits capturing right now (at most one: nesting is an error)


@dataclass
class JitStats:
    """Process-wide counters: `captures` (programs captured), `replays` (captured programs run)."""

    captures: int = 0
    replays: int = 0


jit_stats = JitStats()


# ---------------------------------------------------------------------------------------------------------------
# arguments -> inputs


def _arg_name(key: tuple[Any, ...]) -> str:
    """A readable name of an input key: ``argument 0``, ``argument 'x'``, ``argument 1[2]``, ``argument 'd'['k']``."""
    head = key[0]
    text = f"argument {head}" if isinstance(head, int) else f"argument {head!r}"
    return text + "".join(f"[{k!r}]" for k in key[1:])


def _collect(value: Any, key: tuple[Any, ...], tensors: list[Any], keys: list[tuple[Any, ...]], vals: dict[str, int],
             depth: int) -> None:  # fmt: skip
    from tinycore.tensor import Tensor

    if isinstance(value, Tensor):
        tensors.append(value)
        keys.append(key)
    elif isinstance(value, UOp):
        if value.op is Ops.BIND:
            var, bound = value.unbind()
            name = var.arg[0]
            if vals.setdefault(name, bound) != bound:
                raise JitError(f"variable {name!r} is bound to both {vals[name]} and {bound} in one call")
    elif depth == 0 and isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _collect(v, (*key, i), tensors, keys, vals, 1)
    elif depth == 0 and isinstance(value, dict):
        for k, v in value.items():
            _collect(v, (*key, k), tensors, keys, vals, 1)


def _inputs_of(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[list[Any], list[tuple[Any, ...]], dict[str, int]]:
    """The Tensor inputs of a call (positional, then keyword sorted by name; one level inside containers), their
    keys, and the values of Variables bound in the arguments."""
    tensors: list[Any] = []
    keys: list[tuple[Any, ...]] = []
    vals: dict[str, int] = {}
    for i, a in enumerate(args):
        _collect(a, (i,), tensors, keys, vals, 0)
    for name in sorted(kwargs):
        _collect(kwargs[name], (name,), tensors, keys, vals, 0)
    return tensors, keys, vals


def _unbind(arg: Any, vals: dict[str, int]) -> Any:
    """A movement arg with bound variables replaced by the variables (their values go to `vals`)."""
    if isinstance(arg, UOp):
        unbound, values = arg.unbind_all()
        for var, value in values.items():
            name = var.arg[0]
            if vals.setdefault(name, value) != value:
                raise JitError(f"variable {name!r} is bound to both {vals[name]} and {value} in one call")
        return unbound
    if isinstance(arg, tuple) and any(isinstance(a, (UOp, tuple)) for a in arg):
        return tuple(_unbind(a, vals) for a in arg)
    return arg


def _view_of(uop: UOp, vals: dict[str, int]) -> tuple[UOp, tuple[tuple[Ops, Any], ...]]:
    """(the BUFFER under `uop`'s movement ops, the movement chain from the buffer up, with variables unbound)."""
    chain: list[tuple[Ops, Any]] = []
    while uop.op in _MOVEMENT:
        chain.append((uop.op, _unbind(uop.arg, vals)))
        uop = uop.src[0]
    chain.reverse()
    return uop, tuple(chain)


def _realize_inputs(tensors: list[Any]) -> None:
    """Realize the inputs; an input without a buffer (a constant) is made contiguous so the program reads memory."""
    from tinycore.tensor import Tensor

    pending = [t for t in tensors if _base(t.uop).op is not Ops.BUFFER]
    if not pending:
        return
    Tensor.realize(*pending)
    for t in pending:
        if _base(t.uop).op is not Ops.BUFFER:
            t.uop = t.contiguous().realize().uop


def _base(u: UOp) -> UOp:
    while u.op in _MOVEMENT:
        u = u.src[0]
    return u


@dataclass(frozen=True)
class InputSpec:
    """What a captured program assumes about one input: `shape` (variables unbound), `dtype`, `device`, `size` of
    the buffer, and `view` (the movement chain from the buffer to the tensor)."""

    shape: tuple[Any, ...]
    dtype: Any
    device: str
    size: int
    view: tuple[tuple[Ops, Any], ...]

    def describe(self) -> str:
        """One line: ``shape (4,) float on CLANG``, with the view when the tensor is not the whole buffer."""
        view = f", view {[op.name for op, _ in self.view]} of a buffer of {self.size}" if self.view else ""
        return f"shape {self.shape} {self.dtype} on {self.device}{view}"


def _specs(tensors: list[Any], vals: dict[str, int]) -> tuple[list[InputSpec], list[Buffer], list[UOp]]:
    specs: list[InputSpec] = []
    bufs: list[Buffer] = []
    bases: list[UOp] = []
    for t in tensors:
        base, chain = _view_of(t.uop, vals)
        shape = tuple(_unbind(d, vals) if isinstance(d, UOp) else d for d in t.shape)
        specs.append(InputSpec(shape, t.dtype, t.device, base.arg, chain))
        bufs.append(buffer_of(base))
        bases.append(base)
    return specs, bufs, bases


def _alias_pattern(bufs: list[Buffer]) -> tuple[int, ...]:
    """For each input buffer, the position of the first input with the same buffer."""
    first: dict[int, int] = {}
    return tuple(first.setdefault(id(b), i) for i, b in enumerate(bufs))


# ---------------------------------------------------------------------------------------------------------------
# return values


def _flatten_ret(value: Any, out: list[Any], where: str) -> Any:
    """A template of the return structure with Tensors replaced by their index in `out`."""
    from tinycore.tensor import Tensor

    if value is None:
        return None
    if isinstance(value, Tensor):
        out.append(value)
        return ("T", len(out) - 1)
    if isinstance(value, (tuple, list)):
        items = tuple(_flatten_ret(v, out, f"{where}[{i}]") for i, v in enumerate(value))
        return ("L" if isinstance(value, list) else "U", items)
    if isinstance(value, dict):
        return ("D", tuple((k, _flatten_ret(v, out, f"{where}[{k!r}]")) for k, v in value.items()))
    raise JitError(
        f"a TinyJit function must return None, Tensors, or tuples/lists/dicts of them; {where} is a "
        f"{type(value).__name__} ({value!r:.60}). Its value would be frozen at capture: return it as a Tensor."
    )


def _build_ret(template: Any, tensors: list[Any]) -> Any:
    if template is None:
        return None
    kind, body = template
    if kind == "T":
        return tensors[body]
    if kind == "D":
        return {k: _build_ret(v, tensors) for k, v in body}
    items = [_build_ret(v, tensors) for v in body]
    return items if kind == "L" else tuple(items)


# ---------------------------------------------------------------------------------------------------------------
# what an exec item reads and writes


def _writes(item: ExecItem) -> list[int]:
    runner = item.runner
    if isinstance(runner, CompiledRunner):
        return list(runner.p.outs) if runner.p.outs else [0]
    if isinstance(runner, BufferCopy):
        return [0]
    return list(range(len(item.bufs)))


def _reads(item: ExecItem) -> list[int]:
    runner = item.runner
    if isinstance(runner, CompiledRunner):
        if runner.p.ins or runner.p.outs:
            return list(runner.p.ins)
        return list(range(1, len(item.bufs)))
    if isinstance(runner, BufferCopy):
        return [1]
    return list(range(len(item.bufs)))


# ---------------------------------------------------------------------------------------------------------------
# the captured program


@dataclass
class _Output:
    """How one returned tensor is rebuilt: from input `input_pos` (its base BUFFER) or from captured `buffer`
    (None with neither: a constant `uop`), through `chain`."""

    chain: tuple[tuple[Ops, Any], ...]
    device: str
    shape: tuple[Any, ...]
    input_pos: int | None = None
    buffer: Buffer | None = None
    uop: UOp | None = None  # the uop handed out (rebuilt in a new process for buffer outputs)


class CapturedJit:
    """A captured program: exec items with input slots, ready to replay on new input buffers.

    - `items`: the planned, pruned exec items (input slots hold None between calls);
    - `input_slots`: ``(item index, buffer index) -> input position``;
    - `specs`: the `InputSpec` of each input, `aliases` which inputs share a buffer;
    - `var_names`: variables that calls bind (arguments, symbolic views of inputs);
    - `written`: buffers outside the program that each replay writes (outputs, updated state).

    ``captured(input_buffers, var_vals)`` runs the program; it is picklable (kernels travel as compiled libraries,
    the captured state buffers with their contents, planned buffers are allocated again on load), so a program can
    be saved and replayed in a new process: ``TinyJit(captured=pickle.load(f))``.
    """

    def __init__(
        self,
        items: list[ExecItem],
        input_slots: dict[tuple[int, int], int],
        specs: list[InputSpec],
        keys: list[tuple[Any, ...]],
        aliases: tuple[int, ...],
        var_names: list[str],
        outputs: list[_Output],
        template: Any,
        written: list[Buffer],
        batch_size: int | None = None,
    ):
        self.items, self.input_slots, self.specs, self.keys = items, input_slots, specs, keys
        self.aliases, self.var_names, self.outputs, self.template = aliases, var_names, outputs, template
        self.written = written
        self.batch_size = batch_size if batch_size is not None else int(JIT_BATCH_SIZE.value)
        self._distinct = len(set(aliases)) == len(aliases)
        self._init_runtime()

    # ----- building the runners

    def _init_runtime(self) -> None:
        for (i, j), _ in self.input_slots.items():
            self.items[i].bufs[j] = None
        self.steps: list[Callable[[list[Buffer], dict[str, int]], None]] = []
        self.graphs: list[GraphRunner] = []
        self.kernel_count = sum(item.runner.kernel_count for item in self.items)
        start = 0
        while start < len(self.items):
            end, graph_cls = self._batch_from(start)
            if graph_cls is None:
                self.steps.append(self._direct_step(start))
                start += 1
                continue
            batch = self.items[start:end]
            slots = {(i - start, j): p for (i, j), p in self.input_slots.items() if start <= i < end}
            runner = graph_cls(batch[0].runner.device, batch, slots, list(self.var_names))
            self.graphs.append(runner)
            self.steps.append(self._graph_step(runner))
            start = end
        self._input_cache: list[tuple[UOp, InputSpec, Buffer, dict[str, int]]] = []
        self._concrete = [all(isinstance(d, int) for d in o.shape) for o in self.outputs]
        for out in self.outputs:
            if out.buffer is not None and out.uop is None:
                out.uop = _rebuild(new_buffer_uop(out.device, out.buffer.size, out.buffer.dtype, out.buffer), out.chain)

    def _batch_from(self, start: int) -> tuple[int, type[GraphRunner] | None]:
        """The end of the batch starting at `start` and the device's graph runner class (None: run directly)."""
        from tinycore.device import _device_lookup

        first = self.items[start]
        if self.batch_size <= 0 or not isinstance(first.runner, CompiledRunner):
            return start + 1, None
        graph_cls = getattr(_device_lookup(first.runner.device), "graph", None)
        if graph_cls is None or not graph_cls.supports(first):
            return start + 1, None
        end = start + 1
        while (
            end < len(self.items)
            and end - start < self.batch_size
            and self.items[end].runner.device == first.runner.device
            and graph_cls.supports(self.items[end])
        ):
            end += 1
        return end, graph_cls

    def _direct_step(self, index: int) -> Callable[[list[Buffer], dict[str, int]], None]:
        item = self.items[index]
        slots = [(j, p) for (i, j), p in self.input_slots.items() if i == index]

        def step(inputs: list[Buffer], var_vals: dict[str, int]) -> None:
            for j, p in slots:
                item.bufs[j] = inputs[p]
            try:
                item.run(var_vals)
            finally:
                for j, _ in slots:
                    item.bufs[j] = None

        return step

    @staticmethod
    def _graph_step(runner: GraphRunner) -> Callable[[list[Buffer], dict[str, int]], None]:
        count = runner.kernel_count

        def step(inputs: list[Buffer], var_vals: dict[str, int]) -> None:
            runner(inputs, var_vals)
            GlobalCounters.kernel_count += count

        return step

    # ----- running

    def __call__(self, inputs: list[Buffer], var_vals: dict[str, int]) -> None:
        """Run the program with `inputs` (one buffer per input position) and `var_vals`."""
        for buf in inputs:
            if not buf.is_allocated():
                buf.ensure_allocated()
        for step in self.steps:
            step(inputs, var_vals)
        for buf in self.written:
            buffer_written(buf)
        jit_stats.replays += 1

    def check(self, specs: list[InputSpec], bufs: list[Buffer], keys: list[tuple[Any, ...]]) -> None:
        """Raise `JitError` when a call's inputs do not match the capture (naming the input, old vs new)."""
        if specs == self.specs and (len(bufs) < 2 or _alias_pattern(bufs) == self.aliases):
            return
        if len(specs) != len(self.specs) or keys != self.keys:
            raise JitError(
                f"TinyJit was captured with {len(self.specs)} tensor input(s) at {[_arg_name(k) for k in self.keys]}, "
                f"called with {len(specs)} at {[_arg_name(k) for k in keys]}"
            )
        for key, old, new in zip(keys, self.specs, specs):
            if old != new:
                what = [
                    field
                    for field in ("shape", "dtype", "device", "view", "size")
                    if getattr(old, field) != getattr(new, field)
                ]
                raise JitError(
                    f"TinyJit input {_arg_name(key)} changed {'/'.join(what)}: captured with {old.describe()}, "
                    f"called with {new.describe()} (use a new TinyJit, or call reset(), for a different input)"
                )
        new_aliases = _alias_pattern(bufs)
        if new_aliases != self.aliases:
            pairs = [
                (_arg_name(keys[i]), _arg_name(keys[a]))
                for i, (a, b) in enumerate(zip(self.aliases, new_aliases))
                if a != b or b != i
            ]
            raise JitError(
                f"TinyJit inputs share buffers differently than at capture ({pairs}): captured aliasing "
                f"{self.aliases}, now {new_aliases}"
            )

    def returned(self, tensors: list[Any]) -> Any:
        """The return value of a replay, rebuilt around the program's buffers (and this call's input tensors)."""
        from tinycore.tensor import _wrap

        out: list[Any] = []
        for o, concrete in zip(self.outputs, self._concrete):
            uop = _rebuild(_base(tensors[o.input_pos].uop), o.chain) if o.input_pos is not None else o.uop
            assert uop is not None
            out.append(_wrap(uop, o.device, o.shape if concrete else None))
        if self.template == ("T", 0):
            return out[0]
        return _build_ret(self.template, out)

    # ----- pickling

    def __getstate__(self) -> dict[str, Any]:
        table: dict[int, int] = {}
        records: list[tuple[Any, ...]] = []

        def ref(buf: Buffer | None) -> int | None:
            if buf is None:
                return None
            index = table.get(id(buf))
            if index is not None:
                return index
            base = ref(buf.base) if buf.base is not buf else None
            data = None
            if base is None and buf.is_allocated() and id(buf) not in self._fresh_ids():
                data = bytes(buf.as_buffer(allow_zero_copy=False))
            index = table[id(buf)] = len(records)
            records.append((buf.device, buf.size, buf.dtype, base, buf.offset, data))
            return index

        items = [(item.runner, [ref(b) for b in item.bufs], dict(item.var_vals or {})) for item in self.items]
        outputs = [(o.chain, o.device, o.shape, o.input_pos, ref(o.buffer), o.uop if o.buffer is None else None)
                   for o in self.outputs]  # fmt: skip
        return {
            "buffers": records,
            "items": items,
            "input_slots": self.input_slots,
            "specs": self.specs,
            "keys": self.keys,
            "aliases": self.aliases,
            "var_names": self.var_names,
            "outputs": outputs,
            "template": self.template,
            "written": [ref(b) for b in self.written],
            "batch_size": self.batch_size,
        }

    def _fresh_ids(self) -> set[int]:
        """Ids of buffers whose contents need not travel: outputs and memory planned internals."""
        return getattr(self, "_no_data", set())

    def __setstate__(self, state: dict[str, Any]) -> None:
        bufs: list[Buffer] = []
        for device, size, dtype, base, offset, data in state["buffers"]:
            if base is not None:
                bufs.append(Buffer(device, size, dtype, base=bufs[base], offset=offset))
            else:
                buf = Buffer(device, size, dtype)
                if data is not None:
                    buf.copyin(memoryview(data))
                bufs.append(buf)

        def get(index: int | None) -> Buffer | None:
            return None if index is None else bufs[index]

        self.items = [ExecItem(runner, [get(b) for b in refs], vals) for runner, refs, vals in state["items"]]
        self.input_slots, self.specs, self.keys = state["input_slots"], state["specs"], state["keys"]
        self.aliases, self.var_names, self.template = state["aliases"], state["var_names"], state["template"]
        self.outputs = [
            _Output(chain, dev, shape, pos, get(b), uop) for chain, dev, shape, pos, b, uop in state["outputs"]
        ]
        self.written = [b for b in (get(i) for i in state["written"]) if b is not None]
        self.batch_size = state["batch_size"]
        self._distinct = len(set(self.aliases)) == len(self.aliases)
        self._init_runtime()


def _rebuild(base: UOp, chain: tuple[tuple[Ops, Any], ...]) -> UOp:
    u = base
    for op, arg in chain:
        u = UOp(op, u.dtype, (u,), arg)
    return u


# ---------------------------------------------------------------------------------------------------------------
# capture


def _written_bases(items: list[ExecItem]) -> Iterator[tuple[int, Buffer]]:
    for index, item in enumerate(items):
        for j in _writes(item):
            buf = item.bufs[j]
            if buf is not None:
                yield index, buf


def _drop_private_buffers(items: list[ExecItem], keep: list[Buffer]) -> set[int]:
    """Replace every buffer that only the captured items reference (nothing outside can see it) by a fresh,
    unallocated buffer of the same spec, so the memory planner may place it; returns the ids of the fresh ones.

    Liveness is decided by letting go of the items' references and seeing which buffers survive (a weak
    reference): conservative by construction, a buffer anyone still holds is never planned."""
    keep_ids = {id(b) for b in keep}
    layout: list[list[int]] = []
    specs: dict[int, tuple[str, int, Any]] = {}
    refs: dict[int, weakref.ReferenceType[Buffer]] = {}
    for item in items:
        ids = []
        for b in item.bufs:
            assert b is not None
            ids.append(id(b))
            if id(b) not in refs and id(b) not in keep_ids and not b.is_allocated():
                specs[id(b)] = (b.device, b.size, b.dtype)
                refs[id(b)] = weakref.ref(b)
        layout.append(ids)
    if not refs:
        return set()
    strong: dict[int, Buffer] = {id(b): b for item in items for b in item.bufs if id(b) not in refs}  # type: ignore
    for item in items:
        item.bufs = []
    b = None  # noqa: F841 - drop the loop variable's reference
    gc.collect()
    fresh: dict[int, Buffer] = {}
    for key, r in refs.items():
        alive = r()
        if alive is not None:
            strong[key] = alive
        else:
            fresh[key] = strong[key] = Buffer(*specs[key])
    for item, ids in zip(items, layout):
        item.bufs = [strong[k] for k in ids]
    return {id(buf) for buf in fresh.values()}


def _prune_unused(items: list[ExecItem], private: set[int]) -> list[ExecItem]:
    """Drop items that only write private buffers no later item reads."""
    needed: set[int] = set()
    kept: list[ExecItem] = []
    for item in reversed(items):
        outs = [item.bufs[j] for j in _writes(item)]
        if any(id(b) not in private or id(b) in needed for b in outs):
            kept.append(item)
            needed.update(id(item.bufs[j]) for j in _reads(item))
    kept.reverse()
    return kept


def _prune_onetime(items: list[ExecItem], inputs: list[Buffer], var_names: list[str]) -> list[ExecItem]:
    """Run the items that do not depend on the inputs (nor on variables, nor on buffers the program writes
    again) once now, and drop them."""
    varying = {id(b.base) for b in inputs}
    writes_count: dict[int, int] = {}
    for _, buf in _written_bases(items):
        writes_count[id(buf.base)] = writes_count.get(id(buf.base), 0) + 1
    kept: list[ExecItem] = []
    onetime: list[ExecItem] = []
    for item in items:
        reads = {id(item.bufs[j].base) for j in _reads(item)}  # type: ignore[union-attr]
        outs = {id(item.bufs[j].base) for j in _writes(item)}  # type: ignore[union-attr]
        uses_vars = isinstance(item.runner, CompiledRunner) and bool(set(item.runner.p.vars) & set(var_names))
        constant = (
            not uses_vars and not (reads & varying) and not (reads & outs) and all(writes_count[o] == 1 for o in outs)
        )
        if constant:
            onetime.append(item)
        else:
            kept.append(item)
            varying |= outs
    for item in onetime:
        item.run()
    return kept


class TinyJit(Generic[ReturnType]):
    """Capture the kernels of a function once and replay them: ``@TinyJit def step(x, y): ...``.

    Call 0 runs eagerly, call 1 captures, later calls replay (see the module docstring). Works on methods too
    (one capture shared by all instances). ``prune=True`` also runs kernels that do not depend on the inputs once at
    capture and drops them from replays. ``TinyJit(captured=...)`` replays an unpickled `CapturedJit`.

    `cnt` counts calls, `captured` is the `CapturedJit` once there is one; `reset()` forgets it.
    """

    def __init__(
        self, fn: Callable[..., ReturnType] | None = None, captured: CapturedJit | None = None, prune: bool = False
    ):
        if fn is None and captured is None:
            raise ValueError("TinyJit needs a function or a captured program")
        self.fn, self.captured, self.prune = fn, captured, prune
        self.cnt = 2 if captured is not None else 0
        if fn is not None:
            functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def reset(self) -> None:
        """Forget the capture: the next call runs eagerly again, the one after captures."""
        if self.fn is None:
            raise JitError("this TinyJit has no function to capture again (it was built from a captured program)")
        self.captured, self.cnt = None, 0

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)

    def __reduce__(self) -> tuple[Any, ...]:
        return TinyJit, (self.fn, self.captured, self.prune)

    def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
        if _capturing:
            raise JitError(
                f"TinyJit {self._name()} was called while TinyJit {_capturing[-1]._name()} is capturing: nested "
                "TinyJits are not supported (call the inner function undecorated)"
            )
        if not JIT:
            assert self.fn is not None, "a TinyJit built from a captured program can't run eagerly"
            return self.fn(*args, **kwargs)
        tensors, keys, var_vals = _inputs_of(args, kwargs)
        _realize_inputs(tensors)
        if self.cnt >= 2 and self.captured is not None:
            return self._replay(tensors, keys, var_vals)
        if self.cnt == 0:
            assert self.fn is not None
            ret = self.fn(*args, **kwargs)
            outs: list[Any] = []
            _flatten_ret(ret, outs, "the return value")
            if outs:
                outs[0].realize(*outs[1:])
            self.cnt = 1
            return ret
        ret = self._capture(args, kwargs, tensors, keys, var_vals)
        self.cnt = 2
        return ret

    def _name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))

    def _replay(self, tensors: list[Any], keys: list[tuple[Any, ...]], var_vals: dict[str, int]) -> ReturnType:
        captured = self.captured
        assert captured is not None
        cache = captured._input_cache
        if len(cache) == len(tensors) and all(c[0] is t.uop for c, t in zip(cache, tensors)):
            specs = [c[1] for c in cache]  # the same uops as last call: same specs, buffers and variable values
            bufs = [c[2] for c in cache]
            for c in cache:
                if c[3]:
                    var_vals.update(c[3])
        else:
            specs, bufs = [], []
            entries = []
            for t in tensors:
                own: dict[str, int] = {}
                (spec,), (buf,), _ = _specs([t], own)
                for name, value in own.items():
                    if var_vals.setdefault(name, value) != value:
                        raise JitError(f"variable {name!r} is bound to both {var_vals[name]} and {value} in one call")
                specs.append(spec)
                bufs.append(buf)
                entries.append((t.uop, spec, buf, own))
            captured._input_cache = entries
        captured.check(specs, bufs, keys)
        captured(bufs, var_vals)
        self.cnt += 1
        return captured.returned(tensors)

    def _capture(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        tensors: list[Any],
        keys: list[tuple[Any, ...]],
        var_vals: dict[str, int],
    ) -> ReturnType:
        assert self.fn is not None
        specs, in_bufs, _ = _specs(tensors, var_vals)
        items: list[ExecItem] = []
        _capturing.append(self)
        try:
            with capture_exec_items(items.append, run=False):
                try:
                    ret = self.fn(*args, **kwargs)
                except RuntimeError as error:
                    if "holds no data yet" in str(error):
                        raise JitError(
                            f"TinyJit {self._name()} read a tensor's data while capturing ({error}): values "
                            "read in Python during capture would be frozen; return them as Tensors instead"
                        ) from error
                    raise
                out_tensors: list[Any] = []
                template = _flatten_ret(ret, out_tensors, "the return value")
                if out_tensors:
                    out_tensors[0].realize(*out_tensors[1:])
        finally:
            _capturing.pop()
        del ret
        if not items:
            raise JitError(
                f"TinyJit {self._name()} launched no kernels while capturing: nothing to replay (its outputs are "
                "inputs or constants); call the function without TinyJit"
            )
        captured = self._build(items, tensors, keys, specs, in_bufs, var_vals, out_tensors, template)
        self.captured = captured
        jit_stats.captures += 1
        captured(in_bufs, var_vals)
        return _build_ret(template, out_tensors)

    def _build(
        self,
        items: list[ExecItem],
        tensors: list[Any],
        keys: list[tuple[Any, ...]],
        specs: list[InputSpec],
        in_bufs: list[Buffer],
        var_vals: dict[str, int],
        out_tensors: list[Any],
        template: Any,
    ) -> CapturedJit:
        # inputs must not be written by the program
        in_bases = {id(b.base): i for i, b in enumerate(in_bufs)}
        for index, buf in _written_bases(items):
            pos = in_bases.get(id(buf.base))
            if pos is not None:
                raise JitError(
                    f"TinyJit {self._name()} writes into its input {_arg_name(keys[pos])} (kernel {index}: "
                    f"{items[index].runner.display_name}): an input argument can't be assigned inside a TinyJit. "
                    "Keep state you update (weights, optimizer buffers) outside the arguments."
                )
        # outputs
        outputs: list[_Output] = []
        out_bufs: list[Buffer] = []
        in_ids = {id(b): i for i, b in enumerate(in_bufs)}
        for t in out_tensors:
            base, chain = _view_of(t.uop, {})
            shape = tuple(t.shape)
            if base.op is not Ops.BUFFER:
                outputs.append(_Output(chain, t.device, shape, uop=t.uop))
                continue
            buf = buffer_of(base)
            pos = in_ids.get(id(buf))
            if pos is not None and _base(tensors[pos].uop) is base:
                outputs.append(_Output(chain, t.device, shape, input_pos=pos))
                continue
            outputs.append(_Output(chain, t.device, shape, buffer=buf, uop=t.uop))
            out_bufs.append(buf)
        # buffers only the program can see: fresh ones, pruned and memory planned
        private = _drop_private_buffers(items, [*in_bufs, *out_bufs])
        items = _prune_unused(items, private)
        var_names = sorted(var_vals)
        if self.prune:
            items = _prune_onetime(items, in_bufs, var_names)
            if not items:
                raise JitError(f"TinyJit {self._name()}: no kernel depends on the inputs; nothing to replay")
        steps = [item.bufs for item in items]
        plan = memory_planner(steps, keep=[b for bufs in steps for b in bufs if b is not None and id(b) not in private])
        for item in items:
            item.bufs = [plan.get(b, b) if b is not None else None for b in item.bufs]  # type: ignore[arg-type]
        # input slots, by buffer identity
        input_slots: dict[tuple[int, int], int] = {}
        for i, item in enumerate(items):
            for j, b in enumerate(item.bufs):
                pos = in_ids.get(id(b))
                if pos is not None:
                    input_slots[(i, j)] = pos
        planned = {id(b) for b in plan.values()} | {id(b.base) for b in plan.values()}
        written: dict[int, Buffer] = {}
        for _, buf in _written_bases(items):
            if id(buf) not in private and id(buf) not in planned and id(buf.base) not in in_bases:
                written.setdefault(id(buf.base), buf.base)
        captured = CapturedJit(
            items,
            input_slots,
            specs,
            keys,
            _alias_pattern(in_bufs),
            var_names,
            outputs,
            template,
            list(written.values()),
        )
        captured._no_data = private | planned | {id(b) for b in out_bufs}  # type: ignore[attr-defined]
        return captured
