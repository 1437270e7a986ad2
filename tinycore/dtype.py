"""Data types: scalar, vector and pointer dtypes, the promotion lattice, and numpy conversion.

>>> dtypes.float32.vec(4)
dtypes.float.vec(4)
>>> least_upper_dtype(dtypes.int8, dtypes.uint8)
dtypes.short
>>> dtypes.from_py(1.5)
dtypes.float
"""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, ClassVar, Final

ConstType = float | int | bool


class AddrSpace(Enum):
    """Where a pointer points: device global memory, work-group shared memory, or per-thread registers."""

    GLOBAL = "global"
    LOCAL = "local"
    REG = "reg"


_ADDRSPACE_ORDER: Final[dict[AddrSpace, int]] = {space: i for i, space in enumerate(AddrSpace)}


_FIELD_GETTERS: dict[type, Callable[[Any], tuple]] = {}


def _field_values(dtype: DType) -> tuple:
    """The values of all dataclass fields of `dtype`, in order (what the generated ``__eq__`` compares); the
    getter is built once per class: `dataclasses.fields` costs more than the whole comparison."""
    getter = _FIELD_GETTERS.get(dtype.__class__)
    if getter is None:
        getter = operator.attrgetter(*(f.name for f in fields(dtype)))  # DType has 6 fields: always a tuple
        _FIELD_GETTERS[dtype.__class__] = getter
    return getter(dtype)


@dataclass(frozen=True, eq=True)
class DType:
    """A scalar or vector element type.

    `priority` orders dtypes for promotion ties, `itemsize` is in bytes (of the whole vector), `fmt` is the
    `struct`/numpy format character (None for types numpy lacks, like bfloat16), `count` the vector width.

    >>> dtypes.int32.itemsize, dtypes.float.vec(4).itemsize, dtypes.float.vec(4).scalar()
    (4, 16, dtypes.float)
    """

    priority: int
    itemsize: int
    name: str
    fmt: str | None
    count: int
    _scalar: DType | None

    @staticmethod
    def new(priority: int, itemsize: int, name: str, fmt: str | None) -> DType:
        """Make a new scalar dtype (used once per dtype in `dtypes`)."""
        return DType(priority, itemsize, name, fmt, 1, None)

    def __hash__(self) -> int:
        # Cached, and built from ints only so it is the same in every process (a pickled DType carries it along).
        # UOps are hash-consed on a key that contains their dtype, so this runs on every UOp construction; the
        # dataclass-generated hash would rebuild and hash a 6-field tuple each time (~0.4 us).
        try:
            return self._hash  # type: ignore[attr-defined]
        except AttributeError:
            cached = hash(self._hash_key())
            object.__setattr__(self, "_hash", cached)
            return cached

    def _hash_key(self) -> tuple:
        return (self.priority, self.itemsize, self.count)

    def __eq__(self, other: object) -> bool:
        # Same result as the dataclass-generated comparison (all fields, same class), with fast paths: identity,
        # and the cached int hash, which differs for almost every pair of distinct dtypes.
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        try:
            if self._hash != other._hash:  # type: ignore[attr-defined]
                return False
        except AttributeError:  # a hash not computed yet
            if hash(self) != hash(other):
                return False
        return _field_values(self) == _field_values(other)

    def __repr__(self) -> str:
        if self.count > 1:
            return f"{self.scalar()!r}.vec({self.count})"
        return f"dtypes.{INVERSE_DTYPES_DICT[self.name]}"

    def __lt__(self, other: DType) -> bool:
        return (self.priority, self.itemsize, self.name, self.fmt or "", self.count) < (
            other.priority,
            other.itemsize,
            other.name,
            other.fmt or "",
            other.count,
        )

    @property
    def base(self) -> DType:
        """The dtype itself (pointer dtypes override this with the pointed-to dtype)."""
        return self

    @property
    def vcount(self) -> int:
        """Vector width (1 for scalars)."""
        return self.count

    def vec(self, sz: int) -> DType:
        """This scalar dtype as a vector of `sz` lanes (`sz == 1` returns the scalar itself)."""
        if self.count != 1:
            raise ValueError(f"can't vectorize {self}, it is already a vector")
        if sz == 1 or self == dtypes.void:
            return self
        return DType(self.priority, self.itemsize * sz, f"{INVERSE_DTYPES_DICT[self.name]}{sz}", None, sz, self)

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        """A pointer to this dtype; `size` is the number of elements pointed to (-1 when unknown)."""
        return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, None, self, addrspace, 1, size)

    def scalar(self) -> DType:
        """The lane dtype of a vector (a scalar returns itself)."""
        return self._scalar if self._scalar is not None else self

    def nbytes(self) -> int:
        """Bytes of one element; for a pointer dtype of known ``size``, of the whole buffer it points to."""
        size = getattr(self, "size", None)
        if size is None:
            return self.itemsize
        if size == -1:
            raise RuntimeError("can't get nbytes of a pointer with unlimited size")
        return size * self.itemsize

    @property
    def min(self) -> ConstType:
        """The smallest value of this dtype (`dtypes.min`): ``-inf`` for floats, ``False`` for bool."""
        return dtypes.min(self)

    @property
    def max(self) -> ConstType:
        """The largest value of this dtype (`dtypes.max`): ``inf`` for floats, ``True`` for bool."""
        return dtypes.max(self)


