"""One state directory serves one agent: a second ``runtimekit serve`` on it is refused (exit 2,
naming the first one's pid) and changes nothing; once the first is killed, a new one starts."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

from tests.agent_process import ROOT, free_port, start_agent


def test_a_second_agent_on_the_same_state_dir_is_refused(tmp_path):
    first = start_agent(tmp_path, "--sim", "dgx-a100")
    state = tmp_path / "state"
    try:
        second = subprocess.run([sys.executable, "-m", "runtimekit.cli", "serve", "--sim", "dgx-a100", "--state-dir",
                                 str(state), "--listen", f"127.0.0.1:{free_port()}"],
                                cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert f"another agent (pid {first.process.pid} on {socket.gethostname()}) is using it" in second.stderr
        assert "Traceback" not in second.stderr
        assert first.get("/readyz")[0] == 200 and (state / "runtimekit.sock").exists()
    finally:
        first.stop(signal.SIGKILL)
    again = start_agent(tmp_path, "--sim", "dgx-a100")  # the kernel dropped the dead agent's lock
    again.stop()
