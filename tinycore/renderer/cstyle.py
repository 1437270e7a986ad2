"""The C-family renderer base: one device-neutral writer for kernel languages of the C family, a `CDialect` table per
language (OpenCL C, CUDA C, HIP, Metal Shading Language, plain C).

A plugin's renderer is a `CStyleRenderer` subclass that sets ``dialect`` (and the usual `Renderer` attributes):

>>> from tinycore.uop.ops import UOp, Ops
>>> from tinycore.dtype import dtypes
>>> class ToyRenderer(CStyleRenderer):
...     device, dialect = "TOY", CDialect(name="toy C", kernel_prefix="void", launch_ids={"gidx": "gid({dim})"})
>>> out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(4), (), 0)
>>> i = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, 4),), "gidx0")
>>> st = out.index(i).store(i.cast(dtypes.float32))
>>> print(ToyRenderer().render([out, i.src[0], i, out.index(i), i.cast(dtypes.float32), st], "fill"), end="")
void fill(float* data0) {
  int gidx0 = gid(0); /* 4 */
  *(data0+gidx0) = ((float)(gidx0));
}

How it renders (the whole contract is in this module):

- Every uop of the linearized program is rendered by the first matching rule of `CStyleRenderer.rules`, named
  rule tables (`control_rules`, `memory_rules`, `value_rules`, `alu_rules`) after the dialect's own
  ``extra_rules``. A rule gets the `KernelWriter` as ``ctx`` and returns the uop's C expression (a str), or
  for vector values the list of its lane expressions; statements are emitted through ``ctx.emit``.
- Vector values are kept as lists of scalar lane expressions: arithmetic is rendered lane by lane (GPUs are
  scalar per thread, and every dialect then handles every lane count), while loads and stores of the widths the
  dialect lists in ``vector_widths`` use its vector types (one 64- or 128-bit access; a wider access is made of
  equal pieces of the widest of them).
- Semantics follow the reference device: integer value arithmetic wraps (computed in the unsigned type), index
  arithmetic stays signed; ``IDIV``/``MOD`` by 0 give 0 and ``MIN / -1`` wraps; shifts out of range give 0
  (``SHR`` of a negative value -1); ``MAX`` propagates NaN and keeps the first operand on ties; 16-bit floats
  compute in float32 and round back after each op; float constants are exact (shortest round-trip decimals).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Union

from tinycore.dtype import AddrSpace, DType, PtrDType, dtypes
from tinycore.renderer import Renderer, kernel_function_name
from tinycore.uop.ops import GroupOp, Ops, UOp
from tinycore.uop.patterns import PatternMatcher, UPat

Rendered = Union[str, list[str]]  # noqa: UP007 - a scalar expression, or one expression per vector lane

# default C spellings of the scalar types (a dialect overrides some in `CDialect.types`)
C_TYPES: dict[DType, str] = {
    dtypes.bool: "bool",
    dtypes.int8: "signed char",
    dtypes.uint8: "unsigned char",
    dtypes.int16: "short",
    dtypes.uint16: "unsigned short",
    dtypes.int32: "int",
    dtypes.uint32: "unsigned int",
    dtypes.int64: "long long",
    dtypes.uint64: "unsigned long long",
    dtypes.float16: "half",
    dtypes.bfloat16: "bfloat16",
    dtypes.float32: "float",
    dtypes.float64: "double",
}
_SIGNED = frozenset({dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.index})
_HALF_LIKE = frozenset({dtypes.float16, dtypes.bfloat16})
_SYM = {
    Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^",
    Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==",
}  # fmt: skip


class CRenderError(ValueError):
    """A program a C-family dialect can't express (names the dialect, the uop and why)."""


