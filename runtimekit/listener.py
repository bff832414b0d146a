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
  longest waiting for its headers, else its body, else the one whose request most recently began
  waiting for a password check (``runtimekit.webconfig.basic``: a flood of wrong passwords queued
  for bcrypt must not hold every slot, and the one waiting longest is nearest its answer; each
  connection's ``basic.CLIENT`` tells the checker its address and the listener that it waits); it
  is refused only when all are handling requests otherwise, and at the cap one is accepted per loop
  turn so that those just accepted are read first. Measured with 1,500 slowloris clients
  reconnecting at once and a cap of 200 (server, clients and scraper in three processes): 20 of
  20 scrapes answered, most within 60 ms (two waited 1 s, a SYN retry);
  pausing accept at the cap instead left scrapes in the backlog for 10-17 s or past a 15 s timeout.
  The cap stays ``RESERVED_DESCRIPTORS`` below RLIMIT_NOFILE: connections alone cannot fill the table.
- **Out of descriptors** (the table filled elsewhere): accepting pauses with one line, is retried every
  ``ACCEPT_RETRY_SECONDS`` (clients wait in the listen backlog), and one line says when it resumes.
- **Client errors** (a malformed request line or header, an oversized line, a missed deadline, a
  failed TLS handshake): one line per kind at the configured level, then a count every
  ``SUMMARY_SECONDS``; never a traceback.
- **TLS and auth** from ``policy.web_config_file`` (``runtimekit.webconfig``): each new connection
  gets the TLS context of the file as it is now, and must finish its handshake within
  ``header_timeout`` (a handshake still under way is evicted at the cap before a connection waiting
  for its headers); each request passes the ``Guard``'s middleware (credentials, client SANs, rate
  limit, a declared body over the application's ``client_max_size``: 413). A listener that asks
  for passwords or a token without TLS starts with a warning: they would cross the network in clear.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import signal
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from runtimekit.config import ListenerConfig
from runtimekit.listener_connection import EVICTION_ORDER, GuardedHandler, Phase, request_started
from runtimekit.log_summary import EventSummary
from runtimekit.schema import shown
from runtimekit.waiting import finished_within
from runtimekit.webconfig import GUARD, ConnectionRefused, Guard
from runtimekit.webconfig.basic import CLIENT, Client

log = logging.getLogger(__name__)

BACKLOG = 128  # the listen backlog, and connections accepted per wake-up (aiohttp's TCPSite default)
ACCEPT_RETRY_SECONDS = 1.0  # while out of descriptors (asyncio's ACCEPT_RETRY_DELAY)
SUMMARY_SECONDS = 60.0  # between summaries of counted events
RESERVED_DESCRIPTORS = 64  # kept out of the connection cap for the process's own files and sockets
DRAIN_SECONDS = 1.0  # at shutdown, requests in progress get this long to finish
SHUTDOWN_SECONDS = 4.5  # SIGTERM to exit, within the 5 s the agent promises
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


def effective_max_connections(configured: int, descriptor_limit: int | None) -> int:
    """The connection cap: the configured one, lowered to leave ``RESERVED_DESCRIPTORS`` of the
    descriptor limit to the rest of the process (at least 1)."""
    if descriptor_limit is None:
        return configured
    return max(1, min(configured, descriptor_limit - RESERVED_DESCRIPTORS))


class Listener:
    """The listening sockets, their accept loop, and the open connections with their deadlines."""

    def __init__(self, server: web.Server, policy: ListenerConfig, handler_options: dict[str, Any],
                 guard: Guard | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._server, self._options = server, handler_options
        self._guard = guard or Guard(None)
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self._descriptors = None if soft == resource.RLIM_INFINITY else soft  # None: unlimited
        self.max_connections = effective_max_connections(policy.max_connections, self._descriptors)
        self._deadlines = {Phase.HEADERS: policy.header_timeout_seconds, Phase.BODY: policy.body_timeout_seconds,
                           Phase.IDLE: policy.keepalive_timeout_seconds}
        # phase -> its connections, the longest in that phase first (the order in which to evict them)
        self._phases: dict[Phase, dict[GuardedHandler, None]] = {phase: {} for phase in Phase}
        self._clients: dict[GuardedHandler, Client] = {}  # whether a connection's request waits for a password check
        self._sockets: list[socket.socket] = []
        # connections accepted whose transport is not made yet (their TLS handshake), oldest first
        self._adopting: dict[asyncio.Task[None], None] = {}
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
    def security(self) -> str:
        """What a client must bring ("TLS, client certificates required, basic auth")."""
        return self._guard.describe()

    @property
    def address(self) -> str:
        """``http://HOST:PORT`` (``https://`` with TLS) of the first listening socket (the bound
        port when 0 was asked)."""
        host, port = self._sockets[0].getsockname()[:2]
        scheme = "https" if self._serves_tls() else "http"
        return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"

    def _serves_tls(self) -> bool:
        """Does a new connection get TLS now (the web configuration file as last read)?"""
        loaded = self._guard.loaded()
        return loaded is not None and loaded.ssl_context is not None

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
                conn, peer = sock.accept()
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
                task = self._loop.create_task(self._adopt(conn, peer))
                self._adopting[task] = None
                task.add_done_callback(self._adopted)
            if at_cap:
                return  # one a loop turn at the cap: the connections just accepted get read first

    async def _adopt(self, conn: socket.socket, peer: Any) -> None:
        CLIENT.set(Client(_host(peer)))  # the connection's callbacks and requests run in copies of this context
        try:
            context = self._guard.tls_for_connection()
        except ConnectionRefused:  # the web configuration file is unusable (logged where it is read)
            conn.close()
            return
        try:
            await self._loop.connect_accepted_socket(
                self._protocol, conn, ssl=context,
                ssl_handshake_timeout=self._deadlines[Phase.HEADERS] if context is not None else None)
        except OSError as error:  # the peer left before its transport was made, or its TLS handshake failed
            if context is None:
                log.debug("connection dropped before it started: %s", error)
            else:
                self.client_error("TLS handshake failed", f"{_tls_reason(error)} from {_host(peer)}")
            conn.close()

    def _adopted(self, task: asyncio.Task[None]) -> None:
        self._adopting.pop(task, None)

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
        """At the cap: close the connection longest idle, else the one longest in its TLS handshake (on
        plain HTTP: accepted, its transport not made yet), else the one longest waiting for its request
        headers (a new connection is the last to go: a scraper's request is read before many more
        arrive), else for its body, else the one whose request most recently began waiting for a
        password check. True when one was closed, False (refused) when every one is handling a
        request otherwise."""
        for phase in EVICTION_ORDER:
            if phase is Phase.HEADERS and self._adopting:  # a TLS handshake under way goes first
                setting_up = "in its TLS handshake" if self._serves_tls() else "accepted but not yet started"
                self._note(self._at_cap, "evicted", f"{self.max_connections} connections open (max_connections): "
                           f"closed the one longest {setting_up} for a new one")
                handshake = next(iter(self._adopting))
                del self._adopting[handshake]
                handshake.cancel()  # asyncio closes its socket
                return True
            for victim in self._phases[phase]:
                self._note(self._at_cap, "evicted", f"{self.max_connections} connections open (max_connections): "
                           f"closed the one longest {phase.value} for a new one")
                self._close(victim)
                return True
        for victim in reversed(self._phases[Phase.BUSY]):
            client = self._clients.get(victim)
            if client is not None and client.waiting:
                self._note(self._at_cap, "evicted", f"{self.max_connections} connections open (max_connections): "
                           "closed the one most recently waiting for a password check for a new one")
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
        elif (client := CLIENT.get()) is not None:  # its first phase, entered from connection_made in _adopt's context
            self._clients[handler] = client
        handler.phase = phase
        self._phases[phase][handler] = None
        if handler.timer is not None:
            handler.timer.cancel()
        seconds = self._deadlines.get(phase)
        handler.timer = None if seconds is None else self._loop.call_later(seconds, self._expire, handler)

    def forget(self, handler: GuardedHandler) -> None:
        """Stop tracking ``handler`` (its connection is closed or being closed)."""
        self._clients.pop(handler, None)
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


def _tls_reason(error: OSError) -> str:
    """The short cause of a failed handshake (OpenSSL's reason, or the timeout's message)."""
    reason = getattr(error, "reason", None)
    return str(reason) if reason else shown(str(error) or type(error).__name__)


@asynccontextmanager
async def listening(
    app: web.Application, host: str, port: int, policy: ListenerConfig, *,
    shutdown_seconds: float = SHUTDOWN_SECONDS, access_log: logging.Logger | None = None,
) -> AsyncIterator[Listener]:
    """Start ``app`` (its startup and cleanup contexts run first) and serve it on ``host:port`` under
    ``policy``; on exit stop accepting, close the connections and clean the app up, giving up after
    ``shutdown_seconds``. ``access_log``: a logger for one line per request (None: none). The app
    must not have started yet: a middleware of the listener's is added to it, and the ``Guard`` of
    ``policy.web_config_file`` (unless the app brings its own under ``runtimekit.webconfig.GUARD``)."""
    guard = app.get(GUARD)
    if guard is None:
        guard = app[GUARD] = Guard.from_file(policy.web_config_file, "listener.web_config_file")
    if guard.middleware not in app.middlewares:
        app.middlewares.insert(0, guard.middleware)
    if request_started not in app.middlewares:
        app.middlewares.insert(0, request_started)
    # aiohttp's own keep-alive timer (an hour, from the connection's start too) stays a backstop only.
    options: dict[str, Any] = {"access_log": access_log}
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=DRAIN_SECONDS, **options)
    await runner.setup()
    listener: Listener | None = None
    try:
        assert runner.server is not None  # set by setup()
        listener = Listener(runner.server, policy, options, guard)
        await listener.start(host, port)
        if guard.credentials_over_plain_http():
            log.warning("credentials over plain HTTP on %s: set tls_server_config in the web configuration file",
                        listener.address)
        yield listener
    finally:
        if listener is not None:
            listener.close()
        if not await finished_within(shutdown_seconds, runner.cleanup()):
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
            log.info("listening on %s (%s)", listener.address, listener.security)
            if on_listening:
                on_listening(listener.address)
            await stop.wait()
            log.info("stopping")
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
