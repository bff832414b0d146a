"""A real ``runtimekit serve`` process: SIGTERM stops it within 5 s even while a sampling cycle is
stuck in the driver, and a simulated node that cannot be set up is a clear error, not a traceback."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

from tests.agent_process import ROOT, free_port

# Runs the command line with the reader hanging from its third cycle on, as a driver that stops answering.
HANGING_AGENT = textwrap.dedent(
    """
    import sys, threading
    from runtimekit.gpu.reader import NodeReader
    from runtimekit import cli
    original, calls, never = NodeReader.sample, [0], threading.Event()

    def sample(self):
        calls[0] += 1
        if calls[0] >= 3:
            never.wait()  # stuck in the driver for good
        return original(self)

    NodeReader.sample = sample
    sys.exit(cli.main(sys.argv[1:]))
    """
)


def test_sigterm_stops_the_agent_within_5_s_while_a_cycle_is_stuck_in_the_driver(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "agent.log"
    command = [sys.executable, "-c", HANGING_AGENT, "serve", "--sim", "dgx-h100", "--listen", f"127.0.0.1:{port}",
               "--state-dir", str(tmp_path / "state"), "--interval", "0.2"]
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                   env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        time.sleep(1.5)  # the third cycle is now stuck
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(10)
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
    text = log.read_text()
    assert took <= 5.0, f"took {took:.1f} s to stop:\n{text[-2000:]}"
    assert code == 0, text[-2000:]
    assert "stuck" in text
    assert "Traceback" not in text


def test_a_simulated_node_that_cannot_keep_its_state_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    done = subprocess.run(
        [sys.executable, "-m", "runtimekit.cli", "serve", "--sim", "dgx-h100", "--listen", "127.0.0.1:0",
         "--state-dir", str(blocker / "state")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "state_dir" in done.stderr and "must be a directory the agent can write" in done.stderr
    assert "Traceback" not in done.stderr


def _serve_with_api_socket(tmp_path: Path, socket_path: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "config.yaml"
    config.write_text(f"api: {{socket: {socket_path}}}\n")
    return subprocess.run(
        [sys.executable, "-m", "runtimekit.cli", "serve", "--sim", "dgx-h100", "--listen", "127.0.0.1:0",
         "--state-dir", str(tmp_path / "state"), "--config", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )


def test_an_api_socket_path_where_a_file_lies_is_refused_at_start(tmp_path: Path) -> None:
    """Not a supervisor restarting the API every second with a traceback: the start fails, the file stays."""
    occupied = tmp_path / "api.sock"
    occupied.write_text("someone's file\n")
    done = _serve_with_api_socket(tmp_path, occupied)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr == f"runtimekit: error: api.socket {occupied}: exists and is not a socket, and is never removed " \
                          "(move it away or name another path)\n"
    assert occupied.read_text() == "someone's file\n"


def test_an_api_socket_another_server_answers_on_is_refused_at_start(tmp_path: Path) -> None:
    """A second agent on the same api.socket: refused, and the first's socket stays (it used to be
    unlinked and served over)."""
    live = tmp_path / "api.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(live))
    server.listen()
    try:
        done = _serve_with_api_socket(tmp_path, live)
        assert done.returncode == 2, done.stderr[-2000:]
        assert done.stderr == f"runtimekit: error: api.socket {live}: a server already answers on this socket " \
                              "(another agent?); stop it or name another path\n"
        assert stat.S_ISSOCK(live.lstat().st_mode)
    finally:
        server.close()


def test_an_api_socket_in_a_folder_too_deep_to_bind_in_is_refused_at_start(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * (110 - len(str(tmp_path)))) / "api.sock"
    done = _serve_with_api_socket(tmp_path, deep)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith(f"runtimekit: error: api.socket {deep}: its folder's path must be at most 90 bytes")
    assert len(done.stderr.splitlines()) == 1


def test_a_reader_that_goes_away_gets_no_traceback(tmp_path: Path) -> None:
    """``runtimekit sim scenarios | head -0``: the pipe is closed before anything is written."""
    process = subprocess.Popen([sys.executable, "-m", "runtimekit.cli", "sim", "scenarios"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    error = process.stderr.read().decode()
    assert process.wait(60) == 141, error  # 128 + SIGPIPE, as a shell reports for cat
    assert error == ""