@dataclass(frozen=True)
class CDialect:
    """What one C-family kernel language spells its own way. Every field has the plain-C default.

    - `name`: the language, for error messages; `prelude`: text put before every kernel (pragmas, includes,
      helper definitions); `kernel_prefix`: what precedes the kernel's name (``"__kernel void"``,
      ``'extern "C" __global__ void'``); `extra_params`: parameters appended after the buffers and variables (Metal's
      attribute-bound ids);
    - `buffer_param`: one buffer parameter, formatted with ``space``, ``const`` (``"const "`` when the kernel never
      stores to it), ``type``, ``name`` and ``index`` (its argument position: Metal's ``[[buffer(i)]]``);
      `var_param`: one integer variable parameter (``type``, ``name``, ``index``: counted on after the buffers);
    - `address_spaces`: the qualifier (with its trailing space) of pointers into each `AddrSpace`;
    - `types`: scalar type names that differ from C's (`C_TYPES`); `long_suffix`: the 64-bit literal suffix;
    - `launch_ids`: ``{"gidx": "get_group_id({dim})", "lidx": ...}``, the expression of a ``SPECIAL`` id per prefix
      (``dim`` is ``0``, ``1``, ``2``; ``xyz`` the same dimension as ``x``, ``y``, ``z``: ``"blockIdx.{xyz}"``);
    - `barrier`: the work-group barrier statement; `shared_decl`: a shared-memory array (``type``, ``name``,
      ``size``);
    - `vector_widths`: lane counts with vector types usable for loads and stores (empty: scalar accesses only);
      `vector_widths_by_dtype`: the lane counts of one scalar dtype where they differ (``()``: none);
      `vector_alignment`: vector types only where the vector's alignment is provable (the element index a multiple
      of the lane count, buffers and shared arrays assumed 16-byte aligned), for dialects whose vector accesses
      dereference a cast pointer; `vector_type`: the vector type name (``scalar``, ``n``), ``scalar`` being
      `vector_stems`' entry for the dtype where it has one (CUDA's ``uint`` for ``unsigned int``), else the type
      name; `vector_make`: a vector value from lanes (``type``, ``lanes``); `vector_load`/`vector_store`: a vector
      access through a scalar pointer (``type``, ``n``, ``ptr``, ``space``, ``value``); `lane_access`: one lane of
      a vector variable (``v``, ``i``, ``xyzw`` the i-th of ``xyzw``);
    - `float_specials`: spellings of ``inf`` and ``nan``; `intrinsics`: ``{op name: format}`` for the ops the
      dialect renders with a function (``"SQRT": "sqrt({0})"``); a key ``f"{op}_{dtype.name.upper()}"``
      (``"SQRT_FLOAT"``, ``"SQRT_DOUBLE"``) overrides it per dtype;
    - `half_from_float`/`half_to_float`: conversions of 16-bit floats (``x``, ``type``), the float16 and bfloat16
      types come from `types`; `bitcast`: a bit reinterpretation (``type``, ``x``, ``src`` the type of ``x``:
      a literal's C type may be wider than its dtype);
    - `wmma`: renders a tensor-core ``WMMA`` uop (``fn(writer, uop, a_lanes, b_lanes, c_lanes) -> lanes``), None:
      the dialect has none; `extra_rules`: rules tried before the base's (same contract as the base rules).
    """

    name: str = "C"
    prelude: str = ""
    kernel_prefix: str = "void"
    extra_params: tuple[str, ...] = ()
    buffer_param: str = "{const}{space}{type}* {name}"
    var_param: str = "{type} {name}"
    address_spaces: dict[AddrSpace, str] = field(default_factory=dict)
    types: dict[DType, str] = field(default_factory=dict)
    long_suffix: str = "ll"
    launch_ids: dict[str, str] = field(default_factory=dict)
    barrier: str | None = None
    shared_decl: str | None = None
    vector_widths: tuple[int, ...] = ()
    vector_widths_by_dtype: dict[DType, tuple[int, ...]] = field(default_factory=dict)
    vector_alignment: bool = False
    vector_stems: dict[DType, str] = field(default_factory=dict)
    vector_type: str = "{scalar}{n}"
    vector_make: str = "({type})({lanes})"
    vector_load: str = "*(({space}{type}*)({ptr}))"
    vector_store: str = "*(({space}{type}*)({ptr})) = {value};"
    lane_access: str = "{v}.{xyzw}"
    float_specials: dict[str, str] = field(default_factory=lambda: {"inf": "INFINITY", "nan": "NAN"})
    intrinsics: dict[str, str] = field(default_factory=dict)
    half_from_float: str = "(({type})({x}))"
    half_to_float: str = "((float)({x}))"
    bitcast: str = (  # GNU C (gcc, clang): a statement expression copying the bits
        "({{ {type} _bc_out; __typeof__({x}) _bc_in = {x}; __builtin_memcpy(&_bc_out, &_bc_in, sizeof _bc_out); "
        "_bc_out; }})"
    )
    wmma: Callable[..., list[str]] | None = None
    extra_rules: PatternMatcher | None = None

    def type_name(self, dtype: DType) -> str:
        """The dialect's name of a scalar dtype (``index`` is the 64-bit signed integer)."""
        scalar = dtypes.int64 if dtype.scalar() == dtypes.index else dtype.scalar()
        if scalar == dtypes.void:
            return "void"
        try:
            return self.types.get(scalar) or C_TYPES[scalar]
        except KeyError:
            raise CRenderError(f"{self.name}: no type for {dtype!r}") from None

    def signature_of(self, src: str) -> tuple[str, list[str]]:
        """(kernel name, parameter kinds) of the first kernel in rendered `src`: ``"buffer"`` for pointers,
        ``"long"`` for 64-bit integers, ``"int"`` otherwise (what `tinycore.backend.compiler.KernelImage` stores).

        >>> CDialect(kernel_prefix="__kernel void").signature_of("__kernel void k(float* a, const long n) {}")
        ('k', ['buffer', 'long'])
        """
        match = re.search(re.escape(self.kernel_prefix) + r"\s+(\w+)\s*\(([^)]*)\)", src)
        if match is None:
            raise CRenderError(f"{self.name}: no kernel starting with {self.kernel_prefix!r} in the source")
        kinds = []
        for param in (p.strip() for p in match.group(2).split(",") if p.strip()):
            wide = re.search(r"\blong\b|\bulong\b|int64", param) is not None
            kinds.append("buffer" if "*" in param else "long" if wide else "int")
        return match.group(1), kinds

    def vector_type_name(self, dtype: DType, n: int) -> str:
        """The name of the `n`-lane vector type of the scalar `dtype`."""
        return self.vector_type.format(scalar=self.vector_stems.get(dtype.scalar()) or self.type_name(dtype), n=n)

    def widths_of(self, dtype: DType) -> tuple[int, ...]:
        """The lane counts with a vector type for loads and stores of `dtype`'s scalar type."""
        return self.vector_widths_by_dtype.get(dtype.scalar(), self.vector_widths)


