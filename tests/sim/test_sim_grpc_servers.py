"""The simulator's fake kubelet pod-resources and CRI servers, checked with raw gRPC stubs.

Also pins the wire contract (method paths, field numbers) to upstream's, so a drift in
proto/ that would break talking to a real kubelet or containerd fails here.
"""

from __future__ import annotations

import os
import socket

import grpc
import grpc.aio
import pytest

from runtimekit._proto.cri.runtime.v1 import api_pb2 as cri_pb
from runtimekit._proto.cri.runtime.v1 import api_pb2_grpc as cri_grpc
from runtimekit._proto.podresources.v1 import api_pb2 as pr_pb
from runtimekit._proto.podresources.v1 import api_pb2_grpc as pr_grpc
from runtimekit.sim.cri import FakeCriServer, sandbox_id
from runtimekit.sim.kubelet import FakePodResourcesServer
from runtimekit.sim.pods import SimContainer, SimDevice, SimPod

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-3g.40gb"

POD_A = SimPod(
    name="train-0",
    namespace="ml",
    uid="aaaaaaaa-0000-0000-0000-000000000001",
    containers=(
        SimContainer("trainer", "ab" + "1" * 62, (SimDevice(GPU, "GPU-0"), SimDevice(MIG, "MIG-9"), SimDevice(GPU, "GPU-1"))),
        SimContainer("logger", "ab" + "2" * 62),
    ),
)
POD_B = SimPod(
    name="infer",
    namespace="serve",
    uid="bbbbbbbb-0000-0000-0000-000000000002",
    containers=(SimContainer("server", "cd" + "3" * 62, (SimDevice(GPU, "GPU-2"),), image="registry.example/serve:1"),),
)
PODS = (POD_A, POD_B)


@pytest.fixture
async def kubelet(tmp_path):
    server = FakePodResourcesServer(
        lambda: PODS,
        str(tmp_path / "pod-resources" / "kubelet.sock"),
        allocatable=lambda: ("GPU-0", "GPU-1", SimDevice(MIG, "MIG-9"), "GPU-2"),
    )
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def runtime(tmp_path):
    server = FakeCriServer(lambda: PODS, str(tmp_path / "containerd.sock"), created_at_ns=1_700_000_000_000_000_000)
    await server.start()
    yield server
    await server.stop()


# -- the wire contract -----------------------------------------------------------------------

# (message, field, number) from kubernetes staging k8s.io/kubelet/pkg/apis/podresources/v1/api.proto
PODRESOURCES_FIELDS = [
    ("ListPodResourcesResponse", "pod_resources", 1),
    ("PodResources", "name", 1),
    ("PodResources", "namespace", 2),
    ("PodResources", "containers", 3),
    ("ContainerResources", "name", 1),
    ("ContainerResources", "devices", 2),
    ("ContainerResources", "cpu_ids", 3),
    ("ContainerResources", "memory", 4),
    ("ContainerResources", "dynamic_resources", 5),
    ("ContainerDevices", "resource_name", 1),
    ("ContainerDevices", "device_ids", 2),
    ("ContainerDevices", "topology", 3),
    ("TopologyInfo", "nodes", 1),
    ("NUMANode", "ID", 1),
    ("ContainerMemory", "memory_type", 1),
    ("ContainerMemory", "size", 2),
    ("ContainerMemory", "topology", 3),
    ("AllocatableResourcesResponse", "devices", 1),
    ("AllocatableResourcesResponse", "cpu_ids", 2),
    ("AllocatableResourcesResponse", "memory", 3),
    ("DynamicResource", "claim_name", 2),
    ("DynamicResource", "claim_namespace", 3),
    ("DynamicResource", "claim_resources", 4),
    ("ClaimResource", "cdi_devices", 1),
    ("ClaimResource", "driver_name", 2),
    ("ClaimResource", "pool_name", 3),
    ("ClaimResource", "device_name", 4),
    ("ClaimResource", "share_id", 5),
    ("CDIDevice", "name", 1),
    ("GetPodResourcesRequest", "pod_name", 1),
    ("GetPodResourcesRequest", "pod_namespace", 2),
    ("GetPodResourcesResponse", "pod_resources", 1),
]

