"""The gang controller (kube/gang/controller.py) with the real placer, through the official
``kubernetes`` client against the fake API server (fake_cluster_api.py, which validates pod
updates as the real one does: no new gates, node affinity only narrowed while gated).

The rounds are driven by ``settle``: the informers have caught up with the fake's state, then
one ``decide`` runs, so every assertion is about one decision, never about time."""

from __future__ import annotations

import asyncio

from runtimekit.kube.gang.gangs import CONDITION, GATE, PLACED_ANNOTATION
from runtimekit.kube.gang.offer import Offer
from runtimekit.kube.gang.placer import GangDemand, Placer, PodDemand
from tests.gang.gang_rig import LEAF, SPINE, Rig, jobset, jobset_pod, pinned_node, pod_group_pod


async def test_a_gang_is_held_while_one_pod_is_missing_then_released_all_at_once(rig: Rig) -> None:
    """THE done-when test: held with 3 of 4 pods; with the 4th, every pod released in one round,
    pinned exactly where the placer (run alone on the same cluster) puts the gang."""
    nodes = {f"n{i}": {SPINE: "s1", LEAF: f"l{i // 2}"} for i in range(4)}
    for name, labels in nodes.items():
        rig.api.add_node(name, labels, Offer.of([8]))
    rig.api.add("jobsets", jobset("train", workers=4))
    for i in range(3):
        rig.api.add_pod(jobset_pod("train", i, gpus=8))
    await rig.settle()
    for i in range(3):
        pod = rig.api.pod("default", f"train-w-{i}")
        assert pod["spec"]["schedulingGates"] == [{"name": GATE}]
        assert "affinity" not in pod["spec"]
        assert rig.condition(f"train-w-{i}")["reason"] == "WaitingForPods"
    assert not rig.patches_of_spec()

    rig.api.add_pod(jobset_pod("train", 3, gpus=8))
    await rig.settle()
    expected = Placer(rig.config.tiers.tiers())
    for name, labels in nodes.items():
        expected.set_node(name, labels, Offer.of([8]))
    placement = expected.place(GangDemand("default/train", tuple(PodDemand(f"train-w-{i}", 8) for i in range(4))))
    placed = {f"train-w-{i}": pinned_node(rig.api.pod("default", f"train-w-{i}")) for i in range(4)}
    assert placed == dict(placement.nodes)
    assert sorted(placed.values()) == ["n0", "n1", "n2", "n3"]
    assert rig.rounds_releasing() == [rig.controller.rounds]  # every release PATCH in the one round
    for i in range(4):
        pod = rig.api.pod("default", f"train-w-{i}")
        assert not pod["spec"].get("schedulingGates")
        assert pod["metadata"]["annotations"][PLACED_ANNOTATION] == placed[f"train-w-{i}"]
        assert rig.condition(f"train-w-{i}")["status"] == "True"
    assert [e["reason"] for e in rig.api.events()] == ["GangPlaced"]
    assert rig.api.events()[0]["involvedObject"]["kind"] == "JobSet"


