"""``GET /api/v1/health``: the node's, each GPU's and each slice's health verdict as JSON.

Each GPU lists the faults that hold the card (``faults``) and those its MIG instances hold
(``instance_faults``: they change neither its state nor its schedulability). Each slice
(``slices``) lists its own faults — its instance's and its isolation findings — its state (never
better than its card's), and what its processes use (``memory_used_bytes``, ``utilization`` as a
ratio 0..1 of the card's SM time; null where it cannot be measured).

Read from ``NodeState.health`` (published by the checker) and ``NodeState.attribution`` (which pods
the faults touch); the handler never evaluates anything itself. Before the first evaluation it
answers 503 with a body saying so — never a "healthy" it has not checked.

Times are given twice: ISO 8601 in UTC (``since``) and unix seconds (``since_unix``); a time that
is not ``plausible_time`` (NaN, infinite, before 1970, past 2100) is given as null in both, never
as invalid JSON or a 500 (the state file is validated on load; this holds whatever a verdict holds).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from runtimekit.attribution.types import AttributionSnapshot
from runtimekit.healthcheck.types import ActiveFault, GpuHealth, SliceHealth
from runtimekit.state import NodeState
from runtimekit.state.health import plausible_time

HEALTH_PATH = "/api/v1/health"


def add_health_routes(app: web.Application, state: NodeState) -> None:
    """Serve ``GET /api/v1/health`` from ``state``."""

    async def health(request: web.Request) -> web.Response:
        view = state.view()  # the verdict and the pods on each GPU from one moment
        verdict = view.health
        if verdict is None:
            return web.json_response(
                {"error": "not evaluated yet", "detail": "the health checker has not finished its first "
                 "evaluation (waiting for the first sample, or the checker is disabled)"},
                status=503,
            )
        return web.json_response(render_health(verdict, view.attribution))

    app.router.add_get(HEALTH_PATH, health)


def iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _times(name: str, unix: float) -> dict[str, Any]:
    if not plausible_time(unix):
        return {name: None, f"{name}_unix": None}
    return {name: iso(unix), f"{name}_unix": unix}


def render_fault(fault: ActiveFault) -> dict[str, Any]:
    return {
        "fault": fault.fault,
        "severity": fault.severity,
        "action": fault.action,
        "evidence": fault.evidence,
        "clears": fault.clears,
        "clearing": not fault.current,  # the signal is gone; it clears after enough clean samples
        "clean_samples": fault.clean_samples,
        "gpu_instance_id": fault.gpu_instance_id,
        **_times("first_seen", fault.first_seen),
        **_times("last_seen", fault.last_seen),
    }


def affected_pods(uuid: str, attribution: AttributionSnapshot | None) -> list[dict[str, Any]]:
    """Containers on the GPU: those the kubelet allocated it to, and those with a process on it."""
    if attribution is None:
        return []
    found: dict[tuple[str, str, str], set[str]] = {}
    for allocation in attribution.allocations:
        if allocation.gpu_uuid == uuid and allocation.owner.known:
            owner = allocation.owner
            found.setdefault((owner.namespace, owner.pod, owner.container), set()).add("allocation")
    for process in attribution.processes:
        if process.gpu_uuid == uuid and process.owner.known:
            owner = process.owner
            found.setdefault((owner.namespace, owner.pod, owner.container), set()).add("process")
    return [{"namespace": ns, "pod": pod, "container": container, "via": sorted(via)}
            for (ns, pod, container), via in sorted(found.items())]


def render_gpu(gpu: GpuHealth, attribution: AttributionSnapshot | None) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "state": gpu.state,
        **_times("since", gpu.since),
        "schedulable": gpu.schedulable,
        "action": gpu.action,
        "faults": [render_fault(f) for f in gpu.faults],
        "instance_faults": [render_fault(f) for f in gpu.instance_faults],
        "pods": affected_pods(gpu.uuid, attribution),
    }


def render_slice(slice_: SliceHealth) -> dict[str, Any]:
    return {
        "id": slice_.id,
        "gpu": slice_.gpu_index,
        "uuid": slice_.gpu_uuid,
        "gpu_instance_id": slice_.gpu_instance_id,
        "state": slice_.state,
        **_times("since", slice_.since),
        "action": slice_.action,
        "faults": [render_fault(f) for f in slice_.faults],
        "memory_used_bytes": slice_.memory_used_bytes,
        "utilization": slice_.utilization,
    }


def render_health(verdict: Any, attribution: AttributionSnapshot | None) -> dict[str, Any]:
    """The JSON document of a ``NodeHealth``."""
    return {
        "node": {
            "state": verdict.state,
            "action": verdict.action,
            "faults": [render_fault(f) for f in verdict.faults],
        },
        **_times("evaluated_at", verdict.evaluated_at),
        "evaluation_cpu_seconds": verdict.detector_seconds,
        "gpus": [render_gpu(gpu, attribution) for gpu in verdict.gpus],
        "slices": [render_slice(s) for s in verdict.slices],
    }
