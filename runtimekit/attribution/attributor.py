"""The attributor: after each sampling cycle, says who every GPU process and device belongs to.

Sources, each on its own cadence and never per scrape:

- ``/proc`` (psutil): per GPU process its name, command line, CPU seconds, resident memory and
  cgroup (→ container id, pod UID); a new process is read at once, CPU seconds and resident
  memory of the others every ``process_refresh_seconds``; static facts are cached per (pid,
  start time);
- the CRI runtime: ``ListContainers`` maps container id → pod name, namespace, container name, and
  ``ListPodSandbox`` says which pods are live (``pod_uids``: a ready sandbox); both listed again
  when an unknown container id shows up (at most once a second) and otherwise every
  ``cri_refresh_seconds``;
- the kubelet pod-resources API (``List``): which container holds which device, every
  ``refresh_seconds`` (0: every sampling cycle, the default — one cheap call a second).

What a source last answered is kept for ``cache_seconds`` when it goes down, then dropped; its
``runtimekit_attribution_source_up`` turns 0 at the first failure and the log says why once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, TypeVar

from runtimekit.attribution.cri import ContainerInfo, CriClient, SandboxInfo
from runtimekit.attribution.errors import SourceError
from runtimekit.attribution.join import Memo, join_processes, resolve_allocations
from runtimekit.attribution.podresources import PodDevices, PodResourcesClient
from runtimekit.attribution.procfs import ProcessInfo, ProcessReader
from runtimekit.attribution.types import (
    HOST,
    AttributionSnapshot,
    DeviceAllocation,
    Owner,
    ProcessFacts,
    SourceStatus,
)
from runtimekit.gpu.types import NodeSnapshot, Reading
from runtimekit.state import SAMPLE, NodeState

log = logging.getLogger(__name__)

T = TypeVar("T")

UNKNOWN_RETRY_SECONDS = 1.0  # an unknown container id lists the runtime's containers at most this often


@dataclass(frozen=True, slots=True)
class _Runtime:
    """What the CRI runtime answered in one refresh: its containers by id, the UIDs of the pods
    with a ready sandbox, and each pod's UID by (namespace, name) — its ready sandbox's, else a
    stopped one's (a pod deleted and made again under its name has a new UID; the old pod's
    stopped sandbox may still be listed)."""

    containers: dict[str, ContainerInfo]
    live_pods: frozenset[str]
    uids: dict[tuple[str, str], str]

    @classmethod
    def of(cls, containers: list[ContainerInfo], sandboxes: list[SandboxInfo]) -> _Runtime:
        # A pod is live while a sandbox of its is ready: from RunPodSandbox until the kubelet stops
        # it, because the pod finished for good (Succeeded, Failed) or is being deleted. A
        # crash-looping pod keeps its ready sandbox between restarts; a finished one keeps only a
        # stopped sandbox and its exited containers, listed until the pod object is deleted.
        uids = {(s.pod_namespace, s.pod_name): s.pod_uid for s in sorted(sandboxes, key=lambda s: s.ready)}  # ready last: kept
        return cls({c.container_id: c for c in containers}, frozenset(s.pod_uid for s in sandboxes if s.ready), uids)


@dataclass
class _Health:
    """A source's up/down status, logged on transitions only."""

    name: str
    status: SourceStatus | None = None  # None until first asked

    def failed(self, error: str) -> None:
        if self.status is None or self.status.up:
            log.warning("attribution source %s is down: %s", self.name, error)
        self.status = SourceStatus(False, error, self.status.last_success if self.status else None)

    def succeeded(self, now: float, note: str = "") -> None:
        if self.status is not None and not self.status.up:
            log.info("attribution source %s is back", self.name)
        self.status = SourceStatus(True, note, now)


@dataclass
class _Source(Generic[T]):
    """One gRPC source: its last good answer, kept for ``cache_seconds`` after it goes down."""

    health: _Health
    cache_seconds: float
    value: T | None = None
    tried_at: float | None = None

    async def refresh(self, fetch: Callable[[], Awaitable[T]], now: float) -> None:
        self.tried_at = now
        try:
            value = await fetch()
        except SourceError as error:
            self.health.failed(str(error))
            last = self.health.status.last_success if self.health.status else None
            if last is None or now - last > self.cache_seconds:
                self.value = None  # too old to trust: drop rather than show stale owners
            return
        self.value = value
        self.health.succeeded(now)

    def due(self, now: float, every: float) -> bool:
        return self.tried_at is None or now - self.tried_at >= every


