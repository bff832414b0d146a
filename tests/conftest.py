"""Options shared by the whole test suite."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite the golden exposition files in tests/golden/ instead of comparing against them",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """True when the run was asked to regenerate golden files (``--update-golden``)."""
    return bool(request.config.getoption("--update-golden"))
