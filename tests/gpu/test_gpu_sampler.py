"""The Sampler: publishes snapshots into NodeState on its interval, counts cycles, never overlaps a
cycle that hangs in the driver (and says so once), and keeps retrying while NVML is down."""

from __future__ import annotations

import asyncio
import ctypes.util
import logging
import threading

import pytest

from runtimekit import sim
from runtimekit.gpu.types import NodeSnapshot
from runtimekit.sampler import Sampler
from runtimekit.state import NodeState

SNAPSHOT = NodeSnapshot(1.0, 0.5, True, "", None, 0, ())

TIMEOUT_S = 10.0


async def wait_until(predicate, timeout: float = TIMEOUT_S) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)




async def stop(task: asyncio.Task, sampler: Sampler) -> None:
    """Cancel the sampler task once (see test_cancel_always_stops_the_sampler) and wait for it."""
    task.cancel()
    async with asyncio.timeout(TIMEOUT_S):
        await asyncio.wait({task})
    sampler.close()


async def test_sampler_publishes_snapshots(node, make_reader):
    state = NodeState()
    versions = []
    state.subscribe(lambda: versions.append(state.version))
    sampler = Sampler(make_reader(), state, interval_seconds=0.01, timeout_seconds=5.0)
    task = asyncio.create_task(sampler.run())
    try:
        await wait_until(lambda: state.version >= 3)
    finally:
        await stop(task, sampler)
    assert versions == sorted(versions) and versions[:3] == [1, 2, 3]
    assert state.snapshot.nvml_up and len(state.snapshot.gpus) == 8
    stats = state.sampler
    assert stats.cycles_total == state.version  # no XIDs here: one publication per cycle
    assert stats.failures_total == 0
    assert stats.last_duration_seconds == state.snapshot.duration_seconds > 0
    assert stats.last_cpu_seconds >= 0


class BlockingReader:
    """A reader whose first sample() hangs until released (a driver call stuck in the kernel)."""

    def __init__(self, snapshot: NodeSnapshot) -> None:
        self.snapshot = snapshot
        self.calls = 0
        self.active = 0
        self.max_active = 0
        self.started = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def sample(self) -> NodeSnapshot:
        with self._lock:
            self.calls += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            first = self.calls == 1
        try:
            if first:
                self.started.set()
                assert self.release.wait(TIMEOUT_S)
            return self.snapshot
        finally:
            with self._lock:
                self.active -= 1


async def test_hung_cycle_is_reported_once_and_nothing_overlaps(caplog):
    caplog.set_level(logging.INFO, logger="runtimekit.sampler")
    reader = BlockingReader(SNAPSHOT)
    state = NodeState()
    sampler = Sampler(reader, state, interval_seconds=0.01, timeout_seconds=0.05)
    task = asyncio.create_task(sampler.run())
    try:
        await wait_until(reader.started.is_set)
        await asyncio.sleep(0.5)  # ten timeouts' worth
        assert reader.calls == 1  # no second cycle while the first hangs
        assert state.version == 0
        stuck = [r for r in caplog.records if "stuck" in r.getMessage()]
        assert len(stuck) == 1 and stuck[0].levelno == logging.ERROR

        reader.release.set()
        await wait_until(lambda: state.version >= 3)
    finally:
        reader.release.set()
        await stop(task, sampler)
    assert reader.max_active == 1
    assert len([r for r in caplog.records if "stuck" in r.getMessage()]) == 1
    assert len([r for r in caplog.records if "returned after" in r.getMessage()]) == 1
    assert state.sampler.cycles_total == state.version


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="a real libnvidia-ml is installed")
async def test_sampler_retries_nvml_and_logs_transitions_once(make_node, make_reader, caplog):
    caplog.set_level(logging.INFO, logger="runtimekit.sampler")
    sim.uninstall()
    state = NodeState()
    sampler = Sampler(make_reader(), state, interval_seconds=0.01, timeout_seconds=5.0, nvml_retry_seconds=0.02)
    task = asyncio.create_task(sampler.run())
    try:
        await wait_until(lambda: state.sampler.failures_total >= 3)
        assert not state.snapshot.nvml_up
        make_node("dgx-h100")
        await wait_until(lambda: state.snapshot.nvml_up)
        up_at = state.sampler.cycles_total
        await wait_until(lambda: state.sampler.cycles_total >= up_at + 2)
    finally:
        await stop(task, sampler)
    failures = state.sampler.failures_total
    assert failures >= 3 and state.sampler.cycles_total > failures
    messages = [r.getMessage() for r in caplog.records if r.name == "runtimekit.sampler"]
    assert len([m for m in messages if m.startswith("NVML unavailable")]) == 1
    assert len([m for m in messages if m.startswith("NVML up")]) == 1
    assert any("NVML_ERROR_LIBRARY_NOT_FOUND" in m for m in messages)


class CancellingReader:
    """Its first sample() cancels the sampler task ``depth`` loop callbacks after the cycle ends,
    i.e. while the finished cycle is being handed back through wait_for/shield."""

    def __init__(self, loop: asyncio.AbstractEventLoop, depth: int) -> None:
        self.loop = loop
        self.depth = depth
        self.task: asyncio.Task | None = None
        self.calls = 0

    def sample(self) -> NodeSnapshot:
        self.calls += 1
        if self.calls == 1:
            def cancel(left: int) -> None:
                if left:
                    self.loop.call_soon(cancel, left - 1)
                else:
                    self.task.cancel()

            self.loop.call_soon_threadsafe(cancel, self.depth)
        return SNAPSHOT


async def test_cancel_always_stops_the_sampler():
    loop = asyncio.get_running_loop()
    for depth in range(6):  # the cancel lands at each step of handing the result back
        reader = CancellingReader(loop, depth)
        sampler = Sampler(reader, NodeState(), interval_seconds=0.01, timeout_seconds=5.0)
        reader.task = task = asyncio.create_task(sampler.run())
        try:
            done, _ = await asyncio.wait({task}, timeout=0.5)
            assert task in done and task.cancelled(), f"cancel at depth {depth} was swallowed; {reader.calls} cycles"
        finally:
            await stop(task, sampler)
