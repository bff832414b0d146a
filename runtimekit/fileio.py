"""Files that must survive a crash whole: written to a temporary file beside them, fsynced, renamed
over the old one, and the folder fsynced (rename(2) is atomic; the folder's fsync makes the rename
itself durable). A crash leaves the old file or the new one, never a mix — and at most a hidden
``.NAME.tmp-PID`` file beside it, which no reader takes for the file."""

from __future__ import annotations

import os
from contextlib import suppress
from pathlib import Path

__all__ = ["sync_dir", "tmp_path", "write_atomically"]


def tmp_path(path: Path) -> Path:
    """The temporary file this process writes ``path`` through."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def write_atomically(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` as above, with permission bits ``mode`` whatever the umask; the
    folder is created (0755 and the umask) when missing. OSError when it cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.fchmod(fd, mode)  # the umask may have narrowed it
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    sync_dir(path.parent)


def sync_dir(folder: Path) -> None:
    """fsync a folder, so that the renames and unlinks in it are on disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
