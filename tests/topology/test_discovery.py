"""Discovery over the simulated node's NVML and its sysfs tree, as on a real node: NVLinks through
the NVSwitch fabric, PCIe switches, NUMA nodes, sockets, RDMA NICs with their device nodes; and what
it does when part of the node cannot be read."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runtimekit import sim
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.reader import NodeReader
from runtimekit.gpu.types import NodeSnapshot
from runtimekit.sim.sysfs import write_sys_tree
from runtimekit.state.topology import Link, Topology
from runtimekit.topology.discovery import discover

NOW = 1_700_000_000.0
Node = tuple[NvmlSession, NodeSnapshot, str]


@pytest.fixture
def simulated(tmp_path: Path) -> Iterator[Callable[[str], Node]]:
    """``simulated(scenario)``: the scenario's node installed below pynvml, its sysfs tree under
    tmp_path, an initialised session and one sample."""
    session = NvmlSession()

    def make(scenario: str) -> Node:
        node = sim.SimulatedNode(sim.load_scenario(scenario), seed=1, load="idle")
        sim.install(node)
        write_sys_tree(node.scenario, tmp_path / "sys")
        session.init()
        return session, NodeReader(session).sample(), str(tmp_path / "sys")

    try:
        yield make
    finally:
        session.shutdown()
        sim.uninstall()


def run(node: Node) -> Topology:
    session, snapshot, sys_root = node
    return discover(session, snapshot, sys_root, NOW)


def test_dgx_h100_every_pair_is_linked_through_the_nvswitch_and_each_gpu_has_its_nic(simulated) -> None:
    topology = run(simulated("dgx-h100"))
    assert topology.errors == () and topology.discovered_at == NOW
    assert [g.ref.index for g in topology.gpus] == list(range(8))
    assert all(g.nvswitch for g in topology.gpus)
    assert set(topology.gpu_links.values()) == {Link("nvlink", 18)}
    assert len(topology.gpu_links) == 28
    assert [(g.numa_node, g.socket) for g in topology.gpus] == [(0, 0)] * 4 + [(1, 1)] * 4
    # each GPU has one NIC under its own PCIe switch (the DGX H100 user guide's GPU -> mlx5 table)
    own = {gpu: nic for (gpu, nic), link in topology.nic_links.items() if link.level == "pcie_switch"}
    assert own == {0: "mlx5_0", 1: "mlx5_3", 2: "mlx5_4", 3: "mlx5_5", 4: "mlx5_6", 5: "mlx5_9", 6: "mlx5_10", 7: "mlx5_11"}
    assert topology.nic_links[(0, "mlx5_3")] == Link("numa") and topology.nic_links[(0, "mlx5_6")] == Link("system")
    nics = {n.name: n for n in topology.nics}
    assert [n.name for n in topology.nics][:3] == ["mlx5_0", "mlx5_3", "mlx5_4"]  # natural order
    assert nics["mlx5_0"].pci == "0000:1a:00.0" and nics["mlx5_0"].rate_gbps == 400
    assert nics["mlx5_0"].device_nodes == ("/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm")
    assert nics["mlx5_11"].device_nodes == ("/dev/infiniband/uverbs7", "/dev/infiniband/rdma_cm")
    assert nics["mlx5_0"].pcie_switches == topology.gpus[0].pcie_switches
    # each GPU and its NIC sit under one PCIe switch below one root port: one root complex, the
    # host bridge sysfs names after the root port's bus (GPU 0: root port 0000:15:01.0)
    assert topology.gpus[0].pcie_root == nics["mlx5_0"].pcie_root == "pci0000:15"
    assert len({g.pcie_root for g in topology.gpus}) == 8
    assert all(nics[nic].pcie_root == topology.gpus[gpu].pcie_root for gpu, nic in own.items())


def test_pcie_server_pairs_share_switches_and_sockets_split_the_rest(simulated) -> None:
    topology = run(simulated("pcie-inference"))
    assert topology.errors == ()
    assert not any(g.nvlinks or g.nvswitch for g in topology.gpus)
    assert topology.link(0, 1) == Link("pcie_switch")
    assert topology.link(0, 2) == Link("numa")
    assert topology.link(0, 4) == Link("system")
    switch_pairs = sorted(pair for pair, link in topology.gpu_links.items() if link.level == "pcie_switch")
    assert switch_pairs == [(0, 1), (2, 3), (4, 5), (6, 7)]


def test_dgx_a100_gpus_pair_up_under_switches_with_their_nics(simulated) -> None:
    topology = run(simulated("dgx-a100"))
    assert topology.errors == ()
    assert set(topology.gpu_links.values()) == {Link("nvlink", 12)}
    near = sorted(nic for (gpu, nic), link in topology.nic_links.items() if gpu == 0 and link.level == "pcie_switch")
    assert near == ["mlx5_0", "mlx5_1"]


def test_an_inactive_link_is_not_counted_and_the_pair_takes_the_lesser_end(simulated) -> None:
    session, snapshot, sys_root = simulated("dgx-h100")
    gpu0 = snapshot.gpus[0]
    down = tuple(dataclasses.replace(link, active=False) if link.link < 4 else link for link in gpu0.nvlinks)
    snapshot = dataclasses.replace(snapshot, gpus=(dataclasses.replace(gpu0, nvlinks=down), *snapshot.gpus[1:]))
    topology = discover(session, snapshot, sys_root, NOW)
    assert topology.link(0, 1) == Link("nvlink", 14)
    assert topology.link(1, 2) == Link("nvlink", 18)


def test_a_lost_gpu_keeps_its_pcie_place_and_the_error_says_why(simulated) -> None:
    session, snapshot, sys_root = simulated("dgx-h100")
    lost = dataclasses.replace(snapshot.gpus[3], lost=True)
    snapshot = dataclasses.replace(snapshot, gpus=(*snapshot.gpus[:3], lost, *snapshot.gpus[4:]))
    topology = discover(session, snapshot, sys_root, NOW)
    assert topology.errors == ("GPU 3: lost; its NVLinks were not read",)
    assert topology.link(3, 0) == Link("numa")  # no NVLink known: its PCIe place still counts
    assert topology.link(0, 1) == Link("nvlink", 18)


def test_a_gpu_missing_from_sysfs_is_an_error_not_a_failure(simulated) -> None:
    session, snapshot, sys_root = simulated("pcie-inference")
    gone = str(topology_bus(snapshot, 1))
    (Path(sys_root) / "bus/pci/devices" / gone).unlink()
    topology = discover(session, snapshot, sys_root, NOW)
    assert topology.errors == (f"GPU 1: PCI function {gone} is not in {sys_root}/bus/pci/devices",)
    assert topology.gpus[1].pcie_switches == () and topology.gpus[1].numa_node is None
    assert topology.link(0, 1) == Link("system")  # unknown places never match
    assert topology.link(2, 3) == Link("pcie_switch")


def test_no_infiniband_class_means_no_nics_and_no_error(simulated) -> None:
    session, snapshot, sys_root = simulated("dgx-h100")
    shutil.rmtree(Path(sys_root) / "class/infiniband")
    topology = discover(session, snapshot, sys_root, NOW)
    assert topology.nics == () and topology.nic_links == {} and topology.errors == ()


def topology_bus(snapshot: NodeSnapshot, index: int) -> str:
    bus = snapshot.gpus[index].identity.pci_bus_id
    assert isinstance(bus, str)
    return bus


async def test_the_component_discovers_at_the_first_sample_and_again_only_when_the_gpus_change(simulated, monkeypatch) -> None:
    from runtimekit.config import TopologyConfig
    from runtimekit.state import TOPOLOGY, NodeState, SamplerStats
    from runtimekit.topology import component

    session, snapshot, sys_root = simulated("dgx-h100")
    calls: list[int] = []

    def counting(*args, **kwargs):
        calls.append(len(args[1].gpus))
        return discover(*args, **kwargs)

    monkeypatch.setattr(component, "discover", counting)
    state = NodeState(clock=lambda: NOW)
    part = component.TopologyComponent(state, session, TopologyConfig(sys_root=sys_root), clock=lambda: NOW)
    await part.start()
    task = asyncio.create_task(part.run())
    topologies = state.watch(TOPOLOGY)
    assert (await anext(topologies)).topology is None  # nothing before the first sample

    async def published() -> Topology:
        view = await asyncio.wait_for(anext(topologies), 5)
        assert view.topology is not None
        return view.topology

    try:
        state.publish_snapshot(dataclasses.replace(snapshot, nvml_up=False, gpus=()), SamplerStats())  # NVML down: skipped
        state.publish_snapshot(snapshot, SamplerStats())
        first = await published()
        assert len(first.gpus) == 8 and first.link(0, 7) == Link("nvlink", 18)
        for _ in range(3):  # the same GPUs: no new discovery
            state.publish_snapshot(dataclasses.replace(snapshot, sampled_at=NOW + 1), SamplerStats())
            for _ in range(5):  # let the component see each one
                await asyncio.sleep(0)
        lost = dataclasses.replace(snapshot.gpus[7], lost=True)
        state.publish_snapshot(dataclasses.replace(snapshot, gpus=(*snapshot.gpus[:7], lost)), SamplerStats())
        second = await published()
        assert second.errors == ("GPU 7: lost; its NVLinks were not read",)
        assert calls == [8, 8]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await topologies.aclose()
        await part.close()


async def test_an_nvlink_going_down_and_back_up_makes_a_new_discovery_each_time(simulated, monkeypatch) -> None:
    from runtimekit.config import TopologyConfig
    from runtimekit.state import TOPOLOGY, NodeState, SamplerStats
    from runtimekit.topology import component

    session, snapshot, sys_root = simulated("dgx-h100")
    calls: list[int] = []

    def counting(*args, **kwargs):
        calls.append(len(args[1].gpus))
        return discover(*args, **kwargs)

    monkeypatch.setattr(component, "discover", counting)
    state = NodeState(clock=lambda: NOW)
    part = component.TopologyComponent(state, session, TopologyConfig(sys_root=sys_root), clock=lambda: NOW)
    await part.start()
    task = asyncio.create_task(part.run())
    topologies = state.watch(TOPOLOGY)
    await anext(topologies)  # None: nothing discovered yet

    async def published() -> Topology:
        view = await asyncio.wait_for(anext(topologies), 5)
        assert view.topology is not None
        return view.topology

    gpu0 = snapshot.gpus[0]
    down = tuple(dataclasses.replace(link, active=False) if link.link < 4 else link for link in gpu0.nvlinks)
    try:
        state.publish_snapshot(snapshot, SamplerStats())
        assert (await published()).link(0, 1) == Link("nvlink", 18)
        state.publish_snapshot(dataclasses.replace(snapshot, gpus=(dataclasses.replace(gpu0, nvlinks=down), *snapshot.gpus[1:])),
                               SamplerStats())
        assert (await published()).link(0, 1) == Link("nvlink", 14)
        state.publish_snapshot(snapshot, SamplerStats())  # back up
        assert (await published()).link(0, 1) == Link("nvlink", 18)
        assert calls == [8, 8, 8]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await topologies.aclose()
        await part.close()
