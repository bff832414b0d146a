"""The receiver's credentials, checked by the one gate every listener has (``runtimekit.webconfig.Guard``).

Alertmanager authenticates with any of:

- a bearer token (``auth.token_file``: Alertmanager's ``http_config.authorization``);
- basic credentials: the bcrypt users of the web configuration file (``listener.web_config_file``,
  ``basic_auth_users``), or the one ``USER:PASSWORD`` of ``auth.basic_file`` (hashed with bcrypt at
  start, then checked as the file's users are);
- a client certificate verified by TLS, when the web configuration asks for one
  (``client_auth_type: RequireAndVerifyClientCert``) and no password credential is configured.

Every route needs them — the webhook, and also ``/api/v1/actions`` and ``/metrics``, which show node
names, alert fingerprints, idempotency keys and the replacement endpoint's answers — except the
probes in ``OPEN_PATHS``, which show nothing. The receiver never runs without one (``Guard``'s
``required``). A missing, wrong or malformed header (non-ASCII bytes included) is a 401, never an error.

A secret file that could never authenticate stops the service at start (``ConfigError`` naming the
key, the file and the rule, never the secret): an empty file, a basic line without a user or a
password or with a control character, a bearer token (``auth.token_file``, and the spare-node
request's ``replacement.token_file``) with a character an HTTP header cannot carry.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from pathlib import Path

from runtimekit.schema import ConfigError
from runtimekit.webconfig import OPEN_PATHS, Guard
from runtimekit.webconfig.basic import MAX_PASSWORD_BYTES, hash_password

from .config import RemediationConfig

#: bcrypt cost of the in-memory hash of auth.basic_file's password: the plain password is in memory
#: anyway, so the cost buys nothing and is kept at bcrypt's minimum.
BASIC_FILE_COST = 4


def _read(key: str, path: str) -> str:
    """The content of the file a ``*_file`` key names; ConfigError naming the key when it cannot be read."""
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else type(error).__name__
        raise ConfigError(f"{key}: cannot read {path}: {reason}") from error


def read_secret(key: str, path: str | None) -> str | None:
    """The stripped content of the file a ``*_file`` key names (None when unset); ConfigError
    naming the key when it cannot be read or holds nothing but white space."""
    if path is None:
        return None
    text = _read(key, path).strip()
    if not text:
        raise ConfigError(f"{key}: {path} is empty")
    return text


def header_problem(token: str) -> str | None:
    """Why a bearer token can never arrive in an ``Authorization`` header, or None: an HTTP header
    carries printable ASCII (space to ``~``), and the guard refuses any other header (401)."""
    for position, char in enumerate(token, 1):
        if not " " <= char <= "~":
            return f"character {position} is not printable ASCII (an HTTP header cannot carry it)"
    return None


def read_token(key: str, path: str | None) -> str | None:
    """The bearer token in the file ``key`` names (None when unset); ConfigError naming the key and
    the rule when it is unreadable, empty, or holds what a header cannot carry (never the token)."""
    token = read_secret(key, path)
    problem = header_problem(token) if token else None
    if problem:
        raise ConfigError(f"{key}: {path}: {problem}")
    return token


def _control_character(value: str) -> bool:
    return any(unicodedata.category(char) == "Cc" for char in value)


def basic_entry(key: str, path: str) -> tuple[str, str]:
    """(user, password) of the file's one ``USER:PASSWORD`` line; ConfigError naming the key, the
    file and the line when it cannot authenticate: no ``:``, an empty user or password, a control
    character (RFC 7617 forbids them; other non-ASCII characters are fine, sent as UTF-8), a
    password over bcrypt's 72 bytes, or a second entry. Blank lines and surrounding spaces do not count."""
    entries = [(number, line.strip()) for number, line in enumerate(_read(key, path).splitlines(), 1) if line.strip()]
    if not entries:
        raise ConfigError(f"{key}: {path} is empty")
    if len(entries) > 1:
        raise ConfigError(f"{key}: {path} line {entries[1][0]}: the file holds one USER:PASSWORD line, not more")
    number, entry = entries[0]
    where = f"{key}: {path} line {number}"
    user, separator, password = entry.partition(":")
    if not separator:
        raise ConfigError(f"{where}: must be USER:PASSWORD")
    for part, value in (("user", user), ("password", password)):
        if not value:
            raise ConfigError(f"{where}: the {part} is empty (USER:PASSWORD)")
        if _control_character(value):
            raise ConfigError(f"{where}: the {part} has a control character (RFC 7617 forbids them)")
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        raise ConfigError(f"{where}: the password is longer than bcrypt's {MAX_PASSWORD_BYTES} bytes")
    return user, password


def read_credentials(config: RemediationConfig) -> tuple[str | None, dict[str, bytes]]:
    """(bearer token, {user: bcrypt hash}) of auth.token_file and auth.basic_file."""
    token = read_token("auth.token_file", config.auth.token_file)
    if config.auth.basic_file is None:
        return token, {}
    user, password = basic_entry("auth.basic_file", config.auth.basic_file)
    return token, {user: hash_password(password.encode(), BASIC_FILE_COST)}


def make_guard(config: RemediationConfig, counters: Counter) -> Guard:
    """The receiver's gate: the web configuration file's TLS and users, the token and basic file,
    some credential required, refusals counted by status (``rejected_401``, ...)."""
    token, users = read_credentials(config)

    def count(status: int) -> None:
        counters[f"rejected_{status}"] += 1

    return Guard.from_file(config.listener.web_config_file, "listener.web_config_file", bearer_token=token,
                           users=users, required=True, open_paths=OPEN_PATHS, on_refused=count)