# (message, field, number) from k8s.io/cri-api/pkg/apis/runtime/v1/api.proto
CRI_FIELDS = [
    ("ListContainersRequest", "filter", 1),
    ("ContainerFilter", "id", 1),
    ("ContainerFilter", "state", 2),
    ("ContainerFilter", "pod_sandbox_id", 3),
    ("ContainerFilter", "label_selector", 4),
    ("ContainerStateValue", "state", 1),
    ("ListContainersResponse", "containers", 1),
    ("Container", "id", 1),
    ("Container", "pod_sandbox_id", 2),
    ("Container", "metadata", 3),
    ("Container", "image", 4),
    ("Container", "image_ref", 5),
    ("Container", "state", 6),
    ("Container", "created_at", 7),
    ("Container", "labels", 8),
    ("Container", "annotations", 9),
    ("Container", "image_id", 10),
    ("ContainerMetadata", "name", 1),
    ("ContainerMetadata", "attempt", 2),
    ("ImageSpec", "image", 1),
    ("ImageSpec", "annotations", 2),
    ("ImageSpec", "user_specified_image", 18),
    ("ImageSpec", "runtime_handler", 19),
    ("VersionRequest", "version", 1),
    ("VersionResponse", "version", 1),
    ("VersionResponse", "runtime_name", 2),
    ("VersionResponse", "runtime_version", 3),
    ("VersionResponse", "runtime_api_version", 4),
    ("ListPodSandboxRequest", "filter", 1),
    ("PodSandboxFilter", "id", 1),
    ("PodSandboxFilter", "state", 2),
    ("PodSandboxFilter", "label_selector", 3),
    ("PodSandboxStateValue", "state", 1),
    ("ListPodSandboxResponse", "items", 1),
    ("PodSandbox", "id", 1),
    ("PodSandbox", "metadata", 2),
    ("PodSandbox", "state", 3),
    ("PodSandbox", "created_at", 4),
    ("PodSandbox", "labels", 5),
    ("PodSandbox", "annotations", 6),
    ("PodSandbox", "runtime_handler", 7),
    ("PodSandboxMetadata", "name", 1),
    ("PodSandboxMetadata", "uid", 2),
    ("PodSandboxMetadata", "namespace", 3),
    ("PodSandboxMetadata", "attempt", 4),
]


@pytest.mark.parametrize(("module", "table"), [(pr_pb, PODRESOURCES_FIELDS), (cri_pb, CRI_FIELDS)])
def test_field_numbers_match_upstream(module, table):
    for message, field, number in table:
        descriptor = module.DESCRIPTOR.message_types_by_name[message]
        assert descriptor.fields_by_name[field].number == number, (message, field)


def test_packages_enums_and_method_paths_match_upstream():
    assert pr_pb.DESCRIPTOR.package == "v1"
    assert cri_pb.DESCRIPTOR.package == "runtime.v1"
    lister = pr_pb.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert [m.name for m in lister.methods] == ["List", "GetAllocatableResources", "Get"]
    assert lister.full_name == "v1.PodResourcesLister"
    runtime = cri_pb.DESCRIPTOR.services_by_name["RuntimeService"]
    assert runtime.full_name == "runtime.v1.RuntimeService"
    assert {m.name for m in runtime.methods} == {"Version", "ListPodSandbox", "ListContainers"}
    assert [(v.name, v.number) for v in cri_pb.ContainerState.DESCRIPTOR.values] == [
        ("CONTAINER_CREATED", 0),
        ("CONTAINER_RUNNING", 1),
        ("CONTAINER_EXITED", 2),
        ("CONTAINER_UNKNOWN", 3),
    ]
    assert [(v.name, v.number) for v in cri_pb.PodSandboxState.DESCRIPTOR.values] == [
        ("SANDBOX_READY", 0),
        ("SANDBOX_NOTREADY", 1),
    ]
    share_id = pr_pb.ClaimResource.DESCRIPTOR.fields_by_name["share_id"]
    assert share_id.has_presence  # proto3 optional, as upstream


