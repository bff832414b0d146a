"""The ResourceSlice publisher (kube/dra/publisher.py) through the official ``kubernetes`` client
against the fake resource.k8s.io/v1 API server (tests/kube_fake_resource.py: a real API server
cannot run here; the fake validates every slice as the server of its release does and refuses
stale writes), with a hand-built agent answer (publish_nodes.AgentView): slices that validate,
withdrawal of an unhealthy GPU (and of one a device-plugin pod holds) with a higher pool
generation and its return, a restart, the layouts of 1.34 and 1.35 and a control plane upgraded
from one to the other, a Node made again, a cluster without consumable capacity, and a publisher
that rides out an API server outage and agent errors."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from runtimekit.kube.dra import publisher as publisher_module
from runtimekit.kube.dra.config import load
from runtimekit.kube.dra.publisher import Publisher
from runtimekit.kube.kubeclient import api_client
from tests.dra.publish_nodes import DRIVER, NODE, AgentView, mig_gpu, nic, node, tdm_gpu, topology, unhealthy
from tests.kube_fake_resource import FakeResourceApi
from tests.kube_fakes import serve
from tests.kube_resource_validation import pool_problems, schema_errors, slice_errors


def make_view() -> AgentView:
    nics = [nic("mlx5_0", "pci0000:10"), nic("mlx5_1", "pci0000:30")]
    return AgentView(node(tdm_gpu(0), tdm_gpu(1), mig_gpu(2)), topology(range(3), [(0, 1), (0, 2)], nics))


@asynccontextmanager
async def cluster(tmp_path: Path, api: FakeResourceApi) -> AsyncIterator[Callable[[AgentView], Publisher]]:
    """The fake API server; yields a factory of publishers (each a fresh process's) talking to it."""
    runner, url = await serve(api.app)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(api.kubeconfig(url))
    config = load(None, {"node_name": NODE, "publish_interval_seconds": 0.05})
    clients = []

    def publisher(view: AgentView) -> Publisher:
        clients.append(api_client(str(kubeconfig)))
        return Publisher(clients[-1], view.snapshot, config)

    try:
        yield publisher
    finally:
        for client in clients:
            client.close()
        await runner.cleanup()


def devices(api: FakeResourceApi) -> set[str]:
    return {d["name"] for item in api.pool(DRIVER, NODE) for d in item["spec"].get("devices") or []}


def generations(api: FakeResourceApi) -> set[int]:
    return {item["spec"]["pool"]["generation"] for item in api.pool(DRIVER, NODE)}


async def eventually(condition: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("version", ["v1.34.0", "v1.35.0"])
async def test_the_first_round_publishes_slices_the_api_server_accepts(tmp_path, version):
    api = FakeResourceApi(version=version, nodes=(NODE, "node-b"))
    async with cluster(tmp_path, api) as publisher:
        await publisher(make_view()).publish()
    assert api.rejected == []
    pool = api.pool(DRIVER, NODE)
    assert pool_problems(pool) == []
    assert {"gpu-0", "gpu-1", "gpu-2-mig-7g40gb-0-0", "nic-mlx5-0", "nic-mlx5-1"} <= devices(api)
    assert generations(api) == {1}
    for item in pool:
        assert item["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": NODE,
                                                        "uid": api.node_uid(NODE), "controller": True}]
        assert item["metadata"]["name"].startswith(item["metadata"]["generateName"])
        assert item["spec"]["nodeName"] == NODE and item["spec"]["driver"] == DRIVER
    with_counters = [item for item in pool if item["spec"].get("sharedCounters")]
    (counters,) = with_counters
    if version == "v1.35.0":  # counters alone, first
        assert "devices" not in counters["spec"] and counters["metadata"]["name"].startswith("0-")
    else:  # counters beside the MIG GPU's devices
        assert {d["name"] for d in counters["spec"]["devices"]} == {d for d in devices(api) if d.startswith("gpu-2-")}


@pytest.mark.parametrize("version", ["v1.34.0", "v1.35.0"])
async def test_an_unhealthy_gpu_is_withdrawn_at_a_higher_generation_and_comes_back(tmp_path, version):
    api = FakeResourceApi(version=version)
    view = make_view()
    async with cluster(tmp_path, api) as publisher:
        slices = publisher(view)
        await slices.publish()
        before = len(api.writes)
        view.node.devices[1].health.CopyFrom(unhealthy())
        await slices.publish()
        assert "gpu-1" not in devices(api) and "gpu-0" in devices(api)
        assert generations(api) == {2}
        assert api.writes[before][0] == "delete"  # GPU 1's slice is obsolete: deleted before the others change
        assert pool_problems(api.pool(DRIVER, NODE)) == []

        view.node.devices[1].ClearField("health")  # the verdict cleared (or no verdict yet)
        view.node.devices[2].health.CopyFrom(unhealthy())  # while the MIG GPU fails
        await slices.publish()
        assert "gpu-1" in devices(api) and not any(d.startswith("gpu-2-") for d in devices(api))
        assert generations(api) == {3}
        assert all("sharedCounters" not in item["spec"] for item in api.pool(DRIVER, NODE))
        assert pool_problems(api.pool(DRIVER, NODE)) == [] and api.rejected == []


async def test_a_control_plane_upgraded_to_1_35_gets_the_split_layout_at_the_next_resync(tmp_path, monkeypatch):
    api = FakeResourceApi(version="v1.34.0")
    async with cluster(tmp_path, api) as publisher:
        slices = publisher(make_view())
        await slices.publish()
        (combined,) = [item for item in api.pool(DRIVER, NODE) if item["spec"].get("sharedCounters")]
        assert combined["spec"]["devices"]  # 1.34: the MIG GPU's counters beside its devices
        api.version = "v1.35.0"  # the API server is upgraded under the running driver
        await slices.publish()  # before the resync: nothing is asked again
        assert len([r for r in api.requests if r[1].startswith("/version")]) == 1
        monkeypatch.setattr(publisher_module, "RESYNC_SECONDS", 0.0)
        await slices.publish()
    pool = api.pool(DRIVER, NODE)
    (counters,) = [item for item in pool if item["spec"].get("sharedCounters")]
    assert "devices" not in counters["spec"] and generations(api) == {2}
    assert pool_problems(pool) == [] and api.rejected == []
    assert all(schema_errors(item, "v1.35.0") == [] and slice_errors(item, 35) == [] for item in pool)


async def test_slices_made_after_the_node_was_made_again_are_owned_by_its_new_uid(tmp_path, monkeypatch):
    api = FakeResourceApi()
    async with cluster(tmp_path, api) as publisher:
        slices = publisher(make_view())
        await slices.publish()
        api.nodes[NODE]["metadata"]["uid"] = "5f1e9c4e-0000-4000-8000-000000000002"  # deleted and registered again
        api.slices.clear()  # the garbage collector deletes what the old Node owned
        monkeypatch.setattr(publisher_module, "RESYNC_SECONDS", 0.0)
        await slices.publish()
    owners = {ref["uid"] for item in api.pool(DRIVER, NODE) for ref in item["metadata"]["ownerReferences"]}
    assert owners == {"5f1e9c4e-0000-4000-8000-000000000002"} and "gpu-0" in devices(api)


async def test_an_unchanged_node_writes_nothing_even_when_listed_again(tmp_path, monkeypatch):
    api = FakeResourceApi()
    async with cluster(tmp_path, api) as publisher:
        slices = publisher(make_view())
        await slices.publish()
        writes = list(api.writes)
        await slices.publish()  # the agent's answer did not change: not even a list
        assert slices.syncs == 1
        monkeypatch.setattr(publisher_module, "RESYNC_SECONDS", 0.0)
        await slices.publish()  # listed again: the pool already says it
        assert slices.syncs == 2 and api.writes == writes


async def test_a_restarted_driver_adopts_its_slices_and_republishes_wiped_ones(tmp_path):
    api = FakeResourceApi()
    view = make_view()
    async with cluster(tmp_path, api) as publisher:
        await publisher(view).publish()
        names, writes = set(api.slices), len(api.writes)
        await publisher(view).publish()  # a new process, same node: the slices say it already
        assert set(api.slices) == names and len(api.writes) == writes
        api.slices.clear()  # the kubelet wiped the driver's slices while it was away
        await publisher(view).publish()
        assert devices(api) >= {"gpu-0", "gpu-1", "nic-mlx5-0"} and pool_problems(api.pool(DRIVER, NODE)) == []


async def test_a_slice_changed_by_someone_else_is_put_back_at_a_higher_generation(tmp_path, monkeypatch):
    monkeypatch.setattr(publisher_module, "RESYNC_SECONDS", 0.0)
    api = FakeResourceApi()
    async with cluster(tmp_path, api) as publisher:
        slices = publisher(make_view())
        await slices.publish()
        (gpu0,) = [item for item in api.slices.values() if any(d["name"] == "gpu-0" for d in item["spec"].get("devices", []))]
        gpu0["spec"]["devices"][0]["attributes"]["productName"] = {"string": "tampered"}
        gpu0["metadata"]["resourceVersion"] = "9999"
        stray = {**gpu0, "metadata": {"name": "stray", "resourceVersion": "1", "uid": "u"},
                 "spec": {**gpu0["spec"], "pool": {"name": "old-pool", "generation": 7, "resourceSliceCount": 1}}}
        api.slices["stray"] = stray  # a slice of this node and driver in another pool: not ours to keep
        await slices.publish()
    assert api.slices[gpu0["metadata"]["name"]]["spec"]["devices"][0]["attributes"]["productName"] == {
        "string": "NVIDIA H100 80GB HBM3"}
    assert "stray" not in api.slices and generations(api) == {8}


async def test_a_cluster_without_consumable_capacity_drops_the_fields_and_is_not_rewritten(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(publisher_module, "RESYNC_SECONDS", 0.0)
    api = FakeResourceApi(gates={"DRAConsumableCapacity": False})
    caplog.set_level(logging.WARNING, logger=publisher_module.__name__)
    async with cluster(tmp_path, api) as publisher:
        slices = publisher(make_view())
        await slices.publish()
        writes = list(api.writes)
        await slices.publish()
        await slices.publish()
    assert api.writes == writes  # what the server keeps is taken as what was sent
    (gpu0,) = [d for item in api.slices.values() for d in item["spec"].get("devices", []) if d["name"] == "gpu-0"]
    assert "allowMultipleAllocations" not in gpu0 and "requestPolicy" not in gpu0["capacity"]["memory"]
    warnings = [r.getMessage() for r in caplog.records if "DRAConsumableCapacity" in r.getMessage()]
    assert len(warnings) == 1 and "one claim" in warnings[0]


async def test_run_rides_out_an_api_outage_and_agent_errors(tmp_path, caplog):
    api = FakeResourceApi()
    api.outage = True
    view = make_view()
    caplog.set_level(logging.INFO, logger=publisher_module.__name__)
    async with cluster(tmp_path, api) as publisher:
        task = asyncio.create_task(publisher(view).run())
        try:
            await eventually(lambda: len(api.requests) >= 2, "the publisher tried during the outage")
            assert not task.done() and api.slices == {}
            api.outage = False
            await eventually(lambda: "gpu-0" in devices(api), "published once the API server is back")
            view.failing = True
            reads = view.reads
            await eventually(lambda: view.reads >= reads + 2, "the agent asked again after an error")
            assert not task.done()
            view.node.devices[0].health.CopyFrom(unhealthy())
            view.failing = False
            await eventually(lambda: "gpu-0" not in devices(api), "the agent's news published once it answers")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    messages = [r.getMessage() for r in caplog.records]
    assert any("failed, will retry" in m and "503" in m for m in messages)
    assert any("works again" in m for m in messages)
    assert any("GPU 0 withdrawn" in m and "xid_79" in m for m in messages)


async def test_wake_publishes_before_the_interval_ends(tmp_path):
    api = FakeResourceApi()
    view = make_view()
    async with cluster(tmp_path, api) as publisher:
        slices = publisher(view)
        slices._interval = 3600.0  # only wake() can bring the next round
        task = asyncio.create_task(slices.run())
        try:
            await eventually(lambda: "gpu-1" in devices(api), "the first round")
            view.node.devices[1].lost = True
            slices.wake()
            await eventually(lambda: "gpu-1" not in devices(api), "the round wake() asked for")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_a_gpu_a_device_plugin_pod_holds_is_withdrawn_logged_once_and_comes_back(tmp_path, caplog):
    api = FakeResourceApi()
    view = make_view()
    caplog.set_level(logging.INFO, logger=publisher_module.__name__)
    async with cluster(tmp_path, api) as publisher:
        slices = publisher(view)
        await slices.publish()
        view.node.devices[0].held_by_pods.append("ml/trainer-0")  # GetNode: the kubelet gave it to that pod
        view.node.devices[2].held_by_pods.append("ml/infer-0")  # a MIG-mode GPU: every placement goes
        await slices.publish()
        await slices.publish()
        assert not any(d == "gpu-0" or d.startswith("gpu-2-") for d in devices(api)) and "gpu-1" in devices(api)
        assert generations(api) == {2}
        del view.node.devices[0].held_by_pods[:]  # the pod is gone
        del view.node.devices[2].held_by_pods[:]
        await slices.publish()
        assert {"gpu-0", "gpu-1", "gpu-2-mig-7g40gb-0-0"} <= devices(api)
        assert generations(api) == {3}
        assert pool_problems(api.pool(DRIVER, NODE)) == [] and api.rejected == []
    messages = [r.getMessage() for r in caplog.records]
    assert [m for m in messages if "withdrawn" in m] == [
        "GPU 0 withdrawn from the ResourceSlices: the kubelet allocated it to pod ml/trainer-0",
        "GPU 2 withdrawn from the ResourceSlices: the kubelet allocated it to pod ml/infer-0"]
    assert "GPU 0 published again" in messages and "GPU 2 published again" in messages
