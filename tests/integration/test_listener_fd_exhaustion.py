"""A real agent whose descriptor table is full: it logs once, stays responsive, serves again.

The agent runs under a low ``RLIMIT_NOFILE`` through a small launcher that fills the table on
SIGUSR1 and keeps it full (a thread takes every descriptor the agent frees, as a leak elsewhere in
the process would), and frees it on SIGUSR2. Scrapers that connect meanwhile wait in the kernel's
listen backlog: the listener must pause accepting with one log line (asyncio's own accept loop logs a
traceback per attempt, thousands a second), answer them once descriptors free up, and still stop on
SIGTERM within the agent's promise.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.agent_process import ROOT, Agent, free_port

NOFILE = 160  # the agent with the simulated node holds about 25 descriptors
FULL_SECONDS = 2.5  # long enough for asyncio's accept loop to retry (every 1 s) a few times
SIGTERM_SECONDS = 5.0  # the agent's promise (runtimekit.service.SHUTDOWN_SECONDS, 4.5 s)

LAUNCHER = """
import os, resource, runpy, signal, sys, threading, time
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]),) * 2)
held, full = [], threading.Event()
def keep_full():
    while True:
        full.wait()
        while full.is_set():
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                time.sleep(0.002)
        while held:
            os.close(held.pop())
threading.Thread(target=keep_full, daemon=True).start()
signal.signal(signal.SIGUSR1, lambda *_: full.set())
signal.signal(signal.SIGUSR2, lambda *_: full.clear())
sys.argv = ["runtimekit", *sys.argv[2:]]
runpy.run_module("runtimekit.cli", run_name="__main__")
"""


def start_limited_agent(tmp_path: Path) -> Agent:
    port = free_port()
    log_path = tmp_path / "agent.log"
    command = [sys.executable, "-c", LAUNCHER, str(NOFILE), "serve", "--sim", "dgx-h100", "--sim-processes", "0", "--interval", "0.5",
               "--listen", f"127.0.0.1:{port}", "--state-dir", str(tmp_path / "state")]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                   stdout=log, stderr=subprocess.STDOUT)
    agent = Agent(process, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, agent.log()
        try:
            if agent.get("/readyz", timeout=1.0)[0] == 200:
                return agent
        except OSError:
            pass
        time.sleep(0.1)
    agent.stop(signal.SIGKILL)
    raise AssertionError(f"agent not ready:\n{agent.log()}")


def remove_simulated_node(agent: Agent) -> None:
    """The simulator's files, which it cannot remove itself while the descriptor table is full."""
    for folder in re.findall(r"under (/dev/shm/runtimekit-sim-\w+)", agent.log()):
        shutil.rmtree(folder, ignore_errors=True)


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fill(agent: Agent) -> None:
    agent.process.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while descriptors(agent.process.pid) < NOFILE - 2:  # a few come and go with the agent's own files
        assert time.monotonic() < deadline, "the launcher did not fill the descriptor table"
        time.sleep(0.02)


def scrape_request(port: int) -> socket.socket:
    """A scraper's connection, its request sent: the kernel completes the handshake into the
    listen backlog whether or not the agent can accept it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
    return sock


def status_of(sock: socket.socket) -> bytes:
    with sock:
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
        return answer.split(b"\r\n", 1)[0]


def test_a_full_descriptor_table_logs_once_and_serving_resumes_when_descriptors_free_up(tmp_path):
    agent = start_limited_agent(tmp_path)
    port = int(agent.url.rsplit(":", 1)[1])
    try:
        before = len(agent.log().splitlines())
        fill(agent)
        waiting = [scrape_request(port) for _ in range(10)]
        time.sleep(FULL_SECONDS)
        during = agent.log().splitlines()[before:]

        agent.process.send_signal(signal.SIGUSR2)
        answers = [status_of(sock) for sock in waiting]
        status, _, _ = agent.get("/metrics")
        log = agent.log().splitlines()[before:]
    finally:
        agent.stop()

    assert sum("out of file descriptors" in line for line in during) == 1, "\n".join(during[:20])
    assert not any("Traceback" in line for line in log), "\n".join(log[:40])
    assert len(during) < 10, f"{len(during)} lines logged while the table was full:\n" + "\n".join(during[:20])
    assert answers == [b"HTTP/1.1 200 OK"] * 10, "the scrapers that waited were not served"
    assert status == 200
    recovered = [line for line in log if "accepting connections again" in line]
    assert len(recovered) == 1, "\n".join(log[:40])


def test_sigterm_stops_an_agent_whose_descriptor_table_is_full(tmp_path):
    agent = start_limited_agent(tmp_path)
    port = int(agent.url.rsplit(":", 1)[1])
    try:
        fill(agent)
        waiting = [scrape_request(port) for _ in range(10)]
        time.sleep(1.5)  # asyncio would be retrying its accept loop by now
        seconds = agent.stop(signal.SIGTERM, timeout=SIGTERM_SECONDS)
    finally:
        agent.stop(signal.SIGKILL)
        for sock in waiting:
            sock.close()
        remove_simulated_node(agent)
    assert agent.process.returncode == 0, agent.log()[-3000:]
    assert seconds < SIGTERM_SECONDS
    assert "Traceback" not in agent.log(), agent.log()[-3000:]
