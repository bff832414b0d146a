"""Small helpers shared by the detectors: finding construction, merging, formatting.

Detector states are plain data — dicts with string keys, tuples/lists of numbers and strings —
never mutated in place (each call builds a new state), so the state machine can keep them and
persist them as JSON (lists come back instead of tuples; every detector accepts both).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, NamedTuple, TypeVar

from runtimekit.gpu.types import GpuSnapshot, NodeSnapshot, Unavailable, is_available
from runtimekit.healthcheck.policy import default_policy
from runtimekit.healthcheck.types import ACTIONS, CARD, SEEN_AGAIN, SEVERITIES, UNREAD, Finding

CLEARS_ORDER = ("clean_samples", "gpu_reset", "node_reboot")
HOLDS = ("", SEEN_AGAIN, UNREAD)  # Finding.hold, strongest first: a finding, then the marks
T = TypeVar("T")
MIN_READINGS = 2  # readings that confirm a condition before a duration threshold may fire


def available(*values: Any) -> bool:
    """True when every value is a real reading (not Unavailable, not None). Called for every link
    and process of every sample: a plain loop, not ``all()`` over a generator."""
    for value in values:
        if value is None or isinstance(value, Unavailable):
            return False
    return True


def value_of(reading: T | Unavailable | None) -> T | None:
    """The reading itself, or None when it is unavailable or absent (a type-narrowing ``available``)."""
    if reading is None or isinstance(reading, Unavailable):
        return None
    return reading


def clock(t: float) -> str:
    """Wall-clock time of ``t`` as HH:MM:SS UTC, for evidence sentences."""
    return time.strftime("%H:%M:%S", time.gmtime(t)) + " UTC"


def gib(n: float) -> str:
    return f"{n / 1024**3:.1f} GiB"


def finding(gpu: GpuSnapshot, fault: str, evidence: str, gpu_instance_id: int | None = None) -> Finding:
    """A finding of ``fault`` on ``gpu``, with the fault policy's severity, action, class and clearing.

    A GPU whose UUID the driver could not give has no identity to hold a record by: the finding is
    then node-level, its evidence naming the GPU by index (``unidentified``)."""
    if is_available(gpu.uuid):
        return default_policy().finding(gpu.index, gpu.uuid, fault, evidence, gpu_instance_id)
    return default_policy().node_finding(fault, f"{unidentified(gpu)}: {evidence}")


def unjudged(gpu: GpuSnapshot, faults: Iterable[str], why: str) -> list[Finding]:
    """Marks that this sample could not read the signal of ``faults`` on ``gpu`` (``why``: which
    reading, and its error): a fault held stays as it is, none is raised (``Finding.hold`` UNREAD)."""
    return [replace(finding(gpu, fault, why), hold=UNREAD) for fault in faults]


def seen_again(gpu: GpuSnapshot, faults: Iterable[str], why: str) -> list[Finding]:
    """Marks that the signal of ``faults`` is on ``gpu`` again but not yet for its confirming
    duration: a fault held starts its clean-sample count again, none is raised (SEEN_AGAIN)."""
    return [replace(finding(gpu, fault, why), hold=SEEN_AGAIN) for fault in faults]


def unreadable(reading: object) -> str:
    """Why a reading is missing, for an ``unjudged`` mark: its NVML error, or "not read"."""
    if isinstance(reading, Unavailable):
        return f"{reading.reason}: {reading.detail}" if reading.detail else reading.reason
    return "not read"


def unidentified(gpu: GpuSnapshot) -> str:
    """How evidence names a GPU whose UUID is unavailable: by its index, and why."""
    uuid = gpu.uuid
    why = uuid.reason if isinstance(uuid, Unavailable) else "unknown"
    return f"GPU {gpu.index} (UUID unreadable: {why})"


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
    """One finding per (GPU or node, instance, slice, fault): the strongest severity, action and
    clearing rule, the evidence of all joined; held by the card if either is. Order of first
    appearance is kept. A finding outweighs a mark of the same fault (``Finding.hold``), and a
    SEEN_AGAIN mark an UNREAD one."""
    merged: dict[tuple[int | None, str | None, int | None, str | None, str], Finding] = {}
    for f in findings:
        key = (f.gpu_index, f.uuid, f.gpu_instance_id, f.slice_id, f.fault)
        old = merged.get(key)
        if old is None or HOLDS.index(f.hold) < HOLDS.index(old.hold):
            merged[key] = f
            continue
        if f.hold or old.hold:
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
            CARD if CARD in (old.scope, f.scope) else f.scope,
            f.slice_id,
        )
    return list(merged.values())


class IdentifiedGpu(NamedTuple):
    """A GPU snapshot whose UUID is known, with that UUID as a str: ``for uuid, gpu in …``."""

    uuid: str
    gpu: GpuSnapshot


def readable_gpus(snapshot: NodeSnapshot | None) -> list[IdentifiedGpu]:
    """The GPUs a per-GPU detector should judge, as (uuid, snapshot): NVML up, the GPU not lost
    (lost_card owns those) and its UUID known — a GPU without one cannot be followed from sample to
    sample (the driver detector reports its read errors)."""
    if snapshot is None or not snapshot.nvml_up:
        return []
    return [g for g in identified(snapshot.gpus) if not g.gpu.lost]


def identified(gpus: Iterable[GpuSnapshot]) -> list[IdentifiedGpu]:
    """``gpus`` whose UUID is available, each with its UUID as a str."""
    out = []
    for gpu in gpus:
        uuid = gpu.uuid
        if is_available(uuid):
            out.append(IdentifiedGpu(uuid, gpu))
    return out


def uuid_of(gpu: GpuSnapshot) -> str | None:
    """The GPU's UUID, None when the driver could not give it."""
    uuid = gpu.uuid
    return uuid if is_available(uuid) else None


def previous_by_uuid(previous: NodeSnapshot | None) -> dict[str, GpuSnapshot]:
    if previous is None or not previous.nvml_up:
        return {}
    return {g.uuid: g.gpu for g in identified(previous.gpus) if not g.gpu.lost}


def is_new_sample(state: Any, snapshot: NodeSnapshot) -> bool:
    """True when ``snapshot`` is newer than the last one a counting detector counted (its state's
    ``at``). The checker re-runs the detectors on the same snapshot when only XIDs arrived
    (``data.snapshot is data.previous``); consecutive-sample counts must not advance then."""
    last = (state or {}).get("at")
    return last is None or snapshot.sampled_at > last
