"""The DRA driver's ValidatingAdmissionPolicy (deploy/kubernetes/dra/admission-policy.yaml): a
driver may write only its own node's ResourceSlices (the API server's admission step played by
``admission_policy.py``; the real driver's own writes pass it: test_publish_real_agent.py)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.dra.admission_policy import BINDING, DRIVER_ACCOUNT, DRIVER_USER, FOLDER, NODE_NAME, POLICY, admit, request, resource_slice


def test_the_policy_is_bound_to_deny_and_installed_with_the_driver() -> None:
    assert BINDING["spec"] == {"policyName": POLICY["metadata"]["name"], "validationActions": ["Deny"]}
    assert POLICY["spec"]["failurePolicy"] == "Fail"
    [rule] = POLICY["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"], set(rule["operations"])) == (
        ["resource.k8s.io"], ["resourceslices"], {"CREATE", "UPDATE", "DELETE"})
    assert "admission-policy.yaml" in yaml.safe_load((FOLDER / "Kustomization").read_text())["resources"]


@pytest.mark.parametrize("operation, objects", [
    ("CREATE", {"new": resource_slice("node-a")}),
    ("UPDATE", {"old": resource_slice("node-a"), "new": resource_slice("node-a")}),
    ("DELETE", {"old": resource_slice("node-a")}),
])
def test_the_driver_writes_its_own_nodes_slices(operation: str, objects: dict[str, Any]) -> None:
    assert admit(request(operation, **objects)) is None


@pytest.mark.parametrize("operation, objects, named", [
    ("CREATE", {"new": resource_slice("node-b")}, "not one of node node-b"),
    ("CREATE", {"new": resource_slice(None)}, "not one of no node"),
    ("UPDATE", {"old": resource_slice("node-b"), "new": resource_slice("node-b")}, "not one of node node-b"),
    ("UPDATE", {"old": resource_slice("node-b"), "new": resource_slice("node-a")}, "change only that node's ResourceSlices, not one of node node-b"),
    ("DELETE", {"old": resource_slice("node-b")}, "change only that node's ResourceSlices, not one of node node-b"),
])
def test_another_nodes_slice_is_denied_naming_both_nodes(operation: str, objects: dict[str, Any], named: str) -> None:
    message = admit(request(operation, **objects))
    assert message is not None and message.startswith("the DRA driver on node node-a may ") and message.endswith(named), message


def test_a_driver_request_without_a_node_is_denied() -> None:
    message = admit(request("CREATE", node=None, new=resource_slice("node-a")))
    assert message is not None and NODE_NAME in message


@pytest.mark.parametrize("user", [
    "system:serviceaccount:nvidia-dra-driver-gpu:nvidia-dra-driver-gpu-service-account-kubeletplugin",
    "system:serviceaccount:runtimekit:runtimekit-dra-other",
    "kubernetes-admin",
])
def test_other_users_are_left_to_rbac(user: str) -> None:
    assert admit(request("CREATE", user=user, node=None, new=resource_slice("node-b"))) is None


def test_the_driver_is_recognised_in_any_namespace() -> None:
    elsewhere = DRIVER_USER.replace(f":{DRIVER_ACCOUNT['metadata']['namespace']}:", ":gpu-operators:")
    assert admit(request("CREATE", user=elsewhere, new=resource_slice("node-b"))) is not None
