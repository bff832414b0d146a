"""Ownership of a cordon survives any crash: it is recorded on the Node, in the PATCH that cordons it.

The real process is killed (SIGKILL) at each step of the cordon path — while the breaker counts the
nodes, after reading the node, after the API server applied the cordon PATCH but before the service
got the answer (so before its journal commit), and after the commit. After a restart the alert
resolves: the node must be uncordoned and the service's annotation gone, whatever the kill point.
The undo is killed the same way: after the alert resolved, at each request of the uncordon; a
restart finishes it. A node someone else cordoned stays cordoned.
"""

from __future__ import annotations

import time

import aiohttp
import pytest
from conftest import (
    DiesAfterThePatch,
    Killed,
    alert_body,
    get_actions,
    post_alert,
    start_service,
    stop_service,
    wait_dead,
    wait_for,
    write_config,
)

from runtimekit.kube.remediation.actions import Steps, plan
from runtimekit.kube.remediation.config import load
from runtimekit.kube.remediation.holds import CORDONED_BY
from runtimekit.kube.remediation.journal import Journal
from runtimekit.kube.remediation.nodes import KubernetesNodeApi
from runtimekit.kube.remediation.payload import parse
from runtimekit.kube.remediation.server import Worker
from tests.agent_process import free_port

LADDER = {"replace_node": ["cordon"]}
KILL_POINTS = ["GET /api/v1/nodes", "GET /api/v1/nodes/gpu-2", "PATCH /api/v1/nodes/gpu-2", "committed"]
# The breaker counts the cluster's nodes (GET /api/v1/nodes) only when its percentage rule can
# decide; from min_nodes 1 on it does for the first node, so a kill can come while it counts.
COUNTING_BREAKER = {"max_nodes": 10, "max_percent": 100, "min_nodes": 1}


def _released(kube) -> bool:
    node = kube.nodes["gpu-2"]
    return not node["spec"].get("unschedulable") and CORDONED_BY not in node["metadata"].get("annotations", {})


async def _cordon_done(port: int) -> bool:
    return any(a["kind"] == "cordon" and a["state"] == "done" for a in await get_actions(port))


@pytest.mark.parametrize("point", KILL_POINTS)
async def test_sigkill_anywhere_on_the_cordon_path_then_resolve_uncordons(fakes, tmp_path, point):
    kube, _, url = fakes
    port = free_port()
    config = write_config(tmp_path, url, listen=f"127.0.0.1:{port}", ladders=LADDER, breaker=COUNTING_BREAKER)
    first = await start_service(config, port)
    try:
        kube.on_request = lambda method, path: first.kill() if f"{method} {path}" == point else None
        assert await post_alert(port, alert_body(node="gpu-2")) == 200
        if point == "committed":
            await wait_for(lambda: _cordon_done(port), what="the cordon's commit")
            first.kill()
        await wait_dead(first)
    finally:
        kube.on_request = None
        await stop_service(first, kill=True)
    if point.startswith("PATCH") or point == "committed":
        assert kube.nodes["gpu-2"]["spec"]["unschedulable"] is True  # the kill came after the cordon

    second = await start_service(config, port)
    try:
        assert await post_alert(port, alert_body(node="gpu-2", status="resolved")) == 200
        await wait_for(lambda: _released(kube), what="the node to be uncordoned")
    finally:
        await stop_service(second)


@pytest.mark.parametrize("point", ["GET /api/v1/nodes/gpu-2", "PATCH /api/v1/nodes/gpu-2"])
async def test_sigkill_anywhere_on_the_uncordon_path_then_restart_releases_the_node(fakes, tmp_path, point):
    kube, _, url = fakes
    port = free_port()
    config = write_config(tmp_path, url, listen=f"127.0.0.1:{port}", ladders=LADDER)
    first = await start_service(config, port)
    try:
        assert await post_alert(port, alert_body(node="gpu-2")) == 200
        await wait_for(lambda: _cordon_done(port), what="the cordon step")
        kube.on_request = lambda method, path: first.kill() if f"{method} {path}" == point else None
        assert await post_alert(port, alert_body(node="gpu-2", status="resolved")) == 200
        await wait_dead(first)
    finally:
        kube.on_request = None
        await stop_service(first, kill=True)
    if point.startswith("PATCH"):
        assert _released(kube)  # the API server applied the uncordon; the journal never heard
    else:
        assert not _released(kube)

    second = await start_service(config, port)
    try:
        await wait_for(lambda: _uncordon_finished(port), what="the uncordon step after the restart")
        assert {(a["kind"], a["state"]) for a in await get_actions(port)} == {("cordon", "done"), ("uncordon", "done")}
    finally:
        await stop_service(second)
    assert _released(kube)


async def test_resolved_before_the_interrupted_cordon_ran_again_still_uncordons(fakes, tmp_path):
    """The cordon PATCH took effect, the process died before the commit, and the alert resolved
    before the step could run again: it had begun, so it runs again to its outcome (the node's
    annotation still says it is ours: done, and counted), then the uncordon releases the node."""
    kube, _, url = fakes
    config = load(write_config(tmp_path, url, ladders=LADDER))
    journal = Journal(config.db_path)

    def planner(alert):
        return plan(config, alert)

    journal.receive(parse(alert_body(node="gpu-2")).alerts, planner, time.time())
    api = KubernetesNodeApi(str(tmp_path / "kubeconfig"))

    async with aiohttp.ClientSession() as session:
        dying = DiesAfterThePatch(api, kube)
        with pytest.raises(Killed):
            await Worker(config, journal, Steps(config, dying, session)).run_once()
        assert kube.nodes["gpu-2"]["spec"]["unschedulable"] is True
        journal.receive(parse(alert_body(node="gpu-2", status="resolved")).alerts, planner, time.time())
        await Worker(config, journal, Steps(config, api, session)).run_once()
    assert _released(kube)
    states = {a.kind: a.state for a in journal.actions()}
    assert states == {"cordon": "done", "uncordon": "done"}


async def test_a_node_someone_else_cordoned_stays_cordoned(fakes, tmp_path):
    kube, _, url = fakes
    kube.nodes["gpu-2"]["spec"]["unschedulable"] = True  # a person's cordon, without our annotation
    port = free_port()
    process = await start_service(write_config(tmp_path, url, listen=f"127.0.0.1:{port}", ladders=LADDER), port)
    try:
        assert await post_alert(port, alert_body(node="gpu-2")) == 200
        await wait_for(lambda: _cordon_done(port), what="the cordon step")
        assert await post_alert(port, alert_body(node="gpu-2", status="resolved")) == 200
        await wait_for(lambda: _uncordon_finished(port), what="the uncordon step")
    finally:
        await stop_service(process)
    assert kube.nodes["gpu-2"]["spec"]["unschedulable"] is True
    assert CORDONED_BY not in kube.nodes["gpu-2"]["metadata"].get("annotations", {})


async def _uncordon_finished(port: int) -> bool:
    return any(a["kind"] == "uncordon" and a["state"] != "pending" for a in await get_actions(port))
