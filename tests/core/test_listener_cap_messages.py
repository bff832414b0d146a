"""What the connection cap logs says what it closed: on a plain-HTTP listener a connection accepted
whose transport is not made yet is no TLS handshake (runtimekit.listener.Listener._make_room)."""

from __future__ import annotations

import asyncio
import logging
import socket

from aiohttp import web

from runtimekit.config import ListenerConfig
from runtimekit.listener import listening


async def test_at_the_cap_a_plain_listener_names_no_tls_handshake(caplog):
    caplog.set_level(logging.INFO)
    app = web.Application()
    async with listening(app, "127.0.0.1", 0, ListenerConfig(max_connections=2)) as listener:
        host, port = listener.address.removeprefix("http://").rsplit(":", 1)
        # connected before the listener's next accept: it accepts them in one turn, past the cap
        clients = [socket.create_connection((host, int(port))) for _ in range(5)]
        await asyncio.sleep(0.3)
        for client in clients:
            client.close()
    evictions = [r.getMessage() for r in caplog.records if "connection cap: evicted" in r.getMessage()]
    assert evictions, "nothing evicted: the test did not reach the cap"
    assert [m for m in evictions if "TLS" in m] == []
    assert any("closed the one longest accepted but not yet started for a new one" in m for m in evictions)
