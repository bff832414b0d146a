"""The journal's file: whether one can be kept at a path, opening an existing one, and the lock that
lets one service at a time use it.

``check_path`` and ``connect_existing`` open only an existing journal and create nothing. They
raise ``JournalError`` naming the path and the rule instead of sqlite3's bare "unable to open
database file", and tell apart what a person must fix from what is a run-time failure:

- ``JournalError``: no file there, or a file that is not a SQLite database or not a remediation
  journal (a configuration or usage mistake: exit 2);
- ``JournalUnwritable``: a journal this process may read but not write (its owner or mode, a
  read-only mount): ``reset-breaker`` exits 1, ``serve`` refuses to start;
- ``JournalLocked``: another process holds its SQLite write lock longer than ``BUSY_SECONDS``;
- ``JournalInUse``: another remediation service holds the journal (``hold_journal``), exit 1.

``hold_journal`` takes an exclusive ``flock`` on ``DB_PATH.lock`` for the life of the service, so
a second ``remediate serve`` on the same journal is refused instead of running a second worker
over the same pending actions. The kernel drops the lock when the process dies, SIGKILL included,
so a crash never leaves it held; the file names the holder (pid and host) for the refusal.
Source: flock(2); runtimekit/state_dir.py holds the agent's state directory the same way.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from runtimekit.process_lock import LockHeld, hold_lock
from runtimekit.sqlite_errors import cannot_write, is_locked, unwritable_message

BUSY_SECONDS = 2.0  # the longest a statement waits for another writer's lock (sqlite busy timeout)
TABLES = ("alerts", "actions", "breaker")
LOCK_SUFFIX = ".lock"  # DB_PATH.lock: the file hold_journal locks


class JournalError(Exception):
    """The journal cannot be opened or is not a journal; the message names the path and the rule."""


class JournalLocked(JournalError):
    """Another process holds the journal's write lock longer than BUSY_SECONDS (a run-time
    failure, not a configuration mistake: ``runtimekit remediate`` exits 1)."""


class JournalInUse(JournalLocked):
    """Another remediation service holds the journal (its lock file): exit 1, naming it."""


class JournalUnwritable(JournalError):
    """A journal this process may not write (its owner, its mode, a read-only mount)."""


def unwritable_error(path: str | Path, error: sqlite3.Error) -> JournalUnwritable:
    """The error for a journal this process may not write, saying what to do."""
    return JournalUnwritable(unwritable_message(path, error))


def _open_error(path: str | Path, error: sqlite3.Error) -> JournalError:
    """What an existing file's open or first read failing means, as the error to raise."""
    if is_locked(error):
        return JournalLocked(f"the journal {path} is locked by another process ({error})")
    if cannot_write(error):  # read-only: a WAL journal cannot even be read without writing its index
        return unwritable_error(path, error)
    return JournalError(f"{path}: not a SQLite database ({error}); nothing was changed")


def write_lock_refused(conn: sqlite3.Connection) -> sqlite3.Error | None:
    """Take the write lock, write (the same user_version) and roll back, changing nothing: the error
    when the lock cannot be taken or the file cannot be written. The write is needed: SQLite opens a
    file it may not write read-only, and takes the lock of such a file without complaint."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            conn.execute(f"PRAGMA user_version = {version}")
        finally:
            conn.execute("ROLLBACK")
    except sqlite3.Error as error:
        return error
    return None


def check_writable(conn: sqlite3.Connection, path: str | Path) -> None:
    """The write lock can be taken: JournalLocked if another process holds it, JournalUnwritable or
    JournalError if the journal cannot be written otherwise (``conn`` is closed then)."""
    error = write_lock_refused(conn)
    if error is not None:
        conn.close()
        if is_locked(error):
            raise JournalLocked(f"the journal {path} is locked by another process ({error}, waited {BUSY_SECONDS:g} s);"
                                " is another remediation service or a sqlite3 shell using it?") from error
        if cannot_write(error):
            raise unwritable_error(path, error) from error
        raise JournalError(f"{path}: cannot write: {error}") from error


def check_path(path: str | Path) -> None:
    """Raise JournalError unless a journal can be kept at ``path``; creates and changes nothing.

    Its folder must exist and be writable; a file already there must be a journal (a service
    pointed at another database must not add its tables to it).
    """
    folder = Path(path).parent
    if not folder.is_dir():
        raise JournalError(f"{path}: the folder {folder} does not exist (create it, or mount the volume)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise JournalError(f"{path}: the folder {folder} is not writable by this user")
    if Path(path).exists():
        conn = connect_existing(path)
        check_writable(conn, path)
        conn.close()


def connect_existing(path: str | Path) -> sqlite3.Connection:
    """Open the journal at ``path`` read-write without creating anything: the file must exist
    and hold the journal's tables (an operator's command must not start an empty journal)."""
    target = Path(path)
    if not target.is_file():
        raise JournalError(f"{path}: no such journal file (nothing was created or changed)")
    try:
        conn = sqlite3.connect(f"{target.resolve().as_uri()}?mode=rw", uri=True, isolation_level=None,
                               timeout=BUSY_SECONDS)
    except sqlite3.Error as error:
        raise _open_error(path, error) from error
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as error:
        conn.close()
        raise _open_error(path, error) from error
    if not set(TABLES) <= tables:
        conn.close()
        raise JournalError(f"{path}: not a remediation journal (it lacks the tables {', '.join(TABLES)}); "
                           "nothing was changed")
    return conn


def hold_journal(path: str | Path) -> int:
    """Hold the journal at ``path`` for this process: the open descriptor of ``PATH.lock``, locked
    (``runtimekit.process_lock``), to keep open until the process ends. JournalInUse naming the
    other holder when another service holds it; JournalError when the lock file cannot be opened."""
    lock = f"{path}{LOCK_SUFFIX}"
    try:
        return hold_lock(lock)
    except OSError as error:
        raise JournalError(f"{path}: cannot open the lock file {lock}: {error.strerror or error}") from None
    except LockHeld as held:
        raise JournalInUse(f"the journal {path} is in use by another remediation service (pid {held.holder}, lock {lock}); "
                           "one service per journal: stop it first") from None
