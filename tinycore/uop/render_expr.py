"""Render symbolic integer/bool UOps as short Python-like expressions (for repr, debug output and errors).

`//` and `%` in the output mean the IR's C semantics (truncating division), not Python's.

>>> from tinycore.uop.ops import UOp
>>> x = UOp.variable("x", 0, 9)
>>> render_expr((x * 4 + 3) // 2)
'(((x*4)+3)//2)'
"""

from __future__ import annotations

from tinycore.uop.ops import Ops, UOp, _short

__all__ = ["render_expr"]

_BINARY = {
    Ops.ADD: "+",
    Ops.SUB: "-",
    Ops.MUL: "*",
    Ops.IDIV: "//",
    Ops.FDIV: "/",
    Ops.MOD: "%",
    Ops.CMPLT: "<",
    Ops.CMPNE: "!=",
    Ops.CMPEQ: "==",
    Ops.AND: "&",
    Ops.OR: "|",
    Ops.XOR: "^",
    Ops.SHL: "<<",
    Ops.SHR: ">>",
}


def _leaf(u: UOp) -> str | None:
    if u.op is Ops.CONST:
        return repr(u.arg)
    if u.op is Ops.DEFINE_VAR:
        return u.arg[0]
    if u.op is Ops.BIND:
        return f"{u.src[0].arg[0]}={u.src[1].arg}"
    if u.op is Ops.RANGE:
        axis = u.arg[0]
        return f"r{axis}" if isinstance(axis, int) else "r" + "_".join(map(str, axis))
    if u.op is Ops.SPECIAL:
        return u.arg
    return None


def render_expr(u: UOp) -> str:
    """A fully parenthesized expression for `u`; nodes that aren't arithmetic render as `<OP ...>`.

    >>> from tinycore.uop.ops import UOp
    >>> n = UOp.variable("n", 1, 8)
    >>> render_expr((n < 4).where(n, n.const_like(0)))
    '(n if (n<4) else 0)'
    """
    text: dict[UOp, str] = {}
    for node in u.toposort():
        leaf = _leaf(node)
        if leaf is not None:
            text[node] = leaf
            continue
        s = [text[x] for x in node.src]
        if node.op in _BINARY and len(s) == 2:
            text[node] = f"({s[0]}{_BINARY[node.op]}{s[1]})"
        elif node.op is Ops.NEG:
            text[node] = f"(-{s[0]})"
        elif node.op is Ops.MAX:
            text[node] = f"max({s[0]}, {s[1]})"
        elif node.op is Ops.WHERE:
            text[node] = f"({s[1]} if {s[0]} else {s[2]})"
        elif node.op is Ops.CAST:
            text[node] = f"{node.dtype!r}({s[0]})"
        else:
            text[node] = f"<{_short(node)}>"
    return text[u]
