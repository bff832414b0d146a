"""The batched field-value read: many counters in one nvmlDeviceGetFieldValues call per GPU.

One call per GPU and cycle replaces dozens of per-link calls (NVIDIA's recommended fast path,
DCGM does the same). Field IDs are NVML's ``NVML_FI_DEV_*`` constants; per-link fields carry the
link number as ``scopeId``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

from runtimekit.gpu.types import NOT_SUPPORTED, Reading, Unavailable

# Device-scoped fields read every cycle.
MEMORY_TEMP = pynvml.NVML_FI_DEV_MEMORY_TEMP  # HBM temperature, °C
PCIE_TX_BYTES = pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES  # bytes since driver load
PCIE_RX_BYTES = pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES
NVLINK_LINK_COUNT = pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT  # links the device has
RECOVERY_ACTION = pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION  # what the driver asks for (with XID 154)

# Link-scoped fields (scopeId = link), read every cycle for every link.
LINK_STATE = pynvml.NVML_FI_DEV_NVLINK_GET_STATE  # 1 = active
LINK_REPLAY = pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY  # TX replays, counter
LINK_RECOVERY = pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY  # link recoveries, counter
LINK_CRC_FLIT = pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC  # RX flow-control digit CRC errors, counter
LINK_TX_KIB = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX  # payload KiB, counter
LINK_RX_KIB = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX

DEVICE_FIELDS = (MEMORY_TEMP, PCIE_TX_BYTES, PCIE_RX_BYTES, RECOVERY_ACTION)

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

_VALUE_MEMBER = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def request(link_count: int) -> list[Any]:
    """The field list for one GPU: device fields, then every link field for every link."""
    fields: list[Any] = list(DEVICE_FIELDS)
    for link in range(link_count):
        fields.extend((field_id, link) for field_id in LINK_FIELDS)
    return fields


@dataclass(frozen=True, slots=True)
class FieldValues:
    """Answers of one batched read, looked up by (field id, scope id)."""

    values: dict[tuple[int, int], Reading[float | int]]

    def get(self, field_id: int, scope: int = 0) -> Reading[float | int]:
        return self.values.get((field_id, scope), NOT_SUPPORTED)


def parse(answers: Any) -> FieldValues:
    """Turn pynvml's c_nvmlFieldValue_t array into readings; a per-field error is Unavailable.

    pynvml's structs convert bytes to str in a Python ``__getattribute__``; these fields hold no
    text, so the plain object accessor reads the ctypes fields directly (~900 fields a cycle).
    """
    get = object.__getattribute__
    values: dict[tuple[int, int], Reading[float | int]] = {}
    for answer in answers:
        field_id, returned = get(answer, "fieldId"), get(answer, "nvmlReturn")
        key = (field_id, get(answer, "scopeId"))
        if returned == pynvml.NVML_SUCCESS:
            member = _VALUE_MEMBER.get(get(answer, "valueType"))
            values[key] = getattr(get(answer, "value"), member) if member else Unavailable("error", "unknown value type")
        elif returned == pynvml.NVML_ERROR_NOT_SUPPORTED:
            values[key] = NOT_SUPPORTED
        else:
            values[key] = Unavailable("error", f"field {field_id}: NVML error {returned}")
    return FieldValues(values)


def empty(reason: Unavailable) -> FieldValues:
    """What a failed batch call yields: every field unavailable for the same reason."""
    return _EmptyFieldValues({}, reason)


@dataclass(frozen=True, slots=True)
class _EmptyFieldValues(FieldValues):
    reason: Unavailable = NOT_SUPPORTED

    def get(self, field_id: int, scope: int = 0) -> Reading[float | int]:
        return self.reason
