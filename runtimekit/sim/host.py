"""The host around a simulated node: a fake kubelet, a fake CRI runtime and a fixture /proc.

All three are generated from the one ``SimulatedNode`` (its pods and processes), so they agree
as they do on a real node, and the agent's real attribution code reads them unchanged:

- ``<root>/var/lib/kubelet/pod-resources/kubelet.sock`` — the pod-resources API (v1);
- ``<root>/run/containerd/containerd.sock`` (or ``crio/crio.sock``) — the CRI RuntimeService;
- ``<root>/proc`` — a /proc tree with every simulated GPU process (stat, statm, status,
  cmdline, comm, cgroup in the scenario's runtime, cgroup driver and version);
- ``<root>/proc/sys/kernel/random/boot_id`` — the kernel's boot id (a UUID, new on each boot,
  proc(5)); ``reboot()`` simulates a node reboot and writes a new one;
- ``<root>/sys`` — the machine's sysfs tree (PCI hierarchy with its PCIe switches, NUMA nodes, CPU
  sockets, RDMA NICs: ``runtimekit.sim.sysfs``), written once when the host is made.

The /proc tree is brought up to date whenever the node's process list changes, before the
caller (NVML's thread, in the agent) gets the new list — so the agent never sees a process in
NVML before /proc/PID exists, as a real kernel creates /proc/PID before the process opens the GPU.

**Where it runs.** ``start()`` serves the fake kubelet and CRI on the caller's event loop and
writes /proc in whichever thread changed the process list (tests, one-process tools).
``start(own_thread=True)`` (``runtimekit serve --sim``) runs the host side in a thread of its own,
``runtimekit-sim-host``, with its own asyncio event loop: both gRPC servers and their handlers,
and every /proc write — a process-list change seen by NVML's thread (or the agent's event loop)
is handed to the host thread, and the caller waits until /proc is written, so the guarantee above
holds. On a real node that work is the kubelet's, the container runtime's and the kernel's, not
the agent's; in its own thread it can be told apart: ``thread_id`` is its native thread id
(``/proc/self/task/<thread_id>``), served as ``GET /sim/v1/host`` (``runtimekit.sim.control``)
for the scrape benchmark. The handlers read the ``SimulatedNode`` through its own lock (it is
shared with NVML's thread); the host's /proc bookkeeping has a lock of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from .cri import FakeCriServer
from .kubelet import FakePodResourcesServer, FakeUnixGrpcServer
from .node import SimulatedNode
from .pods import SimDevice
from .procfs import ProcTreeWriter, cgroup_line, host_cgroup_line
from .sysfs import write_sys_tree

log = logging.getLogger(__name__)

_T = TypeVar("_T")
THREAD_NAME = "runtimekit-sim-host"
# A caller waits this long for the host thread to write /proc, then writes it itself (a host thread
# that is stopping or stuck must not hang NVML's thread).
_HANDOFF_TIMEOUT_S = 5.0

_CRI_SOCKETS = {"containerd": "run/containerd/containerd.sock", "cri-o": "run/crio/crio.sock",
                "docker": "run/cri-dockerd.sock"}
_CPU_REFRESH_SECONDS = 30.0  # CPU seconds in /proc/PID/stat are rewritten this often
_JOB_CMDLINE = ("python", "-m", "torch.distributed.run", "train.py", "--config", "llama.yaml",
                "--wandb-api-key=sim-secret-0123456789")
_WORKER_CMDLINE = ("python", "worker.py", "--queue", "batch")


class SimulatedHost:
    """Owns the fake servers and the /proc tree of one simulated node under ``root``."""

    def __init__(self, node: SimulatedNode, root: Path, *, boot_id_path: str | None = None) -> None:
        self.node = node
        self.root = Path(root)
        k8s = node.kubernetes
        self.kubelet_socket = str(self.root / "var/lib/kubelet/pod-resources/kubelet.sock")
        self.cri_socket = str(self.root / _CRI_SOCKETS[k8s.runtime])
        self.proc_root = str(self.root / "proc")
        self.sys_root = str(self.root / "sys")
        write_sys_tree(node.scenario, Path(self.sys_root))
        self.kubelet = FakePodResourcesServer(node.pods, self.kubelet_socket, self._allocatable)
        self.cri = FakeCriServer(node.pods, self.cri_socket)
        self._boot_time = time.time() - 86_400.0  # the node booted a day ago
        self._proc = ProcTreeWriter(Path(self.proc_root), self._boot_time)
        self._started_at: dict[int, float] = {}
        self._cpu_written_at = 0.0
        self._lock = threading.Lock()
        self._proc_failing = False  # the last /proc write for an NVML call failed (logged once)
        # The host thread (start(own_thread=True)): its event loop, thread and native thread id.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._thread_ident: int | None = None
        self.thread_id: int | None = None
        # The boot id outlives the agent when kept outside ``root`` (the simulated node stays up across
        # agent restarts, as a real one does); only ``reboot()`` changes it.
        self.boot_id_path = boot_id_path or str(self.root / "proc/sys/kernel/random/boot_id")
        kept = Path(self.boot_id_path).read_text().strip() if Path(self.boot_id_path).is_file() else ""
        self.boot_id = kept
        if not kept:
            self._new_boot_id()

    def _new_boot_id(self) -> None:
        """Write a fresh boot id (lower-case UUID and a newline, as the kernel prints it)."""
        self.boot_id = str(uuid.uuid4())
        path = Path(self.boot_id_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(".boot_id.tmp")
        tmp.write_text(self.boot_id + "\n")
        os.replace(tmp, path)

    def reboot(self) -> dict:
        """Simulate a node reboot: the node's faults, driver counters and processes
        (``SimulatedNode.reboot``), a new boot id, and /proc with no process and a new ``btime``.

        The fake kubelet and CRI servers keep serving (the simulated node's pods come back, as
        kubelet restarts them). Returns {"boot_id", "cleared"} (faults cleared).
        """
        cleared = self.node.reboot()
        now = time.time()
        with self._lock:
            for pid in list(self._started_at):
                del self._started_at[pid]
            self._boot_time = now
            self._proc.reboot(now)
            self._new_boot_id()
        self.sync_proc(self.node.processes())
        return {"boot_id": self.boot_id, "cleared": cleared}

    async def start(self, *, own_thread: bool = False) -> None:
        """Write /proc and serve the fake kubelet and CRI runtime: on the caller's event loop, or
        with ``own_thread`` in a new thread with its own event loop (``thread_id``)."""
        if self._thread is not None:
            raise RuntimeError("the simulated host is already running in its own thread")
        if not own_thread:
            await self._start_here()
            return
        loop = asyncio.new_event_loop()
        ready: concurrent.futures.Future[int] = concurrent.futures.Future()
        thread = threading.Thread(target=self._run_thread, args=(loop, ready), name=THREAD_NAME, daemon=True)
        thread.start()
        self.thread_id = await asyncio.wrap_future(ready)
        self._loop, self._thread, self._thread_ident = loop, thread, thread.ident
        try:
            await self._on_host(self._start_here())
        except BaseException:
            await self._end_thread()
            raise

    async def stop(self) -> None:
        """Stop serving (and end the host thread, when there is one); start() may follow."""
        self.node.on_processes_changed = None
        if self._loop is None:
            await self._stop_here()
            return
        try:
            await self._on_host(self._stop_here())
        finally:
            await self._end_thread()

    @property
    def in_own_thread(self) -> bool:
        return self._thread is not None

    async def set_running(self, source: str, running: bool) -> None:
        """Stop or start the fake ``kubelet`` or ``cri`` server (to test a source going down)."""
        server = {"kubelet": self.kubelet, "cri": self.cri}[source]
        await self._on_host(self._set_running(server, running))

    async def call(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` run on the host thread (inline without one), awaited from any event loop."""
        async def run() -> _T:
            return fn()

        return await self._on_host(run())

    def info(self) -> dict[str, Any]:
        """What ``GET /sim/v1/host`` answers: where the host side runs and its paths."""
        return {
            "thread_id": self.thread_id,
            "thread_name": THREAD_NAME if self._thread is not None else None,
            "root": str(self.root),
            "kubelet_socket": self.kubelet_socket,
            "cri_socket": self.cri_socket,
            "proc_root": self.proc_root,
            "sys_root": self.sys_root,
            "boot_id_path": self.boot_id_path,
            "sources": {"kubelet": self.kubelet.running, "cri": self.cri.running},
        }

    # ---- on the host's loop ----------------------------------------------------------------------
    async def _start_here(self) -> None:
        self.sync_proc(self.node.processes())
        self.node.on_processes_changed = self._processes_changed
        try:
            await self.kubelet.start()
            await self.cri.start()
        except BaseException:
            self.node.on_processes_changed = None
            await self._stop_here()
            raise

    async def _stop_here(self) -> None:
        self.node.on_processes_changed = None
        await self.kubelet.stop()
        await self.cri.stop()

    @staticmethod
    async def _set_running(server: FakeUnixGrpcServer, running: bool) -> None:
        if running and not server.running:
            await server.start()
        elif not running and server.running:
            await server.stop()

    # ---- the host thread -------------------------------------------------------------------------
    @staticmethod
    def _run_thread(loop: asyncio.AbstractEventLoop, ready: concurrent.futures.Future[int]) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set_result, threading.get_native_id())
        try:
            loop.run_forever()
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    async def _on_host(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Await ``coro`` on the host's loop (here, without a host thread)."""
        loop = self._loop
        if loop is None or threading.get_ident() == self._thread_ident:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    async def _end_thread(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = self._thread_ident = None
        self.thread_id = None
        if loop is not None:
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:  # already closed
                pass
        if thread is not None:
            await asyncio.to_thread(thread.join, 2.0)
            if thread.is_alive():
                log.warning("the simulated host's thread did not end within 2 s")

    def _processes_changed(self, processes: list[dict]) -> None:
        """``node.on_processes_changed``: /proc written on the host thread, the caller waiting for
        it (NVML must not show a process before /proc does). Inline without a host thread, on it,
        or when it cannot answer in time. A failed write is the host's, never the driver's error."""
        loop = self._loop
        if loop is None or threading.get_ident() == self._thread_ident or not loop.is_running():
            self._sync_proc_for_nvml(processes)
            return
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def work() -> None:
            if not done.set_running_or_notify_cancel():
                return  # the caller gave up waiting and wrote /proc itself
            try:
                self._sync_proc_for_nvml(processes)
            except BaseException as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)

        try:
            loop.call_soon_threadsafe(work)
        except RuntimeError:  # the loop closed meanwhile
            self._sync_proc_for_nvml(processes)
            return
        try:
            done.result(_HANDOFF_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            if done.cancel():
                log.warning("the simulated host's thread did not write /proc within %g s; writing it here",
                            _HANDOFF_TIMEOUT_S)
                self._sync_proc_for_nvml(processes)
            else:
                done.result()  # it started meanwhile: wait for it

    def _sync_proc_for_nvml(self, processes: list[dict]) -> None:
        """``sync_proc`` on behalf of a fake NVML call: /proc that cannot be written (no descriptor
        left, /dev/shm full) is logged once until a write works again, and never reaches the NVML
        caller — a real driver does not fail because the host's /proc is unwell."""
        try:
            self.sync_proc(processes)
        except OSError as error:
            if not self._proc_failing:
                log.warning("the simulated host cannot write its /proc tree (%s); NVML goes on without it", error)
            self._proc_failing = True
        else:
            if self._proc_failing:
                log.info("the simulated host writes its /proc tree again")
            self._proc_failing = False

    def _allocatable(self) -> list[SimDevice]:
        """Every whole GPU, and every shared replica a generated pod holds."""
        devices = {SimDevice("nvidia.com/gpu", self.node.gpu(i).uuid) for i in range(self.node.gpu_count)}
        devices |= {d for p in self.node.pods() for c in p.containers for d in c.devices}
        return sorted(devices, key=lambda d: d.device_id)

    def sync_proc(self, processes: list[dict]) -> None:
        """Make /proc match ``processes`` (node.processes() rows): add, update, remove."""
        now = time.time()
        with self._lock:
            current = {p["pid"]: p for p in processes}
            for pid in set(self._started_at) - set(current):
                self._proc.remove_process(pid)
                del self._started_at[pid]
            refresh_cpu = now - self._cpu_written_at >= _CPU_REFRESH_SECONDS
            for pid, process in current.items():
                if pid not in self._started_at:
                    self._started_at[pid] = now
                    self._write(process, now)
                elif refresh_cpu:
                    self._proc.update_process(pid, cpu_seconds=self._cpu_seconds(pid, now))
            if refresh_cpu:
                self._cpu_written_at = now

    def _write(self, process: dict, now: float) -> None:
        k8s = self.node.kubernetes
        if process["container_id"]:
            cgroup = cgroup_line(process["pod_uid"], process["container_id"], process["qos"], k8s.runtime,
                                 k8s.cgroup_driver, k8s.cgroup_version)
        else:
            cgroup = host_cgroup_line("/system.slice/slurmd.service", version=k8s.cgroup_version)
        job = process["name"] == "python"
        self._proc.write_process(
            process["pid"],
            process["name"],
            _JOB_CMDLINE if job else _WORKER_CMDLINE,
            cgroup,
            cpu_seconds=0.0,
            rss_bytes=(8 << 30) if job else (512 << 20),
            start_time=now,
        )

    def _cpu_seconds(self, pid: int, now: float) -> float:
        """A busy process: about 1.5 CPU seconds per second (data loader threads)."""
        return 1.5 * (now - self._started_at[pid])