@dataclass(frozen=True, eq=True)
class PtrDType(DType):
    """A pointer to `_base` elements in address space `addrspace`; `v` is the pointer's own vector width.

    >>> p = dtypes.float.ptr(16)
    >>> p.base, p.size, p.addrspace
    (dtypes.float, 16, <AddrSpace.GLOBAL: 'global'>)
    """

    _base: DType = None  # type: ignore[assignment]
    addrspace: AddrSpace = AddrSpace.GLOBAL
    v: int = 1
    size: int = -1

    # the dataclass decorator would otherwise replace the cached hash and the fast comparison of DType
    __hash__ = DType.__hash__
    __eq__ = DType.__eq__

    def _hash_key(self) -> tuple:
        return (self.priority, self.itemsize, self.count, _ADDRSPACE_ORDER[self.addrspace], self.v, self.size)

    @property
    def base(self) -> DType:
        return self._base

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        raise TypeError("can't make a pointer to a pointer")

    def vec(self, sz: int) -> PtrDType:
        """A vector of `sz` pointers (used when an upcast index yields several addresses)."""
        if self.v != 1:
            raise ValueError(f"can't vectorize {self}, it is already a vector of pointers")
        if sz == 1:
            return self
        return PtrDType(
            self.priority,
            self.itemsize,
            self.name,
            self.fmt,
            self.count,
            None,
            self._base,
            self.addrspace,
            sz,
            self.size,
        )

    def scalar(self) -> PtrDType:
        """The single-pointer form of a pointer vector."""
        return PtrDType(
            self.priority,
            self.itemsize,
            self.name,
            self.fmt,
            self.count,
            None,
            self._base,
            self.addrspace,
            1,
            self.size,
        )

    @property
    def vcount(self) -> int:
        return self.v

    def __repr__(self) -> str:
        where = "" if self.addrspace == AddrSpace.GLOBAL else f", {self.addrspace}"
        vec = "" if self.v == 1 else f".vec({self.v})"
        return f"{self._base!r}.ptr({self.size}{where}){vec}"


_NP_DTYPES: dict[DType, Any] = {}  # `dtypes.to_np`'s answers


