"""Pattern matching and graph rewriting: `UPat`, `PatternMatcher`, `graph_rewrite`, rewrite tracing.

A rule is `(UPat, fn)`. When the pattern matches a node, `fn` is called with the named sub-matches as keyword
arguments (and with the rewrite context first when its first parameter is called `ctx`); it returns the
replacement UOp, or None for "no match after all" (returning the matched node itself also counts as no match).
`graph_rewrite` applies a matcher everywhere in a graph until nothing matches any more.

>>> x = UOp.variable("x", 0, 9)
>>> pm = PatternMatcher([(UPat.var("a") + UPat.cvar("c", arg=0), lambda a, c: a)])
>>> graph_rewrite((x + 0) * 2, pm) is x * 2
True
"""

from __future__ import annotations

import inspect
import itertools
import linecache
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tinycore.dtype import DType
from tinycore.helpers import DEBUG, SPEC, ContextVar
from tinycore.uop.ops import GroupOp, Ops, UOp

__all__ = [
    "TRACK_REWRITES",
    "PatternMatcher",
    "RewriteError",
    "RewriteTrace",
    "UPat",
    "clear_rewrite_traces",
    "graph_rewrite",
    "graph_rewrite_map",
    "rewrite_traces",
]

TRACK_REWRITES = ContextVar("TRACK_REWRITES", 0)  # 1: record every pass in `rewrite_traces`; 2: and every rule hit

_ALL_OPS = tuple(Ops)
_ANY: Any = type("_AnyArg", (), {"__repr__": lambda self: "<any>"})()  # "arg not constrained"


class RewriteError(RuntimeError):
    """A rewrite pass failed: a rule produced a cycle, never reached a fixed point, or raised."""


# ---------------------------------------------------------------------------------------------------------------
# UPat


