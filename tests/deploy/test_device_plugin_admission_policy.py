"""The device plugin's ValidatingAdmissionPolicy (deploy/kubernetes/overlays/device-plugin/
admission-policy.yaml), as ``kubectl kustomize`` renders the installations: wherever a node-level
part's service account may write Nodes, a policy bound to Deny confines it to the annotation
runtimekit.io/offer of its own pod's Node. Its CEL expressions are evaluated (vap.py) on the
plugin's own JSON merge patch (kube/deviceplugin/nodeapi.py, through the real
``KubernetesNodeAnnotation``), which it lets through, and on every other write, which it denies."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from deploy_files import find
from rendered import holding, installations, pod_spec, render, workloads
from vap import admit, matches, request, service_account_user

from runtimekit.kube.gang.offer import OFFER_ANNOTATION
from tests.gang.fake_patches import merge_patch  # RFC 7386, as the API server applies a merge patch

INSTALLATIONS = installations()
OVERLAY = "overlays/device-plugin"
WRITES = {"create", "update", "patch", "delete", "deletecollection", "*"}
OWN, OTHER = "gpu-node-a", "gpu-node-b"


def documents() -> tuple[dict[str, Any], ...]:
    return render(INSTALLATIONS[OVERLAY])


def plugin_account() -> tuple[str, str]:
    workload = find(documents(), "DaemonSet", "runtimekit-device-plugin")
    return workload["metadata"]["namespace"], pod_spec(workload)["serviceAccountName"]


def policy() -> dict[str, Any]:
    found = [d for d in documents() if d["kind"] == "ValidatingAdmissionPolicy"
             and matches(d, update(node(OTHER), node(OTHER, annotations={OFFER_ANNOTATION: "{}"})))]
    assert len(found) == 1, f"expected one ValidatingAdmissionPolicy for the device plugin's Node writes, found {len(found)}"
    return found[0]


def node(name: str, *, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
         spec: dict[str, Any] | None = None, resource_version: str = "1000", **metadata: Any) -> dict[str, Any]:
    """A Node as the API server hands it to admission (status, managed fields and all)."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name, "uid": f"uid-{name}", "resourceVersion": resource_version,
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"} if labels is None else labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
            if annotations is None else annotations,
            "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2025-01-01T00:00:00Z"}],
            **metadata,
        },
        "spec": {"podCIDR": "10.244.3.0/24", "providerID": f"aws:///us-east-1a/{name}"} if spec is None else spec,
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "capacity": {"nvidia.com/gpu": "8"}},
    }


def update(old: dict[str, Any], new: dict[str, Any], *, account: tuple[str, str] | None = None, at: str | None = OWN,
           sub_resource: str = "") -> dict[str, Any]:
    namespace, name = account or plugin_account()
    return request("UPDATE", service_account_user(namespace, name), node=at, resource="nodes", sub_resource=sub_resource,
                   new=new, old=old)


def with_offer(base: dict[str, Any], value: str | None) -> dict[str, Any]:
    changed = copy.deepcopy(base)
    if value is None:
        changed["metadata"]["annotations"].pop(OFFER_ANNOTATION, None)
    else:
        changed["metadata"]["annotations"][OFFER_ANNOTATION] = value
    changed["metadata"]["resourceVersion"] = str(int(base["metadata"]["resourceVersion"]) + 1)
    changed["metadata"]["managedFields"] = [*base["metadata"]["managedFields"],
                                            {"manager": "OpenAPI-Generator", "operation": "Update", "apiVersion": "v1"}]
    return changed


OFFER = '{"v":1,"gpus_free":6,"nvlink_groups":[6],"nics_free_by_root":{}}'


# ---- shipped where the grant is ----------------------------------------------------------------

