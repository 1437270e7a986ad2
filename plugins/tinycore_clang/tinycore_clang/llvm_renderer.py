"""`LLVMRenderer`: a linearized UOp program to one LLVM IR module (text), for the CLANG device's ``llvm`` backend.

The IR is compiled in-process by `tinycore_clang.llvm_compiler.LLVMCompiler`; the result has exactly the ABI of the
C renderer's output (see `tinycore_clang.renderer`), so the runtime, thread pool and graph runner are shared:

- ``void @NAME(ptr noalias data0, ..., i32/i64 vars..., i32 core_id)`` (``readonly`` on buffers never stored to);
- ``void @NAME_tc(ptr bufs, ptr vals, i32 core_id)``: loads ``bufs[i]`` and ``vals[j]`` (``i64``, truncated for
  ``int`` variables) and calls ``NAME``;
- ``@NAME_tc_info``: the NUL-terminated string ``"tc1 bufs=N vars=iq cores=C"``, the same text as the C renderer's.

The first line is ``; tinycore-clang kernel NAME`` (`LLVM_KERNEL_MARKER`). The module has no target triple or data
layout (the compiler sets them) and uses only intrinsics that exist in LLVM 14. Pointers are opaque (``ptr``, LLVM
15 and newer) or typed (``float*``, with bitcasts where a pointer is read as another type) for LLVM 14, whose
optimizer can't take opaque pointers (`LLVMRenderer.typed_pointers`). Like clang's C output, the kernel is
``noinline`` (the trampoline would otherwise inline and compile it a second time), ``nounwind`` and
``"no-trapping-math"``; streaming stores (the C renderer's rule) are ``!nontemporal`` when the address is aligned, and
the kernel then ends with ``sfence`` (x86 only).

Semantics are the C renderer's, op by op (integers wrap, ``IDIV``/``MOD`` truncate and never trap, out-of-range
shifts give 0 or -1, ``MAX`` propagates NaN and keeps the first operand on ties, float to int through a guarded
64-bit conversion, ``float16`` arithmetic in float32 rounded back after each op, ``bfloat16`` stored as ``i16`` with
round-to-nearest-even conversions, ``MULACC`` as ``llvm.fma``) and no fast-math flag is ever set. Integer arithmetic
that only feeds addresses, loop bounds and gates (the C renderer's index-only values) carries ``nsw``, like the
signed ``int`` arithmetic clang emits for it; value arithmetic wraps.

Control flow: a ``RANGE`` is a loop with a ``phi`` counter (header test first, like a C ``for``), ``IF`` a branch,
gated loads and stores branch around the memory access (a gated-off address is never touched; a vector access
gated lane by lane is ``llvm.masked.load``/``llvm.masked.store``, which touch only the enabled lanes), register arrays
(``DEFINE_REG``) are ``alloca``s in the entry block (promoted to registers by the optimizer). A pure value used
outside the block that computed it (legal in C, where single-use expressions are evaluated where they are used) is
computed again where it is used.

>>> from tinycore.sdk import dtypes
>>> llvm_float_const(1.5, dtypes.float32), llvm_float_const(1.0, dtypes.float16)
('0x3FF8000000000000', '0xH3C00')
"""

from __future__ import annotations

import math
import platform
import struct
from dataclasses import dataclass

from tinycore.sdk import DType, GroupOp, Ops, PtrDType, UOp, dtypes, kernel_function_name
from tinycore_clang.kernel_params import KernelParams, kernel_params
from tinycore_clang.libllvm import find_library, uses_typed_pointers
from tinycore_clang.renderer import (
    ClangRenderer,
    ClangRenderError,
    _find_index,
    _KernelWriter,
    _next_pow2,
    index_only_values,
)

LLVM_KERNEL_MARKER = "; tinycore-clang kernel "

_SCALAR_TYPES: dict[DType, str] = {
    dtypes.bool: "i1",
    dtypes.int8: "i8",
    dtypes.uint8: "i8",
    dtypes.int16: "i16",
    dtypes.uint16: "i16",
    dtypes.int32: "i32",
    dtypes.uint32: "i32",
    dtypes.int64: "i64",
    dtypes.uint64: "i64",
    dtypes.index: "i64",
    dtypes.float16: "half",
    dtypes.bfloat16: "i16",
    dtypes.float32: "float",
    dtypes.float64: "double",
}
_SIGNED = frozenset({dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.index})
_HALF_LIKE = frozenset({dtypes.float16, dtypes.bfloat16})
_NATIVE_FLOATS = frozenset({dtypes.float32, dtypes.float64})
_NOT_SUPPORTED = {Ops.DEFINE_LOCAL, Ops.WMMA, Ops.UNROLL, Ops.CONTRACT, Ops.REDUCE, Ops.KERNEL}
_PURE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.GEP, Ops.VECTORIZE, Ops.CONST, Ops.VCONST}
_FLOAT_BINARY = {Ops.ADD: "fadd", Ops.SUB: "fsub", Ops.MUL: "fmul", Ops.FDIV: "fdiv"}
_INT_BINARY = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "mul", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor"}
_FLOAT_COMPARE = {Ops.CMPLT: "olt", Ops.CMPNE: "une", Ops.CMPEQ: "oeq"}
_TWO_63 = 2.0**63
_CUSTOM_REFUSED = "CUSTOM holds C code, which the llvm backend can't compile; use CLANG_BACKEND=c"


def _is_x86_host() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def llvm_type(dtype: DType) -> str:
    """The LLVM register type of a scalar or vector dtype (``i1`` for bool, ``i16`` for bfloat16, ``ptr``).

    >>> llvm_type(dtypes.float32.vec(8)), llvm_type(dtypes.bool), llvm_type(dtypes.bfloat16)
    ('<8 x float>', 'i1', 'i16')
    """
    if isinstance(dtype, PtrDType):
        return "ptr"
    scalar = _SCALAR_TYPES[dtype.scalar()]
    return f"<{dtype.count} x {scalar}>" if dtype.count > 1 else scalar


def _memory_type(dtype: DType) -> str:
    """The LLVM type of `dtype` in memory: bools are bytes."""
    scalar = "i8" if dtype.scalar() == dtypes.bool else _SCALAR_TYPES[dtype.scalar()]
    return f"<{dtype.count} x {scalar}>" if dtype.count > 1 else scalar


def _stride_type(dtype: DType) -> str:
    """The element type a pointer to `dtype` steps over (C vector typedefs round the lane count up to a power of 2)."""
    scalar = "i8" if dtype.scalar() == dtypes.bool else _SCALAR_TYPES[dtype.scalar()]
    return f"<{_next_pow2(dtype.count)} x {scalar}>" if dtype.count > 1 else scalar


def _float_bits_as_double_hex(value: float) -> str:
    return "0x" + struct.pack(">d", value).hex().upper()


def _float32_of(value: float) -> float:
    """`value` rounded to float32 (to nearest even; overflow gives infinity), as a Python float."""
    if math.isnan(value):
        return math.nan
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def _bfloat16_bits(value: float) -> int:
    """The bfloat16 bits of float32(`value`): round to nearest even, NaN kept quiet (the C renderer's tc_f2bf)."""
    bits = struct.unpack("<I", struct.pack("<f", _float32_of(value) if not math.isnan(value) else math.nan))[0]
    if math.isnan(value):
        bits = 0x7FC00000
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return ((bits >> 16) | 0x40) & 0xFFFF
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _float16_bits(value: float) -> int:
    """The float16 bits of float32(`value`) rounded to nearest even (what ``TC_F2H(literal)`` gives)."""
    f32 = _float32_of(value)
    if math.isnan(f32):
        return 0x7E00
    try:
        return struct.unpack("<H", struct.pack("<e", f32))[0]
    except OverflowError:
        return 0xFC00 if f32 < 0 else 0x7C00


