"""The IR: `Ops`, `GroupOp`, `AxisType` and the hash-consed `UOp` node, plus symbolic-integer helpers.

One UOp type carries a program from the lazy tensor graph down to the linearized kernel (see `docs/ir.md` for every
op's stage, sources, arg and dtype rule). UOps are immutable and hash-consed: building the same `(op, dtype, src,
arg, tag)` twice returns the same object, so `is` is structural equality and dict lookups are O(1).

>>> x = UOp.variable("x", 0, 9)
>>> (x + 1) is (x + 1)
True
>>> ((x * 4 + 3) // 4).simplify() is x
True
>>> (x * 2 + 1).vmin, (x * 2 + 1).vmax
(1, 19)
"""

from __future__ import annotations

import hashlib
import math
import struct
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Union

from tinycore.dtype import (
    AddrSpace,
    DType,
    PtrDType,
    dtypes,
    truncate_to_dtype,
)
from tinycore.helpers import prod

__all__ = [
    "AddrSpace",
    "AxisType",
    "DType",
    "GroupOp",
    "Ops",
    "PtrDType",
    "UOp",
    "Variable",
    "cast_value",
    "dtypes",
    "exec_alu",
    "print_uops",
    "resolve",
    "set_chain_key",
    "sint",
    "smax",
    "smin",
    "ssimplify",
    "sym_infer",
]


class _Auto:
    """Placeholder for a member of a `_FastEnumMeta` class (numbered in declaration order)."""


def auto() -> Any:
    """Declare the next member of an `Ops`-style enum class."""
    return _Auto()


class _FastEnumMeta(type):
    """Enum-like classes (members, `name`, `value`, iteration, `Cls["NAME"]`, `Cls(value)`, pickling by name)
    without `enum.Enum`'s metaclass `__getattr__`, which makes every `Ops.ADD` lookup ~4x slower on Python 3.11.
    IR code reads `Ops.X` in every hot loop, so this matters."""

    def __new__(mcs, name: str, bases: tuple, namespace: dict[str, Any]) -> _FastEnumMeta:
        plain = {k: v for k, v in namespace.items() if not isinstance(v, _Auto)}
        plain["__slots__"] = ("name", "value")
        cls = super().__new__(mcs, name, bases, plain)
        members = []
        for key, value in namespace.items():
            if isinstance(value, _Auto):
                member = object.__new__(cls)
                object.__setattr__(member, "name", key)
                object.__setattr__(member, "value", len(members) + 1)
                type.__setattr__(cls, key, member)
                members.append(member)
        type.__setattr__(cls, "_members", tuple(members))
        type.__setattr__(cls, "_by_name", {m.name: m for m in members})
        return cls

    def __iter__(cls) -> Iterator[Any]:
        return iter(cls._members)  # type: ignore[attr-defined]

    def __len__(cls) -> int:
        return len(cls._members)  # type: ignore[attr-defined]

    def __getitem__(cls, name: str) -> Any:
        return cls._by_name[name]  # type: ignore[attr-defined]

    def __call__(cls, value: int) -> Any:
        members = cls._members  # type: ignore[attr-defined]
        if not isinstance(value, int) or not 1 <= value <= len(members):
            raise ValueError(f"{value!r} is not a valid {cls.__name__}")
        return members[value - 1]

    def __contains__(cls, member: object) -> bool:
        return isinstance(member, cls)

    def __setattr__(cls, key: str, value: Any) -> None:
        raise AttributeError(f"{cls.__name__} members are fixed")


class _FastEnum(metaclass=_FastEnumMeta):
    """Base of `Ops` and `AxisType`: singletons compared by identity, ordered by declaration."""

    name: str
    value: int

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    __str__ = __repr__

    def __lt__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.value < other.value

    def __reduce__(self) -> tuple:
        return getattr, (type(self), self.name)

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: dict) -> Any:
        return self

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{self!r} is immutable")


class Ops(_FastEnum):
    """Every operation of the IR. The declaration order is meaningful: it groups ops by stage and is the tie-break
    order a linearizer may use (definitions first, then constants, then loops, memory and ALU).

    >>> Ops.ADD in GroupOp.Binary, repr(Ops.RANGE)
    (True, 'Ops.RANGE')
    """

    # --- graph structure and metadata (every stage)
    SINK = auto()  # root: src = outputs/effects, arg = None or kernel info
    GROUP = auto()  # an unordered bundle of effects (stores), void
    NOOP = auto()  # passthrough of src[0] (or nothing); removed by cleanup passes
    AFTER = auto()  # src[0]'s value, available only after src[1:] (ordering edge)
    UNIQUE = auto()  # arg: int, makes otherwise equal BUFFERs distinct
    DEVICE = auto()  # arg: device name str, or tuple of names for multi-device
    KERNEL = auto()  # a scheduled kernel: src = buffers it touches, arg = the kernel AST / metadata
    CUSTOM = auto()  # arg: code string with {0} {1}... placeholders for src; void = statement, else expression

    # --- definitions and constants (tensor and kernel level)
    DEFINE_GLOBAL = auto()  # kernel argument pointer: arg = argument index, dtype = PtrDType(GLOBAL)
    DEFINE_VAR = auto()  # symbolic integer: arg = (name, min, max)
    DEFINE_LOCAL = auto()  # shared memory: arg = index/name, dtype = PtrDType(LOCAL, size)
    DEFINE_REG = auto()  # register array (accumulators): arg = index, dtype = PtrDType(REG, size)
    BIND = auto()  # src = (DEFINE_VAR, CONST): a variable bound to a value
    CONST = auto()  # arg = python value; src = () in kernels, (DEVICE,) for a tensor-level scalar constant
    VCONST = auto()  # vector constant: arg = tuple of lane values
    SPECIAL = auto()  # thread index: src = (size,), arg = "gidx0" / "lidx1" / "core_id"...
    RANGE = auto()  # loop index 0..end-1: src = (end,), arg = (axis id, AxisType)

    # --- tensor level (stage 1)
    BUFFER = auto()  # src = (UNIQUE, DEVICE), arg = size in elements, dtype = element dtype
    BUFFER_VIEW = auto()  # src = (BUFFER,), arg = (size, offset) in elements
    RESHAPE = auto()  # arg = new shape
    EXPAND = auto()  # arg = new shape (size-1 dims broadcast)
    PERMUTE = auto()  # arg = permutation of the axes
    PAD = auto()  # arg = ((before, after), ...) per axis, padded with 0
    SHRINK = auto()  # arg = ((start, end), ...) per axis
    FLIP = auto()  # arg = tuple of bools, one per axis
    REDUCE_AXIS = auto()  # arg = (Ops.ADD | Ops.MUL | Ops.MAX, axes); reduced axes keep size 1
    COPY = auto()  # src = (x, DEVICE): x copied to that device
    ASSIGN = auto()  # src = (target, value): write value into target's buffer, result is the target
    CONTIGUOUS = auto()  # realize src[0] into its own buffer
    CONTIGUOUS_BACKWARD = auto()  # contiguous in the backward pass only
    DETACH = auto()  # stop gradients
    MULTI = auto()  # sharded tensor: src = one shard per device, arg = sharded axis (None = replicated)
    MSELECT = auto()  # src = (multi-device value,), arg = device index: that device's part
    MSTACK = auto()  # src = single-device values: one logical value placed on several devices
    ALLREDUCE = auto()  # src = (x, DEVICE), arg = Ops.ADD|MUL|MAX: reduce the shards of x on those devices
    IOTA = auto()  # src = (DEVICE,) at tensor level, () in a kernel AST; arg = n: the 1-D value [0, 1, ..., n-1]

    # --- kernel level (stages 2-4)
    INDEX = auto()  # src = (buffer ptr, index[, gate bool]) -> pointer; or (value, *ranges) during lowering
    LOAD = auto()  # src = (ptr index[, alt]): value at the pointer, alt where the INDEX gate is false
    STORE = auto()  # src = (ptr index, value), void
    REDUCE = auto()  # src = (value, *ranges), arg = Ops.ADD|MUL|MAX: reduce value over the ranges
    END = auto()  # src = (effect, *ranges): closes the ranges after effect, void
    BARRIER = auto()  # src = effects (stores to local memory) that must be visible, void
    IF = auto()  # src = (gate bool, *effects): the following block runs when gate, void
    ENDIF = auto()  # src = (IF,): closes the gated block, void
    VECTORIZE = auto()  # src = n scalars -> dtype.vec(n)
    GEP = auto()  # src = (vector,), arg = tuple of lane indices
    UNROLL = auto()  # src = (vector,), arg = ((axis, size), ...): value that varies over upcast axes
    CONTRACT = auto()  # src = (x,), arg = ((axis, size), ...): gather the upcast axes into a vector
    WMMA = auto()  # src = (a, b, c), arg = tensor core description tuple; a @ b + c per warp
    SHUFFLE = auto()  # src = (x,), arg = int m: x of the lane whose id in the warp is this lane's XOR m

    # --- elementwise (every stage)
    CAST = auto()  # src = (x,): value conversion (C semantics, float->int truncates)
    BITCAST = auto()  # src = (x,): reinterpret bits (same total size)
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    SQRT = auto()
    RECIP = auto()
    NEG = auto()
    TRUNC = auto()
    ADD = auto()
    SUB = auto()
    MUL = auto()
    FDIV = auto()
    IDIV = auto()  # integer division truncating toward zero (C): -7 // 2 == -3
    MOD = auto()  # C remainder, sign of the dividend: -7 % 2 == -1
    MAX = auto()
    CMPLT = auto()
    CMPNE = auto()
    CMPEQ = auto()
    AND = auto()
    OR = auto()
    XOR = auto()
    SHL = auto()
    SHR = auto()  # arithmetic shift for signed dtypes
    POW = auto()
    THREEFRY = auto()  # threefry2x32-20: src = (counter uint64, key uint64) -> uint64
    WHERE = auto()  # src = (gate bool, a, b)
    MULACC = auto()  # src = (a, b, c): a * b + c


