"""The IR verifier: which ops each stage allows, and the dtype/source/arg rules of every op.

`type_verify(graph_or_list, spec)` raises `SpecError` naming the first ill-formed UOp. Stages (see docs/ir.md):

- `"tensor"`: the lazy tensor graph (buffers, movement ops, REDUCE_AXIS, elementwise, COPY/ASSIGN/MULTI...).
- `"kernel"`: a kernel AST and its lowered forms (DEFINE_GLOBAL, movement views, RANGE, INDEX/LOAD/STORE...).
- `"program"`: a linearized program: a list in execution order with RANGE/END and IF/ENDIF properly nested.
- `"any"`: every op allowed; only the per-op rules are checked (for passes that mix stages).

`graph_rewrite(..., name=...)` runs this after the pass when `SPEC=1`.

>>> x = UOp.variable("x", 0, 3)
>>> type_verify(x + 1, "kernel")
>>> bad = UOp(Ops.ADD, dtypes.int, (x, UOp.const(dtypes.float, 1.0)))
>>> try:
...     type_verify(bad, "kernel")
... except SpecError as e:
...     print(str(e).splitlines()[0])
spec 'kernel' failed: ADD sources must have the node's dtype dtypes.int, got [dtypes.index, dtypes.float]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tinycore.dtype import AddrSpace, DType, PtrDType, dtypes
from tinycore.uop.ops import AxisType, GroupOp, Ops, UOp, _arg_uops, _short

__all__ = ["PROGRAM_OPS", "KERNEL_OPS", "SPECS", "TENSOR_OPS", "SpecError", "type_verify"]


class SpecError(RuntimeError):
    """A UOp graph violates the IR spec; `.uop` is the offending node, `.pass_name` the rewrite pass (if any)."""

    def __init__(self, message: str, uop: UOp | None = None, pass_name: str | None = None):
        super().__init__(message)
        self.uop = uop
        self.pass_name = pass_name


_ALU_AND_CAST = GroupOp.Elementwise
_META = frozenset({Ops.SINK, Ops.GROUP, Ops.NOOP, Ops.AFTER, Ops.CUSTOM})

TENSOR_OPS: frozenset[Ops] = (
    _META
    | _ALU_AND_CAST
    | GroupOp.Movement
    | {
        Ops.UNIQUE,
        Ops.DEVICE,
        Ops.KERNEL,
        Ops.BUFFER,
        Ops.BUFFER_VIEW,
        Ops.CONST,
        Ops.VCONST,
        Ops.DEFINE_VAR,
        Ops.BIND,
        Ops.REDUCE_AXIS,
        Ops.COPY,
        Ops.ASSIGN,
        Ops.CONTIGUOUS,
        Ops.CONTIGUOUS_BACKWARD,
        Ops.DETACH,
        Ops.MULTI,
        Ops.MSELECT,
        Ops.MSTACK,
        Ops.ALLREDUCE,
        Ops.IOTA,
    }
)

KERNEL_OPS: frozenset[Ops] = (
    _META
    | _ALU_AND_CAST
    | GroupOp.Movement
    | {
        Ops.DEFINE_GLOBAL,
        Ops.DEFINE_LOCAL,
        Ops.DEFINE_REG,
        Ops.DEFINE_VAR,
        Ops.BIND,
        Ops.CONST,
        Ops.VCONST,
        Ops.SPECIAL,
        Ops.RANGE,
        Ops.REDUCE_AXIS,
        Ops.INDEX,
        Ops.LOAD,
        Ops.STORE,
        Ops.REDUCE,
        Ops.END,
        Ops.BARRIER,
        Ops.IF,
        Ops.ENDIF,
        Ops.VECTORIZE,
        Ops.GEP,
        Ops.UNROLL,
        Ops.CONTRACT,
        Ops.WMMA,
        Ops.SHUFFLE,
        Ops.IOTA,
    }
)

# kernel-AST ops that lowering removes before a program is linearized
_KERNEL_ONLY = frozenset({Ops.REDUCE_AXIS, Ops.REDUCE, Ops.UNROLL, Ops.CONTRACT, Ops.IOTA})
PROGRAM_OPS: frozenset[Ops] = KERNEL_OPS - GroupOp.Movement - _KERNEL_ONLY

SPECS: dict[str, frozenset[Ops]] = {
    "tensor": TENSOR_OPS,
    "kernel": KERNEL_OPS,
    "program": PROGRAM_OPS,
    "any": GroupOp.All,
}


def _is_int(dtype: DType) -> bool:
    return dtypes.is_int(dtype) and not isinstance(dtype, PtrDType)


def _is_bool(dtype: DType) -> bool:
    return dtype.scalar() == dtypes.bool and not isinstance(dtype, PtrDType)


def _bool_like(dtype: DType) -> DType:
    return dtypes.bool.vec(dtype.count) if dtype.count > 1 else dtypes.bool


def _check_const_value(value: Any, dtype: DType) -> str | None:
    scalar = dtype.scalar()
    if scalar == dtypes.bool:
        ok = isinstance(value, bool)
    elif dtypes.is_int(scalar):
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and scalar != dtypes.index and not dtypes.min(scalar) <= value <= dtypes.max(scalar):
            return f"constant {value} is outside the range of {dtype!r}"
    elif dtypes.is_float(scalar):
        ok = isinstance(value, float)
    else:
        return f"no constants of dtype {dtype!r}"
    return None if ok else f"constant {value!r} ({type(value).__name__}) doesn't match dtype {dtype!r}"


def _check_alu(u: UOp) -> str | None:
    op, dt = u.op, u.dtype
    if op in GroupOp.Unary and len(u.src) != 1 or op in GroupOp.Binary and len(u.src) != 2:
        return f"{op.name} needs {1 if op in GroupOp.Unary else 2} sources, got {len(u.src)}"
    if op in GroupOp.Ternary and len(u.src) != 3:
        return f"{op.name} needs 3 sources, got {len(u.src)}"
    if isinstance(dt, PtrDType) or dt == dtypes.void:
        return f"{op.name} can't produce {dt!r}"
    if op is Ops.WHERE:
        gate, a, b = u.src
        if not _is_bool(gate.dtype):
            return f"WHERE gate must be bool, got {gate.dtype!r}"
        if a.dtype != dt or b.dtype != dt:
            return f"WHERE branches must have the node's dtype {dt!r}, got {a.dtype!r} and {b.dtype!r}"
        if gate.dtype.count not in (1, dt.count):
            return f"WHERE gate width {gate.dtype.count} doesn't match {dt!r}"
        return None
    if op in GroupOp.Comparison:
        if dt != _bool_like(u.src[0].dtype):
            return f"{op.name} must return {_bool_like(u.src[0].dtype)!r}, got {dt!r}"
        if u.src[0].dtype != u.src[1].dtype:
            return f"{op.name} sources must share a dtype, got {u.src[0].dtype!r} and {u.src[1].dtype!r}"
        return None
    if any(s.dtype != dt for s in u.src):
        return f"{op.name} sources must have the node's dtype {dt!r}, got {[s.dtype for s in u.src]}"
    if op in (Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR) and not _is_int(dt):
        return f"{op.name} needs an integer dtype, got {dt!r}"
    if op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.FDIV, Ops.TRUNC, Ops.POW) and not dtypes.is_float(
        dt
    ):
        return f"{op.name} needs a float dtype, got {dt!r}"
    if op in (Ops.AND, Ops.OR, Ops.XOR) and not (_is_int(dt) or _is_bool(dt)):
        return f"{op.name} needs an integer or bool dtype, got {dt!r}"
    if op is Ops.THREEFRY and dt.scalar() != dtypes.uint64:  # lane by lane on vectors
        return f"THREEFRY works on uint64 (or vectors of it), got {dt!r}"
    return None


def _check_shape_arg(u: UOp) -> str | None:
    arg = u.arg
    if not isinstance(arg, tuple):
        return f"{u.op.name} arg must be a tuple, got {arg!r}"
    if u.op in (Ops.RESHAPE, Ops.EXPAND):
        if not all(isinstance(a, int) and a >= 0 or isinstance(a, UOp) and _is_int(a.dtype) for a in arg):
            return f"{u.op.name} arg must be a shape of ints >= 0 or symbolic ints, got {arg!r}"
    elif u.op is Ops.PERMUTE:
        if sorted(arg) != list(range(len(arg))):
            return f"PERMUTE arg must be a permutation of 0..{len(arg) - 1}, got {arg!r}"
    elif u.op in (Ops.PAD, Ops.SHRINK):
        if not all(isinstance(p, tuple) and len(p) == 2 for p in arg):
            return f"{u.op.name} arg must be ((a, b), ...) pairs, got {arg!r}"
    elif u.op is Ops.FLIP:
        if not all(isinstance(f, bool) for f in arg):
            return f"FLIP arg must be a tuple of bools, got {arg!r}"
    if len(u.src) != 1:
        return f"{u.op.name} takes one source, got {len(u.src)}"
    if u.dtype != u.src[0].dtype:
        return f"{u.op.name} must keep its source's dtype {u.src[0].dtype!r}, got {u.dtype!r}"
    src_shape = u.src[0].shape if u.op is not Ops.RESHAPE else None
    if src_shape is not None and u.op is not Ops.RESHAPE and len(arg) != len(src_shape):
        return f"{u.op.name} arg has {len(arg)} axes but the source has shape {src_shape}"
    return None


def _check_ptr_index(u: UOp) -> str | None:
    buf = u.src[0] if u.src else None
    if buf is None or len(u.src) < 2:
        return "INDEX needs (buffer, index[, gate]) sources"
    if isinstance(buf.dtype, PtrDType):
        if len(u.src) > 3:
            return f"INDEX of a pointer takes (buffer, index[, gate]), got {len(u.src)} sources"
        if not _is_int(u.src[1].dtype):
            return f"INDEX index must be an integer, got {u.src[1].dtype!r}"
        if len(u.src) == 3 and not _is_bool(u.src[2].dtype):
            return f"INDEX gate must be bool, got {u.src[2].dtype!r}"
        if not isinstance(u.dtype, PtrDType) or u.dtype.base != buf.dtype.base:
            return f"INDEX of {buf.dtype!r} must be a pointer to {buf.dtype.base!r}, got {u.dtype!r}"
        return None
    # the lowering form: value indexed by ranges
    if u.dtype != buf.dtype:
        return f"INDEX of a value must keep its dtype {buf.dtype!r}, got {u.dtype!r}"
    if not all(_is_int(s.dtype) for s in u.src[1:]):
        return "INDEX of a value takes integer indices"
    return None


def _check_load(u: UOp) -> str | None:
    if not u.src or len(u.src) > 2:
        return f"LOAD takes (pointer[, alt]), got {len(u.src)} sources"
    ptr = u.src[0].dtype
    if not isinstance(ptr, PtrDType):
        return f"LOAD source must be a pointer (an INDEX), got {ptr!r}"
    want = ptr.base.vec(ptr.v) if ptr.v > 1 else ptr.base
    if u.dtype != want and u.dtype.scalar() != ptr.base.scalar():
        return f"LOAD through {ptr!r} must return {want!r}, got {u.dtype!r}"
    if len(u.src) == 2:
        if u.src[1].dtype != u.dtype:
            return f"LOAD alt value must have the load's dtype {u.dtype!r}, got {u.src[1].dtype!r}"
        if u.src[0].op is Ops.INDEX and len(u.src[0].src) != 3:
            return "LOAD with an alt value needs a gated INDEX (buffer, index, gate)"
    return _check_lane_gate(u.src[0], u.dtype)


def _check_lane_gate(ptr: UOp, access: DType) -> str | None:
    """A bool vector gate on an INDEX with a scalar index (a masked access) has one lane per accessed element."""
    if ptr.op is not Ops.INDEX or len(ptr.src) != 3 or ptr.src[1].dtype.count > 1:
        return None
    lanes = ptr.src[2].dtype.count
    if lanes > 1 and lanes != access.count:
        return f"a {lanes}-lane gate on an access of {access!r}: a masked access needs one gate lane per element"
    return None


def _check_store(u: UOp) -> str | None:
    if len(u.src) != 2:
        return f"STORE takes (pointer, value), got {len(u.src)} sources"
    if u.dtype != dtypes.void:
        return f"STORE returns void, got {u.dtype!r}"
    ptr, val = u.src[0].dtype, u.src[1].dtype
    if not isinstance(ptr, PtrDType):
        return f"STORE target must be a pointer (an INDEX), got {ptr!r}"
    if val.scalar() != ptr.base.scalar():
        return f"STORE of {val!r} through a pointer to {ptr.base!r}"
    return _check_lane_gate(u.src[0], val)


def _check_define(u: UOp, space: AddrSpace) -> str | None:
    if not isinstance(u.dtype, PtrDType) or u.dtype.addrspace != space:
        return f"{u.op.name} must have a {space.value} pointer dtype, got {u.dtype!r}"
    if u.src:
        return f"{u.op.name} takes no sources"
    if u.op is Ops.DEFINE_GLOBAL and not isinstance(u.arg, int):
        return f"DEFINE_GLOBAL arg must be the argument index (int), got {u.arg!r}"
    return None


def _check_range_like(u: UOp) -> str | None:
    if len(u.src) != 1 or not _is_int(u.src[0].dtype):
        return f"{u.op.name} takes one integer source (its size)"
    if u.dtype != u.src[0].dtype:
        return f"{u.op.name} must have its size's dtype {u.src[0].dtype!r}, got {u.dtype!r}"
    if u.op is Ops.RANGE and not (isinstance(u.arg, tuple) and len(u.arg) >= 2 and isinstance(u.arg[-1], AxisType)):
        return f"RANGE arg must be (axis id, AxisType), got {u.arg!r}"
    if u.op is Ops.SPECIAL and not isinstance(u.arg, str):
        return f"SPECIAL arg must be a name like 'gidx0', got {u.arg!r}"
    return None


def _check_vectorize(u: UOp) -> str | None:
    if not u.src:
        return "VECTORIZE needs sources"
    first = u.src[0].dtype
    if any(s.dtype != first for s in u.src):
        return "VECTORIZE sources must share one dtype"
    if isinstance(first, PtrDType):
        want: DType = first.vec(len(u.src))
    else:
        want = first.vec(len(u.src)) if first.count == 1 else first.scalar().vec(first.count * len(u.src))
    if u.dtype != want:
        return f"VECTORIZE of {len(u.src)} x {first!r} must be {want!r}, got {u.dtype!r}"
    return None


def _check_gep(u: UOp) -> str | None:
    if len(u.src) != 1 or not isinstance(u.arg, tuple) or not all(isinstance(i, int) for i in u.arg):
        return "GEP takes one source and a tuple of lane indices"
    width = u.src[0].dtype.vcount
    if any(not 0 <= i < width for i in u.arg):
        return f"GEP lanes {u.arg} out of range for {u.src[0].dtype!r}"
    scalar = u.src[0].dtype.scalar()
    want = scalar.vec(len(u.arg)) if len(u.arg) > 1 else scalar
    if u.dtype != want and not isinstance(u.dtype, PtrDType):
        return f"GEP of {len(u.arg)} lanes must be {want!r}, got {u.dtype!r}"
    return None


def _check(u: UOp) -> str | None:  # noqa: C901 (one branch per op is the clearest layout)
    op = u.op
    if op in GroupOp.ALU:
        return _check_alu(u)
    if op is Ops.CAST:
        if len(u.src) != 1 or u.dtype == dtypes.void:
            return "CAST takes one source and a non-void dtype"
        return None
    if op is Ops.BITCAST:
        if len(u.src) != 1 or u.dtype.itemsize != u.src[0].dtype.itemsize:
            return f"BITCAST must keep the size: {u.src[0].dtype!r} -> {u.dtype!r}" if u.src else "BITCAST needs 1 src"
        return None
    if op is Ops.CONST:
        if u.src and not (len(u.src) == 1 and u.src[0].op is Ops.DEVICE):
            return "CONST takes no sources (kernel) or one DEVICE (tensor-level)"
        if u.dtype.count != 1:
            return f"CONST must be scalar; use VCONST for {u.dtype!r}"
        return _check_const_value(u.arg, u.dtype)
    if op is Ops.VCONST:
        if not isinstance(u.arg, tuple) or len(u.arg) != u.dtype.count:
            return f"VCONST arg must be a tuple of {u.dtype.count} values, got {u.arg!r}"
        return next((e for e in (_check_const_value(v, u.dtype.scalar()) for v in u.arg) if e), None)
    if op is Ops.DEFINE_VAR:
        arg = u.arg
        if u.src or not (isinstance(arg, tuple) and len(arg) == 3 and isinstance(arg[0], str)):
            return f"DEFINE_VAR takes no sources and arg (name, min, max), got {arg!r}"
        if not (isinstance(arg[1], int) and isinstance(arg[2], int) and arg[1] <= arg[2]):
            return f"DEFINE_VAR bounds must be ints with min <= max, got {arg[1:]}"
        return None if _is_int(u.dtype) else f"DEFINE_VAR must be an integer, got {u.dtype!r}"
    if op is Ops.BIND:
        if len(u.src) != 2 or u.src[0].op is not Ops.DEFINE_VAR or u.src[1].op is not Ops.CONST:
            return "BIND takes (DEFINE_VAR, CONST)"
        _, lo, hi = u.src[0].arg
        if not lo <= u.src[1].arg <= hi:
            return f"BIND value {u.src[1].arg} outside [{lo}, {hi}] of {u.src[0].arg[0]!r}"
        return None if u.dtype == u.src[0].dtype else "BIND must have its variable's dtype"
    if op in (Ops.SINK, Ops.GROUP, Ops.BARRIER, Ops.END, Ops.IF, Ops.ENDIF) and u.dtype != dtypes.void:
        return f"{op.name} must be void, got {u.dtype!r}"
    if op is Ops.END:
        if len(u.src) < 2 or any(s.op is not Ops.RANGE for s in u.src[1:]):
            return "END takes (effect, range, ...)"
        return None
    if op is Ops.IF:
        return None if u.src and _is_bool(u.src[0].dtype) else "IF takes a bool gate first"
    if op is Ops.ENDIF:
        return None if len(u.src) >= 1 and u.src[0].op is Ops.IF else "ENDIF takes the IF it closes first"
    if op is Ops.UNIQUE:
        return None if isinstance(u.arg, int) and not u.src else "UNIQUE takes no sources and an int arg"
    if op is Ops.DEVICE:
        ok = isinstance(u.arg, str) or isinstance(u.arg, tuple) and u.arg and all(isinstance(d, str) for d in u.arg)
        return None if ok and not u.src else f"DEVICE arg must be a device name or tuple of names, got {u.arg!r}"
    if op is Ops.BUFFER:
        if len(u.src) != 2 or u.src[0].op is not Ops.UNIQUE or u.src[1].op is not Ops.DEVICE:
            return "BUFFER takes (UNIQUE, DEVICE)"
        ok = isinstance(u.arg, int) and u.arg >= 0 or isinstance(u.arg, UOp)
        return None if ok else f"BUFFER arg must be its size in elements, got {u.arg!r}"
    if op is Ops.IOTA:
        if u.src and not (len(u.src) == 1 and u.src[0].op is Ops.DEVICE):
            return "IOTA takes no sources (kernel) or one DEVICE (tensor-level)"
        if not (isinstance(u.arg, int) and u.arg >= 0 or isinstance(u.arg, UOp)):
            return f"IOTA arg must be its size, got {u.arg!r}"
        return None if _is_int(u.dtype) else f"IOTA must be an integer, got {u.dtype!r}"
    if op is Ops.BUFFER_VIEW:
        if len(u.src) != 1 or not (isinstance(u.arg, tuple) and len(u.arg) == 2):
            return "BUFFER_VIEW takes one source and arg (size, offset)"
        return None
    if op in GroupOp.Movement:
        return _check_shape_arg(u)
    if op is Ops.REDUCE_AXIS:
        arg = u.arg
        if not (isinstance(arg, tuple) and len(arg) == 2 and arg[0] in GroupOp.Reduce and isinstance(arg[1], tuple)):
            return f"REDUCE_AXIS arg must be (Ops.ADD|MUL|MAX, axes), got {arg!r}"
        return None if len(u.src) == 1 and u.dtype == u.src[0].dtype else "REDUCE_AXIS keeps its source's dtype"
    if op is Ops.REDUCE:
        if u.arg not in GroupOp.Reduce or not u.src or u.dtype != u.src[0].dtype:
            return "REDUCE takes (value, *ranges), arg Ops.ADD|MUL|MAX, and keeps the value's dtype"
        return None
    if op is Ops.ALLREDUCE:
        if len(u.src) != 2 or u.src[1].op is not Ops.DEVICE or u.arg not in GroupOp.Reduce:
            return "ALLREDUCE takes (x, DEVICE) and arg Ops.ADD|MUL|MAX"
        return None
    if op is Ops.COPY:
        ok = len(u.src) == 2 and u.src[1].op is Ops.DEVICE and u.dtype == u.src[0].dtype
        return None if ok else "COPY takes (x, DEVICE) and keeps x's dtype"
    if op is Ops.ASSIGN:
        ok = len(u.src) == 2 and u.src[0].dtype == u.dtype and u.src[1].dtype == u.dtype
        return None if ok else "ASSIGN takes (target, value) of the node's dtype"
    if op in (Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH):
        return None if u.src and u.dtype == u.src[0].dtype else f"{op.name} keeps its source's dtype"
    if op is Ops.MULTI:
        if not u.src or any(s.dtype != u.dtype for s in u.src):
            return "MULTI takes shards of the node's dtype"
        return None if u.arg is None or isinstance(u.arg, int) else f"MULTI arg is the sharded axis, got {u.arg!r}"
    if op is Ops.MSELECT:
        return None if len(u.src) == 1 and isinstance(u.arg, int) else "MSELECT takes one source and a device index"
    if op is Ops.MSTACK:
        return None if u.src and all(s.dtype == u.dtype for s in u.src) else "MSTACK takes values of its dtype"
    if op is Ops.DEFINE_GLOBAL:
        return _check_define(u, AddrSpace.GLOBAL)
    if op is Ops.DEFINE_LOCAL:
        return _check_define(u, AddrSpace.LOCAL)
    if op is Ops.DEFINE_REG:
        return _check_define(u, AddrSpace.REG)
    if op in (Ops.RANGE, Ops.SPECIAL):
        return _check_range_like(u)
    if op is Ops.INDEX:
        return _check_ptr_index(u)
    if op is Ops.LOAD:
        return _check_load(u)
    if op is Ops.STORE:
        return _check_store(u)
    if op is Ops.VECTORIZE:
        return _check_vectorize(u)
    if op is Ops.GEP:
        return _check_gep(u)
    if op in (Ops.UNROLL, Ops.CONTRACT):
        arg = u.arg
        if not (isinstance(arg, tuple) and all(isinstance(a, tuple) and len(a) == 2 for a in arg)) or len(u.src) != 1:
            return f"{op.name} takes one source and arg ((axis, size), ...), got {arg!r}"
        return None
    if op is Ops.WMMA:
        return None if len(u.src) == 3 and isinstance(u.arg, tuple) else "WMMA takes (a, b, c) and a tuple arg"
    if op is Ops.SHUFFLE:
        ok = len(u.src) == 1 and u.dtype == u.src[0].dtype and isinstance(u.arg, int) and u.arg > 0
        return None if ok else f"SHUFFLE takes one source of its dtype and a positive int XOR mask, got {u.arg!r}"
    if op is Ops.AFTER:
        return None if u.src and u.dtype == u.src[0].dtype else "AFTER takes (value, *deps) with the value's dtype"
    if op is Ops.CUSTOM:
        return None if isinstance(u.arg, str) else f"CUSTOM arg must be a code string, got {u.arg!r}"
    return None


def _check_program_order(uops: Sequence[UOp]) -> tuple[str, UOp] | None:
    position = {u: i for i, u in enumerate(uops)}
    blocks: list[UOp] = []  # open RANGEs and IFs, innermost last: they must nest properly
    for i, u in enumerate(uops):
        for s in u.src:
            if position.get(s, len(uops)) >= i:
                return f"source {_short(s)} is not earlier in the program", u
        if u.op in (Ops.RANGE, Ops.IF):
            blocks.append(u)
        elif u.op is Ops.END:
            for r in u.src[1:]:
                if not blocks or blocks[-1] is not r:
                    inner = f" (innermost open block: {_short(blocks[-1])})" if blocks else ""
                    return f"END closes {_short(r)}, which is not the innermost open range{inner}", u
                blocks.pop()
        elif u.op is Ops.ENDIF:
            if not blocks or blocks[-1] is not u.src[0]:
                return "ENDIF doesn't close the innermost open IF", u
            blocks.pop()
    if blocks:
        return f"{blocks[-1].op.name} never closed by an {'END' if blocks[-1].op is Ops.RANGE else 'ENDIF'}", blocks[-1]
    return None


def type_verify(uops: UOp | Sequence[UOp], spec: str = "any", pass_name: str | None = None) -> None:
    """Check a graph (give its sink) or a linearized list against the rules of stage `spec`.

    Raises `SpecError` with the pass name (when given) and the offending UOp.

    >>> type_verify(UOp.range(4, 0) * 2, "kernel")
    """
    if spec not in SPECS:
        raise ValueError(f"unknown spec {spec!r}; known: {sorted(SPECS)}")
    allowed = SPECS[spec]
    nodes: Sequence[UOp] = list(uops.toposort()) if isinstance(uops, UOp) else list(uops)
    where = f" after rewrite pass {pass_name!r}" if pass_name else ""
    seen: set[UOp] = set()
    for u in nodes:
        stack = [u]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node.op not in allowed:
                _fail(f"{node.op} is not allowed in a {spec} graph", node, spec, where, pass_name)
            err = _check(node)
            if err is not None:
                _fail(err, node, spec, where, pass_name)
            stack.extend(_arg_uops(node.arg))  # symbolic sizes in args are checked too
            stack.extend(node.src)
    if spec == "program" and not isinstance(uops, UOp):
        problem = _check_program_order(nodes)
        if problem is not None:
            _fail(problem[0], problem[1], spec, where, pass_name)


def _fail(msg: str, u: UOp, spec: str, where: str, pass_name: str | None) -> None:
    raise SpecError(f"spec {spec!r} failed{where}: {msg}\n  offending UOp: {_short(u)}", u, pass_name)


def verifier(spec: str) -> Callable[[UOp | Sequence[UOp]], None]:
    """A one-argument checker for stage `spec` (handy as a callback)."""
    return lambda uops: type_verify(uops, spec)
