"""The remediation journal: SQLite in WAL mode with synchronous=FULL.

An alert is recorded and its actions enqueued in one transaction before the HTTP answer; an alert
seen again with the same (fingerprint, startsAt, status) changes nothing. Pending actions are
found again after a restart. Each action's outcome is written in the same transaction that marks
it done, failed or skipped. Methods are blocking: call them from an executor thread.

A resolved alert skips only the actions whose step has not begun (``attempts = 0``): a step that
began — running now, or interrupted by a crash and due to run again — runs to its recorded outcome
(done or failed), which the breaker and the cooldown count. Else a spare node requested, or a node
cordoned, while its alert resolved would be journaled "skipped" and escape them. The attempts
counter is the marker: ``begin_attempt`` commits it before the step acts, and refuses an action no
longer pending, so a resolution and a beginning step cannot cross under the journal's lock (a
separate "running" column would say nothing more, and would need clearing after a crash).

``Journal(path)`` creates the file (not its folder), stamped with the schema version, and refuses a
file of another schema (journal_file.check_schema); ``reset_breaker(path)`` only opens an existing
journal (journal_file.py: what can be opened, and the errors that say why not) and changes nothing
but the breaker: ``JournalUnwritable`` when this process may not write it.

Locks: every connection waits at most ``BUSY_SECONDS`` for another writer (sqlite's busy
timeout), so a journal another process holds is reported within seconds — ``JournalLocked`` at
start (``journal_file.check_path`` and ``Journal`` take the write lock, write the same user_version
and roll back, so a file this process may only read is found too: ``JournalUnwritable``), sqlite3's
OperationalError while running — never after a minute. ``Journal.unwritable`` is the readiness
probe: a separate connection that waits at most ``PROBE_SECONDS``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtimekit.sqlite_errors import cannot_write

from .journal_file import (
    BUSY_SECONDS,
    SCHEMA,
    SCHEMA_VERSION,
    JournalError,
    check_schema,
    check_writable,
    connect_existing,
    unwritable_error,
    write_lock_refused,
)
from .payload import Alert

STATES = ("pending", "done", "failed", "skipped")
DISRUPTIVE = ("cordon", "taint", "drain", "replace")
UNDO = {"cordon": "uncordon", "taint": "untaint"}
UNDOES = {undo: step for step, undo in UNDO.items()}
PROBE_SECONDS = 0.5  # the readiness probe's wait: below a Kubernetes probe's default 1 s timeout

@dataclass(frozen=True, slots=True)
class Action:
    id: int
    fingerprint: str
    starts_at: str
    node: str
    kind: str
    state: str
    attempts: int
    idempotency_key: str
    result: Any
    created_at: float
    updated_at: float

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "fingerprint": self.fingerprint, "startsAt": self.starts_at, "node": self.node,
            "kind": self.kind, "state": self.state, "attempts": self.attempts,
            "idempotencyKey": self.idempotency_key, "result": self.result,
            "createdAt": self.created_at, "updatedAt": self.updated_at,
        }


@dataclass(frozen=True, slots=True)
class Received:
    new: int
    duplicates: int
    actions: int


# plan(alert) -> (node, steps) or None when the alert asks for nothing
Planner = Callable[[Alert], "tuple[str, list[str]] | None"]


def idempotency_key(fingerprint: str, starts_at: str, node: str, kind: str) -> str:
    digest = hashlib.sha256(f"{fingerprint}\0{starts_at}\0{node}\0{kind}".encode()).hexdigest()
    return f"rk-{digest[:32]}"


def connect(path: str | Path) -> sqlite3.Connection:
    """Open (creating if needed) the journal at ``path``; its folder must exist. A new journal,
    or one an older build made before the version stamp, is stamped with SCHEMA_VERSION; one of
    another schema is refused (journal_file.check_schema)."""
    folder = Path(path).parent
    if not folder.is_dir():
        raise JournalError(f"{path}: the folder {folder} does not exist (create it, or mount the volume)")
    if Path(path).exists() and not Path(path).is_file():
        raise JournalError(f"{path}: must be a file, not a folder or device")
    _create_private(Path(path))
    try:
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=BUSY_SECONDS)
    except sqlite3.Error as error:
        raise JournalError(f"{path}: cannot open: {error}") from error
    check_writable(conn, path)
    try:
        stamp = check_schema(conn, path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.executescript(SCHEMA)
        if stamp:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except sqlite3.Error as error:
        conn.close()
        raise JournalError(f"{path}: not a usable remediation journal: {error}") from error
    except JournalError:
        conn.close()
        raise
    return conn


def _create_private(path: Path) -> None:
    """Create the journal file readable by its owner only (0600, whatever the umask) when it does
    not exist: it holds the alerts' labels and the actions' results. SQLite gives its -wal and -shm
    files the database file's mode. An existing file is left as it is."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        return
    except OSError as error:
        raise JournalError(f"{path}: cannot create: {error.strerror or error}") from error
    os.chmod(path, 0o600)  # exactly 0600: a umask may also have cleared the owner's bits


