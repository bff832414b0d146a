"""Dry run describes every step of a ladder, the replacement call and its body included; a body
template naming an unknown field stops the service at start."""

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer
from conftest import AUTH, alert_body, write_config

from runtimekit.kube.remediation.config import ConfigError, load
from runtimekit.kube.remediation.server import JOURNAL, make_app
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
