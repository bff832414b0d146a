"""GPU resets seen between two samples, and about when each happened.

A reset is seen in the counters only a reset (or a driver reload) sets back: the energy counter
(nvmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded or the GPU was reset) or the
volatile ECC counts went backwards. Readings unavailable on either side prove nothing.

When it happened matters: a fault the reset clears may come back right after it (an XID between
the reset and the sample that shows it), and that one must not be cleared with the rest
(``machine.step``). The energy counter tells the time: it restarted at the reset, so at the sample
it holds what the GPU drew since, and ``energy / draw`` seconds before the sample is about when the
reset was (the draw of an idle GPU after a reset is steady). The estimate is kept between the two
samples. Without a readable energy counter and draw (the ECC counters alone showed the reset),
the time is unknown and taken as the sample's: every fault seen before it is cleared.
"""

from __future__ import annotations

from collections.abc import Iterable

from runtimekit.gpu.types import GpuSnapshot, NodeSnapshot, Reading, is_available
from runtimekit.healthcheck.types import CLEARS_ON_RESET, ActiveFault, Finding

# A fault seen within this many seconds after the estimated reset is taken as seen before it: the
# estimate is not exact, and a fault seen at the reset itself is the one the reset cleared.
RESET_TIME_MARGIN_SECONDS = 0.5


def reset_evidence(previous: NodeSnapshot | None, snapshot: NodeSnapshot) -> dict[str, float]:
    """UUID -> about when (unix seconds) each GPU reset between ``previous`` and ``snapshot`` was."""
    if previous is None:
        return {}
    before = {uuid: gpu for gpu in previous.gpus if is_available(uuid := gpu.uuid)}
    resets: dict[str, float] = {}
    for gpu in snapshot.gpus:
        uuid = gpu.uuid
        if not is_available(uuid):
            continue  # a GPU without a UUID cannot be matched with its previous sample
        old = before.get(uuid)
        if old is None or gpu.lost or old.lost:
            continue
        energy: tuple[Reading[float], Reading[float]] | None = None
        pairs: list[tuple[Reading[float], Reading[float]]] = []
        if gpu.power is not None and old.power is not None:
            energy = (old.power.energy_joules, gpu.power.energy_joules)
            pairs.append(energy)
        if gpu.ecc is not None and old.ecc is not None:
            pairs.append((old.ecc.corrected_volatile, gpu.ecc.corrected_volatile))
            pairs.append((old.ecc.uncorrected_volatile, gpu.ecc.uncorrected_volatile))
        if any(is_available(a) and is_available(b) and b < a for a, b in pairs):
            resets[uuid] = _reset_time(old, gpu)
    return resets


def _reset_time(old: GpuSnapshot, gpu: GpuSnapshot) -> float:
    """About when ``gpu`` was reset since ``old``: from its energy counter when it restarted, else
    the sample's time (see the module docstring)."""
    power, before = gpu.power, old.power
    if power is None or before is None:
        return gpu.sampled_at
    now_j, then_j, watts = power.energy_joules, before.energy_joules, power.draw_watts
    if not (is_available(now_j) and is_available(then_j) and is_available(watts)) or now_j >= then_j or watts <= 0:
        return gpu.sampled_at
    return min(gpu.sampled_at, max(old.sampled_at, gpu.sampled_at - now_j / watts))


def seen_after_reset(index: int, uuid: str, faults: Iterable[ActiveFault], reset_at: float) -> list[Finding]:
    """The faults of GPU ``index`` (``uuid``) that a reset at ``reset_at`` clears but that were seen
    after it (an XID between the reset and the sample that showed it), as findings: the reset clears
    them, and they are raised again at once — a new occurrence, counted, logged, and an
    intervention of its own (``recurrence.py``)."""
    return [Finding(index, uuid, h.fault, h.severity, h.action, f"{h.evidence}; again after the GPU reset",
                    h.clears, h.gpu_instance_id, h.fault_class, h.schedulable, h.scope)
            for h in faults if h.clears == CLEARS_ON_RESET and h.last_seen > reset_at + RESET_TIME_MARGIN_SECONDS]
