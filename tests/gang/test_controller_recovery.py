"""The gang controller when things go wrong between deciding and binding: a release PATCH that
fails half way (the rest released to the same nodes next round, the devices held meanwhile), a
restart that finds pods an earlier run released still unbound (nothing placed until they bind),
and an informer whose watch is older than the server keeps (410 Gone: listed again)."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

from runtimekit.kube.gang.gangs import GATE, PLACED_ANNOTATION
from runtimekit.kube.gang.offer import Offer
from tests.gang.gang_rig import LEAF, SPINE, Rig, pinned_node, pod_group_pod, start_rig


async def test_a_release_that_fails_half_way_is_finished_next_round_to_the_same_nodes(rig: Rig) -> None:
    for i in range(3):
        rig.api.add_node(f"n{i}", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    for i in range(3):
        rig.api.add_pod(pod_group_pod("g", i, size=3, gpus=8))
    rig.api.failing["default/g-2"] = 1
    await rig.settle()
    gated = [i for i in range(3) if rig.api.pod("default", f"g-{i}")["spec"].get("schedulingGates")]
    assert gated == [2], "two released, the third's PATCH failed"
    planned = dict(rig.controller.placer.reservations["default/g"].nodes)
    for i in range(2):
        rig.api.add_pod(pod_group_pod("other", i, size=2, gpus=8))  # would take the third pod's node if it were free
    await rig.settle()
    assert {f"g-{i}": pinned_node(rig.api.pod("default", f"g-{i}")) for i in range(3)} == planned
    assert all(rig.api.pod("default", f"other-{i}")["spec"]["schedulingGates"] == [{"name": GATE}] for i in range(2))
    assert rig.condition("g-2")["status"] == "True"


def _released_by_earlier_run(name: str, node: str) -> dict:
    pod = pod_group_pod("old", int(name.rsplit("-", 1)[1]), size=1, gpus=8)
    pod["metadata"]["annotations"][PLACED_ANNOTATION] = node
    del pod["spec"]["schedulingGates"]
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
    return pod


async def test_after_a_restart_nothing_is_placed_while_earlier_releases_are_unbound(rig: Rig) -> None:
    rig.api.add_node("n0", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    rig.api.add_pod(_released_by_earlier_run("old-0", "n0"))  # its GPUs are not in the offer yet
    rig.api.add_pod(pod_group_pod("new", 0, size=1, gpus=8))
    await rig.settle()
    assert rig.api.pod("default", "new-0")["spec"]["schedulingGates"] == [{"name": GATE}], "n0's 8 GPUs may be old-0's"
    rig.api.bind("default", "old-0", "n0")
    rig.api.update_node("n0", offer=Offer.of([0]))
    await rig.settle()
    assert rig.condition("new-0")["reason"] == "Unplaceable", "placed now, on the offer that shows old-0"


async def test_an_expired_watch_lists_again(tmp_path: Path) -> None:
    rig, stop = await start_rig(tmp_path, "controller: {watch_timeout_seconds: 1}\n")
    try:
        rig.api.add_node("n0", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
        await rig.caught_up()
        rig.api.compact()  # the informers' next watch starts from a version the server no longer keeps
        node = copy.deepcopy(rig.api.kinds["nodes"].items["n0"])
        await asyncio.sleep(1.5)  # the open watches end (timeoutSeconds 1) and are opened again: 410 Gone
        rig.api.add_node("n1", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
        await rig.caught_up()
        assert set(rig.controller.cluster.nodes.objects) == {"n0", "n1"}
        lists = [path for method, path in rig.api.requests if path.startswith("/api/v1/nodes?") and "watch=" not in path]
        assert len(lists) == 2, "listed at the start, and again after the watch expired"
        assert rig.controller.cluster.nodes.objects["n0"]["metadata"]["uid"] == node["metadata"]["uid"]
    finally:
        await stop()


async def test_a_pod_that_failed_after_binding_is_replaced_by_one_placed_on_its_own(rig: Rig) -> None:
    for i in range(3):
        rig.api.add_node(f"n{i}", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    for i in range(2):
        rig.api.add_pod(pod_group_pod("g", i, size=2, gpus=8, owned=True))
    await rig.settle()
    for i in range(2):
        rig.api.bind("default", f"g-{i}", pinned_node(rig.api.pod("default", f"g-{i}")))
    rig.api.set_phase("default", "g-1", "Failed")  # its GPUs are free again; the Job makes g-2
    rig.api.add_pod(pod_group_pod("g", 2, size=2, gpus=8, owned=True))
    await rig.settle()
    assert pinned_node(rig.api.pod("default", "g-2")) is not None, "g-1 no longer counts: 2 pods run, as the gang asks"
    assert pinned_node(rig.api.pod("default", "g-2")) != pinned_node(rig.api.pod("default", "g-0"))
