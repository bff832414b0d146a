"""ResourceClaims: read from the API server behind a Protocol, parsed into what prepare needs.

The kubelet names a claim only (namespace, uid, name: kubelet ``dra/v1`` ``Claim``); the driver GETs
``resource.k8s.io/v1`` ``namespaces/<ns>/resourceclaims/<name>`` itself and refuses it when it is
not allocated or its uid is another (a claim deleted and made again under the same name), as the
Go helper does (k8s.io/dynamic-resource-allocation kubeletplugin/draplugin.go ``getResourceClaims``).

``KubernetesClaimReader`` uses the official client's ``ResourceV1Api`` (synchronous: it runs in a
thread) and keeps the answer as plain JSON (``_preload_content=False``), so fields newer than the
client's models (``consumedCapacity``, ``shareID``) are never dropped. Tests inject a reader.

Configuration (resource.k8s.io/v1 ``status.allocation.devices.config``): class entries, then
claim entries, later wins (as NVIDIA's driver applies them, ``GetOpaqueDeviceConfigs``); only
entries whose ``opaque.driver`` is this driver; an entry applies to a result when its ``requests``
is empty or names the result's request (``req`` or ``req/sub``; ``req`` covers every subrequest).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "AllocatedClaim", "ClaimError", "ClaimReadError", "ClaimReader", "ClaimRef", "KubernetesClaimReader", "Result",
    "base_request", "config_for", "parse_claim",
]

#: Seconds one GET of a claim may take (connect and read), well inside the kubelet's 45 s.
READ_TIMEOUT_SECONDS = 10.0


class ClaimError(ValueError):
    """The claim cannot be prepared as it is (not allocated, replaced, malformed); the message says why."""


class ClaimReadError(Exception):
    """The API server could not be asked or refused to answer (any error but a 404 naming the claim
    NotFound); prepare fails, the kubelet retries."""


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"claim {self.namespace}/{self.name} ({self.uid})"


@dataclass(frozen=True, slots=True)
class Result:
    """One allocation result (resource.k8s.io/v1 ``DeviceRequestAllocationResult``)."""

    position: int  # its index among the claim's results: what the agent slice's owner id carries
    request: str  # "req" or "req/sub"
    driver: str
    pool: str
    device: str
    share_id: str | None = None
    consumed: dict[str, Any] = field(default_factory=dict)  # consumedCapacity: name -> quantity string
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class OpaqueEntry:
    """One ``status.allocation.devices.config`` entry with an opaque configuration."""

    index: int  # its position in status.allocation.devices.config: what messages name
    source: str  # "FromClass" or "FromClaim"
    requests: tuple[str, ...]
    driver: str
    parameters: Any


@dataclass(frozen=True, slots=True)
class AllocatedClaim:
    results: tuple[Result, ...]
    configs: tuple[OpaqueEntry, ...]


class ClaimReader(Protocol):
    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ResourceClaim as JSON, None when there is none (a 404 whose Status names it
        NotFound); ClaimReadError otherwise."""
        ...


def base_request(request: str) -> str:
    """The request a result belongs to: "gpus/mig" -> "gpus" (resourceclaim.BaseRequestRef)."""
    return request.split("/", 1)[0]


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ClaimError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ClaimError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def parse_claim(ref: ClaimRef, obj: dict[str, Any]) -> AllocatedClaim:
    """The allocation of ``obj`` (a ResourceClaim as JSON) for ``ref``; ClaimError naming the claim
    when its uid is another, it is not allocated, or the allocation is malformed (the field is named)."""
    try:
        return _parse(ref, obj)
    except ClaimError as error:
        raise ClaimError(f"{ref}: {error}") from None


