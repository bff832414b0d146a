"""SIGTERM stops the agent cleanly: exit 0, and its gRPC socket is gone (a socket left behind
would be a stale endpoint for the device plugin and the command line)."""

from __future__ import annotations

import signal

from tests.agent_process import start_agent


def test_sigterm_removes_the_grpc_socket(tmp_path):
    agent = start_agent(tmp_path, "--sim", "dgx-a100")
    socket = tmp_path / "state" / "runtimekit.sock"
    assert socket.exists()
    agent.stop(signal.SIGTERM)
    assert agent.process.returncode == 0
    assert not socket.exists()
