"""The simulated node's /proc: a fixture tree psutil and our cgroup parser read unchanged.

``ProcTreeWriter`` lays out, under ``root``, what ``runtimekit.attribution.procfs.ProcessReader``
(psutil's Linux implementation) reads for name, cmdline, cpu_times, memory_info and create_time:

- ``stat``: the ``btime`` line (boot time, whole seconds, as the kernel writes it);
- ``PID/stat``: all 52 fields of proc(5); psutil takes comm, state, ppid, utime, stime,
  starttime (clock ticks since boot) and processor from it;
- ``PID/statm``: sizes in pages (psutil: ``rss = resident × page size``);
- ``PID/status``: Name, State, Tgid, Pid, PPid, Uid/Gid, Vm*, Threads (``psutil.pid_exists``,
  ``num_threads``, ``uids`` read it);
- ``PID/cmdline`` (NUL-separated, NUL-terminated), ``PID/comm`` and ``PID/cgroup`` (its text
  from ``cgroups.cgroup_line``, re-exported here).

Clock ticks and page size are this host's (``SC_CLK_TCK``, ``SC_PAGE_SIZE``), because psutil
converts with the host's values: CPU seconds round-trip to 1/CLK_TCK s, RSS to whole pages.

Every write is atomic for a reader: files are written to a dot-named temporary beside them and
renamed into place, and a new process directory is assembled under a dot name and renamed in
whole, so a reader sees no process or a complete one, never half a file (dot names are not
digits, so ``psutil.pids()`` never lists them). A removed process is renamed away before it is
deleted. Nothing is fsynced: this is a simulation, visibility matters, durability does not.

Cost (tmpfs, a small cloud VM): ``write_process`` ~65 µs; ``update_process`` rewrites only
``stat`` for CPU seconds (~21 µs) and ``statm`` + ``status`` as well when RSS changes (~50 µs), so
refreshing 512 processes costs ~11-25 ms: refresh CPU seconds on a slower cadence than NVML
sampling. Put the tree on tmpfs: on ext4 each rename over an existing file starts writeback
(``auto_da_alloc``) and costs about four times as much.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from .cgroups import DRIVERS, QOS_CLASSES, RUNTIMES, cgroup_line, host_cgroup_line

__all__ = [
    "ProcTreeWriter",
    "cgroup_line",
    "host_cgroup_line",
    "DRIVERS",
    "QOS_CLASSES",
    "RUNTIMES",
    "CLOCK_TICKS",
    "PAGE_SIZE",
]

CLOCK_TICKS: int = os.sysconf("SC_CLK_TCK")
PAGE_SIZE: int = os.sysconf("SC_PAGE_SIZE")
_TASK_COMM_LEN = 15  # the kernel keeps 15 bytes of a process name (TASK_COMM_LEN 16, with NUL)

@dataclass(frozen=True, slots=True)
class _Proc:
    pid: int
    ppid: int
    comm: str
    start_ticks: int
    utime: int
    stime: int
    rss_pages: int
    vms_pages: int
    num_threads: int


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _atomic_write(directory: str, name: str, data: bytes) -> None:
    """Write ``directory/name`` via a dot-named temporary and a rename: all or nothing."""
    tmp = f"{directory}/.{name}.tmp"
    _write(tmp, data)
    os.replace(tmp, f"{directory}/{name}")


class ProcTreeWriter:
    """Writes and maintains a /proc tree under ``root`` for a node booted at ``boot_time``
    (seconds since the epoch). Single writer; any number of readers."""

    def __init__(self, root: Path, boot_time: float) -> None:
        self.root = Path(root)
        self.boot_time = int(boot_time)  # the kernel's btime is whole seconds
        self._procs: dict[int, _Proc] = {}
        self._gone = 0
        self.root.mkdir(parents=True, exist_ok=True)
        self._write_proc_stat()

    # -- public API ----------------------------------------------------------------------------

    def pids(self) -> list[int]:
        return sorted(self._procs)

    def write_process(
        self,
        pid: int,
        name: str,
        cmdline: list[str] | tuple[str, ...],
        cgroup_path_line: str,
        cpu_seconds: float,
        rss_bytes: int,
        start_time: float,
        *,
        ppid: int = 1,
        num_threads: int = 1,
        vms_bytes: int | None = None,
    ) -> None:
        """Create (or replace) process ``pid``.

        ``cgroup_path_line``: the whole cgroup file text (``cgroup_line(...)``).
        ``cpu_seconds``: user + system CPU seconds. ``rss_bytes``: resident bytes (rounded down
        to pages). ``start_time``: when it started, seconds since the epoch (not before boot).
        """
        if pid <= 0:
            raise ValueError(f"pid must be positive, not {pid}")
        if start_time < self.boot_time:
            raise ValueError(f"start_time {start_time} is before boot ({self.boot_time})")
        rss_pages = max(0, int(rss_bytes) // PAGE_SIZE)
        vms_pages = max(rss_pages, int(vms_bytes) // PAGE_SIZE) if vms_bytes else rss_pages * 4
        utime, stime = _split_ticks(cpu_seconds)
        proc = _Proc(
            pid=pid,
            ppid=ppid,
            comm=name.encode()[:_TASK_COMM_LEN].decode(errors="ignore"),
            start_ticks=round((start_time - self.boot_time) * CLOCK_TICKS),
            utime=utime,
            stime=stime,
            rss_pages=rss_pages,
            vms_pages=vms_pages,
            num_threads=num_threads,
        )
        args = "".join(a + "\0" for a in cmdline).encode()
        files = {
            "stat": _stat_bytes(proc),
            "statm": _statm_bytes(proc),
            "status": _status_bytes(proc),
            "cmdline": args,
            "comm": (proc.comm + "\n").encode(),
            "cgroup": cgroup_path_line.encode(),
        }
        # Assemble under a dot name, then appear at once. A pid written again is a new process
        # (PID reuse): the old one goes first, as the kernel's does, so a reader never mixes the
        # two processes' files.
        final = f"{self.root}/{pid}"
        staging = f"{self.root}/.new-{pid}"
        if os.path.lexists(staging):
            shutil.rmtree(staging)
        os.mkdir(staging)
        for fname, data in files.items():
            _write(f"{staging}/{fname}", data)
        self._bury(pid)
        os.rename(staging, final)
        self._procs[pid] = proc

    def update_process(
        self, pid: int, *, cpu_seconds: float | None = None, rss_bytes: int | None = None
    ) -> None:
        """Refresh the changing facts of ``pid``: only the files that changed are rewritten."""
        proc = self._procs[pid]
        new = proc
        if cpu_seconds is not None:
            utime, stime = _split_ticks(cpu_seconds)
            new = replace(new, utime=utime, stime=stime)
        if rss_bytes is not None:
            pages = max(0, int(rss_bytes) // PAGE_SIZE)
            new = replace(new, rss_pages=pages, vms_pages=max(new.vms_pages, pages))
        if new == proc:
            return
        base = f"{self.root}/{pid}"
        _atomic_write(base, "stat", _stat_bytes(new))
        if (new.rss_pages, new.vms_pages) != (proc.rss_pages, proc.vms_pages):
            _atomic_write(base, "statm", _statm_bytes(new))
            _atomic_write(base, "status", _status_bytes(new))
        self._procs[pid] = new

    def remove_process(self, pid: int) -> None:
        """The process exits: its directory disappears at once (renamed away, then deleted)."""
        self._procs.pop(pid, None)
        self._bury(pid)

    def reboot(self, boot_time: float) -> None:
        """The node rebooted at ``boot_time``: every process is gone and ``btime`` moves."""
        for pid in list(self._procs):
            self.remove_process(pid)
        self.boot_time = int(boot_time)
        self._write_proc_stat()

    def _bury(self, pid: int) -> None:
        final = f"{self.root}/{pid}"
        if not os.path.lexists(final):
            return
        self._gone += 1
        grave = f"{self.root}/.gone-{pid}-{self._gone}"
        os.rename(final, grave)
        shutil.rmtree(grave, ignore_errors=True)

    # -- files ---------------------------------------------------------------------------------

    def _write_proc_stat(self) -> None:
        # psutil reads btime here (boot_time, create_time); the cpu lines keep system-wide
        # cpu_times() working. Zero counters: the simulator does not model host CPU time.
        text = (
            "cpu  0 0 0 0 0 0 0 0 0 0\n"
            "cpu0 0 0 0 0 0 0 0 0 0 0\n"
            "intr 0\n"
            "ctxt 0\n"
            f"btime {self.boot_time}\n"
            "processes 1\n"
            "procs_running 1\n"
            "procs_blocked 0\n"
            "softirq 0 0 0 0 0 0 0 0 0 0 0\n"
        )
        _atomic_write(str(self.root), "stat", text.encode())


def _split_ticks(cpu_seconds: float) -> tuple[int, int]:
    """user + system ticks summing to ``cpu_seconds`` (9/10 user, as a busy CUDA process)."""
    total = max(0, round(cpu_seconds * CLOCK_TICKS))
    user = total * 9 // 10
    return user, total - user


def _stat_bytes(p: _Proc) -> bytes:
    # proc(5) fields 3..52 after "pid (comm)".
    fields = (
        "S",  # 3 state
        p.ppid,  # 4 ppid
        p.pid,  # 5 pgrp
        p.pid,  # 6 session
        0,  # 7 tty_nr
        -1,  # 8 tpgid
        4194560,  # 9 flags (PF_FORKNOEXEC | PF_RANDOMIZE)
        0, 0, 0, 0,  # 10-13 minflt cminflt majflt cmajflt
        p.utime,  # 14 utime
        p.stime,  # 15 stime
        0, 0,  # 16-17 cutime cstime
        20, 0,  # 18-19 priority nice
        p.num_threads,  # 20 num_threads
        0,  # 21 itrealvalue
        p.start_ticks,  # 22 starttime (ticks since boot)
        p.vms_pages * PAGE_SIZE,  # 23 vsize (bytes)
        p.rss_pages,  # 24 rss (pages)
        18446744073709551615,  # 25 rsslim
        1, 1, 0, 0, 0,  # 26-30 startcode endcode startstack kstkesp kstkeip
        0, 0, 0, 0,  # 31-34 signal blocked sigignore sigcatch
        0, 0, 0,  # 35-37 wchan nswap cnswap
        17,  # 38 exit_signal (SIGCHLD)
        0,  # 39 processor
        0, 0,  # 40-41 rt_priority policy
        0,  # 42 delayacct_blkio_ticks
        0, 0,  # 43-44 guest_time cguest_time
        0, 0, 0, 0, 0, 0, 0,  # 45-51 start_data end_data start_brk arg_start arg_end env_*
        0,  # 52 exit_code
    )
    return f"{p.pid} ({p.comm}) {' '.join(map(str, fields))}\n".encode()


def _statm_bytes(p: _Proc) -> bytes:
    shared = p.rss_pages // 8
    return f"{p.vms_pages} {p.rss_pages} {shared} 1 0 {p.vms_pages - shared} 0\n".encode()


def _status_bytes(p: _Proc) -> bytes:
    kb = PAGE_SIZE // 1024
    vm = p.vms_pages * kb
    rss = p.rss_pages * kb
    return (
        f"Name:\t{p.comm}\n"
        "Umask:\t0022\n"
        "State:\tS (sleeping)\n"
        f"Tgid:\t{p.pid}\n"
        "Ngid:\t0\n"
        f"Pid:\t{p.pid}\n"
        f"PPid:\t{p.ppid}\n"
        "TracerPid:\t0\n"
        "Uid:\t0\t0\t0\t0\n"
        "Gid:\t0\t0\t0\t0\n"
        "FDSize:\t64\n"
        "Groups:\t\n"
        f"NStgid:\t{p.pid}\n"
        f"NSpid:\t{p.pid}\n"
        f"NSpgid:\t{p.pid}\n"
        f"NSsid:\t{p.pid}\n"
        f"VmPeak:\t{vm:8d} kB\n"
        f"VmSize:\t{vm:8d} kB\n"
        "VmLck:\t       0 kB\n"
        "VmPin:\t       0 kB\n"
        f"VmHWM:\t{rss:8d} kB\n"
        f"VmRSS:\t{rss:8d} kB\n"
        f"RssAnon:\t{rss:8d} kB\n"
        "RssFile:\t       0 kB\n"
        "RssShmem:\t       0 kB\n"
        f"Threads:\t{p.num_threads}\n"
        "voluntary_ctxt_switches:\t0\n"
        "nonvoluntary_ctxt_switches:\t0\n"
    ).encode()
