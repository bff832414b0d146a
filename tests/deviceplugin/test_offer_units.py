"""The gang offer the device plugin computes (kube/deviceplugin/offer.py), table by table: NVLink
groups from GetTopology's "interconnect" links (an NVSwitch board is one group of 8, a PCIe board
with NVLink bridges groups of 2), unhealthy and pod-held GPUs left out, MIG-mode and slice-held
cards never offered, NICs by PCIe root less those pods hold; the annotation's text read back by
the placer's own parser; and the gang placer placing a gang on offers read from such annotations."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from runtimekit._proto.runtimekit.v1 import node_pb2, slice_pb2
from runtimekit.kube.deviceplugin.config import load
from runtimekit.kube.deviceplugin.inventory import units
from runtimekit.kube.deviceplugin.offer import node_offer
from runtimekit.kube.gang.network import Tiers
from runtimekit.kube.gang.offer import Offer, offer_annotation, parse_offer_annotation
from runtimekit.kube.gang.placer import GangDemand, Placement, Placer, PodDemand, Refusal

CONFIG = load()
GPU = CONFIG.resource_name
CARDS = 8


def uuid(index: int) -> str:
    return f"GPU-{index:08d}-1111-2222-3333-444444444444"


def ref(index: int) -> slice_pb2.DeviceRef:
    return slice_pb2.DeviceRef(kind="gpu", vendor="nvidia", uuid=uuid(index), index=index)


def make_node(mig: Iterable[int] = (), sliced: Iterable[int] = (), lost: Iterable[int] = ()) -> node_pb2.Node:
    node = node_pb2.Node()
    for index in range(CARDS):
        device = node.devices.add(ref=ref(index), mode="mig" if index in mig else "tdm", lost=index in lost)
        if index in sliced:
            device.slice_ids.append(f"slice-{index}")
    return node


def make_health(unhealthy: Iterable[int] = ()) -> node_pb2.NodeHealth:
    """A verdict: the cards of ``unhealthy`` UNHEALTHY with an XID 79, the others healthy."""
    health = node_pb2.NodeHealth(state=node_pb2.HEALTH_STATE_HEALTHY, evaluated_at=Timestamp(seconds=1))
    for index in range(CARDS):
        entry = health.devices.add(ref=ref(index))
        if index in unhealthy:
            entry.health.state = node_pb2.HEALTH_STATE_UNHEALTHY
            entry.health.faults.add(fault="xid_79", severity="critical", action="drain_and_reset_gpu")
        else:
            entry.health.state, entry.health.schedulable = node_pb2.HEALTH_STATE_HEALTHY, True
    return health


def make_topology(linked: Iterable[tuple[int, int]], nic_roots: Iterable[str] = (), listed: int = CARDS
                  ) -> node_pb2.Topology:
    """Cards 0..listed-1 on roots "pci0000:<index>", NVLink ("interconnect") between the pairs of
    ``linked``, the others "system"; one NIC mlx5_<n> at PCI address 0000:<n>:00.0 per root of ``nic_roots``."""
    topology = node_pb2.Topology()
    for index in range(listed):
        topology.devices.add(ref=ref(index), pcie_root=f"pci0000:{index:02x}")
    pairs = set(linked)
    for a in range(listed):
        for b in range(a + 1, listed):
            level = "interconnect" if (a, b) in pairs else "system"
            topology.device_links.add(device_index=a, peer_index=b, level=level, links=18 if level == "interconnect" else 0)
    for n, root in enumerate(nic_roots):
        topology.nics.add(name=f"mlx5_{n}", pci_address=f"0000:{n:02x}:00.0", pcie_root=root)
    return topology


NVSWITCH = [(a, b) for a in range(CARDS) for b in range(a + 1, CARDS)]  # every pair through the switches
BRIDGED_PAIRS = [(0, 1), (2, 3), (4, 5), (6, 7)]  # PCIe cards, NVLink bridges in pairs
DGX_ROOTS = [f"pci0000:{index:02x}" for index in range(CARDS)]  # one NIC beside each GPU


def offer_of(node: node_pb2.Node, topology: node_pb2.Topology, held: Iterable[str] = (),
             health: node_pb2.NodeHealth | None = None) -> Offer:
    advertised = units(node, health or make_health(), CONFIG)
    return node_offer(advertised, GPU, topology, held)


def group_sizes(offer: Offer) -> list[int]:
    return [group.free for group in offer.groups]


@pytest.mark.parametrize("case,node,topology,held,health,groups", [
    ("an NVSwitch board is one group of 8", make_node(), make_topology(NVSWITCH), (), None, [8]),
    ("PCIe cards bridged in pairs are groups of 2", make_node(), make_topology(BRIDGED_PAIRS), (), None, [2, 2, 2, 2]),
    ("no NVLink: every GPU alone", make_node(), make_topology([]), (), None, [1] * 8),
    ("an unhealthy GPU (XID 79) is not free", make_node(), make_topology(NVSWITCH), (), make_health([3]), [7]),
    ("a lost GPU is not free", make_node(lost=[2]), make_topology(NVSWITCH), (), None, [7]),
    ("GPUs pods hold are not free", make_node(), make_topology(NVSWITCH), [uuid(0), uuid(5)], None, [6]),
    ("a pod's GPU leaves its pair with one", make_node(), make_topology(BRIDGED_PAIRS), [uuid(2)], make_health([7]),
     [2, 2, 1, 1]),
    ("a time-slicing replica holds its GPU", make_node(), make_topology(NVSWITCH), [uuid(4) + "::3"], None, [7]),
    ("another resource's ids hold nothing of ours", make_node(), make_topology(NVSWITCH), ["MIG-1234", "GPU-other"],
     None, [8]),
    ("MIG-mode and slice-held cards are no whole GPUs", make_node(mig=[0], sliced=[1]), make_topology(NVSWITCH), (),
     None, [6]),
    ("a card the topology misses is a group of its own", make_node(), make_topology(NVSWITCH[:21], listed=7), (), None,
     [7, 1]),
])
def test_free_gpus_by_nvlink_group(case: str, node: node_pb2.Node, topology: node_pb2.Topology, held: list[str],
                                   health: node_pb2.NodeHealth | None, groups: list[int]) -> None:
    offer = offer_of(node, topology, held, health)
    assert group_sizes(offer) == groups, case
    assert offer.gpus_free == sum(groups)


def test_nics_by_pcie_root_less_those_pods_hold() -> None:
    roots = ["pci0000:15", "pci0000:15", "pci0000:27", "", "pci0000:37"]
    topology = make_topology(NVSWITCH, roots)
    assert offer_of(make_node(), topology).nics == (("pci0000:15", 2), ("pci0000:27", 1), ("pci0000:37", 1),
                                                    ("unknown", 1))
    # A NIC device plugin's ids: the NIC's name, or its PCI address.
    held = offer_of(make_node(), topology, ["mlx5_0", "0000:04:00.0", uuid(1)])
    assert held.nics == (("pci0000:15", 1), ("pci0000:27", 1), ("unknown", 1))
    assert held.gpus_free == 7
    assert offer_of(make_node(), make_topology(NVSWITCH)).nics == ()  # no RDMA NICs: none offered


def test_the_annotation_reads_back_as_the_same_offer() -> None:
    offer = offer_of(make_node(), make_topology(BRIDGED_PAIRS, DGX_ROOTS), [uuid(6), "mlx5_7"], make_health([0]))
    text = offer_annotation(offer)
    assert text == ('{"v":1,"gpus_free":6,"nvlink_groups":[2,2,1,1],"nics_free_by_root":{"pci0000:00":1,'
                    '"pci0000:01":1,"pci0000:02":1,"pci0000:03":1,"pci0000:04":1,"pci0000:05":1,"pci0000:06":1}}')
    read = parse_offer_annotation(text)
    assert (group_sizes(read), read.nics) == (group_sizes(offer), offer.nics)


def annotated(node: node_pb2.Node, topology: node_pb2.Topology, held: Iterable[str] = (),
              health: node_pb2.NodeHealth | None = None) -> Offer:
    """The offer the placer reads: the annotation's text the plugin writes, parsed back."""
    return parse_offer_annotation(offer_annotation(offer_of(node, topology, held, health)))


