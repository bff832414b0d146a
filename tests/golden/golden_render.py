"""Render the golden exposition of one simulated scenario, with every source of variation pinned.

    python tests/golden/golden_render.py dgx-h100 > dgx-h100.prom   (PYTHONPATH = the repository root)

One case per scenario of ``sim.list_scenarios()``, plus degraded variants named after it
(``dgx-h100-xid-79``: GPU 5 fell off the bus). The node: seed 1, "training" load, 16 background
processes, simulated time 0 at ``T0`` (the simulator starts its time at the first clock reading)
and sampled at ``T0 + 300`` s so counters are non-trivial; XID 13 injected on GPU 1 at
``T0 + 299`` and recorded in NodeState by hand (as the event thread would). Pinned: the reader's
and the exposition's clocks, the cycle's perf_counter duration (replaced by 0.0), the sampler
stats, the collector timer, build info (``options={"self": ...}`` of build_registry).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import replace

from prometheus_client import generate_latest

from runtimekit import sim
from runtimekit.exporter.registry import build_registry
from runtimekit.gpu.reader import NodeReader
from runtimekit.gpu.types import XidEvent
from runtimekit.state import NodeState, SamplerStats

T0 = 1_750_000_000.0
SAMPLED_AT = T0 + 300.0
XID_AT = T0 + 299.0
RENDERED_AT = T0 + 302.0  # snapshot age 2 s
BUILD = {"version": "0.0.0+golden", "python_version": "3.11.0"}
STATS = SamplerStats(cycles_total=300, failures_total=1, last_duration_seconds=0.0125, last_cpu_seconds=0.01)
QUIET = logging.getLogger("runtimekit.tests.golden")


# case -> (scenario, XIDs injected at XID_AT as (gpu, xid)); XID 79 also makes the GPU lost.
CASES: dict[str, tuple[str, tuple[tuple[int, int], ...]]] = {
    **{scenario: (scenario, ((1, 13),)) for scenario in sim.list_scenarios()},
    "dgx-h100-xid-79": ("dgx-h100", ((1, 13), (5, 79))),
}


def render(case: str) -> bytes:
    """The Prometheus text exposition of ``case`` under the pinned conditions above."""
    scenario, xids = CASES[case]
    now = [T0]
    clock = lambda: now[0]  # noqa: E731
    node = sim.SimulatedNode(sim.load_scenario(scenario), seed=1, clock=clock, load="training")
    node.set_process_count(16)
    sim.install(node)
    try:
        node.now()  # simulated time 0 is T0
        now[0] = XID_AT
        for gpu, xid in xids:
            node.inject(gpu, "xid", xid=xid)
        now[0] = SAMPLED_AT
        reader = NodeReader(clock=clock)
        try:
            snapshot = reader.sample()
        finally:
            reader.close()
    finally:
        sim.uninstall()
    assert snapshot.nvml_up and snapshot.sampled_at == SAMPLED_AT, snapshot.nvml_error
    snapshot = replace(snapshot, duration_seconds=0.0)  # measured with perf_counter

    state = NodeState()
    for gpu, xid in xids:
        state.record_xid(XidEvent(gpu_index=gpu, uuid=snapshot.gpus[gpu].uuid, xid=xid, received_at=XID_AT))
    state.publish_snapshot(snapshot, STATS)
    registry = build_registry(
        state, clock=lambda: RENDERED_AT, timer=lambda: 0.0, logger=QUIET, options={"self": dict(BUILD)}
    )
    return generate_latest(registry)


if __name__ == "__main__":
    sys.stdout.buffer.write(render(sys.argv[1]))
