"""NVLink: links down, recoveries, and the rate of CRC errors and replays (gpu-faults.md §1.3, §2.3, §6).

Faults (severity, action and clearing: ``healthcheck/policy.yaml``):

- ``nvlink_down`` (critical, drain_and_reset_gpu, clean_samples): fewer active links than expected
  (``expected_active_links``, or the GPU's own ``limits.nvlink_count``), counting a link whose
  state is unreadable as up. Skipped while MIG mode is on: NVML reports those links down falsely
  (DCGM treats them as disabled). Skipped when no link is expected (``expected`` 0 or unknown);
  when the links could not be read, or the unreadable ones would make up the count, it is neither
  raised nor cleared (``unjudged``).
- ``nvlink_recovery_errors`` (critical, drain_and_reset_gpu, gpu_reset): the recovery counter
  grew by at least ``recovery_increase`` since the previous sample — the link went down and
  retrained (DCGM: any increase fails).
- ``nvlink_errors`` (warning, none) / ``nvlink_error_storm`` (critical, drain_and_reset_gpu): NVLink
  error events per second over the GPU's links, from the previous sample and the two
  ``sampled_at``, at or above ``error_per_second_warning`` / ``error_per_second_critical``. A
  replay is the link retransmitting after a CRC error (flit or data), so an error shows in two
  counters: a link's events are the larger of its CRC errors (flit + data) and its replays, each
  error counted once, and replays beyond the CRC errors (retransmissions for another cause) still
  count. Judged as a rate: a single replay is not a critical fault. Both clear on clean samples
  (the rate below the warning threshold).

Counters come from the previous snapshot of the same GPU (by UUID). A counter that went down was
reset (GPU reset, driver reload): that link is skipped for the sample, never a negative rate.
Unavailable counters are skipped link by link; while any failed with a real error the rate is a
lower bound, so the rate faults are not cleared (``unjudged``). Stateless: the previous snapshot is the memory.
"""

from __future__ import annotations

from typing import Any

from runtimekit.gpu.types import failed
from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import DetectorInput, Finding

from ._common import available, clock, finding, merge, previous_by_uuid, readable_gpus, unjudged

NAME = "nvlink"


def _deltas(gpu: Any, old: Any, counter: str) -> list[tuple[int, int, int]]:
    """(link, before, after) for links whose counter is readable in both samples and did not go back."""
    before = {link.link: getattr(link, counter) for link in old.nvlinks}
    out = []
    for link in gpu.nvlinks:
        now, was = getattr(link, counter), before.get(link.link)
        if was is not None and available(now, was) and now >= was:
            out.append((link.link, was, now))
    return out


def _events(parts: dict[str, list[tuple[int, int, int]]]) -> int:
    """Error events over the links: per link, the larger of its CRC errors (flit + data) and its
    replays (each CRC error is replayed, so it shows in both)."""
    crc: dict[int, int] = {}
    for name in ("CRC flit", "CRC data"):
        for link, was, now in parts[name]:
            crc[link] = crc.get(link, 0) + now - was
    replays = {link: now - was for link, was, now in parts["replays"]}
    return sum(max(crc.get(link, 0), replays.get(link, 0)) for link in crc.keys() | replays.keys())


def _unmeasured(gpu: Any, old: Any) -> str:
    """Why the error rate of ``gpu`` is not measured in full this sample ("" when it is): a link
    whose error counters failed with a real NVML error now or in the previous sample (a counter the
    device does not support is a fact, and never counted)."""
    links = sorted({link.link for sample in (gpu, old) if sample is not None for link in sample.nvlinks
                    if failed(link.crc_flit_errors) or failed(link.crc_data_errors) or failed(link.replay_errors)})
    return f"NVLink error counters of links {', '.join(map(str, links))} unreadable" if links else ""


def _counters(gpu: Any) -> list[tuple[Any, ...]]:
    """Every link's error counters, to tell at once whether any moved (the usual answer: none)."""
    return [(link.link, link.recovery_errors, link.crc_flit_errors, link.crc_data_errors, link.replay_errors)
            for link in gpu.nvlinks]


def nvlink(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    config = for_detector(NAME, data.config)
    before = previous_by_uuid(data.previous)
    findings: list[Finding] = []
    for uuid, gpu in readable_gpus(data.snapshot):
        mig = gpu.modes is not None and available(gpu.modes.mig_mode_current) and gpu.modes.mig_mode_current
        expected = config["expected_active_links"]
        if expected is None and available(gpu.limits.nvlink_count):
            expected = gpu.limits.nvlink_count
        if not mig and expected:
            up = [link.link for link in gpu.nvlinks if available(link.active) and link.active]
            down = [link.link for link in gpu.nvlinks if available(link.active) and not link.active]
            unknown = len(gpu.nvlinks) - len(up) - len(down)
            if not gpu.nvlinks or (len(up) < expected and unknown):
                findings.extend(unjudged(gpu, ("nvlink_down",), f"{unknown} of {len(gpu.nvlinks)} NVLink states unreadable"
                                         if gpu.nvlinks else "no NVLink could be read"))
            if gpu.nvlinks and len(up) + unknown < expected:
                which = f" (links {', '.join(map(str, down))} down)" if down else ""
                findings.append(finding(
                    gpu, "nvlink_down",
                    f"{len(up)} of {expected} expected NVLinks active{which} at {clock(gpu.sampled_at)}",
                ))

        old = before.get(uuid)
        unmeasured = _unmeasured(gpu, old)
        if unmeasured:
            findings.extend(unjudged(gpu, ("nvlink_errors", "nvlink_error_storm"), unmeasured))
        if old is None or _counters(gpu) == _counters(old):
            continue  # no counter moved: no growth, a rate of 0 (the thresholds are above 0)
        grown = [(link, was, now) for link, was, now in _deltas(gpu, old, "recovery_errors") if now > was]
        total = sum(now - was for _, was, now in grown)
        if grown and total >= config["recovery_increase"]:
            listed = ", ".join(f"link {link}: {was} → {now}" for link, was, now in grown)
            findings.append(finding(
                gpu, "nvlink_recovery_errors",
                f"NVLink recoveries +{total} since the sample at {clock(old.sampled_at)} "
                f"({listed}; threshold {config['recovery_increase']})",
            ))

        elapsed = gpu.sampled_at - old.sampled_at
        if elapsed <= 0:
            continue
        parts = {name: _deltas(gpu, old, counter) for name, counter in (
            ("CRC flit", "crc_flit_errors"), ("CRC data", "crc_data_errors"), ("replays", "replay_errors"))}
        totals = {name: sum(now - was for _, was, now in deltas) for name, deltas in parts.items()}
        rate = _events(parts) / elapsed
        if rate >= config["error_per_second_critical"]:
            fault, threshold = "nvlink_error_storm", config["error_per_second_critical"]
        elif rate >= config["error_per_second_warning"]:
            fault, threshold = "nvlink_errors", config["error_per_second_warning"]
        else:
            continue
        bad = sorted({link for deltas in parts.values() for link, was, now in deltas if now > was})
        counts = ", ".join(f"{name} +{count}" for name, count in totals.items())
        findings.append(finding(
            gpu, fault,
            f"NVLink errors at {rate:.1f}/s over {elapsed:.0f} s ({counts}; links {', '.join(map(str, bad))}; "
            f"threshold {threshold:g}/s)",
        ))
    return None, merge(findings)


nvlink.name = NAME  # type: ignore[attr-defined]
detector = nvlink
