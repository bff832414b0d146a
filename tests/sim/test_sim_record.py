"""`runtimekit sim record` captures a node through the NVML layer; recording the simulated node round-trips."""

import ast
import copy
import inspect

import pytest
import yaml

from runtimekit.gpu.nvml import NvmlSession
from runtimekit.gpu.topology import GpuTopology, read_topology
from runtimekit.gpu.types import Unavailable, is_available
from runtimekit.sim import SimulatedNode, install, load_scenario, record, record_mig, uninstall
from runtimekit.sim.record import UNKNOWN_SWITCH, record_scenario
from runtimekit.sim.scenario import parse_scenario
from runtimekit.sim.scenario_types import MigInstanceSpec, MigSpec
from runtimekit.state.refs import normal_pci

NOT_SUPPORTED, DRIVER_NOT_LOADED, FUNCTION_NOT_FOUND = 3, 9, 13


@pytest.fixture
def installed(clock):
    """Install a simulated node of a scenario; yields the fake library. Uninstalls afterwards."""
    nodes = []

    def make(scenario: str, **kw):
        node = SimulatedNode(load_scenario(scenario), seed=1, clock=clock, **kw)
        nodes.append(node)
        return node, install(node)

    yield make
    uninstall()


def fake_sys(root, scenario):
    """A /sys fixture tree: the scenario's NUMA nodes, two CPU packages and its first NIC."""
    for n in scenario.numa_nodes:
        d = root / f"devices/system/node/node{n.id}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(n.cpus + "\n")
    for cpu, package in ((0, 0), (1, 1)):
        d = root / f"devices/system/cpu/cpu{cpu}/topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{package}\n")
    nic = scenario.nics[0]
    dev = root / "devices/pci0000:00" / nic.pci_bus_id[4:].lower()
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text(f"{nic.numa_node}\n")
    (root / "class/infiniband").mkdir(parents=True)
    (root / "class/infiniband" / nic.name).mkdir()
    (root / "class/infiniband" / nic.name / "device").symlink_to(dev)
    (root / "class/infiniband" / nic.name / "ports/1").mkdir(parents=True)
    (root / "class/infiniband" / nic.name / "ports/1/rate").write_text(f"{nic.rate_gbps} Gb/sec (4X HDR)\n")
    return root


def test_record_the_simulated_node(installed, tmp_path):
    original = load_scenario("dgx-a100")
    installed("dgx-a100", load="idle")
    text = record_scenario("copy", sys_root=str(fake_sys(tmp_path, original)))
    copy = parse_scenario(yaml.safe_load(text))
    assert copy.name == "copy" and len(copy.gpus) == 8
    for a, b in zip(original.gpus, copy.gpus, strict=True):
        assert (a.uuid, a.pci_bus_id, a.serial, a.nvlinks) == (b.uuid, b.pci_bus_id, b.serial, b.nvlinks)
        assert a.model.name == b.model.name and a.model.memory_total_mib == b.model.memory_total_mib
        assert a.cpu_affinity == b.cpu_affinity
        assert a.numa_node == b.numa_node
    assert [s.pci_bus_id for s in copy.nvswitches] == [s.pci_bus_id for s in original.nvswitches]
    assert [(n.id, n.cpus) for n in copy.numa_nodes] == [(n.id, n.cpus) for n in original.numa_nodes]
    assert copy.sockets == 2
    nic = original.nics[0]
    assert [(n.name, n.pci_bus_id, n.numa_node, n.rate_gbps) for n in copy.nics] == [
        (nic.name, nic.pci_bus_id, nic.numa_node, nic.rate_gbps)
    ]
    a, b = original.gpus[0].model, copy.gpus[0].model
    same = (
        "architecture", "compute_capability", "pci_device_id", "pci_subsystem_id", "vbios_version",
        "board_part_number", "memory_reserved_mib", "bar1_total_mib", "power_limit_w", "clocks_max_mhz",
        "clocks_idle_mhz", "temperature_thresholds_c", "pcie_generation", "pcie_width", "nvlink_links",
        "mig_capable", "fan", "retired_pages", "row_remapping",
    )
    assert {k: getattr(b, k) for k in same} == {k: getattr(a, k) for k in same}
    assert abs(b.power_idle_w - a.power_idle_w) <= 2  # read from an idle GPU, with its noise
    assert (copy.driver_version, copy.cuda_driver_version, copy.nvml_version) == (
        original.driver_version, original.cuda_driver_version, original.nvml_version,
    )


