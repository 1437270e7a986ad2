"""`TinyJit`: capture the kernels of one call of a function and replay them with new inputs; `CapturedJit`.

A `TinyJit`-wrapped function goes through three states:

1. **call 0** runs the function eagerly (inputs and outputs realized), so caches warm up and lazily created state
   (optimizer buffers, constants) exists before capture;
2. **call 1** captures: the function runs with `capture_exec_items(..., run=False)`, so every realize inside it
   records its `ExecItem`s instead of running them. The recorded program is then
   - checked (no kernels, an input argument written by the program: `JitError`),
   - pruned: kernels whose outputs nobody can observe are dropped (with ``prune=True`` kernels that do not depend
     on the inputs run once now and are dropped too),
   - grouped by device when it spans several (sharded inputs): each device's kernels are moved together where no
     buffer dependency forbids it, so every device replays one graph per dependency level, not one per kernel,
   - memory planned as a whole with `memory_planner` (buffers only the captured program can see share memory),
   - batched: runs of kernels of a device with a `GraphRunner` (``Compiled.graph``) become one runner each,
     ``JIT_BATCH_SIZE`` kernels at most (default 64), everything else runs item by item,
   and finally run once with this call's inputs;
3. **later calls** replay: the inputs are realized, checked against the capture (shape, dtype, device, view,
   aliasing, sharding; a mismatch is a `JitError` naming the input, old vs new), swapped into the captured kernels
   by position, and the program runs. Variables bound at call time (``Variable("n", 1, 10).bind(5)`` passed as an
   argument, or symbolic views of input tensors) are passed as values, so one capture serves every value; returned
   tensors of symbolic shape carry this call's values.

   **Fast path**: when every positional argument is identical to the last replay's (the same Tensor uops, the same
   bound Variables; no keyword arguments, no containers, which may change in place), nothing is realized, checked
   or re-packed: graph runners `resubmit` their tables as they are. What a new input uop means (specs, buffers,
   variable values) is cached per uop (weakly), so alternating between a few inputs stays cheap too.

Decisions:

- **Inputs** are the Tensor arguments: positional and keyword, and one level inside lists, tuples and dicts. Other
  Python values are *not* inputs: they are baked into the capture (a changed int does not recapture). Inputs are
  realized before the call; a constant input (no buffer) is made contiguous first. A sharded input
  (``Tensor.shard``) is one input per shard, keyed ``argument 0[shard 1]``; its axis and device tuple must stay.
- **Outputs**: the function must return None, a Tensor, or a (possibly nested) tuple/list/dict of those; any other
  value raises `JitError` (a Python number computed from tensors would be frozen at its captured value). The
  returned tensors are backed by the JIT's own buffers: the next call overwrites them (copy what you keep, e.g.
  ``out.contiguous().realize()`` or ``out.numpy()``). Every replay tells the scheduler (`buffer_written`) about each
  buffer it writes, so graphs built on old outputs or on updated state never read a stale realized value.
- **State vs inputs**: buffers the function reads that are not inputs (model weights, optimizer state) are captured
  by identity; the program may update them (``w.assign(...)``, an optimizer step) and replays keep updating them.
  Writes the function leaves lazy (an ``assign`` whose result it never realizes) are realized when it returns,
  with its outputs, so they are part of the capture.
  Writing into an *input argument* is a `JitError`: the next call would pass a different buffer.
- **Errors**: nested TinyJit (a TinyJit called while another captures), a function that launched no kernel,
  non-Tensor return values, changed inputs, reading a tensor's data inside the capture call.
- **Threads**: each call holds `tinycore.helpers.REALIZE_LOCK` (as `Tensor.realize` does), so TinyJits called from
  several threads run one call at a time; a jitted function must not wait for another thread that realizes.
  Returned tensors are the JIT's own buffers, overwritten by the next call from any thread.
- ``JIT=0`` runs the function eagerly on every call.

>>> from tinycore import Tensor, TinyJit
>>> @TinyJit
... def step(x):
...     return (x * 2 + 1).relu()
>>> [step(Tensor([1.0, -3.0])).tolist() for _ in range(3)][-1]  # doctest: +SKIP
[3.0, 0.0]
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from tinycore.device import Buffer
from tinycore.engine.exec_item import BufferCopy, CompiledRunner, ExecItem
from tinycore.engine.graph_runner import GraphRunner
from tinycore.engine.memory import memory_planner
from tinycore.engine.multi import multi_uop
from tinycore.engine.realize import capture_exec_items
from tinycore.engine.schedule import buffer_of, buffer_written, new_buffer_uop
from tinycore.errors import JitError
from tinycore.helpers import CAPTURING, JIT, REALIZE_LOCK, ContextVar, GlobalCounters
from tinycore.uop.ops import GroupOp, Ops, UOp

__all__ = ["CapturedJit", "TinyJit", "jit_stats"]

_lock_acquire, _lock_release = REALIZE_LOCK.acquire, REALIZE_LOCK.release

ReturnType = TypeVar("ReturnType")

_MOVEMENT = GroupOp.Movement
JIT_BATCH_SIZE = ContextVar("JIT_BATCH_SIZE", 64)  # kernels per graph-runner batch (0: no graph runners)
_capturing: list[TinyJit] = []  # the TinyJits capturing right now (at most one: nesting is an error)
_assigned: list[dict[int, Any]] = []  # per TinyJit call running its function (innermost last): tensors it assigned


def note_assign(tensor: Any) -> None:
    """Called by ``Tensor.assign``: the TinyJit call running now (if any) realizes `tensor` when its function
    returns. A write left lazy inside the function (``w.assign(w - lr * w.grad)`` with only the loss realized)
    would otherwise launch no kernel during the capture, and every replay would silently skip the update."""
    if _assigned:
        _assigned[-1][id(tensor)] = tensor


def _run_recording_assigns(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list]:
    """``fn(*args, **kwargs)`` and the tensors it assigned that are still lazy (writes not yet realized)."""
    _assigned.append({})
    try:
        ret = fn(*args, **kwargs)
    finally:
        assigned = _assigned.pop()
    return ret, [t for t in assigned.values() if not _buffer_backed(t.uop)]


@dataclass
class JitStats:
    """Process-wide counters: `captures` (programs captured), `replays` (captured programs run)."""

    captures: int = 0
    replays: int = 0


jit_stats = JitStats()


# ---------------------------------------------------------------------------------------------------------------
# arguments -> inputs


def _unit_keys(key: tuple[Any, ...], count: int) -> list[tuple[Any, ...]]:
    """The keys of the `count` shards of the sharded input at `key`."""
    return [(*key, _ShardKey(k)) for k in range(count)]


def _arg_name(key: tuple[Any, ...]) -> str:
    """A readable name of an input key: ``argument 0``, ``argument 'x'``, ``argument 1[2]``, ``argument 'd'['k']``."""
    head = key[0]
    text = f"argument {head}" if isinstance(head, int) else f"argument {head!r}"
    return text + "".join(f"[{k!r}]" for k in key[1:])


def _collect(value: Any, key: tuple[Any, ...], tensors: list[Any], keys: list[tuple[Any, ...]], vals: dict[str, int],
             depth: int) -> None:  # fmt: skip
    if isinstance(value, _tensor_class()):
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


class _FrontEnd:
    """The front end's tensor type and its constructor from a uop (``wrap(uop, device, shape)``). The engine sits
    below the front end and does not import it: `tinycore.frontend.tensor` installs both with `register_tensor_type`
    when it is imported, which is before any tensor (and so any TinyJit call with one) can exist."""

    tensor: type | None = None
    wrap: Callable[[UOp, str, tuple[Any, ...] | None], Any] | None = None


def register_tensor_type(tensor: type, wrap: Callable[[UOp, str, tuple[Any, ...] | None], Any]) -> None:
    """Tell the JIT which class is a tensor (its inputs and return values) and how to build one around a uop."""
    _FrontEnd.tensor, _FrontEnd.wrap = tensor, wrap


def _tensor_class() -> type:
    """The front end's tensor class (see `_FrontEnd`)."""
    if _FrontEnd.tensor is None:
        raise JitError("TinyJit needs the tensor front end: import tinycore.tensor (or tinycore) first")
    return _FrontEnd.tensor


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