class AxisType(_FastEnum):
    """What a RANGE loops over, which decides how it is scheduled on the device.

    >>> UOp.range(8, 0, AxisType.REDUCE).arg
    (0, AxisType.REDUCE)
    """

    GLOBAL = auto()  # becomes a global (grid) thread index
    LOCAL = auto()  # becomes a local (work-group) thread index
    LOOP = auto()  # a plain loop in the kernel
    REDUCE = auto()  # a reduction loop
    GROUP_REDUCE = auto()  # a reduction split across the threads of a group (through shared memory)
    UPCAST = auto()  # unrolled into vector lanes (output axis)
    UNROLL = auto()  # unrolled into vector lanes (reduce axis)
    THREAD = auto()  # split across CPU threads


class GroupOp:
    """Named sets of `Ops` used by rewrite rules and the verifier.

    >>> Ops.MAX in GroupOp.Commutative, Ops.SUB in GroupOp.Commutative
    (True, False)
    """

    Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.NEG, Ops.TRUNC})
    Binary = frozenset(
        {
            Ops.ADD,
            Ops.SUB,
            Ops.MUL,
            Ops.FDIV,
            Ops.IDIV,
            Ops.MOD,
            Ops.MAX,
            Ops.CMPLT,
            Ops.CMPNE,
            Ops.CMPEQ,
            Ops.AND,
            Ops.OR,
            Ops.XOR,
            Ops.SHL,
            Ops.SHR,
            Ops.POW,
            Ops.THREEFRY,
        }
    )
    Ternary = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
    Movement = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.AND, Ops.OR})
    Associative = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX})
    Idempotent = frozenset({Ops.OR, Ops.AND, Ops.MAX})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    Irreducible = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.RANGE})
    UnsafePad = frozenset({Ops.RECIP, Ops.LOG2, Ops.EXP2, Ops.IDIV, Ops.POW})  # f(0) != 0: can't pad through
    Defines = frozenset({Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG})
    Buffer = frozenset({Ops.BUFFER, Ops.BUFFER_VIEW}) | Defines
    Meta = frozenset({Ops.SINK, Ops.GROUP, Ops.NOOP, Ops.AFTER, Ops.UNIQUE, Ops.DEVICE, Ops.KERNEL, Ops.CUSTOM})
    Effects = frozenset({Ops.STORE, Ops.END, Ops.BARRIER, Ops.IF, Ops.ENDIF, Ops.GROUP, Ops.SINK})
    Reduce = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})  # the ALU ops a REDUCE / REDUCE_AXIS / ALLREDUCE may use
    All = frozenset(Ops)


sint = Union[int, "UOp"]  # a dimension or index: a Python int or a symbolic UOp

# ---------------------------------------------------------------------------------------------------------------
# C-semantics scalar arithmetic (used by constant folding, sym_infer and the reference interpreter)


def _trunc_div(a: int, b: int) -> int:
    """Integer division rounding toward zero (C). Division by zero gives 0 (C leaves it undefined)."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _c_mod(a: int, b: int) -> int:
    """C remainder: sign of the dividend, `a == b * (a / b) + a % b`. Modulo zero gives 0."""
    return a - b * _trunc_div(a, b) if b != 0 else 0


def _threefry2x32(x: int, key: int) -> int:
    """Threefry-2x32 with 20 rounds (Random123): counter words from `x`, key words from `key`, both uint64."""
    m32 = 0xFFFFFFFF
    x0, x1 = x & m32, (x >> 32) & m32
    k0, k1 = key & m32, (key >> 32) & m32
    ks = (k0, k1, 0x1BD11BDA ^ k0 ^ k1)
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    x0, x1 = (x0 + ks[0]) & m32, (x1 + ks[1]) & m32
    for i in range(5):
        for r in rotations[i % 2]:
            x0 = (x0 + x1) & m32
            x1 = (((x1 << r) | (x1 >> (32 - r))) & m32) ^ x0
        x0 = (x0 + ks[(i + 1) % 3]) & m32
        x1 = (x1 + ks[(i + 2) % 3] + i + 1) & m32
    return (x1 << 32) | x0


def _float_op(op: Ops, a: float, b: float = 0.0) -> float:
    """IEEE-ish double-precision result of a float ALU op, never raising."""
    try:
        if op is Ops.EXP2:
            return math.inf if a > 1100 else 2.0**a
        if op is Ops.LOG2:
            return math.log2(a) if a > 0 else (-math.inf if a == 0 else math.nan)
        if op is Ops.SIN:
            return math.sin(a) if math.isfinite(a) else math.nan
        if op is Ops.SQRT:
            return math.sqrt(a) if a >= 0 else math.nan
        if op is Ops.RECIP:
            return 1.0 / a if a != 0 else math.copysign(math.inf, a)
        if op is Ops.FDIV:
            if b == 0:
                return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1.0, b)
            return a / b
        if op is Ops.POW:
            return math.pow(a, b)
    except OverflowError:
        return math.inf
    except ValueError:
        return math.nan
    raise ValueError(f"{op} is not a float op")


def _alu_scalar(op: Ops, dtype: DType, operands: tuple) -> Any:
    is_float = dtypes.is_float(dtype)
    a = operands[0]
    if op is Ops.NEG:
        res = (not a) if dtype == dtypes.bool else -a
    elif op is Ops.TRUNC:
        res = float(math.trunc(a)) if is_float and math.isfinite(a) else a
    elif op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP):
        res = _float_op(op, float(a))
    elif op is Ops.WHERE:
        return operands[1] if operands[0] else operands[2]
    elif op is Ops.MULACC:
        res = a * operands[1] + operands[2]
    elif op in GroupOp.Comparison:
        b = operands[1]
        return a < b if op is Ops.CMPLT else (a != b if op is Ops.CMPNE else a == b)
    else:
        b = operands[1]
        if op is Ops.ADD:
            res = a + b if dtype != dtypes.bool else (a or b)
        elif op is Ops.SUB:
            res = a - b
        elif op is Ops.MUL:
            res = a * b if dtype != dtypes.bool else (a and b)
        elif op is Ops.FDIV or op is Ops.POW:
            res = _float_op(op, float(a), float(b))
        elif op is Ops.IDIV:
            res = _trunc_div(int(a), int(b)) if not is_float else float(math.trunc(a / b) if b else math.nan)
        elif op is Ops.MOD:
            res = _c_mod(int(a), int(b)) if not is_float else math.fmod(a, b) if b else math.nan
        elif op is Ops.MAX:
            res = math.nan if is_float and (math.isnan(a) or math.isnan(b)) else max(a, b)
        elif op is Ops.AND:
            res = a & b if dtype != dtypes.bool else (a and b)
        elif op is Ops.OR:
            res = a | b if dtype != dtypes.bool else (a or b)
        elif op is Ops.XOR:
            res = a ^ b if dtype != dtypes.bool else (a != b)
        elif op is Ops.SHL:
            res = a << b if 0 <= b < 8 * dtype.itemsize else 0
        elif op is Ops.SHR:
            res = a >> b if 0 <= b < 8 * dtype.itemsize else (0 if a >= 0 else -1)
        elif op is Ops.THREEFRY:
            res = _threefry2x32(int(a), int(b))
        else:
            raise ValueError(f"exec_alu: {op} is not an ALU op")
    return truncate_to_dtype(res, dtype)


def exec_alu(op: Ops, dtype: DType, operands: tuple | list) -> Any:
    """Evaluate one ALU op on Python constants with C semantics for `dtype` (the dtype of the result's operands
    for comparisons, of the result otherwise): integers wrap, IDIV/MOD truncate toward zero, floats round to the
    dtype. Vector operands (tuples) are evaluated lane by lane.

    >>> exec_alu(Ops.IDIV, dtypes.int32, (-7, 2)), exec_alu(Ops.MOD, dtypes.int32, (-7, 2))
    (-3, -1)
    >>> exec_alu(Ops.ADD, dtypes.uint8, (250, 10)), exec_alu(Ops.ADD, dtypes.float32, (1.0, 1e-8))
    (4, 1.0)
    """
    if any(isinstance(x, tuple) for x in operands):
        lanes = max(len(x) for x in operands if isinstance(x, tuple))
        return tuple(
            _alu_scalar(op, dtype.scalar(), tuple(x[i] if isinstance(x, tuple) else x for x in operands))
            for i in range(lanes)
        )
    return _alu_scalar(op, dtype.scalar(), tuple(operands))


def cast_value(value: Any, dtype: DType, bitcast_from: DType | None = None) -> Any:
    """Convert a Python constant to `dtype` like a C cast (or reinterpret its bits when `bitcast_from` is given).

    >>> cast_value(-2.7, dtypes.int32), cast_value(300, dtypes.uint8), cast_value(1.0, dtypes.uint32, dtypes.float)
    (-2, 44, 1065353216)
    """
    if isinstance(value, tuple):
        return tuple(cast_value(v, dtype, bitcast_from) for v in value)
    if bitcast_from is not None:
        src, dst = bitcast_from.scalar(), dtype.scalar()

        def fmt(dt: DType) -> str:
            if dt == dtypes.bfloat16:
                return "H"
            if dt.fmt is None:
                raise TypeError(f"can't bitcast {dt}")
            return dt.fmt

        if src == dtypes.bfloat16:
            raw = struct.pack("H", struct.unpack("I", struct.pack("f", truncate_to_dtype(value, src)))[0] >> 16)
        else:
            raw = struct.pack(fmt(src), value)
        if dst == dtypes.bfloat16:
            return struct.unpack("f", struct.pack("I", struct.unpack("H", raw)[0] << 16))[0]
        return struct.unpack(fmt(dst), raw)[0]
    scalar = dtype.scalar()
    if dtypes.is_int(scalar) and isinstance(value, float):
        if not math.isfinite(value):
            return 0
        value = math.trunc(value)
    return truncate_to_dtype(value, scalar)


# ---------------------------------------------------------------------------------------------------------------
# the UOp node

_INT_BOUNDS: dict[DType, tuple[int, int]] = {
    dt: (dtypes.min(dt), dtypes.max(dt)) for dt in dtypes.fields().values() if dtypes.is_int(dt) and dt != dtypes.index
}
_ucache: dict[tuple, weakref.ReferenceType] = {}  # hash-consing cache: (op, dtype token, src, arg key, tag) -> weakref

# The hash-consing key names a dtype by a small int, one per distinct dtype value: `DType.__hash__` is Python code,
# and the key is hashed three times in a node's life (lookup, insert, removal). Tokens are found by the dtype
# object's id (the object is kept alive, so the id stays its own; the table starts over beyond a bound, as codegen
# makes short-lived pointer dtypes), and `_dtype_canon` keeps one token per value for good.
_DTYPE_IDS_LIMIT = 4096
_dtype_canon: dict[DType, int] = {}
_dtype_tokens: dict[int, int] = {}
_dtype_kept: list[DType] = []


def _dtype_token(dtype: DType) -> int:
    """The hash-consing token of `dtype`'s value, remembered for this object."""
    token = _dtype_canon.get(dtype)
    if token is None:
        token = _dtype_canon[dtype] = len(_dtype_canon)
    if len(_dtype_kept) >= _DTYPE_IDS_LIMIT:
        _dtype_tokens.clear()
        _dtype_kept.clear()
    _dtype_tokens[id(dtype)] = token
    _dtype_kept.append(dtype)
    return token


