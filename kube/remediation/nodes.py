"""Node access behind a Protocol; the production backend is the official ``kubernetes`` client.

The client is synchronous (urllib3), so every call runs in an executor thread.
Every name goes through ``names.checked`` before a path is built from it (the official client
escapes ``/`` but sends ``..`` as is, which urllib3 then resolves to ``/api/v1/``).
Every change to a Node is one strategic-merge PATCH carrying the ``metadata.resourceVersion`` the
change was computed from: the API server applies it only to that version of the Node and answers
409 Conflict otherwise (``NodeChanged``), so a concurrent writer (a person's cordon, another
controller's taint) makes it fail, not race. ``spec.taints`` has no merge key, so a PATCH replaces
the whole list. A cordon or taint and the annotation naming its holders (holds.py) travel in the
same PATCH, so the ownership survives any crash of the service.
Drain lists the node's pods with a ``spec.nodeName`` field selector and evicts each through the
Eviction API (policy/v1), which the API server refuses with 429 while a PodDisruptionBudget forbids
it; pods are never deleted directly.

Every call carries a deadline (``kubeclient.REQUEST_TIMEOUT_SECONDS``: connect, then read): an API server that
accepted the connection and never answers (a half-open connection, an overloaded apiserver) fails
the step with a timeout, journaled as failed, instead of holding the worker, and the service's
shutdown, for good. A call that fails — refused by the API server (its HTTP status), or the
server not reached (connection refused, a timeout) — raises ``ApiError`` with a one-line message
naming the call, so the worker journals and logs it as one line, never a traceback.

The ``kubernetes`` package (the ``kube`` extra) is imported only when KubernetesNodeApi is built,
so importing this module, the service or the command line never loads it. Building it reads the
kubeconfig (or the pod's service account) at once through ``runtimekit.kube.kubeclient``, so a
set-up mistake is found before the service starts and is reported as ClusterAccessError naming the key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from ..kubeclient import REQUEST_TIMEOUT_SECONDS, ClusterAccessError, api_client, one_line, status_message
from .names import checked

__all__ = ["ApiError", "ClusterAccessError", "KubernetesNodeApi", "NodeApi", "NodeChanged", "NodeView", "PodRef"]

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
EvictionOutcome = Literal["evicted", "blocked", "gone"]


class PodRef(NamedTuple):
    """A pod on a node: owner_kind is the controller's kind ("" for none); mirror pods are static pods."""

    namespace: str
    name: str
    owner_kind: str
    is_mirror: bool


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    unschedulable: bool
    taints: tuple[dict[str, Any], ...]
    resource_version: str
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def spec(self) -> dict[str, Any]:
        """The spec fields this service reads and writes, as a PATCH names them."""
        return {"unschedulable": self.unschedulable, "taints": list(self.taints)}


class NodeChanged(Exception):
    """The Node changed since it was read (409 Conflict on a PATCH): read it again and recompute."""


