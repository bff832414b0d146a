"""nvitop's API runs unchanged on the simulated node."""

import nvitop

from runtimekit.sim import SimulatedNode, install, load_scenario, uninstall


def test_nvitop_device_api(clock):
    node = SimulatedNode(load_scenario("dgx-h100"), seed=2, clock=clock, load="busy")
    install(node)
    try:
        devices = nvitop.Device.all()
        assert len(devices) == 8
        d = devices[3]
        assert d.name() == "NVIDIA H100 80GB HBM3"
        assert d.bus_id() == "00000000:5D:00.0"
        assert d.memory_total() == 81559 << 20
        assert 0 < d.gpu_utilization() <= 100
        assert d.power_limit() == 700_000
        assert d.fan_speed() == nvitop.NA
        assert d.performance_state() == "P0"
        assert len(d.processes()) == 1
        assert len(d.nvlink_throughput()) == 18
        snapshot = d.as_snapshot()
        assert snapshot.uuid == node.gpu(3).uuid
    finally:
        uninstall()
