"""What a waiting gang writes to the API server while the cluster changes around it: its Event and
its pods' conditions say the same thing as long as the cause is the same (live counts go to the
log only), and a new wording of the same reason is written at most once per
``controller.REWRITE_SECONDS``. A 20-pod gang must not cost 20 PATCHes and 20 Events for every
offer change elsewhere."""

from __future__ import annotations

from runtimekit.kube.gang.controller import REWRITE_SECONDS
from runtimekit.kube.gang.offer import Offer
from tests.gang.gang_rig import LEAF, SPINE, Rig, pod_group_pod

STATUS_PATCH = "application/strategic-merge-patch+json"


def _writes(rig: Rig) -> tuple[int, int]:
    """(condition PATCHes, Events) so far."""
    return sum(1 for patch in rig.api.patches if patch[1] == STATUS_PATCH), len(rig.api.events())


async def test_offer_changes_elsewhere_rewrite_nothing_for_a_waiting_gang(rig: Rig) -> None:
    for i in range(24):
        rig.api.add_node(f"n{i}", {SPINE: "s1", LEAF: f"l{i // 8}"}, Offer.of([8]))
    await rig.settle()  # the nodes' peaks: the gang below fits an empty cluster
    for i in range(16, 24):
        rig.api.update_node(f"n{i}", offer=Offer.of([0]))
    for i in range(20):
        rig.api.add_pod(pod_group_pod("big", i, size=20, gpus=8))
    await rig.settle()
    assert rig.condition("big-0")["reason"] == "Unplaceable"
    assert "not enough free capacity" in rig.condition("big-0")["message"]
    before = _writes(rig)
    assert before == (20, 20), "each pod's condition and Event written once"

    for node, gpus in (("n0", 0), ("n1", 0), ("n0", 8), ("n2", 4)):  # the cluster's free capacity moves
        rig.api.update_node(node, offer=Offer.of([gpus]))
        await rig.settle()
    assert _writes(rig) == before, "the same reason in the same words: nothing written"


async def test_a_new_wording_of_the_same_reason_waits_before_it_is_written(rig: Rig) -> None:
    """The placement the pod's own selector refuses moves from n0 to n1 (its node is named in the
    message): rewritten only once ``REWRITE_SECONDS`` passed."""
    now = [1_000_000.0]
    rig.controller.clock = lambda: now[0]
    for i in range(2):
        rig.api.add_node(f"n{i}", {SPINE: "s1", LEAF: "l0", "gpu": "h100"}, Offer.of([8]))
    rig.api.add_pod(pod_group_pod("g", 0, size=1, gpus=8, node_selector={"gpu": "a100"}))
    await rig.settle()
    first = rig.condition("g-0")["message"]
    assert "on node n0" in first
    before = _writes(rig)

    rig.api.update_node("n0", offer=Offer.of([4]))
    now[0] += REWRITE_SECONDS / 2
    await rig.settle()
    assert rig.condition("g-0")["message"] == first and _writes(rig) == before

    now[0] += REWRITE_SECONDS
    await rig.settle()
    assert "on node n1" in rig.condition("g-0")["message"]
    assert _writes(rig) == (before[0] + 1, before[1] + 1)
