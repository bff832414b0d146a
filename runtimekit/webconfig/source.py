"""A web configuration file kept current: re-read when it or a file it names changes.

exporter-toolkit reads its file on every request and its TLS settings on every new connection.
Here every look (``current()``: each request, each new connection, each gRPC call on TCP) costs one
``stat`` of the file and of each certificate, key and CA file it names; the file is read again only
when one of them changed (device, inode, size or modification time: an edited file, a replaced one,
or a Kubernetes Secret whose symbolic links were swapped). So a new password, a rotated certificate
or a new client CA applies to the next request or connection, without a restart.

A file that turns invalid fails closed, as exporter-toolkit does: while it is broken, requests are
answered 500 and connections are refused, and the problem is logged once (and its end once); the
last good configuration is never used in its place (it could be the one a person meant to revoke).
An empty file is unusable (``model.py``), and so is a reading that lowers the protection the
listener serves with (``protection.py``: TLS, users, the client certificate policy or the allowed
SANs removed or weakened): a reload may raise it, only a restart lowers it.
Thread-safe: gRPC reads it from its own threads (``runtimekit.webconfig.grpc_port``).
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from dataclasses import dataclass

from runtimekit.schema import ConfigError, shown

from .model import WebConfig, WebConfigError, read_web_config
from .protection import Protection
from .tls import server_context

log = logging.getLogger("runtimekit.webconfig")

Signature = tuple[tuple[int, int, int, int] | None, ...]


@dataclass(frozen=True, slots=True)
class Loaded:
    """One reading: the configuration and its TLS context, or the error that made it unusable.
    ``generation`` grows with each reading (a cache of something derived keys on it)."""

    config: WebConfig | None
    ssl_context: ssl.SSLContext | None
    error: str | None
    generation: int


def load_web_config(path: str, key: str) -> tuple[WebConfig, ssl.SSLContext | None]:
    """Read ``path`` and build its TLS context (None without TLS); ``WebConfigError`` naming
    ``key``, the file and the rule otherwise, and nothing else: what a service checks before it
    starts, and what each reload does (an exception escaping there would drop every connection)."""
    try:
        config = read_web_config(path, key)
        return config, None if config.tls is None else server_context(config.tls)
    except WebConfigError:
        raise
    except ConfigError as error:
        raise WebConfigError(f"{key}: {path}: {error}") from None
    except Exception as error:  # not expected (each rule is checked): still one line, never a traceback
        log.debug("reading %s", path, exc_info=True)
        raise WebConfigError(f"{key}: {path}: cannot be used ({type(error).__name__}: {shown(str(error))})") from None


class WebConfigSource:
    """The current reading of the web configuration file at ``path`` (``key``: the setting that
    named it, for messages). Never raises: an unusable file is a ``Loaded`` with its ``error``."""

    def __init__(self, path: str, key: str) -> None:
        self.path, self.key = os.path.abspath(path), key
        self._lock = threading.Lock()
        self._watched: tuple[str, ...] = (self.path,)
        self._signature: Signature | None = None
        self._loaded = Loaded(None, None, None, 0)
        self._floor: Protection | None = None  # the protection served so far (None: nothing read yet)
        self.current()

    def current(self) -> Loaded:
        """The configuration as the files are now (re-read when one changed since the last look)."""
        with self._lock:
            signature = _signature(self._watched)
            if signature != self._signature:
                self._reload(signature)
            return self._loaded

    def _reload(self, signature: Signature) -> None:
        """Read the files again; ``signature``: theirs just before (a change while reading is seen
        at the next look, as the signature kept is the one from before)."""
        before = self._loaded
        try:
            config, context = load_web_config(self.path, self.key)
            self._check_floor(config)
        except ConfigError as error:
            self._loaded = Loaded(None, None, str(error), before.generation + 1)
            # the files of the last good reading stay watched: fixing a certificate is a change too
            self._signature = signature
            if before.error != str(error):
                log.error("%s; refusing connections and requests until it is fixed", error)
            return
        protection = Protection.of(config)
        self._floor = protection if self._floor is None else self._floor.raised_to(protection)
        self._loaded = Loaded(config, context, None, before.generation + 1)
        if config.files != self._watched:
            self._watched, signature = config.files, _signature(config.files)
        self._signature = signature
        if before.generation:  # not the first reading
            log.info("%s: %s %s", self.key, self.path,
                     "is usable again: serving" if before.error else "changed: reloaded")

    def _check_floor(self, config: WebConfig) -> None:
        """``WebConfigError`` when ``config`` would serve with less protection than served so far."""
        if self._floor is None:
            return
        lowered = self._floor.lowered_by(Protection.of(config))
        if lowered is not None:
            raise WebConfigError(f"{self.key}: {self.path}: {lowered}; a reload may not lower the protection "
                                 "(restart the service to serve with less)")


def _signature(files: tuple[str, ...]) -> Signature:
    def one(path: str) -> tuple[int, int, int, int] | None:
        try:
            info = os.stat(path)
        except OSError:
            return None
        return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns

    return tuple(one(path) for path in files)
