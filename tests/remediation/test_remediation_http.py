import asyncio
import json

from aiohttp.test_utils import TestClient, TestServer
from conftest import alert_body, write_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtimekit.kube.remediation.config import load
from runtimekit.kube.remediation.server import JOURNAL, make_app

AUTH = {"Authorization": "Bearer s3cret"}
JSON = {"Content-Type": "application/json"}


async def _client(tmp_path, url, **extra):
    app = make_app(load(write_config(tmp_path, url, **extra)))
    client = TestClient(TestServer(app))
    await client.start_server()
    return client, app


async def test_rejections_leave_journal_unchanged(fakes, tmp_path):
    client, app = await _client(tmp_path, fakes[2], action_delay_seconds=3600)
    try:
        cases = [
            (JSON, json.dumps(alert_body()), 401),
            ({"Authorization": "Bearer wrong", **JSON}, json.dumps(alert_body()), 401),
            ({**AUTH, **JSON}, "{not json", 400),
            ({**AUTH, **JSON}, json.dumps({"version": "4"}), 400),
            ({**AUTH, **JSON}, "x" * (2 << 20), 413),
            # a valid alert that is not said to be JSON: a browser's cross-site text/plain form post
            ({**AUTH, "Content-Type": "text/plain"}, json.dumps(alert_body()), 415),
            (AUTH, json.dumps(alert_body()).encode(), 415),  # no Content-Type at all
        ]
        for headers, body, status in cases:
            resp = await client.post("/api/v1/alerts", data=body, headers=headers)
            assert resp.status == status
            assert "error" in await resp.json()
        assert app[JOURNAL].snapshot() == (0, 0)
        metrics = await (await client.get("/metrics", headers=AUTH)).text()
        assert 'runtimekit_remediation_requests_rejected_total{code="415"} 2' in metrics
    finally:
        await client.close()


async def test_unknown_paths_and_methods_are_json_errors(fakes, tmp_path):
    client, app = await _client(tmp_path, fakes[2], action_delay_seconds=3600)
    try:
        resp = await client.get("/api/v1/nope", headers=AUTH)
        assert resp.status == 404 and resp.content_type == "application/json"
        assert "no such path" in (await resp.json())["error"]
        resp = await client.get("/api/v1/alerts", headers=AUTH)
        assert resp.status == 405 and resp.content_type == "application/json"
        assert resp.headers["Allow"] == "POST" and "allowed: POST" in (await resp.json())["error"]
        resp = await client.delete("/api/v1/actions", headers=AUTH)
        assert resp.status == 405 and "GET" in resp.headers["Allow"]
    finally:
        await client.close()


async def test_one_alert_three_times_one_replacement(fakes, tmp_path):
    kube, repl, url = fakes
    client, app = await _client(tmp_path, url)
    try:
        for _ in range(3):
            assert (await client.post("/api/v1/alerts", json=alert_body(), headers=AUTH)).status == 200
        for _ in range(100):
            if len(repl.calls) and not app[JOURNAL].pending():
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        assert len(repl.calls) == 1
        key, body = repl.calls[0]
        # the GPUs come from the agent's own labels, `uuid` and `gpu` (not a `gpu_uuid` no alert carries)
        assert key.startswith("rk-") and body["node"] == "gpu-1" and body["gpu_uuids"] == ["GPU-a", "GPU-b"]
        assert body["gpu_indices"] == ["2", "3"] and body["fault"] == "RuntimeKitGPULost"
        node = kube.nodes["gpu-1"]["spec"]
        assert node["unschedulable"] is True
        assert node["taints"] == [{"key": "runtimekit.io/gpu-unhealthy", "value": "true", "effect": "NoSchedule"}]
        actions = (await (await client.get("/api/v1/actions", headers=AUTH)).json())["actions"]
        assert sorted((a["kind"], a["state"]) for a in actions) == [("cordon", "done"), ("replace", "done"),
                                                                  ("taint", "done")]
        metrics = await (await client.get("/metrics", headers=AUTH)).text()
        assert "runtimekit_remediation_alerts_duplicate_total 2" in metrics
    finally:
        await client.close()


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode),
                      st.dictionaries(st.text(max_size=10), st.integers() | st.text(max_size=5)).map(
                          lambda d: json.dumps(d).encode())),
       auth=st.sampled_from([None, "Bearer s3cret", "Bearer nope", "Basic !!", "Bearer"]))
