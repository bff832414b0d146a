"""What preparing a claim means, device by device: pure, from the claim and the agent's node.

For every allocation result of this driver (results of other drivers are skipped), in order:

- ``gpu-N`` with a SliceConfig: a TDM share, CreateSlice(mode "tdm", device N, compute, memory).
  A value the SliceConfig leaves out comes from the result's ``consumedCapacity`` (``compute``,
  ``memory``; memory rounded down to the agent's 128 MiB granule); a SliceConfig asking more than
  consumedCapacity is an error; memory is required in the end, compute 0 means unlimited.
- ``gpu-N`` without one: the whole GPU, no slice; its CDI id is ``<whole_gpu_cdi_kind>=<uuid>``.
  Refused when the agent holds slices on it that no DRA driver made (``names.parse_owner_id``)
  or that other claims hold, when another prepared claim holds it whole, and when consumedCapacity
  shows only a part of it (a part is a TDM share: it needs a SliceConfig).
- ``gpu-N-mig-<profile>-<profile id>-<start>``: CreateSlice(mode "mig", device N, the profile's
  name as GetNode lists it, placement_start); SliceConfig compute / memory, if given, must fit it.
- ``nic-<name>``: no slice; the driver's own per-claim CDI spec carries its device nodes. Refused
  while another prepared claim holds it: a NIC goes whole to one claim at a time.

Every refusal is a ``ClaimError`` naming the claim, the request, the device, the field and the rule.
Device names come from ``names`` (the publisher's names, parsed back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runtimekit._proto.runtimekit.v1 import node_pb2, slice_pb2

from .claims import AllocatedClaim, ClaimError, ClaimRef, Result, config_for
from .names import compact_profile, nic_device_name, parse_device_name, parse_owner_id
from .sliceconfig import SliceConfig, SliceConfigError, bytes_to_mib_floor, parse_quantity, parse_slice_config

__all__ = ["Planned", "plan_claim"]


@dataclass(frozen=True, slots=True)
class Planned:
    """One device of a claim to prepare. ``kind``: "tdm" or "mig" (a slice to make), "gpu" (a
    whole GPU) or "nic". ``cdi_ids`` is known up front for "gpu"; "nic"'s is the claim's spec's."""

    result: Result
    kind: str
    gpu_index: int | None = None
    gpu_uuid: str = ""
    compute: int = 0  # percent; 0 = unlimited (tdm) or what the profile gives (mig)
    memory_mib: int = 0  # tdm: required; mig: 0 = what the profile gives
    profile: str = ""  # mig: the profile's name as the agent lists it ("1g.10gb")
    placement_start: int | None = None
    nic: str = ""  # the NIC's kernel name ("mlx5_0")
    device_nodes: tuple[str, ...] = ()
    cdi_ids: tuple[str, ...] = ()

    @property
    def makes_slice(self) -> bool:
        return self.kind in ("tdm", "mig")


def _where(ref: ClaimRef, result: Result) -> str:
    return f"{ref}: request {result.request}, device {result.device}"


def _slice_config(ref: ClaimRef, claim: AllocatedClaim, result: Result, driver: str) -> SliceConfig | None:
    found = config_for(claim, result, driver)
    if found is None:
        return None
    index, entry = found
    try:
        return parse_slice_config(entry.parameters)
    except SliceConfigError as error:
        raise ClaimError(f"{_where(ref, result)}: status.allocation.devices.config[{index}] ({entry.source}) "
                         f"opaque {error}") from None


def _consumed(ref: ClaimRef, result: Result, name: str) -> int | None:
    """consumedCapacity[name] rounded down to a whole number; None when absent."""
    if name not in result.consumed:
        return None
    value = parse_quantity(result.consumed[name])
    if value is None or value < 0:
        raise ClaimError(f"{_where(ref, result)}: consumedCapacity.{name}: must be a quantity, got {result.consumed[name]!r}")
    return int(value)


