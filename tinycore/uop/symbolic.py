"""Symbolic simplification: rule lists for `graph_rewrite`, and index dtype lowering.

- `symbolic_simple`: constant folding with exact C semantics per dtype, identities, canonical operand order.
- `symbolic`: `symbolic_simple` plus value-range folding, linear normalization (reassociating constants, combining
  like terms), range-aware integer division/modulo, comparison and `where` folding. `UOp.simplify()` runs it.
- `symbolic_flat`: `symbolic` plus distributing constant multiplications over sums (flat index expressions).
- `lower_index_dtype(sink)`: give every `dtypes.index` node int32, or int64 where a value range needs it.

Integer rules are exact under C semantics (IDIV truncates toward zero, MOD takes the dividend's sign, sized ints
wrap); a rule that needs non-negative operands checks it with `vmin`/`vmax`. Float expressions only get constant
folding and identities that are exact in IEEE arithmetic (except `x + 0.0 -> x`, which turns -0.0 into -0.0 where
C would give +0.0).

>>> x, y = UOp.variable("x", 0, 15), UOp.variable("y", 0, 3)
>>> ((x * 4 + y) // 4).simplify() is x, ((x * 4 + y) % 4).simplify() is y
(True, True)
>>> (x * 3 + x * 4).simplify() is x * 7, ((x + 3) + 4).simplify() is x + 7
(True, True)
"""

from __future__ import annotations

import math
from typing import Any

from tinycore.dtype import DType, PtrDType, dtypes
from tinycore.uop.ops import GroupOp, Ops, UOp, _dtype_range, _trunc_div, cast_value, exec_alu
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite

__all__ = ["lower_index_dtype", "pm_lower_index_dtype", "symbolic", "symbolic_flat", "symbolic_simple"]

# ---------------------------------------------------------------------------------------------------------------
# helpers


def _is_index(dtype: DType) -> bool:
    """`dtype is dtypes.index`, cheaply (dtype equality is a Python-level call; the index dtype is a singleton)."""
    return dtype is dtypes.index or (dtype.priority == _INDEX_PRIORITY and dtype == dtypes.index)


_INDEX_PRIORITY = dtypes.index.priority


def _is_int(dtype: DType) -> bool:
    """A scalar integer dtype (index included, bool and pointers excluded)."""
    return dtype.count == 1 and dtypes.is_int(dtype) and not isinstance(dtype, PtrDType)


def _is_intlike(dtype: DType) -> bool:
    return dtype.count == 1 and (dtypes.is_int(dtype) or dtype == dtypes.bool) and not isinstance(dtype, PtrDType)


def _wrap(value: int, dtype: DType) -> int:
    """`value` as the signed representative of `dtype`'s ring (no change for index)."""
    if _is_index(dtype):
        return value
    bits = 8 * dtype.itemsize
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _const(dtype: DType, value: Any, like: UOp | None = None) -> UOp:
    """A constant of `dtype`; tensor-level (with `like`'s DEVICE) when `like` is a tensor-level constant."""
    if like is not None and like.op is Ops.CONST and like.src:
        return UOp(Ops.CONST, dtype, like.src, cast_value(value, dtype))
    return UOp.const(dtype, value)


def _in_dtype(value: int, dtype: DType) -> bool:
    lo, hi = _dtype_range(dtype)
    return lo <= value <= hi


def _exact(dtype: DType) -> bool:
    """Rules that reason about exact integer values (splitting a division, dividing a comparison by a gcd) only
    run on `dtypes.index`: its arithmetic never wraps. On sized ints an intermediate may wrap, and a rewritten
    expression may wrap where the original didn't, so only rules that hold in modular arithmetic (or that use
    sound value ranges) apply to them."""
    return _is_index(dtype)


_LINEAR_OR_CONST = frozenset({Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL, Ops.CONST})


