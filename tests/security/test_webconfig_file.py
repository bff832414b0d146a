"""The web configuration file is read strictly: every mistake is one error naming the file, the key
and the rule, at start, in both services, never a traceback; relative paths are the file's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runtimekit.config import load as load_agent_config
from runtimekit.kube.remediation.config import load as load_remediation_config
from runtimekit.webconfig import WebConfigError, load_web_config, read_web_config
from runtimekit.webconfig.model import parse_duration
from tests.agent_process import ROOT
from tests.security.pki import user_hash

HASH = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG"  # exporter-toolkit's documented example


def _tls(pki: Path, **keys: object) -> dict:
    return {"tls_server_config": {"cert_file": str(pki / "server.pem"), "key_file": str(pki / "server.key"), **keys}}


MISTAKES = [  # (file content, the error must contain)
    ({"tls_server_config": {"cert_fle": "x"}}, "tls_server_config.cert_fle: unknown key"),
    ({"basic_auth_user": {"a": HASH}}, "basic_auth_user: unknown key"),
    ({"http_server_config": {"http3": True}}, "http_server_config.http3: unknown key"),
    ({"basic_auth_users": {"admin": "plain-text"}}, "basic_auth_users.admin: must be a bcrypt hash"),
    ({"basic_auth_users": {"admin": 12}}, "basic_auth_users.admin: must be a string"),
    ({"tls_server_config": {"key_file": "server.key"}}, "tls_server_config.cert_file: required"),
    ({"tls_server_config": {"cert": "-----BEGIN", "key_file": "k"}}, "tls_server_config.cert: an inline PEM is not supported"),
    ({"http_server_config": {"headers": {"Server": "x"}}}, "http_server_config.headers.Server: this header cannot be configured"),
    ({"http_server_config": {"headers": {"X-Frame-Options": "allow"}}}, "X-Frame-Options: must be one of deny, sameorigin"),
    ({"rate_limit": {"interval": "soon", "burst": 1}}, "rate_limit.interval: must be a duration"),
    ({"rate_limit": {"interval": "1s", "burst": 0}}, "rate_limit.burst: must be at least 1"),
    ("- a list", "must hold a mapping at the top level"),
    ("tls_server_config: [unclosed", "web_config_file: "),
]


@pytest.mark.parametrize("content,expected", MISTAKES, ids=lambda value: str(value)[:40])
def test_a_malformed_file_is_an_error_naming_the_key(tmp_path, content, expected):
    path = tmp_path / "web.yml"
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    with pytest.raises(WebConfigError) as caught:
        load_web_config(str(path), "web_config_file")
    assert expected in str(caught.value)
    assert str(caught.value).startswith("web_config_file: ")


TLS_MISTAKES = [
    ({"client_auth_type": "RequireAnyClientCert", "client_ca_file": "ca.pem"}, "RequireAnyClientCert (a client certificate accepted unverified) cannot be honoured"),
    ({"client_auth_type": "Sometimes"}, "tls_server_config.client_auth_type: must be one of"),
    ({"client_auth_type": "RequireAndVerifyClientCert"}, "tls_server_config.client_ca_file: required with client_auth_type"),
    ({"client_ca_file": "ca.pem"}, "a client CA is configured without a client auth policy"),
    ({"min_version": "TLS13", "max_version": "TLS12"}, "min_version: TLS13 is above max_version TLS12"),
    ({"min_version": "SSL3"}, "tls_server_config.min_version: must be one of TLS10, TLS11, TLS12, TLS13"),
    ({"cipher_suites": ["TLS_RSA_WITH_RC4_128_SHA"]}, "cipher_suites[0]: unknown cipher suite 'TLS_RSA_WITH_RC4_128_SHA'"),
    ({"curve_preferences": ["CurveP256", "X25519"]}, "curve_preferences: Python's ssl sets one curve"),
    ({"curve_preferences": ["P-256"]}, "curve_preferences[0]: unknown curve"),
    ({"key_file": "client.key"}, "tls_server_config.cert_file: cannot use"),
    ({"cert_file": "missing.pem"}, "tls_server_config.cert_file: cannot read"),
    ({"client_auth_type": "VerifyClientCertIfGiven", "client_ca_file": "server.key"}, "client_ca_file: not a usable PEM CA"),
]


@pytest.mark.parametrize("keys,expected", TLS_MISTAKES, ids=lambda value: str(value)[:40])
def test_a_tls_section_that_cannot_be_honoured_is_an_error_naming_the_key(pki, tmp_path, keys, expected):
    data = _tls(pki, **{k: (str(pki / v) if k.endswith("_file") else v) for k, v in keys.items()})
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(WebConfigError, match="^k: ") as caught:
        load_web_config(str(path), "k")
    assert expected in str(caught.value)


def test_relative_paths_are_read_from_the_files_folder_and_go_names_are_mapped(pki, tmp_path):
    (pki / "web.yml").write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": "server.pem", "key_file": "server.key", "client_ca_file": "ca.pem",
                              "client_auth_type": "RequireAndVerifyClientCert", "min_version": "TLS13",
                              "cipher_suites": ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"],
                              "curve_preferences": ["X25519"], "prefer_server_cipher_suites": False},
        "http_server_config": {"http2": False, "headers": {"X-Frame-Options": "deny", "X-XSS-Protection": ""}},
        "basic_auth_users": {"admin": HASH},
        "rate_limit": {"interval": "1m30s", "burst": 3}}))
    config, context = load_web_config(str(pki / "web.yml"), "k")
    assert config.tls is not None and config.tls.cert_file == str(pki / "server.pem")
    assert config.tls.client_ca_file == str(pki / "ca.pem")
    assert dict(config.headers) == {"X-Frame-Options": "deny"}  # blank: unset
    assert config.users["admin"] == HASH.encode() and config.rate_limit is not None
    assert config.rate_limit.interval_seconds == 90
    assert context is not None and context.minimum_version.name == "TLSv1_3"
    assert "ECDHE-ECDSA-AES128-GCM-SHA256" in [c["name"] for c in context.get_ciphers()]


@pytest.mark.parametrize("text,seconds", [("1s", 1), ("250ms", 0.25), ("1h2m3.5s", 3723.5), ("0", 0), (0, 0),
                                          ("1.5", None), ("s", None), ("1d", None), ("", None), (5, None)])
def test_go_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("content", ["", "\n  \n", "# TLS comes later\n"], ids=["empty", "blank", "comments"])
def test_an_empty_file_is_unusable(tmp_path, content):
    """What a config tool leaves between truncating the file and writing it: never "no TLS, no users"."""
    (tmp_path / "web.yml").write_text(content)
    with pytest.raises(WebConfigError, match=r"^k: .*web.yml: the file is empty \(write \{\} for a file that sets nothing\)"):
        read_web_config(str(tmp_path / "web.yml"), "k")


def test_a_file_that_says_it_sets_nothing_means_plain_http_and_no_auth(tmp_path):
    (tmp_path / "web.yml").write_text("{}\n")
    config = read_web_config(str(tmp_path / "web.yml"))
    assert config.tls is None and not config.users


def test_both_services_refuse_a_bad_file_at_load_naming_their_key(tmp_path):
    (tmp_path / "web.yml").write_text(yaml.safe_dump({"basic_auth_users": {"a": "nope"}}))
    with pytest.raises(ValueError, match=r"^listener.web_config_file: .*web.yml: basic_auth_users.a: must be a bcrypt"):
        load_agent_config(None, {"listener.web_config_file": str(tmp_path / "web.yml")})
    with pytest.raises(ValueError, match=r"^listener.web_config_file: .*basic_auth_users.a: must be a bcrypt"):
        load_remediation_config(None, {"listener.web_config_file": str(tmp_path / "web.yml"), "auth.token_file": "t"})


def test_the_grpc_port_needs_tls_it_can_honour(pki, tmp_path):
    (tmp_path / "plain.yml").write_text(yaml.safe_dump({"basic_auth_users": {"a": HASH}}))
    (tmp_path / "optional.yml").write_text(yaml.safe_dump(_tls(
        pki, client_auth_type="VerifyClientCertIfGiven", client_ca_file=str(pki / "ca.pem"))))
    tcp = {"api.tcp_listen": "127.0.0.1:0"}
    with pytest.raises(ValueError, match="api.tcp_listen: needs a web configuration file"):
        load_agent_config(None, tcp)
    with pytest.raises(ValueError, match="tls_server_config: required for the gRPC TCP port"):
        load_agent_config(None, {**tcp, "listener.web_config_file": str(tmp_path / "plain.yml")})
    with pytest.raises(ValueError, match="^api.web_config_file: .*VerifyClientCertIfGiven is not available on the gRPC port"):
        load_agent_config(None, {**tcp, "api.web_config_file": str(tmp_path / "optional.yml")})


def test_the_receiver_needs_some_credential(pki, tmp_path):
    (tmp_path / "tls.yml").write_text(yaml.safe_dump(_tls(pki)))
    (tmp_path / "users.yml").write_text(yaml.safe_dump({"basic_auth_users": {"a": user_hash()}}))
    with pytest.raises(ValueError, match="auth.token_file: set it, auth.basic_file, or basic_auth_users"):
        load_remediation_config(None, {"listener.web_config_file": str(tmp_path / "tls.yml")})
    assert load_remediation_config(None, {"listener.web_config_file": str(tmp_path / "users.yml")})


@pytest.mark.parametrize("command", [["-m", "runtimekit.cli", "serve", "--sim", "dgx-h100", "--config"],
                                     ["-m", "runtimekit.kube.remediation", "serve", "--config"]], ids=["agent", "remediation"])
def test_a_malformed_file_stops_the_service_with_one_line_and_exit_2(tmp_path, command):
    (tmp_path / "web.yml").write_text(yaml.safe_dump({"tls_server_config": {"client_auth_type": "Maybe"}}))
    (tmp_path / "token").write_text("t\n")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "listener": {"web_config_file": str(tmp_path / "web.yml")}, "state_dir": str(tmp_path / "state")}
        if "runtimekit.cli" in command else
        {"listener": {"web_config_file": str(tmp_path / "web.yml")}, "auth": {"token_file": str(tmp_path / "token")},
         "db_path": str(tmp_path / "j.db")}))
    done = subprocess.run([sys.executable, *command, str(tmp_path / "config.yaml")], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "listener.web_config_file: " in done.stderr
    assert "tls_server_config.client_auth_type: must be one of" in done.stderr