_SENTINEL: Any = object()


_TYPED_ARGS = frozenset({bool, float})  # scalar args that == other types (1 == 1.0 == True): keyed with their type


def _const_key(arg: Any) -> Any:
    """Cache key of a CONST/VCONST arg: floats by bits (0.0 vs -0.0, NaN), and bool/int/float never equal."""
    if isinstance(arg, tuple):
        return tuple(_const_key(a) for a in arg)
    if isinstance(arg, float):
        return (float, struct.pack("d", arg))
    return (type(arg), arg)


class _UOpFields:
    """The storage of a `UOp`, without its immutability: `UOp.__new__` fills a new node as one of these with plain
    (fast) slot stores, then makes it a `UOp`. Nothing else ever holds one."""

    __slots__ = (
        "op",
        "dtype",
        "src",
        "arg",
        "tag",
        "_key",
        "_mm",
        "_topo",
        "_shape",
        "_depth",
        "_ts",
        "_canon",  # set by the symbolic simplifier: this node is a fixed point of linear normalization
        "chain_key",  # the eager scheduler's key of an elementwise chain, else None: see `set_chain_key`
        "__weakref__",
    )


class UOp(_UOpFields):
    """An immutable, hash-consed IR node `(op, dtype, src, arg, tag)`.

    Construction returns the existing node when one with the same fields is alive, so structurally equal UOps are
    the same object (`==` is identity, hashing is by id). Python operators build ALU graphs; comparisons return
    UOps, so use `.eq()` / `.ne()` and `resolve()` for Python decisions.

    >>> a = UOp.const(dtypes.int, 3)
    >>> a is UOp(Ops.CONST, dtypes.int, (), 3)
    True
    >>> i = UOp.range(16, 0)
    >>> (i * 4 + 2).vmax, ((i * 4 + 2) % 4).simplify().arg
    (62, 2)

    `chain_key` is the one field set after construction, and only through `set_chain_key`: the eager scheduler's
    key of an elementwise chain (`tinycore.engine.eager`), a fact derived from the node and cached on it, never part
    of its identity (hash-consing, equality, pickling and `replace` ignore it).
    """

    __slots__ = ()
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    tag: Any
    chain_key: tuple[int, UOp | None] | None

    def __new__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None, tag: Any = None):
        if type(src) is not tuple:
            src = tuple(src)
        dtype_token = _dtype_tokens.get(id(dtype))
        if dtype_token is None:
            dtype_token = _dtype_token(dtype)
        if op is _CONST_OP or op is _VCONST_OP or type(arg) in _TYPED_ARGS:
            key = (op, dtype_token, src, _const_key(arg), tag)
        else:
            key = (op, dtype_token, src, arg, tag)
        try:
            ref = _ucache.get(key)
        except TypeError:
            raise TypeError(f"UOp arg must be hashable, got {type(arg).__name__} {arg!r} for {op}") from None
        if ref is not None:
            existing = ref()
            if existing is not None:
                return existing
        # filled as a plain slotted object (a store costs a few instructions; through `object.__setattr__` or a slot
        # descriptor it is a call), then given its class: one checked call instead of seven
        self = _new_object(_UOpFields)
        self.op = op
        self.dtype = dtype
        self.src = src
        self.arg = arg
        self.tag = tag
        self._key = key
        self.chain_key = None
        _set_object_attr(self, "__class__", cls)
        _ucache[key] = _weakref(self)
        return self

    def __del__(self) -> None:
        try:
            ref = _ucache.pop(self._key, None)
            if ref is not None:
                alive = ref()
                if alive is not None and alive is not self:  # a newer node owns the key: put it back
                    _ucache[self._key] = ref
        except Exception:  # interpreter shutdown: module globals may be gone
            pass

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"UOp is immutable (tried to set {name!r}); use .replace(...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"UOp is immutable (tried to delete {name!r})")

    def __reduce__(self) -> tuple:
        # Constructor form: the unpickler calls UOp(...) so hash-consing returns the live node, and pickle's memo
        # shares common sub-graphs. Very deep graphs would overflow pickle's recursion, so they are flattened.
        if self.depth <= 200:
            return UOp, (self.op, self.dtype, self.src, self.arg, self.tag)
        nodes: list[UOp] = [n for n in self.toposort() if n.depth > 100]
        index = {n: i for i, n in enumerate(nodes)}
        flat = tuple((n.op, n.dtype, tuple(index.get(s, s) for s in n.src), n.arg, n.tag) for n in nodes)
        return _uop_from_flat, (flat,)

    def __copy__(self) -> UOp:
        return self

    def __deepcopy__(self, memo: dict) -> UOp:
        return self

    def replace(self, **kwargs: Any) -> UOp:
        """This node with some of `op, dtype, src, arg, tag` changed.

        >>> UOp.const(dtypes.int, 1).replace(arg=2).arg
        2
        """
        return UOp(
            kwargs.get("op", self.op),
            kwargs.get("dtype", self.dtype),
            kwargs.get("src", self.src),
            kwargs.get("arg", self.arg),
            kwargs.get("tag", self.tag),
        )

    # ----- graph walks

    def toposort(self, gate: Callable[[UOp], bool] | None = None) -> dict[UOp, None]:
        """Every node reachable through `src` (self included), sources before users, as an ordered dict.

        Iterative (no recursion limit). With `gate` None the ancestors are cached on the node (without the node
        itself: a cache holding its own node would be a reference cycle that keeps whole graphs, and the buffers
        they reach, alive until the garbage collector runs); each call returns a fresh dict.
        `gate(node)` returning False keeps the node but doesn't descend into its sources.

        >>> x = UOp.variable("x", 0, 3)
        >>> [u.op for u in (x + 1).toposort()]
        [Ops.DEFINE_VAR, Ops.CONST, Ops.ADD]
        """
        if gate is None:
            out = self._ancestors().copy()
            out[self] = None
            return out
        return self._walk(gate)

    def _ancestors(self) -> dict[UOp, None]:
        """Cached ancestors of this node (self excluded), sources first; callers must not mutate it."""
        try:
            return self._topo
        except AttributeError:
            ancestors = self._walk(None)
            del ancestors[self]
            object.__setattr__(self, "_topo", ancestors)
            return ancestors

    def _walk(self, gate: Callable[[UOp], bool] | None) -> dict[UOp, None]:
        out: dict[UOp, None] = {}
        stack: list[tuple[UOp, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if node in out:
                continue
            if expanded:
                out[node] = None
                continue
            stack.append((node, True))
            if gate is None or gate(node):
                for s in reversed(node.src):
                    if s not in out:
                        stack.append((s, False))
        return out

    @property
    def sparents(self) -> dict[UOp, None]:
        """All ancestors and self (same as `toposort()`)."""
        return self.toposort()

    @property
    def parents(self) -> dict[UOp, None]:
        """All ancestors, self excluded, sources first.

        >>> x = UOp.variable("x", 0, 3)
        >>> list((x + x).parents) == [x]
        True
        """
        return self._ancestors().copy()

    @property
    def depth(self) -> int:
        """Length of the longest source chain below this node (leaves have depth 0); cached."""
        try:
            return self._depth
        except AttributeError:
            pass
        for node in self.toposort(gate=lambda n: not hasattr(n, "_depth")):
            if not hasattr(node, "_depth"):
                object.__setattr__(node, "_depth", 1 + max((s._depth for s in node.src), default=-1))
        return self._depth

    @property
    def tree_size(self) -> int:
        """Number of nodes of the expression *tree* (shared sub-graphs counted once per use); cached.

        >>> x = UOp.variable("x", 0, 3)
        >>> (x + x).tree_size, len((x + x).toposort())
        (3, 2)
        """
        try:
            return self._ts
        except AttributeError:
            pass
        if all(hasattr(s, "_ts") for s in self.src):
            object.__setattr__(self, "_ts", 1 + sum(s._ts for s in self.src))
            return self._ts
        for node in self.toposort(gate=lambda n: not hasattr(n, "_ts")):
            if not hasattr(node, "_ts"):
                object.__setattr__(node, "_ts", 1 + sum(s._ts for s in node.src))
        return self._ts

    def substitute(self, mapping: Mapping[UOp, UOp]) -> UOp:
        """Replace nodes by the mapping (not descending into replaced nodes) and rebuild everything above them.

        >>> x, y = UOp.variable("x", 0, 3), UOp.variable("y", 0, 3)
        >>> (x + 1).substitute({x: y}) is (y + 1)
        True
        """
        if not mapping:
            return self
        done: dict[UOp, UOp] = {}
        stack: list[tuple[UOp, bool]] = [(self, False)]
        while stack:
            node, expanded = stack.pop()
            if node in done:
                continue
            if node in mapping:
                done[node] = mapping[node]
                continue
            if not expanded:
                stack.append((node, True))
                stack.extend((s, False) for s in reversed(node.src) if s not in done)
                continue
            new_src = tuple(done[s] for s in node.src)
            changed = any(a is not b for a, b in zip(new_src, node.src))
            done[node] = UOp(node.op, node.dtype, new_src, node.arg, node.tag) if changed else node
        return done[self]

    # ----- construction helpers

    @staticmethod
    def const(dtype: DType, value: Any, device: str | tuple[str, ...] | None = None) -> UOp:
        """A constant of `dtype` (value converted like C: ints wrap, floats round to the dtype). A vector dtype
        gives a VCONST; `device` makes a tensor-level scalar constant (src = (DEVICE,)).

        >>> UOp.const(dtypes.uint8, 300).arg, UOp.const(dtypes.float, 0.5).arg, UOp.const(dtypes.int.vec(2), 1).arg
        (44, 0.5, (1, 1))
        """
        if device is None and type(value) is int and dtype.count == 1:  # fast path: index math builds many ints
            if dtype is dtypes.index:
                return UOp(Ops.CONST, dtype, (), value)
            lo, hi = _INT_BOUNDS.get(dtype, (1, 0))
            if lo <= value <= hi:
                return UOp(Ops.CONST, dtype, (), value)
        if isinstance(value, UOp):
            raise TypeError("UOp.const takes a Python value, not a UOp")
        if dtype.count > 1 and not isinstance(dtype, PtrDType):
            lanes = value if isinstance(value, tuple) else (value,) * dtype.count
            if len(lanes) != dtype.count:
                raise ValueError(f"VCONST of {dtype} needs {dtype.count} lanes, got {len(lanes)}")
            return UOp(Ops.VCONST, dtype, (), tuple(cast_value(v, dtype.scalar()) for v in lanes))
        src = (UOp(Ops.DEVICE, arg=device),) if device is not None else ()
        return UOp(Ops.CONST, dtype, src, cast_value(value, dtype))

    def const_like(self, value: Any) -> UOp:
        """A constant with this node's dtype (and device for tensor-level constants).

        >>> UOp.variable("x", 0, 3).const_like(2).arg
        2
        """
        device = self.src[0].arg if self.op is Ops.CONST and self.src and self.src[0].op is Ops.DEVICE else None
        return UOp.const(self.dtype, value, device)

    @staticmethod
    def variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.index) -> UOp:
        """A symbolic integer `name` in `[min_val, max_val]` (DEFINE_VAR).

        >>> v = UOp.variable("n", 1, 8)
        >>> v.arg, v.vmin, v.vmax
        (('n', 1, 8), 1, 8)
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"variable name must be a non-empty str, got {name!r}")
        if not (isinstance(min_val, int) and isinstance(max_val, int)) or min_val > max_val:
            raise ValueError(f"variable {name!r} needs int bounds min <= max, got {min_val}, {max_val}")
        return UOp(Ops.DEFINE_VAR, dtype, (), (name, min_val, max_val))

    @staticmethod
    def range(end: sint, axis_id: int | tuple, axis_type: AxisType = AxisType.LOOP, dtype: DType = dtypes.index) -> UOp:
        """A loop index running over `0 .. end-1`.

        >>> r = UOp.range(10, 3, AxisType.REDUCE)
        >>> r.arg, r.vmin, r.vmax
        ((3, AxisType.REDUCE), 0, 9)
        """
        end_u = end if isinstance(end, UOp) else UOp.const(dtype, end)
        return UOp(Ops.RANGE, end_u.dtype, (end_u,), (axis_id, axis_type))

    @staticmethod
    def special(end: sint, name: str, dtype: DType = dtypes.index) -> UOp:
        """A hardware thread index `name` ("gidx0", "lidx1", "core_id") in `0 .. end-1`.

        >>> UOp.special(32, "lidx0").vmax
        31
        """
        end_u = end if isinstance(end, UOp) else UOp.const(dtype, end)
        return UOp(Ops.SPECIAL, end_u.dtype, (end_u,), name)

    @staticmethod
    def sink(*srcs: UOp, arg: Any = None) -> UOp:
        """The root of a graph: `UOp.sink(store0, store1)`.

        >>> UOp.sink(UOp.const(dtypes.int, 1)).op
        Ops.SINK
        """
        return UOp(Ops.SINK, dtypes.void, srcs, arg)

    @staticmethod
    def group(*srcs: UOp) -> UOp:
        """An unordered bundle of effects (void)."""
        return UOp(Ops.GROUP, dtypes.void, srcs)

    @staticmethod
    def vectorize(*srcs: UOp) -> UOp:
        """Build a vector from scalars of one dtype.

        >>> x = UOp.const(dtypes.float, 1.0)
        >>> UOp.vectorize(x, x).dtype
        dtypes.float.vec(2)
        """
        if not srcs:
            raise ValueError("vectorize needs at least one source")
        return UOp(Ops.VECTORIZE, srcs[0].dtype.vec(len(srcs)), srcs)

    @staticmethod
    def unique(num: int) -> UOp:
        """A UNIQUE marker (makes otherwise identical BUFFERs distinct)."""
        return UOp(Ops.UNIQUE, dtypes.void, (), num)

    @staticmethod
    def iota(size: sint, device: str | tuple[str, ...], dtype: DType = dtypes.int32) -> UOp:
        """The tensor-level 1-D value ``[0, 1, ..., size-1]`` on `device` (IOTA): no buffer, each element is its
        own position, lowered to the flattened loop index (O(1) work per element).

        >>> UOp.iota(5, "PYTHON").shape
        (5,)
        """
        if not dtypes.is_int(dtype):
            raise TypeError(f"IOTA makes integers, not {dtype!r}: cast the result")
        return UOp(Ops.IOTA, dtype, (UOp.device_node(device),), size)

    @staticmethod
    def device_node(device: str | tuple[str, ...]) -> UOp:
        """A DEVICE node naming one device or a tuple of devices."""
        return UOp(Ops.DEVICE, dtypes.void, (), device)

    @staticmethod
    def new_buffer(device: str | tuple[str, ...], size: int, dtype: DType, num: int) -> UOp:
        """A tensor-level BUFFER of `size` elements on `device`; `num` is its UNIQUE id.

        >>> UOp.new_buffer("PYTHON", 4, dtypes.float, 0).shape
        (4,)
        """
        return UOp(Ops.BUFFER, dtype, (UOp.unique(num), UOp.device_node(device)), size)

    @staticmethod
    def define_global(index: int, dtype: DType, size: int = -1) -> UOp:
        """Kernel argument `index`: a global pointer to `size` elements of `dtype`.

        >>> UOp.define_global(0, dtypes.float, 16).dtype
        dtypes.float.ptr(16)
        """
        return UOp(Ops.DEFINE_GLOBAL, dtype.ptr(size), (), index)

    def alu(self, op: Ops, *srcs: UOp) -> UOp:
        """Apply an ALU op with `self` as the first source; the result dtype follows the op (bool for comparisons,
        the value dtype for WHERE).

        >>> x = UOp.variable("x", 0, 3)
        >>> x.alu(Ops.CMPLT, x.const_like(2)).dtype
        dtypes.bool
        """
        if op in GroupOp.Comparison:
            dtype = dtypes.bool.vec(self.dtype.count) if self.dtype.count > 1 else dtypes.bool
        elif op is Ops.WHERE:
            dtype = srcs[0].dtype
        else:
            dtype = self.dtype
        if op in GroupOp.Binary and srcs and srcs[0].dtype is not self.dtype and srcs[0].dtype != self.dtype:
            raise TypeError(f"{op} of mismatched dtypes {self.dtype} and {srcs[0].dtype}; cast one of them first")
        if op is Ops.WHERE and srcs[0].dtype != srcs[1].dtype:
            raise TypeError(f"WHERE branches have different dtypes {srcs[0].dtype} and {srcs[1].dtype}")
        return UOp(op, dtype, (self, *srcs))

    def ufix(self, x: Any) -> UOp:
        """`x` as a UOp: UOps pass through, Python numbers become constants of this node's dtype.

        >>> UOp.variable("x", 0, 3).ufix(2).op
        Ops.CONST
        """
        if isinstance(x, UOp):
            return x
        if isinstance(x, float) and not dtypes.is_float(self.dtype) and x != int(x):
            raise TypeError(f"can't mix float constant {x} with a {self.dtype} UOp")
        if self.op is Ops.CONST and self.src and self.src[0].op is Ops.DEVICE:
            return self.const_like(x)
        return UOp.const(self.dtype, x)

    def _binop(self, op: Ops, other: Any, reverse: bool = False) -> UOp:
        if type(other) is not UOp:
            other = self.ufix(other)
        a, b = (other, self) if reverse else (self, other)
        dtype = a.dtype
        if b.dtype is not dtype and b.dtype != dtype:
            raise TypeError(f"{op} of mismatched dtypes {dtype} and {b.dtype}; cast one of them first")
        if op in GroupOp.Comparison:
            dtype = dtypes.bool.vec(dtype.count) if dtype.count > 1 else dtypes.bool
        return UOp(op, dtype, (a, b))

    def __add__(self, x: Any) -> UOp:
        return self._binop(Ops.ADD, x)

    def __radd__(self, x: Any) -> UOp:
        return self._binop(Ops.ADD, x, True)

    def __sub__(self, x: Any) -> UOp:
        return self._binop(Ops.SUB, x)

    def __rsub__(self, x: Any) -> UOp:
        return self._binop(Ops.SUB, x, True)

    def __mul__(self, x: Any) -> UOp:
        return self._binop(Ops.MUL, x)

    def __rmul__(self, x: Any) -> UOp:
        return self._binop(Ops.MUL, x, True)

    def __floordiv__(self, x: Any) -> UOp:
        """Integer division with C semantics (truncates toward zero, unlike Python's `//` on ints)."""
        return self._binop(Ops.IDIV, x)

    def __rfloordiv__(self, x: Any) -> UOp:
        return self._binop(Ops.IDIV, x, True)

    def __mod__(self, x: Any) -> UOp:
        """C remainder (sign of the dividend, unlike Python's `%` on ints)."""
        return self._binop(Ops.MOD, x)

    def __rmod__(self, x: Any) -> UOp:
        return self._binop(Ops.MOD, x, True)

    def __truediv__(self, x: Any) -> UOp:
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"'/' needs a float dtype, got {self.dtype}; use '//' for C integer division")
        return self._binop(Ops.FDIV, x)

    def __rtruediv__(self, x: Any) -> UOp:
        return self._binop(Ops.FDIV, x, True)

    def __neg__(self) -> UOp:
        return self.logical_not() if self.dtype.scalar() == dtypes.bool else self.alu(Ops.NEG)

    def __lt__(self, x: Any) -> UOp:
        return self._binop(Ops.CMPLT, x)

    def __gt__(self, x: Any) -> UOp:
        return self._binop(Ops.CMPLT, x, True)

    def __le__(self, x: Any) -> UOp:
        return self._binop(Ops.CMPLT, x, True).logical_not()

    def __ge__(self, x: Any) -> UOp:
        return self._binop(Ops.CMPLT, x).logical_not()

    def __and__(self, x: Any) -> UOp:
        return self._binop(Ops.AND, x)

    def __rand__(self, x: Any) -> UOp:
        return self._binop(Ops.AND, x, True)

    def __or__(self, x: Any) -> UOp:
        return self._binop(Ops.OR, x)

    def __ror__(self, x: Any) -> UOp:
        return self._binop(Ops.OR, x, True)

    def __xor__(self, x: Any) -> UOp:
        return self._binop(Ops.XOR, x)

    def __rxor__(self, x: Any) -> UOp:
        return self._binop(Ops.XOR, x, True)

    def __lshift__(self, x: Any) -> UOp:
        return self._binop(Ops.SHL, x)

    def __rshift__(self, x: Any) -> UOp:
        return self._binop(Ops.SHR, x)

    def __invert__(self) -> UOp:
        return self.logical_not() if self.dtype.scalar() == dtypes.bool else self ^ -1

    def eq(self, x: Any) -> UOp:
        """Elementwise `==` (CMPEQ); `==` itself is identity because UOps are hash-consed."""
        return self._binop(Ops.CMPEQ, x)

    def ne(self, x: Any) -> UOp:
        """Elementwise `!=` (CMPNE)."""
        return self._binop(Ops.CMPNE, x)

    def logical_not(self) -> UOp:
        """Boolean not, as `self != True`."""
        return self.ne(True)

    def where(self, a: Any, b: Any) -> UOp:
        """`a` where self (a bool) is true else `b`.

        >>> x = UOp.variable("x", 0, 3)
        >>> (x < 2).where(x, 0).op
        Ops.WHERE
        """
        if isinstance(a, UOp):
            b = a.ufix(b)
        elif isinstance(b, UOp):
            a = b.ufix(a)
        else:
            raise TypeError("where() needs at least one UOp branch to infer the dtype")
        return self.alu(Ops.WHERE, a, b)

    def maximum(self, x: Any) -> UOp:
        """Elementwise max."""
        return self._binop(Ops.MAX, x)

    def minimum(self, x: Any) -> UOp:
        """Elementwise min, as `-max(-a, -b)`."""
        return -((-self).maximum(-self.ufix(x)))

    def cast(self, dtype: DType) -> UOp:
        """Value conversion to `dtype` (no node when already that dtype).

        >>> x = UOp.variable("x", 0, 3)
        >>> x.cast(dtypes.index) is x, x.cast(dtypes.int).dtype
        (True, dtypes.int)
        """
        return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))

    def bitcast(self, dtype: DType) -> UOp:
        """Reinterpret the bits as `dtype` (same total size)."""
        return self if self.dtype == dtype else UOp(Ops.BITCAST, dtype, (self,))

    def gep(self, i: int | tuple[int, ...]) -> UOp:
        """Lanes `i` of a vector (scalar dtype for one lane).

        >>> UOp.vectorize(UOp.const(dtypes.int, 1), UOp.const(dtypes.int, 2)).gep(1).dtype
        dtypes.int
        """
        lanes = (i,) if isinstance(i, int) else tuple(i)
        if self.dtype.vcount == 1 and lanes == (0,):
            return self
        scalar = self.dtype.scalar()
        return UOp(Ops.GEP, scalar.vec(len(lanes)) if len(lanes) > 1 else scalar, (self,), lanes)

    def index(self, idx: UOp, gate: UOp | None = None) -> UOp:
        """Pointer to element `idx` of a buffer pointer (gated: the matching LOAD yields its alt when false).

        >>> buf = UOp.define_global(0, dtypes.float, 16)
        >>> buf.index(UOp.range(16, 0)).dtype
        dtypes.float.ptr(16)
        """
        return UOp(Ops.INDEX, self.dtype, (self, idx) if gate is None else (self, idx, gate))

    def load(self, alt: UOp | None = None, dtype: DType | None = None) -> UOp:
        """Load through an INDEX pointer; `alt` is the value where the INDEX gate is false.

        >>> buf = UOp.define_global(0, dtypes.float, 16)
        >>> buf.index(UOp.range(16, 0)).load().dtype
        dtypes.float
        """
        if dtype is None:
            dtype = self.dtype.base if isinstance(self.dtype, PtrDType) else self.dtype
            if isinstance(self.dtype, PtrDType) and self.dtype.v > 1:
                dtype = dtype.vec(self.dtype.v)
        return UOp(Ops.LOAD, dtype, (self,) if alt is None else (self, alt))

    def store(self, value: UOp) -> UOp:
        """Store `value` through this INDEX pointer (void)."""
        return UOp(Ops.STORE, dtypes.void, (self, value))

    def reduce(self, *ranges: UOp, op: Ops = Ops.ADD) -> UOp:
        """Kernel-level reduction of self over `ranges` with `op` (ADD, MUL or MAX)."""
        return UOp(Ops.REDUCE, self.dtype, (self, *ranges), op)

    def end(self, *ranges: UOp) -> UOp:
        """Close `ranges` after this effect (void)."""
        return UOp(Ops.END, dtypes.void, (self, *ranges))

    def after(self, *deps: UOp) -> UOp:
        """This value, ordered after `deps` (returns self when there are none)."""
        return UOp(Ops.AFTER, self.dtype, (self, *deps)) if deps else self

    def bind(self, value: int) -> UOp:
        """Bind a DEFINE_VAR to a value inside its range.

        >>> UOp.variable("n", 1, 8).bind(3).unbind()[1]
        3
        """
        if self.op is not Ops.DEFINE_VAR:
            raise TypeError(f"only a DEFINE_VAR can be bound, not {self.op}")
        name, lo, hi = self.arg
        if not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"can't bind {value!r} to variable {name!r}: outside [{lo}, {hi}]")
        return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, value)))

    def unbind(self) -> tuple[UOp, int]:
        """`(variable, value)` of a BIND."""
        if self.op is not Ops.BIND:
            raise TypeError(f"only a BIND can be unbound, not {self.op}")
        return self.src[0], self.src[1].arg

    @property
    def expr(self) -> str:
        """The name of a DEFINE_VAR (or of the variable inside a BIND)."""
        if self.op is Ops.BIND:
            return self.src[0].arg[0]
        if self.op is not Ops.DEFINE_VAR:
            raise TypeError(f"{self.op} has no variable name")
        return self.arg[0]

    def as_index(self) -> UOp:
        """This integer expression (variables, bindings, constants, arithmetic) retyped to `dtypes.index`, so a
        variable made with another integer dtype (tinygrad's default is ``dtypes.int``) can size a shape.

        >>> v = UOp.variable("n", 1, 8, dtypes.int32)
        >>> (v.bind(3) * 2).as_index() is UOp.variable("n", 1, 8).bind(3) * 2
        True
        """
        if self.dtype == dtypes.index:
            return self
        retyped: dict[UOp, UOp] = {}
        for u in self.toposort():
            if u.op not in (Ops.DEFINE_VAR, Ops.BIND, Ops.CONST) and u.op not in GroupOp.ALU:
                raise TypeError(f"{u.op} can't be part of a symbolic size; use variables, constants and arithmetic")
            if not (dtypes.is_int(u.dtype) or u.dtype == dtypes.bool):
                raise TypeError(f"a symbolic size must be an integer expression, got a {u.dtype} {u.op}")
            dtype = dtypes.index if dtypes.is_int(u.dtype) else u.dtype
            retyped[u] = UOp(u.op, dtype, tuple(retyped[s] for s in u.src), u.arg)
        return retyped[self]

    def vars(self) -> set[UOp]:
        """Every DEFINE_VAR and BIND below this node (through sources and symbolic args)."""
        out: set[UOp] = set()
        for u in self.toposort():
            if u.op in (Ops.DEFINE_VAR, Ops.BIND):
                out.add(u)
            for a in _arg_uops(u.arg):
                out |= a.vars()
        return out

    def unbind_all(self) -> tuple[UOp, dict[UOp, int]]:
        """Replace every BIND by its variable; returns the new graph and `{variable: value}`.

        >>> n = UOp.variable("n", 1, 8)
        >>> g, vals = (n.bind(3) * 2).unbind_all()
        >>> g is n * 2, vals == {n: 3}
        (True, True)
        """
        binds = [u for u in self.toposort() if u.op is Ops.BIND]
        values: dict[UOp, int] = {}
        for b in binds:
            var, val = b.unbind()
            if values.get(var, val) != val:
                raise ValueError(f"variable {var.expr!r} is bound to both {values[var]} and {val}")
            values[var] = val
        return self.substitute({b: b.src[0] for b in binds}), values

    # ----- movement and tensor-level helpers (no shape checking: the Tensor layer validates)

    def reshape(self, shape: tuple[sint, ...]) -> UOp:
        """RESHAPE to `shape`."""
        return UOp(Ops.RESHAPE, self.dtype, (self,), tuple(shape))

    def expand(self, shape: tuple[sint, ...]) -> UOp:
        """EXPAND size-1 axes to `shape`."""
        return UOp(Ops.EXPAND, self.dtype, (self,), tuple(shape))

    def permute(self, order: tuple[int, ...]) -> UOp:
        """PERMUTE the axes."""
        return UOp(Ops.PERMUTE, self.dtype, (self,), tuple(order))

    def pad(self, padding: tuple[tuple[sint, sint], ...]) -> UOp:
        """PAD each axis with `(before, after)` zeros."""
        return UOp(Ops.PAD, self.dtype, (self,), tuple(tuple(p) for p in padding))

    def shrink(self, bounds: tuple[tuple[sint, sint], ...]) -> UOp:
        """SHRINK each axis to `[start, end)`."""
        return UOp(Ops.SHRINK, self.dtype, (self,), tuple(tuple(b) for b in bounds))

    def flip(self, flags: tuple[bool, ...]) -> UOp:
        """FLIP the axes whose flag is True."""
        return UOp(Ops.FLIP, self.dtype, (self,), tuple(bool(f) for f in flags))

    def r(self, op: Ops, axes: tuple[int, ...]) -> UOp:
        """REDUCE_AXIS with `op` over `axes` (the axes keep size 1).

        >>> UOp.new_buffer("PYTHON", 6, dtypes.float, 0).reshape((2, 3)).r(Ops.ADD, (1,)).shape
        (2, 1)
        """
        return UOp(Ops.REDUCE_AXIS, self.dtype, (self,), (op, tuple(axes)))

    def contiguous(self) -> UOp:
        """CONTIGUOUS: realize into a buffer of its own."""
        return UOp(Ops.CONTIGUOUS, self.dtype, (self,))

    def detach(self) -> UOp:
        """DETACH: stop gradients."""
        return UOp(Ops.DETACH, self.dtype, (self,))

    def copy_to_device(self, device: str | tuple[str, ...]) -> UOp:
        """COPY to `device`."""
        return UOp(Ops.COPY, self.dtype, (self, UOp.device_node(device)))

    def assign(self, value: UOp) -> UOp:
        """ASSIGN `value` into this (buffer-backed) tensor."""
        return UOp(Ops.ASSIGN, self.dtype, (self, value))

    # ----- tensor-level shape and device (cached; None for nodes that have none, e.g. kernel-level ops)

    @property
    def shape(self) -> tuple[sint, ...] | None:
        """The tensor shape of a tensor-level node, derived from sources and movement args (None when shapeless).

        >>> b = UOp.new_buffer("PYTHON", 12, dtypes.float, 0)
        >>> b.reshape((3, 4)).permute((1, 0)).pad(((1, 1), (0, 0))).shape
        (6, 3)
        """
        try:
            return self._shape
        except AttributeError:
            pass
        for node in self.toposort(gate=lambda n: not hasattr(n, "_shape")):
            if not hasattr(node, "_shape"):
                object.__setattr__(node, "_shape", _infer_shape(node))
        return self._shape

    @property
    def size(self) -> sint:
        """Number of elements of a tensor-level node."""
        if self.shape is None:
            raise TypeError(f"{self.op} has no shape")
        return prod(self.shape)

    @property
    def device(self) -> str | tuple[str, ...] | None:
        """The device of a tensor-level node (a tuple for multi-device values), found through its sources."""
        node: UOp | None = self
        seen = 0
        while node is not None and seen < 100000:
            seen += 1
            if node.op is Ops.DEVICE:
                return node.arg
            if node.op is Ops.MULTI:
                return tuple(s.device for s in node.src)  # type: ignore[misc]
            if node.op is Ops.MSELECT:
                dev = node.src[0].device
                return dev[node.arg] if isinstance(dev, tuple) else dev
            if node.op is Ops.MSTACK:
                return tuple(s.device for s in node.src)  # type: ignore[misc]
            if node.op in (Ops.BUFFER, Ops.COPY, Ops.ALLREDUCE):
                return node.src[1].arg
            if node.op is Ops.CONST or node.op is Ops.IOTA:
                return node.src[0].arg if node.src and node.src[0].op is Ops.DEVICE else None
            node = next((s for s in node.src if s.op is not Ops.DEVICE), None)
        return None

    # ----- value ranges of integer / bool expressions

    @property
    def vmin(self) -> Any:
        """Smallest value this integer/bool expression can take (dtype min when unknown; -inf for floats).

        >>> (UOp.range(10, 0) - 3).vmin
        -3
        """
        return self._min_max[0]

    @property
    def vmax(self) -> Any:
        """Largest value this integer/bool expression can take (dtype max when unknown; inf for floats).

        >>> (UOp.range(10, 0) % 4).vmax
        3
        """
        return self._min_max[1]

    @property
    def _min_max(self) -> tuple[Any, Any]:
        try:
            return self._mm
        except AttributeError:
            pass
        if all(hasattr(s, "_mm") for s in self.src):
            mm = _compute_min_max(self)
            object.__setattr__(self, "_mm", mm)
            return mm
        for node in self.toposort(gate=lambda n: not hasattr(n, "_mm")):
            if not hasattr(node, "_mm"):
                object.__setattr__(node, "_mm", _compute_min_max(node))
        return self._mm

    # ----- symbolic conveniences

    def simplify(self) -> UOp:
        """`graph_rewrite` with the `symbolic` rules.

        >>> x = UOp.variable("x", 0, 7)
        >>> ((x + 3) + 4).simplify() is x + 7
        True
        """
        from tinycore.uop.patterns import graph_rewrite
        from tinycore.uop.symbolic import symbolic

        return graph_rewrite(self, symbolic, name="simplify")

    def render(self, simplify: bool = True) -> str:
        """A Python-like expression string for a symbolic integer expression (see `render_expr`).

        >>> x = UOp.variable("x", 0, 7)
        >>> (x * 4 + 1).render()
        '((x*4)+1)'
        """
        from tinycore.uop.render_expr import render_expr

        return render_expr(self.simplify() if simplify else self)

    def pretty(self) -> str:
        """A one-line-per-node listing of the graph (sources first) for debugging; see `print_tree`."""
        return _pretty_listing(list(self.toposort()))

    def print_tree(self) -> None:
        """Print `pretty()`."""
        print(self.pretty())

    @property
    def key(self) -> bytes:
        """A structural hash (sha256) that is the same in every process; memoize schedule caches with it.

        >>> (UOp.variable("x", 0, 3) + 1).key == (UOp.variable("x", 0, 3) + 1).key
        True
        """
        return _structural_key(self)

    def __repr__(self) -> str:
        return _uop_repr(self)

    def __str__(self) -> str:
        return _uop_repr(self)


