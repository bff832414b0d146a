"""The kubelet's side the plugin calls: Registration.Register on the kubelet's socket.

Constants from k8s.io/kubelet pkg/apis/deviceplugin/v1beta1/constants.go: the API ``VERSION``
("v1beta1"); the default socket is in ``config.KUBELET_SOCKET``. The kubelet, once Register
answers, dials ``DIR/endpoint`` (its own device-plugins directory) and calls
GetDevicePluginOptions, then ListAndWatch. A kubelet that restarts deletes the sockets in that
directory and makes its own again: ``file_identity`` tells a socket made again from the old one.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable
from typing import Protocol

import grpc.aio

from runtimekit._proto.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from runtimekit.grpc_unix import UnixRpcClient

VERSION = "v1beta1"


def plugin_options() -> api_pb2.DevicePluginOptions:
    """What every plugin of this process supports, as it registers and as GetDevicePluginOptions
    answers: no PreStartContainer, GetPreferredAllocation served."""
    return api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


class _RegistrationStub(Protocol):
    def Register(self, request: api_pb2.RegisterRequest, *, timeout: float) -> Awaitable[api_pb2.Empty]: ...


class KubeletRegistration(UnixRpcClient[_RegistrationStub]):
    """``v1beta1.Registration`` on the kubelet's socket: UnixRpcUnavailable when no kubelet
    answers, UnixRpcError when it refuses (a version it does not serve, a resource taken)."""

    source = "kubelet registration"

    def _make_stub(self, channel: grpc.aio.Channel) -> _RegistrationStub:
        return api_pb2_grpc.RegistrationStub(channel)

    async def register(self, endpoint: str, resource: str) -> None:
        """Register ``resource`` served on ``endpoint`` (a file name in the kubelet's directory)."""
        request = api_pb2.RegisterRequest(version=VERSION, endpoint=endpoint, resource_name=resource,
                                          options=plugin_options())
        await self._call("Register", lambda stub, timeout: stub.Register(request, timeout=timeout))


def file_identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path`` (``st_dev``, ``st_ino``), None when there is none.

    The file itself, not its metadata: a chmod, chown or SELinux relabel changes the change time
    but not the identity. A file made again normally gets a new inode; a filesystem may reuse a
    freed inode number, which this cannot see, but a restarting kubelet also deletes the plugin
    sockets (they go missing, which ``None`` shows), so a restart is never missed."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino
