"""Health per slice: what a slice's processes use, and the slice's verdict.

Two pure pieces, both read from one moment of the node (the slices topic, the sample, the
attribution, the GPU machine's records):

- ``slice_usage``: the memory a slice's processes hold on its card (bytes) and their share of the
  card's SM time (ratio 0..1). A MIG slice's processes are those NVML lists in its GPU instance
  (``GpuProcess.gpu_instance_id``); NVML gives no per-process SM time inside MIG instances, so a
  MIG slice's share is always unknown (None), idle or busy — its compute is fenced by the hardware
  anyway. A TDM
  slice's processes are its pod owner's on its card (``AttributionSnapshot.pods``: every process
  of the container, not capped like ``processes``); a slice of a free owner (``owner_id``) has no
  processes the agent can tell apart: unknown. Unknown is None, never 0.
- ``step_slices``: the slice machine. A slice's own faults are its isolation findings (the slices
  detector, held and cleared by the fault policy exactly like a GPU's: ``machine.merge_faults``)
  and the faults its MIG instance holds on the GPU's record (``ActiveFault.instance_scoped``, seen
  since the slice was created: a GPU instance id a deleted slice's instance had may be reused). The
  slice's state is the worse of what its own faults give (``machine.state_of``) and its card's
  state; its action is its own faults'. Nothing here is persisted: instance faults live in the
  GPU records (the store persists those) and isolation findings are measured again after a
  restart (the compute window's progress is the detector's state, which the store keeps).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from runtimekit.attribution.types import AttributionSnapshot
from runtimekit.gpu.types import GpuSnapshot, NodeSnapshot, Reading, is_available
from runtimekit.healthcheck.machine import (
    STATE_ORDER,
    GpuRecord,
    MachineInput,
    MachineState,
    merge_faults,
    reason_for,
    state_of,
    strongest_action,
)
from runtimekit.healthcheck.types import HEALTHY, ActiveFault, Finding, SliceHealth
from runtimekit.state.slices import Slice, SliceTable

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class SliceUsage:
    """What a slice's processes use on its card: bytes of memory, ratio 0..1 of its SM time (the
    sum of their nvmlDeviceGetProcessUtilization smUtil, capped at 1); None where unknown (a MIG
    slice's SM time, always)."""

    memory_bytes: int | None
    sm_ratio: float | None
    processes: int


UNKNOWN = SliceUsage(None, None, 0)


def _gpu(snapshot: NodeSnapshot | None, slice_: Slice) -> GpuSnapshot | None:
    if snapshot is None:
        return None
    return next((g for g in snapshot.gpus if g.uuid == slice_.gpu.uuid and not g.lost), None)


def slice_usage(slice_: Slice, snapshot: NodeSnapshot | None, attribution: AttributionSnapshot | None) -> SliceUsage:
    """What ``slice_``'s processes use now (see the module docstring)."""
    gpu = _gpu(snapshot, slice_)
    if gpu is None:
        return UNKNOWN
    if slice_.spec.mode == "mig":
        if slice_.mig is None or any(not is_available(p.gpu_instance_id) for p in gpu.processes):
            return UNKNOWN  # no instance yet, or NVML does not say which instance a process is in
        mine = [p for p in gpu.processes if p.gpu_instance_id == slice_.mig.gpu_instance_id]
        return SliceUsage(_memory([p.used_memory_bytes for p in mine]), None, len(mine))  # no SM time in MIG (module docstring)
    owner = slice_.spec.owner
    if not owner.is_pod or attribution is None:
        return UNKNOWN
    rows = [u for u in attribution.pods if u.gpu_uuid == slice_.gpu.uuid and u.owner.pod_uid == owner.pod_uid
            and (not owner.container or u.owner.container == owner.container)]
    return SliceUsage(_memory([u.used_memory_bytes for u in rows]), _sm_share([u.sm_utilization for u in rows]),
                      sum(u.processes for u in rows))


def _memory(readings: list[Reading[int]]) -> int | None:
    """The bytes the readings sum to; unknown (None) when any one is (a partial sum would under-report)."""
    return sum(r for r in readings if is_available(r)) if all(is_available(r) for r in readings) else None


def _sm_share(readings: list[Reading[float]]) -> float | None:
    """The SM ratios' sum, capped at 1; unknown (None) when any one is."""
    return min(1.0, sum(r for r in readings if is_available(r))) if all(is_available(r) for r in readings) else None


@dataclass(frozen=True, slots=True)
class SliceRecord:
    """What the slice machine remembers of one slice between evaluations (in memory only)."""

    state: str = HEALTHY
    since: float = 0.0
    faults: tuple[ActiveFault, ...] = ()  # the isolation findings held (the slices detector's)


@dataclass(frozen=True, slots=True)
class SliceStep:
    records: Mapping[str, SliceRecord] = field(default_factory=lambda: MappingProxyType({}))
    health: tuple[SliceHealth, ...] = ()
    transitions: tuple[str, ...] = ()  # "slice s-… (GPU 0, instance 3) healthy → unhealthy: reason", for the log


def instance_faults(record: GpuRecord | None, slice_: Slice) -> tuple[ActiveFault, ...]:
    """The faults ``slice_``'s MIG instance holds on its GPU's record, seen since the slice exists."""
    if record is None or slice_.mig is None:
        return ()
    gi = slice_.mig.gpu_instance_id
    return tuple(f for f in record.faults
                 if f.instance_scoped and f.gpu_instance_id == gi and f.last_seen >= slice_.created_at)


def step_slices(
    records: Mapping[str, SliceRecord],
    table: SliceTable,
    findings: Iterable[Finding],
    machine: MachineState,
    data: MachineInput,
    usage: Mapping[str, SliceUsage],
) -> SliceStep:
    """Advance every slice of ``table`` by one evaluation: ``findings`` are the slices detector's
    (``Finding.slice_id``), ``machine`` the GPU machine's state after this evaluation, ``data`` its
    input (time, sampled or not, resets), ``usage`` each slice's ``slice_usage`` (a slice absent:
    unknown). Slices gone from the table are forgotten."""
    by_slice: dict[str, list[Finding]] = {}
    for finding in findings:
        if finding.slice_id is not None:
            by_slice.setdefault(finding.slice_id, []).append(finding)
    kept: dict[str, SliceRecord] = {}
    out: list[SliceHealth] = []
    transitions: list[str] = []
    for slice_id in sorted(table.slices):
        slice_ = table.slices[slice_id]
        previous = records.get(slice_id, SliceRecord(since=data.now))
        card = machine.gpus.get(slice_.gpu.uuid)
        reset = data.boot_id_changed or slice_.gpu.uuid in data.resets
        held, _, gone = merge_faults(previous.faults, by_slice.get(slice_id, ()), data, reset,
                                     data.judges(slice_.gpu.uuid))
        own = (*instance_faults(card, slice_), *held)
        state = max(state_of(own, previous.state), card.state if card is not None and not card.retired else HEALTHY,
                    key=STATE_ORDER.__getitem__)
        since = previous.since
        if state != previous.state:
            since = data.now
            why = reason_for(own, gone, state) or f"its card (GPU {slice_.gpu.index}) is {state}"
            where = f"GPU {slice_.gpu.index}" + (f", instance {slice_.mig.gpu_instance_id}" if slice_.mig else "")
            transitions.append(f"slice {slice_id} ({where}) {previous.state} → {state}: {why}")
        kept[slice_id] = SliceRecord(state, since, held)
        measured = usage.get(slice_id, UNKNOWN)
        out.append(SliceHealth(
            id=slice_id, gpu_index=slice_.gpu.index, gpu_uuid=slice_.gpu.uuid,
            gpu_instance_id=slice_.mig.gpu_instance_id if slice_.mig is not None else None, state=state,
            faults=own, since=since, action=strongest_action(f.action for f in own if f.current),
            memory_used_bytes=measured.memory_bytes, utilization=measured.sm_ratio,
        ))
    return SliceStep(MappingProxyType(kept), tuple(out), tuple(transitions))
