"""What the DRA driver publishes: the node's devices as resource.k8s.io/v1 ``Device`` entries.

Pure: from the agent's runtimekit.v1 messages (``Node`` from GetNode, ``Topology`` from
GetTopology, the ``Slice`` list from ListSlices) to ``Inventory``, whose device entries are dicts
in the API's JSON form (``name``, ``attributes``, ``capacity``, ``allowMultipleAllocations``,
``consumesCounters``). Names come from ``names.py``. Attributes are unqualified (the driver's
domain) except the standard ``resource.kubernetes.io/pciBusID`` and ``pcieRoot`` (KEP-4381), which
GPUs and NICs share so that a claim can ``matchAttribute`` them.

- **Withdrawn GPUs.** None of a GPU's devices is published while it is lost, while the health
  checker's verdict says it is not schedulable (no verdict yet counts as fine, as the device
  plugin does), while the kubelet has allocated it to a pod whole or as a time-slicing replica
  (``held_by_pods``: a device-plugin pod's; the agent refuses a share of it), while a mode change
  waits for a reset, while the agent's slicer (enabled) has not reported its mode yet (the agent
  is starting: publishing it as a slicer-less whole GPU would offer it whole, then as shares),
  when it has no UUID, or when slices made outside DRA leave it nothing to give. It comes back as
  soon as that ends.
- **A GPU in "tdm" mode** (or "" when the agent's slicer is off) is one device ``gpu-<index>``:
  ``type: gpu``, ``mode``, ``uuid``, ``index``, ``productName``, ``architecture``, ``driverVersion``
  (semver), ``pciBusID``, ``pcieRoot``, ``numaNode``, ``cpuSocket``, ``nvlinkDomain`` (each omitted
  when unknown). Capacity ``memory`` (bytes: the usable memory less what slices not made by DRA
  hold) and ``compute`` (percent: 100 less what they hold). In "tdm" mode the device allows
  multiple allocations with a request policy (consumable capacity, KEP-5075): compute in steps of
  1 from 1, memory in steps of 128 MiB from 128 MiB, by default all of it — so a claim that asks
  for no capacity gets the whole GPU and a TDM share asks for its part.
- **A GPU in "mig" mode** is no whole device: one device per placement of every partition profile,
  ``gpu-<index>-mig-<profile>-<profile id>-<start>``: ``type: mig``, ``profile``, ``parentUUID``,
  ``parentIndex`` and the parent's product, architecture, driver and place; capacity ``memory``
  (the profile's bytes) and ``computeSlices``. Each consumes the memory-slice counters of its
  placement from the GPU's counter set ``gpu-<index>-counter-set`` (``memory-slice-<i>`` = 1 for
  each memory slice: KEP-4815 partitionable devices), so the scheduler never gives out two
  overlapping placements. Placements overlapping a partition that DRA did not make are withdrawn;
  DRA's own stay (the scheduler's counters account for them).
- **RDMA NICs** are ``nic-<name>``: ``type: nic``, ``name``, ``rateGbps`` (omitted when unknown),
  ``pciBusID``, ``pcieRoot``, ``numaNode``, ``cpuSocket``.
- **nvlinkDomain** is the smallest GPU index of the GPU's group of GPUs joined by device-to-device
  links ("interconnect" DeviceLinks, transitively): the same number for every GPU of an NVSwitch
  fabric, one per pair on a pairwise-NVLink board, its own index when it has no link.

Attribute and value rules from resource.k8s.io/v1 (kubernetes/api ``resource/v1/types.go``):
strings at most 64 characters (longer ones are cut), versions semver 2.0.0, PCI bus ids
``dddd:bb:dd.f`` (the pattern of the Kubernetes helper ``deviceattribute``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runtimekit._proto.runtimekit.v1 import node_pb2, slice_pb2

from .names import OWNER_PREFIX, counter_set_name, gpu_device_name, mig_device_name, nic_device_name

__all__ = ["GpuDevices", "Inventory", "inventory", "nvlink_domains", "quantity_bytes", "semver"]

STANDARD = "resource.kubernetes.io/"
MAX_STRING = 64  # DeviceAttributeMaxValueLength
MEMORY_STEP = 128 * 2**20  # bytes: the memory request policy's min and step (128 MiB, the slicer's granularity)
COMPUTE_TOTAL = 100  # percent of one GPU
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_PCI_BUS_ID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")
_VERSION = re.compile(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?")

Device = dict[str, Any]


@dataclass(frozen=True, slots=True)
class GpuDevices:
    """The devices published for one GPU, sorted by name, and its counter set (MIG mode only)."""

    index: int
    devices: tuple[Device, ...]
    counter_set: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Inventory:
    """Everything to publish: per GPU (by index, GPUs with no device left out), the NICs (by
    name), and why each withdrawn GPU is withdrawn (by index)."""

    gpus: tuple[GpuDevices, ...]
    nics: tuple[Device, ...]
    withdrawn: Mapping[int, str]


def inventory(node: node_pb2.Node, topology: node_pb2.Topology, slices: Iterable[slice_pb2.Slice]) -> Inventory:
    """The devices to publish for the agent's ``node``, ``topology`` and ``slices``."""
    places = {place.ref.index: place for place in topology.devices}
    domains = nvlink_domains(topology)
    slices = list(slices)
    driver = semver(node.driver_version)
    gpus: list[GpuDevices] = []
    withdrawn: dict[int, str] = {}
    for device in sorted(node.devices, key=lambda device: device.ref.index):
        index = device.ref.index
        mine = [item for item in slices if _on(item, device.ref)]
        problem = _gpu_problem(device, node.slicer_enabled)
        common = _common_attributes(device, places.get(index), domains.get(index, index), driver) if not problem else {}
        found = problem or (_mig_gpu(device, common, mine) if device.mode == "mig" else _whole_gpu(device, common, mine))
        if isinstance(found, str):
            withdrawn[index] = found
        elif found.devices:
            gpus.append(found)
    nics: dict[str, Device] = {}
    for nic in sorted(topology.nics, key=lambda nic: nic.name):
        entry = _nic(nic)
        if entry is not None:
            nics.setdefault(entry["name"], entry)
    return Inventory(tuple(gpus), tuple(nics.values()), withdrawn)