def _parse(ref: ClaimRef, obj: dict[str, Any]) -> AllocatedClaim:
    uid = _mapping(obj.get("metadata", {}), "metadata").get("uid")
    if uid != ref.uid:
        raise ClaimError(f"the ResourceClaim {ref.namespace}/{ref.name} has uid {uid}: it was replaced")
    allocation = _mapping(obj.get("status") or {}, "status").get("allocation")
    if not allocation:
        raise ClaimError("not allocated (status.allocation is empty)")
    devices = _mapping(_mapping(allocation, "status.allocation").get("devices") or {}, "status.allocation.devices")
    results = []
    for n, raw in enumerate(devices.get("results") or ()):
        where = f"status.allocation.devices.results[{n}]"
        raw = _mapping(raw, where)
        consumed = raw.get("consumedCapacity") or {}
        share = raw.get("shareID")
        results.append(Result(
            position=n, request=_text(raw.get("request"), f"{where}.request"), driver=_text(raw.get("driver"), f"{where}.driver"),
            pool=_text(raw.get("pool"), f"{where}.pool"), device=_text(raw.get("device"), f"{where}.device"),
            share_id=share if isinstance(share, str) and share else None,
            consumed=dict(_mapping(consumed, f"{where}.consumedCapacity")), admin_access=raw.get("adminAccess") is True,
        ))
    configs = []
    for n, raw in enumerate(devices.get("config") or ()):
        where = f"status.allocation.devices.config[{n}]"
        raw = _mapping(raw, where)
        opaque = raw.get("opaque")
        if opaque is None:
            continue  # not an opaque configuration: nothing of any driver's
        opaque = _mapping(opaque, f"{where}.opaque")
        configs.append(OpaqueEntry(index=n, source=str(raw.get("source", "")), requests=tuple(raw.get("requests") or ()),
                                   driver=_text(opaque.get("driver"), f"{where}.opaque.driver"),
                                   parameters=opaque.get("parameters")))
    # Class entries first, then the claim's: the later one wins (a stable sort keeps each group's order).
    configs.sort(key=lambda entry: 0 if entry.source == "FromClass" else 1)
    return AllocatedClaim(results=tuple(results), configs=tuple(configs))


def config_for(claim: AllocatedClaim, result: Result, driver: str) -> tuple[int, OpaqueEntry] | None:
    """The entry that configures ``result`` (its index in ``status.allocation.devices.config`` and
    itself): the last one of ``driver`` whose requests are empty or name the result's request or its
    base request."""
    chosen = None
    for entry in claim.configs:
        if entry.driver != driver:
            continue
        if not entry.requests or result.request in entry.requests or base_request(result.request) in entry.requests:
            chosen = (entry.index, entry)
    return chosen


class KubernetesClaimReader:
    """ClaimReader through the official client's ResourceV1Api (``read_namespaced_resource_claim``)."""

    def __init__(self, api_client: Any) -> None:
        self._api_client = api_client
        self._api: Any = None  # made in the reading thread: its import takes the kubernetes client's models

    async def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await asyncio.to_thread(self._read, namespace, name)

    def _read(self, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        if self._api is None:
            self._api = client.ResourceV1Api(self._api_client)
        try:
            response = self._api.read_namespaced_resource_claim(name, namespace, _preload_content=False,
                                                                _request_timeout=READ_TIMEOUT_SECONDS)
            obj = json.loads(response.data)
        except ApiException as error:
            if error.status == 404 and _claim_not_found(error.body, name):
                return None
            raise ClaimReadError(f"GET ResourceClaim {namespace}/{name}: HTTP {error.status} {error.reason}"
                                 f"{_message(error.body)}") from None
        except ValueError as error:  # not JSON
            raise ClaimReadError(f"GET ResourceClaim {namespace}/{name}: the answer is not JSON: {error}") from None
        except Exception as error:  # urllib3: refused, timed out, TLS; the client's own errors
            raise ClaimReadError(f"GET ResourceClaim {namespace}/{name}: {type(error).__name__}: "
                                 f"{' '.join(str(error).split())[:300]}") from None
        if not isinstance(obj, dict):
            raise ClaimReadError(f"GET ResourceClaim {namespace}/{name}: the answer is not an object")
        return obj


def _status_of(body: Any) -> dict[str, Any]:
    """An error answer's body as a Status object ({} when it is not one)."""
    try:
        status = json.loads(body or "{}")
    except (ValueError, TypeError):
        return {}
    return status if isinstance(status, dict) and status.get("kind") == "Status" else {}


def _claim_not_found(body: Any, name: str) -> bool:
    """Whether a 404's body says that the ResourceClaim ``name`` does not exist: a Status with reason
    NotFound naming it (details.name, details.kind "resourceclaims"). Any other 404 (an API server
    that does not serve resource.k8s.io/v1: "the server could not find the requested resource", a
    proxy's page) says nothing of the claim: it must not unprepare claims under running pods."""
    status = _status_of(body)
    details = status.get("details") or {}
    return (status.get("reason") == "NotFound" and isinstance(details, dict)
            and details.get("name") == name and details.get("kind") == "resourceclaims")


def _message(body: Any) -> str:
    message = _status_of(body).get("message")
    return f": {' '.join(str(message).split())[:300]}" if message else ""
