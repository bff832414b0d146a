"""A lost GPU must not cost the others their XIDs: an XID on GPU 0 sent 10 ms after XID 79 on GPU 1
reaches the watcher, and GPU 0's health, every time.

Before one event set per GPU, GPU_IS_LOST made the watcher free the shared set (dropping what was
queued in it) and build a new one ~50 ms later: GPU 0's XID fell into that gap.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from runtimekit.gpu.events import XidWatcher
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.types import XidEvent

TRIALS = 50
TIMEOUT_S = 5.0


class Arrivals:
    """XIDs delivered by the watcher, by GPU; ``wait(gpu, n)`` blocks until GPU ``gpu`` has ``n``."""

    def __init__(self) -> None:
        self.by_gpu: dict[int, list[int]] = {}
        self._cond = threading.Condition()

    def __call__(self, event: XidEvent) -> None:
        with self._cond:
            self.by_gpu.setdefault(event.gpu_index, []).append(event.xid)
            self._cond.notify_all()

    def wait(self, gpu: int, count: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.by_gpu.get(gpu, [])) >= count, TIMEOUT_S)


def wait_until(predicate, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.002)


def watched(watcher: XidWatcher) -> set[int]:
    return {index for index, _ in dict(watcher.registered).values()}


def test_xid_10ms_after_another_gpus_xid_79_arrives_every_time(node):
    arrivals = Arrivals()
    session = NvmlSession()
    watcher = XidWatcher(session, arrivals, wait_ms=20, rebuild_seconds=0.02)
    watcher.start()
    try:
        wait_until(lambda: watched(watcher) == set(range(8)))
        for trial in range(1, TRIALS + 1):
            node.inject(1, "xid", xid=79)  # GPU 1 falls off the bus
            time.sleep(0.010)
            node.inject(0, "xid", xid=48)
            assert arrivals.wait(0, trial), f"trial {trial}: GPU 0's XID 48 was lost"
            assert arrivals.wait(1, trial), f"trial {trial}: GPU 1's XID 79 was lost"
            wait_until(lambda: 1 not in watched(watcher))  # GPU 1's set answered GPU_IS_LOST
            node.clear(1)  # back on the bus, registered again on the rebuild cadence
            node.clear(0)
            wait_until(lambda: watched(watcher) == set(range(8)))
        assert arrivals.by_gpu == {0: [48] * TRIALS, 1: [79] * TRIALS}
    finally:
        watcher.stop()
        session.shutdown()


async def test_gpu_0s_fault_reaches_its_health_while_gpu_1_is_lost(node, tmp_path: Path):
    from runtimekit.gpu.reader import NodeReader
    from runtimekit.healthcheck.checker import HealthChecker
    from runtimekit.healthcheck.detectors import run_detectors
    from runtimekit.healthcheck.store import HealthStore
    from runtimekit.healthcheck.thresholds import load_thresholds
    from runtimekit.healthcheck.types import HEALTHY
    from runtimekit.sampler import Sampler
    from runtimekit.state import NodeState

    state = NodeState()
    session = NvmlSession()
    sampler = Sampler(NodeReader(session), state, interval_seconds=0.05)
    watcher = XidWatcher(session, state.record_xid, wait_ms=20)
    thresholds = load_thresholds()
    checker = HealthChecker(state, run_detectors, thresholds=thresholds, store=HealthStore(tmp_path / "health"),
                            clean_samples=thresholds["machine"]["clean_samples"])
    tasks = [asyncio.create_task(sampler.run()), asyncio.create_task(checker.run())]
    watcher.start()

    def gpu_state(index: int) -> str | None:
        health = state.health
        return None if health is None else next((g.state for g in health.gpus if g.index == index), None)

    async def reached(condition) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not condition():
            assert time.monotonic() < deadline, f"not reached; health: {state.health}"
            await asyncio.sleep(0.005)

    try:
        await reached(lambda: len(watched(watcher)) == 8 and all(gpu_state(i) == HEALTHY for i in range(8)))
        node.inject(1, "xid", xid=79)
        await asyncio.sleep(0.010)
        node.inject(0, "xid", xid=48)
        await reached(lambda: gpu_state(0) not in (None, HEALTHY) and gpu_state(1) not in (None, HEALTHY))
        assert {(gpu, xid) for gpu, _, xid in state.xid_counts} == {(0, 48), (1, 79)}
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        watcher.stop()
        sampler.close()
        checker.close()
        session.shutdown()
