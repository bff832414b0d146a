"""The web configuration file on a gRPC TCP port: TLS credentials that follow the file, and an
interceptor for basic credentials and allowed client SANs.

- **TLS** (``server_credentials``): grpcio's dynamic credentials ask ``fetch`` for the certificate
  configuration at each new connection; it answers with the current certificate, key and client CA
  when the file changed (grpcio keeps the previous configuration when the fetch fails, so the
  interceptor refuses every call while the file is unusable). grpcio offers two client policies
  only, so ``client_auth_type`` must be ``NoClientCert`` or ``RequireAndVerifyClientCert``; it has no
  setting for TLS versions, cipher suites or curves, so those must stay at their defaults (TLS 1.2
  to 1.3, grpc's suites): anything else is refused by name rather than silently not applied.
  A stricter ``client_auth_type`` needs a restart (logged), as grpcio fixes it at start; until then
  the interceptor refuses calls whose connection presented no client certificate (UNAUTHENTICATED).
  A reading that lowers the protection (TLS, users, the client policy or the allowed SANs removed
  or weakened; ``protection.py``) is unusable: every call is refused (UNAVAILABLE) until it is back.
- **Credentials** (``WebConfigInterceptor``): on TCP, every call but the health service's (the
  gRPC twin of ``/healthz``) carries ``authorization: Basic base64(user:password)`` metadata when
  ``basic_auth_users`` is set (else UNAUTHENTICATED), and a client certificate naming one of
  ``client_allowed_sans`` when that is set (else PERMISSION_DENIED). Calls on the unix socket pass:
  its mode (0600) is its access control. bcrypt as for HTTP (``basic.py``).
- **No port without a credential** (``check_grpc_port_config``): a file with neither
  ``basic_auth_users`` nor ``RequireAndVerifyClientCert`` is refused at start, as the port can
  change the GPUs; a reload cannot drop them afterwards either (``protection.py``).
"""

from __future__ import annotations

import inspect
import logging
import urllib.parse
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
import grpc.aio

from runtimekit.schema import ConfigError

from .basic import CLIENT, BasicAuthChecker, Client
from .model import TlsServerConfig, WebConfig, WebConfigError
from .source import Loaded, WebConfigSource
from .tls import read_tls_file, san_allowed

log = logging.getLogger("runtimekit.webconfig")

#: Methods served without credentials (the standard health service: it shows nothing).
OPEN_METHODS = frozenset({"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"})


def grpc_problem(tls: TlsServerConfig) -> str | None:
    """Why grpcio cannot honour ``tls`` (None when it can)."""
    if tls.client_auth_type not in ("NoClientCert", "RequireAndVerifyClientCert"):
        return (f"tls_server_config.client_auth_type: {tls.client_auth_type} is not available on the gRPC port "
                "(grpcio offers NoClientCert and RequireAndVerifyClientCert)")
    changed = [name for name, value, default in (
        ("min_version", tls.min_version, "TLS12"), ("max_version", tls.max_version, "TLS13"),
        ("cipher_suites", tls.cipher_suites, ()), ("curve_preferences", tls.curve_preferences, ()),
    ) if value != default]
    if changed:
        return (f"tls_server_config.{changed[0]}: cannot be honoured on the gRPC port (grpcio has no setting for "
                "it); leave it at its default there (a separate api.web_config_file can hold the gRPC port's TLS)")
    return None


def _certificate_configuration(tls: TlsServerConfig) -> Any:
    pair = (read_tls_file("key_file", tls.key_file), read_tls_file("cert_file", tls.cert_file))
    ca = read_tls_file("client_ca_file", tls.client_ca_file) if tls.client_ca_file else (
        tls.client_ca.encode() if tls.client_ca else None)
    return grpc.ssl_server_certificate_configuration([pair], root_certificates=ca)


def check_grpc_port_config(config: WebConfig, key: str) -> TlsServerConfig:
    """The TLS section of ``config`` if the gRPC TCP port can serve it; ``WebConfigError`` naming
    ``key``, the file and the rule when it has none (the TCP port is TLS only), asks for what
    grpcio cannot do, or asks no client for a credential: the port creates and deletes slices and
    switches MIG modes, so an open one would let anyone who reaches it reconfigure the GPUs
    (``WebConfig.authenticates``, the rule the remediation service's receiver applies too)."""
    where = f"{key}: {config.path}"
    if config.tls is None:
        raise WebConfigError(f"{where}: tls_server_config: required for the gRPC TCP port (it is TLS only)")
    problem = grpc_problem(config.tls)
    if problem is not None:
        raise WebConfigError(f"{where}: {problem}")
    if not config.authenticates:
        raise WebConfigError(
            f"api.tcp_listen: {key} {config.path} asks no client for a credential: the gRPC TCP port creates and "
            "deletes slices and switches MIG modes, so it needs basic_auth_users or "
            "tls_server_config.client_auth_type: RequireAndVerifyClientCert")
    return config.tls