class dtypes:  # noqa: N801 (tinygrad-compatible name)
    """The namespace of all dtypes, with predicates and conversions.

    `dtypes.default_float` (float32) and `dtypes.default_int` (int32) are the dtypes of Python floats and ints;
    assign to them to change the defaults process-wide (as in tinygrad), or use the `DEFAULT_FLOAT` environment
    variable (e.g. `DEFAULT_FLOAT=HALF`).
    """

    void: Final[DType] = DType.new(-1, 0, "void", None)
    bool: Final[DType] = DType.new(0, 1, "bool", "?")
    int8: Final[DType] = DType.new(1, 1, "signed char", "b")
    uint8: Final[DType] = DType.new(2, 1, "unsigned char", "B")
    int16: Final[DType] = DType.new(3, 2, "short", "h")
    uint16: Final[DType] = DType.new(4, 2, "unsigned short", "H")
    int32: Final[DType] = DType.new(5, 4, "int", "i")
    uint32: Final[DType] = DType.new(6, 4, "unsigned int", "I")
    int64: Final[DType] = DType.new(7, 8, "long", "q")
    uint64: Final[DType] = DType.new(8, 8, "unsigned long", "Q")
    fp8e4m3: Final[DType] = DType.new(9, 1, "float8_e4m3", None)
    """8-bit float, OCP E4M3FN (torch.float8_e4m3fn): 4 exponent bits (bias 7), 3 mantissa bits, no infinities;
    0x7F/0xFF are NaN, the largest value is 448. Stored as one byte; kernels compute in float32 (see `fp8_encode`)."""
    fp8e5m2: Final[DType] = DType.new(9, 1, "float8_e5m2", None)
    """8-bit float, OCP E5M2 (torch.float8_e5m2): 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like with
    infinities and NaNs; the largest finite value is 57344. Stored as one byte; kernels compute in float32."""
    float16: Final[DType] = DType.new(9, 2, "half", "e")
    bfloat16: Final[DType] = DType.new(10, 2, "__bf16", None)
    float32: Final[DType] = DType.new(11, 4, "float", "f")
    float64: Final[DType] = DType.new(12, 8, "double", "d")
    # index arithmetic before the renderer picks int32 or int64 from value ranges
    index: Final[DType] = DType.new(-2, 8, "index", None)

    # aliases
    half = float16
    float = float32
    double = float64
    uchar = uint8
    ushort = uint16
    uint = uint32
    ulong = uint64
    char = int8
    short = int16
    int = int32
    long = int64

    default_float: ClassVar[DType] = float32
    default_int: ClassVar[DType] = int32

    # tinygrad's groups
    fp8s: ClassVar[tuple[DType, ...]] = (fp8e4m3, fp8e5m2)
    """The 8-bit float dtypes (storage-only in PyTorch's sense: casts, copies, movement and ==/!=)."""
    floats: ClassVar[tuple[DType, ...]] = fp8s + (float16, bfloat16, float32, float64)
    uints: ClassVar[tuple[DType, ...]] = (uint8, uint16, uint32, uint64)
    sints: ClassVar[tuple[DType, ...]] = (int8, int16, int32, int64)
    ints: ClassVar[tuple[DType, ...]] = uints + sints
    all: ClassVar[tuple[DType, ...]] = floats + ints + (bool,)  # noqa: A003 - tinygrad's name

    @staticmethod
    def is_float(x: DType) -> bool:
        """True for the fp8 types, float16, bfloat16, float32, float64 (and their vectors)."""
        return x.scalar() in _FLOAT_SET

    @staticmethod
    def is_int(x: DType) -> bool:
        """True for signed and unsigned integers (and `dtypes.index`), not bool."""
        return x.scalar() in _INT_SET

    @staticmethod
    def is_unsigned(x: DType) -> bool:
        """True for uint8/16/32/64."""
        return x.scalar() in _UINT_SET

    @staticmethod
    def is_bool(x: DType) -> bool:
        """True for bool."""
        return x.scalar() == dtypes.bool

    @staticmethod
    def from_py(x: Any) -> DType:
        """The dtype tinycore gives a Python value `x` (or nested list/tuple of values).

        >>> dtypes.from_py(True), dtypes.from_py(3), dtypes.from_py([1, 2.0])
        (dtypes.bool, dtypes.int, dtypes.float)
        """
        if isinstance(x, (list, tuple)):
            return max((dtypes.from_py(item) for item in x), default=dtypes.default_float)
        if isinstance(x, bool):
            return dtypes.bool
        if isinstance(x, int):
            return dtypes.default_int
        if isinstance(x, float):
            return dtypes.default_float
        raise TypeError(f"can't infer a dtype from {type(x).__name__} value {x!r}")

    @staticmethod
    def as_const(val: Any, dtype: DType) -> ConstType | tuple[ConstType, ...]:
        """`val` converted to the Python type that represents constants of `dtype` (wrapping ints like C does).

        >>> dtypes.as_const(3.7, dtypes.int32), dtypes.as_const(300, dtypes.uint8), dtypes.as_const(2, dtypes.float)
        (3, 44, 2.0)
        """
        if isinstance(val, tuple):
            return tuple(dtypes.as_const(item, dtype) for item in val)
        scalar = dtype.scalar()
        if dtypes.is_float(scalar):
            return float(val)
        if scalar == dtypes.bool:
            return bool(val)
        if dtypes.is_int(scalar):
            if isinstance(val, float) and not math.isfinite(val):
                return 0
            ivalue = int(val)
            if scalar == dtypes.index:
                return ivalue
            bits = 8 * scalar.itemsize
            ivalue &= (1 << bits) - 1
            if not dtypes.is_unsigned(scalar) and ivalue >= 1 << (bits - 1):
                ivalue -= 1 << bits
            return ivalue
        raise TypeError(f"no constants of dtype {dtype}")

    @staticmethod
    def min(dtype: DType) -> ConstType:
        """Smallest value of `dtype` (-inf for floats)."""
        if dtypes.is_int(dtype):
            return 0 if dtypes.is_unsigned(dtype) else -(2 ** (8 * dtype.itemsize - 1))
        return False if dtype == dtypes.bool else -math.inf

    @staticmethod
    def max(dtype: DType) -> ConstType:
        """Largest value of `dtype` (inf for floats)."""
        if dtypes.is_int(dtype):
            return 2 ** (8 * dtype.itemsize) - 1 if dtypes.is_unsigned(dtype) else 2 ** (8 * dtype.itemsize - 1) - 1
        return True if dtype == dtypes.bool else math.inf

    @staticmethod
    def finfo(dtype: DType) -> tuple[int, int]:
        """(exponent bits, mantissa bits) of a float dtype."""
        if not dtypes.is_float(dtype):
            raise TypeError(f"{dtype} is not a float dtype")
        return {
            **{dtypes.fp8e4m3: (4, 3), dtypes.fp8e5m2: (5, 2), dtypes.float16: (5, 10)},
            **{dtypes.bfloat16: (8, 7), dtypes.float32: (8, 23), dtypes.float64: (11, 52)},
        }[dtype.scalar()]

    @staticmethod
    def fields() -> dict[str, DType]:
        """Every public dtype name (aliases included) mapped to its dtype."""
        return dict(DTYPES_DICT)

    @staticmethod
    def from_np(np_dtype: Any) -> DType:
        """The tinycore dtype of a numpy dtype.

        >>> import numpy as np
        >>> dtypes.from_np(np.dtype("int16"))
        dtypes.short
        """
        import numpy as np

        np_dtype = np.dtype(np_dtype)
        for dtype in ALL_SCALARS:
            if dtype.fmt is not None and np.dtype(dtype.fmt) == np_dtype:
                return dtype
        raise TypeError(f"numpy dtype {np_dtype} has no tinycore dtype")

    @staticmethod
    def to_np(dtype: DType) -> Any:
        """The numpy dtype of a tinycore dtype (bfloat16 and the fp8 types have none, so they map to float32 on the
        host side: `Tensor.numpy` returns their values as float32)."""
        found = _NP_DTYPES.get(dtype)
        if found is not None:
            return found
        import numpy as np

        scalar = dtype.scalar()
        if scalar == dtypes.bfloat16 or scalar in FP8S:
            found = np.dtype(np.float32)
        elif scalar.fmt is None:
            raise TypeError(f"{dtype} has no numpy equivalent")
        else:
            found = np.dtype(scalar.fmt)
        _NP_DTYPES[dtype] = found  # every numpy() asks: a dict lookup instead of the import and the tests
        return found


