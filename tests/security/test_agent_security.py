"""The agent as it runs (``runtimekit serve --sim``) with a web configuration file asking for client
certificates and a password: /metrics over TLS with a client certificate, everything else refused;
the gRPC TCP port under the same file; the simulator's control routes loopback-only and behind the
same credentials; ``runtimekit status`` reading it with the CA, a client certificate and the
password from the environment."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml

from runtimekit._proto.runtimekit.v1 import service_pb2, service_pb2_grpc
from runtimekit.cli import main
from tests.agent_process import ROOT, free_port
from tests.security.pki import PASSWORD, USER, basic, client_context, user_hash, write_web_config


class TlsAgent:
    def __init__(self, process: subprocess.Popen, port: int, grpc_port: int, log: Path) -> None:
        self.process, self.url, self.grpc_port, self.log = process, f"https://127.0.0.1:{port}", grpc_port, log

    def get(self, path: str, context: ssl.SSLContext, headers: dict[str, str] | None = None,
            data: bytes | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(self.url + path, headers=headers or {}, data=data)
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()


@pytest.fixture(scope="module")
def agent(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsAgent]:
    folder = tmp_path_factory.mktemp("agent")
    web_config = write_web_config(folder / "web.yml", pki, mtls=True, users={USER: user_hash()})
    port, grpc_port = free_port(), free_port()
    (folder / "config.yaml").write_text(yaml.safe_dump({
        "listener": {"web_config_file": str(web_config)}, "api": {"tcp_listen": f"127.0.0.1:{grpc_port}"}}))
    log = folder / "agent.log"
    with open(log, "w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "runtimekit.cli", "serve", "--sim", "dgx-h100", "--config", str(folder / "config.yaml"),
             "--listen", f"127.0.0.1:{port}", "--state-dir", str(folder / "state")],
            cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=output, stderr=subprocess.STDOUT)
    served = TlsAgent(process, port, grpc_port, log)
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, log.read_text()
        try:
            if served.get("/readyz", client_context(pki))[0] == 200:
                break
        except OSError:
            pass
        assert time.monotonic() < deadline, f"the agent was not ready:\n{log.read_text()}"
        time.sleep(0.2)
    yield served
    process.send_signal(signal.SIGTERM)
    process.wait(15)
    assert "Traceback" not in log.read_text()


def test_metrics_over_tls_with_a_client_certificate(pki, agent):
    status, body = agent.get("/metrics", client_context(pki), {"Authorization": basic()})
    assert status == 200
    assert b"runtimekit_gpu_info{" in body


@pytest.mark.parametrize("path", ["/metrics", "/api/v1/health", "/", "/sim/v1/faults"])
@pytest.mark.parametrize("authorization", [None, basic(password="wrong")], ids=["no-auth", "wrong-password"])
def test_every_route_but_the_probes_needs_the_password(pki, agent, path, authorization):
    headers = {"Authorization": authorization} if authorization else {}
    status, body = agent.get(path, client_context(pki), headers)
    assert status == 401
    assert b"GPU-" not in body


@pytest.mark.parametrize("certificate", [None, "rogue"], ids=["no-certificate", "untrusted-certificate"])
def test_no_route_is_served_without_a_trusted_client_certificate(pki, agent, certificate):
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        agent.get("/healthz", client_context(pki, certificate), {"Authorization": basic()})


def test_an_oversized_body_is_refused(pki, agent):
    status, _ = agent.get("/sim/v1/faults", client_context(pki), {"Authorization": basic()}, data=b"{}" + b" " * (2 << 20))
    assert status == 413


def test_the_simulators_routes_answer_loopback_peers_with_the_credentials(pki, agent):
    status, body = agent.get("/sim/v1/faults", client_context(pki), {"Authorization": basic()})
    assert status == 200, body


def test_the_grpc_port_takes_the_same_certificates_and_password(pki, agent):
    credentials = grpc.ssl_channel_credentials((pki / "ca.pem").read_bytes(), (pki / "client.key").read_bytes(),
                                               (pki / "client.pem").read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{agent.grpc_port}", credentials) as channel:
        stub = service_pb2_grpc.AgentServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetNode(service_pb2.GetNodeRequest(), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        node = stub.GetNode(service_pb2.GetNodeRequest(), metadata=(("authorization", basic()),), timeout=10).node
        assert len(node.devices) == 8


def _status(pki: Path, agent: TlsAgent, *flags: str) -> list[str]:
    address = agent.url.removeprefix("https://")  # HOST:PORT: read as https with --ca-file
    return ["status", "--address", address, "--ca-file", str(pki / "ca.pem"), "--client-cert", str(pki / "client.pem"),
            "--client-key", str(pki / "client.key"), *flags]


def test_status_reads_the_agent_with_its_ca_a_client_certificate_and_the_password(pki, agent, monkeypatch, capsys):
    monkeypatch.setenv("RUNTIMEKIT_USERNAME", USER)
    monkeypatch.setenv("RUNTIMEKIT_PASSWORD", PASSWORD)
    assert main(_status(pki, agent)) == 0
    out, err = capsys.readouterr()
    assert err == "" and "simulated node dgx-h100" in out and "8 GPUs" in out


def test_status_without_the_password_says_how_to_give_it(pki, agent, monkeypatch, capsys):
    monkeypatch.delenv("RUNTIMEKIT_USERNAME", raising=False)
    monkeypatch.delenv("RUNTIMEKIT_PASSWORD", raising=False)
    assert main(_status(pki, agent)) == 1
    assert "answered HTTP 401 Unauthorized (set RUNTIMEKIT_USERNAME and RUNTIMEKIT_PASSWORD)" in capsys.readouterr().err


@pytest.mark.parametrize("flags, variables, message", [
    ((), {"RUNTIMEKIT_USERNAME": USER}, "RUNTIMEKIT_USERNAME and RUNTIMEKIT_PASSWORD: set both or neither"),
    (("--ca-file", "/nonexistent/ca.pem"), {}, "--ca-file: cannot use /nonexistent/ca.pem"),
    (("--client-cert", "ca.key"), {}, "--client-cert: cannot use"),
], ids=["half-the-credentials", "missing-ca", "key-of-another-certificate"])
def test_status_names_an_unusable_flag_or_variable_and_exits_2(pki, agent, monkeypatch, capsys, flags, variables, message):
    monkeypatch.delenv("RUNTIMEKIT_PASSWORD", raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    flags = tuple(str(pki / flag) if flag.endswith(".key") else flag for flag in flags)
    assert main([*_status(pki, agent), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1