# hot in `UOp.__new__` (every node built goes through it): bound once here
_new_object = object.__new__
_weakref = weakref.ref
_set_object_attr = object.__setattr__

# `set_chain_key(u, key)`: give `u` its eager chain key `(structure id, BUFFER leaf or None)`, read back as
# `u.chain_key` (`tinycore.engine.eager` owns the keys; nothing else sets them). The slot's own setter, a C call:
# the eager hot path keys every elementwise node it builds, and a side table keyed by node (a weakref per node)
# made a chain of tensor-tensor ops 25% slower.
set_chain_key = _UOpFields.chain_key.__set__

_CONST_OP, _VCONST_OP = Ops.CONST, Ops.VCONST


def _uop_from_flat(flat: tuple) -> UOp:
    """Rebuild the deep part of a flattened graph (see `UOp.__reduce__`); ints in a src refer to earlier entries."""
    built: list[UOp] = []
    for op, dtype, src, arg, tag in flat:
        built.append(UOp(op, dtype, tuple(built[s] if isinstance(s, int) else s for s in src), arg, tag))
    return built[-1]


def _arg_uops(arg: Any) -> list[UOp]:
    """The UOps inside an arg (symbolic shapes in movement args)."""
    if isinstance(arg, UOp):
        return [arg]
    if isinstance(arg, tuple):
        out: list[UOp] = []
        for a in arg:
            if isinstance(a, (UOp, tuple)):
                out.extend(_arg_uops(a))
        return out
    return []


