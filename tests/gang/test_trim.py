"""The informers keep only the fields the service reads (kube/gang/trim.py): what the service reads
from a trimmed object is what it reads from the whole one, and through the real client and the
fake API server the informers hold no ``status.images``, ``managedFields`` or container images."""

from __future__ import annotations

import copy
import dataclasses

from runtimekit.kube.gang.gangs import CONDITION, GANG_LABEL, GANG_SIZE, GATE, PLACED_ANNOTATION, gang_pod
from runtimekit.kube.gang.nodefit import node_unusable
from runtimekit.kube.gang.offer import OFFER_ANNOTATION, Offer, offer_annotation
from runtimekit.kube.gang.slices import allocated_devices
from runtimekit.kube.gang.trim import trim_claim, trim_node, trim_pod
from tests.gang.gang_rig import LEAF, SPINE, Rig, pinned_node, pod_group_pod

MANAGED = [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:images": {}}}}]
IMAGES = [{"names": [f"registry.example.com/team/image-{i}@sha256:{i:064x}"], "sizeBytes": 10**9 + i} for i in range(50)]


def _rich_pod() -> dict:
    term = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}
    return {"metadata": {"name": "p", "namespace": "ml", "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {GANG_LABEL: "g", "app": "x"}, "managedFields": MANAGED,
                         "annotations": {GANG_SIZE: "2", PLACED_ANNOTATION: "n1", "kubectl.kubernetes.io/last-applied": "{...}"},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j", "controller": True}]},
            "spec": {"schedulingGates": [{"name": GATE}], "nodeSelector": {"gpu": "h100"},
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                     "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]},
                                                   "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": term}]},
                                  "podAntiAffinity": {}},
                     "resourceClaims": [{"name": "a", "resourceClaimTemplateName": "eight"}],
                     "containers": [{"name": "c", "image": "big", "env": [{"name": "A", "value": "1" * 1000}],
                                     "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
                     "initContainers": [{"name": "i", "image": "init", "resources": {"requests": {"nvidia.com/gpu": "8"}}}],
                     "volumes": [{"name": "v", "emptyDir": {}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"},
                                                          {"type": CONDITION, "status": "False", "reason": "Unplaceable"}]}}


def test_a_trimmed_pod_reads_as_the_whole_one() -> None:
    pod = _rich_pod()
    trimmed = trim_pod(copy.deepcopy(pod))
    whole = gang_pod(pod, "nvidia.com/gpu", None)
    assert whole is not None and whole.gpus == 8 and whole.terms
    ours = dataclasses.replace(whole, conditions={CONDITION: whole.conditions[CONDITION]})  # the only condition read
    assert gang_pod(trimmed, "nvidia.com/gpu", None) == ours
    assert "managedFields" not in trimmed["metadata"] and "volumes" not in trimmed["spec"]
    assert trimmed["spec"]["containers"] == [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]
    assert set(trimmed["metadata"]["annotations"]) == {GANG_SIZE, PLACED_ANNOTATION}


def test_a_trimmed_node_and_claim_read_as_the_whole_ones() -> None:
    for ready, unschedulable in (("True", False), ("False", False), ("True", True)):
        node = {"metadata": {"name": "n", "labels": {"a": "b"}, "managedFields": MANAGED,
                             "annotations": {OFFER_ANNOTATION: offer_annotation(Offer.of([8])), "other": "x"}},
                "spec": {"unschedulable": unschedulable, "taints": [{"key": "k", "effect": "NoSchedule"}], "podCIDR": "10.0.0.0/24"},
                "status": {"images": IMAGES, "conditions": [{"type": "MemoryPressure", "status": "False"},
                                                            {"type": "Ready", "status": ready}]}}
        trimmed = trim_node(copy.deepcopy(node))
        assert node_unusable(trimmed) == node_unusable(node)
        assert trimmed["metadata"]["labels"] == node["metadata"]["labels"]
        assert trimmed["metadata"]["annotations"] == {OFFER_ANNOTATION: node["metadata"]["annotations"][OFFER_ANNOTATION]}
        assert trimmed["spec"]["taints"] == node["spec"]["taints"] and "images" not in trimmed["status"]
    claim = {"metadata": {"name": "c", "namespace": "ml", "managedFields": MANAGED}, "spec": {"devices": {"requests": []}},
             "status": {"allocation": {"devices": {"results": [{"driver": "gpu.runtimekit.io", "pool": "n", "device": "gpu-0",
                                                                "request": "g"}]}}, "reservedFor": [{"resource": "pods"}]}}
    assert allocated_devices([trim_claim(copy.deepcopy(claim))], "n") == allocated_devices([claim], "n") == {"gpu-0"}


async def test_the_informers_hold_trimmed_objects_and_still_place(rig: Rig) -> None:
    rig.api.add_node("n0", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    node = copy.deepcopy(rig.api.kinds["nodes"].items["n0"])
    node["status"]["images"] = IMAGES
    node["metadata"]["managedFields"] = MANAGED
    rig.api.add("nodes", node)
    pod = pod_group_pod("g", 0, size=1, gpus=8)
    pod["spec"]["containers"][0]["env"] = [{"name": "BIG", "value": "x" * 10_000}]
    rig.api.add_pod(pod)
    await rig.settle()
    assert pinned_node(rig.api.pod("default", "g-0")) == "n0"
    held_node = rig.controller.cluster.nodes.objects["n0"]
    assert "images" not in held_node["status"] and "managedFields" not in held_node["metadata"]
    held_pod = next(informer.objects["default/g-0"] for informer in rig.controller.cluster.pods
                    if "default/g-0" in informer.objects)
    assert held_pod["spec"]["containers"] == [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]
