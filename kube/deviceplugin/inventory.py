"""What the plugin advertises: the node's schedulable devices, per resource, with their health.

Pure: from the agent's ``runtimekit.v1`` messages (``Node`` from GetNode, ``NodeHealth`` from
WatchHealth, the ``Slice`` list from ListSlices, each card's NUMA node from GetTopology) to
``Unit`` rows. One policy, applied here only:

- **Which devices.** A whole GPU whose mode is not "mig" is one device of ``resource_name``. A
  GPU in MIG mode is not advertised whole; each of its existing MIG devices (GetNode's
  ``Device.partitions``) is one device of ``mig_prefix + profile`` (NVIDIA's "mixed" strategy).
  The device ID is the UUID ("GPU-…", "MIG-…": at most 41 characters, within the API's 63).
- **Slices hold devices.** What a slice of the agent holds is never advertised, or the kubelet
  could hand it to another pod: a card with slices (GetNode's ``Device.slice_ids``) is not
  advertised whole, and a MIG device a slice is made of (ListSlices: ``Slice.partition``, by
  card and GPU-instance id) is not advertised. (AllocateDevices' default set leaves out cards
  with slices the same way.)
- **NUMA node.** Every device carries its card's NUMA node (GetTopology's
  ``DevicePlace.numa_node``), None when unknown: the kubelet's Topology Manager hint.
- **Health.** A device is "Unhealthy" when its card is lost, or the health checker's verdict on
  its card says it is not schedulable (UNHEALTHY, or a fault whose policy forbids new work); a
  MIG device also when the verdict on the slice made of it is UNHEALTHY, or its card holds a
  critical fault raised in that partition. Else "Healthy", also before the health checker's first
  verdict (the kubelet would otherwise refuse every pod while the agent starts). A device goes
  back to "Healthy" as soon as the verdict does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from runtimekit._proto.runtimekit.v1 import node_pb2, slice_pb2

from .config import DevicePluginConfig
from .names import mig_resource

#: The health strings of the device plugin API (k8s.io/kubelet deviceplugin/v1beta1 constants.go).
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


@dataclass(frozen=True, slots=True)
class Unit:
    """One device the kubelet may hand to a container."""

    id: str  # the device plugin's device ID: the GPU's or MIG device's UUID
    resource: str  # the extended resource it is advertised as
    healthy: bool
    card: str  # the UUID of the GPU it is on (its own for a whole GPU)
    reason: str = ""  # why it is unhealthy, in words ("" when healthy)
    numa_node: int | None = None  # its card's NUMA node; None when unknown

    @property
    def health(self) -> str:
        return HEALTHY if self.healthy else UNHEALTHY


def units(node: node_pb2.Node, health: node_pb2.NodeHealth, config: DevicePluginConfig,
          slices: Iterable[slice_pb2.Slice] = (), numa: Mapping[str, int] | None = None) -> tuple[Unit, ...]:
    """Every device to advertise, in the agent's device order (index), partitions by GPU-instance id.
    ``slices``: the agent's slices (ListSlices; only those of cards with ``slice_ids`` matter);
    ``numa``: each card's NUMA node by card UUID (GetTopology), a card absent when unknown."""
    verdicts = {entry.ref.uuid: entry.health for entry in health.devices}
    slice_health = {(item.ref.uuid, item.partition_gpu_instance_id): item for item in health.slices
                    if item.HasField("partition_gpu_instance_id")}
    held = held_partitions(slices)
    numa = numa or {}
    found: list[Unit] = []
    for device in sorted(node.devices, key=lambda device: device.ref.index):
        card = device.ref.uuid
        if not card:
            continue  # the driver gave no UUID: nothing the kubelet could name
        problem = _card_problem(device, verdicts.get(card))
        if device.mode != "mig":
            if not device.slice_ids:  # a card with slices is held by them: never advertised whole
                found.append(Unit(card, config.resource_name, not problem, card, problem, numa.get(card)))
            continue
        if not config.mig:
            continue
        for part in sorted(device.partitions, key=lambda part: part.gpu_instance_id):
            if not part.uuid or not part.profile:
                continue  # being made or destroyed: not a device yet
            if (card, part.gpu_instance_id) in held:
                continue  # a slice is made of it
            reason = problem or _partition_problem(verdicts.get(card), slice_health.get((card, part.gpu_instance_id)),
                                                   part.gpu_instance_id)
            found.append(Unit(part.uuid, mig_resource(config.mig_prefix, part.profile), not reason, card, reason,
                              numa.get(card)))
    return tuple(found)


def held_partitions(slices: Iterable[slice_pb2.Slice]) -> frozenset[tuple[str, int]]:
    """(card UUID, GPU-instance id) of every partition a slice is made of (a slice whose partition
    is not made yet holds none)."""
    return frozenset((item.device.uuid, item.partition.gpu_instance_id) for item in slices
                     if item.HasField("partition"))


def numa_nodes(topology: node_pb2.Topology) -> dict[str, int]:
    """Each card's NUMA node by card UUID, from GetTopology (a card whose node is unknown is absent)."""
    return {place.ref.uuid: place.numa_node for place in topology.devices
            if place.ref.uuid and place.HasField("numa_node")}


def by_resource(found: Iterable[Unit], resources: Iterable[str] = ()) -> dict[str, tuple[Unit, ...]]:
    """``found`` grouped by resource; every name of ``resources`` is present (empty if none)."""
    grouped: dict[str, list[Unit]] = {name: [] for name in resources}
    for unit in found:
        grouped.setdefault(unit.resource, []).append(unit)
    return {name: tuple(group) for name, group in grouped.items()}


def _card_problem(device: node_pb2.Device, verdict: node_pb2.DeviceHealth | None) -> str:
    if device.lost:
        return "the card is lost (fell off the bus)"
    if verdict is None or verdict.state == node_pb2.HEALTH_STATE_UNSPECIFIED:
        return ""  # no verdict yet
    if verdict.state == node_pb2.HEALTH_STATE_UNHEALTHY or not verdict.schedulable:
        faults = ", ".join(fault.fault for fault in verdict.faults) or "no fault named"
        return f"the health checker: {node_pb2.HealthState.Name(verdict.state)}, not schedulable ({faults})"
    return ""


def _partition_problem(verdict: node_pb2.DeviceHealth | None, slice_health: node_pb2.SliceHealth | None,
                       gpu_instance_id: int) -> str:
    if slice_health is not None and slice_health.state == node_pb2.HEALTH_STATE_UNHEALTHY:
        return f"the health checker: its slice {slice_health.slice_id} is unhealthy"
    critical = [fault.fault for fault in (verdict.partition_faults if verdict is not None else ())
                if fault.partition_gpu_instance_id == gpu_instance_id and fault.severity == "critical"]
    return f"critical fault in the partition ({', '.join(critical)})" if critical else ""

