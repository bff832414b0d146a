"""The gate of every HTTP listener: TLS per connection and, per request, what the web
configuration file asks (``runtimekit.webconfig``) plus the request-size limit.

One ``Guard`` per listener. ``runtimekit.listener`` asks it for the TLS context of each new
connection (``tls_for_connection``) and puts its ``middleware`` in front of the application's
routes; a service that needs more than the file (the remediation service's bearer token, a
required login) builds its own ``Guard`` and stores it under ``GUARD`` in its application, and the
listener then uses that one. Per request, in this order:

1. an unusable web configuration file: 500 (fails closed: exporter-toolkit does the same);
2. the configured response headers (``http_server_config.headers``) on every answer below (a
   route's own header of the same name wins, as in exporter-toolkit);
3. ``OPEN_PATHS`` (liveness and readiness probes, which show nothing) pass;
4. ``rate_limit``: 429 past the burst;
5. ``client_allowed_sans``: 403 unless the verified client certificate names one of them;
6. credentials, when users (or a bearer token) are configured: 401 with ``WWW-Authenticate``
   unless the ``Authorization`` header carries them; with ``required`` and none configured, a
   verified client certificate is the credential, and without one the answer is 401 too;
7. a declared body larger than the application's ``client_max_size``: 413, connection closed
   (a chunked body is held to the same size when it is read, by aiohttp).
"""

from __future__ import annotations

import hmac
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from .basic import BasicAuthChecker
from .source import Loaded, WebConfigSource
from .tls import san_allowed, sans_of_peercert

log = logging.getLogger("runtimekit.webconfig")

OPEN_PATHS = frozenset({"/healthz", "/readyz"})  # probes: no credentials asked, nothing shown
REALM = "runtimekit"


class ConnectionRefused(Exception):
    """No connection can be served now: the web configuration file is unusable (logged by the source)."""


class TokenBucket:
    """Go's ``rate.Limiter``: ``burst`` tokens, one more every ``interval_seconds``."""

    def __init__(self, interval_seconds: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval, self.burst, self._clock = interval_seconds, burst, clock
        self._tokens, self._at = float(burst), clock()

    def allow(self) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) / self.interval)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False


