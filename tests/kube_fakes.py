"""Fakes of the cluster around the remediation service: a Kubernetes API that validates node
PATCHes the way the real API server does, lists pods by node and answers policy/v1 evictions (201,
429 while a fake PodDisruptionBudget blocks the pod, 404 for unknown pods) — a small aiohttp server,
because a real API server cannot run here — and a spare-node replacement endpoint that honours
``Idempotency-Key`` and counts its calls. Shared by the remediation tests and the end-to-end test.

A merge PATCH naming ``metadata.resourceVersion`` applies only to that version (409 Conflict
otherwise), as the API server treats it as a precondition (kubernetes/kubernetes#63104); lists
such as ``spec.taints`` are replaced whole, Node taints having no merge key.

Every request is recorded (``FakeKube.requests``: method and raw path) so a test can prove what
reached the API. As the real API server, the fake answers discovery (``GET /api/v1/``) — where a
client that does not validate a node name ``..`` ends up — and finds no object whose name in the
path is not a DNS-1123 subdomain (404 NotFound; apimachinery ``IsDNS1123Subdomain``, checked here
by its own regular expression, not the service's). ``on_request`` (tests) is called after a request
took effect and before it is answered: a hook to kill the service at that exact point.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable

from aiohttp import web

PATCH_TYPES = ("application/strategic-merge-patch+json", "application/merge-patch+json", "application/json-patch+json")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAMED = re.compile(r"/api/v1/(?:nodes|namespaces/[^/]+/pods)/(?P<name>.+?)(?:/eviction)?")


def _status(code: int, reason: str, message: str = "") -> web.Response:
    return web.json_response({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
                              "reason": reason, "message": message}, status=code)


class FakeKube:
    """Nodes as the API server keeps them; PATCH validated the way the real API does."""

    def __init__(self, names=("gpu-1", "gpu-2", "gpu-3", "gpu-4")) -> None:
        self.nodes = {n: {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "resourceVersion": "1"},
                          "spec": {}} for n in names}
        self.patches: list[tuple[str, str, object]] = []
        self.pods: dict[tuple[str, str], dict] = {}
        self.pdb_blocked: set[tuple[str, str]] = set()  # (namespace, name) a PodDisruptionBudget protects now
        self.evictions: list[tuple[str, str, int]] = []  # (namespace, name, HTTP status) of every POST
        self.requests: list[tuple[str, str]] = []  # (method, raw path) of every request, in order
        self.on_request: Callable[[str, str], None] | None = None
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/api/v1/", self.discovery)
        app.router.add_get("/api/v1/nodes", self.list)
        app.router.add_get("/api/v1/nodes/{name}", self.get)
        app.router.add_patch("/api/v1/nodes/{name}", self.patch)
        app.router.add_get("/api/v1/pods", self.list_pods)
        app.router.add_post("/api/v1/namespaces/{namespace}/pods/{name}/eviction", self.evict)
        self.app = app

    @web.middleware
    async def _record(self, request, handler):
        self.requests.append((request.method, request.raw_path))
        named = _NAMED.fullmatch(request.path)
        if named and not (len(named["name"]) <= 253 and DNS1123_SUBDOMAIN.fullmatch(named["name"])):
            return _status(404, "NotFound", f"{named['name'][:80]!r} not found")  # no such object can exist
        response = await handler(request)
        if self.on_request is not None:
            self.on_request(request.method, request.path)
        return response

    async def discovery(self, request):
        return web.json_response({"kind": "APIResourceList", "groupVersion": "v1",
                                  "resources": [{"name": "nodes", "namespaced": False, "kind": "Node"}]})

    async def list(self, request):
        return web.json_response({"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                                  "items": list(self.nodes.values())})

    async def get(self, request):
        node = self.nodes.get(request.match_info["name"])
        return web.json_response(node) if node else web.json_response({"kind": "Status", "code": 404}, status=404)

    async def patch(self, request):
        name = request.match_info["name"]
        node = self.nodes.get(name)
        if node is None:
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        ctype = request.content_type
        if ctype not in PATCH_TYPES:
            return web.json_response({"kind": "Status", "code": 415, "message": ctype}, status=415)
        body = json.loads(await request.read())
        self.patches.append((name, ctype, body))
        if ctype == "application/json-patch+json":
            if not isinstance(body, list):
                return web.json_response({"kind": "Status", "code": 400}, status=400)
            for op in body:
                if op["op"] == "test" and op["path"] == "/metadata/resourceVersion":
                    if op["value"] != node["metadata"]["resourceVersion"]:
                        return web.json_response({"kind": "Status", "code": 422}, status=422)
                elif op["op"] in ("add", "replace") and op["path"] == "/spec/taints":
                    node["spec"]["taints"] = op["value"]
                else:
                    return web.json_response({"kind": "Status", "code": 422}, status=422)
        else:
            if not isinstance(body, dict):
                return web.json_response({"kind": "Status", "code": 400}, status=400)
            version = body.get("metadata", {}).get("resourceVersion")
            if version is not None and version != node["metadata"]["resourceVersion"]:  # a precondition
                return _status(409, "Conflict", f"the object has been modified; resourceVersion {version} is stale")
            for key, value in body.get("spec", {}).items():
                node["spec"][key] = value
            annotations = node["metadata"].setdefault("annotations", {})
            for key, value in body.get("metadata", {}).get("annotations", {}).items():
                if value is None:
                    annotations.pop(key, None)
                elif not isinstance(value, str):
                    return _status(422, "Invalid", f"metadata.annotations.{key}: must be a string")
                else:
                    annotations[key] = value
        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        return web.json_response(node)

    def add_pod(self, node: str, namespace: str, name: str, owner_kind: str | None = "ReplicaSet",
                mirror: bool = False) -> None:
        """A pod bound to ``node``; owner_kind None for a bare pod, mirror for a static pod's mirror."""
        meta: dict = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}", "resourceVersion": "1"}
        if owner_kind:
            meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner_kind, "name": f"{name}-owner",
                                        "uid": f"uid-{name}-owner", "controller": True}]
        if mirror:
            meta["annotations"] = {"kubernetes.io/config.mirror": "abc123", "kubernetes.io/config.source": "file"}
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": f"uid-{node}",
                                        "controller": True}]
        self.pods[(namespace, name)] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
                                        "status": {"phase": "Running"}}

    async def list_pods(self, request):
        selector = request.query.get("fieldSelector", "")
        items = list(self.pods.values())
        if selector:
            field, _, value = selector.partition("=")
            if field != "spec.nodeName" or not value:
                return web.json_response({"kind": "Status", "code": 400, "message": selector}, status=400)
            items = [p for p in items if p["spec"]["nodeName"] == value]
        return web.json_response({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"},
                                  "items": items})

    async def evict(self, request):
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        try:
            body = json.loads(await request.read())
        except ValueError:
            body = None
        meta = body.get("metadata") if isinstance(body, dict) else None
        if (not isinstance(meta, dict) or body.get("kind") != "Eviction" or body.get("apiVersion") != "policy/v1"
                or meta.get("name") != name or meta.get("namespace", namespace) != namespace):
            self.evictions.append((namespace, name, 400))
            return web.json_response({"kind": "Status", "code": 400, "message": f"bad eviction body {body!r}"},
                                     status=400)
        if (namespace, name) not in self.pods:
            status = 404
        elif (namespace, name) in self.pdb_blocked:
            status = 429
        else:
            del self.pods[(namespace, name)]
            status = 201
        self.evictions.append((namespace, name, status))
        message = {201: "Success", 404: "NotFound", 429: "TooManyRequests"}[status]
        return web.json_response({"apiVersion": "v1", "kind": "Status", "metadata": {}, "code": status,
                                  "status": "Success" if status == 201 else "Failure", "reason": message},
                                 status=status)

    def kubeconfig(self, url: str) -> str:
        return json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                           "clusters": [{"name": "fake", "cluster": {"server": url}}],
                           "users": [{"name": "fake", "user": {"token": "kube-token"}}],
                           "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]})