# ---------------------------------------------------------------------------------------------------------------
# value ranges


def _dtype_range(dtype: DType) -> tuple[Any, Any]:
    scalar = dtype.scalar()
    if isinstance(dtype, PtrDType) or scalar == dtypes.void:
        return -math.inf, math.inf
    if scalar == dtypes.index:
        return -(2**63), 2**63 - 1
    return dtypes.min(scalar), dtypes.max(scalar)


def _is_intlike(dtype: DType) -> bool:
    return (dtypes.is_int(dtype) or dtype.scalar() == dtypes.bool) and not isinstance(dtype, PtrDType)


_RANGE_INFO: dict[DType, tuple[bool, bool, tuple[Any, Any]]] = {}  # dtype -> (int or bool, bool, full range)


def _compute_min_max(u: UOp) -> tuple[Any, Any]:
    """Sound bounds of `u` from the (already computed) bounds of its sources."""
    dtype = u.dtype
    op = u.op
    info = _RANGE_INFO.get(dtype)
    if info is None:
        info = _RANGE_INFO[dtype] = (_is_intlike(dtype), dtype.scalar() == dtypes.bool, _dtype_range(dtype))
    intlike, is_bool, full = info
    if not intlike:
        return full
    rng: tuple[Any, Any] | None = None
    if op is Ops.CONST:
        return (u.arg, u.arg)
    if op is Ops.VCONST:
        return (min(u.arg), max(u.arg))
    if op is Ops.DEFINE_VAR:
        return (u.arg[1], u.arg[2])
    if op is Ops.IOTA:
        size_max = u.arg.vmax if isinstance(u.arg, UOp) else u.arg
        return (0, max(0, size_max - 1))
    if op is Ops.BIND:
        return u.src[0]._mm
    if op in (Ops.RANGE, Ops.SPECIAL):
        return (0, max(0, u.src[0]._mm[1] - 1))
    if op in (Ops.VECTORIZE, Ops.GEP, Ops.AFTER, Ops.NOOP, Ops.ASSIGN) and u.src:
        lows, highs = zip(*(s._mm for s in (u.src if op is Ops.VECTORIZE else u.src[:1])))
        rng = (min(lows), max(highs))
    elif op is Ops.CAST:
        s0, s1 = u.src[0]._mm
        if dtypes.is_float(u.src[0].dtype):
            rng = None
        elif is_bool:
            rng = (False, True) if s0 <= 0 <= s1 and s0 != s1 else (bool(s0), bool(s0))
        else:
            rng = (int(s0), int(s1))
    elif op in GroupOp.ALU and all(_RANGE_INFO[s.dtype][0] for s in u.src):
        rng = _alu_range(op, [s._mm for s in u.src], is_bool)
    if rng is None:
        return full
    lo, hi = rng
    if is_bool:
        return (bool(lo), bool(hi))
    if lo < full[0] or hi > full[1]:
        return full
    return (lo, hi)


