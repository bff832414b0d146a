"""gRPC over unix sockets: the client and server plumbing every unix-socket gRPC user shares.

Client side (the agent's kubelet pod-resources and CRI clients, ``runtimekit.attribution``):

- ``unix_channel(path)``: a ``grpc.aio`` insecure channel to ``unix:<path>`` with short reconnect
  backoff (100 ms to 1 s: a unix socket answers at once or not at all) and gRPC's own retries off;
- ``UnixRpcClient``: a lazily opened channel, a deadline on every call (``timeout`` seconds, the
  one retry included) and one error mapping: ``unavailable_type`` when nothing answered (socket
  missing or not a socket, UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED), ``error_type`` when the
  peer answered with another status. Subclasses name the types (attribution: ``SourceError``).

Server side (the simulator's fake kubelet and CRI runtime, ``runtimekit.sim``):

- ``UnixGrpcServer``: a ``grpc.aio`` server on one socket that starts (creating the directory,
  removing a stale socket file — one nothing answers on — never anything else), stops (removing
  its own socket, as a kubelet that exits does, never one another server put there since) and
  starts again; ``remove_stale_socket`` on its own.
- ``private_socket``: every socket a server here creates is mode 0600 from the moment anyone can
  reach it, whatever the process umask: gRPC binds it inside a fresh directory of mode 0700
  (``tempfile.mkdtemp``) next to the final path, where only our user can reach it; it is chmod-ed
  to 0600 there, then hard-linked at the final path and its private name removed (the link keeps
  the bound socket; clients find it under the new name; unlike a rename, a link never replaces a
  socket another server published meanwhile). The umask is never touched (other threads create
  files meanwhile).

A base module: it imports grpc only, never the simulator or the agent's parts. Blocking: none;
everything runs on the event loop (grpc.aio). Sources: gRPC naming (``unix:path`` targets,
https://github.com/grpc/grpc/blob/master/doc/naming.md); channel arguments (grpc_types.h).
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Generic, TypeVar

import grpc
import grpc.aio

from runtimekit.grpc_calls import CallTasks

__all__ = [
    "MAX_SOCKET_PATH",
    "SocketInUse",
    "UNAVAILABLE_CODES",
    "UnixGrpcServer",
    "UnixRpcClient",
    "UnixRpcError",
    "UnixRpcUnavailable",
    "check_server_socket",
    "private_socket",
    "remove_own_socket",
    "remove_stale_socket",
    "server_socket_problem",
    "socket_path_of",
    "socket_path_problem",
    "unix_channel",
]

_T = TypeVar("_T")
#: The stub type of a ``UnixRpcClient`` (generated gRPC stubs are untyped: subclasses name a
#: Protocol of the calls they make).
_S = TypeVar("_S")

#: The longest path a unix socket can be bound or reached at, in bytes: sockaddr_un's sun_path
#: holds 108 on Linux, the terminating NUL included (unix(7)).
MAX_SOCKET_PATH = 107
#: What ``private_socket`` adds to the folder of the final path: "/.sock-", mkdtemp's 8 characters, "/s".
_PRIVATE_PATH_EXTRA = len("/.sock-12345678/s")

#: Codes that mean "nobody answered", as opposed to "the peer answered with an error".
UNAVAILABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED})

#: Channel arguments of every client channel (grpc_types.h names).
CHANNEL_OPTIONS = (
    # A unix socket either answers at once or not at all: keep backoff short.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_retries", 0),
    # Each channel its own subchannels: a peer that restarted is dialled at once, not after the
    # backoff that another channel's failed dial left in gRPC's process-wide subchannel pool.
    ("grpc.use_local_subchannel_pool", 1),
)


class UnixRpcError(Exception):
    """A call to a unix-socket gRPC peer failed. ``source`` names the peer ("kubelet
    pod-resources"), ``socket_path`` its socket, ``code`` the gRPC status code name
    ("UNIMPLEMENTED") or None when no call was made."""

    def __init__(self, source: str, socket_path: str, reason: str, code: str | None = None) -> None:
        super().__init__(f"{source} at unix:{socket_path}: {reason}")
        self.source = source
        self.socket_path = socket_path
        self.reason = reason
        self.code = code


class UnixRpcUnavailable(UnixRpcError):
    """Nothing answered: socket missing or refused, or no reply before the deadline."""


def socket_path_of(endpoint: str) -> str:
    """The filesystem path of a unix endpoint: "/p", "unix:/p" and "unix:///p" all give "/p"."""
    if endpoint.startswith("unix://"):
        return endpoint[len("unix://") :]
    if endpoint.startswith("unix:"):
        return endpoint[len("unix:") :]
    return endpoint


def unix_channel(socket_path: str) -> grpc.aio.Channel:
    """A ``grpc.aio`` channel to the unix socket at ``socket_path`` (``CHANNEL_OPTIONS``).
    Call inside the running event loop, as grpc.aio requires."""
    return grpc.aio.insecure_channel(f"unix:{socket_path_of(socket_path)}", options=list(CHANNEL_OPTIONS))


class UnixRpcClient(Generic[_S]):
    """A lazily opened ``grpc.aio`` channel to one unix socket, with deadlines and error mapping.

    The channel is created on the first call (inside the running event loop, as grpc.aio
    requires) and dropped when a call finds nobody answering, so a kubelet or runtime that
    restarted, re-creating its socket, is picked up by the next call without waiting out gRPC's
    reconnect backoff. A call that fails as unavailable on a channel that had worked before is
    retried once on a fresh channel within the same deadline budget.
    """

    source = "gRPC source"  # overridden: the human name used in error messages
    #: Raised when the source answered with an error; called as ``(source, socket_path, reason, code)``.
    error_type: type[UnixRpcError] = UnixRpcError
    #: Raised when nothing answered (missing or refused socket, deadline); same signature.
    unavailable_type: type[UnixRpcError] = UnixRpcUnavailable

    def __init__(self, socket_path: str, timeout: float = 5.0) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        self.socket_path = socket_path_of(socket_path)
        self.timeout = float(timeout)
        self._channel: grpc.aio.Channel | None = None
        self._stub: _S | None = None

    # -- subclass hook -------------------------------------------------------------------------
    def _make_stub(self, channel: grpc.aio.Channel) -> _S:
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
            raise self.unavailable_type(self.source, self.socket_path, "socket does not exist") from None
        except OSError as exc:
            raise self.unavailable_type(self.source, self.socket_path, f"cannot stat socket: {exc}") from None
        if not stat.S_ISSOCK(mode):
            raise self.unavailable_type(self.source, self.socket_path, "path exists but is not a socket")

    def _stub_now(self) -> tuple[_S, bool]:
        """The stub, and whether its channel is new (never used for a call yet)."""
        if self._stub is None:
            self._channel = unix_channel(self.socket_path)
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

    async def _call(self, what: str, invoke: Callable[[_S, float], Awaitable[_T]]) -> _T:
        """Run ``invoke(stub, timeout)`` and map gRPC failures to ``error_type``/``unavailable_type``.

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
                if code not in UNAVAILABLE_CODES:
                    reason = f"{what} failed: {code.name}: {exc.details()}"
                    raise self.error_type(self.source, self.socket_path, reason, code.name) from None
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
                raise self.unavailable_type(self.source, self.socket_path, reason, code.name) from None
        raise AssertionError("unreachable")  # pragma: no cover


class UnixGrpcServer:
    """A ``grpc.aio`` server on one unix socket that can be started, stopped and started again.

    ``start()`` creates the socket's directory, removes a stale socket left by a previous run
    (never a file that is not a socket), binds and serves; ``stop()`` stops serving and removes
    the socket, as a kubelet or runtime that exits does.
    """

    def __init__(self, socket_path: str) -> None:
        self.socket_path = os.path.abspath(socket_path)
        self._server: grpc.aio.Server | None = None
        self._published: _Identity | None = None  # the socket this server put at socket_path
        self._calls = CallTasks()

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def endpoint(self) -> str:
        """The gRPC target of this server ("unix:/abs/path.sock")."""
        return f"unix:{self.socket_path}"

    def _add_servicers(self, server: grpc.aio.Server) -> None:
        """Subclass hook: add the servicers to ``server`` before it binds."""
        raise NotImplementedError

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError(f"{type(self).__name__} already serving on {self.socket_path}")
        remove_stale_socket(self.socket_path)
        server = grpc.aio.server(interceptors=[self._calls])
        self._add_servicers(server)
        try:
            with private_socket(self.socket_path) as bound:
                server.add_insecure_port(f"unix:{bound}")
                await server.start()
                self._published = publish_socket(bound, self.socket_path)
        except BaseException:
            await server.stop(None)
            raise
        self._server = server

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving (in-flight calls get ``grace`` seconds, None: cancelled now) and return once
        the tasks that served them are done (``grpc_calls``); idempotent."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
            await self._calls.done()
        remove_own_socket(self.socket_path, self._published)
        self._published = None

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


SOCKET_MODE = 0o600


def socket_path_problem(path: str) -> str | None:
    """Why a client could never reach a unix socket at ``path`` (longer than sun_path holds), or None."""
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH:
        return f"the path is {size} bytes, a unix socket path at most {MAX_SOCKET_PATH}"
    return None


def server_socket_problem(path: str) -> str | None:
    """Why a server here could never serve at ``path``, or None: the path is too long to reach, or
    its folder leaves no room for the private path it is bound at first (``private_socket``)."""
    room = MAX_SOCKET_PATH - _PRIVATE_PATH_EXTRA
    if len(os.fsencode(os.path.dirname(os.path.abspath(path)))) > room:
        return (f"its folder's path must be at most {room} bytes (a unix socket path holds at most {MAX_SOCKET_PATH}, "
                "and the socket is bound in a private folder beside it first)")
    return socket_path_problem(os.path.abspath(path))


def check_server_socket(path: str, key: str) -> None:
    """Refuse, before anything starts, a socket path a server here could never serve at
    (``server_socket_problem``), or where something other than a socket already lies (never
    removed). ValueError naming ``key`` and the rule."""
    problem = server_socket_problem(path)
    if problem is not None:
        raise ValueError(f"{key} {path}: {problem}")
    if _not_a_socket(path):
        raise ValueError(f"{key} {path}: exists and is not a socket, and is never removed (move it away or name another path)")
    if socket_answers(path):
        raise ValueError(f"{key} {path}: a server already answers on this socket (another agent?); stop it or "
                         "name another path")


class SocketInUse(FileExistsError):
    """A server answers on the socket path: it is another's, and is never removed."""


def socket_answers(path: str, timeout_seconds: float = 1.0) -> bool:
    """Does a server accept connections on the unix socket at ``path``? A socket file left by a
    server that exited refuses them (ECONNREFUSED); a live server whose backlog is full makes the
    connect wait, which counts as answering."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout_seconds)
    try:
        probe.connect(path)
    except TimeoutError:
        return True
    except OSError:  # refused (stale), gone, not a socket, or not ours to reach
        return False
    finally:
        probe.close()
    return True


def _not_a_socket(path: str) -> bool:
    """Does something other than a socket (a file, a folder, a link) lie at ``path``?"""
    try:
        return not stat.S_ISSOCK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


@contextmanager
def private_socket(path: str) -> Iterator[str]:
    """A path to bind the socket meant for ``path`` at: inside a new directory of mode 0700 beside
    it, removed on exit (with the socket, unless ``publish_socket`` moved it out)."""
    private = tempfile.mkdtemp(prefix=".sock-", dir=os.path.dirname(path))  # mode 0700
    try:
        yield os.path.join(private, "s")
    finally:
        shutil.rmtree(private, ignore_errors=True)


_Identity = tuple[int, int]  # (st_dev, st_ino) of a socket file


def publish_socket(bound: str, path: str) -> _Identity:
    """Give the socket bound at ``bound`` (``private_socket``) mode 0600 and move it to ``path``;
    returns its identity there, for ``remove_own_socket``. A hard link, not a rename, so that a
    socket another server published there meanwhile is never replaced: ``SocketInUse`` then."""
    os.chmod(bound, SOCKET_MODE)
    try:
        os.link(bound, path)
    except FileExistsError:
        raise SocketInUse(f"{path}: another server put a socket there while this one started; not replacing it") from None
    os.unlink(bound)
    published = os.lstat(path)
    return published.st_dev, published.st_ino


def remove_stale_socket(path: str, *, create_dir: bool = True) -> None:
    """Remove a socket file left at ``path`` by a server that exited (creating its directory first
    when ``create_dir``); FileExistsError if ``path`` is something other than a socket,
    ``SocketInUse`` if a server still answers on it."""
    if create_dir:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    if _not_a_socket(path):
        raise FileExistsError(f"{path} exists and is not a socket; not removing it")
    if socket_answers(path):
        raise SocketInUse(f"{path}: a server answers on this socket (another agent?); not removing it")
    with suppress(FileNotFoundError):
        os.unlink(path)


def remove_own_socket(path: str, identity: _Identity | None) -> None:
    """Remove the socket at ``path`` if it is still the one published as ``identity``: a server
    that stops never removes a socket another server has put there since."""
    with suppress(FileNotFoundError):
        now = os.lstat(path)
        if identity is not None and (now.st_dev, now.st_ino) == identity:
            os.unlink(path)
