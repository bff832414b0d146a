"""Registration with the kubelet: ``pluginregistration.Registration`` on ``<registry_dir>/<driver>-reg.sock``.

The kubelet's plugin watcher finds the socket in its registry directory (inotify, and a scan at
start), calls GetInfo, validates the answer, then tells the plugin the outcome with
NotifyRegistrationStatus (k8s.io/kubelet pkg/apis/pluginregistration/v1; kubernetes
pkg/kubelet/pluginmanager/pluginwatcher/README.md). GetInfo is answered at once from memory (a
kubelet waits about 1 s for it): ``PluginInfo{type: "DRAPlugin", name: <driver>, endpoint: <absolute
dra.sock>, supported_versions: ["v1.DRAPlugin", "v1beta1.DRAPlugin"]}``, the services served on
dra.sock as "<gRPC package's last element>.<service>" (k8s.io/kubelet pkg/apis/dra/v1/types.go).

The outcome is recorded (``registered``, ``error``) and logged on every change: a refusal as an
error carrying the kubelet's reason. Every successful registration also calls ``on_registered``
(the service republishes at once: a kubelet deletes its node's ResourceSlices when it starts, then
registers the driver again). Removing the socket deregisters the driver.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import grpc.aio

from runtimekit._proto.pluginregistration.v1 import api_pb2, api_pb2_grpc
from runtimekit.grpc_unix import UnixGrpcServer

__all__ = ["PLUGIN_TYPE", "SUPPORTED_VERSIONS", "RegistrationServer"]

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"  # pluginregistration/v1 constants.go DRAPlugin
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


class _RegistrationServicer(api_pb2_grpc.RegistrationServicer):
    def __init__(self, owner: RegistrationServer) -> None:
        self._owner = owner

    async def GetInfo(self, request: api_pb2.InfoRequest, context: grpc.aio.ServicerContext) -> api_pb2.PluginInfo:
        return self._owner.info

    async def NotifyRegistrationStatus(self, request: api_pb2.RegistrationStatus, context: grpc.aio.ServicerContext
                                       ) -> api_pb2.RegistrationStatusResponse:
        self._owner.record(request.plugin_registered, request.error)
        return api_pb2.RegistrationStatusResponse()


class RegistrationServer(UnixGrpcServer):
    """The registration socket: serves GetInfo and records NotifyRegistrationStatus."""

    def __init__(self, socket_path: str, driver_name: str, dra_socket: str,
                 on_registered: Callable[[], None] | None = None) -> None:
        super().__init__(socket_path)
        self._on_registered = on_registered
        self.info = api_pb2.PluginInfo(type=PLUGIN_TYPE, name=driver_name, endpoint=os.path.abspath(dra_socket),
                                       supported_versions=list(SUPPORTED_VERSIONS))
        self.registered: bool | None = None  # None until the kubelet said
        self.error = ""
        self.notifications = 0

    def _add_servicers(self, server: grpc.aio.Server) -> None:
        api_pb2_grpc.add_RegistrationServicer_to_server(_RegistrationServicer(self), server)

    def record(self, registered: bool, error: str) -> None:
        """The kubelet's verdict: logged when it changes (a refusal as an error with its reason)."""
        changed = (registered, error) != (self.registered, self.error)
        self.registered, self.error = registered, error
        self.notifications += 1
        if registered and self._on_registered is not None:
            self._on_registered()  # every time: a restarted kubelet registers again, having deleted the slices
        if not changed:
            return
        if registered:
            log.info("registered with the kubelet as DRA driver %s (endpoint %s)", self.info.name, self.info.endpoint)
        else:
            log.error("the kubelet refused to register DRA driver %s: %s", self.info.name, error or "no reason given")
