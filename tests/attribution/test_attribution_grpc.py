"""The kubelet pod-resources and CRI clients, over real unix sockets, against the simulator's servers."""

from __future__ import annotations

import asyncio
import os
import socket
import time

import grpc
import grpc.aio
import pytest

from runtimekit._proto.cri.runtime.v1 import api_pb2 as cri_pb
from runtimekit._proto.cri.runtime.v1 import api_pb2_grpc as cri_grpc
from runtimekit._proto.podresources.v1 import api_pb2_grpc as pr_grpc
from runtimekit.attribution.cri import ContainerInfo, CriClient, RuntimeVersion
from runtimekit.attribution.errors import SourceError, SourceUnavailable
from runtimekit.attribution.podresources import PodDevices, PodResourcesClient
from runtimekit.sim.cri import FakeCriServer
from runtimekit.sim.kubelet import FakePodResourcesServer
from runtimekit.sim.pods import SimContainer, SimDevice, SimPod

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
CID_A = "a" * 64
CID_B = "b" * 64
CID_C = "c" * 64

PODS = (
    SimPod(
        name="train-0",
        namespace="ml",
        uid="11111111-1111-1111-1111-111111111111",
        containers=(
            SimContainer("trainer", CID_A, (SimDevice(GPU, "GPU-0"), SimDevice(GPU, "GPU-1"))),
            SimContainer("sidecar", CID_B, (SimDevice(MIG, "MIG-7"), SimDevice(GPU, "GPU-2"))),
        ),
    ),
    SimPod(
        name="web",
        namespace="default",
        uid="22222222-2222-2222-2222-222222222222",
        containers=(SimContainer("nginx", CID_C),),
    ),
)
ALLOCATABLE = ("GPU-0", "GPU-1", "GPU-2", "GPU-3")


@pytest.fixture
async def kubelet(tmp_path):
    server = FakePodResourcesServer(
        lambda: PODS,
        str(tmp_path / "pod-resources" / "kubelet.sock"),
        allocatable=lambda: (*ALLOCATABLE, SimDevice(MIG, "MIG-7")),
    )
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def runtime(tmp_path):
    server = FakeCriServer(lambda: PODS, str(tmp_path / "containerd.sock"))
    await server.start()
    yield server
    await server.stop()


# -- pod-resources ---------------------------------------------------------------------------


async def test_list_gives_one_row_per_container_and_resource(kubelet):
    async with PodResourcesClient(kubelet.socket_path) as client:
        rows = await client.list()
    assert rows == [
        PodDevices("train-0", "ml", "trainer", GPU, ("GPU-0", "GPU-1")),
        PodDevices("train-0", "ml", "sidecar", MIG, ("MIG-7",)),
        PodDevices("train-0", "ml", "sidecar", GPU, ("GPU-2",)),
    ]
    assert all(isinstance(r.device_ids, tuple) for r in rows)


async def test_list_follows_the_pods_of_the_moment(tmp_path):
    pods = list(PODS)
    server = FakePodResourcesServer(lambda: pods, str(tmp_path / "k.sock"))
    async with server, PodResourcesClient(server.socket_path) as client:
        assert len(await client.list()) == 3
        pods.pop(0)
        assert await client.list() == []


async def test_allocatable_lists_every_device_id(kubelet):
    async with PodResourcesClient(kubelet.socket_path) as client:
        assert await client.allocatable() == [*ALLOCATABLE, "MIG-7"]
        assert await client.allocatable(GPU) == list(ALLOCATABLE)
        assert await client.allocatable(MIG) == ["MIG-7"]


async def test_get_one_pod_and_an_unknown_one(kubelet):
    async with PodResourcesClient(kubelet.socket_path) as client:
        assert await client.get("ml", "train-0") == await client.list()
        assert await client.get("default", "web") == []
        assert await client.get("ml", "nope") is None
        assert await client.get("default", "train-0") is None


async def test_endpoint_may_carry_the_unix_scheme(kubelet):
    for endpoint in (f"unix:{kubelet.socket_path}", f"unix://{kubelet.socket_path}"):
        async with PodResourcesClient(endpoint) as client:
            assert client.socket_path == kubelet.socket_path
            assert len(await client.list()) == 3


async def test_concurrent_calls_share_one_channel(kubelet):
    async with PodResourcesClient(kubelet.socket_path) as client:
        results = await asyncio.gather(*(client.list() for _ in range(20)))
    assert all(r == results[0] for r in results)
    assert kubelet.calls["List"] == 20


async def test_missing_socket_is_source_unavailable_at_once(tmp_path):
    path = str(tmp_path / "nowhere" / "kubelet.sock")
    client = PodResourcesClient(path, timeout=5.0)
    started = time.monotonic()
    with pytest.raises(SourceUnavailable) as info:
        await client.list()
    assert time.monotonic() - started < 0.5
    assert path in str(info.value)
    assert "kubelet pod-resources" in str(info.value)
    assert info.value.socket_path == path and info.value.code is None
    await client.close()


