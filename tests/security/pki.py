"""Certificates made by the openssl CLI for the security tests, web configuration files, and TLS
clients that present them.

Two CAs: ``ca`` (trusted by the servers under test) and ``rogue-ca`` (trusted by nobody). Signed by
``ca``: ``server`` (IP:127.0.0.1, DNS:localhost), ``client`` (DNS:scraper.example) and ``other``
(DNS:intruder.example, for the allowed-SAN check); signed by ``rogue-ca``: ``rogue`` (a client
certificate no server trusts). Keys are P-256 (fast to make). bcrypt hashes use cost 4, bcrypt's
minimum, so that each check takes about a millisecond.
"""

from __future__ import annotations

import base64
import ssl
import subprocess
from pathlib import Path
from typing import Any

import yaml

from runtimekit.webconfig.basic import hash_password

CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
USER, PASSWORD = "prometheus", "s3cret-pässword"
COST = 4


def make_pki(openssl: str, folder: Path) -> Path:
    """The CAs and certificates of the module docstring, as NAME.pem / NAME.key in ``folder``."""
    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, cwd=folder)

    for ca in ("ca", "rogue-ca"):
        run("req", "-x509", *CURVE, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2", "-subj", f"/CN=test-{ca}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for name, ca, extensions in (
        ("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"),
        ("client", "ca", "subjectAltName=DNS:scraper.example\nextendedKeyUsage=clientAuth\n"),
        ("other", "ca", "subjectAltName=DNS:intruder.example\nextendedKeyUsage=clientAuth\n"),
        ("rogue", "rogue-ca", "subjectAltName=DNS:scraper.example\nextendedKeyUsage=clientAuth\n"),
    ):
        run("req", *CURVE, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        (folder / f"{name}.ext").write_text(extensions)
        run("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
    return folder


def user_hash(password: str = PASSWORD) -> str:
    return hash_password(password.encode(), COST).decode()


def write_web_config(path: Path, pki: Path | None = None, *, mtls: bool = False, users: dict[str, str] | None = None,
                     **tls: Any) -> Path:
    """A web configuration file at ``path``: TLS with ``pki``'s server certificate (when given;
    ``mtls``: client certificates required, from ``ca``), ``users`` (name -> bcrypt hash), and
    any other ``tls_server_config`` keys."""
    data: dict[str, Any] = {}
    if pki is not None:
        section = {"cert_file": str(pki / "server.pem"), "key_file": str(pki / "server.key"), **tls}
        if mtls:
            section.update(client_auth_type="RequireAndVerifyClientCert", client_ca_file=str(pki / "ca.pem"))
        data["tls_server_config"] = section
    if users:
        data["basic_auth_users"] = users
    path.write_text(yaml.safe_dump(data))
    return path


def basic(user: str = USER, password: str = PASSWORD) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def client_context(pki: Path, certificate: str | None = "client") -> ssl.SSLContext:
    """A TLS client trusting ``ca``, presenting ``certificate`` (None: none)."""
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if certificate is not None:
        context.load_cert_chain(str(pki / f"{certificate}.pem"), str(pki / f"{certificate}.key"))
    return context