def server_credentials(source: WebConfigSource) -> grpc.ServerCredentials:
    """TLS credentials of the gRPC TCP port from ``source``, following its changes;
    ``WebConfigError`` naming the key when the file is unusable now or not servable on gRPC."""
    loaded = source.current()
    if loaded.error is not None or loaded.config is None:
        raise WebConfigError(loaded.error or f"{source.key}: {source.path}: unreadable")
    tls = check_grpc_port_config(loaded.config, source.key)
    try:
        initial = _certificate_configuration(tls)
    except ConfigError as error:
        raise WebConfigError(f"{source.key}: {source.path}: {error}") from None
    require = tls.requires_client_certificate
    served = [loaded.generation]

    def fetch() -> Any:
        now = source.current()
        if now.generation == served[0] or now.config is None:
            return None  # unchanged, or unusable: grpcio keeps the last certificates, the interceptor refuses
        served[0] = now.generation
        tls_now = now.config.tls
        problem = grpc_problem(tls_now) if tls_now else "tls_server_config: removed"
        if tls_now is not None and problem is None and tls_now.requires_client_certificate != require:
            problem = "tls_server_config.client_auth_type: changed; the gRPC port applies it at its next start"
        if problem is not None or tls_now is None:
            log.error("%s: %s: %s; the gRPC port keeps its previous certificates", source.key, source.path, problem)
            return None
        try:
            return _certificate_configuration(tls_now)
        except ConfigError as error:
            log.error("%s: %s: %s; the gRPC port keeps its previous certificates", source.key, source.path, error)
            return None

    return grpc.dynamic_ssl_server_credentials(initial, fetch, require_client_authentication=require)


class WebConfigInterceptor(grpc.aio.ServerInterceptor):
    """Credentials and client SANs of the web configuration file, for calls over TCP."""

    def __init__(self, source: WebConfigSource, open_methods: frozenset[str] = OPEN_METHODS) -> None:
        self._source, self._open = source, open_methods
        self._basic = BasicAuthChecker()

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method in self._open:
            return handler
        return _guarded(handler, self._admit)

    async def _admit(self, context: grpc.aio.ServicerContext) -> None:
        """Abort the call unless its peer may make it."""
        if context.peer().startswith("unix:"):
            return
        loaded: Loaded = self._source.current()
        if loaded.config is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the web configuration file is unusable; see the agent's log")
        config = loaded.config
        assert config is not None
        tls = config.tls
        if tls is not None and tls.requires_client_certificate and context.peer_identities() is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a client certificate is required (the port applies "
                                "the changed client_auth_type at its next start)")
        if tls is not None and tls.client_allowed_sans is not None:
            names = [value.decode(errors="replace")
                     for value in context.auth_context().get("x509_subject_alternative_name", [])]
            if not san_allowed(names, tls.client_allowed_sans):
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, "the client certificate names none of the allowed SANs")
        if config.users:
            CLIENT.set(Client(peer_host(context.peer())))  # this call's: checks take turns by address (basic.py)
            metadata = dict(context.invocation_metadata() or ())
            authorization = metadata.get("authorization")
            header = authorization if isinstance(authorization, str) else None
            if not await self._basic.check(header, config.users):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong credentials "
                                    "(authorization: Basic metadata)")


def peer_host(peer: str) -> str:
    """The address of a gRPC peer (``ipv4:10.0.0.7:51234``, ``ipv6:[::1]:51234``, its brackets
    possibly %-encoded) without its port; anything else as it is."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6") or ":" not in rest:
        return peer
    return urllib.parse.unquote(rest.rsplit(":", 1)[0]).strip("[]")


Admit = Callable[[grpc.aio.ServicerContext], Awaitable[None]]


def _guarded(handler: grpc.RpcMethodHandler, admit: Admit) -> grpc.RpcMethodHandler:
    """``handler`` of the same kind, running ``admit`` before its behaviour."""
    kinds: Sequence[tuple[str, Callable[..., grpc.RpcMethodHandler]]] = (
        ("unary_unary", grpc.unary_unary_rpc_method_handler), ("unary_stream", grpc.unary_stream_rpc_method_handler),
        ("stream_unary", grpc.stream_unary_rpc_method_handler), ("stream_stream", grpc.stream_stream_rpc_method_handler),
    )
    for attribute, make in kinds:
        behaviour = getattr(handler, attribute)
        if behaviour is not None:
            return make(_wrap(behaviour, admit), request_deserializer=handler.request_deserializer,
                        response_serializer=handler.response_serializer)
    return handler


def _wrap(behaviour: Callable[..., Any], admit: Admit) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(behaviour):
        async def streamed(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await admit(context)
            async for item in behaviour(request, context):
                yield item

        return streamed

    async def called(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await admit(context)
        result = behaviour(request, context)
        return await result if inspect.isawaitable(result) else result

    return called