class _Untrackable:
    """Marks an argument `replay_unchanged` can't compare by identity (a container: its contents may change)."""


_UNTRACKABLE = _Untrackable()


def _arg_token(arg: Any) -> Any:
    """What identifies a positional argument's contribution to the inputs: a Tensor's uop, a UOp (a bound variable)
    itself, None for a value that is not an input, `_UNTRACKABLE` for a container."""
    uop = getattr(arg, "uop", None)
    if uop is not None:
        return uop
    if isinstance(arg, UOp):
        return arg
    if isinstance(arg, (list, tuple, dict)):
        return _UNTRACKABLE
    return None


def _wrap_tensor(uop: UOp, device: str, shape: tuple[Any, ...] | None) -> Any:
    """A front-end tensor around `uop` (see `_FrontEnd`)."""
    assert _FrontEnd.wrap is not None, "no tensor type registered (tinycore.tensor registers it on import)"
    return _FrontEnd.wrap(uop, device, shape)


def _buffer_backed(uop: UOp) -> bool:
    """Whether `uop` is a BUFFER or a view of one (for a sharded value: every shard)."""
    if uop.op is Ops.MULTI:
        return all(_base(shard).op is Ops.BUFFER for shard in uop.src)
    return _base(uop).op is Ops.BUFFER


