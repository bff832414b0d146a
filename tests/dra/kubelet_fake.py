"""A fake kubelet: the kubelet's side of plugin registration and of the DRA plugin API (v1 and
v1beta1), over real unix sockets with grpc.aio.

The real kubelet cannot run here (no node, no container runtime, no API server), so this plays its
part of the protocols, validating what the plugin answers as the kubelet does, and a little more:

- registration, as the plugin watcher (kubernetes pkg/kubelet/pluginmanager, operation_generator
  ``RegisterPlugin``) and the DRA plugin manager (pkg/kubelet/cm/dra/plugin) do: the socket is
  found in the registry directory (a unix socket whose name does not start with "."), dialled,
  asked GetInfo with the kubelet's 1 s deadline; the answer is refused unless ``type`` is
  "DRAPlugin" (no handler for another type), ``name`` is the driver the claims name (plugins of a
  DRA driver must register under the driver's name), ``supported_versions`` lists a service this
  kubelet speaks ("v1.DRAPlugin" preferred, then "v1beta1.DRAPlugin") and, this fake's own
  strictness, ``endpoint`` is the absolute path of a unix socket that exists. Either way the
  plugin hears the verdict through NotifyRegistrationStatus; a refusal raises ``Refused``;
- NodePrepareResources / NodeUnprepareResources on the registered endpoint with the version chosen
  at registration (or the one a test names), each with the kubelet's 45 s deadline; the answer is
  checked as the kubelet's DRA manager checks it (pkg/kubelet/cm/dra/manager.go): a claim of the
  request without an entry, or an entry for a claim that was not asked, is an error (``Refused``);
  and, this fake's strictness, each device must name its pool and device, its request names must
  be base requests (no "/"), and every CDI device id must be a qualified CDI name
  (``vendor/class=name``, CDI SPEC.md), which the container runtime would refuse otherwise. A
  gRPC failure (a driver that died mid-call) raises ``CallFailed``, as the kubelet then retries.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from runtimekit._proto.dra.v1 import api_pb2 as v1
from runtimekit._proto.dra.v1 import api_pb2_grpc as v1_grpc
from runtimekit._proto.dra.v1beta1 import api_pb2 as v1beta1
from runtimekit._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from runtimekit._proto.pluginregistration.v1 import api_pb2 as registration_pb2
from runtimekit._proto.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from runtimekit.grpc_unix import unix_channel
from runtimekit.kube.dra.claims import ClaimRef

#: The services this kubelet speaks, newest first (kubelet 1.34+ ``servicesSupportedByKubelet``).
SERVICES = {"v1.DRAPlugin": (v1, v1_grpc), "v1beta1.DRAPlugin": (v1beta1, v1beta1_grpc)}
GET_INFO_SECONDS = 1.0  # a kubelet gives GetInfo about 1 s (kubernetes/kubernetes#127457)
CALL_SECONDS = 45.0  # pkg/kubelet/cm/dra/plugin defaultClientCallTimeout
_VENDOR = r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?"
CDI_QUALIFIED = re.compile(rf"{_VENDOR}/{_VENDOR}=[A-Za-z0-9][A-Za-z0-9_.:-]*")


class Refused(Exception):
    """The kubelet refused the plugin's answer; the message says why, as the kubelet would log it."""


