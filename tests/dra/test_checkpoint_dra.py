"""The DRA driver's checkpoint and directory lock (kube/dra/checkpoint.py): a round trip through
the file, refusals of a file this version cannot read, a failed write that changes nothing, and a
flock that refuses a second driver and dies with a killed one."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from runtimekit.fileio import tmp_path as writers_tmp_file
from runtimekit.kube.dra.checkpoint import (
    COMPLETED,
    STARTED,
    Checkpoint,
    CheckpointError,
    ClaimEntry,
    DeviceEntry,
    DirectoryLock,
    DriverLocked,
)
from tests.agent_process import ROOT

UID_A = "aaaaaaaa-0000-0000-0000-000000000001"
UID_B = "bbbbbbbb-0000-0000-0000-000000000002"
SHARE = DeviceEntry(request="share", pool="node-a", device="gpu-2", position=0, kind="tdm", share_id="5e5e5e5e-0000",
                    slice_id="s-0123456789ab", cdi_ids=("runtimekit.io/slice=s-0123456789ab",))
NIC = DeviceEntry(request="nic", pool="node-a", device="nic-mlx5-0", position=1, kind="nic",
                  cdi_ids=(f"runtimekit.io/claim={UID_A}-nic-mlx5-0",))


def filled(path: Path) -> Checkpoint:
    checkpoint = Checkpoint.load(path)
    checkpoint.put(UID_A, ClaimEntry("default", "a", COMPLETED, (SHARE, NIC)))
    checkpoint.put(UID_B, ClaimEntry("team", "b", STARTED, (replace(SHARE, slice_id="", cdi_ids=(), share_id=""),)))
    return checkpoint


def test_what_is_put_is_read_back_by_a_new_process(tmp_path: Path) -> None:
    path = tmp_path / "plugin" / "checkpoint.json"
    assert Checkpoint.load(path).claims == {}  # no file yet: nothing prepared
    written = filled(path)
    assert Checkpoint.load(path).claims == written.claims
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    document = json.loads(path.read_text())
    assert document["version"] == 1 and document["id"] == written.id == Checkpoint.load(path).id
    assert document["claims"][UID_B]["devices"] == [
        {"request": "share", "pool": "node-a", "device": "gpu-2", "position": 0, "kind": "tdm", "cdi_ids": []}]  # empty ones omitted


def test_a_device_is_updated_and_a_claim_dropped(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    checkpoint = filled(path)
    made = replace(SHARE, slice_id="s-ffffffffffff", cdi_ids=("runtimekit.io/slice=s-ffffffffffff",))
    checkpoint.update_device(UID_B, replace(made, share_id=""))
    checkpoint.drop(UID_A)
    checkpoint.drop("cccccccc-0000-0000-0000-000000000003")  # unknown: nothing to do
    again = Checkpoint.load(path)
    assert list(again.claims) == [UID_B]
    assert again.claims[UID_B].devices[0].slice_id == "s-ffffffffffff"


@pytest.mark.parametrize(("content", "words"), [
    (json.dumps({"version": 2, "claims": {}}), "version 2, this driver reads version 1 only"),
    (json.dumps({"claims": {}}), "version None, this driver reads version 1 only"),
    ("{not json", "not a DRA driver checkpoint: not valid JSON: Expecting property name"),
    ('{"version": 1, "version": 1, "claims": {}}', "not a DRA driver checkpoint: duplicate key 'version'"),
    ('{"version": 1, "claims": {"x": {"namespace": "\\ud800"}}}', "not a DRA driver checkpoint: claims.x.namespace: not valid Unicode"),
    ("[]", "not a DRA driver checkpoint: ValueError: not a JSON object"),
    (json.dumps({"version": 1, "claims": {UID_A: {"namespace": "n", "name": "a", "state": "halfway"}}}),
     "state must be started or completed, got 'halfway'"),
    (json.dumps({"version": 1, "claims": {UID_A: {"namespace": "n", "state": "started"}}}), f"claims.{UID_A}.name: required key is missing"),
    (json.dumps({"version": 1, "id": 7, "claims": {}}), "not a DRA driver checkpoint: id: must be a string, got int 7"),
    (json.dumps({"version": 1, "id": "ABC", "claims": {}}), "id: must be 16 lower-case hex digits, got 'ABC'"),
    (json.dumps({"version": 1, "claims": {UID_A: {"namespace": "n", "name": "a", "state": "started",
                                                  "devices": [{"request": "r"}]}}}), f"claims.{UID_A}.devices[0].pool: required key is missing"),
])
def test_a_file_this_version_cannot_read_is_refused_not_guessed(tmp_path: Path, content: str, words: str) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(content)
    with pytest.raises(CheckpointError) as caught:
        Checkpoint.load(path)
    assert str(caught.value).startswith(f"{path}: ") and words in str(caught.value), caught.value


def test_a_file_without_an_id_gets_one_written_with_the_next_change(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"  # written before the key existed
    path.write_text(json.dumps({"version": 1, "claims": {UID_A: {"namespace": "n", "name": "a", "state": "completed"}}}))
    checkpoint = Checkpoint.load(path)
    assert re.fullmatch("[0-9a-f]{16}", checkpoint.id) and list(checkpoint.claims) == [UID_A]
    checkpoint.put(UID_B, ClaimEntry("n", "b", STARTED))
    assert Checkpoint.load(path).id == checkpoint.id
    assert Checkpoint.load(tmp_path / "other.json").id != checkpoint.id  # each new checkpoint its own


def test_an_unreadable_checkpoint_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.mkdir()  # a directory where the file should be
    with pytest.raises(CheckpointError, match="cannot read: Is a directory"):
        Checkpoint.load(path)


def test_a_write_that_fails_leaves_the_record_and_the_file_as_they_were(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    checkpoint = filled(path)
    before, on_disk = dict(checkpoint.claims), path.read_bytes()
    tmp_path_of_writer = writers_tmp_file(path)
    tmp_path_of_writer.mkdir()  # the writer's temporary file cannot be created: EISDIR, a real OSError
    with pytest.raises(OSError):
        checkpoint.put(UID_A, replace(checkpoint.claims[UID_A], state=STARTED))
    with pytest.raises(OSError):
        checkpoint.put("cccccccc-0000-0000-0000-000000000003", ClaimEntry("n", "c", STARTED))
    with pytest.raises(OSError):
        checkpoint.update_device(UID_B, SHARE)
    with pytest.raises(OSError):
        checkpoint.drop(UID_A)
    assert checkpoint.claims == before
    assert path.read_bytes() == on_disk
    tmp_path_of_writer.rmdir()
    checkpoint.drop(UID_A)  # the disk is back: the next change is written
    assert list(Checkpoint.load(path).claims) == [UID_B]


def test_a_second_driver_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    first, second = DirectoryLock(tmp_path / "plugin" / "driver.lock"), DirectoryLock(tmp_path / "plugin" / "driver.lock")
    first.acquire()
    with pytest.raises(DriverLocked, match="driver.lock is locked: another DRA driver serves this plugin directory"):
        second.acquire()
    first.release()
    second.acquire()  # released: the next one takes it
    second.release()


def test_the_lock_dies_with_a_killed_driver(tmp_path: Path) -> None:
    lock = tmp_path / "driver.lock"
    code = ("import os, signal, sys; from runtimekit.kube.dra.checkpoint import DirectoryLock; "
            f"DirectoryLock({str(lock)!r}).acquire(); print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(DriverLocked):
            DirectoryLock(lock).acquire()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    after = DirectoryLock(lock)
    after.acquire()  # no stale lock after a SIGKILL
    after.release()