def _realize_inputs(tensors: list[Any]) -> None:
    """Realize the inputs; an input without a buffer (a constant) is made contiguous so the program reads memory."""
    pending = [t for t in tensors if not _buffer_backed(t.uop)]
    if not pending:
        return
    _tensor_class().realize(*pending)
    for t in pending:
        if not _buffer_backed(t.uop):
            t.uop = t.contiguous().realize().uop


def _base(u: UOp) -> UOp:
    while u.op in _MOVEMENT:
        u = u.src[0]
    return u


@dataclass(frozen=True)
class InputSpec:
    """What a captured program assumes about one input: `shape` (variables unbound), `dtype`, `device`, `size` of
    the buffer, `view` (the movement chain from the buffer to the tensor), and for one shard of a sharded tensor
    `shard` = ``(sharded axis or None when replicated, shard index, number of shards)``."""

    shape: tuple[Any, ...]
    dtype: Any
    device: str
    size: int
    view: tuple[tuple[Ops, Any], ...]
    shard: tuple[int | None, int, int] | None = None

    def describe(self) -> str:
        """One line: ``shape (4,) float on CLANG``, with the view when the tensor is not the whole buffer."""
        view = f", view {[op.name for op, _ in self.view]} of a buffer of {self.size}" if self.view else ""
        shard = ""
        if self.shard is not None:
            axis, index, count = self.shard
            shard = f", shard {index} of {count} " + ("(replicated)" if axis is None else f"on axis {axis}")
        return f"shape {self.shape} {self.dtype} on {self.device}{view}{shard}"


def _same_but_for_symbolic_size(old: InputSpec, new: InputSpec) -> bool:
    """True when two specs differ only in the size of the buffer under a symbolic shape (``a.reshape(3, i)`` called
    with another value of ``i``): the captured kernels take the variable's value at each call and buffers of symbolic
    size were allocated at the variable's maximum, so one capture serves every bound value."""
    if not any(not isinstance(d, int) for d in old.shape):
        return False
    return old.size != new.size and dataclasses.replace(old, size=new.size) == new


@dataclass(frozen=True)
class _ShardKey:
    """The part of an input key naming one shard of a sharded tensor argument."""

    index: int

    def __repr__(self) -> str:
        return f"shard {self.index}"


def _units(tensor: Any, key: tuple[Any, ...]) -> list[tuple[UOp, tuple[Any, ...], tuple[int | None, int, int] | None]]:
    """The single-device values of one input tensor (its shards when sharded), each with its key and shard info."""
    uop = tensor.uop
    if uop.op is Ops.MULTI:
        count = len(uop.src)
        return [(shard, (*key, _ShardKey(k)), (uop.arg, k, count)) for k, shard in enumerate(uop.src)]
    return [(uop, key, None)]


