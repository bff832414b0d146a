"""``runtimekit dra serve``'s process: the kubelet sockets, prepare and unprepare, the publisher, cleanup.

Start, in order: the plugin directory's lock (a second driver there is refused: ``DriverLocked``),
the checkpoint (``CheckpointError`` when unreadable), then ``dra.sock`` and the registration
socket (the kubelet dials dra.sock as soon as it registers the driver), then the parts below.
Neither the agent nor the API server is needed to start: each part that needs them retries on its
own, with backoff (``retry_delay``: the publish interval doubled per failure in a row, at most
``BACKOFF_MAX_SECONDS``), logging the first failure and the recovery:

- ``clean``: every ``cleanup_interval_seconds`` a ``sweep`` (this driver's agent slices, its
  checkpoint's id in their owner, of claims the checkpoint does not know; none when the agent's
  slicer is off), then the claims whose ResourceClaim is gone
  are unprepared. A sweep that fails (the agent away) does not hold up the unprepare; it is tried
  again after ``retry_delay`` until it works;
- the publisher (``publisher.Publisher``: ResourceSlices from the agent's node), only with an API
  client, built in a thread (the kubernetes client's modules take a second or more to import);
  woken by every change the agent's WatchSlices stream announces;
- every ``SOCKET_CHECK_SECONDS`` both sockets are checked: a socket removed or replaced (a kubelet
  that wiped its directories) is served again, which registers the driver again.

Each of these runs supervised: an exception no one expected is logged with its traceback and the
part restarts after a backoff; prepare and unprepare, served by dra.sock, go on meanwhile. A socket
that cannot be served ``START_ATTEMPTS`` times in a row ends ``run`` with ``PluginSocketError``.
On cancellation the registration socket goes first (the kubelet deregisters the driver), then dra.sock,
which takes no new call but lets a prepare or unprepare in flight finish, for up to
``agent_timeout_seconds`` (the DaemonSet's terminationGracePeriodSeconds leaves the time for it).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from runtimekit._proto.runtimekit.v1 import node_pb2, slice_pb2
from runtimekit.grpc_unix import UnixGrpcServer, UnixRpcError

from ..agentclient import AgentClient, AgentUnavailable
from .checkpoint import Checkpoint, DirectoryLock
from .claims import ClaimReader, ClaimReadError, KubernetesClaimReader
from .config import DraConfig
from .plugin import DraPluginServer
from .prepare import ClaimPreparer
from .registration import RegistrationServer

__all__ = ["DraService", "PluginSocketError"]

log = logging.getLogger(__name__)

#: How often the two sockets are checked for removal, in seconds.
SOCKET_CHECK_SECONDS = 1.0
#: Failed starts of one socket in a row before the process gives up.
START_ATTEMPTS = 5
#: The longest wait between two tries of anything that failed, in seconds.
BACKOFF_MAX_SECONDS = 60.0


class PluginSocketError(Exception):
    """A kubelet-facing socket could not be served ``START_ATTEMPTS`` times in a row."""


def _identity(path: str) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


class DraService:
    """The whole driver; ``run()`` until cancelled. ``api_client`` None (tests only): nothing is
    published and ``reader`` must be given."""

    def __init__(self, config: DraConfig, api_client: Any | None, reader: ClaimReader | None = None) -> None:
        if reader is None and api_client is None:
            raise ValueError("a claim reader or an API client is needed")
        self.config = config
        self.api_client = api_client
        self.reader: ClaimReader = reader if reader is not None else KubernetesClaimReader(api_client)
        self.agent = AgentClient(config.agent_socket, config.agent_timeout_seconds)
        self.publisher_agent = AgentClient(config.agent_socket, config.agent_timeout_seconds)  # its faults stay its own
        self.lock = DirectoryLock(config.lock_path)
        self.preparer: ClaimPreparer | None = None
        self.plugin: DraPluginServer | None = None
        self.registration = RegistrationServer(config.registration_socket, config.driver_name, config.dra_socket,
                                               on_registered=self._registered)
        self.publisher: Any = None
        self._served: dict[str, tuple[int, int] | None] = {}
        self._start_failures: dict[str, int] = {}
        self._without_topology = False  # the last GetTopology answered UNAVAILABLE

    def retry_delay(self, failures: int) -> float:
        return min(self.config.publish_interval_seconds * 2 ** max(failures - 1, 0), BACKOFF_MAX_SECONDS)

    async def run(self) -> None:
        self.lock.acquire()
        tasks: list[asyncio.Task[None]] = []
        try:
            self.preparer = ClaimPreparer(self.config, self.agent, self.reader, Checkpoint.load(self.config.checkpoint_path))
            self.plugin = DraPluginServer(self.config.dra_socket, self.preparer)
            log.info("DRA driver %s on node %s: %d prepared claim(s) in %s", self.config.driver_name,
                     self.config.node_name, len(self.preparer.checkpoint.claims), self.config.checkpoint_path)
            for server in (self.plugin, self.registration):  # dra.sock first: the kubelet dials it once registered
                await self._ensure_served(server)
            tasks.append(asyncio.create_task(self._supervise("cleanup", self._clean), name="dra-cleanup"))
            if self.api_client is not None:
                tasks.append(asyncio.create_task(self._supervise("publisher", self._publish), name="dra-publisher"))
                tasks.append(asyncio.create_task(self._supervise("slice watch", self._watch_slices), name="dra-watch"))
            while True:
                await asyncio.sleep(SOCKET_CHECK_SECONDS)
                for server in (self.plugin, self.registration):
                    await self._ensure_served(server)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.close()

    async def close(self) -> None:
        for server in (self.registration, self.plugin):
            if server is not None:
                try:  # a prepare or unprepare in flight on dra.sock finishes: its agent calls' deadline
                    await server.stop(self.config.agent_timeout_seconds if server is self.plugin else None)
                except OSError as error:  # another file in the socket's place: left alone
                    log.warning("%s: %s", server.socket_path, error)
        await self.agent.close()
        await self.publisher_agent.close()
        self.lock.release()

    async def snapshot(self) -> tuple[node_pb2.Node, node_pb2.Topology, list[slice_pb2.Slice]]:
        """What the publisher publishes from: GetNode, GetTopology, ListSlices (none when the slicer
        is off). A GetTopology that answers UNAVAILABLE (the agent's ``topology.enabled`` false, or
        its first discovery not done) stands for an empty topology: the GPUs are published without
        their place attributes, each its own NVLink domain, and no NIC; logged when that starts and ends."""
        node = await self.publisher_agent.get_node()
        try:
            topology = await self.publisher_agent.get_topology()
        except AgentUnavailable as error:
            if error.code != "UNAVAILABLE":  # no answer in time: this round fails, as any other call's
                raise
            if not self._without_topology:
                log.warning("publishing without the node's topology (no place attributes, no NICs): %s", error)
            self._without_topology = True
            topology = node_pb2.Topology()
        else:
            if self._without_topology:
                log.info("the agent answers GetTopology again: publishing with the node's topology")
            self._without_topology = False
        slices = await self.publisher_agent.list_slices() if node.slicer_enabled else []
        return node, topology, slices

    def _registered(self) -> None:
        """The kubelet registered the driver (again): republish at once, as a kubelet that started
        deleted this node's ResourceSlices."""
        if self.publisher is not None:
            self.publisher.resync_now()

    # -- sockets -----------------------------------------------------------------------------------
    async def _ensure_served(self, server: UnixGrpcServer) -> None:
        path = server.socket_path
        if server.running and _identity(path) == self._served.get(path):
            return
        if server.running:
            log.warning("%s was removed or replaced: serving it again", path)
        try:
            await server.stop()
            await server.start()
        except (OSError, RuntimeError) as error:  # not writable, a file in the way; gRPC's bind: RuntimeError
            failures = self._start_failures[path] = self._start_failures.get(path, 0) + 1
            if failures >= START_ATTEMPTS:
                raise PluginSocketError(f"{path}: failed {failures} times in a row, the last: {error}") from None
            log.warning("cannot serve %s: %s (try %d of %d)", path, error, failures, START_ATTEMPTS)
            await asyncio.sleep(self.retry_delay(failures))
            return
        self._start_failures[path] = 0
        self._served[path] = _identity(path)
        log.info("serving %s", path)

    # -- background parts --------------------------------------------------------------------------
    async def _supervise(self, name: str, part: Callable[[], Awaitable[None]]) -> None:
        failures = 0
        while True:
            try:
                await part()
                return
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in that part: log it, restart it; the rest goes on
                failures += 1
                log.exception("the DRA driver's %s failed; restarting it", name)
                await asyncio.sleep(self.retry_delay(failures))

    async def _clean(self) -> None:
        preparer = self.preparer
        assert preparer is not None
        failures = 0  # sweeps failed in a row: until one works, the next comes after retry_delay
        while True:
            try:
                swept = await preparer.sweep()
            except UnixRpcError as error:
                failures += 1
                if failures == 1:
                    log.warning("cannot look for leftover slices now, will retry: %s", error)
            else:
                if swept or failures:
                    log.info("leftover slices deleted: %d%s", swept, f" (after {failures} failed tries)" if failures else "")
                failures = 0
            try:
                await preparer.unprepare_gone()
            except (ClaimReadError, UnixRpcError) as error:
                log.warning("cannot check the prepared claims against the API server now: %s", error)
            await asyncio.sleep(min(self.retry_delay(failures), self.config.cleanup_interval_seconds) if failures
                                else self.config.cleanup_interval_seconds)

    async def _publish(self) -> None:
        if self.publisher is None:
            from .publisher import Publisher

            # Its API objects import the kubernetes client's largest modules (a second or more of CPU):
            # built in a thread, so the kubelet's calls are answered meanwhile.
            self.publisher = await asyncio.to_thread(Publisher, self.api_client, self.snapshot, self.config)
        await self.publisher.run()

    async def _watch_slices(self) -> None:
        failures = 0
        while True:
            try:
                async for _ in self.publisher_agent.watch_slices():
                    failures = 0
                    if self.publisher is not None:
                        self.publisher.wake()
            except UnixRpcError as error:
                failures += 1
                if failures == 1:
                    log.info("the agent's slice stream is closed, will reopen it: %s", error)
            await asyncio.sleep(self.retry_delay(failures))
