"""SIGKILL between receipt and action: after a restart the action completes, exactly once.

The service runs as a real process (``python -m runtimekit.kube.remediation serve``). The first run
journals the alert and answers 200, but waits (``action_delay_seconds``) before acting; it is
killed with SIGKILL while it waits. The second run, on the same journal and without the delay,
finds the pending actions and runs them: the node is cordoned and tainted and the replacement
endpoint is called exactly once — also when Alertmanager re-sends the same alert afterwards.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import aiohttp
from conftest import alert_body, write_config

from tests.agent_process import ROOT, free_port


async def start(config: str, port: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "runtimekit.kube.remediation", "serve", "--config", config],
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read().decode()
            try:
                async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                    if response.status == 200:
                        return process
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    process.kill()
    raise AssertionError("the remediation service did not start")


async def post(port: int, body: dict) -> int:
    async with aiohttp.ClientSession() as session:
        async with session.post(f"http://127.0.0.1:{port}/api/v1/alerts", json=body,
                                headers={"Authorization": "Bearer s3cret"}) as response:
            return response.status


async def test_sigkill_after_receipt_then_restart_acts_exactly_once(fakes, tmp_path):
    kube, replacement, url = fakes
    port = free_port()
    first = await start(write_config(tmp_path, url, listen=f"127.0.0.1:{port}", action_delay_seconds=60), port)
    try:
        assert await post(port, alert_body(node="gpu-2")) == 200  # journaled before this answer
        await asyncio.sleep(0.5)
        assert replacement.calls == []  # still waiting to act
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)

    second = await start(write_config(tmp_path, url, listen=f"127.0.0.1:{port}", action_delay_seconds=0), port)
    try:
        deadline = time.monotonic() + 15
        while not replacement.calls and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert len(replacement.calls) == 1
        assert await post(port, alert_body(node="gpu-2")) == 200  # Alertmanager re-sends
        await asyncio.sleep(1.0)
        assert len(replacement.calls) == 1
        key, body = replacement.calls[0]
        assert key and "gpu-2" in str(body)
        assert kube.nodes["gpu-2"]["spec"].get("unschedulable") is True  # cordoned once
    finally:
        second.terminate()
        second.wait(10)