def index_only_values(uops: list[UOp]) -> set[UOp]:
    """The integer values of a program whose every use is address, loop bound or gate arithmetic: renderers give
    them signed no-overflow rules (C's ``int`` arithmetic, LLVM's ``nsw``) while value arithmetic wraps."""
    users: dict[UOp, list[tuple[UOp, int]]] = {}
    for u in uops:
        for i, s in enumerate(u.src):
            users.setdefault(s, []).append((u, i))
    result: set[UOp] = set()
    for u in reversed(uops):
        if u.op not in GroupOp.ALU and u.op not in (Ops.CAST, Ops.VECTORIZE, Ops.GEP):
            continue
        uses = users.get(u, [])
        if uses and all(_is_index_use(user, i, result) for user, i in uses):
            result.add(u)
    return result


def _is_index_use(user: UOp, position: int, index_only: set[UOp]) -> bool:
    if user.op is Ops.INDEX:
        return position >= 1
    if user.op in (Ops.RANGE, Ops.SPECIAL, Ops.IF):
        return True
    return user in index_only


def find_index(u: UOp) -> UOp | None:
    """The INDEX under a pointer expression (through pointer casts and ordering nodes), or None."""
    for _ in range(64):
        if u.op is Ops.INDEX:
            return u
        if u.op not in (Ops.CAST, Ops.AFTER, Ops.NOOP, Ops.BITCAST) or not u.src:
            return None
        u = u.src[0]
    return None


def _xyzw(i: int) -> str:
    return "xyzw"[i] if i < 4 else f"s{i:x}"


_STATEMENT: Any = object()  # what a rule returns when it only emitted statements (the uop has no value)


class KernelWriter:
    """The state of rendering one kernel: the C text of each uop (`names`), the body lines, the indentation.

    Rules read `names[u]` for a source's text (`scalar`/`lanes` normalize it) and call `emit`, `declare` and
    `fail`; `dialect` and `renderer` are the tables they render for.
    """

    STATEMENT: Any = _STATEMENT  # a rule that only emitted statements (through `emit`) returns this

    def __init__(self, renderer: CStyleRenderer, uops: list[UOp], name: str):
        self.renderer, self.dialect, self.uops, self.name = renderer, renderer.dialect, uops, name
        self.names: dict[UOp, Rendered] = {}
        self.lines: list[str] = []
        self.depth = 1
        self.counter = 0
        self.uses: dict[UOp, int] = {}
        for u in uops:
            for s in u.src:
                self.uses[s] = self.uses.get(s, 0) + 1
        self.index_only = index_only_values(uops)

    # ----- helpers for rules -----
    def emit(self, line: str) -> None:
        """Append one statement at the current indentation."""
        self.lines.append("  " * self.depth + line)

    def fresh(self, prefix: str) -> str:
        """A new variable name starting with `prefix`."""
        self.counter += 1
        return f"{prefix}{self.counter}"

    def type(self, dtype: DType) -> str:
        """The dialect's name of `dtype`'s scalar type."""
        return self.dialect.type_name(dtype)

    def declare(self, dtype: DType, expr: str, prefix: str = "val") -> str:
        """A new variable of scalar `dtype` holding `expr`; returns its name."""
        var = self.fresh(prefix)
        self.emit(f"{self.type(dtype)} {var} = {expr};")
        return var

    def scalar(self, u: UOp) -> str:
        """The expression of the scalar uop `u` (lane 0 of a one-lane vector)."""
        text = self.names[u]
        return text if isinstance(text, str) else text[0]

    def lanes(self, u: UOp, count: int | None = None) -> list[str]:
        """The lane expressions of `u`, a scalar broadcast to `count` lanes when it has one."""
        text = self.names[u]
        if isinstance(text, str):
            return [text] * (count or 1)
        return text

    def fail(self, u: UOp, why: str) -> CRenderError:
        """A `CRenderError` naming the dialect, the renderer, `u` and why it can't be rendered."""
        return CRenderError(
            f"{self.dialect.name} renderer ({self.renderer.device or type(self.renderer).__name__}): can't render "
            f"{u.op} ({u.dtype!r}, arg={u.arg!r}): {why}"
        )

    def space(self, ptr: UOp) -> str:
        """The address-space qualifier of pointers like `ptr`."""
        space = ptr.dtype.addrspace if isinstance(ptr.dtype, PtrDType) else AddrSpace.GLOBAL
        return self.dialect.address_spaces.get(space, "")

    def const(self, value: Any, dtype: DType) -> str:
        """The exact literal of a scalar constant of `dtype`."""
        scalar = dtype.scalar()
        d = self.dialect
        if scalar == dtypes.bool:
            return "1" if value else "0"
        if dtypes.is_float(scalar):
            value = float(value)
            if value != value or value in (float("inf"), float("-inf")):  # the specials are float expressions
                literal = d.float_specials["nan" if value != value else "inf"]
                literal = f"(-{literal})" if value < 0 else literal
            else:
                literal = repr(value) if scalar == dtypes.float64 else f"{value!r}f"
                literal = f"({literal})" if literal.startswith("-") else literal
            if scalar in _HALF_LIKE:
                return d.half_from_float.format(x=literal, type=self.type(scalar))
            return f"(({self.type(scalar)}){literal})" if scalar == dtypes.float64 and "(" in literal else literal
        value = int(value)
        if scalar in (dtypes.int64, dtypes.index, dtypes.uint64):
            unsigned = "u" if scalar == dtypes.uint64 else ""
            if value == -(2**63):
                return f"(-9223372036854775807{d.long_suffix}-1)"
            text = f"{value}{unsigned}{d.long_suffix}"
            return f"({text})" if value < 0 else text
        if scalar == dtypes.uint32:
            return f"{value}u"
        if scalar == dtypes.int32 and value == -(2**31):
            return "(-2147483647-1)"
        return f"({value})" if value < 0 else str(value)

    def finish(self, u: UOp, rendered: Rendered) -> None:
        """Record a rule's result for `u`: single-use short scalars stay inline, the rest become variables."""
        if isinstance(rendered, list):
            many = self.uses.get(u, 0) > 1
            self.names[u] = [
                self.declare(u.dtype.scalar(), lane, "v") if many and not _is_simple(lane) else lane
                for lane in rendered
            ]
        elif u.dtype == dtypes.void or isinstance(u.dtype, PtrDType) or _is_simple(rendered):
            self.names[u] = rendered
        elif self.uses.get(u, 0) <= 1 and len(rendered) < 300:
            self.names[u] = rendered
        else:
            self.names[u] = self.declare(u.dtype, rendered, "alu" if u.op in GroupOp.ALU else "val")

    # ----- the program -----
    def write(self) -> str:
        """The kernel's full source: prelude, vector declarations, signature and body."""
        params = self.parameters()
        rules = self.renderer.rules
        for u in self.uops:
            if u.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.SINK, Ops.GROUP):
                continue
            rendered = rules.rewrite(u, ctx=self)
            if rendered is None:
                raise self.fail(u, "no rendering rule matches it")
            if rendered is not _STATEMENT:
                self.finish(u, rendered)
        while self.depth > 1:
            self.depth -= 1
            self.emit("}")
        signature = ", ".join([*params, *self.dialect.extra_params])
        head = self.dialect.prelude.strip("\n")
        text = f"{self.dialect.kernel_prefix} {self.name}({signature}) {{\n" + "\n".join(self.lines) + "\n}\n"
        return f"{head}\n{text}" if head else text

    def parameters(self) -> list[str]:
        """The buffer parameters in ``DEFINE_GLOBAL`` index order, then the variables in program order."""
        d = self.dialect
        buffers = {u.arg: u for u in self.uops if u.op is Ops.DEFINE_GLOBAL}
        written = {
            find_index(u.src[0]).src[0].arg  # type: ignore[union-attr]
            for u in self.uops
            if u.op is Ops.STORE
            and find_index(u.src[0]) is not None
            and find_index(u.src[0]).src[0].op is Ops.DEFINE_GLOBAL  # type: ignore[union-attr]
        }
        params = []
        for i in range(max(buffers, default=-1) + 1):
            g = buffers.get(i)
            if g is None:
                raise CRenderError(f"{d.name} renderer: buffer argument {i} is missing from the program")
            self.names[g] = f"data{i}"
            const = "" if i in written else "const "
            space, type_ = self.space(g), self.type(g.dtype.base)
            params.append(d.buffer_param.format(const=const, space=space, type=type_, name=f"data{i}", index=i))
        for v in (u for u in self.uops if u.op is Ops.DEFINE_VAR):
            self.names[v] = str(v.arg[0])
            params.append(d.var_param.format(type=self.type(v.dtype), name=v.arg[0], index=len(params)))
        return params