class UPat:
    """A pattern over UOps.

    - `op`: an `Ops`, or a tuple/set of them (None: any op).
    - `dtype`: a `DType` or tuple of them (None: any).
    - `src`: None (any sources), a tuple (exact order), a list (any permutation: for commutative ops), or a single
      `UPat` that every source must match (any number of sources).
    - `arg`: the node's arg must equal this (left out: any arg; pass `arg=None` to require None).
    - `name`: bind the node under this name; a name used twice must bind the same node.
    - `allow_any_len`: a tuple `src` only has to match the first sources.

    >>> pat = UPat(Ops.ADD, src=[UPat.var("x"), UPat.cvar("c")])
    >>> x = UOp.variable("x", 0, 9)
    >>> [sorted(m) for m in pat.match(3 + x)]
    [['c', 'x']]
    """

    __slots__ = ("op", "dtype", "src", "arg", "name", "allow_any_len", "alts")

    def __init__(
        self,
        op: Ops | Iterable[Ops] | None = None,
        dtype: DType | Iterable[DType] | None = None,
        src: UPat | tuple[UPat, ...] | list[UPat] | None = None,
        arg: Any = _ANY,
        name: str | None = None,
        allow_any_len: bool = False,
    ):
        self.op: tuple[Ops, ...] | None = None if op is None else (op,) if isinstance(op, Ops) else tuple(op)
        self.dtype: tuple[DType, ...] | None = (
            None if dtype is None else (dtype,) if isinstance(dtype, DType) else tuple(dtype)
        )
        if src is not None and not isinstance(src, (UPat, tuple, list)):
            raise TypeError(f"UPat src must be a UPat, tuple or list, got {type(src).__name__}")
        if isinstance(src, (tuple, list)) and not all(isinstance(s, UPat) for s in src):
            raise TypeError("every entry of a UPat src must be a UPat")
        if isinstance(src, list) and allow_any_len:
            raise ValueError("allow_any_len only works with an ordered (tuple) src")
        if name == "ctx":
            raise ValueError("'ctx' is reserved for the rewrite context")
        self.src = src
        self.arg = arg
        self.name = name
        self.allow_any_len = allow_any_len
        self.alts: tuple[UPat, ...] | None = None

    # ----- constructors

    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any node, bound to `name`.

        >>> UPat.var("x").name
        'x'
        """
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(
        name: str | None = None, dtype: DType | Iterable[DType] | None = None, vec: bool = True, arg: Any = _ANY
    ) -> UPat:
        """A constant (CONST, or VCONST too when `vec`), bound to `name`; `arg` pins its value."""
        return UPat((Ops.CONST, Ops.VCONST) if vec else Ops.CONST, dtype, name=name, arg=arg)

    @staticmethod
    def const(dtype: DType | Iterable[DType] | None, value: Any) -> UPat:
        """A CONST with value `value` (compared with `==`, so 0 matches 0.0 and False too)."""
        return UPat(Ops.CONST, dtype, arg=value)

    @staticmethod
    def any(*pats: UPat, name: str | None = None) -> UPat:
        """Matches when any of `pats` matches (alternatives are tried in order).

        >>> p = UPat.any(UPat(Ops.ADD), UPat(Ops.MUL))
        >>> x = UOp.variable("x", 0, 9)
        >>> bool(p.match(x * 2)), bool(p.match(x - 2))
        (True, False)
        """
        out = UPat(name=name)
        out.alts = tuple(pats)
        return out

    def named(self, name: str) -> UPat:
        """A copy of this pattern bound to `name`."""
        out = self._copy()
        out.name = name
        return out

    def _copy(self) -> UPat:
        out = UPat.__new__(UPat)
        for slot in UPat.__slots__:
            setattr(out, slot, getattr(self, slot))
        return out

    # ----- sugar: the same spelling as on UOps builds patterns

    def alu(self, op: Ops, *srcs: Any) -> UPat:
        """A pattern for `op` with self as first source (any order when `op` is commutative and binary)."""
        all_src = [self, *(_as_upat(s) for s in srcs)]
        return UPat(op, src=all_src if op in GroupOp.Commutative and len(all_src) == 2 else tuple(all_src))

    def __add__(self, x: Any) -> UPat:
        return self.alu(Ops.ADD, x)

    def __radd__(self, x: Any) -> UPat:
        return self.alu(Ops.ADD, x)

    def __mul__(self, x: Any) -> UPat:
        return self.alu(Ops.MUL, x)

    def __rmul__(self, x: Any) -> UPat:
        return self.alu(Ops.MUL, x)

    def __sub__(self, x: Any) -> UPat:
        return self.alu(Ops.SUB, x)

    def __rsub__(self, x: Any) -> UPat:
        return _as_upat(x).alu(Ops.SUB, self)

    def __floordiv__(self, x: Any) -> UPat:
        return self.alu(Ops.IDIV, x)

    def __mod__(self, x: Any) -> UPat:
        return self.alu(Ops.MOD, x)

    def __truediv__(self, x: Any) -> UPat:
        return self.alu(Ops.FDIV, x)

    def __neg__(self) -> UPat:
        return self.alu(Ops.NEG)

    def __lt__(self, x: Any) -> UPat:
        return self.alu(Ops.CMPLT, x)

    def __gt__(self, x: Any) -> UPat:
        return _as_upat(x).alu(Ops.CMPLT, self)

    def __and__(self, x: Any) -> UPat:
        return self.alu(Ops.AND, x)

    def __or__(self, x: Any) -> UPat:
        return self.alu(Ops.OR, x)

    def __xor__(self, x: Any) -> UPat:
        return self.alu(Ops.XOR, x)

    def __lshift__(self, x: Any) -> UPat:
        return self.alu(Ops.SHL, x)

    def __rshift__(self, x: Any) -> UPat:
        return self.alu(Ops.SHR, x)

    def ne(self, x: Any) -> UPat:
        """CMPNE pattern (either order)."""
        return self.alu(Ops.CMPNE, x)

    def eq(self, x: Any) -> UPat:
        """CMPEQ pattern (either order)."""
        return self.alu(Ops.CMPEQ, x)

    def maximum(self, x: Any) -> UPat:
        """MAX pattern (either order)."""
        return self.alu(Ops.MAX, x)

    def where(self, a: Any, b: Any) -> UPat:
        """WHERE pattern with self as the gate."""
        return self.alu(Ops.WHERE, a, b)

    def cast(self, dtype: DType | Iterable[DType] | None = None, name: str | None = None) -> UPat:
        """CAST of self (to `dtype` if given)."""
        return UPat(Ops.CAST, dtype, (self,), name=name)

    def bitcast(self, dtype: DType | Iterable[DType] | None = None, name: str | None = None) -> UPat:
        """BITCAST of self (to `dtype` if given)."""
        return UPat(Ops.BITCAST, dtype, (self,), name=name)

    def gep(self, lanes: Any = _ANY, name: str | None = None) -> UPat:
        """GEP of self (with lane tuple `lanes` if given)."""
        return UPat(Ops.GEP, None, (self,), arg=lanes, name=name)

    def index(self, idx: UPat, gate: UPat | None = None, name: str | None = None) -> UPat:
        """INDEX of self (a buffer pointer) by `idx` (and `gate`)."""
        return UPat(Ops.INDEX, None, (self, idx) if gate is None else (self, idx, gate), name=name)

    def load(self, name: str | None = None, allow_any_len: bool = True) -> UPat:
        """LOAD through self (any extra sources unless `allow_any_len=False`)."""
        return UPat(Ops.LOAD, None, (self,), name=name, allow_any_len=allow_any_len)

    def store(self, value: UPat, name: str | None = None) -> UPat:
        """STORE of `value` through self."""
        return UPat(Ops.STORE, None, (self, value), name=name)

    # ----- matching (the interpreted reference matcher; PatternMatcher compiles patterns to code)

    def match(self, uop: UOp, store: dict[str, UOp] | None = None) -> list[dict[str, UOp]]:
        """Every way this pattern matches `uop`, as a list of `{name: node}` bindings (empty: no match).

        >>> x = UOp.variable("x", 0, 9)
        >>> UPat(Ops.ADD, src=[UPat.var("a"), UPat.var("a")]).match(x + x) == [{"a": x}, {"a": x}]
        True
        """
        return list(_imatch(self, uop, {} if store is None else dict(store)))

    def names(self) -> list[str]:
        """Every name bound anywhere in the pattern (first occurrence order)."""
        out: list[str] = []
        for p in self._walk():
            if p.name is not None and p.name not in out:
                out.append(p.name)
        return out

    def _walk(self) -> Iterator[UPat]:
        yield self
        for alt in self.alts or ():
            yield from alt._walk()
        if isinstance(self.src, UPat):
            yield from self.src._walk()
        elif self.src is not None:
            for s in self.src:
                yield from s._walk()

    def __repr__(self) -> str:
        if self.alts is not None:
            return f"UPat.any({', '.join(map(repr, self.alts))})"
        parts = []
        if self.op is not None:
            parts.append(repr(self.op[0]) if len(self.op) == 1 else f"({', '.join(map(repr, self.op))})")
        if self.dtype is not None:
            parts.append(f"dtype={self.dtype[0]!r}" if len(self.dtype) == 1 else f"dtype={self.dtype!r}")
        if self.arg is not _ANY:
            parts.append(f"arg={self.arg!r}")
        if self.name is not None:
            parts.append(f"name={self.name!r}")
        if self.src is not None:
            parts.append(f"src={self.src!r}")
        if self.allow_any_len:
            parts.append("allow_any_len=True")
        return f"UPat({', '.join(parts)})"


def _as_upat(x: Any) -> UPat:
    if isinstance(x, UPat):
        return x
    if isinstance(x, (int, float, bool)):
        return UPat.const(None, x)
    raise TypeError(f"can't use {type(x).__name__} {x!r} in a UPat expression")


def _arg_eq(value: Any, wanted: Any) -> bool:
    """How a pattern's arg is compared: by identity for None, bools and Ops, else by `==`."""
    if wanted is None or isinstance(wanted, (Ops, bool)):
        return value is wanted
    return value is wanted or value == wanted