async def test_a_gang_that_does_not_fit_stays_gated_with_an_event_and_a_condition(rig: Rig) -> None:
    rig.api.add_node("n0", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    for i in range(2):
        rig.api.add_pod(pod_group_pod("big", i, size=2, gpus=8))
    await rig.settle()
    for i in range(2):
        pod = rig.api.pod("default", f"big-{i}")
        assert pod["spec"]["schedulingGates"] == [{"name": GATE}]
        condition = rig.condition(f"big-{i}")
        assert (condition["status"], condition["reason"]) == ("False", "Unplaceable")
        assert "2 pods of 8 GPUs" in condition["message"]
    events = rig.api.events()
    assert {e["involvedObject"]["name"] for e in events} == {"big-0", "big-1"}
    assert all(e["type"] == "Warning" and e["reason"] == "Unplaceable" for e in events)
    await rig.settle()
    assert len(rig.api.events()) == 2, "the same refusal again is not a new event"


async def test_two_gangs_racing_for_the_same_capacity(rig: Rig) -> None:
    """Both gangs complete in the same round; one is placed, the other waits (no GPU given twice),
    and is placed once the first one's pods are gone."""
    rig.api.add_node("n0", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    rig.api.add_node("n1", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    for gang in ("a", "b"):
        for i in range(2):
            rig.api.add_pod(pod_group_pod(gang, i, size=2, gpus=8))
    await rig.settle()
    released = {name for name in ("a-0", "a-1", "b-0", "b-1") if not rig.api.pod("default", name)["spec"].get("schedulingGates")}
    assert released == {"a-0", "a-1"}, "the older gang first, and only one of the two"
    assert rig.condition("b-0")["reason"] == "Unplaceable"
    assert sorted(pinned_node(rig.api.pod("default", n)) for n in ("a-0", "a-1")) == ["n0", "n1"]

    for i in range(2):
        rig.api.bind("default", f"a-{i}", pinned_node(rig.api.pod("default", f"a-{i}")))
    await rig.settle()
    assert set(rig.controller.reservations.held) == {"default/a"}, "bound, but the offers do not show it yet"
    rig.api.update_node("n0", offer=Offer.of([0]))
    rig.api.update_node("n1", offer=Offer.of([0]))
    await rig.settle()
    assert not rig.controller.reservations.held, "bound, and the offers show it: released"
    assert rig.api.pod("default", "b-0")["spec"]["schedulingGates"] == [{"name": GATE}]

    for i in range(2):
        rig.api.delete_pod_now("default", f"a-{i}")
    rig.api.update_node("n0", offer=Offer.of([8]))
    rig.api.update_node("n1", offer=Offer.of([8]))
    await rig.settle()
    assert sorted(pinned_node(rig.api.pod("default", f"b-{i}")) for i in range(2)) == ["n0", "n1"]


async def test_a_notready_node_is_left_out_and_a_pod_released_to_it_is_placed_again(rig: Rig) -> None:
    for i in range(3):
        rig.api.add_node(f"n{i}", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]), ready=i != 0)
    for i in range(2):
        rig.api.add_pod(pod_group_pod("g", i, size=2, gpus=8, owned=True))
    await rig.settle()
    placed = {f"g-{i}": pinned_node(rig.api.pod("default", f"g-{i}")) for i in range(2)}
    assert sorted(placed.values()) == ["n1", "n2"], "n0 is NotReady"

    rig.api.bind("default", "g-0", placed["g-0"])
    rig.api.update_node(placed["g-1"], ready=False)
    await rig.settle()
    assert ("default/g-1" not in rig.api.kinds["pods"].items), "released to a NotReady node before binding: evicted"
    assert any(e["reason"] == "Unbindable" for e in rig.api.events())
    assert dict(rig.controller.placer.reservations["default/g"].nodes) == {"g-0": placed["g-0"]}, \
        "the evicted pod's devices are no longer held; the bound pod's stay until its node's offer shows them"

    rig.api.update_node("n0", ready=True)
    rig.api.add_pod(pod_group_pod("g", 2, size=2, gpus=8, owned=True))  # what the Job makes in its place
    await rig.settle()
    assert pinned_node(rig.api.pod("default", "g-2")) == "n0", "the replacement goes where it fits now"


async def test_a_pod_whose_own_selector_excludes_the_placement_keeps_the_gang_gated(rig: Rig) -> None:
    rig.api.add_node("n0", {SPINE: "s1", LEAF: "l0", "gpu": "h100"}, Offer.of([8]))
    rig.api.add_pod(pod_group_pod("g", 0, size=1, gpus=8, node_selector={"gpu": "a100"}))
    await rig.settle()
    assert rig.api.pod("default", "g-0")["spec"]["schedulingGates"] == [{"name": GATE}]
    assert "nodeSelector gpu=a100" in rig.condition("g-0")["message"]


async def test_a_gang_with_an_unreadable_size_is_refused_by_name(rig: Rig) -> None:
    rig.api.add_node("n0", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    pod = pod_group_pod("g", 0, size=1, gpus=1)
    pod["metadata"]["annotations"]["runtimekit.io/gang-size"] = "lots"
    rig.api.add_pod(pod)
    await rig.settle()
    condition = rig.condition("g-0")
    assert (condition["reason"], condition["status"]) == ("InvalidGang", "False")
    assert "runtimekit.io/gang-size" in condition["message"]
    assert rig.api.pod("default", "g-0")["spec"]["schedulingGates"] == [{"name": GATE}]


async def test_the_fake_refuses_what_the_api_server_refuses(rig: Rig) -> None:
    """The validations the controller relies on: no new gate, no widening, no change once ungated."""
    rig.api.add_node("n0", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    rig.api.add_pod(pod_group_pod("g", 0, size=1, gpus=8))
    await rig.settle()
    assert pinned_node(rig.api.pod("default", "g-0")) == "n0"
    core = rig.controller.api.core
    for patch in ({"spec": {"schedulingGates": [{"name": "example.com/other"}]}},
                  {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                      "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}},
                  {"spec": {"bogus": 1}}):
        before = len(rig.api.refused)
        try:
            await asyncio.to_thread(core.patch_namespaced_pod, "g-0", "default", patch,
                                    _content_type="application/merge-patch+json")
        except Exception as error:
            assert getattr(error, "status", None) == 422
        assert len(rig.api.refused) == before + 1
    assert pinned_node(rig.api.pod("default", "g-0")) == "n0"
    assert CONDITION in {c["type"] for c in rig.api.pod("default", "g-0")["status"]["conditions"]}
