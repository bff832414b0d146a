"""The component table of the node agent: every long-lived part, its configuration section, and how
it is built. One row each; the supervisor (``runtimekit.supervisor``) runs them in this order.

| component     | config section | required for /readyz | what it does                                   |
|---------------|----------------|----------------------|------------------------------------------------|
| sampler       | sampling       | yes                  | polls NVML on an interval, publishes samples   |
| xid_watcher   | sampling       | yes                  | waits on nvmlEventSetWait, publishes XIDs      |
| attribution   | attribution    | no                   | owners of GPU processes and devices            |
| health        | health         | yes                  | detectors, state machine, persisted verdict    |
| slicer        | slicer         | no                   | slices on demand: TDM shares, MIG instances    |
| topology      | topology       | no                   | where GPUs and RDMA NICs sit, pairwise distance |
| exporter      | exporter       | yes                  | renders the exposition ahead of scrapers       |
| api           | api            | yes                  | the gRPC API runtimekit.v1 on a unix socket    |

Components the command line registers (the simulated node) come before these. This module is the
composition root: it may import the readers (exporter, health checker); the base may not.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from dataclasses import dataclass

from runtimekit.api import ApiServer
from runtimekit.attribution.attributor import Attributor
from runtimekit.attribution.cri import CriClient
from runtimekit.attribution.podresources import PodResourcesClient
from runtimekit.attribution.procfs import ProcessReader
from runtimekit.config import Config
from runtimekit.exporter import ExpositionCache
from runtimekit.gpu.events import XidWatcher
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.reader import NodeReader
from runtimekit.healthcheck.checker import HealthChecker
from runtimekit.healthcheck.detectors import run_detectors
from runtimekit.healthcheck.store import HealthStore
from runtimekit.healthcheck.thresholds import load_thresholds
from runtimekit.sampler import Sampler
from runtimekit.slicer.manager import Slicer
from runtimekit.state import NodeState
from runtimekit.supervisor import Component, ComponentSpec
from runtimekit.topology.allocator import allocate
from runtimekit.topology.component import TopologyComponent

log = logging.getLogger("runtimekit.components")

XID_LIVENESS_CHECK_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Shared:
    """What the components of one agent share: its configuration, state and NVML session, the
    exposition cache (built before the app starts, since routes serve it) and the slicer (one
    object for the agent's life, restartable, so the API keeps serving the same one; None when
    ``slicer.enabled`` is false)."""

    config: Config
    state: NodeState
    session: NvmlSession
    exposition: ExpositionCache
    slicer: Slicer | None = None


class _Task:
    """A component whose set-up is its constructor and that holds nothing ``run`` does not release:
    ``start`` and ``close`` do nothing unless a component says otherwise."""

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


class SamplerComponent(_Task):
    """The sampler task (see ``runtimekit.sampler``); its NVML thread is released on close."""

    def __init__(self, shared: Shared) -> None:
        config = shared.config
        reader = NodeReader(shared.session, limits_refresh_seconds=config.sampling.limits_refresh_seconds)
        self.sampler = Sampler(
            reader,
            shared.state,
            interval_seconds=config.sampling.interval_seconds,
            timeout_seconds=config.sampling.timeout_seconds,
            nvml_retry_seconds=config.sampling.nvml_retry_seconds,
        )

    async def run(self) -> None:
        await self.sampler.run()

    async def close(self) -> None:
        self.sampler.close()


class XidWatcherComponent(_Task):
    """The XID event thread, watched: a thread that died or went silent is this component dying."""

    def __init__(self, shared: Shared) -> None:
        self.watcher = XidWatcher(
            shared.session, shared.state.record_xid, rebuild_seconds=shared.config.sampling.nvml_retry_seconds
        )

    async def start(self) -> None:
        self.watcher.start()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(XID_LIVENESS_CHECK_SECONDS)
            self.watcher.check()

    async def close(self) -> None:
        # A thread stuck in the driver is left behind (daemon); the next start makes a new one.
        await asyncio.get_running_loop().run_in_executor(None, self.watcher.stop)


class AttributionComponent(_Task):
    """The attributor task: owners of GPU processes and devices after each sample."""

    def __init__(self, shared: Shared) -> None:
        config = shared.config
        timeout = config.attribution.timeout_seconds
        self.attributor = Attributor(
            shared.state,
            kubelet=PodResourcesClient(config.attribution.kubelet_socket, timeout),
            cri=CriClient(config.attribution.cri_socket, timeout),
            proc=ProcessReader(config.attribution.proc_root),
            refresh_seconds=config.attribution.refresh_seconds or 0.0,
            cri_refresh_seconds=config.attribution.cri_refresh_seconds,
            cache_seconds=config.attribution.cache_seconds,
            max_processes_per_gpu=config.attribution.max_processes_per_gpu,
            process_refresh_seconds=config.attribution.process_refresh_seconds,
        )

    async def run(self) -> None:
        await self.attributor.run()

    async def close(self) -> None:
        await self.attributor.close()


class HealthComponent(_Task):
    """The health checker task; its remembered state is loaded at every start."""

    def __init__(self, shared: Shared) -> None:
        config = shared.config
        thresholds = load_thresholds(config.health.thresholds)
        self.checker = HealthChecker(
            shared.state,
            run_detectors,
            thresholds=thresholds,
            store=HealthStore(config.state_dir, boot_id_path=config.health.boot_id_path),
            clean_samples=config.health.clean_samples_to_clear or thresholds["machine"]["clean_samples"],
            timeout_seconds=config.health.evaluation_timeout_seconds,
            expected_gpus=config.health.expected_gpus,
        )

    async def start(self) -> None:
        await self.checker.load()

    async def run(self) -> None:
        await self.checker.run()

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.checker.close)


class ExporterComponent(_Task):
    """The exposition cache's own task: it renders ahead of periodic scrapers."""

    def __init__(self, shared: Shared) -> None:
        self.cache = shared.exposition

    async def run(self) -> None:
        await self.cache.run()