def _decompose(u: UOp, distribute: bool, limit: int = 48) -> tuple[dict[UOp, int], int] | None:
    """`u` as `{term: coefficient}, constant` through ADD/SUB/NEG and multiplication by constants (None when the
    linear part has more than `limit` nodes). Without `distribute`, a sum multiplied by a constant is one term."""
    dtype = u.dtype
    terms: dict[UOp, int] = {}
    const = 0
    stack: list[tuple[UOp, int]] = [(u, 1)]
    visited = 0
    while stack:
        n, c = stack.pop()
        visited += 1
        if visited > limit:
            return None
        op = n.op
        if op is Ops.CONST:
            const += c * n.arg
        elif op is Ops.ADD:
            stack.append((n.src[1], c))
            stack.append((n.src[0], c))
        elif op is Ops.SUB:
            stack.append((n.src[1], -c))
            stack.append((n.src[0], c))
        elif op is Ops.NEG:
            stack.append((n.src[0], -c))
        elif op is Ops.MUL and (n.src[1].op is Ops.CONST or n.src[0].op is Ops.CONST):
            k, other = (n.src[1].arg, n.src[0]) if n.src[1].op is Ops.CONST else (n.src[0].arg, n.src[1])
            if not distribute and (other.op is Ops.ADD or other.op is Ops.SUB):
                terms[other] = terms.get(other, 0) + c * k
            else:
                stack.append((other, c * k))
        else:
            terms[n] = terms.get(n, 0) + c
    return {t: _wrap(c, dtype) for t, c in terms.items()}, _wrap(const, dtype)


def _fuse_divmod_terms(terms: dict[UOp, int], dtype: DType) -> None:
    """`(x // c) * (c * k) + (x % c) * k -> x * k`, in place (C semantics: always exact)."""
    for t in list(terms):
        if t not in terms or t.op is not Ops.IDIV or t.src[1].op is not Ops.CONST or t.src[1].arg <= 0:
            continue
        m = UOp(Ops.MOD, t.dtype, t.src)
        if m in terms and terms[m] != 0 and _wrap(terms[t] - terms[m] * t.src[1].arg, dtype) == 0:
            k = terms.pop(m)
            del terms[t]
            x = t.src[0]
            terms[x] = _wrap(terms.get(x, 0) + k, dtype)


def _build(terms: dict[UOp, int] | list[tuple[UOp, int]], const: int, dtype: DType) -> UOp:
    """The canonical sum: positive terms, then negative ones, then the constant (`5 - t` when that is smaller)."""
    items = [(t, _wrap(c, dtype)) for t, c in (terms.items() if isinstance(terms, dict) else terms)]
    items = [(t, c) for t, c in items if c != 0]
    unsigned = dtypes.is_unsigned(dtype)
    pos = [(t, c) for t, c in items if c > 0]
    neg = [(t, c) for t, c in items if c < 0]
    const = _wrap(const, dtype)
    expr: UOp | None = None
    if not pos and neg and const != 0 and neg[0][1] == -1:
        expr = UOp(Ops.SUB, dtype, (UOp.const(dtype, const), neg[0][0]))
        neg, const = neg[1:], 0
    for t, c in pos + neg:
        if expr is None:
            if c == 1:
                expr = t
            elif c == -1:
                expr = UOp(Ops.NEG, dtype, (t,))
            else:
                expr = UOp(Ops.MUL, dtype, (t, UOp.const(dtype, c)))
        elif c == 1:
            expr = UOp(Ops.ADD, dtype, (expr, t))
        elif c == -1:
            expr = UOp(Ops.SUB, dtype, (expr, t))
        elif c < 0 and unsigned:
            expr = UOp(Ops.SUB, dtype, (expr, UOp(Ops.MUL, dtype, (t, UOp.const(dtype, -c)))))
        else:
            expr = UOp(Ops.ADD, dtype, (expr, UOp(Ops.MUL, dtype, (t, UOp.const(dtype, c)))))
    if expr is None:
        return UOp.const(dtype, const)
    if const != 0:
        if const < 0 and unsigned:
            return UOp(Ops.SUB, dtype, (expr, UOp.const(dtype, -const)))
        return UOp(Ops.ADD, dtype, (expr, UOp.const(dtype, const)))
    return expr


def _smaller(new: UOp | None, old: UOp) -> UOp | None:
    """`new` if it is a different expression whose tree is no larger than `old`'s, else None."""
    if new is None or new is old or new.tree_size > old.tree_size:
        return None
    return new


# ---------------------------------------------------------------------------------------------------------------
# constant folding and identities


def _fold_alu(x: UOp) -> UOp | None:
    operand_dtype = x.src[-1].dtype if x.op in GroupOp.Comparison or x.op is Ops.WHERE else x.dtype
    if (x.op is Ops.IDIV or x.op is Ops.MOD) and not dtypes.is_float(operand_dtype):
        divisor = x.src[1].arg
        if divisor == 0 or (isinstance(divisor, tuple) and 0 in divisor):
            return None  # undefined in C: leave it for the device
    if x.op is Ops.THREEFRY and operand_dtype != dtypes.uint64:
        return None
    value = exec_alu(x.op, operand_dtype, [s.arg for s in x.src])
    return _const(x.dtype, value, like=x.src[0])