_SIMPLE = re.compile(r"^(?:[A-Za-z_]\w*(?:\[\d+\]|\.\w+)?|\(?-?[0-9][0-9a-fA-FxXpP.+\-e]*(?:u|l|ll|ul|ull|f)?\)?)$")


def _is_simple(expr: str) -> bool:
    """A name, a lane or element of one, or a literal: cheap to repeat."""
    return _SIMPLE.match(expr) is not None


# ----- control flow: loops, conditionals, launch ids, barriers -----
def _special(ctx: KernelWriter, x: UOp) -> str:
    prefix, dim = str(x.arg)[:-1], str(x.arg)[-1:]
    form = ctx.dialect.launch_ids.get(prefix)
    if form is None or not dim.isdigit():
        raise ctx.fail(x, f"the dialect has no launch id {x.arg!r} (it knows {sorted(ctx.dialect.launch_ids)})")
    bound = ctx.names.get(x.src[0]) if x.src else None
    expr = form.format(dim=dim, xyz="xyz"[int(dim)] if int(dim) < 3 else dim)
    ctx.emit(f"{ctx.type(x.dtype)} {x.arg} = {expr};" + (f" /* {bound} */" if bound else ""))
    return str(x.arg)


def _range(ctx: KernelWriter, x: UOp) -> Any:
    var = ctx.fresh("ridx")
    ctx.emit(f"for ({ctx.type(x.dtype)} {var} = 0; {var} < {ctx.scalar(x.src[0])}; {var}++) {{")
    ctx.depth += 1
    ctx.names[x] = var
    return _STATEMENT


def _end(ctx: KernelWriter, x: UOp) -> Any:
    for _ in range(sum(1 for s in x.src if s.op is Ops.RANGE) or 1):
        ctx.depth -= 1
        ctx.emit("}")
    return _STATEMENT


def _if(ctx: KernelWriter, x: UOp) -> Any:
    ctx.emit(f"if ({ctx.scalar(x.src[0])}) {{")
    ctx.depth += 1
    return _STATEMENT


def _endif(ctx: KernelWriter) -> Any:
    ctx.depth -= 1
    ctx.emit("}")
    return _STATEMENT


