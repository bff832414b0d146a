"""An API server the service cannot reach or that refuses: each step that needs it fails — journaled
with a one-line error and logged as one line, never a traceback — and the worker goes on with the
other pending actions. The circuit breaker's node count is such a call: when it fails, the step
it guards fails. A dry run calls the API server not at all, so it journals every step anyway.
"""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from conftest import AUTH, alert_body, write_config

from runtimekit.kube.remediation.config import load
from runtimekit.kube.remediation.server import JOURNAL, make_app
from tests.kube_fakes import FakeKube, serve

FULL_LADDER = {"replace_node": ["cordon", "taint", "drain", "replace"]}
COUNT_ALWAYS = {"max_nodes": 10, "max_percent": 100, "min_nodes": 1}  # the node count decides from the first node


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def _client(tmp_path, kube_url: str, **extra) -> TestClient:
    (tmp_path / "kubeconfig").write_text(FakeKube().kubeconfig(kube_url))
    (tmp_path / "token").write_text("s3cret\n")
    config = load(write_config(tmp_path, f"http://127.0.0.1:{_closed_port()}/replace", **extra))
    client = TestClient(TestServer(make_app(config)))
    await client.start_server()
    return client


async def _settled(client: TestClient, seconds: float = 20.0) -> list:
    """The journal's actions once none is pending (AssertionError after ``seconds``)."""
    journal = client.server.app[JOURNAL]
    for _ in range(int(seconds / 0.05)):
        if not journal.pending():
            return journal.actions()
        await asyncio.sleep(0.05)
    raise AssertionError(f"still pending: {[(a.kind, a.node, a.state) for a in journal.pending()]}")


def _tracebacks(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info]


async def test_a_dry_run_journals_every_step_without_an_api_server(tmp_path, caplog):
    client = await _client(tmp_path, f"http://127.0.0.1:{_closed_port()}", dry_run=True, ladders=FULL_LADDER,
                           breaker=COUNT_ALWAYS)
    try:
        for fingerprint, node in (("a", "gpu-1"), ("b", "gpu-2")):
            body = alert_body(fingerprint=fingerprint, node=node)
            assert (await client.post("/api/v1/alerts", json=body, headers=AUTH)).status == 200
        actions = await _settled(client)
        assert len(actions) == 8
        for action in actions:
            assert action.state == "skipped" and action.result["dry_run"] is True, (action.kind, action.result)
        assert not _tracebacks(caplog)
    finally:
        await client.close()


@pytest.mark.parametrize("breaker", [COUNT_ALWAYS, {"max_nodes": 10, "max_percent": 100, "min_nodes": 2}],
                         ids=["node-count-needed", "node-count-not-needed"])
async def test_an_unreachable_api_server_fails_each_alert_in_one_line(tmp_path, caplog, breaker):
    caplog.set_level(logging.INFO)
    client = await _client(tmp_path, f"http://127.0.0.1:{_closed_port()}", breaker=breaker)
    try:
        for fingerprint, node in (("a", "gpu-1"), ("b", "gpu-2")):
            body = alert_body(fingerprint=fingerprint, node=node)
            assert (await client.post("/api/v1/alerts", json=body, headers=AUTH)).status == 200
        actions = await _settled(client)
        states = sorted((a.node, a.kind, a.state) for a in actions)
        assert states == [("gpu-1", "cordon", "failed"), ("gpu-1", "replace", "skipped"), ("gpu-1", "taint", "skipped"),
                          ("gpu-2", "cordon", "failed"), ("gpu-2", "replace", "skipped"), ("gpu-2", "taint", "skipped")]
        for cordon in (a for a in actions if a.kind == "cordon"):
            error = cordon.result["error"]
            assert "Kubernetes API" in error and "\n" not in error, error
            if breaker is COUNT_ALWAYS:
                assert error.startswith("circuit breaker: cannot count the cluster's nodes"), error
        assert not _tracebacks(caplog)
        failures = [r.getMessage() for r in caplog.records
                    if r.name.startswith("runtimekit.kube.remediation") and r.levelno >= logging.WARNING]
        assert len(failures) == 2 and all("\n" not in line for line in failures), failures
    finally:
        await client.close()


async def test_a_failing_node_count_fails_its_step_and_the_other_actions_go_on(tmp_path, caplog):
    """Alert b holds gpu-2; then the node list answers 503. Alert a (gpu-1) needs the count and
    fails; b's resolution is still acted on: gpu-2 is uncordoned."""
    kube = FakeKube()
    broken = {"list": False}

    @web.middleware
    async def failing_list(request, handler):
        if broken["list"] and request.method == "GET" and request.path == "/api/v1/nodes":
            return web.json_response({"kind": "Status", "code": 503, "message": "etcd is down"}, status=503)
        return await handler(request)

    kube.app.middlewares.append(failing_list)
    runner, url = await serve(kube.app)
    client = await _client(tmp_path, url, ladders={"replace_node": ["cordon"]}, breaker=COUNT_ALWAYS)
    try:
        assert (await client.post("/api/v1/alerts", json=alert_body(fingerprint="b", node="gpu-2"),
                                  headers=AUTH)).status == 200
        await _settled(client)
        assert kube.nodes["gpu-2"]["spec"]["unschedulable"] is True
        broken["list"] = True
        for body in (alert_body(fingerprint="a", node="gpu-1"),
                     alert_body(fingerprint="b", node="gpu-2", status="resolved")):
            assert (await client.post("/api/v1/alerts", json=body, headers=AUTH)).status == 200
        actions = {(a.fingerprint, a.kind): a for a in await _settled(client)}
        failed = actions[("a", "cordon")]
        assert failed.state == "failed" and failed.attempts == 0
        assert failed.result["error"].startswith("circuit breaker: cannot count the cluster's nodes"), failed.result
        assert "503" in failed.result["error"]
        assert actions[("b", "uncordon")].state == "done"
        assert kube.nodes["gpu-2"]["spec"]["unschedulable"] is False
        assert "unschedulable" not in kube.nodes["gpu-1"]["spec"]
        assert not _tracebacks(caplog)
    finally:
        await client.close()
        await runner.cleanup()