FP8S: Final = (dtypes.fp8e4m3, dtypes.fp8e5m2)
FLOATS: Final = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
UINTS: Final = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
SINTS: Final = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
INTS: Final = UINTS + SINTS
# every scalar a renderer renders; the fp8 types are not among them: kernels hold them as uint8 bits
# (`tinycore.codegen.decompositions.lower_fp8`)
ALL_SCALARS: Final = (dtypes.bool, *SINTS, *UINTS, *FLOATS)
# set versions for the predicates (hash lookups instead of comparing against every member)
_FLOAT_SET: Final = frozenset(FLOATS + FP8S)
_UINT_SET: Final = frozenset(UINTS)
_INT_SET: Final = frozenset((*INTS, dtypes.index))

DTYPES_DICT: Final[dict[str, DType]] = {
    name: value for name, value in vars(dtypes).items() if isinstance(value, DType) and not name.startswith("default")
}
INVERSE_DTYPES_DICT: Final[dict[str, str]] = {
    **{value.name: name for name, value in DTYPES_DICT.items() if name not in ("half", "double", "float32")},
    "void": "void",
    "index": "index",
}
INVERSE_DTYPES_DICT.update({dtypes.float32.name: "float", dtypes.float16.name: "half", dtypes.float64.name: "double"})
INVERSE_DTYPES_DICT.update({dtypes.int32.name: "int", dtypes.int8.name: "char", dtypes.int16.name: "short"})
INVERSE_DTYPES_DICT.update({dtypes.int64.name: "long", dtypes.uint8.name: "uchar", dtypes.uint16.name: "ushort"})
INVERSE_DTYPES_DICT.update({dtypes.uint32.name: "uint", dtypes.uint64.name: "ulong", dtypes.bfloat16.name: "bfloat16"})
INVERSE_DTYPES_DICT.update({dtypes.fp8e4m3.name: "fp8e4m3", dtypes.fp8e5m2.name: "fp8e5m2"})