def nvlink_domains(topology: node_pb2.Topology) -> dict[int, int]:
    """Each GPU's NVLink domain: the smallest index of its group of GPUs joined by "interconnect"
    links (transitively); its own index when it has none."""
    parent: dict[int, int] = {place.ref.index: place.ref.index for place in topology.devices}

    def root(index: int) -> int:
        while parent.setdefault(index, index) != index:
            index = parent[index]
        return index

    for link in topology.device_links:
        if link.level == "interconnect":
            low, high = sorted((root(link.device_index), root(link.peer_index)))
            parent[high] = low
    return {index: root(index) for index in list(parent)}


def semver(version: str) -> str | None:
    """A driver version as semver 2.0.0: numeric parts without leading zeros, padded to three
    ("570.124.06" -> "570.124.6", "535.104" -> "535.104.0"); None when it is not numeric."""
    match = _VERSION.fullmatch(version.strip())
    if not match:
        return None
    return ".".join(str(int(part or 0)) for part in match.groups())


def quantity_bytes(amount: int) -> str:
    """A byte count as a Kubernetes quantity, in the largest binary unit that divides it ("80Gi")."""
    for suffix, unit in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if amount and amount % unit == 0:
            return f"{amount // unit}{suffix}"
    return str(amount)


def _on(item: slice_pb2.Slice, ref: slice_pb2.DeviceRef) -> bool:
    return item.device.uuid == ref.uuid if item.device.uuid and ref.uuid else item.device.index == ref.index


def _is_dra(item: slice_pb2.Slice) -> bool:
    return item.owner.owner_id.startswith(OWNER_PREFIX)


