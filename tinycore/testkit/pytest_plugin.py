"""The pytest plugin of the conformance kit (entry point ``pytest11``): adds ``--tinycore-device=NAME``."""

from __future__ import annotations

import pytest

from tinycore.testkit.target import KIT_OPTION


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the kit's command-line option."""
    parser.getgroup("tinycore").addoption(
        KIT_OPTION, default=None, metavar="NAME", help="device the tinycore conformance kit tests (e.g. CLANG)"
    )
