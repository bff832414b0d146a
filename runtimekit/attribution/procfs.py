"""Process facts from a /proc tree: name, command line, CPU seconds, RSS and cgroup.

The /proc root is configuration (a real node's ``/proc``, a container's ``/host/proc``, or a
fixture tree). psutil reads it from the module-level ``psutil.PROCFS_PATH`` -- its documented way
to read another /proc -- which is **process-global**: the agent decides the root once, at
start-up, by making its one ``ProcessReader``. A reader notices if something else changed it
later and raises instead of quietly reading another tree.

What is read how, and why (measured on a 512-process tree on tmpfs, best of 7 rounds, one core of
a small cloud VM; ``tests/attribution/test_attribution_procfs.py`` keeps a rough guard):

- psutil, full (``Process()`` + ``oneshot`` name, cmdline, cpu_times, memory_info) plus the
  cgroup file: ~55-70 µs per process. At 512 processes a second that is 3-4 % of a core: the
  whole agent's budget.
- psutil for CPU time and RSS alone (``Process()`` + ``oneshot`` cpu_times + memory_info): ~30 µs,
  still ~1.5 % of a core; psutil's object set-up and oneshot bookkeeping cost more than the I/O.
- ``/proc/PID/stat`` + ``/proc/PID/statm`` read and parsed here: ~8-10 µs (~0.5 % of a core);
  the two reads alone, with ``open()``'s buffered file objects, 17-23 µs per process on the
  simulated node's tree (``/dev/shm``), with bare ``os.open``/``os.read``: ~9 µs (2026-12-02).

So the static facts -- name, command line, cgroup -- are read once per process through psutil
(``oneshot``; its name and cmdline carry the hard cases: comm truncated at 15 characters and
extended from argv[0], setproctitle-style command lines, zombies, ESRCH/ENOENT/EACCES mapped to
NoSuchProcess/AccessDenied) and kept per (pid, start time); every cycle reads only ``stat``
(utime, stime, start time, state) and ``statm`` (resident pages), the same fields psutil's
``cpu_times()`` and ``memory_info()`` read. A recycled PID has a new start time, so its facts are
read afresh. RSS comes from ``statm`` rather than ``stat``'s rss field: since Linux 6.2 the
latter is an approximate per-CPU counter read, while ``statm`` sums it exactly.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from runtimekit.attribution.cgroup import CgroupIdentity, parse_cgroup

__all__ = ["ProcessInfo", "ProcessReader", "DEFAULT_PROC_ROOT"]

log = logging.getLogger(__name__)

DEFAULT_PROC_ROOT = "/proc"
CLOCK_TICKS: int = os.sysconf("SC_CLK_TCK")  # the kernel's USER_HZ, as psutil converts
PAGE_SIZE: int = os.sysconf("SC_PAGE_SIZE")

_GONE = (psutil.NoSuchProcess, psutil.AccessDenied)  # ZombieProcess is a NoSuchProcess
_MISSING = (FileNotFoundError, ProcessLookupError, PermissionError)


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """One process as /proc shows it.

    ``cpu_seconds``: user + system CPU time in seconds (``/proc/PID/stat`` utime + stime, clock
    ticks → s; children not included), as psutil's ``cpu_times().user + .system``.
    ``rss_bytes``: resident set size in bytes (``/proc/PID/statm`` resident pages × page size),
    as psutil's ``memory_info().rss``. ``name``: psutil's ``name()`` (``comm``, extended from the
    command line when truncated at 15 characters). ``cmdline``: psutil's ``cmdline()``.
    """

    pid: int
    name: str
    cmdline: tuple[str, ...]
    cpu_seconds: float
    rss_bytes: int
    cgroup: CgroupIdentity


@dataclass(frozen=True, slots=True)
class _Static:
    start_ticks: int  # /proc/PID/stat starttime: with the pid, who this process is
    name: str
    cmdline: tuple[str, ...]
    cgroup: CgroupIdentity


class ProcessReader:
    """Reads processes from ``proc_root``; blocking file I/O, so call it from an executor.

    ``cache_static`` (default on): keep name, cmdline and cgroup per (pid, start time) and
    re-read only CPU seconds and RSS; off, every read reads everything. At most ``max_cached``
    processes are remembered (oldest dropped first); a process found gone is forgotten at once.
    Not thread-safe: one reader, one thread (the sampler's).
    """

    def __init__(
        self,
        proc_root: str = DEFAULT_PROC_ROOT,
        *,
        cache_static: bool = True,
        max_cached: int = 4096,
    ) -> None:
        self.proc_root = str(proc_root).rstrip("/") or "/"
        psutil.PROCFS_PATH = self.proc_root
        self._cache_static = cache_static
        self._max_cached = max(1, max_cached)
        self._static: dict[int, _Static] = {}

    @property
    def cached(self) -> int:
        """How many processes' static facts are held."""
        return len(self._static)

    def forget(self, pid: int) -> None:
        """Drop what is cached for ``pid`` (e.g. when it leaves the GPU process list)."""
        self._static.pop(pid, None)

    def read(self, pid: int) -> ProcessInfo | None:
        """The process ``pid``, or None when it is gone, a zombie, or not ours to read."""
        self._check_root()
        return self._read(pid)

    def read_many(self, pids: Iterable[int]) -> dict[int, ProcessInfo]:
        """``read`` for each pid; processes that are gone are left out."""
        self._check_root()
        out: dict[int, ProcessInfo] = {}
        for pid in pids:
            info = self._read(pid)
            if info is not None:
                out[pid] = info
        return out

    # -- internals -----------------------------------------------------------------------------

    def _read(self, pid: int) -> ProcessInfo | None:
        dyn = self._read_dynamic(pid)
        if dyn is None:
            self._static.pop(pid, None)
            return None
        start, cpu_ticks, rss_pages = dyn
        static = self._static.get(pid)
        if static is None or static.start_ticks != start:
            static = None
            # Read the static facts between two reads of stat, so that a PID recycled meanwhile
            # is not cached with another process's name and cgroup. Two tries, then give up for
            # this cycle.
            for _ in range(2):
                candidate = self._read_static(pid, start)
                after = self._read_dynamic(pid) if candidate is not None else None
                if after is None:
                    self._static.pop(pid, None)
                    return None
                if after[0] == start:
                    static, (start, cpu_ticks, rss_pages) = candidate, after
                    break
                start, cpu_ticks, rss_pages = after
            if static is None:
                return None
            if self._cache_static:
                self._remember(pid, static)
        return ProcessInfo(
            pid=pid,
            name=static.name,
            cmdline=static.cmdline,
            cpu_seconds=cpu_ticks / CLOCK_TICKS,
            rss_bytes=rss_pages * PAGE_SIZE,
            cgroup=static.cgroup,
        )

    def _read_dynamic(self, pid: int) -> tuple[int, int, int] | None:
        """(start ticks, utime + stime ticks, resident pages), or None if gone or a zombie."""
        base = f"{self.proc_root}/{pid}"
        try:
            stat = _read_small(f"{base}/stat")
            statm = _read_small(f"{base}/statm")
        except _MISSING:
            return None
        try:
            # "pid (comm) state ppid …": comm may hold spaces and ")", so split after the last ")".
            fields = stat[stat.rfind(b")") + 2 :].split()
            if fields[0] == b"Z":
                return None
            return int(fields[19]), int(fields[11]) + int(fields[12]), int(statm.split()[1])
        except (IndexError, ValueError):
            log.warning("unparseable %s/stat or statm: %r / %r", base, stat[:200], statm[:100])
            return None

    def _read_static(self, pid: int, start_ticks: int) -> _Static | None:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                name = proc.name()
                cmdline = tuple(proc.cmdline())
            with open(f"{self.proc_root}/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
                text = f.read()
        except _GONE:
            return None
        except _MISSING:
            return None
        return _Static(start_ticks=start_ticks, name=name, cmdline=cmdline, cgroup=parse_cgroup(text))

    def _remember(self, pid: int, static: _Static) -> None:
        self._static.pop(pid, None)
        if len(self._static) >= self._max_cached:
            del self._static[next(iter(self._static))]
        self._static[pid] = static

    def _check_root(self) -> None:
        if psutil.PROCFS_PATH != self.proc_root:
            raise RuntimeError(
                f"psutil.PROCFS_PATH is {psutil.PROCFS_PATH!r} but this reader was made for "
                f"{self.proc_root!r}; it is process-global, so decide the /proc root once at "
                "start-up and make one ProcessReader"
            )


def _read_small(path: str) -> bytes:
    """A small file's bytes with bare system calls: ``open()``'s buffered file object costs more
    than reading a /proc ``stat`` (one ``read`` of a page is the whole file; read on until EOF
    should it ever be longer)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunk = os.read(fd, 4096)
        if len(chunk) < 4096:
            return chunk
        chunks = [chunk]
        while chunk:
            chunk = os.read(fd, 65536)
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
