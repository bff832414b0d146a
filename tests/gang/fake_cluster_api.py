"""A fake Kubernetes API server for the gang service: an aiohttp app, because a real API server
cannot run here, that validates what it is sent as the real one does, for what the service uses.

    api = FakeClusterApi()
    runner, url = await serve(api.app)            # tests.kube_fakes.serve
    kubeconfig.write_text(api.kubeconfig(url))
    api.add_node("gpu-1", labels={...}, offer=Offer.of([8]))
    api.add_pod(pod)                              # created as a client would (validated; gates kept)

Served (the paths and verbs of the official ``kubernetes`` client): pods (list and watch in all
namespaces or one; get, PATCH in the three patch types, DELETE with preconditions, the ``status``
subresource PATCH, policy/v1 eviction), nodes (list, watch, get), core/v1 events (create, list),
JobSets (get), resource.k8s.io/v1 ResourceSlices and ResourceClaims (list, watch) and
ResourceClaims and ResourceClaimTemplates (get). Lists honour ``labelSelector`` (``k``, ``!k``,
``k=v``, ``k==v``, ``k!=v``, comma-joined), ``fieldSelector`` on ``spec.nodeName``/``spec.driver``,
``limit`` and ``continue``. A watch (``watch=true``) streams the events after ``resourceVersion``
(410 Gone in an ERROR event when that version is older than ``compact`` kept), an object that
stops matching the selector as DELETED and one that starts as ADDED, until ``timeoutSeconds``.

Validated as the API server does:

- every stored Pod, Event and ResourceSlice against the strict OpenAPI schema of ``version``
  (PyPI kubernetes-validate): an unknown field is refused (422), which is stricter than the real
  server's default ``fieldValidation: Warn`` for updates and catches a misspelt field;
- a pod created with ``spec.nodeName`` and scheduling gates is refused (the gates cannot hold a
  bound pod); JSON merge (RFC 7386), strategic merge (``conditions`` merged by ``type``,
  ``schedulingGates`` by ``name``, ``$patch: delete``) and JSON patches (RFC 6902) are applied as
  the server applies them, ``metadata.resourceVersion`` in a merge patch a precondition (409);
- pod updates (``ValidatePodUpdate``, fake_pod_update.py): only these spec fields change: scheduling gates may only be
  removed ("adding a scheduling gate to an existing pod" is refused); while the old pod is gated,
  ``nodeSelector`` may only gain entries and the required node affinity may only narrow (empty
  terms may be set; otherwise the same terms, each keeping its requirements and adding more:
  KEP-3838); once ungated, neither may change; any other spec change is refused. A PATCH of the
  pod itself ignores ``status``; a PATCH of ``status`` ignores everything else, and a condition
  type must be a qualified name, its status True, False or Unknown.

``requests`` records (method, path and query) of every request; ``patches`` (name, content type, body) of
every accepted pod PATCH; ``refused`` (path, message) of every 4xx answer. ``failing`` makes the
next PATCHes of a pod fail with 500 (an overloaded server). ``close()`` ends every open watch (so
that the server stops at once).
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import kubernetes_validate
from aiohttp import web

from runtimekit.kube.gang.offer import OFFER_ANNOTATION, Offer, offer_annotation
from tests.gang.fake_patches import PatchError, apply_json_patch, merge_patch, strategic_merge
from tests.gang.fake_pod_update import Refused, check_pod_update

QUALIFIED = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "code": code,
                              "reason": reason, "message": message}, status=code)


def _selected(obj: dict, labels: str, fields: str) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, labels.split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            ok = have.get(key) != value
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            ok = have.get(key) == value
        elif term.startswith("!"):
            ok = term[1:] not in have
        else:
            ok = term in have
        if not ok:
            return False
    for term in filter(None, fields.split(",")):
        path, value = term.replace("==", "=").split("=", 1)
        current: Any = obj
        for part in path.split("."):
            current = current.get(part) if isinstance(current, dict) else None
        if (current or "") != value:
            return False
    return True


class Collection:
    """One kind's objects by "namespace/name" and its event log (rv, type, old, new)."""

    def __init__(self, kind: str, api_version: str) -> None:
        self.kind, self.api_version = kind, api_version
        self.items: dict[str, dict] = {}
        self.log: list[tuple[int, str, dict | None, dict | None]] = []
        self.changed = asyncio.Event()


