"""The listener policy (runtimekit.listener) over real sockets on 127.0.0.1, with deadlines scaled
down to fractions of a second: slow and idle connections are closed past their deadline, never a
request being handled; the cap holds against 1,500 slow sockets while a scraper is still answered;
malformed requests cost one log line per kind, at the configured level, never a traceback."""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from runtimekit.config import ListenerConfig
from runtimekit.listener import effective_max_connections, listening
from runtimekit.log_summary import EventSummary

HEADER, BODY, KEEPALIVE = 0.5, 0.5, 1.0  # seconds: the policy under test
SLACK = 2.0  # seconds past a deadline by which the connection must be closed (a loaded CI machine)
SLOW_HANDLER = 1.5  # seconds: longer than every deadline
SLOW_SOCKETS = 1500


def policy(**changes: object) -> ListenerConfig:
    values: dict = {"header_timeout_seconds": HEADER, "body_timeout_seconds": BODY,
                    "keepalive_timeout_seconds": KEEPALIVE, "max_connections": 256,
                    "client_error_log_level": "warning", **changes}
    return ListenerConfig(**values)


def make_app() -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="up 1\n")

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(SLOW_HANDLER)
        return web.Response(text="done\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/echo", echo)
    app.router.add_get("/slow", slow)
    return app


@pytest.fixture
async def served(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, int]]:
    """(host, port) of the test app served under ``policy(**param)``."""
    changes = getattr(request, "param", {})
    async with listening(make_app(), "127.0.0.1", 0, policy(**changes)) as listener:
        host, port = listener.address.removeprefix("http://").rsplit(":", 1)
        yield host, int(port)


async def connect(address: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*address)


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    """True when the server closes the connection within ``within`` seconds (what it sent is read)."""
    try:
        async with asyncio.timeout(within):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


async def get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str = "/metrics") -> bytes:
    """One keep-alive request; the response's status line and body."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    return head.split(b"\r\n")[0] + b" " + await reader.readexactly(length)


async def scrape(address: tuple[str, int], timeout: float = 5.0) -> bytes:
    async with asyncio.timeout(timeout):
        reader, writer = await connect(address)
        try:
            return await get(reader, writer)
        finally:
            writer.close()


async def trickle(writer: asyncio.StreamWriter, reader: asyncio.StreamReader, seconds: float) -> bool:
    """Send a byte every 0.1 s for ``seconds`` (a slowloris client); True when the server closed
    the connection meanwhile."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        try:
            writer.write(b"a")
            await writer.drain()
        except ConnectionError:
            return True
        if await closed_by_server(reader, 0.1):
            return True
    return False


async def test_a_connection_that_never_sends_a_request_is_closed_after_the_header_timeout(served):
    reader, writer = await connect(served)
    assert await closed_by_server(reader, HEADER + SLACK)
    writer.close()


