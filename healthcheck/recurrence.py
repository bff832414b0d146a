"""A GPU whose faults come back after every repair: the step after a reset or a reboot is a spare node.

An *intervention* starts when a GPU that held no fault needing one is found with a critical card
fault that only a GPU reset or a node reboot clears (``clears: gpu_reset`` or ``node_reboot``: a
lost card, an uncorrectable ECC error, a GSP or PMU fault, an NVLink error, the driver asking for
a reset). Faults held on together, or raised again while one is held, are the same intervention;
the next one can only start after a reset or a reboot cleared them, so each intervention after the
first is a repair that did not last. Instance-scoped faults (a MIG
instance's own) and warnings (a pending row remap, a contained ECC error: routine, reset when
idle) are not interventions.

When a GPU starts its ``interventions``-th intervention within ``window_seconds``, the machine
raises ``gpu_fault_recurring`` on it with the intervention's faults (critical, replace_node,
clears on node reboot; its policy in ``policy.yaml``): resetting or rebooting again is not a fix,
the board needs field diagnosis or an RMA. The times of the interventions are kept on the GPU's
record (``GpuRecord.interventions``, persisted in health.json), so neither a reboot nor an agent
restart forgets them; a GPU replaced under RMA has a new UUID and a new record.

Sources (gpu-faults.md §1.4, §1.5, §6): gpud escalates an XID that asked for a reboot more than
twice to hardware inspection; NVSentinel's janitor treats three failed resets of one GPU in 24 h
as hardware, and five remediations of one node in 7 days as a case for NVIDIA support; the
failure table's "repeat ⇒ field diag / RMA" for a lost GPU and an uncorrectable ECC error.
Defaults (``thresholds.yaml``, ``machine``): 3 interventions within 7 days.

Pure: the machine calls ``recur`` with the record, this evaluation's findings and its time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from runtimekit.healthcheck.types import CLEARS_ON_REBOOT, CLEARS_ON_RESET, CRITICAL, INSTANCE, ActiveFault, Finding

RECURRING = "gpu_fault_recurring"
_REPAIRS = (CLEARS_ON_RESET, CLEARS_ON_REBOOT)
AGENT = "agent"  # the fault class of the agent's own faults


@dataclass(frozen=True, slots=True)
class RecurrenceRule:
    """``interventions`` within ``window_seconds`` raise ``template`` (the policy's finding of
    ``gpu_fault_recurring``, node-level: the machine names the GPU)."""

    interventions: int
    window_seconds: float
    template: Finding

    def __post_init__(self) -> None:
        if self.interventions < 2:
            raise ValueError(f"recurrence: interventions must be at least 2, got {self.interventions}")
        if not self.window_seconds > 0:
            raise ValueError(f"recurrence: window_seconds must be positive, got {self.window_seconds}")


def needs_intervention(fault: ActiveFault | Finding) -> bool:
    """A critical card fault of the GPU's that only a GPU reset or a node reboot clears. Not the
    recurrence itself, and not the agent's own (class ``agent``: an unreadable health.json makes
    every GPU critical until a reboot, which says nothing about the GPUs)."""
    instance_scoped = fault.scope == INSTANCE and fault.gpu_instance_id is not None
    return (fault.severity == CRITICAL and fault.clears in _REPAIRS and not instance_scoped
            and fault.fault != RECURRING and fault.fault_class != AGENT)


def recur(
    rule: RecurrenceRule,
    index: int,
    uuid: str,
    interventions: Sequence[float],
    kept: Iterable[ActiveFault],
    findings: Sequence[Finding],
    now: float,
) -> tuple[tuple[float, ...], list[Finding]]:
    """(the record's intervention times, this evaluation's findings) after ``findings`` on a GPU that
    keeps ``kept`` (its faults less what this evaluation's reset or reboot cleared). A new
    intervention is recorded at ``now``; the ``rule.interventions``-th within the window adds the
    ``gpu_fault_recurring`` finding."""
    starting = [f for f in findings if not f.hold and needs_intervention(f)]
    if not starting or any(needs_intervention(h) for h in kept):
        return tuple(interventions), list(findings)
    recent = tuple(t for t in interventions if now - t < rule.window_seconds)[-(rule.interventions - 1):]
    times = (*recent, now)
    if len(times) < rule.interventions:
        return times, list(findings)
    names = ", ".join(sorted({f.fault for f in starting}))
    days = rule.window_seconds / 86400
    evidence = (f"{len(times)} interventions within {days:g} d, each cleared by a GPU reset or a node reboot and "
                f"back again; this one: {names}")
    return times, [*findings, replace(rule.template, gpu_index=index, uuid=uuid, evidence=evidence)]
