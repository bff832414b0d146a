"""The status page in a real headless Chromium says when its data is stale: the real routes serve a
node whose sampler publishes one sample and then nothing (a cycle stuck in the driver holds every
later one). The page first says "live" with the sample's age, then, a few sampling intervals later
and with no new sample, "stale" in words (the pill's text and a status banner), not only in colour.

The browser is the ``browser`` fixture (conftest.py: Debian's ``chromium``, no network besides the
loopback server); missing ``chromium`` fails under CI=true and skips elsewhere.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator

import pytest
from aiohttp import web
from exporter_factories import make_attribution, make_gpu, make_snapshot, make_state
from playwright.sync_api import expect

from runtimekit.state import NodeState
from runtimekit.statuspage import add_status_routes

INTERVAL_SECONDS = 1.0  # the factories' sampler's period
STALE_AFTER_SECONDS = 3 * (INTERVAL_SECONDS + 0.05)  # STALE_CYCLES x (period + the factories' 0.05 s cycle)
WAIT_MS = 10_000  # the page refreshes every 1.5 s


@pytest.fixture
def served() -> Iterator[tuple[str, NodeState]]:
    """The status routes over ``NodeState()`` (nothing published yet) on a loopback port, in a thread."""
    state, loop = NodeState(), asyncio.new_event_loop()
    app = web.Application()
    add_status_routes(app, state, "stale test node")
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", state
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.run_until_complete(runner.cleanup())
        loop.close()


@pytest.mark.tool("chromium")
def test_the_page_says_live_then_stale_when_no_new_sample_comes(served, browser):
    url, state = served
    problems: list[str] = []
    page = browser.new_page()
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda message: problems.append(f"console {message.type}: {message.text}")
            if message.type in ("error", "warning") else None)
    page.goto(url + "/")
    connection, banner = page.locator("#connection"), page.locator("#stale")
    expect(connection).to_have_text("live · waiting for the first sample", timeout=WAIT_MS)
    expect(banner).to_be_hidden()

    now = time.time()  # one sample, then the sampler is stuck
    fresh = make_state(make_snapshot((make_gpu(0),), sampled_at=now))
    state.publish_snapshot(fresh.view().snapshot, fresh.view().sampler)
    state.publish_attribution(make_attribution(refreshed_at=now))
    expect(connection).to_have_attribute("data-state", "live", timeout=WAIT_MS)
    expect(connection).to_have_text(re.compile(r"^live · sample \d\.\d s old · attribution \d\.\d s old$"))
    expect(banner).to_be_hidden()
    expect(page.locator(".gpu-card")).to_have_count(1)

    expect(connection).to_have_attribute("data-state", "stale", timeout=WAIT_MS)
    expect(connection).to_have_text(re.compile(r"^stale · sample \d+(\.\d)? s old · attribution \d+(\.\d)? s old$"))
    assert time.time() - now > STALE_AFTER_SECONDS
    expect(banner).to_be_visible()
    expect(banner).to_have_attribute("role", "status")
    expect(banner).to_contain_text("Stale data: no new GPU sample for several sampling intervals "
                                   "(the agent samples every 1 s)")
    expect(page.locator("body")).to_have_attribute("data-stale", "yes")
    expect(page.locator(".gpu-card")).to_have_count(1)  # the last sample stays drawn, said to be stale
    assert problems == []

