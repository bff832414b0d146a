"""Start a real ``runtimekit serve`` process for tests, and read its /metrics."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent


def without_pods(scenario: str, folder: Path) -> str:
    """A copy of the built-in ``scenario`` with no Kubernetes pod, as a YAML file for ``--sim``: a
    node where no pod holds a GPU through a device plugin, as on a node whose GPUs DRA and the
    slicer hand out. (The built-in scenarios model busy nodes whose pods hold nearly every GPU
    whole, and the slicer makes no time-shared slice on a GPU another pod holds.)"""
    data = yaml.safe_load((ROOT / "runtimekit" / "sim" / "scenarios" / f"{scenario}.yaml").read_text())
    data["kubernetes"]["pods"] = []
    path = folder / f"{scenario}-without-pods.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parse_samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Exposition text -> {(sample name, frozenset(labels)): value}."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


@dataclass
class Agent:
    process: subprocess.Popen
    url: str
    log_path: Path
    _stopped: bool = field(default=False)

    def get(self, path: str, headers: dict | None = None, timeout: float = 5.0) -> tuple[int, dict, bytes]:
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()

    def metrics_text(self) -> str:
        status, _, body = self.get("/metrics")
        assert status == 200, body
        return body.decode()

    def samples(self) -> dict[tuple[str, frozenset], float]:
        return parse_samples(self.metrics_text())

    def value(self, name: str, **labels: str) -> float | None:
        """The value of the one sample named ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        found = [v for (n, ls), v in self.samples().items() if n == name and wanted <= ls]
        assert len(found) <= 1, f"{name}{labels} matches {len(found)} samples"
        return found[0] if found else None

    def samples_total(self) -> float:
        return self.value("runtimekit_samples_total") or 0.0

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def gpu_faults(self, gpu: int) -> dict:
        """The faults GPU ``gpu`` holds in ``GET /api/v1/health``, by name."""
        status, _, body = self.get("/api/v1/health")
        assert status == 200, body
        return {f["fault"]: f for f in json.loads(body)["gpus"][gpu]["faults"]}

    def wait_for(self, condition: Callable[[], bool], timeout: float = 15.0) -> None:
        """Poll ``condition`` until it holds; past ``timeout`` seconds, fail with the agent's log."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, self.log()[-3000:]
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> float:
        """Send ``sig`` and wait; returns the seconds the agent took to exit."""
        if self._stopped:
            return 0.0
        started = time.monotonic()
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise
        finally:
            self._stopped = True
        return time.monotonic() - started


def start_agent(tmp_path: Path, *args: str, wait_ready: bool = True, timeout: float = 30.0,
                env: dict[str, str] | None = None) -> Agent:
    """Start ``runtimekit serve ARGS --listen 127.0.0.1:FREE`` and wait for /readyz. ``env``: the
    agent's environment (default: this process's), PYTHONUNBUFFERED=1 added."""
    port = free_port()
    log_path = tmp_path / f"agent-{port}.log"
    command = [sys.executable, "-m", "runtimekit.cli", "serve", "--listen", f"127.0.0.1:{port}",
               "--state-dir", str(tmp_path / "state"), *args]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ if env is None else env, PYTHONUNBUFFERED="1"),
                                   stdout=log, stderr=subprocess.STDOUT)
    agent = Agent(process, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"agent exited with {process.returncode}:\n{agent.log()}")
        try:
            status, _, _ = agent.get("/readyz" if wait_ready else "/healthz", timeout=1.0)
            if status == 200:
                return agent
        except OSError:
            pass
        time.sleep(0.1)
    agent.stop(signal.SIGKILL)
    raise RuntimeError(f"agent not ready after {timeout} s:\n{agent.log()}")
