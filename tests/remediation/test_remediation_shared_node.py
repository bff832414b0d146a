"""Two alerts on one node: a resolved alert undoes only what no other firing alert still needs.

Alert A cordons and taints gpu-2; alert B (another fingerprint) fires on the same node — its own
steps skipped by the cooldown (the default) or finding the node already cordoned and tainted. While
B fires, A's resolution must leave the node cordoned and tainted; B's resolution releases it. Also
when the service dies between A's undo PATCH and its journal commit.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from conftest import AUTH, DiesAfterThePatch, Killed, alert_body, write_config

from runtimekit.kube.remediation.actions import Steps, plan
from runtimekit.kube.remediation.config import load
from runtimekit.kube.remediation.holds import CORDONED_BY, TAINTED_BY
from runtimekit.kube.remediation.journal import Journal
from runtimekit.kube.remediation.nodes import KubernetesNodeApi
from runtimekit.kube.remediation.payload import parse
from runtimekit.kube.remediation.server import JOURNAL, Worker, make_app

LADDER = {"replace_node": ["cordon", "taint"]}
A = {"fingerprint": "fpA", "node": "gpu-2"}
B = {"fingerprint": "fpB", "node": "gpu-2", "starts": "2026-01-01T00:05:00Z"}


def _held(kube) -> bool:
    """Cordoned and carrying our taint."""
    spec = kube.nodes["gpu-2"]["spec"]
    return spec.get("unschedulable") is True and [t["key"] for t in spec.get("taints") or []] == [
        "runtimekit.io/gpu-unhealthy"]


def _released(kube) -> bool:
    node = kube.nodes["gpu-2"]
    annotations = node["metadata"].get("annotations", {})
    return (not node["spec"].get("unschedulable") and not node["spec"].get("taints")
            and CORDONED_BY not in annotations and TAINTED_BY not in annotations)


async def _post(client, alert: dict, status: str = "firing") -> None:
    assert (await client.post("/api/v1/alerts", json=alert_body(status=status, **alert), headers=AUTH)).status == 200
    app = client.server.app
    for _ in range(200):
        await asyncio.sleep(0.05)
        if not app[JOURNAL].pending():
            return
    raise AssertionError("the worker did not finish")


@pytest.mark.parametrize("cooldown", [3600, 0], ids=["b-in-cooldown", "b-finds-node-held"])
@pytest.mark.parametrize("first", ["A", "B"], ids=["a-resolves-first", "b-resolves-first"])
async def test_a_node_stays_out_of_service_while_another_alert_on_it_fires(fakes, tmp_path, cooldown, first):
    kube, _, url = fakes
    app = make_app(load(write_config(tmp_path, url, ladders=LADDER, cooldown_seconds=cooldown)))
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        await _post(client, A)
        await _post(client, B)
        assert _held(kube)
        one, other = (A, B) if first == "A" else (B, A)
        await _post(client, one, "resolved")
        assert _held(kube), kube.nodes["gpu-2"]
        await _post(client, other, "resolved")
        assert _released(kube), kube.nodes["gpu-2"]
    finally:
        await client.close()


async def test_killed_between_the_undo_patch_and_its_commit_the_node_stays_held_for_the_other_alert(
        fakes, tmp_path):
    kube, _, url = fakes
    config = load(write_config(tmp_path, url, ladders=LADDER, cooldown_seconds=0))
    journal = Journal(config.db_path)

    def receive(alert: dict, status: str = "firing") -> None:
        journal.receive(parse(alert_body(status=status, **alert)).alerts, lambda a: plan(config, a), time.time())

    async with aiohttp.ClientSession() as session:
        api = KubernetesNodeApi(str(tmp_path / "kubeconfig"))
        worker = Worker(config, journal, Steps(config, api, session))
        receive(A)
        receive(B)
        await worker.run_once()
        assert _held(kube)
        receive(A, "resolved")
        with pytest.raises(Killed):  # A's first undo step (untaint) wrote to the node, then the process died
            await Worker(config, journal, Steps(config, DiesAfterThePatch(api, kube), session)).run_once()
        await worker.run_once()  # the restarted service
        assert _held(kube), kube.nodes["gpu-2"]
        receive(B, "resolved")
        await worker.run_once()
    assert _released(kube), kube.nodes["gpu-2"]