def _barrier(ctx: KernelWriter, x: UOp) -> Any:
    if ctx.dialect.barrier is None:
        raise ctx.fail(x, "the dialect has no work-group barrier (set has_shared = False on the renderer)")
    ctx.emit(ctx.dialect.barrier)
    return _STATEMENT


def _custom(ctx: KernelWriter, x: UOp) -> Any:
    text = str(x.arg).format(*(ctx.scalar(s) if s in ctx.names else "" for s in x.src))
    if x.dtype == dtypes.void:
        ctx.emit(f"{text};")
        return _STATEMENT
    return text


control_rules = PatternMatcher(
    [
        (UPat(Ops.SPECIAL, name="x"), _special),
        (UPat(Ops.RANGE, name="x"), _range),
        (UPat(Ops.END, name="x"), _end),
        (UPat(Ops.IF, name="x"), _if),
        (UPat(Ops.ENDIF), _endif),
        (UPat(Ops.BARRIER, name="x"), _barrier),
        (UPat(Ops.CUSTOM, name="x"), _custom),
        (UPat((Ops.NOOP, Ops.AFTER), name="x"), lambda ctx, x: ctx.names[x.src[0]] if x.src else _STATEMENT),
    ],
    name="c_control",
)


# ----- memory: register and shared arrays, pointers, loads and stores -----
def _define_reg(ctx: KernelWriter, x: UOp) -> Any:
    if not isinstance(x.dtype, PtrDType) or x.dtype.size < 0:
        raise ctx.fail(x, "a register array needs a pointer dtype with a known size")
    var = ctx.fresh("acc")
    ctx.emit(f"{ctx.type(x.dtype.base)} {var}[{max(1, x.dtype.size)}];")
    ctx.names[x] = var
    return _STATEMENT


def _define_local(ctx: KernelWriter, x: UOp) -> Any:
    if ctx.dialect.shared_decl is None:
        raise ctx.fail(x, "the dialect has no shared memory (set has_shared = False on the renderer)")
    assert isinstance(x.dtype, PtrDType)
    var = f"smem{x.arg}"
    ctx.emit(ctx.dialect.shared_decl.format(type=ctx.type(x.dtype.base), name=var, size=max(1, x.dtype.size)))
    ctx.names[x] = var
    return _STATEMENT


def _index(ctx: KernelWriter, x: UOp) -> str:
    buf, idx = ctx.scalar(x.src[0]), x.src[1]
    if idx.dtype.count > 1:  # a vector of addresses: the access gathers or scatters lane by lane
        return buf
    if idx.op is Ops.CONST and idx.arg == 0:
        return buf
    return f"({buf}+{ctx.scalar(idx)})"


def _pointer_cast(ctx: KernelWriter, x: UOp) -> str:
    assert isinstance(x.dtype, PtrDType)
    return f"(({ctx.space(x)}{ctx.type(x.dtype.base)}*)({ctx.scalar(x.src[0])}))"


def _gate_of(index: UOp | None) -> UOp | None:
    return index.src[2] if index is not None and len(index.src) > 2 else None


def _load(ctx: KernelWriter, x: UOp) -> Rendered:
    index = find_index(x.src[0])
    ptr = ctx.scalar(x.src[0])
    gate = _gate_of(index)
    n = x.dtype.count
    alt = ctx.lanes(x.src[1], n) if len(x.src) > 1 else [ctx.const(0, x.dtype)] * n
    if index is not None and index.src[1].dtype.count > 1:  # gather
        idx, gates = ctx.lanes(index.src[1], n), ctx.lanes(gate, n) if gate is not None else None
        out = [f"{ptr}[{idx[i]}]" for i in range(n)]
        return [f"({gates[i]}?{out[i]}:{alt[i]})" for i in range(n)] if gates else out
    if n == 1:
        value = f"*{ptr}"
        return ctx.declare(x.dtype, f"({ctx.scalar(gate)})?{value}:{alt[0]}" if gate is not None else value, "ld")
    if w := _vector_width(ctx, x.dtype, x.src[0], index):  # one vector access, or n/w of them
        d, vtype, out = ctx.dialect, ctx.dialect.vector_type_name(x.dtype, w), []
        for k in range(0, n, w):
            var, at = ctx.fresh("ld"), ptr if k == 0 else f"({ptr}+{k})"
            load = d.vector_load.format(type=vtype, n=w, ptr=at, space=ctx.space(x.src[0]))
            if gate is None:
                ctx.emit(f"{vtype} {var} = {load};")
            else:
                ctx.emit(f"{vtype} {var} = {d.vector_make.format(type=vtype, lanes=', '.join(alt[k : k + w]))};")
                ctx.emit(f"if ({ctx.scalar(gate)}) {var} = {load};")
            out += [d.lane_access.format(v=var, i=i, xyzw=_xyzw(i)) for i in range(w)]
        return out
    lanes = [ctx.declare(x.dtype.scalar(), f"{ptr}[{i}]" if gate is None else alt[i], "ld") for i in range(n)]
    if gate is not None:
        ctx.emit(f"if ({ctx.scalar(gate)}) {{ {' '.join(f'{v} = {ptr}[{i}];' for i, v in enumerate(lanes))} }}")
    return lanes


def _is_memory(ptr: UOp) -> bool:
    """Whether `ptr` points into global or shared memory (vector types are used there; registers go by lanes)."""
    return isinstance(ptr.dtype, PtrDType) and ptr.dtype.addrspace in (AddrSpace.GLOBAL, AddrSpace.LOCAL)


