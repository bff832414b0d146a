"""Errors of the node's attribution sources, and the unix-socket gRPC plumbing that raises them.

The kubelet pod-resources client (``podresources``) and the CRI client (``cri``) share one
transport: a ``grpc.aio`` channel to a unix socket, a deadline on every call, and one error
vocabulary, so callers handle "the kubelet is restarting" the same way for both:

- ``SourceUnavailable``: nothing answered: the socket is missing, refused the connection, or the
  call ran past its deadline. Expected while the kubelet or the runtime restarts; try again on the
  next cycle, the client reconnects by itself.
- ``SourceError``: the source answered with an error (UNIMPLEMENTED on an old kubelet,
  PERMISSION_DENIED, ...). ``SourceUnavailable`` is a subclass, so ``except SourceError`` catches
  both.

No protobuf or grpc object ever leaves this package: clients return frozen dataclasses.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
import grpc.aio

__all__ = ["SourceError", "SourceUnavailable", "UnixRpcClient", "socket_path_of"]

_T = TypeVar("_T")

# Codes that mean "nobody answered", as opposed to "the source answered with an error".
_UNAVAILABLE_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)


class SourceError(Exception):
    """An attribution source (kubelet pod-resources, CRI runtime) failed a call.

    ``source`` names the source ("kubelet pod-resources"), ``socket_path`` its socket, ``code``
    the gRPC status code name ("UNIMPLEMENTED") or None when no call was made.
    """

    def __init__(self, source: str, socket_path: str, reason: str, code: str | None = None) -> None:
        super().__init__(f"{source} at unix:{socket_path}: {reason}")
        self.source = source
        self.socket_path = socket_path
        self.reason = reason
        self.code = code


class SourceUnavailable(SourceError):
    """The source did not answer: socket missing or refused, or no reply before the deadline."""


def socket_path_of(endpoint: str) -> str:
    """The filesystem path of a unix endpoint: "/p", "unix:/p" and "unix:///p" all give "/p"."""
    if endpoint.startswith("unix://"):
        return endpoint[len("unix://") :]
    if endpoint.startswith("unix:"):
        return endpoint[len("unix:") :]
    return endpoint


class UnixRpcClient:
    """A lazily opened ``grpc.aio`` channel to one unix socket, with deadlines and error mapping.

    The channel is created on the first call (inside the running event loop, as grpc.aio
    requires) and dropped when a call finds nobody answering, so a kubelet or runtime that
    restarted, re-creating its socket, is picked up by the next call without waiting out gRPC's
    reconnect backoff. A call that fails as unavailable on a channel that had worked before is
    retried once on a fresh channel within the same deadline budget.
    """

    source = "gRPC source"  # overridden: the human name used in error messages

    def __init__(self, socket_path: str, timeout: float = 5.0) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        self.socket_path = socket_path_of(socket_path)
        self.timeout = float(timeout)
        self._channel: grpc.aio.Channel | None = None
        self._stub: object | None = None

    # -- subclass hook -------------------------------------------------------------------------
    def _make_stub(self, channel: grpc.aio.Channel) -> object:
        raise NotImplementedError

    # -- lifecycle -----------------------------------------------------------------------------
    async def close(self) -> None:
        """Close the channel (idempotent); a later call opens a new one."""
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- calls ---------------------------------------------------------------------------------
    def _check_socket(self) -> None:
        try:
            mode = os.stat(self.socket_path).st_mode
        except FileNotFoundError:
            raise SourceUnavailable(self.source, self.socket_path, "socket does not exist") from None
        except OSError as exc:
            raise SourceUnavailable(self.source, self.socket_path, f"cannot stat socket: {exc}") from None
        if not stat.S_ISSOCK(mode):
            raise SourceUnavailable(self.source, self.socket_path, "path exists but is not a socket")

    def _stub_now(self) -> tuple[object, bool]:
        """The stub, and whether its channel is new (never used for a call yet)."""
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(
                f"unix:{self.socket_path}",
                options=[
                    # A unix socket either answers at once or not at all: keep backoff short.
                    ("grpc.initial_reconnect_backoff_ms", 100),
                    ("grpc.min_reconnect_backoff_ms", 100),
                    ("grpc.max_reconnect_backoff_ms", 1000),
                    ("grpc.enable_retries", 0),
                ],
            )
            self._stub = self._make_stub(self._channel)
            return self._stub, True
        return self._stub, False

    async def _drop_channel(self) -> None:
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            try:
                await channel.close()
            except Exception:  # closing a broken channel must not hide the real error
                pass

    async def _call(self, what: str, invoke: Callable[[object, float], Awaitable[_T]]) -> _T:
        """Run ``invoke(stub, timeout)`` and map gRPC failures to ``SourceError``s.

        ``what`` names the call in messages ("List"). The whole call, retry included, stays
        within ``self.timeout`` seconds.
        """
        self._check_socket()
        deadline = time.monotonic() + self.timeout
        stub, fresh = self._stub_now()
        for attempt in (1, 2):
            remaining = max(deadline - time.monotonic(), 0.001)
            try:
                return await invoke(stub, remaining)
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                if code not in _UNAVAILABLE_CODES:
                    reason = f"{what} failed: {code.name}: {exc.details()}"
                    raise SourceError(self.source, self.socket_path, reason, code.name) from None
                await self._drop_channel()
                if (
                    attempt == 1
                    and not fresh
                    and code == grpc.StatusCode.UNAVAILABLE
                    and time.monotonic() < deadline
                ):
                    # The channel predates a restart of the source: one more try on a new one.
                    self._check_socket()
                    stub, fresh = self._stub_now()
                    continue
                if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    reason = f"{what} got no answer within {self.timeout:g}s"
                else:
                    reason = f"{what} failed: {code.name}: {exc.details()}"
                raise SourceUnavailable(self.source, self.socket_path, reason, code.name) from None
        raise AssertionError("unreachable")  # pragma: no cover
