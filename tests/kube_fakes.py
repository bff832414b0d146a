"""Fakes of the cluster around the remediation service: a Kubernetes API that validates node
PATCHes the way the real API server does, lists pods by node and answers policy/v1 evictions (201,
429 while a fake PodDisruptionBudget blocks the pod, 404 for unknown pods) — a small aiohttp server,
because a real API server cannot run here — and a spare-node replacement endpoint that counts its
calls. Shared by the remediation tests and the end-to-end test."""

from __future__ import annotations

import json

from aiohttp import web

PATCH_TYPES = ("application/strategic-merge-patch+json", "application/merge-patch+json", "application/json-patch+json")


class FakeKube:
    """Nodes as the API server keeps them; PATCH validated the way the real API does."""

    def __init__(self, names=("gpu-1", "gpu-2", "gpu-3", "gpu-4")) -> None:
        self.nodes = {n: {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "resourceVersion": "1"},
                          "spec": {}} for n in names}
        self.patches: list[tuple[str, str, object]] = []
        self.pods: dict[tuple[str, str], dict] = {}
        self.pdb_blocked: set[tuple[str, str]] = set()  # (namespace, name) a PodDisruptionBudget protects now
        self.evictions: list[tuple[str, str, int]] = []  # (namespace, name, HTTP status) of every POST
        app = web.Application()
        app.router.add_get("/api/v1/nodes", self.list)
        app.router.add_get("/api/v1/nodes/{name}", self.get)
        app.router.add_patch("/api/v1/nodes/{name}", self.patch)
        app.router.add_get("/api/v1/pods", self.list_pods)
        app.router.add_post("/api/v1/namespaces/{namespace}/pods/{name}/eviction", self.evict)
        self.app = app

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
            for key, value in body.get("spec", {}).items():
                node["spec"][key] = value
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
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.app = web.Application()
        self.app.router.add_post("/replace", self.replace)

    async def replace(self, request):
        self.calls.append((request.headers.get("Idempotency-Key", ""), await request.json()))
        return web.json_response({"accepted": True})


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"
