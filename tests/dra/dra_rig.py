"""The DRA driver's node side under test: a real agent on the simulated node, the driver (in this
process, or as ``runtimekit dra serve``), the fake kubelet (kubelet_fake.py), all on real unix
sockets in one short directory (a socket's path must fit in 108 bytes).

- ``NodeAgent``: ``runtimekit serve --sim SCENARIO`` (tests/agent_process.py) with its slicer's CDI
  specs in ``DIR/cdi`` (the driver writes its NIC specs there too, as both use /var/run/cdi on a
  node), started, SIGKILLed and started again on the same state directory;
- ``driver_config``: the driver's configuration in ``DIR`` (registry, plugin directory);
- ``running_driver``: ``DraService`` in this process with a ``ClaimStore`` as its claim reader (no
  API server, nothing published), registered with a fresh fake kubelet;
- ``agent_slices`` / ``drop_dra_slices``: the agent's slices through runtimekit.v1, as any client.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtimekit._proto.runtimekit.v1 import slice_pb2
from runtimekit.kube.agentclient import AgentClient
from runtimekit.kube.dra.checkpoint import Checkpoint
from runtimekit.kube.dra.config import DraConfig, load
from runtimekit.kube.dra.names import parse_owner_id
from runtimekit.kube.dra.service import DraService
from tests.agent_process import Agent, start_agent, without_pods
from tests.dra.dra_claims import DRIVER, NODE, ClaimStore
from tests.dra.kubelet_fake import FakeDraKubelet


@contextmanager
def short_directory(prefix: str = "rk-dra-") -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class NodeAgent:
    """A real agent (``runtimekit serve --sim SCENARIO``) whose files live in ``directory``."""

    directory: Path
    scenario: str
    env: dict[str, str] | None = None
    agent: Agent | None = field(default=None)

    @property
    def socket(self) -> str:
        return str(self.directory / "state" / "runtimekit.sock")

    @property
    def cdi_dir(self) -> Path:
        return self.directory / "cdi"

    @property
    def state_dir(self) -> Path:
        return self.directory / "state"

    def start(self, env: dict[str, str] | None = None) -> Agent:
        config = self.directory / "runtimekit.yaml"
        config.write_text(f"slicer:\n  cdi_dir: {self.cdi_dir}\n  reconcile_seconds: 0.2\n")
        scenario = without_pods(self.scenario, self.directory)  # DRA hands the GPUs out, no device-plugin pod
        self.agent = start_agent(self.directory, "--sim", scenario, "--config", str(config), "--sim-load", "idle",
                                 env=env if env is not None else self.env)
        return self.agent

    def kill(self) -> None:
        """SIGKILL: the agent leaves its socket behind, as a crashed one does."""
        if self.agent is not None:
            self.agent.stop(signal.SIGKILL)
            self.agent = None

    def stop(self) -> None:
        if self.agent is not None:
            self.agent.stop()
            self.agent = None


def driver_config(directory: Path, agent: NodeAgent, **overrides: Any) -> DraConfig:
    """The driver's configuration: its sockets and checkpoint under ``directory``, the agent's socket
    and CDI directory, short intervals."""
    return load(None, {"node_name": NODE, "driver_name": DRIVER, "agent_socket": agent.socket,
                       "registry_dir": str(directory / "registry"), "plugin_dir": str(directory / "plugin"),
                       "cdi_dir": str(agent.cdi_dir), "publish_interval_seconds": 0.1, "agent_timeout_seconds": 5.0,
                       **overrides})


@dataclass
class RunningDriver:
    service: DraService
    kubelet: FakeDraKubelet
    task: asyncio.Task[None]

    def checkpoint(self) -> Checkpoint:
        """The checkpoint as a restarted driver would read it from disk."""
        return Checkpoint.load(self.service.config.checkpoint_path)


@asynccontextmanager
async def running_driver(config: DraConfig, store: ClaimStore) -> AsyncIterator[RunningDriver]:
    """``DraService`` running in this process, registered with a fresh fake kubelet."""
    service = DraService(config, None, reader=store)
    task = asyncio.create_task(service.run())
    kubelet = FakeDraKubelet(config.registry_dir, config.driver_name)
    try:
        registering = asyncio.create_task(kubelet.register())
        await asyncio.wait([registering, task], return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            registering.cancel()
            await task  # raises what stopped the driver
        await registering
        yield RunningDriver(service, kubelet, task)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def agent_slices(socket: str) -> list[slice_pb2.Slice]:
    async with AgentClient(socket, 10.0) as agent:
        return await agent.list_slices()


def claim_slices(slices: list[slice_pb2.Slice], uid: str) -> list[slice_pb2.Slice]:
    """The slices a DRA driver made for claim ``uid`` (owner ``dra:<uid>:<n>…``), by position."""
    owned = [(owner.position, s) for s in slices if (owner := parse_owner_id(s.owner.owner_id)) and owner.uid == uid]
    return [s for _, s in sorted(owned, key=lambda pair: pair[0])]


async def drop_dra_slices(socket: str) -> None:
    """Delete every slice of the agent (a test's leftovers), so the next test starts on a free node."""
    async with AgentClient(socket, 10.0) as agent:
        for made in await agent.list_slices():
            await agent.delete_slice(made.id)
