"""The API's server: the socket's mode, its life cycle, the gRPC health service and reflection."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from pathlib import Path

import grpc.aio
import pytest
from api_fakes import make_state
from api_harness import Api, api_config
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from runtimekit.api import SERVICE_NAME, ApiServer
from runtimekit.api.server import check_tcp_listen
from runtimekit.grpc_unix import SocketInUse, private_socket, publish_socket, socket_answers


async def test_the_socket_is_mode_0600_whatever_the_umask(short_dir: Path) -> None:
    server = ApiServer(make_state(), None, api_config(short_dir))
    old = os.umask(0)  # a socket bound in place would be 0777 (srwxrwxrwx)
    try:
        await server.start()
    finally:
        os.umask(old)
    try:
        mode = os.stat(server.socket_path).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
        assert server.socket_path == str(short_dir / "runtimekit.sock")  # Config.api_socket's default
        assert sorted(os.listdir(short_dir)) == ["runtimekit.sock"]  # the private bind directory is gone
    finally:
        await server.stop()


async def test_stop_removes_the_socket_and_the_server_starts_again(short_dir: Path) -> None:
    server = ApiServer(make_state(), None, api_config(short_dir))
    await server.start()
    await server.stop()
    assert not os.path.exists(server.socket_path)
    await server.stop()  # idempotent
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"unix:{server.socket_path}") as channel:
            answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await server.stop()


async def test_stopping_after_the_supervisor_cancelled_its_wait_removes_the_socket(short_dir: Path) -> None:
    """As the supervisor stops the api component: its ``run`` (``wait``) is cancelled, then ``stop``."""
    server = ApiServer(make_state(), None, api_config(short_dir))
    await server.start()
    waiting = asyncio.create_task(server.wait())
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await server.stop()
    assert not os.path.exists(server.socket_path)


async def test_a_stale_socket_is_replaced_and_a_file_is_never_removed(short_dir: Path) -> None:
    path = short_dir / "runtimekit.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the socket file stays, as after a crash
    server = ApiServer(make_state(), None, api_config(short_dir))
    await server.start()
    await server.stop()
    path.write_text("not a socket")
    with pytest.raises(FileExistsError, match="is not a socket"):
        await server.start()
    assert path.read_text() == "not a socket"


async def test_a_second_server_never_takes_a_live_socket_and_a_stop_removes_only_its_own(short_dir: Path) -> None:
    """Two agents named the same api.socket: the second used to unlink the first's socket and serve
    in its place, and its exit then left the first with no socket at all."""
    first = ApiServer(make_state(), None, api_config(short_dir))
    await first.start()
    second = ApiServer(make_state(), None, api_config(short_dir))
    try:
        with pytest.raises(SocketInUse, match="a server answers on this socket"):
            await second.start()
        await second.stop()  # a server that never started removes nothing
        assert socket_answers(first.socket_path)
        # the first's socket replaced by another's (an operator's restart, say): the first's stop keeps it
        os.unlink(first.socket_path)
        other = socket.socket(socket.AF_UNIX)
        other.bind(first.socket_path)
        other.listen()
        await first.stop()
        assert socket_answers(first.socket_path)
        other.close()
    finally:
        await first.stop()


@pytest.mark.parametrize("service", ["", SERVICE_NAME])
async def test_the_health_service_says_serving(api: Api, service: str) -> None:
    stub = health_pb2_grpc.HealthStub(api.channel)
    answer = await stub.Check(health_pb2.HealthCheckRequest(service=service))
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_the_service_and_describes_its_files(api: Api) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(api.channel)
    requests = [reflection_pb2.ServerReflectionRequest(list_services=""),
                reflection_pb2.ServerReflectionRequest(file_containing_symbol="runtimekit.v1.CreateSliceRequest")]
    answers = [answer async for answer in stub.ServerReflectionInfo(iter(requests))]
    names = {service.name for service in answers[0].list_services_response.service}
    assert {"runtimekit.v1.AgentService", "grpc.health.v1.Health"} <= names
    assert SERVICE_NAME == "runtimekit.v1.AgentService"
    assert answers[1].file_descriptor_response.file_descriptor_proto  # the descriptors a client can build stubs from


async def test_tcp_without_a_readable_certificate_names_the_key(short_dir: Path) -> None:
    (short_dir / "web.yml").write_text(f"tls_server_config: {{cert_file: {short_dir}/missing.pem, key_file: {short_dir}/missing.key}}\n")
    with pytest.raises(ValueError, match=r"api.web_config_file: .*tls_server_config.cert_file: cannot read .*missing.pem"):
        api_config(short_dir, **{"api.tcp_listen": "127.0.0.1:0", "api.web_config_file": str(short_dir / "web.yml")})
    assert not os.path.exists(short_dir / "runtimekit.sock")


def test_a_tcp_port_held_by_another_process_or_the_http_listener_is_refused_before_the_start() -> None:
    """api.tcp_listen on a taken port used to start an agent whose API component failed at every
    restart, with a traceback each time; now the start is refused naming the key."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        with pytest.raises(ValueError, match=rf"api.tcp_listen 127.0.0.1:{taken}: cannot listen there \(Address already in use\)"):
            check_tcp_listen(f"127.0.0.1:{taken}", "127.0.0.1:9445")
    check_tcp_listen(f"127.0.0.1:{taken}", "127.0.0.1:9445")  # released: free again
    for http in (f"127.0.0.1:{taken}", f"0.0.0.0:{taken}"):
        with pytest.raises(ValueError, match="the agent's own HTTP listen address .* takes that port"):
            check_tcp_listen(f"127.0.0.1:{taken}", http)
    check_tcp_listen("127.0.0.1:0", "127.0.0.1:9445")  # any free port


def test_publishing_never_replaces_a_socket_published_meanwhile(short_dir: Path) -> None:
    """Two agents starting at once both find the path free; the second one to publish must not
    hide the first's socket (a rename would replace it)."""
    path = str(short_dir / "api.sock")
    first = socket.socket(socket.AF_UNIX)
    first.bind(path)
    first.listen()
    with private_socket(path) as bound, socket.socket(socket.AF_UNIX) as second:
        second.bind(bound)
        with pytest.raises(SocketInUse, match="another server put a socket there"):
            publish_socket(bound, path)
    assert socket_answers(path)
    first.close()
