"""The state directory holds the API socket, ``health.json`` and the slicer's journal: another
user who can write in it could put their own socket in the agent's place or replace the health
state the agent trusts at its next start (clearing a sticky XID 79). So the agent creates it
mode 0700 whatever the umask, and refuses an existing one that is writable by group or others or
owned by another user."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtimekit import state_dir
from runtimekit.state_dir import StateDirError, check_state_dir
from tests.agent_process import ROOT


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def octal(value: int) -> str:
    return f"{value:04o}"


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277], ids=octal)
def test_a_new_state_dir_is_0700_whatever_the_umask(tmp_path, umask):
    """0o000: drwxrwxrwx before; 0o277 would leave it unwritable."""
    previous = os.umask(umask)
    try:
        check_state_dir(tmp_path / "state")
    finally:
        os.umask(previous)
    assert mode(tmp_path / "state") == 0o700


@pytest.mark.parametrize("loose", [0o770, 0o707, 0o777, 0o1777, 0o720], ids=octal)
def test_a_state_dir_writable_by_group_or_others_is_refused(tmp_path, loose):
    path = tmp_path / "state"
    path.mkdir()
    path.chmod(loose)
    with pytest.raises(StateDirError) as caught:
        check_state_dir(path)
    assert str(caught.value) == (
        f"state_dir {path}: must not be writable by group or others (mode {loose & 0o7777:04o}): another user "
        f"could replace the agent's socket or health state; chmod go-w {path}")
    assert mode(path) == loose  # an existing directory is never chmod-ed behind the operator's back


def test_a_state_dir_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    owner = os.stat(path).st_uid
    monkeypatch.setattr(state_dir.os, "geteuid", lambda: owner + 1)  # the agent runs as another user
    with pytest.raises(StateDirError) as caught:
        check_state_dir(path)
    assert str(caught.value) == (
        f"state_dir {path}: must be owned by the agent's user (uid {owner + 1}), not uid {owner}: that user "
        f"could replace the agent's socket or health state; chown {owner + 1} {path}")


@pytest.mark.parametrize("kept", [0o700, 0o750, 0o755, 0o2750], ids=octal)
def test_an_existing_state_dir_of_the_agents_user_not_writable_by_others_is_used_as_it_is(tmp_path, kept):
    path = tmp_path / "state"
    path.mkdir()
    path.chmod(kept)
    check_state_dir(path)
    assert mode(path) == kept


def run_serve(state: Path, umask: int = 0o022) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "runtimekit.cli", "serve", "--sim", "dgx-h100", "--listen",
                             "127.0.0.1:0", "--state-dir", str(state)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, umask=umask)


def test_the_agent_refuses_a_world_writable_state_dir_with_one_line_and_exit_2(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    process = run_serve(state)
    try:
        _, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        pytest.fail(f"the agent served from a world-writable state directory:\n{stderr[-2000:]}")
    assert process.returncode == 2, stderr
    assert stderr.splitlines() == [
        f"runtimekit: error: state_dir {state}: must not be writable by group or others (mode 0777): another user "
        f"could replace the agent's socket or health state; chmod go-w {state}"]


def test_the_agent_under_umask_000_makes_its_state_dir_0700(tmp_path):
    """Before, ``runtimekit serve`` under umask 000 made ``drwxrwxrwx state``."""
    state = tmp_path / "state"
    process = run_serve(state, umask=0o000)
    try:
        deadline = time.monotonic() + 60
        while not (state / "agent.lock").exists():
            assert process.poll() is None, process.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the agent never took its state directory"
            time.sleep(0.05)
        assert mode(state) == 0o700
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
