"""Node access behind a Protocol; the production backend is the official ``kubernetes`` client.

The client is synchronous (urllib3), so every call runs in an executor thread.
Cordon is a strategic-merge patch of ``spec.unschedulable``; taints are replaced with a JSON patch
guarded by a ``test`` of ``metadata.resourceVersion`` (a concurrent writer makes it fail, not race).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol


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
