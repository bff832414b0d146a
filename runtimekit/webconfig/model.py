"""The web configuration file of the Prometheus exporter-toolkit, read strictly.

The format is exporter-toolkit's (docs/web-configuration.md of prometheus/exporter-toolkit, and
its ``web/tls_config.go``, ``web/handler.go``): ``tls_server_config``, ``http_server_config``,
``basic_auth_users`` and ``rate_limit``. What differs here is said where it differs, and
docs/security.md lists it:

- A key we do not know is an error naming it (exporter-toolkit reads with ``UnmarshalStrict`` too).
- An empty file (nothing but blanks or comments) is an error, where exporter-toolkit reads it as
  "no TLS, no users": it is what a config tool leaves between truncating a file and writing it
  again. A file that means to set nothing says ``{}``.
- Relative ``cert_file``, ``key_file`` and ``client_ca_file`` are resolved against the folder of
  the web configuration file, as exporter-toolkit's ``SetDirectory`` does.
- ``client_auth_type`` ``RequestClientCert`` and ``RequireAnyClientCert`` (ask for a certificate
  and accept it unverified) cannot be honoured: Python's ``ssl`` verifies every client certificate
  it asks for. They are refused by name; exporter-toolkit's own documentation calls them insecure.
- The inline ``cert`` and ``key`` are refused (Python's ``ssl`` loads a key pair from files only);
  the inline ``client_ca`` is accepted.
- A verifying ``client_auth_type`` needs a client CA (exporter-toolkit's ``clientCAs_missing``
  test case), and a client CA needs a verifying ``client_auth_type``.
- ``http_server_config.http2`` is accepted and has no effect: the listeners speak HTTP/1.1.
- ``rate_limit.interval`` is a Go duration (``1s``, ``250ms``, ``1m30s``; ``0`` turns it off).

Nothing here opens a socket or builds a TLS context (``tls.py`` does): this is plain data in and
plain data out, with ``WebConfigError`` naming the key and the rule.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from runtimekit.documents import DocumentError, load_yaml_file
from runtimekit.schema import ConfigError, Key, check_shape, file_path

#: client_auth_type values we honour (Go's crypto/tls names), each with what it asks of a client.
CLIENT_AUTH_TYPES = {
    "NoClientCert": "no client certificate asked for",
    "VerifyClientCertIfGiven": "a client certificate is optional; one that is sent must chain to the client CA",
    "RequireAndVerifyClientCert": "every client must send a certificate that chains to the client CA",
}
#: Go's values that ask for a certificate without verifying it; Python's ssl cannot do that.
UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
VERIFYING = ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
TLS_VERSIONS = ("TLS10", "TLS11", "TLS12", "TLS13")
#: Response headers that may be configured, and the values allowed where they are an enumeration
#: (exporter-toolkit's extraHTTPHeaders; an empty value leaves the header unset).
HEADERS: Mapping[str, tuple[str, ...] | None] = MappingProxyType({
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
})
#: A bcrypt hash: $2a$, $2b$ or $2y$ (htpasswd writes $2y$), a two-digit cost 04..31, 53 characters.
#: Digits are [0-9], never ``\d``: that matches every Unicode digit (``٠٤``), which no hash holds.
_BCRYPT = re.compile(r"\$2[aby]\$([0-9][0-9])\$[./A-Za-z0-9]{53}")
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _path_or_unset(value: str) -> str | None:
    """The rule of every path-valued key (``runtimekit.schema.file_path``), where an empty value
    means unset, as exporter-toolkit reads it."""
    return file_path(value) if value else None


_PATH = Key(str, None, "", _path_or_unset)

_SHAPE = {
    "tls_server_config?": {
        "cert?": str, "key?": str, "client_ca?": str,
        "cert_file?": _PATH, "key_file?": _PATH, "client_ca_file?": _PATH,
        "client_auth_type?": Key(str, None, "", allowed=(*CLIENT_AUTH_TYPES, *UNVERIFIED_CLIENT_AUTH)),
        "min_version?": Key(str, None, "", allowed=TLS_VERSIONS),
        "max_version?": Key(str, None, "", allowed=TLS_VERSIONS),
        "cipher_suites?": [str], "prefer_server_cipher_suites?": bool,
        "curve_preferences?": [str], "client_allowed_sans?": [str],
    },
    "http_server_config?": {"http2?": bool, "headers?": {"...": str}},
    "basic_auth_users?": {"...": str},
    "rate_limit?": {"interval?": (str, int), "burst?": int},
}


class WebConfigError(ConfigError):
    """A web configuration file that cannot be used; the message names the file, the key and the rule."""


@dataclass(frozen=True, slots=True)
class TlsServerConfig:
    """``tls_server_config`` with its paths resolved (absolute, or as given when already absolute)."""

    cert_file: str
    key_file: str
    client_auth_type: str = "NoClientCert"
    client_ca_file: str | None = None
    client_ca: str | None = None  # inline PEM
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()
    client_allowed_sans: tuple[str, ...] | None = None

    @property
    def files(self) -> tuple[str, ...]:
        """The files this section reads (a change to any of them reloads it)."""
        return (self.cert_file, self.key_file) + ((self.client_ca_file,) if self.client_ca_file else ())

    @property
    def verifies_clients(self) -> bool:
        return self.client_auth_type in VERIFYING

    @property
    def requires_client_certificate(self) -> bool:
        return self.client_auth_type == "RequireAndVerifyClientCert"


@dataclass(frozen=True, slots=True)
class RateLimit:
    """``rate_limit``: a token bucket over every request (Go's ``rate.NewLimiter(rate.Every(interval), burst)``)."""

    interval_seconds: float
    burst: int


@dataclass(frozen=True, slots=True)
class WebConfig:
    """One reading of a web configuration file. ``users``: user name -> bcrypt hash."""

    path: str
    tls: TlsServerConfig | None = None
    http2: bool = True
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    users: Mapping[str, bytes] = field(default_factory=lambda: MappingProxyType({}))
    rate_limit: RateLimit | None = None

    @property
    def files(self) -> tuple[str, ...]:
        return (self.path, *(self.tls.files if self.tls else ()))

    @property
    def authenticates(self) -> bool:
        """Does it ask every client for a credential: a password (``users``) or a verified client
        certificate (``RequireAndVerifyClientCert``)? TLS alone does not: it encrypts the requests
        of whoever reaches the port without saying who they are."""
        return bool(self.users) or (self.tls is not None and self.tls.requires_client_certificate)


def read_web_config(path: str, key: str = "web_config_file") -> WebConfig:
    """The web configuration at ``path``; ``WebConfigError`` naming ``key``, the file and the rule
    when it cannot be read or breaks a rule. Certificates are not loaded here (``tls.py``)."""
    where = f"{key}: {path}"
    try:
        data = load_yaml_file(path, what=str(path))
    except OSError as error:
        raise WebConfigError(f"{key}: cannot read {path}: {error.strerror or error}") from None
    except DocumentError as error:
        raise WebConfigError(f"{key}: {error}") from None
    if data is None:
        raise WebConfigError(f"{where}: the file is empty (write {{}} for a file that sets nothing)")
    if not isinstance(data, dict):
        raise WebConfigError(f"{where} must hold a mapping at the top level")
    try:
        return parse_web_config(data, path)
    except ConfigError as error:
        raise WebConfigError(f"{where}: {error}") from None


def parse_web_config(data: Mapping[str, Any], path: str) -> WebConfig:
    """Validate ``data`` (the file's mapping) and resolve its paths against ``path``'s folder."""
    check_shape(dict(data), _SHAPE)
    folder = os.path.dirname(os.path.abspath(path))
    http = data.get("http_server_config") or {}
    return WebConfig(
        path=os.path.abspath(path),
        tls=_tls(data.get("tls_server_config") or {}, folder),
        http2=http.get("http2", True),
        headers=MappingProxyType(_headers(http.get("headers") or {})),
        users=MappingProxyType(_users(data.get("basic_auth_users") or {})),
        rate_limit=_rate_limit(data.get("rate_limit") or {}),
    )


def _tls(section: Mapping[str, Any], folder: str) -> TlsServerConfig | None:
    """None when the section sets nothing (exporter-toolkit then serves plain HTTP)."""
    if not any(value not in (None, "", []) for value in section.values()):
        return None
    for inline, instead in (("cert", "cert_file"), ("key", "key_file")):
        if section.get(inline):
            raise ConfigError(f"tls_server_config.{inline}: an inline PEM is not supported here (Python's ssl "
                              f"loads a key pair from files); use {instead}")
    for required in ("cert_file", "key_file"):
        if not section.get(required):
            raise ConfigError(f"tls_server_config.{required}: required when TLS is configured")
    auth = section.get("client_auth_type") or "NoClientCert"
    if auth in UNVERIFIED_CLIENT_AUTH:
        raise ConfigError(f"tls_server_config.client_auth_type: {auth} (a client certificate accepted unverified) "
                          "cannot be honoured: Python's ssl verifies every client certificate it asks for; use "
                          "RequireAndVerifyClientCert (or VerifyClientCertIfGiven)")
    has_ca = bool(section.get("client_ca_file") or section.get("client_ca"))
    if section.get("client_ca_file") and section.get("client_ca"):
        raise ConfigError("tls_server_config.client_ca: give client_ca or client_ca_file, not both")
    if auth in VERIFYING and not has_ca:
        raise ConfigError(f"tls_server_config.client_ca_file: required with client_auth_type {auth}")
    if has_ca and auth not in VERIFYING:
        raise ConfigError("tls_server_config.client_auth_type: a client CA is configured without a client auth "
                          "policy; set VerifyClientCertIfGiven or RequireAndVerifyClientCert")
    sans = section.get("client_allowed_sans")
    if sans and auth not in VERIFYING:
        raise ConfigError("tls_server_config.client_allowed_sans: needs a verifying client_auth_type "
                          "(RequireAndVerifyClientCert)")
    minimum, maximum = section.get("min_version") or "TLS12", section.get("max_version") or "TLS13"
    if TLS_VERSIONS.index(minimum) > TLS_VERSIONS.index(maximum):
        raise ConfigError(f"tls_server_config.min_version: {minimum} is above max_version {maximum}")
    ca_file = section.get("client_ca_file")
    return TlsServerConfig(
        cert_file=os.path.join(folder, section["cert_file"]),
        key_file=os.path.join(folder, section["key_file"]),
        client_auth_type=auth,
        client_ca_file=os.path.join(folder, ca_file) if ca_file else None,
        client_ca=section.get("client_ca") or None,
        min_version=minimum,
        max_version=maximum,
        cipher_suites=tuple(section.get("cipher_suites") or ()),
        prefer_server_cipher_suites=section.get("prefer_server_cipher_suites", True),
        curve_preferences=tuple(section.get("curve_preferences") or ()),
        client_allowed_sans=tuple(sans) if sans else None,
    )


def _headers(headers: Mapping[str, str]) -> dict[str, str]:
    chosen = {}
    for name, value in headers.items():
        if name not in HEADERS:
            raise ConfigError(f"http_server_config.headers.{name}: this header cannot be configured "
                              f"(allowed: {', '.join(HEADERS)})")
        allowed = HEADERS[name]
        if value and allowed is not None and value not in allowed:
            raise ConfigError(f"http_server_config.headers.{name}: must be one of {', '.join(allowed)}, got {value!r}")
        if value:
            chosen[name] = value
    return chosen


def _users(users: Mapping[str, str]) -> dict[str, bytes]:
    hashes = {}
    for user, hashed in users.items():
        match = _BCRYPT.fullmatch(hashed)
        if match is None or not 4 <= int(match.group(1)) <= 31:
            raise ConfigError(f"basic_auth_users.{user}: must be a bcrypt hash ($2y$10$ and 53 characters, as "
                              "htpasswd -nBC 10 writes it)")
        hashes[user] = hashed.encode("ascii")
    return hashes


def _rate_limit(section: Mapping[str, Any]) -> RateLimit | None:
    if not section:
        return None
    seconds = parse_duration(section.get("interval", 0))
    if seconds is None:
        raise ConfigError(f"rate_limit.interval: must be a duration such as 1s, 250ms or 1m30s, got "
                          f"{section.get('interval')!r}")
    burst = section.get("burst", 0)
    if seconds == 0:
        return None
    if burst < 1:
        raise ConfigError(f"rate_limit.burst: must be at least 1 with an interval, got {burst}")
    return RateLimit(seconds, burst)


def parse_duration(value: str | int) -> float | None:
    """Seconds of a Go duration (``1m30s``; the integer 0 or the string ``0`` too); None when invalid."""
    if value == 0 or value == "0":
        return 0.0
    if not isinstance(value, str) or not value:
        return None
    position, seconds = 0, 0.0
    for match in _DURATION.finditer(value):
        if match.start() != position:
            return None
        seconds += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    return seconds if position == len(value) else None
