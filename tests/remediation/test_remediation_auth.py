"""Every route but the probes asks for the webhook's credentials; any Authorization header, however
malformed (non-ASCII included), is answered 401 without a traceback, never 500."""

import asyncio
import base64
import logging

import pytest
from aiohttp.test_utils import TestClient, TestServer
from conftest import alert_body, write_config

from runtimekit.kube.remediation.config import load
from runtimekit.kube.remediation.server import JOURNAL, make_app

AUTH = {"Authorization": "Bearer s3cret"}


@pytest.fixture
async def client(fakes, tmp_path):
    (tmp_path / "basic").write_text("am:pässword\n")
    app = make_app(load(write_config(tmp_path, fakes[2], action_delay_seconds=3600,
                                     auth={"token_file": str(tmp_path / "token"), "basic_file": str(tmp_path / "basic")})))
    client = TestClient(TestServer(app))
    await client.start_server()
    assert (await client.post("/api/v1/alerts", json=alert_body(node="gpu-3"), headers=AUTH)).status == 200
    yield client
    await client.close()


async def _raw(client, method: str, path: str, authorization: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 request with the header's bytes exactly as given (a client library would refuse)."""
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n".encode()
                 + b"Authorization: " + authorization + b"\r\n\r\n")
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return int(answer.split(b" ", 2)[1]), answer


@pytest.mark.parametrize("header", ["Bearer s3crét".encode(), b"Bearer s3cr\xe9t", b"Basic \xff\xfe",
                                    b"Basic " + base64.b64encode("am:pässwörd".encode()),
                                    "Bearer 🙂".encode(), b"B\xc3\xa9arer s3cret"])
@pytest.mark.parametrize("method,path", [("POST", "/api/v1/alerts"), ("GET", "/api/v1/actions"), ("GET", "/metrics")])
async def test_a_non_ascii_authorization_header_is_401_without_a_traceback(client, caplog, header, method, path):
    caplog.set_level(logging.DEBUG)
    status, answer = await _raw(client, method, path, header)
    assert status == 401, answer
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def test_basic_credentials_with_non_ascii_characters_are_accepted(client):
    good = "Basic " + base64.b64encode("am:pässword".encode()).decode()
    status, _ = await _raw(client, "GET", "/api/v1/actions", good.encode())
    assert status == 200


@pytest.mark.parametrize("path", ["/api/v1/actions", "/metrics"])
async def test_the_journal_and_the_metrics_need_the_webhook_credentials(client, path):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic !!"}):
        response = await client.get(path, headers=headers)
        assert response.status == 401
        text = await response.text()
        assert "gpu-3" not in text and "rk-" not in text
        assert "Bearer" in response.headers["WWW-Authenticate"]
    response = await client.get(path, headers=AUTH)
    assert response.status == 200
    if path == "/api/v1/actions":
        assert "gpu-3" in await response.text()


async def test_the_probes_stay_open(client):
    for path in ("/healthz", "/readyz"):
        assert (await client.get(path)).status == 200, path


async def test_refusals_are_counted_by_status(client):
    await client.get("/api/v1/actions")
    await client.post("/api/v1/alerts", json=alert_body())
    metrics = await (await client.get("/metrics", headers=AUTH)).text()
    assert 'runtimekit_remediation_requests_rejected_total{code="401"} 2' in metrics
    assert client.server.app[JOURNAL].snapshot() == (1, 3)
