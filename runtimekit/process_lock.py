"""One process at a time on a resource: an exclusive flock(2) on a lock file, held while its
descriptor is open (the kernel releases it when the process ends, however it ends: no stale lock
after a crash). The holder writes "PID on HOST" into the file, so a refused second process can say
who holds it. Used by the agent's state directory, the remediation service's journal and the DRA
driver's plugin directory.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

__all__ = ["LockHeld", "hold_lock"]


class LockHeld(Exception):
    """Another process holds the lock; ``holder`` is what it wrote ("PID on HOST"), or "unknown"."""

    def __init__(self, path: str | Path, holder: str) -> None:
        super().__init__(f"{path} is held by pid {holder}")
        self.holder = holder


def hold_lock(path: str | Path) -> int:
    """Open ``path`` (created with mode 0600) and lock it exclusively: its descriptor, to keep open
    while the lock is needed (closing it releases the lock). OSError when the file cannot be opened;
    LockHeld when another process holds the lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise LockHeld(path, holder) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    return fd
