"""The agent's state directory: writable, and held by one agent at a time.

Two agents on one state directory (a DaemonSet rolling update with ``maxSurge``, a second
``runtimekit serve`` by hand) would share the health state file, the slicer's journal and the gRPC
socket, and both would change the GPUs from their own books. ``lock_state_dir`` takes an exclusive
``flock`` on ``STATE_DIR/agent.lock`` for the life of the process (the kernel drops it when the
process dies, SIGKILL included, so a crashed agent never leaves it held) and writes its pid there
for the message the next one prints. Source: flock(2).
"""

from __future__ import annotations

import os
from pathlib import Path

from runtimekit.process_lock import LockHeld, hold_lock

__all__ = ["LOCK_FILE", "StateDirError", "check_state_dir", "lock_state_dir"]

LOCK_FILE = "agent.lock"


class StateDirError(ValueError):
    """The state directory cannot hold the agent's state; the message names it and the rule."""


def check_state_dir(path: str | Path) -> None:
    """Make sure ``path`` is a directory the agent can write (created with its parents if missing),
    by creating and removing a file in it — ``os.access`` is not the answer for root, read-only
    mounts or ACLs. StateDirError otherwise: the agent refuses to start rather than run with health
    that is never persisted."""
    path = Path(path)
    rule = f"state_dir {path}: must be a directory the agent can write"
    if os.path.lexists(path) and not path.is_dir():
        raise StateDirError(f"{rule} ({'it is a file' if path.is_file() else 'it is not a directory'})")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StateDirError(f"{rule} (cannot create it: {error.strerror or error})") from None
    probe = path / f".write-test-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
    except OSError as error:
        raise StateDirError(f"{rule} (cannot create a file in it: {error.strerror or error})") from None


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