def _imatch(p: UPat, u: UOp, store: dict[str, UOp]) -> Iterator[dict[str, UOp]]:
    """Generate every binding under which `p` matches `u` (a copy of `store` extended per match)."""
    if p.alts is not None:
        for alt in p.alts:
            for st in _imatch(alt, u, store):
                if p.name is None:
                    yield st
                elif p.name not in st:
                    yield {**st, p.name: u}
                elif st[p.name] is u:
                    yield st
        return
    if p.op is not None and u.op not in p.op:
        return
    if p.dtype is not None and u.dtype not in p.dtype:
        return
    if p.arg is not _ANY and not _arg_eq(u.arg, p.arg):
        return
    if p.name is not None:
        if p.name in store:
            if store[p.name] is not u:
                return
        else:
            store = {**store, p.name: u}
    if p.src is None:
        yield store
        return
    if isinstance(p.src, UPat):
        yield from _imatch_seq([p.src] * len(u.src), u.src, store)
        return
    n = len(p.src)
    if isinstance(p.src, list):
        if len(u.src) != n:
            return
        for perm in itertools.permutations(p.src):
            yield from _imatch_seq(list(perm), u.src, store)
        return
    if len(u.src) != n and not (p.allow_any_len and len(u.src) >= n):
        return
    yield from _imatch_seq(list(p.src), u.src[:n], store)


def _imatch_seq(pats: Sequence[UPat], srcs: Sequence[UOp], store: dict[str, UOp]) -> Iterator[dict[str, UOp]]:
    if not pats:
        yield store
        return
    for st in _imatch(pats[0], srcs[0], store):
        yield from _imatch_seq(pats[1:], srcs[1:], st)


# ---------------------------------------------------------------------------------------------------------------
# compiling patterns into Python code


def _expand_alternatives(p: UPat, limit: int = 64) -> list[UPat] | None:
    """`p` as a list of alternative-free patterns (None when there would be more than `limit`)."""
    if p.alts is not None:
        out: list[UPat] = []
        for alt in p.alts:
            expanded = _expand_alternatives(alt, limit)
            if expanded is None:
                return None
            for e in expanded:
                if p.name is not None:
                    if e.name is not None and e.name != p.name:
                        return None  # two names on one node: leave it to the interpreter
                    e = e.named(p.name)
                out.append(e)
        return out if len(out) <= limit else None
    if p.src is None or isinstance(p.src, UPat):
        return [p]  # a repeated sub-pattern with alternatives is handled by a predicate
    child_options = []
    for s in p.src:
        expanded = _expand_alternatives(s, limit)
        if expanded is None:
            return None
        child_options.append(expanded)
    combos = list(itertools.islice(itertools.product(*child_options), limit + 1))
    if len(combos) > limit:
        return None
    out = []
    for combo in combos:
        q = p._copy()
        q.src = list(combo) if isinstance(p.src, list) else tuple(combo)
        out.append(q)
    return out


def _has_alts(p: UPat) -> bool:
    return any(q.alts is not None for q in p._walk())


