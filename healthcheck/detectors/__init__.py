"""The detectors, one per file, each a pure ``(state, DetectorInput) -> (state, findings)``.

``DETECTORS`` is the registry, in evaluation order; ``run_detectors`` runs them all, each with its
own previous state and its own section of the thresholds.

Fault names by detector (details, severities and actions in each module's docstring):
lost_card (gpu_lost, gpu_missing, gpu_count_low), ecc (ecc_uncorrectable, ecc_contained,
ecc_uncontained, row_remap_pending, row_remap_failure, remapped_rows_exhausted,
retired_pages_pending, retired_pages_limit), memory_leak (memory_orphaned, gpu_ghost_busy,
process_memory_growth), driver (nvml_down, nvml_errors, xid_<code>, xid_<code>_repeated,
recovery_<action>), nvlink (nvlink_down, nvlink_recovery_errors, nvlink_errors,
nvlink_error_storm), compute_mode (compute_mode_prohibited, compute_mode_drift), thermal_power
(thermal_slowdown, thermal_slowdown_sustained, power_brake), pcie (pcie_width_degraded,
pcie_generation_degraded), slices (slice_memory_over_quota, slice_compute_over_share: on a slice,
held by the slice machine, healthcheck/slices.py). Severity, action, class and clearing of each: ``healthcheck/policy.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import Detector, DetectorInput, Finding

from ._common import readable_gpus
from .compute_mode import compute_mode
from .driver import driver
from .ecc import ecc
from .lost_card import lost_card
from .memory_leak import memory_leak
from .nvlink import nvlink
from .pcie import pcie
from .slices import slices
from .thermal_power import thermal_power

# The parts of detector states the store writes as soon as they change (the rest at most every
# store.DETECTOR_SAVE_SECONDS): what a restart must not forget even for a moment.
DURABLE: dict[str, tuple[str, ...]] = {
    "lost_card": ("known",),  # the GPUs the node is known to have (by UUID, index and bus id)
    "driver": ("bursts",),  # application-XID bursts of the last app_xid_window_seconds
    "ecc": ("base", "pending", "after", "explained"),  # the judged uncorrected-ECC baseline (contained errors)
}

DETECTORS: tuple[Detector, ...] = (
    lost_card, driver, ecc, nvlink, memory_leak, thermal_power, pcie, compute_mode, slices,  # type: ignore[assignment]
)


def run_detectors(states: Mapping[str, Any], data: DetectorInput) -> tuple[dict[str, Any], list[Finding]]:
    """Run every detector with its previous state (``states[name]``, None at first) and its own
    thresholds section (``data.config`` is the whole ``load_thresholds()`` mapping, or empty for
    the defaults). Returns the new states by name and all findings, in detector order.

    A detector that raises is not caught: the caller must keep its previous verdict rather than
    read "no findings" as healthy (gpu-faults.md §6: never report healthy on a failed probe).
    """
    new_states: dict[str, Any] = {}
    findings: list[Finding] = []
    for detector in DETECTORS:
        section = data.config.get(detector.name) if isinstance(data.config, Mapping) else None
        own = replace(data, config=for_detector(detector.name, section if isinstance(section, Mapping) else None))
        new_states[detector.name], found = detector(states.get(detector.name), own)
        findings.extend(found)
    return new_states, findings


__all__ = ["DETECTORS", "DURABLE", "readable_gpus", "run_detectors"]
