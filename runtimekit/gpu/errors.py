"""The GPU's error counters: ECC, retired pages, row remapping and NVLink errors, in base units.

Read every sampling cycle by ``NodeReader`` (``reader.py``); each returns readings, ``Unavailable``
where the driver does not support the counter (retired pages after Ampere, row remapping before).
The per-link NVLink data CRC counts are read again only when their total moved (``read_nvlinks``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

from runtimekit.gpu import fields
from runtimekit.gpu.convert import KIB, map_reading
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.types import Ecc, NvLink, Reading, RemappedRows, RetiredPages, is_available


def read_ecc(session: NvmlSession, handle: Any) -> Ecc:
    """ECC mode and the corrected/uncorrected counts, volatile (since driver load) and aggregate (lifetime)."""
    call = session.call
    mode = call("nvmlDeviceGetEccMode", handle)

    def count(error_type: int, counter: int) -> Reading[int]:
        return call("nvmlDeviceGetTotalEccErrors", handle, error_type, counter)

    corrected, uncorrected = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    return Ecc(
        enabled=map_reading(mode, lambda m: bool(m[0])),
        corrected_volatile=count(corrected, pynvml.NVML_VOLATILE_ECC),
        uncorrected_volatile=count(uncorrected, pynvml.NVML_VOLATILE_ECC),
        corrected_aggregate=count(corrected, pynvml.NVML_AGGREGATE_ECC),
        uncorrected_aggregate=count(uncorrected, pynvml.NVML_AGGREGATE_ECC),
    )

def read_retired_pages(session: NvmlSession, handle: Any) -> RetiredPages:
    """Pages retired for multiple single-bit and for double-bit errors, and a retirement pending (pre-A100)."""
    call = session.call
    single = call("nvmlDeviceGetRetiredPages", handle, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    if not is_available(single):  # not supported: skip the other two calls (row remapping era)
        return RetiredPages(single, single, single)
    double = call("nvmlDeviceGetRetiredPages", handle, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    pending = call("nvmlDeviceGetRetiredPagesPendingStatus", handle)
    return RetiredPages(len(single), map_reading(double, len), map_reading(pending, bool))

def read_remapped_rows(session: NvmlSession, handle: Any) -> RemappedRows:
    """Row remapping (A100 and later): correctable and uncorrectable rows, pending, failure."""
    rows = session.call("nvmlDeviceGetRemappedRows", handle)
    return RemappedRows(
        correctable=map_reading(rows, lambda r: int(r[0])),
        uncorrectable=map_reading(rows, lambda r: int(r[1])),
        pending=map_reading(rows, lambda r: bool(r[2])),
        failure=map_reading(rows, lambda r: bool(r[3])),
    )

# A link's data CRC count is read again at least this often even while the total stands still
# (seconds): a driver whose total field missed a link's count is not trusted for longer.
CRC_DATA_REREAD_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class CrcDataCounts:
    """The per-link data CRC counts of the last per-link read, and the total field then."""

    total: int
    read_at: float  # seconds (the reader's clock)
    counts: tuple[int, ...]


def read_nvlinks(
    session: NvmlSession, handle: Any, link_count: int, values: fields.FieldValues, last: CrcDataCounts | None, now: float
) -> tuple[tuple[NvLink, ...], CrcDataCounts | None]:
    """Per link: state, CRC flit/data, replay and recovery error counters, traffic in bytes; and the
    data CRC counts to hand back as ``last`` next cycle.

    All but CRC data come from the cycle's batched field values. CRC data has no per-link field
    past link 11, so it takes one call per link (18 on an H100) — made only when the total field
    (``fields.CRC_DATA_TOTAL``) moved since ``last``, or ``last`` is older than
    ``CRC_DATA_REREAD_SECONDS``, or is missing (a link's count or the total was unavailable then:
    read every cycle, so errors show as they happen). A total that stands still means no link's
    count moved; its counts are ``last``'s.
    """
    total = values.get(fields.CRC_DATA_TOTAL)
    crc_data: tuple[Reading[int], ...]
    if (last is not None and total == last.total and len(last.counts) == link_count
            and 0 <= now - last.read_at < CRC_DATA_REREAD_SECONDS):
        crc_data = last.counts
    else:
        crc_data = tuple(
            session.call("nvmlDeviceGetNvLinkErrorCounter", handle, link, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA)
            for link in range(link_count)
        )
        counts = [count for count in crc_data if type(count) is int]
        last = CrcDataCounts(total, now, tuple(counts)) if type(total) is int and len(counts) == link_count else None
    links: list[NvLink] = []
    for link in range(link_count):
        links.append(
            NvLink(
                link=link,
                active=map_reading(values.get(fields.LINK_STATE, link), lambda v: v == pynvml.NVML_FEATURE_ENABLED),
                crc_flit_errors=map_reading(values.get(fields.LINK_CRC_FLIT, link), int),
                crc_data_errors=crc_data[link],
                replay_errors=map_reading(values.get(fields.LINK_REPLAY, link), int),
                recovery_errors=map_reading(values.get(fields.LINK_RECOVERY, link), int),
                tx_bytes=map_reading(values.get(fields.LINK_TX_KIB, link), lambda kib: int(kib) * KIB),
                rx_bytes=map_reading(values.get(fields.LINK_RX_KIB, link), lambda kib: int(kib) * KIB),
            )
        )
    return tuple(links), last
