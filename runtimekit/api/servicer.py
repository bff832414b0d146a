"""The servicer of runtimekit.v1.AgentService: it translates, nothing more.

Slice calls go to the ``SliceService`` the composition root passes in (None: the slicer is
disabled, and they answer UNAVAILABLE naming ``slicer.enabled``); node and health calls read the
node state's views. Every refusal is a ``SliceError`` and has one mapping to a gRPC status
(``STATUS_CODES``): the message is ``str(error)`` ("memory: must be …"), and the field the error is
about travels in the trailing metadata key ``runtimekit-field`` as well. Streams send the current
state first, then the newest state after each change of their topic (``NodeState.watch``:
coalescing, so a slow client skips to the latest moment and never builds a backlog).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any, NoReturn, TypeVar

import grpc
import grpc.aio

from runtimekit._proto.runtimekit.v1 import service_pb2, service_pb2_grpc
from runtimekit.api import convert, topology
from runtimekit.state import HEALTH, SLICES, NodeState
from runtimekit.state.slices import ErrorCode, SliceError, SliceService, check_slice_id
from runtimekit.state.topology import Allocator

log = logging.getLogger("runtimekit.api")

_T = TypeVar("_T")

#: SliceError codes -> gRPC status codes (the table docs/api.md shows).
STATUS_CODES: dict[ErrorCode, grpc.StatusCode] = {
    "invalid_argument": grpc.StatusCode.INVALID_ARGUMENT,
    "failed_precondition": grpc.StatusCode.FAILED_PRECONDITION,
    "resource_exhausted": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "not_found": grpc.StatusCode.NOT_FOUND,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
}
#: The trailing metadata key that names the request field an error is about.
FIELD_METADATA_KEY = "runtimekit-field"
SLICER_DISABLED = ("slicer.enabled is false on this node: the slicer does not run, so there are no slices "
                   "(set slicer.enabled: true in the agent's configuration)")
NO_SAMPLE = "the agent has not sampled the node yet; retry in a moment"


async def _abort(context: grpc.aio.ServicerContext, error: SliceError) -> NoReturn:
    metadata = ((FIELD_METADATA_KEY, error.field),) if error.field else ()
    await context.abort(STATUS_CODES[error.code], str(error), trailing_metadata=metadata)
    raise AssertionError("context.abort returned")  # pragma: no cover - it raises


class AgentServicer(service_pb2_grpc.AgentServiceServicer):
    """runtimekit.v1.AgentService over ``state`` (NodeState), ``slicer`` (None: disabled) and
    ``allocate`` (the topology allocator; None: AllocateDevices answers UNAVAILABLE)."""

    def __init__(self, state: NodeState, slicer: SliceService | None, allocate: Allocator | None = None) -> None:
        self._state = state
        self._slicer = slicer
        self._allocate = allocate

    def _slices(self) -> SliceService:
        if self._slicer is None:
            raise SliceError("unavailable", "", SLICER_DISABLED)
        return self._slicer

    async def _answer(self, context: grpc.aio.ServicerContext, call: Awaitable[_T]) -> _T:
        """``call``'s result; a SliceError becomes its status, anything else INTERNAL (logged)."""
        try:
            return await call
        except SliceError as error:
            await _abort(context, error)
        except Exception as error:  # a bug or a broken slicer: the caller gets a status, never a hang
            log.exception("runtimekit.v1 call failed")
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(error).__name__}: {error}")
            raise AssertionError("context.abort returned") from None  # pragma: no cover

    # -- slices --------------------------------------------------------------------------------

    async def CreateSlice(self, request: service_pb2.CreateSliceRequest, context: Any) -> service_pb2.CreateSliceResponse:
        async def create() -> service_pb2.CreateSliceResponse:
            made = await self._slices().create(convert.slice_request(request))
            return service_pb2.CreateSliceResponse(slice=convert.slice_message(made))

        return await self._answer(context, create())

    async def DeleteSlice(self, request: service_pb2.DeleteSliceRequest, context: Any) -> service_pb2.DeleteSliceResponse:
        async def delete() -> service_pb2.DeleteSliceResponse:
            slicer = self._slices()
            gone = await slicer.delete(check_slice_id(request.slice_id))
            return service_pb2.DeleteSliceResponse(slice=convert.slice_message(gone))

        return await self._answer(context, delete())

    async def GetSlice(self, request: service_pb2.GetSliceRequest, context: Any) -> service_pb2.GetSliceResponse:
        async def get() -> service_pb2.GetSliceResponse:
            table = self._slices().table()
            slice_id = check_slice_id(request.slice_id)
            found = table.slices.get(slice_id)
            if found is None:
                raise SliceError("not_found", "slice_id", f"no slice {slice_id!r} on this node")
            return service_pb2.GetSliceResponse(slice=convert.slice_message(found))

        return await self._answer(context, get())

    async def ListSlices(self, request: service_pb2.ListSlicesRequest, context: Any) -> service_pb2.ListSlicesResponse:
        async def listing() -> service_pb2.ListSlicesResponse:
            return service_pb2.ListSlicesResponse(slices=convert.slice_messages(self._slices().table().slices.values()))

        return await self._answer(context, listing())

    async def WatchSlices(self, request: service_pb2.WatchSlicesRequest, context: Any
                          ) -> AsyncIterator[service_pb2.WatchSlicesResponse]:
        if self._slicer is None:
            await _abort(context, SliceError("unavailable", "", SLICER_DISABLED))
        async for view in self._state.watch(SLICES):
            yield service_pb2.WatchSlicesResponse(slices=convert.slice_messages(view.slices.slices.values()))

    # -- devices and the node ------------------------------------------------------------------

    async def SetDeviceMode(self, request: service_pb2.SetDeviceModeRequest, context: Any
                            ) -> service_pb2.SetDeviceModeResponse:
        async def set_mode() -> service_pb2.SetDeviceModeResponse:
            info = await self._slices().set_device_mode(request.device, request.mode)
            return service_pb2.SetDeviceModeResponse(device=convert.mode_device(self._state.view(), info))

        return await self._answer(context, set_mode())

    async def GetNode(self, request: service_pb2.GetNodeRequest, context: Any) -> service_pb2.GetNodeResponse:
        async def node() -> service_pb2.GetNodeResponse:
            view = self._state.view()
            if view.snapshot is None:
                raise SliceError("unavailable", "", NO_SAMPLE)
            return service_pb2.GetNodeResponse(node=convert.node_message(view, self._slicer is not None))

        return await self._answer(context, node())

    # -- topology ------------------------------------------------------------------------------

    async def GetTopology(self, request: service_pb2.GetTopologyRequest, context: Any) -> service_pb2.GetTopologyResponse:
        async def get() -> service_pb2.GetTopologyResponse:
            found = self._state.view().topology
            if found is None:
                raise SliceError("unavailable", "", topology.NO_TOPOLOGY)
            return service_pb2.GetTopologyResponse(topology=topology.topology_message(found))

        return await self._answer(context, get())

    async def AllocateDevices(self, request: service_pb2.AllocateDevicesRequest, context: Any
                              ) -> service_pb2.AllocateDevicesResponse:
        async def choose() -> service_pb2.AllocateDevicesResponse:
            if self._allocate is None:
                raise SliceError("unavailable", "", "this agent serves no allocator (topology.enabled: false)")
            return topology.allocate_devices(self._state.view(), request, self._allocate)  # exact; ms for 16 devices

        return await self._answer(context, choose())

    async def WatchHealth(self, request: service_pb2.WatchHealthRequest, context: Any
                          ) -> AsyncIterator[service_pb2.WatchHealthResponse]:
        async for view in self._state.watch(HEALTH):
            yield service_pb2.WatchHealthResponse(health=convert.node_health(view.health, convert.gpu_refs(view.snapshot)))