def test_the_output_says_it_was_recorded_and_from_which_driver(installed, tmp_path):
    installed("dgx-a100", load="idle")
    text = record_scenario("copy", sys_root=str(tmp_path))
    assert text.startswith("# Recorded by `runtimekit sim record`")
    assert "from NVIDIA driver 550.54.15" in text.splitlines()[0]
    notes = yaml.safe_load(text)["x-recorded"]
    assert notes["driver"] == "550.54.15"
    assert any("pcie_switch" in p for p in notes["placeholders"])
    assert any("gpus[*].nics" in p for p in notes["placeholders"])


def test_without_numa_in_sysfs_the_layout_comes_from_the_gpus(installed, tmp_path):
    installed("dgx-a100", load="idle")
    copy = parse_scenario(yaml.safe_load(record_scenario(sys_root=str(tmp_path))))
    original = load_scenario("dgx-a100")
    # NPS4: only the odd NUMA nodes hold GPUs, so only they can be derived from NVML
    with_gpus = sorted({(g.numa_node, g.cpu_affinity) for g in original.gpus})
    assert [(n.id, n.cpus) for n in copy.numa_nodes] == with_gpus
    assert [g.numa_node for g in copy.gpus] == [g.numa_node for g in original.gpus]


def test_a_recorded_dgx_h100_loads_back(installed, tmp_path):
    installed("dgx-h100")  # training load: whatever phase time 0 falls in
    path = tmp_path / "recorded.yaml"
    path.write_text(record_scenario("h100-copy", sys_root=str(tmp_path / "sys")))
    copy = load_scenario(str(path))
    original = load_scenario("dgx-h100")
    assert copy.name == "h100-copy" and copy.source == str(path)
    assert [g.uuid for g in copy.gpus] == [g.uuid for g in original.gpus]
    assert [g.nvlinks for g in copy.gpus] == [g.nvlinks for g in original.gpus]
    assert [s.pci_bus_id for s in copy.nvswitches] == [s.pci_bus_id for s in original.nvswitches]
    assert copy.gpus[0].model.power_idle_w < copy.gpus[0].model.power_limit_w == 700


def test_recording_when_nvml_cannot_start_is_a_runtime_error(installed, tmp_path, monkeypatch):
    _, lib = installed("dgx-h100")
    monkeypatch.setattr(lib, "nvmlInitWithFlags", lambda flags: DRIVER_NOT_LOADED, raising=False)
    with pytest.raises(RuntimeError, match="cannot record: NVML is not usable here .*DRIVER_NOT_LOADED"):
        record_scenario(sys_root=str(tmp_path))


def test_a_lost_gpu_stops_the_recording_with_its_index(installed, tmp_path):
    node, _ = installed("dgx-h100")
    node.inject(2, "gpu-lost")
    with pytest.raises(RuntimeError, match="GPU 2 does not answer NVML"):
        record_scenario(sys_root=str(tmp_path))


