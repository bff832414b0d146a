"""``runtimekit device-plugin serve``'s process: the device watch, one plugin socket per resource,
registration with the kubelet, and registration again after a kubelet restart.

Every ``kubelet_poll_seconds`` (polling, no inotify) ``reconcile`` makes the world match:

- a plugin server for ``resource_name`` from the start, and one per MIG profile as soon as a MIG
  device of that profile exists; a plugin stays while the process runs (its list may go empty);
- a plugin whose socket is gone (a restarting kubelet deletes every socket in its directory) or
  was replaced by another file is served again on a new socket, and the reason logged. The socket
  is known by its device and inode only (``file_identity``): a chmod, chown or SELinux relabel
  leaves it served as it is, its ListAndWatch streams open;
- a socket that cannot be made (a directory not writable, a file in the way, a bind that fails)
  is logged and tried again after a backoff: ``kubelet_poll_seconds``, doubled after each failure
  in a row up to ``START_BACKOFF_MAX_SECONDS``; the other plugins go on meanwhile. After
  ``START_ATTEMPTS`` failures in a row ``run`` raises ``PluginSocketError`` (the command prints it
  as one line and exits 1);
- a plugin is registered again whenever the kubelet socket is not the one it registered with (a
  restarted kubelet makes a new one), its own socket was made again, or its last try failed.

A kubelet that refuses or is absent is logged once per reason and tried again on the next tick.

With ``offer_annotation.enabled`` an ``OfferWriter`` runs beside the device watch and keeps the
Node's annotation ``runtimekit.io/offer`` current (offer_writer.py); its faults never stop the
plugins, and a plugin that stops removes the annotation.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import Any

from runtimekit.grpc_unix import UnixRpcError
from runtimekit.kube.gang.offer import OFFER_ANNOTATION

from ..agentclient import AgentClient
from .allocation import Allocator
from .config import DevicePluginConfig
from .kubelet import KubeletRegistration, file_identity
from .names import endpoint_of
from .nodeapi import KubernetesNodeAnnotation
from .offer_writer import OfferWriter
from .plugin import DevicePluginServicer, PluginServer
from .watch import DeviceWatch

log = logging.getLogger(__name__)

#: Failed starts of one plugin socket in a row before the process gives up (about 15 s of tries
#: with the default kubelet_poll_seconds of 1 s: 1, 2, 4, 8 s between them).
START_ATTEMPTS = 5
#: The longest wait between two tries of a plugin socket, in seconds.
START_BACKOFF_MAX_SECONDS = 30.0


class PluginSocketError(Exception):
    """A plugin socket could not be served ``START_ATTEMPTS`` times in a row."""


@dataclass
class _Plugin:
    server: PluginServer
    registered_with: tuple[int, int] | None = None  # the kubelet socket it registered on
    registrations: int = 0
    last_error: str = ""
    start_failures: int = 0  # failed starts of its server in a row
    retry_at: float = 0.0  # event-loop time before which its server is not tried again


class DevicePluginService:
    """The whole plugin; ``run()`` until cancelled (or ``PluginSocketError``), then every socket is removed.

    ``kube_client``: a ``kubernetes.client.ApiClient`` (``runtimekit.kube.kubeclient.api_client``),
    required with ``offer_annotation.enabled`` and unused without."""

    def __init__(self, config: DevicePluginConfig, kube_client: Any = None) -> None:
        self.config = config
        self.agent = AgentClient(config.agent_socket, config.agent_timeout_seconds)
        self.watch = DeviceWatch(self.agent, config)
        self.allocator = Allocator(self.agent, config)
        self.kubelet = KubeletRegistration(config.kubelet_socket, config.agent_timeout_seconds)
        self.plugins: dict[str, _Plugin] = {}
        self.kubelet_seen: bool | None = None  # the kubelet socket at the last pass (None: not looked yet)
        self.offer_writer: OfferWriter | None = None
        if config.offer_annotation.enabled:
            if kube_client is None or config.node_name is None:
                raise ValueError("offer_annotation.enabled needs node_name and a Kubernetes client")
            annotation = KubernetesNodeAnnotation(kube_client, config.node_name, OFFER_ANNOTATION)
            self.offer_writer = OfferWriter(self.watch, config, annotation)

    async def run(self) -> None:
        tasks = [asyncio.create_task(self.watch.run(), name="device-watch")]
        if self.offer_writer is not None:
            tasks.append(asyncio.create_task(self.offer_writer.run(), name="offer-annotation"))
        try:
            while True:
                for task in tasks:
                    if task.done():
                        task.result()  # it ended by a bug: raise it (the process exits, its pod restarts)
                await self.reconcile()
                await asyncio.sleep(self.config.kubelet_poll_seconds)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.close()

    async def close(self) -> None:
        """Stop every plugin server, all at once (their streams end, their sockets are removed;
        plugin.STOP_GRACE_SECONDS for the calls in flight), remove the offer annotation, close the clients."""
        stops = await asyncio.gather(*(plugin.server.stop() for plugin in self.plugins.values()), return_exceptions=True)
        for resource, stopped in zip(self.plugins, stops, strict=True):
            if isinstance(stopped, OSError):  # another file in the socket's place: left alone
                log.warning("%s: %s", resource, stopped)
            elif isinstance(stopped, BaseException):
                raise stopped
        if self.offer_writer is not None:
            await self.offer_writer.withdraw()
            await self.offer_writer.close()
        await self.kubelet.close()
        await self.agent.close()

    async def reconcile(self) -> None:
        """One pass: plugins for every resource, served and registered with the current kubelet."""
        resources = [self.config.resource_name, *sorted({unit.resource for unit in self.watch.units})]
        for resource in resources:
            if resource not in self.plugins:
                path = os.path.join(self.config.socket_dir, endpoint_of(resource))
                servicer = DevicePluginServicer(resource, self.watch, self.allocator)
                self.plugins[resource] = _Plugin(PluginServer(path, servicer))
        kubelet = file_identity(self.config.kubelet_socket)
        self._say_kubelet(kubelet is not None)
        for resource, plugin in self.plugins.items():
            why = plugin.server.absence()
            if why and not await self._serve(resource, plugin, why):
                continue
            if kubelet is not None and plugin.registered_with != kubelet:
                await self._register(resource, plugin, kubelet)

    def _say_kubelet(self, present: bool) -> None:
        """Log when the kubelet socket is absent (once, till it comes) and when it comes: a wrong
        ``kubelet_socket`` otherwise looks like a plugin serving for a kubelet that never calls."""
        if present == self.kubelet_seen:
            return
        if not present:
            log.warning("no kubelet socket at %s yet: serving, and registering once it appears (is kubelet_socket "
                        "the kubelet's device-plugins socket?)", self.config.kubelet_socket)
        elif self.kubelet_seen is False:
            log.info("the kubelet socket %s appeared", self.config.kubelet_socket)
        self.kubelet_seen = present

    async def _serve(self, resource: str, plugin: _Plugin, why: str) -> bool:
        """(Re)start ``plugin``'s server because of ``why``; False when it is not serving (a failure
        waits out its backoff); PluginSocketError after START_ATTEMPTS failures in a row."""
        now = asyncio.get_running_loop().time()
        if now < plugin.retry_at:
            return False
        path = plugin.server.socket_path
        if plugin.server.running:
            log.info("%s: serving %s again: %s (the kubelet restarted?)", resource, path, why)
        try:
            await plugin.server.stop()
            await plugin.server.start()
        except (OSError, RuntimeError) as error:  # not writable, a file in the way; gRPC's bind: RuntimeError
            plugin.start_failures += 1
            if plugin.start_failures >= START_ATTEMPTS:
                raise PluginSocketError(f"{path}: failed {plugin.start_failures} times in a row, the last: {error}"
                                        ) from None
            delay = min(self.config.kubelet_poll_seconds * 2 ** (plugin.start_failures - 1), START_BACKOFF_MAX_SECONDS)
            plugin.retry_at = now + delay
            log.warning("%s: cannot serve %s: %s (try %d of %d; again in %gs)", resource, path, error,
                        plugin.start_failures, START_ATTEMPTS, delay)
            return False
        if plugin.start_failures:
            log.info("%s: serving %s after %d failed tries", resource, path, plugin.start_failures)
        plugin.start_failures, plugin.registered_with = 0, None
        return True

    async def _register(self, resource: str, plugin: _Plugin, kubelet: tuple[int, int]) -> None:
        try:
            await self.kubelet.register(os.path.basename(plugin.server.socket_path), resource)
        except UnixRpcError as error:
            if str(error) != plugin.last_error:
                log.warning("%s: cannot register with the kubelet: %s (trying again every %gs)", resource, error,
                            self.config.kubelet_poll_seconds)
            plugin.last_error = str(error)
            return
        plugin.registered_with, plugin.last_error = kubelet, ""
        plugin.registrations += 1
        log.info("%s: registered with the kubelet at %s%s", resource, self.config.kubelet_socket,
                 " again" if plugin.registrations > 1 else "")