def _next_pow2_mask(x: int) -> int:
    return (1 << int(x).bit_length()) - 1


def _alu_range(op: Ops, r: list[tuple[Any, Any]], is_bool: bool) -> tuple[Any, Any] | None:
    (a0, a1) = r[0]
    if op is Ops.NEG:
        return (-a1, -a0) if not is_bool else (not a1, not a0)
    if op is Ops.TRUNC:
        return (a0, a1)
    if op is Ops.WHERE:
        (g0, g1), (b0, b1), (c0, c1) = r
        if g0:
            return (b0, b1)
        if not g1:
            return (c0, c1)
        return (min(b0, c0), max(b1, c1))
    if op is Ops.MULACC:
        (b0, b1), (c0, c1) = r[1], r[2]
        prods = (a0 * b0, a0 * b1, a1 * b0, a1 * b1)
        return (min(prods) + c0, max(prods) + c1)
    if len(r) < 2:
        return None
    (b0, b1) = r[1]
    if op is Ops.ADD:
        return (a0 + b0, a1 + b1) if not is_bool else (a0 or b0, a1 or b1)
    if op is Ops.SUB:
        return (a0 - b1, a1 - b0)
    if op is Ops.MUL:
        if is_bool:
            return (a0 and b0, a1 and b1)
        prods = (a0 * b0, a0 * b1, a1 * b0, a1 * b1)
        return (min(prods), max(prods))
    if op is Ops.IDIV:
        if b0 <= 0 <= b1:
            return None
        quots = [_trunc_div(x, y) for x in (a0, a1) for y in (b0, b1)]
        return (min(quots), max(quots))
    if op is Ops.MOD:
        if b0 <= 0 <= b1:
            return None
        m = max(abs(b0), abs(b1)) - 1
        if b0 == b1 and a0 >= 0 and a0 // b0 == a1 // b0 and b0 > 0:
            return (a0 % b0, a1 % b0)  # one period: the remainder is monotone
        if a0 >= 0:
            return (a0, a1) if a1 <= min(abs(b0), abs(b1)) - 1 else (0, min(a1, m))
        if a1 <= 0:
            return (a0, a1) if a0 >= -(min(abs(b0), abs(b1)) - 1) else (max(a0, -m), 0)
        return (max(a0, -m), min(a1, m))
    if op is Ops.MAX:
        return (max(a0, b0), max(a1, b1))
    if op is Ops.CMPLT:
        return (a1 < b0, not (a0 >= b1))
    if op is Ops.CMPNE:
        if a0 == a1 == b0 == b1:
            return (False, False)
        return (True, True) if (a1 < b0 or b1 < a0) else (False, True)
    if op is Ops.CMPEQ:
        if a0 == a1 == b0 == b1:
            return (True, True)
        return (False, False) if (a1 < b0 or b1 < a0) else (False, True)
    if op is Ops.AND:
        if is_bool:
            return (a0 and b0, a1 and b1)
        if a0 >= 0 and b0 >= 0:
            return (0, min(a1, b1))
        if a0 >= 0:
            return (0, a1)
        if b0 >= 0:
            return (0, b1)
        return None
    if op is Ops.OR:
        if is_bool:
            return (a0 or b0, a1 or b1)
        if a0 >= 0 and b0 >= 0:
            return (max(a0, b0), _next_pow2_mask(max(a1, b1)))
        return None
    if op is Ops.XOR:
        if is_bool:
            if a0 == a1 and b0 == b1:
                return (a0 != b0, a0 != b0)
            return (False, True)
        if a0 >= 0 and b0 >= 0:
            return (0, _next_pow2_mask(max(a1, b1)))
        return None
    if op in (Ops.SHL, Ops.SHR):
        if b0 < 0 or b1 >= 64:
            return None
        vals = [(x << y) if op is Ops.SHL else (x >> y) for x in (a0, a1) for y in (b0, b1)]
        return (min(vals), max(vals))
    return None


