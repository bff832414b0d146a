"""Topology in the simulator: NVML's topology calls through pynvml, the sysfs tree read back by
runtimekit.host exactly as on a real node, the scenarios' PCIe layouts and their validation."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pynvml
import pytest
import yaml

from runtimekit import sim
from runtimekit.config import Config
from runtimekit.gpu.reader import NodeReader
from runtimekit.host import (
    cpu_sockets,
    normalise_bus_id,
    numa_nodes,
    pci_device_dir,
    pci_numa_node,
    pci_path,
    pcie_switches_above,
    rdma_nics,
)
from runtimekit.sim.host import SimulatedHost
from runtimekit.sim.scenario import parse_scenario
from runtimekit.sim.sysfs import write_sys_tree

SCENARIOS = sim.list_scenarios()
T = pynvml  # level and status constants
SINGLE, MULTIPLE, HOSTBRIDGE = T.NVML_TOPOLOGY_SINGLE, T.NVML_TOPOLOGY_MULTIPLE, T.NVML_TOPOLOGY_HOSTBRIDGE
NODE, SYSTEM, INTERNAL = T.NVML_TOPOLOGY_NODE, T.NVML_TOPOLOGY_SYSTEM, T.NVML_TOPOLOGY_INTERNAL
# pynvml spells NVML_P2P_CAPS_INDEX_READ as the tuple (0,) (a stray comma): pass the plain index.
READ = 0
OK, CNS, NS = T.NVML_P2P_STATUS_OK, T.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED, T.NVML_P2P_STATUS_NOT_SUPPORTED


@pytest.fixture
def on():
    """on(name) -> (node, handles): pynvml initialised on a simulated ``name``; uninstalled after."""
    def start(name: str) -> tuple[sim.SimulatedNode, list]:
        node = sim.SimulatedNode(sim.load_scenario(name), seed=1, load="idle")
        sim.install(node)
        pynvml.nvmlInit()
        return node, [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(node.gpu_count)]

    yield start
    sim.uninstall()


def _raw(name: str) -> dict:
    import importlib.resources as r

    return yaml.safe_load(r.files("runtimekit.sim").joinpath(f"scenarios/{name}.yaml").read_text())


# ---- the facts of each scenario, as NVML answers them ---------------------------------------------

# scenario -> {(gpu a, gpu b): nvmlDeviceGetTopologyCommonAncestor}
LEVELS = {
    "dgx-h100": {(0, 1): NODE, (0, 3): NODE, (0, 4): SYSTEM, (5, 7): NODE},
    "hgx-h200": {(0, 1): NODE, (3, 4): SYSTEM},
    "dgx-a100": {(0, 1): MULTIPLE, (2, 3): MULTIPLE, (0, 2): SYSTEM, (1, 6): SYSTEM},  # NPS4: NUMA 1 vs 3 is SYS
    "pcie-inference": {(0, 1): SINGLE, (2, 3): SINGLE, (0, 2): NODE, (1, 3): NODE, (0, 4): SYSTEM, (6, 7): SINGLE},
    "dgx-2": {(0, 1): SINGLE, (0, 2): MULTIPLE, (0, 3): MULTIPLE, (0, 4): NODE, (0, 8): SYSTEM, (14, 15): SINGLE,
              (12, 8): NODE},
}


@pytest.mark.parametrize("name", sorted(LEVELS))
def test_common_ancestor_is_the_scenarios_pcie_layout(on, name):
    _, h = on(name)
    for (a, b), level in LEVELS[name].items():
        assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[a], h[b]) == level, (a, b)
        assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[b], h[a]) == level, (b, a)
    assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[0]) == INTERNAL


def test_hostbridge_when_two_switches_share_a_root_complex():
    raw = _raw("pcie-inference")
    raw["pcie_switches"] = [  # pex0 and pex1 below two root ports of one host bridge (pci0000:16)
        {"name": "pex0", "root_port": "00000000:16:01.0", "upstream_port": "00000000:17:00.0"},
        {"name": "pex1", "root_port": "00000000:16:03.0", "upstream_port": "00000000:38:00.0"},
    ]
    node = sim.SimulatedNode(parse_scenario(raw), seed=1, load="idle")
    sim.install(node)
    try:
        pynvml.nvmlInit()
        h = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 2, 4)]
        assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[1]) == HOSTBRIDGE
        assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[2]) == SYSTEM
    finally:
        sim.uninstall()


def test_nearest_gpus_are_those_at_the_level_or_nearer(on):
    _, h = on("pcie-inference")
    index = {pynvml.nvmlDeviceGetPciInfo(x).busId: i for i, x in enumerate(h)}

    def nearest(gpu: int, level: int) -> list[int]:
        return [index[pynvml.nvmlDeviceGetPciInfo(x).busId] for x in pynvml.nvmlDeviceGetTopologyNearestGpus(h[gpu], level)]

    assert nearest(0, SINGLE) == [1]
    assert nearest(0, MULTIPLE) == nearest(0, HOSTBRIDGE) == [1]
    assert nearest(0, NODE) == [1, 2, 3]
    assert nearest(5, NODE) == [4, 6, 7]
    assert nearest(0, SYSTEM) == [1, 2, 3, 4, 5, 6, 7]
    assert nearest(0, INTERNAL) == []
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetTopologyNearestGpus(h[0], 15)


def test_p2p_over_nvlink_on_nvswitch_machines_every_pair(on):
    for name in ("dgx-h100", "dgx-a100", "dgx-2"):
        _, h = on(name)
        for a, b in itertools.combinations(range(len(h)), 2):
            for caps in (T.NVML_P2P_CAPS_INDEX_NVLINK, READ, T.NVML_P2P_CAPS_INDEX_WRITE,
                         T.NVML_P2P_CAPS_INDEX_ATOMICS):
                assert pynvml.nvmlDeviceGetP2PStatus(h[a], h[b], caps) == OK, (name, a, b, caps)
        sim.uninstall()


def test_p2p_over_pcie_within_a_socket_only(on):
    _, h = on("pcie-inference")
    p2p = pynvml.nvmlDeviceGetP2PStatus
    assert p2p(h[0], h[1], T.NVML_P2P_CAPS_INDEX_NVLINK) == NS
    assert p2p(h[0], h[1], READ) == OK
    assert p2p(h[0], h[3], T.NVML_P2P_CAPS_INDEX_WRITE) == OK  # other switch, same socket
    assert p2p(h[0], h[4], READ) == CNS
    assert p2p(h[7], h[2], T.NVML_P2P_CAPS_INDEX_PCI) == CNS
    assert p2p(h[0], h[1], T.NVML_P2P_CAPS_INDEX_ATOMICS) == NS
    assert p2p(h[0], h[0], READ) == NS
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        p2p(h[0], h[1], T.NVML_P2P_CAPS_INDEX_UNKNOWN)


def test_p2p_nvlink_follows_link_state_and_a_lost_peer_is_an_error(on):
    node, h = on("dgx-2")
    for link in range(6):
        node.inject(3, "nvlink-down", link=link)
    assert pynvml.nvmlDeviceGetP2PStatus(h[3], h[9], T.NVML_P2P_CAPS_INDEX_NVLINK) == NS
    assert pynvml.nvmlDeviceGetP2PStatus(h[3], h[9], READ) == CNS  # PCIe across sockets
    assert pynvml.nvmlDeviceGetP2PStatus(h[2], h[9], T.NVML_P2P_CAPS_INDEX_NVLINK) == OK
    node.inject(5, "gpu-lost")
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetP2PStatus(h[0], h[5], T.NVML_P2P_CAPS_INDEX_NVLINK)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetTopologyCommonAncestor(h[0], h[5])


def test_nvlink_remote_end_is_the_gpus_own_baseboard_switch(on):
    node, h = on("dgx-2")
    switches = [s.pci_bus_id for s in node.scenario.nvswitches]
    for gpu in (0, 15):
        for link in range(6):
            assert pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h[gpu], link) == T.NVML_NVLINK_DEVICE_TYPE_SWITCH
            remote = pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h[gpu], link).busId
            remote = remote.decode() if isinstance(remote, bytes) else remote
            assert remote == switches[link + (6 if gpu >= 8 else 0)]


def test_pcie_inference_has_no_nvlink(on):
    _, h = on("pcie-inference")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetNvLinkState(h[0], 0)
    assert pynvml.nvmlDeviceGetName(h[0]) == "NVIDIA L40S"
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigMode(h[0])


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_agents_reader_samples_every_scenario(on, name):
    node, _ = on(name)
    snapshot = NodeReader().sample()
    assert snapshot.nvml_up and snapshot.device_count == len(snapshot.gpus) == node.gpu_count
    assert [g.errors for g in snapshot.gpus] == [()] * node.gpu_count


# ---- the sysfs tree, read back by runtimekit.host ----------------------------------------------

def _switch_chain(scenario: sim.Scenario, name: str) -> list[str]:
    by_name = {s.name: s for s in scenario.pcie_switches}
    chain = []
    while name:
        chain.append(normalise_bus_id(by_name[name].upstream_port))
        name = by_name[name].parent
    return chain[::-1]


@pytest.mark.parametrize("name", SCENARIOS)
def test_sysfs_reads_back_the_scenarios_facts(tmp_path: Path, name):
    scenario = sim.load_scenario(name)
    write_sys_tree(scenario, tmp_path / "sys")
    root = tmp_path / "sys"
    for d in (*scenario.gpus, *scenario.nics):
        assert pcie_switches_above(d.pci_bus_id, root) == _switch_chain(scenario, d.pcie_switch), d
        assert pci_numa_node(d.pci_bus_id, root) == d.numa_node
        assert len(pci_path(d.pci_bus_id, root)) == 1 + 2 * len(_switch_chain(scenario, d.pcie_switch))
    assert [(n.name, n.pci_bus_id, n.numa_node, n.rate_gbps) for n in rdma_nics(root)] == sorted(
        (n.name, normalise_bus_id(n.pci_bus_id), n.numa_node, n.rate_gbps) for n in scenario.nics
    )
    assert [(n.id, n.cpus) for n in numa_nodes(root)] == [(n.id, n.cpus) for n in scenario.numa_nodes]
    assert cpu_sockets(root) == scenario.sockets
    for n in scenario.numa_nodes:
        first = n.cpus.split(",")[0].split("-")[0]
        assert (root / f"devices/system/cpu/cpu{first}/topology/physical_package_id").read_text() == f"{n.socket}\n"
    for i, nic in enumerate(scenario.nics):
        verbs = root / f"class/infiniband_verbs/uverbs{i}"
        assert (verbs / "ibdev").read_text() == f"{nic.name}\n"
        assert (verbs / "device").resolve() == pci_device_dir(nic.pci_bus_id, root)


@pytest.mark.parametrize("name", SCENARIOS)
def test_nvml_levels_agree_with_the_sysfs_tree(on, tmp_path: Path, name):
    """For every GPU pair: NVML's level is what a reader of sysfs derives (shared switch: SINGLE when
    the nearest switch is the same, else MULTIPLE; same host bridge; same NUMA node; else SYSTEM)."""
    node, h = on(name)
    root = tmp_path / "sys"
    write_sys_tree(node.scenario, root)

    def from_sysfs(a: sim.scenario.GpuSpec, b: sim.scenario.GpuSpec) -> int:
        sa, sb = pcie_switches_above(a.pci_bus_id, root), pcie_switches_above(b.pci_bus_id, root)
        if set(sa) & set(sb):
            return SINGLE if sa[-1] == sb[-1] else MULTIPLE
        bridge = [pci_device_dir(g.pci_bus_id, root).relative_to(root / "devices").parts[0] for g in (a, b)]  # type: ignore[union-attr]
        if bridge[0] == bridge[1]:
            return HOSTBRIDGE
        return NODE if pci_numa_node(a.pci_bus_id, root) == pci_numa_node(b.pci_bus_id, root) else SYSTEM

    gpus = node.scenario.gpus
    for a, b in itertools.combinations(range(len(gpus)), 2):
        assert pynvml.nvmlDeviceGetTopologyCommonAncestor(h[a], h[b]) == from_sysfs(gpus[a], gpus[b]), (a, b)


def test_nics_share_the_pcie_switch_of_their_gpus(tmp_path: Path):
    """NICs below a PCIe switch a GPU is below (any level): DGX H100 one NIC per GPU; DGX A100 each
    pair's two NICs (PXB); pcie-inference NICs on switches 0 and 2 only; DGX-2 the leaf's NIC (PIX)
    and the other leaf's below the same top switch (PXB)."""
    expected = {
        "dgx-h100": {0: ["mlx5_0"], 1: ["mlx5_3"], 4: ["mlx5_6"], 7: ["mlx5_11"]},
        "dgx-a100": {0: ["mlx5_0", "mlx5_1"], 1: ["mlx5_0", "mlx5_1"], 6: ["mlx5_8", "mlx5_9"]},
        "pcie-inference": {0: ["mlx5_0"], 1: ["mlx5_0"], 2: [], 3: [], 4: ["mlx5_1"], 5: ["mlx5_1"], 6: [], 7: []},
        "dgx-2": {0: ["mlx5_0", "mlx5_1"], 3: ["mlx5_0", "mlx5_1"], 4: ["mlx5_2", "mlx5_3"], 15: ["mlx5_8", "mlx5_9"]},
    }
    for name, table in expected.items():
        scenario = sim.load_scenario(name)
        root = tmp_path / name
        write_sys_tree(scenario, root)
        nics = rdma_nics(root)
        for gpu, names in table.items():
            above = set(pcie_switches_above(scenario.gpus[gpu].pci_bus_id, root))
            near = sorted(n.name for n in nics if above & set(pcie_switches_above(n.pci_bus_id, root)))
            assert near == names, (name, gpu)
    # DGX-2: the NIC on the GPU's own (nearest) switch, PIX in `nvidia-smi topo -m`.
    scenario = sim.load_scenario("dgx-2")
    root = tmp_path / "dgx-2"
    pix = {g.index: [n.name for n in rdma_nics(root) if pcie_switches_above(n.pci_bus_id, root)[-1]
                     == pcie_switches_above(g.pci_bus_id, root)[-1]] for g in scenario.gpus}
    assert pix == {i: [["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"][i // 2]]
                   for i in range(16)}


def test_the_simulated_host_writes_sys_and_the_agent_reads_it(tmp_path: Path):
    """Simulation.configure points topology.sys_root at the simulated host's sysfs (only from the
    default "/sys"); the host writes the tree when it is made."""
    from runtimekit.sim.component import Simulation

    config = Config()
    config = dataclasses.replace(config, state_dir=str(tmp_path / "state"),
                                 extra={**config.extra, "sim.scenario": "pcie-inference", "sim.seed": None,
                                        "sim.load": None, "sim.processes": 0, "sim.pods": 0})
    simulation = Simulation(config)
    try:
        configured = simulation.configure(config)
        assert configured.topology.sys_root == simulation.host.sys_root == str(simulation.root / "sys")
        assert cpu_sockets(configured.topology.sys_root) == 2
        assert [n.name for n in rdma_nics(configured.topology.sys_root)] == ["mlx5_0", "mlx5_1"]
        elsewhere = dataclasses.replace(config, topology=dataclasses.replace(config.topology, sys_root="/mnt/sys"))
        assert simulation.configure(elsewhere).topology.sys_root == "/mnt/sys"
    finally:
        simulation.remove()


def test_host_info_names_the_sys_root(tmp_path: Path):
    host = SimulatedHost(sim.SimulatedNode(sim.load_scenario("dgx-a100"), seed=1), tmp_path / "root")
    assert host.info()["sys_root"] == host.sys_root
    assert pcie_switches_above("00000000:07:00.0", host.sys_root) == ["0000:01:00.0", "0000:03:00.0"]


# ---- scenario rules ----------------------------------------------------------------------------

def _with(mutate) -> dict:
    raw = _raw("pcie-inference")
    mutate(raw)
    return raw


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r.update(pcie_switches=[{"name": "pex0", "upstream_port": "00000000:17:00.0"}]),
         "pcie_switches[0]: give exactly one of root_port"),
        (lambda r: r.update(pcie_switches=[{"name": "pex0", "upstream_port": "00000000:17:00.0", "parent": "nope"}]),
         "pcie_switches[0].parent: unknown switch 'nope'"),
        (lambda r: r.update(pcie_switches=[{"name": "a", "upstream_port": "00000000:17:00.0", "parent": "b"},
                                           {"name": "b", "upstream_port": "00000000:18:00.0", "parent": "a"}]),
         "is its own ancestor"),
        (lambda r: r.update(pcie_switches=[{"name": "pex0", "upstream_port": "17:00.0", "root_port": "00000000:16:01.0"}]),
         "pcie_switches[0].upstream_port: must look like"),
        (lambda r: r.update(pcie_switches=[{"name": "pex0", "upstream_port": "00000000:19:00.0",
                                            "root_port": "00000000:16:01.0"}]),
         "bus id 00000000:19:00.0 is also gpus[0].pci_bus_id"),
        (lambda r: r.update(pcie_switches=[{"name": "pex0", "upstream_port": "00000000:17:00.0", "root_port": "00000000:37:01.0"}]),
         "bus id 00000000:37:01.0 is also the root port of PCIe switch"),
        (lambda r: r["gpus"][1].update(numa_node=1, cpu_affinity="32-63,96-127"),
         "gpus[1].numa_node: 1, but gpus[0] below the same PCIe switch tree ('pex0') is on NUMA node 0"),
        (lambda r: r["node"]["numa_nodes"][1].update(socket=2), "node.numa_nodes[1].socket: must be in 0..1"),
        (lambda r: r["nics"][0].update(numa_node=9), "nics[0].numa_node: 9 is not in node.numa_nodes"),
        (lambda r: r["gpus"][0].update(pci_bus_id="00000000:02:00.0"), "leaves no room below it"),
    ],
)
def test_pcie_rules_name_the_key(mutate, message):
    with pytest.raises(sim.ScenarioError) as err:
        parse_scenario(_with(mutate))
    assert message in str(err.value)


