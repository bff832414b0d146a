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
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from runtimekit.schema import ConfigError
from runtimekit.webconfig import OPEN_PATHS, Guard
from runtimekit.webconfig.basic import MAX_PASSWORD_BYTES, hash_password

from .config import RemediationConfig

#: bcrypt cost of the in-memory hash of auth.basic_file's password: the plain password is in memory
#: anyway, so the cost buys nothing and is kept at bcrypt's minimum.
BASIC_FILE_COST = 4


def read_secret(key: str, path: str | None) -> str | None:
    """The stripped content of the file a ``*_file`` key names (None when unset); ConfigError
    naming the key when it cannot be read."""
    if path is None:
        return None
    try:
        return Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else type(error).__name__
        raise ConfigError(f"{key}: cannot read {path}: {reason}") from error


def read_credentials(config: RemediationConfig) -> tuple[str | None, dict[str, bytes]]:
    """(bearer token, {user: bcrypt hash}) of auth.token_file and auth.basic_file."""
    token = read_secret("auth.token_file", config.auth.token_file)
    basic = read_secret("auth.basic_file", config.auth.basic_file)
    if token == "":
        raise ConfigError(f"auth.token_file: {config.auth.token_file} is empty")
    if basic is None:
        return token, {}
    user, separator, password = basic.partition(":")
    if not separator:
        raise ConfigError(f"auth.basic_file: {config.auth.basic_file} must hold USER:PASSWORD")
    if len(password.encode()) > MAX_PASSWORD_BYTES:
        raise ConfigError(f"auth.basic_file: the password is longer than bcrypt's {MAX_PASSWORD_BYTES} bytes")
    return token, {user: hash_password(password.encode(), BASIC_FILE_COST)}


def make_guard(config: RemediationConfig, counters: Counter) -> Guard:
    """The receiver's gate: the web configuration file's TLS and users, the token and basic file,
    some credential required, refusals counted by status (``rejected_401``, ...)."""
    token, users = read_credentials(config)

    def count(status: int) -> None:
        counters[f"rejected_{status}"] += 1

    return Guard.from_file(config.listener.web_config_file, "listener.web_config_file", bearer_token=token,
                           users=users, required=True, open_paths=OPEN_PATHS, on_refused=count)
