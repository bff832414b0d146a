"""``runtimekit device-plugin serve``'s process: the device watch, one plugin socket per resource,
registration with the kubelet, and registration again after a kubelet restart.

Every ``kubelet_poll_seconds`` (polling, no inotify) ``reconcile`` makes the world match:

- a plugin server for ``resource_name`` from the start, and one per MIG profile as soon as a MIG
  device of that profile exists; a plugin stays while the process runs (its list may go empty);
- a plugin whose socket is gone (a restarting kubelet deletes every socket in its directory) is
  served again on a new socket;
- a plugin is registered again whenever the kubelet socket is not the one it registered with (a
  restarted kubelet makes a new one), its own socket was made again, or its last try failed.

A kubelet that refuses or is absent is logged once per reason and tried again on the next tick.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass

from runtimekit.grpc_unix import UnixRpcError

from .agent import AgentClient
from .allocation import Allocator
from .config import DevicePluginConfig
from .kubelet import KubeletRegistration, file_identity
from .names import endpoint_of
from .plugin import DevicePluginServicer, PluginServer
from .watch import DeviceWatch

log = logging.getLogger(__name__)


@dataclass
class _Plugin:
    server: PluginServer
    registered_with: tuple[int, int] | None = None  # the kubelet socket it registered on
    registrations: int = 0
    last_error: str = ""


class DevicePluginService:
    """The whole plugin; ``run()`` until cancelled, then every socket is removed."""

    def __init__(self, config: DevicePluginConfig) -> None:
        self.config = config
        self.agent = AgentClient(config.agent_socket, config.agent_timeout_seconds)
        self.watch = DeviceWatch(self.agent, config)
        self.allocator = Allocator(self.agent, config)
        self.kubelet = KubeletRegistration(config.kubelet_socket, config.agent_timeout_seconds)
        self.plugins: dict[str, _Plugin] = {}

    async def run(self) -> None:
        watcher = asyncio.create_task(self.watch.run(), name="device-watch")
        try:
            while True:
                if watcher.done():
                    watcher.result()  # the watch ended by a bug: raise it (the process exits, its pod restarts)
                await self.reconcile()
                await asyncio.sleep(self.config.kubelet_poll_seconds)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            await self.close()

    async def close(self) -> None:
        """Stop every plugin server (their sockets are removed) and close the clients."""
        for plugin in self.plugins.values():
            await plugin.server.stop()
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
        for resource, plugin in self.plugins.items():
            if not plugin.server.present():
                if plugin.server.running:
                    log.info("%s: the plugin socket %s is gone (the kubelet restarted?): serving it again",
                             resource, plugin.server.socket_path)
                await plugin.server.stop()
                await plugin.server.start()
                plugin.registered_with = None
            if kubelet is not None and plugin.registered_with != kubelet:
                await self._register(resource, plugin, kubelet)

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
