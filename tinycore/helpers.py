"""Small shared utilities: environment knobs (ContextVars), counters, timing and the cache folder.

Everything global in tinycore is one of the documented ContextVars below or `GlobalCounters`; nothing else keeps
hidden module-level state that changes behaviour. `REALIZE_LOCK` serializes realizing across threads.

>>> with Context(DEBUG=2):
...     DEBUG.value
2
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")

OSX = sys.platform == "darwin"
WINDOWS = sys.platform == "win32"


_TRUE_WORDS = frozenset({"true", "yes", "on"})
_FALSE_WORDS = frozenset({"false", "no", "off"})


def parse_env(key: str, raw: str | None, default: T) -> T:
    """`raw`, the text of environment variable `key`, converted to the type of `default` (not cached: see `getenv`).

    Unset (None) or empty/blank text means `default`. An int knob takes a whole number (``" 2 "`` is 2), a float knob
    any number, a bool knob ``1``/``0`` (any integer: nonzero is True) or true/false, yes/no, on/off; a str knob is
    returned as given. A value that does not convert raises ValueError naming the variable, the value, the expected
    type and an example.

    >>> parse_env("BEAM", "2", 0), parse_env("BEAM", "", 0), parse_env("FLAG", "off", True)
    (2, 0, False)
    >>> parse_env("BEAM", "abc", 0)
    Traceback (most recent call last):
    ValueError: BEAM='abc' is not an integer: set BEAM to a whole number such as BEAM=1, or unset it (default 0)
    """
    if raw is None or not raw.strip():
        return default
    kind = type(default)
    text = raw.strip()
    if kind is bool:
        word = text.lower()
        if word in _TRUE_WORDS or word in _FALSE_WORDS:
            return word in _TRUE_WORDS  # type: ignore[return-value]
        try:
            return int(text) != 0  # type: ignore[return-value]
        except ValueError:
            raise ValueError(
                f"{key}={raw!r} is not a boolean: set {key} to 1 or 0 (or true/false, yes/no, on/off), "
                f"or unset it (default {int(default)})"
            ) from None
    if kind is int or kind is float:
        try:
            return kind(text)  # type: ignore[return-value]
        except ValueError:
            noun, phrase, fallback = ("an integer", "a whole number", 1) if kind is int else ("a number",) * 2 + (0.5,)
            raise ValueError(
                f"{key}={raw!r} is not {noun}: set {key} to {phrase} such as {key}={default or fallback}, "
                f"or unset it (default {default})"
            ) from None
    try:
        return kind(raw)  # type: ignore[call-arg]
    except (TypeError, ValueError) as error:
        raise ValueError(f"{key}={raw!r} can't be read as {kind.__name__} ({error}); unset {key} or fix it") from None


@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
    """Read environment variable `key`, converted to the type of `default` (cached: knobs are read once).

    Unset or empty (``DEBUG=``) means `default`; a value that does not convert (``BEAM=abc``) raises a ValueError
    naming the variable and an example of a valid value (see `parse_env`).

    >>> getenv("TINYCORE_SURELY_UNSET", 3)
    3
    """
    return parse_env(key, os.environ.get(key), default)


class ContextVar:
    """A named integer or string knob, initialised from the environment and overridable with `Context`.

    The environment value is read with `getenv`: unset or empty means `default`, and a value that does not convert
    to `default`'s type makes the definition (usually ``import tinycore``) raise a ValueError naming the variable.

    >>> KNOB = ContextVar("TINYCORE_EXAMPLE_KNOB", 1)
    >>> KNOB.value, bool(KNOB), KNOB >= 1
    (1, True, True)
    """

    registry: ClassVar[dict[str, ContextVar]] = {}
    value: Any

    def __init__(self, key: str, default: Any):
        if key in ContextVar.registry:
            raise RuntimeError(f"ContextVar {key!r} is already defined")
        self.key, self.default = key, default
        self.value = getenv(key, default)
        ContextVar.registry[key] = self

    def __bool__(self) -> bool:
        return bool(self.value)

    def __ge__(self, other: Any) -> bool:
        return self.value >= other

    def __gt__(self, other: Any) -> bool:
        return self.value > other

    def __lt__(self, other: Any) -> bool:
        return self.value < other

    def __le__(self, other: Any) -> bool:
        return self.value <= other

    def __eq__(self, other: object) -> bool:
        return self.value == other

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"ContextVar({self.key!r}, value={self.value!r})"


DEBUG = ContextVar("DEBUG", 0)  # 1: device/plugin info, 2: one line per kernel, 3: schedule, 4: source, 5: AST
BEAM = ContextVar("BEAM", 0)  # >0: search kernel optimizations with a beam of this width, timed on the device
NOOPT = ContextVar("NOOPT", 0)  # 1: no kernel optimizations at all (the plain lowered loop nest)
JIT = ContextVar("JIT", 1)  # 0: TinyJit runs the function eagerly every call
IGNORE_BEAM_CACHE = ContextVar("IGNORE_BEAM_CACHE", 0)  # 1: redo BEAM searches even when cached on disk
IGNORE_OOB = ContextVar("IGNORE_OOB", 1)  # 0: prove every index in bounds at lowering time
SPEC = ContextVar("SPEC", 0)  # 1: type-check the UOp graph after every named rewrite pass
CACHELEVEL = ContextVar("CACHELEVEL", 2)  # 0: no disk caches (compiled programs, BEAM results)
CAPTURING = ContextVar("CAPTURING", 1)  # 0: realize inside a TinyJit capture is not recorded (debugging)
# 0: every reduce broadcast back gets its own kernel, even where the renderer allows one-kernel rows (softmax)
FUSE_ROWS = ContextVar("FUSE_ROWS", 1)
NO_MEMORY_PLANNER = ContextVar("NO_MEMORY_PLANNER", 0)  # 1: internal buffers get memory of their own (no sharing)
CI = bool(getenv("CI", ""))

# Held (re-entrantly) by `Tensor.realize`, `Tensor.numpy`/`data` (and so `item`/`tolist`) and `TinyJit.__call__`:
# scheduling a lazy graph points its tensors at output buffers before the kernels filling them run, so two threads
# realizing one graph (or graphs sharing lazy parts) at once must not interleave. Building graphs needs no lock.
# Code driving `Tensor.schedule_with_vars` + `tinycore.engine.realize.run_schedule` itself from several threads
# should hold it around both.
REALIZE_LOCK = threading.RLock()


class Context(contextlib.ContextDecorator):
    """Temporarily set ContextVars by name: `with Context(DEBUG=2, BEAM=0): ...` (also usable as a decorator).

    >>> with Context(NOOPT=1):
    ...     NOOPT.value
    1
    >>> NOOPT.value
    0
    """

    def __init__(self, **kwargs: Any):
        unknown = [key for key in kwargs if key not in ContextVar.registry]
        if unknown:
            raise KeyError(f"unknown ContextVar(s) {unknown}; known: {sorted(ContextVar.registry)}")
        self.kwargs = kwargs
        self.saved: list[dict[str, Any]] = []

    def __enter__(self) -> Context:
        self.saved.append({key: ContextVar.registry[key].value for key in self.kwargs})
        for key, value in self.kwargs.items():
            ContextVar.registry[key].value = value
        return self

    def __exit__(self, *exc: object) -> None:
        for key, value in self.saved.pop().items():
            ContextVar.registry[key].value = value


class GlobalCounters:
    """Process-wide counters of executed work, reset with `GlobalCounters.reset()`.

    `kernel_count` counts launched kernels, `global_ops` the estimated operations, `global_mem` bytes moved by
    kernels, `time_sum_s` kernel time when timing is on, `mem_used` bytes currently allocated on all devices.
    """

    global_ops: ClassVar[int] = 0
    global_mem: ClassVar[int] = 0
    time_sum_s: ClassVar[float] = 0.0
    kernel_count: ClassVar[int] = 0
    mem_used: ClassVar[int] = 0

    @staticmethod
    def reset() -> None:
        """Zero every counter except `mem_used`, which tracks live allocations."""
        GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s = 0, 0, 0.0
        GlobalCounters.kernel_count = 0


def prod(items: Iterable[Any], start: Any = 1) -> Any:
    """Product of `items` (works on ints, floats and symbolic UOps).

    >>> prod((2, 3, 4))
    24
    """
    result = start
    for item in items:
        result = result * item
    return result


def all_same(items: Iterable[Any]) -> bool:
    """True when every element equals the first (and for an empty input).

    >>> all_same([1, 1, 1]), all_same([1, 2])
    (True, False)
    """
    items = list(items)
    return all(item == items[0] for item in items[1:])


def all_int(items: Iterable[Any]) -> bool:
    """True when every element is a Python int (not a symbolic dimension).

    >>> all_int((1, 2)), all_int((1, 2.0))
    (True, False)
    """
    return all(isinstance(item, int) for item in items)


def dedup(items: Iterable[T]) -> list[T]:
    """Remove duplicates, keeping first-seen order.

    >>> dedup([3, 1, 3, 2, 1])
    [3, 1, 2]
    """
    return list(dict.fromkeys(items))


def flatten(nested: Iterable[Iterable[T]]) -> list[T]:
    """Concatenate an iterable of iterables into one list.

    >>> flatten([[1, 2], [3]])
    [1, 2, 3]
    """
    return [item for sub in nested for item in sub]


def argsort(items: list[Any]) -> list[int]:
    """Indices that sort `items` (stable).

    >>> argsort([30, 10, 20])
    [1, 2, 0]
    """
    return sorted(range(len(items)), key=items.__getitem__)


def round_up(value: int, multiple: int) -> int:
    """Smallest multiple of `multiple` that is >= `value`.

    >>> round_up(10, 4)
    12
    """
    return (value + multiple - 1) // multiple * multiple


def to_tuple(value: Any) -> tuple:
    """Wrap a scalar in a 1-tuple; turn a list into a tuple; leave tuples alone.

    >>> to_tuple(3), to_tuple([1, 2])
    ((3,), (1, 2))
    """
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


class Timing(contextlib.ContextDecorator):
    """Print how long a block took: `with Timing("load "): ...` prints `load  12.34 ms`.

    `on_exit` may return extra text to append; `enabled=False` turns the print off.
    """

    def __init__(self, prefix: str = "", on_exit: Any = None, enabled: bool = True):
        self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled
        self.elapsed_ns = 0

    def __enter__(self) -> Timing:
        self.start_ns = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed_ns = time.perf_counter_ns() - self.start_ns
        if self.enabled:
            extra = self.on_exit(self.elapsed_ns) if self.on_exit else ""
            print(f"{self.prefix}{self.elapsed_ns * 1e-6:6.2f} ms{extra}")


@contextlib.contextmanager
def temporary_env(**values: str | None) -> Iterator[None]:
    """Set (or with None, unset) environment variables for a block; restores them after. Clears `getenv`'s cache."""
    saved = {key: os.environ.get(key) for key in values}
    try:
        for key, value in values.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        getenv.cache_clear()
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        getenv.cache_clear()


def cache_dir() -> str:
    """The folder for tinycore's disk caches: `TINYCORE_CACHE_DIR` if set, else the platform user cache dir."""
    override = os.environ.get("TINYCORE_CACHE_DIR")
    if override:
        return override
    import platformdirs  # imported here: keeps `import tinycore` light

    return platformdirs.user_cache_dir("tinycore", appauthor=False)
