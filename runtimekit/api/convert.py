"""runtimekit.v1 messages from and to the base's vocabulary (``runtimekit.state``): pure functions,
no I/O. The servicer (``runtimekit.api.servicer``) only calls these.

Units: the state speaks MiB (``Slice.memory_mib``, ``DeviceModeInfo``) and unix seconds; the API
speaks bytes and ``google.protobuf.Timestamp`` (proto/runtimekit/v1/*.proto). Every device the
agent manages today is an NVIDIA GPU read through NVML, so a device's kind and vendor are the
constants below — data in the messages, so that other kinds and vendors need no new message.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from google.protobuf.timestamp_pb2 import Timestamp  # type: ignore[import-untyped]

from runtimekit._proto.runtimekit.v1 import node_pb2, service_pb2, slice_pb2
from runtimekit.attribution.types import AttributionSnapshot
from runtimekit.gpu.refs import gpu_ref
from runtimekit.gpu.types import ARCHITECTURE_NAMES, GpuSnapshot, MigDevice, NodeSnapshot, is_available
from runtimekit.state import NodeView
from runtimekit.state.health import HEALTHY, RECOVERING, SUSPECT, UNHEALTHY, ActiveFault, GpuHealth, NodeHealth, SliceHealth
from runtimekit.state.refs import GpuRef
from runtimekit.state.slices import DeviceModeInfo, Slice, SliceRequest

if TYPE_CHECKING:
    from runtimekit.gpu.mig import MigProfile

MIB = 1 << 20  # bytes in one MiB
DEVICE_KIND = "gpu"
DEVICE_VENDOR = "nvidia"

_SLICE_STATES = {
    "creating": slice_pb2.SLICE_STATE_CREATING,
    "ready": slice_pb2.SLICE_STATE_READY,
    "deleting": slice_pb2.SLICE_STATE_DELETING,
}
_HEALTH_STATES = {
    HEALTHY: node_pb2.HEALTH_STATE_HEALTHY,
    SUSPECT: node_pb2.HEALTH_STATE_SUSPECT,
    UNHEALTHY: node_pb2.HEALTH_STATE_UNHEALTHY,
    RECOVERING: node_pb2.HEALTH_STATE_RECOVERING,
}


def timestamp(unix_seconds: float) -> Timestamp:
    """A Timestamp of ``unix_seconds`` (nanosecond precision)."""
    stamp = Timestamp()
    stamp.FromNanoseconds(round(unix_seconds * 1e9))
    return stamp


def slice_request(message: service_pb2.CreateSliceRequest) -> SliceRequest:
    """CreateSliceRequest -> the raw SliceRequest the slicer validates (field for field; an absent
    placement_start is None)."""
    return SliceRequest(
        mode=message.mode,
        memory=message.memory,
        compute=message.compute,
        device=message.device,
        pod_uid=message.pod_uid,
        container=message.container,
        owner_id=message.owner_id,
        priority=message.priority,
        profile=message.profile,
        placement_start=message.placement_start if message.HasField("placement_start") else None,
    )


def gpu_refs(snapshot: NodeSnapshot | None) -> dict[int, GpuRef]:
    """The sampled GPUs' refs by index (their PCI addresses for ``DeviceRef``); {} before a sample."""
    return {gpu.index: gpu_ref(gpu) for gpu in snapshot.gpus} if snapshot is not None else {}


def _health_ref(refs: dict[int, GpuRef], index: int, uuid: str) -> slice_pb2.DeviceRef:
    """The DeviceRef of a verdict's GPU: its sampled ref, else one from the verdict's index and UUID."""
    return device_ref(refs.get(index, GpuRef(uuid, index)))


def device_ref(gpu: GpuRef) -> slice_pb2.DeviceRef:
    return slice_pb2.DeviceRef(
        kind=DEVICE_KIND, vendor=DEVICE_VENDOR, uuid=gpu.uuid, index=gpu.index,
        pci_address=str(gpu.pci) if gpu.pci is not None else "",
    )


