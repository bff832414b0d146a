"""The slicer's journal: one SQLite row per slice, written before every step that changes the node.

A slice's row holds its phase (``creating`` → ``ready`` → ``deleting`` → gone) and what has been made
so far: the MIG placement it intends (profile id, start, size), the GPU and compute instance ids once
NVML returned them, the MIG device's UUID, and the path of its CDI spec. The slicer writes the intent
first (a new row, or the phase ``deleting``), then makes the change, then records what it made; after a
crash between any two of those steps the reconciler (``runtimekit.slicer.reconcile``) reads the rows
and converges. Every write is its own transaction, committed (WAL, ``synchronous=FULL``: on disk)
before the call returns.

The file is ``<state dir>/slicer.db``. A file that is not this journal (another database, a corrupt
one, a newer schema) raises ``JournalError`` naming the path and the rule: the slicer refuses to
start rather than guess; a journal this process may not write (its owner or mode, a read-only
mount) says so, never "move it aside" (that would lose its slices). A write that fails at run time
(the disk full, the file gone read-only) raises ``JournalUnwritable``, an OSError: the step it
records is not taken. Methods block: call them from the slicer's executor thread.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from runtimekit.sqlite_errors import cannot_write, unwritable_message
from runtimekit.state.slices import DeviceSelector, Owner, SliceMode, SliceSpec, SliceState

FILE_NAME = "slicer.db"
SCHEMA_VERSION = 1  # PRAGMA user_version of a journal this code reads
BUSY_SECONDS = 2.0  # the longest a statement waits for another writer's lock (sqlite busy timeout)
PHASES: tuple[SliceState, ...] = ("creating", "ready", "deleting")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS slices (
    id TEXT PRIMARY KEY,
    phase TEXT NOT NULL CHECK (phase IN ('creating', 'ready', 'deleting')),
    spec TEXT NOT NULL,
    gpu_uuid TEXT NOT NULL,
    gpu_index INTEGER NOT NULL,
    created_at REAL NOT NULL,
    compute INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    profile TEXT NOT NULL DEFAULT '',
    profile_id INTEGER,
    start INTEGER,
    size INTEGER,
    gi_id INTEGER,
    ci_id INTEGER,
    mig_uuid TEXT,
    cdi_path TEXT NOT NULL DEFAULT '',
    cdi_device TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT ''
);
"""


class JournalError(Exception):
    """The journal cannot be opened or is not a slicer journal; the message names the path and the rule."""


class JournalUnwritable(OSError):
    """A write to the journal failed (the disk full, the file read-only now): nothing was recorded."""


@dataclass(frozen=True, slots=True)
class Record:
    """One slice as the journal holds it. ``profile_id``/``start``/``size`` are the MIG placement
    intended before the GPU instance is made (so one made before its id was recorded can be found
    again); ``gi_id``/``ci_id``/``mig_uuid`` what NVML returned; ``cdi_path`` the CDI spec file the
    slice has or is about to have ("" for none). Memory in MiB, compute in percent, times unix seconds."""

    id: str
    phase: SliceState
    spec: SliceSpec
    gpu_uuid: str
    gpu_index: int
    created_at: float
    compute: int
    memory_mib: int
    profile: str = ""
    profile_id: int | None = None
    start: int | None = None
    size: int | None = None
    gi_id: int | None = None
    ci_id: int | None = None
    mig_uuid: str | None = None
    cdi_path: str = ""
    cdi_device: str = ""
    reason: str = ""

    @property
    def mode(self) -> SliceMode:
        return self.spec.mode


_COLUMNS = tuple(f.name for f in fields(Record))
_UPDATABLE = frozenset(_COLUMNS) - {"id", "spec", "created_at"}


def spec_to_json(spec: SliceSpec) -> str:
    return json.dumps(asdict(spec), sort_keys=True)


def spec_from_json(text: str) -> SliceSpec:
    """The SliceSpec a row holds (ValueError/KeyError/TypeError when it is not one). ``profile``
    and ``placement_start`` came later: a row written before them has neither and reads as a
    spec that named no profile (``""``, None)."""
    data = json.loads(text)
    start = data.get("placement_start")
    return SliceSpec(
        mode=data["mode"], compute=int(data["compute"]), memory_mib=int(data["memory_mib"]),
        device=DeviceSelector(**data["device"]), owner=Owner(**data["owner"]), priority=int(data["priority"]),
        profile=str(data.get("profile", "")), placement_start=None if start is None else int(start),
    )


