"""Live tensors: weak references to every tensor an op made, numbered in creation order.

An in-place write (`Tensor.assign`) must not change a lazy value that was defined before it: with PyTorch's
semantics ``s = a.sum(); a.assign(a * 10); s.item()`` reads the sum of the old contents. When a schedule writes a
buffer, the scheduler asks `tinycore.tensor` for the live lazy tensors that read it (`schedule.set_readers_hook`),
which walks this registry, and computes them in the same schedule, before the write.

The registry is a dict ``{number: weakref}``; dead references are dropped in batches (amortized O(1) per tensor).
A TinyJit capture notes the number at its start (`mark`), so the readers that existed before the capture are
computed outside it (they are not part of the function being captured).

>>> class T: pass
>>> t = T(); m = mark(); add(t); [x is t for _, x in since(m)]
[True]
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterator
from typing import Any

__all__ = ["add", "compact", "mark", "next_number", "refs", "since"]

refs: dict[int, weakref.ref] = {}  # number -> weak reference; the eager hot path writes it directly
next_number = itertools.count().__next__
_compact_at = 0  # the number from which `compact` scans again


def add(obj: Any) -> None:
    """Register `obj` (weakly); called for every tensor an op makes, so it is kept to a few dict operations. The
    eager hot path inlines it as ``n = next_number(); refs[n] = weakref.ref(obj); if not n & 4095: compact(n)``."""
    n = next_number()
    refs[n] = weakref.ref(obj)
    if not n & 4095:
        compact(n)


def compact(n: int) -> None:
    """Drop the dead references, at most once per as many registrations as there are live ones (amortized O(1))."""
    global _compact_at
    if n < _compact_at:
        return
    for k in [k for k, r in refs.items() if r() is None]:
        del refs[k]
    _compact_at = n + 2 * len(refs)


def mark() -> int:
    """A number below every object registered from now on (and above every one registered before)."""
    return next_number()


def since(start: int = 0) -> Iterator[tuple[int, Any]]:
    """``(number, object)`` of every live registered object numbered `start` or later, oldest first."""
    for n, r in list(refs.items()):
        if n >= start:
            obj = r()
            if obj is not None:
                yield n, obj
