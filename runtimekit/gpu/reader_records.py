"""What the GPU reader keeps of discovery reads that failed, and reports of readings that failed.

Identity and limits are read at discovery and again on a slow cadence (``reader.py``): a re-read
keeps the last good value of each field that failed (``keep_good``) and is retried next cycle
until complete. A snapshot names every reading that failed with a real error
(``failed_readings``) for the self-metrics and logs; a GPU that cannot be read at all is a
snapshot of nothing but that reason (``unreadable_snapshot``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

from runtimekit.gpu.types import GpuIdentity, GpuLimits, GpuSnapshot, Unavailable, failed, is_available

_Record = TypeVar("_Record", GpuIdentity, GpuLimits)


def complete(record: GpuIdentity | GpuLimits) -> bool:
    """False when a discovery read failed with a real error: it is then read again next cycle."""
    if isinstance(record, GpuIdentity) and not is_available(record.uuid):
        return False
    return not any(failed(getattr(record, name)) for name in record.__slots__)


def keep_good(known: _Record, fresh: _Record) -> _Record:
    """``fresh``, except that a field which failed in it keeps its value from ``known`` where that
    one did not fail: a GPU that starts failing keeps what was read while it answered."""
    kept = {name: getattr(known, name) for name in known.__slots__
            if failed(getattr(fresh, name)) and not failed(getattr(known, name))}
    return replace(fresh, **kept) if kept else fresh


def limits_read_at(fresh: GpuLimits, now: float, before: float = float("-inf")) -> float:
    """When the limits count as read (Unix seconds): ``now`` after a complete read, else ``before``
    (minus infinity at discovery), so that an incomplete read is retried at the next cycle."""
    return now if complete(fresh) else before


def unreadable_snapshot(index: int, now: float, why: Unavailable, lost: bool = False) -> GpuSnapshot:
    identity = GpuIdentity(why, why, why, why, why, why, why, why)
    limits = GpuLimits(why, why, why, why, why, why, why, why, why, why, why, why, why)
    return GpuSnapshot(
        index, identity, limits, now, lost, None, None, None, None, None, None, None, None, None, (), None, (),
        (("device", why.detail or why.reason),),
    )


def failed_readings(snapshot: GpuSnapshot, *listings: tuple[str, Unavailable | None]) -> tuple[tuple[str, str], ...]:
    """The readings that failed with a real error (not 'not supported'), for self-metrics and logs.

    Names are ``group.field`` (``remapped_rows.pending``, ``nvlinks[3].replay_errors``,
    ``mig_devices[0].profile`` by NVML index), and the name of each failed listing (``processes``,
    ``mig_devices``: the list is then incomplete).
    """
    found: list[tuple[str, str]] = []
    groups: list[tuple[str, Any]] = [
        ("limits", snapshot.limits), ("utilization", snapshot.utilization), ("memory", snapshot.memory),
        ("thermal", snapshot.thermal), ("power", snapshot.power), ("clocks", snapshot.clocks),
        ("pcie", snapshot.pcie), ("ecc", snapshot.ecc), ("retired_pages", snapshot.retired_pages),
        ("remapped_rows", snapshot.remapped_rows), ("modes", snapshot.modes),
    ]
    groups += [(f"nvlinks[{link.link}]", link) for link in snapshot.nvlinks]
    groups += [(f"mig_devices[{device.index}]", device) for device in snapshot.mig_devices]
    for group_name, group in groups:
        if group is None:
            continue
        for name in group.__slots__:
            value = getattr(group, name)
            if failed(value):
                found.append((f"{group_name}.{name}", value.detail or value.reason))
    for name, failure in listings:
        if failure is not None and failed(failure):
            found.append((name, failure.detail or failure.reason))
    return tuple(found)
