"""Small helpers shared by the detectors: finding construction, merging, formatting.

Detector states are plain data — dicts with string keys, tuples/lists of numbers and strings —
never mutated in place (each call builds a new state), so the state machine can keep them and
persist them as JSON (lists come back instead of tuples; every detector accepts both).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from runtimekit.gpu.types import GpuSnapshot, NodeSnapshot, is_available
from runtimekit.healthcheck.policy import default_policy
from runtimekit.healthcheck.types import ACTIONS, SEVERITIES, Finding

CLEARS_ORDER = ("clean_samples", "gpu_reset", "node_reboot")
MIN_READINGS = 2  # readings that confirm a condition before a duration threshold may fire


def available(*values: Any) -> bool:
    """True when every value is a real reading (not Unavailable, not None)."""
    return all(v is not None and is_available(v) for v in values)


def clock(t: float) -> str:
    """Wall-clock time of ``t`` as HH:MM:SS UTC, for evidence sentences."""
    return time.strftime("%H:%M:%S", time.gmtime(t)) + " UTC"


def gib(n: float) -> str:
    return f"{n / 1024**3:.1f} GiB"


def mib(n: float) -> str:
    return f"{n / 1024**2:.0f} MiB"


def finding(gpu: GpuSnapshot, fault: str, evidence: str, gpu_instance_id: int | None = None) -> Finding:
    """A finding of ``fault`` on ``gpu``, with the fault policy's severity, action, class and clearing."""
    return default_policy().finding(gpu.index, gpu.uuid, fault, evidence, gpu_instance_id)


def held_for(run: Any, now: float, seconds: float) -> bool:
    """True when a condition run ``[first seen, readings]`` has lasted ``seconds`` (sample times,
    not counts: the same threshold means the same at any sampling interval) and was confirmed by
    at least ``MIN_READINGS`` readings, so one odd reading never raises a fault."""
    return bool(run) and int(run[1]) >= MIN_READINGS and now - float(run[0]) >= seconds


def extend_run(run: Any, condition: bool | None, at: float, new_sample: bool) -> list[float] | None:
    """The condition run ``[first seen, readings]`` after one reading: None when the condition is
    false; unchanged when it is unreadable (None) or the sample was already counted."""
    if condition is None:
        return list(run) if run else None
    if not condition:
        return None
    if run:
        return [float(run[0]), int(run[1]) + (1 if new_sample else 0)]
    return [at, 1]


def merge(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per (GPU, instance, fault): the strongest severity, action and clearing rule,
    the evidence of all joined. Order of first appearance is kept."""
    merged: dict[tuple[int, str, int | None, str], Finding] = {}
    for f in findings:
        key = (f.gpu_index, f.uuid, f.gpu_instance_id, f.fault)
        old = merged.get(key)
        if old is None:
            merged[key] = f
            continue
        evidence = old.evidence if f.evidence in old.evidence else f"{old.evidence}; {f.evidence}"
        merged[key] = Finding(
            f.gpu_index, f.uuid, f.fault,
            max(old.severity, f.severity, key=SEVERITIES.index),
            max(old.action, f.action, key=ACTIONS.index),
            evidence,
            max(old.clears, f.clears, key=CLEARS_ORDER.index),
            f.gpu_instance_id,
            old.fault_class or f.fault_class,
            None if old.schedulable is None and f.schedulable is None
            else bool(old.schedulable is not False and f.schedulable is not False),
        )
    return list(merged.values())


def readable_gpus(snapshot: NodeSnapshot | None) -> tuple[GpuSnapshot, ...]:
    """The GPUs a per-GPU detector should judge: NVML up, the GPU not lost (lost_card owns those)."""
    if snapshot is None or not snapshot.nvml_up:
        return ()
    return tuple(g for g in snapshot.gpus if not g.lost)


def previous_by_uuid(previous: NodeSnapshot | None) -> dict[str, GpuSnapshot]:
    if previous is None or not previous.nvml_up:
        return {}
    return {g.uuid: g for g in previous.gpus if not g.lost}


def is_new_sample(state: Any, snapshot: NodeSnapshot) -> bool:
    """True when ``snapshot`` is newer than the last one a counting detector counted (its state's
    ``at``). The checker re-runs the detectors on the same snapshot when only XIDs arrived
    (``data.snapshot is data.previous``); consecutive-sample counts must not advance then."""
    last = (state or {}).get("at")
    return last is None or snapshot.sampled_at > last


def bump(counts: Any, key: str, condition: bool, new_sample: bool = True) -> int:
    """The consecutive-sample count for ``key``: +1 when ``condition`` on a new sample, unchanged on
    a repeated one, 0 when the condition is false."""
    if not condition:
        return 0
    return int(counts.get(key, 0)) + (1 if new_sample else 0)
