"""Node access behind a Protocol; the production backend is the official ``kubernetes`` client.

The client is synchronous (urllib3), so every call runs in an executor thread.
Cordon is a strategic-merge patch of ``spec.unschedulable``; taints are replaced with a JSON patch
guarded by a ``test`` of ``metadata.resourceVersion`` (a concurrent writer makes it fail, not race).
Drain lists the node's pods with a ``spec.nodeName`` field selector and evicts each through the
Eviction API (policy/v1), which the API server refuses with 429 while a PodDisruptionBudget forbids
it; pods are never deleted directly.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

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


class NodeApi(Protocol):
    async def get_node(self, name: str) -> NodeView: ...
    async def set_unschedulable(self, name: str, value: bool) -> None: ...
    async def set_taints(self, name: str, taints: list[dict[str, Any]], resource_version: str) -> None: ...
    async def count_nodes(self) -> int: ...
    async def list_pods_on_node(self, node: str) -> list[PodRef]: ...
    async def evict(self, namespace: str, name: str) -> EvictionOutcome:
        """policy/v1 Eviction: "evicted", "blocked" (429, a PodDisruptionBudget) or "gone" (404)."""
        ...


class KubernetesNodeApi:
    """NodeApi through kubernetes.client.CoreV1Api (kubeconfig file, or in-cluster when None)."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None) -> None:
        from kubernetes import client, config

        configuration = client.Configuration()
        if kubeconfig is None:
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
        self._api = client.CoreV1Api(client.ApiClient(configuration))
        self._client = client

    async def get_node(self, name: str) -> NodeView:
        node = await asyncio.to_thread(self._api.read_node, name)
        taints = tuple(t.to_dict() for t in (node.spec.taints or ()))
        return NodeView(name, bool(node.spec.unschedulable), tuple(
            {k: v for k, v in t.items() if v is not None} for t in taints), node.metadata.resource_version)

    async def set_unschedulable(self, name: str, value: bool) -> None:
        await asyncio.to_thread(self._api.patch_node, name, {"spec": {"unschedulable": value}},
                                _content_type="application/strategic-merge-patch+json")

    async def set_taints(self, name: str, taints: list[dict[str, Any]], resource_version: str) -> None:
        patch = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
            {"op": "add", "path": "/spec/taints", "value": taints},
        ]
        await asyncio.to_thread(self._api.patch_node, name, patch, _content_type="application/json-patch+json")

    async def count_nodes(self) -> int:
        nodes = await asyncio.to_thread(self._api.list_node)
        return len(nodes.items)

    async def list_pods_on_node(self, node: str) -> list[PodRef]:
        pods: list[PodRef] = []
        token: str | None = None
        while True:
            page = await asyncio.to_thread(self._api.list_pod_for_all_namespaces,
                                           field_selector=f"spec.nodeName={node}", limit=500, _continue=token)
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
        from kubernetes.client.exceptions import ApiException

        client = self._client
        body = client.V1Eviction(api_version="policy/v1", kind="Eviction",
                                 metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        try:
            # The API server answers with a Status, not an Eviction: do not deserialize it.
            await asyncio.to_thread(self._api.create_namespaced_pod_eviction, name, namespace, body,
                                    _preload_content=False)
        except ApiException as error:
            if error.status == 429:
                return "blocked"
            if error.status == 404:
                return "gone"
            raise
        return "evicted"