def _specs(
    tensors: list[Any], keys: list[tuple[Any, ...]], vals: dict[str, int]
) -> tuple[list[InputSpec], list[Buffer], list[UOp], list[tuple[Any, ...]]]:
    """Per input *unit* (an input tensor, or each shard of a sharded one): its spec, buffer, uop and key."""
    specs: list[InputSpec] = []
    bufs: list[Buffer] = []
    units: list[UOp] = []
    unit_keys: list[tuple[Any, ...]] = []
    for t, key in zip(tensors, keys):
        for unit, unit_key, shard in _units(t, key):
            base, chain = _view_of(unit, vals)
            dims, device = (t.shape, t.device) if shard is None else (unit.shape, unit.device)
            shape = tuple(_unbind(d, vals) if isinstance(d, UOp) else d for d in dims)
            specs.append(InputSpec(shape, t.dtype, device, base.arg, chain, shard))
            bufs.append(buffer_of(base))
            units.append(unit)
            unit_keys.append(unit_key)
    return specs, bufs, units, unit_keys


def _alias_pattern(bufs: list[Buffer]) -> tuple[int, ...]:
    """For each input buffer, the position of the first input with the same buffer."""
    first: dict[int, int] = {}
    return tuple(first.setdefault(id(b), i) for i, b in enumerate(bufs))


# ---------------------------------------------------------------------------------------------------------------
# return values


def _flatten_ret(value: Any, out: list[Any], where: str) -> Any:
    """A template of the return structure with Tensors replaced by their index in `out`."""
    if value is None:
        return None
    if isinstance(value, _tensor_class()):
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
    if runner.writes is not None:
        return list(runner.writes)
    return list(range(len(item.bufs)))


