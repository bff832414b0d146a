"""The status page in a real headless Chromium (Debian's ``chromium``, driven by Playwright) against a
real agent on the simulated DGX H100: the 8 GPUs are drawn, an injected XID 79 turns its GPU's card
red, a slice made with ``runtimekit slice create`` appears, the page asks nothing of any other
origin, and once the agent stops it says so. A full-page screenshot is kept (its path is printed; ``pytest -s`` shows it).

The browser (the ``browser`` fixture, conftest.py) runs with a fresh profile and no network besides
the agent's loopback address: no component updates, sync, QUIC or first-run requests. Missing
``chromium`` fails the test under CI=true and skips it elsewhere (tests/conftest.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.agent_process import ROOT, Agent, start_agent, without_pods

LOST_GPU = 2
SLICE_GPU = 0
BAD_RED = "rgb(220, 38, 38)"  # status.css --bad in the light scheme
WAIT_MS = 10_000  # the page refreshes every 1.5 s; the agent samples every 0.5 s


@pytest.fixture
def agent(tmp_path) -> Iterator[Agent]:
    agent = start_agent(tmp_path, "--sim", without_pods("dgx-h100", tmp_path), "--interval", "0.5", "--seed", "3")
    yield agent
    agent.stop()


def inject_xid_79(agent: Agent, gpu: int) -> None:
    body = json.dumps({"gpu": gpu, "fault": "xid", "params": {"xid": 79}}).encode()
    request = urllib.request.Request(agent.url + "/sim/v1/faults", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def create_slice(state_dir: str, gpu: int) -> str:
    command = [sys.executable, "-m", "runtimekit.cli", "slice", "create", "--state-dir", state_dir, "--mode", "tdm",
               "--compute", "50", "--memory", "2GiB", "--device", str(gpu), "--owner", "status-page-test", "-o", "json"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["id"]


@pytest.mark.tool("chromium")
def test_the_page_shows_the_node_a_fault_and_a_new_slice(agent, browser, tmp_path, tmp_path_factory):
    requests: list[str] = []
    problems: list[str] = []
    browser.on("request", lambda request: requests.append(request.url))
    page = browser.new_page()
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda message: problems.append(f"console {message.type}: {message.text}")
            if message.type in ("error", "warning") else None)

    page.goto(agent.url + "/")
    cards = page.locator(".gpu-card")
    expect(cards).to_have_count(8, timeout=WAIT_MS)
    assert [card.get_attribute("data-gpu") for card in cards.all()] == [str(n) for n in range(8)]
    expect(page.locator('.gpu-card[data-health="healthy"]')).to_have_count(8, timeout=WAIT_MS)
    expect(page.locator("#node-summary")).to_have_text("8 GPUs")
    expect(page.locator("#topology table.matrix tbody tr")).to_have_count(8)

    inject_xid_79(agent, LOST_GPU)
    lost = page.locator(f'.gpu-card[data-gpu="{LOST_GPU}"]')
    expect(lost).to_have_attribute("data-health", "unhealthy", timeout=WAIT_MS)
    expect(lost).to_have_css("border-top-color", BAD_RED)
    expect(lost).to_contain_text("gpu_lost")
    other = page.locator(f'.gpu-card[data-gpu="{SLICE_GPU}"]')
    expect(other).to_have_attribute("data-health", "healthy")
    assert other.evaluate("card => getComputedStyle(card).borderTopColor") != BAD_RED
    expect(page.locator("#node-health")).to_have_attribute("data-health", "unhealthy")

    slice_id = create_slice(str(tmp_path / "state"), SLICE_GPU)
    expect(other.locator(f'[data-slice-id="{slice_id}"]')).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator(f'#slices tr[data-slice-id="{slice_id}"]')).to_have_count(1)

    screenshot = tmp_path / "status-page.png"
    page.screenshot(path=str(screenshot), full_page=True)
    stable = tmp_path_factory.getbasetemp() / "status-page.png"
    shutil.copyfile(screenshot, stable)
    print(f"status page screenshot: {stable}")

    text = page.inner_text("body")
    assert not re.search(r"\b(null|undefined|NaN|\[object Object\])\b", text), "a value drawn raw"
    assert problems == []
    assert requests and all(url.startswith(agent.url + "/") for url in requests), requests

    agent.stop()  # the page says so, and keeps trying
    expect(page.locator("#connection")).to_have_attribute("data-state", "down", timeout=WAIT_MS)
    expect(page.locator("#connection")).to_contain_text("agent unreachable")
