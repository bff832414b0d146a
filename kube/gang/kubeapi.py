"""The gang service's reads and writes of the Kubernetes API, through the official ``kubernetes``
client (synchronous: every call runs in a thread). Answers are read as JSON (``_preload_content``
off), not as the client's models, which know only the fields of the client's release.

**Reads: informers.** Each kind the service watches (gang pods, nodes, ResourceSlices,
ResourceClaims) is an ``Informer``: a list (paged, 500 a page), then a watch from the list's
``resourceVersion`` (``allowWatchBookmarks``; the server ends it after ``watch_timeout_seconds`` and
it is opened again from the last version seen), in a daemon thread of its own. Each change is
applied to the informer's ``objects`` on the event loop's thread (``call_soon_threadsafe``), so the
decision loop reads them without locks, and calls ``on_change``. Each object is first cut down to
the fields the service reads (``trim``, trim.py), in the informer's thread, so that only those are
kept. A watch the server answers with
410 Gone (the version is older than it keeps) lists again; any other failure is logged once (and
once when it recovers) and retried after a back-off doubling from 1 s to 30 s. Pods are watched
by label (one informer per gang label and namespace): the API has no OR of label selectors.

**Writes** (``ClusterApi``): the release of a pod (one JSON merge PATCH, RFC 7386: its pinned node
affinity, its scheduling gates less ours, the ``runtimekit.io/gang-node`` annotation), a pod
condition (a strategic merge PATCH of the ``status`` subresource: ``conditions`` merge by
``type``, so the scheduler's own conditions stay), core/v1 Events, the policy/v1 Eviction of a pod,
and reads of JobSets, ResourceClaims and ResourceClaimTemplates. A failure is an ``ApiError``
carrying the HTTP status and the server's message in one line. Every write and read carries a
deadline (``kubeclient.REQUEST_TIMEOUT_SECONDS``: connect, then answer), so an API server that accepted the
connection and never answers fails the call (``ApiError`` with status 0) instead of holding the
decision loop for good.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..kubeclient import REQUEST_TIMEOUT_SECONDS, error_line, one_line, status_message
from .gangs import GATE, PLACED_ANNOTATION, ClaimRef, GangPod, pinned_terms

__all__ = ["ApiError", "ClusterApi", "Informer"]

log = logging.getLogger(__name__)

JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
PAGE = 500  # objects per list page
BACKOFF_MIN, BACKOFF_MAX = 1.0, 30.0  # seconds between tries after a failed list or watch
Json = dict[str, Any]


class ApiError(Exception):
    """The API server refused or failed a request: ``status`` (0: no answer) and its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"the API server answered {status}: {message}" if status else message)
        self.status = status


class _Expired(Exception):
    """A watch's resourceVersion is older than the server keeps (410 Gone): list again."""


def _api_error(error: BaseException) -> ApiError:
    status, body = getattr(error, "status", None), getattr(error, "body", None)
    if status is None:
        return ApiError(0, error_line(error))
    return ApiError(int(status), one_line(status_message(body)))


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta.get("name"))


