"""The batched field-value read: many counters in one nvmlDeviceGetFieldValues call per GPU.

One call per GPU and cycle replaces dozens of per-link calls (NVIDIA's recommended fast path,
DCGM does the same). Field IDs are NVML's ``NVML_FI_DEV_*`` constants; per-link fields carry the
link number as ``scopeId``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

import pynvml

from runtimekit.gpu.types import NOT_SUPPORTED, Reading, Unavailable

# Device-scoped fields read every cycle.
MEMORY_TEMP = pynvml.NVML_FI_DEV_MEMORY_TEMP  # HBM temperature, °C
PCIE_TX_BYTES = pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES  # bytes since driver load
PCIE_RX_BYTES = pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES
NVLINK_LINK_COUNT = pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT  # links the device has
RECOVERY_ACTION = pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION  # what the driver asks for (with XID 154)
# Data CRC errors summed over every link, counter: while it stands still, no link's count moved
# (the per-link counts have no field for links past 11: ``errors.read_nvlinks`` reads them).
CRC_DATA_TOTAL = pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL

# Link-scoped fields (scopeId = link), read every cycle for every link.
LINK_STATE = pynvml.NVML_FI_DEV_NVLINK_GET_STATE  # 1 = active
LINK_REPLAY = pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY  # TX replays, counter
LINK_RECOVERY = pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY  # link recoveries, counter
LINK_CRC_FLIT = pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC  # RX flow-control digit CRC errors, counter
LINK_TX_KIB = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX  # payload KiB, counter
LINK_RX_KIB = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX

DEVICE_FIELDS = (MEMORY_TEMP, PCIE_TX_BYTES, PCIE_RX_BYTES, RECOVERY_ACTION, CRC_DATA_TOTAL)

# nvmlDeviceGpuRecoveryAction_t (nvml.h) -> the names GpuSnapshot.recovery_action uses.
RECOVERY_ACTIONS = {
    pynvml.NVML_GPU_RECOVERY_ACTION_NONE: "none",
    pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET: "gpu_reset",
    pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT: "node_reboot",
    pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P: "drain_p2p",
    pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET: "drain_and_reset",
    pynvml.NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN: "recover_imex_domain",
    pynvml.NVML_GPU_RECOVERY_ACTION_BUS_RESET: "bus_reset",
    pynvml.NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT: "system_reboot",
}
LINK_FIELDS = (LINK_STATE, LINK_REPLAY, LINK_RECOVERY, LINK_CRC_FLIT, LINK_TX_KIB, LINK_RX_KIB)


@functools.lru_cache(maxsize=8)
def request(link_count: int) -> tuple[int | tuple[int, int], ...]:
    """The field list for one GPU: device fields, then every link field for every link (the same
    tuple for the same link count, so the session builds its request array once)."""
    fields: list[int | tuple[int, int]] = list(DEVICE_FIELDS)
    for link in range(link_count):
        fields.extend((field_id, link) for field_id in LINK_FIELDS)
    return tuple(fields)


@dataclass(frozen=True, slots=True)
class FieldValues:
    """Answers of one batched read, looked up by (field id, scope id)."""

    values: dict[tuple[int, int], Reading[float | int]]

    def get(self, field_id: int, scope: int = 0) -> Reading[float | int]:
        return self.values.get((field_id, scope), NOT_SUPPORTED)


def parse(answers: Iterable[tuple[int, int, int, float | int | None]]) -> FieldValues:
    """Turn the session's field-value rows (field id, scope id, nvmlReturn, value: ``nvml.py``)
    into readings; a per-field error is Unavailable."""
    values: dict[tuple[int, int], Reading[float | int]] = {}
    for field_id, scope, returned, value in answers:
        if returned == pynvml.NVML_SUCCESS:
            values[(field_id, scope)] = value if value is not None else Unavailable("error", "unknown value type")
        elif returned == pynvml.NVML_ERROR_NOT_SUPPORTED:
            values[(field_id, scope)] = NOT_SUPPORTED
        else:
            values[(field_id, scope)] = Unavailable("error", f"field {field_id}: NVML error {returned}")
    return FieldValues(values)


def empty(reason: Unavailable) -> FieldValues:
    """What a failed batch call yields: every field unavailable for the same reason."""
    return _EmptyFieldValues({}, reason)


@dataclass(frozen=True, slots=True)
class _EmptyFieldValues(FieldValues):
    reason: Unavailable = NOT_SUPPORTED

    def get(self, field_id: int, scope: int = 0) -> Reading[float | int]:
        return self.reason
