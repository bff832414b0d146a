"""A SIGKILLed simulated agent leaves its host files (sockets, /proc tree) behind; the next start of
the same agent removes them, so crashes do not pile up directories in /dev/shm."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_process import start_agent  # noqa: E402


def host_root(agent) -> Path:
    status, _, body = agent.get("/sim/v1/host")
    assert status == 200, body
    return Path(json.loads(body)["root"])


def test_the_next_start_removes_what_a_killed_simulator_left(tmp_path):
    first = start_agent(tmp_path, "--sim", "dgx-h100", wait_ready=False)
    try:
        left = host_root(first)
        (left / "stale-marker").write_text("from the killed agent")
    finally:
        first.stop(signal.SIGKILL)
    assert left.is_dir()  # a SIGKILL runs no cleanup

    second = start_agent(tmp_path, "--sim", "dgx-h100", wait_ready=False)
    try:
        root = host_root(second)
        siblings = set(root.parent.glob("runtimekit-sim-*"))
        assert {left, root} & siblings == {root}, "the killed agent's directory is still there"
        assert not (root / "stale-marker").exists()
    finally:
        second.stop()
    assert not root.exists()  # a clean stop removes its own