def test_fuzz_never_journals_on_4xx(tmp_path_factory, body, auth):
    async def go():
        tmp = tmp_path_factory.mktemp("fz")
        (tmp / "token").write_text("s3cret")
        (tmp / "kubeconfig").write_text("{}")
        app = make_app(load(write_config(tmp, "http://127.0.0.1:9/x", action_delay_seconds=3600)), nodes=object())
        client = TestClient(TestServer(app))
        await client.start_server()
        try:
            resp = await client.post("/api/v1/alerts", data=body,
                                     headers={**JSON, **({"Authorization": auth} if auth else {})})
            assert 400 <= resp.status < 500 or resp.status == 200
            if resp.status != 200:
                assert app[JOURNAL].snapshot() == (0, 0)
        finally:
            await client.close()
    asyncio.run(go())


async def test_default_breaker_on_a_4_node_cluster_actions_the_first_node_and_opens_on_the_second(fakes, tmp_path):
    """FakeKube lists 4 nodes. With the shipped breaker defaults (max_percent 10) the first node
    was refused (25 % > 10 %); breaker.min_nodes 2 lets it through and opens on the second."""
    kube, repl, url = fakes
    client, app = await _client(tmp_path, url, breaker={})  # every breaker key at its default
    try:
        assert (await client.post("/api/v1/alerts", json=alert_body(node="gpu-1"), headers=AUTH)).status == 200
        for _ in range(100):
            if repl.calls and not app[JOURNAL].pending():
                break
            await asyncio.sleep(0.05)
        assert len(repl.calls) == 1 and kube.nodes["gpu-1"]["spec"]["unschedulable"] is True
        second = alert_body(fingerprint="fp2", node="gpu-2")
        assert (await client.post("/api/v1/alerts", json=second, headers=AUTH)).status == 200
        for _ in range(100):
            if not app[JOURNAL].pending():
                break
            await asyncio.sleep(0.05)
        assert len(repl.calls) == 1 and not kube.nodes["gpu-2"]["spec"].get("unschedulable")
        actions = [a for a in (await (await client.get("/api/v1/actions", headers=AUTH)).json())["actions"] if a["node"] == "gpu-2"]
        assert {a["state"] for a in actions} == {"skipped"}
        assert any("2 of 4 nodes" in (a["result"] or {}).get("reason", "") for a in actions)
        assert "runtimekit_remediation_breaker_open 1" in await (await client.get("/metrics", headers=AUTH)).text()
    finally:
        await client.close()


async def test_a_timestamp_without_a_zone_is_answered_400_naming_the_field(fakes, tmp_path):
    client, app = await _client(tmp_path, fakes[2], action_delay_seconds=3600)
    try:
        for starts in ("2026-12-07", "2026-12-07T10:00:00"):
            response = await client.post("/api/v1/alerts", json=alert_body(starts=starts), headers=AUTH)
            assert response.status == 400
            assert (await response.json())["error"].startswith("alerts[0].startsAt: must be an RFC 3339 timestamp")
        assert app[JOURNAL].snapshot() == (0, 0)
    finally:
        await client.close()


async def test_the_actions_answer_says_how_many_older_actions_it_left_out(fakes, tmp_path):
    client, app = await _client(tmp_path, fakes[2], action_delay_seconds=3600)
    try:
        alerts = [alert_body(fingerprint=f"fp{i}", node=f"gpu-{i}")["alerts"][0] for i in range(334)]
        body = {**alert_body(), "alerts": alerts}  # 334 alerts, 3 steps each: 1002 actions
        assert (await client.post("/api/v1/alerts", json=body, headers=AUTH)).status == 200
        answer = await (await client.get("/api/v1/actions", headers=AUTH)).json()
        assert (answer["total"], answer["limit"], answer["omitted"]) == (1002, 1000, 2)
        ids = [a["id"] for a in answer["actions"]]
        assert len(ids) == 1000 and ids == sorted(ids, reverse=True) and min(ids) == 3  # the 2 oldest left out
        assert app[JOURNAL].snapshot() == (334, 1002)
    finally:
        await client.close()


async def test_the_actions_answer_says_when_nothing_was_left_out(fakes, tmp_path):
    client, app = await _client(tmp_path, fakes[2], action_delay_seconds=3600)
    try:
        answer = await (await client.get("/api/v1/actions", headers=AUTH)).json()
        assert answer == {"actions": [], "total": 0, "limit": 1000, "omitted": 0}
    finally:
        await client.close()
