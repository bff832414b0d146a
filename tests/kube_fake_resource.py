"""A fake Kubernetes API server for Dynamic Resource Allocation (resource.k8s.io/v1): an aiohttp
app, because a real API server cannot run here, that validates as the real one does. Shared by
the DRA driver's tests (ResourceSlice publishing, the node plugin's prepare and unprepare).

    api = FakeResourceApi(version="v1.35.0", nodes=("node-a",))
    runner, url = await serve(api.app)            # tests.kube_fakes.serve
    kubeconfig.write_text(api.kubeconfig(url))
    api.add_claim({...})                          # a ResourceClaim with status.allocation
    api.slices                                    # name -> the stored ResourceSlice

What it serves (the paths and verbs the official ``kubernetes`` client uses):

- ``GET /version`` with ``gitVersion`` = ``version`` (settable: "v1.34.0", "v1.35.0"); discovery
  ``GET /api/v1/``, ``GET /apis/resource.k8s.io/v1``;
- ``GET /api/v1/nodes/{name}``: the nodes named at construction, each with a uid;
- ResourceSlices (cluster-scoped): list with ``fieldSelector`` on ``spec.nodeName`` and
  ``spec.driver`` (``=``/``==``, comma-joined; any other field: 400 as the server answers); create
  (``generateName`` -> name with 5 random characters; uid, resourceVersion, generation,
  creationTimestamp set); get; replace (PUT) with ``metadata.resourceVersion`` required and
  checked (409 Conflict when stale, as the server's optimistic concurrency); delete (with
  DeleteOptions preconditions on uid / resourceVersion: 409 when they do not hold);
- ``GET /apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}``: claims the test added
  (``add_claim``, schema-checked; ``remove_claim``).

Every ResourceSlice create and replace is validated before it is stored, as the API server does:
first fields of disabled features are dropped (``gates``: DRAConsumableCapacity drops
``allowMultipleAllocations`` and ``requestPolicy``; DRAPartitionableDevices drops
``sharedCounters`` and ``consumesCounters``; kept on an update when the stored object already uses
them, as the server's ``dropDisabledFields``), then the strict schema of the server's release
(PyPI kubernetes-validate) and the Go validation's rules the schema cannot say
(kube_resource_validation.py). Invalid -> 422 ``Invalid`` naming the field and the rule; immutable
``spec.driver``, ``spec.nodeName`` and ``spec.pool.name`` changed -> 422.

Fidelity limits (what the real server does and this fake does not): no watch, paging
(``limit``/``continue``), label selectors (400), PATCH, server-side apply, dry run or
``fieldValidation``; no authentication, RBAC or admission (NVIDIA's ValidatingAdmissionPolicy
binding a node's service account to its own slices); no garbage collection through
ownerReferences; quantities stored as sent, not canonicalised (the real server answers "1Gi"
for "1073741824"; the publisher compares quantities by value, so both pass); every object is
kept at one resourceVersion sequence; ResourceClaims are read-only (the scheduler's allocation is
what ``add_claim`` gives).

``requests`` records (method, raw path) of every request; ``writes`` (verb, slice name) of every
accepted slice write, in order; ``rejected`` (verb, message) of every refused one. ``outage``
set: every request is answered 503 (an API server that is down or overloaded).
"""

from __future__ import annotations

import copy
import json
import random
import uuid
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from tests.kube_resource_validation import is_dns_subdomain, minor_of, schema_errors, slice_errors

GROUP = "/apis/resource.k8s.io/v1"
SELECTABLE = ("spec.nodeName", "spec.driver")
IMMUTABLE = (("driver",), ("nodeName",), ("pool", "name"))
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's SimpleNameGenerator
GATES = ("DRAConsumableCapacity", "DRAPartitionableDevices")


