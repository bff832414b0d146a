"""The mutating admission webhook that holds every new gang pod with the scheduling gate
``runtimekit.io/gang``: the API server can add a gate only when a pod is created, so it is added
in admission (or written in the pod template).

Protocol: admission.k8s.io/v1 ``AdmissionReview`` in, the same kind out with ``response.uid`` the
request's, ``allowed: true`` and, for a pod to gate, a base64 JSON Patch (RFC 6902,
``patchType: JSONPatch``) adding the gate (kubernetes.io/docs/reference/access-authn-authz/
extensible-admission-controllers). A pod is gated when it is created (operation CREATE, kind Pod),
carries ``jobset.sigs.k8s.io/jobset-name`` or ``runtimekit.io/gang``, is in a namespace the
service places (``namespaces``; empty: all), is not bound already (``spec.nodeName``: the API
server refuses gates on a bound pod) and lacks the gate. Any other review is allowed unchanged.

A body that is not an AdmissionReview v1 (not JSON, another kind, no ``request.uid``, an object
that is not a mapping) is answered 400 with one line naming the field and the rule, never a
traceback; a body over ``MAX_REVIEW_BYTES`` is answered 413 (by the listener's guard when its
length is declared, here when a chunked body grows past it). TLS, client certificates and basic
auth are the listener's (``runtimekit.listener``, serve.py), not this app's.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Collection, Mapping
from typing import Any

from aiohttp import web

from .gangs import GANG_LABEL, GATE, JOBSET_NAME

__all__ = ["MAX_REVIEW_BYTES", "ReviewError", "make_app", "review_answer"]

log = logging.getLogger(__name__)

MAX_REVIEW_BYTES = 4 * 1024 * 1024  # a pod is at most 1.5 MiB (etcd's request limit); the review wraps it
API_VERSION = "admission.k8s.io/v1"
PATH = "/mutate"


class ReviewError(ValueError):
    """A body that is not an AdmissionReview this webhook answers; the message names the field."""


def _gate_patch(pod: Mapping[str, Any], namespace: str, namespaces: Collection[str]) -> list[dict[str, Any]]:
    """The JSON Patch that gates ``pod``, or [] when it is not to be gated (module doc)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    spec = pod.get("spec") or {}
    if not isinstance(labels, Mapping) or not isinstance(spec, Mapping):
        raise ReviewError("request.object: metadata.labels and spec must be mappings")
    if not (labels.get(JOBSET_NAME) or labels.get(GANG_LABEL)) or spec.get("nodeName"):
        return []
    if namespaces and namespace not in namespaces:
        return []
    gates = spec.get("schedulingGates")
    if gates is None:
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]}]
    if not isinstance(gates, list):
        raise ReviewError("request.object.spec.schedulingGates: must be a list")
    if any(isinstance(gate, Mapping) and gate.get("name") == GATE for gate in gates):
        return []
    return [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}}]


def review_answer(review: Any, namespaces: Collection[str] = ()) -> dict[str, Any]:
    """The AdmissionReview answering ``review``; ReviewError when it is not one (module doc)."""
    if not isinstance(review, Mapping):
        raise ReviewError(f"the body must be an AdmissionReview object, got {type(review).__name__}")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise ReviewError(f"apiVersion/kind: must be {API_VERSION} AdmissionReview, got "
                          f"{str(review.get('apiVersion'))[:60]} {str(review.get('kind'))[:60]}")
    request = review.get("request")
    if not isinstance(request, Mapping):
        raise ReviewError("request: required, a mapping")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid: required, a non-empty string")
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    kind = request.get("kind") or {}
    if request.get("operation") == "CREATE" and isinstance(kind, Mapping) and kind.get("kind") == "Pod" and not kind.get("group"):
        pod = request.get("object")
        if not isinstance(pod, Mapping):
            raise ReviewError("request.object: a Pod CREATE must carry the pod, a mapping")
        namespace = str(request.get("namespace") or (pod.get("metadata") or {}).get("namespace") or "default")
        patch = _gate_patch(pod, namespace, namespaces)
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
            log.debug("gating pod %s/%s", namespace, (pod.get("metadata") or {}).get("name") or (pod.get("metadata") or {}).get("generateName"))
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def make_app(namespaces: Collection[str] = ()) -> web.Application:
    """The webhook's routes: POST /mutate (the review), GET /healthz (liveness; the listener's guard
    asks no credentials there, as on every listener)."""

    async def mutate(request: web.Request) -> web.Response:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return web.Response(status=413, text=f"the review is larger than {MAX_REVIEW_BYTES} bytes\n")
        try:
            review = json.loads(body)
        except ValueError as error:
            return web.Response(status=400, text=f"the body is not JSON: {error}\n")
        try:
            return web.json_response(review_answer(review, namespaces))
        except ReviewError as error:
            log.info("refused a malformed admission review: %s", error)
            return web.Response(status=400, text=f"{error}\n")

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application(client_max_size=MAX_REVIEW_BYTES)
    app.router.add_post(PATH, mutate)
    app.router.add_get("/healthz", healthz)
    return app