def _reads(item: ExecItem) -> list[int]:
    runner = item.runner
    if isinstance(runner, CompiledRunner):
        if runner.p.ins or runner.p.outs:
            return list(runner.p.ins)
        return list(range(1, len(item.bufs)))
    if isinstance(runner, BufferCopy):
        return [1]
    if runner.reads is not None:
        return list(runner.reads)
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
    shards: list[_Output] | None = None  # a sharded output: one record per shard (MULTI along `axis`)
    axis: int | None = None
    symbolic: bool = False  # `chain` has variables: the view is rebuilt with each call's values


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
        self.unchanged_steps: list[Callable[[list[Buffer], dict[str, int]], None]] = []
        self.graphs: list[GraphRunner] = []
        self.kernel_count = sum(item.runner.kernel_count for item in self.items)
        start = 0
        while start < len(self.items):
            end, graph_cls = self._batch_from(start)
            if graph_cls is None:
                step = self._direct_step(start)
                self.steps.append(step)
                self.unchanged_steps.append(step)
                start += 1
                continue
            batch = self.items[start:end]
            slots = {(i - start, j): p for (i, j), p in self.input_slots.items() if start <= i < end}
            runner = graph_cls(batch[0].runner.device, batch, slots, list(self.var_names))
            self.graphs.append(runner)
            self.steps.append(self._graph_step(runner))
            self.unchanged_steps.append(self._graph_resubmit_step(runner))
            start = end
        # what each input uop seen in a replay means: (its specs, buffers, whether sharded, variable values it binds)
        self._input_cache: weakref.WeakKeyDictionary[UOp, tuple[list[InputSpec], list[Buffer], bool, dict[str, int]]]
        self._input_cache = weakref.WeakKeyDictionary()
        self._spec_intern = {spec: spec for spec in self.specs}  # equal specs become the captured objects
        # the fast replay path (`TinyJit.__call__`): the identity of each positional argument of the last replay
        # (a Tensor's uop, a bound Variable), with its input buffers, unit uops and variable values; None: no fast path
        self._last_tokens: tuple[Any, ...] | None = None
        self._last_inputs: list[Buffer] = []
        self._last_units: list[UOp] = []
        self._last_vals: dict[str, int] = {}
        self._concrete = [all(isinstance(d, int) for d in o.shape) for o in self.outputs]
        for out in self.outputs:
            for part in out.shards or [out]:
                part.symbolic = _chain_has_vars(part.chain)
                if part.buffer is not None and part.uop is None:
                    buf_uop = new_buffer_uop(part.device, part.buffer.size, part.buffer.dtype, part.buffer)
                    part.uop = _rebuild(buf_uop, part.chain)
            if out.shards and out.uop is None and all(part.input_pos is None for part in out.shards):
                out.uop = multi_uop([part.uop for part in out.shards], out.axis)  # type: ignore[misc]
        # outputs rebuilt on every call: views of inputs, views whose shape or offsets depend on variables
        self._rebuilt = [
            o.uop is None or not concrete or any(part.symbolic for part in o.shards or [o])
            for o, concrete in zip(self.outputs, self._concrete)
        ]
        # one returned tensor of the program's own memory: what `returned` wraps, precomputed
        self._single: tuple[UOp, str, tuple[Any, ...] | None] | None = None
        if self.template == ("T", 0) and not self._rebuilt[0]:
            first = self.outputs[0]
            assert first.uop is not None
            self._single = (first.uop, first.device, first.shape)

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

    @staticmethod
    def _graph_resubmit_step(runner: GraphRunner) -> Callable[[list[Buffer], dict[str, int]], None]:
        count = runner.kernel_count
        resubmit = runner.resubmit

        def step(inputs: list[Buffer], var_vals: dict[str, int]) -> None:
            resubmit()
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
        self._last_tokens = None

    def replay_unchanged(self, args: tuple[Any, ...]) -> Any:
        """Run the program again with the input buffers and variable values of the last replay (which `args`, the
        call's positional arguments, were checked to be the same as) and return its outputs.

        Nothing is re-checked or re-packed: graph runners resubmit their patched tables as they are."""
        inputs, units, var_vals = self._last_inputs, self._last_units, self._last_vals
        for buf in inputs:
            if not buf.is_allocated():  # deallocated behind our back: its address changed, take the full path
                self(inputs, var_vals)
                self._remember(args, inputs, units, var_vals)
                return self.returned(units, var_vals)
        for step in self.unchanged_steps:
            step(inputs, var_vals)
        for buf in self.written:
            buffer_written(buf)
        jit_stats.replays += 1
        return self.returned(units, var_vals)

    def _remember(
        self, args: tuple[Any, ...], inputs: list[Buffer], units: list[UOp], var_vals: dict[str, int]
    ) -> None:
        """Record the last replay's positional arguments for `replay_unchanged` (only when no argument is a
        container: their contents may change in place, so they can't be compared by identity)."""
        tokens: list[Any] = []
        for arg in args:
            token = _arg_token(arg)
            if token is _UNTRACKABLE:
                self._last_tokens = None
                return
            tokens.append(token)
        self._last_tokens, self._last_inputs, self._last_units, self._last_vals = tuple(tokens), inputs, units, var_vals

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
            if old != new and not _same_but_for_symbolic_size(old, new):
                what = [
                    field
                    for field in ("shape", "dtype", "device", "view", "size", "shard")
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

    def returned(self, units: list[UOp], var_vals: dict[str, int]) -> Any:
        """The return value of a replay, rebuilt around the program's buffers (and this call's input units: the
        uops of the input tensors, of each shard for a sharded one); symbolic shapes are bound to `var_vals`."""
        if self._single is not None:
            return _FrontEnd.wrap(*self._single)  # type: ignore[misc]  # (`_wrap_tensor` inlined: the replay path)

        def unit_output(part: _Output) -> UOp:
            if part.input_pos is not None:
                return _rebuild(_base(units[part.input_pos]), _bind_chain(part.chain, var_vals))
            assert part.uop is not None
            if part.symbolic and part.buffer is not None:  # the captured uop has the capture call's values bound
                return _rebuild(_base(part.uop), _bind_chain(part.chain, var_vals))
            return part.uop

        out: list[Any] = []
        for o, concrete, rebuilt in zip(self.outputs, self._concrete, self._rebuilt):
            uop = o.uop
            if rebuilt:
                uop = multi_uop([unit_output(part) for part in o.shards], o.axis) if o.shards else unit_output(o)
            out.append(_wrap_tensor(uop, o.device, o.shape if concrete else None))
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

        def pack(o: _Output) -> tuple[Any, ...]:
            shards = [pack(part) for part in o.shards] if o.shards else None
            uop = o.uop if o.buffer is None and shards is None and o.input_pos is None else None  # a constant
            return (o.chain, o.device, o.shape, o.input_pos, ref(o.buffer), uop, shards, o.axis)

        outputs = [pack(o) for o in self.outputs]
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

        def unpack(record: tuple[Any, ...]) -> _Output:
            chain, dev, shape, pos, buf, uop, shards, axis = record
            parts = [unpack(part) for part in shards] if shards else None
            return _Output(chain, dev, shape, pos, get(buf), uop, parts, axis)

        self.outputs = [unpack(record) for record in state["outputs"]]
        self.written = [b for b in (get(i) for i in state["written"]) if b is not None]
        self.batch_size = state["batch_size"]
        self._distinct = len(set(self.aliases)) == len(self.aliases)
        self._init_runtime()


def _bind_arg(arg: Any, var_vals: dict[str, int]) -> Any:
    """A movement arg with its variables bound to `var_vals` (the inverse of `_unbind`)."""
    if isinstance(arg, UOp):
        mapping = {
            var: var.bind(var_vals[var.arg[0]])
            for var in arg.vars()
            if var.op is Ops.DEFINE_VAR and var.arg[0] in var_vals
        }
        return arg.substitute(mapping)
    if isinstance(arg, tuple) and any(isinstance(a, (UOp, tuple)) for a in arg):
        return tuple(_bind_arg(a, var_vals) for a in arg)
    return arg


def _chain_has_vars(chain: tuple[tuple[Ops, Any], ...]) -> bool:
    """Whether a movement chain's args hold variables."""

    def has(arg: Any) -> bool:
        return isinstance(arg, UOp) or (isinstance(arg, tuple) and any(has(a) for a in arg))

    return any(has(arg) for _, arg in chain)


def _bind_chain(chain: tuple[tuple[Ops, Any], ...], var_vals: dict[str, int]) -> tuple[tuple[Ops, Any], ...]:
    """A movement chain recorded with unbound variables, bound to this call's values."""
    if not var_vals:
        return chain
    return tuple((op, _bind_arg(arg, var_vals)) for op, arg in chain)


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
    reference): conservative by construction, a buffer anyone still holds (even garbage in an old generation that
    is not collected here) is never planned."""
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
    if any(r() is not None for r in refs.values()):
        # something may be held only by garbage cycles: collect the young generations (a full collection costs
        # ~0.1 s in a big process; a buffer still held after this is just not planned, which is always safe)
        gc.collect(1)
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


def _graph_device(item: ExecItem) -> str | None:
    """The device whose graph runner can batch `item`, or None when it runs on its own."""
    from tinycore.device import _device_lookup

    runner = item.runner
    if not isinstance(runner, CompiledRunner):
        return None
    graph_cls = getattr(_device_lookup(runner.device), "graph", None)
    return runner.device if graph_cls is not None and graph_cls.supports(item) else None


def _group_by_device(items: list[ExecItem]) -> list[ExecItem]:
    """Reorder a multi-device program so each device's kernels run back to back (one graph batch per device and
    dependency level) instead of alternating between devices item by item.

    Greedy and order preserving: the first pending item's device (or "no graph", for copies) takes every later
    pending item of that kind that does not conflict (read after write, write after read or write) with an item it
    would jump over; buffers conflict by their base, so views of one allocation never move past each other.
    Programs of one device are left as they are."""
    devices = [_graph_device(item) for item in items]
    if len({d for d in devices if d is not None}) < 2:
        return items
    access = [
        ({id(item.bufs[j].base) for j in _reads(item)}, {id(item.bufs[j].base) for j in _writes(item)})  # type: ignore[union-attr]
        for item in items
    ]
    pending = list(range(len(items)))
    order: list[int] = []
    while pending:
        device = devices[pending[0]]  # None: items that run on their own (copies) move together as well
        skipped_reads: set[int] = set()
        skipped_writes: set[int] = set()
        rest: list[int] = []
        for index in pending:
            reads, writes = access[index]
            movable = devices[index] == device and not (
                reads & skipped_writes or writes & skipped_writes or writes & skipped_reads
            )
            if movable:
                order.append(index)
            else:
                rest.append(index)
                skipped_reads |= reads
                skipped_writes |= writes
        pending = rest
    return [items[index] for index in order]


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

    The parameters are tinygrad's, ``TinyJit(fxn, captured=None, prune=False, optimize=False)``. ``optimize=True``
    is accepted and changes nothing: tinygrad's re-packs the captured program's buffers into one memory layout after
    capture, and tinycore's capture always memory-plans those buffers as a whole (`memory_planner`). ``fn=`` (the
    earlier name of ``fxn``) is still accepted as a keyword.

    `cnt` counts calls, `captured` is the `CapturedJit` once there is one; `reset()` forgets it.
    """

    def __init__(
        self,
        fxn: Callable[..., ReturnType] | None = None,
        captured: CapturedJit | None = None,
        prune: bool = False,
        optimize: bool = False,
        *,
        fn: Callable[..., ReturnType] | None = None,
    ):
        if fn is not None:
            if fxn is not None:
                raise TypeError("TinyJit got both fxn and fn (fn= is the earlier name of fxn): pass one")
            fxn = fn
        if fxn is None and captured is None:
            raise ValueError("TinyJit needs a function or a captured program")
        self.fn, self.captured, self.prune, self.optimize = fxn, captured, prune, optimize
        self.cnt = 2 if captured is not None else 0
        if fxn is not None:
            functools.update_wrapper(self, fxn)  # type: ignore[arg-type]

    @property
    def fxn(self) -> Callable[..., ReturnType] | None:
        """The captured function (tinygrad's attribute name; `fn` is the same)."""
        return self.fn

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
        return TinyJit, (self.fn, self.captured, self.prune, self.optimize)

    def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
        # one call at a time process-wide (`REALIZE_LOCK`, re-entrant: the function's own realizes nest): a capture
        # records every realize and leaves buffers unfilled until it ends, and replays share the scheduler's tables
        _lock_acquire()  # not `with`: a replay is a hot path, and acquire/release cost half as much
        try:
            if _capturing:
                raise JitError(
                    f"TinyJit {self._name()} was called while TinyJit {_capturing[-1]._name()} is capturing: nested "
                    "TinyJits are not supported (call the inner function undecorated)"
                )
            if not JIT:
                assert self.fn is not None, "a TinyJit built from a captured program can't run eagerly"
                return self.fn(*args, **kwargs)
            captured = self.captured
            if captured is not None and not kwargs:
                tokens = captured._last_tokens
                if tokens is not None and len(tokens) == len(args):
                    for arg, token in zip(args, tokens):
                        if _arg_token(arg) is not token:
                            break
                    else:  # the very same inputs (buffers, views, variable values) as the last replay
                        self.cnt += 1
                        return captured.replay_unchanged(args)
            tensors, keys, var_vals = _inputs_of(args, kwargs)
            _realize_inputs(tensors)
            if self.cnt >= 2 and self.captured is not None:
                return self._replay(args, kwargs, tensors, keys, var_vals)
            if self.cnt == 0:
                assert self.fn is not None
                ret, writes = _run_recording_assigns(self.fn, args, kwargs)
                outs: list[Any] = []
                _flatten_ret(ret, outs, "the return value")
                if outs or writes:
                    _tensor_class().realize(*outs, *writes)
                self.cnt = 1
                return ret
            ret = self._capture(args, kwargs, tensors, keys, var_vals)
            self.cnt = 2
            return ret
        finally:
            _lock_release()

    def _name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))

    def _replay(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        tensors: list[Any],
        keys: list[tuple[Any, ...]],
        var_vals: dict[str, int],
    ) -> ReturnType:
        captured = self.captured
        assert captured is not None
        cache = captured._input_cache
        specs: list[InputSpec] = []
        bufs: list[Buffer] = []
        units: list[UOp] = []
        unit_keys: list[tuple[Any, ...]] = []
        for t, key in zip(tensors, keys):
            uop = t.uop
            entry = cache.get(uop)
            if entry is None:  # a uop seen before has the same specs, buffers and variable values
                own: dict[str, int] = {}
                own_specs, own_bufs, own_units, _ = _specs([t], [key], own)
                intern = captured._spec_intern
                entry = ([intern.get(spec, spec) for spec in own_specs], own_bufs, own_units[0] is not uop, own)
                cache[uop] = entry
            own_specs, own_bufs, sharded, own = entry
            if own:
                for name, value in own.items():
                    if var_vals.setdefault(name, value) != value:
                        raise JitError(f"variable {name!r} is bound to both {var_vals[name]} and {value} in one call")
            specs += own_specs
            bufs += own_bufs
            if sharded:
                units += uop.src
                unit_keys += _unit_keys(key, len(uop.src))
            else:
                units.append(uop)
                unit_keys.append(key)
        captured.check(specs, bufs, unit_keys)
        captured(bufs, var_vals)
        if not kwargs:
            captured._remember(args, bufs, units, var_vals)
        self.cnt += 1
        return captured.returned(units, var_vals)

    def _capture(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        tensors: list[Any],
        keys: list[tuple[Any, ...]],
        var_vals: dict[str, int],
    ) -> ReturnType:
        assert self.fn is not None
        specs, in_bufs, units, unit_keys = _specs(tensors, keys, var_vals)
        items: list[ExecItem] = []
        _capturing.append(self)
        try:
            with capture_exec_items(items.append, run=False):
                try:
                    ret, writes = _run_recording_assigns(self.fn, args, kwargs)
                except RuntimeError as error:
                    if "holds no data yet" in str(error):
                        raise JitError(
                            f"TinyJit {self._name()} read a tensor's data while capturing ({error}): values "
                            "read in Python during capture would be frozen; return them as Tensors instead"
                        ) from error
                    raise
                out_tensors: list[Any] = []
                template = _flatten_ret(ret, out_tensors, "the return value")
                if out_tensors or writes:  # the writes it left lazy are part of the program too
                    _tensor_class().realize(*out_tensors, *writes)
        finally:
            _capturing.pop()
        del ret
        if not items:
            if not CAPTURING.value:
                raise JitError(
                    f"TinyJit {self._name()} can't capture with CAPTURING=0 (recording of kernels is turned off): "
                    "unset CAPTURING, or set JIT=0 to run TinyJit functions directly"
                )
            raise JitError(
                f"TinyJit {self._name()} launched no kernels while capturing: nothing to replay (its outputs are "
                "inputs or constants); call the function without TinyJit"
            )
        captured = self._build(items, units, unit_keys, specs, in_bufs, var_vals, out_tensors, template)
        self.captured = captured
        jit_stats.captures += 1
        captured(in_bufs, var_vals)
        return _build_ret(template, out_tensors)

    def _build(
        self,
        items: list[ExecItem],
        units: list[UOp],
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

        def unit_output(uop: UOp, device: str, shape: tuple[Any, ...]) -> _Output:
            base, chain = _view_of(uop, {})
            if base.op is not Ops.BUFFER:
                return _Output(chain, device, shape, uop=uop)
            buf = buffer_of(base)
            pos = in_ids.get(id(buf))
            if pos is not None and _base(units[pos]) is base:
                return _Output(chain, device, shape, input_pos=pos)
            out_bufs.append(buf)
            return _Output(chain, device, shape, buffer=buf, uop=uop)

        for t in out_tensors:
            if t.uop.op is Ops.MULTI:
                shards = [unit_output(shard, shard.device, tuple(shard.shape)) for shard in t.uop.src]
                uop = None if any(part.input_pos is not None for part in shards) else t.uop
                outputs.append(_Output((), t.device, tuple(t.shape), uop=uop, shards=shards, axis=t.uop.arg))
            else:
                outputs.append(unit_output(t.uop, t.device, tuple(t.shape)))
        # buffers only the program can see: fresh ones, pruned and memory planned
        private = _drop_private_buffers(items, [*in_bufs, *out_bufs])
        items = _prune_unused(items, private)
        items = _group_by_device(items)
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
