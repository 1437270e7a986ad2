"""Views of flat buffers, as the scheduler builds and reads them: movement ops over a `BUFFER` (or a
`DEFINE_GLOBAL`), and movement args that hold symbolic sizes (`BIND`s of variables).

A scheduled value lives in a flat buffer of ``prod(shape)`` elements (for a symbolic shape: sized for the
variables' maximum) and is read back through `flat_view`. Cache entries keep symbolic args unbound
(`strip_binds`) and bind each call's values when they build the outputs (`bind_arg`).

This module is the bottom of the scheduler's modules: it imports none of them.
"""

from __future__ import annotations

from typing import Any

from tinycore.helpers import prod
from tinycore.uop.ops import GroupOp, Ops, UOp

__all__ = [
    "bind_arg",
    "flat_view",
    "fold_view",
    "is_symbolic_arg",
    "plain_buffer",
    "strip_binds",
    "strip_reshapes",
    "view_base",
]


def view_base(u: UOp) -> UOp:
    """`u` below its movement ops."""
    while u.op in GroupOp.Movement:
        u = u.src[0]
    return u


def plain_buffer(u: UOp) -> UOp | None:
    """The BUFFER when `u` is a BUFFER seen through RESHAPEs only (its elements in storage order), else None."""
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u if u.op is Ops.BUFFER else None


def strip_reshapes(u: UOp) -> UOp:
    """`u` below its RESHAPEs."""
    while u.op is Ops.RESHAPE:
        u = u.src[0]
    return u


def fold_view(view: UOp) -> UOp:
    """`view` with its RESHAPE chains folded, and a RESHAPE back to the BUFFER's own shape dropped."""
    chain: list[UOp] = []
    node = view
    while node.op in GroupOp.Movement:
        chain.append(node)
        node = node.src[0]
    out = node
    for m in reversed(chain):
        if m.op is Ops.RESHAPE:
            while out.op is Ops.RESHAPE:
                out = out.src[0]
            if tuple(m.arg) == out.shape:
                continue
        out = UOp(m.op, m.dtype, (out,), m.arg)
    return out


def flat_view(flat: UOp, shape: tuple[Any, ...], size: int, unbind: bool = True) -> UOp:
    """A flat buffer (or DEFINE_GLOBAL) of `size` elements seen as `shape`; a symbolic shape uses its first
    ``prod(shape)`` elements (the buffer is sized for the largest values). `unbind`: symbolic sizes without their
    bound values (for kernel ASTs and cache entries)."""
    if tuple(shape) == (size,):
        return flat
    numel = prod(shape)
    if isinstance(numel, UOp):
        if unbind:
            shape, numel = strip_binds(tuple(shape), {}), strip_binds(numel, {})
        flat = flat.shrink(((0, numel),))
        return flat.reshape(shape) if len(shape) != 1 else flat
    return flat.reshape(shape)


# ---------------------------------------------------------------------------------------------------------------
# symbolic movement args

_symbolic_args: dict[Any, bool] = {}


def is_symbolic_arg(arg: Any) -> bool:
    """True when a movement arg holds UOps (symbolic sizes); memoized by arg."""
    try:
        return _symbolic_args[arg]
    except KeyError:
        pass
    except TypeError:
        return _has_uop(arg)
    flag = _has_uop(arg)
    if len(_symbolic_args) > 65536:
        _symbolic_args.clear()
    _symbolic_args[arg] = flag
    return flag


def _has_uop(arg: Any) -> bool:
    if isinstance(arg, UOp):
        return True
    return isinstance(arg, tuple) and any(_has_uop(a) for a in arg)


def strip_binds(arg: Any, var_vals: dict[UOp, int]) -> Any:
    """A symbolic movement arg with its BIND values removed (recorded in `var_vals`, variable -> value)."""
    if isinstance(arg, tuple):
        return tuple(strip_binds(a, var_vals) for a in arg)
    if isinstance(arg, UOp):
        unbound, values = arg.unbind_all()
        for var, value in values.items():
            if var_vals.setdefault(var, value) != value:
                raise ValueError(f"variable {var.arg[0]!r} is bound to both {var_vals[var]} and {value}")
        return unbound
    return arg


def bind_arg(arg: Any, var_vals: dict[str, int]) -> Any:
    """A movement arg whose unbound variables are bound to this call's values (by name); others stay unbound."""
    if isinstance(arg, tuple):
        return tuple(bind_arg(a, var_vals) for a in arg)
    if isinstance(arg, UOp):
        binds = {v: v.bind(var_vals[v.arg[0]]) for v in arg.vars() if v.op is Ops.DEFINE_VAR and v.arg[0] in var_vals}
        return arg.substitute(binds) if binds else arg
    return arg