async def test_path_that_is_not_a_socket(tmp_path):
    path = tmp_path / "kubelet.sock"
    path.write_text("not a socket")
    async with PodResourcesClient(str(path)) as client:
        with pytest.raises(SourceUnavailable, match="not a socket"):
            await client.allocatable()


async def test_stale_socket_without_a_listener_fails_fast(tmp_path):
    path = str(tmp_path / "kubelet.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.close()  # the file stays: a kubelet that died without cleaning up
    async with PodResourcesClient(path, timeout=5.0) as client:
        started = time.monotonic()
        with pytest.raises(SourceUnavailable) as info:
            await client.list()
    assert time.monotonic() - started < 2.0
    assert info.value.code == "UNAVAILABLE"


async def test_client_recovers_after_the_kubelet_restarts(kubelet):
    async with PodResourcesClient(kubelet.socket_path, timeout=2.0) as client:
        assert len(await client.list()) == 3
        await kubelet.stop()
        assert not os.path.exists(kubelet.socket_path)
        with pytest.raises(SourceUnavailable):
            await client.list()
        await kubelet.start()
        assert len(await client.list()) == 3  # the very next call, no waiting out backoff


async def test_restart_between_two_calls_is_invisible(kubelet):
    async with PodResourcesClient(kubelet.socket_path, timeout=2.0) as client:
        assert len(await client.list()) == 3
        await kubelet.stop()
        await kubelet.start()
        started = time.monotonic()
        assert len(await client.list()) == 3
        assert time.monotonic() - started < 1.5


async def test_slow_kubelet_hits_the_deadline_then_recovers(kubelet):
    kubelet.delay_s = 5.0
    async with PodResourcesClient(kubelet.socket_path, timeout=0.3) as client:
        started = time.monotonic()
        with pytest.raises(SourceUnavailable) as info:
            await client.list()
        elapsed = time.monotonic() - started
        assert 0.25 < elapsed < 1.5
        assert info.value.code == "DEADLINE_EXCEEDED"
        assert "0.3s" in str(info.value)
        kubelet.delay_s = 0.0
        assert len(await client.list()) == 3


async def test_listener_that_never_speaks_is_bounded_by_the_timeout(tmp_path):
    path = str(tmp_path / "mute.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(8)  # accepts connections (the backlog) but never answers the HTTP/2 handshake
    try:
        async with PodResourcesClient(path, timeout=0.3) as client:
            started = time.monotonic()
            with pytest.raises(SourceUnavailable):
                await client.list()
            assert time.monotonic() - started < 1.5
    finally:
        sock.close()


async def test_timeout_must_be_positive():
    with pytest.raises(ValueError):
        PodResourcesClient("/x.sock", timeout=0)


async def test_an_answered_error_is_a_source_error_not_unavailable(runtime):
    # A CRI socket does not serve pod-resources: the server answers UNIMPLEMENTED.
    async with PodResourcesClient(runtime.socket_path) as client:
        with pytest.raises(SourceError) as info:
            await client.list()
    assert not isinstance(info.value, SourceUnavailable)
    assert info.value.code == "UNIMPLEMENTED"


class _RealKubeletGet(pr_grpc.PodResourcesListerServicer):
    """Get as the real kubelet answers an unknown pod: a plain Go error, status UNKNOWN."""

    async def Get(self, request, context):
        await context.abort(
            grpc.StatusCode.UNKNOWN, f"pod {request.pod_name} in namespace {request.pod_namespace} not found"
        )


async def test_get_unknown_pod_as_a_real_kubelet_answers_it(tmp_path):
    path = str(tmp_path / "real.sock")
    server = grpc.aio.server()
    pr_grpc.add_PodResourcesListerServicer_to_server(_RealKubeletGet(), server)
    server.add_insecure_port(f"unix:{path}")
    await server.start()
    try:
        async with PodResourcesClient(path) as client:
            assert await client.get("ml", "gone") is None
    finally:
        await server.stop(None)


# -- CRI -------------------------------------------------------------------------------------


async def test_list_containers_maps_kubelet_labels(runtime):
    async with CriClient(runtime.socket_path) as client:
        containers = await client.list_containers()
    assert containers == [
        ContainerInfo(CID_A, "trainer", "train-0", "ml", PODS[0].uid, "running"),
        ContainerInfo(CID_B, "sidecar", "train-0", "ml", PODS[0].uid, "running"),
        ContainerInfo(CID_C, "nginx", "web", "default", PODS[1].uid, "running"),
    ]


async def test_cri_version(runtime):
    async with CriClient(runtime.socket_path) as client:
        version = await client.version()
    assert version == RuntimeVersion("runtimekit-sim", version.runtime_version, "v1")


def _container(cid: str, state: int, labels: dict[str, str]) -> cri_pb.Container:
    return cri_pb.Container(
        id=cid, metadata=cri_pb.ContainerMetadata(name="meta-name"), state=state, labels=labels
    )


class _MixedRuntime(cri_grpc.RuntimeServiceServicer):
    """A runtime holding exited containers and one the kubelet did not create; ignores filters,
    so the client's own filtering is what is tested."""

    def __init__(self) -> None:
        self.requests: list[cri_pb.ListContainersRequest] = []

    async def ListContainers(self, request, context):
        self.requests.append(request)
        pod = {
            "io.kubernetes.pod.name": "p",
            "io.kubernetes.pod.namespace": "ns",
            "io.kubernetes.pod.uid": "uid-1",
        }
        return cri_pb.ListContainersResponse(
            containers=[
                _container("1" * 64, cri_pb.CONTAINER_RUNNING, {**pod, "io.kubernetes.container.name": "main"}),
                _container("2" * 64, cri_pb.CONTAINER_EXITED, {**pod, "io.kubernetes.container.name": "init"}),
                _container("3" * 64, cri_pb.CONTAINER_RUNNING, {"app": "not-from-kubelet"}),
                _container("4" * 64, cri_pb.CONTAINER_CREATED, pod),  # no container-name label
            ]
        )


async def test_running_only_by_default_and_kubelet_containers_only(tmp_path):
    path = str(tmp_path / "mixed.sock")
    servicer = _MixedRuntime()
    server = grpc.aio.server()
    cri_grpc.add_RuntimeServiceServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix:{path}")
    await server.start()
    try:
        async with CriClient(path) as client:
            running = await client.list_containers()
            everything = await client.list_containers(running_only=False)
    finally:
        await server.stop(None)
    assert running == [ContainerInfo("1" * 64, "main", "p", "ns", "uid-1", "running")]
    assert [(c.container_id[0], c.container_name, c.state) for c in everything] == [
        ("1", "main", "running"),
        ("2", "init", "exited"),
        ("4", "meta-name", "created"),  # falls back to the CRI metadata name
    ]
    # The running filter is also sent to the runtime; the second call sends none.
    assert servicer.requests[0].filter.state.state == cri_pb.CONTAINER_RUNNING
    assert servicer.requests[0].filter.HasField("state")
    assert not servicer.requests[1].HasField("filter")


async def test_cri_missing_socket_and_restart(tmp_path):
    path = str(tmp_path / "crio.sock")
    server = FakeCriServer(lambda: PODS, path)
    async with CriClient(path, timeout=2.0) as client:
        with pytest.raises(SourceUnavailable, match="CRI runtime.*crio.sock.*does not exist"):
            await client.list_containers()
        await server.start()
        assert len(await client.list_containers()) == 3
        await server.stop()
        with pytest.raises(SourceUnavailable):
            await client.version()
        await server.start()
        assert len(await client.list_containers()) == 3
        await server.stop()


async def test_cri_deadline(runtime):
    runtime.delay_s = 5.0
    async with CriClient(runtime.socket_path, timeout=0.2) as client:
        started = time.monotonic()
        with pytest.raises(SourceUnavailable, match="no answer within 0.2s"):
            await client.list_containers()
        assert time.monotonic() - started < 1.5


async def test_close_is_idempotent_and_the_client_reopens(kubelet):
    client = PodResourcesClient(kubelet.socket_path)
    await client.close()
    assert len(await client.list()) == 3
    await client.close()
    await client.close()
    assert len(await client.list()) == 3
    await client.close()


# -- the shared transport --------------------------------------------------------------------


def _unavailable() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details="connection reset"
    )


async def test_a_stale_channel_is_replaced_within_the_same_call(kubelet):
    """A kubelet killed without a GOAWAY leaves the channel failing: one retry on a new channel."""
    client = PodResourcesClient(kubelet.socket_path)
    assert len(await client.list()) == 3
    stale = client._stub

    class _Broken:
        async def List(self, request, timeout):
            raise _unavailable()

    client._stub = _Broken()
    assert len(await client.list()) == 3
    assert client._stub is not stale and not isinstance(client._stub, _Broken)
    await client.close()


async def test_a_fresh_channel_is_not_retried(kubelet):
    client = PodResourcesClient(kubelet.socket_path)
    made = []

    class _Broken:
        async def List(self, request, timeout):
            made.append(1)
            raise _unavailable()

    client._make_stub = lambda channel: _Broken()
    with pytest.raises(SourceUnavailable, match="connection reset"):
        await client.list()
    assert made == [1]
    await client.close()


def test_attribution_errors_are_the_shared_unix_grpc_errors(tmp_path):
    """attribution's vocabulary sits on runtimekit.grpc_unix (one transport for agent and simulator)."""
    from runtimekit import grpc_unix

    assert issubclass(SourceUnavailable, grpc_unix.UnixRpcUnavailable) and issubclass(SourceUnavailable, SourceError)
    assert issubclass(PodResourcesClient, grpc_unix.UnixRpcClient) and issubclass(FakeCriServer, grpc_unix.UnixGrpcServer)
    assert grpc_unix.socket_path_of("unix:///run/x.sock") == "/run/x.sock"
    not_a_socket = tmp_path / "plain"
    not_a_socket.write_text("x")
    with pytest.raises(FileExistsError):
        grpc_unix.remove_stale_socket(str(not_a_socket))
    grpc_unix.remove_stale_socket(str(tmp_path / "sub" / "absent.sock"))  # creates the directory, no error
    assert (tmp_path / "sub").is_dir()
