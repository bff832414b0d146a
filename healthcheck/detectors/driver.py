"""Driver: NVML down, GPUs whose readings keep failing, the driver's recovery action, and the XIDs
no other detector owns.

Faults (severity, action and clearing: ``healthcheck/policy.yaml``):

- ``nvml_down``, node-level (critical, reboot_node, clean_samples): NVML could not be
  initialised; no GPU can be judged, and a failed probe is never "healthy" (§6 NVML/driver broken).
- ``nvml_errors`` (warning, drain_and_reset_gpu): a GPU's readings failed with real NVML errors
  (``GpuSnapshot.errors``; "not supported" is not an error) without a break for
  ``error_seconds`` (sample times, two readings at least). Lost GPUs are the lost-card detector's.
  A GPU whose UUID is unavailable is followed by its index, and its ``nvml_errors`` is node-level
  (no GPU record can hold it; the evidence names the index).
- ``xid_<code>``: one per XID the policy gives its own policy (not a detector fault). Application
  XIDs are info: they never change health on their own.
- ``xid_<code>_repeated`` (the policy's ``xid_repeated``): an XID whose entry says
  ``repeats_escalate`` (the application XIDs and unknown codes) came in ``app_xid_bursts``
  bursts within ``app_xid_window_seconds`` on one GPU; a burst is XIDs of one code on one GPU
  less than ``app_xid_burst_seconds`` apart. It stays active while the window holds enough
  bursts, so it ends once old bursts age out, or once the GPU is reset or the node reboots
  (``DetectorInput.repaired``: the reset it asks for was done, so its bursts are forgotten and
  an XID after the reset starts a new burst).
- ``recovery_gpu_reset``, ``recovery_node_reboot``, ``recovery_drain_p2p``,
  ``recovery_drain_and_reset``: the driver's recovery action (NVML field
  NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 230; ``GpuSnapshot.recovery_action`` when the reader
  provides it) asks for something; judged on every sample, the XID 154 that announces a change
  is then only recorded (info).

XIDs whose entry says ``follows_companions`` (45; 154 on a GPU whose recovery-action field is
unreadable) take the strongest entry among the other XIDs on the same GPU within
``companion_window_seconds``; alone they keep their own (info) entry. LIMITATION: without the
field, a driver asking for more than its companion XIDs imply is under-reported.

State (JSON-friendly): ``at`` (the last sample counted), ``errors`` {uuid: [first seen,
readings]}, ``unidentified_errors`` {gpu index: [first seen, readings]} for GPUs without a UUID, ``bursts`` {uuid: {code: [[start, last, events, gpu_index], ...]}}, ``recent``
{uuid: [[time, code], ...]} for companions.
"""

from __future__ import annotations

from typing import Any

from runtimekit.gpu.types import GpuSnapshot
from runtimekit.healthcheck.policy import REPEATED, default_policy
from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import DetectorInput, Finding

from ._common import clock, extend_run, finding, held_for, identified, is_new_sample, merge, uuid_of, value_of

NAME = "driver"
MAX_LISTED = 5
# The driver's recovery action (nvmlGpuRecoveryAction_t, as the reader names it) -> our fault.
# "none" asks for nothing; RECOVER_IMEX_DOMAIN concerns the IMEX domain, not this GPU's health.
RECOVERY_FAULTS = {
    "gpu_reset": "recovery_gpu_reset",  # NVML_GPU_RECOVERY_ACTION_GPU_RESET (1)
    "bus_reset": "recovery_gpu_reset",  # NVML_GPU_RECOVERY_ACTION_BUS_RESET (6): a reset of the GPU's bus
    "node_reboot": "recovery_node_reboot",  # NVML_GPU_RECOVERY_ACTION_NODE_REBOOT (2)
    "system_reboot": "recovery_node_reboot",  # NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT (7)
    "drain_p2p": "recovery_drain_p2p",  # NVML_GPU_RECOVERY_ACTION_DRAIN_P2P (3)
    "drain_and_reset": "recovery_drain_and_reset",  # NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET (4)
}


