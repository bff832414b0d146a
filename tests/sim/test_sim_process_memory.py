"""The simulated driver's memory used is its processes' sum, kept with the process list."""

from runtimekit import sim


def test_memory_used_follows_the_processes():
    t = [1000.0]
    node = sim.SimulatedNode(sim.load_scenario("dgx-h100"), seed=1, load="idle", clock=lambda: t[0])
    node.set_process_count(16)
    for gpu in range(node.gpu_count):
        assert node.memory(gpu)[2] == sum(p["used_memory_bytes"] for p in node.processes_on(gpu))
    before = node.memory(0)[2]
    pid = node.add_process(0, 3 << 30)
    assert node.memory(0)[2] == before + (3 << 30) == node.process_memory_on(0)
    node.remove_process(pid)
    t[0] += 5.0
    assert node.memory(0)[2] == sum(p["used_memory_bytes"] for p in node.processes_on(0))