# ---------------------------------------------------------------------------------------------------------------
# shapes (tensor level)


def _smul(a: sint, b: sint) -> sint:
    return a * b


def _shape_kinds() -> dict[Ops, int]:
    kinds = {Ops.BUFFER: 0, Ops.BUFFER_VIEW: 1, Ops.CONST: 2, Ops.DEFINE_VAR: 3, Ops.BIND: 3, Ops.IOTA: 4}
    kinds |= {Ops.RESHAPE: 5, Ops.EXPAND: 5, Ops.PERMUTE: 6, Ops.PAD: 7, Ops.SHRINK: 8, Ops.FLIP: 9}
    kinds |= {op: 10 for op in GroupOp.Movement if op not in kinds} | {Ops.REDUCE_AXIS: 10}
    kinds |= {op: 11 for op in GroupOp.Elementwise}
    same = (Ops.COPY, Ops.ASSIGN, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.NOOP, Ops.AFTER)
    kinds |= {op: 12 for op in (*same, Ops.MSTACK, Ops.ALLREDUCE)}
    return kinds | {Ops.MSELECT: 13, Ops.MULTI: 14}


_SHAPE_KIND = _shape_kinds()  # op -> which rule of `_infer_shape` gives its shape (one dict lookup per node)


def _infer_shape(u: UOp) -> tuple[sint, ...] | None:
    kind = _SHAPE_KIND.get(u.op)
    if kind is None:
        return None
    if kind == 0:
        return (u.arg,)
    if kind == 1:
        return (u.arg[0],)
    if kind == 2:
        return () if u.src and u.src[0].op is Ops.DEVICE else None
    if kind == 3:
        return ()
    if kind == 4:
        return (u.arg,) if u.src and u.src[0].op is Ops.DEVICE else None
    if kind == 5:
        return tuple(u.arg)
    if kind == 11:
        return next((s._shape for s in u.src if s._shape is not None), None)
    src_shape = u.src[0]._shape if u.src else None
    if kind <= 10:  # the other movement ops and REDUCE_AXIS
        if src_shape is None:
            return None
        if kind == 6:
            return tuple(src_shape[i] for i in u.arg)
        if kind == 7:
            return tuple(_simplify_sint(s + b + a) for s, (b, a) in zip(src_shape, u.arg))
        if kind == 8:
            return tuple(_simplify_sint(e - b) for (b, e) in u.arg)
        if kind == 9:
            return src_shape
        return tuple(1 if i in u.arg[1] else s for i, s in enumerate(src_shape))
    if kind == 12:
        return src_shape
    if kind == 13:  # MSELECT
        if u.src[0].op is Ops.MULTI:
            return u.src[0].src[u.arg]._shape
        return src_shape
    # MULTI
    if src_shape is None or u.arg is None:
        return src_shape
    total: sint = 0
    for s in u.src:
        total = total + s._shape[u.arg] if s._shape is not None else total
    return tuple(_simplify_sint(total) if i == u.arg else d for i, d in enumerate(src_shape))


