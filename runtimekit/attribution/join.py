"""Pure joins: NVML's processes and the kubelet's devices with their owners.

No I/O and no clock here: the attributor gathers the inputs, these functions combine them, and
tests drive them with tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from runtimekit.attribution.types import (
    HOST,
    AttributedProcess,
    DeviceAllocation,
    Owner,
    PodGpuUsage,
    ProcessFacts,
)
from runtimekit.gpu.types import GpuProcess, GpuSnapshot, NodeSnapshot, Reading, Unavailable, is_available
from runtimekit.state.refs import parse_device_id


def resolve_allocations(
    rows: Iterable[tuple[Owner, str, str]], snapshot: NodeSnapshot | None
) -> tuple[DeviceAllocation, ...]:
    """(owner, resource name, device id) rows -> allocations with the GPU index where known; a MIG
    device id is attributed to its parent GPU and instance through the snapshot's MIG devices."""
    gpus = snapshot.gpus if snapshot else ()
    index_of = {gpu.uuid: gpu.index for gpu in gpus if is_available(gpu.uuid)}
    mig_of = {device.uuid: device.ref for gpu in gpus for device in gpu.mig_devices}
    allocations = []
    for owner, resource_name, device_id in rows:
        parsed = parse_device_id(device_id)  # None: not a GPU id we know
        mig = mig_of.get(parsed.uuid) if parsed is not None and parsed.kind == "mig" else None
        uuid = mig.parent.uuid if mig is not None else (parsed.gpu_uuid if parsed is not None else None)
        index = index_of.get(uuid) if uuid is not None else None
        allocations.append(DeviceAllocation(owner, resource_name, device_id, uuid, index, mig))
    return tuple(sorted(allocations, key=lambda a: (a.owner.namespace, a.owner.pod, a.owner.container, a.device_id)))


# (GPU index, id of the GpuProcess) -> (that GpuProcess, its ProcessFacts, the GPU's UUID, the row
# made of them).
_Rows = dict[tuple[int, int], tuple[GpuProcess, ProcessFacts | None, Reading[str], AttributedProcess]]


class Memo:
    """The caller's memo between joins (see ``join_processes``): the rows made at the last join,
    and per GPU what was made of its rows (their order by memory, its per-container usage)."""

    __slots__ = ("rows", "gpus", "pods")

    def __init__(self) -> None:
        self.rows: _Rows = {}
        # GPU index -> (its rows in listing order, the same by memory, its per-container usage)
        self.gpus: dict[int, tuple[list[AttributedProcess], list[AttributedProcess], list[PodGpuUsage]]] = {}
        self.pods: tuple[list[list[PodGpuUsage]], tuple[PodGpuUsage, ...]] = ([], ())  # per GPU -> all, sorted


def _attributed(gpu: GpuSnapshot, facts: Mapping[int, ProcessFacts], previous: _Rows, made: _Rows) -> list[AttributedProcess]:
    """The GPU's rows in NVML's listing order; the last join's row again for the very same process
    object, facts and GPU UUID."""
    rows = []
    index, uuid = gpu.index, gpu.uuid
    for process in gpu.processes:
        host = facts.get(process.pid)
        key = (index, id(process))
        hit = previous.get(key)
        if hit is not None and hit[0] is process and hit[1] is host and hit[2] == uuid:
            row = hit[3]
        else:
            row = AttributedProcess(
                index, uuid, process.pid, process.used_memory_bytes, process.sm_utilization,
                process.memory_utilization, process.encoder_utilization, process.decoder_utilization,
                process.gpu_instance_id, process.compute_instance_id, host, host.owner if host else HOST,
            )
        made[key] = (process, host, uuid, row)
        rows.append(row)
    return rows


def _by_memory(row: AttributedProcess) -> tuple[int, int]:
    """The biggest memory holders first (they are what the cap keeps), then by pid."""
    used = row.used_memory_bytes
    return (-(used if type(used) is int else -1), row.pid)


