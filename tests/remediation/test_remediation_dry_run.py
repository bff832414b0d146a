"""Dry run describes every step of a ladder, the replacement call and its body included, and applies
the cooldown as the live service would (counting the steps it described, in a dry run only); a
body template naming an unknown field stops the service at start."""

import asyncio
import time

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from conftest import AUTH, alert_body, write_config

from runtimekit.kube.remediation.actions import Steps, plan
from runtimekit.kube.remediation.config import ConfigError, load
from runtimekit.kube.remediation.journal import Journal
from runtimekit.kube.remediation.nodes import KubernetesNodeApi
from runtimekit.kube.remediation.payload import parse
from runtimekit.kube.remediation.server import JOURNAL, Worker, make_app
from runtimekit.kube.remediation.template import template_problem


async def test_dry_run_describes_every_step_and_changes_nothing(fakes, tmp_path):
    kube, repl, url = fakes
    ladder = {"replace_node": ["cordon", "taint", "drain", "replace"]}
    client = TestClient(TestServer(make_app(load(write_config(tmp_path, url, dry_run=True, ladders=ladder)))))
    await client.start_server()
    app = client.server.app
    try:
        assert (await client.post("/api/v1/alerts", json=alert_body(node="gpu-3"), headers=AUTH)).status == 200
        for _ in range(100):
            if not app[JOURNAL].pending():
                break
            await asyncio.sleep(0.05)
        steps = {a.kind: a for a in app[JOURNAL].actions()}
        assert set(steps) == {"cordon", "taint", "drain", "replace"}
        for kind, action in steps.items():
            assert action.state == "skipped" and action.result["dry_run"] is True, (kind, action.result)
            assert "gpu-3" in action.result["would"], (kind, action.result)
        assert steps["replace"].result["would"].startswith(f"POST {url} with Idempotency-Key rk-")
        assert steps["replace"].result["body"] == {"node": "gpu-3", "gpu_uuids": ["GPU-a", "GPU-b"],
                                                   "gpu_indices": ["2", "3"], "fault": "RuntimeKitGPULost",
                                                   "alert_fingerprint": "fp1"}
        assert repl.calls == [] and kube.patches == [] and kube.evictions == []
    finally:
        await client.close()


@pytest.mark.parametrize("template,message", [
    ({"node": "{nodename}"}, "replacement.body_template: entry node: unknown field {nodename}; the fields are node, "),
    ({"spare": {"for": ["{node}", "gpus {gpu_uuid}"]}}, "entry spare.for[1]: unknown field {gpu_uuid}"),
    ({"node": "{node.upper}"}, "entry node: unknown field {node.upper}"),
    ({"node": "{}"}, "entry node: unknown field {}"),
    ({"node": "{node"}, "entry node: "),
    ({"node": "{node:d}"}, "entry node: "),
])
def test_a_body_template_naming_an_unknown_field_is_refused_at_load(template, message):
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("[", r"\[")):
        load(None, {"auth.token_file": "t", "replacement.body_template": template})


def test_every_documented_field_and_literal_braces_are_accepted():
    template = {"node": "{node}", "all": ["{gpu_uuids}", "{gpu_indices}", "{fault}", "{fingerprint}", "{starts_at}"],
                "text": "spare for {node} ({fault}) {{literal}}", "n": 3}
    assert template_problem(template) is None
    assert load(None, {"auth.token_file": "t", "replacement.body_template": template}).replacement.body_template


def _receive(journal, config, fingerprint: str, node: str = "gpu-1") -> None:
    alerts = parse(alert_body(fingerprint=fingerprint, node=node)).alerts
    journal.receive(alerts, lambda alert: plan(config, alert), time.time())


async def test_a_dry_run_applies_the_cooldown_to_what_it_would_have_done(fakes, tmp_path):
    """Three alerts on one node (three GPUs, say): live, the second and third are left alone by
    the cooldown, so the dry run must show them so, not three spare-node requests."""
    kube, repl, url = fakes
    config = load(write_config(tmp_path, url, dry_run=True))  # cooldown_seconds at its default, 3600
    journal = Journal(config.db_path)
    try:
        for fingerprint in ("gpu0", "gpu1", "gpu2"):
            _receive(journal, config, fingerprint)
        async with aiohttp.ClientSession() as session:
            await Worker(config, journal, Steps(config, object(), session)).run_once()
        steps = {(a.fingerprint, a.kind): a.result for a in journal.actions()}
        assert steps[("gpu0", "replace")]["would"].startswith("POST ")
        for fingerprint in ("gpu1", "gpu2"):
            assert steps[(fingerprint, "cordon")].get("reason", "").startswith("node in cooldown"), steps
            assert "would" not in steps[(fingerprint, "replace")], steps
        assert repl.calls == [] and kube.patches == []
    finally:
        journal.close()


async def test_dry_run_steps_never_put_a_node_in_cooldown_for_live_steps(fakes, tmp_path):
    """dry_run turned off: what the dry run only described was never done, so the live service
    acts on the node at once."""
    kube, repl, url = fakes
    dry = load(write_config(tmp_path, url, dry_run=True))
    journal = Journal(dry.db_path)
    try:
        _receive(journal, dry, "gpu0")
        async with aiohttp.ClientSession() as session:
            await Worker(dry, journal, Steps(dry, object(), session)).run_once()
            live = load(write_config(tmp_path, url, dry_run=False))
            _receive(journal, live, "gpu1")
            api = KubernetesNodeApi(str(tmp_path / "kubeconfig"))
            await Worker(live, journal, Steps(live, api, session)).run_once()
        states = {(a.fingerprint, a.kind): a.state for a in journal.actions()}
        assert [states[("gpu1", kind)] for kind in ("cordon", "taint", "replace")] == ["done"] * 3, states
        assert len(repl.calls) == 1 and kube.nodes["gpu-1"]["spec"]["unschedulable"] is True
    finally:
        journal.close()


async def test_a_dry_run_shows_where_the_breaker_would_open(fakes, tmp_path):
    """max_nodes 1: live, a second node within the window opens the breaker and its steps are
    skipped; the dry run shows that ('would open') from the steps it described, and opens nothing."""
    kube, repl, url = fakes
    config = load(write_config(tmp_path, url, dry_run=True, breaker={"max_nodes": 1, "max_percent": 100, "min_nodes": 1}))
    journal = Journal(config.db_path)
    try:
        _receive(journal, config, "a", node="gpu-1")
        _receive(journal, config, "b", node="gpu-2")
        async with aiohttp.ClientSession() as session:
            await Worker(config, journal, Steps(config, object(), session)).run_once()
        steps = {(a.fingerprint, a.kind): a.result for a in journal.actions()}
        assert steps[("a", "replace")]["would"].startswith("POST ")
        assert steps[("b", "cordon")]["reason"].startswith("circuit breaker would open: 2 nodes"), steps
        assert journal.breaker_state()[0] is False and repl.calls == [] and kube.patches == []
    finally:
        journal.close()
