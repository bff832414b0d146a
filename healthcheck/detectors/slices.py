"""Slices: isolation measured, not assumed — each slice's processes against what the slice was given.

Faults (on the slice, never the card; severity, action and clearing: ``healthcheck/policy.yaml``):

- ``slice_memory_over_quota``: the slice's processes hold more GPU memory than its quota
  (``Slice.memory_mib`` MiB), at once on the sample that shows it.
- ``slice_compute_over_share``: their share of the card's SM time (a ratio, against
  ``Slice.compute`` percent) stayed above the slice's compute share for
  ``compute_over_share_seconds`` (sample times, two readings at least). Compute 0 (unlimited)
  never raises it; a share that cannot be measured (MIG, a free owner) neither starts nor ends a run.

Which processes are a slice's, and how they are summed: ``healthcheck/slices.py`` (``slice_usage``).
Findings carry ``slice_id`` (the slice machine holds them) and the slice's GPU instance id.

State (JSON-friendly): ``at`` (the last sample counted), ``runs`` {slice id: [first seen, readings]}
of shares above the compute share.
"""

from __future__ import annotations

from typing import Any

from runtimekit.healthcheck.policy import default_policy
from runtimekit.healthcheck.slices import MIB, slice_usage
from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import DetectorInput, Finding
from runtimekit.state.slices import Slice

from ._common import clock, extend_run, held_for, is_new_sample

NAME = "slices"


def slices(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    config = for_detector(NAME, data.config)
    state = state or {}
    snapshot = data.snapshot
    if snapshot is None or not snapshot.nvml_up:
        return state, []
    fresh = is_new_sample(state, snapshot)
    old_runs: dict[str, Any] = state.get("runs") or {}
    runs: dict[str, list[float]] = {}
    findings: list[Finding] = []
    window = config["compute_over_share_seconds"]
    now = snapshot.sampled_at
    for slice_id, slice_ in sorted(data.slices.slices.items()):
        usage = slice_usage(slice_, snapshot, data.attribution)
        quota = slice_.memory_mib * MIB
        if usage.memory_bytes is not None and slice_.memory_mib > 0 and usage.memory_bytes > quota:
            findings.append(_finding(slice_, "slice_memory_over_quota", (
                f"{usage.processes} process(es) of slice {slice_id} hold {usage.memory_bytes / MIB:.0f} MiB on GPU "
                f"{slice_.gpu.index}, over its quota of {slice_.memory_mib} MiB at {clock(now)}")))
        if slice_.compute <= 0:
            continue  # unlimited: no share to go over
        above = None if usage.sm_ratio is None else usage.sm_ratio * 100 > slice_.compute
        run = extend_run(old_runs.get(slice_id), above, now, fresh)
        if run:
            runs[slice_id] = run
        if run and held_for(run, now, window):
            findings.append(_finding(slice_, "slice_compute_over_share", (
                f"the SM share of slice {slice_id}'s processes on GPU {slice_.gpu.index} has stayed above its "
                f"compute share of {slice_.compute} % since {clock(run[0])} ({now - run[0]:.0f} s, threshold "
                f"{window:g} s; now {100 * (usage.sm_ratio or 0.0):.0f} %)")))
    return {"at": snapshot.sampled_at if fresh else state.get("at"), "runs": runs}, findings


def _finding(slice_: Slice, fault: str, evidence: str) -> Finding:
    """A finding on ``slice_`` (its card, its GPU instance if MIG) with the fault policy's terms."""
    instance = slice_.mig.gpu_instance_id if slice_.mig is not None else None
    return default_policy().finding(slice_.gpu.index, slice_.gpu.uuid, fault, evidence, instance, slice_id=slice_.id)


slices.name = NAME  # type: ignore[attr-defined]
detector = slices
