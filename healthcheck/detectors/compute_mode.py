"""Compute mode: configuration drift, not hardware (gpu-faults.md §2.3, §6 "Compute-mode drift").

Faults (severity, action and clearing: ``healthcheck/policy.yaml``):

- ``compute_mode_prohibited`` (critical, none, clean_samples): the GPU is in PROHIBITED mode — no
  context can be created, the GPU is unusable whatever the policy says.
- ``compute_mode_drift`` (warning, none, clean_samples): the mode differs from the node's declared
  policy (``expected``; null disables this check).

The action is ``none``: no step of the ladder fixes a setting (a reset or reboot is not the
cure); the evidence says how to restore it, and the severity keeps work off a prohibited GPU
until it is restored. Both clear once the mode is back. An unreadable mode neither raises nor
clears them (``unjudged``).
"""

from __future__ import annotations

from typing import Any

from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import DetectorInput, Finding

from ._common import available, finding, readable_gpus, unjudged, unreadable

NAME = "compute_mode"
FAULTS = ("compute_mode_prohibited", "compute_mode_drift")
NVIDIA_SMI = {"default": "DEFAULT", "exclusive_thread": "EXCLUSIVE_THREAD", "prohibited": "PROHIBITED",
              "exclusive_process": "EXCLUSIVE_PROCESS"}


def compute_mode(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    expected = for_detector(NAME, data.config)["expected"]
    findings: list[Finding] = []
    for _, gpu in readable_gpus(data.snapshot):
        if gpu.modes is None or not available(gpu.modes.compute_mode):
            reading = gpu.modes.compute_mode if gpu.modes is not None else None
            findings.extend(unjudged(gpu, FAULTS, f"compute mode unreadable ({unreadable(reading)})"))
            continue
        mode = gpu.modes.compute_mode
        restore = f"nvidia-smi -i {gpu.index} -c {NVIDIA_SMI.get(expected or 'default', 'DEFAULT')}"
        if mode == "prohibited":
            findings.append(finding(
                gpu, "compute_mode_prohibited",
                f"compute mode is prohibited: no CUDA context can be created (policy: {expected or 'not set'}); "
                f"restore it with {restore}",
            ))
        elif expected is not None and mode != expected:
            findings.append(finding(
                gpu, "compute_mode_drift",
                f"compute mode is {mode}, the node's policy is {expected}; restore it with {restore}",
            ))
    return None, findings


compute_mode.name = NAME  # type: ignore[attr-defined]
detector = compute_mode