def _device(ref: ClaimRef, result: Result, node: node_pb2.Node, index: int, *modes: str) -> node_pb2.Device:
    """GPU ``index`` of ``node``, present and in one of ``modes`` ("" is no mode: the slicer is off)."""
    device = next((d for d in node.devices if d.ref.index == index), None)
    if device is None:
        raise ClaimError(f"{_where(ref, result)}: the node has no GPU {index}")
    if device.lost:
        raise ClaimError(f"{_where(ref, result)}: GPU {index} is lost (the driver no longer answers)")
    if device.mode not in modes:
        raise ClaimError(f"{_where(ref, result)}: GPU {index} is in mode {device.mode or 'none'!r}, "
                         f"the device needs {' or '.join(repr(m or 'none') for m in modes)}")
    return device


def _tdm(ref: ClaimRef, result: Result, device: node_pb2.Device, config: SliceConfig) -> Planned:
    consumed_compute = _consumed(ref, result, "compute")
    consumed_memory = _consumed(ref, result, "memory")
    compute = config.compute if config.compute is not None else (consumed_compute or 0)
    if config.compute is not None and consumed_compute is not None and config.compute > consumed_compute:
        raise ClaimError(f"{_where(ref, result)}: SliceConfig compute: must be at most the allocated "
                         f"consumedCapacity.compute ({consumed_compute}), got {config.compute}")
    if config.memory_mib is not None:
        memory_mib = config.memory_mib
        if consumed_memory is not None and memory_mib * (1 << 20) > consumed_memory:
            raise ClaimError(f"{_where(ref, result)}: SliceConfig memory: must be at most the allocated "
                             f"consumedCapacity.memory ({consumed_memory} bytes), got {memory_mib}MiB")
    elif consumed_memory is not None:
        memory_mib = bytes_to_mib_floor(consumed_memory)
        if memory_mib <= 0:
            raise ClaimError(f"{_where(ref, result)}: consumedCapacity.memory: must be at least 128 MiB for a "
                             f"TDM share, got {consumed_memory} bytes")
    else:
        raise ClaimError(f"{_where(ref, result)}: SliceConfig memory: required for a TDM share when the "
                         "allocation carries no consumedCapacity.memory")
    return Planned(result, "tdm", device.ref.index, device.ref.uuid, compute=compute, memory_mib=memory_mib)


def _whole(ref: ClaimRef, result: Result, device: node_pb2.Device, slices: Sequence[slice_pb2.Slice],
           cdi_kind: str) -> Planned:
    on_it = [s for s in slices if s.device.index == device.ref.index]
    foreign = sorted(s.id for s in on_it if parse_owner_id(s.owner.owner_id) is None)
    if foreign:
        raise ClaimError(f"{_where(ref, result)}: a whole GPU needs GPU {device.ref.index} free, but the agent "
                         f"holds slices on it that are not this driver's: {', '.join(foreign)}")
    others = sorted({owner.uid for s in on_it if (owner := parse_owner_id(s.owner.owner_id)) and owner.uid != ref.uid})
    if others and not result.admin_access:
        raise ClaimError(f"{_where(ref, result)}: a whole GPU needs GPU {device.ref.index} free, but claims "
                         f"{', '.join(others)} hold shares of it (allocated twice?)")
    compute = _consumed(ref, result, "compute")
    if compute is not None and compute < 100:
        raise ClaimError(f"{_where(ref, result)}: consumedCapacity.compute is {compute}, a part of the GPU: "
                         "a part is a TDM share and needs a SliceConfig (the tdm.runtimekit.io class)")
    return Planned(result, "gpu", device.ref.index, device.ref.uuid, cdi_ids=(f"{cdi_kind}={device.ref.uuid}",))