def _vector_width(ctx: KernelWriter, dtype: DType, ptr: UOp, index: UOp | None) -> int:
    """The lane count of the dialect's vector type an access of the vector `dtype` through `ptr` is made of: the
    widest of its widths for the scalar type that divides the access (and, with `CDialect.vector_alignment`, whose
    alignment is provable); 0: the access goes lane by lane."""
    n, d = dtype.count, ctx.dialect
    widths = sorted((w for w in d.widths_of(dtype) if w > 1 and n % w == 0), reverse=True)
    if not widths or not _is_memory(ptr):
        return 0
    if not d.vector_alignment:
        return widths[0]
    buf = index.src[0] if index is not None else None
    while buf is not None and buf.op in (Ops.AFTER, Ops.NOOP) and buf.src:
        buf = buf.src[0]
    if index is None or buf is None or buf.op not in (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL):
        return 0
    fits = (w for w in widths if w * dtype.scalar().itemsize <= 16 and _multiple_of(index.src[1], w))
    return next(fits, 0)


def _multiple_of(u: UOp, n: int, depth: int = 0) -> bool:
    """Whether the integer `u` is provably a multiple of `n` (from its constants; False when unsure)."""
    if depth > 24:
        return False
    if u.op is Ops.CONST:
        return isinstance(u.arg, int) and u.arg % n == 0
    if u.op in (Ops.ADD, Ops.SUB):
        return all(_multiple_of(s, n, depth + 1) for s in u.src)
    if u.op is Ops.MUL:
        return any(_multiple_of(s, n, depth + 1) for s in u.src)
    if u.op is Ops.SHL and u.src[1].op is Ops.CONST and isinstance(u.src[1].arg, int):
        return (1 << u.src[1].arg) % n == 0 or _multiple_of(u.src[0], n, depth + 1)
    if u.op is Ops.WHERE:
        return _multiple_of(u.src[1], n, depth + 1) and _multiple_of(u.src[2], n, depth + 1)
    if u.op is Ops.CAST and dtypes.is_int(u.dtype) and dtypes.is_int(u.src[0].dtype):
        return u.dtype.itemsize >= u.src[0].dtype.itemsize and _multiple_of(u.src[0], n, depth + 1)
    return False


def _store(ctx: KernelWriter, x: UOp) -> Any:
    target, value = x.src[0], x.src[1]
    index = find_index(target)
    ptr, gate = ctx.scalar(target), _gate_of(index)
    n = value.dtype.count
    if index is not None and index.src[1].dtype.count > 1:  # scatter
        idx, vals = ctx.lanes(index.src[1]), ctx.lanes(value, index.src[1].dtype.count)
        gates = ctx.lanes(gate, len(idx)) if gate is not None else None
        for i, (at, v) in enumerate(zip(idx, vals)):
            ctx.emit(f"if ({gates[i]}) {ptr}[{at}] = {v};" if gates else f"{ptr}[{at}] = {v};")
        return _STATEMENT
    if n == 1:
        statements = [f"*{ptr} = {ctx.scalar(value)};"]
    elif w := _vector_width(ctx, value.dtype, target, index):  # one vector access, or n/w of them
        d, vtype, lanes = ctx.dialect, ctx.dialect.vector_type_name(value.dtype, w), ctx.lanes(value, n)
        statements = [
            d.vector_store.format(
                type=vtype, n=w, ptr=ptr if k == 0 else f"({ptr}+{k})", space=ctx.space(target),
                value=d.vector_make.format(type=vtype, lanes=", ".join(lanes[k : k + w])),
            )
            for k in range(0, n, w)
        ]  # fmt: skip
    else:
        statements = [f"{ptr}[{i}] = {lane};" for i, lane in enumerate(ctx.lanes(value))]
    if gate is not None:
        ctx.emit(f"if ({ctx.scalar(gate)}) {{ {' '.join(statements)} }}")
    else:
        for s in statements:
            ctx.emit(s)
    return _STATEMENT


memory_rules = PatternMatcher(
    [
        (UPat(Ops.DEFINE_REG, name="x"), _define_reg),
        (UPat(Ops.DEFINE_LOCAL, name="x"), _define_local),
        (UPat(Ops.INDEX, name="x"), _index),
        (UPat(Ops.CAST, name="x"), lambda ctx, x: _pointer_cast(ctx, x) if isinstance(x.dtype, PtrDType) else None),
        (UPat(Ops.LOAD, name="x"), _load),
        (UPat(Ops.STORE, name="x"), _store),
    ],
    name="c_memory",
)  # fmt: skip


# ----- values: constants, vectors, lanes, conversions -----
def _vconst(ctx: KernelWriter, x: UOp) -> list[str]:
    return [ctx.const(v, x.dtype) for v in x.arg]


def _gep(ctx: KernelWriter, x: UOp) -> Rendered:
    lanes = ctx.lanes(x.src[0])
    picked = [lanes[i] if len(lanes) > 1 else lanes[0] for i in x.arg]
    return picked[0] if x.dtype.count == 1 else picked


