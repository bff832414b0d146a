"""The DRA checkpoint written by two threads at once, as after a kubelet deadline: grpc.aio cancels
the handler while its checkpoint write still runs in a thread (a thread cannot be stopped), and
the kubelet's next call comes in at once.

- Through ``Checkpoint`` alone, two threads' changes both succeed and the file ends equal to the
  claims in memory.
- Through ``ClaimPreparer``, a cancelled unprepare still holds the driver to one call at a time:
  the next call, for the same claim or another, succeeds, and when it answers the file on disk is
  what the driver has in memory (a claim it reports unprepared is gone from the file).

The disk is slow where it matters (the fsync of the checkpoint's temporary file), with real
threads and real files; no agent runs (claims of NICs only need none).
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import pytest

from runtimekit.kube.agentclient import AgentClient
from runtimekit.kube.dra.checkpoint import COMPLETED, Checkpoint, ClaimEntry, DeviceEntry
from runtimekit.kube.dra.claims import ClaimRef
from runtimekit.kube.dra.prepare import ClaimPreparer
from tests.dra.dra_claims import NODE, ClaimStore
from tests.dra.dra_rig import NodeAgent, driver_config, short_directory

NIC = DeviceEntry(request="nic", pool=NODE, device="nic-mlx5-0", position=0, kind="nic")
UIDS = ("uid-1", "uid-2", "uid-3")


def _is_file(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)  # a temporary file, not the folder


def _disk_where_the_first_writer_ends_last(real: Callable[[int], None], syncing: threading.Event) -> Callable[[int], None]:
    """An fsync that sets ``syncing``, waits (up to 0.5 s) for a second writer to reach its own,
    then lets the first one finish last: the rename order that loses a change when writes overlap."""
    meeting, arrived = threading.Barrier(2), []

    def fsync(fd: int) -> None:
        real(fd)
        if _is_file(fd):
            arrived.append(threading.get_ident())
            syncing.set()
            with suppress(threading.BrokenBarrierError):
                meeting.wait(timeout=0.5)
            if arrived[0] == threading.get_ident():
                time.sleep(0.2)
    return fsync


def _on_disk(path: str | Path) -> list[str]:
    return sorted(json.loads(Path(path).read_text())["claims"])


def test_two_threads_changing_the_checkpoint_at_once_leave_the_file_equal_to_memory(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoint = Checkpoint.load(tmp_path / "checkpoint.json")
    checkpoint.put("uid-0", ClaimEntry("default", "zero", COMPLETED, (NIC,)))
    syncing = threading.Event()
    monkeypatch.setattr(os, "fsync", _disk_where_the_first_writer_ends_last(os.fsync, syncing))
    errors: list[Exception] = []

    def put(uid: str) -> None:
        try:
            checkpoint.put(uid, ClaimEntry("default", uid, COMPLETED, (NIC,)))
        except Exception as error:  # a failed rename (ENOENT): what this test looks for
            errors.append(error)

    threads = [threading.Thread(target=put, args=(uid,)) for uid in ("uid-1", "uid-2")]
    threads[0].start()
    assert syncing.wait(timeout=5)  # the first change is being written
    threads[1].start()
    for thread in threads:
        thread.join(timeout=5)
    monkeypatch.undo()
    assert errors == []
    assert sorted(checkpoint.claims) == ["uid-0", "uid-1", "uid-2"]
    assert _on_disk(checkpoint.path) == sorted(checkpoint.claims)
    assert Checkpoint.load(checkpoint.path).claims == checkpoint.claims


@pytest.mark.parametrize("next_uid", ["uid-1", "uid-2"], ids=["the same claim again", "another claim"])
async def test_an_unprepare_cancelled_mid_write_keeps_the_next_call_waiting_until_it_is_on_disk(
        monkeypatch: pytest.MonkeyPatch, next_uid: str) -> None:
    writing = threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:  # a slow disk: the checkpoint's fsync takes 0.3 s
        real_fsync(fd)
        if _is_file(fd):
            writing.set()
            time.sleep(0.3)

    with short_directory() as directory:
        config = driver_config(directory, NodeAgent(directory, "dgx-h100"))
        checkpoint = Checkpoint.load(config.checkpoint_path)
        for uid in UIDS:
            checkpoint.put(uid, ClaimEntry("default", uid, COMPLETED, (NIC,)))
        agent = AgentClient(config.agent_socket, 1.0)
        preparer = ClaimPreparer(config, agent, ClaimStore(), checkpoint)
        monkeypatch.setattr(os, "fsync", slow_fsync)
        try:
            first = asyncio.create_task(preparer.unprepare([ClaimRef("default", "uid-1", "uid-1")]))
            while not writing.is_set():  # its checkpoint write is under way in a thread
                await asyncio.sleep(0.01)
            first.cancel()  # the kubelet's deadline passed
            answer = await preparer.unprepare([ClaimRef("default", next_uid, next_uid)])  # its next call
            on_disk = _on_disk(config.checkpoint_path)
            with pytest.raises(asyncio.CancelledError):
                await first
        finally:
            monkeypatch.undo()
            await agent.close()
    assert answer == {next_uid: ""}
    assert on_disk == sorted(preparer.checkpoint.claims) == sorted(set(UIDS) - {"uid-1", next_uid})
