"""How basic credentials wait for bcrypt (runtimekit.webconfig.basic) and what the listener does with
a request that waits (runtimekit.listener): successes and failures are remembered apart, a
remembered success never waits, checks take turns by client address with a bounded number waiting
(past it: refused at once, the password untested), equal credentials share one check, a request
given up neither stalls the turns nor loses its check, and at the connection cap a request waiting
for a check is closed for a new connection. bcrypt is replaced by a gate the test opens."""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from runtimekit.config import ListenerConfig
from runtimekit.listener import Listener, listening
from runtimekit.webconfig import basic as basic_module
from runtimekit.webconfig.basic import (
    CACHE_SIZE,
    CLIENT,
    MAX_WAITING,
    MAX_WAITING_PER_ADDRESS,
    BasicAuthChecker,
    Client,
    hash_password,
)
from tests.security.pki import basic, client_context, write_web_config

RIGHT = "right"
USERS = {"u": hash_password(b"unused", 4)}  # the gate, not this hash, says which password is right


class Gate:
    """bcrypt's stand-in (``basic._matches``): records each password checked, in order, and holds
    each check while closed; ``RIGHT`` is the one right password."""

    def __init__(self) -> None:
        self.checked: list[str] = []
        self.open = threading.Event()
        self.open.set()

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        self.checked.append(password.decode())
        self.open.wait(10)
        return password == RIGHT.encode()

    async def checking(self, count: int) -> None:
        """Until ``count`` checks have reached bcrypt."""
        async with asyncio.timeout(5):
            while len(self.checked) < count:
                await asyncio.sleep(0.005)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    stand_in = Gate()
    monkeypatch.setattr(basic_module, "_matches", stand_in)
    yield stand_in
    stand_in.open.set()  # no worker thread is left waiting


def check(checker: BasicAuthChecker, password: str, address: str = "10.0.0.1",
          client: Client | None = None) -> asyncio.Task[bool]:
    """A request from ``address`` (or of ``client``) checking ``u:password``, as a task of its own."""
    async def request() -> bool:
        CLIENT.set(client or Client(address))
        return await checker.check(basic("u", password), USERS)

    return asyncio.create_task(request())


async def settled(*tasks: asyncio.Task[bool]) -> list[bool]:
    async with asyncio.timeout(5):
        return list(await asyncio.gather(*tasks))


async def test_wrong_passwords_never_push_out_a_right_one(gate):
    checker = BasicAuthChecker()
    assert await check(checker, RIGHT)
    for guess in range(2 * CACHE_SIZE):
        assert not await check(checker, f"guess-{guess}")
    assert not await check(checker, "guess-0")  # a failure is remembered too, the older half forgotten
    assert await check(checker, RIGHT)
    assert gate.checked.count(RIGHT) == 1 and gate.checked.count("guess-0") == 2


async def test_a_remembered_success_does_not_wait_for_the_checks_under_way(gate):
    checker = BasicAuthChecker()
    assert await check(checker, RIGHT)
    gate.open.clear()
    guesses = [check(checker, f"guess-{n}") for n in range(3)]
    await gate.checking(2)  # the right password before, then the first guess, which holds the turn
    assert await asyncio.wait_for(check(checker, RIGHT), 5.0)
    gate.open.set()
    assert await settled(*guesses) == [False] * 3


async def test_an_address_past_its_waiting_checks_is_refused_at_once_untested(gate, caplog):
    checker = BasicAuthChecker()
    gate.open.clear()
    admitted = [check(checker, f"guess-{n}") for n in range(1 + MAX_WAITING_PER_ADDRESS)]  # one runs
    await gate.checking(1)
    assert not await asyncio.wait_for(check(checker, "guess-refused"), 5.0)
    assert "refused at once" in caplog.text and "10.0.0.1" in caplog.text
    other_address = check(checker, RIGHT, "10.0.0.2")
    gate.open.set()
    assert await settled(*admitted, other_address) == [False] * len(admitted) + [True]
    assert "guess-refused" not in gate.checked


async def test_all_addresses_together_have_a_bounded_number_of_checks_waiting(gate):
    checker = BasicAuthChecker()
    gate.open.clear()
    admitted = [check(checker, f"guess-{n}", f"10.1.{n // 256}.{n % 256}") for n in range(1 + MAX_WAITING)]
    await gate.checking(1)
    assert not await asyncio.wait_for(check(checker, RIGHT, "10.2.0.1"), 5.0)
    gate.open.set()
    await settled(*admitted)
    assert RIGHT not in gate.checked and len(gate.checked) == 1 + MAX_WAITING


async def test_the_turns_go_round_the_addresses(gate):
    checker = BasicAuthChecker()
    gate.open.clear()
    tasks = [check(checker, f"a{n}", "10.0.0.1") for n in range(4)]
    await gate.checking(1)
    tasks += [check(checker, "b0", "10.0.0.2"), check(checker, "c0", "10.0.0.3")]
    await asyncio.sleep(0.05)
    gate.open.set()
    await settled(*tasks)
    assert gate.checked == ["a0", "a1", "b0", "c0", "a2", "a3"]


