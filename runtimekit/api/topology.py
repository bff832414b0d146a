"""runtimekit.v1's topology calls from the base's vocabulary: pure functions, no I/O.

``topology_message`` renders the node state's ``Topology`` (GetTopology); ``allocate_devices``
answers AllocateDevices from one view: it validates the request (each refusal a ``SliceError``
naming the request's field), picks the candidates, and asks the allocator
(``runtimekit.state.topology.Allocator``: the composition root hands in
``runtimekit.topology.allocator.allocate``) for the best set. Level names are
vendor-neutral in the API: the state's "nvlink" is "interconnect" there (proto/runtimekit/v1/node.proto,
DeviceLink); the other levels keep their names.
"""

from __future__ import annotations

from collections.abc import Iterable

from runtimekit._proto.runtimekit.v1 import node_pb2, service_pb2
from runtimekit.api.convert import device_ref, timestamp
from runtimekit.state import NodeView
from runtimekit.state.slices import SliceError
from runtimekit.state.topology import AllocationError, Allocator, Link, NicPlace, Topology

__all__ = ["NO_TOPOLOGY", "allocate_devices", "free_whole_devices", "level_name", "topology_message"]

NO_TOPOLOGY = ("the agent has not discovered the node's topology yet (it does after the first sample; "
               "topology.enabled must be true); retry in a moment")
#: The allocator's argument names -> the request's field names.
_FIELDS = {"count": "count", "free": "candidate_device_uuids", "required": "required_device_uuids"}


def level_name(link: Link) -> str:
    """The API's name of ``link``'s level ("nvlink" is the vendor-neutral "interconnect")."""
    return "interconnect" if link.level == "nvlink" else link.level


def nic_message(nic: NicPlace) -> node_pb2.Nic:
    return node_pb2.Nic(name=nic.name, pci_address=nic.pci, numa_node=nic.numa_node, socket=nic.socket,
                        pcie_switches=nic.pcie_switches, rate_gbps=nic.rate_gbps, device_nodes=nic.device_nodes,
                        pcie_root=nic.pcie_root)


def topology_message(topology: Topology) -> node_pb2.Topology:
    """The node's topology: places by index / name, every pair by index."""
    return node_pb2.Topology(
        devices=[node_pb2.DevicePlace(ref=device_ref(gpu.ref), numa_node=gpu.numa_node, socket=gpu.socket,
                                      pcie_switches=gpu.pcie_switches, switched_fabric=gpu.nvswitch, pcie_root=gpu.pcie_root)
                 for gpu in topology.gpus],
        nics=[nic_message(nic) for nic in topology.nics],
        device_links=[node_pb2.DeviceLink(device_index=a, peer_index=b, level=level_name(link), links=link.nvlinks, cost=link.cost)
                      for (a, b), link in sorted(topology.gpu_links.items())],
        nic_links=[node_pb2.NicLink(device_index=gpu, nic=nic, level=level_name(link), cost=link.cost)
                   for (gpu, nic), link in topology.nic_links_in_order()],
        discovered_at=timestamp(topology.discovered_at),
        errors=topology.errors,
    )


def free_whole_devices(view: NodeView, topology: Topology) -> set[int]:
    """The default candidates: the topology's GPUs that are sampled, not lost, whole (not in
    partition mode, no partitions, no change to partition mode waiting for a GPU reset: the
    slicer's ``pending`` or the sample's ``mig_mode_pending``), hold no slice, are not allocated
    to a container by the kubelet (``AttributionSnapshot.held_whole``, while it is known), and are
    schedulable (no verdict yet counts)."""
    gpus = {gpu.index: gpu for gpu in view.snapshot.gpus} if view.snapshot is not None else {}
    held = view.attribution.held_whole() if view.attribution is not None else {}
    health = {gpu.index: gpu for gpu in view.health.gpus} if view.health is not None else {}
    free = set()
    for place in topology.gpus:
        index = place.ref.index
        gpu, verdict, info = gpus.get(index), health.get(index), view.slices.devices.get(index)
        if gpu is None or gpu.lost or gpu.mig_devices or place.ref.uuid in held:
            continue
        if gpu.modes is not None and (gpu.modes.mig_mode_current is True or gpu.modes.mig_mode_pending is True):
            continue
        if (info is not None and "mig" in (info.mode, info.pending)) or view.slices.on_gpu(index):
            continue
        if verdict is None or verdict.schedulable:
            free.add(index)
    return free


def _indices(uuids: Iterable[str], by_uuid: dict[str, int], field: str) -> set[int]:
    out = set()
    for uuid in uuids:
        if uuid not in by_uuid:
            raise SliceError("invalid_argument", field, f"no device {uuid!r} on this node")
        out.add(by_uuid[uuid])
    return out


def allocate_devices(view: NodeView, request: service_pb2.AllocateDevicesRequest,
                     allocate: Allocator) -> service_pb2.AllocateDevicesResponse:
    """AllocateDevices over ``view``'s topology. Refusals (``SliceError``): UNAVAILABLE before the
    first discovery; INVALID_ARGUMENT for count 0, an unknown UUID, a required device that is no
    candidate, more required devices than count; RESOURCE_EXHAUSTED for fewer candidates than count."""
    topology = view.topology
    if topology is None:
        raise SliceError("unavailable", "", NO_TOPOLOGY)
    if request.count < 1:
        raise SliceError("invalid_argument", "count", f"must be at least 1 device, got {request.count}")
    by_uuid = {gpu.ref.uuid: gpu.ref.index for gpu in topology.gpus if gpu.ref.uuid}
    explicit = bool(request.candidate_device_uuids)
    candidates = (_indices(request.candidate_device_uuids, by_uuid, "candidate_device_uuids") if explicit
                  else free_whole_devices(view, topology))
    required = _indices(request.required_device_uuids, by_uuid, "required_device_uuids")
    outside = sorted(required - candidates)
    if outside:
        why = "" if explicit else " (it is in partition mode, holds a slice, is lost or is not schedulable)"
        uuid = next(uuid for uuid, index in by_uuid.items() if index == outside[0])
        raise SliceError("invalid_argument", "required_device_uuids", f"device {uuid!r} is not a candidate{why}")
    if len(required) > request.count:
        raise SliceError("invalid_argument", "required_device_uuids",
                         f"{len(required)} devices required, more than count {request.count}")
    if request.count > len(candidates):
        which = "candidates given" if explicit else "free whole schedulable devices"
        raise SliceError("resource_exhausted", "count", f"{request.count} devices asked, {len(candidates)} {which}")
    try:
        chosen = allocate(topology, candidates, request.count, required=required, with_nics=request.with_nics)
    except AllocationError as error:  # validated above; kept so a rule of the allocator's reaches the caller named
        raise SliceError("invalid_argument", _FIELDS.get(error.field, error.field), str(error).split(": ", 1)[-1]) from error
    gpus = {gpu.ref.index: gpu for gpu in topology.gpus}
    nics = {nic.name: nic for nic in topology.nics}
    response = service_pb2.AllocateDevicesResponse(cost=chosen.cost)
    for index, nic in zip(chosen.gpus, chosen.nics, strict=True):
        device = service_pb2.AllocatedDevice(device=device_ref(gpus[index].ref))
        if nic:
            device.nic.CopyFrom(nic_message(nics[nic]))
        response.devices.append(device)
    return response
