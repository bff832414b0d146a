"""What a sqlite3 error means for the file behind it: another connection's lock, or a file this
process may not write. Shared by the slicer's journal and the remediation service's journal.

sqlite3 sets ``sqlite_errorcode`` (Python 3.11+) to the extended result code; its low byte is the
primary code (https://www.sqlite.org/rescode.html).
"""

from __future__ import annotations

import sqlite3

__all__ = ["cannot_write", "is_locked", "unwritable_message"]

# Primary result codes that say "this process may not write the file", not "not a database".
_CANNOT_WRITE = (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_AUTH)


def is_locked(error: sqlite3.Error) -> bool:
    """Is this sqlite3 error another connection's lock (SQLITE_BUSY / SQLITE_LOCKED)?"""
    return getattr(error, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def cannot_write(error: sqlite3.Error) -> bool:
    """Is this sqlite3 error a refusal to write the file (read-only, no permission)?"""
    return ((getattr(error, "sqlite_errorcode", None) or 0) & 0xFF) in _CANNOT_WRITE


def unwritable_message(path: object, error: sqlite3.Error) -> str:
    """What to say of a database this process may not write (``cannot_write``): what to do."""
    return (f"{path}: cannot write it ({error}): run as the user that owns it, or make it and its folder "
            "writable; nothing was changed")
