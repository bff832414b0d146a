"""The slicer end to end: a real agent on the simulated DGX A100, driven by the real command line.

``runtimekit serve --sim dgx-a100`` (GPUs 0 and 1 start in MIG mode with no instances) and
``runtimekit slice ...`` over the gRPC unix socket, as an operator would type them:

- a MIG slice (30 % compute, 20 GiB) becomes a MIG instance the simulated driver holds (its saved
  layout: the driver's own state, which outlives the agent) and /metrics shows with its own series;
- a TDM slice (50 %, 2 GiB) lands on another card and its CDI specification exists;
- TDM on the MIG card is refused with a message naming the rule; deleting frees the capacity;
- an XID raised in one MIG instance makes that slice unhealthy and leaves the card and the other
  slice on it healthy.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from runtimekit.client import request_json
from tests.agent_process import ROOT, Agent, start_agent, without_pods


def cli(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtimekit.cli", *args, "--state-dir", str(state_dir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)


def create(state_dir: Path, *args: str) -> dict:
    done = cli(state_dir, "slice", "create", *args, "-o", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def driver_instances(state_dir: Path, gpu: int) -> list[dict]:
    """The GPU instances the simulated driver holds (its saved layout, written on every change)."""
    return json.loads((state_dir / "simulated-mig.json").read_text())["gpus"][gpu]["gpu_instances"]


def wait_for(condition, what: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def slice_series(agent: Agent, name: str, slice_id: str) -> dict[frozenset, float]:
    return {labels: v for (n, labels), v in agent.samples().items() if n == name and ("slice", slice_id) in labels}


def test_mig_and_tdm_slices_from_the_command_line(tmp_path):
    cdi_dir = tmp_path / "cdi"
    config = tmp_path / "runtimekit.yaml"
    config.write_text(f"slicer:\n  cdi_dir: {cdi_dir}\n")
    agent = start_agent(tmp_path, "--sim", without_pods("dgx-a100", tmp_path), "--config", str(config), "--sim-load", "idle")
    state_dir = tmp_path / "state"
    try:
        mig = create(state_dir, "--mode", "mig", "--compute", "30", "--memory", "20GiB", "--owner", "notebook-1")
        assert mig["mode"] == "mig" and mig["state"] == "SLICE_STATE_READY"
        gpu = mig["device"]["index"]
        made = [gi for gi in driver_instances(state_dir, gpu) if gi["id"] == mig["partition"]["gpu_instance_id"]]
        assert len(made) == 1 and made[0]["compute_instances"], "the simulated driver holds the slice's instance"
        mig_uuid = made[0]["compute_instances"][0]["uuid"]
        assert mig["partition"]["uuid"] == mig_uuid
        wait_for(lambda: slice_series(agent, "runtimekit_slice_info", mig["id"]), "the MIG slice's series")
        wait_for(lambda: any(n == "runtimekit_gpu_mig_device_info" and ("mig_uuid", mig_uuid) in labels
                             for (n, labels) in agent.samples()), "the MIG device's own series")

        tdm = create(state_dir, "--mode", "tdm", "--compute", "50", "--memory", "2GiB", "--owner", "svc-a")
        assert tdm["device"]["index"] != gpu
        spec = json.loads(next(cdi_dir.glob(f"*{tdm['id']}.json")).read_text())
        env = spec["devices"][0]["containerEdits"]["env"]
        assert "CUDA_DEVICE_MEMORY_LIMIT=2048m" in env and "CUDA_DEVICE_SM_LIMIT=50" in env

        refused = cli(state_dir, "slice", "create", "--mode", "tdm", "--compute", "10", "--memory", "1GiB",
                      "--owner", "svc-b", "--device", str(gpu))
        assert refused.returncode != 0
        assert "MIG mode" in refused.stderr and "Traceback" not in refused.stderr

        before = len(driver_instances(state_dir, gpu))
        assert cli(state_dir, "slice", "delete", mig["id"]).returncode == 0
        assert len(driver_instances(state_dir, gpu)) == before - 1, "deleting destroyed the instance"
        assert cli(state_dir, "slice", "delete", tdm["id"]).returncode == 0
        assert not list(cdi_dir.glob(f"*{tdm['id']}.json"))
        # The capacity is back: the largest profile fits the emptied MIG card again.
        whole = create(state_dir, "--mode", "mig", "--memory", "80000MiB", "--owner", "big", "--device", str(gpu))
        assert whole["profile"].startswith("7g.")
    finally:
        agent.stop()


def test_an_xid_in_one_mig_instance_marks_only_its_slice(tmp_path):
    agent = start_agent(tmp_path, "--sim", "dgx-a100", "--sim-load", "idle")
    state_dir = tmp_path / "state"
    try:
        first = create(state_dir, "--mode", "mig", "--compute", "20", "--memory", "10GiB", "--owner", "a", "--device", "0")
        second = create(state_dir, "--mode", "mig", "--compute", "20", "--memory", "10GiB", "--owner", "b", "--device", "0")
        request_json("POST", agent.url + "/sim/v1/mig/xid",
                     {"gpu": 0, "xid": INSTANCE_XID, "gpu_instance": first["partition"]["gpu_instance_id"]}, 5.0)

        def slice_state(slice_id: str) -> str | None:
            for labels, value in slice_series(agent, "runtimekit_slice_health", slice_id).items():
                if value == 1.0:
                    return dict(labels)["state"]
            return None

        wait_for(lambda: slice_state(first["id"]) == "unhealthy", "the faulty instance's slice to turn unhealthy")
        assert slice_state(second["id"]) == "healthy"
        assert agent.value("runtimekit_gpu_health", gpu="0", state="healthy") == 1.0
    finally:
        agent.stop()


INSTANCE_XID = 109  # a context-switch timeout: the fault policy scopes it to the instance