def _gpu_problem(device: node_pb2.Device, slicer_enabled: bool) -> str:
    """Why none of ``device``'s devices may be published now; "" when they may."""
    if not device.ref.uuid:
        return "the driver gave no UUID"
    if device.lost:
        return "lost (fell off the bus)"
    if device.pending_mode:
        return f"a change to mode {device.pending_mode!r} waits for a reset"
    verdict = device.health if device.HasField("health") else None
    if verdict is not None and verdict.state != node_pb2.HEALTH_STATE_UNSPECIFIED and (
            verdict.state == node_pb2.HEALTH_STATE_UNHEALTHY or not verdict.schedulable):
        faults = ", ".join(fault.fault for fault in verdict.faults) or "no fault named"
        return f"the health checker: {node_pb2.HealthState.Name(verdict.state)}, not schedulable ({faults})"
    if device.held_by_pods:  # a device-plugin pod's whole GPU or replica: the slicer refuses a share of it
        pods = "pods" if len(device.held_by_pods) > 1 else "pod"
        return f"the kubelet allocated it to {pods} {', '.join(device.held_by_pods)}"
    if device.mode not in ("tdm", "mig", ""):
        return f"mode {device.mode!r} is none the driver publishes"
    if slicer_enabled and not device.mode:  # the agent is starting: its slicer has not read the GPU yet
        return "the agent's slicer has not reported its mode yet"
    return ""


def _string(value: str) -> dict[str, str]:
    return {"string": value[:MAX_STRING]}


def _common_attributes(device: node_pb2.Device, place: node_pb2.DevicePlace | None, domain: int,
                       driver: str | None) -> dict[str, Any]:
    """The attributes a GPU and its MIG placements share: product, driver and place."""
    attributes: dict[str, Any] = {}
    if device.model:
        attributes["productName"] = _string(device.model)
    if device.architecture:
        attributes["architecture"] = _string(device.architecture)
    if driver:
        attributes["driverVersion"] = {"version": driver}
    attributes.update(_place_attributes(device.ref.pci_address, place))
    attributes["nvlinkDomain"] = {"int": domain}
    return attributes


