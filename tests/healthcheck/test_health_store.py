"""The health store: round trip, atomic writes, writes only on change, corrupt files, boot id."""

from __future__ import annotations

import json
import logging
import os

import pytest

from runtimekit.healthcheck import store as store_module
from runtimekit.healthcheck.machine import MachineInput, MachineState, step
from runtimekit.healthcheck.store import FILE_NAME, HealthStore
from runtimekit.healthcheck.types import (
    CLEARS_ON_REBOOT,
    CLEARS_ON_RESET,
    CLEARS_WHEN_CLEAN,
    CRITICAL,
    HEALTHY,
    REBOOT_NODE,
    UNHEALTHY,
    WARNING,
    Finding,
)

GPUS = ((0, "GPU-0"), (1, "GPU-1"), (2, "GPU-2"))


@pytest.fixture
def boot_id(tmp_path):
    path = tmp_path / "boot_id"
    path.write_text("boot-aaaa\n")
    return path


def make_store(tmp_path, boot_id) -> HealthStore:
    return HealthStore(tmp_path / "state", boot_id_path=str(boot_id), clock=lambda: 1234.0)


def unhealthy_state() -> MachineState:
    findings = (
        Finding(0, "GPU-0", "xid_79", CRITICAL, REBOOT_NODE, "XID 79", CLEARS_ON_REBOOT),
        Finding(1, "GPU-1", "ecc_uncorrectable", CRITICAL, "drain_and_reset_gpu", "DBE", CLEARS_ON_RESET),
        Finding(2, "GPU-2", "thermal", WARNING, "none", "hot", CLEARS_WHEN_CLEAN, gpu_instance_id=3),
        Finding(None, None, "gpu_count_low", CRITICAL, REBOOT_NODE, "7 of 8", CLEARS_ON_REBOOT),
    )
    return step(MachineState(), MachineInput(now=100.0, findings=findings, gpus=GPUS)).state


def test_round_trip(tmp_path, boot_id):
    state = unhealthy_state()
    store = make_store(tmp_path, boot_id)
    assert store.load().state == MachineState()  # no file yet
    assert store.save(state, expected_gpus=8)
    loaded = make_store(tmp_path, boot_id).load()
    assert loaded.state == state
    assert (loaded.expected_gpus, loaded.boot_id, loaded.boot_id_changed) == (8, "boot-aaaa", False)
    doc = json.loads((tmp_path / "state" / FILE_NAME).read_text())
    assert doc["version"] == 2 and doc["boot_id"] == "boot-aaaa"
    assert set(doc["node"]) == {"state", "since", "faults"}  # the node names no GPU
    assert doc["node_fault_events_total"] == [{"fault": "gpu_count_low", "severity": CRITICAL, "count": 1}]
    assert all(e["uuid"] for e in doc["fault_events_total"])


# health.json as the agent wrote it before the node had its own shape (schema version 1): the node
# a record at index -1 with uuid "", its fault events under uuid "".
VERSION_1 = {
    "version": 1, "saved_at": 100.0, "boot_id": "boot-aaaa", "expected_gpus": 8,
    "gpus": [{"index": 0, "uuid": "GPU-0", "state": "unhealthy", "since": 100.0, "retired": False, "faults": [
        {"fault": "xid_79", "severity": "critical", "action": "reboot_node", "evidence": "XID 79",
         "clears": "node_reboot", "first_seen": 100.0, "last_seen": 100.0, "gpu_instance_id": None,
         "clean_samples": 0, "fault_class": "bus", "schedulable": False}]}],
    "node": {"index": -1, "uuid": "", "state": "unhealthy", "since": 100.0, "retired": False, "faults": [
        {"fault": "gpu_count_low", "severity": "critical", "action": "reboot_node", "evidence": "7 of 8",
         "clears": "node_reboot", "first_seen": 100.0, "last_seen": 100.0, "gpu_instance_id": None,
         "clean_samples": 0, "fault_class": "bus", "schedulable": False}]},
    "transitions_total": [{"uuid": "GPU-0", "from": "healthy", "to": "unhealthy", "count": 1}],
    "fault_events_total": [{"uuid": "", "fault": "gpu_count_low", "severity": "critical", "count": 2},
                           {"uuid": "GPU-0", "fault": "xid_79", "severity": "critical", "count": 1}],
    "detectors": {"lost_card": {"known": {"GPU-0": [0, "00000000:18:00.0"]}}},
}


def test_a_version_1_file_still_loads_and_is_rewritten_as_version_2(tmp_path, boot_id):
    path = tmp_path / "state" / FILE_NAME
    path.parent.mkdir()
    path.write_text(json.dumps(VERSION_1))
    store = make_store(tmp_path, boot_id)
    loaded = store.load()
    state = loaded.state
    assert (loaded.expected_gpus, loaded.boot_id_changed) == (8, False)
    assert (state.node.state, [f.fault for f in state.node.faults]) == (UNHEALTHY, ["gpu_count_low"])
    assert state.node_fault_events_total == {("gpu_count_low", CRITICAL): 2}
    assert state.fault_events_total == {("GPU-0", "xid_79", CRITICAL): 1}
    assert state.gpus["GPU-0"].faults[0].fault == "xid_79"
    assert loaded.detectors == VERSION_1["detectors"]
    assert store.save(state, loaded.expected_gpus, loaded.detectors)  # upgraded at the first save
    doc = json.loads(path.read_text())
    assert doc["version"] == 2 and "index" not in doc["node"]
    assert make_store(tmp_path, boot_id).load().state == state


