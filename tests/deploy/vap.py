"""A ValidatingAdmissionPolicy's admission step, played as k8s.io/apiserver's validating admission
policy plugin does, for any policy (tests/dra/admission_policy.py does the same for the DRA
driver's policy alone): the policy applies to a request its match constraints and all its match
conditions accept; its variables are evaluated, then every validation, and the first that is
not true denies the request with its message (messageExpression first). The expressions are the
shipped ones, evaluated by a CEL implementation (PyPI's common-expression-language); request,
object and oldObject are shaped as the API server hands them over (AdmissionRequest's userInfo with
the pod-bound token's extra, subResource and name left out when empty as in its JSON, null object
on DELETE and null oldObject on CREATE).

A CEL error (a field read that is not there) is raised, not taken as a denial: the shipped
expressions are meant to guard every read, and a test should see it when one does not (in the
API server the error would deny the request, failurePolicy: Fail)."""

from __future__ import annotations

from typing import Any

import cel

NODE_NAME = "authentication.kubernetes.io/node-name"
POD_NAME = "authentication.kubernetes.io/pod-name"


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def request(operation: str, user: str, *, node: str | None, group: str = "", resource: str, sub_resource: str = "",
            name: str = "", new: dict[str, Any] | None = None, old: dict[str, Any] | None = None) -> dict[str, Any]:
    """The CEL variables of one admission request: ``node`` is the pod's node its token names (None:
    a token not bound to a pod, no extra)."""
    user_info: dict[str, Any] = {"username": user, "groups": ["system:serviceaccounts", "system:authenticated"]}
    if node is not None:
        user_info["extra"] = {NODE_NAME: [node], POD_NAME: ["runtimekit-device-plugin-x7k2p"]}
    body: dict[str, Any] = {"operation": operation, "userInfo": user_info, "resource": {"group": group, "resource": resource}}
    if sub_resource:
        body["subResource"] = sub_resource
    if name or (new or old):
        body["name"] = name or (new or old or {})["metadata"]["name"]
    return {"request": body, "object": new, "oldObject": old}


def matches(policy: dict[str, Any], context: dict[str, Any]) -> bool:
    """Do the policy's match constraints (resource rules) and match conditions take the request?"""
    body = context["request"]
    resource = body["resource"]["resource"] + ("/" + body["subResource"] if body.get("subResource") else "")
    taken = False
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
        groups, resources, operations = rule["apiGroups"], rule["resources"], rule["operations"]
        if (body["resource"]["group"] in groups or "*" in groups) and (resource in resources or "*" in resources) and (
                body["operation"] in operations or "*" in operations):
            taken = True
    return taken and all(cel.evaluate(c["expression"], context) is True for c in policy["spec"].get("matchConditions", []))


def admit(policy: dict[str, Any], context: dict[str, Any]) -> str | None:
    """None when ``policy`` lets the request through (or does not apply to it), else the denial's message."""
    if not matches(policy, context):
        return None
    spec = policy["spec"]
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        variables[variable["name"]] = cel.evaluate(variable["expression"], {**context, "variables": variables})
    scope = {**context, "variables": variables}
    for validation in spec["validations"]:
        if cel.evaluate(validation["expression"], scope) is not True:
            if "messageExpression" in validation:
                return " ".join(str(cel.evaluate(validation["messageExpression"], scope)).split())
            return " ".join(validation["message"].split())
    return None
