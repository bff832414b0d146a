"""The pure parts the controller decides with: gang membership and demand read from pods
(gangs.py), the size of a JobSet, the devices of a claim, the pinned affinity terms, and the node
checks (nodefit.py), table by table, malformed input included."""

from __future__ import annotations

import pytest

from runtimekit.kube.gang.gangs import (
    GANG_LABEL,
    GANG_SIZE,
    GATE,
    JOBSET_NAME,
    RESTART_ATTEMPT,
    GangError,
    claim_devices,
    gang_pod,
    group_gangs,
    jobset_size,
    pinned_terms,
)
from runtimekit.kube.gang.nodefit import node_admits, node_unusable, term_matches, tolerates


def pod(labels: dict, annotations: dict | None = None, containers: list | None = None, init: list | None = None, **spec) -> dict:
    return {"metadata": {"name": "p", "namespace": "ml", "uid": "u", "labels": labels, "annotations": annotations or {}},
            "spec": {"containers": containers or [{"name": "c"}], "initContainers": init or [], **spec}}


def gpus(n: int | str, where: str = "limits") -> dict:
    return {"name": "c", "resources": {where: {"nvidia.com/gpu": n, "rdma/ib": 1}}}


@pytest.mark.parametrize("obj, expected", [
    (pod({JOBSET_NAME: "t", RESTART_ATTEMPT: "2"}), ("ml/t", "JobSet", 2, None)),
    (pod({JOBSET_NAME: "t"}, {GANG_SIZE: "16"}), ("ml/t", "JobSet", 0, 16)),
    (pod({GANG_LABEL: "g"}, {GANG_SIZE: "4"}), ("ml/g", "PodGroup", 0, 4)),
    (pod({GANG_LABEL: "g", GANG_SIZE: "4"}), ("ml/g", "PodGroup", 0, 4)),
    (pod({"app": "web"}), None),
])
def test_gang_membership(obj: dict, expected: tuple | None) -> None:
    member = gang_pod(obj, "nvidia.com/gpu", None)
    assert (member and (member.gang.key, member.gang.kind, member.gang.attempt, member.gang.size)) == expected


@pytest.mark.parametrize("obj, message", [
    (pod({GANG_LABEL: "g"}), "runtimekit.io/gang-size]: required on a pod labelled runtimekit.io/gang"),
    (pod({GANG_LABEL: "g"}, {GANG_SIZE: "0"}), "must be a whole number of pods between 1 and 100000"),
    (pod({JOBSET_NAME: "t", RESTART_ATTEMPT: "x"}), "restart-attempt]: must be a whole number"),
    (pod({GANG_LABEL: "g"}, {GANG_SIZE: "1"}, [gpus("1.5")]), "spec.containers[0].resources.limits[nvidia.com/gpu]: must be a whole number"),
    (pod({GANG_LABEL: "g"}, {GANG_SIZE: "1"}, resourceClaims=[{"name": "x"}]), "spec.resourceClaims[0]: names neither"),
    ({"metadata": {"name": "p", "labels": {GANG_LABEL: "g"}, "annotations": {GANG_SIZE: "1"}}, "spec": {"containers": "c"}},
     "spec.containers: must be a list"),
])
def test_malformed_gang_pods_are_named(obj: dict, message: str) -> None:
    with pytest.raises(GangError, match="^pod ") as caught:
        gang_pod(obj, "nvidia.com/gpu", None)
    assert message in str(caught.value)


def test_demand_is_the_effective_request() -> None:
    both = pod({GANG_LABEL: "g"}, {GANG_SIZE: "1"}, [gpus(2), gpus("2", "requests")], [gpus(3)],
               schedulingGates=[{"name": "other"}, {"name": GATE}])
    member = gang_pod(both, "nvidia.com/gpu", "rdma/ib")
    assert member is not None
    assert (member.gpus, member.nics, member.gated) == (4, 2, True), "sum of containers (4) beats the init container (3)"
    init_heavy = gang_pod(pod({GANG_LABEL: "g"}, {GANG_SIZE: "1"}, [gpus(1)], [gpus(8)]), "nvidia.com/gpu", None)
    assert init_heavy is not None and (init_heavy.gpus, init_heavy.nics, init_heavy.gated) == (8, 0, False)


def test_only_the_newest_restart_attempt_is_the_gang() -> None:
    members = [gang_pod(pod({JOBSET_NAME: "t", RESTART_ATTEMPT: str(attempt)}), "nvidia.com/gpu", None) for attempt in (0, 1, 1)]
    grouped = group_gangs([m for m in members if m is not None])
    assert [m.gang.attempt for m in grouped["ml/t"]] == [1, 1]


def _jobset(*replicated: dict, order: str | None = None) -> dict:
    spec: dict = {"replicatedJobs": list(replicated)}
    if order:
        spec["startupPolicy"] = {"startupPolicyOrder": order}
    return {"spec": spec}


def _job(replicas: int | None = None, parallelism: int | None = None, completions: int | None = None) -> dict:
    job = {k: v for k, v in (("parallelism", parallelism), ("completions", completions)) if v is not None}
    entry: dict = {"name": "w", "template": {"spec": job}}
    if replicas is not None:
        entry["replicas"] = replicas
    return entry