def test_a_gpu_fault_event_without_uuid_is_refused_in_version_2(tmp_path, boot_id):
    path = tmp_path / "state" / FILE_NAME
    path.parent.mkdir()
    doc = {**VERSION_1, "version": 2, "node": {"state": "healthy", "since": 0.0, "faults": []}}
    path.write_text(json.dumps(doc))
    faults = make_store(tmp_path, boot_id).load().state.node.faults  # set aside: the node starts unknown
    assert [f.fault for f in faults] == ["health_state_unreadable"]
    assert (tmp_path / "state" / f"{FILE_NAME}.corrupt-1234").exists()


def test_writes_only_when_something_that_matters_changed(tmp_path, boot_id):
    store = make_store(tmp_path, boot_id)
    state = unhealthy_state()
    assert store.save(state, 8)
    # the same finding again (an event-only evaluation): last_seen and evidence move, nothing else
    again = step(state, MachineInput(now=101.0, findings=(
        Finding(0, "GPU-0", "xid_79", CRITICAL, REBOOT_NODE, "XID 79 (again)", CLEARS_ON_REBOOT),), gpus=GPUS,
        sampled=False)).state
    assert again.gpus["GPU-0"].faults[0].last_seen == 101.0
    assert not store.save(again, 8)
    assert store.save(again, 9)  # expected GPUs changed
    cleared = step(again, MachineInput(now=102.0, gpus=GPUS, clean_samples=1)).state  # GPU 2's warning clears
    assert store.save(cleared, 9)
    assert not store.save(cleared, 9)


def test_fresh_store_after_load_does_not_rewrite(tmp_path, boot_id):
    state = unhealthy_state()
    make_store(tmp_path, boot_id).save(state, 8)
    store = make_store(tmp_path, boot_id)
    loaded = store.load()
    assert not store.save(loaded.state, loaded.expected_gpus)


def test_crash_mid_write_leaves_the_old_file(tmp_path, boot_id, monkeypatch):
    store = make_store(tmp_path, boot_id)
    state = unhealthy_state()
    store.save(state, 8)
    before = (tmp_path / "state" / FILE_NAME).read_bytes()

    def crash(src, dst):
        raise OSError(5, "Input/output error")  # the machine died between fsync and rename

    monkeypatch.setattr(store_module.os, "replace", crash)
    assert not store.save(MachineState(), 8)
    monkeypatch.undo()
    assert (tmp_path / "state" / FILE_NAME).read_bytes() == before
    assert [p.name for p in (tmp_path / "state").iterdir()] == [FILE_NAME]  # the temporary file is gone
    assert make_store(tmp_path, boot_id).load().state == state
    assert store.save(MachineState(), 8)  # retried on the next call


def test_a_half_written_temporary_file_is_ignored(tmp_path, boot_id):
    store = make_store(tmp_path, boot_id)
    state = unhealthy_state()
    store.save(state, 8)
    (tmp_path / "state" / f".{FILE_NAME}.tmp-99999").write_text('{"version": 1, "gpus": [')
    assert make_store(tmp_path, boot_id).load().state == state


