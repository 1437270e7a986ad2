"""The lazy `Tensor`: every operation builds a tensor-level UOp graph; `realize()` schedules and runs it.

A tensor is a thin handle: `uop` (the lazy graph of its value) and `device`. Operations never compute; they build
UOps (broadcasting and PyTorch type promotion happen here, so the graph's elementwise ops see equal shapes and
dtypes). `realize()` hands the graph to the scheduler (`tinycore.engine.schedule`) and runs the kernels
(`tinycore.engine.realize`); afterwards `uop` is the buffer holding the value (a `BUFFER` seen through movement
ops), and any other tensor whose graph contains the realized node reads that buffer too.

>>> t = Tensor([[1.0, 2.0], [3.0, 4.0]])
>>> t.shape, t.dtype, (t + 1).dtype, (t > 2).dtype
((2, 2), dtypes.float, dtypes.float, dtypes.bool)
>>> Tensor([1, 2]).dtype, (Tensor([1, 2]) * 1.5).dtype
(dtypes.int, dtypes.float)
"""

from __future__ import annotations

import functools
import math
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from tinycore.dtype import (
    DTYPES_DICT,
    FP8S,
    ConstType,
    DType,
    dtypes,
    least_upper_dtype,
    least_upper_float,
    sum_acc_dtype,
)
from tinycore.engine import live

# The scheduler, as the tensor front end uses it: one import per concern (docs/pipeline.md, "Scheduler modules").
# `engine.eager`: the eager fast path (schedule-cache keys of elementwise chains, given as they are built);
# `engine.realized`: the Buffer behind a BUFFER uop; `engine.schedule`: scheduling whole graphs, and the hook for
# lazy values that read a buffer before an in-place write into it.
from tinycore.engine.eager import (
    constant_op_chain_id,
    eager_key_of,
    known_chain_id,
    note_chain_node,
    note_elementwise_pair,
    note_unary,
    schedule_for_chain,
)
from tinycore.engine.jit import note_assign, register_tensor_type
from tinycore.engine.multi import MultiDeviceError, gather, multi_uop, shard_uop, to_multi
from tinycore.engine.realized import buffer_of, buffer_view, new_buffer_uop
from tinycore.engine.schedule import ScheduleItem, schedule_for_run, schedule_items, schedule_outputs, set_readers_hook
from tinycore.frontend import (
    AutogradMixin,
    CompatMixin,
    CreationMixin,
    DataMixin,
    ElementwiseMixin,
    MovementMixin,
    ProcessingMixin,
    ReduceMixin,
)
from tinycore.frontend.autograd import _grad_tensors, note_realized
from tinycore.frontend.reduce import cascade_sum
from tinycore.helpers import REALIZE_LOCK, all_int, prod
from tinycore.uop.ops import GroupOp, Ops, UOp, sint

_lock_acquire, _lock_release = REALIZE_LOCK.acquire, REALIZE_LOCK.release

__all__ = ["Tensor"]

_BOOL = dtypes.bool
_BUFFER_OP, _RESHAPE_OP = Ops.BUFFER, Ops.RESHAPE
_COMPARISON = GroupOp.Comparison
_MOVEMENT = GroupOp.Movement

_SPLIT_REDUCE_MIN = 1 << 18  # full reductions of at least this many elements run as two kernels (see `_reduce`)


# ---------------------------------------------------------------------------------------------------------------
# helpers


def _to_np_dtype(dtype: DType) -> Any:
    """The numpy dtype holding `dtype`'s values, or None where numpy has none (bfloat16), as in tinygrad."""
    import numpy as np

    return np.dtype(dtype.fmt) if dtype.fmt is not None else None


def _canonical_device(device: str | tuple[str, ...] | None) -> Any:
    """The canonical name of `device` (default: `Device.DEFAULT`); a tuple or list gives a tuple of names."""
    from tinycore.device import Device

    if device is None:
        return Device.DEFAULT
    if isinstance(device, (tuple, list)):
        return tuple(Device.canonicalize(d) for d in device)
    return Device.canonicalize(device)


