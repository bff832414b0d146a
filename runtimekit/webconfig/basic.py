"""HTTP basic credentials checked against bcrypt hashes, as exporter-toolkit's ``web/handler.go`` does.

- bcrypt is slow by design (cost 10: ~70 ms of CPU), so it never runs on the event loop: one check
  at a time runs in a worker thread (a flood of guesses costs one core, not all of them), and each
  (user, hash, password) outcome is remembered (``CACHE_SIZE`` entries, keyed by a SHA-256 of the
  three, never the password itself), so a scraper's every request after the first costs a lookup.
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
from collections.abc import Iterable, Mapping

import bcrypt

CACHE_SIZE = 1024  # remembered outcomes; the oldest half is forgotten when full
MAX_PASSWORD_BYTES = 72  # bcrypt's limit
_DECOY_PASSWORD = b"runtimekit decoy password"


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
    """Checks basic credentials against ``users`` (user -> bcrypt hash); one per listener."""

    def __init__(self) -> None:
        self._outcomes: dict[bytes, bool] = {}
        self._decoys: dict[int, bytes] = {}  # cost -> a hash of that cost
        self._lock = asyncio.Lock()

    async def check(self, header: str | None, users: Mapping[str, bytes]) -> bool:
        """True when ``header`` carries a configured user's password."""
        credentials = parse_basic(header)
        if credentials is None or not users:
            return False
        user, password = credentials
        hashed = users.get(user)
        key = hashlib.sha256(b"\0".join((user.encode(), hashed or b"", password))).digest()
        known = self._outcomes.get(key)
        if known is not None:
            return known
        async with self._lock:
            if hashed is None:
                decoy = await asyncio.to_thread(self._decoy, highest_cost(users.values()))
                await asyncio.to_thread(_matches, password, decoy)
                outcome = False
            else:
                outcome = await asyncio.to_thread(_matches, password, hashed)
        if len(self._outcomes) >= CACHE_SIZE:
            for old in list(self._outcomes)[: CACHE_SIZE // 2]:
                del self._outcomes[old]
        self._outcomes[key] = outcome
        return outcome

    def _decoy(self, cost: int) -> bytes:
        """A hash of ``cost`` (made once per cost, in the worker thread)."""
        if cost not in self._decoys:
            self._decoys[cost] = bcrypt.hashpw(_DECOY_PASSWORD, bcrypt.gensalt(rounds=cost))
        return self._decoys[cost]


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