@pytest.mark.parametrize("name", list(INSTALLATIONS))
def test_every_node_writer_among_the_node_level_parts_is_confined_by_a_policy(name):
    """A DaemonSet's service account that RBAC lets write Nodes is matched by a policy bound to Deny."""
    docs = render(INSTALLATIONS[name])
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    bound = {d["spec"]["policyName"] for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"
             and d["spec"]["validationActions"] == ["Deny"] and "matchResources" not in d["spec"]}
    for workload in (w for w in workloads(docs) if w["kind"] == "DaemonSet"):
        account = pod_spec(workload).get("serviceAccountName")
        if account is None:
            continue
        subject = {"kind": "ServiceAccount", "name": account, "namespace": workload["metadata"]["namespace"]}
        roles = [find(docs, "ClusterRole", b["roleRef"]["name"]) for b in docs
                 if b["kind"] == "ClusterRoleBinding" and subject in b["subjects"]]
        verbs = {verb for role in roles for rule in role["rules"] if "" in rule["apiGroups"] and "nodes" in rule["resources"]
                 for verb in rule["verbs"]}
        if not verbs & WRITES:
            continue
        context = update(node(OTHER), with_offer(node(OTHER), OFFER), account=(subject["namespace"], account))
        confining = [p for p in policies if p in bound and matches(policies[p], context)]
        assert confining, f"{name}: {account} may {sorted(verbs & WRITES)} Nodes and no policy bound to Deny narrows it"
        for policy_name in confining:
            assert policies[policy_name]["spec"]["failurePolicy"] == "Fail", policy_name