async def test_equal_credentials_share_one_check_and_their_connections_say_they_wait(gate):
    checker = BasicAuthChecker()
    gate.open.clear()
    running = check(checker, "other")
    await gate.checking(1)
    client = Client("10.0.0.1")
    same = [check(checker, RIGHT, client=client) for _ in range(3 * MAX_WAITING_PER_ADDRESS)]
    await asyncio.sleep(0.05)
    assert client.waiting == len(same)
    gate.open.set()
    assert await settled(*same) == [True] * len(same)
    assert not await running
    assert gate.checked == ["other", RIGHT] and client.waiting == 0


async def test_a_request_given_up_leaves_its_check_to_finish_and_be_remembered(gate):
    checker = BasicAuthChecker()
    gate.open.clear()
    running, given_up = check(checker, "other"), check(checker, RIGHT, "10.0.0.2")
    await gate.checking(1)
    given_up.cancel()
    gate.open.set()
    assert await settled(running) == [False]
    await gate.checking(2)
    assert await asyncio.wait_for(check(checker, RIGHT), 5.0)
    assert gate.checked == ["other", RIGHT]


# -- the listener ----------------------------------------------------------------------------------

def make_app() -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="up 1\n")

    async def who(request: web.Request) -> web.Response:
        client = CLIENT.get()
        return web.Response(text=client.address if client else "nobody")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", who)  # an open path: it needs no password
    return app


@pytest.fixture
async def served(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Listener]:
    """The app under a web configuration file with user u (``request.param``: ``tls``, or the cap)."""
    pki = request.getfixturevalue("pki") if request.param == "tls" else None
    web_config = write_web_config(tmp_path / "web.yml", pki, users={"u": USERS["u"].decode()})
    cap = request.param if isinstance(request.param, int) else 256
    async with listening(make_app(), "127.0.0.1", 0, ListenerConfig(web_config_file=str(web_config),
                                                                    max_connections=cap)) as listener:
        yield listener


async def get(listener: Listener, path: str, *, local_host: str = "127.0.0.1", password: str = RIGHT,
              context: ssl.SSLContext | bool = False) -> tuple[int, str]:
    connector = aiohttp.TCPConnector(force_close=True, local_addr=(local_host, 0), ssl=context)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=5)) as session:
        async with session.get(listener.address + path, headers={"Authorization": basic("u", password)}) as response:
            return response.status, await response.text()


@pytest.mark.parametrize("served", ["plain", "tls"], indirect=True)
async def test_each_request_knows_the_address_it_comes_from(served, request):
    context = client_context(request.getfixturevalue("pki"), None) if served.address.startswith("https") else False
    assert await get(served, "/healthz", context=context) == (200, "127.0.0.1")
    assert await get(served, "/healthz", local_host="127.0.0.2", context=context) == (200, "127.0.0.2")


@pytest.mark.parametrize("served", [3], indirect=True)
async def test_at_the_cap_a_request_waiting_for_a_check_makes_room(served, gate, caplog):
    caplog.set_level(logging.WARNING)
    assert await get(served, "/metrics") == (200, "up 1\n")  # remembered
    gate.open.clear()
    waiting = [asyncio.create_task(get(served, "/metrics", password=f"guess-{n}")) for n in range(3)]
    await gate.checking(2)  # the right password before, then the first guess, which holds the turn
    await asyncio.sleep(0.1)  # the three requests are read: every slot is handling one
    assert await asyncio.wait_for(get(served, "/metrics"), 2.0) == (200, "up 1\n")
    assert "closed the one most recently waiting for a password check" in caplog.text
    gate.open.set()
    outcomes = await asyncio.gather(*waiting, return_exceptions=True)
    assert sum(isinstance(outcome, aiohttp.ClientError) for outcome in outcomes) == 1, outcomes
    assert [outcome for outcome in outcomes if isinstance(outcome, tuple)] == [(401, '{"error": "missing or wrong credentials"}')] * 2


@pytest.mark.parametrize(("peer", "host"), [
    ("ipv4:10.9.0.1:51234", "10.9.0.1"), ("ipv6:[::1]:51234", "::1"), ("ipv6:%5Bfd00::7%5D:443", "fd00::7"),
    ("unix:/run/runtimekit.sock", "unix:/run/runtimekit.sock"),
])
def test_the_grpc_port_takes_each_calls_turn_by_its_peers_address(peer, host):
    """The gRPC port's calls take turns by their peer's address, as the HTTP listener's connections
    do (before, they all shared one, so a few wrong guesses refused a right password untested)."""
    from runtimekit.webconfig.grpc_port import peer_host

    assert peer_host(peer) == host