class FakeClusterApi:
    """The gang service's view of an API server (module doc)."""

    def __init__(self, version: str = "1.35") -> None:
        self.version = version
        self.rv = 100
        self.compacted = 0  # events at or below this resourceVersion are no longer kept
        self.kinds = {name: Collection(kind, api) for name, kind, api in (
            ("pods", "Pod", "v1"), ("nodes", "Node", "v1"), ("events", "Event", "v1"),
            ("resourceslices", "ResourceSlice", "resource.k8s.io/v1"), ("resourceclaims", "ResourceClaim", "resource.k8s.io/v1"),
            ("resourceclaimtemplates", "ResourceClaimTemplate", "resource.k8s.io/v1"), ("jobsets", "JobSet", "jobset.x-k8s.io/v1alpha2"))}
        self.requests: list[tuple[str, str]] = []
        self.patches: list[tuple[str, str, Any]] = []
        self.refused: list[tuple[str, str]] = []
        self.pdb_blocked: set[str] = set()  # "namespace/name" of pods a PodDisruptionBudget protects
        self.failing: dict[str, int] = {}  # "namespace/name" -> how many more PATCHes of the pod fail (500)
        self._closing = asyncio.Event()
        app = web.Application(middlewares=[self._record])
        core, resource = "/api/v1", "/apis/resource.k8s.io/v1"
        for prefix, name in ((core, "pods"), (core, "nodes"), (core, "events"), (resource, "resourceslices"), (resource, "resourceclaims")):
            app.router.add_get(f"{prefix}/{name}", self._lister(name))
        for name in ("pods", "events", "resourceclaims"):
            prefix = core if name != "resourceclaims" else resource
            app.router.add_get(f"{prefix}/namespaces/{{namespace}}/{name}", self._lister(name))
        app.router.add_post(f"{core}/namespaces/{{namespace}}/events", self.create_event)
        app.router.add_get(f"{core}/nodes/{{name}}", self._getter("nodes"))
        app.router.add_get(f"{core}/namespaces/{{namespace}}/pods/{{name}}", self._getter("pods"))
        app.router.add_patch(f"{core}/namespaces/{{namespace}}/pods/{{name}}", self.patch_pod)
        app.router.add_patch(f"{core}/namespaces/{{namespace}}/pods/{{name}}/status", self.patch_pod_status)
        app.router.add_delete(f"{core}/namespaces/{{namespace}}/pods/{{name}}", self.delete_pod)
        app.router.add_post(f"{core}/namespaces/{{namespace}}/pods/{{name}}/eviction", self.evict_pod)
        app.router.add_get(f"{resource}/namespaces/{{namespace}}/resourceclaims/{{name}}", self._getter("resourceclaims"))
        app.router.add_get(f"{resource}/namespaces/{{namespace}}/resourceclaimtemplates/{{name}}", self._getter("resourceclaimtemplates"))
        app.router.add_get("/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}", self._getter("jobsets"))
        self.app = app

    # ---- for tests ------------------------------------------------------------------------------

    def kubeconfig(self, url: str) -> str:
        return json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                           "clusters": [{"name": "fake", "cluster": {"server": url}}],
                           "users": [{"name": "fake", "user": {"token": "kube-token"}}],
                           "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]})

    def close(self) -> None:
        self._closing.set()

    def _key(self, obj: dict) -> str:
        meta = obj["metadata"]
        return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]

    def _store(self, name: str, obj: dict | None, key: str, kind: str = "") -> dict | None:
        """Store (or, ``obj`` None, delete) one object: a new resourceVersion, an event logged."""
        collection = self.kinds[name]
        old = collection.items.get(key)
        self.rv += 1
        if obj is None:
            collection.items.pop(key, None)
            collection.log.append((self.rv, "DELETED", old, None))
        else:
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            collection.items[key] = obj
            collection.log.append((self.rv, kind or ("MODIFIED" if old else "ADDED"), old, obj))
        collection.changed.set()
        collection.changed = asyncio.Event()
        return obj

    def _validate(self, obj: dict) -> None:
        try:
            kubernetes_validate.validate(obj, self.version, strict=True)
        except kubernetes_validate.ValidationError as error:
            raise Refused(422, "Invalid", f"{obj.get('kind')} {obj['metadata'].get('name')!r} is invalid: "
                                          f"{error.json_path.removeprefix('$.')}: {error.message}") from None

    def add_node(self, name: str, labels: dict | None = None, offer: Offer | None = None, ready: bool = True,
                 taints: list | None = None) -> dict:
        meta: dict = {"name": name, "uid": str(uuid.uuid4()), "creationTimestamp": _now(),
                      "labels": {"kubernetes.io/hostname": name, **(labels or {})}}
        if offer is not None:
            meta["annotations"] = {OFFER_ANNOTATION: offer_annotation(offer)}
        node = {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": {"taints": taints or []},
                "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}]}}
        return self._store("nodes", node, name) or {}

    def update_node(self, name: str, offer: Offer | None = None, ready: bool | None = None) -> None:
        node = copy.deepcopy(self.kinds["nodes"].items[name])
        if offer is not None:
            node["metadata"].setdefault("annotations", {})[OFFER_ANNOTATION] = offer_annotation(offer)
        if ready is not None:
            node["status"]["conditions"][0]["status"] = "True" if ready else "False"
        self._store("nodes", node, name)

    def add(self, name: str, obj: dict) -> dict:
        """Store a ResourceSlice, ResourceClaim, ResourceClaimTemplate or JobSet as given (validated
        when the schema of ``version`` knows its kind)."""
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {}).setdefault("uid", str(uuid.uuid4()))
        if name != "jobsets":
            self._validate(obj)
        return self._store(name, obj, self._key(obj)) or {}

    def add_pod(self, pod: dict) -> dict:
        """Create a pod as the API server does (validated; uid, timestamps and phase Pending filled in)."""
        pod = copy.deepcopy(pod)
        meta = pod.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=meta.get("creationTimestamp") or _now())
        spec = pod.setdefault("spec", {})
        if spec.get("nodeName") and spec.get("schedulingGates"):
            raise Refused(422, "Invalid", "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared")
        pod["status"] = {"phase": "Pending"}
        self._validate(pod)
        return self._store("pods", pod, self._key(pod)) or {}

    def bind(self, namespace: str, name: str, node: str) -> None:
        """What the scheduler's Binding does: spec.nodeName set (the pod must be ungated)."""
        pod = copy.deepcopy(self.kinds["pods"].items[f"{namespace}/{name}"])
        assert not pod["spec"].get("schedulingGates"), f"pod {name} is gated: the scheduler would not bind it"
        pod["spec"]["nodeName"] = node
        self._store("pods", pod, f"{namespace}/{name}")

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        """What the kubelet reports: the pod's ``status.phase``."""
        pod = copy.deepcopy(self.kinds["pods"].items[f"{namespace}/{name}"])
        pod["status"]["phase"] = phase
        self._store("pods", pod, f"{namespace}/{name}")

    def delete_pod_now(self, namespace: str, name: str) -> None:
        self._store("pods", None, f"{namespace}/{name}")

    def pod(self, namespace: str, name: str) -> dict:
        return self.kinds["pods"].items[f"{namespace}/{name}"]

    def events(self) -> list[dict]:
        return list(self.kinds["events"].items.values())

    def compact(self) -> None:
        """Forget the event log: a watch from a version before now then gets 410 Gone."""
        self.rv += 1
        self.compacted = self.rv
        for collection in self.kinds.values():
            collection.log.clear()

    # ---- the server -------------------------------------------------------------------------------

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs))
        try:
            response = await handler(request)
        except Refused as error:
            response = _status(error.code, error.reason, str(error))
        if 400 <= response.status < 500 and isinstance(response, web.Response):
            self.refused.append((request.path, json.loads(response.text or "{}").get("message", "")))
        return response

    def _lister(self, name: str) -> Any:
        async def handler(request: web.Request) -> web.StreamResponse:
            query = request.query
            namespace = request.match_info.get("namespace")
            labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")

            def matches(obj: dict | None) -> bool:
                return obj is not None and (namespace is None or obj["metadata"].get("namespace") == namespace) \
                    and _selected(obj, labels, fields)

            if query.get("watch") in ("true", "1"):
                return await self._watch(request, self.kinds[name], matches)
            collection = self.kinds[name]
            items = [collection.items[key] for key in sorted(collection.items) if matches(collection.items[key])]
            start = int(query.get("continue") or 0)
            limit = int(query.get("limit") or 0) or len(items)
            page, more = items[start:start + limit], start + limit < len(items)
            return web.json_response({"apiVersion": collection.api_version, "kind": f"{collection.kind}List",
                                      "metadata": {"resourceVersion": str(self.rv), **({"continue": str(start + limit)} if more else {})},
                                      "items": page})
        return handler

    async def _watch(self, request: web.Request, collection: Collection, matches: Any) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or self.rv)
        deadline = asyncio.get_running_loop().time() + float(request.query.get("timeoutSeconds") or 1800)
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        if since < self.compacted:
            gone = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410, "reason": "Expired",
                    "message": f"too old resource version: {since} ({self.compacted})"}
            await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            return response
        while not self._closing.is_set():
            for rv, kind, old, new in [entry for entry in collection.log if entry[0] > since]:
                since = rv
                before, after = matches(old), matches(new)
                if kind == "DELETED" or (before and not after):
                    event = {"type": "DELETED", "object": new or old} if before else None
                elif after:
                    event = {"type": "ADDED" if not before else "MODIFIED", "object": new}
                else:
                    event = None
                if event is not None:
                    await response.write(json.dumps(event).encode() + b"\n")
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            changed, closing = asyncio.ensure_future(collection.changed.wait()), asyncio.ensure_future(self._closing.wait())
            await asyncio.wait({changed, closing}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            for waiter in (changed, closing):
                waiter.cancel()
        return response

    def _getter(self, name: str) -> Any:
        async def handler(request: web.Request) -> web.Response:
            namespace, key = request.match_info.get("namespace"), request.match_info["name"]
            obj = self.kinds[name].items.get(f"{namespace}/{key}" if namespace else key)
            if obj is None:
                return _status(404, "NotFound", f'{name} "{key}" not found')
            return web.json_response(obj)
        return handler

    def _existing(self, request: web.Request) -> tuple[str, dict]:
        key = f"{request.match_info['namespace']}/{request.match_info['name']}"
        pod = self.kinds["pods"].items.get(key)
        if pod is None:
            raise Refused(404, "NotFound", f'pods "{request.match_info["name"]}" not found')
        return key, pod

    async def _patched(self, request: web.Request, pod: dict) -> dict:
        body = json.loads(await request.read())
        content = request.content_type
        version = body.get("metadata", {}).get("resourceVersion") if isinstance(body, dict) else None
        if version is not None and version != pod["metadata"]["resourceVersion"]:
            raise Refused(409, "Conflict", "the object has been modified; please apply your changes to the latest version")
        try:
            if content == "application/merge-patch+json":
                new = merge_patch(pod, body)
            elif content == "application/strategic-merge-patch+json":
                new = strategic_merge(pod, body)
            elif content == "application/json-patch+json":
                new = apply_json_patch(pod, body)
            else:
                raise Refused(415, "UnsupportedMediaType", f"the patch type {content!r} is not supported")
        except PatchError as error:
            raise Refused(422, "Invalid", str(error)) from None
        self.patches.append((pod["metadata"]["name"], content, body))
        return new

    async def patch_pod(self, request: web.Request) -> web.Response:
        key, pod = self._existing(request)
        if self.failing.get(key):
            self.failing[key] -= 1
            return _status(500, "InternalError", "etcdserver: request timed out")
        new = await self._patched(request, pod)
        new["status"] = copy.deepcopy(pod["status"])
        for field in ("name", "namespace", "uid", "creationTimestamp"):
            if new["metadata"].get(field) != pod["metadata"].get(field):
                raise Refused(422, "Invalid", f"metadata.{field}: Invalid value: field is immutable")
        check_pod_update(pod["spec"], new["spec"])
        self._validate(new)
        return web.json_response(self._store("pods", new, key))

    async def patch_pod_status(self, request: web.Request) -> web.Response:
        key, pod = self._existing(request)
        new = await self._patched(request, pod)
        kept = copy.deepcopy(pod)
        kept["status"] = new.get("status") or {}
        for condition in kept["status"].get("conditions") or ():
            if not QUALIFIED.fullmatch(str(condition.get("type", ""))) or condition.get("status") not in ("True", "False", "Unknown"):
                raise Refused(422, "Invalid", f"status.conditions: Invalid value: {condition!r}: a type must be a qualified "
                                              "name and a status True, False or Unknown")
        self._validate(kept)
        return web.json_response(self._store("pods", kept, key))

    async def delete_pod(self, request: web.Request) -> web.Response:
        key, pod = self._existing(request)
        raw = await request.read()
        preconditions = (json.loads(raw) if raw else {}).get("preconditions") or {}
        if preconditions.get("uid") not in (None, pod["metadata"]["uid"]):
            raise Refused(409, "Conflict", "Precondition failed: UID in precondition does not match")
        self._store("pods", None, key)
        return web.json_response(pod)

    async def evict_pod(self, request: web.Request) -> web.Response:
        key, pod = self._existing(request)
        body = json.loads(await request.read())
        if body.get("kind") != "Eviction" or body.get("apiVersion") != "policy/v1" or body["metadata"]["name"] != pod["metadata"]["name"]:
            raise Refused(400, "BadRequest", f"not a policy/v1 Eviction of this pod: {body!r}")
        uid = ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
        if uid not in (None, pod["metadata"]["uid"]):
            raise Refused(409, "Conflict", "Precondition failed: UID in precondition does not match")
        if key in self.pdb_blocked:
            raise Refused(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
        self._store("pods", None, key)
        return web.json_response({"apiVersion": "v1", "kind": "Status", "status": "Success", "code": 201}, status=201)

    async def create_event(self, request: web.Request) -> web.Response:
        event = json.loads(await request.read())
        namespace = request.match_info["namespace"]
        if event.get("metadata", {}).get("namespace", namespace) != namespace:
            raise Refused(400, "BadRequest", "the namespace of the object does not match the namespace on the request")
        if (event.get("involvedObject") or {}).get("namespace") not in (None, namespace):
            raise Refused(422, "Invalid", "involvedObject.namespace: Invalid value: does not match event.namespace")
        self._validate(event)
        return web.json_response(self._store("events", event, self._key(event)), status=201)

