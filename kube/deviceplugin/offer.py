"""What this node offers a gang: the gang placer's ``Offer`` (kube/gang/offer.py) from what the
plugin knows. Pure: data in, data out.

- **Free GPUs** are the whole GPUs the plugin advertises as ``resource_name`` (``inventory.units``:
  a card in MIG mode, or one a slice of the agent holds, is none), healthy by the agent's verdict,
  that no pod holds: no device id the kubelet's pod-resources API lists (List, any resource) is the
  card's UUID or one of its time-slicing replicas ("GPU-…::2", as NVIDIA's device plugin names
  them).
- **NVLink-connected groups** are the DRA driver's ``nvlinkDomain`` (``kube/dra/devices.py
  nvlink_domains``, reused): GPUs joined by GetTopology's "interconnect" device links,
  transitively, so an NVSwitch board is one group of 8 and a PCIe board with NVLink bridges groups
  of 2. A card GetTopology does not list is a group of its own.
- **Free RDMA NICs** are GetTopology's NICs, counted by their PCIe root (``Nic.pcie_root``;
  "unknown" when the agent could not read it, as kube/gang/slices.py counts them), less those a
  pod holds: a pod-resources device id that is the NIC's name ("mlx5_0") or PCI address
  ("0000:1a:00.0"), what NIC device plugins name their devices by. The NICs that ``with_nics``
  passes into a GPU container are shared device nodes, not given to it alone: they stay free.
"""

from __future__ import annotations

from collections.abc import Iterable

from runtimekit._proto.runtimekit.v1 import node_pb2
from runtimekit.kube.dra.devices import nvlink_domains
from runtimekit.kube.gang.offer import Offer
from runtimekit.kube.gang.slices import UNKNOWN_ROOT

from .inventory import Unit

__all__ = ["REPLICA_SEPARATOR", "held_by_pods", "node_offer"]

#: Between a GPU's UUID and the replica number in a time-slicing device id ("GPU-…::2").
REPLICA_SEPARATOR = "::"


def held_by_pods(device_ids: Iterable[str]) -> frozenset[str]:
    """The devices that pods hold, from the pod-resources device ids: each id as is, and a
    time-slicing replica's GPU UUID as well."""
    held: set[str] = set()
    for device_id in device_ids:
        held.add(device_id)
        card, separator, _ = device_id.partition(REPLICA_SEPARATOR)
        if separator:
            held.add(card)
    return frozenset(held)


def node_offer(units: Iterable[Unit], resource_name: str, topology: node_pb2.Topology,
               pod_device_ids: Iterable[str]) -> Offer:
    """The node's offer (module docstring): ``units`` the plugin advertises, ``resource_name`` the
    whole GPUs' resource, ``topology`` the agent's GetTopology, ``pod_device_ids`` every device id
    the kubelet lists as held by a pod."""
    held = held_by_pods(pod_device_ids)
    index_of = {place.ref.uuid: place.ref.index for place in topology.devices if place.ref.uuid}
    domains = nvlink_domains(topology)
    groups: dict[str, int] = {}
    for unit in units:
        if unit.resource != resource_name or not unit.healthy or unit.id in held:
            continue
        index = index_of.get(unit.card)
        group = f"nvlink-{domains.get(index, index)}" if index is not None else f"alone-{unit.card}"
        groups[group] = groups.get(group, 0) + 1
    nics: dict[str, int] = {}
    for nic in topology.nics:
        if nic.name in held or (nic.pci_address and nic.pci_address in held):
            continue
        root = nic.pcie_root or UNKNOWN_ROOT
        nics[root] = nics.get(root, 0) + 1
    return Offer.of(groups, nics)
