"""The DRA driver's ValidatingAdmissionPolicy (deploy/kubernetes/dra/admission-policy.yaml) for
the tests.

A real API server cannot run here, so ``admit`` plays its admission step as k8s.io/apiserver's
validating admission policy plugin does: the policy applies to a request its
match constraints and all its match conditions accept; its variables are evaluated, then every
validation, and the first that is false denies the request with its message (messageExpression
first). The expressions are the shipped ones, evaluated by a CEL implementation
(PyPI's common-expression-language); request, object and oldObject are shaped as the API server
hands them over (AdmissionRequest's userInfo with the pod-bound token's extra, null object on
DELETE and null oldObject on CREATE)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cel
import yaml

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "deploy" / "kubernetes" / "dra"
NODE_NAME = "authentication.kubernetes.io/node-name"


def documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((FOLDER / name).read_text()) if doc is not None]


POLICY, BINDING = documents("admission-policy.yaml")
DRIVER_ACCOUNT = next(doc for doc in documents("rbac.yaml") if doc["kind"] == "ServiceAccount")
DRIVER_USER = f"system:serviceaccount:{DRIVER_ACCOUNT['metadata']['namespace']}:{DRIVER_ACCOUNT['metadata']['name']}"


def resource_slice(node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": "gpu.runtimekit.io", "pool": {"name": node or "all", "generation": 1, "resourceSliceCount": 1}}
    if node is None:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpu"}, "spec": spec}


def request(operation: str, user: str = DRIVER_USER, node: str | None = "node-a", **objects: Any) -> dict[str, Any]:
    user_info: dict[str, Any] = {"username": user, "groups": ["system:serviceaccounts", "system:authenticated"]}
    if node is not None:
        user_info["extra"] = {NODE_NAME: [node], "authentication.kubernetes.io/pod-name": ["runtimekit-dra-x7k2p"]}
    return {
        "request": {"operation": operation, "userInfo": user_info, "resource": {"group": "resource.k8s.io", "resource": "resourceslices"}},
        "object": objects.get("new"),
        "oldObject": objects.get("old"),
    }


def admit(context: dict[str, Any]) -> str | None:
    """None when the policy lets the request through, else the denial's message."""
    spec = POLICY["spec"]
    if not all(cel.evaluate(c["expression"], context) for c in spec["matchConditions"]):
        return None
    variables: dict[str, Any] = {}
    for variable in spec["variables"]:
        variables[variable["name"]] = cel.evaluate(variable["expression"], {**context, "variables": variables})
    scope = {**context, "variables": variables}
    for validation in spec["validations"]:
        if cel.evaluate(validation["expression"], scope) is not True:
            if "messageExpression" in validation:
                return str(cel.evaluate(validation["messageExpression"], scope))
            return " ".join(validation["message"].split())
    return None
