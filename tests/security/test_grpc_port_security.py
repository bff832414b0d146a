"""runtimekit.v1's TCP port under a web configuration file, over real gRPC and real TLS: basic
credentials as metadata, client certificates, allowed SANs, the message-size limit, a slow
client, a new password and a rotated certificate without a restart; the unix socket unaffected."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]

from runtimekit import config as config_module
from runtimekit._proto.runtimekit.v1 import service_pb2, service_pb2_grpc
from runtimekit.api import ApiServer
from runtimekit.api.server import MAX_REQUEST_BYTES
from tests.api.api_fakes import make_state
from tests.security.pki import USER, basic, user_hash, write_web_config

HANDSHAKE_TIMEOUT = 0.5  # seconds: listener.header_timeout_seconds, the TCP port's handshake deadline


async def start(directory: Path, web_config: Path) -> ApiServer:
    config = config_module.load(None, {"state_dir": str(directory), "api.tcp_listen": "127.0.0.1:0",
                                       "listener.web_config_file": str(web_config),
                                       "listener.header_timeout_seconds": HANDSHAKE_TIMEOUT})
    server = ApiServer(make_state(), None, config)
    await server.start()
    return server


@pytest.fixture
async def server(pki: Path, short_dir: Path) -> AsyncIterator[ApiServer]:
    """Client certificates required and a basic auth user."""
    served = await start(short_dir, write_web_config(short_dir / "web.yml", pki, mtls=True, users={USER: user_hash()}))
    yield served
    await served.stop()


def credentials(pki: Path, certificate: str | None = "client") -> grpc.ChannelCredentials:
    if certificate is None:
        return grpc.ssl_channel_credentials((pki / "ca.pem").read_bytes())
    return grpc.ssl_channel_credentials((pki / "ca.pem").read_bytes(), (pki / f"{certificate}.key").read_bytes(),
                                        (pki / f"{certificate}.pem").read_bytes())


async def get_node(server: ApiServer, channel_credentials: grpc.ChannelCredentials,
                   authorization: str | None) -> grpc.StatusCode:
    metadata = (("authorization", authorization),) if authorization else None
    async with grpc.aio.secure_channel(f"127.0.0.1:{server.tcp_port}", channel_credentials) as channel:
        try:
            await service_pb2_grpc.AgentServiceStub(channel).GetNode(service_pb2.GetNodeRequest(), metadata=metadata,
                                                                     timeout=10)
        except grpc.aio.AioRpcError as error:
            return error.code()
    return grpc.StatusCode.OK


async def test_a_call_with_the_certificate_and_the_password_is_answered(pki, server):
    assert await get_node(server, credentials(pki), basic()) == grpc.StatusCode.OK


@pytest.mark.parametrize("authorization", [None, basic(password="wrong"), basic(user="nobody"), "Basic !!"],
                         ids=["none", "wrong-password", "unknown-user", "malformed"])
async def test_missing_or_wrong_credentials_are_unauthenticated(pki, server, authorization):
    assert await get_node(server, credentials(pki), authorization) == grpc.StatusCode.UNAUTHENTICATED


async def test_a_stream_needs_the_credentials_too(pki, server):
    async with grpc.aio.secure_channel(f"127.0.0.1:{server.tcp_port}", credentials(pki)) as channel:
        stub = service_pb2_grpc.AgentServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in stub.WatchHealth(service_pb2.WatchHealthRequest(), timeout=10):
                pass
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        stream = stub.WatchHealth(service_pb2.WatchHealthRequest(), metadata=(("authorization", basic()),), timeout=10)
        assert (await stream.read()).HasField("health")
        stream.cancel()


async def test_the_health_service_needs_no_password(pki, server):
    async with grpc.aio.secure_channel(f"127.0.0.1:{server.tcp_port}", credentials(pki)) as channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("certificate", [None, "rogue"], ids=["no-certificate", "untrusted-certificate"])
async def test_a_client_without_a_trusted_certificate_is_refused(pki, server, certificate):
    assert await get_node(server, credentials(pki, certificate), basic()) == grpc.StatusCode.UNAVAILABLE


async def test_the_unix_socket_needs_no_credentials(server):
    async with grpc.aio.insecure_channel(f"unix:{server.socket_path}") as channel:
        await service_pb2_grpc.AgentServiceStub(channel).GetNode(service_pb2.GetNodeRequest(), timeout=10)


async def test_only_the_allowed_sans_get_in(pki, short_dir):
    served = await start(short_dir, write_web_config(short_dir / "web.yml", pki, mtls=True,
                                                     client_allowed_sans=["scraper.example"]))
    try:
        assert await get_node(served, credentials(pki, "client"), None) == grpc.StatusCode.OK
        assert await get_node(served, credentials(pki, "other"), None) == grpc.StatusCode.PERMISSION_DENIED
    finally:
        await served.stop()


async def test_an_oversized_request_is_refused(pki, server):
    metadata = (("authorization", basic()),)
    async with grpc.aio.secure_channel(f"127.0.0.1:{server.tcp_port}", credentials(pki)) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await service_pb2_grpc.AgentServiceStub(channel).GetSlice(
                service_pb2.GetSliceRequest(slice_id="x" * (MAX_REQUEST_BYTES + 1)), metadata=metadata, timeout=10)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_client_that_never_finishes_its_handshake_is_cut(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.tcp_port)
    writer.write(b"\x16\x03\x01")  # the first bytes of a ClientHello, and then nothing
    await writer.drain()
    started = time.monotonic()
    try:
        async with asyncio.timeout(HANDSHAKE_TIMEOUT + 10):
            while await reader.read(65536):
                pass
    except ConnectionError:
        pass
    writer.close()
    assert time.monotonic() - started < HANDSHAKE_TIMEOUT + 10


async def test_a_new_password_and_a_new_client_ca_apply_without_a_restart(pki, short_dir):
    web_config = write_web_config(short_dir / "web.yml", pki, mtls=True, users={USER: user_hash("first")})
    served = await start(short_dir, web_config)
    try:
        assert await get_node(served, credentials(pki), basic(password="first")) == grpc.StatusCode.OK
        write_web_config(web_config, pki, mtls=True, users={USER: user_hash("second")})
        assert await get_node(served, credentials(pki), basic(password="first")) == grpc.StatusCode.UNAUTHENTICATED
        assert await get_node(served, credentials(pki), basic(password="second")) == grpc.StatusCode.OK
        assert await get_node(served, credentials(pki, "rogue"), basic(password="second")) == grpc.StatusCode.UNAVAILABLE
        web_config.write_text(web_config.read_text().replace(str(pki / "ca.pem"), str(pki / "rogue-ca.pem")))
        assert await get_node(served, credentials(pki, "rogue"), basic(password="second")) == grpc.StatusCode.OK
        assert await get_node(served, credentials(pki), basic(password="second")) == grpc.StatusCode.UNAVAILABLE
    finally:
        await served.stop()


@pytest.mark.parametrize("lowering", ["emptied", "users-removed", "allowed-sans-removed", "client-certificates-off"])
async def test_a_reload_that_lowers_the_protection_fails_closed_until_restored(pki, short_dir, lowering):
    web_config = short_dir / "web.yml"
    full = {"mtls": True, "users": {USER: user_hash()}, "client_allowed_sans": ["scraper.example"]}
    served = await start(short_dir, write_web_config(web_config, pki, **full))
    try:
        assert await get_node(served, credentials(pki), basic()) == grpc.StatusCode.OK
        if lowering == "emptied":
            web_config.write_text("")
        else:
            lowered = dict(full)
            del lowered[{"users-removed": "users", "allowed-sans-removed": "client_allowed_sans",
                         "client-certificates-off": "mtls"}[lowering]]
            if lowering == "client-certificates-off":
                del lowered["client_allowed_sans"]  # it needs client certificates
            write_web_config(web_config, pki, **lowered)
        assert await get_node(served, credentials(pki), basic()) == grpc.StatusCode.UNAVAILABLE
        assert await get_node(served, credentials(pki, "other"), None) == grpc.StatusCode.UNAVAILABLE
        write_web_config(web_config, pki, **full)
        assert await get_node(served, credentials(pki), basic()) == grpc.StatusCode.OK
    finally:
        await served.stop()


async def test_client_certificates_required_by_a_reload_refuse_calls_without_one_until_a_restart(pki, short_dir):
    web_config = write_web_config(short_dir / "web.yml", pki, users={USER: user_hash()})
    served = await start(short_dir, web_config)
    try:
        assert await get_node(served, credentials(pki, None), basic()) == grpc.StatusCode.OK
        write_web_config(web_config, pki, mtls=True, users={USER: user_hash()})
        assert await get_node(served, credentials(pki, None), basic()) == grpc.StatusCode.UNAUTHENTICATED
    finally:
        await served.stop()