class Informer:
    """One kind of object (one list call and its arguments) kept current: ``objects`` by
    "namespace/name" (or "name"), ``synced`` once the first list is in (see the module doc)."""

    def __init__(self, name: str, list_call: Callable[..., Any], arguments: Mapping[str, Any],
                 on_change: Callable[[], None], watch_timeout_seconds: int, trim: Callable[[Json], Json] | None = None) -> None:
        self.name = name
        self._trim = trim or (lambda obj: obj)
        self.objects: dict[str, Json] = {}
        self.synced = False
        self._list_call, self._arguments = list_call, dict(arguments)
        self._on_change = on_change
        self._watch_timeout = watch_timeout_seconds
        self._stopping = threading.Event()
        self._response: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._failing = False

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching: the thread ends at once (its socket is shut down), or within the watch timeout."""
        self._stopping.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()
            except Exception:  # already closed: nothing to interrupt
                pass

    # ---- the thread --------------------------------------------------------------------------

    def _post(self, action: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(action, *args)
        except RuntimeError:  # the loop is closed: the service is gone
            self._stopping.set()

    def _run(self) -> None:
        backoff = BACKOFF_MIN
        while not self._stopping.is_set():
            try:
                version = self._list()
                while not self._stopping.is_set():
                    version = self._watch(version)
                    if self._failing:
                        self._failing = False
                        log.info("%s: watching again", self.name)
                    backoff = BACKOFF_MIN
            except _Expired:
                log.debug("%s: the watch expired; listing again", self.name)
            except Exception as error:  # the API server is down, refuses, or answers garbage: retry
                if self._stopping.is_set():
                    return
                if not self._failing:
                    self._failing = True
                    log.warning("%s: cannot list or watch (%s); retrying", self.name, _api_error(error))
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)

    def _list(self) -> str:
        items: list[Json] = []
        token: str | None = None
        while True:
            response = self._list_call(**self._arguments, limit=PAGE, _continue=token, _preload_content=False,
                                       _request_timeout=(10, 60))
            page = json.loads(response.data or b"{}")
            items.extend(self._trim(item) for item in page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                self._post(self._replace, items)
                return str(meta.get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        response = self._list_call(**self._arguments, watch=True, resource_version=version, allow_watch_bookmarks=True,
                                   timeout_seconds=self._watch_timeout, _preload_content=False,
                                   _request_timeout=(10, self._watch_timeout + 30))
        self._response = response
        try:
            for event in self._events(response):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Expired()
                    raise ApiError(int(obj.get("code") or 0), str(obj.get("message") or "a watch error"))
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._post(self._apply, kind, self._trim(obj))
        finally:
            self._response = None
            response.release_conn()
        return version

    def _events(self, response: Any) -> Iterator[Json]:
        from kubernetes.watch.watch import iter_resp_lines

        for line in iter_resp_lines(response):
            if self._stopping.is_set():
                return
            if line.strip():
                yield json.loads(line)

    # ---- on the event loop's thread ----------------------------------------------------------

    def _replace(self, items: list[Json]) -> None:
        self.objects = {_key(item): item for item in items}
        self.synced = True
        self._on_change()

    def _apply(self, kind: str, obj: Json) -> None:
        if kind == "DELETED":
            self.objects.pop(_key(obj), None)
        else:
            self.objects[_key(obj)] = obj
        self._on_change()


class ClusterApi:
    """The calls the gang service makes (see the module doc); ``api_client`` is a configured
    ``kubernetes.client.ApiClient`` (runtimekit.kube.kubeclient)."""

    def __init__(self, api_client: Any, request_timeout: tuple[float, float] = REQUEST_TIMEOUT_SECONDS) -> None:
        from kubernetes import client

        self.core: Any = client.CoreV1Api(api_client)
        self.resource: Any = client.ResourceV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)
        self._request_timeout = request_timeout

    async def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Json:
        try:
            response = await asyncio.to_thread(method, *args, _preload_content=False,
                                               _request_timeout=self._request_timeout, **kwargs)
        except Exception as error:  # ApiException, or urllib3's connection errors
            raise _api_error(error) from error
        answer: Json = json.loads(response.data or b"{}")
        return answer

    async def _read(self, method: Callable[..., Any], *args: Any) -> Json | None:
        try:
            return await self._call(method, *args)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def release(self, pod: GangPod, node: str) -> None:
        """Pin ``pod`` to ``node`` and remove our gate, in one PATCH."""
        gates = [{"name": name} for name in pod.gates if name != GATE]
        patch = {"metadata": {"annotations": {PLACED_ANNOTATION: node}},
                 "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                     "nodeSelectorTerms": pinned_terms(pod.terms, node)}}},
                          "schedulingGates": gates or None}}
        await self._call(self.core.patch_namespaced_pod, pod.name, pod.namespace, patch,
                         _content_type="application/merge-patch+json")

    async def set_condition(self, namespace: str, name: str, condition: Mapping[str, Any]) -> None:
        """Write one pod condition (merged by type into ``status.conditions``)."""
        await self._call(self.core.patch_namespaced_pod_status, name, namespace,
                         {"status": {"conditions": [dict(condition)]}},
                         _content_type="application/strategic-merge-patch+json")

    async def event(self, involved: Mapping[str, str], kind: str, reason: str, message: str, now: str) -> None:
        """A core/v1 Event about ``involved`` (apiVersion, kind, namespace, name, uid), type ``kind``."""
        namespace = involved["namespace"]
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{involved['name'][:200]}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
                "involvedObject": dict(involved), "type": kind, "reason": reason, "message": message[:1024],
                "source": {"component": "runtimekit-gang"}, "reportingComponent": "runtimekit.io/gang",
                "reportingInstance": "runtimekit-gang", "firstTimestamp": now, "lastTimestamp": now, "count": 1}
        await self._call(self.core.create_namespaced_event, namespace, body)

    async def evict(self, pod: GangPod) -> bool:
        """policy/v1 Eviction of ``pod``: True when evicted or gone, False when a PodDisruptionBudget blocks it."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod.name, "namespace": pod.namespace},
                "deleteOptions": {"preconditions": {"uid": pod.uid}}}
        try:
            await self._call(self.core.create_namespaced_pod_eviction, pod.name, pod.namespace, body)
        except ApiError as error:
            if error.status == 429:
                return False
            if error.status not in (404, 409):  # gone, or another pod of that name now: nothing to evict
                raise
        return True

    async def read_jobset(self, namespace: str, name: str) -> Json | None:
        return await self._read(self.custom.get_namespaced_custom_object, JOBSET_GROUP, JOBSET_VERSION, namespace,
                                JOBSET_PLURAL, name)

    async def read_claim_spec(self, ref: ClaimRef) -> Json | None:
        """The ResourceClaim spec a ``spec.resourceClaims`` entry asks for (a template's
        ``spec.spec``); None when the object does not exist (yet)."""
        if ref.template:
            template = await self._read(self.resource.read_namespaced_resource_claim_template, ref.name, ref.namespace)
            return None if template is None else (template.get("spec") or {}).get("spec") or {}
        claim = await self._read(self.resource.read_namespaced_resource_claim, ref.name, ref.namespace)
        return None if claim is None else claim.get("spec") or {}
