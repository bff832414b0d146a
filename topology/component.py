"""The topology component: discovery at the first sample, and again whenever the sampled GPUs change.

It watches the node state's sample topic and runs ``discovery.discover`` (blocking: NVML and sysfs
reads) in an executor thread when the GPU set it last discovered differs from the sampled one —
each GPU's index, UUID, whether it is lost, and which of its NVLinks the sample shows inactive: a
GPU replaced, added, removed, lost or back after a reset, a link gone down or back up (discovery
counts only the links up in the sample it runs on). Nothing else triggers it, and no request ever waits for it: the HTTP and gRPC APIs, the CLI,
the metrics and the allocator read the published ``Topology`` (``NodeState.publish_topology``).
Samples taken while NVML is down are skipped (their GPU list is empty, not a new machine).

Config section ``topology`` (``runtimekit.config.TopologyConfig``): ``enabled``, ``sys_root``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from runtimekit.config import TopologyConfig
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.types import NodeSnapshot, is_available
from runtimekit.state import SAMPLE, NodeState

from .discovery import discover

log = logging.getLogger("runtimekit.topology")

GpuSet = tuple[tuple[int, str, bool, tuple[int, ...]], ...]  # (index, uuid, lost, inactive links) per GPU, by index


def gpu_set(snapshot: NodeSnapshot) -> GpuSet:
    """What decides whether the topology must be discovered again: each GPU's index, UUID, whether
    it is lost, and its NVLinks the sample shows inactive (link numbers, ascending)."""
    return tuple(sorted((gpu.index, gpu.identity.uuid if is_available(gpu.identity.uuid) else "", gpu.lost,
                         tuple(sorted(link.link for link in gpu.nvlinks if link.active is False)))
                        for gpu in snapshot.gpus))


class TopologyComponent:
    """Discovers the node's topology and publishes it; supervised (start, run, close)."""

    def __init__(self, state: NodeState, session: NvmlSession, config: TopologyConfig,
                 clock: Callable[[], float] = time.time) -> None:
        self._state = state
        self._session = session
        self._sys_root = config.sys_root
        self._clock = clock
        self._discovered: GpuSet | None = None
        self._errors: tuple[str, ...] = ()

    async def start(self) -> None:
        """Nothing to set up: the first discovery waits for the first sample (``run``)."""
        self._discovered = None  # a restarted component discovers again

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        async for view in self._state.watch(SAMPLE):
            snapshot = view.snapshot
            if snapshot is None or not snapshot.nvml_up:
                continue
            wanted = gpu_set(snapshot)
            if wanted == self._discovered:
                continue
            topology = await loop.run_in_executor(None, discover, self._session, snapshot, self._sys_root, self._clock())
            self._state.publish_topology(topology)
            if self._discovered is not None:
                log.info("the GPUs or their NVLinks changed; topology discovered again")
            self._discovered = wanted
            self._log_errors(topology.errors)

    def _log_errors(self, errors: tuple[str, ...]) -> None:
        """Log what discovery could not read when it differs from the last discovery's."""
        if errors != self._errors:
            for error in errors:
                log.warning("topology: %s", error)
            if not errors:
                log.info("topology: every device placed")
        self._errors = errors

    async def close(self) -> None:
        return None
