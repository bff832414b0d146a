"""The remediation receiver behind the web configuration file, served by the listener as
``runtimekit remediate serve`` serves it: its bearer token and the file's bcrypt users are one gate;
client certificates alone may be the credential; refusals are counted; the body limit and a slow
client are handled as on the agent; a new password applies without a restart."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from runtimekit.kube.remediation.config import load
from runtimekit.kube.remediation.server import make_app
from runtimekit.listener import Listener, listening
from tests.kube_fakes import FakeKube, serve
from tests.security.pki import USER, basic, client_context, user_hash, write_web_config

HEADER_TIMEOUT = 0.5
ALERTS = {"version": "4", "status": "firing", "receiver": "rk", "groupKey": "{}:{}", "truncatedAlerts": 0,
          "groupLabels": {}, "commonLabels": {}, "alerts": []}


@pytest.fixture
async def kubeconfig(tmp_path: Path) -> AsyncIterator[Path]:
    kube = FakeKube()
    runner, url = await serve(kube.app)
    (tmp_path / "kubeconfig").write_text(kube.kubeconfig(url))
    yield tmp_path / "kubeconfig"
    await runner.cleanup()


async def receiver(tmp_path: Path, kubeconfig: Path, web_config: Path, **keys: Any) -> AsyncIterator[Listener]:
    data = {"listen": "127.0.0.1:0", "db_path": str(tmp_path / "j.db"), "action_delay_seconds": 3600,
            "kubernetes": {"kubeconfig": str(kubeconfig)}, "max_body_bytes": 4096,
            "listener": {"web_config_file": str(web_config), "header_timeout_seconds": HEADER_TIMEOUT}, **keys}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    config = load(tmp_path / "config.yaml")
    async with listening(make_app(config), "127.0.0.1", 0, config.listener) as listener:
        yield listener


async def call(listener: Listener, path: str, context: ssl.SSLContext, headers: dict[str, str] | None = None,
               body: bytes | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        sent = {**({"Content-Type": "application/json"} if body is not None else {}), **(headers or {})}
        async with session.request("POST" if body is not None else "GET", listener.address + path, ssl=context,
                                   headers=sent, data=body) as response:
            return response.status, await response.text()


@pytest.fixture
async def token_or_users(pki, tmp_path, kubeconfig) -> AsyncIterator[Listener]:
    """TLS, the file's user, and the bearer token of auth.token_file."""
    (tmp_path / "token").write_text("s3cret-token\n")
    web_config = write_web_config(tmp_path / "web.yml", pki, users={USER: user_hash()})
    async for listener in receiver(tmp_path, kubeconfig, web_config, auth={"token_file": str(tmp_path / "token")}):
        yield listener


@pytest.mark.parametrize("authorization", [basic(), "Bearer s3cret-token"], ids=["file-user", "token"])
async def test_the_files_users_and_the_token_both_get_in(pki, token_or_users, authorization):
    context = client_context(pki, None)
    status, _ = await call(token_or_users, "/api/v1/alerts", context, {"Authorization": authorization},
                           json.dumps(ALERTS).encode())
    assert status == 200
    assert (await call(token_or_users, "/api/v1/actions", context, {"Authorization": authorization}))[0] == 200


async def test_missing_or_wrong_credentials_are_401_and_counted(pki, token_or_users):
    context = client_context(pki, None)
    for headers in ({}, {"Authorization": basic(password="wrong")}, {"Authorization": "Bearer wrong"}):
        status, body = await call(token_or_users, "/api/v1/actions", context, headers)
        assert status == 401 and "missing or wrong credentials" in body
    status, metrics = await call(token_or_users, "/metrics", context, {"Authorization": basic()})
    assert status == 200
    assert 'runtimekit_remediation_requests_rejected_total{code="401"} 3' in metrics


async def test_an_oversized_body_is_413_and_counted(pki, token_or_users):
    context, auth = client_context(pki, None), {"Authorization": basic()}
    status, _ = await call(token_or_users, "/api/v1/alerts", context, auth, b"{" + b" " * 5000 + b"}")
    assert status == 413
    metrics = (await call(token_or_users, "/metrics", context, auth))[1]
    assert 'runtimekit_remediation_requests_rejected_total{code="413"} 1' in metrics


async def test_a_client_that_sends_slowly_is_cut(pki, token_or_users):
    host, port = token_or_users.address.removeprefix("https://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port), ssl=client_context(pki, None),
                                                   server_hostname="127.0.0.1")
    writer.write(b"POST /api/v1/alerts HTTP/1.1\r\nHost: x\r\n")
    await writer.drain()
    try:
        async with asyncio.timeout(HEADER_TIMEOUT + 5):
            while await reader.read(65536):
                pass
    except (ConnectionError, ssl.SSLError):
        pass
    writer.close()


async def test_client_certificates_alone_are_a_credential(pki, tmp_path, kubeconfig):
    web_config = write_web_config(tmp_path / "web.yml", pki, mtls=True)
    async for listener in receiver(tmp_path, kubeconfig, web_config):
        assert (await call(listener, "/api/v1/actions", client_context(pki)))[0] == 200
        with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
            await call(listener, "/api/v1/actions", client_context(pki, "rogue"))


async def test_a_new_password_applies_without_a_restart(pki, tmp_path, kubeconfig):
    web_config = write_web_config(tmp_path / "web.yml", pki, users={USER: user_hash("first")})
    async for listener in receiver(tmp_path, kubeconfig, web_config):
        context = client_context(pki, None)
        assert (await call(listener, "/api/v1/actions", context, {"Authorization": basic(password="first")}))[0] == 200
        write_web_config(web_config, pki, users={USER: user_hash("second")})
        assert (await call(listener, "/api/v1/actions", context, {"Authorization": basic(password="first")}))[0] == 401
        assert (await call(listener, "/api/v1/actions", context, {"Authorization": basic(password="second")}))[0] == 200


async def test_basic_file_credentials_go_through_the_same_gate(pki, tmp_path, kubeconfig):
    (tmp_path / "basic").write_text("am:pässword\n")
    web_config = write_web_config(tmp_path / "web.yml", pki)
    async for listener in receiver(tmp_path, kubeconfig, web_config, auth={"basic_file": str(tmp_path / "basic")}):
        context = client_context(pki, None)
        ok = basic(user="am", password="pässword")
        assert (await call(listener, "/api/v1/actions", context, {"Authorization": ok}))[0] == 200
        assert (await call(listener, "/api/v1/actions", context, {"Authorization": basic(user="am")}))[0] == 401
        assert (await call(listener, "/healthz", context))[0] == 200