def _cast_scalar(ctx: KernelWriter, value: str, src: DType, dst: DType) -> str:
    """One lane's value conversion (float to int through 64 bits, 16-bit floats through float32)."""
    d = ctx.dialect
    if src == dst:
        return value
    if src in _HALF_LIKE:
        value, src = d.half_to_float.format(x=value, type=ctx.type(src)), dtypes.float32
        if src == dst:
            return value
    if dst in _HALF_LIKE:
        as_float = value if src == dtypes.float32 else f"(({ctx.type(dtypes.float32)})({value}))"
        return d.half_from_float.format(x=as_float, type=ctx.type(dst))
    if dst == dtypes.bool:
        return f"(({ctx.type(dst)})({value}!=0))"
    if dtypes.is_float(src) and dtypes.is_int(dst) and dst.itemsize < 8:
        return f"(({ctx.type(dst)})({ctx.type(dtypes.int64)})({value}))"
    return f"(({ctx.type(dst)})({value}))"


def _cast(ctx: KernelWriter, x: UOp) -> Rendered:
    src, dst = x.src[0].dtype.scalar(), x.dtype.scalar()
    lanes = [_cast_scalar(ctx, v, src, dst) for v in ctx.lanes(x.src[0], x.dtype.count)]
    return lanes[0] if x.dtype.count == 1 else lanes


def _bitcast(ctx: KernelWriter, x: UOp) -> Rendered:
    if x.src[0].dtype.count != x.dtype.count:
        raise ctx.fail(x, "a bitcast that changes the lane count")
    src, dst = ctx.type(x.src[0].dtype), ctx.type(x.dtype)
    lanes = [ctx.dialect.bitcast.format(type=dst, x=v, src=src) for v in ctx.lanes(x.src[0])]
    return lanes[0] if x.dtype.count == 1 else lanes


def _wmma(ctx: KernelWriter, x: UOp) -> list[str]:
    if ctx.dialect.wmma is None:
        raise ctx.fail(x, "the dialect renders no tensor cores (declare none on the renderer)")
    return ctx.dialect.wmma(ctx, x, *(ctx.lanes(s) for s in x.src))


value_rules = PatternMatcher(
    [
        (UPat(Ops.CONST, name="x"), lambda ctx, x: ctx.const(x.arg, x.dtype)),
        (UPat(Ops.VCONST, name="x"), _vconst),
        (UPat(Ops.VECTORIZE, name="x"), lambda ctx, x: [ctx.scalar(s) for s in x.src]),
        (UPat(Ops.GEP, name="x"), _gep),
        (UPat(Ops.CAST, name="x"), _cast),
        (UPat(Ops.BITCAST, name="x"), _bitcast),
        (UPat(Ops.WMMA, name="x"), _wmma),
    ],
    name="c_values",
)


# ----- arithmetic, one lane at a time -----
def _unsigned(ctx: KernelWriter, dtype: DType) -> str:
    return ctx.type(dtypes.uint64 if dtype.itemsize == 8 else dtypes.uint32)


def _simple(ctx: KernelWriter, expr: str, dtype: DType) -> str:
    """`expr` as something cheap to repeat: itself when a name or literal, else a new variable."""
    return expr if _is_simple(expr) else ctx.declare(dtype, expr, "t")


def _intrinsic(ctx: KernelWriter, op: Ops, dtype: DType, xs: list[str]) -> str | None:
    table = ctx.dialect.intrinsics
    form = table.get(f"{op.name}_{dtype.name.upper()}") or table.get(op.name)
    return form.format(*xs) if form is not None else None


def _int_literal(text: str) -> int | None:
    body = text.strip("()").rstrip("uUlL")
    return int(body) if body.lstrip("-").isdigit() else None


def _float_alu(ctx: KernelWriter, op: Ops, dtype: DType, xs: list[str]) -> str:
    a, b = xs[0], xs[1] if len(xs) > 1 else ""
    if (native := _intrinsic(ctx, op, dtype, xs)) is not None:
        return native
    if op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV):
        return f"({a}{_SYM[op]}{b})"
    if op is Ops.NEG:
        return f"(-{a})"
    if op is Ops.RECIP:
        return f"({ctx.const(1.0, dtype)}/{a})"
    if op is Ops.MULACC:
        return f"(({a}*{b})+{xs[2]})"
    if op is Ops.MAX:
        sa, sb = _simple(ctx, a, dtype), _simple(ctx, b, dtype)
        return f"(({sb}>{sa}||{sb}!={sb})?{sb}:{sa})"
    raise CRenderError(f"{ctx.dialect.name} renderer: {op} on {dtype} needs an intrinsic (CDialect.intrinsics)")


