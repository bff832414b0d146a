"""A flood of wrong Basic passwords must not lock out a client with the right one: a real listener
with basic auth at bcrypt cost 10, 300 connections from another process (at low CPU priority, as if
on another machine) sending random passwords as fast as they are answered, and meanwhile

- a scraper whose password was checked before the flood scrapes every half second over a new
  connection: every scrape is answered 200 within ``ANSWER_WITHIN`` (measured: 1-25 ms; before the
  fix 12 of 12 were refused at the connection cap, every slot held by a request queued for the one
  bcrypt lock);
- clients from another address (127.0.0.2) whose passwords were never checked get in within
  ``ANSWER_WITHIN`` too (measured: 0.1-0.35 s; before, none did): their check takes its turn before
  the flood's queue.

The flood runs ``FLOOD_SECONDS``; the whole test takes about 10 s on two cores. The latencies are
printed (pytest -rA)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from runtimekit.config import ListenerConfig
from runtimekit.listener import Listener, listening
from runtimekit.webconfig.basic import hash_password
from tests.security.pki import PASSWORD, USER, basic, write_web_config

COST = 10  # ~60 ms a check here: bcrypt is what the flood queues on
FLOOD = 300  # attacking connections, more than max_connections (256)
FLOOD_SECONDS = 8.0
SCRAPE_EVERY = 0.5  # seconds between the scraper's scrapes during the flood
ANSWER_WITHIN = 5.0  # seconds: a scrape slower than this counts as failed (waiting out the flood takes ~20 s)
NEWCOMERS = 3  # users whose password is first checked during the flood
NEWCOMER_ADDRESS = "127.0.0.2"
ATTACKER = Path(__file__).with_name("basic_auth_flood_client.py")


def newcomer(index: int) -> tuple[str, str]:
    return f"newcomer-{index}", f"newcomer-password-{index}"


def make_app() -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="up 1\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


@pytest.fixture
async def listener(tmp_path: Path) -> AsyncIterator[Listener]:
    users = {USER: hash_password(PASSWORD.encode(), COST).decode()}
    users.update({user: hash_password(password.encode(), COST).decode()
                  for user, password in map(newcomer, range(NEWCOMERS))})
    config = ListenerConfig(web_config_file=str(write_web_config(tmp_path / "web.yml", users=users)))
    async with listening(make_app(), "127.0.0.1", 0, config) as served:
        yield served


async def scrape(listener: Listener, authorization: str, local_host: str = "127.0.0.1") -> tuple[str, float]:
    """(status or error, seconds) of one ``GET /metrics`` over a new connection from ``local_host``."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    connector = aiohttp.TCPConnector(force_close=True, local_addr=(local_host, 0))
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:
            async with session.get(listener.address + "/metrics", headers={"Authorization": authorization}) as response:
                await response.read()
                outcome = str(response.status)
    except (aiohttp.ClientError, TimeoutError) as error:
        outcome = type(error).__name__
    return outcome, round(loop.time() - started, 3)


def failed(scrapes: list[tuple[str, float]]) -> list[tuple[str, float]]:
    return [(outcome, seconds) for outcome, seconds in scrapes if outcome != "200" or seconds > ANSWER_WITHIN]


async def test_a_flood_of_wrong_passwords_locks_out_no_client_with_the_right_one(listener):
    assert (await scrape(listener, basic()))[0] == "200"  # checked once, before the flood
    host, port = listener.address.removeprefix("http://").rsplit(":", 1)
    attacker = await asyncio.create_subprocess_exec(
        sys.executable, str(ATTACKER), host, port, str(FLOOD), str(FLOOD_SECONDS), USER, stdout=asyncio.subprocess.PIPE)
    loop = asyncio.get_running_loop()
    last_scrape = loop.time() + FLOOD_SECONDS - 1.0
    try:
        await asyncio.sleep(1.0)  # the flood's connections are open and queued
        scrapes: list[tuple[str, float]] = []
        newcomers: list[tuple[str, float]] = []
        while loop.time() < last_scrape:
            scrapes.append(await scrape(listener, basic()))
            if len(newcomers) < NEWCOMERS:
                newcomers.append(await scrape(listener, basic(*newcomer(len(newcomers))), NEWCOMER_ADDRESS))
            await asyncio.sleep(SCRAPE_EVERY)
        output, _ = await asyncio.wait_for(attacker.communicate(), FLOOD_SECONDS + 5)
    finally:
        if attacker.returncode is None:
            attacker.kill()
            await attacker.wait()
    flood = json.loads(output)
    report = f"scrapes {scrapes}, newcomers {newcomers}, the flood's answers {flood}"
    print(report)  # shown by pytest -rA: the measured latencies
    assert flood.get("401", 0) >= 50, f"the flood did not reach the listener: {report}"
    assert len(scrapes) >= 4 and len(newcomers) == NEWCOMERS, report
    assert not failed(scrapes), f"{len(failed(scrapes))} of {len(scrapes)} scrapes failed: {report}"
    assert not failed(newcomers), f"{len(failed(newcomers))} of {NEWCOMERS} newcomers failed: {report}"
