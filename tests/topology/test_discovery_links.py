"""Discovery's NVLinks: the direct GPU-to-GPU branch (links whose far end is a GPU, as on NVLink
bridges and meshes without NVSwitch) with a faked NVML read, and every built-in scenario discovered
from the simulator agreeing with the scenario's own data (``topology_from_scenario``): the same
NVSwitch rule, the same level and link count for every pair, the same NIC links."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runtimekit import sim
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.reader import NodeReader
from runtimekit.gpu.topology import GpuTopology, NvLinkPeer
from runtimekit.gpu.types import NOT_SUPPORTED, NodeSnapshot
from runtimekit.sim.sysfs import write_sys_tree
from runtimekit.state.topology import Link
from runtimekit.topology import discovery
from runtimekit.topology.offline import topology_from_scenario

NOW = 1_700_000_000.0
Node = tuple[NvmlSession, NodeSnapshot, str]


@pytest.fixture
def simulated(tmp_path: Path) -> Iterator[Callable[[str], Node]]:
    session = NvmlSession()

    def make(scenario: str) -> Node:
        node = sim.SimulatedNode(sim.load_scenario(scenario), seed=1, load="idle")
        sim.install(node)
        write_sys_tree(node.scenario, tmp_path / scenario)
        session.init()
        return session, NodeReader(session).sample(), str(tmp_path / scenario)

    try:
        yield make
    finally:
        session.shutdown()
        sim.uninstall()


@pytest.mark.parametrize("name", sim.list_scenarios())
def test_discovery_from_the_simulator_agrees_with_the_scenarios_data(simulated, name: str) -> None:
    session, snapshot, sys_root = simulated(name)
    found = discovery.discover(session, snapshot, sys_root, NOW)
    expected = topology_from_scenario(sim.load_scenario(name))
    assert found.errors == ()
    assert dict(found.gpu_links) == dict(expected.gpu_links)  # level and link count of every pair
    assert dict(found.nic_links) == dict(expected.nic_links)
    assert [dict(gpu.nvlinks) for gpu in found.gpus] == [dict(gpu.nvlinks) for gpu in expected.gpus]
    assert {nic.name: (nic.numa_node, nic.socket, nic.rate_gbps) for nic in found.nics} == \
        {nic.name: (nic.numa_node, nic.socket, nic.rate_gbps) for nic in expected.nics}


def test_links_that_end_at_gpus_count_for_those_gpus(simulated, monkeypatch) -> None:
    """GPUs 0 and 1 with four direct links, GPU 0's fifth link at a GPU that is not sampled, its
    sixth at a GPU whose address NVML could not give; no NVSwitch anywhere."""
    session, snapshot, sys_root = simulated("dgx-h100")
    bus = {gpu.index: gpu.identity.pci_bus_id for gpu in snapshot.gpus}

    def peers(index: int) -> tuple[NvLinkPeer, ...]:
        if index == 0:
            return (*(NvLinkPeer(link, "gpu", bus[1]) for link in range(4)),
                    NvLinkPeer(4, "gpu", "0000:ee:00.0"), NvLinkPeer(5, "gpu", NOT_SUPPORTED))
        if index == 1:
            return tuple(NvLinkPeer(link, "gpu", bus[0]) for link in range(4))
        return ()

    def fake(session: NvmlSession, index: int, count: int) -> GpuTopology:
        return GpuTopology(index, NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED, peers(index))

    monkeypatch.setattr(discovery, "read_topology", fake)
    found = discovery.discover(session, snapshot, sys_root, NOW)
    assert found.link(0, 1) == Link("nvlink", 4)
    assert dict(found.gpus[0].nvlinks) == {1: 4} and dict(found.gpus[1].nvlinks) == {0: 4}
    assert not any(gpu.nvswitch for gpu in found.gpus)
    assert found.link(0, 2) == Link("numa") and found.link(0, 4) == Link("system")  # no NVLink: the PCIe side
    assert found.errors == (
        "GPU 0: NVLink 4 ends at a device discovery cannot place (gpu, 0000:ee:00.0)",
        f"GPU 0: NVLink 5 ends at a device discovery cannot place (gpu, {NOT_SUPPORTED})",
    )