def slice_message(item: Slice) -> slice_pb2.Slice:
    """A Slice of the slice table -> its message (MiB -> bytes; unix seconds -> Timestamp)."""
    spec = item.spec
    message = slice_pb2.Slice(
        id=item.id,
        mode=spec.mode,
        state=_SLICE_STATES.get(item.state, slice_pb2.SLICE_STATE_UNSPECIFIED),
        device=device_ref(item.gpu),
        profile=item.profile,
        compute_percent=item.compute,
        memory_bytes=item.memory_mib * MIB,
        requested_compute_percent=spec.compute,
        requested_memory_bytes=spec.memory_mib * MIB,
        requested_device=str(spec.device),
        owner=slice_pb2.Owner(pod_uid=spec.owner.pod_uid, container=spec.owner.container, owner_id=spec.owner.owner_id),
        priority=spec.priority,
        cdi_device=item.cdi_device,
        created_at=timestamp(item.created_at),
        reason=item.reason,
    )
    if item.mig is not None:
        start, size = item.placement or (0, 0)
        message.partition.CopyFrom(slice_pb2.Partition(
            gpu_instance_id=item.mig.gpu_instance_id, compute_instance_id=item.mig.compute_instance_id,
            uuid=item.mig.uuid, profile_id=item.profile_id or 0, placement_start=start, placement_size=size,
            profile=item.profile,
        ))
    return message


def slice_messages(slices: Iterable[Slice]) -> list[slice_pb2.Slice]:
    """Slices in id order (a stable order for lists and watches)."""
    return [slice_message(item) for item in sorted(slices, key=lambda item: item.id)]


def fault_message(fault: ActiveFault) -> node_pb2.Fault:
    return node_pb2.Fault(
        fault=fault.fault, severity=fault.severity, action=fault.action, evidence=fault.evidence, clears=fault.clears,
        first_seen=timestamp(fault.first_seen), last_seen=timestamp(fault.last_seen), fault_class=fault.fault_class,
        partition_gpu_instance_id=fault.gpu_instance_id,  # None leaves the optional field absent
    )


def device_health(health: GpuHealth) -> node_pb2.DeviceHealth:
    return node_pb2.DeviceHealth(
        state=_HEALTH_STATES.get(health.state, node_pb2.HEALTH_STATE_UNSPECIFIED),
        schedulable=health.schedulable,
        action=health.action,
        since=timestamp(health.since),
        faults=[fault_message(fault) for fault in health.faults],
        partition_faults=[fault_message(fault) for fault in health.instance_faults],
    )


def slice_health(health: SliceHealth, refs: dict[int, GpuRef]) -> node_pb2.SliceHealth:
    return node_pb2.SliceHealth(
        slice_id=health.id,
        ref=_health_ref(refs, health.gpu_index, health.gpu_uuid),
        partition_gpu_instance_id=health.gpu_instance_id,  # None leaves the optional field absent
        state=_HEALTH_STATES.get(health.state, node_pb2.HEALTH_STATE_UNSPECIFIED),
        action=health.action,
        since=timestamp(health.since),
        faults=[fault_message(fault) for fault in health.faults],
        memory_used_bytes=health.memory_used_bytes,
        utilization=health.utilization,
    )


def node_health(health: NodeHealth | None, refs: dict[int, GpuRef]) -> node_pb2.NodeHealth:
    """The node's verdict; an empty NodeHealth (state UNSPECIFIED) before the first one.
    ``refs``: the sampled GPUs by index, for their PCI addresses."""
    if health is None:
        return node_pb2.NodeHealth()
    return node_pb2.NodeHealth(
        state=_HEALTH_STATES.get(health.state, node_pb2.HEALTH_STATE_UNSPECIFIED),
        action=health.action,
        evaluated_at=timestamp(health.evaluated_at),
        faults=[fault_message(fault) for fault in health.faults],
        devices=[
            node_pb2.DeviceHealthEntry(ref=_health_ref(refs, gpu.index, gpu.uuid), health=device_health(gpu))
            for gpu in sorted(health.gpus, key=lambda gpu: gpu.index)
        ],
        slices=[slice_health(item, refs) for item in sorted(health.slices, key=lambda item: item.id)],
    )


def partition_message(mig: MigDevice) -> slice_pb2.Partition:
    """A partition that exists on a device now (a sampled MIG device); placement_size stays 0
    (the sample does not carry it)."""
    return slice_pb2.Partition(
        gpu_instance_id=mig.gpu_instance_id, compute_instance_id=mig.compute_instance_id, uuid=mig.uuid,
        profile_id=mig.profile_id if is_available(mig.profile_id) else 0,
        placement_start=mig.placement_start if is_available(mig.placement_start) else 0,
        profile=mig.profile if is_available(mig.profile) else "",
    )


def profile_message(profile: MigProfile) -> slice_pb2.PartitionProfile:
    """A partition profile the device offers (MiB -> bytes; placements ascending)."""
    return slice_pb2.PartitionProfile(
        profile_id=profile.id, name=profile.name, compute_slices=profile.compute_slices,
        memory_slices=profile.memory_slices, memory_bytes=profile.memory_mib * MIB, placements=sorted(profile.placements),
    )


