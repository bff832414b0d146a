"""The kubelet's DRA service on ``<plugin dir>/dra.sock``: ``DRAPlugin`` v1 and v1beta1, one implementation.

Kubelets 1.34 and later call ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``, 1.32-1.33 the v1beta1
one; their messages are the same but for v1's ``Device.share_id`` (k8s.io/kubelet pkg/apis/dra/v1
and v1beta1 api.proto). Both adapters only translate to ``ClaimPreparer`` and back:

- every claim of a request gets an entry in the answer (the kubelet treats a missing one as an
  error), its ``error`` set when it failed;
- a device's ``request_names`` is the base request (``req`` of ``req/sub``,
  resourceclaim.BaseRequestRef, as the Go helper answers), ``pool_name`` and ``device_name`` the
  allocation result's, ``cdi_device_ids`` what prepare made; v1's ``share_id`` the result's shareID
  when it has one.

A bug in prepare (an exception no one expected) fails the claims of that call with its text and
is logged with its traceback; the process and the other calls go on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import grpc.aio

from runtimekit._proto.dra.v1 import api_pb2 as v1
from runtimekit._proto.dra.v1 import api_pb2_grpc as v1_grpc
from runtimekit._proto.dra.v1beta1 import api_pb2 as v1beta1
from runtimekit._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from runtimekit.grpc_unix import UnixGrpcServer

from .checkpoint import DeviceEntry
from .claims import ClaimRef, base_request
from .prepare import ClaimPreparer, Prepared

__all__ = ["DraPluginServer"]

log = logging.getLogger(__name__)


def _refs(claims: Sequence[Any]) -> list[ClaimRef]:
    return [ClaimRef(namespace=claim.namespace, uid=claim.uid, name=claim.name) for claim in claims]


class _Adapter:
    """DRAPlugin of one API version (``messages``: its generated api_pb2)."""

    def __init__(self, preparer: ClaimPreparer, messages: ModuleType, with_share_id: bool) -> None:
        self._preparer = preparer
        self._messages = messages
        self._with_share_id = with_share_id

    def _device(self, device: DeviceEntry) -> Any:
        message = self._messages.Device(request_names=[base_request(device.request)], pool_name=device.pool,
                                        device_name=device.device, cdi_device_ids=list(device.cdi_ids))
        if self._with_share_id and device.share_id:
            message.share_id = device.share_id
        return message

    async def NodePrepareResources(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        refs = _refs(request.claims)
        try:
            outcomes = await self._preparer.prepare(refs)
        except Exception as error:  # a bug: fail these claims, keep serving
            log.exception("NodePrepareResources failed unexpectedly")
            outcomes = {ref.uid: Prepared(error=f"{ref}: internal error: {type(error).__name__}: {error}") for ref in refs}
        response = self._messages.NodePrepareResourcesResponse()
        for uid, outcome in outcomes.items():
            answer = response.claims[uid]
            if outcome.error:
                answer.error = outcome.error
            else:
                answer.devices.extend(self._device(device) for device in outcome.devices)
        return response

    async def NodeUnprepareResources(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        refs = _refs(request.claims)
        try:
            errors = await self._preparer.unprepare(refs)
        except Exception as error:  # a bug: fail these claims, keep serving
            log.exception("NodeUnprepareResources failed unexpectedly")
            errors = {ref.uid: f"{ref}: internal error: {type(error).__name__}: {error}" for ref in refs}
        response = self._messages.NodeUnprepareResourcesResponse()
        for uid, why in errors.items():
            response.claims[uid].error = why
        return response


class DraPluginServer(UnixGrpcServer):
    """``dra.sock``: v1.DRAPlugin and v1beta1.DRAPlugin over one ClaimPreparer."""

    def __init__(self, socket_path: str, preparer: ClaimPreparer) -> None:
        super().__init__(socket_path)
        self.preparer = preparer

    def _add_servicers(self, server: grpc.aio.Server) -> None:
        v1_grpc.add_DRAPluginServicer_to_server(_Adapter(self.preparer, v1, with_share_id=True), server)
        v1beta1_grpc.add_DRAPluginServicer_to_server(_Adapter(self.preparer, v1beta1, with_share_id=False), server)
