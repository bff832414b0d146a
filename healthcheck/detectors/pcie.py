"""PCIe link downtraining and replays (gpu-faults.md §1.3, §2.3, §6 "PCIe downtraining", "PCIe
replays", §7.9).

Faults (severity, action and clearing: ``healthcheck/policy.yaml``):

- ``pcie_width_degraded`` (warning, drain_and_reset_gpu, clean_samples): the current link width is
  below the maximum — the width does not drop at idle, so at any load.
- ``pcie_generation_degraded`` (warning, drain_and_reset_gpu, clean_samples): the current link
  generation is below the (system-limited) maximum while the GPU is under load (utilization at or
  above ``load_utilization``, or in P-state 0 when ``judge_in_p0``); at idle the driver lowers the
  generation on purpose (P8 -> Gen1).

Both must hold for ``degraded_seconds`` (sample times, not counts; at least two readings), as
links retrain while load ramps. Action: a GPU reset retrains the link (secondary bus reset); if it
stays degraded, reseat or replace the riser — the evidence says so. An unreadable reading keeps
the run and raises nothing. An idle sample below the maximum generation ends the generation's run
(the driver lowers it at idle on purpose; the duration starts again under load); a sample at the
full width or generation is clean, loaded or not. Only such a reading counts towards clearing a
fault raised before: an unreadable one, or an idle one below the maximum, leaves it as it is
(``unjudged``); a link degraded again but not yet for ``degraded_seconds`` starts its count again
(``seen_again``).

- ``pcie_replay_rate`` (warning, none, clean_samples): the replay counter
  (nvmlDeviceGetPcieReplayCounter: the link resending what failed its LCRC or sequence check)
  grew by at least ``replays_per_minute`` a minute over the last ``replay_window_seconds`` — as
  DCGM's PCIe watch (DCGM_FR_PCI_REPLAY_RATE), which also needs a window of data first. A few
  replays an hour are normal: the rate is the fault, not one replay. Judged only once the counts
  span the window; until then, or while the counter is unreadable, the fault is neither raised nor
  cleared (``unjudged``). A counter that went back (driver reload) starts the window again. No
  ladder step fixes a marginal link: watch the trend, reseat or replace the riser if it rises.

State (JSON-friendly): ``at`` (the last sample counted), ``width`` and ``generation``
{uuid: [first seen, readings]}, ``replays`` {uuid: [[time, count], ...]}: the counts of the
window and the last one before it, at most about twice ``REPLAY_POINTS`` (a new count closer than
window / REPLAY_POINTS to the one before it replaces the newest), so the state is bounded at any
sampling rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtimekit.gpu.types import GpuSnapshot
from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import DetectorInput, Finding

from ._common import clock, extend_run, finding, held_for, is_new_sample, readable_gpus, seen_again, unjudged, value_of

NAME = "pcie"
REPLAY_POINTS = 30
ADVICE = "reset the GPU to retrain the link; if it stays degraded, reseat or replace the riser"


def _under_load(gpu: GpuSnapshot, config: Mapping[str, Any]) -> tuple[bool | None, str]:
    """(under load?, why); None when neither utilization nor P-state is readable."""
    busy = value_of(gpu.utilization.gpu) if gpu.utilization is not None else None
    pstate = value_of(gpu.clocks.performance_state) if gpu.clocks is not None else None
    known = False
    if busy is not None:
        known = True
        if busy >= config["load_utilization"]:
            return True, f"GPU {busy:.0%} busy"
    if config["judge_in_p0"] and pstate is not None:
        known = True
        if pstate == 0:
            return True, "in P-state 0"
    return (False if known else None), ""


def pcie(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    config = for_detector(NAME, data.config)
    state = state or {}
    if data.snapshot is None or not data.snapshot.nvml_up:
        return state, []
    need = config["degraded_seconds"]
    findings: list[Finding] = []
    fresh = is_new_sample(state, data.snapshot)
    new: dict[str, Any] = {"at": data.snapshot.sampled_at if fresh else state.get("at"), "width": {}, "generation": {},
                           "replays": {}}
    for uuid, gpu in readable_gpus(data.snapshot):
        replays = value_of(gpu.pcie.replay_count) if gpu.pcie is not None else None
        counts = _replay_counts((state.get("replays") or {}).get(uuid) or [], replays, gpu.sampled_at, config, fresh)
        if counts:
            new["replays"][uuid] = counts
        findings.extend(_replay_rate(gpu, replays, counts, config))
        link, limits = gpu.pcie, gpu.limits
        width = value_of(link.width) if link is not None else None
        gen = value_of(link.generation) if link is not None else None
        max_width, max_gen = value_of(limits.pcie_max_width), value_of(limits.pcie_max_generation)

        narrow = width < max_width if width is not None and max_width is not None else None
        run = extend_run((state.get("width") or {}).get(uuid), narrow, gpu.sampled_at, fresh)
        if run:
            new["width"][uuid] = run
        if run and narrow is not None and held_for(run, gpu.sampled_at, need):
            findings.append(finding(
                gpu, "pcie_width_degraded",
                f"PCIe link at x{width} of x{max_width} since {clock(run[0])} "
                f"({gpu.sampled_at - run[0]:.0f} s, threshold {need:g} s); {ADVICE}",
            ))
        elif narrow is None:
            findings.extend(unjudged(gpu, ("pcie_width_degraded",), "PCIe link width or its maximum unreadable"))
        elif narrow:
            findings.extend(seen_again(gpu, ("pcie_width_degraded",), f"PCIe link at x{width} of x{max_width}"))

        load, why = _under_load(gpu, config)
        below = gen < max_gen if gen is not None and max_gen is not None else None
        # unreadable (the generation, or the load of a link below it): None keeps the run; idle ends it
        slow = None if below is None or (below and load is None) else bool(below and load)
        run = extend_run((state.get("generation") or {}).get(uuid), slow, gpu.sampled_at, fresh)
        if run:
            new["generation"][uuid] = run
        if run and slow and held_for(run, gpu.sampled_at, need):
            findings.append(finding(
                gpu, "pcie_generation_degraded",
                f"PCIe link at Gen{gen} of Gen{max_gen} while {why}, since {clock(run[0])} "
                f"({gpu.sampled_at - run[0]:.0f} s, threshold {need:g} s); {ADVICE}",
            ))
        elif slow:
            findings.extend(seen_again(gpu, ("pcie_generation_degraded",), f"PCIe link at Gen{gen} of Gen{max_gen}"))
        elif below is not False:  # unreadable, or below the maximum while idle or of unknown load
            findings.extend(unjudged(gpu, ("pcie_generation_degraded",), f"PCIe link at Gen{gen} of Gen{max_gen}, "
                                     "not judged (generation or load unreadable, or the GPU idle)"))
    return new, findings


def _replay_counts(before: list[Any], count: int | None, now: float, config: Mapping[str, Any],
                   fresh: bool) -> list[list[float]]:
    """The window's [time, replay count] points after this sample's ``count`` (None: unreadable),
    read at ``now`` (see the state in the module docstring): older ones dropped but the last before
    the window, the counter's going back a restart."""
    points = [[float(t), float(c)] for t, c in before]
    if count is None or not fresh:
        return points
    window = config["replay_window_seconds"]
    if points and count < points[-1][1]:
        points = []  # the counter went back: the driver was reloaded
    if len(points) >= 2 and now - points[-2][0] < window / REPLAY_POINTS:
        points[-1] = [now, float(count)]
    else:
        points.append([now, float(count)])
    inside = next((i for i, (t, _) in enumerate(points) if t >= now - window), len(points))
    return points[max(inside - 1, 0):]


def _replay_rate(gpu: GpuSnapshot, count: int | None, points: list[list[float]], config: Mapping[str, Any]) -> list[Finding]:
    """``pcie_replay_rate`` when the counts span the window at or above the rate; an ``unjudged``
    mark while they do not span it yet, span more than twice it (a gap in the counts: the counter
    unreadable or NVML down for a while would dilute a rate), or the counter is unreadable now."""
    window, limit = config["replay_window_seconds"], config["replays_per_minute"]
    span = points[-1][0] - points[0][0] if points else 0.0
    if count is None or not window <= span <= 2 * window:
        why = "PCIe replay counter unreadable" if count is None else f"PCIe replays counted over {span:.0f} s, judged over {window:g}"
        return unjudged(gpu, ("pcie_replay_rate",), why)
    replays = points[-1][1] - points[0][1]
    rate = replays * 60.0 / span
    if rate < limit:
        return []
    return [finding(gpu, "pcie_replay_rate",
                    f"PCIe replays at {rate:.1f}/min over {span:.0f} s (+{replays:.0f}, counter {count}; threshold "
                    f"{limit:g}/min): the link retransmits; watch the trend, reseat or replace the riser if it rises")]


pcie.name = NAME  # type: ignore[attr-defined]
detector = pcie
