"""The plugin's only use of the Kubernetes API: read and write one annotation of its own Node.

``NodeAnnotation`` is the Protocol; ``KubernetesNodeAnnotation`` goes through the official
``kubernetes`` client (``runtimekit.kube.kubeclient.api_client``: a kubeconfig file or the pod's
service account). That client is synchronous (urllib3), so each call runs in an executor thread,
with a deadline of ``REQUEST_TIMEOUT_SECONDS``. A write is one JSON merge patch (RFC 7386,
``application/merge-patch+json``) of ``metadata.annotations``: it sets or removes this one key and
leaves every other annotation and field as it is. The permissions: ``nodes`` ``get`` and ``patch``.

The ``kubernetes`` package is imported only when ``KubernetesNodeAnnotation`` is built.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

__all__ = ["REQUEST_TIMEOUT_SECONDS", "KubernetesNodeAnnotation", "NodeAnnotation", "api_fault"]

#: Deadline of one request to the API server, in seconds (connect and read).
REQUEST_TIMEOUT_SECONDS = 10.0


class NodeAnnotation(Protocol):
    async def read(self) -> str | None:
        """The annotation's value on the Node now (None when it has none)."""
        ...

    async def write(self, value: str | None) -> None:
        """Set the annotation to ``value`` (None removes it)."""
        ...


class KubernetesNodeAnnotation:
    """``key`` on the Node ``node`` through ``kubernetes.client.CoreV1Api`` over ``api_client``.
    Every failure is the client's own exception (``api_fault`` names it in words)."""

    def __init__(self, api_client: Any, node: str, key: str) -> None:
        from kubernetes import client

        self._api: Any = client.CoreV1Api(api_client)  # untyped: the client's models are not annotated
        self.node, self.key = node, key

    async def read(self) -> str | None:
        response = await asyncio.to_thread(self._api.read_node, self.node, _preload_content=False,
                                           _request_timeout=REQUEST_TIMEOUT_SECONDS)
        annotations = (json.loads(response.data).get("metadata") or {}).get("annotations") or {}
        value = annotations.get(self.key)
        return value if isinstance(value, str) else None

    async def write(self, value: str | None) -> None:
        patch = {"metadata": {"annotations": {self.key: value}}}
        await asyncio.to_thread(self._api.patch_node, self.node, patch, _content_type="application/merge-patch+json",
                                _preload_content=False, _request_timeout=REQUEST_TIMEOUT_SECONDS)


def api_fault(error: Exception) -> str:
    """What went wrong with a request, in words that stay the same while the fault does (so it is
    logged once): "HTTP 403 Forbidden" for an answer, the exception's type for no answer."""
    status = getattr(error, "status", None)
    if isinstance(status, int) and status:
        return f"HTTP {status} {getattr(error, 'reason', '') or ''}".rstrip()
    return f"no answer ({type(error).__name__})"
