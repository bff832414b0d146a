"""``tls_server_config`` as a Python ``ssl.SSLContext``, and the client SAN check.

Go's names are mapped to OpenSSL's (sources: Go's ``crypto/tls`` ``CipherSuites()`` and ``CurveID``
constants; OpenSSL's ``ciphers(1)`` names; RFC 8446 for TLS 1.3):

- ``cipher_suites``: the TLS 1.2 suites of Go's ``CipherSuites()``, in the given order
  (``prefer_server_cipher_suites`` keeps that order: OpenSSL's ``OP_CIPHER_SERVER_PREFERENCE``).
  Go ignores the TLS 1.3 suites in this list (TLS 1.3's are not configurable), and so does this;
  a name Go does not list (its insecure suites included) is an error.
- ``curve_preferences``: Python's ``ssl`` sets one curve (``set_ecdh_curve``), so one is accepted
  and a longer list is an error rather than a silent narrowing.
- ``client_allowed_sans``: checked per request against the verified client certificate's DNS, IP,
  e-mail and URI names (Go aborts the handshake instead; the effect for the client is a refusal).
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Iterable
from typing import Any

from runtimekit.documents import DocumentError, read_bounded
from runtimekit.schema import ConfigError

from .model import TlsServerConfig

VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
            "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
#: Go's TLS 1.2 suite name -> OpenSSL's.
TLS12_CIPHERS = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
#: Go's TLS 1.3 suites: accepted in cipher_suites and ignored, as Go ignores them.
TLS13_CIPHERS = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
#: Go's curve name (exporter-toolkit's table) -> OpenSSL's.
CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}


def check_tls_names(tls: TlsServerConfig) -> None:
    """ConfigError naming the entry when a cipher suite or curve is not one we can honour."""
    for i, name in enumerate(tls.cipher_suites):
        if name not in TLS12_CIPHERS and name not in TLS13_CIPHERS:
            raise ConfigError(f"tls_server_config.cipher_suites[{i}]: unknown cipher suite {name!r} (Go's "
                              f"crypto/tls CipherSuites() names: {', '.join([*TLS12_CIPHERS, *TLS13_CIPHERS])})")
    for i, name in enumerate(tls.curve_preferences):
        if name not in CURVES:
            raise ConfigError(f"tls_server_config.curve_preferences[{i}]: unknown curve {name!r} "
                              f"(one of {', '.join(CURVES)})")
    if len(tls.curve_preferences) > 1:
        raise ConfigError("tls_server_config.curve_preferences: Python's ssl sets one curve; give one, got "
                          f"{len(tls.curve_preferences)}")


def server_context(tls: TlsServerConfig) -> ssl.SSLContext:
    """A server-side context for ``tls``; ConfigError naming the key when a file cannot be read
    or the certificate, key or CA cannot be used."""
    check_tls_names(tls)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = VERSIONS[tls.min_version]
    context.maximum_version = VERSIONS[tls.max_version]
    for key, path in (("cert_file", tls.cert_file), ("key_file", tls.key_file), ("client_ca_file", tls.client_ca_file)):
        if path is not None:
            read_tls_file(key, path)
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file, password=_no_pass_phrase)
    except _Encrypted:
        raise ConfigError(f"tls_server_config.key_file: {tls.key_file} is encrypted (it asks for a pass phrase, "
                          "which cannot be given here); give the key unencrypted (openssl pkey -in KEY -out "
                          "PLAIN.key)") from None
    except (ssl.SSLError, OSError) as error:
        raise ConfigError(f"tls_server_config.cert_file: cannot use {tls.cert_file} with key_file {tls.key_file} "
                          f"({_reason(error)})") from None
    if tls.verifies_clients:
        context.verify_mode = ssl.CERT_REQUIRED if tls.requires_client_certificate else ssl.CERT_OPTIONAL
        try:
            context.load_verify_locations(cafile=tls.client_ca_file, cadata=tls.client_ca)
        except (ssl.SSLError, OSError, ValueError) as error:
            key = "client_ca_file" if tls.client_ca_file else "client_ca"
            raise ConfigError(f"tls_server_config.{key}: not a usable PEM CA certificate ({_reason(error)})") from None
    tls12 = [TLS12_CIPHERS[name] for name in tls.cipher_suites if name in TLS12_CIPHERS]
    if tls12:
        context.set_ciphers(":".join(tls12))
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.curve_preferences:
        context.set_ecdh_curve(CURVES[tls.curve_preferences[0]])
    return context


class _Encrypted(Exception):
    """Raised by ``_no_pass_phrase``: OpenSSL asked for the key's pass phrase."""


def _no_pass_phrase() -> bytes:
    """The password callback of ``load_cert_chain``: without one, OpenSSL would prompt on the
    terminal (``Enter PEM pass phrase:``) and wait; an encrypted key is refused instead."""
    raise _Encrypted


def read_tls_file(key: str, path: str) -> bytes:
    """The bytes of the certificate, key or CA file ``path`` (``tls_server_config.<key>``): a regular
    file only, checked without waiting (a FIFO would block the TLS library's own open for good);
    ConfigError naming the key otherwise."""
    try:
        return read_bounded(path, what=path)
    except OSError as error:
        raise ConfigError(f"tls_server_config.{key}: cannot read {path}: {error.strerror or error}") from None
    except DocumentError as error:
        raise ConfigError(f"tls_server_config.{key}: {error}") from None


def _reason(error: BaseException) -> str:
    if isinstance(error, ssl.SSLError) and error.reason:
        return str(error.reason)
    if isinstance(error, OSError) and error.strerror:
        return f"{error.strerror}: {error.filename}" if error.filename else error.strerror
    return str(error) or type(error).__name__


def normalised(name: str) -> str:
    """A SAN as compared: an IP address in its canonical form (Python prints IPv6 uncompressed and
    upper-case, Go compressed), anything else as given."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def sans_of_peercert(peercert: dict[str, Any] | None) -> list[str]:
    """The DNS, IP, e-mail and URI names of a verified certificate as ``SSLSocket.getpeercert()``
    gives it (empty without one)."""
    if not peercert:
        return []
    return [str(value) for kind, value in peercert.get("subjectAltName", ())
            if kind in ("DNS", "IP Address", "email", "URI")]


def san_allowed(sans: Iterable[str], allowed: Iterable[str]) -> bool:
    """Does one of the certificate's names equal one of ``allowed`` (exact match, IPs canonical)?"""
    wanted = {normalised(name) for name in allowed}
    return any(normalised(name) in wanted for name in sans)
