"""The device plugin service (deviceplugin v1beta1 ``DevicePlugin``) of one resource, on its own socket.

The servicer only translates: the devices come from ``DeviceWatch``, the choices from
``Allocator``. Every ListAndWatch stream sends the resource's devices as soon as the agent's node
has been read once (never an empty list for want of that reading), then the whole list again
after every change of an ID or a health (and nothing when a change elsewhere left this resource
as it was). Allocate refuses an ID this plugin does not advertise (INVALID_ARGUMENT,
naming the field), as the kubelet only hands out advertised IDs.

Stopping a plugin server (``PluginServer.stop``: SIGTERM, or its socket served again) ends every
ListAndWatch stream from this side, its status OK, lets the calls in flight finish for
``STOP_GRACE_SECONDS`` (then gRPC cancels them) and waits until the tasks that served them are
done (``runtimekit.grpc_calls``, as every ``UnixGrpcServer`` does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
import grpc.aio

from runtimekit._proto.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from runtimekit.grpc_unix import UnixGrpcServer

from .allocation import Allocator
from .kubelet import file_identity, plugin_options
from .watch import DeviceWatch

log = logging.getLogger(__name__)

#: How long a stopping plugin server lets its calls in flight finish (an Allocate waiting on the
#: agent) before gRPC cancels them, in seconds; then the tasks that served them get
#: grpc_calls.WAIT_SECONDS to end. Every plugin server stops at once, well within the DaemonSet's
#: terminationGracePeriodSeconds (10 s).
STOP_GRACE_SECONDS = 1.0


class DevicePluginServicer(api_pb2_grpc.DevicePluginServicer):
    """``v1beta1.DevicePlugin`` for ``resource``."""

    def __init__(self, resource: str, watch: DeviceWatch, allocator: Allocator) -> None:
        self.resource = resource
        self.watch = watch
        self.allocator = allocator
        self._ending = asyncio.Event()  # set while the server stops: every ListAndWatch stream returns

    def open_streams(self) -> None:
        """Serve ListAndWatch streams again (after ``end_streams``): called as the server starts."""
        self._ending = asyncio.Event()

    def end_streams(self) -> None:
        """End every ListAndWatch stream, its status OK (the kubelet sees the plugin go, as when
        its socket goes), and each one opened from now on as soon as it opens."""
        self._ending.set()

    def devices(self) -> list[api_pb2.Device]:
        """The resource's devices as ListAndWatch sends them: ID, health and, when its card's NUMA
        node is known, ``topology`` (the kubelet's Topology Manager aligns on it)."""
        return [api_pb2.Device(ID=unit.id, health=unit.health, topology=_numa_topology(unit.numa_node))
                for unit in self.watch.units if unit.resource == self.resource]

    async def GetDevicePluginOptions(self, request: api_pb2.Empty, context: grpc.aio.ServicerContext
                                     ) -> api_pb2.DevicePluginOptions:
        return plugin_options()

    async def ListAndWatch(self, request: api_pb2.Empty, context: grpc.aio.ServicerContext
                           ) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        ending = self._ending
        sent: list[api_pb2.Device] | None = None
        # Nothing is sent before the agent's node has been read once: an empty first list would
        # tell the kubelet the node has none of this resource (allocatable 0) until the next one.
        version: int | None = self.watch.version
        if not self.watch.node_known:
            version = await self._newer(self.watch.version, ending)
        while version is not None:
            devices = self.devices()
            if devices != sent:
                log.debug("ListAndWatch %s: %s", self.resource, ", ".join(f"{d.ID} {d.health}" for d in devices))
                yield api_pb2.ListAndWatchResponse(devices=devices)
                sent = devices
            version = await self._newer(version, ending)
        log.debug("ListAndWatch %s: the server stops; the stream ends", self.resource)

    async def _newer(self, version: int, ending: asyncio.Event) -> int | None:
        """The watch's version once it differs from ``version``; None as soon as ``ending`` is set."""
        if ending.is_set():
            return None
        newer = asyncio.create_task(self.watch.wait_newer(version))
        ended = asyncio.create_task(ending.wait())
        try:
            await asyncio.wait((newer, ended), return_when=asyncio.FIRST_COMPLETED)
        finally:
            newer.cancel()
            ended.cancel()
        return None if ending.is_set() else newer.result()

    async def GetPreferredAllocation(self, request: api_pb2.PreferredAllocationRequest,
                                     context: grpc.aio.ServicerContext) -> api_pb2.PreferredAllocationResponse:
        response = api_pb2.PreferredAllocationResponse()
        for container in request.container_requests:
            chosen = await self.allocator.preferred(self.resource, list(container.available_deviceIDs),
                                                    list(container.must_include_deviceIDs), container.allocation_size)
            response.container_responses.add(deviceIDs=chosen)
        return response

    async def Allocate(self, request: api_pb2.AllocateRequest, context: grpc.aio.ServicerContext
                       ) -> api_pb2.AllocateResponse:
        known = {device.ID for device in self.devices()}
        response = api_pb2.AllocateResponse()
        for number, container in enumerate(request.container_requests):
            unknown = [device for device in container.devices_ids if device not in known]
            if unknown:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"container_requests[{number}].devices_ids: not a device of {self.resource}: "
                                    f"{', '.join(unknown)}")
            response.container_responses.append(
                await self.allocator.container(self.resource, list(container.devices_ids)))
        return response

    async def PreStartContainer(self, request: api_pb2.PreStartContainerRequest, context: grpc.aio.ServicerContext
                                ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()  # not asked for (pre_start_required is false)


def _numa_topology(numa_node: int | None) -> api_pb2.TopologyInfo | None:
    return None if numa_node is None else api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=numa_node)])


class PluginServer(UnixGrpcServer):
    """One resource's plugin socket ``DIR/runtimekit-<resource>.sock``; ``absence()`` says why it
    must be served again ("" while the socket this server made is still there: a restarting
    kubelet deletes it)."""

    def __init__(self, socket_path: str, servicer: DevicePluginServicer) -> None:
        super().__init__(socket_path)
        self.servicer = servicer
        self._made: tuple[int, int] | None = None  # (device, inode) of the socket made

    def _add_servicers(self, server: grpc.aio.Server) -> None:
        api_pb2_grpc.add_DevicePluginServicer_to_server(self.servicer, server)

    async def start(self) -> None:
        self.servicer.open_streams()
        await super().start()
        self._made = file_identity(self.socket_path)

    async def stop(self, grace: float | None = STOP_GRACE_SECONDS) -> None:
        """Stop serving and remove the socket (idempotent): the ListAndWatch streams end (status OK),
        the calls in flight get ``grace`` seconds (None: cancelled now), and this returns only once
        the tasks that served them are done (an ordinary stop logs no gRPC error)."""
        self.servicer.end_streams()
        await super().stop(grace)

    def absence(self) -> str:
        """Why the server must be (re)started, in words; "" when it serves its own socket."""
        if not self.running:
            return "not serving"
        found = file_identity(self.socket_path)
        if found is None:
            return "its socket is gone"
        return "" if found == self._made else "its socket was replaced by another file"
