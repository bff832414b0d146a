"""The gRPC server of runtimekit.v1 inside the agent: a grpc.aio server on the unix socket
``Config.api_socket`` (mode 0600), optionally on TCP with TLS, with the standard gRPC health
service (grpc.health.v1) and server reflection beside ``runtimekit.v1.AgentService``.

The socket is never reachable with a wider mode, whatever the process umask
(``runtimekit.grpc_unix.private_socket``): its mode is its access control.

TCP (``api.tcp_listen``) is TLS only, from the web configuration file (``api.web_config_file``, else
``listener.web_config_file``; ``runtimekit.webconfig.grpc_port``): its certificate, key and client
CA are followed when they change; with ``RequireAndVerifyClientCert`` every client must present a
certificate that chains to the client CA; with ``basic_auth_users`` every call but the health
service's carries ``authorization: Basic ...`` metadata (UNAUTHENTICATED otherwise). The limits of
``listener.*`` hold there too: the TLS and HTTP/2 handshake within ``header_timeout_seconds``, idle
connections closed after ``keepalive_timeout_seconds``, at most ``max_connections`` calls at once
(RESOURCE_EXHAUSTED past it), and request messages of ``MAX_REQUEST_BYTES`` at most
(RESOURCE_EXHAUSTED). Sources: grpc.aio's Server API; grpc_types.h (channel arguments); the health
checking protocol (https://github.com/grpc/grpc/blob/master/doc/health-checking.md); server
reflection (https://github.com/grpc/grpc/blob/master/doc/server-reflection.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
from grpc_reflection.v1alpha import reflection  # type: ignore[import-untyped]

from runtimekit._proto.runtimekit.v1 import service_pb2, service_pb2_grpc
from runtimekit.api.servicer import AgentServicer
from runtimekit.config import Config, ConfigError, ListenerConfig
from runtimekit.grpc_unix import private_socket, publish_socket, remove_own_socket, remove_stale_socket
from runtimekit.schema import parse_listen
from runtimekit.state import NodeState
from runtimekit.state.slices import SliceService
from runtimekit.state.topology import Allocator
from runtimekit.webconfig import WebConfigSource
from runtimekit.webconfig.grpc_port import WebConfigInterceptor, server_credentials

log = logging.getLogger("runtimekit.api")

#: The full name of runtimekit.v1's service, as reflection and the health service list it.
SERVICE_NAME: str = service_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name
STOP_GRACE_SECONDS = 1.0  # in-flight unary calls get this long at stop; streams are cancelled after it
#: The largest request message (runtimekit.v1's requests are a few hundred bytes: ids and slice
#: specs); the HTTP listeners' bodies have the same 1 MiB bound (aiohttp's client_max_size).
MAX_REQUEST_BYTES = 1 << 20


def server_options(policy: ListenerConfig) -> list[tuple[str, int]]:
    """Channel arguments that hold the TCP port to the listener policy (grpc_types.h names)."""
    return [
        ("grpc.server_handshake_timeout_ms", int(policy.header_timeout_seconds * 1000)),
        ("grpc.max_connection_idle_ms", int(policy.keepalive_timeout_seconds * 1000)),
        ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
        # gRPC core sets SO_REUSEPORT by default on Linux: a second agent could then bind the same
        # TCP port and share its connections. Off, a port another process holds fails the bind.
        ("grpc.so_reuseport", 0),
    ]


_ANY_HOST = ("", "0.0.0.0", "::")


def check_tcp_listen(address: str, http_listen: str) -> None:
    """Refuse, before anything starts, an ``api.tcp_listen`` the gRPC port could not be served at:
    the port of the agent's own HTTP ``listen`` (on the same host, or either on every address),
    or a port another process holds now (tried with a bind, SO_REUSEADDR and no SO_REUSEPORT, as the
    server binds it; port 0
    is any free port). ValueError naming the key and the rule: the API's start would otherwise
    fail again at every restart of its component."""
    host, port = parse_listen(address)
    if port == 0:
        return
    http_host, http_port = parse_listen(http_listen)
    if port == http_port and (host == http_host or host in _ANY_HOST or http_host in _ANY_HOST):
        raise ValueError(f"api.tcp_listen {address}: the agent's own HTTP listen address ({http_listen}) takes that "
                         "port; name another")
    try:
        family, kind, proto, _, where = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                           flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(where)
    except OSError as error:
        raise ValueError(f"api.tcp_listen {address}: cannot listen there ({error.strerror or error})") from None


class ApiServer:
    """runtimekit.v1 served for ``state`` and ``slicer`` (None: the slicer is disabled; slice calls
    answer UNAVAILABLE). ``start`` binds and serves; ``stop`` stops and removes the socket; a
    stopped server starts again."""

    def __init__(self, state: NodeState, slicer: SliceService | None, config: Config,
                 allocate: Allocator | None = None) -> None:
        self.socket_path = os.path.abspath(config.api_socket)
        self._api, self._policy = config.api, config.listener
        self._web_config = config.api_web_config_file
        self._web_config_key = "api.web_config_file" if config.api.web_config_file else "listener.web_config_file"
        self._state = state
        self._slicer = slicer
        self._allocate = allocate
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._stopped = asyncio.Event()
        self._published: tuple[int, int] | None = None  # the socket this server put at socket_path
        self.tcp_port: int | None = None  # the bound TCP port (useful with port 0); None without TCP

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError(f"runtimekit.v1 already serving on {self.socket_path}")
        credentials, interceptors = None, []
        if self._api.tcp_listen is not None:
            if self._web_config is None:
                raise ConfigError("api.tcp_listen: needs listener.web_config_file or api.web_config_file with a "
                                  "tls_server_config (the TCP port is TLS only)")
            source = WebConfigSource(self._web_config, self._web_config_key)
            credentials, interceptors = server_credentials(source), [WebConfigInterceptor(source)]
        remove_stale_socket(self.socket_path)
        server = grpc.aio.server(interceptors=interceptors, options=server_options(self._policy),
                                 maximum_concurrent_rpcs=self._policy.max_connections)
        service_pb2_grpc.add_AgentServiceServicer_to_server(AgentServicer(self._state, self._slicer, self._allocate), server)
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        try:
            with private_socket(self.socket_path) as bound:
                server.add_insecure_port(f"unix:{bound}")
                if credentials is not None:
                    self.tcp_port = self._bind_tcp(server, credentials)
                await server.start()
                self._published = publish_socket(bound, self.socket_path)
        except BaseException:
            await server.stop(None)
            self.tcp_port = None
            raise
        for name in ("", SERVICE_NAME):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._server = server
        self._stopped.clear()
        tcp = f" and {self._api.tcp_listen} (TLS from {self._web_config_key} {self._web_config})"
        log.info("runtimekit.v1 serving on unix:%s%s", self.socket_path, tcp if self.tcp_port is not None else "")

    def _bind_tcp(self, server: grpc.aio.Server, credentials: grpc.ServerCredentials) -> int:
        address = self._api.tcp_listen
        try:
            port = server.add_secure_port(address, credentials)
        except RuntimeError as error:  # grpc raises when it cannot bind
            raise OSError(f"api.tcp_listen: cannot listen on {address}: {error}") from None
        if not port:
            raise OSError(f"api.tcp_listen: cannot listen on {address}")
        return int(port)

    async def wait(self) -> None:
        """Return once ``stop`` ran (a supervised component's ``run``). Cancelling it is safe: it
        never awaits grpc's ``wait_for_termination``, whose cancellation leaves the server unable
        to shut down (its shutdown then raises CancelledError and the socket stays behind)."""
        if self._server is not None:
            await self._stopped.wait()

    async def stop(self, grace: float | None = STOP_GRACE_SECONDS) -> None:
        """Stop serving (health NOT_SERVING first), remove the socket; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        try:
            await server.stop(grace)
        finally:
            self.tcp_port = None
            remove_own_socket(self.socket_path, self._published)
            self._published = None
            self._stopped.set()
