"""The InfoROM detector on the readings hardware gives (a validation that passes, fails its
checksum, fails otherwise, is not supported), and one agent on the simulated node that raises and
clears ``inforom_corrupted`` from the simulator's ``inforom-corrupt`` fault."""

from __future__ import annotations

import json

from health_factories import ERR, make_gpu, make_input, make_snapshot, marked, raised, with_

from runtimekit.client import inject_remote
from runtimekit.gpu.types import NOT_SUPPORTED
from runtimekit.healthcheck.detectors.inforom import inforom
from runtimekit.healthcheck.types import DRAIN_AND_RESET_GPU, WARNING
from tests.agent_process import start_agent


def judged(valid) -> list:
    gpu = with_(make_gpu(0), "limits", inforom_valid=valid)
    _, found = inforom(None, make_input(make_snapshot(gpu, make_gpu(1)), None))
    return found


def test_a_corrupted_inforom_is_a_warning_that_drains_and_resets_that_gpu() -> None:
    (found,) = raised(judged(False))
    assert (found.gpu_index, found.fault, found.severity, found.action) == (0, "inforom_corrupted", WARNING,
                                                                              DRAIN_AND_RESET_GPU)
    assert not found.schedulable and "NVML_ERROR_CORRUPTED_INFOROM" in found.evidence


def test_a_valid_or_unsupported_inforom_raises_nothing_and_a_failed_validation_holds() -> None:
    assert judged(True) == [] and judged(NOT_SUPPORTED) == []
    found = judged(ERR)
    assert raised(found) == [] and marked(found) == {(0, "inforom_corrupted")}


def test_the_agent_raises_and_clears_it_from_the_drivers_answer(tmp_path) -> None:
    config = tmp_path / "runtimekit.yaml"
    config.write_text(json.dumps({"sampling": {"limits_refresh_seconds": 1}}))
    agent = start_agent(tmp_path, "--config", str(config), "--sim", "dgx-h100", "--interval", "0.3",
                        "--sim-processes", "0", "--sim-load", "idle")
    try:
        faults, wait = agent.gpu_faults, agent.wait_for
        inject_remote(agent.url, 2, "inforom-corrupt", {})
        wait(lambda: "inforom_corrupted" in faults(2))
        assert faults(1) == {}
        metric = ('runtimekit_gpu_fault_active{action="drain_and_reset_gpu",class="firmware",'
                  'fault="inforom_corrupted",gpu="2",')
        assert any(line.startswith(metric) and line.endswith(" 1.0") for line in agent.metrics_text().splitlines())
        inject_remote(agent.url, 2, "inforom-corrupt", {}, clear=True)
        wait(lambda: "inforom_corrupted" not in faults(2))
    finally:
        agent.stop()