def reset_breaker(path: str | Path, now: float, who: str = "operator") -> bool:
    """Close the circuit breaker (a person's decision) of an existing journal. Returns whether it
    was open; raises JournalError (changing nothing) when ``path`` is not a journal, and
    JournalUnwritable or JournalLocked when it is one this process cannot write now."""
    conn = connect_existing(path)
    try:
        with _tx(conn):
            row = conn.execute("SELECT open FROM breaker WHERE id = 1").fetchone()
            conn.execute("INSERT OR REPLACE INTO breaker (id, open, reason, changed_at) VALUES (1, 0, ?, ?)",
                         (f"reset by {who}", now))
        return bool(row and row[0])
    except sqlite3.Error as error:
        if cannot_write(error):
            raise unwritable_error(path, error) from error
        raise
    finally:
        conn.close()


class _tx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, kind, value, tb) -> None:
        self.conn.execute("COMMIT" if kind is None else "ROLLBACK")


def _action(row: Iterable[Any]) -> Action:
    values = list(row)
    values[8] = json.loads(values[8]) if values[8] is not None else None
    return Action(*values)


_COLUMNS = ("id, fingerprint, starts_at, node, kind, state, attempts, idempotency_key, result, "
            "created_at, updated_at")


class Journal:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._conn = connect(path)
        self._lock = threading.Lock()
        self._probe = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=PROBE_SECONDS)
        self._probe_lock = threading.Lock()

    def close(self) -> None:
        with self._lock, self._probe_lock:
            self._conn.close()
            self._probe.close()

    def unwritable(self) -> str | None:
        """Why the journal cannot take a write now (another process holds its lock longer than
        PROBE_SECONDS, the disk refuses), or None. Takes the write lock and gives it back."""
        with self._probe_lock:
            error = write_lock_refused(self._probe)
        return None if error is None else f"the journal {self.path} cannot be written: {error}"

    def receive(self, alerts: Iterable[Alert], plan: Planner, now: float) -> Received:
        """Record the alerts and enqueue their actions in ONE transaction (committed on return)."""
        new = duplicates = enqueued = 0
        with self._lock, _tx(self._conn) as conn:
            for alert in alerts:
                key = (alert.fingerprint, alert.starts_at)
                row = conn.execute("SELECT status FROM alerts WHERE fingerprint = ? AND starts_at = ?", key).fetchone()
                if row is not None and (row[0] == alert.status or row[0] == "resolved"):
                    duplicates += 1
                    continue
                new += 1
                planned = plan(alert)
                if row is None:
                    conn.execute("INSERT INTO alerts VALUES (?, ?, ?, ?, ?)",
                                 (*key, alert.status, json.dumps(dict(alert.labels), sort_keys=True), now))
                else:
                    conn.execute("UPDATE alerts SET status = ? WHERE fingerprint = ? AND starts_at = ?",
                                 (alert.status, *key))
                if alert.status == "firing":
                    steps = planned[1] if planned else []
                else:  # resolved: undo only what this alert's ladder did; skip what never began
                    conn.execute("UPDATE actions SET state = 'skipped', result = ?, updated_at = ? "
                                 "WHERE fingerprint = ? AND starts_at = ? AND state = 'pending' AND attempts = 0",
                                 (json.dumps({"reason": "alert resolved before the step ran"}), now, *key))
                    done = {r[0] for r in conn.execute(
                        "SELECT kind FROM actions WHERE fingerprint = ? AND starts_at = ?", key)}
                    steps = [UNDO[k] for k in ("taint", "cordon") if k in done]
                for step in steps:
                    node = planned[0] if planned else ""
                    conn.execute(
                        "INSERT OR IGNORE INTO actions (fingerprint, starts_at, node, kind, state, attempts, "
                        "idempotency_key, created_at, updated_at) VALUES (?, ?, ?, ?, 'pending', 0, ?, ?, ?)",
                        (*key, node, step, idempotency_key(*key, node, step), now, now))
                    enqueued += 1
        return Received(new, duplicates, enqueued)

    def pending(self, limit: int = 100) -> list[Action]:
        with self._lock:
            rows = self._conn.execute(f"SELECT {_COLUMNS} FROM actions WHERE state = 'pending' ORDER BY id LIMIT ?",
                                      (limit,)).fetchall()
        return [_action(r) for r in rows]

    def alert(self, fingerprint: str, starts_at: str) -> tuple[float, dict[str, str]] | None:
        """(received_at, labels) of a journaled alert."""
        with self._lock:
            row = self._conn.execute("SELECT received_at, labels FROM alerts WHERE fingerprint = ? AND starts_at = ?",
                                     (fingerprint, starts_at)).fetchone()
        return (row[0], json.loads(row[1])) if row else None

    def siblings(self, action: Action) -> list[Action]:
        """All actions of the same alert, in ladder order."""
        with self._lock:
            rows = self._conn.execute(f"SELECT {_COLUMNS} FROM actions WHERE fingerprint = ? AND starts_at = ? "
                                      "ORDER BY id", (action.fingerprint, action.starts_at)).fetchall()
        return [_action(r) for r in rows]

    def begin_attempt(self, action_id: int, now: float) -> bool:
        """Record that the step of a pending action begins (committed before it acts); False, and
        nothing changed, when the action is no longer pending (its alert resolved since the worker
        read it): the step must not run."""
        with self._lock, _tx(self._conn) as conn:
            cursor = conn.execute("UPDATE actions SET attempts = attempts + 1, updated_at = ? "
                                  "WHERE id = ? AND state = 'pending'", (now, action_id))
            return cursor.rowcount == 1

    def finish(self, action_id: int, state: str, result: Any, now: float) -> bool:
        """Mark a pending action done/failed/skipped with its result; False if it was no longer
        pending. A begun step's row stays pending until this (a resolution skips only steps with
        no attempt), so False there means the journal was changed by something else."""
        assert state in STATES and state != "pending"
        with self._lock, _tx(self._conn) as conn:
            cursor = conn.execute("UPDATE actions SET state = ?, result = ?, updated_at = ? "
                                  "WHERE id = ? AND state = 'pending'",
                                  (state, json.dumps(result, sort_keys=True), now, action_id))
            return cursor.rowcount == 1

    def actioned(self, since: float, dry_run: bool = False) -> list[tuple[str, float]]:
        """(node, time) of disruptive actions done since ``since`` — for the breaker (``_counted``
        says which count, in a dry run and live)."""
        return self._counted(dry_run, "updated_at >= ?", (since,))

    def last_other_alert_at(self, node: str, fingerprint: str, starts_at: str, dry_run: bool = False) -> float | None:
        """When (seconds since the epoch) a disruptive step of another alert last finished on
        ``node`` — for the cooldown (``_counted`` says which count)."""
        steps = self._counted(dry_run, "node = ? AND NOT (fingerprint = ? AND starts_at = ?)", (node, fingerprint, starts_at))
        return max((at for _, at in steps), default=None)

    def _counted(self, dry_run: bool, where: str, params: tuple[Any, ...]) -> list[tuple[str, float]]:
        """(node, time) of the disruptive steps the breaker and the cooldown count, matching the SQL
        condition ``where`` (``params``): the steps done, and with ``dry_run`` the steps a dry run
        described (skipped, result ``dry_run``) as if done, so a dry run skips what live mode would.
        Live mode never counts those: what was only described was never done, and a node must not be
        held in a cooldown, nor counted by the breaker, after ``dry_run`` is turned off."""
        marks = ",".join("?" * len(DISRUPTIVE))
        with self._lock:
            rows = self._conn.execute(
                f"SELECT node, updated_at, state, result FROM actions WHERE state IN ('done', 'skipped') "
                f"AND kind IN ({marks}) AND {where}", (*DISRUPTIVE, *params)).fetchall()
        counted = []
        for name, at, state, result in rows:
            described = bool(json.loads(result or "{}").get("dry_run"))
            if (state == "done" and not described) or (dry_run and state == "skipped" and described):
                counted.append((name, at))
        return counted

    def still_needed(self, action: Action) -> list[str]:
        """For an undo step (uncordon, untaint): the keys of the step it undoes in the ladders of
        the OTHER alerts on its node that still fire — whatever that step's state (done, skipped by
        the cooldown or the breaker, found the node already held, pending). Those alerts need the
        cordon or taint kept (holds.release)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT a.idempotency_key FROM actions a JOIN alerts l "
                "ON a.fingerprint = l.fingerprint AND a.starts_at = l.starts_at "
                "WHERE a.node = ? AND a.kind = ? AND l.status = 'firing' AND NOT (a.fingerprint = ? AND a.starts_at = ?) "
                "ORDER BY a.id", (action.node, UNDOES[action.kind], action.fingerprint, action.starts_at)).fetchall()
        return [row[0] for row in rows]

    def breaker_state(self) -> tuple[bool, str]:
        with self._lock:
            row = self._conn.execute("SELECT open, reason FROM breaker WHERE id = 1").fetchone()
        return (bool(row[0]), row[1]) if row else (False, "")

    def open_breaker(self, reason: str, now: float, for_action: int | None = None) -> bool:
        """Open the breaker; with ``for_action``, only while that action is still pending (in the
        same transaction: an alert that resolved while its step was being gated opens nothing).
        True when it was opened."""
        with self._lock, _tx(self._conn) as conn:
            if for_action is not None and conn.execute(
                    "SELECT 1 FROM actions WHERE id = ? AND state = 'pending'", (for_action,)).fetchone() is None:
                return False
            conn.execute("INSERT OR REPLACE INTO breaker (id, open, reason, changed_at) VALUES (1, 1, ?, ?)",
                         (reason, now))
            return True

    def is_pending(self, action_id: int) -> bool:
        with self._lock:
            return self._conn.execute("SELECT 1 FROM actions WHERE id = ? AND state = 'pending'",
                                      (action_id,)).fetchone() is not None

    def actions(self, limit: int = 1000) -> list[Action]:
        """The newest ``limit`` actions, newest first."""
        return self.newest(limit)[0]

    def newest(self, limit: int) -> tuple[list[Action], int]:
        """The newest ``limit`` actions, newest first, and how many the journal holds in all."""
        with self._lock:
            rows = self._conn.execute(f"SELECT {_COLUMNS} FROM actions ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
            total = self._conn.execute("SELECT COUNT(*) FROM actions").fetchone()[0]
        return [_action(r) for r in rows], total

    def counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            rows = self._conn.execute("SELECT kind, state, COUNT(*) FROM actions GROUP BY kind, state").fetchall()
        return {(kind, state): n for kind, state, n in rows}

    def snapshot(self) -> tuple[int, int]:
        """(alerts rows, actions rows) — tests use it to prove a request changed nothing."""
        with self._lock:
            return (self._conn.execute("SELECT COUNT(*) FROM alerts").fetchone()[0],
                    self._conn.execute("SELECT COUNT(*) FROM actions").fetchone()[0])
