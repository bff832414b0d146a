"""``CriClient.list_pod_sandboxes`` over a real unix socket: every sandbox, ready or not, with the pod
it was made for (from its metadata); against the simulator's runtime and a raw servicer."""

from __future__ import annotations

import grpc.aio

from runtimekit._proto.cri.runtime.v1 import api_pb2 as cri_pb
from runtimekit._proto.cri.runtime.v1 import api_pb2_grpc as cri_grpc
from runtimekit.attribution.cri import CriClient, SandboxInfo
from runtimekit.sim.cri import FakeCriServer, sandbox_id
from runtimekit.sim.pods import SimContainer, SimPod

RUNNING = SimPod("web", "default", "11111111-1111-1111-1111-111111111111", (SimContainer("nginx", "a" * 64),))
DONE = SimPod("job-0", "batch", "22222222-2222-2222-2222-222222222222", (SimContainer("work", "b" * 64),),
              phase="Succeeded")


async def test_sandboxes_of_the_simulators_runtime_ready_or_not(tmp_path):
    server = FakeCriServer(lambda: (RUNNING, DONE), str(tmp_path / "containerd.sock"))
    await server.start()
    try:
        async with CriClient(server.socket_path) as client:
            sandboxes = await client.list_pod_sandboxes()
            containers = await client.list_containers(running_only=False)
    finally:
        await server.stop()
    assert sandboxes == [
        SandboxInfo(sandbox_id(RUNNING), "web", "default", RUNNING.uid, True),
        SandboxInfo(sandbox_id(DONE), "job-0", "batch", DONE.uid, False),
    ]
    assert [(c.pod_uid, c.state) for c in containers] == [(RUNNING.uid, "running"), (DONE.uid, "exited")]


class _Sandboxes(cri_grpc.RuntimeServiceServicer):
    """A runtime with a sandbox the kubelet did not make (no pod UID); records the requests."""

    def __init__(self) -> None:
        self.requests: list[cri_pb.ListPodSandboxRequest] = []

    async def ListPodSandbox(self, request, context):
        self.requests.append(request)
        meta = cri_pb.PodSandboxMetadata
        return cri_pb.ListPodSandboxResponse(items=[
            cri_pb.PodSandbox(id="1" * 64, metadata=meta(name="p", namespace="ns", uid="uid-1", attempt=1),
                              state=cri_pb.SANDBOX_READY),
            cri_pb.PodSandbox(id="2" * 64, metadata=meta(name="p", namespace="ns", uid="uid-1"),
                              state=cri_pb.SANDBOX_NOTREADY),
            cri_pb.PodSandbox(id="3" * 64, metadata=meta(name="crictl-runp"), state=cri_pb.SANDBOX_READY),
        ])


async def test_every_state_is_asked_for_and_sandboxes_without_a_pod_uid_are_skipped(tmp_path):
    path = str(tmp_path / "raw.sock")
    servicer = _Sandboxes()
    server = grpc.aio.server()
    cri_grpc.add_RuntimeServiceServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix:{path}")
    await server.start()
    try:
        async with CriClient(path) as client:
            sandboxes = await client.list_pod_sandboxes()
    finally:
        await server.stop(None)
    assert sandboxes == [SandboxInfo("1" * 64, "p", "ns", "uid-1", True), SandboxInfo("2" * 64, "p", "ns", "uid-1", False)]
    assert not servicer.requests[0].HasField("filter")
