"""Driver: NVML down, GPUs whose readings keep failing, and the XIDs no other detector owns.

Faults (severity, action, clears):

- ``nvml_down`` on ``gpu_index -1`` (critical, reboot_node, clean_samples): NVML could not be
  initialised; no GPU can be judged, and a failed probe is never "healthy" (§6 NVML/driver broken).
- ``nvml_errors`` (warning, drain_and_reset_gpu, clean_samples): a GPU's readings failed with real
  NVML errors (``GpuSnapshot.errors``; "not supported" is not an error) for ``error_samples``
  samples in a row. Lost GPUs are the lost-card detector's.
- ``xid_<code>`` (or the catalog's ``fault``): one per XID the catalog assigns to this detector,
  with the catalog's severity, action and clearing rule. Application XIDs are info: they never
  change health on their own.
- ``xid_<code>_repeated`` (warning, drain_and_reset_gpu, clean_samples): an XID whose catalog
  entry says ``repeats_escalate`` (the application XIDs and unknown codes) came in
  ``app_xid_bursts`` bursts within ``app_xid_window_seconds`` on one GPU; a burst is XIDs of one
  code on one GPU less than ``app_xid_burst_seconds`` apart. We chose drain_and_reset_gpu over
  restart_application: the application was already restarted after each burst, and the same
  code recurring on the same GPU (not across GPUs) points at the GPU — NVSentinel's XID 13/31
  workflows run diagnostics next; a reset at an idle moment plus diagnostics is that step. It
  stays active while the window holds enough bursts, so it ends once old bursts age out.

XIDs whose entry says ``follows_companions`` (45, and 154 "recovery action changed", whose new
action is in event data we do not receive) take the strongest entry among the other XIDs on the
same GPU within ``companion_window_seconds``; alone they keep their own (info) entry.

State (JSON-friendly): ``at`` (the last sample counted), ``errors`` {uuid: consecutive samples}, ``bursts`` {uuid: {code: [[start,
last, events, gpu_index], ...]}}, ``recent`` {uuid: [[time, code], ...]} for companions.
"""

from __future__ import annotations

from typing import Any

from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import (
    CLEARS_WHEN_CLEAN,
    CRITICAL,
    DRAIN_AND_RESET_GPU,
    REBOOT_NODE,
    WARNING,
    DetectorInput,
    Finding,
)
from runtimekit.healthcheck.xid_catalog import default_catalog

from ._common import bump, clock, finding, is_new_sample, merge

