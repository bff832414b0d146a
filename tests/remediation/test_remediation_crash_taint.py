"""Ownership of a taint survives any crash: it is recorded on the Node, in the PATCH that adds the taint.

The real process is killed (SIGKILL) at each step of the taint path — while the breaker counts the
nodes, after reading the node, after the API server applied the taint PATCH but before the service
got the answer (so before its journal commit), and after the commit. After a restart the alert
resolves: the taint and the service's annotation must be gone, whatever the kill point. The same
holds for the taint of the default ladder (cordon, taint, replace), killed at its PATCH, and for
the undo, killed at each request of the untaint after the alert resolved. A taint someone else put
there stays.
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
from runtimekit.kube.remediation.holds import CORDONED_BY, TAINTED_BY
from runtimekit.kube.remediation.journal import Journal
from runtimekit.kube.remediation.nodes import KubernetesNodeApi
from runtimekit.kube.remediation.payload import parse
from runtimekit.kube.remediation.server import Worker
from tests.agent_process import free_port

LADDER = {"replace_node": ["taint"]}
KILL_POINTS = ["GET /api/v1/nodes", "GET /api/v1/nodes/gpu-2", "PATCH /api/v1/nodes/gpu-2", "committed"]
# The breaker counts the cluster's nodes (GET /api/v1/nodes) only when its percentage rule can
# decide; from min_nodes 1 on it does for the first node, so a kill can come while it counts.
COUNTING_BREAKER = {"max_nodes": 10, "max_percent": 100, "min_nodes": 1}
TAINT_KEY = "runtimekit.io/gpu-unhealthy"


def _taints(kube) -> list[dict]:
    return kube.nodes["gpu-2"]["spec"].get("taints") or []


def _released(kube) -> bool:
    node = kube.nodes["gpu-2"]
    annotations = node["metadata"].get("annotations", {})
    return (not node["spec"].get("unschedulable") and not _taints(kube)
            and TAINTED_BY not in annotations and CORDONED_BY not in annotations)


async def _done(port: int, kind: str) -> bool:
    return any(a["kind"] == kind and a["state"] == "done" for a in await get_actions(port))


async def _restart_and_resolve(kube, config: str, port: int) -> None:
    """A fresh service on the same journal; the alert resolves; the node must be released."""
    second = await start_service(config, port)
    try:
        assert await post_alert(port, alert_body(node="gpu-2", status="resolved")) == 200
        await wait_for(lambda: _released(kube), what="the taint to be removed")
    finally:
        await stop_service(second)


@pytest.mark.parametrize("point", KILL_POINTS)
async def test_sigkill_anywhere_on_the_taint_path_then_resolve_untaints(fakes, tmp_path, point):
    kube, _, url = fakes
    port = free_port()
    config = write_config(tmp_path, url, listen=f"127.0.0.1:{port}", ladders=LADDER, breaker=COUNTING_BREAKER)
    first = await start_service(config, port)
    try:
        kube.on_request = lambda method, path: first.kill() if f"{method} {path}" == point else None
        assert await post_alert(port, alert_body(node="gpu-2")) == 200
        if point == "committed":
            await wait_for(lambda: _done(port, "taint"), what="the taint's commit")
            first.kill()
        await wait_dead(first)
    finally:
        kube.on_request = None
        await stop_service(first, kill=True)
    if point.startswith("PATCH") or point == "committed":
        assert [t["key"] for t in _taints(kube)] == [TAINT_KEY]  # the kill came after the taint
    await _restart_and_resolve(kube, config, port)


async def test_sigkill_after_the_taint_patch_of_the_default_ladder_then_resolve_releases_the_node(fakes, tmp_path):
    """cordon, taint, replace: killed after the second PATCH (the taint) took effect."""
    kube, _, url = fakes
    port = free_port()
    config = write_config(tmp_path, url, listen=f"127.0.0.1:{port}")
    first = await start_service(config, port)
    try:
        kube.on_request = lambda method, path: first.kill() if method == "PATCH" and len(kube.patches) == 2 else None
        assert await post_alert(port, alert_body(node="gpu-2")) == 200
        await wait_dead(first)
    finally:
        kube.on_request = None
        await stop_service(first, kill=True)
    assert kube.nodes["gpu-2"]["spec"]["unschedulable"] is True
    assert [t["key"] for t in _taints(kube)] == [TAINT_KEY]
    await _restart_and_resolve(kube, config, port)


@pytest.mark.parametrize("point", ["GET /api/v1/nodes/gpu-2", "PATCH /api/v1/nodes/gpu-2"])
async def test_sigkill_anywhere_on_the_untaint_path_then_restart_removes_the_taint(fakes, tmp_path, point):
    kube, _, url = fakes
    port = free_port()
    config = write_config(tmp_path, url, listen=f"127.0.0.1:{port}", ladders=LADDER)
    first = await start_service(config, port)
    try:
        assert await post_alert(port, alert_body(node="gpu-2")) == 200
        await wait_for(lambda: _done(port, "taint"), what="the taint step")
        kube.on_request = lambda method, path: first.kill() if f"{method} {path}" == point else None
        assert await post_alert(port, alert_body(node="gpu-2", status="resolved")) == 200
        await wait_dead(first)
    finally:
        kube.on_request = None
        await stop_service(first, kill=True)
    assert _released(kube) == point.startswith("PATCH")  # the API server applied the untaint, or not yet

    second = await start_service(config, port)
    try:
        await wait_for(lambda: _done(port, "untaint"), what="the untaint step after the restart")
    finally:
        await stop_service(second)
    assert _released(kube)


async def test_resolved_before_the_interrupted_taint_ran_again_still_untaints(fakes, tmp_path):
    """The taint PATCH took effect, the process died before the commit, and the alert resolved
    before the step could run again: it had begun, so it runs again to its outcome (the node's
    annotation still says it is ours: done, and counted), then the untaint releases the node."""
    kube, _, url = fakes
    config = load(write_config(tmp_path, url, ladders=LADDER))
    journal = Journal(config.db_path)

    def planner(alert):
        return plan(config, alert)

    journal.receive(parse(alert_body(node="gpu-2")).alerts, planner, time.time())

    async with aiohttp.ClientSession() as session:
        api = KubernetesNodeApi(str(tmp_path / "kubeconfig"))
        dying = DiesAfterThePatch(api, kube)
        with pytest.raises(Killed):
            await Worker(config, journal, Steps(config, dying, session)).run_once()
        assert [t["key"] for t in _taints(kube)] == [TAINT_KEY]
        journal.receive(parse(alert_body(node="gpu-2", status="resolved")).alerts, planner, time.time())
        await Worker(config, journal, Steps(config, api, session)).run_once()
    assert _released(kube)
    assert {a.kind: a.state for a in journal.actions()} == {"taint": "done", "untaint": "done"}


async def test_a_taint_someone_else_put_there_stays(fakes, tmp_path):
    kube, _, url = fakes
    theirs = {"key": TAINT_KEY, "value": "ops", "effect": "NoSchedule"}
    kube.nodes["gpu-2"]["spec"]["taints"] = [theirs]  # a person's taint, without our annotation
    port = free_port()
    process = await start_service(write_config(tmp_path, url, listen=f"127.0.0.1:{port}", ladders=LADDER), port)
    try:
        assert await post_alert(port, alert_body(node="gpu-2")) == 200
        await wait_for(lambda: _done(port, "taint"), what="the taint step")
        assert await post_alert(port, alert_body(node="gpu-2", status="resolved")) == 200
        await wait_for(lambda: _finished(port, "untaint"), what="the untaint step")
    finally:
        await stop_service(process)
    assert _taints(kube) == [theirs]
    assert TAINTED_BY not in kube.nodes["gpu-2"]["metadata"].get("annotations", {})


async def _finished(port: int, kind: str) -> bool:
    return any(a["kind"] == kind and a["state"] != "pending" for a in await get_actions(port))
