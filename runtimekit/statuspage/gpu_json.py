"""The GPUs and slices of ``GET /api/v1/node``: one entry per GPU of the latest sample, joined with
its health verdict, its processes and pods (attribution) and its slices; one entry per slice.

Units: bytes, watts, degrees Celsius, ratios 0..1 (utilization), percent of one card (a slice's
compute), unix seconds. A reading the device could not give (``runtimekit.gpu.types.Unavailable``)
is null, never 0. Pure: plain state in, plain JSON-ready data out.
"""

from __future__ import annotations

from typing import Any, TypeVar

from runtimekit.attribution.types import AttributedProcess, AttributionSnapshot, Owner
from runtimekit.gpu.types import GpuSnapshot, Reading, is_available
from runtimekit.state.health import ActiveFault, GpuHealth, NodeHealth, SliceHealth
from runtimekit.state.slices import DeviceModeInfo, Slice, SliceTable

T = TypeVar("T")
MiB = 1 << 20
#: The processes listed per GPU, most GPU memory first (``processes_total`` counts them all: every
#: process NVML lists on the GPU, not only the attributor's rows, which it caps per GPU).
MAX_PROCESSES_PER_GPU = 8


def value(reading: Reading[T] | None) -> T | None:
    """A reading, or None where the device could not give it (or the section was not read)."""
    return reading if reading is not None and is_available(reading) else None


def render_fault(fault: ActiveFault) -> dict[str, Any]:
    return {"fault": fault.fault, "severity": fault.severity, "action": fault.action,
            "evidence": fault.evidence, "clearing": not fault.current}


def render_gpu_health(health: GpuHealth | None) -> dict[str, Any] | None:
    """The GPU's verdict (``/api/v1/health`` has the full one); None before the first evaluation."""
    if health is None:
        return None
    return {"state": health.state, "since_unix": health.since, "schedulable": health.schedulable,
            "action": health.action, "faults": [render_fault(f) for f in health.faults],
            "instance_faults": [render_fault(f) for f in health.instance_faults]}


def owner_name(owner: Owner) -> str | None:
    """"namespace/pod/container", or None for a process outside any known container."""
    return f"{owner.namespace}/{owner.pod}/{owner.container}" if owner.known else None


def _attributed(process: AttributedProcess) -> dict[str, Any]:
    return {"pid": process.pid, "name": process.host.name if process.host is not None else None,
            "used_memory_bytes": value(process.used_memory_bytes),
            "sm_utilization": value(process.sm_utilization), "container": owner_name(process.owner)}


def render_processes(gpu: GpuSnapshot, attribution: AttributionSnapshot | None) -> list[dict[str, Any]]:
    """The processes on the GPU, most memory first: attribution's rows (name, container; at most
    ``attribution.max_processes_per_gpu``) when it has this GPU, else NVML's alone (pid and memory)."""
    found = [_attributed(p) for p in attribution.processes if p.gpu_index == gpu.index] if attribution else []
    if not found:
        found = [{"pid": p.pid, "name": None, "used_memory_bytes": value(p.used_memory_bytes),
                  "sm_utilization": value(p.sm_utilization), "container": None} for p in gpu.processes]
    return sorted(found, key=lambda p: (-(p["used_memory_bytes"] or 0), p["pid"]))


def render_pods(index: int, attribution: AttributionSnapshot | None) -> list[dict[str, Any]]:
    """The containers on the GPU: those the kubelet allocated it to, and those with a process on it."""
    if attribution is None:
        return []
    found: dict[tuple[str, str, str], set[str]] = {}
    owners = [(a.owner, "allocation") for a in attribution.allocations if a.gpu_index == index]
    owners += [(p.owner, "process") for p in attribution.processes if p.gpu_index == index]
    for owner, via in owners:
        if owner.known:
            found.setdefault((owner.namespace, owner.pod, owner.container), set()).add(via)
    return [{"namespace": ns, "pod": pod, "container": container, "via": sorted(via)}
            for (ns, pod, container), via in sorted(found.items())]


def render_device_mode(device: DeviceModeInfo | None) -> dict[str, Any] | None:
    """The card as the slicer sees it: its mode and what is left for new slices; None without a slicer."""
    if device is None:
        return None
    return {"mode": device.mode, "pending_mode": device.pending,
            "compute_free_percent": device.compute_free, "memory_free_bytes": device.memory_free_mib * MiB,
            "usable_memory_bytes": device.usable_memory_mib * MiB}


def render_gpu(gpu: GpuSnapshot, health: GpuHealth | None, attribution: AttributionSnapshot | None,
               slices: SliceTable) -> dict[str, Any]:
    """One GPU card of the page."""
    memory, power, thermal = gpu.memory, gpu.power, gpu.thermal
    processes = render_processes(gpu, attribution)
    return {
        "index": gpu.index,
        "uuid": value(gpu.identity.uuid),
        "name": value(gpu.identity.name),
        "pci": value(gpu.identity.pci_bus_id),
        "lost": gpu.lost,
        "mig_enabled": gpu.mig_enabled,
        "health": render_gpu_health(health),
        "utilization": value(gpu.utilization.gpu) if gpu.utilization else None,
        "memory_total_bytes": value(gpu.memory_total_bytes),
        "memory_used_bytes": value(memory.used_bytes) if memory else None,
        "temperature_celsius": value(thermal.gpu_celsius) if thermal else None,
        "power_watts": value(power.draw_watts) if power else None,
        "power_limit_watts": value(power.limit_watts) if power else None,
        "slicer": render_device_mode(slices.devices.get(gpu.index)),
        "slices": sorted(s.id for s in slices.on_gpu(gpu.index)),
        "processes": processes[:MAX_PROCESSES_PER_GPU],
        "processes_total": len(gpu.processes),
        "pods": render_pods(gpu.index, attribution),
    }


def render_slice(slice_: Slice, health: SliceHealth | None) -> dict[str, Any]:
    """A slice: its quota (``compute_percent``, ``memory_bytes``) against its use
    (``used_memory_bytes``, ``utilization`` of the card's SM time; null where unmeasured)."""
    return {
        "id": slice_.id,
        "gpu": slice_.gpu.index,
        "mode": slice_.spec.mode,
        "state": slice_.state,
        "profile": slice_.profile or None,
        "compute_percent": slice_.compute,
        "memory_bytes": slice_.memory_mib * MiB,
        "owner": str(slice_.spec.owner),
        "cdi_device": slice_.cdi_device,
        "health": health.state if health is not None else None,
        "used_memory_bytes": health.memory_used_bytes if health is not None else None,
        "utilization": health.utilization if health is not None else None,
    }


def render_gpus(gpus: tuple[GpuSnapshot, ...], verdict: NodeHealth | None,
                attribution: AttributionSnapshot | None, slices: SliceTable) -> list[dict[str, Any]]:
    by_index = {h.index: h for h in verdict.gpus} if verdict is not None else {}
    return [render_gpu(gpu, by_index.get(gpu.index), attribution, slices) for gpu in gpus]


def render_slices(slices: SliceTable, verdict: NodeHealth | None) -> list[dict[str, Any]]:
    by_id = {h.id: h for h in verdict.slices} if verdict is not None else {}
    ordered = sorted(slices.slices.values(), key=lambda s: (s.gpu.index, s.created_at, s.id))
    return [render_slice(s, by_id.get(s.id)) for s in ordered]
