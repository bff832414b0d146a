"""The DRA driver's only way to the node agent: runtimekit.v1 over the agent's unix socket.

Unary calls go through ``runtimekit.grpc_unix.UnixRpcClient``: a deadline on every call
(``agent_timeout_seconds``) and one error mapping, ``AgentUnavailable`` when nothing answered (no
socket, UNAVAILABLE, the deadline) and ``AgentError`` when the agent answered with another status
(its ``code``: INVALID_ARGUMENT, FAILED_PRECONDITION, RESOURCE_EXHAUSTED, NOT_FOUND; its message
names the field and the rule, proto/runtimekit/v1/service.proto). ``watch_slices`` keeps a channel
of its own for as long as the stream lives. docs/api.md describes the calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Protocol

import grpc
import grpc.aio

from runtimekit._proto.runtimekit.v1 import node_pb2, service_pb2, service_pb2_grpc, slice_pb2
from runtimekit.grpc_unix import UnixRpcClient, UnixRpcError, UnixRpcUnavailable, unix_channel

__all__ = ["AgentClient", "AgentError", "AgentUnavailable"]


class AgentError(UnixRpcError):
    """The agent answered with an error status (``code`` names it)."""


class AgentUnavailable(UnixRpcUnavailable):
    """Nothing answered on the agent's socket (missing, refused, or no answer before the deadline)."""


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

    async def watch_slices(self) -> AsyncIterator[list[slice_pb2.Slice]]:
        """Every slice now, then after each change (WatchSlices), until the stream breaks: then
        ``AgentUnavailable`` or ``AgentError``, as the unary calls raise."""
        self._check_socket()
        channel = unix_channel(self.socket_path)
        try:
            stream = service_pb2_grpc.AgentServiceStub(channel).WatchSlices(service_pb2.WatchSlicesRequest())
            async for response in stream:
                yield list(response.slices)
            raise AgentUnavailable(self.source, self.socket_path, "WatchSlices ended (the agent stopped)")
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            reason = f"WatchSlices failed: {code.name}: {exc.details()}"
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                raise AgentUnavailable(self.source, self.socket_path, reason, code.name) from None
            raise AgentError(self.source, self.socket_path, reason, code.name) from None
        finally:
            await channel.close()
