"""tinycore: a small, fast tensor compiler and runtime whose devices are plugins.

`import tinycore` is kept light (no numpy, no plugin, no vendor library): the public names below are resolved
on first attribute access.

>>> import tinycore
>>> tinycore.getenv("TINYCORE_SURELY_UNSET", 7)
7
"""

from __future__ import annotations

import importlib
from typing import Any

from tinycore.helpers import Context, GlobalCounters, getenv
from tinycore.version import __version__ as __version__

# public name -> module that defines it (imported lazily on first access)
_LAZY_EXPORTS = {
    "Tensor": "tinycore.tensor",
    "TinyJit": "tinycore.engine.jit",
    "UOp": "tinycore.uop.ops",
    "Variable": "tinycore.uop.ops",
    "dtypes": "tinycore.dtype",
    "Device": "tinycore.device",
    "fetch": "tinycore.frontend.fetch",
}

__all__ = [
    "Context", "Device", "GlobalCounters", "Tensor", "TinyJit", "UOp", "Variable", "dtypes", "fetch", "getenv",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    module_name = _LAZY_EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tinycore' has no attribute {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name != module_name:
            raise
        raise AttributeError(f"tinycore.{name} is not available in this build ({module_name} is missing)") from error
    value = getattr(module, name)
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_EXPORTS))