def test_sockets_default_to_an_even_split():
    raw = _raw("dgx-a100")
    for n in raw["node"]["numa_nodes"]:
        del n["socket"]
    assert [n.socket for n in parse_scenario(raw).numa_nodes] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_new_scenarios_describe_their_machines():
    pcie = sim.load_scenario("pcie-inference")
    assert len(pcie.gpus) == 8 and not pcie.nvswitches and pcie.gpus[0].model.nvlink_links == 0
    assert [g.pcie_switch for g in pcie.gpus] == ["pex0", "pex0", "pex1", "pex1", "pex2", "pex2", "pex3", "pex3"]
    dgx2 = sim.load_scenario("dgx-2")
    assert len(dgx2.gpus) == 16 and len(dgx2.nvswitches) == 12
    v100 = dgx2.gpus[0].model
    assert (v100.name, v100.architecture, v100.mig_capable, v100.row_remapping, v100.retired_pages) == (
        "Tesla V100-SXM3-32GB", "volta", False, False, True)
    assert len({g.uuid for s in SCENARIOS for g in sim.load_scenario(s).gpus}) == sum(
        len(sim.load_scenario(s).gpus) for s in SCENARIOS)


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-2"])
def test_record_reads_the_pcie_switches_back_from_sysfs(on, tmp_path: Path, name):
    """``runtimekit sim record`` over the simulated sysfs tree recovers the scenario's PCIe layout:
    every GPU pair at the same NVML level, every NIC below the same switches."""
    from runtimekit.sim.record import record_scenario
    from runtimekit.sim.topology import SimTopology

    node, _ = on(name)
    write_sys_tree(node.scenario, tmp_path / "sys")
    copy = parse_scenario(yaml.safe_load(record_scenario("copy", sys_root=str(tmp_path / "sys"))))
    original, recorded = SimTopology(node.scenario), SimTopology(copy)
    for a, b in itertools.combinations(range(node.gpu_count), 2):
        assert recorded.level(a, b) == original.level(a, b), (a, b)
    for nic in node.scenario.nics:
        assert recorded.switches_above(nic.pci_bus_id.upper()) == original.switches_above(nic.pci_bus_id.upper())
