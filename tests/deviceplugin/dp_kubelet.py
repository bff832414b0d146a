"""A fake kubelet: the kubelet's side of the device plugin API v1beta1, over real unix sockets.

The real kubelet cannot run here (no node, no container runtime), so this plays its part of the
protocol (k8s.io/kubernetes pkg/kubelet/cm/devicemanager/plugin/v1beta1 server.go and client.go):

- a ``v1beta1.Registration`` server on ``DIR/kubelet.sock`` that validates every RegisterRequest
  as the kubelet does (``version`` must be "v1beta1"; ``resource_name`` an extended resource name:
  DOMAIN/NAME, a DNS subdomain outside kubernetes.io, a name of 1-63 characters) and, as this fake's
  own strictness, that ``endpoint`` is a bare file name of a socket that exists in its directory;
  a refused request gets INVALID_ARGUMENT (the kubelet answers an error too) and is not recorded;
- for each registration, as the kubelet's device manager does, a client that dials
  ``DIR/endpoint``, calls GetDevicePluginOptions, then keeps a ListAndWatch stream open, its lists
  queued per resource (``next_list``: (ID, health) pairs) and the newest whole list kept
  (``Connection.devices``: the Device messages, topology included);
- ``restart()``: the kubelet stops (its socket is removed, its streams are dropped), deletes every
  socket in its directory as a starting kubelet does, and serves a new ``kubelet.sock``.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
from dataclasses import dataclass, field

import grpc
import grpc.aio

from runtimekit._proto.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from runtimekit.grpc_unix import UnixGrpcServer

_DOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def kubelet_refusal(request: api_pb2.RegisterRequest, directory: str) -> str:
    """Why the kubelet refuses ``request`` ("" when it accepts it)."""
    if request.version != "v1beta1":
        return f"Unsupported plugin version {request.version!r}"
    domain, _, name = request.resource_name.partition("/")
    if (not name or not _DOMAIN.fullmatch(domain) or len(domain) > 253 or domain.endswith("kubernetes.io")
            or len(name) > 63 or not _NAME.fullmatch(name)):
        return f"invalid extended resource name {request.resource_name!r}"
    if not request.endpoint or os.path.basename(request.endpoint) != request.endpoint:
        return f"endpoint {request.endpoint!r} must be a file name in {directory}"
    path = os.path.join(directory, request.endpoint)
    if not os.path.exists(path) or not stat.S_ISSOCK(os.stat(path).st_mode):
        return f"no plugin socket at {path}"
    return ""


@dataclass
class Connection:
    """The kubelet's client of one registered plugin."""

    request: api_pb2.RegisterRequest
    options: api_pb2.DevicePluginOptions | None = None
    lists: asyncio.Queue[list[tuple[str, str]]] = field(default_factory=asyncio.Queue)
    devices: list[api_pb2.Device] = field(default_factory=list)  # the newest list, whole
    streams: int = 0  # ListAndWatch streams opened (a plugin server restarted drops the stream)
    streaming: asyncio.Event = field(default_factory=asyncio.Event)  # set once a stream is opened
    channel: grpc.aio.Channel | None = None
    stub: api_pb2_grpc.DevicePluginStub | None = None
    task: asyncio.Task[None] | None = None


class FakeKubelet(UnixGrpcServer, api_pb2_grpc.RegistrationServicer):
    def __init__(self, directory: str) -> None:
        UnixGrpcServer.__init__(self, os.path.join(directory, "kubelet.sock"))
        self.directory = directory
        self.registrations: list[api_pb2.RegisterRequest] = []
        self.refusals: list[str] = []
        self.connections: dict[str, Connection] = {}  # by resource: the newest registration's
        self._registered = asyncio.Condition()

    def _add_servicers(self, server: grpc.aio.Server) -> None:
        api_pb2_grpc.add_RegistrationServicer_to_server(self, server)

    async def Register(self, request: api_pb2.RegisterRequest, context: grpc.aio.ServicerContext) -> api_pb2.Empty:
        refusal = kubelet_refusal(request, self.directory)
        if refusal:
            self.refusals.append(refusal)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal)
        old = self.connections.get(request.resource_name)
        if old is not None:
            await self._drop(old)
        connection = Connection(request)
        self.connections[request.resource_name] = connection
        connection.task = asyncio.create_task(self._connect(connection))
        async with self._registered:
            self.registrations.append(request)
            self._registered.notify_all()
        return api_pb2.Empty()

    async def _connect(self, connection: Connection) -> None:
        """Dial the plugin as the device manager does: options, then ListAndWatch until dropped."""
        path = os.path.join(self.directory, connection.request.endpoint)
        connection.channel = grpc.aio.insecure_channel(f"unix:{path}")
        connection.stub = api_pb2_grpc.DevicePluginStub(connection.channel)
        connection.options = await connection.stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
        connection.streams += 1
        connection.streaming.set()
        async for response in connection.stub.ListAndWatch(api_pb2.Empty()):
            connection.devices = list(response.devices)
            await connection.lists.put([(device.ID, device.health) for device in response.devices])

    async def _drop(self, connection: Connection) -> None:
        if connection.task is not None:
            connection.task.cancel()
            await asyncio.gather(connection.task, return_exceptions=True)
        if connection.channel is not None:
            await connection.channel.close()

    async def wait_registrations(self, count: int, timeout: float = 10.0) -> list[api_pb2.RegisterRequest]:
        """Wait until ``count`` registrations were accepted in all; return them."""
        async with self._registered:
            await asyncio.wait_for(self._registered.wait_for(lambda: len(self.registrations) >= count), timeout)
        return list(self.registrations)

    async def wait_stream(self, resource: str, timeout: float = 10.0) -> None:
        """Wait until a ListAndWatch stream of ``resource`` (registered already) has been opened."""
        await asyncio.wait_for(self.connections[resource].streaming.wait(), timeout)

    async def next_list(self, resource: str, timeout: float = 10.0) -> list[tuple[str, str]]:
        """The next ListAndWatch list of ``resource``: (ID, health) pairs."""
        return await asyncio.wait_for(self.connections[resource].lists.get(), timeout)

    def plugin(self, resource: str) -> api_pb2_grpc.DevicePluginStub:
        """The kubelet's client of ``resource``'s plugin (its newest registration)."""
        stub = self.connections[resource].stub
        assert stub is not None, f"{resource}: not connected yet"
        return stub

    async def restart(self) -> None:
        """Stop, delete every socket in the directory (as a starting kubelet does), serve again."""
        await self.stop()
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        await self.start()

    async def stop(self, grace: float | None = None) -> None:
        for connection in self.connections.values():
            await self._drop(connection)
        self.connections.clear()
        await super().stop(grace)
