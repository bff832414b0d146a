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
pcie_generation_degraded, pcie_replay_rate), inforom (inforom_corrupted), slices (slice_memory_over_quota, slice_compute_over_share: on a slice,
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
from .inforom import inforom
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
    lost_card, driver, ecc, nvlink, memory_leak, thermal_power, pcie, compute_mode, inforom, slices,  # type: ignore[assignment]
)


class DetectorsFailed(Exception):
    """Some detectors raised. ``failed``: name -> why, for each that raised on a fresh state too (a
    bug: its state is the one it was given, its findings none); ``dropped``: name -> why, for each
    that raised on its given state (a saved state it cannot use) and ran again from a fresh one.
    ``states`` and ``findings`` are every detector's results, as ``run_detectors`` returns them."""

    def __init__(self, states: dict[str, Any], findings: list[Finding], failed: dict[str, str],
                 dropped: dict[str, str]) -> None:
        super().__init__("; ".join(f"{name}: {why}" for name, why in {**dropped, **failed}.items()))
        self.states, self.findings, self.failed, self.dropped = states, findings, failed, dropped


def run_detectors(states: Mapping[str, Any], data: DetectorInput) -> tuple[dict[str, Any], list[Finding]]:
    """Run every detector with its previous state (``states[name]``, None at first) and its own
    thresholds section (``data.config`` is the whole ``load_thresholds()`` mapping, or empty for
    the defaults). Returns the new states by name and all findings, in detector order.

    Each detector runs on its own: one that raises never stops the others (a bug in one must not
    silence the lost-card and XID checks). One that raises on the state it was given runs again
    from a fresh state (None): a state read back from disk that it cannot use (a hand edit, a
    downgrade) must not fail it for good. When any raised, ``DetectorsFailed`` carries every
    result: the caller must not read a failed detector's silence as healthy (gpu-faults.md §6:
    never report healthy on a failed probe), and decides what a dropped state costs (``DURABLE``).
    """
    new_states: dict[str, Any] = {}
    findings: list[Finding] = []
    failed: dict[str, str] = {}
    dropped: dict[str, str] = {}
    for detector in DETECTORS:
        section = data.config.get(detector.name) if isinstance(data.config, Mapping) else None
        own = replace(data, config=for_detector(detector.name, section if isinstance(section, Mapping) else None))
        given = states.get(detector.name)
        try:
            new_states[detector.name], found = detector(given, own)
        except Exception as error:  # noqa: BLE001 - a detector bug is a failed probe of its own faults only
            if given is None:
                new_states[detector.name], failed[detector.name] = given, _why(error)
                continue
            try:
                new_states[detector.name], found = detector(None, own)
            except Exception as again:  # noqa: BLE001 - as above, and not its state's fault
                new_states[detector.name], failed[detector.name] = given, _why(again)
                continue
            dropped[detector.name] = _why(error)
        findings.extend(found)
    if failed or dropped:
        raise DetectorsFailed(new_states, findings, failed, dropped)
    return new_states, findings


def _why(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"[:200]


__all__ = ["DETECTORS", "DURABLE", "DetectorsFailed", "readable_gpus", "run_detectors"]
