"""`runtimekit sim record` captures a node; recording the simulated node round-trips."""

import yaml

from runtimekit.sim import SimulatedNode, install, load_scenario, uninstall
from runtimekit.sim.record import record_scenario
from runtimekit.sim.scenario import parse_scenario


def test_record_the_simulated_node(clock, tmp_path):
    original = load_scenario("dgx-a100")
    install(SimulatedNode(original, seed=1, clock=clock, load="idle"))
    try:
        text = record_scenario("copy", sys_root=str(tmp_path))
    finally:
        uninstall()
    copy = parse_scenario(yaml.safe_load(text))
    assert copy.name == "copy" and len(copy.gpus) == 8
    for a, b in zip(original.gpus, copy.gpus):
        assert (a.uuid, a.pci_bus_id, a.serial, a.nvlinks) == (b.uuid, b.pci_bus_id, b.serial, b.nvlinks)
        assert a.model.name == b.model.name and a.model.memory_total_mib == b.model.memory_total_mib
        assert a.cpu_affinity == b.cpu_affinity
    assert [s.pci_bus_id for s in copy.nvswitches] == [s.pci_bus_id for s in original.nvswitches]
