"""Discovery when part of sysfs cannot be read (topology/discovery.py, runtimekit/host):
bytes that are not UTF-8 in one NIC's rate, one verbs device's ibdev, one GPU's numa_node, one NUMA
node's cpulist, a missing physical_package_id: each costs that one fact, said in ``errors`` naming
the file; every other device is still placed. And /dev/infiniband/rdma_cm only where the host has it."""

from __future__ import annotations

from collections.abc import Iterator
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
BAD = b"\xff\xfe400 Gb/sec\n"  # not UTF-8


class Node:
    """The simulated dgx-a100 below pynvml with its sysfs tree at ``sys_root``."""

    def __init__(self, session: NvmlSession, snapshot: NodeSnapshot, sys_root: Path) -> None:
        self.session, self.snapshot, self.sys_root = session, snapshot, sys_root

    def discover(self) -> Topology:
        return discover(self.session, self.snapshot, str(self.sys_root), NOW)

    def gpu_dir(self, index: int) -> Path:
        pci = self.discover().gpus[index].ref.pci
        assert pci is not None
        return (self.sys_root / "bus/pci/devices" / str(pci)).resolve()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    session = NvmlSession()
    simulated = sim.SimulatedNode(sim.load_scenario("dgx-a100"), seed=1, load="idle")
    sim.install(simulated)
    try:
        write_sys_tree(simulated.scenario, tmp_path / "sys")
        session.init()
        yield Node(session, NodeReader(session).sample(), tmp_path / "sys")
    finally:
        session.shutdown()
        sim.uninstall()


def test_the_simulated_tree_reads_without_errors(node: Node) -> None:
    topology = node.discover()
    assert topology.errors == () and len(topology.nics) == 8
    assert all(nic.rate_gbps == 200 and nic.device_nodes[-1] == "/dev/infiniband/rdma_cm" for nic in topology.nics)


def test_bad_bytes_in_one_nics_rate_cost_only_its_rate(node: Node) -> None:
    rate = node.sys_root / "class/infiniband/mlx5_2/ports/1/rate"
    rate.write_bytes(BAD)
    topology = node.discover()
    nics = {nic.name: nic for nic in topology.nics}
    assert len(nics) == 8 and nics["mlx5_2"].rate_gbps == 0 and nics["mlx5_3"].rate_gbps == 200
    assert nics["mlx5_2"].pcie_switches and topology.nic_links[(2, "mlx5_2")] == Link("pcie_switch")
    assert len(topology.errors) == 1
    assert topology.errors[0].startswith(f"NIC mlx5_2: reading {rate} failed: 'utf-8' codec can't decode")


def test_bad_bytes_in_one_ibdev_cost_only_that_verbs_device(node: Node) -> None:
    ibdev = node.sys_root / "class/infiniband_verbs/uverbs1/ibdev"
    ibdev.write_bytes(BAD)
    topology = node.discover()
    nics = {nic.name: nic for nic in topology.nics}
    assert nics["mlx5_1"].device_nodes == ()  # its only verbs device is unreadable: no rdma_cm alone either
    assert nics["mlx5_0"].device_nodes == ("/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm")
    assert len(topology.errors) == 1 and topology.errors[0].startswith(f"verbs device uverbs1: reading {ibdev} failed:")


def test_bad_bytes_in_one_gpus_numa_node_cost_only_its_numa_node(node: Node) -> None:
    numa = node.gpu_dir(3) / "numa_node"
    numa.write_bytes(BAD)
    topology = node.discover()
    gpu = topology.gpus[3]
    assert gpu.numa_node is None and gpu.socket is None and gpu.pcie_switches  # its switches are still read
    assert topology.gpus[2].numa_node == 1 and topology.gpus[2].socket == 0
    assert len(topology.errors) == 1 and topology.errors[0].startswith("GPU 3: reading its numa_node failed: 'utf-8' codec")


def test_one_unreadable_numa_node_costs_only_its_socket(node: Node) -> None:
    (node.sys_root / "devices/system/node/node1/cpulist").write_bytes(BAD)
    topology = node.discover()
    assert [gpu.socket for gpu in topology.gpus] == [0, 0, None, None, 1, 1, 1, 1]  # GPUs 2, 3: node 1
    assert len(topology.errors) == 1 and topology.errors[0].startswith(
        f"NUMA node 1: reading {node.sys_root}/devices/system/node/node1/cpulist failed:")


def test_a_missing_physical_package_id_is_an_error_not_a_silent_unknown(node: Node) -> None:
    package = node.sys_root / "devices/system/cpu/cpu112/topology/physical_package_id"  # node 7's first CPU
    package.unlink()
    topology = node.discover()
    assert [gpu.socket for gpu in topology.gpus] == [0, 0, 0, 0, None, None, 1, 1]  # GPUs 4, 5: node 7
    assert topology.errors == (f"NUMA node 7: {package} is missing or empty; its socket is unknown",)


def test_rdma_cm_only_where_the_host_has_it(node: Node) -> None:
    (node.sys_root / "class/misc/rdma_cm").unlink()
    topology = node.discover()
    assert topology.errors == ()
    assert [nic.device_nodes for nic in topology.nics][:2] == [("/dev/infiniband/uverbs0",), ("/dev/infiniband/uverbs1",)]
