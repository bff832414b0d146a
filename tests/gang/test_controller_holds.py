"""How long a placed gang's devices stay reserved (kube/gang/tracking.py), against the fake API
server: until each node's offer shows the pods there allocated, node by node; an offer that moved
for another reason does not end it; a pod lost before binding gives back its own devices only.

Each test ends with a gang that must stay gated because the capacity it would take is still held:
the two-gangs-on-the-same-GPUs failure the reservations exist to prevent."""

from __future__ import annotations

from runtimekit.kube.gang.gangs import GATE
from runtimekit.kube.gang.offer import Offer
from tests.gang.gang_rig import LEAF, SPINE, Rig, pinned_node, pod_group_pod


def _gated(rig: Rig, name: str) -> bool:
    return rig.api.pod("default", name)["spec"].get("schedulingGates") == [{"name": GATE}]


def _held(rig: Rig, key: str) -> dict[str, str]:
    placement = rig.controller.placer.reservations.get(key)
    return dict(placement.nodes) if placement else {}


async def _place_and_bind(rig: Rig, gang: str, size: int, gpus: int) -> dict[str, str]:
    for i in range(size):
        rig.api.add_pod(pod_group_pod(gang, i, size=size, gpus=gpus, owned=True))
    await rig.settle()
    placed = {f"{gang}-{i}": pinned_node(rig.api.pod("default", f"{gang}-{i}")) for i in range(size)}
    assert None not in placed.values()
    for name, node in placed.items():
        rig.api.bind("default", name, str(node))
    return {name: str(node) for name, node in placed.items()}


async def test_an_offer_that_shows_one_of_two_pods_keeps_the_reservation(rig: Rig) -> None:
    """Two 4-GPU pods on one 8-GPU node, both bound; the device plugin has counted one (offer 4):
    the other's 4 GPUs are still the gang's, so a new 4-GPU gang waits."""
    rig.api.add_node("n0", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    assert set((await _place_and_bind(rig, "g", 2, 4)).values()) == {"n0"}
    await rig.settle()  # both bound, the offer as it was
    rig.api.update_node("n0", offer=Offer.of([4]))
    await rig.settle()
    assert _held(rig, "default/g") == {"g-0": "n0", "g-1": "n0"}

    rig.api.add_pod(pod_group_pod("h", 0, size=1, gpus=4))
    await rig.settle()
    assert _gated(rig, "h-0"), "n0's 4 free GPUs in the offer are g's second pod's"
    assert rig.condition("h-0")["reason"] == "Unplaceable"

    rig.api.update_node("n0", offer=Offer.of([0]))
    await rig.settle()
    assert not rig.controller.reservations.held, "the offer shows both pods: nothing left to hold"


async def test_each_node_ends_its_part_of_the_reservation_on_its_own(rig: Rig) -> None:
    for i in range(2):
        rig.api.add_node(f"n{i}", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    placed = await _place_and_bind(rig, "g", 2, 8)
    first, second = placed["g-0"], placed["g-1"]
    rig.api.update_node(first, offer=Offer.of([0]))
    await rig.settle()
    assert _held(rig, "default/g") == {"g-1": second}, "the node whose offer caught up is no longer held"

    rig.api.add_pod(pod_group_pod("h", 0, size=1, gpus=8))
    await rig.settle()
    assert _gated(rig, "h-0"), f"{second}'s GPUs are still g-1's"

    rig.api.update_node(second, offer=Offer.of([0]))
    await rig.settle()
    assert not rig.controller.reservations.held


async def test_two_reservations_on_one_node_end_only_when_the_offer_shows_both(rig: Rig) -> None:
    """a and b each hold 4 of n0's 8 GPUs; the offer drops to 4 (one of them counted): one
    reservation may end, but 4 GPUs stay held, so a third 4-GPU gang waits."""
    rig.api.add_node("n0", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    rig.api.add_pod(pod_group_pod("a", 0, size=1, gpus=4))
    await rig.settle()
    rig.api.add_pod(pod_group_pod("b", 0, size=1, gpus=4))
    await rig.settle()
    assert pinned_node(rig.api.pod("default", "a-0")) == pinned_node(rig.api.pod("default", "b-0")) == "n0"
    rig.api.bind("default", "a-0", "n0")
    rig.api.bind("default", "b-0", "n0")
    rig.api.update_node("n0", offer=Offer.of([4]))
    await rig.settle()
    assert len(rig.controller.reservations.held) == 1

    rig.api.add_pod(pod_group_pod("c", 0, size=1, gpus=4))
    await rig.settle()
    assert _gated(rig, "c-0"), "4 GPUs of n0 are a pod's that the offer does not show yet"


async def test_a_pod_lost_before_binding_gives_back_its_own_devices_only(rig: Rig) -> None:
    """g-2 is released to a node that turns NotReady before it binds: evicted. g-1, released but
    not bound yet, keeps its node; g-0, bound, keeps its own until its offer shows it."""
    for i in range(3):
        rig.api.add_node(f"n{i}", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    for i in range(3):
        rig.api.add_pod(pod_group_pod("g", i, size=3, gpus=8, owned=True))
    await rig.settle()
    placed = {f"g-{i}": pinned_node(rig.api.pod("default", f"g-{i}")) for i in range(3)}
    rig.api.bind("default", "g-0", str(placed["g-0"]))
    rig.api.update_node(str(placed["g-2"]), ready=False)
    await rig.settle()
    assert "default/g-2" not in rig.api.kinds["pods"].items, "evicted"
    assert _held(rig, "default/g") == {"g-0": placed["g-0"], "g-1": placed["g-1"]}

    rig.api.add_pod(pod_group_pod("h", 0, size=1, gpus=8))
    await rig.settle()
    assert _gated(rig, "h-0"), "g-1's node is still g-1's though g-2 was lost"