def _fold_cast(x: UOp, c: UOp) -> UOp | None:
    if x.dtype.count > 1 or isinstance(x.dtype, PtrDType) or x.dtype == dtypes.void:
        return None
    return _const(x.dtype, cast_value(c.arg, x.dtype), like=c)


def _fold_bitcast(x: UOp, c: UOp) -> UOp | None:
    if x.dtype.count > 1 or c.dtype.count > 1 or x.dtype.itemsize != c.dtype.itemsize:
        return None
    try:
        return _const(x.dtype, cast_value(c.arg, x.dtype, bitcast_from=c.dtype), like=c)
    except (TypeError, ValueError):
        return None


def _int_zero(x: UOp) -> UOp | None:
    return x.const_like(0) if _is_intlike(x.dtype) else None


def _swap_const(x: UOp, c: UOp, y: UOp) -> UOp | None:
    """Commutative op with the constant first: put the constant second (canonical order helps CSE)."""
    if y.op is Ops.CONST or y.op is Ops.VCONST:
        return None
    return UOp(x.op, x.dtype, (y, c), x.arg, x.tag)


def _neg_divisor(x: UOp, c: UOp) -> UOp | None:
    """`x % -c -> x % c` (C: the remainder takes the dividend's sign)."""
    if not _is_int(x.dtype) or c.arg >= 0 or not _in_dtype(-c.arg, x.dtype):
        return None
    return UOp(Ops.MOD, x.dtype, (x, UOp.const(x.dtype, -c.arg)))


def _nonzero(x: UOp) -> bool:
    return x.vmin > 0 or x.vmax < 0


_x = UPat.var("x")
_y = UPat.var("y")
_c = UPat.cvar("c", vec=False)
_INT_LIKE = (*(d for d in dtypes.fields().values() if dtypes.is_int(d)), dtypes.bool)

