"""Every HTTP listener of the project (the agent's, the remediation service's, any later one) served
under one policy, ``ListenerConfig``, so that no client can starve it.

aiohttp reads a request with no deadline but its keep-alive timer (an hour), and asyncio's accept
loop answers a full descriptor table with a traceback per attempt, thousands a second (CPython 3.11
keeps looping after EMFILE and stacks its retries). So the accept loop and the deadlines are ours:

- **Deadlines by phase**, one timer per connection, reset only when the phase changes: request
  headers within ``header_timeout`` of the connection's start or of the first byte after a kept-alive
  pause (a byte a second does not extend it); the body within ``body_timeout`` of the headers; then
  the request is being handled and has no deadline (a scrape is never cut); idle, ``keepalive_timeout``.
- **A connection cap.** At ``max_connections`` a new connection replaces the one longest idle, else
  longest waiting for its headers, else its body; it is refused only when all are handling requests,
  and at the cap one is accepted per loop turn so that those just accepted are read first. Measured
  with 1,500 slowloris clients reconnecting at once and a cap of 200 (server, clients and scraper in
  three processes): 20 of 20 scrapes answered, most within 60 ms (two waited 1 s, a SYN retry);
  pausing accept at the cap instead left scrapes in the backlog for 10-17 s or past a 15 s timeout.
  The cap stays ``RESERVED_DESCRIPTORS`` below RLIMIT_NOFILE: connections alone cannot fill the table.
- **Out of descriptors** (the table filled elsewhere): accepting pauses with one line, is retried every
  ``ACCEPT_RETRY_SECONDS`` (clients wait in the listen backlog), and one line says when it resumes.
- **Client errors** (a malformed request line or header, an oversized line, a missed deadline): one
  line per kind at the configured level, then a count every ``SUMMARY_SECONDS``; never a traceback.
"""

from __future__ import annotations

import asyncio
import enum
import errno
import logging
import resource
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.streams import StreamReader

from runtimekit.config import ListenerConfig
from runtimekit.log_summary import EventSummary
from runtimekit.schema import shown

log = logging.getLogger(__name__)

BACKLOG = 128  # the listen backlog, and connections accepted per wake-up (aiohttp's TCPSite default)
ACCEPT_RETRY_SECONDS = 1.0  # while out of descriptors (asyncio's ACCEPT_RETRY_DELAY)
SUMMARY_SECONDS = 60.0  # between summaries of counted events
RESERVED_DESCRIPTORS = 64  # kept out of the connection cap for the process's own files and sockets
DRAIN_SECONDS = 1.0  # at shutdown, requests in progress get this long to finish
SHUTDOWN_SECONDS = 4.5  # SIGTERM to exit, within the 5 s the agent promises
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


class Phase(enum.Enum):
    """Where a connection is in its request cycle; the deadline of each is the policy's."""

    HEADERS = "waiting for request headers"
    BODY = "waiting for a request body"
    BUSY = "handling a request"
    IDLE = "idle"


# At the cap, the connection to close for a new one: the first of the first phase that has one.
EVICTION_ORDER = (Phase.IDLE, Phase.HEADERS, Phase.BODY)


def effective_max_connections(configured: int, descriptor_limit: int | None) -> int:
    """The connection cap: the configured one, lowered to leave ``RESERVED_DESCRIPTORS`` of the
    descriptor limit to the rest of the process (at least 1)."""
    if descriptor_limit is None:
        return configured
    return max(1, min(configured, descriptor_limit - RESERVED_DESCRIPTORS))


