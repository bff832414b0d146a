"""A simulated pod that finishes for good (a Job that Succeeded, a restartPolicy Never pod that
Failed): its processes end, the fake CRI runtime lists its sandbox SANDBOX_NOTREADY and its
containers CONTAINER_EXITED — both still listed, as the kubelet keeps them until the pod is deleted —
and deleting the pod removes both. Set through ``node.finish_pod`` or POST /sim/v1/pods/phase."""

from __future__ import annotations

import grpc.aio
import pytest

from runtimekit._proto.cri.runtime.v1 import api_pb2 as cri_pb
from runtimekit._proto.cri.runtime.v1 import api_pb2_grpc as cri_grpc
from runtimekit.sim import FaultError
from runtimekit.sim.cri import FakeCriServer, sandbox_id

TRAINING = ("ml-training", "llama-pretrain-0")  # dgx-h100's pod running the job on GPUs 0-5


@pytest.fixture
async def runtime(node, tmp_path):
    server = FakeCriServer(node.pods, str(tmp_path / "containerd.sock"), created_at_ns=1_700_000_000_000_000_000)
    await server.start()
    yield server
    await server.stop()


def _pod(node, namespace, name):
    return next(p for p in node.pods() if (p.namespace, p.name) == (namespace, name))


async def _sandboxes(runtime, **filter_fields) -> list[cri_pb.PodSandbox]:
    request = cri_pb.ListPodSandboxRequest()
    if filter_fields:
        request.filter.CopyFrom(cri_pb.PodSandboxFilter(**filter_fields))
    async with grpc.aio.insecure_channel(runtime.endpoint) as channel:
        return list((await cri_grpc.RuntimeServiceStub(channel).ListPodSandbox(request, timeout=5)).items)


async def _containers(runtime) -> list[cri_pb.Container]:
    async with grpc.aio.insecure_channel(runtime.endpoint) as channel:
        stub = cri_grpc.RuntimeServiceStub(channel)
        return list((await stub.ListContainers(cri_pb.ListContainersRequest(), timeout=5)).containers)


# ---- the node -------------------------------------------------------------------------------------
def test_a_finished_pods_processes_end_and_its_job_stops(node):
    pid = node.add_process(7, 1 << 30, namespace="research", pod="notebook-alice", container="jupyter")
    assert {p["pod"] for p in node.processes()} >= {"llama-pretrain-0", "notebook-alice"}
    pod = node.finish_pod(*TRAINING, "Succeeded")
    assert pod.phase == "Succeeded" and pod.finished and _pod(node, *TRAINING) == pod
    assert "llama-pretrain-0" not in {p["pod"] for p in node.processes()}  # the job ran there: no longer
    assert pid in {p["pid"] for p in node.processes()}  # other pods go on
    node.finish_pod("research", "notebook-alice", "Failed")
    assert pid not in {p["pid"] for p in node.processes()}


def test_no_process_starts_in_a_finished_pod(node):
    node.finish_pod(*TRAINING, "Failed")
    with pytest.raises(FaultError, match=r"^pod: pod ml-training/llama-pretrain-0 has finished \(Failed\)"):
        node.add_process(0, 1 << 30, namespace=TRAINING[0], pod=TRAINING[1], container="trainer")


@pytest.mark.parametrize("phase", ["Running", "Pending", "succeeded", "", None, 1])
def test_only_a_terminal_phase_is_taken(node, phase):
    with pytest.raises(FaultError, match=r"^phase: got .*; must be one of Succeeded, Failed"):
        node.finish_pod(*TRAINING, phase)
    assert _pod(node, *TRAINING).phase == "Running"


def test_a_finished_pod_does_not_run_again_and_an_unknown_pod_is_a_key_error(node):
    node.finish_pod(*TRAINING, "Succeeded")
    with pytest.raises(FaultError, match=r"^phase: pod ml-training/llama-pretrain-0 has already finished \(Succeeded\)"):
        node.finish_pod(*TRAINING, "Failed")
    with pytest.raises(KeyError):
        node.finish_pod("ml-training", "nope", "Succeeded")


# ---- the fake CRI runtime -------------------------------------------------------------------------
async def test_a_running_pods_sandbox_is_ready_with_the_kubelets_metadata_and_labels(node, runtime):
    sandboxes = await _sandboxes(runtime)
    assert [(s.metadata.namespace, s.metadata.name) for s in sandboxes] == [(p.namespace, p.name) for p in node.pods()]
    training = next(s for s in sandboxes if s.metadata.name == TRAINING[1])
    pod = _pod(node, *TRAINING)
    assert training.id == sandbox_id(pod) and training.state == cri_pb.SANDBOX_READY
    assert (training.metadata.uid, training.metadata.attempt, training.created_at) == (pod.uid, 0, 1_700_000_000_000_000_000)
    assert dict(training.labels) == {"io.kubernetes.pod.name": pod.name, "io.kubernetes.pod.namespace": pod.namespace,
                                     "io.kubernetes.pod.uid": pod.uid}
    assert runtime.calls["ListPodSandbox"] == 1


