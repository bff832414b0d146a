"""HTTP basic credentials checked against bcrypt hashes, as exporter-toolkit's ``web/handler.go`` does.

- bcrypt is slow by design (cost 10: ~70 ms of CPU), so it never runs on the event loop: one check
  at a time runs in a worker thread (a flood of guesses costs one core, not all of them, and gets
  no more guesses a second than one core's bcrypt allows).
- **Outcomes are remembered**, keyed by a SHA-256 of (user, hash, password), never the password
  itself, so a scraper's every request after the first costs a lookup. Successes and failures are
  kept apart (``CACHE_SIZE`` each, the oldest half forgotten when full): random wrong passwords
  churn the failures only and can never push a correct password out, and a remembered success
  never waits behind the checks under way. A changed or removed hash changes the key, so the
  remembered outcomes need no expiry.
- **A flood of guesses cannot shut out the right password** (before, all
  checks queued behind one lock, 300 connections of random passwords held the listener's every
  connection slot). Checks wait for their turn per client address (``CLIENT``, which
  ``runtimekit.listener`` sets per connection), and the turns go round the addresses, so a new
  client waits behind one check per other address, not behind a flood's whole queue. One address
  may have ``MAX_WAITING_PER_ADDRESS`` checks waiting, all of them ``MAX_WAITING``; past that a new
  check is refused at once (False: a 401) with its password untested, so the flood learns nothing
  and guesses no faster, it only waits less (logged once a ``REFUSALS_LOG_SECONDS``). Concurrent
  requests with the same credentials share one check. While a request waits for an outcome, its
  ``Client.waiting`` says so: the listener may close such a connection at its connection cap.
  The gRPC port sets ``CLIENT`` per call from its peer address (``grpc_port.peer_host``).
- An unknown user is checked against a hash of the highest cost among the configured ones, so the
  time of a refusal does not tell whether the user exists (a user with a cheaper hash answers
  faster, which tells of that user's hash, not of who exists).
- A password longer than bcrypt's 72 bytes is refused (Go's bcrypt refuses it too), as is any header
  that is not ``Basic base64(user:password)`` with a UTF-8 user name: a 401, never an error.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from functools import partial

import bcrypt

log = logging.getLogger("runtimekit.webconfig")

CACHE_SIZE = 1024  # remembered successes, and as many failures; the oldest half is forgotten when full
MAX_PASSWORD_BYTES = 72  # bcrypt's limit
# Checks waiting for bcrypt: at ~70 ms each, 64 addresses' turns pass within 5 s (Prometheus's
# default scrape timeout is 10 s); 4 for one address cover a client's concurrent first requests.
MAX_WAITING_PER_ADDRESS = 4
MAX_WAITING = 64
REFUSALS_LOG_SECONDS = 60.0
_DECOY_PASSWORD = b"runtimekit decoy password"


class Client:
    """The connection a request comes from: its ``address`` (whose checks take turns with other
    addresses') and how many of its requests are ``waiting`` for a check's outcome now."""

    __slots__ = ("address", "waiting")

    def __init__(self, address: str) -> None:
        self.address, self.waiting = address, 0


#: The client of the request being handled, set per connection by ``runtimekit.listener``.
CLIENT: ContextVar[Client | None] = ContextVar("basic_auth_client", default=None)


def parse_basic(header: str | None) -> tuple[str, bytes] | None:
    """(user, password) of an ``Authorization: Basic`` value; None when it is anything else."""
    if not header or not header.isascii():
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True)
        user, separator, password = decoded.partition(b":")
        return (user.decode("utf-8"), password) if separator else None
    except (binascii.Error, ValueError):
        return None


class BasicAuthChecker:
    """Checks basic credentials against ``users`` (user -> bcrypt hash); one per listener.

    A check is callbacks, not a task: its turn starts bcrypt in a worker thread, and bcrypt's end
    remembers the outcome, resolves the check and passes the turn on. No request's cancellation can
    leave the turn taken, and a request given up leaves its check to finish for the others."""

    def __init__(self) -> None:
        self._successes: dict[bytes, None] = {}  # keys, the least recently used first
        self._failures: dict[bytes, None] = {}  # keys, the oldest first
        self._decoys: dict[int, bytes] = {}  # cost -> a hash of that cost
        self._checks: dict[bytes, asyncio.Future[bool]] = {}  # key -> the outcome of its check, waiting or running
        self._turns: dict[str, deque[Callable[[], None]]] = {}  # address -> its waiting checks' starts; round order
        self._busy = False  # a check runs bcrypt now
        self._refused = 0  # refusals not yet logged
        self._refusals_logged: float | None = None  # when the last line about them was

    async def check(self, header: str | None, users: Mapping[str, bytes]) -> bool:
        """True when ``header`` carries a configured user's password."""
        credentials = parse_basic(header)
        if credentials is None or not users:
            return False
        user, password = credentials
        hashed = users.get(user)
        key = hashlib.sha256(b"\0".join((user.encode(), hashed or b"", password))).digest()
        if key in self._successes:
            del self._successes[key]
            self._successes[key] = None  # the most recently used
            return True
        if key in self._failures:
            return False
        client = CLIENT.get()
        outcome = self._checks.get(key)
        if outcome is None:
            loop = asyncio.get_running_loop()
            outcome = self._checks[key] = loop.create_future()
            cost = highest_cost(users.values()) if hashed is None else 0
            if not self._take_turn(client.address if client is not None else "",
                                   partial(self._start, loop, key, password, hashed, cost)):
                del self._checks[key]
                return False
        if client is not None:
            client.waiting += 1
        try:
            return await asyncio.shield(outcome)
        finally:
            if client is not None:
                client.waiting -= 1

    def _take_turn(self, address: str, start: Callable[[], None]) -> bool:
        """``start`` a check from ``address`` now, or when its turn comes; False when it is refused:
        too many checks are waiting."""
        if not self._busy:
            self._busy = True
            start()
            return True
        waiting = self._turns.get(address)
        if (waiting is not None and len(waiting) >= MAX_WAITING_PER_ADDRESS
                or sum(map(len, self._turns.values())) >= MAX_WAITING):
            self._note_refusal(address)
            return False
        self._turns.setdefault(address, deque()).append(start)
        return True

    def _pass_turn(self) -> None:
        """Start the oldest waiting check of the next address in the round (that address goes to
        the round's end), or free the turn."""
        if not self._turns:
            self._busy = False
            return
        address = next(iter(self._turns))
        waiting = self._turns.pop(address)
        start = waiting.popleft()
        if waiting:
            self._turns[address] = waiting
        start()

    def _start(self, loop: asyncio.AbstractEventLoop, key: bytes, password: bytes, hashed: bytes | None,
               decoy_cost: int) -> None:
        work = loop.run_in_executor(None, self._outcome, password, hashed, decoy_cost)
        work.add_done_callback(partial(self._finished, key))

    def _finished(self, key: bytes, work: asyncio.Future[bool]) -> None:
        """bcrypt's end: the outcome remembered and given to the check's requests, the turn passed on."""
        outcome = self._checks.pop(key)
        self._pass_turn()
        error = work.exception()
        if error is not None:
            outcome.set_exception(error)
            return
        remembered = self._successes if work.result() else self._failures
        if len(remembered) >= CACHE_SIZE:
            for old in list(remembered)[: CACHE_SIZE // 2]:
                del remembered[old]
        remembered[key] = None
        outcome.set_result(work.result())

    def _outcome(self, password: bytes, hashed: bytes | None, decoy_cost: int) -> bool:
        """bcrypt's answer (in the worker thread); an unknown user costs a hash of ``decoy_cost``."""
        if hashed is None:
            _matches(password, self._decoy(decoy_cost))
            return False
        return _matches(password, hashed)

    def _decoy(self, cost: int) -> bytes:
        """A hash of ``cost`` (made once per cost, in the worker thread)."""
        if cost not in self._decoys:
            self._decoys[cost] = bcrypt.hashpw(_DECOY_PASSWORD, bcrypt.gensalt(rounds=cost))
        return self._decoys[cost]

    def _note_refusal(self, address: str) -> None:
        """Log the refusals at most once a ``REFUSALS_LOG_SECONDS`` (a flood makes thousands a second)."""
        refused, logged = self._refused + 1, self._refusals_logged
        now = time.monotonic()
        if logged is not None and now - logged < REFUSALS_LOG_SECONDS:
            self._refused = refused
            return
        log.warning("basic auth: %d password checks refused at once (answered 401, the password untested) "
                    "since the last such line: %d checks of one address or %d in all already wait for bcrypt "
                    "(latest from %s); a client guessing passwords?", refused, MAX_WAITING_PER_ADDRESS,
                    MAX_WAITING, address or "an unknown address")
        self._refused, self._refusals_logged = 0, now


def bcrypt_cost(hashed: bytes) -> int:
    """The cost of a bcrypt hash: the two digits of ``$2y$10$...`` (validated by ``model.py``)."""
    return int(hashed[4:6])


def highest_cost(hashes: Iterable[bytes]) -> int:
    """The highest cost among ``hashes`` (not empty)."""
    return max(bcrypt_cost(hashed) for hashed in hashes)


def _matches(password: bytes, hashed: bytes) -> bool:
    if len(password) > MAX_PASSWORD_BYTES:
        return False
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # a hash bcrypt cannot read (the file is validated, so not expected)
        return False


def hash_password(password: bytes, cost: int = 10) -> bytes:
    """A bcrypt hash of ``password`` (what ``htpasswd -nBC 10`` writes); for tests and tools."""
    return bcrypt.hashpw(password, bcrypt.gensalt(rounds=cost))
