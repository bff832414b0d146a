"""The HTTP listener (runtimekit.listener) under a web configuration file, over real sockets and
real TLS: credentials, client certificates, allowed SANs, the body limit, slow TLS clients, and
changes of the file applied without a restart, and a reload that would lower the protection
refused (fail closed). The agent and the remediation service both serve
through it (their own tests: test_agent_security.py, test_remediation_security.py)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web

from runtimekit.config import ListenerConfig
from runtimekit.listener import Listener, listening
from tests.security.pki import USER, basic, client_context, user_hash, write_web_config

HEADER_TIMEOUT = 0.5  # seconds: the listener's header deadline, which bounds the TLS handshake too
SLACK = 3.0


def make_app() -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="up 1\n")

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    app = web.Application(client_max_size=1024)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", metrics)
    app.router.add_post("/echo", echo)
    return app


async def serve(web_config: Path, **policy: object) -> AsyncIterator[Listener]:
    values: dict = {"web_config_file": str(web_config), "header_timeout_seconds": HEADER_TIMEOUT, **policy}
    config = ListenerConfig(**values)
    async with listening(make_app(), "127.0.0.1", 0, config) as listener:
        yield listener


@pytest.fixture
async def mtls_with_users(pki, tmp_path) -> AsyncIterator[Listener]:
    """Client certificates required and a basic auth user."""
    async for listener in serve(write_web_config(tmp_path / "web.yml", pki, mtls=True, users={USER: user_hash()})):
        yield listener


async def fetch(listener: Listener, path: str = "/metrics", *, context: ssl.SSLContext | bool = False,
                headers: dict[str, str] | None = None, data: bytes | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        async with session.request("POST" if data is not None else "GET", listener.address + path, ssl=context,
                                   headers=headers or {}, data=data) as response:
            return response.status, await response.text()


async def test_metrics_over_tls_with_a_client_certificate_and_the_password(pki, mtls_with_users):
    assert mtls_with_users.address.startswith("https://127.0.0.1:")
    status, body = await fetch(mtls_with_users, context=client_context(pki), headers={"Authorization": basic()})
    assert (status, body) == (200, "up 1\n")


@pytest.mark.parametrize("headers", [{}, {"Authorization": basic(password="wrong")}, {"Authorization": basic(user="nobody")},
                                     {"Authorization": "Basic !!!"}, {"Authorization": "Bearer s3cret"}],
                         ids=["none", "wrong-password", "unknown-user", "malformed", "bearer"])
async def test_missing_or_wrong_credentials_are_401_with_a_challenge(pki, mtls_with_users, headers):
    async with aiohttp.ClientSession() as session:
        async with session.get(mtls_with_users.address + "/metrics", ssl=client_context(pki), headers=headers) as response:
            assert response.status == 401
            assert response.headers["WWW-Authenticate"] == 'Basic realm="runtimekit"'
            assert "up 1" not in await response.text()


async def test_the_probe_needs_no_password_but_still_a_certificate(pki, mtls_with_users):
    assert (await fetch(mtls_with_users, "/healthz", context=client_context(pki)))[0] == 200


@pytest.mark.parametrize("certificate", [None, "rogue"], ids=["no-certificate", "untrusted-certificate"])
async def test_a_client_without_a_trusted_certificate_is_refused_in_the_handshake(pki, mtls_with_users, certificate):
    with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
        await fetch(mtls_with_users, context=client_context(pki, certificate), headers={"Authorization": basic()})


async def test_a_client_that_does_not_trust_the_server_gives_up(mtls_with_users):
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await fetch(mtls_with_users, context=ssl.create_default_context())  # the system's roots


async def test_only_the_allowed_sans_get_in(pki, tmp_path):
    web_config = write_web_config(tmp_path / "web.yml", pki, mtls=True, client_allowed_sans=["scraper.example"])
    async for listener in serve(web_config):
        assert (await fetch(listener, context=client_context(pki, "client")))[0] == 200
        status, body = await fetch(listener, context=client_context(pki, "other"))
        assert status == 403 and "allowed SANs" in body


async def test_a_declared_body_over_the_limit_is_413_after_auth(pki, mtls_with_users):
    context, auth = client_context(pki), {"Authorization": basic()}
    assert await fetch(mtls_with_users, "/echo", context=context, headers=auth, data=b"x" * 1000) == (200, "x" * 1000)
    status, body = await fetch(mtls_with_users, "/echo", context=context, headers=auth, data=b"x" * 5000)
    assert status == 413 and "larger than 1024 bytes" in body
    assert (await fetch(mtls_with_users, "/echo", context=context, data=b"x" * 5000))[0] == 401


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except (ConnectionError, ssl.SSLError):
        pass
    return True


async def test_a_client_that_never_finishes_its_handshake_is_cut_at_the_header_timeout(mtls_with_users, caplog):
    caplog.set_level(logging.INFO)
    host, port = mtls_with_users.address.removeprefix("https://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"\x16\x03\x01")  # the first bytes of a ClientHello, and then nothing
    await writer.drain()
    assert await _closed_within(reader, HEADER_TIMEOUT + SLACK)
    writer.close()
    assert any("TLS handshake failed" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.exc_info]


async def test_at_the_cap_stalled_handshakes_make_room_for_a_scraper(pki, tmp_path):
    web_config = write_web_config(tmp_path / "web.yml", pki, mtls=True)
    async for listener in serve(web_config, max_connections=4, header_timeout_seconds=30.0):
        host, port = listener.address.removeprefix("https://").rsplit(":", 1)
        stalled = [await asyncio.open_connection(host, int(port)) for _ in range(12)]
        for _, writer in stalled:
            writer.write(b"\x16\x03\x01")  # a ClientHello begun, never finished
            await writer.drain()
        await asyncio.sleep(0.2)
        async with asyncio.timeout(10):
            assert (await fetch(listener, context=client_context(pki)))[0] == 200
        for _, writer in stalled:
            writer.close()


async def test_headers_sent_slowly_over_tls_are_cut_at_the_header_timeout(pki, mtls_with_users):
    host, port = mtls_with_users.address.removeprefix("https://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port), ssl=client_context(pki), server_hostname="127.0.0.1")
    writer.write(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
    await writer.drain()
    assert await _closed_within(reader, HEADER_TIMEOUT + SLACK)
    writer.close()


async def test_a_changed_password_applies_to_the_next_request(pki, tmp_path):
    web_config = write_web_config(tmp_path / "web.yml", pki, users={USER: user_hash("first")})
    async for listener in serve(web_config):
        context = client_context(pki, None)
        assert (await fetch(listener, context=context, headers={"Authorization": basic(password="first")}))[0] == 200
        write_web_config(web_config, pki, users={USER: user_hash("second")})
        assert (await fetch(listener, context=context, headers={"Authorization": basic(password="first")}))[0] == 401
        assert (await fetch(listener, context=context, headers={"Authorization": basic(password="second")}))[0] == 200


async def test_a_file_broken_while_serving_fails_closed_until_fixed(tmp_path, caplog):
    web_config = write_web_config(tmp_path / "web.yml", users={USER: user_hash()})  # plain HTTP, basic auth
    async for listener in serve(web_config):
        auth = {"Authorization": basic()}
        async with aiohttp.ClientSession() as session:  # one kept-alive connection
            async with session.get(listener.address + "/metrics", headers=auth) as response:
                assert response.status == 200
            web_config.write_text("basic_auth_users: {prometheus: not-a-hash}\n")
            async with session.get(listener.address + "/metrics", headers=auth) as response:
                assert response.status == 500 and "not-a-hash" not in await response.text()
        with pytest.raises(aiohttp.ServerDisconnectedError):  # a new connection: not served at all
            await fetch(listener, headers=auth)
        assert sum("refusing connections and requests" in r.getMessage() for r in caplog.records) == 1
        write_web_config(web_config, users={USER: user_hash()})
        assert (await fetch(listener, headers=auth))[0] == 200


async def test_tls_turned_on_applies_to_the_next_connection(pki, tmp_path):
    web_config = write_web_config(tmp_path / "web.yml")
    async for listener in serve(web_config):
        assert (await fetch(listener))[0] == 200
        write_web_config(web_config, pki)
        https = listener.address.replace("http://", "https://")
        async with aiohttp.ClientSession() as session:
            async with session.get(https + "/metrics", ssl=client_context(pki, None)) as response:
                assert response.status == 200


async def test_headers_and_the_rate_limit_of_the_file(tmp_path):
    (tmp_path / "web.yml").write_text(yaml.safe_dump({
        "http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}},
        "rate_limit": {"interval": "1h", "burst": 2}}))
    async for listener in serve(tmp_path / "web.yml"):
        async with aiohttp.ClientSession() as session:
            statuses = []
            for _ in range(3):
                async with session.get(listener.address + "/metrics") as response:
                    statuses.append(response.status)
                    assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert statuses == [200, 200, 429]


async def test_a_new_client_ca_applies_to_the_next_connection(pki, tmp_path):
    web_config = write_web_config(tmp_path / "web.yml", pki, mtls=True)
    async for listener in serve(web_config):
        assert (await fetch(listener, context=client_context(pki, "client")))[0] == 200
        web_config.write_text(web_config.read_text().replace(str(pki / "ca.pem"), str(pki / "rogue-ca.pem")))
        assert (await fetch(listener, context=client_context(pki, "rogue")))[0] == 200
        with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
            await fetch(listener, context=client_context(pki, "client"))


def _full(pki: Path, path: Path) -> Path:
    """Client certificates required, only scraper.example admitted, and a password."""
    return write_web_config(path, pki, mtls=True, users={USER: user_hash()}, client_allowed_sans=["scraper.example"])


LOWERINGS = {  # a reading of the file that serves with less than _full: (write it, the rule the log names)
    "emptied": (lambda pki, path: path.write_text(""), "the file is empty"),
    "tls-removed": (lambda pki, path: write_web_config(path, users={USER: user_hash()}), "tls_server_config: removed"),
    "users-removed": (lambda pki, path: write_web_config(path, pki, mtls=True, client_allowed_sans=["scraper.example"]),
                      "basic_auth_users: every user removed"),
    "client-certificates-optional": (
        lambda pki, path: write_web_config(path, pki, users={USER: user_hash()}, client_auth_type="VerifyClientCertIfGiven",
                                           client_ca_file=str(pki / "ca.pem"), client_allowed_sans=["scraper.example"]),
        "VerifyClientCertIfGiven is weaker than RequireAndVerifyClientCert"),
    "client-certificates-off": (lambda pki, path: write_web_config(path, pki, users={USER: user_hash()}),
                                "NoClientCert is weaker than RequireAndVerifyClientCert"),
    "allowed-sans-removed": (lambda pki, path: write_web_config(path, pki, mtls=True, users={USER: user_hash()}),
                             "client_allowed_sans: removed"),
}


@pytest.mark.parametrize("lowering", list(LOWERINGS))
async def test_a_reload_that_lowers_the_protection_fails_closed_until_restored(pki, tmp_path, caplog, lowering):
    web_config = _full(pki, tmp_path / "web.yml")
    write, rule = LOWERINGS[lowering]
    auth = {"Authorization": basic()}
    async for listener in serve(web_config):
        https, http = listener.address, listener.address.replace("https://", "http://")
        context = client_context(pki)
        async with aiohttp.ClientSession() as session:  # one kept-alive connection
            async with session.get(https + "/metrics", ssl=context, headers=auth) as response:
                assert response.status == 200
            write(pki, web_config)
            async with session.get(https + "/metrics", ssl=context, headers=auth) as response:
                assert response.status == 500
        for url, context in ((https, client_context(pki)), (https, client_context(pki, None)),
                             (https, client_context(pki, "other")), (http, False)):
            with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):  # new connections: not served
                async with aiohttp.ClientSession() as session:
                    async with session.get(url + "/metrics", ssl=context, headers=auth) as response:
                        pytest.fail(f"{url} with {context} answered {response.status}")
        refusals = [r.getMessage() for r in caplog.records if "refusing connections and requests" in r.getMessage()]
        assert len(refusals) == 1 and rule in refusals[0]
        _full(pki, web_config)
        assert await fetch(listener, context=client_context(pki), headers=auth) == (200, "up 1\n")


async def test_protection_raised_by_a_reload_is_kept_until_a_restart(pki, tmp_path, caplog):
    web_config = write_web_config(tmp_path / "web.yml")
    async for listener in serve(web_config):
        write_web_config(web_config, users={USER: user_hash()})
        assert (await fetch(listener))[0] == 401
        write_web_config(web_config)
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await fetch(listener)
        assert any("basic_auth_users: every user removed" in r.getMessage() and "restart" in r.getMessage()
                   for r in caplog.records)


async def test_credentials_over_plain_http_are_warned_about_at_start(pki, tmp_path, caplog):
    async for _ in serve(write_web_config(tmp_path / "plain.yml", users={USER: user_hash()})):
        pass
    async for _ in serve(write_web_config(tmp_path / "tls.yml", pki, users={USER: user_hash()})):
        pass
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if "credentials over plain HTTP" in w and "set tls_server_config" in w]) == 1