class Journal:
    """The journal at ``path`` (created when missing; its folder must exist). Thread-safe."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn = _connect(self.path)

    @classmethod
    def in_state_dir(cls, state_dir: str | Path) -> Journal:
        return cls(Path(state_dir) / FILE_NAME)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def records(self) -> list[Record]:
        """Every slice the journal holds, oldest first. JournalError for a row that is not one."""
        with self._lock:
            rows = self._conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM slices ORDER BY created_at, id").fetchall()
        return [_record(self.path, row) for row in rows]

    def insert(self, record: Record) -> None:
        """Record a new slice (its intent: phase ``creating``, the placement or CDI path it is about to get)."""
        values = [spec_to_json(record.spec) if name == "spec" else getattr(record, name) for name in _COLUMNS]
        with self._writing():
            self._conn.execute(
                f"INSERT INTO slices ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})", values
            )

    def update(self, slice_id: str, **changes: Any) -> None:
        """Change some of a slice's fields (phase, instance ids, reason ...); KeyError for an unknown field."""
        unknown = set(changes) - _UPDATABLE
        if unknown:
            raise KeyError(f"journal: cannot update {', '.join(sorted(unknown))}")
        if "phase" in changes and changes["phase"] not in PHASES:
            raise ValueError(f"phase: must be one of {', '.join(PHASES)}, got {changes['phase']!r}")
        assignments = ", ".join(f"{name} = ?" for name in changes)
        with self._writing():
            self._conn.execute(f"UPDATE slices SET {assignments} WHERE id = ?", [*changes.values(), slice_id])

    def remove(self, slice_id: str) -> None:
        """Forget a slice (its device is gone)."""
        with self._writing():
            self._conn.execute("DELETE FROM slices WHERE id = ?", (slice_id,))


    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the lock for one write; a sqlite3 failure becomes ``JournalUnwritable``."""
        with self._lock:
            try:
                yield
            except sqlite3.Error as error:
                raise JournalUnwritable(f"the slicer journal {self.path} cannot be written ({error})") from error


def _record(path: Path, row: tuple[Any, ...]) -> Record:
    values = dict(zip(_COLUMNS, row, strict=True))
    try:
        values["spec"] = spec_from_json(values["spec"])
    except (ValueError, KeyError, TypeError) as error:
        raise JournalError(f"{path}: slice {values['id']}: the stored spec is not one ({error})") from None
    return Record(**values)


def _connect(path: Path) -> sqlite3.Connection:
    folder = path.parent
    if not folder.is_dir():
        raise JournalError(f"{path}: the folder {folder} does not exist (create the state directory)")
    if path.exists() and not path.is_file():
        raise JournalError(f"{path}: must be a file, not a folder or device")
    try:
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=BUSY_SECONDS)
    except sqlite3.Error as error:
        raise JournalError(f"{path}: cannot open: {error}") from error
    try:
        _prepare(conn, path)
    except sqlite3.Error as error:
        conn.close()
        if cannot_write(error):  # its slices are still there: never advise moving it aside
            raise JournalError(unwritable_message(path, error)) from error
        raise JournalError(f"{path}: not a usable slicer journal ({error}); move it aside to start afresh") from error
    except JournalError:
        conn.close()
        raise
    return conn


def _prepare(conn: sqlite3.Connection, path: Path) -> None:
    """WAL with synchronous=FULL, the schema created or checked (JournalError when it is not ours)."""
    check = conn.execute("PRAGMA quick_check").fetchone()
    if check is None or check[0] != "ok":
        raise JournalError(f"{path}: the database is damaged ({check[0] if check else 'no answer'}); "
                           "move it aside to start afresh")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version not in (0, SCHEMA_VERSION) or (version == 0 and tables):
        raise JournalError(f"{path}: not a slicer journal of schema {SCHEMA_VERSION} "
                           f"(user_version {version}, tables {', '.join(sorted(tables)) or 'none'})")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(_SCHEMA)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    columns = tuple(row[1] for row in conn.execute("PRAGMA table_info(slices)"))
    if columns != _COLUMNS:
        raise JournalError(f"{path}: the slices table has columns {', '.join(columns)}; expected {', '.join(_COLUMNS)}")
