"""The sampler: the only code that calls NVML on a schedule.

Each cycle runs ``NodeReader.sample()`` in a dedicated executor thread (so the event loop never
blocks and cycles never overlap) and publishes the immutable snapshot into ``NodeState``.
It logs on transitions only ("NVML unavailable: …" / "NVML is back"), never on every tick.
A cycle that hangs in the driver is reported once as stuck; no new cycle starts until it
returns, and ``runtimekit_last_sample_timestamp_seconds`` standing still shows it to Prometheus.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from runtimekit.gpu.reader import NodeReader
from runtimekit.gpu.types import NodeSnapshot
from runtimekit.state import NodeState, SamplerStats

log = logging.getLogger(__name__)


class Sampler:
    """Polls the node on an interval and publishes snapshots."""

    def __init__(
        self,
        reader: NodeReader,
        state: NodeState,
        *,
        interval_seconds: float = 1.0,
        timeout_seconds: float = 10.0,
        nvml_retry_seconds: float = 10.0,
    ) -> None:
        self.reader = reader
        self.state = state
        self.interval_seconds = interval_seconds
        self.timeout_seconds = timeout_seconds
        self.nvml_retry_seconds = nvml_retry_seconds
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runtimekit-sampler")
        self._nvml_was_up: bool | None = None
        # Counts go on from what an earlier sampler of this agent published (a supervised restart):
        # runtimekit_samples_total counts since the agent started.
        self._stats = state.view().sampler

    async def run(self) -> None:
        """Sample until cancelled."""
        loop = asyncio.get_running_loop()
        next_due = loop.time()
        while True:
            snapshot = await self._one_cycle(loop)
            self._report_transition(snapshot)
            next_due = max(next_due + self._stats.period_seconds, loop.time())
            await asyncio.sleep(next_due - loop.time())

    async def _one_cycle(self, loop: asyncio.AbstractEventLoop) -> NodeSnapshot:
        future = loop.run_in_executor(self.executor, self._timed_sample)
        try:
            # asyncio.timeout, not wait_for: wait_for on 3.11 can swallow a cancel that lands
            # just as the cycle completes, and the service's shutdown would then hang.
            async with asyncio.timeout(self.timeout_seconds):
                snapshot, cpu_seconds = await asyncio.shield(future)
        except TimeoutError:
            log.error("NVML sampling cycle stuck for over %.1f s; waiting for the driver", self.timeout_seconds)
            snapshot, cpu_seconds = await future
            log.warning("NVML sampling cycle returned after %.1f s", snapshot.duration_seconds)
        self._stats = SamplerStats(
            cycles_total=self._stats.cycles_total + 1,
            failures_total=self._stats.failures_total + (0 if snapshot.nvml_up else 1),
            last_duration_seconds=snapshot.duration_seconds,
            last_cpu_seconds=cpu_seconds,
            last_success_at=snapshot.sampled_at if snapshot.nvml_up else self._stats.last_success_at,
            period_seconds=self.interval_seconds if snapshot.nvml_up else self.nvml_retry_seconds,
        )
        self.state.publish_snapshot(snapshot, self._stats)
        return snapshot

    def _timed_sample(self) -> tuple[NodeSnapshot, float]:
        started = time.thread_time()
        snapshot = self.reader.sample()
        return snapshot, time.thread_time() - started

    def _report_transition(self, snapshot: NodeSnapshot) -> None:
        if snapshot.nvml_up == self._nvml_was_up:
            return
        if snapshot.nvml_up:
            log.info("NVML up: driver %s, %d GPUs", snapshot.driver and snapshot.driver.driver_version,
                     snapshot.device_count)
        else:
            log.error("NVML unavailable: %s; retrying every %.0f s", snapshot.nvml_error, self.nvml_retry_seconds)
        self._nvml_was_up = snapshot.nvml_up

    def close(self) -> None:
        """Release the NVML thread (does not wait for a cycle stuck in the driver)."""
        self.executor.shutdown(wait=False, cancel_futures=True)