def _mig(ref: ClaimRef, result: Result, device: node_pb2.Device, profile: str, profile_id: int, start: int,
         config: SliceConfig | None) -> Planned:
    found = next((p for p in device.partition_profiles if p.profile_id == profile_id and compact_profile(p.name) == profile), None)
    if found is None:
        raise ClaimError(f"{_where(ref, result)}: GPU {device.ref.index} offers no MIG profile {profile} with id {profile_id}")
    if start not in found.placements:
        raise ClaimError(f"{_where(ref, result)}: placement {start} is none of profile {found.name}'s "
                         f"({', '.join(map(str, found.placements))})")
    compute = memory_mib = 0
    if config is not None:
        total = device.partition_compute_slices or 1
        most = found.compute_slices * 100 // total
        if config.compute is not None and config.compute > most:
            raise ClaimError(f"{_where(ref, result)}: SliceConfig compute: must fit profile {found.name} "
                             f"(at most {most} %), got {config.compute}")
        if config.memory_mib is not None and config.memory_mib * (1 << 20) > found.memory_bytes:
            raise ClaimError(f"{_where(ref, result)}: SliceConfig memory: must fit profile {found.name} "
                             f"({found.memory_bytes >> 20} MiB), got {config.memory_mib}MiB")
        compute, memory_mib = config.compute or 0, config.memory_mib or 0
    return Planned(result, "mig", device.ref.index, device.ref.uuid, compute=compute, memory_mib=memory_mib,
                   profile=found.name, placement_start=start)


def plan_claim(ref: ClaimRef, claim: AllocatedClaim, *, driver: str, pool: str, node: node_pb2.Node,
               topology: node_pb2.Topology | None, slices: Sequence[slice_pb2.Slice], whole_gpu_cdi_kind: str,
               held: Mapping[str, str] | None = None) -> list[Planned]:
    """Every device of ``driver`` in the claim, planned; ClaimError at the first that cannot be
    (nothing is made before the whole claim is planned). ``topology`` is needed only for NICs;
    ``held``: device name -> the other prepared claim that holds it alone, a whole GPU (``gpu-N``)
    or a NIC (the driver is the last line of defence against a device allocated twice: a result with
    adminAccess is let through)."""
    planned: list[Planned] = []
    for result in claim.results:
        if result.driver != driver:
            continue
        if result.pool != pool:
            raise ClaimError(f"{_where(ref, result)}: pool {result.pool} is not this node's ({pool})")
        name = parse_device_name(result.device)
        if name is None:
            raise ClaimError(f"{_where(ref, result)}: not a device this driver publishes")
        config = None if name.kind == "nic" else _slice_config(ref, claim, result, driver)  # a NIC takes none
        if name.kind == "gpu":
            assert name.gpu_index is not None
            # A whole GPU takes a card in tdm mode, or one with no mode at all when the agent's
            # slicer is off (the publisher then publishes every GPU whole); a share needs tdm.
            device = _device(ref, result, node, name.gpu_index, *(("tdm",) if config is not None else ("tdm", "")))
            holder = (held or {}).get(result.device)
            if holder is not None and not result.admin_access:
                raise ClaimError(f"{_where(ref, result)}: GPU {name.gpu_index} is prepared whole for {holder} "
                                 "(allocated twice?)")
            planned.append(_tdm(ref, result, device, config) if config is not None
                           else _whole(ref, result, device, slices, whole_gpu_cdi_kind))
        elif name.kind == "mig":
            assert name.gpu_index is not None and name.profile_id is not None and name.start is not None
            device = _device(ref, result, node, name.gpu_index, "mig")
            planned.append(_mig(ref, result, device, name.profile, name.profile_id, name.start, config))
        else:
            nics = topology.nics if topology is not None else ()
            nic = next((n for n in nics if nic_device_name(n.name) == result.device), None)
            if nic is None:
                raise ClaimError(f"{_where(ref, result)}: the node has no RDMA NIC of that name")
            holder = (held or {}).get(result.device)
            if holder is not None and not result.admin_access:
                raise ClaimError(f"{_where(ref, result)}: NIC {nic.name} is prepared for {holder} (allocated twice?)")
            planned.append(Planned(result, "nic", nic=nic.name, device_nodes=tuple(nic.device_nodes)))
    return planned