def _set_default_float_from_env() -> None:
    from tinycore.helpers import getenv

    name = getenv("DEFAULT_FLOAT", "")
    if name:
        if name.lower() not in DTYPES_DICT or not dtypes.is_float(DTYPES_DICT[name.lower()]):
            raise ValueError(f"DEFAULT_FLOAT={name} is not a float dtype; use one of HALF, BFLOAT16, FLOAT, DOUBLE")
        dtypes.default_float = DTYPES_DICT[name.lower()]


_set_default_float_from_env()

# Promotion: an edge a -> b means a value of a is exactly representable in b. The result of mixing dtypes is the
# least upper bound in this lattice (as in tinygrad, and matching PyTorch's category rules for tensor/tensor ops).
PROMOTION_LATTICE: Final[dict[DType, tuple[DType, ...]]] = {
    dtypes.bool: (dtypes.int8, dtypes.uint8),
    dtypes.int8: (dtypes.int16,),
    dtypes.int16: (dtypes.int32,),
    dtypes.int32: (dtypes.int64,),
    dtypes.int64: (dtypes.float16, dtypes.bfloat16),
    dtypes.uint8: (dtypes.int16, dtypes.uint16),
    dtypes.uint16: (dtypes.int32, dtypes.uint32),
    dtypes.uint32: (dtypes.int64, dtypes.uint64),
    dtypes.uint64: (dtypes.float16, dtypes.bfloat16),
    dtypes.float16: (dtypes.float32,),
    dtypes.bfloat16: (dtypes.float32,),
    dtypes.float32: (dtypes.float64,),
    dtypes.float64: (),
    # PyTorch refuses to promote the fp8 types with anything else ("Promotion for Float8 Types is not supported")
    dtypes.fp8e4m3: (),
    dtypes.fp8e5m2: (),
}


def _upper_set(dtype: DType) -> frozenset[DType]:
    """`dtype` and every dtype it promotes to."""
    result = {dtype}
    for parent in PROMOTION_LATTICE.get(dtype, ()):
        result |= _upper_set(parent)
    return frozenset(result)