class _CodeGen:
    """Emits the body of one dispatch function (all rules for one op) into `lines`."""

    def __init__(self, namespace: dict[str, Any]):
        self.ns = namespace
        self.lines: list[str] = []
        self.nvar = 0
        self._const_names: dict[int, str] = {}

    def const(self, obj: Any) -> str:
        name = self._const_names.get(id(obj))
        if name is None:
            name = f"_k{len(self.ns)}"
            self.ns[name] = obj
            self._const_names[id(obj)] = name
        return name

    def new_var(self) -> str:
        self.nvar += 1
        return f"v{self.nvar}"

    def node_steps(self, p: UPat, v: str, bound: dict[str, str], skip_op: bool = False) -> list[tuple[str, str]]:
        steps: list[tuple[str, str]] = []
        if p.op is not None and not skip_op:
            if len(p.op) == 1:
                steps.append(("if", f"{v}.op is {self.const(p.op[0])}"))
            else:
                steps.append(("if", f"{v}.op in {self.const(frozenset(p.op))}"))
        if p.dtype is not None:
            if len(p.dtype) == 1:
                k = self.const(p.dtype[0])
                steps.append(("if", f"({v}.dtype is {k} or {v}.dtype == {k})"))
            else:
                steps.append(("if", f"{v}.dtype in {self.const(p.dtype)}"))
        if p.arg is not _ANY:
            if p.arg is None or isinstance(p.arg, (Ops, bool)):
                steps.append(("if", f"{v}.arg is {self.const(p.arg)}"))
            else:
                k = self.const(p.arg)
                steps.append(("if", f"({v}.arg is {k} or {v}.arg == {k})"))
        if p.name is not None:
            if p.name in bound:
                steps.append(("if", f"{v} is {bound[p.name]}"))
            else:
                bound[p.name] = v
        return steps

    def src_steps(self, p: UPat, v: str, bound: dict[str, str]) -> list[tuple[str, str]]:
        if p.src is None:
            return []
        if isinstance(p.src, UPat):
            pred = _compile_predicate(p.src)
            return [("if", f"all(map({self.const(pred)}, {v}.src))")]
        n = len(p.src)
        steps: list[tuple[str, str]] = []
        if n == 0:
            return [("if", f"not {v}.src")]
        perm_pair = isinstance(p.src, list) and n == 2
        if perm_pair:  # named first so this unpack reads like an ordered rule's (shared between rules)
            a, b = self.new_var(), self.new_var()
        children = [self.new_var() for _ in range(n)]
        target = ", ".join(children) + ("," if n == 1 else "")
        if isinstance(p.src, list) and n > 1:
            steps.append(("if", f"len({v}.src) == {n}"))
            if perm_pair:
                steps.append(("set", f"{a}, {b} = {v}.src"))
                steps.append(("for", f"{target} in (({a}, {b}), ({b}, {a}))"))
            else:
                steps.append(("for", f"{target} in {self.const(itertools.permutations)}({v}.src)"))
        elif p.allow_any_len:
            steps.append(("if", f"len({v}.src) >= {n}"))
            steps.append(("set", f"{target} = {v}.src[:{n}]"))
        else:
            steps.append(("if", f"len({v}.src) == {n}"))
            steps.append(("set", f"{target} = {v}.src"))
        for child, var in zip(p.src, children):
            steps.extend(self.node_steps(child, var, bound))
        for child, var in zip(p.src, children):
            steps.extend(self.src_steps(child, var, bound))
        return steps

    def emit_shared(self, blocks: list[tuple[list[tuple[str, str]], list[str], str]]) -> None:
        """Emit rules in order as nested blocks; leading checks equal to the previous rule's are not repeated (a
        failed shared check skips every rule that needs it, and rule order is kept)."""
        prev: list[tuple[str, str]] = []
        for i, (steps, terminal, comment) in enumerate(blocks):
            shared = _shared_prefix(steps, prev)
            following = _shared_prefix(steps, blocks[i + 1][0]) if i + 1 < len(blocks) else 0
            separate = max(shared, following)  # steps the neighbours reuse stay on lines of their own
            indent = 1 + sum(1 for kind, _ in steps[:shared] if kind != "set")
            self.lines.append("    " * indent + comment)
            j = shared
            while j < len(steps):
                kind, text = steps[j]
                if kind == "if":
                    conds = [text]
                    if j >= separate:
                        while j + 1 < len(steps) and steps[j + 1][0] == "if":
                            j += 1
                            conds.append(steps[j][1])
                    self.lines.append("    " * indent + f"if {' and '.join(conds)}:")
                    indent += 1
                elif kind == "for":
                    self.lines.append("    " * indent + f"for {text}:")
                    indent += 1
                else:
                    self.lines.append("    " * indent + text)
                j += 1
            self.lines.extend("    " * indent + t for t in terminal)
            prev = steps

    def emit(self, steps: list[tuple[str, str]], terminal: list[str], indent: int) -> None:
        i = 0
        while i < len(steps):
            kind, text = steps[i]
            if kind == "if":
                conds = [text]
                while i + 1 < len(steps) and steps[i + 1][0] == "if":
                    i += 1
                    conds.append(steps[i][1])
                self.lines.append("    " * indent + f"if {' and '.join(conds)}:")
                indent += 1
            elif kind == "for":
                self.lines.append("    " * indent + f"for {text}:")
                indent += 1
            else:
                self.lines.append("    " * indent + text)
            i += 1
        self.lines.extend("    " * indent + t for t in terminal)


def _shared_prefix(a: list[tuple[str, str]], b: list[tuple[str, str]]) -> int:
    """How many leading steps two rules can share: equal steps, stopping before any permutation loop (sharing a
    loop would interleave the rules' permutations and change which rule wins)."""
    n = 0
    for x, y in zip(a, b):
        if x != y or x[0] == "for":
            break
        n += 1
    return n


_predicate_cache: dict[int, tuple[UPat, Callable[[UOp], bool]]] = {}