class Guard:
    """TLS and request checks of one listener (see the module docstring).

    ``source``: the web configuration file (None: plain HTTP and no file-based checks);
    ``bearer_token`` and ``users`` (user -> bcrypt hash): credentials a service adds to the file's;
    ``required``: some credential must be presented (the file's users, the token, or a verified
    client certificate) even when none is configured; ``on_refused(status)``: told of each refusal
    (a service counts them)."""

    def __init__(self, source: WebConfigSource | None, *, bearer_token: str | None = None,
                 users: Mapping[str, bytes] | None = None, required: bool = False,
                 open_paths: frozenset[str] = OPEN_PATHS, on_refused: Callable[[int], None] | None = None) -> None:
        self.source = source
        self._token = bearer_token.encode() if bearer_token else None
        self._users = MappingProxyType(dict(users or {}))
        self._required, self._open_paths, self._on_refused = required, open_paths, on_refused
        self._basic = BasicAuthChecker()
        self._limiter: tuple[int, TokenBucket] | None = None  # (generation, bucket)
        self.middleware = self._middleware()

    @classmethod
    def from_file(cls, path: str | None, key: str, **options: Any) -> Guard:
        return cls(WebConfigSource(path, key) if path else None, **options)

    def loaded(self) -> Loaded | None:
        return self.source.current() if self.source is not None else None

    def tls_for_connection(self) -> ssl.SSLContext | None:
        """The TLS context for a connection accepted now (None: plain HTTP); ``ConnectionRefused``
        while the file is unusable."""
        loaded = self.loaded()
        if loaded is None:
            return None
        if loaded.error is not None:
            raise ConnectionRefused(loaded.error)
        return loaded.ssl_context

    def describe(self) -> str:
        """What a client must do, for the start-up line ("TLS, client certificates required, basic auth")."""
        loaded = self.loaded()
        if loaded is not None and loaded.error is not None:
            return "web configuration file unusable: refusing every connection"
        config = loaded.config if loaded else None
        parts = []
        if config is not None and config.tls is not None:
            parts.append("TLS" + {"RequireAndVerifyClientCert": ", client certificates required",
                                  "VerifyClientCertIfGiven": ", client certificates verified when sent"}.get(
                                      config.tls.client_auth_type, ""))
        users = len(self._users) + (len(config.users) if config else 0)
        if users or self._token:
            parts.append("basic auth" if not self._token else "bearer token" if not users else "basic auth or token")
        return ", ".join(parts) or "plain HTTP, no auth"

    def credentials_over_plain_http(self) -> bool:
        """Are passwords or a token asked for on a listener without TLS (they would cross the
        network in the clear: the listener warns at start, as exporter-toolkit says "TLS is disabled")?"""
        loaded = self.loaded()
        config = loaded.config if loaded else None
        has_credentials = bool(self._users or self._token or (config is not None and config.users))
        return has_credentials and (config is None or config.tls is None)

    def _middleware(self) -> Any:
        @web.middleware
        async def web_config_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            loaded = self.loaded()
            if loaded is not None and loaded.error is not None:
                return self._refuse(500, "the web configuration file is unusable; see the server's log", {})
            headers = dict(loaded.config.headers) if loaded and loaded.config else {}
            refusal = None if request.path in self._open_paths else await self._check(request, loaded, headers)
            if refusal is not None:
                return refusal
            try:
                response = await handler(request)
            except web.HTTPException as error:
                _add_headers(error, headers)
                raise
            _add_headers(response, headers)
            return response

        return web_config_guard

    async def _check(self, request: web.Request, loaded: Loaded | None, headers: dict[str, str]) -> web.Response | None:
        config = loaded.config if loaded else None
        if loaded is not None and config is not None and config.rate_limit is not None and not self._bucket(loaded).allow():
            return self._refuse(429, "too many requests", headers)
        tls = config.tls if config else None
        peercert = request.get_extra_info("peercert")
        if tls is not None and tls.client_allowed_sans is not None:
            if not san_allowed(sans_of_peercert(peercert), tls.client_allowed_sans):
                return self._refuse(403, "the client certificate names none of the allowed SANs", headers)
        users = {**self._users, **(config.users if config else {})}
        authorization = request.headers.get("Authorization")
        if users or self._token:
            if not (self._token_matches(authorization) or await self._basic.check(authorization, users)):
                return self._challenge(headers)
        elif self._required and not peercert:
            return self._challenge(headers)
        size = request.content_length
        if size is not None and size > request.client_max_size:
            response = self._refuse(413, f"request body larger than {request.client_max_size} bytes", headers)
            response.force_close()
            return response
        return None

    def _bucket(self, loaded: Loaded) -> TokenBucket:
        if self._limiter is None or self._limiter[0] != loaded.generation:
            limit = loaded.config.rate_limit if loaded.config else None
            assert limit is not None  # asked only when one is configured
            self._limiter = (loaded.generation, TokenBucket(limit.interval_seconds, limit.burst))
        return self._limiter[1]

    def _token_matches(self, authorization: str | None) -> bool:
        if self._token is None or not authorization or not authorization.isascii():
            return False
        scheme, _, value = authorization.strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self._token)

    def _challenge(self, headers: dict[str, str]) -> web.Response:
        schemes = ([f'Bearer realm="{REALM}"'] if self._token else []) + [f'Basic realm="{REALM}"']
        return self._refuse(401, "missing or wrong credentials", {**headers, "WWW-Authenticate": ", ".join(schemes)})

    def _refuse(self, status: int, reason: str, headers: dict[str, str]) -> web.Response:
        if self._on_refused is not None:
            self._on_refused(status)
        return web.json_response({"error": reason}, status=status, headers=headers)


def _add_headers(response: web.StreamResponse, headers: dict[str, str]) -> None:
    """The configured headers, where the handler set none of the same name (exporter-toolkit sets
    them before its handler runs, so a handler's own value wins there too)."""
    if not response.prepared:
        for name, value in headers.items():
            response.headers.setdefault(name, value)


#: The application's own ``Guard`` (a service that adds credentials to the file's); the listener
#: uses it instead of building one from ``listener.web_config_file``.
GUARD = web.AppKey("web_guard", Guard)