def _is_torch_tensor(data: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(data, torch.Tensor)


def _host_array_of(data: Any) -> tuple[Any, DType]:
    """A numpy array with the values of a foreign array (`__dlpack__`; torch tensors on any device, bfloat16 too) and
    its dtype here. Gradients are not carried over (``requires_grad`` starts False, as with a numpy array)."""
    import numpy as np

    if _is_torch_tensor(data):
        torch = sys.modules["torch"]
        host = data.detach().cpu().contiguous()
        if host.dtype == torch.bfloat16:  # numpy has no bfloat16: float32 holds every value exactly
            return host.float().numpy(), dtypes.bfloat16
        return host.numpy(), dtypes.from_np(host.numpy().dtype)
    try:
        arr = np.from_dlpack(data)
    except (TypeError, RuntimeError, BufferError) as error:
        raise TypeError(f"can't make a Tensor from {type(data).__name__} through DLPack: {error}") from error
    return arr, dtypes.from_np(arr.dtype)


def _to_dtype(dtype: Any) -> DType:
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in DTYPES_DICT:
        return DTYPES_DICT[dtype.lower()]
    raise TypeError(f"not a dtype: {dtype!r} (use tinycore.dtypes.<name> or a name like 'float32')")


def _shape_arg(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """`f(2, 3)` and `f((2, 3))` both mean the shape (2, 3); symbolic sizes of any integer dtype become
    `dtypes.index` expressions (`UOp.as_index`)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for d in shape:  # (a hot path: most shapes are ints and are returned as they are)
        if isinstance(d, UOp) and d.dtype != dtypes.index:
            return tuple(_index_sint(d) for d in shape)
    return tuple(shape)


def _index_sint(d: Any) -> Any:
    """A symbolic size as a `dtypes.index` expression; anything else unchanged."""
    return d.as_index() if isinstance(d, UOp) and d.dtype != dtypes.index else d


def _fmt_shape(shape: Sequence[sint]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _broadcast_same_rank(shapes: tuple[tuple[sint, ...], ...]) -> tuple[int, ...] | None:
    """`_broadcast_shape`'s common case (every elementwise op of tensors): shapes of one rank, int sizes that
    broadcast; None for anything else (the general path then handles it, and names a mismatch)."""
    rank = len(shapes[0])
    for shape in shapes:
        if len(shape) != rank:
            return None
    out = []
    for dims in zip(*shapes):
        size = 1
        for d in dims:
            if type(d) is not int:
                return None
            if d != 1:
                if size == 1:
                    size = d
                elif size != d:
                    return None
        out.append(size)
    return tuple(out)


def _broadcast_shape(*shapes: tuple[sint, ...]) -> tuple[sint, ...]:
    """The broadcast of `shapes` (NumPy/PyTorch rules), or a RuntimeError naming the mismatching dimension."""
    fast = _broadcast_same_rank(shapes)
    if fast is not None:
        return fast
    ndim = max(len(s) for s in shapes)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    out: list[sint] = []
    for i in range(ndim):
        dims = [p[i] for p in padded]
        sizes = {d for d in dims if not (isinstance(d, int) and d == 1)}
        if len(sizes) > 1:
            a, b = (d for d in dims if not (isinstance(d, int) and d == 1))
            raise RuntimeError(
                f"The size of tensor a ({a}) must match the size of tensor b ({b}) at non-singleton dimension {i}"
            )
        out.append(next(iter(sizes)) if sizes else 1)
    return tuple(out)


def _category(dtype: DType) -> int:
    return 2 if dtypes.is_float(dtype) else (1 if dtypes.is_int(dtype) else 0)


def _scalar_category(value: ConstType) -> int:
    return 0 if isinstance(value, bool) else (1 if isinstance(value, int) else 2)


_live_add = live.add
_live_next, _live_refs, _weak = live.next_number, live.refs, weakref.ref


def _wrap(uop: UOp, device: str, shape: tuple[sint, ...] | None = None, requires_grad: bool | None = None) -> Tensor:
    """A Tensor around `uop` (`shape`, when the caller knows it, saves the UOp's shape inference).

    `requires_grad` is the result's flag as an op propagates it (`_grad_of`); it does not make the result a tensor
    whose `.grad` `backward()` fills (only the `requires_grad` setter does that)."""
    if isinstance(device, tuple):  # multi-device: keep MULTI at the top of the graph (tinycore.engine.multi)
        uop, device = to_multi(uop)
    t = object.__new__(Tensor)
    t._uop, t._deferred, t.device, t._requires_grad, t.grad = uop, None, device, requires_grad, None
    t._shape = uop.shape if shape is None else shape
    if uop.op is not _BUFFER_OP:  # a buffer is not a lazy value (`assign` registers a tensor it makes lazy)
        _live_add(t)
    return t


def _grad_of(*flags: bool | None) -> bool | None:
    """`requires_grad` of an op's result from its inputs' flags (tinygrad 0.11): True when any input is True, else
    None when any is None, else False."""
    if True in flags:
        return True
    return None if None in flags else False


def _grad_of2(a: bool | None, b: bool | None) -> bool | None:
    """`_grad_of(a, b)` for the two operands of a binary op (the hot path: no tuple)."""
    if a is b:
        return a
    return True if a or b else None


# (type, value, device, shape) -> (dtype, the broadcast constant uop) of a nonzero Python scalar operand of a
# tensor of that dtype: the hot eager path (`x * 1.5`) finds its operand with one lookup, the dtype compared by
# identity (zero stays out: -0.0 == 0.0 would share a key)
_scalar_operands: dict[tuple, tuple[DType, UOp]] = {}
_new_tensor = object.__new__


class _DeferredOp:
    """An elementwise op of a tensor's value and a scalar constant that the eager fast path has not built as a
    UOp yet: `UOp(op, dtype, (source, operand))` (operand first when `reverse`), where `source` is a UOp or the
    `_DeferredOp` of the tensor it was computed from.

    An eager loop (`y = x * 1.0001 + 0.5 ...; y.realize()`) builds, realizes and drops the same chain every call;
    as long as nothing asks for the UOp, realize finds the chain's cached schedule by `chain_id` (the eager
    schedule-cache key, `tinycore.engine.eager.constant_op_chain_id`, over the BUFFER `leaf`) and the nodes are
    never built. Reading the tensor's `uop` builds them (`_build_deferred`), the same hash-consed nodes with the
    same keys as building them at once would give; `node` keeps the built node for ops deferred on top of this one,
    and `extended` says some were (then realize builds the chain, so the realized table serves their graphs)."""

    __slots__ = ("op", "dtype", "source", "operand", "reverse", "chain_id", "leaf", "node", "extended", "__weakref__")

    op: Ops
    dtype: DType
    source: UOp | _DeferredOp
    operand: UOp
    reverse: bool
    chain_id: int
    leaf: UOp
    node: UOp | None
    extended: bool


class _DeferredBuffer:
    """The value of a tensor that an eager realize computed into `buffer` (seen through the movement ops `chain`),
    whose BUFFER uop nothing has asked for yet: reading the tensor's `uop` makes it (`build`). An eager loop drops
    most results unread, so this saves making (and collecting) their uops."""

    __slots__ = ("buffer", "chain", "dtype")

    def __init__(self, buffer: Any, chain: tuple[tuple[Ops, Any], ...]):
        self.buffer, self.chain, self.dtype = buffer, chain, buffer.dtype

    def build(self) -> UOp:
        """The buffer's view as a tensor-level uop."""
        return buffer_view(self.buffer, self.chain)


def _build_deferred(deferred: _DeferredOp | _DeferredBuffer) -> UOp:
    """The UOp of `deferred`, building it (and the deferred ops below it) on first request."""
    if type(deferred) is _DeferredBuffer:
        return deferred.build()
    unbuilt: list[_DeferredOp] = []
    step: UOp | _DeferredOp = deferred
    while type(step) is _DeferredOp and step.node is None:  # iterative: a long chain must not recurse
        unbuilt.append(step)
        step = step.source
    for item in reversed(unbuilt):
        source = item.source
        value = source if type(source) is not _DeferredOp else source.node
        node = UOp(item.op, item.dtype, (item.operand, value) if item.reverse else (value, item.operand))
        if not _written_leaves or id(item.leaf) not in _written_leaves:  # else its cached schedule reads new contents
            note_chain_node(node, item.chain_id, item.leaf)
        item.node = node
        _live_add(item)  # a built node reads its leaf: an in-place write into it must compute the node first
    return deferred.node  # type: ignore[return-value]


def _binop_method(op: Ops, reverse: bool) -> Callable[[Tensor, Any], Tensor]:
    """`Tensor._binop(op, y, reverse)` as a method of `(self, y)`: the Python operators are these, so the eager
    hot path (`x * 1.5`, `a + b`) runs in one frame. The fast paths, a nonzero Python scalar seen before with this
    dtype, device and shape, or a tensor of the same device, dtype and shape, build the result exactly as the
    general path (`Tensor._binop_general`) does, and give it its eager schedule-cache key; an op with a scalar on
    a chain that has such a key is deferred instead (`_DeferredOp`)."""
    bool_result = op in _COMPARISON
    # (chain id of a deferred source, type(y), y) -> (operand, chain id, dtype) of the op deferred on it: the step
    # an eager loop repeats every call, found with one lookup (the chain id already fixes device, shape and dtype)
    steps: dict[tuple[int, type, Any], tuple[UOp, int, DType]] = {}
    steps_get = steps.get

    def binop(self: Tensor, y: Any) -> Tensor:
        kind = type(y)
        if kind is float or kind is int:
            source = self._deferred
            if source is not None and type(source) is _DeferredOp and y:
                step = steps_get((source.chain_id, kind, y))
                if step is not None:
                    source.extended = True
                    deferred = _new_tensor(_DeferredOp)
                    deferred.operand, deferred.chain_id, deferred.dtype = step
                    deferred.op, deferred.source, deferred.reverse, deferred.leaf = op, source, reverse, source.leaf
                    deferred.node, deferred.extended = None, False
                    t = _new_tensor(Tensor)
                    t._deferred, t.device, t._requires_grad = deferred, self.device, self._requires_grad
                    t.grad, t._shape = None, self._shape
                    return t
            found = _scalar_operands.get((kind, y, self.device, self._shape)) if y else None
            if found is not None:
                operand = found[1]
                source = self._deferred
                if source is not None and type(source) is _DeferredOp:
                    dtype = source.dtype
                    if found[0] is not dtype:
                        return self._binop_general(op, y, reverse)
                    source.extended = True
                    source_id, leaf = source.chain_id, source.leaf
                else:
                    source = self.uop  # builds a deferred result's buffer uop
                    dtype = source.dtype
                    if found[0] is not dtype:
                        return self._binop_general(op, y, reverse)
                    key = source.chain_key
                    if key is None and (source.op is _BUFFER_OP or source.op is _RESHAPE_OP):
                        key = eager_key_of(source)  # a leaf's key is made on first use
                    if key is None:  # not a chain with a schedule-cache key: built now
                        t = _new_tensor(Tensor)
                        srcs = (operand, source) if reverse else (source, operand)
                        t._uop = _new_uop(UOp, op, _BOOL if bool_result else dtype, srcs)
                        t._deferred, t.device, t._requires_grad = None, self.device, self._requires_grad
                        t.grad, t._shape = None, self._shape
                        _live_add(t)
                        return t
                    source_id, leaf = key[0], key[1] or source
                if bool_result:
                    dtype = _BOOL
                # deferred (see `_DeferredOp`); the structure id as `constant_op_chain_id` gives it, looked up here
                chain_id = known_chain_id((op, source_id, operand, reverse, dtype is _BOOL))
                if chain_id is None:
                    chain_id = constant_op_chain_id(op, source_id, operand, reverse, dtype is _BOOL)
                deferred = _new_tensor(_DeferredOp)
                deferred.op = op
                deferred.dtype = dtype
                deferred.source = source
                deferred.operand = operand
                deferred.reverse = reverse
                deferred.chain_id = chain_id
                deferred.leaf = leaf
                deferred.node = None
                deferred.extended = False
                if type(source) is not _DeferredOp:  # a chain's first op reads the buffer: see `_readers_of`
                    n = _live_next()  # `live.add`, inlined
                    _live_refs[n] = _weak(deferred)
                    if not n & 4095:
                        live.compact(n)
                else:
                    if len(steps) > 4096:
                        steps.clear()
                    steps[(source_id, kind, y)] = (operand, chain_id, dtype)
                t = _new_tensor(Tensor)  # its `_uop` slot stays empty until `Tensor.uop` builds the node
                t._deferred = deferred
                t.device = self.device
                t._requires_grad = self._requires_grad
                t.grad = None
                t._shape = self._shape
                return t
        elif kind is Tensor:
            uop, other = self.uop, y.uop  # a deferred value is built here
            if (
                other.dtype is uop.dtype
                and (uop.dtype.fmt is not None or uop.dtype.itemsize != 1)  # not fp8: see `_binop_general`
                and y._shape == self._shape
                and type(self.device) is str
                and (y.device is self.device or y.device == self.device)
            ):
                srcs = (other, uop) if reverse else (uop, other)
                node = _new_uop(UOp, op, _BOOL if bool_result else uop.dtype, srcs)
                if node.chain_key is None:
                    note_elementwise_pair(node, *srcs)
                t = _new_tensor(Tensor)
                t._uop, t._deferred, t.device, t.grad, t._shape = node, None, self.device, None, self._shape
                t._requires_grad = _grad_of2(self._requires_grad, y._requires_grad)
                _live_add(t)
                return t
        return self._binop_general(op, y, reverse)

    binop.__name__ = binop.__qualname__ = f"_binop_{op.name.lower()}{'_reversed' if reverse else ''}"
    return binop


_binop_methods: dict[tuple[Ops, bool], Callable[[Tensor, Any], Tensor]] = {}
_new_uop = UOp.__new__  # `UOp(...)` without the class-call machinery (UOp has no __init__): the eager hot path


def _bf16_bits(arr: Any) -> Any:
    """float32 numpy array -> uint16 bfloat16 bits, rounded to nearest even."""
    import numpy as np

    bits = np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    rounded = np.where(np.isnan(arr), bits | np.uint32(0x400000), rounded)
    return (rounded >> np.uint32(16)).astype(np.uint16)


def _fp8_refused(dtype: DType, what: str) -> NotImplementedError:
    """PyTorch's refusal of arithmetic on fp8 tensors (they only store values: casts, copies, movement, ==, !=)."""
    return NotImplementedError(
        f'"{what}" not implemented for {dtype!r}: fp8 tensors only store values (as in PyTorch); cast to float '
        "first (t.float()), compute, and cast back (.cast(dtypes.fp8...))"
    )


def _from_numpy(arr: Any, device: str, dtype: DType) -> UOp:
    import numpy as np

    shape = tuple(int(d) for d in np.shape(arr))  # before ascontiguousarray, which turns a 0-d array into 1-d
    if dtype == dtypes.bfloat16:
        arr = _bf16_bits(np.asarray(arr, dtype=np.float32)).reshape(shape)
    elif dtype in FP8S:
        from tinycore.dtype import fp8_encode_np

        arr = fp8_encode_np(arr, dtype).reshape(shape)
    else:
        arr = np.ascontiguousarray(arr, dtype=dtypes.to_np(dtype))
    size = int(arr.size)
    uop = new_buffer_uop(device, size, dtype)
    if size:
        buffer_of(uop).copyin(memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8)))
    return uop.reshape(shape) if shape != (size,) else uop


_const_cache: dict[tuple, UOp] = {}


def _const_uop(value: ConstType, dtype: DType, device: str, shape: tuple[sint, ...]) -> UOp:
    """A tensor-level constant broadcast to `shape` (memoized: scalar operands are rebuilt on every op otherwise)."""
    key = (type(value), value, dtype, device, shape, math.copysign(1.0, value) if value == 0 else 0.0)
    try:
        return _const_cache[key]
    except (KeyError, TypeError):
        pass
    uop = UOp.const(dtype, value, device)
    if shape:
        uop = uop.reshape((1,) * len(shape))
        if any(not (isinstance(d, int) and d == 1) for d in shape):
            uop = uop.expand(shape)
    if len(_const_cache) > 4096:
        _const_cache.clear()
    try:
        _const_cache[key] = uop
    except TypeError:  # symbolic shapes may not hash
        pass
    return uop


