"""``runtimekit.fileio.write_atomically`` from two threads of one process at once (the DRA driver's
checkpoint written by a call the kubelet gave up on and by its next call): each write goes through
its own temporary file, so both renames succeed and the file is always one whole document.

The disk is made slow where it matters: each thread's fsync of its temporary file waits (up to
0.5 s) for the other's, so both are between their write and their rename at the same time."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import pytest

from runtimekit.fileio import write_atomically


def _fsync_meeting_the_other_writer(real: Callable[[int], None]) -> Callable[[int], None]:
    meeting = threading.Barrier(2)

    def fsync(fd: int) -> None:
        real(fd)
        if stat.S_ISREG(os.fstat(fd).st_mode):  # a temporary file, not the folder
            with suppress(threading.BrokenBarrierError):
                meeting.wait(timeout=0.5)
    return fsync


def test_two_threads_writing_one_file_at_once_both_succeed_and_leave_a_whole_file(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "checkpoint.json"
    documents = {name: (json.dumps({"writer": name, "pad": name * (50_000 + 7 * index)}) + "\n").encode()
                 for index, name in enumerate("AB")}
    monkeypatch.setattr(os, "fsync", _fsync_meeting_the_other_writer(os.fsync))
    errors: list[Exception] = []

    def write(name: str) -> None:
        try:
            write_atomically(path, documents[name], mode=0o600)
        except Exception as error:  # a failed rename (ENOENT), a torn file's neighbour: what this test looks for
            errors.append(error)

    threads = [threading.Thread(target=write, args=(name,)) for name in documents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    monkeypatch.undo()
    assert errors == []
    assert path.read_bytes() in documents.values()  # one writer's document, whole
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == [path.name]  # no temporary file left