NAME = "driver"
MAX_LISTED = 5


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def driver(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    config = for_detector(NAME, data.config)
    catalog = default_catalog()
    state = state or {}
    errors: dict[str, int] = dict(state.get("errors") or {})
    bursts: dict[str, dict[str, list[list[float]]]] = {
        uuid: {code: [list(b) for b in items] for code, items in codes.items()}
        for uuid, codes in (state.get("bursts") or {}).items()
    }
    recent: dict[str, list[list[float]]] = {u: [list(r) for r in rs] for u, rs in (state.get("recent") or {}).items()}
    findings: list[Finding] = []
    snapshot = data.snapshot
    at = state.get("at")

    if snapshot is not None and not snapshot.nvml_up:
        findings.append(Finding(
            -1, "", "nvml_down", CRITICAL, REBOOT_NODE,
            f"NVML failed to initialise at {clock(snapshot.sampled_at)}: {snapshot.nvml_error or 'no error text'}; "
            "no GPU on the node can be checked",
            CLEARS_WHEN_CLEAN,
        ))
    elif snapshot is not None:
        need = config["error_samples"]
        fresh = is_new_sample(state, snapshot)
        at = snapshot.sampled_at if fresh else at
        seen: dict[str, int] = {}
        for gpu in snapshot.gpus:
            if gpu.lost:
                continue
            count = bump(errors, gpu.uuid, bool(gpu.errors), fresh)
            seen[gpu.uuid] = count
            if count >= need:
                listed = ", ".join(f"{name} ({error})" for name, error in gpu.errors[:MAX_LISTED])
                more = f" and {len(gpu.errors) - MAX_LISTED} more" if len(gpu.errors) > MAX_LISTED else ""
                findings.append(finding(
                    gpu, "nvml_errors", WARNING, DRAIN_AND_RESET_GPU,
                    f"{len(gpu.errors)} readings failed with NVML errors for {count} samples in a row "
                    f"(threshold {need}): {listed}{more}",
                    CLEARS_WHEN_CLEAN,
                ))
        errors = seen

    # XIDs, oldest first; every code is remembered for companions, whichever detector owns it.
    window = config["companion_window_seconds"]
    events = sorted(data.xids, key=lambda e: e.received_at)
    for event in events:
        recent.setdefault(event.uuid, []).append([event.received_at, event.xid])
    burst_gap = config["app_xid_burst_seconds"]
    groups: dict[tuple[str, int | None, int], list[Any]] = {}  # one finding per GPU, instance and code
    for event in events:
        entry = catalog.get(event.xid)
        if entry.detector != NAME:
            continue
        groups.setdefault((event.uuid, event.gpu_instance_id, event.xid), []).append(event)
        if entry.repeats_escalate:
            items = bursts.setdefault(event.uuid, {}).setdefault(str(event.xid), [])
            if items and event.received_at - items[-1][1] <= burst_gap:
                items[-1] = [items[-1][0], event.received_at, items[-1][2] + 1, event.gpu_index]
            else:
                items.append([event.received_at, event.received_at, 1, event.gpu_index])
    for (uuid, instance, code), group in groups.items():
        entry = catalog.get(code)
        first, last = group[0], group[-1]
        when = (f"at {clock(first.received_at)}" if len(group) == 1
                else f"{len(group)} times from {clock(first.received_at)} to {clock(last.received_at)}")
        name = f"XID {code} ({entry.meaning}) {when}"
        chosen, evidence = entry, name
        if entry.follows_companions:
            companions = [
                (t, int(c)) for t, c in recent.get(uuid, ())
                if any(abs(t - e.received_at) <= window for e in group) and not catalog.get(int(c)).follows_companions
            ]
            strongest = catalog.strongest(c for _, c in companions)
            if strongest is not None:
                at = next(t for t, c in companions if c == strongest.code)
                chosen = strongest
                evidence = (f"{name}, with XID {strongest.code} ({strongest.meaning}) at {clock(at)}: following "
                            f"XID {strongest.code}'s action (the action carried in the event data is not read)")
        findings.append(Finding(
            last.gpu_index, uuid, entry.fault, chosen.severity, chosen.action, evidence, chosen.clears, instance,
        ))

    # Forget what fell out of the windows, then escalate what still has enough bursts.
    horizon = data.now - config["app_xid_window_seconds"]
    kept: dict[str, dict[str, list[list[float]]]] = {}
    for uuid, codes in bursts.items():
        for code, items in codes.items():
            items = [b for b in items if b[1] >= horizon]
            if items:
                kept.setdefault(uuid, {})[code] = items
    bursts = kept
    need = config["app_xid_bursts"]
    span = _duration(config["app_xid_window_seconds"])
    for uuid, codes in bursts.items():
        for code, items in codes.items():
            if len(items) < need:
                continue
            entry = catalog.get(int(code))
            listed = ", ".join(f"{clock(b[0])} ({int(b[2])} event{'s' if b[2] != 1 else ''})" for b in items[-MAX_LISTED:])
            earlier = f" and {len(items) - MAX_LISTED} earlier" if len(items) > MAX_LISTED else ""
            findings.append(Finding(
                int(items[-1][3]), uuid, f"{entry.fault}_repeated", WARNING, DRAIN_AND_RESET_GPU,
                f"XID {code} ({entry.meaning}) in {len(items)} bursts within {span} on this GPU (threshold {need}): "
                f"{listed}{earlier}; recurring on one GPU points at the GPU, not the application",
                CLEARS_WHEN_CLEAN,
            ))
    recent = {u: kept_r for u, rs in recent.items() if (kept_r := [r for r in rs if r[0] >= data.now - window])}
    return {"at": at, "errors": errors, "bursts": bursts, "recent": recent}, merge(findings)


driver.name = NAME  # type: ignore[attr-defined]
detector = driver