class FakeReplacement:
    """A spare-node endpoint that honours Idempotency-Key: ``calls`` is every request, ``replacements``
    the requests it acted on (the first per key); a key seen again gets the first answer again.
    ``on_call`` (tests) runs after it acted and before it answers."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.replacements: dict[str, dict] = {}
        self.on_call: Callable[[str], None] | None = None
        self.app = web.Application()
        self.app.router.add_post("/replace", self.replace)

    async def replace(self, request):
        key, body = request.headers.get("Idempotency-Key", ""), await request.json()
        self.calls.append((key, body))
        self.replacements.setdefault(key, body)
        if self.on_call is not None:
            self.on_call(key)
        return web.json_response({"accepted": True, "request": list(self.replacements).index(key)})


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


def hold_requests(app: web.Application, matches: Callable[[web.Request], bool]) -> asyncio.Event:
    """Leave every request ``matches`` picks unanswered, its connection open (a half-open
    connection: the request sent, no answer, no reset), until the returned event is set; then it
    is answered 503. Call before the app is served; set the event before the server stops."""
    released = asyncio.Event()

    @web.middleware
    async def hold(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                   ) -> web.StreamResponse:
        if matches(request):
            await released.wait()
            return web.Response(status=503)
        return await handler(request)

    app.middlewares.append(hold)
    return released
