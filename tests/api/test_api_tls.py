"""runtimekit.v1 on TCP with TLS, and with mutual TLS: certificates made by the openssl CLI for
the test (a CA, a server certificate for 127.0.0.1, a client certificate)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest
from api_fakes import make_state
from api_harness import api_config

from runtimekit._proto.runtimekit.v1 import service_pb2, service_pb2_grpc
from runtimekit.api import ApiServer

CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _sign(openssl: str, folder: Path, name: str, extensions: str) -> None:
    run = lambda *args: subprocess.run([openssl, *args], check=True, capture_output=True, cwd=folder)  # noqa: E731
    run("req", *CURVE, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
    (folder / f"{name}.ext").write_text(extensions)
    run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext")


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory, require_tool: Callable[..., str]) -> Iterator[Path]:
    """ca.pem/ca.key, server.pem/server.key (127.0.0.1), client.pem/client.key, all signed by the CA."""
    openssl = require_tool("openssl", "openssl")
    folder = tmp_path_factory.mktemp("tls")
    subprocess.run([openssl, "req", "-x509", *CURVE, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=test-ca",
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
                   check=True, capture_output=True, cwd=folder)
    _sign(openssl, folder, "server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _sign(openssl, folder, "client", "extendedKeyUsage=clientAuth\n")
    yield folder


async def _serve(short_dir: Path, certificates: Path, mutual: bool) -> ApiServer:
    tls = {"api.tcp_listen": "127.0.0.1:0", "api.tls_cert_file": str(certificates / "server.pem"),
           "api.tls_key_file": str(certificates / "server.key")}
    if mutual:
        tls["api.tls_client_ca_file"] = str(certificates / "ca.pem")
    server = ApiServer(make_state(), None, api_config(short_dir, **tls))
    await server.start()
    assert server.tcp_port
    return server


async def _get_node(server: ApiServer, credentials: grpc.ChannelCredentials) -> str:
    async with grpc.aio.secure_channel(f"127.0.0.1:{server.tcp_port}", credentials) as channel:
        node = (await service_pb2_grpc.AgentServiceStub(channel).GetNode(service_pb2.GetNodeRequest(), timeout=10)).node
    return node.devices[0].ref.uuid


async def test_tls_serves_a_client_that_trusts_the_ca_and_refuses_one_that_does_not(
    short_dir: Path, certificates: Path
) -> None:
    server = await _serve(short_dir, certificates, mutual=False)
    try:
        ca = (certificates / "ca.pem").read_bytes()
        assert (await _get_node(server, grpc.ssl_channel_credentials(root_certificates=ca))).startswith("GPU-")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _get_node(server, grpc.ssl_channel_credentials())  # the system's roots: the CA is unknown
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop()


async def test_mutual_tls_needs_a_client_certificate_from_the_ca(short_dir: Path, certificates: Path) -> None:
    server = await _serve(short_dir, certificates, mutual=True)
    try:
        ca = (certificates / "ca.pem").read_bytes()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _get_node(server, grpc.ssl_channel_credentials(root_certificates=ca))  # no client certificate
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        with_certificate = grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=(certificates / "client.key").read_bytes(),
            certificate_chain=(certificates / "client.pem").read_bytes())
        assert (await _get_node(server, with_certificate)).startswith("GPU-")
    finally:
        await server.stop()