def least_upper_dtype(*dts: DType) -> DType:
    """The smallest dtype every argument promotes to (PyTorch-style promotion).

    >>> least_upper_dtype(dtypes.int32, dtypes.float16), least_upper_dtype(dtypes.uint8, dtypes.int64)
    (dtypes.half, dtypes.long)
    """
    common = frozenset.intersection(*(_upper_set(dtype.scalar()) for dtype in dts))
    if not common and any(dtype.scalar() in FP8S for dtype in dts):
        names = " and ".join(repr(dtype) for dtype in dts)
        raise TypeError(f"promotion for fp8 types is not supported (as in PyTorch): {names}; cast first (.float())")
    if not common:
        raise TypeError(f"no common dtype for {dts}")
    return min(common)


def least_upper_float(dtype: DType) -> DType:
    """`dtype` if it is a float, else the default float promoted with it (what `exp` or `/` of an int returns)."""
    return dtype if dtypes.is_float(dtype) else least_upper_dtype(dtype, dtypes.default_float)


def sum_acc_dtype(dtype: DType) -> DType:
    """The dtype `sum`/`prod`/`cumsum`/`cumprod` accumulate in and return, as PyTorch: bool and every integer dtype
    widen to int64 (uint64 stays uint64, where PyTorch's int64 would wrap values >= 2**63); float16/bfloat16
    accumulate in float32 (`sum` casts the result back); other floats accumulate in their own dtype.

    >>> sum_acc_dtype(dtypes.int32), sum_acc_dtype(dtypes.uint8), sum_acc_dtype(dtypes.half)
    (dtypes.long, dtypes.long, dtypes.float)
    """
    if dtype == dtypes.uint64:
        return dtype
    if dtypes.is_int(dtype) or dtype == dtypes.bool:
        return dtypes.int64
    return dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


def narrow_acc_dtype(dtype: DType) -> DType:
    """The accumulator of an internal sum whose result is cast back to `dtype` (matmul, conv, einsum, one-hot
    selections): bool and integers in at least int32 (unsigned: uint32), which keeps the low 32 bits an int64 sum
    would give (integer addition wraps), without 64-bit arithmetic; float16/bfloat16 in float32."""
    if dtypes.is_unsigned(dtype):
        return least_upper_dtype(dtype, dtypes.uint32)
    if dtypes.is_int(dtype) or dtype == dtypes.bool:
        return least_upper_dtype(dtype, dtypes.int32)
    return sum_acc_dtype(dtype)


def truncate_to_dtype(value: ConstType, dtype: DType) -> ConstType:
    """Round a Python constant the way storing it in `dtype` would (floats through `struct`, ints by wrapping)."""
    if dtypes.is_float(dtype) and dtype.fmt is not None and dtype != dtypes.float64:
        try:
            return struct.unpack(dtype.fmt, struct.pack(dtype.fmt, float(value)))[0]
        except OverflowError:
            return math.copysign(math.inf, value)
    if dtype in FP8S:
        return fp8_decode(fp8_encode(float(value), dtype), dtype)
    if dtype == dtypes.bfloat16:
        bits = struct.unpack("I", struct.pack("f", float(value)))[0]
        if not math.isnan(value):
            bits += 0x7FFF + ((bits >> 16) & 1)  # round to nearest even
        return struct.unpack("f", struct.pack("I", (bits >> 16) << 16 & 0xFFFFFFFF))[0]
    return dtypes.as_const(value, dtype)  # type: ignore[return-value]


# ----- the fp8 types on the host: the reference the kernels' bit manipulation (`decompositions.lower_fp8`) matches


def _fp8_format(dtype: DType) -> tuple[int, int, int, int]:
    """(mantissa bits, exponent bias, largest finite code, code an overflow gives) of an fp8 dtype: E4M3FN has no
    infinity and saturates to +-448 (PyTorch's ``.to(torch.float8_e4m3fn)``, infinities included); E5M2 overflows
    to infinity."""
    if dtype.scalar() == dtypes.fp8e4m3:
        return 3, 7, 0x7E, 0x7E
    if dtype.scalar() == dtypes.fp8e5m2:
        return 2, 15, 0x7B, 0x7C
    raise TypeError(f"{dtype} is not an fp8 dtype")


def _f32_bits(value: float) -> int:
    try:
        return struct.unpack("<I", struct.pack("<f", value))[0]
    except OverflowError:  # beyond float32: rounds to infinity
        return 0xFF800000 if value < 0 else 0x7F800000


