"""`runtimekit remediate serve` runs under the same listener policy as the agent
(``runtimekit.listener``, its ``listener.*`` keys): idle and slow connections are closed at their
deadlines, and Alertmanager still gets through while they are open. The policy itself is tested in
tests/core/test_listener_policy.py; this shows the service really runs under it."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.agent_process import free_port
from tests.remediation.conftest import alert_body, start_service, write_config

HEADER_TIMEOUT_SECONDS = 0.5


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> float:
    """Seconds until the server closes the connection, failing past ``seconds``. A close with our
    unread request bytes in its buffer arrives as a reset, not an EOF: both are a close."""
    started = time.monotonic()
    try:
        assert await asyncio.wait_for(reader.read(1024), seconds) == b""
    except ConnectionResetError:
        pass
    return time.monotonic() - started


@pytest.mark.parametrize("sends", [b"", b"POST /api/v1/alerts HTTP/1.1\r\nHost: x\r\n"], ids=["idle", "slow-headers"])
async def test_idle_and_slow_connections_are_closed_and_alerts_still_get_through(fakes, tmp_path, sends):
    kube, repl, url = fakes
    port = free_port()
    config = write_config(tmp_path, url, listen=f"127.0.0.1:{port}",
                          listener={"header_timeout_seconds": HEADER_TIMEOUT_SECONDS, "max_connections": 8})
    service = await start_service(config, port)
    try:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]  # over the cap
        for _, writer in held:
            writer.write(sends)
            await writer.drain()
        async with aiohttp.ClientSession() as session:  # Alertmanager, while they are open
            async with session.post(f"http://127.0.0.1:{port}/api/v1/alerts", json=alert_body(),
                                    headers={"Authorization": "Bearer s3cret"}) as response:
                assert response.status == 200, await response.text()
        for reader, _ in held:
            assert await _closed_within(reader, HEADER_TIMEOUT_SECONDS + 5.0) <= HEADER_TIMEOUT_SECONDS + 5.0
        for _, writer in held:
            writer.close()
    finally:
        service.terminate()  # reaped off the event loop, which serves the fake API the worker may be calling
        stderr = (await asyncio.to_thread(service.communicate, None, 15))[1].decode()
    assert service.returncode == 0, stderr
    assert "Traceback" not in stderr
