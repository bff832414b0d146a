"""The GPU's error counters: ECC, retired pages, row remapping and NVLink errors, in base units.

Read every sampling cycle by ``NodeReader`` (``reader.py``); each returns readings, ``Unavailable``
where the driver does not support the counter (retired pages after Ampere, row remapping before).
The per-link NVLink error counts are read again only when their totals moved (``read_nvlinks``).
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

# A link's error counts are read again at least this often even while their totals stand still
# (seconds): a driver whose total missed a link's count is not trusted for longer.
ERRORS_REREAD_SECONDS = 30.0

# Per link: (CRC flit, CRC data, replay, recovery) error counts.
_LinkErrors = tuple[Reading[int], Reading[int], Reading[int], Reading[int]]


@dataclass(frozen=True, slots=True)
class LinkErrorCounts:
    """The per-link error counts of the last per-link read, and their totals (``fields.ERROR_TOTALS``) then."""

    totals: tuple[Reading[float | int], ...]  # all ints: a total that could not be read keeps no counts
    read_at: float  # seconds (the reader's clock)
    counts: tuple[_LinkErrors, ...]


def read_nvlinks(
    session: NvmlSession, handle: Any, link_count: int, values: fields.FieldValues, last: LinkErrorCounts | None,
    now: float,
) -> tuple[tuple[NvLink, ...], LinkErrorCounts | None]:
    """Per link: state, traffic in bytes, and the CRC flit/data, replay and recovery error counters;
    and the error counts to hand back as ``last`` next cycle.

    State and traffic come from the cycle's batched field values (``values``). The error counts
    take a second batch (CRC flit, replay, recovery per link) and one call per link for CRC data
    (no per-link field past link 11) — made only when a total in ``values`` (``fields.ERROR_TOTALS``)
    moved since ``last``, or ``last`` is older than ``ERRORS_REREAD_SECONDS``, or is missing (a
    total or a count was unavailable then: read every cycle, so errors show as they happen). A
    total that stands still means no link's count of it moved; the counts are ``last``'s.
    """
    totals = tuple(values.get(field_id) for field_id in fields.ERROR_TOTALS)
    counts: tuple[_LinkErrors, ...]
    if (last is not None and totals == last.totals and len(last.counts) == link_count
            and 0 <= now - last.read_at < ERRORS_REREAD_SECONDS):
        counts = last.counts
    else:
        counts = _read_link_errors(session, handle, link_count)
        readable = all(type(total) is int for total in totals) and all(
            type(count) is int for link in counts for count in link)
        last = LinkErrorCounts(totals, now, counts) if readable else None
    links: list[NvLink] = []
    for link in range(link_count):
        crc_flit, crc_data, replay, recovery = counts[link]
        links.append(
            NvLink(
                link=link,
                active=map_reading(values.get(fields.LINK_STATE, link), lambda v: v == pynvml.NVML_FEATURE_ENABLED),
                crc_flit_errors=crc_flit,
                crc_data_errors=crc_data,
                replay_errors=replay,
                recovery_errors=recovery,
                tx_bytes=map_reading(values.get(fields.LINK_TX_KIB, link), lambda kib: int(kib) * KIB),
                rx_bytes=map_reading(values.get(fields.LINK_RX_KIB, link), lambda kib: int(kib) * KIB),
            )
        )
    return tuple(links), last


def _read_link_errors(session: NvmlSession, handle: Any, link_count: int) -> tuple[_LinkErrors, ...]:
    """Every link's (CRC flit, CRC data, replay, recovery) error counts, read now."""
    batch = session.call("nvmlDeviceGetFieldValues", handle, fields.error_request(link_count))
    values = fields.answers(batch)
    counts = []
    for link in range(link_count):
        crc_data = session.call("nvmlDeviceGetNvLinkErrorCounter", handle, link, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA)
        counts.append((
            map_reading(values.get(fields.LINK_CRC_FLIT, link), int),
            crc_data,
            map_reading(values.get(fields.LINK_REPLAY, link), int),
            map_reading(values.get(fields.LINK_RECOVERY, link), int),
        ))
    return tuple(counts)
