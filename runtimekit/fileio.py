"""Files that must survive a crash whole: written to a temporary file beside them, fsynced, renamed
over the old one, and the folder fsynced (rename(2) is atomic; the folder's fsync makes the rename
itself durable). A crash leaves the old file or the new one, never a mix — and at most a hidden
``.NAME.tmp-PID-TID`` file beside it, which no reader takes for the file and which the file's owner
removes when it takes the file over (``remove_leftovers``)."""

from __future__ import annotations

import os
import threading
from contextlib import suppress
from pathlib import Path

__all__ = ["remove_leftovers", "sync_dir", "tmp_path", "write_atomically"]


def _tmp_prefix(path: Path) -> str:
    """How every temporary file of ``path`` is named, by this version or an older one (``-PID``)."""
    return f".{path.name}.tmp-"


def tmp_path(path: Path) -> Path:
    """The temporary file the calling thread writes ``path`` through: one per process and thread.
    Two writes of one file at once (a thread writing for a call that was cancelled, and the next
    call's thread) thus never share one — a shared one was truncated under its first writer, and
    its second rename failed — while a thread's next write reuses its name: no write of a live
    process can be in it then, and nothing piles up."""
    return path.with_name(f"{_tmp_prefix(path)}{os.getpid()}-{threading.get_native_id()}")


def write_atomically(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` as above, with permission bits ``mode`` whatever the umask; the
    folder is created (0755 and the umask) when missing. OSError when it cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(path)
    try:
        # O_NOFOLLOW: a link planted at the temporary name must not redirect the write elsewhere
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
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


def remove_leftovers(path: Path) -> list[str]:
    """Remove the temporary files of ``path`` that writers killed before their rename left (regular
    files named ``.NAME.tmp-*``: never ``path`` itself, another file's, a folder nor a link); the
    names removed. Only the file's owner may call it, holding the lock that makes it the only
    writer: a live writer's temporary file would be taken from under it. One that cannot be removed
    stays (it only takes space), as does everything when the folder cannot be read."""
    prefix = _tmp_prefix(path)
    try:
        with os.scandir(path.parent) as entries:
            names = [entry.name for entry in entries if entry.name.startswith(prefix) and entry.is_file(follow_symlinks=False)]
    except OSError:  # no folder yet, or one that cannot be read
        return []
    removed = []
    for name in names:
        with suppress(OSError):
            os.unlink(path.parent / name)
            removed.append(name)
    return removed


def sync_dir(folder: Path) -> None:
    """fsync a folder, so that the renames and unlinks in it are on disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