@functools.cache
def _runners() -> tuple[Any, Any]:
    """`run_cached_schedule` and `run_schedule` of `tinycore.engine.realize`, imported on first use."""
    from tinycore.engine.realize import run_cached_schedule, run_schedule

    return run_cached_schedule, run_schedule


@functools.cache
def _run_schedule() -> Any:
    """`tinycore.engine.realize.run_schedule`, imported on first use (it pulls in the device runtime)."""
    from tinycore.engine.realize import run_schedule

    return run_schedule


def _view_base(u: UOp) -> UOp:
    while u.op in GroupOp.Movement:
        u = u.src[0]
    return u


# ---------------------------------------------------------------------------------------------------------------
# lazy values read before an in-place write (PyTorch's evaluation order; see `tinycore.engine.live`)


# ids of leaves of deferred chains an in-place write changed under them, each entry dropped when its leaf dies (a
# new leaf reusing a dead one's id was taken for it: its chains went down the general path). A dict, not a WeakSet:
# the hot path's emptiness test stays a C-level truth test
_written_leaves: dict[int, weakref.ref] = {}


def _note_written_leaf(leaf: UOp) -> None:
    """Remember that an in-place write changed `leaf`'s buffer under a deferred chain, until `leaf` dies."""
    key = id(leaf)
    if key not in _written_leaves:
        _written_leaves[key] = weakref.ref(leaf, lambda _, key=key: _written_leaves.pop(key, None))


def _readers_of(
    written: list[Any], roots: Sequence[UOp]
) -> tuple[list[UOp], Callable[[list[UOp | None]], None]] | None:
    """The live lazy values that read the old contents of the buffers `written` (ASSIGN targets of the schedule
    being made for `roots`): their uops, to be scheduled with `roots` (reads come before the writes), and a callback
    that gives each holder its new uop. Holders are tensors and deferred ops (`_DeferredOp`: a chain's first op, or
    one already built; the ops deferred on top of it, built later, then start from its buffer). A view of a buffer
    (``b = a[0:2]``) is not a reader: like a PyTorch view, it aliases the buffer and sees the write. Inside a TinyJit
    capture, readers made before the capture are computed at once, outside it (not part of the captured function)."""
    from tinycore.engine.realize import capture_start

    targets = {b.base for b in written}
    seen = set(roots)
    memo: dict[UOp, bool] = {}
    start = capture_start()
    inside: dict[UOp, list[Any]] = {}  # uop -> its holders
    outside: dict[UOp, list[Any]] = {}
    for number, holder in live.since():
        if type(holder) is _DeferredOp:
            source = holder.node if holder.node is not None else holder.source
            if type(source) is _DeferredOp or not _reads_buffers(source, targets, memo):
                continue
            _note_written_leaf(holder.leaf)
            u = _build_deferred(holder)
        else:
            if holder._deferred is not None or type(holder.device) is not str:
                continue  # computed already (`_DeferredBuffer`), or on a chain whose first op is handled above
            u = holder.uop
            if u not in inside and u not in outside and (_view_base(u).op is Ops.BUFFER or u in seen):
                continue
            if u not in inside and u not in outside and not _reads_buffers(u, targets, memo):
                continue
        if u in seen and u not in inside and u not in outside:
            continue
        group = outside if start is not None and number < start and u not in inside else inside
        group.setdefault(u, []).append(holder)
    if outside:
        from tinycore.helpers import Context

        values = [Tensor(u) for u in outside]
        with Context(CAPTURING=0):
            Tensor.realize(*values)
        _give_new_uops(outside, [v.uop for v in values])
    if not inside:
        return None
    return list(inside), lambda new_uops: _give_new_uops(inside, new_uops)


def _give_new_uops(holders: dict[UOp, list[Any]], new_uops: Sequence[UOp | None]) -> None:
    """Point every holder (tensor or deferred op) of each old uop at its computed value."""
    for group, new in zip(holders.values(), new_uops):
        if new is None:
            continue
        for holder in group:
            if type(holder) is _DeferredOp:
                holder.node = new
                continue
            if _grad_tensors.data:
                note_realized(holder, new)
            holder.uop = new


def _reads_buffers(root: UOp, targets: set[Any], memo: dict[UOp, bool]) -> bool:
    """True when the graph of `root` has a BUFFER whose `Buffer` (base) is in `targets`."""
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        u, expanded = stack.pop()
        if u in memo:
            continue
        if u.op is Ops.BUFFER:
            memo[u] = buffer_of(u).base in targets
        elif expanded:
            memo[u] = any(memo[s] for s in u.src)
        else:
            stack.append((u, True))
            stack.extend((s, False) for s in u.src if s not in memo)
    return memo[root]


set_readers_hook(_readers_of)


# ---------------------------------------------------------------------------------------------------------------
# arange's index values (see `_iota`)


class BitwiseDtypeError(TypeError, NotImplementedError):
    """A bitwise op on a float tensor: PyTorch raises NotImplementedError (``"bitwise_and_cpu" not implemented for
    'Float'``), earlier tinycore raised TypeError; this is both."""


_TORCH_DTYPE_NAMES = {
    dtypes.bool: "Bool",
    dtypes.int8: "Char",
    dtypes.uint8: "Byte",
    dtypes.int16: "Short",
    dtypes.uint16: "UInt16",
    dtypes.int32: "Int",
    dtypes.uint32: "UInt32",
    dtypes.int64: "Long",
    dtypes.uint64: "UInt64",
    dtypes.float16: "Half",
    dtypes.bfloat16: "BFloat16",
    dtypes.float32: "Float",
    dtypes.float64: "Double",
}


def _torch_dtype_name(dtype: DType) -> str:
    """PyTorch's name of a dtype in its error messages (``Float``, ``Long``...)."""
    return _TORCH_DTYPE_NAMES.get(dtype, str(dtype))


def _can_cast_inplace(src: DType, dst: DType) -> bool:
    """`torch.can_cast(src, dst)`: an in-place result may narrow within its kind, never go float -> integer/bool
    or integer -> bool."""
    if dtypes.is_float(src):
        return dtypes.is_float(dst)
    return not (src != dtypes.bool and dst == dtypes.bool)


def _iota(n: int, device: str) -> Tensor:
    """`[0, 1, ..., n-1]` as int32: one IOTA leaf (no buffer input), lowered to the flat loop index: O(n) work."""
    return _wrap(UOp.iota(n, device), device, (n,))


# ---------------------------------------------------------------------------------------------------------------
# the Tensor