class CallFailed(Exception):
    """A call got no answer (``code``: the gRPC status); the kubelet retries it later."""

    def __init__(self, what: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{what}: {code.name}: {details}")
        self.code = code


@dataclass(frozen=True)
class Device:
    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None  # v1 only; None when the plugin left it out


@dataclass(frozen=True)
class Answer:
    """One claim's entry in a NodePrepareResources answer."""

    devices: tuple[Device, ...]
    error: str


class FakeDraKubelet:
    """The kubelet, for one DRA driver whose registration socket appears in ``registry_dir``."""

    def __init__(self, registry_dir: str, driver_name: str) -> None:
        self.registry_dir = registry_dir
        self.driver_name = driver_name
        self.info: registration_pb2.PluginInfo | None = None
        self.service = ""  # the DRAPlugin service chosen at registration ("v1.DRAPlugin")

    def registration_sockets(self) -> list[str]:
        """The sockets the plugin watcher would look at: unix sockets not starting with "."."""
        found = []
        for name in sorted(os.listdir(self.registry_dir)) if os.path.isdir(self.registry_dir) else ():
            path = os.path.join(self.registry_dir, name)
            if not name.startswith(".") and stat.S_ISSOCK(os.lstat(path).st_mode):
                found.append(path)
        return found

    async def register(self, timeout: float = 15.0) -> registration_pb2.PluginInfo:
        """Wait until a registration socket in the directory answers GetInfo, validate the answer and
        notify the verdict; the PluginInfo when registered, ``Refused`` when not. A socket that is
        there but not answered (a killed driver's) is tried again until ``timeout``."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            for path in self.registration_sockets():
                async with unix_channel(path) as channel:
                    stub = registration_grpc.RegistrationStub(channel)
                    try:
                        info = await stub.GetInfo(registration_pb2.InfoRequest(), timeout=GET_INFO_SECONDS)
                    except grpc.aio.AioRpcError:
                        continue  # not (yet) served
                    refusal = self.refusal(info)
                    await stub.NotifyRegistrationStatus(
                        registration_pb2.RegistrationStatus(plugin_registered=not refusal, error=refusal),
                        timeout=GET_INFO_SECONDS)
                    if refusal:
                        raise Refused(f"registration of {path}: {refusal}")
                    self.info = info
                    self.service = next(s for s in SERVICES if s in info.supported_versions)
                    return info
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"no DRA plugin answered in {self.registry_dir} within {timeout} s")
            await asyncio.sleep(0.05)

    def refusal(self, info: registration_pb2.PluginInfo) -> str:
        """Why the kubelet refuses ``info`` ("" when it accepts it)."""
        if info.type != "DRAPlugin":
            return f"no handler registered for plugin type: {info.type}"
        if info.name != self.driver_name:
            return f"plugin name {info.name!r} is not the DRA driver's name {self.driver_name!r}"
        if not any(service in info.supported_versions for service in SERVICES):
            return (f"none of the supported services {list(info.supported_versions)} by plugin {info.name} "
                    f"are supported by the kubelet ({', '.join(SERVICES)})")
        if not os.path.isabs(info.endpoint):
            return f"endpoint {info.endpoint!r} is not an absolute path"
        if not os.path.exists(info.endpoint) or not stat.S_ISSOCK(os.stat(info.endpoint).st_mode):
            return f"endpoint {info.endpoint} is not a unix socket"
        return ""

    async def notify(self, registered: bool, error: str = "") -> None:
        """Send a verdict of the kubelet's own to the registration socket (a refusal, in tests)."""
        [path] = self.registration_sockets()
        async with unix_channel(path) as channel:
            await registration_grpc.RegistrationStub(channel).NotifyRegistrationStatus(
                registration_pb2.RegistrationStatus(plugin_registered=registered, error=error), timeout=GET_INFO_SECONDS)

    # -- the DRA plugin API ------------------------------------------------------------------------
    async def prepare(self, refs: Sequence[ClaimRef], service: str | None = None) -> dict[str, Answer]:
        """NodePrepareResources for ``refs``: claim uid -> its Answer."""
        messages, response = await self._call("NodePrepareResources", refs, service)
        answers = {}
        for uid, entry in self._entries(refs, response, "NodePrepareResources").items():
            devices = []
            for device in entry.devices:
                problem = self._device_problem(device)
                if problem and not entry.error:
                    raise Refused(f"NodePrepareResources: claim {uid}: {problem}")
                share_id = device.share_id if messages is v1 and device.HasField("share_id") else None
                devices.append(Device(tuple(device.request_names), device.pool_name, device.device_name,
                                      tuple(device.cdi_device_ids), share_id))
            answers[uid] = Answer(tuple(devices), entry.error)
        return answers

    async def unprepare(self, refs: Sequence[ClaimRef], service: str | None = None) -> dict[str, str]:
        """NodeUnprepareResources for ``refs``: claim uid -> its error ("" when unprepared)."""
        _, response = await self._call("NodeUnprepareResources", refs, service)
        return {uid: entry.error for uid, entry in self._entries(refs, response, "NodeUnprepareResources").items()}

    async def _call(self, method: str, refs: Sequence[ClaimRef], service: str | None) -> tuple[Any, Any]:
        if self.info is None:
            raise RuntimeError("no DRA plugin registered")
        messages, grpc_module = SERVICES[service or self.service]
        request_type = getattr(messages, f"{method}Request")
        request = request_type(claims=[messages.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in refs])
        async with unix_channel(self.info.endpoint) as channel:
            stub = grpc_module.DRAPluginStub(channel)
            try:
                response = await getattr(stub, method)(request, timeout=CALL_SECONDS)
            except grpc.aio.AioRpcError as error:
                raise CallFailed(method, error.code(), error.details() or "") from None
        return messages, response

    @staticmethod
    def _entries(refs: Sequence[ClaimRef], response: Any, method: str) -> dict[str, Any]:
        asked = {ref.uid for ref in refs}
        unknown = sorted(set(response.claims) - asked)
        if unknown:
            raise Refused(f"{method} returned result for unknown claim UID {unknown[0]}")
        missing = asked - set(response.claims)
        if missing:
            raise Refused(f"{method} skipped {len(missing)} ResourceClaims")
        return {uid: response.claims[uid] for uid in sorted(asked)}

    @staticmethod
    def _device_problem(device: Any) -> str:
        if not device.pool_name or not device.device_name:
            return f"a device without pool or device name: {device}"
        if any("/" in name or not name for name in device.request_names):
            return f"request names must be base requests: {list(device.request_names)}"
        bad = [cdi for cdi in device.cdi_device_ids if not CDI_QUALIFIED.fullmatch(cdi)]
        if bad:
            return f"CDI device ids must be vendor/class=name: {bad}"
        return ""
