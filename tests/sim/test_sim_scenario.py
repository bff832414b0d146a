from pathlib import Path

import pytest
import yaml

from runtimekit.sim import ScenarioError, list_scenarios, load_scenario
from runtimekit.sim.scenario import parse_scenario


def test_builtins_load_and_describe_real_machines():
    assert {"dgx-h100", "dgx-a100", "hgx-h200"} <= set(list_scenarios())
    h100 = load_scenario("dgx-h100")
    assert len(h100.gpus) == 8 and len(h100.nvswitches) == 4
    g = h100.gpus[0]
    assert g.model.name == "NVIDIA H100 80GB HBM3" and g.model.memory_total_mib == 81559
    assert [g.nvlinks.count(s) for s in range(4)] == [4, 5, 5, 4]
    assert [x.numa_node for x in h100.gpus] == [0] * 4 + [1] * 4
    assert [x.nics[0] for x in h100.gpus] == ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    a100 = load_scenario("dgx-a100")
    assert len(a100.nvswitches) == 6 and a100.gpus[0].model.nvlink_links == 12
    assert a100.gpus[0].nics == a100.gpus[1].nics and len(a100.gpus[0].nics) == 2
    assert [a100.gpus[i].numa_node for i in (0, 2, 4, 6)] == [3, 1, 7, 5]
    h200 = load_scenario("hgx-h200")
    assert h200.gpus[0].model.memory_total_mib == 143771 and h200.gpus[0].model.name == "NVIDIA H200"
    assert len({g.uuid for s in (h100, a100, h200) for g in s.gpus}) == 24


def _raw(name="dgx-h100"):
    import importlib.resources as r

    return yaml.safe_load(r.files("runtimekit.sim").joinpath(f"scenarios/{name}.yaml").read_text())


def test_load_by_path(tmp_path: Path):
    p = tmp_path / "mine.yaml"
    p.write_text(yaml.safe_dump(_raw()))
    assert load_scenario(str(p)).name == "dgx-h100"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(colour="blue"), "colour: unknown key"),
        (lambda d: d["gpus"][2].update(numa="0"), "gpus[2].numa: unknown key"),
        (lambda d: d["gpus"][1].update(numa_node="zero"), "gpus[1].numa_node: must be an integer"),
        (lambda d: d["models"]["h100-sxm5-80gb"].update(power_limit_w="700"), "power_limit_w: must be an integer"),
        (lambda d: d["models"]["h100-sxm5-80gb"].update(fan=1), "fan: must be true or false"),
        (lambda d: d["gpus"][0].pop("uuid"), "gpus[0].uuid: required key is missing"),
        (lambda d: d["gpus"][0].update(model="b300"), "gpus[0].model: unknown model"),
        (lambda d: d["gpus"][0].update(nvlinks=[0] * 17), "gpus[0].nvlinks: has 17 entries"),
        (lambda d: d["gpus"][0].update(nvlinks=[9] * 18), "switch index 9 out of range"),
        (lambda d: d["gpus"][0].update(uuid="GPU-1"), "gpus[0].uuid: must look like"),
        (lambda d: d["gpus"][0].update(nics=["mlx5_99"]), "unknown NIC"),
        (lambda d: d["models"]["h100-sxm5-80gb"].update(architecture="kepler9"), "architecture: must be one of"),
        (lambda d: d.update(load={"profile": "party"}), "load.profile"),
    ],
)
def test_validation_names_the_key(mutate, message):
    data = _raw()
    mutate(data)
    with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_scenario(data)


def test_unknown_name_and_bad_yaml(tmp_path: Path):
    with pytest.raises(ScenarioError, match="not a built-in"):
        load_scenario("dgx-z900")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(str(bad))
    assert issubclass(ScenarioError, ValueError)


_H100 = "models.h100-sxm5-80gb"


_BOUNDS = [
    # nvmlMemory_t / nvmlBAR1Memory_t hold bytes in unsigned long long: at most 2^64-1 bytes
    (lambda m, d: m.update(memory_total_mib=10**30), f"{_H100}.memory_total_mib: got {10**30}; must be in 1..17592186044415"),
    (lambda m, d: m.update(bar1_total_mib=1 << 44), f"{_H100}.bar1_total_mib: got {1 << 44}; must be in 1..17592186044415"),
    # nvmlDeviceGetPowerManagementLimit answers mW in an unsigned int
    (lambda m, d: m.update(power_limit_w=5_000_000), f"{_H100}.power_limit_w: got 5000000; must be in 1..4294967"),
    (lambda m, d: m.update(pci_device_id=1 << 32), f"{_H100}.pci_device_id: got 4294967296; must be in 0..4294967295"),
    (lambda m, d: m.update(pci_subsystem_id=-1), f"{_H100}.pci_subsystem_id: got -1; must be in 0..4294967295"),
    (lambda m, d: m["clocks_max_mhz"].update(sm=1 << 32), f"{_H100}.clocks_max_mhz.sm: got 4294967296; must be in 0..4294967295"),
    (lambda m, d: m["temperature_thresholds_c"].update(slowdown=-5), f"{_H100}.temperature_thresholds_c.slowdown: got -5"),
    (lambda m, d: m["clocks_idle_mhz"].update(sm=5000), f"{_H100}.clocks_idle_mhz.sm: got 5000; must be at most clocks_max_mhz.sm (1980)"),
    (lambda m, d: m["clocks_idle_mhz"].update(memory=2700), f"{_H100}.clocks_idle_mhz.memory: got 2700; must be at most clocks_max_mhz.memory"),
    (lambda m, d: d["gpus"][0].update(cpu_affinity="10-2"), "gpus[0].cpu_affinity: range 10-2 goes backwards"),
    (lambda m, d: d["gpus"][3].update(cpu_affinity="0-20000000"), "gpus[3].cpu_affinity: CPU 20000000 is past 8191"),
    # ASCII digits only, and nothing after the list (a regular expression's \d and $ let both through)
    (lambda m, d: d["gpus"][2].update(cpu_affinity="\u0663"), "gpus[2].cpu_affinity: must be a cpu list"),
    (lambda m, d: d["node"]["numa_nodes"][0].update(cpus="0-55\n"), "node.numa_nodes[0].cpus: must be a cpu list"),
    (lambda m, d: d["node"]["numa_nodes"][1].update(cpus="56-9000"), "node.numa_nodes[1].cpus: CPU 9000 is past 8191"),
    (lambda m, d: d["node"]["numa_nodes"][1].update(id=1 << 20), "node.numa_nodes[1].id: got 1048576; must be in 0..1023"),
    (lambda m, d: d["driver"].update(cuda_version=1 << 31), "driver.cuda_version: got 2147483648; must be in 0..2147483647"),
]


@pytest.mark.parametrize("mutate, message", _BOUNDS, ids=[message.split(":")[0] for _, message in _BOUNDS])
def test_numbers_are_bounded_by_the_c_types_and_real_machines(mutate, message):
    data = _raw()
    mutate(data["models"]["h100-sxm5-80gb"], data)
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(data)
    assert str(refused.value).startswith(message), str(refused.value)


def test_builtins_pass_the_bounds():
    for name in list_scenarios():
        load_scenario(name)