def test_write_is_fsynced_and_renamed(tmp_path, boot_id, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(store_module.os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(store_module.os, "replace", lambda a, b: (calls.append("rename"), real_replace(a, b))[1])
    make_store(tmp_path, boot_id).save(unhealthy_state(), 8)
    assert calls == ["fsync", "rename", "fsync"]  # the file, the rename, the directory


@pytest.mark.parametrize("content", [
    "{not json", "[]", '{"version": 99}', '{"version": 1}', "",
    '{"version": 1, "boot_id": "x", "expected_gpus": 1, "node": {"index": -1, "uuid": "", "state": "on fire", '
    '"since": 0, "faults": []}, "gpus": [], "transitions_total": [], "fault_events_total": []}',
])
def test_corrupt_file_is_set_aside_not_fatal(tmp_path, boot_id, caplog, content):
    path = tmp_path / "state" / FILE_NAME
    path.parent.mkdir()
    path.write_text(content)
    with caplog.at_level(logging.ERROR, logger="runtimekit.health"):
        loaded = make_store(tmp_path, boot_id).load()
    assert [f.fault for f in loaded.state.node.faults] == ["health_state_unreadable"]
    assert loaded.state.gpus == {} and loaded.expected_gpus == 0
    assert "health_state_unreadable" in path.read_text()  # the unknown state, written in its place at once
    aside = tmp_path / "state" / f"{FILE_NAME}.corrupt-1234"
    assert aside.read_text() == content
    assert "unreadable" in caplog.text and "set aside" in caplog.text


def test_unreadable_boot_id_is_not_a_reboot(tmp_path, boot_id, caplog):
    make_store(tmp_path, boot_id).save(unhealthy_state(), 8)
    store = HealthStore(tmp_path / "state", boot_id_path=str(tmp_path / "missing"))
    loaded = store.load()
    assert (loaded.boot_id, loaded.boot_id_changed) == ("", False)
    assert "cannot read the boot id" in caplog.text


def test_boot_id_change_clears_reboot_and_reset_sticky_faults(tmp_path, boot_id):
    make_store(tmp_path, boot_id).save(unhealthy_state(), 8)
    same = make_store(tmp_path, boot_id).load()
    assert not same.boot_id_changed
    after_restart = step(same.state, MachineInput(now=200.0, gpus=GPUS, boot_id_changed=same.boot_id_changed)).state
    assert [after_restart.gpus[u].state for _, u in GPUS] == [UNHEALTHY, UNHEALTHY, "recovering"]

    boot_id.write_text("boot-bbbb\n")  # the node rebooted
    loaded = make_store(tmp_path, boot_id).load()
    assert loaded.boot_id_changed
    result = step(loaded.state, MachineInput(now=200.0, gpus=GPUS, boot_id_changed=loaded.boot_id_changed))
    gpus = result.state.gpus
    assert (gpus["GPU-0"].state, gpus["GPU-0"].faults) == (HEALTHY, ())
    assert (gpus["GPU-1"].state, gpus["GPU-1"].faults) == (HEALTHY, ())
    assert [f.fault for f in gpus["GPU-2"].faults] == ["thermal"]  # clears by clean samples, as before
    assert result.state.node.faults == ()
    assert {(t.uuid, t.to_state) for t in result.transitions} >= {("GPU-0", HEALTHY), ("GPU-1", HEALTHY)}


def test_check_boot_id_reports_a_change_once_and_the_next_save_writes_it(tmp_path, boot_id, caplog):
    store = make_store(tmp_path, boot_id)
    store.load()
    assert not store.check_boot_id()  # unchanged
    boot_id.write_text("boot-bbbb\n")  # the node rebooted under the running agent
    with caplog.at_level(logging.INFO, logger="runtimekit.health"):
        assert store.check_boot_id()
    assert "boot id changed (boot-aaaa → boot-bbbb) while the agent runs" in caplog.text
    assert not store.check_boot_id()  # reported once
    store.save(unhealthy_state(), 8)
    assert json.loads((tmp_path / "state" / FILE_NAME).read_text())["boot_id"] == "boot-bbbb"
    assert not make_store(tmp_path, boot_id).load().boot_id_changed  # a restart now is no second reboot


def test_check_boot_id_unreadable_proves_nothing_and_warns_once(tmp_path, boot_id, caplog):
    store = make_store(tmp_path, boot_id)
    store.load()
    boot_id.unlink()
    with caplog.at_level(logging.WARNING, logger="runtimekit.health"):
        assert not store.check_boot_id()
        assert not store.check_boot_id()
    assert caplog.text.count("cannot read the boot id") == 1
    boot_id.write_text("boot-aaaa\n")
    assert not store.check_boot_id()  # back, the same: no reboot


def test_unwritable_directory_is_logged_once_and_not_fatal(tmp_path, boot_id, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = HealthStore(blocker / "state", boot_id_path=str(boot_id))
    with caplog.at_level(logging.ERROR, logger="runtimekit.health"):
        assert not store.save(unhealthy_state(), 8)
        assert not store.save(unhealthy_state(), 8)
    assert caplog.text.count("cannot write health state") == 1


def test_reset_counters_are_saved_and_a_bad_entry_is_left_out(tmp_path):
    """The counters ride along with a write; read back by GPU; an entry that is not [time, 3 numbers
    or nulls] is left out (that GPU's reset is then not seen: its faults stay held), and the rest of
    the file is read as usual."""
    from runtimekit.healthcheck.resets import Counters
    from runtimekit.healthcheck.statefile import decode_counters

    store = HealthStore(tmp_path)
    counters = {"GPU-a": Counters(1_700_000_000.0, 123.5, 3.0, None), "GPU-b": Counters(1_700_000_000.0, None, 0.0, 0.0)}
    assert store.save(MachineState(), 2, counters=counters)
    doc = json.loads((tmp_path / FILE_NAME).read_text())
    assert decode_counters(doc) == counters
    assert HealthStore(tmp_path).load().counters == counters
    doc["reset_counters"].update({"GPU-c": [1e300, 1, 2, 3], "GPU-d": [1_700_000_000.0, "x", 2, 3],
                                  "GPU-e": [1_700_000_000.0, 1, 2], "GPU-f": [1_700_000_000.0, -1, 2, 3]})
    assert decode_counters(doc) == counters
    assert decode_counters({}) == {} and decode_counters({"reset_counters": [1, 2]}) == {}
    (tmp_path / FILE_NAME).write_text(json.dumps(doc))
    loaded = HealthStore(tmp_path).load()
    assert loaded.counters == counters and loaded.expected_gpus == 2