class Attributor:
    """Runs one attribution pass per published snapshot and publishes the result."""

    def __init__(
        self,
        state: NodeState,
        *,
        kubelet: PodResourcesClient,
        cri: CriClient,
        proc: ProcessReader,
        refresh_seconds: float = 0.0,
        cri_refresh_seconds: float = 30.0,
        cache_seconds: float = 30.0,
        max_processes_per_gpu: int = 256,
        process_refresh_seconds: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = state
        self.kubelet_client = kubelet
        self.cri_client = cri
        self.proc = proc
        self.refresh_seconds = refresh_seconds
        self.cri_refresh_seconds = cri_refresh_seconds
        self.max_processes_per_gpu = max_processes_per_gpu
        self.process_refresh_seconds = process_refresh_seconds
        self.clock = clock
        self.kubelet: _Source[list[PodDevices]] = _Source(_Health("kubelet"), cache_seconds)
        self.cri: _Source[_Runtime] = _Source(_Health("cri"), cache_seconds)
        self.procfs = _Health("procfs")
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runtimekit-attribution")
        self._dropped_total: dict[tuple[int, Reading[str]], int] = {}
        self._infos: dict[int, ProcessInfo] = {}
        self._facts_cache: dict[int, tuple[ProcessInfo, object, ProcessFacts]] = {}
        self._rows = Memo()  # join_processes' memo: unchanged processes keep their rows
        self._infos_read_at = float("-inf")
        self._last_allocations: tuple[object, tuple[DeviceAllocation, ...]] | None = None

    async def run(self) -> None:
        """Attribute after every new sample until cancelled (a slow pass skips to the newest sample)."""
        async for view in self.state.watch(SAMPLE):
            if view.snapshot is not None:
                await self.attribute(view.snapshot)

    async def attribute(self, snapshot: NodeSnapshot) -> AttributionSnapshot:
        """One pass: refresh the sources that are due, join, publish."""
        now = self.clock()
        if self.kubelet.due(now, self.refresh_seconds):
            await self.kubelet.refresh(self.kubelet_client.list, now)
        pids = {process.pid for gpu in snapshot.gpus for process in gpu.processes}
        infos = await asyncio.get_running_loop().run_in_executor(self.executor, self._host_facts, pids, now)
        await self._refresh_cri_if_needed(infos, now)
        facts = self._all_facts(infos)
        processes, pods, dropped = join_processes(snapshot, facts, self.max_processes_per_gpu, self._rows)
        for key, count in dropped.items():
            self._dropped_total[key] = self._dropped_total.get(key, 0) + count
        attribution = AttributionSnapshot(
            refreshed_at=now,
            processes=processes,
            pods=pods,
            allocations=self._allocations(snapshot),
            sources=MappingProxyType(
                {h.name: h.status for h in (self.kubelet.health, self.cri.health, self.procfs) if h.status}
            ),
            dropped_total=MappingProxyType(dict(self._dropped_total)),
            pod_uids=None if self.cri.value is None else self.cri.value.live_pods,
        )
        self.state.publish_attribution(attribution)
        return attribution

    def _host_facts(self, pids: set[int], now: float) -> dict[int, ProcessInfo]:
        """/proc facts of ``pids``: new processes are read at once, the others (CPU seconds,
        resident memory) again every ``process_refresh_seconds``."""
        if now - self._infos_read_at >= self.process_refresh_seconds:
            infos = self._read_procfs(sorted(pids))
            self._infos_read_at = now
        else:
            infos = {pid: info for pid, info in self._infos.items() if pid in pids}
            new = sorted(pids - infos.keys())
            if new:
                infos.update(self._read_procfs(new))
        self._infos = infos
        return infos

    def _read_procfs(self, pids: list[int]) -> dict[int, ProcessInfo]:
        try:
            infos = self.proc.read_many(pids)
        except OSError as error:  # the /proc root itself is missing or unreadable
            self.procfs.failed(str(error))
            return {}
        # NVML sees processes that /proc does not: the agent is not in the host PID namespace.
        note = "no GPU process found under the /proc root" if pids and not infos else ""
        self.procfs.succeeded(self.clock(), note)
        return infos

    async def _refresh_cri_if_needed(self, infos: dict[int, ProcessInfo], now: float) -> None:
        known = self.cri.value.containers if self.cri.value is not None else {}
        unknown = any(i.cgroup.container_id and i.cgroup.container_id not in known for i in infos.values())
        if self.cri.due(now, self.cri_refresh_seconds) or (unknown and self.cri.due(now, UNKNOWN_RETRY_SECONDS)):

            async def fetch() -> _Runtime:
                # Every container, whatever its state: a container's labels name its pod in any
                # state, and one the runtime lists as "unknown" (its shim not answering) may still
                # run the process being matched.
                containers = await self.cri_client.list_containers(running_only=False)
                return _Runtime.of(containers, await self.cri_client.list_pod_sandboxes())

            await self.cri.refresh(fetch, now)

    def _all_facts(self, infos: dict[int, ProcessInfo]) -> dict[int, ProcessFacts]:
        """ProcessFacts per pid, rebuilt only when its /proc reading or the runtime's list changed."""
        cri_list = self.cri.value
        previous = self._facts_cache
        facts: dict[int, ProcessFacts] = {}
        cache: dict[int, tuple[ProcessInfo, object, ProcessFacts]] = {}
        for pid, info in infos.items():
            hit = previous.get(pid)
            fact = hit[2] if hit is not None and hit[0] is info and hit[1] is cri_list else self._facts(info)
            facts[pid] = fact
            cache[pid] = (info, cri_list, fact)
        self._facts_cache = cache
        return facts

    def _facts(self, info: ProcessInfo) -> ProcessFacts:
        return ProcessFacts(info.pid, info.name, info.cmdline, info.cpu_seconds, info.rss_bytes, self._owner(info))

    def _owner(self, info: ProcessInfo) -> Owner:
        identity = info.cgroup
        if not identity.container_id:
            return HOST
        container = self.cri.value.containers.get(identity.container_id) if self.cri.value is not None else None
        if container is None:  # the runtime is down or has not listed it yet: ids only
            return Owner(pod_uid=identity.pod_uid or "", container_id=identity.container_id)
        return Owner(
            namespace=container.pod_namespace,
            pod=container.pod_name,
            container=container.container_name,
            pod_uid=container.pod_uid or identity.pod_uid or "",
            container_id=identity.container_id,
        )

    def _allocations(self, snapshot: NodeSnapshot) -> tuple[DeviceAllocation, ...]:
        """The kubelet's allocations resolved to GPUs; the last result again while the kubelet's
        and the runtime's answers (the same objects between refreshes), the GPUs and their MIG
        devices are the same (they rarely change between two cycles)."""
        gpus = tuple((gpu.uuid, gpu.index, tuple(d.ref for d in gpu.mig_devices)) for gpu in snapshot.gpus)
        key = (self.kubelet.value, self.cri.value, gpus)
        if self._last_allocations is None or self._last_allocations[0] != key:
            self._last_allocations = (key, resolve_allocations(self._allocation_rows(), snapshot))
        return self._last_allocations[1]

    def _allocation_rows(self) -> list[tuple[Owner, str, str]]:
        """(owner, resource, device id) per device the kubelet lists; the owner's pod UID from the
        runtime's sandboxes (pod-resources names pods by namespace and name only), "" while unknown."""
        uids = self.cri.value.uids if self.cri.value is not None else {}
        rows: list[tuple[Owner, str, str]] = []
        for row in self.kubelet.value or []:
            owner = Owner(namespace=row.namespace, pod=row.pod_name, container=row.container_name,
                          pod_uid=uids.get((row.namespace, row.pod_name)) or "")
            rows.extend((owner, row.resource_name, device_id) for device_id in row.device_ids)
        return rows

    async def close(self) -> None:
        await self.kubelet_client.close()
        await self.cri_client.close()
        self.executor.shutdown(wait=False, cancel_futures=True)
