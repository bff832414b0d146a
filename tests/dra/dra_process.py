"""``runtimekit dra serve`` as a process of its own, for the crash tests: configured by a YAML file
to reach a real agent (dra_rig.NodeAgent) and the fake resource.k8s.io/v1 API server
(tests/kube_fake_resource.py, which serves the ResourceClaims it reads and takes the
ResourceSlices it publishes), its kubelet sockets and checkpoint in one short directory.

``start(failpoints=...)`` arms ``RUNTIMEKIT_FAILPOINTS`` (runtimekit/failpoints.py: the named step
SIGKILLs the process); ``wait_killed`` waits for that death; ``stop`` sends SIGTERM and expects
the clean exit (0). Its stderr goes to ``DIR/driver-N.log``, shown when a wait fails.

``COMMAND`` is ``python -m runtimekit.kube.dra serve``: the same ``main`` as ``runtimekit dra
serve`` (``RUNTIMEKIT_COMMAND``), without building the agent's whole command line first, which
takes most of a second of each of the many starts; the done-when test runs ``runtimekit dra serve``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from runtimekit.failpoints import ENV as FAILPOINTS_ENV
from runtimekit.kube.dra.checkpoint import Checkpoint
from runtimekit.kube.dra.config import load
from tests.agent_process import ROOT
from tests.dra.dra_claims import DRIVER, NODE
from tests.dra.dra_rig import NodeAgent

COMMAND = (sys.executable, "-m", "runtimekit.kube.dra", "serve")
RUNTIMEKIT_COMMAND = (sys.executable, "-m", "runtimekit.cli", "dra", "serve")


@dataclass
class DriverProcess:
    """The driver's files in ``directory``; ``kubeconfig`` names the fake API server."""

    directory: Path
    agent: NodeAgent
    kubeconfig: Path
    command: tuple[str, ...] = COMMAND
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    logs: list[Path] = field(default_factory=list)

    @property
    def config_path(self) -> Path:
        return self.directory / "dra.yaml"

    def write_config(self) -> None:
        settings = {"node_name": NODE, "driver_name": DRIVER, "agent_socket": self.agent.socket,
                    "registry_dir": str(self.directory / "registry"), "plugin_dir": str(self.directory / "plugin"),
                    "cdi_dir": str(self.agent.cdi_dir), "publish_interval_seconds": 0.2, "agent_timeout_seconds": 5.0,
                    "kubernetes": {"kubeconfig": str(self.kubeconfig)}}
        self.config_path.write_text(json.dumps(settings))  # JSON is YAML

    @property
    def registry_dir(self) -> str:
        return str(self.directory / "registry")

    def checkpoint(self) -> Checkpoint:
        return Checkpoint.load(load(self.config_path).checkpoint_path)

    def start(self, failpoints: str = "") -> None:
        self.write_config()
        env = {k: v for k, v in os.environ.items() if k != FAILPOINTS_ENV}
        if failpoints:
            env[FAILPOINTS_ENV] = failpoints
        self.starts += 1
        log = self.directory / f"driver-{self.starts}.log"
        self.logs.append(log)
        with open(log, "wb") as out:
            self.process = subprocess.Popen([*self.command, "--config", str(self.config_path)], cwd=ROOT,
                                            env=dict(env, PYTHONUNBUFFERED="1"), stdout=out, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.logs[-1].read_text(errors="replace") if self.logs else ""

    async def wait_exit(self, timeout: float = 10.0) -> int:
        assert self.process is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (code := self.process.poll()) is None:
            if loop.time() > deadline:
                raise AssertionError(f"the driver did not exit within {timeout} s:\n{self.log()}")
            await asyncio.sleep(0.02)
        self.process = None
        return code

    async def wait_killed(self) -> None:
        """The armed failpoint fired: the process died of SIGKILL."""
        code = await self.wait_exit()
        assert code == -signal.SIGKILL, f"exit {code}, not the failpoint's SIGKILL:\n{self.log()}"

    async def stop(self) -> None:
        """SIGTERM, then the clean exit (0) that removes the kubelet sockets."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        code = await self.wait_exit()
        assert code == 0, f"exit {code} after SIGTERM:\n{self.log()}"

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
