"""The gRPC TCP port (``api.tcp_listen``) changes the GPUs (CreateSlice, DeleteSlice,
SetDeviceMode): it is refused at start unless the web configuration file it uses asks every client
for a credential (``basic_auth_users``, or ``client_auth_type: RequireAndVerifyClientCert``). TLS
alone encrypts the calls of anyone who reaches the port; it authenticates none of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runtimekit.config import load as load_agent_config
from tests.agent_process import ROOT
from tests.security.pki import USER, user_hash, write_web_config

TCP = {"api.tcp_listen": "127.0.0.1:0"}
RULE = ("asks no client for a credential: the gRPC TCP port creates and deletes slices and switches MIG modes, "
        "so it needs basic_auth_users or tls_server_config.client_auth_type: RequireAndVerifyClientCert")


def test_tls_without_users_or_client_certificates_is_refused_naming_the_key_and_the_rule(pki, tmp_path):
    tls_only = write_web_config(tmp_path / "web.yml", pki)
    with pytest.raises(ValueError) as caught:
        load_agent_config(None, {**TCP, "listener.web_config_file": str(tls_only)})
    assert str(caught.value) == f"api.tcp_listen: listener.web_config_file {tls_only} {RULE}"


def test_the_ports_own_file_is_the_one_that_must_authenticate(pki, tmp_path):
    """A password on the HTTP port does not protect the gRPC port when the port has a file of its own."""
    http = write_web_config(tmp_path / "http.yml", pki, users={USER: user_hash()})
    grpc_tls_only = write_web_config(tmp_path / "grpc.yml", pki)
    with pytest.raises(ValueError, match=rf"^api.tcp_listen: api.web_config_file {grpc_tls_only} asks no client"):
        load_agent_config(None, {**TCP, "listener.web_config_file": str(http), "api.web_config_file": str(grpc_tls_only)})


@pytest.mark.parametrize("credential", ["basic-auth", "mutual-tls"])
def test_a_password_or_required_client_certificates_are_enough(pki, tmp_path, credential):
    keys = {"users": {USER: user_hash()}} if credential == "basic-auth" else {"mtls": True}
    web_config = write_web_config(tmp_path / "web.yml", pki, **keys)
    config = load_agent_config(None, {**TCP, "listener.web_config_file": str(web_config)})
    assert config.api.tcp_listen == "127.0.0.1:0"


def test_the_agent_refuses_to_start_with_one_line_and_exit_2(pki, tmp_path: Path):
    """TLS added to /metrics, then api.tcp_listen turned on."""
    web_config = write_web_config(tmp_path / "web.yml", pki)
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump({
        "listener": {"web_config_file": str(web_config)}, "api": {"tcp_listen": "127.0.0.1:0"},
        "state_dir": str(tmp_path / "state")}))
    process = subprocess.Popen([sys.executable, "-m", "runtimekit.cli", "serve", "--sim", "dgx-h100", "--listen",
                                "127.0.0.1:0", "--config", str(tmp_path / "agent.yaml")],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        pytest.fail(f"the agent served a gRPC TCP port that asks no credential:\n{stderr[-2000:]}")
    assert process.returncode == 2, stderr
    assert stderr.splitlines() == [f"runtimekit: error: api.tcp_listen: listener.web_config_file {web_config} {RULE}"]
