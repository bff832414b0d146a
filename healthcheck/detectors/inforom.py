"""InfoROM: the GPU's on-board store of ECC and row-remap records and of its configuration
(gpu-faults.md §1.3 DCGM's INFOROM watch, §6 "InfoROM corrupt").

Fault (severity, action and clearing: ``healthcheck/policy.yaml``):

- ``inforom_corrupted`` (warning, drain_and_reset_gpu, clean_samples): ``nvmlDeviceValidateInforom``
  answered NVML_ERROR_CORRUPTED_INFOROM. What the GPU records of its own errors may be lost, and
  its configuration may not load: kept off new work; a reset may restore it, a corruption that
  stays means an RMA (the evidence says so).

The InfoROM is validated with the limits, on their slow cadence (``sampling.limits_refresh_seconds``),
so the fault is raised and cleared that late at most. A validation that failed with another error
neither raises nor clears it (``unjudged``); a GPU or driver that cannot validate
(NVML_ERROR_NOT_SUPPORTED) is not judged.
"""

from __future__ import annotations

from typing import Any

from runtimekit.gpu.types import failed
from runtimekit.healthcheck.types import DetectorInput, Finding

from ._common import finding, readable_gpus, unjudged, unreadable

NAME = "inforom"
FAULTS = ("inforom_corrupted",)


def inforom(state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]:
    findings: list[Finding] = []
    for _, gpu in readable_gpus(data.snapshot):
        valid = gpu.limits.inforom_valid
        if valid is False:
            findings.append(finding(
                gpu, "inforom_corrupted",
                "the InfoROM failed its checksum (nvmlDeviceValidateInforom: NVML_ERROR_CORRUPTED_INFOROM): the GPU's "
                f"ECC and row-remap records may be lost; reset it (nvidia-smi -i {gpu.index} -r) and, if it stays, "
                "have the board replaced",
            ))
        elif failed(valid):
            findings.extend(unjudged(gpu, FAULTS, f"InfoROM not validated ({unreadable(valid)})"))
    return None, findings


inforom.name = NAME  # type: ignore[attr-defined]
detector = inforom
