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
# Link error counters summed over every link: while a total stands still, no link's count of it
# moved, and the per-link counts are not read again (``errors.read_nvlinks``). Data CRC has no
# per-link field past link 11: its per-link counts take one call per link.
CRC_FLIT_TOTAL = pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL
CRC_DATA_TOTAL = pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL
REPLAY_TOTAL = pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL
RECOVERY_TOTAL = pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL
ERROR_TOTALS = (CRC_FLIT_TOTAL, CRC_DATA_TOTAL, REPLAY_TOTAL, RECOVERY_TOTAL)

# Link-scoped fields (scopeId = link): state and traffic every cycle for every link; the error
# counters in a second batch, when a total moved (``errors.read_nvlinks``).
LINK_STATE = pynvml.NVML_FI_DEV_NVLINK_GET_STATE  # 1 = active
LINK_TX_KIB = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX  # payload KiB, counter
LINK_RX_KIB = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
LINK_REPLAY = pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY  # TX replays, counter
LINK_RECOVERY = pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY  # link recoveries, counter
LINK_CRC_FLIT = pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC  # RX flow-control digit CRC errors, counter

DEVICE_FIELDS = (MEMORY_TEMP, PCIE_TX_BYTES, PCIE_RX_BYTES, RECOVERY_ACTION, *ERROR_TOTALS)

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
LINK_FIELDS = (LINK_STATE, LINK_TX_KIB, LINK_RX_KIB)
LINK_ERROR_FIELDS = (LINK_CRC_FLIT, LINK_REPLAY, LINK_RECOVERY)


@functools.lru_cache(maxsize=8)
def request(link_count: int) -> tuple[int | tuple[int, int], ...]:
    """The field list for one GPU and cycle: device fields, then the link fields for every link
    (the same tuple for the same link count, so the session builds its request array once)."""
    fields: list[int | tuple[int, int]] = list(DEVICE_FIELDS)
    for link in range(link_count):
        fields.extend((field_id, link) for field_id in LINK_FIELDS)
    return tuple(fields)


@functools.lru_cache(maxsize=8)
def error_request(link_count: int) -> tuple[tuple[int, int], ...]:
    """The per-link error counter fields of every link."""
    return tuple((field_id, link) for link in range(link_count) for field_id in LINK_ERROR_FIELDS)


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


def answers(batch: Iterable[tuple[int, int, int, float | int | None]] | Unavailable) -> FieldValues:
    """A batch call's answer as readings: ``parse`` of its rows, or every field ``batch`` when the
    call itself failed."""
    return empty(batch) if isinstance(batch, Unavailable) else parse(batch)


def empty(reason: Unavailable) -> FieldValues:
    """What a failed batch call yields: every field unavailable for the same reason."""
    return _EmptyFieldValues({}, reason)


@dataclass(frozen=True, slots=True)
class _EmptyFieldValues(FieldValues):
    reason: Unavailable = NOT_SUPPORTED

    def get(self, field_id: int, scope: int = 0) -> Reading[float | int]:
        return self.reason
