"""Process- and pod-level metrics end to end: a real agent on the simulated node, whose fake
kubelet (pod-resources), fake CRI runtime and fixture /proc tree are read by the real
attribution code over unix sockets and files."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.agent_process import ROOT, start_agent
from tests.integration.test_serve import promtool_check

INTERVAL = "0.5"


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    agent = start_agent(tmp_path_factory.mktemp("pods"), "--sim", "dgx-h100", "--interval", INTERVAL,
                        "--sim-load", "busy", "--sim-pods", "8", "--sim-processes", "24", "--seed", "3")
    yield agent
    agent.stop()


def sim(agent, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "runtimekit.cli", "sim", *args, "--agent", agent.url],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def wait_for(agent, condition, timeout: float = 20.0) -> float:
    """Poll until ``condition()`` holds; returns the sampling cycles it took."""
    before = agent.samples_total()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return agent.samples_total() - before
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s; log:\n{agent.log()[-3000:]}")


def series(agent, name: str) -> list[dict]:
    return [dict(labels) | {"value": value} for (n, labels), value in agent.samples().items() if n == name]


def test_every_simulated_process_carries_its_pod(agent):
    processes = sim(agent, "process", "list")["processes"]
    assert len(processes) >= 24
    wait_for(agent, lambda: len(series(agent, "runtimekit_process_gpu_memory_bytes")) >= len(processes) - 2)
    rows = {(r["pid"], r["gpu"]): r for r in series(agent, "runtimekit_process_gpu_memory_bytes")}
    processes = sim(agent, "process", "list")["processes"]  # the churn may have moved on
    checked = 0
    for process in processes:
        row = rows.get((str(process["pid"]), str(process["gpu"])))
        if row is None:
            continue  # started after that scrape
        checked += 1
        assert row["pod"] == (process["pod"] or ""), row
        assert row["namespace"] == (process["namespace"] or "")
        assert row["container"] == (process["container"] or "")
        assert row["value"] == process["used_memory_bytes"]
    assert checked >= len(processes) * 0.8
    assert all(r["pod"] for r in rows.values()), "every simulated process runs in a pod here"


def test_every_pod_has_pod_series_including_one_that_holds_a_gpu_idle(agent):
    pods = sim(agent, "pod", "list")["pods"]
    allocated = series(agent, "runtimekit_pod_gpu_allocated")
    for pod in pods:
        for container in pod["containers"]:
            for device in container["devices"]:
                assert any(a["pod"] == pod["name"] and a["namespace"] == pod["namespace"]
                           and a["device_id"] == device["device_id"] for a in allocated), (pod["name"], device)
    used = {(r["namespace"], r["pod"]) for r in series(agent, "runtimekit_pod_gpu_memory_used_bytes")}
    assert ("ml-training", "llama-pretrain-0") in used
    assert ("research", "notebook-alice") not in used  # it holds GPU 7 and runs nothing
    assert any(a["pod"] == "notebook-alice" and a["gpu"] == "7" for a in allocated)
    assert promtool_check(agent.metrics_text()) == ""


def test_deleting_a_pod_removes_its_series_within_two_cycles(agent):
    sim(agent, "pod", "add", "--namespace", "team-a", "--name", "short-lived", "--gpus", "7")
    sim(agent, "process", "add", "--gpu", "7", "--bytes", str(2 << 30), "--namespace", "team-a",
        "--pod", "short-lived", "--container", "main")

    def present() -> bool:
        names = {r["pod"] for r in series(agent, "runtimekit_process_gpu_memory_bytes")}
        names |= {r["pod"] for r in series(agent, "runtimekit_pod_gpu_allocated")}
        return "short-lived" in names

    wait_for(agent, present)
    sim(agent, "pod", "delete", "--namespace", "team-a", "--name", "short-lived")
    cycles = wait_for(agent, lambda: not present())
    assert cycles <= 2, f"took {cycles} sampling cycles"


def test_kubelet_down_keeps_metrics_flowing_and_its_return_restores_pod_labels(agent):
    up = lambda: agent.value("runtimekit_attribution_source_up", source="kubelet")  # noqa: E731
    assert up() == 1
    sim(agent, "source", "stop", "kubelet")
    try:
        wait_for(agent, lambda: up() == 0)
        energy = agent.value("runtimekit_gpu_energy_joules_total", gpu="0")
        wait_for(agent, lambda: agent.value("runtimekit_gpu_energy_joules_total", gpu="0") > energy)
        assert series(agent, "runtimekit_process_gpu_memory_bytes"), "process metrics keep flowing"
        assert agent.value("runtimekit_attribution_source_up", source="cri") == 1
    finally:
        sim(agent, "source", "start", "kubelet")
    wait_for(agent, lambda: up() == 1)
    wait_for(agent, lambda: any(a["pod"] == "notebook-alice" for a in series(agent, "runtimekit_pod_gpu_allocated")))