symbolic_simple = PatternMatcher(
    [
        # constant folding
        (UPat(GroupOp.ALU, src=UPat((Ops.CONST, Ops.VCONST)), name="x"), _fold_alu),
        (UPat(Ops.CAST, src=(UPat.cvar("c", vec=False),), name="x"), _fold_cast),
        (UPat(Ops.BITCAST, src=(UPat.cvar("c", vec=False),), name="x"), _fold_bitcast),
        # identities of + - * // %
        (_x + UPat.const(None, 0), lambda x: x),
        (UPat(Ops.SUB, src=(_x, UPat.const(None, 0))), lambda x: x),
        (_x * UPat.const(None, 1), lambda x: x),
        (_x * UPat.const(None, 0), lambda x: x.const_like(0) if _is_intlike(x.dtype) else None),
        (_x * UPat.const(None, -1), lambda x: UOp(Ops.NEG, x.dtype, (x,)) if x.dtype != dtypes.bool else None),
        (UPat(Ops.IDIV, src=(_x, UPat.const(None, 1))), lambda x: x if _is_int(x.dtype) else None),
        (UPat(Ops.IDIV, src=(_x, UPat.const(None, -1))), lambda x: -x if _is_int(x.dtype) else None),
        (UPat(Ops.MOD, src=(_x, UPat.cvar("c", vec=False))), lambda x, c: _neg_divisor(x, c)),
        (UPat(Ops.MOD, src=(_x, UPat.const(None, 1))), lambda x: _int_zero(x)),
        (UPat(Ops.SUB, src=(_x, _x)), lambda x: _int_zero(x)),
        (UPat(Ops.SUB, src=(UPat.const(None, 0), _x)), lambda x: -x if _is_int(x.dtype) else None),
        (_x + UPat(Ops.NEG, src=(_y,)), lambda x, y: UOp(Ops.SUB, x.dtype, (x, y))),
        (UPat(Ops.SUB, src=(_x, UPat(Ops.NEG, src=(_y,)))), lambda x, y: UOp(Ops.ADD, x.dtype, (x, y))),
        (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(_x,)),)), lambda x: x),
        (UPat(Ops.IDIV, src=(_x, _x)), lambda x: x.const_like(1) if _is_int(x.dtype) and _nonzero(x) else None),
        (UPat(Ops.MOD, src=(_x, _x)), lambda x: x.const_like(0) if _is_int(x.dtype) and _nonzero(x) else None),
        # idempotent and self-inverse ops
        (UPat((Ops.MAX, Ops.AND, Ops.OR), src=(_x, _x)), lambda x: x),
        (UPat(Ops.XOR, src=(_x, _x)), lambda x: _int_zero(x)),
        (UPat(Ops.CMPLT, src=(_x, _x)), lambda x: UOp.const(dtypes.bool, False) if _is_intlike(x.dtype) else None),
        (UPat(Ops.CMPNE, src=(_x, _x)), lambda x: UOp.const(dtypes.bool, False) if _is_intlike(x.dtype) else None),
        (UPat(Ops.CMPEQ, src=(_x, _x)), lambda x: UOp.const(dtypes.bool, True) if _is_intlike(x.dtype) else None),
        # booleans
        (UPat.var("x", dtypes.bool) & UPat.const(dtypes.bool, True), lambda x: x),
        (UPat.var("x", dtypes.bool) & UPat.const(dtypes.bool, False), lambda x: x.const_like(False)),
        (UPat.var("x", dtypes.bool) | UPat.const(dtypes.bool, False), lambda x: x),
        (UPat.var("x", dtypes.bool) | UPat.const(dtypes.bool, True), lambda x: x.const_like(True)),
        (UPat.var("x", dtypes.bool).ne(UPat.const(dtypes.bool, False)), lambda x: x),
        (UPat.var("x", dtypes.bool).eq(UPat.const(dtypes.bool, True)), lambda x: x),
        (UPat.var("x", dtypes.bool).ne(True).ne(True), lambda x: x),
        # where
        (UPat(Ops.WHERE, src=(UPat.const(dtypes.bool, True), _x, _y)), lambda x, y: x),
        (UPat(Ops.WHERE, src=(UPat.const(dtypes.bool, False), _x, _y)), lambda x, y: y),
        (UPat(Ops.WHERE, src=(UPat.var("g"), _x, _x)), lambda g, x: x),
        (
            UPat(Ops.WHERE, src=(UPat.var("g"), UPat.const(dtypes.bool, True), UPat.const(dtypes.bool, False))),
            lambda g: g,
        ),
        (
            UPat(Ops.WHERE, src=(UPat.var("g"), UPat.const(dtypes.bool, False), UPat.const(dtypes.bool, True))),
            lambda g: g.ne(True),
        ),
        (
            UPat(Ops.WHERE, src=(UPat.var("g"), UPat(Ops.WHERE, src=(UPat.var("g"), _x, UPat.var())), _y)),
            lambda g, x, y: g.where(x, y),
        ),
        (
            UPat(Ops.WHERE, src=(UPat.var("g"), _x, UPat(Ops.WHERE, src=(UPat.var("g"), UPat.var(), _y)))),
            lambda g, x, y: g.where(x, y),
        ),
        # casts
        (UPat(Ops.CAST, name="c", src=(_x,)), lambda c, x: x if c.dtype == x.dtype else None),
        # canonical order: constants second in commutative ops
        (UPat(GroupOp.Commutative, src=(UPat.cvar("c"), _y), name="x"), _swap_const),
    ],
    name="symbolic_simple",
)

# ---------------------------------------------------------------------------------------------------------------
# value ranges, linear normalization, division and modulo, comparisons


def _fold_range(x: UOp) -> UOp | None:
    """An integer/bool ALU node whose value range is one value is that constant."""
    if not _is_intlike(x.dtype):
        return None
    lo, hi = x._min_max
    return UOp.const(x.dtype, lo) if lo == hi else None


def _normalize_linear(x: UOp) -> UOp | None:
    """Reassociate constants and combine like terms of an integer sum: `(x*3 + 2) + x*4 + 5 -> x*7 + 7`."""
    if not _is_int(x.dtype):
        return None
    if x.op is Ops.MUL:
        if x.src[1].op is not Ops.CONST:
            if x.src[0].op is not Ops.CONST:
                return None
        elif x.src[0].op not in _LINEAR_OR_CONST and x.src[1].arg not in (0, 1, -1):
            return None  # t * c with an atomic t: already canonical
    elif x.op is Ops.ADD:
        a, b = x.src
        if a.op not in _LINEAR_OR_CONST and (
            b.op is Ops.CONST and b.arg != 0 or b.op not in _LINEAR_OR_CONST and a is not b
        ):
            return None  # t + c or t + u with atomic terms: already canonical
    if hasattr(x, "_canon"):
        return None  # normalized before: nothing to do (a pure function of the node, so safe to remember)
    for distribute in (True, False):
        dec = _decompose(x, distribute)
        if dec is None:
            return None
        terms, const = dec
        _fuse_divmod_terms(terms, x.dtype)
        new = _build(terms, const, x.dtype)
        if new is x:
            break
        best = _smaller(new, x)
        if best is not None:
            object.__setattr__(best, "_canon", True)  # every result is a fixed point of this rule
            return best
    object.__setattr__(x, "_canon", True)
    return None


