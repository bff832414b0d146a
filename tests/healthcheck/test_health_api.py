"""GET /api/v1/health: 503 before the first evaluation, then the verdict with evidence and pods."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from exporter_factories import (
    EVALUATED_AT,
    TRAINER,
    make_allocation,
    make_attribution,
    make_health,
    make_process,
    uuid_for,
)

from runtimekit.attribution.types import HOST, Owner
from runtimekit.healthcheck.api import HEALTH_PATH, add_health_routes, iso
from runtimekit.state import NodeState


async def get(state: NodeState):
    app = web.Application()
    add_health_routes(app, state)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        response = await client.get(HEALTH_PATH)
        return response.status, await response.json()


async def test_503_with_a_clear_body_before_the_first_evaluation():
    status, body = await get(NodeState())
    assert status == 503
    assert body["error"] == "not evaluated yet" and "first evaluation" in body["detail"]


async def test_verdict_per_gpu_with_faults_times_and_actions():
    state = NodeState()
    state.publish_health(make_health())
    status, body = await get(state)
    assert status == 200
    assert body["node"]["state"] == "unhealthy" and body["node"]["action"] == "reboot_node"
    assert [f["fault"] for f in body["node"]["faults"]] == ["gpu_count_low"]
    assert body["evaluated_at_unix"] == EVALUATED_AT and body["evaluated_at"] == iso(EVALUATED_AT)
    assert body["evaluated_at"].endswith("Z") and "T" in body["evaluated_at"]
    healthy, sick = body["gpus"]
    assert (healthy["index"], healthy["uuid"], healthy["state"], healthy["schedulable"], healthy["action"],
            healthy["faults"]) == (0, uuid_for(0), "healthy", True, "none", [])
    assert (sick["state"], sick["schedulable"], sick["action"]) == ("unhealthy", False, "reboot_node")
    assert sick["since_unix"] == EVALUATED_AT - 60 and sick["since"] == iso(EVALUATED_AT - 60)
    xid, thermal = sick["faults"]
    assert xid == {
        "fault": "xid_79", "severity": "critical", "action": "reboot_node", "evidence": "XID 79 at 22:13:20 UTC",
        "clears": "node_reboot", "clearing": False, "clean_samples": 0, "gpu_instance_id": None,
        "first_seen": iso(EVALUATED_AT - 60), "first_seen_unix": EVALUATED_AT - 60,
        "last_seen": iso(EVALUATED_AT - 60), "last_seen_unix": EVALUATED_AT - 60,
    }
    assert (thermal["clearing"], thermal["clean_samples"]) == (True, 1)


async def test_pods_affected_from_allocations_and_processes():
    other = Owner(namespace="web", pod="idle-0", container="app")
    state = NodeState()
    state.publish_health(make_health())
    state.publish_attribution(make_attribution(
        processes=(make_process(4242, gpu=1), make_process(777, gpu=1, host=None)),  # the second: host process
        pods=(),
        allocations=(make_allocation(1), make_allocation(1, owner=other), make_allocation(0, owner=other)),
    ))
    _, body = await get(state)
    pods = {g["index"]: g["pods"] for g in body["gpus"]}
    assert pods[1] == [
        {"namespace": "ml", "pod": "trainer-0", "container": "main", "via": ["allocation", "process"]},
        {"namespace": "web", "pod": "idle-0", "container": "app", "via": ["allocation"]},
    ]
    assert pods[0] == [{"namespace": "web", "pod": "idle-0", "container": "app", "via": ["allocation"]}]
    assert TRAINER.known and not HOST.known


async def test_no_attribution_means_no_pods():
    state = NodeState()
    state.publish_health(make_health())
    _, body = await get(state)
    assert all(g["pods"] == [] for g in body["gpus"])
