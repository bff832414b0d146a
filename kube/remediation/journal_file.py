"""The journal's file: whether one can be kept at a path, opening an existing one, and the lock that
lets one service at a time use it.

``check_path`` and ``connect_existing`` open only an existing journal and create nothing. They
raise ``JournalError`` naming the path and the rule instead of sqlite3's bare "unable to open
database file", and tell apart what a person must fix from what is a run-time failure:

- ``JournalError``: no file there, or a file that is not a SQLite database or not a remediation
  journal of this build's schema (a configuration or usage mistake: exit 2);
- ``JournalUnwritable``: a journal this process may read but not write (its owner or mode, a
  read-only mount): ``reset-breaker`` exits 1, ``serve`` refuses to start;
- ``JournalLocked``: another process holds its SQLite write lock longer than ``BUSY_SECONDS``;
- ``JournalInUse``: another remediation service holds the journal (``hold_journal``), exit 1.

The schema is versioned as the slicer's journal is (slicer/journal.py): a new journal is stamped
``PRAGMA user_version = SCHEMA_VERSION``, and ``check_schema`` refuses at start, naming the file and
both versions, a file of another version or whose tables are not laid out as ``SCHEMA`` lays them
out — else it would pass start and readiness and answer every webhook 503. It also gives a later
schema change a version to migrate from.

``hold_journal`` takes an exclusive ``flock`` on ``DB_PATH.lock`` for the life of the service, so
a second ``remediate serve`` on the same journal is refused instead of running a second worker
over the same pending actions. The kernel drops the lock when the process dies, SIGKILL included,
so a crash never leaves it held; the file names the holder (pid and host) for the refusal.
Source: flock(2); runtimekit/state_dir.py holds the agent's state directory the same way.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
from pathlib import Path
from typing import Any

from runtimekit.process_lock import LockHeld, hold_lock
from runtimekit.sqlite_errors import cannot_write, is_locked, unwritable_message

BUSY_SECONDS = 2.0  # the longest a statement waits for another writer's lock (sqlite busy timeout)
TABLES = ("alerts", "actions", "breaker")
LOCK_SUFFIX = ".lock"  # DB_PATH.lock: the file hold_journal locks
SCHEMA_VERSION = 1  # PRAGMA user_version of the journal SCHEMA lays out (0: no stamp)

SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts (
    fingerprint TEXT NOT NULL,
    starts_at TEXT NOT NULL,
    status TEXT NOT NULL,
    labels TEXT NOT NULL,
    received_at REAL NOT NULL,
    UNIQUE (fingerprint, starts_at)
);
CREATE TABLE IF NOT EXISTS actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    fingerprint TEXT NOT NULL,
    starts_at TEXT NOT NULL,
    node TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'done', 'failed', 'skipped')),
    attempts INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT NOT NULL UNIQUE,
    result TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS actions_state ON actions (state, id);
CREATE TABLE IF NOT EXISTS breaker (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    open INTEGER NOT NULL,
    reason TEXT NOT NULL,
    changed_at REAL NOT NULL
);
"""


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


# Per table: its columns in order (name, type, NOT NULL, default, primary key) and its UNIQUE keys.
Layout = dict[str, tuple[tuple[tuple[Any, ...], ...], tuple[tuple[str, ...], ...]]]


def _layout(conn: sqlite3.Connection) -> Layout:
    """What the journal's statements rely on, per table (SQLite's own, sqlite_sequence, left out):
    the columns in order (INSERT INTO alerts VALUES is positional) and the UNIQUE keys (INSERT OR
    IGNORE on an action's idempotency key, an alert's fingerprint and startsAt)."""
    layout: Layout = {}
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                 "AND substr(name, 1, 7) != 'sqlite_' ORDER BY name").fetchall():
        columns = tuple(conn.execute('SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info(?)', (table,)))
        indexes = conn.execute('SELECT name FROM pragma_index_list(?) WHERE "unique"', (table,)).fetchall()
        unique = sorted(tuple(name for (name,) in conn.execute("SELECT name FROM pragma_index_info(?) ORDER BY seqno",
                                                                (index,))) for (index,) in indexes)
        layout[table] = (columns, tuple(unique))
    return layout


@functools.cache
def _expected() -> Layout:
    """The layout SCHEMA makes: read from a database in memory, so there is one definition."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        conn.executescript(SCHEMA)
        return _layout(conn)


def _shown(name: object) -> str:
    """A name read from the file, fit for a one-line message."""
    return name if isinstance(name, str) and name.isprintable() else repr(name)


def _column(info: tuple[Any, ...]) -> str:
    name, kind, not_null, default, key = info
    parts = [_shown(name), _shown(kind) if kind else "(no type)"] + ["NOT NULL"] * bool(not_null)
    parts += ["PRIMARY KEY"] * bool(key) + ([] if default is None else [f"DEFAULT {_shown(default)}"])
    return " ".join(parts)


def _keys(keys: tuple[tuple[str, ...], ...]) -> str:
    return ", ".join(f"({', '.join(map(_shown, key))})" for key in keys) or "none"


def _difference(found: Layout, expected: Layout) -> str:
    """The first way ``found`` differs from ``expected``, in words; "" when it does not."""
    if set(found) != set(expected):
        return f"it has the tables {', '.join(map(_shown, found))}; expected {', '.join(expected)}"
    for table, (columns, unique) in expected.items():
        has, has_unique = found[table]
        if [c[0] for c in has] != [c[0] for c in columns]:
            return (f"the {table} table has the columns {', '.join(_shown(c[0]) for c in has)}; "
                    f"expected {', '.join(c[0] for c in columns)}")
        for mine, theirs in zip(columns, has, strict=True):
            if mine != theirs:
                return f"the {table} table has the column {_column(theirs)}; expected {_column(mine)}"
        if has_unique != unique:
            return f"the {table} table has the UNIQUE keys {_keys(has_unique)}; expected {_keys(unique)}"
    return ""


def check_schema(conn: sqlite3.Connection, path: str | Path) -> bool:
    """Raise JournalError, naming ``path``, the version found and SCHEMA_VERSION, unless the
    database is empty or a journal of SCHEMA_VERSION (its PRAGMA user_version, and every table
    laid out as SCHEMA lays it out); reads only (sqlite3.Error: not a database). Returns whether
    to stamp it: empty, or user_version 0 with exactly version 1's tables — a journal made before
    the stamp existed, whose layout is version 1's (it did not change): adopted, so an upgrade
    keeps its journal. A version-0 file with other tables is another tool's, or older: refused."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version not in (0, SCHEMA_VERSION):
        raise JournalError(f"{path}: the journal has schema version {version} (PRAGMA user_version); this build "
                           f"uses version {SCHEMA_VERSION} only; nothing was changed")
    found = _layout(conn)
    difference = _difference(found, _expected()) if found else ""
    if difference:
        raise JournalError(f"{path}: schema version {version} (PRAGMA user_version), but not a remediation journal "
                           f"of version {SCHEMA_VERSION}: {difference}; nothing was changed")
    return version == 0


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
    """Open the journal at ``path`` read-write without creating or stamping anything: the file
    must exist and hold the journal's tables (an operator's command must not start an empty
    journal), of its schema (``check_schema``; an unstamped one is accepted, ``Journal`` stamps it)."""
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
        if not set(TABLES) <= tables:
            raise JournalError(f"{path}: not a remediation journal (it lacks the tables {', '.join(TABLES)}); "
                               "nothing was changed")
        check_schema(conn, path)
    except sqlite3.Error as error:
        conn.close()
        raise _open_error(path, error) from error
    except JournalError:
        conn.close()
        raise
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
