"""The container layer's only way to the node agent: runtimekit.v1 over the agent's unix socket.

The device plugin and the DRA driver use this one client. Unary calls go through
``runtimekit.grpc_unix.UnixRpcClient``: a deadline on every call (their ``agent_timeout_seconds``)
and one error mapping, ``AgentUnavailable`` when nothing answered (no socket, UNAVAILABLE, the
deadline) and ``AgentError`` when the agent answered with another status (its ``code``:
INVALID_ARGUMENT, FAILED_PRECONDITION, RESOURCE_EXHAUSTED, NOT_FOUND; its message names the field
and the rule, proto/runtimekit/v1/service.proto). Each stream (WatchHealth, WatchSlices) has a
channel of its own that lives as long as the stream. docs/api.md describes the calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import grpc.aio

from runtimekit._proto.runtimekit.v1 import node_pb2, service_pb2, service_pb2_grpc, slice_pb2
from runtimekit.grpc_unix import UnixRpcClient, UnixRpcError, UnixRpcUnavailable, unix_channel

__all__ = ["AgentClient", "AgentError", "AgentUnavailable", "Choice", "Nic"]


class AgentError(UnixRpcError):
    """The agent answered with an error status (``code`` names it)."""


class AgentUnavailable(UnixRpcUnavailable):
    """Nothing answered on the agent's socket (missing, refused, or no answer before the deadline)."""


@dataclass(frozen=True, slots=True)
class Nic:
    """An RDMA NIC the agent paired with a chosen GPU."""

    name: str  # the RDMA device's name ("mlx5_0")
    device_nodes: tuple[str, ...]  # its character devices ("/dev/infiniband/uverbs0")


@dataclass(frozen=True, slots=True)
class Choice:
    """The agent's answer to AllocateDevices: the chosen devices' UUIDs and their NICs."""

    devices: tuple[str, ...]
    nics: tuple[Nic, ...]


class _AgentStub(Protocol):
    """The calls made on the generated (untyped) ``AgentServiceStub``."""

    def GetNode(self, request: service_pb2.GetNodeRequest, *, timeout: float) -> Awaitable[service_pb2.GetNodeResponse]: ...

    def GetTopology(self, request: service_pb2.GetTopologyRequest, *, timeout: float
                    ) -> Awaitable[service_pb2.GetTopologyResponse]: ...

    def ListSlices(self, request: service_pb2.ListSlicesRequest, *, timeout: float
                   ) -> Awaitable[service_pb2.ListSlicesResponse]: ...

    def CreateSlice(self, request: service_pb2.CreateSliceRequest, *, timeout: float
                    ) -> Awaitable[service_pb2.CreateSliceResponse]: ...

    def DeleteSlice(self, request: service_pb2.DeleteSliceRequest, *, timeout: float
                    ) -> Awaitable[service_pb2.DeleteSliceResponse]: ...

    def AllocateDevices(
        self, request: service_pb2.AllocateDevicesRequest, *, timeout: float
    ) -> Awaitable[service_pb2.AllocateDevicesResponse]: ...


