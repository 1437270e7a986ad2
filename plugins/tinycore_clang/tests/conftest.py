"""Fixtures of the tinycore-clang tests: a private disk cache for the session, a CLANG device opened directly (with the
backend ``CLANG_BACKEND`` picks, or pinned to the C backend for tests about C source, CUSTOM C code or the C
compiler), and a `tinycore_clang.testing.Runner` on each."""

from __future__ import annotations

import os

import pytest

tinycore_clang = pytest.importorskip(
    "tinycore_clang", reason="tinycore-clang is not installed (pip install -e plugins/tinycore_clang)"
)
from tinycore_clang import toolchain  # noqa: E402

NO_COMPILER = "no C compiler (clang, gcc or cc) on PATH"


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Every test session compiles into its own disk cache, never the user's."""
    folder = tmp_path_factory.mktemp("tinycore-cache")
    old = os.environ.get("TINYCORE_CACHE_DIR")
    os.environ["TINYCORE_CACHE_DIR"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("TINYCORE_CACHE_DIR", None)
    else:
        os.environ["TINYCORE_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def clang():
    """A CLANG device opened directly (skips when it can't run here: no LLVM and no C compiler)."""
    from tinycore_clang.testing import unavailable_reason

    if reason := unavailable_reason():
        pytest.skip(reason)
    from tinycore_clang.device import ClangDevice

    return ClangDevice("CLANG")


@pytest.fixture(scope="session")
def run_uops(clang):
    """A `tinycore_clang.testing.Runner` on the session's CLANG device."""
    from tinycore_clang.testing import Runner

    return Runner(clang)


@pytest.fixture(scope="session")
def clang_c():
    """A CLANG device pinned to the C backend, whatever ``CLANG_BACKEND`` says (skips when no C compiler)."""
    if not toolchain.find_compiler().ok:
        pytest.skip(NO_COMPILER)
    from tinycore_clang.device import ClangDevice

    return ClangDevice("CLANG", backend="c")


@pytest.fixture(scope="session")
def run_uops_c(clang_c):
    """A `tinycore_clang.testing.Runner` on the C-backend device `clang_c`."""
    from tinycore_clang.testing import Runner

    return Runner(clang_c)
