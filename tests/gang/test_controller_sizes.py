"""How many pods the controller waits for, against the fake API server: pods that Succeeded count
toward a started gang (their Job does not run them again), a JobSet created again under the same
name is sized afresh (keyed by its uid), and a JobSet whose replicated jobs start in stages
(``dependsOn``) is refused by name rather than waited for."""

from __future__ import annotations

import copy

from runtimekit.kube.gang.gangs import JOBSET_UID
from runtimekit.kube.gang.offer import Offer
from tests.gang.gang_rig import LEAF, SPINE, Rig, jobset, jobset_pod, pinned_node, pod_group_pod


async def test_a_replacement_is_placed_beside_a_pod_that_succeeded(rig: Rig) -> None:
    """g-0 Succeeded, g-1 Failed and its Job made g-2: one running pod plus one done is the gang's 2."""
    for i in range(3):
        rig.api.add_node(f"n{i}", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    for i in range(2):
        rig.api.add_pod(pod_group_pod("g", i, size=2, gpus=8, owned=True))
    await rig.settle()
    for i in range(2):
        rig.api.bind("default", f"g-{i}", str(pinned_node(rig.api.pod("default", f"g-{i}"))))
    rig.api.set_phase("default", "g-0", "Succeeded")
    rig.api.set_phase("default", "g-1", "Failed")
    rig.api.add_pod(pod_group_pod("g", 2, size=2, gpus=8, owned=True))
    await rig.settle()
    assert pinned_node(rig.api.pod("default", "g-2")) is not None, "not waiting for a second running pod that never comes"
    assert rig.condition("g-2")["reason"] == "Placed"


def _uid_pod(jobset_name: str, uid: str, index: int, gpus: int) -> dict:
    pod = jobset_pod(jobset_name, index, gpus)
    pod["metadata"]["name"] = f"{jobset_name}-{uid}-{index}"
    pod["metadata"]["labels"][JOBSET_UID] = uid
    return pod


async def test_a_jobset_created_again_under_the_same_name_is_sized_again(rig: Rig) -> None:
    for i in range(4):
        rig.api.add_node(f"n{i}", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    first = copy.deepcopy(jobset("train", workers=4))
    first["metadata"]["uid"] = "uid-1"
    rig.api.add("jobsets", first)
    for i in range(4):
        rig.api.add_pod(_uid_pod("train", "uid-1", i, gpus=8))
    await rig.settle()
    assert all(pinned_node(rig.api.pod("default", f"train-uid-1-{i}")) for i in range(4))
    for i in range(4):
        rig.api.set_phase("default", f"train-uid-1-{i}", "Failed")  # its pods linger until garbage-collected

    second = copy.deepcopy(jobset("train", workers=2))
    second["metadata"]["uid"] = "uid-2"
    rig.api.add("jobsets", second)  # deleted and created again: same name, another uid, 2 workers
    for i in range(2):
        rig.api.add_pod(_uid_pod("train", "uid-2", i, gpus=8))
    await rig.settle()
    assert all(pinned_node(rig.api.pod("default", f"train-uid-2-{i}")) for i in range(2)), \
        f"sized 2 from the new JobSet, not 4 from the old: {rig.condition('train-uid-2-0')}"


async def test_a_jobset_whose_jobs_start_in_stages_is_refused_with_an_event(rig: Rig) -> None:
    rig.api.add_node("n0", {SPINE: "s1", LEAF: "l0"}, Offer.of([8]))
    staged = copy.deepcopy(jobset("train", workers=1))
    launcher = copy.deepcopy(staged["spec"]["replicatedJobs"][0])
    launcher["name"] = "launcher"
    staged["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "launcher", "status": "Ready"}]
    staged["spec"]["replicatedJobs"].insert(0, launcher)
    rig.api.add("jobsets", staged)
    rig.api.add_pod(jobset_pod("train", 0, gpus=8))
    await rig.settle()
    condition = rig.condition("train-w-0")
    assert (condition["status"], condition["reason"]) == ("False", "InvalidGang")
    assert "spec.replicatedJobs[1].dependsOn" in condition["message"]
    events = rig.api.events()
    assert [(e["reason"], e["involvedObject"]["kind"]) for e in events] == [("InvalidGang", "JobSet")]