def _divmod_candidates(d: UOp) -> list[UOp]:
    """Equivalent (C-semantics) forms of `x // c` or `x % c` with a positive constant `c`."""
    x, c = d.src[0], d.src[1].arg
    is_div = d.op is Ops.IDIV
    dtype = d.dtype
    lo, hi = x.vmin, x.vmax
    out: list[UOp] = []
    # 1. the value range decides the quotient
    q_lo, q_hi = _trunc_div(lo, c), _trunc_div(hi, c)
    if q_lo == q_hi:
        if is_div:
            return [UOp.const(dtype, q_lo)]
        if q_lo == 0:
            return [x]
        dec = _decompose(x, True)
        if dec is not None:  # x - q*c: the remainder is representable, so modular arithmetic gets it exactly
            out.append(_build(dec[0], dec[1] - q_lo * c, dtype))
    if not _exact(dtype):
        return out
    dec = _decompose(x, True)
    if dec is None:
        return out
    terms, k = dec
    if not terms:
        return out
    # 2. a common factor of every coefficient, the constant and the divisor
    g = math.gcd(c, k, *terms.values())
    if g > 1:
        inner = _build({t: a // g for t, a in terms.items()}, k // g, dtype)
        c2 = c // g
        if is_div:
            out.append(inner if c2 == 1 else UOp(Ops.IDIV, dtype, (inner, UOp.const(dtype, c2))))
        else:
            out.append(
                UOp.const(dtype, 0)
                if c2 == 1
                else UOp(Ops.MUL, dtype, (UOp(Ops.MOD, dtype, (inner, UOp.const(dtype, c2))), UOp.const(dtype, g)))
            )
    # 3. split off the multiples of c: (c*q + r) // c == q + r // c when the dividend and r have one sign
    if lo >= 0:
        qs = {t: a // c for t, a in terms.items()}
        qk = k // c
    elif hi <= 0:
        qs = {t: -((-a) // c) for t, a in terms.items()}
        qk = -((-k) // c)
    else:
        qs = {}
        qk = 0
        if all(a % c == 0 for a in terms.values()) and k % c == 0:  # exact division: any sign
            out.append(_build({t: a // c for t, a in terms.items()}, k // c, dtype) if is_div else UOp.const(dtype, 0))
    if qs and (any(qs.values()) or qk):
        quot = _build(qs, qk, dtype)
        rem = _build({t: a - qs[t] * c for t, a in terms.items()}, k - qk * c, dtype)
        r_lo, r_hi = rem.vmin, rem.vmax
        if lo >= 0 and r_lo >= 0 or hi <= 0 and r_hi <= 0:
            if -c < r_lo and r_hi < c:
                out.append(quot if is_div else rem)
            elif is_div:
                out.append(_build([(quot, 1), (UOp(Ops.IDIV, dtype, (rem, d.src[1])), 1)], 0, dtype))
            else:
                out.append(UOp(Ops.MOD, dtype, (rem, d.src[1])))
    # 4. a factor g of c shared by the large terms, the rest in [0, g): (g*B + s) // c == B // (c/g)
    if lo >= 0:
        for g in sorted({math.gcd(a, c) for a in terms.values()} - {1, c}, reverse=True):
            big = {t: a // g for t, a in terms.items() if a % g == 0}
            small = _build([(t, a) for t, a in terms.items() if a % g != 0], k % g, dtype)
            if not big or small.vmin < 0 or small.vmax >= g:
                continue
            big_expr = _build(big, k // g, dtype)
            c2 = UOp.const(dtype, c // g)
            if is_div:
                out.append(UOp(Ops.IDIV, dtype, (big_expr, c2)))
            else:
                scaled = UOp(Ops.MUL, dtype, (UOp(Ops.MOD, dtype, (big_expr, c2)), UOp.const(dtype, g)))
                out.append(_build([(scaled, 1), (small, 1)], 0, dtype))
            break
    return out


def _fold_divmod(d: UOp, x: UOp, c: UOp) -> UOp | None:
    if not _is_int(d.dtype) or c.arg <= 0:
        return None
    best: UOp | None = None
    for cand in _divmod_candidates(d):
        if cand is not d and cand.tree_size <= d.tree_size and (best is None or cand.tree_size < best.tree_size):
            best = cand
    return best


def _nested_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """`x // a // b -> x // (a*b)` for positive a, b (exact under truncation too)."""
    if not _is_int(x.dtype) or c1.arg <= 0 or c2.arg <= 0 or not _in_dtype(c1.arg * c2.arg, x.dtype):
        return None
    return UOp(Ops.IDIV, x.dtype, (x, UOp.const(x.dtype, c1.arg * c2.arg)))


def _nested_mod(x: UOp, m: UOp, c: UOp) -> UOp | None:
    """`(x % m) % c -> x % c` when c divides m (positive constants)."""
    if not _is_int(x.dtype) or m.arg <= 0 or c.arg <= 0 or m.arg % c.arg != 0:
        return None
    return UOp(Ops.MOD, x.dtype, (x, c))


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _fold_cmp_const(cmp: UOp, lhs: UOp, c: UOp) -> UOp | None:
    """`sum(a_i * t_i) + k  <op>  c`: move the constant, divide by the coefficients' gcd, flip a lone -t."""
    dtype = lhs.dtype
    if not _is_int(dtype):
        return None
    dec = _decompose(lhs, True)
    if dec is None or not dec[0]:
        return None
    terms, k = dec
    exact = _exact(dtype)
    r = c.arg - k
    if cmp.op is Ops.CMPLT:
        if not exact:
            return None
        g = math.gcd(*terms.values())
        if g > 1:
            terms = {t: a // g for t, a in terms.items()}
            r = _ceil_div(r, g)
        if len(terms) == 1 and next(iter(terms.values())) == -1:  # -t < r  <=>  -r < t
            t = next(iter(terms))
            if not _in_dtype(-r, dtype):
                return None
            new = UOp(Ops.CMPLT, cmp.dtype, (UOp.const(dtype, -r), t))
        else:
            if not _in_dtype(r, dtype):
                return None
            new = UOp(Ops.CMPLT, cmp.dtype, (_build(terms, 0, dtype), UOp.const(dtype, r)))
    else:
        r = _wrap(r, dtype)
        if exact:
            g = math.gcd(*terms.values())
            if r % g != 0:
                return UOp.const(cmp.dtype, cmp.op is Ops.CMPNE)
            if g > 1:
                terms = {t: a // g for t, a in terms.items()}
                r //= g
        if len(terms) == 1 and next(iter(terms.values())) == -1:
            terms = {next(iter(terms)): 1}
            r = _wrap(-r, dtype)
        new = UOp(cmp.op, cmp.dtype, (_build(terms, 0, dtype), UOp.const(dtype, r)))  # const() wraps like C
    return _smaller(new, cmp)


def _fold_const_lt(cmp: UOp, c: UOp, rhs: UOp) -> UOp | None:
    """`c < sum(a_i * t_i) + k`: move the constant and divide by the coefficients' gcd (floor)."""
    dtype = rhs.dtype
    if not _exact(dtype):
        return None
    dec = _decompose(rhs, True)
    if dec is None or not dec[0]:
        return None
    terms, k = dec
    r = c.arg - k
    g = math.gcd(*terms.values())
    if g > 1:
        terms = {t: a // g for t, a in terms.items()}
        r = r // g
    if len(terms) == 1 and next(iter(terms.values())) == -1:  # r < -t  <=>  t < -r
        if not _in_dtype(-r, dtype):
            return None
        new = UOp(Ops.CMPLT, cmp.dtype, (next(iter(terms)), UOp.const(dtype, -r)))
    else:
        if not _in_dtype(r, dtype):
            return None
        new = UOp(Ops.CMPLT, cmp.dtype, (UOp.const(dtype, r), _build(terms, 0, dtype)))
    return _smaller(new, cmp)


def _div_lt(x: UOp, d: UOp, c: UOp) -> UOp | None:
    """`x // d < c  ->  x < c*d` for x >= 0 and d > 0."""
    if not _is_int(x.dtype) or d.arg <= 0 or x.vmin < 0 or not _in_dtype(c.arg * d.arg, x.dtype):
        return None
    return UOp(Ops.CMPLT, dtypes.bool, (x, UOp.const(x.dtype, c.arg * d.arg)))


def _lt_div(c: UOp, x: UOp, d: UOp) -> UOp | None:
    """`c < x // d  ->  (c+1)*d - 1 < x` for x >= 0 and d > 0."""
    v = (c.arg + 1) * d.arg - 1
    if not _is_int(x.dtype) or d.arg <= 0 or x.vmin < 0 or not _in_dtype(v, x.dtype):
        return None
    return UOp(Ops.CMPLT, dtypes.bool, (UOp.const(x.dtype, v), x))


def _not_lt(a: UOp, b: UOp) -> UOp | None:
    """`not (x < c) -> c-1 < x` and `not (c < x) -> x < c+1` for integers."""
    if not _is_int(a.dtype):
        return None
    if b.op is Ops.CONST and _in_dtype(b.arg - 1, a.dtype):
        return UOp(Ops.CMPLT, dtypes.bool, (UOp.const(a.dtype, b.arg - 1), a))
    if a.op is Ops.CONST and _in_dtype(a.arg + 1, a.dtype):
        return UOp(Ops.CMPLT, dtypes.bool, (b, UOp.const(a.dtype, a.arg + 1)))
    return None


def _fold_max(x: UOp, y: UOp) -> UOp | None:
    if not _is_intlike(x.dtype):
        return None
    if x.vmin >= y.vmax:
        return x
    if y.vmin >= x.vmax:
        return y
    return None


_ci = UPat.cvar("c", vec=False)
symbolic = symbolic_simple + PatternMatcher(
    [
        (UPat(GroupOp.ALU, name="x"), _fold_range),
        (UPat((Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL), name="x"), _normalize_linear),
        (UPat((Ops.IDIV, Ops.MOD), src=(_x, _ci), name="d"), _fold_divmod),
        (
            UPat(Ops.IDIV, src=(UPat(Ops.IDIV, src=(_x, UPat.cvar("c1", vec=False))), UPat.cvar("c2", vec=False))),
            _nested_div,
        ),
        (UPat(Ops.MOD, src=(UPat(Ops.MOD, src=(_x, UPat.cvar("m", vec=False))), _ci)), _nested_mod),
        (UPat(Ops.CMPLT, src=(UPat(Ops.IDIV, src=(_x, UPat.cvar("d", vec=False))), _ci)), _div_lt),
        (UPat(Ops.CMPLT, src=(_ci, UPat(Ops.IDIV, src=(_x, UPat.cvar("d", vec=False))))), _lt_div),
        (UPat((Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ), src=(UPat.var("lhs"), _ci), name="cmp"), _fold_cmp_const),
        (UPat(Ops.CMPLT, src=(_ci, UPat.var("rhs")), name="cmp"), _fold_const_lt),
        (UPat(Ops.CMPLT, src=(UPat.var("a"), UPat.var("b"))).ne(UPat.const(dtypes.bool, True)), _not_lt),
        (UPat(Ops.MAX, src=(_x, _y)), _fold_max),
    ],
    name="symbolic",
)


def _distribute(x: UOp, s: UOp, c: UOp) -> UOp | None:
    """`(a + b) * c -> a*c + b*c` for integers (flattens index expressions; may grow them)."""
    if not _is_int(x.dtype):
        return None
    return UOp(s.op, x.dtype, (s.src[0] * c, s.src[1] * c))


symbolic_flat = symbolic + PatternMatcher(
    [(UPat(Ops.MUL, src=[UPat((Ops.ADD, Ops.SUB), name="s"), _ci], name="x"), _distribute)],
    name="flat",
)

# ---------------------------------------------------------------------------------------------------------------
# index dtype lowering

_INT32_RANGE = (-(2**31), 2**31 - 1)
_MEMORY_OPS = frozenset({Ops.INDEX, Ops.LOAD, Ops.STORE})  # a set: `in` on a tuple of Ops calls __eq__
_SAME_DTYPE_SRCS = (GroupOp.Binary - {Ops.THREEFRY}) | {Ops.MULACC, Ops.VECTORIZE}
_UNIFIED_OPS = _SAME_DTYPE_SRCS | {Ops.WHERE}


def _concrete_index_dtype(u: UOp, index_bits: int) -> DType:
    """int32 when `index_bits` is 32 and the node and its integer sources fit in 32 bits, else int64 (vector width
    preserved)."""
    lo, hi = u._min_max if index_bits == 32 else (0, 0)
    wide = index_bits > 32 or lo < _INT32_RANGE[0] or hi > _INT32_RANGE[1]
    for s in u.src:
        if s.dtype.scalar() in (dtypes.int64, dtypes.uint64) and u.op not in _MEMORY_OPS:
            wide = True
    base = dtypes.int64 if wide else dtypes.int32
    return base.vec(u.dtype.count) if u.dtype.count > 1 else base


def _unify_int_srcs(srcs: tuple[UOp, ...], op: Ops, dtype: DType | None) -> tuple[UOp, ...]:
    """Cast the value sources of `op` to one integer dtype (`dtype`, or the widest one present)."""
    idx = range(1, len(srcs)) if op is Ops.WHERE else range(len(srcs))
    value_dtypes = [srcs[i].dtype for i in idx]
    if dtype is None:
        if not all(_is_int(d.scalar()) for d in value_dtypes):
            return srcs
        target = max(value_dtypes, key=lambda d: (d.scalar().itemsize, d.scalar().priority))
    else:
        target = dtype
    out = list(srcs)
    for i in idx:
        if out[i].dtype != target:
            out[i] = out[i].cast(target)
    return tuple(out)


def _lower_index_node(ctx: int, u: UOp) -> UOp | None:
    if not _is_index(u.dtype.scalar()):
        return None
    return _lowered_index(u, u.src, _concrete_index_dtype(u, ctx))


def _lowered_index(u: UOp, src: tuple[UOp, ...], dt: DType) -> UOp:
    """Index node `u` with sources `src` (already lowered) as a node of the concrete integer dtype `dt`."""
    if u.op is Ops.CONST:
        return UOp(Ops.CONST, dt, src, u.arg)
    if u.op is Ops.VCONST:
        return UOp(Ops.VCONST, dt, src, u.arg)
    if u.op in _UNIFIED_OPS:
        src = _unify_int_srcs(src, u.op, dt)
    elif u.op is Ops.CAST and src[0].dtype == dt:
        return src[0]
    elif u.op is Ops.RANGE or u.op is Ops.SPECIAL:
        src = (src[0].cast(dt),)
    elif u.op is Ops.BIND:
        src = (src[0], UOp(Ops.CONST, src[0].dtype, (), src[1].arg))
        dt = src[0].dtype
    return UOp(u.op, dt, src, u.arg, u.tag)


def _unify_compare(u: UOp) -> UOp | None:
    """A comparison (or other same-dtype op) whose integer sources now disagree: cast them to the widest."""
    if _is_index(u.dtype.scalar()):
        return None
    value_srcs = u.src[1:] if u.op is Ops.WHERE else u.src
    if len({s.dtype for s in value_srcs}) <= 1:
        return None
    new = _unify_int_srcs(u.src, u.op, None)
    return None if new == u.src else UOp(u.op, u.dtype, new, u.arg, u.tag)


pm_lower_index_dtype = PatternMatcher(
    [
        (UPat(name="u"), _lower_index_node),
        (UPat(_UNIFIED_OPS, name="u"), _unify_compare),
    ],
    name="lower_index_dtype",
)


def lower_index_dtype(sink: UOp, index_bits: int = 32) -> UOp:
    """Give every `dtypes.index` node a concrete dtype: with `index_bits` 32, int32, or int64 where the node's value
    range (or a source's) reaches past 32 bits; with `index_bits` 64 (a renderer whose addresses are 64-bit and
    whose compiler would otherwise widen every 32-bit index again), int64 throughout. Sources of same-dtype ops are
    cast to match.

    >>> i = UOp.range(1 << 20, 0)
    >>> lower_index_dtype(i * 4).dtype, lower_index_dtype(i * 4096).dtype, lower_index_dtype(i * 4, 64).dtype
    (dtypes.int, dtypes.long, dtypes.long)
    """
    if index_bits not in (32, 64):
        raise ValueError(f"index_bits must be 32 or 64, not {index_bits}")
    if index_bits == 64:
        return _index_to_int64(sink)
    return graph_rewrite(sink, pm_lower_index_dtype, ctx=index_bits, name="lower_index_dtype")


def _index_to_int64(sink: UOp) -> UOp:
    """`lower_index_dtype` with 64-bit indices: no node's dtype depends on its value range, so one pass over the
    graph (sources first) does what `pm_lower_index_dtype`'s rewrite would, without the rewrite engine."""
    done: dict[UOp, UOp] = {}
    for u in sink.toposort():
        src = tuple([done[s] for s in u.src])
        if _is_index(u.dtype.scalar()):
            done[u] = _lowered_index(u, src, dtypes.int64.vec(u.dtype.count) if u.dtype.count > 1 else dtypes.int64)
        else:
            rebuilt = u.replace(src=src) if src != u.src else u
            done[u] = _unify_compare(rebuilt) or rebuilt if rebuilt.op in _UNIFIED_OPS else rebuilt
    return done[sink]
