"""The device plugin service (deviceplugin v1beta1 ``DevicePlugin``) of one resource, on its own socket.

The servicer only translates: the devices come from ``DeviceWatch``, the choices from
``Allocator``. Every ListAndWatch stream sends the resource's devices as soon as the agent's node
has been read once (never an empty list for want of that reading), then the whole list again
after every change of an ID or a health (and nothing when a change elsewhere left this resource
as it was). Allocate refuses an ID this plugin does not advertise (INVALID_ARGUMENT,
naming the field), as the kubelet only hands out advertised IDs.
"""

from __future__ import annotations

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


class DevicePluginServicer(api_pb2_grpc.DevicePluginServicer):
    """``v1beta1.DevicePlugin`` for ``resource``."""

    def __init__(self, resource: str, watch: DeviceWatch, allocator: Allocator) -> None:
        self.resource = resource
        self.watch = watch
        self.allocator = allocator

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
        sent: list[api_pb2.Device] | None = None
        # Nothing is sent before the agent's node has been read once: an empty first list would
        # tell the kubelet the node has none of this resource (allocatable 0) until the next one.
        version = self.watch.version if self.watch.node_known else await self.watch.wait_newer(self.watch.version)
        while True:
            devices = self.devices()
            if devices != sent:
                log.debug("ListAndWatch %s: %s", self.resource, ", ".join(f"{d.ID} {d.health}" for d in devices))
                yield api_pb2.ListAndWatchResponse(devices=devices)
                sent = devices
            version = await self.watch.wait_newer(version)

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
        await super().start()
        self._made = file_identity(self.socket_path)

    def absence(self) -> str:
        """Why the server must be (re)started, in words; "" when it serves its own socket."""
        if not self.running:
            return "not serving"
        found = file_identity(self.socket_path)
        if found is None:
            return "its socket is gone"
        return "" if found == self._made else "its socket was replaced by another file"