def _compile_predicate(p: UPat) -> Callable[[UOp], bool]:
    """A `node -> bool` function for a name-free pattern (used for repeated sources)."""
    cached = _predicate_cache.get(id(p))
    if cached is not None and cached[0] is p:
        return cached[1]
    if p.names() or _has_alts(p):

        def pred(u: UOp, _p: UPat = p) -> bool:
            return next(_imatch(_p, u, {}), None) is not None

    else:
        ns: dict[str, Any] = {}
        gen = _CodeGen(ns)
        steps = gen.node_steps(p, "u", {}) + gen.src_steps(p, "u", {})
        gen.lines.append("def _pred(u):")
        gen.emit(steps, ["return True"], 1)
        gen.lines.append("    return False")
        exec(compile("\n".join(gen.lines), "<upat predicate>", "exec"), ns)  # noqa: S102
        pred = ns["_pred"]
    _predicate_cache[id(p)] = (p, pred)
    return pred


@dataclass
class _Rule:
    pattern: UPat
    fn: Callable[..., UOp | None]
    index: int
    pass_ctx: bool = False
    pass_names: tuple[str, ...] = ()
    location: str = ""
    fallback: bool = False  # matched by the interpreter (names inside a repeated source)
    expansions: list[UPat] = field(default_factory=list)


def _rule_location(fn: Callable) -> str:
    code = getattr(fn, "__code__", None)
    if code is None:
        return repr(fn)
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"


def _analyse_rule(pattern: UPat, fn: Callable, index: int) -> _Rule:
    if not isinstance(pattern, UPat):
        raise TypeError(f"rule {index}: expected (UPat, function), got {type(pattern).__name__}")
    if not callable(fn):
        raise TypeError(f"rule {index} ({pattern!r}): the rewrite function is not callable")
    location = _rule_location(fn)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins: pass every name
        params = {}
    names = list(params)
    pass_ctx = bool(names) and names[0] == "ctx"
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    bound = pattern.names()
    pass_names = tuple(n for n in bound if var_kw or n in params or not params)
    expansions = _expand_alternatives(pattern)
    fallback = expansions is None or any(
        isinstance(q.src, UPat) and q.src.names() for e in (expansions or [pattern]) for q in e._walk()
    )
    for e in [pattern] if fallback else expansions or []:
        have = set(e.names()) if not fallback else set(bound)
        missing = [
            n
            for n, prm in params.items()
            if n not in have
            and not (pass_ctx and n == "ctx")
            and prm.default is inspect.Parameter.empty
            and prm.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        ]
        if missing:
            raise TypeError(f"rule {location}: the function needs {missing} but the pattern {e!r} binds {sorted(have)}")
    return _Rule(pattern, fn, index, pass_ctx, pass_names, location, fallback, expansions or [])


def _call_text(gen: _CodeGen, rule: _Rule, bound: dict[str, str]) -> str:
    args = ["ctx"] if rule.pass_ctx else []
    args += [f"{n}={bound[n]}" for n in rule.pass_names if n in bound]
    return f"{gen.const(rule.fn)}({', '.join(args)})"


def _fallback_call(rule: _Rule) -> Callable[[UOp, Any], UOp | None]:
    """An interpreted rule: tries every binding of the pattern, in order."""

    def run(u: UOp, ctx: Any) -> UOp | None:
        for st in _imatch(rule.pattern, u, {}):
            kwargs = {n: st[n] for n in rule.pass_names if n in st}
            r = rule.fn(ctx, **kwargs) if rule.pass_ctx else rule.fn(**kwargs)
            if r is not None and r is not u:
                return r
        return None

    return run