class Tensor(
    CreationMixin, ElementwiseMixin, MovementMixin, ReduceMixin, ProcessingMixin, AutogradMixin, DataMixin, CompatMixin
):
    """A lazily evaluated multi-dimensional array on one device.

    `Tensor(data, device=None, dtype=None, requires_grad=None)` accepts a Python scalar, nested lists/tuples
    (dtype from `dtypes.from_py`), a numpy array, `bytes` (uint8) or a tensor-level `UOp`. Data is copied to the
    device at once; everything else is lazy until `realize()` / `numpy()` / `tolist()` / `item()`.

    >>> a = Tensor([1.0, 2.0, 3.0])
    >>> (a * 2 + 1).tolist()  # doctest: +SKIP
    [3.0, 5.0, 7.0]
    """

    # `uop` is a property over `_uop`; requires_grad: autograd.py
    __slots__ = ("_uop", "_deferred", "device", "_requires_grad", "grad", "_shape", "__weakref__")
    _uop: UOp  # empty while the value is deferred (`_deferred`), built on first read of `uop`
    _deferred: _DeferredOp | _DeferredBuffer | None
    device: Any  # a device name, or a tuple of names for a sharded tensor
    _shape: tuple[sint, ...]
    _requires_grad: bool | None
    grad: Tensor | None

    _seed: ClassVar[int] = 0
    _rng_counter: ClassVar[int] = 0

    def __init__(
        self, data: Any = None, device: str | None = None, dtype: Any = None, requires_grad: bool | None = None
    ):
        self.requires_grad, self.grad = requires_grad, None
        try:
            self._init_value(data, device, dtype)
        except BaseException:
            if requires_grad:  # a half-made tensor must not stay among those autograd looks at
                self.requires_grad = None
            raise

    def _init_value(self, data: Any, device: str | None, dtype: Any) -> None:
        dt = _to_dtype(dtype) if dtype is not None else None
        if isinstance(data, UOp):
            if data.shape is None:
                raise TypeError(f"a Tensor needs a tensor-level UOp with a shape, got {data.op}")
            own = data.device
            if isinstance(own, tuple):  # a multi-device value (MULTI on top, see tinycore.engine.multi)
                if device is not None and _canonical_device(device) != own:
                    raise RuntimeError(f"the UOp lives on {own}, not on {device}")
                uop, own = to_multi(data.cast(dt) if dt is not None else data)
                self.uop, self.device, self._shape = uop, own, data.shape
                _live_add(self)
                return
            dev = _canonical_device(device if device is not None else own)
            if own is not None and _canonical_device(own) != dev:
                raise RuntimeError(f"the UOp lives on {own}, not on {dev}; use .to({dev!r})")
            self.uop, self.device = (data.cast(dt) if dt is not None else data), dev
            self._shape = data.shape
            _live_add(self)
            return
        dev = _canonical_device(device)
        if isinstance(dev, tuple):  # data on several devices: made on the first, then replicated
            t = Tensor(data, device=dev[0], dtype=dt).shard(dev)
            self.uop, self.device, self._shape = t.uop, t.device, t._shape
            return
        self.device = dev
        if data is None:
            data = []
        if isinstance(data, (bool, int, float)):
            self.uop = UOp.const(dt or dtypes.from_py(data), data, dev)
        elif isinstance(data, (list, tuple)):
            import numpy as np

            dt = dt or dtypes.from_py(data)
            np_dt = dtypes.to_np(dt) if dt != dtypes.bfloat16 else np.float32
            try:
                arr = np.array(data, dtype=np_dt)
            except (ValueError, OverflowError) as error:
                raise ValueError(f"can't make a {dt} tensor from {type(data).__name__}: {error}") from error
            self.uop = _from_numpy(arr, dev, dt)
        elif isinstance(data, (bytes, bytearray, memoryview)):
            import numpy as np

            arr = np.frombuffer(bytes(data), dtype=np.uint8)
            self.uop = _from_numpy(arr, dev, dtypes.uint8)
            if dt is not None and dt != dtypes.uint8:
                self.uop = self.uop.cast(dt)
        elif "numpy" in sys.modules and isinstance(data, (sys.modules["numpy"].ndarray, sys.modules["numpy"].generic)):
            data = sys.modules["numpy"].asarray(data)  # a numpy scalar (np.float32(2.5)) is a 0-d array, as in torch
            dt = dt or dtypes.from_np(data.dtype)
            self.uop = _from_numpy(data, dev, dt)
        elif hasattr(data, "__dlpack__") or _is_torch_tensor(data):  # torch, jax, cupy...: through numpy (a copy)
            arr, source_dt = _host_array_of(data)
            self.uop = _from_numpy(arr, dev, source_dt)
            if dt is not None and dt != source_dt:
                self.uop = self.uop.cast(dt)
        else:
            raise TypeError(
                f"can't make a Tensor from {type(data).__name__}: pass a number, a (nested) list, a numpy array, "
                "bytes, or an object with __dlpack__ (torch, jax, cupy)"
            )
        self._shape = self.uop.shape

    # ----- basic properties

    @property
    def uop(self) -> UOp:
        """The tensor-level UOp graph of the value (a buffer view once realized). Reading it builds a deferred op
        (`_DeferredOp`) or a deferred result's buffer uop (`_DeferredBuffer`)."""
        try:
            return self._uop
        except AttributeError:  # the slot is empty while the value is deferred
            deferred = self._deferred
            if deferred is None:  # another thread built it meanwhile (`_uop` is set first), or truly empty: raises
                return self._uop
            uop = self._uop = _build_deferred(deferred)
            self._deferred = None
            if type(deferred) is _DeferredOp:
                _live_add(self)
            return uop

    @uop.setter
    def uop(self, uop: UOp) -> None:
        self._uop, self._deferred = uop, None

    @property
    def shape(self) -> tuple[sint, ...]:
        """The shape (a tuple of ints; symbolic dims are UOps). A tensor's shape never changes, even when its uop is
        replaced (realize, assign), so it is kept on the tensor."""
        return self._shape

    @property
    def dtype(self) -> DType:
        """The element dtype."""
        deferred = self._deferred
        return deferred.dtype if deferred is not None else self._uop.dtype

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def numel(self) -> sint:
        """Number of elements."""
        return prod(self.shape)

    def element_size(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    def nbytes(self) -> sint:
        """Bytes of the whole tensor."""
        return self.numel() * self.element_size()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return int(self.shape[0])

    def __repr__(self) -> str:
        return f"<Tensor shape={self.shape} dtype={self.dtype} device={self.device} op={self.uop.op.name}>"

    def __bool__(self) -> bool:
        raise TypeError("the truth value of a Tensor is ambiguous: use .item(), .numpy() or (t == x).all()")

    __hash__ = object.__hash__  # __eq__ is elementwise

    # ----- constructors

    @staticmethod
    def empty(*shape: Any, device: str | None = None, dtype: Any = None, **kwargs: Any) -> Tensor:
        """An uninitialized tensor backed by a new (lazily allocated) buffer."""
        shape = _shape_arg(shape)
        dt = _to_dtype(dtype) if dtype is not None else dtypes.default_float
        dev = _canonical_device(device)
        size = prod(shape)
        if not all_int(shape) or any(d < 0 for d in shape):
            raise ValueError(f"empty needs non-negative int dimensions, got {shape}")
        if isinstance(dev, tuple):  # one uninitialized buffer per device (replicated)
            t = Tensor(multi_uop([new_buffer_uop(d, size, dt) for d in dev], None).reshape(shape), **kwargs)
            return t
        uop = new_buffer_uop(dev, size, dt)
        return Tensor(uop.reshape(shape) if shape != (size,) else uop, dev, **kwargs)

    @staticmethod
    def full(shape: Any, fill_value: ConstType, device: str | None = None, dtype: Any = None, **kwargs: Any) -> Tensor:
        """A tensor of `shape` filled with `fill_value` (a broadcast constant: no memory until used)."""
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        if any(isinstance(d, int) and d < 0 for d in shape):
            raise ValueError(f"full needs non-negative dimensions, got {shape}")
        dt = _to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
        dev = _canonical_device(device)
        uop = _const_uop(fill_value, dt, dev, shape)
        t = _wrap(uop, dev)
        t.requires_grad = kwargs.get("requires_grad")
        return t

    @staticmethod
    def zeros(*shape: Any, device: str | None = None, dtype: Any = None, **kwargs: Any) -> Tensor:
        """A tensor of zeros (default float)."""
        return Tensor.full(_shape_arg(shape), 0, device, dtype or dtypes.default_float, **kwargs)

    @staticmethod
    def ones(*shape: Any, device: str | None = None, dtype: Any = None, **kwargs: Any) -> Tensor:
        """A tensor of ones (default float)."""
        return Tensor.full(_shape_arg(shape), 1, device, dtype or dtypes.default_float, **kwargs)

    @staticmethod
    def arange(
        start: ConstType, stop: ConstType | None = None, step: ConstType = 1, device: str | None = None,
        dtype: Any = None, **kwargs: Any,
    ) -> Tensor:  # fmt: skip
        """`[start, start+step, ...)` up to `stop` (exclusive), like `torch.arange`: one kernel, no buffer input.

        >>> Tensor.arange(5).shape, Tensor.arange(1, 2, 0.25).dtype
        ((5,), dtypes.float)
        """
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange: step must be nonzero")
        n = max(0, math.ceil((stop - start) / step))
        dt = (
            _to_dtype(dtype)
            if dtype is not None
            else (
                dtypes.default_float if any(isinstance(v, float) for v in (start, stop, step)) else dtypes.default_int
            )
        )
        dev = _canonical_device(device)
        t = _iota(n, dev).cast(dt)
        if step != 1:
            t = t * step
        if start != 0:
            t = t + start
        t.requires_grad = kwargs.get("requires_grad")
        return t

    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Seed `rand`: the same seed gives the same numbers on every device (counter-based Threefry)."""
        Tensor._seed, Tensor._rng_counter = int(seed), 0

    @staticmethod
    def rand(
        *shape: Any, device: str | None = None, dtype: Any = None, contiguous: bool = True, **kwargs: Any
    ) -> Tensor:
        """Uniform numbers in [0, 1): Threefry-2x32 of (element counter, seed), 23 random mantissa bits. The
        counter advances by the number of elements per call, so every device produces the same stream for the same
        seed and call sequence. Seed and counter reach the kernel in a small buffer, so repeated calls reuse one
        cached schedule and one compiled kernel. ``contiguous`` (tinygrad's: realize into a buffer of its own) is
        accepted and ignored."""
        shape = _shape_arg(shape)
        dt = _to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not dtypes.is_float(dt):
            raise TypeError(f"rand makes floats, not {dt}")
        if not all_int(shape) or any(d < 0 for d in shape):
            raise ValueError(f"rand needs non-negative int dimensions, got {shape}")
        dev = _canonical_device(device)
        n = prod(shape)
        state = Tensor([Tensor._seed % (1 << 64), Tensor._rng_counter % (1 << 64)], device=dev, dtype=dtypes.uint64)
        Tensor._rng_counter += n
        key, offset = state.shrink(((0, 1),)).reshape(()), state.shrink(((1, 2),)).reshape(())
        bits = (_iota(n, dev).cast(dtypes.uint64) + offset)._binop(Ops.THREEFRY, key)
        mantissa = ((bits & 0xFFFFFFFF).cast(dtypes.uint32) >> 9) | 0x3F800000
        out = (mantissa.bitcast(dtypes.float32) - 1.0).reshape(shape).cast(dt)
        out.requires_grad = kwargs.get("requires_grad")
        return out

    # ----- realizing

    def schedule_with_vars(self, *lst: Tensor) -> tuple[list[ScheduleItem], dict[str, int]]:
        """Schedule this tensor (and `lst`) without running: ``(items, var_vals)``. The tensors' uops already point
        at their output buffers afterwards, so run the items before reading them."""
        tensors = (self, *lst)
        items, var_vals, new = schedule_outputs([t.uop for t in tensors])
        for t, u in zip(tensors, new):
            if u is not None:
                if _grad_tensors:  # autograd keeps the graph of a realized value that gradients may need
                    note_realized(t, u)
                t.uop = u
        return items, var_vals

    def schedule(self, *lst: Tensor) -> list[ScheduleItem]:
        """The schedule items of `schedule_with_vars`."""
        return self.schedule_with_vars(*lst)[0]

    def realize(self, *lst: Tensor, do_update_stats: bool = True) -> Tensor:
        """Compute this tensor (and `lst`) into buffers; returns self. `Tensor.realize(a, b)` realizes both.

        Thread-safe: realizes are serialized by `tinycore.helpers.REALIZE_LOCK`, so threads sharing lazy tensors
        each find the data computed."""
        _lock_acquire()  # not `with`: this is the eager hot path, and acquire/release cost half as much
        try:
            if not lst and type(self.device) is str:  # one tensor on one device: the eager loop's case, fewer steps
                deferred = self._deferred
                if deferred is not None:
                    if type(deferred) is _DeferredBuffer:
                        return self
                    if (
                        not deferred.extended
                        and (self._requires_grad is not True or not _grad_tensors.data)
                        and (not _written_leaves or id(deferred.leaf) not in _written_leaves)
                    ):
                        # a chain of deferred ops nothing else holds (else it is built below, so the realized table
                        # serves the graphs that hold it), and no autograd history to remember (its leaf needs no
                        # gradient: tensors that do, a model's weights, elsewhere don't slow it): its cached schedule
                        # runs without building the chain, into a buffer whose uop is made when someone asks
                        found = schedule_for_chain(deferred.chain_id, deferred.leaf)
                        if found is not None:
                            entry, bufs, out, chain = found
                            self._deferred = _DeferredBuffer(out, chain)
                            run_cached, run_schedule = _runners()
                            if not run_cached(entry, bufs, {}, do_update_stats):
                                run_schedule(schedule_items(entry, bufs), {}, do_update_stats=do_update_stats)
                            return self
                uop = base = self.uop
                while base.op in _MOVEMENT:
                    base = base.src[0]
                if base.op is Ops.BUFFER:
                    return self
                entry, walk, bufs, new = schedule_for_run((uop,))
                if new[0] is not None:
                    if _grad_tensors.data:  # the WeakSet's own truth test is a Python-level __len__
                        note_realized(self, new[0])
                    self.uop = new[0]
                run_cached, run_schedule = _runners()
                if not run_cached(entry, bufs, walk.var_vals, do_update_stats):
                    run_schedule(schedule_items(entry, bufs), walk.var_vals, do_update_stats=do_update_stats)
                return self
            for t in (self, *lst):
                if _view_base(t.uop).op is not Ops.BUFFER and not (
                    t.uop.op is Ops.MULTI and all(_view_base(s).op is Ops.BUFFER for s in t.uop.src)
                ):
                    break
            else:
                return self
            items, var_vals = self.schedule_with_vars(*lst)
            _run_schedule()(items, var_vals, do_update_stats=do_update_stats)
            return self
        finally:
            _lock_release()

    def _buffer_view(self) -> tuple[Any, UOp]:
        """(Buffer, BUFFER uop) holding exactly this tensor's elements in order (realizing a copy when needed)."""
        if isinstance(self.device, tuple):  # multi-device: gathered on the first device
            return self.to(self.device[0])._buffer_view()
        self.realize()
        u = self.uop
        while u.op is Ops.RESHAPE:
            u = u.src[0]
        if u.op is Ops.BUFFER and u.arg == self.numel():
            return buffer_of(u), u
        t = self.contiguous().realize()
        u = t.uop
        while u.op is Ops.RESHAPE:
            u = u.src[0]
        if u.op is not Ops.BUFFER:
            raise RuntimeError(f"contiguous() of {self!r} did not produce a buffer")
        return buffer_of(u), u

    def numpy(self) -> Any:
        """A numpy copy of the value (realizes it). bfloat16 and the fp8 types (numpy has neither) come back as
        float32, the exact values (``t.bitcast(dtypes.uint8).numpy()`` gives fp8 bits). A shape whose variables are
        bound (a TinyJit result of symbolic shape) is read at their values."""
        if not all_int(self.shape):
            bound = tuple(d if isinstance(d, int) else d.unbind()[1] if d.op is Ops.BIND else None for d in self.shape)
            if any(d is None for d in bound):
                raise ValueError(f"numpy() needs a concrete shape or bound variables, got {self.shape}")
            return self.reshape(bound).numpy()
        if self.numel() == 0:
            import numpy as np

            return np.zeros(self.shape, dtype=dtypes.to_np(self.dtype))
        if self.dtype.itemsize == 1 and self.dtype in FP8S:
            from tinycore.dtype import fp8_decode_np

            return fp8_decode_np(self.bitcast(dtypes.uint8).numpy(), self.dtype)
        _lock_acquire()  # realize and copy out as one step (another thread may be realizing this tensor)
        try:
            self.realize()
            deferred = self._deferred
            if type(deferred) is _DeferredBuffer and deferred.buffer.size == self.numel():
                if all(op is Ops.RESHAPE for op, _ in deferred.chain):  # an eager result: its buffer, no uop built
                    return deferred.buffer.numpy().reshape(self.shape)
            buf, _ = self._buffer_view()
            return buf.numpy().reshape(self.shape)
        finally:
            _lock_release()

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        """DLPack export (``torch.from_dlpack(t)``, ``np.from_dlpack(t)``): a host copy of the value, through numpy.
        bfloat16 has no numpy twin: cast it first."""
        if self.dtype == dtypes.bfloat16:
            raise BufferError("bfloat16 can't be exported through numpy's DLPack: use t.float() (or t.numpy())")
        return self.numpy().__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """The DLPack device of `__dlpack__`'s copy: the host CPU."""
        return (1, 0)

    def tolist(self) -> Any:
        """The value as (nested) Python lists; a 0-d tensor gives a scalar."""
        return self.numpy().tolist()

    def item(self) -> ConstType:
        """The value of a one-element tensor as a Python scalar."""
        if self.numel() != 1:
            raise ValueError(f"a Tensor with {self.numel()} elements cannot be converted to a Python scalar")
        return self.numpy().reshape(-1)[0].item()

    def data(self) -> memoryview:
        """The value's bytes, as a memoryview (a copy)."""
        if isinstance(n := self.numel(), int) and n == 0:
            return memoryview(b"")
        with REALIZE_LOCK:
            buf, _ = self._buffer_view()
            return buf.as_buffer(allow_zero_copy=False)

    def to(self, device: str | tuple[str, ...] | None) -> Tensor:
        """This tensor on `device` (self when it is there already; otherwise a lazy COPY). A sharded tensor moved to
        one device is gathered there (copies + concatenation); a tuple of devices shards with the same axis."""
        dev = _canonical_device(device)
        if dev == self.device:
            return self
        if isinstance(dev, tuple):
            axis = self.uop.arg if isinstance(self.device, tuple) else None
            return self.shard(dev, axis)
        if isinstance(self.device, tuple):
            t = _wrap(gather(self.uop, dev), dev, self._shape)
            t.requires_grad = self.requires_grad
            return t
        t = _wrap(self.uop.copy_to_device(dev), dev, self._shape)
        t.requires_grad = self.requires_grad
        return t

    def shard(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
        """This tensor split along `axis` across `devices` (None: a full copy on every device), lazily.

        The result's `device` is the tuple of device names; ops between tensors sharded alike run per device, and
        `.to(device)` / `.numpy()` gather the shards. Uneven sizes split as evenly as possible (the first
        ``size % n`` shards get one more element); every device needs at least one element. See
        `tinycore.engine.multi` for what runs where.

        >>> t = Tensor.ones(4, 2).shard(("PYTHON:0", "PYTHON:1"), axis=0)
        >>> t.device, t.shape
        (('PYTHON', 'PYTHON:1'), (4, 2))
        """
        devs = _canonical_device(tuple(devices))
        if not isinstance(devs, tuple) or not devs:
            raise MultiDeviceError(f"shard needs a tuple of devices, got {devices!r}")
        ax = self._axis(axis) if axis is not None else None
        src: Tensor = self
        if isinstance(self.device, tuple):
            if self.device == devs and self.uop.arg == ax:
                return self
            if not (self.device == devs and self.uop.arg is None):  # replicated on devs: cut locally, else gather
                src = self.to(self.device[0])
        t = _wrap(shard_uop(src.uop, devs, ax), devs, self._shape)
        t.requires_grad = self.requires_grad
        return t

    def shard_(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
        """`shard` in place: this tensor becomes the sharded one; returns self."""
        t = self.shard(devices, axis)
        self.uop, self.device = t.uop, t.device
        return self

    def contiguous(self, **kwargs: Any) -> Tensor:
        """This value in its own buffer, elements in order (a no-op for a tensor that already is one). tinygrad's
        keyword arguments (an optional tag for its scheduler) are accepted and ignored."""
        return _wrap(self.uop.contiguous(), self.device, self._shape, self._requires_grad)

    def detach(self) -> Tensor:
        """The same value, cut from gradient tracking (`requires_grad` False)."""
        return _wrap(self.uop.detach(), self.device, self._shape, False)

    def assign(self, x: Any) -> Tensor:
        """Write `x` (broadcast and cast to this tensor's shape and dtype) into this tensor's buffer, lazily.

        A tensor that has no buffer (a lazy result, a constant) simply takes `x`'s value, even when an equal graph
        was realized before (``c = a * 2; c.numpy(); d = a * 2; d += 1`` leaves `c` alone).
        """
        if not isinstance(x, Tensor):
            x = Tensor(x, device=self.device, dtype=self.dtype)
        if x.device != self.device:
            raise RuntimeError(f"assign: the value is on {x.device}, the tensor on {self.device}")
        if x.shape != self.shape:
            try:
                shape = _broadcast_shape(x.shape, self.shape)
            except RuntimeError:
                shape = None
            if shape != tuple(self.shape):
                raise RuntimeError(
                    f"assign: a value of shape {_fmt_shape(x.shape)} can't be written into a tensor "
                    f"of shape {_fmt_shape(self.shape)}"
                )
            x = x._broadcast_to(shape)
        x = x.cast(self.dtype)
        if isinstance(self.device, tuple):  # per shard; a target that has no buffers takes the value, resharded
            if all(_view_base(s).op in (Ops.BUFFER, Ops.ASSIGN) for s in self.uop.src):
                self.uop = _wrap(self.uop.assign(x.uop), self.device, self._shape).uop
                note_assign(self)
            else:
                self.uop = x.shard(self.device, self.uop.arg).uop
            return self
        base = _view_base(self.uop)
        if base.op not in (Ops.BUFFER, Ops.ASSIGN):
            # no storage of its own, even when an earlier realize computed an equal graph: that buffer belongs to the
            # tensor that realized it (and to later reads of the graph), so this one takes the value instead
            self.uop = x.uop
            return self
        self.uop = self.uop.assign(x.uop)
        _live_add(self)  # a pending write that reads other buffers: see `_readers_of`
        note_assign(self)  # a TinyJit running its function realizes the write when the function returns
        return self

    # ----- elementwise building blocks

    def _broadcast_to(self, shape: tuple[sint, ...]) -> Tensor:
        if self.shape == shape:
            return self
        if len(shape) < self.ndim:
            raise RuntimeError(f"can't broadcast a tensor of shape {_fmt_shape(self.shape)} to {_fmt_shape(shape)}")
        padded = (1,) * (len(shape) - self.ndim) + tuple(self.shape)
        uop = self.uop.reshape(padded) if padded != self.shape else self.uop
        return _wrap(uop.expand(shape) if padded != shape else uop, self.device, shape, self._requires_grad)

    def _const_like(self, value: ConstType, dtype: DType, shape: tuple[sint, ...] = ()) -> Tensor:
        return _wrap(_const_uop(value, dtype, self.device, shape), self.device, shape, False)

    def _broadcasted(self, y: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
        x = self
        if isinstance(y, Tensor):
            if y.device != x.device:
                raise RuntimeError(
                    f"Expected all tensors to be on the same device, but found at least two devices, {x.device} and "
                    f"{y.device}!"
                )
            if x.dtype != y.dtype:
                dtype = least_upper_dtype(x.dtype, y.dtype)
                x, y = x.cast(dtype), y.cast(dtype)
            if x.shape != y.shape:
                shape = _broadcast_shape(x.shape, y.shape)
                x, y = x._broadcast_to(shape), y._broadcast_to(shape)
        elif isinstance(y, (bool, int, float)):
            dtype = x.dtype
            promoted = _scalar_category(y) > _category(dtype)
            if promoted:
                dtype = dtypes.default_float if isinstance(y, float) else dtypes.default_int
                x = x.cast(dtype)
            const = _const_uop(y, dtype, x.device, x._shape)
            if not promoted and y and type(y) is not bool and type(x.device) is str:
                if len(_scalar_operands) > 4096:
                    _scalar_operands.clear()
                try:
                    _scalar_operands[(type(y), y, x.device, x._shape)] = (dtype, const)
                except TypeError:  # symbolic shapes may not hash
                    pass
            y = _wrap(const, x.device, x._shape, False)  # a scalar operand never needs a gradient
        else:
            raise TypeError(f"unsupported operand type: Tensor and {type(y).__name__}")
        return (y, x) if reverse else (x, y)

    def _binop(self, op: Ops, y: Any, reverse: bool = False) -> Tensor:
        method = _binop_methods.get((op, reverse))
        if method is None:
            method = _binop_methods[(op, reverse)] = _binop_method(op, reverse)
        return method(self, y)

    def _binop_general(self, op: Ops, y: Any, reverse: bool) -> Tensor:
        x, y = self._broadcasted(y, reverse)
        if x.dtype.itemsize == 1 and x.dtype in FP8S and op is not Ops.CMPNE and op is not Ops.CMPEQ:
            raise _fp8_refused(x.dtype, op.name.lower())
        a, b = x.uop, y.uop
        return _wrap(
            UOp(op, _BOOL if op in _COMPARISON else a.dtype, (a, b)),
            x.device,
            x._shape,
            _grad_of2(x._requires_grad, y._requires_grad),
        )

    def _unop(self, op: Ops) -> Tensor:
        if self.dtype.itemsize == 1 and self.dtype in FP8S:
            raise _fp8_refused(self.dtype, op.name.lower())
        source = self.uop
        return self._keyed_unary(source, source.alu(op))

    def _keyed_unary(self, source: UOp, node: UOp) -> Tensor:
        """`node`, a unary op or cast of this tensor's uop `source`, as a tensor, keyed for the eager path."""
        note_unary(node, source)
        return _wrap(node, self.device, self._shape, self._requires_grad)

    def _float_unop(self, op: Ops) -> Tensor:
        return self.cast(least_upper_float(self.dtype))._unop(op)

    # ----- arithmetic

    def add(self, x: Any, reverse: bool = False) -> Tensor:
        """Elementwise sum (broadcasting, PyTorch type promotion)."""
        return self._binop(Ops.ADD, x, reverse)

    def sub(self, x: Any, reverse: bool = False) -> Tensor:
        """Elementwise difference."""
        return self._binop(Ops.SUB, x, reverse)

    def mul(self, x: Any, reverse: bool = False) -> Tensor:
        """Elementwise product."""
        return self._binop(Ops.MUL, x, reverse)

    def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        """Division like `torch.div`: ``rounding_mode=None`` is true division (integer operands are promoted to the
        default float first); ``"trunc"`` rounds the quotient toward zero and ``"floor"`` toward minus infinity,
        keeping an integer dtype for integer operands (`idiv` / ``//``)."""
        if rounding_mode is not None:
            if rounding_mode not in ("trunc", "floor"):
                raise RuntimeError(
                    f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found {rounding_mode!r}"
                )
            a, b = self._broadcasted(x, reverse)
            if dtypes.is_float(a.dtype):
                q = a.div(b)
                return q.trunc() if rounding_mode == "trunc" else q.floor()
            return a.idiv(b) if rounding_mode == "trunc" else a // b
        a, b = self._broadcasted(x, reverse)
        if a.dtype.itemsize == 1 and a.dtype in FP8S:
            raise _fp8_refused(a.dtype, "div")
        dt = least_upper_float(a.dtype)
        grad = _grad_of2(a._requires_grad, b._requires_grad)
        return _wrap(a.cast(dt).uop.alu(Ops.FDIV, b.cast(dt).uop), a.device, a._shape, grad)

    __add__ = _binop_methods.setdefault((Ops.ADD, False), _binop_method(Ops.ADD, False))

    __radd__ = _binop_methods.setdefault((Ops.ADD, True), _binop_method(Ops.ADD, True))

    __sub__ = _binop_methods.setdefault((Ops.SUB, False), _binop_method(Ops.SUB, False))

    __rsub__ = _binop_methods.setdefault((Ops.SUB, True), _binop_method(Ops.SUB, True))

    __mul__ = _binop_methods.setdefault((Ops.MUL, False), _binop_method(Ops.MUL, False))

    __rmul__ = _binop_methods.setdefault((Ops.MUL, True), _binop_method(Ops.MUL, True))

    def __truediv__(self, x: Any) -> Tensor:
        return self.div(x)

    def __rtruediv__(self, x: Any) -> Tensor:
        return self.div(x, True)

    def __neg__(self) -> Tensor:
        return self.logical_not() if self.dtype == dtypes.bool else self._unop(Ops.NEG)

    def __and__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.AND, x)

    def __rand__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.AND, x, True)

    def __or__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.OR, x)

    def __ror__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.OR, x, True)

    def __xor__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.XOR, x)

    def __rxor__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.XOR, x, True)

    def __lshift__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.SHL, x)

    def __rshift__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.SHR, x)

    def __rlshift__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.SHL, x, True)

    def __rrshift__(self, x: Any) -> Tensor:
        return self._bitwise(Ops.SHR, x, True)

    def __invert__(self) -> Tensor:
        if self.dtype == dtypes.bool:
            return self.logical_not()
        if dtypes.is_float(self.dtype):
            raise BitwiseDtypeError(f'"bitwise_not" not implemented for {self.dtype} (needs integer or bool tensors)')
        return self._bitwise(Ops.XOR, -1 if not dtypes.is_unsigned(self.dtype) else dtypes.max(self.dtype))

    def _bitwise(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
        a, b = self._broadcasted(x, reverse)
        if a.dtype.itemsize == 1 and a.dtype in FP8S:
            raise _fp8_refused(a.dtype, f"bitwise {op.name.lower()}")
        if dtypes.is_float(a.dtype):
            raise BitwiseDtypeError(f"bitwise {op.name} needs integer or bool tensors, got {a.dtype}")
        return _wrap(a.uop.alu(op, b.uop), a.device, a._shape, _grad_of2(a._requires_grad, b._requires_grad))

    # ----- named forms of the operators (tinygrad's and PyTorch's method names)

    def neg(self) -> Tensor:
        """``-self`` (logical not for bool tensors, as tinygrad; PyTorch raises for bool)."""
        return -self

    def bitwise_and(self, x: Any, reverse: bool = False) -> Tensor:
        """``self & x`` for integer and bool tensors (`NotImplementedError`/`TypeError` for floats, as torch)."""
        return self._bitwise(Ops.AND, x, reverse)

    def bitwise_or(self, x: Any, reverse: bool = False) -> Tensor:
        """``self | x`` for integer and bool tensors."""
        return self._bitwise(Ops.OR, x, reverse)

    def bitwise_xor(self, x: Any, reverse: bool = False) -> Tensor:
        """``self ^ x`` for integer and bool tensors."""
        return self._bitwise(Ops.XOR, x, reverse)

    def bitwise_not(self) -> Tensor:
        """``~self``: bitwise not of integers, logical not of bools."""
        return ~self

    def lshift(self, x: Any, reverse: bool = False) -> Tensor:
        """``self << x`` (``x << self`` with ``reverse``) for integer tensors."""
        return self._bitwise(Ops.SHL, x, reverse)

    def rshift(self, x: Any, reverse: bool = False) -> Tensor:
        """``self >> x`` (``x >> self`` with ``reverse``) for integer tensors: arithmetic shift for signed ones."""
        return self._bitwise(Ops.SHR, x, reverse)

    def eq(self, x: Any) -> Tensor:
        """``self == x`` elementwise (a bool tensor)."""
        return self == x

    def ne(self, x: Any) -> Tensor:
        """``self != x`` elementwise (a bool tensor)."""
        return self != x

    def is_floating_point(self) -> bool:
        """Whether the dtype is a floating-point type (`torch.Tensor.is_floating_point`)."""
        return dtypes.is_float(self.dtype)

    def size(self, dim: int | None = None) -> sint | tuple[sint, ...]:
        """The shape (``dim=None``) or the size of dimension ``dim`` (negative counts from the end), as torch."""
        if dim is None:
            return self.shape
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise TypeError(f"size(): argument 'dim' (position 1) must be int, not {type(dim).__name__}")
        if self.ndim == 0:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        return self.shape[self._axis(dim)]

    # ----- in-place operators: ``t op= x`` is ``t.assign(t op x)`` and returns ``t`` itself

    def _inplace(self, result: Tensor) -> Tensor:
        """Write ``result`` into this tensor (`assign`), after PyTorch's checks: its dtype must be castable to ours
        without changing kind (``int_tensor += 0.5`` raises) and its shape must be ours (no broadcast of ``self``)."""
        if not _can_cast_inplace(result.dtype, self.dtype):
            raise RuntimeError(
                f"result type {_torch_dtype_name(result.dtype)} can't be cast to the desired output type "
                f"{_torch_dtype_name(self.dtype)}"
            )
        if tuple(result.shape) != tuple(self.shape):
            raise RuntimeError(
                f"output with shape {_fmt_shape(self.shape)} doesn't match the broadcast shape "
                f"{_fmt_shape(result.shape)}"
            )
        return self.assign(result)

    def __iadd__(self, x: Any) -> Tensor:
        """``self += x`` in place (``self.assign(self + x)``): aliases and realized buffers see the new value."""
        return self._inplace(self + x)

    def __isub__(self, x: Any) -> Tensor:
        """``self -= x`` in place."""
        return self._inplace(self - x)

    def __imul__(self, x: Any) -> Tensor:
        """``self *= x`` in place."""
        return self._inplace(self * x)

    def __itruediv__(self, x: Any) -> Tensor:
        """``self /= x`` in place (raises for integer tensors: the quotient is a float, as in torch)."""
        return self._inplace(self / x)

    def __ifloordiv__(self, x: Any) -> Tensor:
        """``self //= x`` in place."""
        return self._inplace(self // x)

    def __imod__(self, x: Any) -> Tensor:
        """``self %= x`` in place."""
        return self._inplace(self % x)

    def __ipow__(self, x: Any) -> Tensor:
        """``self **= x`` in place."""
        return self._inplace(self**x)

    def __iand__(self, x: Any) -> Tensor:
        """``self &= x`` in place."""
        return self._inplace(self & x)

    def __ior__(self, x: Any) -> Tensor:
        """``self |= x`` in place."""
        return self._inplace(self | x)

    def __ixor__(self, x: Any) -> Tensor:
        """``self ^= x`` in place."""
        return self._inplace(self ^ x)

    def __ilshift__(self, x: Any) -> Tensor:
        """``self <<= x`` in place."""
        return self._inplace(self << x)

    def __irshift__(self, x: Any) -> Tensor:
        """``self >>= x`` in place."""
        return self._inplace(self >> x)

    def __imatmul__(self, x: Any) -> Tensor:
        """``self @= x`` in place (tinygrad; the product must have this tensor's shape, e.g. square matrices)."""
        return self._inplace(self @ x)

    # ----- comparisons (bool results)

    def __lt__(self, x: Any) -> Tensor:
        return self._binop(Ops.CMPLT, x)

    def __gt__(self, x: Any) -> Tensor:
        return self._binop(Ops.CMPLT, x, True)

    def __le__(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x)
        grad = _grad_of2(a._requires_grad, b._requires_grad)
        return _wrap(a.uop.alu(Ops.CMPLT, b.uop).alu(Ops.OR, a.uop.alu(Ops.CMPEQ, b.uop)), a.device, a._shape, grad)

    def __ge__(self, x: Any) -> Tensor:
        a, b = self._broadcasted(x)
        grad = _grad_of2(a._requires_grad, b._requires_grad)
        return _wrap(b.uop.alu(Ops.CMPLT, a.uop).alu(Ops.OR, a.uop.alu(Ops.CMPEQ, b.uop)), a.device, a._shape, grad)

    def __eq__(self, x: Any) -> Tensor:  # type: ignore[override]
        return self._binop(Ops.CMPEQ, x)

    def __ne__(self, x: Any) -> Tensor:  # type: ignore[override]
        return self._binop(Ops.CMPNE, x)

    def logical_not(self) -> Tensor:
        """Elementwise not (of the value cast to bool)."""
        return self.cast(dtypes.bool)._binop(Ops.CMPNE, True)

    def where(self, x: Any, y: Any) -> Tensor:
        """`x` where this (cast to bool) is true, else `y`; all three broadcast together.

        >>> Tensor([True, False]).where(1.0, 2.0).dtype
        dtypes.float
        """
        cond = self.cast(dtypes.bool)
        if isinstance(x, Tensor):
            x, y = x._broadcasted(y)
        elif isinstance(y, Tensor):
            y, x = y._broadcasted(x)
        else:
            dt = dtypes.from_py(x) if _scalar_category(x) >= _scalar_category(y) else dtypes.from_py(y)
            x = cond._const_like(x, dt)
            y = cond._const_like(y, dt)
        shape = _broadcast_shape(cond.shape, x.shape, y.shape)
        cond, x, y = cond._broadcast_to(shape), x._broadcast_to(shape), y._broadcast_to(shape)
        grad = _grad_of(cond._requires_grad, x._requires_grad, y._requires_grad)
        return _wrap(cond.uop.alu(Ops.WHERE, x.uop, y.uop), cond.device, shape, grad)

    def maximum(self, x: Any) -> Tensor:
        """Elementwise max (NaN wins)."""
        return self._binop(Ops.MAX, x)

    def minimum(self, x: Any) -> Tensor:
        """Elementwise min (NaN wins for floats)."""
        a, b = self._broadcasted(x)
        if dtypes.is_unsigned(a.dtype) or a.dtype == dtypes.bool:
            return (a < b).where(a, b)
        return -((-a).maximum(-b))

    # ----- unary math

    def cast(self, dtype: Any) -> Tensor:
        """Value conversion to `dtype` (C semantics: float to int truncates)."""
        dt = _to_dtype(dtype)
        if dt == self.dtype:
            return self
        source = self.uop
        return self._keyed_unary(source, source.cast(dt))

    def bitcast(self, dtype: Any) -> Tensor:
        """Reinterpret the bits as `dtype` (same item size)."""
        dt = _to_dtype(dtype)
        if dt.itemsize != self.dtype.itemsize:
            raise TypeError(f"bitcast from {self.dtype} to {dt} changes the item size")
        if dt == self.dtype:
            return self
        return _wrap(self.uop.bitcast(dt), self.device, self._shape, self._requires_grad)

    def exp2(self) -> Tensor:
        """2 ** x."""
        return self._float_unop(Ops.EXP2)

    def log2(self) -> Tensor:
        """log base 2."""
        return self._float_unop(Ops.LOG2)

    def exp(self) -> Tensor:
        """e ** x (as exp2(x / ln 2)). 16-bit floats compute in float32 and round once, as torch does: rounding
        ``x / ln 2`` to 8 bits first would put bfloat16's exp(88) 2.8% off."""
        if self.dtype in (dtypes.float16, dtypes.bfloat16):
            return self.cast(dtypes.float32).exp().cast(self.dtype)
        return (self.cast(least_upper_float(self.dtype)) * (1 / math.log(2))).exp2()

    def log(self) -> Tensor:
        """Natural logarithm (as log2(x) * ln 2)."""
        return self.log2() * math.log(2)

    def sqrt(self) -> Tensor:
        """Square root."""
        return self._float_unop(Ops.SQRT)

    def sin(self) -> Tensor:
        """Sine."""
        return self._float_unop(Ops.SIN)

    def reciprocal(self) -> Tensor:
        """1 / x."""
        return self._float_unop(Ops.RECIP)

    def relu(self) -> Tensor:
        """max(x, 0), with torch's gradient: 0 at 0 (not the 1/2 of a tie in `maximum`), 1 for NaN."""
        if not dtypes.is_float(self.dtype):
            return self.maximum(0)
        return (self <= 0).where(0.0, self)

    def abs(self) -> Tensor:
        """Absolute value (+0.0 for -0.0, like torch; the gradient at 0 is 0)."""
        if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool:
            return self
        magnitude = self.maximum(-self)  # max(-0.0, 0.0) keeps the first operand: -0.0
        return (self == 0).where(0, magnitude) if dtypes.is_float(self.dtype) else magnitude

    def square(self) -> Tensor:
        """x * x."""
        return self * self

    # ----- movement

    def reshape(self, shape: Any = (), *args: Any) -> Tensor:
        """The same elements in a new shape (``reshape(2, 3)`` or ``reshape((2, 3))``); one dimension may be -1
        (inferred) and a ``None`` entry keeps this tensor's size in that position (tinygrad)."""
        # the common case first (every reduce and matmul reshapes several times): a shape of sizes >= 0, of a tensor
        # whose own shape is concrete
        new = shape if not args and type(shape) is tuple else (shape, *args) if type(shape) is int else None
        if new is not None and all(type(d) is int and d >= 0 for d in new):
            cur = self._shape
            if new == cur:
                return self
            if all(type(d) is int for d in cur):
                if prod(new) != prod(cur):
                    raise RuntimeError(f"shape '{_fmt_shape(new)}' is invalid for input of size {prod(cur)}")
                return _wrap(self.uop.reshape(new), self.device, new, self._requires_grad)
        new = _shape_arg((shape, *args))
        if None in new:
            if len(new) > self.ndim and any(d is None for d in new[self.ndim :]):
                raise RuntimeError(f"reshape: a None entry at position >= {self.ndim} has no dimension to keep")
            new = tuple(self.shape[i] if d is None else d for i, d in enumerate(new))
        numel = self.numel()
        if sum(1 for d in new if isinstance(d, int) and d == -1) > 1:
            raise RuntimeError("only one dimension can be inferred")
        for d in new:
            if isinstance(d, int) and d < -1:
                raise RuntimeError(f"invalid shape dimension {d}")
        if -1 in [d for d in new if isinstance(d, int)]:
            known = prod(d for d in new if not (isinstance(d, int) and d == -1))
            if known == 0 or not isinstance(numel, int) or not isinstance(known, int) or numel % known:
                raise RuntimeError(f"shape '{_fmt_shape(new)}' is invalid for input of size {numel}")
            new = tuple(numel // known if isinstance(d, int) and d == -1 else d for d in new)
        if prod(new) != numel and all_int(new) and isinstance(numel, int):
            raise RuntimeError(f"shape '{_fmt_shape(new)}' is invalid for input of size {numel}")
        if new == self.shape:
            return self
        return _wrap(self.uop.reshape(new), self.device, new, self._requires_grad)

    def view(self, shape: Any = (), *args: Any) -> Tensor:
        """Alias of `reshape`."""
        return self.reshape(shape, *args)

    def expand(self, shape: Any = (), *args: Any) -> Tensor:
        """Broadcast size-1 dimensions to `shape` (-1 keeps a dimension); new leading dimensions are allowed."""
        new = _shape_arg((shape, *args))
        if len(new) < self.ndim:
            raise RuntimeError(
                f"expand: the number of sizes provided ({len(new)}) must be greater or equal to the number of "
                f"dimensions in the tensor ({self.ndim})"
            )
        old = (1,) * (len(new) - self.ndim) + tuple(self.shape)
        out: list[sint] = []
        for i, (o, n) in enumerate(zip(old, new)):
            if isinstance(n, int) and n == -1:
                if i < len(new) - self.ndim:
                    raise RuntimeError(f"expand: -1 is not allowed in a leading, non-existing dimension ({i})")
                n = o
            if o != n and not (isinstance(o, int) and o == 1):
                raise RuntimeError(
                    f"The expanded size of the tensor ({n}) must match the existing size ({o}) at non-singleton "
                    f"dimension {i}.  Target sizes: {_fmt_shape(new)}.  Tensor sizes: {_fmt_shape(self.shape)}"
                )
            out.append(n)
        return self._broadcast_to(tuple(out))

    def _axis(self, axis: int, ndim: int | None = None) -> int:
        n = self.ndim if ndim is None else ndim
        if not -max(n, 1) <= axis < max(n, 1):
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-max(n, 1)}, {max(n, 1) - 1}], but got {axis})"
            )
        return axis % n if n else 0

    def permute(self, order: Any = (), *args: Any) -> Tensor:
        """Reorder the dimensions: ``permute(1, 0)`` or ``permute((1, 0))``."""
        order = _shape_arg((order, *args))
        dims = tuple(self._axis(a) for a in order)
        if sorted(dims) != list(range(self.ndim)):
            raise RuntimeError(
                f"permute: {list(_shape_arg(order))} is not a permutation of the {self.ndim} "
                f"dimensions of a tensor of shape {_fmt_shape(self.shape)}"
            )
        if dims == tuple(range(self.ndim)):
            return self
        return _wrap(self.uop.permute(dims), self.device, tuple(self._shape[d] for d in dims), self._requires_grad)

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        """Swap two dimensions."""
        order = list(range(self.ndim))
        a, b = self._axis(dim0), self._axis(dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:  # noqa: N802 - PyTorch's name
        """The tensor with its dimensions reversed."""
        return self.permute(tuple(range(self.ndim))[::-1])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Merge dimensions `start_dim..end_dim` into one."""
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._axis(start_dim), self._axis(end_dim)
        if s > e:
            raise RuntimeError(
                f"flatten(start_dim={start_dim}, end_dim={end_dim}): start_dim comes after end_dim in a tensor of "
                f"{self.ndim} dims; pass start_dim <= end_dim"
            )
        return self.reshape(*self.shape[:s], prod(self.shape[s : e + 1]), *self.shape[e + 1 :])

    def shrink(self, arg: Sequence[Any]) -> Tensor:
        """Keep ``[start, end)`` of each dimension (None keeps it whole)."""
        if len(arg) != self.ndim:
            raise ValueError(f"shrink needs one (start, end) per dimension ({self.ndim}), got {len(arg)}")
        bounds = tuple((0, s) if a is None else (_index_sint(a[0]), _index_sint(a[1])) for a, s in zip(arg, self.shape))
        for (b, e), s in zip(bounds, self.shape):
            if all_int((b, e, s)) and not 0 <= b <= e <= s:
                raise ValueError(f"shrink bounds {bounds} out of range for shape {_fmt_shape(self.shape)}")
        if all(b == 0 and e == s for (b, e), s in zip(bounds, self.shape)):
            return self
        return _wrap(self.uop.shrink(bounds), self.device, None, self._requires_grad)

    def flip(self, axis: int | Sequence[int], *args: int) -> Tensor:
        """Reverse the order of elements along `axis`: ``flip(0, 1)`` or ``flip((0, 1))``; an axis named twice
        raises, as in torch."""
        given = _shape_arg((axis, *args))
        axes = {self._axis(a) for a in given}
        if len(axes) != len(given):
            dup = next(a for a in given if sum(self._axis(b) == self._axis(a) for b in given) > 1)
            raise RuntimeError(f"dim {self._axis(dup)} appears multiple times in the list of dims")
        if not axes:
            return self
        flags = tuple(i in axes for i in range(self.ndim))
        return _wrap(self.uop.flip(flags), self.device, self._shape, self._requires_grad)

    # ----- reductions

    def _reduce_axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        if type(axis) is int:  # the common case, without the general path's set and sort
            n = len(self._shape)
            if n and -n <= axis < n:
                return (axis + n if axis < 0 else axis,)
        axes = axis if isinstance(axis, (tuple, list)) else (axis,)
        checked = tuple(sorted({self._axis(a) for a in axes}))
        return () if self.ndim == 0 else checked  # a 0-d tensor takes dim 0 or -1, as in torch: nothing to reduce

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        if self.dtype.itemsize == 1 and self.dtype in FP8S:
            raise _fp8_refused(self.dtype, f"reduce {op.name.lower()}")
        axes = self._reduce_axes(axis)
        if self.ndim == 0:
            return self
        kept = tuple(1 if i in axes else s for i, s in enumerate(self._shape))
        count = prod(self._shape[i] for i in axes) if axes else 1
        if len(axes) == self.ndim and isinstance(count, int) and count >= _SPLIT_REDUCE_MIN and count % 64 == 0:
            # a large full reduction in two kernels (64 partial results, then their total), so the first one can
            # be split across CPU threads / GPU work-groups: one kernel with a single output runs on one core
            partial = self.reshape(64, count // 64)._reduce(op, 1, False)
            return partial._reduce(op, 0, False).reshape(kept if keepdim else ())
        ret = _wrap(self.uop.r(op, axes), self.device, kept, self._requires_grad) if axes else self
        if keepdim:
            return ret
        return ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(
        self,
        axis: int | Sequence[int] | None = None,
        keepdim: bool = False,
        dtype: Any = None,
        *,
        acc_dtype: Any = None,
    ) -> Tensor:
        """Sum over `axis` (all by default). Accumulates in `sum_acc_dtype` like PyTorch (bool and ints give int64;
        half and bfloat16 add in float32 and are cast back, so an fp16 total above 65504 is inf); ``dtype`` (as in
        `torch.sum`; ``acc_dtype`` is an older tinycore alias) overrides it: the input is cast to it and the result
        keeps it. Float sums of more than 2**19 elements per output are split into stages
        (`tinycore.frontend.reduce.cascade_sum`) so they stay accurate."""
        if dtype is not None and acc_dtype is not None and _to_dtype(dtype) != _to_dtype(acc_dtype):
            raise TypeError(f"sum: dtype={dtype} and acc_dtype={acc_dtype} disagree (acc_dtype is an alias of dtype)")
        acc_dtype = dtype if dtype is not None else acc_dtype
        acc = _to_dtype(acc_dtype) if acc_dtype is not None else sum_acc_dtype(self.dtype)
        ret = cascade_sum(self.cast(acc), axis, keepdim)
        if acc_dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16):
            ret = ret.cast(self.dtype)
        return ret

    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Arithmetic mean over `axis` (a float result; integers give the default float). Like PyTorch, float16 and
        bfloat16 are summed and divided in float32 before the cast back, so ``ones(70000, dtype=half).mean()`` is 1."""
        n = prod(self.shape[i] for i in self._reduce_axes(axis))
        out = least_upper_float(self.dtype)
        scale = 1 / n if n else math.nan
        if out in (dtypes.float16, dtypes.bfloat16):
            return (self.sum(axis, keepdim, acc_dtype=dtypes.float32) * scale).cast(out)
        return self.sum(axis, keepdim).cast(out) * scale

    def softmax(self, axis: int = -1, dtype: Any = None, _single_kernel: int = 0) -> Tensor:
        """exp(x - max) / sum(exp(x - max)) along `axis` (one kernel on devices that fuse row reduces, else three
        at most). Like PyTorch's CPU kernel, each row is scaled by the reciprocal of its sum (a multiply per element,
        not a division). Half-precision input is computed in float32 (as PyTorch accumulates) and cast back; an
        empty axis gives an empty result. ``dtype`` casts the input first (`torch.softmax`'s ``dtype``);
        ``_single_kernel`` is tinygrad's private fusion switch, accepted and ignored (tinycore fuses anyway)."""
        if dtype is not None:
            return self.cast(dtype).softmax(axis)
        x, out_dtype = self._softmax_input(axis)
        if x.ndim == 0:
            return x.reshape(1).softmax(0).reshape(()).cast(out_dtype)
        if x.shape[axis] == 0:
            return x.cast(out_dtype)
        e = (x - x.max(axis, keepdim=True).detach()).exp()  # shift-invariant: the max needs no gradient
        return (e * e.sum(axis, keepdim=True).reciprocal()).cast(out_dtype)

    def log_softmax(self, axis: int = -1, dtype: Any = None) -> Tensor:
        """log(softmax(x)) computed stably (half precision in float32, like `softmax`; an empty axis: empty);
        ``dtype`` casts the input first, as in `torch.log_softmax`."""
        if dtype is not None:
            return self.cast(dtype).log_softmax(axis)
        x, out_dtype = self._softmax_input(axis)
        if x.ndim == 0:
            return x.reshape(1).log_softmax(0).reshape(()).cast(out_dtype)
        if x.shape[axis] == 0:
            return x.cast(out_dtype)
        shifted = x - x.max(axis, keepdim=True).detach()  # shift-invariant: the max needs no gradient
        return (shifted - shifted.exp().sum(axis, keepdim=True).log()).cast(out_dtype)

    def _softmax_input(self, axis: int) -> tuple[Tensor, DType]:
        """The value softmax works on (float32 for half input) and the result's dtype; checks `axis`."""
        out_dtype = least_upper_float(self.dtype)
        if not -max(self.ndim, 1) <= axis < max(self.ndim, 1):
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-max(self.ndim, 1)}, {max(self.ndim, 1) - 1}], "
                f"but got {axis})"
            )
        work = dtypes.float32 if out_dtype in (dtypes.float16, dtypes.bfloat16) else out_dtype
        return self.cast(work), out_dtype


register_tensor_type(Tensor, _wrap)  # TinyJit (in the engine, below this module) recognizes and builds tensors