def _usage(gpu: GpuSnapshot, rows: list[AttributedProcess]) -> list[PodGpuUsage]:
    """Per container (and per MIG instance on a GPU in MIG mode): its processes' memory and SM
    ratios summed. Owners are grouped by their fields, and instance ids by their number (-1 when
    not supported): an Owner's or Unavailable's own hash runs in Python, and this runs for every
    GPU whose processes changed, every sample."""
    groups: dict[tuple[object, ...], list[AttributedProcess]] = {}
    for row in rows:
        owner = row.owner
        if owner.pod:  # Owner.known
            gi, ci = row.gpu_instance_id, row.compute_instance_id
            key = (owner.namespace, owner.pod, owner.container, owner.pod_uid, owner.container_id,
                   gi if type(gi) is int else -1, ci if type(ci) is int else -1)
            members = groups.get(key)
            if members is None:
                groups[key] = [row]
            else:
                members.append(row)
    pods = []
    for members in groups.values():
        first = members[0]
        memory = [used for r in members if not isinstance(used := r.used_memory_bytes, Unavailable)]
        sm = [ratio for r in members if not isinstance(ratio := r.sm_utilization, Unavailable)]
        pods.append(
            PodGpuUsage(
                owner=first.owner,
                gpu_index=gpu.index,
                gpu_uuid=first.gpu_uuid,
                used_memory_bytes=sum(memory) if memory else first.used_memory_bytes,
                sm_utilization=min(1.0, sum(sm)) if sm else first.sm_utilization,
                processes=len(members),
                gpu_instance_id=first.gpu_instance_id,
                compute_instance_id=first.compute_instance_id,
            )
        )
    return pods


def join_processes(
    snapshot: NodeSnapshot, facts: Mapping[int, ProcessFacts], cap_per_gpu: int, memo: Memo | None = None
) -> tuple[tuple[AttributedProcess, ...], tuple[PodGpuUsage, ...], dict[tuple[int, Reading[str]], int]]:
    """Attribute every GPU process; returns (capped process rows, per-container usage, dropped rows per GPU).

    The cap keeps the ``cap_per_gpu`` processes holding the most memory on each GPU; the
    per-container usage is summed over every process, capped or not. ``memo`` (the caller's,
    kept between joins) holds what was made: a process whose ``GpuProcess`` and ``ProcessFacts``
    are the very objects of the last join (the reader and the attributor keep unchanged ones)
    gets the same row again, and a GPU whose rows are all the same as then gets the same order
    and usage (the usual case: most processes' readings do not change from one second to the
    next); it then holds this join's only.
    """
    memo = memo if memo is not None else Memo()
    previous_gpus, previous_pods = memo.gpus, memo.pods
    made: _Rows = {}
    gpus: dict[int, tuple[list[AttributedProcess], list[AttributedProcess], list[PodGpuUsage]]] = {}
    kept: list[AttributedProcess] = []
    dropped: dict[tuple[int, Reading[str]], int] = {}
    usage_per_gpu: list[list[PodGpuUsage]] = []
    for gpu in snapshot.gpus:
        if gpu.lost:
            continue
        rows = _attributed(gpu, facts, memo.rows, made)
        cached = previous_gpus.get(gpu.index)
        if cached is not None and cached[0] == rows:  # the same row objects, in the same order
            ordered, usage = cached[1], cached[2]
        else:
            ordered, usage = sorted(rows, key=_by_memory), _usage(gpu, rows)
        gpus[gpu.index] = (rows, ordered, usage)
        kept.extend(ordered[:cap_per_gpu])
        if len(ordered) > cap_per_gpu:
            dropped[(gpu.index, gpu.uuid)] = len(ordered) - cap_per_gpu
        usage_per_gpu.append(usage)
    if len(usage_per_gpu) == len(previous_pods[0]) and all(
            a is b for a, b in zip(usage_per_gpu, previous_pods[0], strict=True)):
        pods = previous_pods[1]
    else:
        pods = tuple(sorted((p for usage in usage_per_gpu for p in usage), key=lambda p: (
            p.owner.namespace, p.owner.pod, p.owner.container, p.gpu_index,
            _order(p.gpu_instance_id), _order(p.compute_instance_id))))
    memo.rows, memo.gpus, memo.pods = made, gpus, (usage_per_gpu, pods)
    return tuple(kept), pods, dropped


def _order(instance_id: Reading[int]) -> int:
    """A sort key for an instance id: a whole GPU's (not supported) first."""
    return instance_id if is_available(instance_id) else -1
