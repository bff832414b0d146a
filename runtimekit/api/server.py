"""The gRPC server of runtimekit.v1 inside the agent: a grpc.aio server on the unix socket
``Config.api_socket`` (mode 0600), optionally on TCP with TLS, with the standard gRPC health
service (grpc.health.v1) and server reflection beside ``runtimekit.v1.AgentService``.

The socket is never reachable with a wider mode, whatever the process umask: gRPC binds it inside
a fresh directory of mode 0700 (``tempfile.mkdtemp``) next to the final path, where only the
agent's user can reach it; it is chmod-ed to 0600 there, then renamed onto the final path (a
rename keeps the bound socket; connecting clients find it under the new name). The process umask
is never touched (other threads create files meanwhile).

TCP (``api.tcp_listen``) is TLS only: ``api.tls_cert_file`` and ``api.tls_key_file`` (PEM) are the
server's; with ``api.tls_client_ca_file`` every client must present a certificate that chains to
that CA (mutual TLS). Sources: grpc.aio's Server API; the health checking protocol
(https://github.com/grpc/grpc/blob/master/doc/health-checking.md); server reflection
(https://github.com/grpc/grpc/blob/master/doc/server-reflection.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
from grpc_reflection.v1alpha import reflection  # type: ignore[import-untyped]

from runtimekit._proto.runtimekit.v1 import service_pb2, service_pb2_grpc
from runtimekit.api.servicer import AgentServicer
from runtimekit.config import ApiConfig, Config, ConfigError
from runtimekit.grpc_unix import remove_stale_socket
from runtimekit.state import NodeState
from runtimekit.state.slices import SliceService
from runtimekit.state.topology import Allocator

log = logging.getLogger("runtimekit.api")

#: The full name of runtimekit.v1's service, as reflection and the health service list it.
SERVICE_NAME: str = service_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name
SOCKET_MODE = 0o600
STOP_GRACE_SECONDS = 1.0  # in-flight unary calls get this long at stop; streams are cancelled after it


def _read(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as error:
        raise ConfigError(f"api.{key}: cannot read {path}: {error.strerror or error}") from None


def tls_credentials(api: ApiConfig) -> grpc.ServerCredentials:
    """The TCP port's credentials: the server's certificate and key, and the client CA when set
    (then a client certificate is required)."""
    if api.tls_cert_file is None or api.tls_key_file is None:
        raise ConfigError("api.tcp_listen: needs api.tls_cert_file and api.tls_key_file (the TCP port is TLS only)")
    pair = (_read(api.tls_key_file, "tls_key_file"), _read(api.tls_cert_file, "tls_cert_file"))
    client_ca = _read(api.tls_client_ca_file, "tls_client_ca_file") if api.tls_client_ca_file else None
    return grpc.ssl_server_credentials([pair], root_certificates=client_ca, require_client_auth=client_ca is not None)


class ApiServer:
    """runtimekit.v1 served for ``state`` and ``slicer`` (None: the slicer is disabled; slice calls
    answer UNAVAILABLE). ``start`` binds and serves; ``stop`` stops and removes the socket; a
    stopped server starts again."""

    def __init__(self, state: NodeState, slicer: SliceService | None, config: Config,
                 allocate: Allocator | None = None) -> None:
        self.socket_path = os.path.abspath(config.api_socket)
        self._api = config.api
        self._state = state
        self._slicer = slicer
        self._allocate = allocate
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._stopped = asyncio.Event()
        self.tcp_port: int | None = None  # the bound TCP port (useful with port 0); None without TCP

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError(f"runtimekit.v1 already serving on {self.socket_path}")
        credentials = tls_credentials(self._api) if self._api.tcp_listen is not None else None
        remove_stale_socket(self.socket_path)
        server = grpc.aio.server()
        service_pb2_grpc.add_AgentServiceServicer_to_server(AgentServicer(self._state, self._slicer, self._allocate), server)
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        private = tempfile.mkdtemp(prefix=".api-", dir=os.path.dirname(self.socket_path))  # mode 0700
        try:
            bound = os.path.join(private, "s")
            server.add_insecure_port(f"unix:{bound}")
            if credentials is not None:
                self.tcp_port = self._bind_tcp(server, credentials)
            await server.start()
            os.chmod(bound, SOCKET_MODE)
            os.rename(bound, self.socket_path)
        except BaseException:
            await server.stop(None)
            self.tcp_port = None
            raise
        finally:
            shutil.rmtree(private, ignore_errors=True)
        for name in ("", SERVICE_NAME):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._server = server
        self._stopped.clear()
        tcp = f" and {self._api.tcp_listen} (TLS{', client certificates required' if self._api.tls_client_ca_file else ''})"
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
            remove_stale_socket(self.socket_path, create_dir=False)
            self._stopped.set()