async def test_a_finished_pod_keeps_a_stopped_sandbox_and_exited_containers_until_deleted(node, runtime):
    pod = node.finish_pod(*TRAINING, "Succeeded")
    by_pod = {s.metadata.uid: s.state for s in await _sandboxes(runtime)}
    assert by_pod[pod.uid] == cri_pb.SANDBOX_NOTREADY
    assert {state for uid, state in by_pod.items() if uid != pod.uid} == {cri_pb.SANDBOX_READY}
    states = {c.id: c.state for c in await _containers(runtime)}
    assert states[pod.containers[0].container_id] == cri_pb.CONTAINER_EXITED
    assert {s for cid, s in states.items() if cid != pod.containers[0].container_id} == {cri_pb.CONTAINER_RUNNING}
    node.delete_pod(*TRAINING)
    assert pod.uid not in {s.metadata.uid for s in await _sandboxes(runtime)}
    assert pod.containers[0].container_id not in {c.id for c in await _containers(runtime)}


async def test_list_pod_sandbox_honours_the_filter(node, runtime):
    pod = node.finish_pod(*TRAINING, "Failed")
    ready = await _sandboxes(runtime, state=cri_pb.PodSandboxStateValue(state=cri_pb.SANDBOX_READY))
    assert pod.uid not in {s.metadata.uid for s in ready} and len(ready) == len(node.pods()) - 1
    not_ready = await _sandboxes(runtime, state=cri_pb.PodSandboxStateValue(state=cri_pb.SANDBOX_NOTREADY))
    assert [s.metadata.uid for s in not_ready] == [pod.uid]
    assert [s.metadata.uid for s in await _sandboxes(runtime, id=sandbox_id(pod)[:12])] == [pod.uid]
    assert [s.metadata.uid for s in await _sandboxes(runtime, label_selector={"io.kubernetes.pod.uid": pod.uid})] == [pod.uid]
    assert await _sandboxes(runtime, id=sandbox_id(pod), state=cri_pb.PodSandboxStateValue(state=cri_pb.SANDBOX_READY)) == []


# ---- POST /sim/v1/pods/phase ----------------------------------------------------------------------
async def test_post_pod_phase_finishes_the_pod(client, node):
    r = await client.post("/sim/v1/pods/phase", json={"namespace": TRAINING[0], "name": TRAINING[1], "phase": "Succeeded"})
    assert r.status == 200, await r.text()
    assert (await r.json())["pod"]["phase"] == "Succeeded"
    pods = (await (await client.get("/sim/v1/pods")).json())["pods"]
    assert {p["name"]: p["phase"] for p in pods}[TRAINING[1]] == "Succeeded"


@pytest.mark.parametrize("body, status, field", [
    ({"namespace": "ml-training", "name": "llama-pretrain-0", "phase": "Running"}, 400, "phase"),
    ({"namespace": "ml-training", "name": "llama-pretrain-0"}, 400, "phase"),
    ({"namespace": "ml-training", "name": "llama-pretrain-0", "phase": ["Succeeded"]}, 400, "phase"),
    ({"namespace": "ml-training", "phase": "Succeeded"}, 400, "name"),
    ({"namespace": 3, "name": "llama-pretrain-0", "phase": "Succeeded"}, 400, "namespace"),
    ({"namespace": "ml-training", "name": "llama-pretrain-0", "phase": "Failed", "reason": "OOMKilled"}, 400, "reason"),
    ({"namespace": "ml-training", "name": "nope", "phase": "Succeeded"}, 404, None),
])
async def test_post_pod_phase_refuses_bad_input_and_changes_nothing(client, node, body, status, field):
    pods, processes = node.pods(), node.processes()
    r = await client.post("/sim/v1/pods/phase", json=body)
    assert r.status == status, await r.text()
    error = (await r.json())["error"]
    assert error.startswith(f"{field}: ") if field else "nope" in error
    assert node.pods() == pods and node.processes() == processes


async def test_post_pod_phase_twice_is_400_naming_phase(client, node):
    body = {"namespace": TRAINING[0], "name": TRAINING[1], "phase": "Succeeded"}
    assert (await client.post("/sim/v1/pods/phase", json=body)).status == 200
    r = await client.post("/sim/v1/pods/phase", json={**body, "phase": "Failed"})
    assert r.status == 400 and (await r.json())["error"].startswith("phase: ")
    assert _pod(node, *TRAINING).phase == "Succeeded"