@pytest.mark.parametrize("jobset, size", [
    (_jobset(_job()), 1),
    (_jobset(_job(replicas=4, parallelism=2, completions=2)), 8),
    (_jobset(_job(replicas=1, parallelism=1), _job(replicas=2, parallelism=8, completions=4)), 9),
])
def test_jobset_size(jobset: dict, size: int) -> None:
    assert jobset_size(jobset) == size


@pytest.mark.parametrize("jobset, message", [
    (_jobset(_job(replicas=2), order="InOrder"), "InOrder starts each replicated job"),
    (_jobset(_job(), {**_job(), "name": "x", "dependsOn": [{"name": "w", "status": "Complete"}]}),
     "spec.replicatedJobs[1].dependsOn: the JobSet creates this replicated job only after"),
    (_jobset(_job(replicas=0)), "the JobSet runs 0 pods at once"),
    (_jobset(_job(replicas=-1)), "spec.replicatedJobs[0].replicas: must be a whole number >= 0"),
    ({"spec": {"replicatedJobs": {}}}, "spec.replicatedJobs: must be a list"),
])
def test_jobsets_that_cannot_be_sized_are_named(jobset: dict, message: str) -> None:
    with pytest.raises(GangError, match=message.replace("[", r"\[").replace("]", r"\]")):
        jobset_size(jobset)


def test_claim_devices_counts_gpu_and_nic_classes_only() -> None:
    spec = {"devices": {"requests": [
        {"name": "a", "exactly": {"deviceClassName": "gpu.runtimekit.io", "count": 4}},
        {"name": "b", "exactly": {"deviceClassName": "gpu.runtimekit.io"}},
        {"name": "c", "exactly": {"deviceClassName": "nic.runtimekit.io", "count": 2}},
        {"name": "d", "exactly": {"deviceClassName": "mig.runtimekit.io", "count": 3}},
        {"name": "e", "firstAvailable": [{"name": "x", "deviceClassName": "tdm.runtimekit.io"}]}]}}
    assert claim_devices(spec, ("gpu.runtimekit.io",), ("nic.runtimekit.io",)) == (5, 2)


def test_pinned_terms_only_add_a_requirement_to_each_term() -> None:
    pin = {"key": "metadata.name", "operator": "In", "values": ["n3"]}
    assert pinned_terms([], "n3") == [{"matchFields": [pin]}]
    zone = {"key": "zone", "operator": "In", "values": ["a", "b"]}
    terms = [{"matchExpressions": [zone]}, {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]}]
    assert pinned_terms(terms, "n3") == [{"matchExpressions": [zone], "matchFields": [pin]},
                                         {"matchFields": [terms[1]["matchFields"][0], pin]}]


def _node(ready: str = "True", **spec) -> dict:
    return {"metadata": {"name": "n"}, "spec": spec, "status": {"conditions": [{"type": "Ready", "status": ready}]}}


@pytest.mark.parametrize("node, why", [
    (_node(), None),
    (_node("Unknown"), "NotReady"),
    (_node(unschedulable=True), "cordoned"),
    (_node(taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]), "tainted node.kubernetes.io/unreachable"),
    (_node(taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]), None),
    ({"metadata": {"name": "n", "deletionTimestamp": "2026-01-01T00:00:00Z"}}, "being deleted"),
    ({"metadata": {"name": "n"}}, "NotReady"),
])
def test_node_unusable(node: dict, why: str | None) -> None:
    assert node_unusable(node) == why


@pytest.mark.parametrize("term, matches", [
    ({"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100"]}]}, True),
    ({"matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["h100"]}]}, False),
    ({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, True),
    ({"matchExpressions": [{"key": "gpus", "operator": "Gt", "values": ["4"]}]}, True),
    ({"matchExpressions": [{"key": "gpus", "operator": "Lt", "values": ["x"]}]}, False),
    ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}, True),
    ({}, False),
])
def test_term_matches(term: dict, matches: bool) -> None:
    assert term_matches(term, "n", {"gpu": "h100", "gpus": "8"}) is matches


@pytest.mark.parametrize("toleration, tolerated", [
    ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),
    ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, True),
    ({"key": "nvidia.com/gpu", "value": "absent"}, False),
    ({"operator": "Exists"}, True),
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, False),
])
def test_tolerates(toleration: dict, tolerated: bool) -> None:
    assert tolerates([toleration], {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}) is tolerated


def test_node_admits_names_the_constraint() -> None:
    member = gang_pod(pod({GANG_LABEL: "g"}, {GANG_SIZE: "1"}, nodeSelector={"gpu": "h100"}), "nvidia.com/gpu", None)
    assert member is not None
    assert node_admits(member, "n", {"gpu": "h100"}, []) is None
    assert "nodeSelector gpu=h100" in (node_admits(member, "n", {"gpu": "a100"}, []) or "")
    taint = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}
    assert "does not tolerate the taint dedicated=infer:NoSchedule" in (node_admits(member, "n", {"gpu": "h100"}, [taint]) or "")