class ApiError(Exception):
    """A Kubernetes call that failed, in one line: ``status`` is the API server's HTTP status, or
    None when the server was not reached (connection refused, no answer within the deadline)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NodeApi(Protocol):
    async def get_node(self, name: str) -> NodeView: ...
    async def patch_node(self, name: str, resource_version: str, spec: Mapping[str, Any],
                         annotations: Mapping[str, str | None]) -> None:
        """One PATCH of these spec fields and annotations (None removes one), applied only to
        ``resource_version`` of the Node; NodeChanged when the Node has changed since."""
        ...
    async def count_nodes(self) -> int: ...
    async def list_pods_on_node(self, node: str) -> list[PodRef]: ...
    async def evict(self, namespace: str, name: str) -> EvictionOutcome:
        """policy/v1 Eviction: "evicted", "blocked" (429, a PodDisruptionBudget) or "gone" (404)."""
        ...


class KubernetesNodeApi:
    """NodeApi through kubernetes.client.CoreV1Api (kubeconfig file, or in-cluster when None).

    Raises ClusterAccessError when the client is not installed, when ``kubeconfig`` is None and
    this is not a pod (no KUBERNETES_SERVICE_HOST / service account token), or when the
    kubeconfig file is missing, unreadable or lacks ``context``.
    """

    def __init__(self, kubeconfig: str | None = None, context: str | None = None,
                 request_timeout: tuple[float, float] = REQUEST_TIMEOUT_SECONDS) -> None:
        configured = api_client(kubeconfig, context)  # ClusterAccessError first, the client not installed included
        from kubernetes import client

        self._api: Any = client.CoreV1Api(configured)  # untyped use: fields may be None
        self._client: Any = client
        self._timeout = request_timeout

    async def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A ``CoreV1Api`` method in an executor thread, with the deadline; ApiError when it fails."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        name = getattr(method, "__name__", "call")
        try:
            return await asyncio.to_thread(method, *args, _request_timeout=self._timeout, **kwargs)
        except ApiException as error:
            raise ApiError(one_line(f"Kubernetes API {name}: the API server answered {error.status} {error.reason}: "
                                     f"{status_message(error.body)}"), error.status) from error
        except (HTTPError, OSError) as error:  # urllib3: refused, reset, timed out (after its own retries)
            cause = getattr(error, "reason", None) or error  # MaxRetryError: the last try's error
            raise ApiError(one_line(f"Kubernetes API {name}: the API server was not reached: {cause}")) from error

    async def get_node(self, name: str) -> NodeView:
        node = await self._call(self._api.read_node, checked(name))
        taints = tuple(t.to_dict() for t in (node.spec.taints or ()))
        return NodeView(name, bool(node.spec.unschedulable), tuple(
            {k: v for k, v in t.items() if v is not None} for t in taints), node.metadata.resource_version,
            dict(node.metadata.annotations or {}))

    async def patch_node(self, name: str, resource_version: str, spec: Mapping[str, Any],
                         annotations: Mapping[str, str | None]) -> None:
        patch = {"metadata": {"resourceVersion": resource_version, "annotations": dict(annotations)},
                 "spec": dict(spec)}
        try:
            await self._call(self._api.patch_node, checked(name), patch,
                             _content_type="application/strategic-merge-patch+json")
        except ApiError as error:
            if error.status == 409:
                raise NodeChanged(f"node {name} changed since resourceVersion {resource_version}") from error
            raise

    async def count_nodes(self) -> int:
        nodes = await self._call(self._api.list_node)
        return len(nodes.items)

    async def list_pods_on_node(self, node: str) -> list[PodRef]:
        selector = f"spec.nodeName={checked(node)}"
        pods: list[PodRef] = []
        token: str | None = None
        while True:
            page = await self._call(self._api.list_pod_for_all_namespaces, field_selector=selector, limit=500,
                                    _continue=token)
            for pod in page.items or ():
                meta = pod.metadata
                owners = meta.owner_references or ()
                owner = next((o for o in owners if o.controller), owners[0] if owners else None)
                pods.append(PodRef(meta.namespace, meta.name, owner.kind if owner else "",
                                   MIRROR_ANNOTATION in (meta.annotations or {})))
            token = page.metadata._continue if page.metadata else None
            if not token:
                return pods

    async def evict(self, namespace: str, name: str) -> EvictionOutcome:
        checked(namespace, "namespace")
        checked(name, "pod name")
        client = self._client
        body = client.V1Eviction(api_version="policy/v1", kind="Eviction",
                                 metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        try:
            # The API server answers with a Status, not an Eviction: do not deserialize it.
            await self._call(self._api.create_namespaced_pod_eviction, name, namespace, body, _preload_content=False)
        except ApiError as error:
            if error.status == 429:
                return "blocked"
            if error.status == 404:
                return "gone"
            raise
        return "evicted"
