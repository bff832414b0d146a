"""A pod's slices are reclaimed after the pod is gone, on a real agent on the simulated node.

The pod's UID reaches the slicer through the attribution snapshot (the CRI runtime's running
containers); when the simulated pod is deleted, its containers leave the fake CRI runtime's list, and
after ``slicer.owner_grace_seconds`` the slice is deleted and its CDI spec removed. A slice of a free
owner id stays, and so does the slice of a pod that is running well past both waits (a pod never seen
running would have lost it after ``owner_start_seconds``). Short grace and refresh periods keep the
test quick; the rules are the production ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from runtimekit.client import request_json
from tests.agent_process import ROOT, start_agent, without_pods


def cli(state_dir, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtimekit.cli", *args, "--state-dir", str(state_dir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)


def slice_ids(state_dir) -> set[str]:
    done = cli(state_dir, "slice", "list", "-o", "json")
    assert done.returncode == 0, done.stderr
    return {s["id"] for s in json.loads(done.stdout)["slices"]}


def test_a_deleted_pods_slice_is_reclaimed_after_the_grace_and_a_free_owners_stays(tmp_path):
    cdi_dir = tmp_path / "cdi"
    config = tmp_path / "runtimekit.yaml"
    config.write_text(f"slicer:\n  cdi_dir: {cdi_dir}\n  owner_grace_seconds: 1\n  owner_start_seconds: 4\n  reconcile_seconds: 0.2\n"
                      "attribution:\n  cri_refresh_seconds: 1\n")
    agent = start_agent(tmp_path, "--sim", without_pods("dgx-a100", tmp_path), "--config", str(config), "--sim-load", "idle")
    state_dir = tmp_path / "state"
    try:
        pod = request_json("POST", agent.url + "/sim/v1/pods", {
            "namespace": "dev", "name": "notebook", "containers": [{"name": "nb", "gpus": [4]}]})["pod"]
        made = cli(state_dir, "slice", "create", "--mode", "tdm", "--compute", "20", "--memory", "1GiB",
                   "--device", "4", "--pod-uid", pod["uid"], "--container", "nb", "-o", "json")
        assert made.returncode == 0, made.stderr
        owned = json.loads(made.stdout)["id"]
        free = json.loads(cli(state_dir, "slice", "create", "--mode", "tdm", "--memory", "1GiB", "--owner", "me",
                              "-o", "json").stdout)["id"]
        # Past both waits: a pod never seen running would be reclaimed after 4 s; this one runs (the
        # fake runtime lists its container within attribution.cri_refresh_seconds), so it is kept.
        time.sleep(6)
        assert slice_ids(state_dir) == {owned, free}

        request_json("DELETE", agent.url + "/sim/v1/pods", {"namespace": "dev", "name": "notebook"})
        deadline = time.monotonic() + 20
        while owned in slice_ids(state_dir) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert slice_ids(state_dir) == {free}
        assert not list(cdi_dir.glob(f"*{owned}.json")) and list(cdi_dir.glob(f"*{free}.json"))
    finally:
        agent.stop()