def pods_holding(attribution: AttributionSnapshot | None) -> dict[str, list[str]]:
    """The pods the kubelet allocated each GPU to whole or as a time-slicing replica
    (``AttributionSnapshot.held_whole``), "namespace/name" sorted and each once, by GPU UUID; {}
    while unknown (no attribution, or its kubelet source down)."""
    held = attribution.held_whole() if attribution is not None else {}
    return {uuid: sorted({f"{owner.namespace}/{owner.pod}" for owner in owners}) for uuid, owners in held.items()}


def device_message(
    ref: GpuRef, gpu: GpuSnapshot | None, info: DeviceModeInfo | None, health: GpuHealth | None,
    held_by: Iterable[str] = (),
) -> node_pb2.Device:
    """One device: its sample (``gpu``, None if not sampled), its slicing (``info``, None when the
    slicer is disabled: no partition profiles then), its health (None before a verdict) and the
    pods the kubelet allocated it to (``held_by``: ``pods_holding``'s entry for it).
    ``architecture`` is the sample's when it is one of ``ARCHITECTURE_NAMES``, else ""."""
    message = node_pb2.Device(ref=device_ref(ref), held_by_pods=held_by)
    if gpu is not None:
        message.lost = gpu.lost
        if is_available(gpu.identity.name):
            message.model = gpu.identity.name
        if is_available(gpu.identity.architecture) and gpu.identity.architecture in ARCHITECTURE_NAMES:
            message.architecture = gpu.identity.architecture
        if is_available(gpu.limits.memory_total_bytes):
            message.memory_bytes = gpu.limits.memory_total_bytes
        message.partitions.extend(partition_message(mig) for mig in sorted(
            gpu.mig_devices, key=lambda mig: (mig.gpu_instance_id, mig.compute_instance_id)))
    if info is not None:
        message.mode = info.mode
        message.pending_mode = info.pending or ""
        message.partition_capable = info.mig_capable
        message.slice_ids.extend(info.slices)
        message.capacity.CopyFrom(node_pb2.Capacity(
            compute_percent_total=100, compute_percent_free=info.compute_free, memory_bytes_total=info.memory_mib * MIB,
            memory_bytes_usable=info.usable_memory_mib * MIB, memory_bytes_free=info.memory_free_mib * MIB,
        ))
        if not message.memory_bytes:
            message.memory_bytes = info.memory_mib * MIB
        if info.mig_capable:
            message.partition_profiles.extend(profile_message(p) for p in sorted(info.profiles, key=lambda p: p.id))
            message.partition_memory_slices = info.memory_slices
            message.partition_compute_slices = info.compute_slices
    if health is not None:
        message.health.CopyFrom(device_health(health))
    return message


def node_message(view: NodeView, slicer_enabled: bool) -> node_pb2.Node:
    """The node from one view: sampled devices by index, their slicing, health and the pods holding
    them, the verdict."""
    snapshot = view.snapshot
    gpus = {gpu.index: gpu for gpu in snapshot.gpus} if snapshot is not None else {}
    refs = gpu_refs(snapshot)
    health = {gpu.index: gpu for gpu in view.health.gpus} if view.health is not None else {}
    held = pods_holding(view.attribution)
    node = node_pb2.Node(slicer_enabled=slicer_enabled, health=node_health(view.health, refs))
    for index in sorted(gpus):
        node.devices.append(device_message(refs[index], gpus[index], view.slices.devices.get(index), health.get(index),
                                           held.get(refs[index].uuid, ())))
    if snapshot is not None:
        node.sampled_at.CopyFrom(timestamp(snapshot.sampled_at))
        if snapshot.driver is not None and is_available(snapshot.driver.driver_version):
            node.driver_version = snapshot.driver.driver_version
    return node


def mode_device(view: NodeView, info: DeviceModeInfo) -> node_pb2.Device:
    """The device SetDeviceMode changed: ``info`` (the slicer's answer) with the device's sample,
    health and the pods holding it from ``view``."""
    index = info.gpu.index
    gpu = next((gpu for gpu in view.snapshot.gpus if gpu.index == index), None) if view.snapshot is not None else None
    health = next((h for h in view.health.gpus if h.index == index), None) if view.health is not None else None
    return device_message(info.gpu, gpu, info, health, pods_holding(view.attribution).get(info.gpu.uuid, ()))