def test_the_overlay_grants_patch_and_ships_the_policy_bound_to_deny():
    docs = documents()
    namespace, account = plugin_account()
    assert "patch" in find(docs, "ClusterRole", account)["rules"][0]["verbs"], "the grant the policy narrows"
    shipped = policy()
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"
                  and d["spec"]["policyName"] == shipped["metadata"]["name"]]
    assert binding["spec"] == {"policyName": shipped["metadata"]["name"], "validationActions": ["Deny"]}
    assert shipped["spec"]["failurePolicy"] == "Fail"
    [rule] = shipped["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], set(rule["operations"])) == ([""], {"CREATE", "UPDATE", "DELETE"})
    assert {"nodes", "nodes/status"} <= set(rule["resources"])
    offer_key = {v["name"]: v["expression"] for v in shipped["spec"]["variables"]}["offerKey"]
    assert offer_key == repr(OFFER_ANNOTATION), "the annotation the plugin writes (kube/gang/offer.py)"


@pytest.mark.parametrize("name", holding("device-plugin"))
def test_without_the_offer_annotation_the_plugin_has_no_grant_to_confine(name):
    """The device-plugin component alone: no token, so no Node writes and no policy needed."""
    docs = render(INSTALLATIONS[name])
    spec = pod_spec(find(docs, "DaemonSet", "runtimekit-device-plugin"))
    if "serviceAccountName" not in spec:
        assert spec.get("automountServiceAccountToken") is False


# ---- what it lets through ----------------------------------------------------------------------

@pytest.mark.parametrize("value", [OFFER, None])
def test_the_plugins_own_merge_patch_passes(value):
    """The very body ``KubernetesNodeAnnotation.write`` sends (set, and remove on stop), applied to
    its own Node as the API server applies a merge patch."""
    from kubernetes import client

    from runtimekit.kube.deviceplugin.nodeapi import KubernetesNodeAnnotation

    sent: list[tuple[str, Any, dict[str, Any]]] = []

    class Api:
        def patch_node(self, name: str, body: Any, **options: Any) -> None:
            sent.append((name, body, options))

    writer = KubernetesNodeAnnotation(client.ApiClient(), OWN, OFFER_ANNOTATION)
    writer._api = Api()
    asyncio.run(writer.write(value))
    [(name, body, options)] = sent
    assert name == OWN and options["_content_type"] == "application/merge-patch+json"
    before = node(OWN, annotations={"node.alpha.kubernetes.io/ttl": "0", OFFER_ANNOTATION: '{"v":1,"gpus_free":8}'})
    after = with_offer(before, None)  # resourceVersion and managedFields move, as the API server moves them
    after = merge_patch(after, body)
    assert (OFFER_ANNOTATION in after["metadata"]["annotations"]) is (value is not None)
    assert admit(policy(), update(before, after)) is None


@pytest.mark.parametrize(("before", "value"), [
    ({}, OFFER),                                              # the first write: no annotations at all yet
    ({"node.alpha.kubernetes.io/ttl": "0"}, OFFER),           # set beside others
    ({OFFER_ANNOTATION: "{}", "a": "b"}, OFFER),              # changed
    ({OFFER_ANNOTATION: "{}", "a": "b"}, None),               # removed (the plugin stops)
    ({OFFER_ANNOTATION: OFFER}, OFFER),                       # written again unchanged (resync)
])
def test_its_own_nodes_offer_annotation_may_be_set_changed_and_removed(before, value):
    old = node(OWN, annotations=dict(before))
    if not before:
        del old["metadata"]["annotations"]
    new = copy.deepcopy(old)
    new["metadata"].setdefault("annotations", {})
    new = with_offer(new, value)
    if not new["metadata"]["annotations"]:
        del new["metadata"]["annotations"]
    assert admit(policy(), update(old, new)) is None


@pytest.mark.parametrize("user", [
    "system:node:gpu-node-b",                                              # the kubelet
    "kubernetes-admin",
    "system:serviceaccount:runtimekit:runtimekit-remediation",             # cordons and taints, by its own RBAC
    "system:serviceaccount:runtimekit:runtimekit-device-plugin-other",
    "system:serviceaccount:kube-system:node-controller",
])
def test_other_users_are_left_to_rbac(user):
    old = node(OTHER)
    new = copy.deepcopy(old)
    new["spec"]["unschedulable"] = True
    context = request("UPDATE", user, node=None, resource="nodes", new=new, old=old)
    assert admit(policy(), context) is None


# ---- what it denies ----------------------------------------------------------------------------

def test_another_nodes_annotation_is_denied_naming_both_nodes():
    message = admit(policy(), update(node(OTHER), with_offer(node(OTHER), OFFER)))
    assert message is not None and f"on node {OWN} " in message and message.endswith(f"not node {OTHER}"), message


def test_a_request_without_the_pods_node_is_denied():
    message = admit(policy(), update(node(OWN), with_offer(node(OWN), OFFER), at=None))
    assert message is not None and "authentication.kubernetes.io/node-name" in message, message


def changed(mutate: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    old = node(OWN, annotations={"node.alpha.kubernetes.io/ttl": "0", OFFER_ANNOTATION: "{}"},
               spec={"podCIDR": "10.244.3.0/24", "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]})
    new = with_offer(old, OFFER)  # the offer changes too: the rest must be refused even then
    mutate(new)
    return old, new


def set_in(*path: str, value: Any) -> Any:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, last = path
        for key in parents:
            obj = obj.setdefault(key, {})
        obj[last] = value
    return mutate


def drop(*path: str) -> Any:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, last = path
        for key in parents:
            obj = obj[key]
        del obj[last]
    return mutate


@pytest.mark.parametrize(("mutate", "named"), [
    (set_in("spec", "unschedulable", value=True), "spec"),                                     # cordon
    (set_in("spec", "taints", value=[]), "spec"),                                              # untaint
    (set_in("spec", "taints", value=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                                     {"key": "evil", "effect": "NoExecute"}]), "spec"),       # taint
    (drop("spec"), "spec"),
    (set_in("metadata", "labels", "node-role.kubernetes.io/control-plane", value=""), "labels"),  # pull workloads
    (drop("metadata", "labels"), "labels"),
    (set_in("metadata", "ownerReferences", value=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "x"}]),
     "owner references"),                                                                      # garbage-collected away
    (set_in("metadata", "finalizers", value=["example.com/never"]), "finalizers"),
    (set_in("metadata", "annotations", "node.alpha.kubernetes.io/ttl", value="30"), "annotation"),  # another changed
    (set_in("metadata", "annotations", "example.com/new", value="x"), "annotation"),                 # one added
    (drop("metadata", "annotations", "node.alpha.kubernetes.io/ttl"), "annotation"),                # one removed
])
def test_anything_but_the_offer_annotation_is_denied(mutate, named):
    old, new = changed(mutate)
    message = admit(policy(), update(old, new))
    assert message is not None and named in message, message


def test_status_and_other_subresources_are_denied():
    old = node(OWN)
    new = copy.deepcopy(old)
    new["status"]["capacity"]["nvidia.com/gpu"] = "16"
    message = admit(policy(), update(old, new, sub_resource="status"))
    assert message is not None and "not UPDATE nodes/status" in message, message


@pytest.mark.parametrize(("operation", "objects"), [
    ("CREATE", {"new": node(OWN)}),
    ("DELETE", {"old": node(OWN)}),
    ("DELETE", {"old": node(OTHER)}),
])
def test_creating_or_deleting_a_node_is_denied(operation, objects):
    namespace, account = plugin_account()
    context = request(operation, service_account_user(namespace, account), node=OWN, resource="nodes", **objects)
    message = admit(policy(), context)
    assert message is not None and f"not {operation} a Node" in message, message


def test_the_plugin_is_recognised_in_any_namespace():
    _, account = plugin_account()
    message = admit(policy(), update(node(OTHER), with_offer(node(OTHER), OFFER), account=("gpu-operators", account)))
    assert message is not None and message.endswith(f"not node {OTHER}"), message
