"""The devices the plugin advertises, kept current from the agent: one watcher, many streams.

``DeviceWatch.run()`` runs two loops on the event loop until cancelled:

- every ``health_poll_seconds`` it reads the node (GetNode): the devices, their modes and MIG
  devices, and the health the answer carries;
- it follows the health stream (WatchHealth), so a verdict reaches the kubelet at once; a broken
  stream is opened again ``health_poll_seconds`` later.

The newest verdict wins (by ``evaluated_at``; an older one, from a poll that raced the stream, is
ignored). Each change of the advertised devices bumps ``version`` and wakes every ListAndWatch
stream (``wait_newer``). While the agent is unreachable the last devices stay advertised as they
were (the kubelet keeps its pods); failures and recoveries are logged once per transition.
"""

from __future__ import annotations

import asyncio
import logging

from runtimekit._proto.runtimekit.v1 import node_pb2
from runtimekit.grpc_unix import UnixRpcError

from .agent import AgentClient
from .config import DevicePluginConfig
from .inventory import Unit, units

log = logging.getLogger(__name__)


class DeviceWatch:
    """The advertised devices (``units``), their ``version``, and the loops that refresh them."""

    def __init__(self, agent: AgentClient, config: DevicePluginConfig) -> None:
        self.agent = agent
        self.config = config
        self.units: tuple[Unit, ...] = ()
        self.version = 0  # bumped on every change of ``units``
        self._node: node_pb2.Node | None = None
        self._health = node_pb2.NodeHealth()
        self._changed = asyncio.Event()
        self._failing: dict[str, str] = {}  # loop name -> its last error, while it fails

    async def wait_newer(self, version: int) -> int:
        """Wait until ``self.version`` differs from ``version``; return the new one."""
        while self.version == version:
            changed = self._changed
            await changed.wait()
        return self.version

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._poll_node())
            group.create_task(self._follow_health())

    async def _refresh(self) -> None:
        """Read the node once (GetNode) and apply it; UnixRpcError when the agent cannot answer."""
        node = await self.agent.get_node()
        self._node = node
        self._take_health(node.health)
        self._update()

    async def _poll_node(self) -> None:
        while True:
            try:
                await self._refresh()
                self._recovered("GetNode")
            except UnixRpcError as error:
                self._failed("GetNode", str(error))
            await asyncio.sleep(self.config.health_poll_seconds)

    async def _follow_health(self) -> None:
        while True:
            try:
                async for health in self.agent.watch_health():
                    self._recovered("WatchHealth")
                    self._take_health(health)
                    self._update()
            except UnixRpcError as error:
                self._failed("WatchHealth", str(error))
            await asyncio.sleep(self.config.health_poll_seconds)

    def _take_health(self, health: node_pb2.NodeHealth) -> None:
        if health.evaluated_at.ToNanoseconds() >= self._health.evaluated_at.ToNanoseconds():
            self._health = health

    def _update(self) -> None:
        if self._node is None:
            return
        new = units(self._node, self._health, self.config)
        if new == self.units:
            return
        before = {unit.id: unit for unit in self.units}
        for unit in new:
            old = before.get(unit.id)
            if old is None or old.healthy != unit.healthy:
                if unit.healthy:
                    log.info("%s %s: %s", unit.resource, unit.id, "Healthy" if old is None else "Healthy again")
                else:
                    log.warning("%s %s: Unhealthy: %s", unit.resource, unit.id, unit.reason)
        for gone in before.keys() - {unit.id for unit in new}:
            log.info("%s %s: gone", before[gone].resource, gone)
        self.units = new
        self.version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _failed(self, what: str, error: str) -> None:
        if self._failing.get(what) != error:
            log.warning("%s: %s (keeping the devices as they were; trying again every %gs)", what, error,
                        self.config.health_poll_seconds)
        self._failing[what] = error

    def _recovered(self, what: str) -> None:
        if self._failing.pop(what, None) is not None:
            log.info("%s: the agent answers again", what)
