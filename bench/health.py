#!/usr/bin/env python3
"""Health-checking benchmark on the simulated dgx-h100 node (8 GPUs), in one process.

1. XID event-to-state latency: an XID the fault policy does not catalogue (``UNCATALOGUED_XID``:
   a warning, the GPU turns suspect, and the fault clears after clean samples, so the GPU
   recovers between repetitions — XID 94's fault now waits for a GPU reset) is injected into
   the simulated driver; the clock runs until ``NodeState.health`` shows that GPU suspect. The
   path is the real one: the fake driver wakes ``nvmlEventSetWait`` in the XID thread, the event is
   recorded in NodeState, the health checker evaluates and publishes. The sampler keeps sampling
   meanwhile (every 0.2 s, so a GPU recovers between repetitions). p50 and p99 over N events.
2. CPU cost of health checking: the process CPU time of ``HealthChecker.evaluate()`` (detectors,
   state machine, persistence to a state file) for one new sample of 8 GPUs, averaged over M
   samples, and that cost as a share of one core at a 1 s sampling interval.

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from runtimekit import sim
from runtimekit.gpu.events import XidWatcher
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.reader import NodeReader
from runtimekit.healthcheck.checker import HealthChecker
from runtimekit.healthcheck.detectors import run_detectors
from runtimekit.healthcheck.store import HealthStore
from runtimekit.healthcheck.thresholds import load_thresholds
from runtimekit.sampler import Sampler
from runtimekit.state import NodeState

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))  # the benchmarks' shared modules, not benchmarks
from ranks import nearest_rank  # noqa: E402

SUSPECT, HEALTHY = "suspect", "healthy"


UNCATALOGUED_XID = 999  # a code newer than the policy's catalog: its default applies


def gpu_state(state: NodeState, index: int) -> str | None:
    health = state.health
    if health is None:
        return None
    return next((g.state for g in health.gpus if g.index == index), None)


async def wait_until(condition, timeout: float = 10.0, poll: float = 0.0005) -> float:
    """Seconds until ``condition()`` holds (perf_counter resolution, sub-millisecond polling)."""
    started = time.perf_counter()
    while not condition():
        if time.perf_counter() - started > timeout:
            raise TimeoutError("condition not met")
        await asyncio.sleep(poll)
    return time.perf_counter() - started


async def xid_latency(events: int, state_dir: Path) -> list[float]:
    node = sim.SimulatedNode(sim.load_scenario("dgx-h100"), seed=1, load="busy")
    sim.install(node)
    state = NodeState()
    session = NvmlSession()
    sampler = Sampler(NodeReader(session), state, interval_seconds=0.2)
    watcher = XidWatcher(session, state.record_xid)
    thresholds = load_thresholds()
    checker = HealthChecker(state, run_detectors, thresholds=thresholds, store=HealthStore(state_dir / "a"),
                            clean_samples=thresholds["machine"]["clean_samples"])
    tasks = [asyncio.create_task(sampler.run()), asyncio.create_task(checker.run())]
    watcher.start()
    latencies = []
    try:
        await wait_until(lambda: state.health is not None and all(g.state == HEALTHY for g in state.health.gpus))
        for i in range(events):
            gpu = i % 8
            started = time.perf_counter()
            node.inject(gpu, "xid", xid=UNCATALOGUED_XID)
            await wait_until(lambda gpu=gpu: gpu_state(state, gpu) == SUSPECT)
            latencies.append(time.perf_counter() - started)
            node.clear(gpu, "xid")
            await wait_until(lambda gpu=gpu: gpu_state(state, gpu) == HEALTHY)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        watcher.stop()
        sampler.close()
        checker.close()
        sim.uninstall()
    return sorted(latencies)


async def evaluation_cost(samples: int, state_dir: Path) -> float:
    """Average process CPU seconds of one evaluation after a new sample."""
    clock = [1_750_000_000.0]
    node = sim.SimulatedNode(sim.load_scenario("dgx-h100"), seed=1, clock=lambda: clock[0])
    node.set_process_count(64)
    sim.install(node)
    state = NodeState()
    reader = NodeReader(clock=lambda: clock[0])
    thresholds = load_thresholds()
    checker = HealthChecker(state, run_detectors, thresholds=thresholds, store=HealthStore(state_dir / "b"),
                            clean_samples=thresholds["machine"]["clean_samples"], clock=lambda: clock[0])
    await checker.load()
    spent = 0.0
    try:
        from runtimekit.state import SamplerStats

        for i in range(samples + 5):
            clock[0] += 1.0
            state.publish_snapshot(reader.sample(), SamplerStats(cycles_total=i + 1))
            started = time.process_time()
            await checker.evaluate()
            if i >= 5:  # the first evaluations load and discover
                spent += time.process_time() - started
    finally:
        checker.close()
        sim.uninstall()
    return spent / samples


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100, help="XIDs injected for the latency")
    parser.add_argument("--samples", type=int, default=300, help="evaluations timed for the CPU cost")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions: under 30 s")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the health transitions it causes are logged otherwise
    if args.quick:
        args.events, args.samples = 12, 60
    with tempfile.TemporaryDirectory() as tmp:
        latencies = await xid_latency(args.events, Path(tmp))
        cost = await evaluation_cost(args.samples, Path(tmp))
    p50 = statistics.median(latencies) * 1000
    p99 = nearest_rank(latencies, 0.99) * 1000
    print(f"XID event -> health state: p50 {p50:.2f} ms  p99 {p99:.2f} ms  max {latencies[-1] * 1000:.2f} ms "
          f"({len(latencies)} events)")
    print(f"health check of 8 GPUs: {cost * 1000:.3f} ms CPU per sample = {cost * 100:.3f} % of a core at 1 s")
    print(f"RESULT xid_events={len(latencies)} xid_p50_ms={p50:.2f} xid_p99_ms={p99:.2f} "
          f"evaluation_cpu_ms={cost * 1000:.3f} cpu_pct_at_1s={cost * 100:.3f}")


if __name__ == "__main__":
    asyncio.run(main())
