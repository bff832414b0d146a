"""A real agent (``runtimekit serve --sim``) against a bad state directory: a garbage health state
file never stops it, is kept, and never lets a GPU known to be lost come back schedulable; a state
directory that is a file is refused at start with one line and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from agent_process import ROOT, Agent, start_agent

from runtimekit.client import inject_remote

ARGS = ("--sim", "dgx-h100", "--interval", "0.1", "--sim-processes", "0", "--sim-load", "idle", "--seed", "7")
LOST = 4


def health(agent: Agent) -> dict | None:
    status, _, body = agent.get("/api/v1/health")
    return json.loads(body) if status == 200 else None


def wait_for(agent: Agent, condition, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        verdict = health(agent)
        if verdict is not None and condition(verdict):
            return verdict
        time.sleep(0.05)
    raise AssertionError(f"condition not met; last verdict {health(agent)}\n{agent.log()[-3000:]}")


GARBAGE = {
    "not UTF-8": lambda saved: saved[:-20] + b"\xff\xfe\xfd" + saved[-20:],
    "deeply nested": lambda saved: b"[" * 200_000 + b"]" * 200_000,
}


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_a_garbage_state_file_is_kept_and_a_lost_gpu_stays_unschedulable(tmp_path, kind):
    agent = start_agent(tmp_path, *ARGS)
    try:
        wait_for(agent, lambda v: True)
        inject_remote(agent.url, LOST, "xid", {"xid": 79})
        wait_for(agent, lambda v: not v["gpus"][LOST]["schedulable"])
    finally:
        agent.stop()
    path = tmp_path / "state" / "health.json"
    garbage = GARBAGE[kind](path.read_bytes())
    path.write_bytes(garbage)

    again = start_agent(tmp_path, *ARGS)  # the simulated GPU is fine again: only memory keeps it out
    try:
        verdict = wait_for(again, lambda v: len(v["gpus"]) == 8)
        assert "runtimekit_gpu_health" in again.metrics_text()
        assert [gpu["schedulable"] for gpu in verdict["gpus"]] == [False] * 8
        assert "health_state_unreadable" in [f["fault"] for f in verdict["gpus"][LOST]["faults"]]
        assert again.value("runtimekit_node_fault_active", fault="health_state_unreadable") == 1
    finally:
        again.stop()
    assert again.process.returncode == 0, again.log()[-3000:]
    assert "Traceback" not in again.log()
    [aside] = (tmp_path / "state").glob("health.json.corrupt-*")
    assert aside.read_bytes() == garbage


def test_a_state_dir_that_is_a_file_is_refused_with_one_line(tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("not a directory\n")
    done = subprocess.run(
        [sys.executable, "-m", "runtimekit.cli", "serve", *ARGS, "--listen", "127.0.0.1:0", "--state-dir", str(blocker)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"runtimekit: error: state_dir {blocker}: must be a directory the agent can write (it is a file)"]
