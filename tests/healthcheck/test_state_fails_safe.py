"""State that fails safe: a health state file the agent cannot read (garbage bytes, deep nesting, a
newer version, a truncated write, absurd timestamps, a directory in its place) never stops the agent,
is never overwritten, and never turns a GPU known to be bad into a schedulable one; the state
directory is checked at start; the health API answers whatever times a verdict holds.

Store-level tests load files written by hand; checker-level tests run a HealthChecker over a state
directory across "restarts" (a new checker on the same directory), as the agent does.
"""

from __future__ import annotations

import asyncio
import errno
import json
import math
import os
import re
import socket
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from exporter_factories import make_gpu, make_snapshot, uuid_for

from runtimekit import state_dir
from runtimekit.gpu.types import XidEvent
from runtimekit.healthcheck import store as store_module
from runtimekit.healthcheck.api import add_health_routes
from runtimekit.healthcheck.checker import HealthChecker
from runtimekit.healthcheck.machine import MachineInput, MachineState, node_health, step
from runtimekit.healthcheck.store import FILE_NAME, HealthStore
from runtimekit.healthcheck.types import (
    CLEARS_ON_REBOOT,
    CRITICAL,
    HEALTHY,
    REBOOT_NODE,
    UNHEALTHY,
    ActiveFault,
    Finding,
    GpuHealth,
    NodeHealth,
)
from runtimekit.state import NodeState, SamplerStats
from runtimekit.state_dir import StateDirError, check_state_dir, lock_state_dir

UNREADABLE = "health_state_unreadable"
NOW = 1_700_000_000.0


@pytest.fixture
def boot_id(tmp_path: Path) -> Path:
    path = tmp_path / "boot_id"
    path.write_text("boot-1\n")
    return path


def make_store(tmp_path: Path, boot_id: Path) -> HealthStore:
    return HealthStore(tmp_path / "state", boot_id_path=str(boot_id), clock=lambda: NOW)


def health_file(tmp_path: Path) -> Path:
    return tmp_path / "state" / FILE_NAME


def set_aside(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "state").glob(f"{FILE_NAME}.corrupt-*"))


def lost_gpu_state() -> MachineState:
    """GPU 1 lost (XID 79: sticky until a reboot), GPU 0 healthy."""
    finding = Finding(1, uuid_for(1), "gpu_lost", CRITICAL, REBOOT_NODE, "XID 79", CLEARS_ON_REBOOT,
                      fault_class="bus", schedulable=False)
    gpus = ((0, uuid_for(0)), (1, uuid_for(1)))
    return step(MachineState(), MachineInput(now=NOW - 50, findings=(finding,), gpus=gpus)).state


def saved_doc(tmp_path: Path, boot_id: Path) -> dict:
    make_store(tmp_path, boot_id).save(lost_gpu_state(), 2)
    return json.loads(health_file(tmp_path).read_text())


def write_raw(tmp_path: Path, data: bytes) -> Path:
    path = health_file(tmp_path)
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return path


def node_fault_names(state: MachineState) -> list[str]:
    return [f.fault for f in state.node.faults]


# ---- store level -------------------------------------------------------------------------------

def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