async def test_headers_sent_a_byte_at_a_time_are_cut_at_the_header_timeout(served):
    reader, writer = await connect(served)
    writer.write(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
    assert await trickle(writer, reader, HEADER + SLACK), "a slowloris client kept its connection"
    writer.close()


async def test_a_body_sent_a_byte_at_a_time_is_cut_at_the_body_timeout(served, caplog):
    caplog.set_level(logging.DEBUG)
    reader, writer = await connect(served)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n0123456789")
    assert await trickle(writer, reader, BODY + SLACK), "a slow body kept its connection"
    writer.close()
    await asyncio.sleep(0.1)  # the handler reading the body sees its connection gone
    assert not [r for r in caplog.records if r.exc_info], "the handler cut off logged a traceback"
    assert [r.levelno for r in caplog.records if "request body too slow" in r.getMessage()] == [logging.WARNING]


async def test_a_kept_alive_connection_is_served_until_idle_past_the_keepalive_timeout(served):
    reader, writer = await connect(served)
    assert await get(reader, writer) == b"HTTP/1.1 200 OK up 1\n"
    await asyncio.sleep(HEADER + 0.2)  # idle longer than the header deadline: idle is keep-alive's
    assert await get(reader, writer) == b"HTTP/1.1 200 OK up 1\n"
    assert await closed_by_server(reader, KEEPALIVE + SLACK)
    writer.close()


async def test_a_request_whose_handler_outlasts_every_deadline_is_answered(served):
    reader, writer = await connect(served)
    assert await get(reader, writer, "/slow") == b"HTTP/1.1 200 OK done\n"
    writer.close()


async def test_a_whole_body_is_answered(served):
    reader, writer = await connect(served)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
    assert (await reader.read()).endswith(b"\r\n\r\nhello")
    writer.close()


def raise_descriptor_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


CAP = 200
SLOW_HEADER = 2.0  # seconds: longer than the scrapes, so the cap (not the deadline) must make room


@pytest.mark.parametrize("served", [{"max_connections": CAP, "header_timeout_seconds": SLOW_HEADER}], indirect=True)
async def test_1500_slow_or_idle_sockets_neither_starve_a_scraper_nor_outlive_their_deadline(served):
    raise_descriptor_limit(2 * SLOW_SOCKETS + 500)  # both ends of every socket live in this process
    loop = asyncio.get_running_loop()
    started = loop.time()
    slow = []
    for i in range(SLOW_SOCKETS):
        reader, writer = await connect(served)
        if i % 2:
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: t\r\nX-Slow: ")  # headers never finished
        slow.append((reader, writer))
    try:
        answers = [await scrape(served, timeout=2.0) for _ in range(20)]
        await asyncio.sleep(0.2)
        still_open = sum(not reader.at_eof() for reader, _ in slow)
        elapsed = loop.time() - started
        closed = await asyncio.gather(*(closed_by_server(reader, max(SLACK, SLOW_HEADER - elapsed + SLACK)) for reader, _ in slow))
    finally:
        for _, writer in slow:
            writer.close()
    assert answers == [b"HTTP/1.1 200 OK up 1\n"] * 20
    assert still_open <= CAP, f"{still_open} slow connections open, max_connections {CAP}"
    assert all(closed), f"{closed.count(False)} slow connections outlived the {SLOW_HEADER} s header deadline"


@pytest.mark.parametrize("served", [{"max_connections": 3}], indirect=True)
async def test_at_the_cap_requests_in_progress_are_kept_and_a_new_connection_refused(served):
    busy = [await connect(served) for _ in range(3)]
    answers = [asyncio.create_task(get(reader, writer, "/slow")) for reader, writer in busy]
    await asyncio.sleep(0.3)  # the three requests are being handled
    reader, writer = await connect(served)
    assert await closed_by_server(reader, SLACK)
    assert await asyncio.gather(*answers) == [b"HTTP/1.1 200 OK done\n"] * 3
    for _, each in [*busy, (reader, writer)]:
        each.close()


MALFORMED = {
    "BadHttpMethod": b"G\x01T / HTTP/1.1\r\nHost: t\r\n\r\n",
    "LineTooLong": b"GET /metrics HTTP/1.1\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",
    "BadHttpMessage": b"GET /metrics HTTP/1.1\r\nBad Header: x\r\n\r\n",
}


@pytest.mark.parametrize("served, level", [({"client_error_log_level": "debug"}, logging.DEBUG),
                                           ({"client_error_log_level": "error"}, logging.ERROR)],
                         indirect=["served"])
async def test_malformed_requests_are_logged_once_per_kind_at_the_chosen_level(served, level, caplog):
    caplog.set_level(logging.DEBUG)
    for _ in range(20):
        for request in MALFORMED.values():
            reader, writer = await connect(served)
            writer.write(request)
            assert b" 400 " in (await reader.read()).split(b"\r\n")[0]
            writer.close()
    assert not [r for r in caplog.records if r.exc_info], "a client error was logged with a traceback"
    for kind in MALFORMED:
        lines = [r for r in caplog.records if r.getMessage().startswith(f"client errors: {kind}: ")]
        assert len(lines) == 1, f"{kind}: {len(lines)} lines"
        assert lines[0].levelno == level
    assert await scrape(served) == b"HTTP/1.1 200 OK up 1\n"


def test_a_summary_counts_what_was_not_logged_and_forgets_quiet_kinds(caplog):
    caplog.set_level(logging.INFO)
    summary = EventSummary(logging.getLogger("runtimekit.listener"), "client errors", logging.INFO, 60)
    assert summary.note("BadStatusLine", "x") and not summary.note("BadStatusLine", "x")
    assert not summary.note("BadStatusLine", "x") and summary.note("LineTooLong", "y")
    assert len(caplog.records) == 2
    assert summary.flush() is True
    assert caplog.records[-1].getMessage() == "client errors in the last 60 s: BadStatusLine: 2"
    assert summary.flush() is False and len(caplog.records) == 3  # a quiet minute: nothing to say
    assert summary.note("BadStatusLine", "x"), "after a quiet minute the next one is logged in full"


@pytest.mark.parametrize("configured, limit, cap", [(256, 1024, 256), (256, 128, 64), (256, None, 256), (9, 10, 1)])
def test_the_cap_leaves_descriptors_to_the_rest_of_the_process(configured, limit, cap):
    assert effective_max_connections(configured, limit) == cap