class ApiComponent(_Task):
    """runtimekit.v1: the unix socket (mode 0600) and, when configured, TCP with TLS."""

    def __init__(self, shared: Shared) -> None:
        allocator = allocate if shared.config.topology.enabled else None
        self.server = ApiServer(shared.state, shared.slicer, shared.config, allocator)

    async def start(self) -> None:
        await self.server.start()

    async def run(self) -> None:
        await self.server.wait()

    async def close(self) -> None:
        await self.server.stop()


def component_table(shared: Shared) -> list[ComponentSpec]:
    """The agent's own components, in start order; disabled sections leave their row out."""
    config = shared.config

    def builder(kind: Callable[[Shared], Component]) -> Callable[[], Component]:
        return lambda: kind(shared)

    table = [
        ComponentSpec("sampler", builder(SamplerComponent), True, "polls NVML, publishes samples"),
        ComponentSpec("xid_watcher", builder(XidWatcherComponent), True, "XID events from nvmlEventSetWait"),
    ]
    if config.attribution.enabled:
        table.append(ComponentSpec("attribution", builder(AttributionComponent), False, "GPU processes and devices to pods"))
    if config.health.enabled:
        table.append(ComponentSpec("health", builder(HealthComponent), True, "health verdict per GPU"))
    else:
        log.info("health checker disabled (health.enabled: false)")
    slicer = shared.slicer
    if slicer is not None:  # a Component itself, restartable (start works again after close): the API keeps it
        table.append(ComponentSpec("slicer", lambda: slicer, False, "slices: TDM shares and MIG instances"))
    if config.topology.enabled:
        table.append(ComponentSpec("topology", lambda: TopologyComponent(shared.state, shared.session, config.topology),
                                   False, "GPU and NIC places, pairwise distances"))
    table.append(ComponentSpec("exporter", builder(ExporterComponent), True, "renders the exposition ahead of scrapers"))
    if config.api.enabled:
        table.append(ComponentSpec("api", builder(ApiComponent), True, "gRPC runtimekit.v1 on the unix socket"))
    return table


def shutdown_nvml(session: NvmlSession, timeout_seconds: float) -> None:
    """nvmlShutdown in a thread of its own, never on the event loop: when a sampling cycle is stuck
    in the driver, nvmlShutdown could block behind it; give up after ``timeout_seconds``."""
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="runtimekit-nvml-shutdown")
    future = pool.submit(session.shutdown)
    try:
        future.result(timeout=timeout_seconds)
    except concurrent.futures.TimeoutError:
        log.warning("nvmlShutdown did not return within %.1f s (a call is stuck in the driver); exiting without it",
                    timeout_seconds)
    finally:
        pool.shutdown(wait=False)
