"""NodeState: typed topics the producers publish to, and one immutable view of the node for readers.

Producers (the sampler, the XID event thread, the attributor, the health checker; later the slicer
and topology discovery) each publish to their own topic. Every publication builds a new frozen
``NodeView`` — the node at one moment: the latest value of every topic, each topic's own version
and publication time — and swaps it in under a lock. Readers never see a half-written value and
never mix two moments: a collector renders one ``view()``, a component ``watch``es for views.

``watch(*topics)`` is the one bridge from the publishing threads to the event loop: it wakes the
watching task (``call_soon_threadsafe``) after a publication on a topic it asked for, and yields
the newest view — coalescing, never queueing, so a slow reader skips to the latest moment. Plain
callbacks (``subscribe``) run on the publishing thread; one that raises is logged with its
traceback and never reaches the publisher.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from runtimekit.attribution.types import AttributionSnapshot
from runtimekit.gpu.types import NodeSnapshot, XidEvent
from runtimekit.state.health import STATE_UNWRITABLE, NodeHealth
from runtimekit.state.slices import SliceTable
from runtimekit.state.topology import Topology

log = logging.getLogger("runtimekit.state")

XidKey = tuple[int, str, int]  # (gpu index, gpu uuid, xid code)
XID_LOG_SIZE = 4096

# The topics, one per producer. A view carries each topic's version (publications so far).
SAMPLE = "sample"
ATTRIBUTION = "attribution"
XIDS = "xids"
HEALTH = "health"
COMPONENTS = "components"
SLICES = "slices"
TOPOLOGY = "topology"
TOPICS: tuple[str, ...] = (SAMPLE, ATTRIBUTION, XIDS, HEALTH, COMPONENTS, SLICES, TOPOLOGY)


@dataclass(frozen=True, slots=True)
class SamplerStats:
    """How the sampler has been doing: for self-metrics and logs."""

    cycles_total: int = 0
    failures_total: int = 0  # cycles in which NVML could not be used at all
    last_duration_seconds: float = 0.0
    last_cpu_seconds: float = 0.0  # process CPU time spent by the last cycle (thread time)
    last_success_at: float | None = None  # unix time the last cycle that could use NVML started
    # Seconds the sampler waits between cycles now: its interval, or the NVML retry interval while
    # NVML is down (0 before the first cycle): how old a sample may be before it is late.
    period_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class ComponentStatus:
    """A supervised component as its supervisor last saw it (``runtimekit.supervisor``)."""

    name: str
    up: bool = False
    required: bool = True  # the node is not ready while a required component is down
    restarts_total: int = 0  # times it died (raised, returned or failed to build) and was restarted
    last_error: str = ""  # "ExceptionType: message" of the last death; "" if none


@dataclass(frozen=True, slots=True)
class XidLog:
    """XIDs seen since the agent started: counts per (GPU, code), which only grow, and the last
    ``XID_LOG_SIZE`` events numbered by ``sequence``."""

    counts: Mapping[XidKey, int] = field(default_factory=lambda: MappingProxyType({}))
    sequence: int = 0  # the number of the newest event (0: none yet)
    events: tuple[tuple[int, XidEvent], ...] = ()  # (sequence, event), oldest first

    def after(self, sequence: int) -> tuple[tuple[int, XidEvent], ...]:
        """(sequence, event) of the XIDs recorded after ``sequence``, oldest first."""
        return tuple(entry for entry in self.events if entry[0] > sequence)

    def add(self, event: XidEvent) -> XidLog:
        key = (event.gpu_index, event.uuid, event.xid)
        counts = dict(self.counts)
        counts[key] = counts.get(key, 0) + 1
        sequence = self.sequence + 1
        return XidLog(MappingProxyType(counts), sequence, (*self.events[-(XID_LOG_SIZE - 1):], (sequence, event)))


@dataclass(frozen=True, slots=True)
class NodeView:
    """The node at one moment: the latest value of every topic. Immutable; take it and read."""

    version: int = 0  # publications on any topic so far
    versions: Mapping[str, int] = field(default_factory=lambda: MappingProxyType(dict.fromkeys(TOPICS, 0)))
    published_at: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # topic -> unix time
    snapshot: NodeSnapshot | None = None
    sampler: SamplerStats = field(default_factory=SamplerStats)
    attribution: AttributionSnapshot | None = None
    xids: XidLog = field(default_factory=XidLog)
    health: NodeHealth | None = None
    components: Mapping[str, ComponentStatus] = field(default_factory=lambda: MappingProxyType({}))
    slices: SliceTable = field(default_factory=SliceTable)
    topology: Topology | None = None

    @property
    def ready(self) -> tuple[bool, str]:
        """(ready, why not): a first sample exists, no required component is down, and the health
        verdict can be persisted (a verdict a restart would forget must not look settled)."""
        if self.snapshot is None:
            return False, "no snapshot yet"
        down = sorted(name for name, status in self.components.items() if status.required and not status.up)
        if down:
            return False, f"component down: {', '.join(down)}"
        if self.health is not None and any(f.fault == STATE_UNWRITABLE for f in self.health.faults):
            return False, "the health state cannot be written (see runtimekit_node_fault_active)"
        return True, ""

    @property
    def xid_counts(self) -> Mapping[XidKey, int]:
        return self.xids.counts

    @property
    def xid_sequence(self) -> int:
        return self.xids.sequence

    def xids_after(self, sequence: int) -> tuple[tuple[int, XidEvent], ...]:
        return self.xids.after(sequence)


@dataclass(slots=True)
class _Watcher:
    loop: asyncio.AbstractEventLoop
    wake: asyncio.Event
    topics: frozenset[str]

    def notify(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.wake.set)
        except RuntimeError:  # the loop is closed: the watching task is gone with it
            pass


class NodeState:
    """The shared, latest view of the node; thread-safe for any number of publishers and readers."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._view = NodeView()
        self._lock = threading.Lock()
        self._watchers: list[_Watcher] = []
        self._subscribers: list[Callable[[], None]] = []

    # -- reading -------------------------------------------------------------------------------

    def view(self) -> NodeView:
        """The node at the latest moment (immutable)."""
        return self._view

    @property
    def version(self) -> int:
        return self._view.version

    @property
    def snapshot(self) -> NodeSnapshot | None:
        return self._view.snapshot

    @property
    def sampler(self) -> SamplerStats:
        return self._view.sampler

    @property
    def attribution(self) -> AttributionSnapshot | None:
        return self._view.attribution

    @property
    def health(self) -> NodeHealth | None:
        return self._view.health

    @property
    def xid_counts(self) -> Mapping[XidKey, int]:
        return self._view.xids.counts

    @property
    def xid_sequence(self) -> int:
        return self._view.xids.sequence

    def xids_after(self, sequence: int) -> tuple[tuple[int, XidEvent], ...]:
        return self._view.xids.after(sequence)

    async def watch(self, *topics: str, since: NodeView | None = None) -> AsyncIterator[NodeView]:
        """Yield the newest view whenever one of ``topics`` (all when none named) was published
        after ``since`` (None: yield the current view at once). Coalesces: never a backlog."""
        wanted = frozenset(topics or TOPICS)
        unknown = wanted - set(TOPICS)
        if unknown:
            raise ValueError(f"topics: unknown {', '.join(sorted(unknown))}; known: {', '.join(TOPICS)}")
        watcher = _Watcher(asyncio.get_running_loop(), asyncio.Event(), wanted)
        with self._lock:
            self._watchers.append(watcher)
        seen = None if since is None else {topic: since.versions.get(topic, 0) for topic in wanted}
        try:
            while True:
                watcher.wake.clear()
                view = self._view
                current = {topic: view.versions.get(topic, 0) for topic in wanted}
                if current != seen:
                    seen = current
                    yield view
                    continue
                await watcher.wake.wait()
        finally:
            with self._lock:
                self._watchers.remove(watcher)

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on the publishing thread after each publication (keep it short; one that
        raises is logged and ignored). Returns an unsubscribe. Tasks should ``watch`` instead."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    # -- publishing (any thread) ----------------------------------------------------------------

    def publish_snapshot(self, snapshot: NodeSnapshot, stats: SamplerStats) -> None:
        """Publish a new sampling cycle (the sampler)."""
        self._publish(SAMPLE, snapshot=snapshot, sampler=stats)

    def publish_attribution(self, attribution: AttributionSnapshot) -> None:
        """Publish a new attribution refresh (the attributor)."""
        self._publish(ATTRIBUTION, attribution=attribution)

    def record_xid(self, event: XidEvent) -> None:
        """Count one XID event and keep it in the recent log (the event thread). Counts only grow."""
        self._publish(XIDS, update=lambda view: {"xids": view.xids.add(event)})

    def publish_health(self, health: NodeHealth) -> None:
        """Publish the health verdict (the health checker)."""
        self._publish(HEALTH, health=health)

    def publish_components(self, components: Mapping[str, ComponentStatus]) -> None:
        """Publish the supervised components' status (the supervisor, on every change)."""
        self._publish(COMPONENTS, components=components)

    def publish_slices(self, slices: SliceTable) -> None:
        """Publish the slice table (the slicer, after every change it commits)."""
        self._publish(SLICES, slices=slices)

    def publish_topology(self, topology: Topology) -> None:
        """Publish the node's topology (discovery, at start and after a change of the GPUs)."""
        self._publish(TOPOLOGY, topology=topology)

    def _publish(self, topic: str, update: Callable[[NodeView], dict[str, Any]] | None = None, **values: Any) -> None:
        with self._lock:
            view = self._view
            changes = update(view) if update is not None else values
            versions = dict(view.versions)
            versions[topic] = versions.get(topic, 0) + 1
            published_at = dict(view.published_at)
            published_at[topic] = self._clock()
            self._view = replace(
                view,
                version=view.version + 1,
                versions=MappingProxyType(versions),
                published_at=MappingProxyType(published_at),
                **changes,
            )
            watchers = [w for w in self._watchers if topic in w.topics]
            subscribers = list(self._subscribers)
        for watcher in watchers:
            watcher.notify()
        for callback in subscribers:
            try:
                callback()
            except Exception:  # noqa: BLE001 - a subscriber's fault never reaches the publisher
                log.exception("state subscriber %r raised on a %s publication; ignored", callback, topic)
