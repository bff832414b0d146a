"""The topology as readers see it: ``GET /api/v1/topology`` (503 before the first discovery) and
``runtimekit topo`` (the matrix and ``-o json``) over the gRPC API on a real unix socket, with the
topology discovered from the simulated node's NVML and sysfs tree."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc.aio
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from runtimekit import config as config_module
from runtimekit import sim
from runtimekit._proto.runtimekit.v1 import service_pb2, service_pb2_grpc
from runtimekit.api import ApiServer
from runtimekit.cli import main
from runtimekit.cli_topo import matrix
from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.reader import NodeReader
from runtimekit.sim.sysfs import write_sys_tree
from runtimekit.state import NodeState, SamplerStats
from runtimekit.state.topology import Topology
from runtimekit.topology.allocator import allocate
from runtimekit.topology.discovery import discover
from runtimekit.topology.routes import add_topology_routes

NOW = 1_700_000_000.0


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short path: a unix socket's path must fit in 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="rk-topo-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def discovered(scenario: str, root: Path) -> tuple[NodeState, Topology]:
    """A NodeState with one sample of ``scenario`` and its discovered (not yet published) topology."""
    node = sim.SimulatedNode(sim.load_scenario(scenario), seed=1, load="idle")
    sim.install(node)
    session = NvmlSession()
    try:
        session.init()
        write_sys_tree(node.scenario, root / "sys")
        snapshot = NodeReader(session).sample()
        topology = discover(session, snapshot, str(root / "sys"), NOW)
    finally:
        session.shutdown()
        sim.uninstall()
    state = NodeState(clock=lambda: NOW)
    state.publish_snapshot(snapshot, SamplerStats())
    return state, topology


@pytest.fixture
async def http(short_dir: Path) -> AsyncIterator[tuple[TestClient, NodeState, Topology]]:
    state, topology = discovered("dgx-h100", short_dir)
    app = web.Application()
    add_topology_routes(app, state)
    async with TestClient(TestServer(app)) as client:
        yield client, state, topology


async def test_http_answers_503_before_the_first_discovery_then_the_topology(http) -> None:
    client, state, topology = http
    early = await client.get("/api/v1/topology")
    assert early.status == 503 and (await early.json())["error"] == "not discovered yet"
    state.publish_topology(topology)
    body = await (await client.get("/api/v1/topology")).json()
    assert [g["index"] for g in body["gpus"]] == list(range(8))
    assert body["gpus"][0]["nvswitch"] is True and body["gpus"][0]["nvlinks"]["7"] == 18
    assert body["gpus"][0]["pci"] == "0000:18:00.0" and body["gpus"][0]["numa_node"] == 0
    assert body["gpus"][0]["pcie_root"] == body["nics"][0]["pcie_root"] == "pci0000:15"
    assert {(link["level"], link["nvlinks"]) for link in body["gpu_links"]} == {("nvlink", 18)}
    assert len(body["gpu_links"]) == 28
    nic = body["nics"][0]
    assert (nic["name"], nic["nearest_gpus"], nic["device_nodes"]) == ("mlx5_0", [0], ["/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"])
    assert {"gpu": 0, "nic": "mlx5_0", "level": "pcie_switch", "cost": 50} in body["nic_links"]
    assert body["levels"]["pcie_switch"] == 50 and body["errors"] == []
    assert body["discovered_at_unix"] == NOW and body["discovered_at"].endswith("Z")


async def serve_topology(directory: Path, scenario: str) -> tuple[ApiServer, NodeState]:
    state, topology = discovered(scenario, directory)
    state.publish_topology(topology)
    server = ApiServer(state, None, config_module.load(None, {"state_dir": str(directory)}), allocate)
    await server.start()
    return server, state


async def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_topo_prints_the_pcie_servers_matrix_with_its_nics(short_dir: Path, capsys) -> None:
    server, _ = await serve_topology(short_dir, "pcie-inference")
    try:
        code, out, err = await run(capsys, "topo", "--socket", server.socket_path)
    finally:
        await server.stop()
    assert (code, err) == (0, "")
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()
            if line.startswith(("GPU", "NIC")) and not line.startswith("NIC Legend")}
    header = next(line.split() for line in out.splitlines() if line.strip().startswith("GPU0"))
    assert header == [f"GPU{i}" for i in range(8)] + ["NIC0", "NIC1", "NUMA", "Socket", "PCIe-Root"]
    root0 = rows["GPU0"][-1]
    assert rows["GPU0"] == ["X", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS", "PIX", "SYS", "0", "0", root0]
    assert root0.startswith("pci0000:")
    assert rows["GPU5"][4] == "PIX" and rows["GPU5"][9] == "PIX" and rows["GPU5"][-3:-1] == ["1", "1"]
    assert rows["NIC0"] == ["PIX", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS", "X", "SYS", "0", "0", root0]
    assert "  NIC0: mlx5_0" in out and "  NIC1: mlx5_1" in out
    assert "  PIX  = Under a common PCIe switch" in out


async def test_topo_json_is_the_answer_in_protos_json_mapping(short_dir: Path, capsys) -> None:
    server, _ = await serve_topology(short_dir, "dgx-h100")
    try:
        code, out, _ = await run(capsys, "topo", "--socket", server.socket_path, "-o", "json")
    finally:
        await server.stop()
    assert code == 0
    body = json.loads(out)
    assert len(body["devices"]) == 8 and len(body["nics"]) == 8
    assert {(link["level"], link["links"]) for link in body["device_links"]} == {("interconnect", 18)}
    assert body["devices"][0]["switched_fabric"] is True and body["nics"][0]["device_nodes"] == ["/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"]


async def test_get_topology_names_each_places_pcie_root_gpu_0_and_mlx5_0_share_one(short_dir: Path) -> None:
    """On dgx-h100 GPU 0 and mlx5_0 hang off one PCIe switch below root port 0000:15:01.0, as on
    the real machine: GetTopology gives both the root complex "pci0000:15"."""
    server, _ = await serve_topology(short_dir, "dgx-h100")
    try:
        async with grpc.aio.insecure_channel(f"unix:{server.socket_path}") as channel:
            answer = await service_pb2_grpc.AgentServiceStub(channel).GetTopology(service_pb2.GetTopologyRequest())
    finally:
        await server.stop()
    devices, nics = answer.topology.devices, {nic.name: nic for nic in answer.topology.nics}
    assert devices[0].ref.index == 0 and devices[0].pcie_root == nics["mlx5_0"].pcie_root == "pci0000:15"
    assert all(device.pcie_root.startswith("pci0000:") for device in devices)
    assert devices[4].pcie_root == nics["mlx5_6"].pcie_root != devices[0].pcie_root


async def test_topo_before_discovery_says_so_in_one_line(short_dir: Path, capsys) -> None:
    state = NodeState(clock=lambda: NOW)
    server = ApiServer(state, None, config_module.load(None, {"state_dir": str(short_dir)}), allocate)
    await server.start()
    try:
        code, out, err = await run(capsys, "topo", "--socket", server.socket_path)
    finally:
        await server.stop()
    assert code == 1 and out == ""
    assert err.startswith("runtimekit: error: UNAVAILABLE: the agent has not discovered the node's topology yet")
    assert len(err.strip().splitlines()) == 1


def test_the_matrix_lists_what_discovery_could_not_read() -> None:
    from runtimekit._proto.runtimekit.v1 import node_pb2, slice_pb2

    topology = node_pb2.Topology(devices=[node_pb2.DevicePlace(ref=slice_pb2.DeviceRef(index=0))],
                                 errors=["GPU 0: PCI function 0000:18:00.0 is not in /sys/bus/pci/devices"])
    text = matrix(topology)
    assert text.splitlines()[1].split() == ["GPU0", "X", "N/A", "N/A", "N/A"]
    assert text.endswith("Not read (those places are unknown above):\n  GPU 0: PCI function 0000:18:00.0 is not in /sys/bus/pci/devices")