def _simplify_sint(x: sint) -> sint:
    return x.simplify() if isinstance(x, UOp) else x


# ---------------------------------------------------------------------------------------------------------------
# repr / debug printing


def _arg_repr_tokens(arg: Any) -> list[Any]:
    """The repr of an arg as a list of strings and UOps (UOps are printed by the graph printer)."""
    if isinstance(arg, UOp):
        return [arg]
    if isinstance(arg, tuple) and _arg_uops(arg):
        toks: list[Any] = ["("]
        for i, a in enumerate(arg):
            if i:
                toks.append(", ")
            toks.extend(_arg_repr_tokens(a))
        toks.append(",)" if len(arg) == 1 else ")")
        return toks
    return [repr(arg)]


def _uop_repr(root: UOp) -> str:
    """`UOp(...)` text that evaluates back to the same node; shared nodes are named with `:=` at first use."""
    # pass 1: count references in the order the text will be written (arg UOps before sources)
    refs: dict[UOp, int] = {}
    stack: list[UOp] = [root]
    while stack:
        node = stack.pop()
        refs[node] = refs.get(node, 0) + 1
        if refs[node] > 1:
            continue
        children = [t for t in _arg_repr_tokens(node.arg) if isinstance(t, UOp)] + list(node.src)
        stack.extend(reversed(children))
    # pass 2: emit
    names: dict[UOp, str] = {}
    out: list[str] = []
    work: list[Any] = [(root, 0)]
    while work:
        item = work.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        node, indent = item
        if node in names:
            out.append(names[node])
            continue
        pieces: list[Any] = []
        head = f"UOp({node.op!r}, {node.dtype!r}"
        if refs[node] > 1:
            names[node] = f"x{len(names)}"
            head = f"({names[node]}:=" + head
        pieces.append(head)
        if node.arg is not None:
            pieces.append(", arg=")
            pieces.extend(_arg_repr_tokens(node.arg) if _arg_uops(node.arg) else [repr(node.arg)])
        if node.tag is not None:
            pieces.append(f", tag={node.tag!r}")
        if node.src:
            pieces.append(", src=(\n")
            for s in node.src:
                pieces.append("  " * (indent + 1))
                pieces.append((s, indent + 1))
                pieces.append(",\n")
            pieces.append("  " * indent + "))")
        else:
            pieces.append(")")
        if refs[node] > 1:
            pieces.append(")")
        fixed: list[Any] = [(p, indent + 1) if isinstance(p, UOp) else p for p in pieces]
        work.extend(reversed(fixed))
    return "".join(out)


def _short_arg(arg: Any) -> str:
    text = repr(arg) if not _arg_uops(arg) else str(tuple(_short(a) if isinstance(a, UOp) else a for a in arg))
    return text if len(text) <= 80 else text[:77] + "..."


def _short(u: UOp) -> str:
    """A one-line summary of a node: op, dtype, arg and source ops."""
    if u.op is Ops.DEFINE_VAR:
        return f"{u.arg[0]}[{u.arg[1]}-{u.arg[2]}]"
    srcs = ", ".join(str(s.op) for s in u.src)
    arg = "" if u.arg is None else f" arg={_short_arg(u.arg)}"
    return f"{u.op} {u.dtype!r}{arg} src=({srcs})"


def _pretty_listing(uops: list[UOp]) -> str:
    index = {u: i for i, u in enumerate(uops)}
    lines = []
    for i, u in enumerate(uops):
        srcs = ", ".join(f"%{index[s]}" if s in index else "?" for s in u.src)
        arg = "" if u.arg is None else f"  arg={_short_arg(u.arg)}"
        tag = "" if u.tag is None else f"  tag={u.tag!r}"
        lines.append(f"%{i:<4d} {u.op.name:<16s} {u.dtype!r:<28s} ({srcs}){arg}{tag}")
    return "\n".join(lines)


def print_uops(uops: Iterable[UOp]) -> None:
    """Print a linearized program (or any list of UOps), one `%n OP dtype (srcs) arg` line each."""
    print(_pretty_listing(list(uops)))


def _structural_key(root: UOp) -> bytes:
    keys: dict[UOp, bytes] = {}
    for node in root.toposort():
        h = hashlib.sha256()
        h.update(f"{node.op.name}|{node.dtype!r}|{node.tag!r}|".encode())
        for a in _arg_repr_tokens(node.arg):
            h.update(_structural_key(a) if isinstance(a, UOp) else str(a).encode())
        for s in node.src:
            h.update(keys[s])
        keys[node] = h.digest()
    return keys[root]


# ---------------------------------------------------------------------------------------------------------------
# symbolic ints


class _VariableMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, UOp) and obj.op is Ops.DEFINE_VAR

    def __call__(cls, name: str, min_val: int, max_val: int, dtype: DType = dtypes.index) -> UOp:  # type: ignore[override]
        return UOp.variable(name, min_val, max_val, dtype)


class Variable(metaclass=_VariableMeta):
    """`Variable(name, min, max)` builds a DEFINE_VAR UOp; `isinstance(u, Variable)` tests for one.

    >>> n = Variable("n", 1, 16)
    >>> isinstance(n, Variable), isinstance(n + 1, Variable), n.bind(4).unbind()[1]
    (True, False, 4)
    """


def sym_infer(x: sint, var_vals: Mapping[Any, int]) -> int:
    """The value of a symbolic int given variable values (keys: DEFINE_VAR UOps or their names); BINDs not given
    in `var_vals` use their bound value. C semantics throughout.

    >>> n = Variable("n", 1, 16)
    >>> sym_infer(n * 3 + 1, {n: 4}), sym_infer(7, {}), sym_infer((n - 9) // 2, {"n": 2})
    (13, 7, -3)
    """
    if not isinstance(x, UOp):
        return x
    by_name = {(k.expr if isinstance(k, UOp) else k): v for k, v in var_vals.items()}
    return _evaluate(x, by_name)


def _evaluate(root: UOp, by_name: Mapping[str, Any]) -> Any:
    vals: dict[UOp, Any] = {}
    topo = root.toposort()
    bound = {u.src[0].arg[0]: u.src[1].arg for u in topo if u.op is Ops.BIND}
    if bound:
        by_name = {**bound, **by_name}
    for u in topo:
        if u.op is Ops.CONST or u.op is Ops.VCONST:
            vals[u] = u.arg
        elif u.op is Ops.DEFINE_VAR:
            if u.arg[0] not in by_name:
                raise KeyError(f"no value for variable {u.arg[0]!r}")
            vals[u] = by_name[u.arg[0]]
        elif u.op is Ops.BIND:
            vals[u] = by_name.get(u.src[0].arg[0], u.src[1].arg)
        elif u.op is Ops.CAST:
            vals[u] = cast_value(vals[u.src[0]], u.dtype)
        elif u.op is Ops.BITCAST:
            vals[u] = cast_value(vals[u.src[0]], u.dtype, bitcast_from=u.src[0].dtype)
        elif u.op in GroupOp.ALU:
            dt = u.src[-1].dtype if u.op in GroupOp.Comparison or u.op is Ops.WHERE else u.dtype
            vals[u] = exec_alu(u.op, dt, [vals[s] for s in u.src])
        elif u.op is Ops.VECTORIZE:
            vals[u] = tuple(vals[s] for s in u.src)
        elif u.op is Ops.GEP:
            v = vals[u.src[0]]
            vals[u] = v[u.arg[0]] if len(u.arg) == 1 else tuple(v[i] for i in u.arg)
        else:
            raise ValueError(f"can't evaluate {u.op} symbolically")
    return vals[root]


def resolve(x: Any, default: bool = True) -> bool:
    """A Python bool for a maybe-symbolic condition: decided by value ranges, else `default`.

    >>> n = Variable("n", 1, 16)
    >>> resolve(n < 20), resolve(n < 5), resolve(n < 5, False), resolve(3 < 4)
    (True, True, False, True)
    """
    if not isinstance(x, UOp):
        return bool(x)
    if x.dtype.scalar() != dtypes.bool:
        raise TypeError(f"resolve needs a bool condition, got {x.dtype}")
    lo, hi = x.vmin, x.vmax
    return bool(lo) if lo == hi else default


def ssimplify(x: sint) -> sint:
    """Simplify a symbolic int, turning it into a Python int when it is constant.

    >>> n = Variable("n", 1, 16)
    >>> ssimplify(n * 0 + 3), ssimplify(5)
    (3, 5)
    """
    if not isinstance(x, UOp):
        return x
    s = x.simplify()
    return s.arg if s.op is Ops.CONST else s


def smax(*xs: Any) -> sint:
    """Max of ints and symbolic ints (a Python int when all are ints).

    >>> smax(1, 5, 3), smax([2, 4])
    (5, 4)
    """
    items = list(xs[0]) if len(xs) == 1 and isinstance(xs[0], (list, tuple)) else list(xs)
    if all(isinstance(i, int) for i in items):
        return max(items)
    result = items[0]
    for item in items[1:]:
        result = result.maximum(item) if isinstance(result, UOp) else item.ufix(result).maximum(item)
    return ssimplify(result)


def smin(*xs: Any) -> sint:
    """Min of ints and symbolic ints (a Python int when all are ints).

    >>> smin(4, 2)
    2
    """
    items = list(xs[0]) if len(xs) == 1 and isinstance(xs[0], (list, tuple)) else list(xs)
    if all(isinstance(i, int) for i in items):
        return min(items)
    result = items[0]
    for item in items[1:]:
        result = result.minimum(item) if isinstance(result, UOp) else item.ufix(result).minimum(item)
    return ssimplify(result)
