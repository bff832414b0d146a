"""NVLink: links down, replays, recoveries and CRC error rates (gpu-faults.md §1.3 DCGM, §2.3, §6).

Faults (severity, action, clears):

- ``nvlink_down`` (critical, drain_and_reset_gpu, clean_samples): fewer active links than expected
  (``expected_active_links``, or the GPU's own ``limits.nvlink_count``), counting a link whose
  state is unreadable as up. Skipped while MIG mode is on: NVML reports those links down falsely
  (DCGM treats them as disabled). Skipped when the GPU has no links or none were read.
- ``nvlink_replay_errors`` / ``nvlink_recovery_errors`` (critical, drain_and_reset_gpu, gpu_reset):
  the counter grew by at least ``replay_increase`` / ``recovery_increase`` since the previous
  sample (DCGM: any increase fails).
- ``nvlink_crc_errors``: CRC flit + data errors per second over the GPU's links, from the previous
  sample and the two ``sampled_at``: at or above ``crc_per_second_critical`` critical
  (drain_and_reset_gpu), at or above ``crc_per_second_warning`` warning (no action: watch it);
  clean_samples.

Counters come from the previous snapshot of the same GPU (by UUID). A counter that went down was
reset (GPU reset, driver reload): that link is skipped for the sample, never a negative rate.
Unavailable counters are skipped link by link.
"""

from __future__ import annotations

from typing import Any

from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import (
    CLEARS_ON_RESET,
    CLEARS_WHEN_CLEAN,
    CRITICAL,
    DRAIN_AND_RESET_GPU,
    NONE,
    WARNING,
    DetectorInput,
    Finding,
)

from ._common import available, clock, finding, merge, previous_by_uuid, readable_gpus

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


def nvlink(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    config = for_detector(NAME, data.config)
    before = previous_by_uuid(data.previous)
    findings: list[Finding] = []
    for gpu in readable_gpus(data.snapshot):
        mig = gpu.modes is not None and available(gpu.modes.mig_mode_current) and gpu.modes.mig_mode_current
        expected = config["expected_active_links"]
        if expected is None and available(gpu.limits.nvlink_count):
            expected = gpu.limits.nvlink_count
        if not mig and expected and gpu.nvlinks:
            up = [link.link for link in gpu.nvlinks if available(link.active) and link.active]
            down = [link.link for link in gpu.nvlinks if available(link.active) and not link.active]
            unknown = len(gpu.nvlinks) - len(up) - len(down)
            if len(up) + unknown < expected:
                which = f" (links {', '.join(map(str, down))} down)" if down else ""
                findings.append(finding(
                    gpu, "nvlink_down", CRITICAL, DRAIN_AND_RESET_GPU,
                    f"{len(up)} of {expected} expected NVLinks active{which} at {clock(gpu.sampled_at)}",
                    CLEARS_WHEN_CLEAN,
                ))

        old = before.get(gpu.uuid)
        if old is None:
            continue
        for counter, fault, key in (
            ("replay_errors", "nvlink_replay_errors", "replay_increase"),
            ("recovery_errors", "nvlink_recovery_errors", "recovery_increase"),
        ):
            grown = [(link, was, now) for link, was, now in _deltas(gpu, old, counter) if now > was]
            total = sum(now - was for _, was, now in grown)
            if grown and total >= config[key]:
                links = ", ".join(f"link {link}: {was} → {now}" for link, was, now in grown)
                findings.append(finding(
                    gpu, fault, CRITICAL, DRAIN_AND_RESET_GPU,
                    f"NVLink {counter.replace('_', ' ')} +{total} since the sample at {clock(old.sampled_at)} "
                    f"({links}; threshold {config[key]})",
                    CLEARS_ON_RESET,
                ))

        elapsed = gpu.sampled_at - old.sampled_at
        if elapsed <= 0:
            continue
        flit = _deltas(gpu, old, "crc_flit_errors")
        data_crc = _deltas(gpu, old, "crc_data_errors")
        flit_total = sum(now - was for _, was, now in flit)
        data_total = sum(now - was for _, was, now in data_crc)
        rate = (flit_total + data_total) / elapsed
        if rate >= config["crc_per_second_critical"]:
            severity, action, threshold = CRITICAL, DRAIN_AND_RESET_GPU, config["crc_per_second_critical"]
        elif rate >= config["crc_per_second_warning"]:
            severity, action, threshold = WARNING, NONE, config["crc_per_second_warning"]
        else:
            continue
        links = sorted({link for link, was, now in flit + data_crc if now > was})
        findings.append(finding(
            gpu, "nvlink_crc_errors", severity, action,
            f"NVLink CRC errors at {rate:.1f}/s over {elapsed:.0f} s (flit +{flit_total}, data +{data_total}; "
            f"links {', '.join(map(str, links))}; threshold {threshold:g}/s)",
            CLEARS_WHEN_CLEAN,
        ))
    return None, merge(findings)


nvlink.name = NAME  # type: ignore[attr-defined]
detector = nvlink
