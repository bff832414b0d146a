"""The devices the plugin advertises, kept current from the agent: one watcher, many streams.

``DeviceWatch.run()`` runs two loops on the event loop until cancelled:

- every ``health_poll_seconds`` it reads the node (GetNode): the devices, their modes and MIG
  devices, and the health the answer carries; then, when a card holds slices, the slices
  (ListSlices, after GetNode, so a partition GetNode lists is never newer than the slices read);
  and, when the cards differ from those of the last complete topology, the topology
  (GetTopology: each card's NUMA node; it changes only when the GPUs do, so it is never read
  per kubelet request nor per poll of the same cards). A topology that fails, or that misses a
  card, is read again at the next poll; meanwhile those devices go without a NUMA node;
- it follows the health stream (WatchHealth), so a verdict reaches the kubelet at once; a broken
  stream is opened again ``health_poll_seconds`` later.

The newest verdict wins (by ``evaluated_at``; an older one, from a poll that raced the stream, is
ignored). The first reading of the node and each change of the advertised devices bump
``version`` and wake every ListAndWatch stream and the offer annotation's writer
(``wait_newer``); ``topology`` keeps the newest GetTopology answer for that writer (its NVLink
links and NICs). While the agent is unreachable the last devices stay advertised as they were
(the kubelet keeps its pods); failures and recoveries are logged once per transition.
"""

from __future__ import annotations

import asyncio
import logging

from runtimekit._proto.runtimekit.v1 import node_pb2, slice_pb2
from runtimekit.grpc_unix import UnixRpcError

from ..agentclient import AgentClient
from .config import DevicePluginConfig
from .inventory import Unit, numa_nodes, units

log = logging.getLogger(__name__)


class DeviceWatch:
    """The advertised devices (``units``), their ``version``, and the loops that refresh them."""

    def __init__(self, agent: AgentClient, config: DevicePluginConfig) -> None:
        self.agent = agent
        self.config = config
        self.units: tuple[Unit, ...] = ()
        self.version = 0  # bumped on every change of ``units``
        self._node: node_pb2.Node | None = None
        self._slices: list[slice_pb2.Slice] = []
        self.topology: node_pb2.Topology | None = None  # the newest GetTopology answer (None before the first)
        self._numa: dict[str, int] = {}  # each card's NUMA node by UUID (GetTopology)
        self._topology_of: frozenset[tuple[str, int]] | None = None  # the cards (UUID, index) it covers
        self._health = node_pb2.NodeHealth()
        self._changed = asyncio.Event()
        self._failing: dict[str, str] = {}  # loop name -> its last error, while it fails

    @property
    def node_known(self) -> bool:
        """Whether the agent's node has been read once (before that, ``units`` is empty for want of it)."""
        return self._node is not None

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
        """Read the node (GetNode), its slices and topology when needed, and apply them;
        UnixRpcError when the agent cannot answer GetNode or ListSlices."""
        node = await self.agent.get_node()
        slices = await self.agent.list_slices() if any(device.slice_ids for device in node.devices) else []
        await self._read_topology(node)
        first = self._node is None
        self._node, self._slices = node, slices
        self._take_health(node.health)
        self._update(announce=first)

    async def _read_topology(self, node: node_pb2.Node) -> None:
        """GetTopology when ``node``'s cards are not those of the last complete topology."""
        cards = frozenset((device.ref.uuid, device.ref.index) for device in node.devices if device.ref.uuid)
        if cards == self._topology_of:
            return
        try:
            topology = await self.agent.get_topology()
        except UnixRpcError as error:
            self._failed("GetTopology", str(error), "the devices go without a NUMA node until it answers")
            return
        self._recovered("GetTopology")
        self.topology = topology
        self._numa = numa_nodes(topology)
        if {uuid for uuid, _ in cards} <= {place.ref.uuid for place in topology.devices}:
            self._topology_of = cards  # complete: read again only when the cards change

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

    def _update(self, *, announce: bool = False) -> None:
        """Apply the node and health read last; a change (or ``announce``: the node's first
        reading, even of no devices) bumps ``version`` and wakes the waiters."""
        if self._node is None:
            return
        new = units(self._node, self._health, self.config, self._slices, self._numa)
        if new == self.units and not announce:
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

    def _failed(self, what: str, error: str, meanwhile: str = "keeping the devices as they were") -> None:
        if self._failing.get(what) != error:
            log.warning("%s: %s (%s; trying again every %gs)", what, error, meanwhile, self.config.health_poll_seconds)
        self._failing[what] = error

    def _recovered(self, what: str) -> None:
        if self._failing.pop(what, None) is not None:
            log.info("%s: the agent answers again", what)
