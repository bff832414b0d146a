"""A topology from a scenario without an agent (topology/offline.py), and
``runtimekit topo allocate`` over it (runtimekit/cli_topo_allocate.py): the distances the built-in
machines have, the PCIe-only server's pair under one switch, and bad input named by flag."""

from __future__ import annotations

import argparse
import json
from itertools import combinations

import pytest

from runtimekit.cli_topo_allocate import add_allocate_parser
from runtimekit.sim import load_scenario
from runtimekit.state.topology import Link, Topology
from runtimekit.topology.allocator import allocate
from runtimekit.topology.offline import topology_from_scenario


def scenario_topology(name: str) -> Topology:
    """What runtimekit/cli.py passes in: the simulator's scenario, placed."""
    return topology_from_scenario(load_scenario(name))


def test_dgx_h100_links_every_pair_through_the_nvswitches_and_each_gpu_to_its_own_nic() -> None:
    scenario = load_scenario("dgx-h100")
    topology = topology_from_scenario(scenario)
    assert {topology.link(a, b) for a, b in combinations(range(8), 2)} == {Link("nvlink", 18)}
    for gpu in scenario.gpus:
        own = gpu.nics[0]
        assert topology.nic_links[(gpu.index, own)] == Link("pcie_switch")
        assert all(topology.nic_links[(gpu.index, nic.name)].level != "pcie_switch" for nic in topology.nics if nic.name != own)


def test_pcie_inference_levels_follow_switches_numa_nodes_and_sockets() -> None:
    topology = scenario_topology("pcie-inference")
    assert topology.link(0, 1) == Link("pcie_switch")
    assert topology.link(0, 2) == Link("numa")
    assert topology.link(3, 4) == Link("system")
    assert [gpu.socket for gpu in topology.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert topology.nic_links[(2, "mlx5_0")] == Link("numa")


def test_dgx2_nested_switches_share_their_top_switch() -> None:
    topology = scenario_topology("dgx-2")
    assert len(topology.gpus) == 16 and topology.link(0, 15) == Link("nvlink", 6)
    assert topology.gpus[0].pcie_switches == ("top0", "leaf0")
    nic = next(n for n in topology.nics if n.pcie_switches[0] == "top0")
    assert topology.nic_links[(2, nic.name)] == Link("pcie_switch")  # leaf1 under top0: below the root port


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    root = argparse.ArgumentParser(prog="runtimekit")
    topo = root.add_subparsers(dest="command").add_parser("topo").add_subparsers(dest="topo_command")
    add_allocate_parser(topo, scenario_topology, allocate)
    args = root.parse_args(["topo", "allocate", *argv])
    code = args.handler(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_two_gpus_on_the_pcie_server_are_under_one_switch(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--scenario", "pcie-inference", "--count", "2", "-o", "json"], capsys)
    assert code == 0 and json.loads(out) == {"gpus": [0, 1], "nics": ["", ""], "cost": 50}
    code, out, _ = run(["--scenario", "pcie-inference", "--free", "0,2,3,5", "--count", "2", "--nics", "-o", "json"], capsys)
    assert code == 0 and json.loads(out) == {"gpus": [2, 3], "nics": ["mlx5_0", "mlx5_1"], "cost": 50}


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--scenario", "dgx-h100", "--free", "3,5", "--count", "1", "--nics"], capsys)
    assert code == 0
    assert out.splitlines() == ["GPU  NIC", "3    mlx5_5", "cost 0"]


@pytest.mark.parametrize("argv,message", [
    (["--scenario", "nope", "--count", "1"], "--scenario: scenario 'nope': no such file and not a built-in"),
    (["--scenario", "dgx-h100", "--free", "0,x", "--count", "1"], "--free: 'x' is not a GPU index"),
    (["--scenario", "dgx-h100", "--free", "0,9", "--count", "1"], "--free: GPU 9 is not in the topology (GPUs: 0-7)"),
    (["--scenario", "dgx-h100", "--count", "0"], "--count: must be a whole number of GPUs, at least 1"),
    (["--scenario", "dgx-h100", "--free", "0,1", "--count", "3"], "--count: 3 GPUs asked, 2 free"),
    (["--scenario", "dgx-h100", "--free", "0,1", "--required", "2", "--count", "1"], "--required: GPU 2 is not free"),
])
def test_bad_input_is_one_line_naming_the_flag(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and message in err
