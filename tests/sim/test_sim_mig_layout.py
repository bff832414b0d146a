"""The simulated driver's MIG state outlives the agent's process, as a real driver's does."""

import json

import pytest

from runtimekit.sim import FaultError, SimulatedNode, load_scenario
from runtimekit.sim.mig_layout import MigLayoutFile


def _node() -> SimulatedNode:
    return SimulatedNode(load_scenario("dgx-a100"), seed=1)


def _instances(node: SimulatedNode, gpu: int) -> list[tuple[int, int, int, list[tuple[int, str]]]]:
    return [(gi.id, gi.profile.id, gi.start, [(ci.id, ci.uuid) for ci in gi.cis.values()]) for gi in node.gpu_instances(gpu)]


def test_instances_made_before_a_kill_are_there_after_the_next_start(tmp_path):
    path = tmp_path / "simulated-mig.json"
    first = _node()
    MigLayoutFile(path).attach(first)
    first.set_mig_mode(2, True)
    first.reset_gpu(2)
    gi = first.create_gpu_instance(2, 9, 4)  # 3g.40gb at memory slice 4
    first.create_compute_instance(2, gi.id, 2)
    before = _instances(first, 2)

    second = _node()  # the agent's process died; the driver's state is read back
    MigLayoutFile(path).attach(second)
    assert second.mig_mode(2) == (True, True)
    assert _instances(second, 2) == before
    assert second.create_gpu_instance(2, 9, 0).start == 0  # the restored instance still holds slices 4..7
    with pytest.raises(FaultError):
        second.create_gpu_instance(2, 9, 4)


def test_a_reset_clears_the_saved_instances_too(tmp_path):
    path = tmp_path / "simulated-mig.json"
    node = _node()
    MigLayoutFile(path).attach(node)
    node.set_mig_mode(3, True)
    node.reset_gpu(3)
    node.create_gpu_instance(3, 19, 0)
    node.reset_gpu(3)
    saved = json.loads(path.read_text())["gpus"][3]
    assert saved["gpu_instances"] == [] and saved["current"] is True


def test_a_layout_that_does_not_fit_the_scenario_is_refused_by_name(tmp_path):
    path = tmp_path / "simulated-mig.json"
    path.write_text(json.dumps({"gpus": []}))
    with pytest.raises(FaultError, match="gpus: the saved layout has 0 GPUs"):
        MigLayoutFile(path).attach(_node())
    path.write_text("{not json")
    with pytest.raises(FaultError, match="not a saved MIG layout"):
        MigLayoutFile(path).attach(_node())