GARBAGE = {
    "not UTF-8": b'{"version": 2, "boot_id": "\xff\xfe"}',
    "deeply nested": b"[" * 100_000 + b"]" * 100_000,
    "nested past the bound": json.dumps({"version": 2, "x": nested(80)}).encode(),
    "newer version": b'{"version": 99}',
    "truncated": None,  # a valid file cut in half, filled in below
}


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_an_unreadable_file_starts_the_node_as_state_unknown_and_is_kept(tmp_path, boot_id, kind):
    data = GARBAGE[kind]
    if data is None:
        full = json.dumps(saved_doc(tmp_path, boot_id)).encode()
        data = full[: len(full) // 2]
    write_raw(tmp_path, data)
    loaded = make_store(tmp_path, boot_id).load()  # never raises
    assert node_fault_names(loaded.state) == [UNREADABLE]
    fault = loaded.state.node.faults[0]
    assert (fault.severity, fault.clears, fault.keeps_schedulable) == (CRITICAL, CLEARS_ON_REBOOT, False)
    assert loaded.state.node.state == UNHEALTHY
    [aside] = set_aside(tmp_path)
    assert aside.read_bytes() == data  # the unread file, byte for byte
    # The unknown state is on disk at once: a crash before the first evaluation still remembers it.
    reread = make_store(tmp_path, boot_id).load()
    assert node_fault_names(reread.state) == [UNREADABLE] and len(set_aside(tmp_path)) == 1


def test_a_file_that_cannot_be_read_at_all_is_set_aside_not_overwritten(tmp_path, boot_id):
    path = health_file(tmp_path)
    path.mkdir(parents=True)  # read fails with EISDIR (works as root too, unlike a mode-000 file)
    (path / "evidence").write_text("kept")
    store = make_store(tmp_path, boot_id)
    assert node_fault_names(store.load().state) == [UNREADABLE]
    [aside] = set_aside(tmp_path)
    assert (aside / "evidence").read_text() == "kept"
    assert path.is_file()


def test_a_file_that_cannot_be_set_aside_is_never_overwritten(tmp_path, boot_id, monkeypatch, caplog):
    path = write_raw(tmp_path, b"{not json")

    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(store_module.os, "link", refuse)
    monkeypatch.setattr(store_module.os, "rename", refuse)
    store = make_store(tmp_path, boot_id)
    loaded = store.load()
    assert node_fault_names(loaded.state) == [UNREADABLE]
    assert not store.save(lost_gpu_state(), 2)
    assert not store.save(lost_gpu_state(), 2)
    assert path.read_bytes() == b"{not json"
    assert caplog.text.count("will not overwrite") == 1


def test_two_set_asides_in_the_same_second_keep_both_files(tmp_path, boot_id):
    write_raw(tmp_path, b"first")
    make_store(tmp_path, boot_id).load()
    write_raw(tmp_path, b"second")
    make_store(tmp_path, boot_id).load()
    assert sorted(p.read_bytes() for p in set_aside(tmp_path)) == [b"first", b"second"]


@pytest.mark.parametrize("bad", [
    {"state": "on fire"}, {"since": "NaN"}, {"since": "Infinity"}, {"since": 1e300}, {"since": -5},
    {"faults": [{"fault": "x"}]}, {"faults": "none"}, {"fault_time": "NaN"}, {"fault_time": -1.0},
])
def test_a_corrupt_gpu_entry_makes_only_that_gpu_unknown(tmp_path, boot_id, bad):
    doc = saved_doc(tmp_path, boot_id)
    entry = doc["gpus"][0]  # GPU 0, healthy when saved
    if "fault_time" in bad:
        entry["faults"] = [dict(doc["gpus"][1]["faults"][0], first_seen=bad.pop("fault_time"))]
    entry.update(bad)
    text = json.dumps(doc).replace('"NaN"', "NaN").replace('"Infinity"', "Infinity")
    write_raw(tmp_path, text.encode())
    loaded = make_store(tmp_path, boot_id).load()
    gpus = loaded.state.gpus
    assert [f.fault for f in gpus[uuid_for(0)].faults] == [UNREADABLE]
    assert gpus[uuid_for(0)].state == UNHEALTHY and gpus[uuid_for(0)].index == 0
    assert gpus[uuid_for(1)] == lost_gpu_state().gpus[uuid_for(1)]  # the good entry is read as saved
    assert loaded.state.node.faults == () and loaded.expected_gpus == 2
    assert [aside.read_text() for aside in set_aside(tmp_path)] == [text]  # kept before the rewrite
    for fault in gpus[uuid_for(0)].faults:
        assert math.isfinite(fault.first_seen) and math.isfinite(fault.last_seen)


@pytest.mark.parametrize("bad", [{"since": "NaN"}, {"since": 1e300}, {"state": "on fire"}])
def test_a_corrupt_node_entry_makes_the_whole_state_unknown(tmp_path, boot_id, bad):
    doc = saved_doc(tmp_path, boot_id)
    doc["node"].update(bad)
    write_raw(tmp_path, json.dumps(doc).replace('"NaN"', "NaN").encode())
    assert node_fault_names(make_store(tmp_path, boot_id).load().state) == [UNREADABLE]


def test_numbers_too_large_for_an_integer_field_are_unreadable_not_fatal(tmp_path, boot_id):
    """JSON's Infinity or 1e400 where an integer belongs (a GPU's index, a fault's clean-sample
    count) makes int() raise OverflowError: still an unreadable file, set aside, never a crash."""
    doc = saved_doc(tmp_path, boot_id)
    doc["gpus"][1]["faults"][0]["clean_samples"] = "Infinity"
    doc["gpus"][0]["index"] = "Infinity"
    text = json.dumps(doc).replace('"Infinity"', "1e400")
    write_raw(tmp_path, text.encode())
    loaded = make_store(tmp_path, boot_id).load()
    assert node_fault_names(loaded.state) == [UNREADABLE]
    assert [aside.read_text() for aside in set_aside(tmp_path)] == [text]


# ---- checker level ------------------------------------------------------------------------------

STATS = SamplerStats(cycles_total=1)


def fake_detectors(states, data):
    """XID 79 → gpu_lost (sticky until a reboot), nothing else: a lost GPU looks fine to the next
    agent unless it remembers."""
    findings = [Finding(e.gpu_index, e.uuid, "gpu_lost", CRITICAL, REBOOT_NODE, "XID 79", CLEARS_ON_REBOOT,
                        fault_class="bus", schedulable=False) for e in data.xids if e.xid == 79]
    return states, findings


async def one_agent_run(tmp_path: Path, boot_id: Path, at: float, xids=()) -> NodeHealth:
    """Start a checker on the state directory, evaluate one sample (and ``xids``), stop it."""
    state = NodeState()
    for event in xids:
        state.record_xid(event)
    checker = HealthChecker(state, fake_detectors, store=HealthStore(tmp_path / "state", boot_id_path=str(boot_id)),
                            clock=lambda: at)
    try:
        await checker.load()
        await asyncio.to_thread(state.publish_snapshot, make_snapshot((make_gpu(0), make_gpu(1)), sampled_at=at), STATS)
        assert await checker.evaluate()
    finally:
        checker.close()
    assert state.health is not None
    return state.health


def schedulable(health: NodeHealth) -> list[bool]:
    return [gpu.schedulable for gpu in health.gpus]


async def test_a_gpu_persisted_as_lost_never_comes_back_schedulable_from_an_unreadable_file(tmp_path, boot_id):
    health = await one_agent_run(tmp_path, boot_id, NOW, xids=(XidEvent(1, uuid_for(1), 79, NOW),))
    assert schedulable(health) == [True, False]
    path = health_file(tmp_path)
    path.write_bytes(path.read_bytes()[:40])  # torn by a disk fault

    health = await one_agent_run(tmp_path, boot_id, NOW + 10)  # the XID is not delivered again
    assert schedulable(health) == [False, False]
    assert all(UNREADABLE in [f.fault for f in gpu.faults] for gpu in health.gpus)
    assert [f.fault for f in health.faults] == [UNREADABLE] and health.state == UNHEALTHY

    health = await one_agent_run(tmp_path, boot_id, NOW + 20)  # a restart alone changes nothing
    assert schedulable(health) == [False, False]

    boot_id.write_text("boot-2\n")  # the node rebooted: whatever the lost file held is cleared now
    health = await one_agent_run(tmp_path, boot_id, NOW + 30)
    assert schedulable(health) == [True, True] and health.state == HEALTHY and health.faults == ()


async def test_a_corrupt_gpu_entry_holds_only_that_gpu(tmp_path, boot_id):
    await one_agent_run(tmp_path, boot_id, NOW, xids=(XidEvent(1, uuid_for(1), 79, NOW),))
    doc = json.loads(health_file(tmp_path).read_text())
    doc["gpus"][1]["state"] = "on fire"
    health_file(tmp_path).write_text(json.dumps(doc))
    health = await one_agent_run(tmp_path, boot_id, NOW + 10)
    assert schedulable(health) == [True, False]
    assert [f.fault for f in health.gpus[1].faults] == [UNREADABLE] and health.faults == ()


async def test_a_state_dir_that_turns_unwritable_while_running_is_a_node_fault_until_writes_resume(
        tmp_path, boot_id, monkeypatch):
    state = NodeState()
    checker = HealthChecker(state, fake_detectors, store=HealthStore(tmp_path / "state", boot_id_path=str(boot_id)),
                            clean_samples=2)

    async def sample(at: float) -> list[str]:
        await asyncio.to_thread(state.publish_snapshot, make_snapshot((make_gpu(0), make_gpu(1)), sampled_at=at), STATS)
        assert await checker.evaluate()
        assert state.health is not None
        return [f.fault for f in state.health.faults]

    def read_only(path, data):
        raise OSError(errno.EROFS, "Read-only file system")

    try:
        await checker.load()
        assert await sample(1.0) == []
        monkeypatch.setattr(store_module, "write_atomically", read_only)
        state.record_xid(XidEvent(1, uuid_for(1), 79, 1.5))  # something to write
        await sample(2.0)
        assert await sample(3.0) == ["health_state_unwritable"]
        fault = state.health.faults[0]
        assert fault.keeps_schedulable and "Read-only file system" in fault.evidence
        assert [gpu.schedulable for gpu in state.health.gpus] == [True, False]  # GPUs judged as before
        assert state.view().ready == (False, "the health state cannot be written (see runtimekit_node_fault_active)")
        monkeypatch.undo()
        await sample(4.0)  # written again
        await sample(5.0)
        assert await sample(6.0) == []  # cleared after clean samples, as any clean-sample fault
        assert state.view().ready == (True, "")
    finally:
        checker.close()


# ---- the API ------------------------------------------------------------------------------------

@pytest.mark.parametrize("when", [math.nan, math.inf, -math.inf, 1e300, -1e300, -5.0])
async def test_the_health_api_answers_whatever_times_a_verdict_holds(when):
    fault = ActiveFault("gpu_lost", CRITICAL, REBOOT_NODE, "XID 79", CLEARS_ON_REBOOT, first_seen=when, last_seen=when)
    verdict = NodeHealth(evaluated_at=when, state=UNHEALTHY, action=REBOOT_NODE,
                         gpus=(GpuHealth(0, uuid_for(0), UNHEALTHY, (fault,), since=when),), faults=(fault,))
    state = NodeState()
    state.publish_health(verdict)
    app = web.Application()
    add_health_routes(app, state)
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/api/v1/health")
        assert response.status == 200
        body = json.loads(await response.text(), parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    gpu = body["gpus"][0]
    assert (gpu["since"], gpu["since_unix"]) == (None, None)
    assert body["gpus"][0]["faults"][0]["first_seen"] is None


def test_a_verdict_from_a_loaded_state_renders(tmp_path, boot_id):
    write_raw(tmp_path, b'{"version": 2, "gpus": NaN}')
    verdict = node_health(make_store(tmp_path, boot_id).load().state, NOW)
    assert verdict.faults[0].fault == UNREADABLE


# ---- the state directory ------------------------------------------------------------------------

def test_a_state_dir_that_is_a_file_is_refused_naming_the_directory_and_the_rule(tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("")
    with pytest.raises(StateDirError) as caught:
        check_state_dir(blocker)
    assert str(caught.value) == f"state_dir {blocker}: must be a directory the agent can write (it is a file)"


def test_a_state_dir_that_cannot_be_written_is_refused(tmp_path, monkeypatch):
    real_open = os.open

    def read_only(path, flags, *args):
        if flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(state_dir.os, "open", read_only)
    with pytest.raises(StateDirError, match=r"^state_dir .*: must be a directory the agent can write "
                                            r"\(cannot create a file in it: Permission denied\)$"):
        check_state_dir(tmp_path)


def test_a_missing_state_dir_is_created_and_a_writable_one_is_left_clean(tmp_path):
    check_state_dir(tmp_path / "a" / "state")
    assert (tmp_path / "a" / "state").is_dir() and list((tmp_path / "a" / "state").iterdir()) == []


def test_one_state_dir_serves_one_agent_and_a_dead_agents_hold_is_gone(tmp_path):
    held = lock_state_dir(tmp_path)
    with pytest.raises(StateDirError, match=rf"^state_dir {tmp_path}: another agent \(pid {os.getpid()} on {re.escape(socket.gethostname())}\) is using it"):
        lock_state_dir(tmp_path)
    os.close(held)  # what the kernel does when the holder dies, SIGKILL included
    os.close(lock_state_dir(tmp_path))
