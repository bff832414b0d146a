"""The slicer's journal: rows survive reopening, and a file that is not a journal is a clear refusal."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runtimekit.slicer.journal import FILE_NAME, Journal, JournalError, Record
from runtimekit.state.slices import DeviceSelector, Owner, SliceSpec

SPEC = SliceSpec("mig", 30, 20480, DeviceSelector(index=1), Owner(pod_uid="u", container="c"), 5)


def record(**kw: object) -> Record:
    base: dict[str, object] = dict(id="s-0123456789ab", phase="creating", spec=SPEC, gpu_uuid="GPU-1", gpu_index=1,
                                   created_at=1.5, compute=42, memory_mib=40192, profile="3g.40gb", profile_id=9,
                                   start=4, size=4, cdi_path="/cdi/x.json", cdi_device="v/slice=s-0123456789ab")
    return Record(**{**base, **kw})  # type: ignore[arg-type]


def test_rows_and_updates_survive_reopening(tmp_path: Path) -> None:
    journal = Journal.in_state_dir(tmp_path)
    journal.insert(record())
    journal.update("s-0123456789ab", gi_id=3, ci_id=0, mig_uuid="MIG-x", phase="ready")
    journal.insert(record(id="s-ffffffffffff", phase="creating", created_at=2.0))
    journal.remove("s-ffffffffffff")
    journal.close()
    (again,) = Journal(tmp_path / FILE_NAME).records()
    assert again == record(gi_id=3, ci_id=0, mig_uuid="MIG-x", phase="ready")
    assert again.spec == SPEC


def test_wal_and_full_sync(tmp_path: Path) -> None:
    journal = Journal.in_state_dir(tmp_path)
    assert journal._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert journal._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_unknown_field_and_phase_are_refused(tmp_path: Path) -> None:
    journal = Journal.in_state_dir(tmp_path)
    journal.insert(record())
    with pytest.raises(KeyError):
        journal.update("s-0123456789ab", spec="x")
    with pytest.raises(ValueError, match="phase"):
        journal.update("s-0123456789ab", phase="gone")


def test_a_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_bytes(b"this is not a database, only some words " * 100)
    with pytest.raises(JournalError, match=f"{FILE_NAME}: not a usable slicer journal .*move it aside"):
        Journal.in_state_dir(tmp_path)


def test_another_database_is_not_adopted(tmp_path: Path) -> None:
    other = sqlite3.connect(tmp_path / FILE_NAME)
    other.execute("CREATE TABLE alerts (x TEXT)")
    other.commit()
    other.close()
    with pytest.raises(JournalError, match="not a slicer journal of schema 1"):
        Journal.in_state_dir(tmp_path)


def test_a_missing_state_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="does not exist"):
        Journal.in_state_dir(tmp_path / "nope")


def test_a_damaged_row_is_named(tmp_path: Path) -> None:
    journal = Journal.in_state_dir(tmp_path)
    journal.insert(record())
    journal._conn.execute("UPDATE slices SET spec = '{\"mode\": 1}'")
    with pytest.raises(JournalError, match="slice s-0123456789ab: the stored spec is not one"):
        journal.records()


def test_a_spec_naming_a_profile_and_placement_survives_reopening(tmp_path: Path) -> None:
    named = SliceSpec("mig", 0, 0, DeviceSelector(index=0), Owner(owner_id="dra:uid:0"), 0, "1g.10gb", 3)
    journal = Journal.in_state_dir(tmp_path)
    journal.insert(record(spec=named))
    journal.close()
    (again,) = Journal(tmp_path / FILE_NAME).records()
    assert again.spec == named


def test_a_row_written_before_profiles_reads_as_naming_none(tmp_path: Path) -> None:
    """A journal of an agent before CreateSlice took a profile: its spec JSON has no profile and
    no placement_start key (as that agent's ``json.dumps(asdict(spec))`` wrote it)."""
    journal = Journal.in_state_dir(tmp_path)
    journal.insert(record())
    old = ('{"compute": 30, "device": {"index": 1, "uuid": null}, "memory_mib": 20480, "mode": "mig", '
           '"owner": {"container": "c", "owner_id": "", "pod_uid": "u"}, "priority": 5}')
    journal._conn.execute("UPDATE slices SET spec = ?", (old,))
    journal.close()
    (again,) = Journal(tmp_path / FILE_NAME).records()
    assert again.spec == SPEC and (again.spec.profile, again.spec.placement_start) == ("", None)
