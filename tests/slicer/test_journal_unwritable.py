"""A slicer journal that cannot be written: refused at start with what to do (never "move it
aside", which would lose its slices), and at run time (the disk full) a refusal that keeps every
slice, never an INTERNAL error with a traceback.

The full disk is SQLite's own SQLITE_FULL, reached by capping the journal's page count
(``PRAGMA max_page_count``): the error a full filesystem gives, without filling one. A read-only
journal cannot be made here (the tests run as root, whom file modes do not stop), so that start is
fed SQLite's SQLITE_READONLY error as its open would raise it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runtimekit.slicer import journal as journal_module
from runtimekit.slicer.journal import Journal, JournalError
from runtimekit.state.slices import SliceError, SliceRequest


def request(mode: str, **kw: object) -> SliceRequest:
    fields = {"mode": mode, "compute": 30 if mode == "mig" else 10, "memory": "20GiB" if mode == "mig" else "1GiB",
              "owner_id": "me", **kw}
    return SliceRequest(**fields)  # type: ignore[arg-type]


def fill(journal: Journal) -> None:
    """No page more for the journal's database, and no room left in its pages: the next insert
    is SQLITE_FULL."""
    conn = journal._conn
    conn.execute("CREATE TABLE padding (bytes BLOB)")
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    for size in (4096, 512, 64, 8, 1):
        try:
            while True:
                conn.execute("INSERT INTO padding VALUES (?)", (b"x" * size,))
        except sqlite3.OperationalError as error:
            assert "full" in str(error)


async def test_a_full_disk_refuses_creates_as_unavailable_and_keeps_every_slice(rig) -> None:
    slicer, _, node = rig
    kept = [(await slicer.create(request("tdm"))).id]
    instances = node.gpu_instances(0)
    fill(slicer._books.journal)
    refused: list[SliceError] = []
    for _ in range(60):  # the slices' own page fills up after a few more rows
        try:
            kept.append((await slicer.create(request("tdm"))).id)
        except SliceError as error:
            refused.append(error)
            break
    assert refused, "the capped journal never filled"
    with pytest.raises(SliceError) as mig_refused:  # a MIG slice: refused before any instance is made
        await slicer.create(request("mig", device="0"))
    for error in (refused[0], mig_refused.value):
        assert error.code == "unavailable"
        assert "nothing was kept" in str(error)
        assert "cannot be written (database or disk is full)" in str(error)
    assert sorted(slicer.table().slices) == sorted(kept)
    assert node.gpu_instances(0) == instances


def test_a_journal_it_may_not_write_is_refused_with_what_to_do_not_move_it_aside(tmp_path: Path, monkeypatch) -> None:
    Journal(tmp_path / "slicer.db").close()

    def read_only(conn: sqlite3.Connection, path: Path) -> None:
        error = sqlite3.OperationalError("attempt to write a readonly database")
        error.sqlite_errorcode = sqlite3.SQLITE_READONLY  # what sqlite3 sets on a file it may not write
        raise error

    monkeypatch.setattr(journal_module, "_prepare", read_only)
    with pytest.raises(JournalError) as refused:
        Journal(tmp_path / "slicer.db")
    assert "cannot write it (attempt to write a readonly database)" in str(refused.value)
    assert "make it and its folder writable" in str(refused.value) and "move it aside" not in str(refused.value)