class GuardedHandler(web.RequestHandler):
    """aiohttp's connection protocol, reporting its phase to its ``Listener``."""

    __slots__ = ("_listener", "phase", "timer", "_body")

    def __init__(self, listener: Listener, manager: web.Server, **options: Any) -> None:
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
async def _request_started(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    protocol = request.protocol
    if isinstance(protocol, GuardedHandler):
        protocol.request_started(request.content)
    return await handler(request)


class Listener:
    """The listening sockets, their accept loop, and the open connections with their deadlines."""

    def __init__(self, server: web.Server, policy: ListenerConfig, handler_options: dict[str, Any]) -> None:
        self._loop = asyncio.get_running_loop()
        self._server, self._options = server, handler_options
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self._descriptors = None if soft == resource.RLIM_INFINITY else soft  # None: unlimited
        self.max_connections = effective_max_connections(policy.max_connections, self._descriptors)
        self._deadlines = {Phase.HEADERS: policy.header_timeout_seconds, Phase.BODY: policy.body_timeout_seconds,
                           Phase.IDLE: policy.keepalive_timeout_seconds}
        # phase -> its connections, the longest in that phase first (the order in which to evict them)
        self._phases: dict[Phase, dict[GuardedHandler, None]] = {phase: {} for phase in Phase}
        self._sockets: list[socket.socket] = []
        self._adopting: set[asyncio.Task[None]] = set()
        self._paused_since: float | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._flush: asyncio.TimerHandle | None = None
        level = logging.getLevelName(policy.client_error_log_level.upper())
        self._client_errors = EventSummary(log, "client errors", level, SUMMARY_SECONDS)
        self._at_cap = EventSummary(log, "connection cap", logging.WARNING, SUMMARY_SECONDS)
        if self.max_connections < policy.max_connections:
            log.warning("max_connections %d is more than RLIMIT_NOFILE %s leaves to connections "
                        "(%d descriptors are kept for the process's own files): using %d",
                        policy.max_connections, self._descriptors, RESERVED_DESCRIPTORS, self.max_connections)

    @property
    def open_connections(self) -> int:
        return sum(len(handlers) for handlers in self._phases.values())

    @property
    def address(self) -> str:
        """``http://HOST:PORT`` of the first listening socket (the bound port when 0 was asked)."""
        host, port = self._sockets[0].getsockname()[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    async def start(self, host: str, port: int) -> None:
        """Bind ``host:port`` (every address it resolves to) and start accepting; OSError when taken."""
        infos = await self._loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                self._sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(BACKLOG)
                sock.setblocking(False)
        except OSError:
            self.close()
            raise
        self._listen()

    def close(self) -> None:
        """Stop accepting, close the idle and slow connections (busy ones finish: aiohttp's shutdown
        drains them), and log the pending summaries."""
        for sock in self._sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        self._sockets.clear()
        for handle in (self._retry, self._flush):
            if handle is not None:
                handle.cancel()
        self._retry = self._flush = None
        for phase in EVICTION_ORDER:
            for handler in list(self._phases[phase]):
                self._close(handler)
        self._client_errors.flush()
        self._at_cap.flush()

    # -- accepting ---------------------------------------------------------------------------------

    def _listen(self) -> None:
        self._retry = None
        for sock in self._sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(BACKLOG):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as error:  # out of descriptors (or memory): wait, and say so once
                self._pause(error)
                return
            if self._paused_since is not None:
                log.info("accepting connections again after %.1f s", self._loop.time() - self._paused_since)
                self._paused_since = None
            at_cap = self.open_connections + len(self._adopting) >= self.max_connections
            if at_cap and not self._make_room():
                conn.close()
            else:
                conn.setblocking(False)
                task = self._loop.create_task(self._adopt(conn))
                self._adopting.add(task)
                task.add_done_callback(self._adopting.discard)
            if at_cap:
                return  # one a loop turn at the cap: the connections just accepted get read first

    async def _adopt(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._protocol, conn)
        except OSError as error:  # the peer left before its transport was made
            log.debug("connection dropped before it started: %s", error)
            conn.close()

    def _protocol(self) -> GuardedHandler:
        return GuardedHandler(self, self._server, loop=self._loop, **self._options)

    def _pause(self, error: OSError) -> None:
        if self._retry is not None:
            return
        for sock in self._sockets:
            self._loop.remove_reader(sock.fileno())
        self._retry = self._loop.call_later(ACCEPT_RETRY_SECONDS, self._listen)
        if self._paused_since is None:
            self._paused_since = self._loop.time()
            problem = "out of file descriptors" if error.errno in _OUT_OF_DESCRIPTORS else "cannot accept connections"
            log.warning("%s (%s; RLIMIT_NOFILE %s, %d connections open): accepting paused, retried every %.0f s; "
                        "new connections wait in the listen backlog", problem, error.strerror or error,
                        self._descriptors, self.open_connections, ACCEPT_RETRY_SECONDS)

    def _make_room(self) -> bool:
        """At the cap: close the connection longest idle, else the one longest waiting for its
        request headers (a new connection is the last to go: a scraper's request is read before
        many more arrive), else for its body. True when one was closed, False (refused) when every
        one is handling a request."""
        for phase in EVICTION_ORDER:
            for victim in self._phases[phase]:
                self._note(self._at_cap, "evicted", f"{self.max_connections} connections open (max_connections): "
                           f"closed the one longest {phase.value} for a new one")
                self._close(victim)
                return True
        self._note(self._at_cap, "refused", f"{self.max_connections} connections open (max_connections), "
                   "all handling requests: refused a new one")
        return False

    # -- connections and their deadlines -----------------------------------------------------------

    def enter(self, handler: GuardedHandler, phase: Phase) -> None:
        """Move ``handler`` to ``phase`` (the last of its phase) and set that phase's deadline."""
        if handler.phase is not None:
            del self._phases[handler.phase][handler]
        handler.phase = phase
        self._phases[phase][handler] = None
        if handler.timer is not None:
            handler.timer.cancel()
        seconds = self._deadlines.get(phase)
        handler.timer = None if seconds is None else self._loop.call_later(seconds, self._expire, handler)

    def forget(self, handler: GuardedHandler) -> None:
        """Stop tracking ``handler`` (its connection is closed or being closed)."""
        if handler.phase is not None:
            del self._phases[handler.phase][handler]
            handler.phase = None
        if handler.timer is not None:
            handler.timer.cancel()
            handler.timer = None

    def client_error(self, kind: str, detail: str) -> None:
        self._note(self._client_errors, kind, detail)

    def _expire(self, handler: GuardedHandler) -> None:
        handler.timer = None
        phase = handler.phase
        if phase is Phase.BODY and handler.body_received():
            self.enter(handler, Phase.BUSY)
            return
        if phase in (Phase.HEADERS, Phase.BODY):
            what = "request headers" if phase is Phase.HEADERS else "request body"
            self.client_error(f"{what} too slow", f"not received within {self._deadlines[phase]} s from "
                              f"{_host(handler.peername)}: connection closed")
        self._close(handler)

    def _close(self, handler: GuardedHandler) -> None:
        self.forget(handler)
        handler.force_close()

    def _note(self, summary: EventSummary, kind: str, detail: str) -> None:
        if summary.note(kind, detail) and self._flush is None:
            self._flush = self._loop.call_later(SUMMARY_SECONDS, self._flush_summaries)

    def _flush_summaries(self) -> None:
        pending = [summary.flush() for summary in (self._client_errors, self._at_cap)]
        self._flush = self._loop.call_later(SUMMARY_SECONDS, self._flush_summaries) if any(pending) else None


def _host(peer: Any) -> str:
    return str(peer[0]) if isinstance(peer, tuple) else str(peer)


@asynccontextmanager
async def listening(
    app: web.Application, host: str, port: int, policy: ListenerConfig, *,
    shutdown_seconds: float = SHUTDOWN_SECONDS, access_log: logging.Logger | None = None,
) -> AsyncIterator[Listener]:
    """Start ``app`` (its startup and cleanup contexts run first) and serve it on ``host:port`` under
    ``policy``; on exit stop accepting, close the connections and clean the app up, giving up after
    ``shutdown_seconds``. ``access_log``: a logger for one line per request (None: none). The app
    must not have started yet: a middleware of the listener's is added to it."""
    if _request_started not in app.middlewares:
        app.middlewares.insert(0, _request_started)
    # aiohttp's own keep-alive timer (an hour, from the connection's start too) stays a backstop only.
    options: dict[str, Any] = {"access_log": access_log}
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=DRAIN_SECONDS, **options)
    await runner.setup()
    listener: Listener | None = None
    try:
        assert runner.server is not None  # set by setup()
        listener = Listener(runner.server, policy, options)
        await listener.start(host, port)
        yield listener
    finally:
        if listener is not None:
            listener.close()
        try:
            await asyncio.wait_for(runner.cleanup(), shutdown_seconds)
        except TimeoutError:
            log.error("shutdown took longer than %.1f s; exiting anyway", shutdown_seconds)


async def serve_app(
    app: web.Application, host: str, port: int, policy: ListenerConfig, *,
    on_listening: Callable[[str], None] | None = None, shutdown_seconds: float = SHUTDOWN_SECONDS,
    access_log: logging.Logger | None = None,
) -> None:
    """Serve ``app`` as ``listening`` does until SIGTERM or SIGINT; ``on_listening`` gets the
    address (``http://HOST:PORT``) once connections are accepted. OSError when the port is taken."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        async with listening(app, host, port, policy, shutdown_seconds=shutdown_seconds,
                             access_log=access_log) as listener:
            log.info("listening on %s", listener.address)
            if on_listening:
                on_listening(listener.address)
            await stop.wait()
            log.info("stopping")
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