async def test_list_answers_on_the_upstream_method_path(kubelet):
    async with grpc.aio.insecure_channel(kubelet.endpoint) as channel:
        call = channel.unary_unary(
            "/v1.PodResourcesLister/List",
            request_serializer=pr_pb.ListPodResourcesRequest.SerializeToString,
            response_deserializer=pr_pb.ListPodResourcesResponse.FromString,
        )
        response = await call(pr_pb.ListPodResourcesRequest(), timeout=5)
    assert [p.name for p in response.pod_resources] == ["train-0", "infer"]


# -- fake kubelet ----------------------------------------------------------------------------


async def test_list_shapes_pods_as_the_kubelet_does(kubelet):
    async with grpc.aio.insecure_channel(kubelet.endpoint) as channel:
        response = await pr_grpc.PodResourcesListerStub(channel).List(pr_pb.ListPodResourcesRequest(), timeout=5)
    train, infer = response.pod_resources
    assert (train.name, train.namespace) == ("train-0", "ml")
    trainer, logger = train.containers
    assert trainer.name == "trainer"
    assert [(d.resource_name, list(d.device_ids)) for d in trainer.devices] == [
        (GPU, ["GPU-0", "GPU-1"]),  # one ContainerDevices per resource
        (MIG, ["MIG-9"]),
    ]
    assert logger.name == "logger" and len(logger.devices) == 0  # listed, without devices
    assert [list(d.device_ids) for d in infer.containers[0].devices] == [["GPU-2"]]
    assert kubelet.calls["List"] == 1


async def test_allocatable_is_one_entry_per_device(kubelet):
    async with grpc.aio.insecure_channel(kubelet.endpoint) as channel:
        response = await pr_grpc.PodResourcesListerStub(channel).GetAllocatableResources(
            pr_pb.AllocatableResourcesRequest(), timeout=5
        )
    assert [(d.resource_name, list(d.device_ids)) for d in response.devices] == [
        (GPU, ["GPU-0"]),
        (GPU, ["GPU-1"]),
        (MIG, ["MIG-9"]),
        (GPU, ["GPU-2"]),
    ]


async def test_get_known_pod_and_not_found(kubelet):
    async with grpc.aio.insecure_channel(kubelet.endpoint) as channel:
        stub = pr_grpc.PodResourcesListerStub(channel)
        response = await stub.Get(pr_pb.GetPodResourcesRequest(pod_name="infer", pod_namespace="serve"), timeout=5)
        assert response.pod_resources.name == "infer"
        assert response.pod_resources.containers[0].devices[0].device_ids == ["GPU-2"]
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Get(pr_pb.GetPodResourcesRequest(pod_name="infer", pod_namespace="ml"), timeout=5)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert info.value.details() == "pod infer in namespace ml not found"


# -- fake CRI runtime ------------------------------------------------------------------------


async def _list(runtime, **filter_fields) -> list[cri_pb.Container]:
    request = cri_pb.ListContainersRequest()
    if filter_fields:
        request.filter.CopyFrom(cri_pb.ContainerFilter(**filter_fields))
    async with grpc.aio.insecure_channel(runtime.endpoint) as channel:
        response = await cri_grpc.RuntimeServiceStub(channel).ListContainers(request, timeout=5)
    return list(response.containers)


async def test_list_containers_carries_kubelet_labels(runtime):
    containers = await _list(runtime)
    assert [c.id for c in containers] == [c.container_id for p in PODS for c in p.containers]
    server = containers[2]
    assert server.state == cri_pb.CONTAINER_RUNNING
    assert server.pod_sandbox_id == sandbox_id(POD_B) and len(server.pod_sandbox_id) == 64
    assert (server.metadata.name, server.metadata.attempt) == ("server", 0)
    assert dict(server.labels) == {
        "io.kubernetes.container.name": "server",
        "io.kubernetes.pod.name": "infer",
        "io.kubernetes.pod.namespace": "serve",
        "io.kubernetes.pod.uid": POD_B.uid,
    }
    assert server.image.user_specified_image == "registry.example/serve:1"
    assert server.image_ref.startswith("sha256:") and server.image.image == server.image_ref
    assert server.created_at == 1_700_000_000_000_000_000
    assert server.annotations["io.kubernetes.container.restartCount"] == "0"