def _place_attributes(pci_address: str, place: node_pb2.DevicePlace | node_pb2.Nic | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    if _PCI_BUS_ID.fullmatch(pci_address):
        attributes[STANDARD + "pciBusID"] = _string(pci_address)
    if place is None:
        return attributes
    if place.pcie_root:
        attributes[STANDARD + "pcieRoot"] = _string(place.pcie_root)
    if place.HasField("numa_node"):
        attributes["numaNode"] = {"int": place.numa_node}
    if place.HasField("socket"):
        attributes["cpuSocket"] = {"int": place.socket}
    return attributes


def _held_by_others(device: node_pb2.Device, mine: list[slice_pb2.Slice]) -> tuple[int, int]:
    """(percent, bytes) that slices not made by DRA hold on a TDM GPU (what they got, or asked
    for while they are being made)."""
    others = [item for item in mine if not _is_dra(item)]
    compute = sum(max(item.compute_percent, item.requested_compute_percent) for item in others)
    memory = sum(max(item.memory_bytes, item.requested_memory_bytes) for item in others)
    return compute, memory


def _whole_gpu(device: node_pb2.Device, common: dict[str, Any], mine: list[slice_pb2.Slice]) -> GpuDevices | str:
    """``gpu-<index>``; shared by TDM shares (consumable capacity) in mode "tdm"."""
    index = device.ref.index
    attributes: dict[str, Any] = {"type": _string("gpu")}
    if device.mode:
        attributes["mode"] = _string(device.mode)
    attributes |= {"uuid": _string(device.ref.uuid), "index": {"int": index}, **common}
    if device.mode != "tdm":  # the slicer is off: whole GPUs only, each to one claim
        if not device.memory_bytes:
            return "its memory is unknown"
        whole = {"memory": {"value": quantity_bytes(device.memory_bytes)}}
        return GpuDevices(index, ({"name": gpu_device_name(index), "attributes": attributes, "capacity": whole},))
    held_compute, held_memory = _held_by_others(device, mine)
    compute = max(0, COMPUTE_TOTAL - held_compute)
    memory = max(0, device.capacity.memory_bytes_usable - held_memory)
    if compute < 1 or memory < MEMORY_STEP:
        return f"slices made outside DRA hold it ({compute} % compute, {memory} bytes of memory left)"
    capacity: dict[str, Any] = {"compute": {"value": str(compute)}, "memory": {"value": quantity_bytes(memory)}}
    if compute >= 2:  # a range needs min + step <= value (kubernetes validateRequestPolicyRange)
        capacity["compute"]["requestPolicy"] = {"default": str(compute), "validRange": {"min": "1", "max": str(compute), "step": "1"}}
    top = memory // MEMORY_STEP * MEMORY_STEP  # default and max on the grid min + n * step
    if top >= 2 * MEMORY_STEP:
        step = quantity_bytes(MEMORY_STEP)
        capacity["memory"]["requestPolicy"] = {"default": quantity_bytes(top), "validRange": {
            "min": step, "max": quantity_bytes(top), "step": step}}
    entry = {"name": gpu_device_name(index), "attributes": attributes, "capacity": capacity, "allowMultipleAllocations": True}
    return GpuDevices(index, (entry,))


def _foreign_spans(device: node_pb2.Device, mine: list[slice_pb2.Slice]) -> list[tuple[int, int]]:
    """[start, end) memory slices of the partitions on ``device`` that DRA did not make. A
    partition no slice names is DRA's while a DRA slice on the GPU is still being made (its
    partition may be that one); a partition of unknown size blocks the whole GPU."""
    dra = {item.partition.gpu_instance_id for item in mine if _is_dra(item) and item.HasField("partition")}
    named = {item.partition.gpu_instance_id for item in mine if item.HasField("partition")}
    dra_pending = any(_is_dra(item) and not item.HasField("partition") for item in mine)
    sizes = {profile.profile_id: profile.memory_slices for profile in device.partition_profiles}
    spans = []
    for part in device.partitions:
        if part.gpu_instance_id in dra or (dra_pending and part.gpu_instance_id not in named):
            continue
        size = part.placement_size or sizes.get(part.profile_id, 0)
        spans.append((part.placement_start, part.placement_start + size) if size else (0, device.partition_memory_slices))
    return spans


def _mig_gpu(device: node_pb2.Device, common: dict[str, Any], mine: list[slice_pb2.Slice]) -> GpuDevices | str:
    """Every placement of every profile that no foreign partition overlaps, and the counter set."""
    index, total = device.ref.index, device.partition_memory_slices
    if not device.partition_profiles or not total:
        return "in MIG mode, but the agent reports no partition profiles or memory slices"
    spans = _foreign_spans(device, mine)
    counter_set = counter_set_name(index)
    found: list[Device] = []
    for profile in device.partition_profiles:
        for start in profile.placements:
            end = start + profile.memory_slices
            name = mig_device_name(index, profile.name, profile.profile_id, start)
            if end > total or any(start < high and low < end for low, high in spans) or not _DNS_LABEL.fullmatch(name):
                continue
            attributes = {"type": _string("mig"), "profile": _string(profile.name), "parentUUID": _string(device.ref.uuid),
                          "parentIndex": {"int": index}, **common}
            capacity = {"memory": {"value": quantity_bytes(profile.memory_bytes)},
                        "computeSlices": {"value": str(profile.compute_slices)}}
            counters = {f"memory-slice-{i}": {"value": "1"} for i in range(start, end)}
            found.append({"name": name, "attributes": attributes, "capacity": capacity,
                          "consumesCounters": [{"counterSet": counter_set, "counters": counters}]})
    if not found:
        return GpuDevices(index, ())
    counters = {f"memory-slice-{i}": {"value": "1"} for i in range(total)}
    return GpuDevices(index, tuple(sorted(found, key=lambda entry: entry["name"])), {"name": counter_set, "counters": counters})


def _nic(nic: node_pb2.Nic) -> Device | None:
    name = nic_device_name(nic.name)
    if not nic.name or not _DNS_LABEL.fullmatch(name):
        return None
    attributes: dict[str, Any] = {"type": _string("nic"), "name": _string(nic.name)}
    if nic.rate_gbps:
        attributes["rateGbps"] = {"int": nic.rate_gbps}
    attributes.update(_place_attributes(nic.pci_address, nic))
    return {"name": name, "attributes": attributes}
