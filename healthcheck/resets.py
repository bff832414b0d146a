"""GPU resets seen between two samples, and about when each happened.

A reset is seen in the counters only a reset (or a driver reload) sets back: the energy counter
(nvmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded or the GPU was reset) or the
volatile ECC counts went backwards. Readings unavailable on either side prove nothing.

When it happened matters: a fault the reset clears may come back right after it (an XID between
the reset and the sample that shows it), and that one must not be cleared with the rest
(``faults_seen_again``, ``machine.step``). Only the XIDs' own times are compared with the reset's:
a fault read from a sample is judged again by the sample that shows the reset, and the time a
held fault was last refreshed is an evaluation's, not its evidence's. The energy counter tells the time: it restarted at the reset, so at the sample
it holds what the GPU drew since, and ``energy / draw`` seconds before the sample is about when the
reset was (the draw of an idle GPU after a reset is steady). The estimate is kept between the two
samples. Without a readable energy counter and draw (the ECC counters alone showed the reset),
the time is unknown and taken as the sample's: every fault seen before it is cleared.

A reset made while the agent was stopped (``nvidia-smi --gpu-reset`` refuses while the agent holds
the GPU) shows the same way against the counters it saved with its state (``Counters``, in
health.json): they only grow until a reset or a driver reload, so an older saved value serves as
well as the last one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from runtimekit.gpu.types import GpuSnapshot, NodeSnapshot, Reading, XidEvent, is_available
from runtimekit.healthcheck.types import CLEARS_ON_RESET, ActiveFault, Finding

# A fault seen within this many seconds after the estimated reset is taken as seen before it: the
# estimate is not exact, and a fault seen at the reset itself is the one the reset cleared.
RESET_TIME_MARGIN_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class Counters:
    """What a reset sets back, of one GPU at one sample: ``at`` (unix seconds), the energy counter
    (J) and the volatile ECC counts; None where unreadable. ``draw_watts`` dates a reset seen at this
    sample (``_reset_time``); it is not saved (None in counters read back from health.json)."""

    at: float
    energy_joules: float | None
    corrected_volatile: float | None
    uncorrected_volatile: float | None
    draw_watts: float | None = None

    @classmethod
    def of(cls, gpu: GpuSnapshot) -> Counters:
        power, ecc = gpu.power, gpu.ecc
        return cls(gpu.sampled_at, _number(power.energy_joules) if power else None,
                   _number(ecc.corrected_volatile) if ecc else None, _number(ecc.uncorrected_volatile) if ecc else None,
                   _number(power.draw_watts) if power else None)


def counters_of(snapshot: NodeSnapshot) -> dict[str, Counters]:
    """Each GPU's counters in ``snapshot``, by UUID (lost GPUs and GPUs without a UUID left out)."""
    return {uuid: Counters.of(gpu) for gpu in snapshot.gpus if is_available(uuid := gpu.uuid) and not gpu.lost}


def reset_evidence(previous: NodeSnapshot | None, snapshot: NodeSnapshot) -> dict[str, float]:
    """UUID -> about when (unix seconds) each GPU reset between ``previous`` and ``snapshot`` was."""
    return {} if previous is None else resets_since(counters_of(previous), snapshot)


def resets_since(before: Mapping[str, Counters], snapshot: NodeSnapshot) -> dict[str, float]:
    """UUID -> about when each GPU was reset since its counters were ``before`` (those of an earlier
    sample: the one before, or, after a restart, those the agent saved — a reset made while it was
    stopped shows the same way)."""
    resets: dict[str, float] = {}
    for uuid, now in counters_of(snapshot).items():
        old = before.get(uuid)
        if old is None:
            continue  # a GPU not seen before cannot be compared
        pairs = ((old.energy_joules, now.energy_joules), (old.corrected_volatile, now.corrected_volatile),
                 (old.uncorrected_volatile, now.uncorrected_volatile))
        if any(a is not None and b is not None and b < a for a, b in pairs):
            resets[uuid] = _reset_time(old, now)
    return resets


def _reset_time(old: Counters, now: Counters) -> float:
    """About when a GPU whose counters went from ``old`` to ``now`` was reset: from its energy
    counter when it restarted (and its draw now), else the sample's time (module docstring)."""
    joules, before, watts = now.energy_joules, old.energy_joules, now.draw_watts
    if joules is None or before is None or joules >= before or not watts or watts <= 0:
        return now.at
    return min(now.at, max(old.at, now.at - joules / watts))


def _number(reading: Reading[float]) -> float | None:
    return float(reading) if is_available(reading) else None


def faults_seen_again(resets: Mapping[str, float], xids: Iterable[XidEvent],
                      fault_of: Callable[[int], str]) -> dict[str, frozenset[str]]:
    """By GPU UUID, the faults (``fault_of``: an XID code's fault in the policy) of the XIDs that
    came more than ``RESET_TIME_MARGIN_SECONDS`` after the GPU's reset in ``resets``: a fault the
    reset clears but that is back. Only an XID's own time says so: a fault read from a sample is
    judged by the sample that shows the reset."""
    again: dict[str, set[str]] = {}
    for event in xids:
        reset_at = resets.get(event.uuid)
        if reset_at is not None and event.received_at > reset_at + RESET_TIME_MARGIN_SECONDS:
            again.setdefault(event.uuid, set()).add(fault_of(event.xid))
    return {uuid: frozenset(names) for uuid, names in again.items()}


def seen_after_reset(index: int, uuid: str, faults: Iterable[ActiveFault], names: Collection[str]) -> list[Finding]:
    """The faults of GPU ``index`` (``uuid``) that its reset clears but that are back (``names``:
    ``faults_seen_again``), as findings: the reset clears them, and they are raised again at once —
    a new occurrence, counted, logged, and an intervention of its own (``recurrence.py``)."""
    return [Finding(index, uuid, h.fault, h.severity, h.action, f"{h.evidence}; again after the GPU reset",
                    h.clears, h.gpu_instance_id, h.fault_class, h.schedulable, h.scope)
            for h in faults if h.clears == CLEARS_ON_RESET and h.fault in names]
