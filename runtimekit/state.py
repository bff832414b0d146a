"""NodeState: the one place where the sampler publishes and everyone else reads.

The sampler, the XID event thread and the attributor write; collectors, health checks and the slicer read.
Everything published is immutable (a ``NodeSnapshot``, a frozen mapping of XID counts), so a
reader takes a reference and never sees a half-written value. ``version`` grows by one on every
publication so that caches (the exposition) know when to re-render.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from runtimekit.attribution.types import AttributionSnapshot
from runtimekit.gpu.types import NodeSnapshot, XidEvent

if TYPE_CHECKING:  # healthcheck depends on runtimekit, never the other way at run time
    from runtimekit.healthcheck.types import NodeHealth

XidKey = tuple[int, str, int]  # (gpu index, gpu uuid, xid code)
XID_LOG_SIZE = 4096


@dataclass(frozen=True, slots=True)
class SamplerStats:
    """How the sampler has been doing: for self-metrics and logs."""

    cycles_total: int = 0
    failures_total: int = 0  # cycles in which NVML could not be used at all
    last_duration_seconds: float = 0.0
    last_cpu_seconds: float = 0.0  # process CPU time spent by the last cycle (thread time)


@dataclass(slots=True)
class NodeState:
    """The shared, latest view of the node. Thread-safe for one writer per field."""

    snapshot: NodeSnapshot | None = None
    sampler: SamplerStats = field(default_factory=SamplerStats)
    attribution: AttributionSnapshot | None = None
    health: NodeHealth | None = None  # the health checker's verdict; None until its first evaluation
    xid_log: tuple[tuple[int, XidEvent], ...] = ()  # the last XID_LOG_SIZE (sequence, event)
    xid_sequence: int = 0
    xid_counts: Mapping[XidKey, int] = field(default_factory=lambda: MappingProxyType({}))
    version: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _subscribers: list[Callable[[], None]] = field(default_factory=list)

    def publish_snapshot(self, snapshot: NodeSnapshot, stats: SamplerStats) -> None:
        """Publish a new sampling cycle (called from the sampler)."""
        with self._lock:
            self.snapshot = snapshot
            self.sampler = stats
            self.version += 1
        self._notify()

    def publish_attribution(self, attribution: AttributionSnapshot) -> None:
        """Publish a new attribution refresh (called from the attributor)."""
        with self._lock:
            self.attribution = attribution
            self.version += 1
        self._notify()

    def record_xid(self, event: XidEvent) -> None:
        """Count one XID event and keep it in the recent log (called from the event thread).
        Counts only ever grow."""
        key = (event.gpu_index, event.uuid, event.xid)
        with self._lock:
            counts = dict(self.xid_counts)
            counts[key] = counts.get(key, 0) + 1
            self.xid_counts = MappingProxyType(counts)
            self.xid_sequence += 1
            self.xid_log = (*self.xid_log[-(XID_LOG_SIZE - 1):], (self.xid_sequence, event))
            self.version += 1
        self._notify()

    def xids_after(self, sequence: int) -> tuple[tuple[int, XidEvent], ...]:
        """(sequence, event) of the XIDs recorded after ``sequence``, oldest first."""
        return tuple(entry for entry in self.xid_log if entry[0] > sequence)

    def publish_health(self, health: NodeHealth) -> None:
        """Publish the health verdict (called from the health checker)."""
        with self._lock:
            self.health = health
            self.version += 1
        self._notify()

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from the publishing thread) after each publication; returns an unsubscribe."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def _notify(self) -> None:
        for callback in list(self._subscribers):
            callback()