def fp8_encode(value: float, dtype: DType) -> int:
    """The fp8 byte of `value` (first rounded to float32), as PyTorch's ``.to(torch.float8_e4m3fn / e5m2)``: round
    to nearest even, subnormals kept, a NaN keeps its sign (0x7F/0xFF), overflow per `_fp8_format`.

    >>> fp8_encode(1.0, dtypes.fp8e4m3), fp8_encode(1e9, dtypes.fp8e4m3), fp8_encode(1e9, dtypes.fp8e5m2)
    (56, 126, 124)
    """
    man, bias, _, overflow = _fp8_format(dtype)
    bits = _f32_bits(float(value))
    sign, mag = (bits >> 24) & 0x80, bits & 0x7FFFFFFF
    if mag > 0x7F800000:
        return sign | 0x7F
    if mag < (128 - bias) << 23:  # below the smallest normal: a multiple of the subnormal step (round() is RNE)
        return sign | round(math.ldexp(struct.unpack("<f", struct.pack("<I", mag))[0], bias + man - 1))
    shift = 23 - man
    code = (mag + (1 << (shift - 1)) - 1 + ((mag >> shift) & 1) - ((127 - bias) << 23)) >> shift
    return sign | min(code, overflow)


def fp8_decode_bits(code: int, dtype: DType) -> int:
    """The float32 bit pattern of the fp8 byte `code`, PyTorch's own (NaN payloads included)."""
    man, bias, _, _ = _fp8_format(dtype)
    sign, exp, frac = (code & 0x80) << 24, (code >> man) & ((0x80 >> man) - 1), code & ((1 << man) - 1)
    if dtype.scalar() == dtypes.fp8e4m3 and code & 0x7F == 0x7F:
        return sign | 0x7F800000 | frac << 20
    if dtype.scalar() == dtypes.fp8e5m2 and exp == 0x1F:
        return sign | 0x7F800000 | (0 if frac == 0 else 0x400000 | frac << 21)
    if exp == 0:
        return sign | _f32_bits(math.ldexp(frac, 1 - bias - man))
    return sign | (exp + 127 - bias) << 23 | frac << (23 - man)


def fp8_decode(code: int, dtype: DType) -> float:
    """The value of the fp8 byte `code` (every fp8 value is a float32).

    >>> fp8_decode(0x7E, dtypes.fp8e4m3), fp8_decode(0x7C, dtypes.fp8e5m2), fp8_decode(0x01, dtypes.fp8e4m3)
    (448.0, inf, 0.001953125)
    """
    return struct.unpack("<f", struct.pack("<I", fp8_decode_bits(code, dtype)))[0]


def fp8_encode_np(values: Any, dtype: DType) -> Any:
    """`fp8_encode` of a numpy array (rounded to float32 first): the uint8 codes, same shape."""
    import numpy as np

    man, bias, _, overflow = _fp8_format(dtype)
    f = np.asarray(values, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.int64)
    sign, mag = (bits >> 24) & 0x80, bits & 0x7FFFFFFF
    magic = (127 + 24 - man - bias) << 23
    with np.errstate(over="ignore", invalid="ignore"):
        sub = (np.abs(f) + np.array(magic, dtype=np.uint32).view(np.float32)).view(np.uint32).astype(np.int64) - magic
    shift = 23 - man
    norm = np.minimum((mag + (1 << (shift - 1)) - 1 + ((mag >> shift) & 1) - ((127 - bias) << 23)) >> shift, overflow)
    code = np.where(mag < (128 - bias) << 23, sub, norm)
    code = np.where(mag > 0x7F800000, 0x7F, code)
    return (sign | code).astype(np.uint8)


def fp8_decode_np(codes: Any, dtype: DType) -> Any:
    """`fp8_decode` of a numpy array of uint8 codes: float32 values, same shape (PyTorch's NaN bit patterns)."""
    import numpy as np

    table = np.array([fp8_decode_bits(c, dtype) for c in range(256)], dtype=np.uint32).view(np.float32)
    return table[np.asarray(codes, dtype=np.uint8)]
