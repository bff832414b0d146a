"""An alert that asks for a ladder but cannot be acted on — no node label, or an action label that
is not an action name — is logged as a warning naming the label and the alert, once per alert
(Alertmanager's re-sends are duplicates), and counted in /metrics by reason."""

from __future__ import annotations

import logging

from aiohttp.test_utils import TestClient, TestServer
from conftest import AUTH, alert_body, write_config

from runtimekit.kube.remediation.config import load
from runtimekit.kube.remediation.server import JOURNAL, make_app

LOGGER = "runtimekit.kube.remediation"


def _without_node(fingerprint: str, alertname: str = "RuntimeKitGPUReplaceNode") -> dict:
    body = alert_body(fingerprint=fingerprint)
    labels = body["alerts"][0]["labels"]
    del labels["node"]
    labels["alertname"] = alertname
    return body


async def _metrics(client) -> str:
    return await (await client.get("/metrics", headers=AUTH)).text()


async def test_an_alert_without_the_node_label_is_logged_once_and_counted(fakes, tmp_path, caplog):
    client = TestClient(TestServer(make_app(load(write_config(tmp_path, fakes[2], action_delay_seconds=3600)))))
    await client.start_server()
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            for _ in range(3):  # Alertmanager re-sends: journaled once, warned about once
                response = await client.post("/api/v1/alerts", json=_without_node("fpX"), headers=AUTH)
                assert response.status == 200
                assert (await response.json())["actions"] == 0
        warnings = [r.getMessage() for r in caplog.records if r.name.startswith(LOGGER) and r.levelno == logging.WARNING]
        assert len(warnings) == 1, warnings
        assert "'node'" in warnings[0] and "RuntimeKitGPUReplaceNode" in warnings[0] and "fpX" in warnings[0]
        assert "node_label" in warnings[0], warnings[0]
        metrics = await _metrics(client)
        assert 'runtimekit_remediation_alerts_unactionable_total{reason="no_node_label"} 1' in metrics, metrics
        assert 'runtimekit_remediation_alerts_unactionable_total{reason="unknown_action"} 0' in metrics, metrics
        assert client.server.app[JOURNAL].snapshot() == (1, 0)
    finally:
        await client.close()


async def test_many_alerts_without_the_node_label_are_one_line_per_notification(fakes, tmp_path, caplog):
    client = TestClient(TestServer(make_app(load(write_config(tmp_path, fakes[2], action_delay_seconds=3600)))))
    await client.start_server()
    alerts = [_without_node(f"fp{i}")["alerts"][0] for i in range(10)]
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            body = {**alert_body(), "alerts": alerts}
            assert (await client.post("/api/v1/alerts", json=body, headers=AUTH)).status == 200
        warnings = [r.getMessage() for r in caplog.records if r.name.startswith(LOGGER) and r.levelno == logging.WARNING]
        assert len(warnings) == 1 and warnings[0].startswith("10 alert(s)"), warnings
        assert "fp0" in warnings[0] and "and 7 more" in warnings[0], warnings[0]
        assert 'alerts_unactionable_total{reason="no_node_label"} 10' in await _metrics(client)
    finally:
        await client.close()


async def test_an_alert_whose_ladder_is_empty_needs_no_node(fakes, tmp_path, caplog):
    """action none asks for nothing whatever its labels: no warning, nothing counted."""
    client = TestClient(TestServer(make_app(load(write_config(tmp_path, fakes[2], action_delay_seconds=3600)))))
    await client.start_server()
    try:
        body = _without_node("fpN")
        body["alerts"][0]["labels"]["action"] = "none"
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert (await client.post("/api/v1/alerts", json=body, headers=AUTH)).status == 200
        assert not [r for r in caplog.records if r.name.startswith(LOGGER) and r.levelno >= logging.WARNING]
        assert 'alerts_unactionable_total{reason="no_node_label"} 0' in await _metrics(client)
    finally:
        await client.close()


async def test_an_alert_whose_action_label_is_not_an_action_is_counted(fakes, tmp_path):
    client = TestClient(TestServer(make_app(load(write_config(tmp_path, fakes[2], action_delay_seconds=3600)))))
    await client.start_server()
    try:
        for _ in range(2):
            body = alert_body(fingerprint="fpA", action="replace-node")
            assert (await client.post("/api/v1/alerts", json=body, headers=AUTH)).status == 200
        metrics = await _metrics(client)
        assert 'alerts_unactionable_total{reason="unknown_action"} 1' in metrics, metrics
        assert 'alerts_unactionable_total{reason="no_node_label"} 0' in metrics, metrics
    finally:
        await client.close()
