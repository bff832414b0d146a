"""The host around a simulated node: a fake kubelet, a fake CRI runtime and a fixture /proc.

All three are generated from the one ``SimulatedNode`` (its pods and processes), so they agree
as they do on a real node, and the agent's real attribution code reads them unchanged:

- ``<root>/var/lib/kubelet/pod-resources/kubelet.sock`` — the pod-resources API (v1);
- ``<root>/run/containerd/containerd.sock`` (or ``crio/crio.sock``) — the CRI RuntimeService;
- ``<root>/proc`` — a /proc tree with every simulated GPU process (stat, statm, status,
  cmdline, comm, cgroup in the scenario's runtime, cgroup driver and version);
- ``<root>/proc/sys/kernel/random/boot_id`` — the kernel's boot id (a UUID, new on each boot,
  proc(5)); ``reboot()`` simulates a node reboot and writes a new one.

The /proc tree is brought up to date whenever the node's process list changes, in the thread
that asked for it (NVML's, in the agent) — before the agent can see the process in NVML, as a
real kernel creates /proc/PID before the process opens the GPU.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from pathlib import Path

from .cri import FakeCriServer
from .kubelet import FakePodResourcesServer
from .node import SimulatedNode
from .pods import SimDevice
from .procfs import ProcTreeWriter, cgroup_line, host_cgroup_line

log = logging.getLogger(__name__)

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
        self.kubelet = FakePodResourcesServer(node.pods, self.kubelet_socket, self._allocatable)
        self.cri = FakeCriServer(node.pods, self.cri_socket)
        self._boot_time = time.time() - 86_400.0  # the node booted a day ago
        self._proc = ProcTreeWriter(Path(self.proc_root), self._boot_time)
        self._started_at: dict[int, float] = {}
        self._cpu_written_at = 0.0
        self._lock = threading.Lock()
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

    async def start(self) -> None:
        self.sync_proc(self.node.processes())
        self.node.on_processes_changed = self.sync_proc
        await self.kubelet.start()
        await self.cri.start()

    async def stop(self) -> None:
        self.node.on_processes_changed = None
        await self.kubelet.stop()
        await self.cri.stop()

    async def set_running(self, source: str, running: bool) -> None:
        """Stop or start the fake ``kubelet`` or ``cri`` server (to test a source going down)."""
        server = {"kubelet": self.kubelet, "cri": self.cri}[source]
        if running and not server.running:
            await server.start()
        elif not running and server.running:
            await server.stop()

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