def llvm_float_const(value: float, dtype: DType) -> str:
    """The exact LLVM constant of a float of scalar `dtype`: double-form hex for float and double (of the value
    rounded to the type, as C rounds a literal), ``0xH`` for half; bfloat16 (``i16``) gives its bits as an integer.
    NaN is the default quiet NaN."""
    scalar = dtype.scalar()
    if scalar == dtypes.float16:
        return f"0xH{_float16_bits(value):04X}"
    if scalar == dtypes.bfloat16:
        return str(_signed_bits(_bfloat16_bits(value), 16))
    if math.isnan(value):
        return "0x7FF8000000000000"
    return _float_bits_as_double_hex(value if scalar == dtypes.float64 else _float32_of(value))


def _signed_bits(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _int_const(value: int, dtype: DType) -> str:
    if dtype.scalar() == dtypes.bool:
        return "true" if value else "false"
    return str(_signed_bits(int(value), dtype.scalar().itemsize * 8))


def _lanes(dtype: DType, count: int) -> DType:
    """Scalar `dtype` with `count` lanes (itself for 1)."""
    return dtype.vec(count) if count > 1 else dtype


def _int_type(bits: int, count: int) -> str:
    """The LLVM type of `count` lanes of ``iN``: ``iN`` or ``<count x iN>`` (``i1``: masks of compares and selects).

    >>> _int_type(32, 1), _int_type(1, 4)
    ('i32', '<4 x i1>')
    """
    return f"<{count} x i{bits}>" if count > 1 else f"i{bits}"


_FLOAT_SUFFIXES = {dtypes.float32: "f32", dtypes.float64: "f64", dtypes.float16: "f16"}


def _masked_suffix(dtype: DType, typed_pointers: bool) -> str:
    """The overload suffix of ``llvm.masked.load``/``store`` for a vector of `dtype` in memory.

    >>> _masked_suffix(dtypes.float.vec(8), True), _masked_suffix(dtypes.bool.vec(4), False)
    ('v8f32.p0v8f32', 'v4i8.p0')
    """
    scalar = dtype.scalar()
    vector = f"v{dtype.count}{_FLOAT_SUFFIXES.get(scalar) or _memory_type(scalar)}"
    return f"{vector}.p0{vector}" if typed_pointers else f"{vector}.p0"


def _intrinsic_suffix(dtype: DType) -> str:
    scalar = _FLOAT_SUFFIXES[dtype.scalar()]
    return f"v{dtype.count}{scalar}" if dtype.count > 1 else scalar


@dataclass
class _Construct:
    """An open RANGE loop or IF block."""

    kind: str  # "range" or "if"
    ident: int
    exit_label: str
    latch_label: str = ""
    header_label: str = ""
    counter: str = ""
    next_counter: str = ""
    counter_type: str = ""


class LLVMRenderer(ClangRenderer):
    """LLVM IR renderer of the CLANG device (the ``llvm`` backend): the same declarations as `ClangRenderer` (so the
    optimizer makes identical decisions for both backends) and the same kernel ABI; `render` returns one LLVM IR
    module per kernel (see the module docstring).

    `typed_pointers`: write ``float*`` pointer types instead of ``ptr`` (LLVM 14's optimizer needs them); None asks
    `tinycore_clang.libllvm.uses_typed_pointers` about the library the llvm backend would load.

    >>> r = LLVMRenderer()
    >>> r.device, "MULACC" in r.native_ops
    ('CLANG', True)
    """

    masked_access = True  # llvm.masked.load / llvm.masked.store (AVX vmaskmov, AVX-512 masked moves)
    # 64-bit index math: with int32, LLVM's induction-variable widening (indvars) was a fifth of the optimizer's
    # time on a matmul kernel, to undo the sign extensions in front of every address
    index_bits = 64

    def __init__(self, arch: str | None = None, threads: int | None = None, typed_pointers: bool | None = None):
        super().__init__(arch=arch, threads=threads)
        if typed_pointers is None:
            typed_pointers = uses_typed_pointers(find_library().version)
        self.typed_pointers = typed_pointers

    def render(self, uops: list[UOp], name: str | None = None) -> str:
        """The LLVM IR module of one kernel. `name` is the function name; without it the name comes from the
        program's SINK, else ``kernel``. Raises `ClangRenderError` for programs it can't express (``CUSTOM``)."""
        fname = kernel_function_name(uops, name)
        return _IRWriter(uops, fname, _is_x86_host(), self.typed_pointers).write()


class _IRWriter:
    """Renders one program. `values[u]` is ``(operand text, scope)``: the LLVM value of `u` and the tuple of open
    constructs it was computed in (a use outside that scope recomputes a pure value)."""

    def __init__(self, uops: list[UOp], name: str, nontemporal: bool, typed_pointers: bool):
        self.uops, self.name, self.nontemporal, self.typed = uops, name, nontemporal, typed_pointers
        self.values: dict[UOp, tuple[str, tuple[int, ...]]] = {}
        self.pointees: dict[UOp, DType] = {}  # pointer uop -> the dtype it points at (its GEP stride)
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.declarations: dict[str, str] = {}
        self.counter = 0
        self.block = "entry"
        self.stack: list[_Construct] = []
        self.scope: tuple[int, ...] = ()
        self.index_only = index_only_values(uops)
        self.streaming = False

    # ----- output helpers -----
    def fresh(self, prefix: str = "t") -> str:
        """A new local value name."""
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def label(self, prefix: str) -> str:
        """A new block label (without the ``%``)."""
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, line: str) -> None:
        """Append one instruction to the current block."""
        self.lines.append("  " + line)

    def start_block(self, label: str) -> None:
        """Begin block `label` (the previous block must have ended with a branch)."""
        self.lines.append(f"{label}:")
        self.block = label

    def inst(self, text: str, prefix: str = "t") -> str:
        """Emit ``%new = text``; returns ``%new``."""
        name = self.fresh(prefix)
        self.emit(f"{name} = {text}")
        return name

    def intrinsic(self, name: str, ret: str, args: list[str]) -> str:
        """Declare intrinsic `name` (returning `ret`, taking `args` types) once; returns ``@name``."""
        if name not in self.declarations:
            self.declarations[name] = f"declare {ret} @{name}({', '.join(args)})"
        return f"@{name}"

    def fail(self, u: UOp, why: str) -> ClangRenderError:
        """A `ClangRenderError` naming `u` and why it can't be rendered."""
        return ClangRenderError(f"CLANG llvm renderer: can't render {u.op} ({u.dtype!r}, arg={u.arg!r}): {why}")

    def ptr(self, element: str) -> str:
        """The type of a pointer to `element`: ``ptr``, or ``element*`` with typed pointers."""
        return f"{element}*" if self.typed else "ptr"

    def repoint(self, pointer: str, have: str, want: str) -> str:
        """`pointer` (to `have`) as a pointer to `want`: a bitcast with typed pointers, else itself."""
        if not self.typed or have == want:
            return pointer
        return self.inst(f"bitcast {have}* {pointer} to {want}*", "pc")

    def define(self, u: UOp, text: str) -> None:
        """Record the value of `u` as computed in the current scope."""
        self.values[u] = (text, self.scope)

    def get(self, u: UOp) -> str:
        """The operand text of `u` here; a pure value computed in a block that doesn't enclose this one is
        computed again."""
        entry = self.values.get(u)
        if entry is None:
            raise self.fail(u, "used before it is defined")
        text, scope = entry
        if self.scope[: len(scope)] == scope:
            return text
        if u.op in _PURE:
            self.render_uop(u)
            return self.values[u][0]
        raise self.fail(u, "its value is used outside the loop or IF block that computes it")

    # ----- constants and vectors -----
    def scalar_const(self, value: object, dtype: DType) -> str:
        """The LLVM constant text of a scalar of `dtype`."""
        scalar = dtype.scalar()
        if scalar == dtypes.bool:
            return "true" if value else "false"
        if dtypes.is_float(scalar):
            return llvm_float_const(float(value), scalar)  # type: ignore[arg-type]
        return _int_const(int(value), scalar)  # type: ignore[call-overload]

    @staticmethod
    def vector_const(lanes: list[str], dtype: DType) -> str:
        """A constant vector of `dtype` (whose scalar is every lane's type) from lane constant texts."""
        scalar = _SCALAR_TYPES[dtype.scalar()]
        if all(lane in ("0", "false", "0x0000000000000000", "0xH0000") for lane in lanes):
            return "zeroinitializer"
        return "<" + ", ".join(f"{scalar} {lane}" for lane in lanes) + ">"

    def splat(self, text: str, dtype: DType, count: int) -> str:
        """`text` (a scalar of `dtype`) broadcast to `count` lanes."""
        scalar = _SCALAR_TYPES[dtype.scalar()]
        if not text.startswith("%"):
            return self.vector_const([text] * count, dtype.scalar().vec(count))
        vec = f"<{count} x {scalar}>"
        one = self.inst(f"insertelement {vec} poison, {scalar} {text}, i64 0")
        return self.inst(f"shufflevector {vec} {one}, {vec} poison, <{count} x i32> zeroinitializer")

    def operand(self, u: UOp, count: int) -> str:
        """The value of `u` with `count` lanes (a scalar is broadcast)."""
        text = self.get(u)
        if count > 1 and u.dtype.count == 1:
            return self.splat(text, u.dtype, count)
        return text

    def const_like(self, value: object, dtype: DType) -> str:
        """A constant of scalar `value` typed like `dtype` (splat for vectors)."""
        lane = self.scalar_const(value, dtype.scalar())
        return self.vector_const([lane] * dtype.count, dtype) if dtype.count > 1 else lane

    # ----- the module -----
    def write(self) -> str:
        """The whole module: marker, kernel, trampoline, info string, declarations and metadata."""
        kernel = self.scan()
        params, call_args, tramp, prologue = [], [], [], []
        for i, g in enumerate(kernel.buffers):
            self.buffer_parameter(i, g, i in kernel.written, params, call_args, tramp)
        for j, var in enumerate(kernel.variables):
            ptype = "i64" if var.wide else "i32"
            params.append(f"{ptype} %{var.name}")
            tramp.append(f"  %vp{j} = getelementptr inbounds i64, {self.ptr('i64')} %vals, i64 {j}")
            tramp.append(f"  %v{j} = load i64, {self.ptr('i64')} %vp{j}, align 8")
            if ptype == "i32":
                tramp.append(f"  %v{j}.i = trunc i64 %v{j} to i32")
            call_args.append(f"{ptype} %v{j}{'.i' if ptype == 'i32' else ''}")
            self.define(var.uop, self.widen_param(f"%{var.name}", ptype, var.uop.dtype, prologue))
        if kernel.core_id is not None:
            params.append("i32 %core_id")
            call_args.append("i32 %core_id")
            self.define(kernel.core_id, self.widen_param("%core_id", "i32", kernel.core_id.dtype, prologue))
        self.lines.extend(prologue)
        for u in self.uops:
            self.render_uop(u)
        while self.stack:  # tolerate a program whose last ENDs were dropped
            self.close(self.stack[-1])
        if self.streaming:  # streaming stores are weakly ordered: make them visible before the launch returns
            self.emit(f"call void {self.intrinsic('llvm.x86.sse.sfence', 'void', [])}()")
        self.emit("ret void")
        info = kernel.info
        bufs_type, vals_type = self.ptr(self.ptr("i8")), self.ptr("i64")
        out = [
            f"{LLVM_KERNEL_MARKER}{self.name}",
            "",
            f"define dso_local void @{self.name}({', '.join(params)}) #0 {{",
            "entry:",
            *("  " + line for line in self.allocas),
            *self.lines,
            "}",
            "",
            f"define dso_local void @{self.name}_tc({bufs_type} nocapture readonly %bufs, "
            f"{vals_type} nocapture readonly %vals, i32 %core_id) #1 {{",
            "entry:",
            *tramp,
            f"  call void @{self.name}({', '.join(call_args)})",
            "  ret void",
            "}",
            "",
            f'@{self.name}_tc_info = dso_local constant [{len(info) + 1} x i8] c"{info}\\00", align 1',
            "",
            *self.declarations.values(),
            "",
            'attributes #0 = { noinline nounwind nofree nosync "no-trapping-math"="true" }',
            "attributes #1 = { nounwind }",
        ]
        if self.streaming:
            out.append("!0 = !{i32 1}")
        return "\n".join(out) + "\n"

    def scan(self) -> KernelParams:
        """The kernel's parameters (`tinycore_clang.kernel_params`); refuses CUSTOM (C code) and GPU launch ids."""
        custom = next((u for u in self.uops if u.op is Ops.CUSTOM), None)
        if custom is not None:
            raise self.fail(custom, _CUSTOM_REFUSED)
        return kernel_params(self.uops, self.fail)

    def buffer_parameter(
        self, i: int, g: UOp | None, written: bool, params: list[str], call_args: list[str], tramp: list[str]
    ) -> None:
        """Parameter `i` (buffer `g`, or an unused slot) of the kernel and its load from ``bufs[i]`` in the
        trampoline: ``noalias nocapture``, plus ``readonly`` when never written."""
        slot, raw = f"%bp{i}", self.ptr("i8")
        tramp.append(f"  {slot} = getelementptr inbounds {raw}, {self.ptr(raw)} %bufs, i64 {i}")
        tramp.append(f"  %b{i} = load {raw}, {self.ptr(raw)} {slot}, align 8")
        if g is None:
            params.append(f"{raw} noalias nocapture readnone %unused{i}")
            call_args.append(f"{raw} %b{i}")
            return
        pointee = KernelParams.pointee(g)
        ptype = self.ptr(_stride_type(pointee))
        if self.typed:
            tramp.append(f"  %b{i}.t = bitcast i8* %b{i} to {ptype}")
        call_args.append(f"{ptype} %b{i}{'.t' if self.typed else ''}")
        params.append(f"{ptype} noalias nocapture{'' if written else ' readonly'} %data{i}")
        self.define(g, f"%data{i}")
        self.pointees[g] = pointee

    def widen_param(self, name: str, ptype: str, dtype: DType, prologue: list[str]) -> str:
        """The parameter `name` of type `ptype` converted to `dtype`'s type (in the entry block)."""
        want = llvm_type(dtype)
        if want == ptype:
            return name
        self.counter += 1
        conv = f"%p{self.counter}"
        wider = int(want[1:]) > int(ptype[1:])
        op = ("sext" if dtype.scalar() in _SIGNED or ptype == "i32" else "zext") if wider else "trunc"
        prologue.append(f"  {conv} = {op} {ptype} {name} to {want}")
        return conv

    # ----- one uop -----
    def render_uop(self, u: UOp) -> None:
        """Emit the IR of one uop (or record the value it stands for)."""
        op = u.op
        if op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.SINK, Ops.GROUP, Ops.BARRIER):
            return
        if op in _NOT_SUPPORTED:
            raise self.fail(u, "not available on the CPU (has_local/has_shared are False, no tensor cores)")
        if op in (Ops.NOOP, Ops.AFTER):
            if u.src:
                self.values[u] = self.values[u.src[0]]
                if u.src[0] in self.pointees:
                    self.pointees[u] = self.pointees[u.src[0]]
            return
        if op is Ops.CONST:
            self.define(u, self.const_like(u.arg, u.dtype))
        elif op is Ops.VCONST:
            scalar = u.dtype.scalar()
            first = repr(u.arg[0])  # repr, not ==: 0.0 and -0.0 are different constants
            if all(repr(v) == first for v in u.arg):  # a splat (an accumulator's zeros): one constant text
                lanes = [self.scalar_const(u.arg[0], scalar)] * len(u.arg)
            else:
                lanes = [self.scalar_const(v, scalar) for v in u.arg]
            self.define(u, self.vector_const(lanes, u.dtype))
        elif op is Ops.DEFINE_REG:
            if not isinstance(u.dtype, PtrDType) or u.dtype.size < 0:
                raise self.fail(u, "a register array needs a pointer dtype with a known size")
            name = self.fresh("acc")
            array = f"[{max(1, u.dtype.size)} x {_stride_type(u.dtype.base)}]"
            self.allocas.append(f"{name} = alloca {array}, align 64")
            if self.typed:  # the array's first element
                self.allocas.append(f"{name}.0 = getelementptr inbounds {array}, {array}* {name}, i64 0, i64 0")
                name += ".0"
            self.values[u] = (name, ())
            self.pointees[u] = u.dtype.base
        elif op is Ops.RANGE:
            self.open_range(u)
        elif op is Ops.END:
            closes = sum(1 for s in u.src if s.op is Ops.RANGE) or 1
            for _ in range(min(closes, len(self.stack))):
                self.close(self.stack[-1])
        elif op is Ops.IF:
            then, end = self.label("if"), self.label("endif")
            self.emit(f"br i1 {self.get(u.src[0])}, label %{then}, label %{end}")
            self.push(_Construct("if", 0, end))
            self.start_block(then)
        elif op is Ops.ENDIF:
            if self.stack:
                self.close(self.stack[-1])
        elif op is Ops.INDEX:
            self.render_index(u)
        elif op is Ops.LOAD:
            self.render_load(u)
        elif op is Ops.STORE:
            self.render_store(u)
        elif op is Ops.CAST and isinstance(u.dtype, PtrDType):
            have = self.pointees.get(u.src[0])
            if have is None:
                raise self.fail(u, "casts something that is not a known pointer")
            self.pointees[u] = u.dtype.base
            self.define(u, self.repoint(self.get(u.src[0]), _stride_type(have), _stride_type(u.dtype.base)))
        elif op is Ops.CUSTOM:
            raise self.fail(u, _CUSTOM_REFUSED)
        elif op is Ops.VECTORIZE:
            self.define(u, self.vectorize(u))
        elif op is Ops.GEP:
            self.define(u, self.gep(u))
        elif op is Ops.CAST:
            src = u.src[0]
            self.define(u, self.cast(self.operand(src, u.dtype.count), src.dtype.scalar(), u.dtype))
        elif op is Ops.BITCAST:
            self.define(u, self.bitcast(u))
        elif op in GroupOp.ALU:
            self.define(u, self.alu(u))
        else:
            raise self.fail(u, "unknown op for the llvm renderer")

    # ----- control flow -----
    def push(self, construct: _Construct) -> None:
        """Open `construct`: values computed from now on belong to it."""
        self.counter += 1
        construct.ident = self.counter
        self.stack.append(construct)
        self.scope = self.scope + (construct.ident,)

    def open_range(self, u: UOp) -> None:
        """``for (r = 0; r < end; r++)``: a header with the counter's phi and the test, then the body."""
        ctype = llvm_type(u.dtype)
        end = self.get(u.src[0])
        if u.src[0].dtype.scalar() != u.dtype.scalar():  # C converts the bound to the counter's type
            end = self.cast(end, u.src[0].dtype.scalar(), u.dtype)
        header, body, latch, exit_ = self.label("loop"), self.label("body"), self.label("latch"), self.label("exit")
        counter, following = self.fresh("ridx"), self.fresh("ridx.next")
        self.emit(f"br label %{header}")
        before = self.block
        self.start_block(header)
        self.emit(f"{counter} = phi {ctype} [ 0, %{before} ], [ {following}, %{latch} ]")
        signed = "slt" if u.dtype.scalar() in _SIGNED else "ult"
        test = self.inst(f"icmp {signed} {ctype} {counter}, {end}")
        self.emit(f"br i1 {test}, label %{body}, label %{exit_}")
        self.push(_Construct("range", 0, exit_, latch, header, counter, following, ctype))
        self.start_block(body)
        self.define(u, counter)

    def close(self, construct: _Construct) -> None:
        """Close the innermost open construct (`construct`)."""
        self.stack.pop()
        self.scope = self.scope[:-1]
        if construct.kind == "range":
            self.emit(f"br label %{construct.latch_label}")
            self.start_block(construct.latch_label)
            nsw = "nsw " if construct.counter_type in ("i32", "i64") else ""
            self.emit(f"{construct.next_counter} = add {nsw}{construct.counter_type} {construct.counter}, 1")
            self.emit(f"br label %{construct.header_label}")
        else:
            self.emit(f"br label %{construct.exit_label}")
        self.start_block(construct.exit_label)

    # ----- memory -----
    def render_index(self, u: UOp) -> None:
        """A pointer: the buffer plus the index (in units of the buffer's element type); a vector of indices keeps
        the buffer (gathers and scatters address lane by lane)."""
        buf, idx = u.src[0], u.src[1]
        pointee = self.pointees.get(buf)
        if pointee is None:
            raise self.fail(u, "indexes something that is not a known pointer")
        self.pointees[u] = pointee
        base = self.get(buf)
        if idx.dtype.count > 1 or (idx.op is Ops.CONST and idx.arg == 0):
            self.define(u, base)
            return
        offset = idx.src[1] if idx.op is Ops.ADD else None
        if offset is not None and offset.op is Ops.CONST and offset.arg > 0 and idx.src[0].vmin >= 0:
            # ``x + c`` as the pointer to x, then c elements on: the code generator folds a constant pointer offset
            # into the address (x86 displacement), where it would otherwise compute each sum (often as an OR)
            start = self.address(base, pointee, self.get(idx.src[0]), idx.dtype)
            self.define(u, self.address(start, pointee, str(offset.arg), idx.dtype))
            return
        self.define(u, self.address(base, pointee, self.get(idx), idx.dtype))

    def address(self, base: str, pointee: DType, index: str, index_dtype: DType) -> str:
        """``base + index`` elements of `pointee` (the index sign- or zero-extended to 64 bits like C)."""
        itype = llvm_type(index_dtype)
        if not index.startswith("%"):  # a constant: sign- or zero-extend it here
            value = int(index == "true") if index in ("true", "false") else int(index)
            wide = str(value if index_dtype.scalar() in _SIGNED else value & ((1 << int(itype[1:])) - 1))
        elif itype == "i64":
            wide = index
        else:
            ext = "sext" if index_dtype.scalar() in _SIGNED else "zext"
            wide = self.inst(f"{ext} {itype} {index} to i64")
        element = _stride_type(pointee)
        return self.inst(f"getelementptr inbounds {element}, {self.ptr(element)} {base}, i64 {wide}", "p")

    def render_load(self, u: UOp) -> None:
        """A LOAD: plain, gated (branching around the access), vector, or a gather lane by lane."""
        index = _find_index(u.src[0])
        gate = index.src[2] if index is not None and len(index.src) > 2 else None
        if index is not None and index.src[1].dtype.count > 1:
            self.define(u, self.gather(u, index, gate))
            return
        if gate is not None and gate.dtype.count > 1:
            self.define(u, self.masked_load(u, gate))
            return
        ptr = self.get(u.src[0])
        alt = None
        if gate is not None:
            alt = self.operand(u.src[1], u.dtype.count) if len(u.src) > 1 else self.const_like(0, u.dtype)
        pointee = self.pointees.get(u.src[0])
        if pointee is None:
            raise self.fail(u, "loads through something that is not a known pointer")
        gate_text = self.get(gate) if gate is not None else None
        self.define(u, self.guarded(lambda: self.load_value(ptr, pointee, u.dtype), gate_text, alt, llvm_type(u.dtype)))

    def masked_load(self, u: UOp, gate: UOp) -> str:
        """A vector LOAD gated lane by lane (``llvm.masked.load``: masked-off lanes are not read and take the alt
        value's lane)."""
        name, mtype, ptr, tail = self.masked_access(u, "load", u.src[0], u.dtype, gate)
        alt = self.operand(u.src[1], u.dtype.count) if len(u.src) > 1 else self.const_like(0, u.dtype)
        raw = self.inst(
            f"call {mtype} {name}({self.ptr(mtype)} {ptr}, {tail}, {mtype} {self.store_value(alt, u.dtype)})", "ld"
        )
        if u.dtype.scalar() == dtypes.bool:
            return self.inst(f"trunc {mtype} {raw} to {llvm_type(u.dtype)}")
        return raw

    def masked_store(self, u: UOp, gate: UOp) -> None:
        """A vector STORE gated lane by lane (``llvm.masked.store``: masked-off lanes are not written)."""
        value = u.src[1]
        name, mtype, ptr, tail = self.masked_access(u, "store", u.src[0], value.dtype, gate)
        stored = self.store_value(self.get(value), value.dtype)
        self.emit(f"call void {name}({mtype} {stored}, {self.ptr(mtype)} {ptr}, {tail})")

    def masked_access(self, u: UOp, kind: str, target: UOp, dtype: DType, gate: UOp) -> tuple[str, str, str, str]:
        """What ``llvm.masked.<kind>`` of a `dtype` vector through `target` needs: the declared intrinsic, the
        memory type, the pointer, and the ``align, mask`` arguments."""
        pointee = self.pointees.get(target)
        if pointee is None:
            raise self.fail(u, f"{kind}s through something that is not a known pointer")
        if gate.dtype.count != dtype.count:
            raise self.fail(u, f"a {gate.dtype.count}-lane gate on a {dtype.count}-lane {kind}")
        mtype, mask_type, pointer = _memory_type(dtype), llvm_type(gate.dtype), self.ptr(_memory_type(dtype))
        args = [pointer, "i32", mask_type, mtype] if kind == "load" else [mtype, pointer, "i32", mask_type]
        name = self.intrinsic(
            f"llvm.masked.{kind}.{_masked_suffix(dtype, self.typed)}", mtype if kind == "load" else "void", args
        )
        ptr = self.repoint(self.get(target), _stride_type(pointee), mtype)
        return name, mtype, ptr, f"i32 {max(1, dtype.scalar().itemsize)}, {mask_type} {self.get(gate)}"

    def load_value(self, ptr: str, pointee: DType, dtype: DType) -> str:
        """Load a `dtype` from `ptr` (which points at `pointee`s; element alignment; bool bytes become i1)."""
        mtype = _memory_type(dtype)
        align = max(1, dtype.scalar().itemsize)
        ptr = self.repoint(ptr, _stride_type(pointee), mtype)
        raw = self.inst(f"load {mtype}, {self.ptr(mtype)} {ptr}, align {align}", "ld")
        if dtype.scalar() == dtypes.bool:
            return self.inst(f"trunc {mtype} {raw} to {llvm_type(dtype)}")
        return raw

    def guarded(self, make, gate: str | None, alt: str | None, vtype: str) -> str:
        """The value `make()` emits, computed only when `gate` (else `alt`): a branch and a phi."""
        if gate is None:
            return make()
        if gate == "true":
            return make()
        if gate == "false":
            return alt  # type: ignore[return-value]
        then, join = self.label("ld"), self.label("ldjoin")
        before = self.block
        self.emit(f"br i1 {gate}, label %{then}, label %{join}")
        self.start_block(then)
        value = make()
        after = self.block
        self.emit(f"br label %{join}")
        self.start_block(join)
        return self.inst(f"phi {vtype} [ {value}, %{after} ], [ {alt}, %{before} ]")

    def gather(self, u: UOp, index: UOp, gate: UOp | None) -> str:
        """A vector of loads through a vector of indices (each lane gated by its gate lane)."""
        count = u.dtype.count
        idx = index.src[1]
        base = self.get(index.src[0])
        pointee = self.pointees[index.src[0]]
        idx_text = self.get(idx)
        gate_text = self.get(gate) if gate is not None else None
        alt = self.operand(u.src[1], count) if len(u.src) > 1 and gate is not None else None
        scalar = u.dtype.scalar()
        stype = _SCALAR_TYPES[scalar]
        vec = self.const_like(0, u.dtype)
        vtype = llvm_type(u.dtype)
        for lane in range(count):
            lane_idx = self.inst(f"extractelement {llvm_type(idx.dtype)} {idx_text}, i32 {lane}")
            ptr = self.address(base, pointee, lane_idx, idx.dtype.scalar())
            lane_gate = self.lane_of(gate_text, gate.dtype, lane) if gate is not None and gate_text else None
            lane_alt = self.lane_of(alt, u.dtype, lane) if alt is not None else self.scalar_const(0, scalar)
            value = self.guarded(lambda p=ptr: self.load_value(p, pointee, scalar), lane_gate, lane_alt, stype)
            vec = self.inst(f"insertelement {vtype} {vec}, {stype} {value}, i32 {lane}")
        return vec

    def lane_of(self, text: str, dtype: DType, lane: int) -> str:
        """Lane `lane` of a vector value (a scalar is its own every lane)."""
        if dtype.count == 1:
            return text
        return self.inst(f"extractelement {llvm_type(dtype)} {text}, i32 {lane}")

    def render_store(self, u: UOp) -> None:
        """A STORE: plain, vector, streaming (non-temporal when aligned), scatter, or gated by the INDEX gate."""
        target, value = u.src[0], u.src[1]
        index = _find_index(target)
        gate = index.src[2] if index is not None and len(index.src) > 2 else None
        if index is not None and index.src[1].dtype.count > 1:
            self.scatter(index, value, gate)
            return
        ptr, val = self.get(target), self.get(value)
        pointee = self.pointees.get(target)
        if pointee is None:
            raise self.fail(u, "stores through something that is not a known pointer")
        gate_text = self.get(gate) if gate is not None else None
        if gate_text == "false":
            return
        if gate is not None and gate.dtype.count > 1:
            self.masked_store(u, gate)
            return
        streams = gate is None and self.nontemporal and value.dtype.count > 1 and _KernelWriter._streams(target, value)
        join = None
        if gate_text is not None and gate_text != "true":
            then, join = self.label("st"), self.label("stjoin")
            self.emit(f"br i1 {gate_text}, label %{then}, label %{join}")
            self.start_block(then)
        if streams:
            self.streaming = True
            nbytes = value.dtype.count * value.dtype.scalar().itemsize
            stored = self.store_value(val, value.dtype)
            mtype = _memory_type(value.dtype)
            ptr = self.repoint(ptr, _stride_type(pointee), mtype)
            address = self.inst(f"ptrtoint {self.ptr(mtype)} {ptr} to i64")
            low = self.inst(f"and i64 {address}, {nbytes - 1}")
            aligned = self.inst(f"icmp eq i64 {low}, 0")
            fast, slow, done = self.label("nt"), self.label("plain"), self.label("ntjoin")
            self.emit(f"br i1 {aligned}, label %{fast}, label %{slow}")
            self.start_block(fast)
            self.emit(f"store {mtype} {stored}, {self.ptr(mtype)} {ptr}, align {nbytes}, !nontemporal !0")
            self.emit(f"br label %{done}")
            self.start_block(slow)
            self.emit(f"store {mtype} {stored}, {self.ptr(mtype)} {ptr}, align {max(1, value.dtype.scalar().itemsize)}")
            self.emit(f"br label %{done}")
            self.start_block(done)
        else:
            self.store(ptr, pointee, val, value.dtype)
        if join is not None:
            self.emit(f"br label %{join}")
            self.start_block(join)

    def store_value(self, val: str, dtype: DType) -> str:
        """`val` in its memory representation (bools widened to bytes)."""
        if dtype.scalar() == dtypes.bool:
            return self.inst(f"zext {llvm_type(dtype)} {val} to {_memory_type(dtype)}")
        return val

    def store(self, ptr: str, pointee: DType, val: str, dtype: DType) -> None:
        """Store `val` of `dtype` at `ptr` (which points at `pointee`s) with element alignment."""
        stored = self.store_value(val, dtype)
        mtype = _memory_type(dtype)
        ptr = self.repoint(ptr, _stride_type(pointee), mtype)
        self.emit(f"store {mtype} {stored}, {self.ptr(mtype)} {ptr}, align {max(1, dtype.scalar().itemsize)}")

    def scatter(self, index: UOp, value: UOp, gate: UOp | None) -> None:
        """Stores through a vector of indices, lane by lane (each gated by its gate lane)."""
        idx = index.src[1]
        base, pointee = self.get(index.src[0]), self.pointees[index.src[0]]
        idx_text, val_text = self.get(idx), self.get(value)
        gate_text = self.get(gate) if gate is not None else None
        scalar = value.dtype.scalar()
        for lane in range(idx.dtype.count):
            lane_idx = self.inst(f"extractelement {llvm_type(idx.dtype)} {idx_text}, i32 {lane}")
            ptr = self.address(base, pointee, lane_idx, idx.dtype.scalar())
            lane_val = self.lane_of(val_text, value.dtype, lane)
            join = None
            if gate is not None and gate_text is not None:
                lane_gate = self.lane_of(gate_text, gate.dtype, lane)
                then, join = self.label("sc"), self.label("scjoin")
                self.emit(f"br i1 {lane_gate}, label %{then}, label %{join}")
                self.start_block(then)
            self.store(ptr, pointee, lane_val, scalar)
            if join is not None:
                self.emit(f"br label %{join}")
                self.start_block(join)

    # ----- vectors -----
    def vectorize(self, u: UOp) -> str:
        """Scalars into a vector: a splat, a constant, a small vector of the distinct lanes shuffled out, or a chain
        of insertelements."""
        count = u.dtype.count
        texts = [self.get(s) for s in u.src]
        scalar_dtype = u.dtype.scalar()
        stype = _SCALAR_TYPES[scalar_dtype]
        vtype = llvm_type(u.dtype)
        if len(set(texts)) == 1:
            return self.splat(texts[0], scalar_dtype, count)
        if not any(t.startswith("%") for t in texts):
            return self.vector_const(texts, u.dtype)
        distinct = list(dict.fromkeys(texts))
        if 2 * len(distinct) <= count:
            small_type = f"<{len(distinct)} x {stype}>"
            small = "poison"
            for lane, text in enumerate(distinct):
                small = self.inst(f"insertelement {small_type} {small}, {stype} {text}, i32 {lane}")
            mask = ", ".join(f"i32 {distinct.index(t)}" for t in texts)
            return self.inst(f"shufflevector {small_type} {small}, {small_type} poison, <{count} x i32> <{mask}>")
        lanes = [t if not t.startswith("%") else "poison" for t in texts]
        vec = "<" + ", ".join(f"{stype} {lane}" for lane in lanes) + ">"
        for lane, text in enumerate(texts):
            if text.startswith("%"):
                vec = self.inst(f"insertelement {vtype} {vec}, {stype} {text}, i32 {lane}")
        return vec

    def gep(self, u: UOp) -> str:
        """Lanes of a vector: one lane (extractelement), several (shufflevector), or a scalar broadcast."""
        src = u.src[0]
        text = self.get(src)
        lanes = list(u.arg) if isinstance(u.arg, tuple) else [u.arg]
        if src.dtype.count == 1:
            return self.splat(text, src.dtype, len(lanes)) if len(lanes) > 1 else text
        stype = llvm_type(src.dtype)
        if len(lanes) == 1:
            return self.inst(f"extractelement {stype} {text}, i32 {lanes[0]}")
        if lanes == list(range(src.dtype.count)):
            return text
        mask = ", ".join(f"i32 {lane}" for lane in lanes)
        return self.inst(f"shufflevector {stype} {text}, {stype} poison, <{len(lanes)} x i32> <{mask}>")

    # ----- arithmetic -----
    def alu(self, u: UOp) -> str:
        """An ALU op on whole vectors (scalar operands broadcast); 16-bit floats computed in float32."""
        op, count = u.op, u.dtype.count
        dtype = u.dtype.scalar()
        if op in GroupOp.Comparison:
            operand_dtype = u.src[0].dtype.scalar()
            a, b = (self.operand(s, count) for s in u.src)
            return self.compare(op, a, b, operand_dtype, count)
        if op is Ops.WHERE:
            cond = self.get(u.src[0])
            cond_count = u.src[0].dtype.count
            a, b = (self.operand(s, count) for s in u.src[1:])
            if cond_count != count and cond_count > 1:
                raise self.fail(u, "a vector gate of another width")
            ctype = llvm_type(u.src[0].dtype)
            vtype = llvm_type(u.dtype)
            return self.inst(f"select {ctype} {cond}, {vtype} {a}, {vtype} {b}")
        args = [self.operand(s, count) for s in u.src]
        if dtype in _HALF_LIKE:
            floats = [self.to_float(a, s.dtype.scalar(), count) for a, s in zip(args, u.src)]
            result = self.float_alu(u, op, floats, _lanes(dtypes.float32, count))
            return self.from_float(result, dtype, count)
        if dtype in _NATIVE_FLOATS:
            return self.float_alu(u, op, args, u.dtype)
        if dtype == dtypes.bool:
            return self.bool_alu(u, op, args)
        return self.int_alu(u, op, args, u in self.index_only)

    def compare(self, op: Ops, a: str, b: str, operand_dtype: DType, count: int) -> str:
        """CMPLT/CMPNE/CMPEQ of two operands of `operand_dtype` (count lanes) to i1 lanes."""
        if operand_dtype in _HALF_LIKE:
            a, b = self.to_float(a, operand_dtype, count), self.to_float(b, operand_dtype, count)
            operand_dtype = dtypes.float32
        otype = llvm_type(_lanes(operand_dtype, count))
        if operand_dtype in _NATIVE_FLOATS:
            return self.inst(f"fcmp {_FLOAT_COMPARE[op]} {otype} {a}, {b}")
        predicate = {Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}.get(op) or ("slt" if operand_dtype in _SIGNED else "ult")
        return self.inst(f"icmp {predicate} {otype} {a}, {b}")

    def float_alu(self, u: UOp, op: Ops, args: list[str], dtype: DType) -> str:
        """One op on float32/float64 values (scalars or vectors of `dtype`)."""
        ftype = llvm_type(dtype)
        suffix = _intrinsic_suffix(dtype)
        a = args[0]
        if op in _FLOAT_BINARY:
            return self.inst(f"{_FLOAT_BINARY[op]} {ftype} {a}, {args[1]}")
        if op is Ops.NEG:
            return self.inst(f"fneg {ftype} {a}")
        if op is Ops.RECIP:
            return self.inst(f"fdiv {ftype} {self.const_like(1.0, dtype)}, {a}")
        if op in (Ops.SQRT, Ops.TRUNC):
            name = self.intrinsic(f"llvm.{op.name.lower()}.{suffix}", ftype, [ftype])
            return self.inst(f"call {ftype} {name}({ftype} {a})")
        if op is Ops.MULACC:
            name = self.intrinsic(f"llvm.fma.{suffix}", ftype, [ftype] * 3)
            return self.inst(f"call {ftype} {name}({ftype} {a}, {ftype} {args[1]}, {ftype} {args[2]})")
        if op is Ops.MAX:  # (b > a || b != b) ? b : a
            b = args[1]
            greater = self.inst(f"fcmp ogt {ftype} {b}, {a}")
            nan = self.inst(f"fcmp uno {ftype} {b}, {b}")
            ctype = _int_type(1, dtype.count)
            take = self.inst(f"or {ctype} {greater}, {nan}")
            return self.inst(f"select {ctype} {take}, {ftype} {b}, {ftype} {a}")
        if op is Ops.IDIV:
            quotient = self.inst(f"fdiv {ftype} {a}, {args[1]}")
            name = self.intrinsic(f"llvm.trunc.{suffix}", ftype, [ftype])
            return self.inst(f"call {ftype} {name}({ftype} {quotient})")
        if op is Ops.MOD:
            return self.inst(f"frem {ftype} {a}, {args[1]}")
        raise self.fail(u, f"{op} is not defined on {dtype.scalar()}")

    def bool_alu(self, u: UOp, op: Ops, args: list[str]) -> str:
        """One op on i1 values (C's _Bool promoted to int and back)."""
        btype = llvm_type(u.dtype)
        table = {Ops.ADD: "or", Ops.OR: "or", Ops.MAX: "or", Ops.MUL: "and", Ops.AND: "and", Ops.XOR: "xor"}
        if op in table:
            return self.inst(f"{table[op]} {btype} {args[0]}, {args[1]}")
        if op is Ops.NEG:
            return self.inst(f"xor {btype} {args[0]}, {self.const_like(True, u.dtype)}")
        raise self.fail(u, f"{op} is not defined on bool")

    def int_alu(self, u: UOp, op: Ops, args: list[str], index_only: bool) -> str:
        """One integer op with the C renderer's semantics (wrap-around, safe division, bounded shifts)."""
        dtype = u.dtype
        scalar = dtype.scalar()
        itype = llvm_type(dtype)
        signed = scalar in _SIGNED
        bits = scalar.itemsize * 8
        flags = "nsw " if index_only and signed and bits >= 32 else ""
        a = args[0]
        b = args[1] if len(args) > 1 else ""
        if op in (Ops.AND, Ops.OR, Ops.XOR):
            return self.inst(f"{_INT_BINARY[op]} {itype} {a}, {b}")
        if op in (Ops.ADD, Ops.SUB, Ops.MUL):
            return self.inst(f"{_INT_BINARY[op]} {flags}{itype} {a}, {b}")
        if op is Ops.NEG:
            return self.inst(f"sub {flags}{itype} {self.const_like(0, dtype)}, {a}")
        if op is Ops.MULACC:
            product = self.inst(f"mul {flags}{itype} {a}, {b}")
            return self.inst(f"add {flags}{itype} {product}, {args[2]}")
        if op is Ops.MAX:
            greater = self.inst(f"icmp {'sgt' if signed else 'ugt'} {itype} {b}, {a}")
            return self.inst(f"select {_int_type(1, dtype.count)} {greater}, {itype} {b}, {itype} {a}")
        if op in (Ops.IDIV, Ops.MOD):
            return self.int_division(u, op, a, b, signed)
        if op in (Ops.SHL, Ops.SHR):
            return self.shift(u, op, a, self.shift_amount(u, b), signed, bits)
        if op is Ops.TRUNC:
            return a
        raise self.fail(u, f"{op} is not defined on {scalar}")

    @staticmethod
    def const_lanes(text: str, count: int) -> list[int] | None:
        """The integer lanes of a constant operand text (None when not a constant)."""
        if text.startswith("%") or text == "poison":
            return None
        if text == "zeroinitializer":
            return [0] * count
        if text.startswith("<"):
            try:
                return [int(part.split()[-1]) for part in text.strip("<>").split(",")]
            except ValueError:
                return None
        try:
            return [int(text)]
        except ValueError:
            return None

    def int_division(self, u: UOp, op: Ops, a: str, b: str, signed: bool) -> str:
        """IDIV/MOD truncating toward zero; x/0 and x%0 give 0, MIN/-1 wraps, x%-1 is 0 (never a trap)."""
        dtype = u.dtype
        itype = llvm_type(dtype)
        instr = ("sdiv" if signed else "udiv") if op is Ops.IDIV else ("srem" if signed else "urem")
        lanes = self.const_lanes(b, dtype.count)
        if lanes is not None and all(v != 0 and not (signed and v == -1) for v in lanes):
            return self.inst(f"{instr} {itype} {a}, {b}")
        mask = _int_type(1, dtype.count)
        zero, one = self.const_like(0, dtype), self.const_like(1, dtype)
        is_zero = self.inst(f"icmp eq {itype} {b}, {zero}")
        unsafe = is_zero
        is_minus_one = None
        if signed:
            is_minus_one = self.inst(f"icmp eq {itype} {b}, {self.const_like(-1, dtype)}")
            unsafe = self.inst(f"or {mask} {is_zero}, {is_minus_one}")
        divisor = self.inst(f"select {mask} {unsafe}, {itype} {one}, {itype} {b}")
        result = self.inst(f"{instr} {itype} {a}, {divisor}")  # x % 1 == 0 covers both special cases of MOD
        if op is Ops.MOD:
            return result
        if is_minus_one is not None:
            negated = self.inst(f"sub {itype} {zero}, {a}")
            result = self.inst(f"select {mask} {is_minus_one}, {itype} {negated}, {itype} {result}")
        return self.inst(f"select {mask} {is_zero}, {itype} {zero}, {itype} {result}")

    def shift_amount(self, u: UOp, b: str) -> str:
        """The shift amount converted to the shifted value's width (like C's conversion to the unsigned type)."""
        amount_dtype, value_dtype = u.src[1].dtype, u.dtype
        have, want = _SCALAR_TYPES[amount_dtype.scalar()], _SCALAR_TYPES[value_dtype.scalar()]
        if have == want:
            return b
        if amount_dtype.count != value_dtype.count:
            raise self.fail(u, "shift amount and value of different widths")
        src_type = llvm_type(amount_dtype)
        dst_type = llvm_type(value_dtype)
        if int(have[1:]) > int(want[1:]):
            return self.inst(f"trunc {src_type} {b} to {dst_type}")
        ext = "sext" if amount_dtype.scalar() in _SIGNED else "zext"
        return self.inst(f"{ext} {src_type} {b} to {dst_type}")

    def shift(self, u: UOp, op: Ops, a: str, b: str, signed: bool, bits: int) -> str:
        """SHL/SHR: amounts outside ``0 .. bits-1`` give 0 (SHR of a negative signed value: -1)."""
        dtype = u.dtype
        itype = llvm_type(dtype)
        instr = "shl" if op is Ops.SHL else ("ashr" if signed else "lshr")
        lanes = self.const_lanes(b, dtype.count)
        if lanes is not None and all(0 <= v < bits for v in lanes):
            return self.inst(f"{instr} {itype} {a}, {b}")
        overflow = (
            self.inst(f"ashr {itype} {a}, {self.const_like(bits - 1, dtype)}")
            if op is Ops.SHR and signed
            else self.const_like(0, dtype)
        )
        if lanes is not None and all(not 0 <= v < bits for v in lanes):
            return overflow
        mask = _int_type(1, dtype.count)
        in_range = self.inst(f"icmp ult {itype} {b}, {self.const_like(bits, dtype)}")
        safe = self.inst(f"select {mask} {in_range}, {itype} {b}, {itype} {self.const_like(0, dtype)}")
        shifted = self.inst(f"{instr} {itype} {a}, {safe}")
        return self.inst(f"select {mask} {in_range}, {itype} {shifted}, {itype} {overflow}")

    # ----- conversions -----
    def to_float(self, x: str, dtype: DType, count: int) -> str:
        """A float16/bfloat16 value as float32 (exact)."""
        f32 = llvm_type(_lanes(dtypes.float32, count))
        if dtype == dtypes.float16:
            return self.inst(f"fpext {llvm_type(_lanes(dtype, count))} {x} to {f32}")
        i16, i32 = _int_type(16, count), _int_type(32, count)
        wide = self.inst(f"zext {i16} {x} to {i32}")
        shifted = self.inst(f"shl {i32} {wide}, {self.int_splat(16, count, 32)}")
        return self.inst(f"bitcast {i32} {shifted} to {f32}")

    def from_float(self, f: str, dtype: DType, count: int) -> str:
        """A float32 value rounded to float16 (fptrunc) or bfloat16 (to nearest even, NaN stays a quiet NaN)."""
        f32 = llvm_type(_lanes(dtypes.float32, count))
        if dtype == dtypes.float16:
            return self.inst(f"fptrunc {f32} {f} to {llvm_type(_lanes(dtype, count))}")
        i32, i16 = _int_type(32, count), _int_type(16, count)
        mask = _int_type(1, count)
        bits = self.inst(f"bitcast {f32} {f} to {i32}")
        magnitude = self.inst(f"and {i32} {bits}, {self.int_splat(0x7FFFFFFF, count, 32)}")
        is_nan = self.inst(f"icmp ugt {i32} {magnitude}, {self.int_splat(0x7F800000, count, 32)}")
        high = self.inst(f"lshr {i32} {bits}, {self.int_splat(16, count, 32)}")
        quiet = self.inst(f"or {i32} {high}, {self.int_splat(0x40, count, 32)}")
        lsb = self.inst(f"and {i32} {high}, {self.int_splat(1, count, 32)}")
        biased = self.inst(f"add {i32} {bits}, {self.int_splat(0x7FFF, count, 32)}")
        rounded = self.inst(f"add {i32} {biased}, {lsb}")
        top = self.inst(f"lshr {i32} {rounded}, {self.int_splat(16, count, 32)}")
        chosen = self.inst(f"select {mask} {is_nan}, {i32} {quiet}, {i32} {top}")
        return self.inst(f"trunc {i32} {chosen} to {i16}")

    def int_splat(self, value: int, count: int, bits: int) -> str:
        """An integer constant of `bits` bits with `count` lanes."""
        lane = str(_signed_bits(value, bits))
        return "<" + ", ".join(f"i{bits} {lane}" for _ in range(count)) + ">" if count > 1 else lane

    def cast(self, x: str, src: DType, dst_full: DType) -> str:
        """Value conversion of `x` (scalar dtype `src`, lanes of `dst_full`) to `dst_full`, C semantics."""
        count = dst_full.count
        dst = dst_full.scalar()

        def typed(dt: DType) -> str:
            """The LLVM type of scalar `dt` with this cast's lane count."""
            return llvm_type(_lanes(dt, count))

        if src == dst:
            return x
        if src in _HALF_LIKE:
            as_float = self.to_float(x, src, count)
            if dst in _HALF_LIKE:
                return self.from_float(as_float, dst, count)
            return self.cast(as_float, dtypes.float32, dst_full)
        if dst in _HALF_LIKE:
            if dst == dtypes.float16 and src == dtypes.float64:
                return self.from_float(self.double_to_float_odd(x, count), dst, count)
            as_float = x if src == dtypes.float32 else self.cast(x, src, _lanes(dtypes.float32, count))
            return self.from_float(as_float, dst, count)
        if dst == dtypes.bool:
            zero = self.const_like(0, _lanes(src, count))
            return self.inst(f"{'fcmp une' if dtypes.is_float(src) else 'icmp ne'} {typed(src)} {x}, {zero}")
        src_type, dst_type = typed(src), typed(dst)
        if src == dtypes.bool:
            return self.inst(f"{'uitofp' if dtypes.is_float(dst) else 'zext'} {src_type} {x} to {dst_type}")
        if dtypes.is_float(src) and dtypes.is_float(dst):
            grow = dst.itemsize > src.itemsize
            return self.inst(f"{'fpext' if grow else 'fptrunc'} {src_type} {x} to {dst_type}")
        if dtypes.is_float(src):
            return self.float_to_int(x, src, dst, count)
        if dtypes.is_float(dst):
            return self.inst(f"{'sitofp' if src in _SIGNED else 'uitofp'} {src_type} {x} to {dst_type}")
        if src.itemsize == dst.itemsize:
            return x
        if src.itemsize > dst.itemsize:
            return self.inst(f"trunc {src_type} {x} to {dst_type}")
        return self.inst(f"{'sext' if src in _SIGNED else 'zext'} {src_type} {x} to {dst_type}")

    def float_to_int(self, x: str, src: DType, dst: DType, count: int) -> str:
        """float/double to an integer through a guarded 64-bit conversion: NaN, infinities and values beyond 2**63
        give 0, in-range values wrap modulo the target width; uint64 converts [0, 2**64) directly and wraps
        negative values above -2**63."""
        vec = _lanes(src, count)
        ftype = llvm_type(vec)
        i64 = _int_type(64, count)
        mask = _int_type(1, count)
        zero64 = self.int_splat(0, count, 64)
        fabs = self.intrinsic(f"llvm.fabs.{_intrinsic_suffix(vec)}", ftype, [ftype])
        magnitude = self.inst(f"call {ftype} {fabs}({ftype} {x})")
        fits = self.inst(f"fcmp olt {ftype} {magnitude}, {self.const_like(_TWO_63, vec)}")
        signed = self.inst(f"fptosi {ftype} {x} to {i64}")
        result = self.inst(f"select {mask} {fits}, {i64} {signed}, {i64} {zero64}")
        if dst == dtypes.uint64:
            nonnegative = self.inst(f"fcmp oge {ftype} {x}, {self.const_like(0.0, vec)}")
            below = self.inst(f"fcmp olt {ftype} {x}, {self.const_like(2.0**64, vec)}")
            direct = self.inst(f"and {mask} {nonnegative}, {below}")
            unsigned = self.inst(f"fptoui {ftype} {x} to {i64}")
            return self.inst(f"select {mask} {direct}, {i64} {unsigned}, {i64} {result}")
        if dst.itemsize < 8:
            return self.inst(f"trunc {i64} {result} to {_int_type(dst.itemsize * 8, count)}")
        return result

    def double_to_float_odd(self, x: str, count: int) -> str:
        """double to float rounded to odd (so a second rounding to half is correct), like ``tc_d2f_odd``."""
        f64 = llvm_type(_lanes(dtypes.float64, count))
        f32 = llvm_type(_lanes(dtypes.float32, count))
        i32 = _int_type(32, count)
        mask = _int_type(1, count)
        narrowed = self.inst(f"fptrunc {f64} {x} to {f32}")
        back = self.inst(f"fpext {f32} {narrowed} to {f64}")
        inexact = self.inst(f"fcmp one {f64} {back}, {x}")  # ordered: NaN stays as it is
        fabs = self.intrinsic(f"llvm.fabs.{_intrinsic_suffix(_lanes(dtypes.float64, count))}", f64, [f64])
        abs_back = self.inst(f"call {f64} {fabs}({f64} {back})")
        abs_x = self.inst(f"call {f64} {fabs}({f64} {x})")
        rounded_up = self.inst(f"fcmp ogt {f64} {abs_back}, {abs_x}")
        bits = self.inst(f"bitcast {f32} {narrowed} to {i32}")
        step = self.inst(f"zext {mask} {rounded_up} to {i32}")
        lowered = self.inst(f"sub {i32} {bits}, {step}")
        odd = self.inst(f"or {i32} {lowered}, {self.int_splat(1, count, 32)}")
        chosen = self.inst(f"select {mask} {inexact}, {i32} {odd}, {i32} {bits}")
        return self.inst(f"bitcast {i32} {chosen} to {f32}")

    def bitcast(self, u: UOp) -> str:
        """Reinterpret the bits of a value (same total size; bool is not bit-castable)."""
        src = u.src[0]
        if src.dtype.scalar() == dtypes.bool or u.dtype.scalar() == dtypes.bool:
            raise self.fail(u, "bool has no bit representation to reinterpret")
        have, want = llvm_type(src.dtype), llvm_type(u.dtype)
        text = self.get(src)
        return text if have == want else self.inst(f"bitcast {have} {text} to {want}")
