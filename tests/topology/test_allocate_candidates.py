"""AllocateDevices' default candidates (runtimekit/api/topology.py ``free_whole_devices``) over a
simulated DGX H100: a GPU whose change to partition (MIG) mode waits for a GPU reset is no whole GPU
to hand out, whether the slicer (``DeviceModeInfo.pending``) or the sample (``mig_mode_pending``)
says so."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import pytest

from runtimekit import sim
from runtimekit.api.topology import free_whole_devices
from runtimekit.attribution.join import resolve_allocations
from runtimekit.attribution.types import AttributionSnapshot, Owner, SourceStatus
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.reader import NodeReader
from runtimekit.gpu.types import Modes, NodeSnapshot
from runtimekit.sim.sysfs import write_sys_tree
from runtimekit.state import NodeState, SamplerStats
from runtimekit.state.slices import DeviceModeInfo, SliceTable
from runtimekit.state.topology import Topology
from runtimekit.topology.discovery import discover

NOW = 1_700_000_000.0


@pytest.fixture
def dgx(tmp_path: Path) -> Iterator[tuple[NodeSnapshot, Topology]]:
    session = NvmlSession()
    node = sim.SimulatedNode(sim.load_scenario("dgx-h100"), seed=1, load="idle")
    sim.install(node)
    try:
        write_sys_tree(node.scenario, tmp_path / "sys")
        session.init()
        snapshot = NodeReader(session).sample()
        yield snapshot, discover(session, snapshot, str(tmp_path / "sys"), NOW)
    finally:
        session.shutdown()
        sim.uninstall()


def test_a_gpu_waiting_for_a_reset_to_enter_mig_mode_is_no_candidate(dgx: tuple[NodeSnapshot, Topology]) -> None:
    snapshot, topology = dgx
    state = NodeState(clock=lambda: NOW)
    state.publish_snapshot(snapshot, SamplerStats())
    assert free_whole_devices(state.view(), topology) == set(range(8))
    gpus = list(snapshot.gpus)
    pending = Modes(compute_mode="default", persistence_mode=True, mig_mode_current=False, mig_mode_pending=True)
    gpus[3] = dataclasses.replace(gpus[3], modes=pending)
    state.publish_snapshot(dataclasses.replace(snapshot, gpus=tuple(gpus)), SamplerStats())
    assert free_whole_devices(state.view(), topology) == {0, 1, 2, 4, 5, 6, 7}  # the sample says GPU 3 waits
    waiting = DeviceModeInfo(topology.gpus[5].ref, "tdm", pending="mig", mig_capable=True)
    state.publish_slices(SliceTable(devices=MappingProxyType({5: waiting})))
    assert free_whole_devices(state.view(), topology) == {0, 1, 2, 4, 6, 7}  # the slicer says GPU 5 waits


def test_a_gpu_the_kubelet_allocated_to_a_pod_is_no_candidate(dgx: tuple[NodeSnapshot, Topology]) -> None:
    snapshot, topology = dgx
    state = NodeState(clock=lambda: NOW)
    state.publish_snapshot(snapshot, SamplerStats())
    uuid = {gpu.index: gpu.uuid for gpu in snapshot.gpus}
    rows = [(Owner("ml", "trainer-0", "main", "uid-0"), "nvidia.com/gpu", uuid[2]),
            (Owner("ml", "infer-0", "server", "uid-1"), "nvidia.com/gpu.shared", f"{uuid[6]}::3")]
    for kubelet_up, free in ((True, {0, 1, 3, 4, 5, 7}), (False, set(range(8)))):  # down: what it said may be stale
        state.publish_attribution(AttributionSnapshot(
            refreshed_at=NOW, allocations=resolve_allocations(rows, snapshot), sources={"kubelet": SourceStatus(up=kubelet_up)}))
        assert free_whole_devices(state.view(), topology) == free
