"""Fakes of the cluster around the remediation service: a Kubernetes API that validates node
PATCHes the way the real API server does (a small aiohttp server, because a real API server cannot
run here), and a spare-node replacement endpoint that counts its calls. Shared by the remediation
tests and the end-to-end test."""

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
        app = web.Application()
        app.router.add_get("/api/v1/nodes", self.list)
        app.router.add_get("/api/v1/nodes/{name}", self.get)
        app.router.add_patch("/api/v1/nodes/{name}", self.patch)
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
