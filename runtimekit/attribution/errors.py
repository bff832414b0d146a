"""Errors of the node's attribution sources, and the unix-socket gRPC client that raises them.

The kubelet pod-resources client (``podresources``) and the CRI client (``cri``) share one
transport: a ``grpc.aio`` channel to a unix socket, a deadline on every call, and one error
vocabulary, so callers handle "the kubelet is restarting" the same way for both:

- ``SourceUnavailable``: nothing answered: the socket is missing, refused the connection, or the
  call ran past its deadline. Expected while the kubelet or the runtime restarts; try again on the
  next cycle, the client reconnects by itself.
- ``SourceError``: the source answered with an error (UNIMPLEMENTED on an old kubelet,
  PERMISSION_DENIED, ...). ``SourceUnavailable`` is a subclass, so ``except SourceError`` catches
  both.

The transport (channel options, deadlines, the error mapping) is ``runtimekit.grpc_unix``; this
module names the attribution vocabulary. No protobuf or grpc object ever leaves this package:
clients return frozen dataclasses.
"""

from __future__ import annotations

from typing import TypeVar

from runtimekit import grpc_unix
from runtimekit.grpc_unix import socket_path_of

__all__ = ["SourceError", "SourceUnavailable", "UnixRpcClient", "socket_path_of"]

_S = TypeVar("_S")


class SourceError(grpc_unix.UnixRpcError):
    """An attribution source (kubelet pod-resources, CRI runtime) failed a call.

    ``source`` names the source ("kubelet pod-resources"), ``socket_path`` its socket, ``code``
    the gRPC status code name ("UNIMPLEMENTED") or None when no call was made.
    """


class SourceUnavailable(SourceError, grpc_unix.UnixRpcUnavailable):
    """The source did not answer: socket missing or refused, or no reply before the deadline."""


class UnixRpcClient(grpc_unix.UnixRpcClient[_S]):
    """``grpc_unix.UnixRpcClient`` raising ``SourceError`` / ``SourceUnavailable``."""

    error_type = SourceError
    unavailable_type = SourceUnavailable
