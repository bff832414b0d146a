"""A pod that finished for good gives its slices back before it is deleted, on a real agent on the
simulated node.

A Job pod that Succeeded (with no ``ttlSecondsAfterFinished``) stays on the node until someone
deletes it, and the kubelet keeps its last exited container all that time; what says it is over is
its sandbox, which the kubelet stops. The simulated pod is finished through POST /sim/v1/pods/phase:
the fake CRI runtime then lists its sandbox not ready and its container exited, and the pod itself is
still there. After ``slicer.owner_grace_seconds`` its slice is deleted and its CDI spec removed, while
the slice of a pod that is still running stays. Short grace and refresh periods keep the test quick;
the rules are the production ones.
"""

from __future__ import annotations

import json
import time

from runtimekit.client import request_json
from tests.agent_process import start_agent, without_pods
from tests.integration.test_slicer_reclaim import cli, slice_ids


def test_a_finished_pods_slice_is_reclaimed_after_the_grace_and_a_running_pods_stays(tmp_path):
    cdi_dir = tmp_path / "cdi"
    config = tmp_path / "runtimekit.yaml"
    config.write_text(f"slicer:\n  cdi_dir: {cdi_dir}\n  owner_grace_seconds: 1\n  owner_start_seconds: 4\n  reconcile_seconds: 0.2\n"
                      "attribution:\n  cri_refresh_seconds: 1\n")
    agent = start_agent(tmp_path, "--sim", without_pods("dgx-a100", tmp_path), "--config", str(config), "--sim-load", "idle")
    state_dir = tmp_path / "state"

    def pod_slice(name: str, device: str) -> tuple[str, str]:
        pod = request_json("POST", agent.url + "/sim/v1/pods", {
            "namespace": "batch", "name": name, "containers": [{"name": "main"}]})["pod"]
        made = cli(state_dir, "slice", "create", "--mode", "tdm", "--compute", "20", "--memory", "1GiB",
                   "--device", device, "--pod-uid", pod["uid"], "--container", "main", "-o", "json")
        assert made.returncode == 0, made.stderr
        return pod["uid"], json.loads(made.stdout)["id"]

    try:
        _, job = pod_slice("train-job", "4")
        _, server = pod_slice("server", "5")
        # Past both waits: both pods run (their sandboxes are ready), so both slices are kept.
        time.sleep(6)
        assert slice_ids(state_dir) == {job, server}

        finished = request_json("POST", agent.url + "/sim/v1/pods/phase",
                                {"namespace": "batch", "name": "train-job", "phase": "Succeeded"})["pod"]
        assert finished["phase"] == "Succeeded"
        deadline = time.monotonic() + 20
        while job in slice_ids(state_dir) and time.monotonic() < deadline:
            time.sleep(0.3)
        time.sleep(1.5)  # past the grace again: the running pod's slice must still be there
        assert slice_ids(state_dir) == {server}
        assert not list(cdi_dir.glob(f"*{job}.json")) and list(cdi_dir.glob(f"*{server}.json"))
        # The pod object is still there: only its phase made the slice go.
        pods = {p["name"]: p["phase"] for p in request_json("GET", agent.url + "/sim/v1/pods")["pods"]}
        assert pods == {"train-job": "Succeeded", "server": "Running"}
    finally:
        agent.stop()