def test_the_gang_placer_places_a_gang_on_the_annotations() -> None:
    tiers = Tiers.preset()
    leaf = {tiers.keys[-1]: "leaf-a"}
    placer = Placer(tiers)
    placer.set_node("dgx-0", leaf, annotated(make_node(), make_topology(NVSWITCH, DGX_ROOTS)))
    placer.set_node("pcie-0", leaf, annotated(make_node(), make_topology(BRIDGED_PAIRS)))
    trainers = GangDemand("ml/train", tuple(PodDemand(f"w{i}", 4, 1) for i in range(2)))
    placed = placer.place(trainers)
    assert isinstance(placed, Placement), placed
    assert dict(placed.nodes) == {"w0": "dgx-0", "w1": "dgx-0"}  # 4 GPUs in one NVLink group: only the NVSwitch board

    # A pod holds one of the board's GPUs: 7 left in its group, one pod of 4 fits; the pairs hold none.
    placer.set_node("dgx-0", leaf, annotated(make_node(), make_topology(NVSWITCH, DGX_ROOTS), [uuid(3)]))
    assert isinstance(placer.place(trainers), Refusal)
    pairs = GangDemand("ml/pairs", tuple(PodDemand(f"p{i}", 2) for i in range(4)))
    placed_pairs = placer.place(pairs)
    assert isinstance(placed_pairs, Placement) and set(placed_pairs.nodes.values()) == {"pcie-0"}
