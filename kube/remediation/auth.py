"""The receiver's credentials and the one middleware that asks for them on every route.

Alertmanager authenticates with a bearer token (``auth.token_file``) or basic credentials
(``auth.basic_file``), read from files at start. Every route needs them — the webhook, and also
``/api/v1/actions`` and ``/metrics``, which show node names, alert fingerprints, idempotency keys
and the replacement endpoint's answers — except the probes in ``OPEN_PATHS``, which show nothing.
A missing, wrong or malformed header (non-ASCII bytes included) is a 401, never an error.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections import Counter
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from runtimekit.schema import ConfigError

from .config import RemediationConfig

OPEN_PATHS = frozenset({"/healthz", "/readyz"})  # liveness and readiness: no credentials, no data
CHALLENGE = 'Bearer realm="runtimekit", Basic realm="runtimekit"'


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


def read_credentials(config: RemediationConfig) -> tuple[str | None, str | None]:
    """(bearer token, USER:PASSWORD) the receiver accepts, read from the files named by auth.*."""
    token = read_secret("auth.token_file", config.auth.token_file)
    basic = read_secret("auth.basic_file", config.auth.basic_file)
    if token == "":
        raise ConfigError(f"auth.token_file: {config.auth.token_file} is empty")
    if basic is not None and ":" not in basic:
        raise ConfigError(f"auth.basic_file: {config.auth.basic_file} must hold USER:PASSWORD")
    return token, basic


def authorized(header: str | None, token: str | None, basic: str | None) -> bool:
    """Does an Authorization header carry the token or the basic credentials? Its value is
    ASCII by RFC 9110 (token68, base64); anything else is simply not authorized."""
    if not header or not header.isascii():
        return False
    scheme, _, value = header.partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and token is not None:
        return hmac.compare_digest(value.encode(), token.encode())
    if scheme.lower() == "basic" and basic is not None:
        try:
            decoded = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(decoded, basic.encode())
    return False


def require_credentials(token: str | None, basic: str | None, counters: Counter) -> Middleware:
    """The middleware: OPEN_PATHS pass, anything else needs the credentials (401, counted, otherwise)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or authorized(request.headers.get("Authorization"), token, basic):
            return await handler(request)
        counters["rejected_401"] += 1
        return web.json_response({"error": "missing or wrong credentials"}, status=401,
                                 headers={"WWW-Authenticate": CHALLENGE})

    return middleware