async def test_container_filters(runtime):
    trainer, logger = (c.container_id for c in POD_A.containers)
    ids = lambda cs: [c.id for c in cs]  # noqa: E731
    assert ids(await _list(runtime, id=trainer)) == [trainer]
    assert ids(await _list(runtime, id=trainer[:12])) == [trainer]  # unique prefix, as containerd
    assert ids(await _list(runtime, id="ab")) == []  # ambiguous prefix
    assert ids(await _list(runtime, id="ff")) == []
    assert ids(await _list(runtime, pod_sandbox_id=sandbox_id(POD_A))) == [trainer, logger]
    assert len(await _list(runtime, pod_sandbox_id=sandbox_id(POD_B)[:10])) == 1
    running = cri_pb.ContainerStateValue(state=cri_pb.CONTAINER_RUNNING)
    exited = cri_pb.ContainerStateValue(state=cri_pb.CONTAINER_EXITED)
    assert len(await _list(runtime, state=running)) == 3
    assert await _list(runtime, state=exited) == []
    created = cri_pb.ContainerStateValue(state=cri_pb.CONTAINER_CREATED)  # 0: set, so it filters
    assert await _list(runtime, state=created) == []
    assert ids(await _list(runtime, label_selector={"io.kubernetes.pod.namespace": "ml"})) == [trainer, logger]
    assert ids(
        await _list(
            runtime,
            label_selector={"io.kubernetes.pod.namespace": "ml", "io.kubernetes.container.name": "logger"},
        )
    ) == [logger]
    assert await _list(runtime, label_selector={"io.kubernetes.pod.namespace": "ml", "x": "y"}) == []
    # Fields are ANDed.
    assert await _list(runtime, id=trainer, pod_sandbox_id=sandbox_id(POD_B)) == []
    assert ids(await _list(runtime, id=logger, state=running, label_selector={"io.kubernetes.pod.name": "train-0"})) == [logger]


async def test_version(runtime):
    async with grpc.aio.insecure_channel(runtime.endpoint) as channel:
        response = await cri_grpc.RuntimeServiceStub(channel).Version(cri_pb.VersionRequest(version="v1"), timeout=5)
    assert (response.runtime_name, response.runtime_api_version) == ("runtimekit-sim", "v1")


async def test_unserved_cri_rpc_is_unimplemented(runtime):
    async with grpc.aio.insecure_channel(runtime.endpoint) as channel:
        call = channel.unary_unary("/runtime.v1.RuntimeService/ContainerStatus")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call(b"", timeout=5)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


# -- lifecycle -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["kubelet", "cri"])
async def test_stop_removes_the_socket_and_start_again_serves(tmp_path, kind):
    path = str(tmp_path / "s.sock")
    server = FakePodResourcesServer(lambda: PODS, path) if kind == "kubelet" else FakeCriServer(lambda: PODS, path)
    for _ in range(3):
        await server.start()
        assert server.running and os.path.exists(path)
        await server.stop()
        assert not server.running and not os.path.exists(path)
    await server.stop()  # idempotent


async def test_start_removes_a_stale_socket(tmp_path):
    path = str(tmp_path / "kubelet.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()
    async with FakePodResourcesServer(lambda: PODS, path) as server:
        async with grpc.aio.insecure_channel(server.endpoint) as channel:
            response = await pr_grpc.PodResourcesListerStub(channel).List(pr_pb.ListPodResourcesRequest(), timeout=5)
    assert len(response.pod_resources) == 2


async def test_start_refuses_to_remove_a_regular_file(tmp_path):
    path = tmp_path / "kubelet.sock"
    path.write_text("precious")
    server = FakeCriServer(lambda: PODS, str(path))
    with pytest.raises(FileExistsError):
        await server.start()
    assert path.read_text() == "precious" and not server.running


async def test_double_start_is_an_error(kubelet):
    with pytest.raises(RuntimeError, match="already serving"):
        await kubelet.start()
