"""Pure joins: NVML's processes and the kubelet's devices with their owners.

No I/O and no clock here: the attributor gathers the inputs, these functions combine them, and
tests drive them with tables.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from runtimekit.attribution.types import (
    HOST,
    AttributedProcess,
    DeviceAllocation,
    Owner,
    PodGpuUsage,
    ProcessFacts,
)
from runtimekit.gpu.types import GpuProcess, GpuSnapshot, NodeSnapshot, Reading, is_available
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
# made of them): the caller's memo between joins (see ``join_processes``).
Memo = dict[tuple[int, int], tuple[GpuProcess, ProcessFacts | None, Reading[str], AttributedProcess]]


def _attributed(
    gpu: GpuSnapshot, facts: Mapping[int, ProcessFacts], previous: Memo, memo: Memo | None
) -> list[AttributedProcess]:
    rows = []
    for process in gpu.processes:
        host = facts.get(process.pid)
        key = (gpu.index, id(process))
        hit = previous.get(key)
        if hit is not None and hit[0] is process and hit[1] is host and hit[2] == gpu.uuid:
            row = hit[3]
        else:
            row = AttributedProcess(
                gpu_index=gpu.index,
                gpu_uuid=gpu.uuid,
                pid=process.pid,
                used_memory_bytes=process.used_memory_bytes,
                sm_utilization=process.sm_utilization,
                memory_utilization=process.memory_utilization,
                encoder_utilization=process.encoder_utilization,
                decoder_utilization=process.decoder_utilization,
                gpu_instance_id=process.gpu_instance_id,
                compute_instance_id=process.compute_instance_id,
                host=host,
                owner=host.owner if host else HOST,
            )
        if memo is not None:
            memo[key] = (process, host, gpu.uuid, row)
        rows.append(row)
    # The biggest memory holders first: they are what the cap keeps.
    rows.sort(key=lambda r: (-(r.used_memory_bytes if is_available(r.used_memory_bytes) else -1), r.pid))
    return rows


def join_processes(
    snapshot: NodeSnapshot, facts: Mapping[int, ProcessFacts], cap_per_gpu: int, memo: Memo | None = None
) -> tuple[tuple[AttributedProcess, ...], tuple[PodGpuUsage, ...], dict[tuple[int, Reading[str]], int]]:
    """Attribute every GPU process; returns (capped process rows, per-container usage, dropped rows per GPU).

    The cap keeps the ``cap_per_gpu`` processes holding the most memory on each GPU; the
    per-container usage is summed over every process, capped or not. ``memo`` (the caller's,
    kept between joins) holds the rows made: a process whose ``GpuProcess`` and ``ProcessFacts``
    are the very objects of the last join (the reader and the attributor keep unchanged ones)
    gets the same row again; it then holds this join's rows only.
    """
    previous = dict(memo) if memo else {}
    if memo is not None:
        memo.clear()
    kept: list[AttributedProcess] = []
    dropped: dict[tuple[int, Reading[str]], int] = {}
    usage: dict[tuple[Owner, int, Reading[int], Reading[int]], list[AttributedProcess]] = defaultdict(list)
    for gpu in snapshot.gpus:
        if gpu.lost:
            continue
        rows = _attributed(gpu, facts, previous, memo)
        kept.extend(rows[:cap_per_gpu])
        if len(rows) > cap_per_gpu:
            dropped[(gpu.index, gpu.uuid)] = len(rows) - cap_per_gpu
        for row in rows:
            if row.owner.known:  # per GPU, and per MIG instance on a GPU in MIG mode
                usage[(row.owner, gpu.index, row.gpu_instance_id, row.compute_instance_id)].append(row)
    pods = []
    for (owner, _, gpu_instance, compute_instance), rows in usage.items():
        memory = [r.used_memory_bytes for r in rows if is_available(r.used_memory_bytes)]
        sm = [r.sm_utilization for r in rows if is_available(r.sm_utilization)]
        pods.append(
            PodGpuUsage(
                owner=owner,
                gpu_index=rows[0].gpu_index,
                gpu_uuid=rows[0].gpu_uuid,
                used_memory_bytes=sum(memory) if memory else rows[0].used_memory_bytes,
                sm_utilization=min(1.0, sum(sm)) if sm else rows[0].sm_utilization,
                processes=len(rows),
                gpu_instance_id=gpu_instance,
                compute_instance_id=compute_instance,
            )
        )
    pods.sort(key=lambda p: (p.owner.namespace, p.owner.pod, p.owner.container, p.gpu_index,
                             _order(p.gpu_instance_id), _order(p.compute_instance_id)))
    return tuple(kept), tuple(pods), dropped


def _order(instance_id: Reading[int]) -> int:
    """A sort key for an instance id: a whole GPU's (not supported) first."""
    return instance_id if is_available(instance_id) else -1