class PatternMatcher:
    """An ordered list of rewrite rules `(UPat, fn)`, compiled into one Python function per op on its first use.

    `fn(**names)` (or `fn(ctx, **names)` when its first parameter is named `ctx`) returns the replacement or None.
    Rules are tried in list order; the first one returning a new node wins. Matchers compose with `+`.

    >>> pm = PatternMatcher([(UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar(arg=1)]), lambda x: x)])
    >>> x = UOp.variable("x", 0, 9)
    >>> pm.rewrite(1 * x) is x, pm.rewrite(x * 2) is None
    (True, True)
    """

    def __init__(self, patterns: Sequence[tuple[UPat, Callable[..., Any]]], name: str | None = None):
        self.patterns: list[tuple[UPat, Callable[..., Any]]] = list(patterns)
        self.name = name
        self.rules = [_analyse_rule(p, fn, i) for i, (p, fn) in enumerate(self.patterns)]
        self._dispatch: dict[Ops, Callable[[UOp, Any], UOp | None]] | None = None
        self._traced: dict[Ops, Callable[[UOp, Any], UOp | None]] | None = None
        self._per_op: dict[Ops, list[tuple[_Rule, UPat | None]]] | None = None
        self._ops: frozenset[Ops] | None = None

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        names = [n for n in (self.name, other.name) if n]
        return PatternMatcher(self.patterns + other.patterns, "+".join(names) or None)

    def __len__(self) -> int:
        return len(self.patterns)

    def __repr__(self) -> str:
        return f"<PatternMatcher {self.name or ''} with {len(self.patterns)} rules>"

    @property
    def dispatch(self) -> dict[Ops, Callable[[UOp, Any], UOp | None]]:
        """`{op: fn(uop, ctx) -> replacement | None}`; each op's function is generated on its first call."""
        if self._dispatch is None:
            self._dispatch = self._compile(traced=False)
        return self._dispatch

    @property
    def traced_dispatch(self) -> dict[Ops, Callable[[UOp, Any], UOp | None]]:
        """Like `dispatch`, but every hit is reported to the active rewrite trace (DEBUG>=5 / TRACK_REWRITES)."""
        if self._traced is None:
            self._traced = self._compile(traced=True)
        return self._traced

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        """The first rule's replacement for `uop` (no recursion into sources), or None."""
        fn = self.dispatch.get(uop.op)
        return fn(uop, ctx) if fn is not None else None

    @property
    def ops(self) -> frozenset[Ops]:
        """The ops a rule of this matcher can match (the keys of `dispatch`): a pass over a graph holding none of
        them changes nothing.

        >>> PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("x"), UPat.cvar(arg=0)]), lambda x: x)]).ops
        frozenset({Ops.ADD})
        """
        if self._ops is None:
            self._ops = frozenset(self._rules_per_op())
        return self._ops

    def _rules_per_op(self) -> dict[Ops, list[tuple[_Rule, UPat | None]]]:
        """`{op: [(rule, alternative-free pattern or None for an interpreted rule), ...]}` in rule order."""
        if self._per_op is None:
            per_op: dict[Ops, list[tuple[_Rule, UPat | None]]] = {}
            for rule in self.rules:
                pats: list[UPat | None] = [None] if rule.fallback else list(rule.expansions)
                for pat in pats:
                    if pat is None:
                        ops = rule.pattern.op if rule.pattern.alts is None else None
                    else:
                        ops = pat.op
                    for op in _ALL_OPS if ops is None else ops:
                        per_op.setdefault(op, []).append((rule, pat))
            self._per_op = per_op
        return self._per_op

    def _compile(self, traced: bool) -> dict[Ops, Callable[[UOp, Any], UOp | None]]:
        """`{op: function}` where each function compiles the real matcher for its op on its first call and puts it
        in the dict in its place (a kernel meets a few dozen of the ~100 ops, so most are never generated)."""
        table: dict[Ops, Callable[[UOp, Any], UOp | None]] = {}
        for op in self._rules_per_op():
            table[op] = self._lazy_entry(table, op, traced)
        return table

    def _lazy_entry(
        self, table: dict[Ops, Callable[[UOp, Any], UOp | None]], op: Ops, traced: bool
    ) -> Callable[[UOp, Any], UOp | None]:
        def first_call(u: UOp, ctx: Any) -> UOp | None:
            fn = table[op] = self._compile_op(op, traced)
            return fn(u, ctx)

        return first_call

    def _emit_op(self, gen: _CodeGen, op: Ops, traced: bool) -> str:
        """Append the source of the matcher function for `op` to `gen.lines`; returns the function's name."""
        fname = f"match_{op.name}"
        gen.lines.append(f"def {fname}(u, ctx):")
        blocks: list[tuple[list[tuple[str, str]], list[str], str]] = []
        for rule, pat in self._rules_per_op()[op]:
            on_hit = (
                f"if r is not None and r is not u: return _hit(_pm, {rule.index}, u, r)"
                if traced
                else "if r is not None and r is not u: return r"
            )
            comment = f"# rule {rule.index}: {rule.location}"
            if pat is None:
                blocks.append(([], [f"r = {gen.const(_fallback_call(rule))}(u, ctx)", on_hit], comment))
                continue
            gen.nvar = 0  # deterministic names: rules with the same leading checks share them
            bound: dict[str, str] = {}
            steps = gen.node_steps(pat, "u", bound, skip_op=True) + gen.src_steps(pat, "u", bound)
            blocks.append((steps, [f"r = {_call_text(gen, rule, bound)}", on_hit], comment))
        gen.emit_shared(blocks)
        gen.lines.append("    return None")
        return fname

    def _filename(self, traced: bool, op: Ops | None = None) -> str:
        where = f"{self.name or id(self)}{'' if op is None else ':' + op.name}"
        return f"<PatternMatcher {where}{' traced' if traced else ''}>"

    def _compile_op(self, op: Ops, traced: bool) -> Callable[[UOp, Any], UOp | None]:
        ns: dict[str, Any] = {"_hit": _report_hit, "_pm": self}
        gen = _CodeGen(ns)
        fname = self._emit_op(gen, op, traced)
        source = "\n".join(gen.lines) + "\n"
        filename = self._filename(traced, op)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), ns)  # noqa: S102
        return ns[fname]

    def source(self) -> str:
        """The generated matching code of every op (for debugging the compiler)."""
        gen = _CodeGen({"_hit": _report_hit, "_pm": self})
        for op in self._rules_per_op():
            self._emit_op(gen, op, traced=False)
        return "\n".join(gen.lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# tracing


@dataclass
class RewriteTrace:
    """One recorded rewrite pass: its name, input and output graphs, rule hit counts and (level 2) every step."""

    name: str | None
    input: UOp
    output: UOp
    hits: dict[str, int]
    seconds: float
    steps: list[tuple[str, UOp, UOp]] = field(default_factory=list)


rewrite_traces: list[RewriteTrace] = []  # filled while TRACK_REWRITES >= 1


def clear_rewrite_traces() -> None:
    """Forget all recorded rewrite passes."""
    rewrite_traces.clear()


class _PassRecorder:
    def __init__(self, keep_steps: bool):
        self.hits: dict[tuple[int, int], int] = {}
        self.locations: dict[tuple[int, int], str] = {}
        self.keep_steps = keep_steps
        self.steps: list[tuple[str, UOp, UOp]] = []


_recorders: list[_PassRecorder] = []


def _report_hit(pm: PatternMatcher, index: int, before: UOp, after: UOp) -> UOp:
    if _recorders:
        rec = _recorders[-1]
        key = (id(pm), index)
        rec.hits[key] = rec.hits.get(key, 0) + 1
        if key not in rec.locations:
            rule = pm.rules[index]
            rec.locations[key] = f"{rule.location} {rule.pattern!r}"
        if rec.keep_steps:
            rec.steps.append((rec.locations[key], before, after))
    return after


# ---------------------------------------------------------------------------------------------------------------
# graph_rewrite


def _bad_result(name: str | None, node: UOp, result: Any) -> None:
    raise RewriteError(
        f"rewrite pass {name!r}: a rule for {node.op} returned {type(result).__name__} {result!r}, not a UOp or None"
    )


class _InProgress:
    """The `replace` entry of a node whose rewrite is under way: meeting it again means a rule built a cycle."""

    __slots__ = ()


_IN_PROGRESS: Any = _InProgress()


def _cycle_error(name: str | None, node: UOp) -> RewriteError:
    return RewriteError(
        f"rewrite pass {name!r}: a rule built a cycle through {node.op} (it returned a graph containing the node "
        "being rewritten)"
    )


def _rewrite_sources_first(
    root: UOp, dispatch: dict[Ops, Callable], ctx: Any, replace: dict[UOp, UOp], name: str | None
) -> UOp:
    # The stack holds a bare UOp for "visit this node" and a tuple `(node, rebuilt, replacement)` for "its sources
    # are done" (`rebuilt` None) or "its replacement is done". A node being worked on maps to `_IN_PROGRESS` in
    # `replace` (one dict serves as both the result map and the cycle check).
    get = dispatch.get
    seen = replace.get
    busy = _IN_PROGRESS
    stack: list[Any] = [root]
    push, pop = stack.append, stack.pop
    while stack:
        entry = pop()
        if type(entry) is UOp:
            n = entry
            got = seen(n)
            if got is not None:
                if got is busy:
                    raise _cycle_error(name, n)
                continue
            src = n.src
            if not src:  # a leaf: match it right away (the common no-match case needs no bookkeeping)
                f = get(n.op)
                r = f(n, ctx) if f is not None else None
                if r is None:
                    replace[n] = n
                    continue
                if type(r) is not UOp:
                    _bad_result(name, n, r)
                replace[n] = busy
                push((n, n, r))
                push(r)
                continue
            replace[n] = busy
            push((n, None, None))
            for s in reversed(src):
                got = seen(s)
                if got is None:
                    push(s)
                elif got is busy:
                    raise _cycle_error(name, s)
            continue
        n, nn, r = entry
        if nn is None:  # the sources are rewritten: rebuild the node if one changed, then match it
            src = n.src
            new_src = tuple([replace[s] for s in src])
            nn = n
            if new_src != src:  # element-wise identity: UOps compare by identity
                nn = UOp(n.op, n.dtype, new_src, n.arg, n.tag)
                got = seen(nn)
                if got is not None:
                    if got is busy:
                        raise _cycle_error(name, nn)
                    replace[n] = got
                    continue
            f = get(nn.op)
            r = f(nn, ctx) if f is not None else None
            if r is None:
                replace[n] = nn
                if nn is not n:
                    replace[nn] = nn
                continue
            if type(r) is not UOp:
                _bad_result(name, nn, r)
            push((n, nn, r))
            push(r)
        else:  # the replacement is rewritten
            res = replace[r]
            replace[n] = res
            if nn is not n:
                replace[nn] = res
    return replace[root]


def _rewrite_node_first(
    root: UOp, dispatch: dict[Ops, Callable], ctx: Any, replace: dict[UOp, UOp], name: str | None
) -> UOp:
    get = dispatch.get
    active: set[UOp] = set()
    stack: list[tuple[UOp, int, Any]] = [(root, 0, None)]
    while stack:
        n, stage, extra = stack.pop()
        if stage == 0:
            if n in replace:
                continue
            if n in active:
                raise RewriteError(f"rewrite pass {name!r}: a rule built a cycle through {n.op}")
            cur = n
            for _ in range(10000):
                f = get(cur.op)
                r = f(cur, ctx) if f is not None else None
                if r is None:
                    break
                if type(r) is not UOp:
                    _bad_result(name, cur, r)
                cur = r
                if cur in replace:
                    break
            else:
                raise RewriteError(f"rewrite pass {name!r}: no fixed point after 10000 rewrites of one node")
            if cur is not n and cur in replace:
                replace[n] = replace[cur]
                continue
            active.add(n)
            stack.append((n, 1, cur))
            for s in reversed(cur.src):
                if s not in replace:
                    stack.append((s, 0, None))
        elif stage == 1:
            cur = extra
            src = cur.src
            nn = cur
            if src:
                new_src = tuple([replace[s] for s in src])
                for a, b in zip(src, new_src):
                    if a is not b:
                        nn = UOp(cur.op, cur.dtype, new_src, cur.arg, cur.tag)
                        break
            if nn is cur:
                replace[n] = cur
                replace[cur] = cur
                active.discard(n)
            elif nn in replace:
                replace[n] = replace[nn]
                active.discard(n)
            else:
                stack.append((n, 2, nn))
                stack.append((nn, 0, None))
        else:
            replace[n] = replace[extra]
            active.discard(n)
    return replace[root]


# The ops of the graphs recent passes returned (a superset: every node a pass finished with), so that the next pass
# over the same graph can be skipped when its matcher matches none of them. Passes run back to back on one graph,
# so this costs one set per pass and no extra walk; weak keys: an entry lives as long as its graph.
_graph_ops: weakref.WeakKeyDictionary[UOp, frozenset[Ops]] = weakref.WeakKeyDictionary()


def _run_pass(
    sink: UOp,
    pm: PatternMatcher,
    ctx: Any,
    bottom_up: bool,
    name: str | None,
    spec: str | None,
    replace: dict[UOp, UOp],
) -> UOp:
    if not isinstance(sink, UOp):
        raise TypeError(f"graph_rewrite needs a UOp, got {type(sink).__name__}")
    tracing = DEBUG >= 5 or TRACK_REWRITES >= 1
    if not tracing:
        known = _graph_ops.get(sink)
        if known is not None and known.isdisjoint(pm.ops):
            out = sink  # no node has an op any rule matches: the pass would change nothing (`replace` stays empty)
        else:
            runner = _rewrite_node_first if bottom_up else _rewrite_sources_first
            out = runner(sink, pm.dispatch, ctx, replace, name)
            _graph_ops[out] = frozenset([u.op for u in replace.values()])
    else:
        rec = _PassRecorder(keep_steps=TRACK_REWRITES >= 2)
        _recorders.append(rec)
        start = time.perf_counter()
        try:
            runner = _rewrite_node_first if bottom_up else _rewrite_sources_first
            out = runner(sink, pm.traced_dispatch, ctx, replace, name)
        finally:
            _recorders.pop()
        seconds = time.perf_counter() - start
        hits = {rec.locations[k]: v for k, v in sorted(rec.hits.items(), key=lambda kv: -kv[1])}
        if DEBUG >= 5:
            n_in, n_out = len(sink.toposort()), len(out.toposort())
            print(
                f"rewrite {name or '<unnamed>'}: {n_in} -> {n_out} nodes in {seconds * 1e3:.2f} ms, "
                f"{sum(hits.values())} rule hits"
            )
            for loc, count in hits.items():
                print(f"  {count:7d}  {loc}")
        if TRACK_REWRITES >= 1:
            rewrite_traces.append(RewriteTrace(name, sink, out, hits, seconds, rec.steps))
    if SPEC >= 1 and name is not None:
        from tinycore.uop.spec import type_verify

        type_verify(out, spec or "any", pass_name=name)
    return out


def graph_rewrite(
    sink: UOp,
    pm: PatternMatcher,
    ctx: Any = None,
    bottom_up: bool = False,
    name: str | None = None,
    spec: str | None = None,
) -> UOp:
    """Rewrite the graph under `sink` with `pm` until no rule matches anywhere (a fixed point).

    Default order: a node is matched after its sources have been rewritten, and every replacement is itself
    rewritten completely. `bottom_up=True` (tinygrad's name) matches each node *before* its sources, repeatedly
    until no rule applies, then rewrites the sources of the result (use it when rules must see the original
    sources). Iterative: graphs of any depth work. `name` makes the pass traceable (DEBUG>=5 prints it,
    TRACK_REWRITES records it) and, with SPEC=1, verified with the `spec` stage ("tensor", "kernel", "program"
    or "any", the default) right after it runs.

    >>> x = UOp.variable("x", 0, 9)
    >>> pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("a"), UPat.cvar(arg=0)]), lambda a: a)])
    >>> graph_rewrite(((x + 0) + 0) * 3, pm) is x * 3
    True
    """
    return _run_pass(sink, pm, ctx, bottom_up, name, spec, {})


def graph_rewrite_map(
    sink: UOp,
    pm: PatternMatcher,
    ctx: Any = None,
    bottom_up: bool = False,
    name: str | None = None,
    input_map: dict[UOp, UOp] | None = None,
    spec: str | None = None,
) -> dict[UOp, UOp]:
    """Like `graph_rewrite`, but return `{original node: rewritten node}` for every node of the original graph
    that was visited (with `bottom_up`, nodes under a replaced node are not visited). With `input_map` (the result
    of an earlier pass), the maps are composed: keys stay the earliest nodes.

    >>> x = UOp.variable("x", 0, 9)
    >>> pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("a"), UPat.cvar(arg=0)]), lambda a: a)])
    >>> m = graph_rewrite_map((x + 0) * 3, pm)
    >>> m[x + 0] is x, m[(x + 0) * 3] is x * 3
    (True, True)
    """
    replace: dict[UOp, UOp] = {}
    _run_pass(sink, pm, ctx, bottom_up, name, spec, replace)
    if replace:
        result = {k: replace[k] for k in sink.toposort() if k in replace}
    else:  # the pass was skipped (nothing it could match): every node maps to itself
        result = {k: k for k in sink.toposort()}
    if input_map is not None:
        return {k: result.get(v, v) for k, v in input_map.items()}
    return result