class AgentClient(UnixRpcClient[_AgentStub]):
    """Async client of the node agent's runtimekit.v1 API on its unix socket."""

    source = "runtimekit agent"
    error_type = AgentError
    unavailable_type = AgentUnavailable

    def _make_stub(self, channel: grpc.aio.Channel) -> _AgentStub:
        return service_pb2_grpc.AgentServiceStub(channel)

    async def get_node(self) -> node_pb2.Node:
        """The node's devices, their modes, partitions, profiles, capacity and health (GetNode)."""
        response = await self._call(
            "GetNode", lambda stub, timeout: stub.GetNode(service_pb2.GetNodeRequest(), timeout=timeout)
        )
        node: node_pb2.Node = response.node
        return node

    async def get_topology(self) -> node_pb2.Topology:
        """Where each device and RDMA NIC sits (GetTopology; UNAVAILABLE before the agent's first discovery)."""
        response: service_pb2.GetTopologyResponse = await self._call(
            "GetTopology", lambda stub, timeout: stub.GetTopology(service_pb2.GetTopologyRequest(), timeout=timeout)
        )
        topology: node_pb2.Topology = response.topology
        return topology

    async def list_slices(self) -> list[slice_pb2.Slice]:
        """Every slice of the node (ListSlices; UNAVAILABLE when the agent's slicer is disabled)."""
        response: service_pb2.ListSlicesResponse = await self._call(
            "ListSlices", lambda stub, timeout: stub.ListSlices(service_pb2.ListSlicesRequest(), timeout=timeout)
        )
        return list(response.slices)

    async def create_slice(self, request: service_pb2.CreateSliceRequest) -> slice_pb2.Slice:
        """Make a slice (CreateSlice); answers once it is ready. A refused request changes nothing."""
        response: service_pb2.CreateSliceResponse = await self._call(
            "CreateSlice", lambda stub, timeout: stub.CreateSlice(request, timeout=timeout)
        )
        made: slice_pb2.Slice = response.slice
        return made

    async def delete_slice(self, slice_id: str) -> slice_pb2.Slice:
        """Remove a slice and its device (DeleteSlice); AgentError with code NOT_FOUND when there is none."""
        request = service_pb2.DeleteSliceRequest(slice_id=slice_id)
        response: service_pb2.DeleteSliceResponse = await self._call(
            "DeleteSlice", lambda stub, timeout: stub.DeleteSlice(request, timeout=timeout)
        )
        removed: slice_pb2.Slice = response.slice
        return removed

    async def allocate(self, count: int, candidates: Sequence[str], required: Sequence[str], with_nics: bool) -> Choice:
        """The agent's best ``count`` devices among ``candidates`` (UUIDs), ``required`` included,
        each with its nearest RDMA NIC when ``with_nics`` (AllocateDevices: the topology allocator)."""
        request = service_pb2.AllocateDevicesRequest(
            count=count, candidate_device_uuids=list(candidates), required_device_uuids=list(required),
            with_nics=with_nics,
        )
        response: service_pb2.AllocateDevicesResponse = await self._call(
            "AllocateDevices", lambda stub, timeout: stub.AllocateDevices(request, timeout=timeout)
        )
        return Choice(
            devices=tuple(chosen.device.uuid for chosen in response.devices),
            nics=tuple(Nic(chosen.nic.name, tuple(chosen.nic.device_nodes)) for chosen in response.devices
                       if chosen.HasField("nic")),
        )

    async def watch_health(self) -> AsyncIterator[node_pb2.NodeHealth]:
        """The node's health now, then after each new verdict (WatchHealth), until the stream
        breaks: then ``AgentUnavailable`` or ``AgentError``, as the unary calls raise."""
        async for response in self._stream("WatchHealth", lambda stub: stub.WatchHealth(service_pb2.WatchHealthRequest())):
            yield response.health

    async def watch_slices(self) -> AsyncIterator[list[slice_pb2.Slice]]:
        """Every slice now, then after each change (WatchSlices), until the stream breaks: then
        ``AgentUnavailable`` or ``AgentError``, as the unary calls raise."""
        async for response in self._stream("WatchSlices", lambda stub: stub.WatchSlices(service_pb2.WatchSlicesRequest())):
            yield list(response.slices)

    async def _stream(self, name: str, start: Callable[[Any], AsyncIterator[Any]]) -> AsyncIterator[Any]:
        """The responses of server stream ``name`` on a channel of its own; its end or failure as
        ``AgentUnavailable`` (the agent stopped, UNAVAILABLE, CANCELLED) or ``AgentError``."""
        self._check_socket()
        channel = unix_channel(self.socket_path)
        try:
            async for response in start(service_pb2_grpc.AgentServiceStub(channel)):
                yield response
            raise AgentUnavailable(self.source, self.socket_path, f"{name} ended (the agent stopped)")
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            reason = f"{name} failed: {code.name}: {exc.details()}"
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                raise AgentUnavailable(self.source, self.socket_path, reason, code.name) from None
            raise AgentError(self.source, self.socket_path, reason, code.name) from None
        finally:
            await channel.close()
