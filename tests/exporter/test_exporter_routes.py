"""GET /metrics through aiohttp's test client: content negotiation and gzip."""

from __future__ import annotations

import gzip

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from exporter_factories import make_snapshot, make_state

from runtimekit.exporter.exposition import ExpositionCache
from runtimekit.exporter.registry import build_collector_set
from runtimekit.exporter.routes import accepts_gzip, add_exporter_routes, negotiate_format

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


@pytest.fixture
async def client():
    state = make_state(make_snapshot())
    app = web.Application()
    add_exporter_routes(app, ExpositionCache(state, build_collector_set(timer=lambda: 0.0)))
    async with TestClient(TestServer(app), auto_decompress=False) as client:
        yield client


async def test_default_is_prometheus_text(client):
    # aiohttp's client asks for gzip by default; a scraper that does not must get plain text.
    resp = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "Content-Encoding" not in resp.headers
    body = await resp.read()
    assert b"# TYPE runtimekit_gpu_info gauge" in body and not body.endswith(b"# EOF\n")


async def test_openmetrics_when_asked(client):
    resp = await client.get("/metrics", headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "identity"})
    assert resp.headers["Content-Type"] == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    body = await resp.read()
    assert body.endswith(b"# EOF\n") and b"# TYPE runtimekit_gpu info" in body


async def test_gzip_when_accepted(client):
    resp = await client.get("/metrics", headers={"Accept-Encoding": "gzip, deflate"})
    assert resp.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in resp.headers["Vary"]
    assert b"runtimekit_nvml_up 1.0" in gzip.decompress(await resp.read())


async def test_gzip_openmetrics(client):
    resp = await client.get("/metrics", headers={"Accept": "application/openmetrics-text", "Accept-Encoding": "gzip"})
    assert resp.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert gzip.decompress(await resp.read()).endswith(b"# EOF\n")


@pytest.mark.parametrize(
    "accept, expected",
    [
        ("", "text"),
        ("*/*", "text"),
        ("text/plain;version=0.0.4", "text"),
        ("application/openmetrics-text", "openmetrics"),
        ("Application/OpenMetrics-Text; version=1.0.0", "openmetrics"),
        ("application/openmetrics-text;version=0.0.1", "openmetrics"),
        ("application/openmetrics-text;version=2.0.0", "text"),
        ("application/openmetrics-text;q=0", "text"),
        (PROMETHEUS_ACCEPT, "openmetrics"),
    ],
)
def test_negotiate_format(accept, expected):
    assert negotiate_format(accept) == expected


@pytest.mark.parametrize(
    "header, expected",
    [("", False), ("gzip", True), ("deflate, gzip;q=1.0", True), ("gzip;q=0", False), ("br", False), ("x-gzip", False)],
)
def test_accepts_gzip(header, expected):
    assert accepts_gzip(header) == expected
