"""One HTTP connection of a ``runtimekit.listener`` listener: aiohttp's protocol, telling its
listener which phase of the request cycle it is in (the listener keeps the deadline of each phase
and chooses whom to evict at the connection cap), and the middleware that marks a request's
headers as read. Client errors are counted by the listener, never logged with a traceback."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.streams import StreamReader

from runtimekit.schema import shown

log = logging.getLogger("runtimekit.listener")


class Phase(enum.Enum):
    """Where a connection is in its request cycle; the deadline of each is the policy's."""

    HEADERS = "waiting for request headers"
    BODY = "waiting for a request body"
    BUSY = "handling a request"
    IDLE = "idle"


# At the cap, the connection to close for a new one: the first of the first phase that has one.
EVICTION_ORDER = (Phase.IDLE, Phase.HEADERS, Phase.BODY)


class ConnectionTracker(Protocol):
    """What a connection tells its listener (``runtimekit.listener.Listener``)."""

    def enter(self, handler: GuardedHandler, phase: Phase) -> None: ...
    def forget(self, handler: GuardedHandler) -> None: ...
    def client_error(self, kind: str, detail: str) -> None: ...


class GuardedHandler(web.RequestHandler):
    """aiohttp's connection protocol, reporting its phase to its ``Listener``."""

    __slots__ = ("_listener", "phase", "timer", "_body")

    def __init__(self, listener: ConnectionTracker, manager: web.Server, **options: Any) -> None:
        super().__init__(manager, **options)
        self._listener = listener
        self.phase: Phase | None = None  # None: not (or no longer) tracked
        self.timer: asyncio.TimerHandle | None = None
        self._body: StreamReader | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._listener.enter(self, Phase.HEADERS)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._listener.forget(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if data and self.phase is Phase.IDLE:
            self._listener.enter(self, Phase.HEADERS)
        super().data_received(data)

    def request_started(self, body: StreamReader) -> None:
        """The request's headers are in (called by the listener's middleware)."""
        self._body = body
        if self.phase is not None:
            self._listener.enter(self, Phase.BUSY if body.is_eof() else Phase.BODY)

    def body_received(self) -> bool:
        return self._body is None or self._body.is_eof()

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self._body = None
            if self.phase is not None:
                self._listener.enter(self, Phase.IDLE)

    def handle_error(
        self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """Client errors (and a request whose connection is gone) are counted, never a traceback;
        the server's own errors are aiohttp's (logged with their traceback, answered 500)."""
        if isinstance(exc, HttpProcessingError):
            self._listener.client_error(type(exc).__name__, f"{shown(message or exc.message)} from {request.remote}")
        elif self.transport is None:
            log.debug("request from %s ended with its connection: %r", request.remote, exc)
        else:
            return super().handle_error(request, status, exc, message)
        if request.writer.output_size > 0:
            raise ConnectionError("the response had begun: the connection is closed instead")
        response = web.Response(status=status, text=message or f"{status}", content_type="text/plain")
        response.force_close()
        return response


@web.middleware
async def request_started(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    protocol = request.protocol
    if isinstance(protocol, GuardedHandler):
        protocol.request_started(request.content)
    return await handler(request)

