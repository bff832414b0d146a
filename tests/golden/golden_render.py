"""Render the golden exposition of one simulated scenario as the agent serves it, with time pinned.

    python tests/golden/golden_render.py dgx-h100 > dgx-h100.prom   (PYTHONPATH = the repository root)

What is served: ``GET /metrics`` (Prometheus text, no gzip) of the exporter's routes over an
``ExpositionCache`` of ``build_collector_set`` — the agent's composition, with
``exporter.process_cmdline: true`` so the redacted ``runtimekit_process_info`` is shown — over a
``NodeState`` filled by the agent's own producers, each run once: the ``NodeReader`` sampling the
simulated node through pynvml, the ``Attributor`` asking the simulator's fake kubelet and CRI
runtime (unix sockets) and reading its /proc tree, and the ``HealthChecker`` running the real
detectors and state machine.

One case per scenario of ``sim.list_scenarios()``, plus variants named after it
(``dgx-h100-xid-79``: GPU 5 fell off the bus; ``dgx-a100-mig``: GPU 0, in MIG mode from the
scenario, holds a 3g.40gb and a 1g.10gb instance, a process of pod ``ml/infer-0`` runs in the 3g). The node: seed 1, "training" load, ``PODS`` generated
pods running ``PROCESSES`` background processes, simulated time 0 at ``T0`` (the simulator starts
its time at the first clock reading) and sampled at ``T0 + 300`` s so counters are non-trivial;
XID 13 injected on GPU 1 at ``T0 + 299`` and recorded in NodeState as the event thread would.
Pinned: every clock (the simulator's, the reader's, NodeState's, the attributor's and the health
checker's all read ``SAMPLED_AT``), the cycle's perf_counter duration and the health evaluation's
CPU time (replaced by 0.0), the sampler stats, the collector timer, and build info
(``options={"self": ...}`` of build_collector_set).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from runtimekit import sim
from runtimekit.attribution.attributor import Attributor
from runtimekit.attribution.cri import CriClient
from runtimekit.attribution.podresources import PodResourcesClient
from runtimekit.attribution.procfs import ProcessReader
from runtimekit.exporter import ExpositionCache, add_exporter_routes, build_collector_set
from runtimekit.gpu.reader import NodeReader
from runtimekit.gpu.types import XidEvent
from runtimekit.healthcheck.checker import HealthChecker
from runtimekit.healthcheck.detectors import run_detectors
from runtimekit.healthcheck.thresholds import load_thresholds
from runtimekit.sim.host import SimulatedHost
from runtimekit.sim.mig_profiles import ci_profiles
from runtimekit.state import NodeState, SamplerStats

T0 = 1_750_000_000.0
SAMPLED_AT = T0 + 300.0
XID_AT = T0 + 299.0
BUILD = {"version": "0.0.0+golden", "python_version": "3.11.0"}
STATS = SamplerStats(cycles_total=300, failures_total=1, last_duration_seconds=0.0125, last_cpu_seconds=0.01)
PODS = 4
PROCESSES = 16
OPTIONS = {"self": BUILD, "process": {"cmdline": True}}
QUIET = logging.getLogger("runtimekit.tests.golden")


# case -> (scenario, XIDs injected at XID_AT as (gpu, xid)); XID 79 also makes the GPU lost.
CASES: dict[str, tuple[str, tuple[tuple[int, int], ...]]] = {
    **{scenario: (scenario, ((1, 13),)) for scenario in sim.list_scenarios()},
    "dgx-h100-xid-79": ("dgx-h100", ((1, 13), (5, 79))),
    "dgx-a100-mig": ("dgx-a100", ((1, 13),)),
}


def mig_instances(node: sim.SimulatedNode) -> None:
    """GPU 0 (in MIG mode): a 3g.40gb at memory slice 4 and a 1g.10gb at 0, each with one compute
    instance taking it whole; a process of pod ml/infer-0 holding 6 GiB in the 3g."""
    instances = []
    for profile_id, start in ((9, 4), (19, 0)):  # 3g.40gb, 1g.10gb
        gi = node.create_gpu_instance(0, profile_id, start)
        full = next(p for p in ci_profiles(gi.profile) if p.compute_slices == gi.profile.compute_slices)
        instances.append((gi.id, node.create_compute_instance(0, gi.id, full.id).id))
    node.add_pod("ml", "infer-0", [{"name": "server"}])
    gi_id, ci_id = instances[0]
    node.add_process(0, 6 << 30, "python", namespace="ml", pod="infer-0", container="server",
                     gpu_instance=gi_id, compute_instance=ci_id)


# case -> what is done to the node before the XIDs (instances, pods, processes).
SETUPS: dict[str, Callable[[sim.SimulatedNode], None]] = {"dgx-a100-mig": mig_instances}


async def fill_state(case: str, now: list[float], root: Path) -> NodeState:
    """A NodeState as the agent's producers leave it after the cycle at SAMPLED_AT."""
    scenario, xids = CASES[case]
    clock = lambda: now[0]  # noqa: E731
    node = sim.SimulatedNode(sim.load_scenario(scenario), seed=1, clock=clock, load="training")
    node.set_pod_count(PODS)
    node.set_process_count(PROCESSES)
    host = SimulatedHost(node, root)
    sim.install(node)
    try:
        await host.start()
        try:
            node.now()  # simulated time 0 is T0
            SETUPS.get(case, lambda _: None)(node)
            now[0] = XID_AT
            for gpu, xid in xids:
                node.inject(gpu, "xid", xid=xid)
            now[0] = SAMPLED_AT
            reader = NodeReader(clock=clock)
            try:
                snapshot = reader.sample()
            finally:
                reader.close()
            assert snapshot.nvml_up and snapshot.sampled_at == SAMPLED_AT, snapshot.nvml_error
            snapshot = replace(snapshot, duration_seconds=0.0)  # measured with perf_counter

            state = NodeState(clock=clock)
            for gpu, xid in xids:
                # As the XID watcher delivers it: with the UUID it registered the GPU under before the
                # fault (a GPU lost from the first sample has no readable UUID in the snapshot).
                uuid = node.scenario.gpus[gpu].uuid
                state.record_xid(XidEvent(gpu_index=gpu, uuid=uuid, xid=xid, received_at=XID_AT))
            state.publish_snapshot(snapshot, STATS)
            attributor = Attributor(
                state,
                kubelet=PodResourcesClient(host.kubelet_socket, 5.0),
                cri=CriClient(host.cri_socket, 5.0),
                proc=ProcessReader(host.proc_root),
                clock=clock,
            )
            try:
                await attributor.attribute(snapshot)
            finally:
                await attributor.close()
        finally:
            await host.stop()
    finally:
        sim.uninstall()
    checker = HealthChecker(state, run_detectors, thresholds=load_thresholds(None), clock=clock)
    try:
        assert await checker.evaluate()
    finally:
        checker.close()
    assert state.health is not None
    state.publish_health(replace(state.health, detector_seconds=0.0))  # CPU time: pinned
    return state


async def serve_metrics(state: NodeState) -> bytes:
    """``GET /metrics`` of the exporter's routes over ``state``, as a plain Prometheus scrape."""
    collectors = build_collector_set(None, timer=lambda: 0.0, logger=QUIET, options=OPTIONS)
    app = web.Application()
    add_exporter_routes(app, ExpositionCache(state, collectors))
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
        assert response.status == 200, response.status
        return await response.read()


async def _render(case: str) -> bytes:
    root = Path(tempfile.mkdtemp(prefix="rk-golden-"))  # short: unix socket paths are limited
    try:
        state = await fill_state(case, [T0], root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return await serve_metrics(state)


def render(case: str) -> bytes:
    """The served Prometheus text exposition of ``case`` under the pinned conditions above."""
    return asyncio.run(_render(case))


if __name__ == "__main__":
    sys.stdout.buffer.write(render(sys.argv[1]))
