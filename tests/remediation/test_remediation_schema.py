"""The remediation journal carries its schema version.

A new journal is stamped ``PRAGMA user_version = 1``. A file of another version, or whose tables
are not laid out as version 1 expects (an older or newer schema, another tool's database with
tables of the same names), is refused at start — one line naming the file, the version found and
the one expected, exit 2 as for the other set-up mistakes, the file left alone — instead of
passing start and readiness and answering every webhook 503. A version-0 journal whose tables
are version 1's (made before the stamp existed; the layout has not changed since) is adopted.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from pathlib import Path

import pytest
import yaml

from runtimekit.kube.remediation.cli import main
from runtimekit.kube.remediation.journal import Journal
from runtimekit.kube.remediation.journal_file import JournalError, check_path

# The repro's database: the tables have the journal's names, "actions" has "tries", not "attempts".
FOREIGN = """
CREATE TABLE alerts (fingerprint TEXT, starts_at TEXT, status TEXT, labels TEXT, received_at REAL,
                     UNIQUE (fingerprint, starts_at));
CREATE TABLE actions (id INTEGER PRIMARY KEY, fingerprint TEXT, starts_at TEXT, node TEXT, kind TEXT, state TEXT,
                      tries INTEGER, idempotency_key TEXT UNIQUE, result TEXT, created_at REAL, updated_at REAL);
CREATE TABLE breaker (id INTEGER PRIMARY KEY, open INTEGER, reason TEXT, changed_at REAL);
"""
KUBECONFIG = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
              "clusters": [{"name": "fake", "cluster": {"server": "http://127.0.0.1:9"}}],
              "users": [{"name": "fake", "user": {"token": "t"}}],
              "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}


def _sql(path: Path, script: str) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.executescript(script)


def _version(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute("PRAGMA user_version").fetchone()[0]


def _config(tmp_path: Path, db: Path) -> str:
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(KUBECONFIG))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"listen": "127.0.0.1:0", "db_path": str(db), "kubernetes": {
        "kubeconfig": str(tmp_path / "kubeconfig")}, "auth": {"token_file": str(tmp_path / "token")}}))
    return str(path)


def _refused_everywhere(tmp_path: Path, db: Path, capsys, *expected: str) -> None:
    """check_path and Journal refuse the file; serve and reset-breaker exit 2 with one line that
    says ``expected``; the file is left as it was."""
    before = db.read_bytes()
    with pytest.raises(JournalError) as refused:
        check_path(db)
    for text in expected:
        assert text in str(refused.value), refused.value
    with pytest.raises(JournalError):
        Journal(db)
    assert main(["serve", "--config", _config(tmp_path, db)]) == 2
    assert main(["reset-breaker", "--db", str(db)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": ", 2)[:2] for line in lines] == [["runtimekit", "error"]] * 2, lines
    assert lines[0].startswith(f"runtimekit: error: db_path: {db}: ") and lines[1].startswith(f"runtimekit: error: --db: {db}: ")
    for text in expected:
        assert all(text in line for line in lines), lines
    assert db.read_bytes() == before


def test_a_new_journal_is_stamped_with_schema_version_1(tmp_path):
    Journal(tmp_path / "j.db").close()
    assert _version(tmp_path / "j.db") == 1
    check_path(tmp_path / "j.db")
    Journal(tmp_path / "j.db").close()  # and opened again


@pytest.mark.parametrize("layout", ["foreign", "ours"])
@pytest.mark.parametrize("version", [7, 2])
def test_a_journal_of_another_schema_version_is_refused_at_start(tmp_path, capsys, layout, version):
    db = tmp_path / "j.db"
    if layout == "ours":
        Journal(db).close()
    else:
        _sql(db, FOREIGN)
    _sql(db, f"PRAGMA user_version = {version}")
    _refused_everywhere(tmp_path, db, capsys, str(db), f"schema version {version}", "version 1")


def test_a_version_0_file_whose_tables_are_not_the_journals_is_refused(tmp_path, capsys):
    db = tmp_path / "j.db"
    _sql(db, FOREIGN)
    _refused_everywhere(tmp_path, db, capsys, str(db), "version 0", "version 1", "actions", "tries")


@pytest.mark.parametrize("change,named", [
    ("ALTER TABLE actions RENAME COLUMN attempts TO tries", "actions"),
    ("ALTER TABLE breaker ADD COLUMN who TEXT", "breaker"),
    ("CREATE TABLE things (x)", "things"),
])
def test_a_version_1_journal_whose_tables_differ_is_refused(tmp_path, capsys, change, named):
    db = tmp_path / "j.db"
    Journal(db).close()
    _sql(db, change)
    _refused_everywhere(tmp_path, db, capsys, str(db), "version 1", named)


def test_a_journal_made_before_the_version_stamp_is_adopted(tmp_path):
    """An older build made the same tables without a stamp: checking it changes nothing, opening
    it stamps version 1 and keeps what it holds."""
    db = tmp_path / "j.db"
    journal = Journal(db)
    journal.open_breaker("too many", 1.0)
    journal.close()
    _sql(db, "PRAGMA user_version = 0")
    check_path(db)
    assert _version(db) == 0
    journal = Journal(db)
    try:
        assert _version(db) == 1
        assert journal.breaker_state() == (True, "too many")
    finally:
        journal.close()


def test_a_new_journal_and_its_wal_are_readable_by_their_owner_only(tmp_path):
    """The journal holds the alerts' labels and the actions' results (what was asked of whom):
    0600 whatever the umask, its -wal file too; an existing file's mode is left as it is."""
    old = os.umask(0o022)
    try:
        journal = Journal(tmp_path / "j.db")
        journal.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "j.db").stat().st_mode) == 0o600
    wal = [p for p in tmp_path.iterdir() if p.name.endswith("-wal")]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in wal)
    (tmp_path / "j.db").chmod(0o640)  # the operator's choice for an existing journal
    Journal(tmp_path / "j.db").close()
    assert stat.S_IMODE((tmp_path / "j.db").stat().st_mode) == 0o640
