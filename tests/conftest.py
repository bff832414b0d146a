"""Options shared by the whole test suite, and its one policy for missing programs.

A test that needs a program (promtool, prometheus, amtool, ...) says so with the marker
``@pytest.mark.tool("promtool")`` or, inside a fixture, with the ``require_tool`` fixture
(``require_tool("prometheus")`` returns the program's path). When the program is missing the test
FAILS under CI (``CI=true``, as .ci/run runs): scripts/test installs every one of them, so a
missing one there is a broken install step, never a reason to pass. Elsewhere the test is skipped
with a reason naming the program and the Debian package that provides it, and the terminal summary
lists them, so a local run that skipped them says so at its end.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

# program -> the Debian package that provides it (scripts/test installs those the suite runs).
TOOL_PACKAGES = {
    "promtool": "prometheus",
    "prometheus": "prometheus",
    "amtool": "prometheus-alertmanager",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "alertmanager": "prometheus-alertmanager",
    "kubectl": "kubectl",
    "chromium": "chromium",
}
# Where Debian puts them, for a PATH without it (the tests fall back to /usr/bin/NAME too).
FALLBACK_DIRS = ("/usr/bin",)
MISSING = "missing tool"  # the skip reasons start with this; the terminal summary collects them


def in_ci() -> bool:
    """True under CI: the environment variable CI is set to true (or 1, yes)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def find_tool(name: str) -> str | None:
    """The path of the program ``name``: on PATH, else in Debian's directories; None when absent."""
    found = shutil.which(name)
    if found:
        return found
    for folder in FALLBACK_DIRS:
        path = Path(folder) / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def missing_reason(name: str, package: str | None = None) -> str:
    package = package or TOOL_PACKAGES.get(name)
    if package is None:
        return f"{MISSING} {name} (not on PATH nor in /usr/bin; name its package in tests/conftest.py's TOOL_PACKAGES)"
    return f"{MISSING} {name} (Debian package {package}: apt-get install {package})"


def require_tool(name: str, package: str | None = None) -> str:
    """The path of the program ``name``; when it is missing, fail under CI and skip elsewhere.
    ``package``: the Debian package that provides it, when TOOL_PACKAGES does not name it."""
    path = find_tool(name)
    if path is not None:
        return path
    reason = missing_reason(name, package)
    if in_ci():
        pytest.fail(f"{reason} -- CI=true, so a missing tool is a failure, not a skip", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(name="require_tool", scope="session")
def require_tool_fixture() -> Callable[..., str]:
    """``require_tool(name)`` for fixtures and tests: the program's path, or fail (CI) / skip."""
    return require_tool


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "tool(*names): the test runs these programs; missing ones fail it under CI=true, skip it elsewhere"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers(name="tool"):
        for name in marker.args:
            require_tool(name)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """One line per missing program, with the package to install and how many tests it skipped."""
    counts: dict[tuple[str, str | None], int] = {}  # (program, package) -> tests skipped
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        match = re.search(rf"{MISSING} (\S+)(?: \(Debian package (\S+?):)?", reason)
        if match:
            key = (match[1], match[2])
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return
    terminalreporter.section("missing tools", sep="=", yellow=True, bold=True)
    for (name, package), count in sorted(counts.items(), key=lambda item: item[0][0]):
        terminalreporter.write_line(f"SKIPPED {count} test(s): {missing_reason(name, package)}", yellow=True, bold=True)
    terminalreporter.write_line("under CI (CI=true) these fail instead; scripts/test installs the ones the suite needs",
                                yellow=True)


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
