"""The status page's tests: the exporter tests' hand-built snapshots, and the headless Chromium the
browser tests drive."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext

# The hand-built snapshots of the exporter tests (exporter_factories) serve the status page's tests too.
sys.path.insert(0, str(Path(__file__).parents[1] / "exporter"))

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def browser(tmp_path, require_tool) -> Iterator[BrowserContext]:
    """Debian's ``chromium`` driven by Playwright (no browser downloaded): a fresh profile, light
    scheme, 1400x900, no network besides what the page asks of its own origin."""
    from playwright.sync_api import sync_playwright

    chromium = require_tool("chromium")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=chromium, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 900}, color_scheme="light")
        try:
            yield context
        finally:
            context.close()