def recovery_action(gpu: GpuSnapshot) -> str | None:
    """The driver's recovery action for ``gpu`` ("none", "gpu_reset", ...), None when unreadable.

    Read from ``GpuSnapshot.recovery_action`` (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION); an Unavailable
    reading (drivers before R570, or the field not supported) gives None."""
    return value_of(gpu.recovery_action)


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def driver(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    config = for_detector(NAME, data.config)
    policy = default_policy()
    state = state or {}
    errors: dict[str, Any] = dict(state.get("errors") or {})
    unidentified_errors: dict[str, Any] = dict(state.get("unidentified_errors") or {})
    bursts: dict[str, dict[str, list[list[float]]]] = {
        uuid: {code: [list(b) for b in items] for code, items in codes.items()}
        for uuid, codes in (state.get("bursts") or {}).items()
    }
    recent: dict[str, list[list[float]]] = {u: [list(r) for r in rs] for u, rs in (state.get("recent") or {}).items()}
    findings: list[Finding] = []
    snapshot = data.snapshot
    at = state.get("at")

    if snapshot is not None and not snapshot.nvml_up:
        findings.append(policy.node_finding(
            "nvml_down",
            f"NVML failed to initialise at {clock(snapshot.sampled_at)}: {snapshot.nvml_error or 'no error text'}; "
            "no GPU on the node can be checked",
        ))
    elif snapshot is not None:
        need = config["error_seconds"]
        fresh = is_new_sample(state, snapshot)
        at = snapshot.sampled_at if fresh else at
        seen: dict[str, Any] = {}
        seen_unidentified: dict[str, Any] = {}
        for gpu in snapshot.gpus:
            if gpu.lost:
                continue
            uuid = uuid_of(gpu)
            runs, seen_runs, key = ((errors, seen, uuid) if uuid is not None
                                    else (unidentified_errors, seen_unidentified, str(gpu.index)))
            run = extend_run(runs.get(key), bool(gpu.errors), gpu.sampled_at, fresh)
            if run:
                seen_runs[key] = run
            if run and held_for(run, gpu.sampled_at, need):
                listed = ", ".join(f"{name} ({error})" for name, error in gpu.errors[:MAX_LISTED])
                more = f" and {len(gpu.errors) - MAX_LISTED} more" if len(gpu.errors) > MAX_LISTED else ""
                findings.append(finding(
                    gpu, "nvml_errors",
                    f"{len(gpu.errors)} readings failed with NVML errors since {clock(run[0])} "
                    f"({gpu.sampled_at - run[0]:.0f} s, threshold {need:g} s): {listed}{more}",
                ))
            action = recovery_action(gpu)
            if action in RECOVERY_FAULTS:
                findings.append(finding(
                    gpu, RECOVERY_FAULTS[action],
                    f"the driver's recovery action is {action} (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) at "
                    f"{clock(gpu.sampled_at)}",
                ))
        errors, unidentified_errors = seen, seen_unidentified
    field_read = {g.uuid for g in identified(snapshot.gpus if snapshot is not None else ())
                  if recovery_action(g.gpu) is not None}

    # XIDs, oldest first; every code is remembered for companions, whichever detector owns it.
    window = config["companion_window_seconds"]
    events = sorted(data.xids, key=lambda e: e.received_at)
    for event in events:
        recent.setdefault(event.uuid, []).append([event.received_at, event.xid])
    bursts = {u: codes for u, codes in bursts.items() if u not in data.repaired}
    burst_gap = config["app_xid_burst_seconds"]
    groups: dict[tuple[str, int | None, int], list[Any]] = {}  # one finding per GPU, instance and code
    for event in events:
        entry = policy.xid(event.xid)
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
        entry = policy.xid(code)
        first, last = group[0], group[-1]
        when = (f"at {clock(first.received_at)}" if len(group) == 1
                else f"{len(group)} times from {clock(first.received_at)} to {clock(last.received_at)}")
        name = f"XID {code} ({entry.meaning}) {when}"
        chosen, evidence = entry, name
        if entry.follows_companions and uuid in field_read:
            evidence = f"{name}; the recovery action is judged from the driver's recovery-action field"
        elif entry.follows_companions:
            companions = [
                (t, int(c)) for t, c in recent.get(uuid, ())
                if any(abs(t - e.received_at) <= window for e in group) and not policy.xid(int(c)).follows_companions
            ]
            strongest = policy.strongest(c for _, c in companions)
            if strongest is not None:
                seen_at = next(t for t, c in companions if c == strongest.code)
                chosen = strongest
                evidence = (f"{name}, with XID {strongest.code} ({strongest.meaning}) at {clock(seen_at)}: following "
                            f"XID {strongest.code}'s action (the action carried in the event data is not read)")
        findings.append(policy.finding(last.gpu_index, uuid, entry.fault, evidence, instance, chosen.policy))

    # Forget what fell out of the windows, then escalate what still has enough bursts.
    horizon = data.now - config["app_xid_window_seconds"]
    kept: dict[str, dict[str, list[list[float]]]] = {}
    for gpu_uuid, codes in bursts.items():
        for xid_code, items in codes.items():
            items = [b for b in items if b[1] >= horizon]
            if items:
                kept.setdefault(gpu_uuid, {})[xid_code] = items
    bursts = kept
    need = config["app_xid_bursts"]
    span = _duration(config["app_xid_window_seconds"])
    for gpu_uuid, codes in bursts.items():
        for xid_code, items in codes.items():
            if len(items) < need:
                continue
            entry = policy.xid(int(xid_code))
            listed = ", ".join(f"{clock(b[0])} ({int(b[2])} event{'s' if b[2] != 1 else ''})" for b in items[-MAX_LISTED:])
            earlier = f" and {len(items) - MAX_LISTED} earlier" if len(items) > MAX_LISTED else ""
            findings.append(policy.finding(
                int(items[-1][3]), gpu_uuid, f"{entry.fault}_repeated",
                f"XID {xid_code} ({entry.meaning}) in {len(items)} bursts within {span} on this GPU (threshold {need}): "
                f"{listed}{earlier}; recurring on one GPU points at the GPU, not the application",
                policy=policy.fault(REPEATED),
            ))
    recent = {u: kept_r for u, rs in recent.items() if (kept_r := [r for r in rs if r[0] >= data.now - window])}
    return ({"at": at, "errors": errors, "unidentified_errors": unidentified_errors, "bursts": bursts,
             "recent": recent}, merge(findings))


driver.name = NAME  # type: ignore[attr-defined]
detector = driver
