"""The agent's state directory: the agent's own, writable, and held by one agent at a time.

It holds the gRPC API socket, ``health.json`` and the slicer's journal. Another user who can write
in it could rename the socket away and bind their own in its place (the CLI, the device plugin
and the DRA driver would then talk to it), or replace the health state the agent trusts at its
next start (a sticky XID 79 cleared). So ``check_state_dir`` creates a missing directory mode 0700
whatever the umask, and refuses an existing one that is writable by group or others or that
another user owns: an existing directory's mode is the operator's to fix, never changed here.

Two agents on one state directory (a DaemonSet rolling update with ``maxSurge``, a second
``runtimekit serve`` by hand) would share the health state file, the slicer's journal and the gRPC
socket, and both would change the GPUs from their own books. ``lock_state_dir`` takes an exclusive
``flock`` on ``STATE_DIR/agent.lock`` for the life of the process (the kernel drops it when the
process dies, SIGKILL included, so a crashed agent never leaves it held) and writes its pid there
for the message the next one prints. Source: flock(2).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from runtimekit.process_lock import LockHeld, hold_lock

__all__ = ["LOCK_FILE", "StateDirError", "check_state_dir", "lock_state_dir"]

LOCK_FILE = "agent.lock"


class StateDirError(ValueError):
    """The state directory cannot hold the agent's state; the message names it and the rule."""


def check_state_dir(path: str | Path) -> None:
    """Make sure ``path`` is the agent's private directory (created mode 0700, with its parents, if
    missing; module docstring) and that the agent can write it, by creating and removing a file in
    it — ``os.access`` is not the answer for root, read-only mounts or ACLs. StateDirError
    otherwise: the agent refuses to start rather than run with state others can swap, or with
    health that is never persisted."""
    path = Path(path)
    rule = f"state_dir {path}: must be a directory the agent can write"
    if os.path.lexists(path) and not path.is_dir():
        raise StateDirError(f"{rule} ({'it is a file' if path.is_file() else 'it is not a directory'})")
    try:
        _create_private(path)
    except OSError as error:
        raise StateDirError(f"{rule} (cannot create it: {error.strerror or error})") from None
    _check_private(path)
    probe = path / f".write-test-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
    except OSError as error:
        raise StateDirError(f"{rule} (cannot create a file in it: {error.strerror or error})") from None


def _create_private(path: Path) -> None:
    """Create ``path`` (its parents as ``mkdir -p`` does) mode 0700, unless it exists: an existing
    one, or one made meanwhile, is checked by ``_check_private`` and never chmod-ed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return
    os.chmod(path, 0o700)  # mkdir's mode is masked by the umask (0o277 would leave it unwritable)


def _check_private(path: Path) -> None:
    """StateDirError unless the directory at ``path`` is owned by the agent's user (root when it
    runs as root) and writable by nobody else."""
    try:
        info = os.stat(path)
    except OSError as error:  # removed meanwhile, or a parent the agent cannot search
        raise StateDirError(f"state_dir {path}: cannot read its owner and mode ({error.strerror or error})") from None
    uid = os.geteuid()
    harm = "could replace the agent's socket or health state"
    if info.st_uid != uid:
        raise StateDirError(f"state_dir {path}: must be owned by the agent's user (uid {uid}), not uid {info.st_uid}: "
                            f"that user {harm}; chown {uid} {path}")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StateDirError(f"state_dir {path}: must not be writable by group or others "
                            f"(mode {stat.S_IMODE(info.st_mode):04o}): another user {harm}; chmod go-w {path}")


def lock_state_dir(path: str | Path) -> int:
    """Hold ``path`` for this process: the open descriptor of its lock file, to keep open until the
    process ends (``runtimekit.process_lock``). StateDirError naming the other agent's pid when one holds it."""
    lock = Path(path) / LOCK_FILE
    try:
        return hold_lock(lock)
    except OSError as error:
        raise StateDirError(f"state_dir {path}: cannot open {lock} ({error.strerror or error})") from None
    except LockHeld as held:
        raise StateDirError(f"state_dir {path}: another agent (pid {held.holder}) is using it; "
                            "one state directory serves one agent at a time") from None