def _status(code: int, reason: str, message: str, details: dict | None = None) -> web.Response:
    body = {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    if details:
        body["details"] = details
    return web.json_response(body, status=code)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _dig(obj: dict, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _uses(spec: dict, gate: str) -> bool:
    devices = spec.get("devices") or []
    if gate == "DRAConsumableCapacity":
        return any(d.get("allowMultipleAllocations") or any("requestPolicy" in c for c in (d.get("capacity") or {}).values())
                   for d in devices)
    return bool(spec.get("sharedCounters")) or any(d.get("consumesCounters") for d in devices)


def _drop(spec: dict, gate: str) -> None:
    for device in spec.get("devices") or []:
        if gate == "DRAConsumableCapacity":
            device.pop("allowMultipleAllocations", None)
            for capacity in (device.get("capacity") or {}).values():
                capacity.pop("requestPolicy", None)
        else:
            device.pop("consumesCounters", None)
    if gate == "DRAPartitionableDevices":
        spec.pop("sharedCounters", None)


class FakeResourceApi:
    """Nodes, ResourceSlices and ResourceClaims as the API server keeps them (see the module doc)."""

    def __init__(self, version: str = "v1.35.0", nodes: tuple[str, ...] = ("node-a",),
                 gates: dict[str, bool] | None = None) -> None:
        self.version = version
        self.gates = {gate: True for gate in GATES} | (gates or {})
        self.nodes = {name: {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "uid": str(uuid.uuid4()), "resourceVersion": "1", "creationTimestamp": _now()}} for name in nodes}
        self.slices: dict[str, dict] = {}
        self.claims: dict[tuple[str, str], dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.writes: list[tuple[str, str]] = []
        self.rejected: list[tuple[str, str]] = []
        self.outage = False
        self._version = 1
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/version", self.get_version)
        app.router.add_get("/version/", self.get_version)  # the client's VersionApi asks here
        app.router.add_get("/api/v1/", self.core_discovery)
        app.router.add_get(GROUP, self.group_discovery)
        app.router.add_get("/api/v1/nodes/{name}", self.get_node)
        app.router.add_get(f"{GROUP}/resourceslices", self.list_slices)
        app.router.add_post(f"{GROUP}/resourceslices", self.create_slice)
        app.router.add_get(f"{GROUP}/resourceslices/{{name}}", self.get_slice)
        app.router.add_put(f"{GROUP}/resourceslices/{{name}}", self.replace_slice)
        app.router.add_delete(f"{GROUP}/resourceslices/{{name}}", self.delete_slice)
        app.router.add_get(f"{GROUP}/namespaces/{{namespace}}/resourceclaims/{{name}}", self.get_claim)
        self.app = app

    # ---- for tests ----------------------------------------------------------------------------

    def node_uid(self, name: str) -> str:
        return self.nodes[name]["metadata"]["uid"]

    def add_claim(self, claim: dict) -> dict:
        """Store ``claim`` (a ResourceClaim, typically with ``status.allocation``) as the API server
        holds it: uid and resourceVersion filled in when absent. Raises ValueError when the schema
        of the server's release refuses it, so a test cannot build a claim no server would hold."""
        claim = copy.deepcopy(claim)
        claim.setdefault("apiVersion", "resource.k8s.io/v1")
        claim.setdefault("kind", "ResourceClaim")
        meta = claim.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", str(uuid.uuid4()))
        meta["resourceVersion"] = self._next_version()
        errors = schema_errors(claim, self.version)
        if errors:
            raise ValueError(f"ResourceClaim {meta.get('name')!r}: {'; '.join(errors)}")
        self.claims[(meta["namespace"], meta["name"])] = claim
        return claim

    def remove_claim(self, namespace: str, name: str) -> None:
        self.claims.pop((namespace, name), None)

    def kubeconfig(self, url: str) -> str:
        return json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                           "clusters": [{"name": "fake", "cluster": {"server": url}}],
                           "users": [{"name": "fake", "user": {"token": "kube-token"}}],
                           "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]})

    def pool(self, driver: str, pool: str) -> list[dict]:
        """The stored slices of ``driver``'s pool ``pool``, by name."""
        return [self.slices[name] for name in sorted(self.slices)
                if self.slices[name]["spec"]["driver"] == driver and self.slices[name]["spec"]["pool"]["name"] == pool]

    # ---- the server ---------------------------------------------------------------------------

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.raw_path))
        if self.outage:
            return _status(503, "ServiceUnavailable", "the API server is unavailable")
        return await handler(request)

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    async def get_version(self, request: web.Request) -> web.Response:
        minor = minor_of(self.version)
        return web.json_response({"major": "1", "minor": str(minor), "gitVersion": self.version, "gitCommit": "0" * 40,
                                  "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
                                  "compiler": "gc", "platform": "linux/amd64"})

    async def core_discovery(self, request: web.Request) -> web.Response:
        return web.json_response({"kind": "APIResourceList", "groupVersion": "v1",
                                  "resources": [{"name": "nodes", "namespaced": False, "kind": "Node", "verbs": ["get"]}]})

    async def group_discovery(self, request: web.Request) -> web.Response:
        return web.json_response({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "resource.k8s.io/v1", "resources": [
            {"name": "resourceslices", "singularName": "resourceslice", "namespaced": False, "kind": "ResourceSlice",
             "verbs": ["create", "delete", "get", "list", "update"]},
            {"name": "resourceclaims", "singularName": "resourceclaim", "namespaced": True, "kind": "ResourceClaim",
             "verbs": ["get"]}]})

    async def get_node(self, request: web.Request) -> web.Response:
        node = self.nodes.get(request.match_info["name"])
        if node is None:
            return _status(404, "NotFound", f'nodes "{request.match_info["name"]}" not found')
        return web.json_response(node)

    async def list_slices(self, request: web.Request) -> web.Response:
        if "labelSelector" in request.query:
            return _status(400, "BadRequest", "the fake API server does not support labelSelector")
        wanted: list[tuple[str, str]] = []
        for term in filter(None, request.query.get("fieldSelector", "").split(",")):
            field, _, value = term.replace("==", "=").partition("=")
            if field not in SELECTABLE or "!" in field:
                return _status(400, "BadRequest", f'"{field}" is not a known field selector: only "{SELECTABLE[0]}", '
                                                  f'"{SELECTABLE[1]}"')
            wanted.append((field.split(".")[1], value))
        items = [self.slices[name] for name in sorted(self.slices)
                 if all(self.slices[name]["spec"].get(key) == value for key, value in wanted)]
        return web.json_response({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList",
                                  "metadata": {"resourceVersion": str(self._version)}, "items": items})

    async def get_slice(self, request: web.Request) -> web.Response:
        item = self.slices.get(request.match_info["name"])
        if item is None:
            return self._not_found(request.match_info["name"])
        return web.json_response(item)

    def _not_found(self, name: str) -> web.Response:
        return _status(404, "NotFound", f'resourceslices.resource.k8s.io "{name}" not found',
                       {"name": name, "group": "resource.k8s.io", "kind": "resourceslices"})

    async def _body(self, request: web.Request) -> dict | web.Response:
        try:
            body = json.loads(await request.read())
        except ValueError as error:
            return _status(400, "BadRequest", f"the body is not JSON: {error}")
        if not isinstance(body, dict):
            return _status(400, "BadRequest", "the body is not a JSON object")
        if body.setdefault("apiVersion", "resource.k8s.io/v1") != "resource.k8s.io/v1" \
                or body.setdefault("kind", "ResourceSlice") != "ResourceSlice":
            return _status(400, "BadRequest", f"expected a resource.k8s.io/v1 ResourceSlice, got {body['apiVersion']} {body['kind']}")
        if not isinstance(body.get("metadata", {}), dict) or not isinstance(body.get("spec"), dict):
            return _status(422, "Invalid", "ResourceSlice.resource.k8s.io is invalid: spec: Required value")
        body.setdefault("metadata", {})
        return body

    def _invalid(self, verb: str, obj: dict, old: dict | None) -> web.Response | None:
        """Drop disabled features' fields, then validate; a 422 answer, or None when valid."""
        for gate, enabled in self.gates.items():
            if not enabled and not (old is not None and _uses(old["spec"], gate)):
                _drop(obj["spec"], gate)
        errors = schema_errors(obj, self.version) or slice_errors(obj, minor_of(self.version))
        if old is not None:
            errors += [f"spec.{'.'.join(path)}: Invalid value: field is immutable" for path in IMMUTABLE
                       if _dig(obj["spec"], path) != _dig(old["spec"], path)]
        if not errors:
            return None
        name = obj["metadata"].get("name", "")
        message = f'ResourceSlice.resource.k8s.io "{name}" is invalid: {"; ".join(errors)}'
        self.rejected.append((verb, message))
        return _status(422, "Invalid", message, {"name": name, "group": "resource.k8s.io", "kind": "ResourceSlice",
                                                 "causes": [{"reason": "FieldValueInvalid", "message": e} for e in errors]})

    async def create_slice(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        meta = body["metadata"]
        if not meta.get("name"):
            prefix = meta.get("generateName", "")
            if not prefix or not is_dns_subdomain(prefix[:248] + "a"):
                message = f"metadata.generateName: Invalid value: {prefix!r}: name or generateName is required, a DNS subdomain"
                self.rejected.append(("create", message))
                return _status(422, "Invalid", message)
            meta["name"] = prefix[:248] + "".join(random.choices(NAME_ALPHABET, k=5))
        if meta["name"] in self.slices:
            return _status(409, "AlreadyExists", f'resourceslices.resource.k8s.io "{meta["name"]}" already exists')
        invalid = self._invalid("create", body, None)
        if invalid is not None:
            return invalid
        meta.update(uid=str(uuid.uuid4()), resourceVersion=self._next_version(), generation=1, creationTimestamp=_now())
        self.slices[meta["name"]] = body
        self.writes.append(("create", meta["name"]))
        return web.json_response(body, status=201)

    async def replace_slice(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        old = self.slices.get(name)
        if old is None:
            return self._not_found(name)
        meta = body["metadata"]
        if meta.get("name", name) != name:
            return _status(400, "BadRequest", f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})")
        if not meta.get("resourceVersion"):
            return _status(422, "Invalid", f'ResourceSlice.resource.k8s.io "{name}" is invalid: metadata.resourceVersion: '
                                           "Invalid value: 0: must be specified for an update")
        if meta["resourceVersion"] != old["metadata"]["resourceVersion"]:
            self.rejected.append(("replace", f"{name}: stale resourceVersion {meta['resourceVersion']}"))
            return _status(409, "Conflict", f'Operation cannot be fulfilled on resourceslices.resource.k8s.io "{name}": '
                                            "the object has been modified; please apply your changes to the latest version and try again")
        meta["name"] = name
        invalid = self._invalid("replace", body, old)
        if invalid is not None:
            return invalid
        changed = body["spec"] != old["spec"]
        meta.update(uid=old["metadata"]["uid"], creationTimestamp=old["metadata"]["creationTimestamp"],
                    resourceVersion=self._next_version(), generation=old["metadata"]["generation"] + int(changed))
        self.slices[name] = body
        self.writes.append(("replace", name))
        return web.json_response(body)

    async def delete_slice(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        old = self.slices.get(name)
        if old is None:
            return self._not_found(name)
        raw = await request.read()
        options = json.loads(raw) if raw else {}
        preconditions = (options or {}).get("preconditions") or {}
        for key in ("uid", "resourceVersion"):
            if preconditions.get(key) not in (None, old["metadata"][key]):
                return _status(409, "Conflict", f"Precondition failed: {key} in precondition: {preconditions[key]}, "
                                                f"{key} in object meta: {old['metadata'][key]}")
        del self.slices[name]
        self.writes.append(("delete", name))
        return web.json_response(old)

    async def get_claim(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        claim = self.claims.get((namespace, name))
        if claim is None:
            return _status(404, "NotFound", f'resourceclaims.resource.k8s.io "{name}" not found',
                           {"name": name, "group": "resource.k8s.io", "kind": "resourceclaims"})
        return web.json_response(claim)