def _int_alu(ctx: KernelWriter, op: Ops, dtype: DType, xs: list[str], index_only: bool) -> str:
    ct, ut = ctx.type(dtype), _unsigned(ctx, dtype)
    signed, narrow = dtype in _SIGNED, dtype.itemsize < 4
    a, b = xs[0], xs[1] if len(xs) > 1 else ""

    def back(expr: str) -> str:
        return f"(({ct}){expr})" if narrow else expr

    if op in (Ops.AND, Ops.OR, Ops.XOR):
        return back(f"({a}{_SYM[op]}{b})")
    if op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.MULACC):
        wrap = not index_only and (signed or narrow)
        if op is Ops.MULACC:
            return f"(({ct})(({ut}){a}*({ut}){b}+({ut}){xs[2]}))" if wrap else back(f"({a}*{b}+{xs[2]})")
        if op is Ops.NEG:
            return f"(({ct})(0u-({ut}){a}))" if wrap else back(f"(-{a})")
        return f"(({ct})(({ut}){a}{_SYM[op]}({ut}){b}))" if wrap else f"({a}{_SYM[op]}{b})"
    if op in (Ops.IDIV, Ops.MOD):
        sym = "/" if op is Ops.IDIV else "%"
        divisor = _int_literal(b)
        if divisor not in (None, 0) and not (signed and divisor == -1):
            return back(f"({a}{sym}{b})")
        sa, sb = _simple(ctx, a, dtype), _simple(ctx, b, dtype)
        if signed:
            minus = f"(({ct})(0u-({ut}){sa}))" if op is Ops.IDIV else "0"
            return back(f"({sb}==0?0:{sb}==-1?{minus}:{sa}{sym}{sb})")
        return back(f"({sb}==0?0:{sa}{sym}{sb})")
    if op is Ops.MAX:
        sa, sb = _simple(ctx, a, dtype), _simple(ctx, b, dtype)
        return f"({sb}>{sa}?{sb}:{sa})"
    if op in (Ops.SHL, Ops.SHR):
        bits, amount = dtype.itemsize * 8, _int_literal(b)
        if op is Ops.SHL:
            if amount is not None and not 0 <= amount < bits:
                return f"(({ct})0)"
            sb = b if amount is not None else _simple(ctx, b, dtype)
            shifted = f"(({ct})(({ut}){a}<<{sb}))" if signed or narrow else f"({a}<<{sb})"
            return shifted if amount is not None else f"((({ut}){sb})<{bits}u?{shifted}:({ct})0)"
        if amount is not None:
            if 0 <= amount < bits:
                return back(f"({a}>>{b})")
            return back(f"({a}>>{bits - 1})") if signed else f"(({ct})0)"
        sa, sb = _simple(ctx, a, dtype), _simple(ctx, b, dtype)
        overflow = f"({sa}>>{bits - 1})" if signed else "0"
        return back(f"((({ut}){sb})<{bits}u?({sa}>>{sb}):{overflow})")
    if op is Ops.TRUNC:
        return a
    raise CRenderError(f"{ctx.dialect.name} renderer: {op} is not defined on {dtype}")


_BOOL_OPS = {Ops.ADD: "|", Ops.OR: "|", Ops.MAX: "|", Ops.MUL: "&", Ops.AND: "&", Ops.XOR: "^", Ops.CMPNE: "^"}


def _alu_lane(ctx: KernelWriter, x: UOp, xs: list[str]) -> str:
    op, dtype = x.op, x.dtype.scalar()
    operand = x.src[-1].dtype.scalar() if x.src else dtype
    if op is Ops.WHERE:
        return f"({xs[0]}?{xs[1]}:{xs[2]})"
    if op in GroupOp.Comparison:
        if operand in _HALF_LIKE:
            xs = [ctx.dialect.half_to_float.format(x=v, type=ctx.type(operand)) for v in xs]
        return f"({xs[0]}{_SYM[op]}{xs[1]})"
    if dtype == dtypes.bool:
        if op is Ops.NEG:
            return f"(!{xs[0]})"
        if op in _BOOL_OPS:
            return f"({xs[0]}{_BOOL_OPS[op]}{xs[1]})"
        raise ctx.fail(x, "not defined on bool")
    if dtype in _HALF_LIKE:
        d, half = ctx.dialect, ctx.type(dtype)
        as_float = [d.half_to_float.format(x=v, type=half) for v in xs]
        return d.half_from_float.format(x=_float_alu(ctx, op, dtypes.float32, as_float), type=half)
    if dtypes.is_float(dtype):
        return _float_alu(ctx, op, dtype, xs)
    return _int_alu(ctx, op, dtype, xs, x in ctx.index_only)


def _alu(ctx: KernelWriter, x: UOp) -> Rendered:
    n = x.dtype.count
    if n == 1:
        return _alu_lane(ctx, x, [ctx.scalar(s) for s in x.src])
    operands = [ctx.lanes(s, n) for s in x.src]
    return [_alu_lane(ctx, x, [o[i] for o in operands]) for i in range(n)]


alu_rules = PatternMatcher([(UPat(GroupOp.ALU, name="x"), _alu)], name="c_alu")


class CStyleRenderer(Renderer):
    """A `Renderer` for a C-family kernel language: set `dialect` (a `CDialect`) and the `Renderer` attributes.

    `rules` is the rendering rule table: the dialect's `extra_rules`, then `control_rules`, `memory_rules`,
    `value_rules` and `alu_rules`. The kernel's function name is `name` (or the SINK's name, else ``kernel``).
    """

    dialect: CDialect = CDialect()
    masked_access = False
    index_bits = 32

    @property
    def rules(self) -> PatternMatcher:
        """The rule table every uop is rendered by (built once per dialect)."""
        return _rules_of(self.dialect)

    def render(self, uops: list[UOp], name: str | None = None) -> str:
        """The kernel's source in the dialect's language."""
        return KernelWriter(self, uops, kernel_function_name(uops, name)).write()


_RULES: dict[int, tuple[CDialect, PatternMatcher]] = {}


def _rules_of(dialect: CDialect) -> PatternMatcher:
    cached = _RULES.get(id(dialect))
    if cached is None or cached[0] is not dialect:
        base = control_rules + memory_rules + value_rules + alu_rules
        cached = _RULES[id(dialect)] = (dialect, dialect.extra_rules + base if dialect.extra_rules else base)
    return cached[1]