def test_an_nvlink_far_end_nvml_does_not_name_is_a_marked_placeholder(installed, tmp_path, monkeypatch):
    _, lib = installed("dgx-h100")
    monkeypatch.setattr(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", lambda *a: NOT_SUPPORTED, raising=False)
    data = yaml.safe_load(record_scenario(sys_root=str(tmp_path)))
    assert data["nvswitches"] == [{"id": 0, "pci_bus_id": UNKNOWN_SWITCH}]
    assert all(g["nvlinks"] == [0] * 18 for g in data["gpus"])
    assert any(p.startswith("gpus[3].nvlinks") and UNKNOWN_SWITCH in p for p in data["x-recorded"]["placeholders"])


def test_topology_reads_through_the_session(installed):
    installed("dgx-h100")
    session = NvmlSession()
    session.init()
    try:
        topo = read_topology(session, 4, 18)
    finally:
        session.shutdown()
    spec = load_scenario("dgx-h100").gpus[4]
    assert isinstance(topo, GpuTopology)
    assert topo.numa_node == 1 and topo.pci_device_id == spec.model.pci_device_id
    assert topo.cpu_affinity == tuple(range(56, 112)) + tuple(range(168, 224))
    assert [p.remote_type for p in topo.nvlinks] == ["switch"] * 18
    switches = load_scenario("dgx-h100").nvswitches
    assert [p.remote_pci_bus_id for p in topo.nvlinks] == [normal_pci(switches[s].pci_bus_id) for s in spec.nvlinks]


def test_nvlink_version_is_nvmls_enum_not_the_generation():
    def topo(version):
        return GpuTopology(0, 0, 0, 0, (0,), version, ())

    assert topo(5).nvlink_generation == 3  # A100: NVML_NVLINK_VERSION_3_1
    assert topo(6).nvlink_generation == 4  # H100: NVML_NVLINK_VERSION_4_0
    assert topo(7).nvlink_generation == 5
    assert not is_available(topo(Unavailable("not_supported")).nvlink_generation)
    assert not is_available(topo(99).nvlink_generation)


@pytest.mark.parametrize("module", [record, record_mig])
def test_record_does_not_import_pynvml(module):
    """House rule: only runtimekit/gpu/ imports pynvml."""
    tree = ast.parse(inspect.getsource(module))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m.split(".")[0] == "pynvml" for m in imported)


def mig_scenario(tmp_path):
    """dgx-a100 with GPU 2 in MIG mode: a 4g split in two compute instances and a 1g."""
    data = copy.deepcopy(load_scenario("dgx-a100").raw)
    data["gpus"][2]["mig"] = {"enabled": True, "instances": [
        {"profile": "4g.40gb", "placement": 0, "compute_instances": ["2c.4g.40gb", "2c.4g.40gb"]},
        {"profile": "1g.10gb"},
    ]}
    path = tmp_path / "mig.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_record_keeps_the_mig_mode_and_instances(installed, tmp_path):
    installed(mig_scenario(tmp_path), load="idle")
    copy_ = parse_scenario(yaml.safe_load(record_scenario("copy", sys_root=str(tmp_path / "sys"))))
    assert copy_.gpus[2].mig == MigSpec(True, (
        MigInstanceSpec("4g.40gb", 0, ("2c.4g.40gb", "2c.4g.40gb")),
        MigInstanceSpec("1g.10gb", 6, ("1g.10gb",)),  # the driver's choice, written down
    ))
    assert [g.index for g in copy_.gpus if g.mig is not None] == [0, 1, 2]  # dgx-a100's GPUs 0 and 1 start in MIG mode
    assert copy_.gpus[0].mig == copy_.gpus[1].mig == MigSpec(True, ())


def test_a_driver_without_the_mig_instance_api_still_records(installed, tmp_path, monkeypatch):
    _, lib = installed(mig_scenario(tmp_path), load="idle")
    monkeypatch.setattr(lib, "nvmlDeviceGetGpuInstanceProfileInfoV", lambda *a: FUNCTION_NOT_FOUND, raising=False)
    data = yaml.safe_load(record_scenario(sys_root=str(tmp_path / "sys")))
    assert data["gpus"][2]["mig"] == {"enabled": True, "instances": []}
    assert any(p.startswith("gpus[2].mig: in MIG mode, but no GPU instance") for p in data["x-recorded"]["placeholders"])


def test_recorded_idle_clocks_never_exceed_the_max_clocks():
    """A scenario refuses an idle clock above its max; NVML that gave no max clock (0) must not
    make the recording unloadable."""
    notes = record._Notes()
    model = {"power_limit_w": 300, "clocks_max_mhz": {"sm": 0, "memory": 0, "graphics": 1410}}
    record._idle_facts(model, "m", [], notes)
    assert dict(model["clocks_idle_mhz"]) == {"sm": 0, "memory": 0, "graphics": 282}
