"""The simulated node's workload: pods, their containers, and the processes on the GPUs.

Pods come from the scenario (``kubernetes.pods``), from ``add_pod`` and from ``set_pod_count``
(generated, time-sliced replicas named as the NVIDIA device plugin names them); ``finish_pod``
ends one for good (Succeeded, Failed) and ``delete_pod`` removes it. Processes are the load
profile's job (in the non-idle containers of running pods holding whole GPUs, or on every GPU when
the scenario declares no pods), processes started with ``add_process``, and background churn
(``set_process_count``). Process rows carry host PIDs, as the driver reports them.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import Any

from .. import load as _load
from ..faults import FaultError
from ..pods import (
    FINISHED_PHASES,
    GPU_RESOURCE,
    QOS_CLASSES,
    KubernetesSpec,
    SimContainer,
    SimDevice,
    SimPod,
    container_id_for,
    pod_uid_for,
)
from .state import MiB, NodeCore

__all__ = ["WorkloadPart"]

_CHURN_PID_BASE = 1_500_000
_REBOOT_PID_STEP = 17  # a worker slot's pid moves by this (mod 50) per reboot: a new process, a new pid
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class WorkloadPart(NodeCore):
    """Pods, containers and GPU processes."""

    # ---- pods ------------------------------------------------------------------------------
    @property
    def kubernetes(self) -> KubernetesSpec:
        """The node's container runtime and cgroup layout (its pods are ``pods()``)."""
        return self.scenario.kubernetes

    def pods(self) -> list[SimPod]:
        """Every pod on the node now: the scenario's and added ones, then the generated ones."""
        with self._lock:
            return sorted(self._pods.values(), key=lambda p: (p.namespace, p.name)) + list(self._generated_pods)

    def add_pod(
        self, namespace: str, name: str, containers: list[dict[str, Any]] | None, qos: str = "burstable"
    ) -> SimPod:
        """Start a pod; ``containers`` are ``{"name", "gpus": [index, ...], "idle": bool}`` (None, a
        request without them, is refused like any other bad input).

        Raises FaultError naming the field and rule for bad input (and changes nothing).
        """
        for field_name, value in (("namespace", namespace), ("name", name)):
            if not isinstance(value, str) or not _DNS_LABEL.match(value):
                raise FaultError(f"{field_name}: got {value!r}; must be a DNS label (a-z, 0-9, '-', at most 63)")
        if qos not in QOS_CLASSES:
            raise FaultError(f"qos: got {qos!r}; must be one of {', '.join(QOS_CLASSES)}")
        if not isinstance(containers, list) or not containers:
            raise FaultError("containers: must be a non-empty list of {name, gpus, idle}")
        built = []
        for i, c in enumerate(containers):
            if not isinstance(c, dict) or set(c) - {"name", "gpus", "idle"}:
                raise FaultError(f"containers[{i}]: must be a mapping with keys name, gpus, idle")
            cname, gpus, idle = c.get("name"), c.get("gpus", []), c.get("idle", False)
            if not isinstance(cname, str) or not _DNS_LABEL.match(cname):
                raise FaultError(f"containers[{i}].name: got {cname!r}; must be a DNS label")
            if not isinstance(gpus, list) or len(set(map(repr, gpus))) != len(gpus):
                raise FaultError(f"containers[{i}].gpus: must be a list of distinct GPU indices")
            for j, gpu in enumerate(gpus):
                try:
                    self._check_gpu(gpu)
                except FaultError:
                    raise FaultError(f"containers[{i}].gpus[{j}]: got {gpu!r}; must be a GPU index in "
                                     f"0..{len(self._gpus) - 1}") from None
            if not isinstance(idle, bool):
                raise FaultError(f"containers[{i}].idle: must be true or false")
            devices = tuple(SimDevice(GPU_RESOURCE, self._gpus[g].spec.uuid) for g in gpus)
            cid = container_id_for(namespace, name, cname, salt=f"{self.seed}:{time.monotonic_ns()}")
            built.append(SimContainer(cname, cid, devices, idle=idle))
        if len({c.name for c in built}) != len(built):
            raise FaultError("containers: container names must be distinct")
        pod = SimPod(name, namespace, pod_uid_for(namespace, name, salt=f"{time.monotonic_ns()}"), tuple(built), qos)
        with self._lock:
            if (namespace, name) in self._pods:
                raise FaultError(f"name: pod {namespace}/{name} already exists")
            self._pods[(namespace, name)] = pod
            self._proc_gen += 1
        return pod

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod: its containers and every process in them end (KeyError when unknown)."""
        with self._lock:
            pod = self._pods.pop((namespace, name), None)
            if pod is None:
                raise KeyError(f"pod {namespace}/{name} does not exist")
            self._end_processes_of(pod)

    def finish_pod(self, namespace: str, name: str, phase: str) -> SimPod:
        """A pod's containers exit for good (a Job done, restartPolicy Never): ``phase`` "Succeeded"
        or "Failed". Its processes end and the job no longer runs in it; the fake runtime lists its
        containers exited and its sandbox not ready until the pod is deleted. KeyError when unknown
        (generated pods included); FaultError naming ``phase`` for another phase or a pod already
        finished (a finished pod does not run again)."""
        if phase not in FINISHED_PHASES:
            raise FaultError(f"phase: got {phase!r}; must be one of {', '.join(FINISHED_PHASES)}")
        with self._lock:
            pod = self._pods.get((namespace, name))
            if pod is None:
                raise KeyError(f"pod {namespace}/{name} does not exist")
            if pod.finished:
                raise FaultError(f"phase: pod {namespace}/{name} has already finished ({pod.phase})")
            pod = self._pods[(namespace, name)] = replace(pod, phase=phase)
            self._end_processes_of(pod)
            return pod

    def _end_processes_of(self, pod: SimPod) -> None:
        """Every process in ``pod``'s containers ends (lock held)."""
        ids = {c.container_id for c in pod.containers}
        for pid in [pid for pid, entry in self._manual.items() if entry[3] and entry[3].container_id in ids]:
            del self._manual[pid]
            self._in_instance.pop(pid, None)
        self._proc_gen += 1

    def set_pod_count(self, count: int) -> None:
        """Generated pods ``sim-pod-NNNN`` in namespace ``sim``, sharing the GPUs round-robin
        (time-sliced replicas ``GPU-…::N`` as the NVIDIA device plugin names them); the
        background processes of ``set_process_count`` then run in them."""
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 10_000:
            raise FaultError(f"count: got {count!r}; must be an integer in 0..10000")
        whole = self._whole_gpus()
        n = len(whole)
        pods = []
        for i in range(count):
            name = f"sim-pod-{i:04d}"
            device = SimDevice(GPU_RESOURCE, f"{self._gpus[whole[i % n]].spec.uuid}::{i // n}")
            cid = container_id_for("sim", name, "worker", salt=str(self.seed))
            container = SimContainer("worker", cid, (device,))
            pods.append(SimPod(name, "sim", pod_uid_for("sim", name, salt=str(self.seed)), (container,)))
        with self._lock:
            self._generated_pods = tuple(pods)
            self._proc_gen += 1

    def _whole_gpus(self) -> list[int]:
        """The GPUs not in MIG mode, by index (all when every one is): a time-shared replica or a
        process outside any instance cannot run on a GPU in MIG mode."""
        whole = [g.spec.index for g in self._gpus if not g.mig_current]
        return whole or [g.spec.index for g in self._gpus]

    def _runs_job(self, gpu: int) -> bool:
        """The load profile's job runs on ``gpu``: held by a running container (any GPU when no
        pods are declared) and not in MIG mode (its work there is the processes of its instances)."""
        if self._gpus[gpu].mig_current:
            return False
        return not self._declares_pods or gpu in self._holders()

    def _holders(self) -> dict[int, SimContainer]:
        """GPU index -> the first non-idle container of a running pod holding it whole (the job
        runs there)."""
        if self._holders_cache is not None and self._holders_cache[0] == self._proc_gen:
            return self._holders_cache[1]
        by_uuid = {g.spec.uuid: g.spec.index for g in self._gpus}
        holders: dict[int, SimContainer] = {}
        for pod in sorted(self._pods.values(), key=lambda p: (p.namespace, p.name)):
            for container in () if pod.finished else pod.containers:
                for device in container.devices:
                    index = by_uuid.get(device.device_id)
                    if index is not None and not container.idle:
                        holders.setdefault(index, container)
        self._holders_cache = (self._proc_gen, holders)
        return holders

    def _owner_fields(self, container: SimContainer | None, pod_of: dict[str, SimPod]) -> dict[str, Any]:
        """A process row's owner columns; ``pod_of`` maps container id -> pod (see processes())."""
        if container is None:
            return dict.fromkeys(("namespace", "pod", "pod_uid", "container", "container_id", "qos"))
        pod = pod_of[container.container_id]
        return {
            "namespace": pod.namespace, "pod": pod.name, "pod_uid": pod.uid, "container": container.name,
            "container_id": container.container_id, "qos": pod.qos_class,
        }

    # ---- processes -------------------------------------------------------------------------
    def processes_on(self, gpu: int) -> list[dict]:
        """``processes()`` of one GPU (cached with it)."""
        self.processes()
        return self._by_gpu[gpu]

    def process_memory_on(self, gpu: int) -> int:
        """Bytes the processes on ``gpu`` hold: the sum over ``processes_on(gpu)``, made once per
        process list (NVML's memory and utilization calls ask for it on every call)."""
        self.processes()
        return self._memory_by_gpu[gpu]

    def add_process(
        self,
        gpu: int,
        used_memory_bytes: int,
        name: str = "python",
        pid: int | None = None,
        *,
        namespace: str | None = None,
        pod: str | None = None,
        container: str | None = None,
        gpu_instance: int | None = None,
        compute_instance: int | None = None,
    ) -> int:
        """Start a process holding ``used_memory_bytes`` on ``gpu``; returns its pid.

        With ``namespace``, ``pod`` and ``container`` it runs in that container (which must
        exist), otherwise on the host. On a GPU in MIG mode it runs in the MIG device of
        ``gpu_instance`` and ``compute_instance`` (both required there, refused elsewhere).
        ``used_memory_bytes`` is at most the memory of the GPU (or of its MIG instance): no
        process holds more, and NVML packs it into nvmlProcessInfo_t.usedGpuMemory (64 bits).
        FaultError naming the field for bad input (and nothing changes).
        """
        gpu = self._check_gpu(gpu)
        owner = self._owner(namespace, pod, container)
        if not isinstance(name, str) or not name:
            raise FaultError("name: must be a non-empty string")
        with self._lock:
            where = self._mig_instance_check(gpu, gpu_instance, compute_instance)
            self._check_process_memory(gpu, used_memory_bytes, where)
            if pid is None:
                while self._next_pid in self._manual:
                    self._next_pid += 1
                pid = self._next_pid
                self._next_pid += 1
            elif isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 1 << 32:
                raise FaultError(f"pid: got {pid!r}; must be an integer in 1..4294967295")
            self._manual[pid] = (gpu, name, used_memory_bytes, owner)
            self._in_instance.pop(pid, None)
            if where is not None:
                self._in_instance[pid] = where
            self._proc_gen += 1
            return pid

    def _owner(self, namespace: Any, pod: Any, container: Any) -> SimContainer | None:
        """The container ``namespace``/``pod``/``container`` names (None: none named, the host);
        FaultError naming the field that is missing, not a string, or names nothing."""
        given = {"namespace": namespace, "pod": pod, "container": container}
        if all(value is None for value in given.values()):
            return None
        for field_name, value in given.items():
            if not isinstance(value, str) or not value:
                raise FaultError(f"{field_name}: got {value!r}; must be a non-empty string (a process in a pod "
                                 "names its namespace, pod and container)")
        found = self._pods.get((namespace, pod))
        if found is None:
            raise FaultError(f"pod: no pod {namespace}/{pod}")
        if found.finished:
            raise FaultError(f"pod: pod {namespace}/{pod} has finished ({found.phase}); its containers have exited")
        owner = found.container(container)
        if owner is None:
            raise FaultError(f"container: no container {container!r} in pod {namespace}/{pod}")
        return owner

    def _check_process_memory(self, gpu: int, size: Any, where: tuple[int, int] | None) -> None:
        """FaultError naming ``used_memory_bytes`` unless ``size`` is an integer in 0..the memory
        total of GPU ``gpu``, or of its GPU instance ``where[0]`` (lock held)."""
        if where is None:
            total, of = self._gpus[gpu].spec.model.memory_total_mib * MiB, f"GPU {gpu}'s memory total"
        else:
            total, of = self._gi_memory_total(gpu, where[0]), f"the memory of GPU instance {where[0]}"
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= total:
            raise FaultError(f"used_memory_bytes: got {size!r}; must be an integer in 0..{total} ({of})")

    def remove_process(self, pid: int) -> None:
        """End a process started by ``add_process`` (KeyError when unknown)."""
        with self._lock:
            if pid not in self._manual:
                raise KeyError(f"pid {pid} is not a simulated process started with add_process")
            del self._manual[pid]
            self._in_instance.pop(pid, None)
            self._proc_gen += 1

    def set_process_count(self, count: int) -> None:
        """Background churn: ``count`` small processes spread round-robin over the GPUs; each
        slot restarts with a new pid every 60-600 ticks (for benchmarks of attribution)."""
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 50_000:
            raise FaultError(f"count: got {count!r}; must be an integer in 0..50000")
        with self._lock:
            self._churn = count
            self._proc_gen += 1

    def _churn_slot(self, i: int) -> tuple[int, int]:
        """(lifetime, phase offset) in ticks of background slot ``i``: 1 to 10 minutes."""
        slot = self._churn_slots.get(i)
        if slot is None:
            life = 60 + _load.mix(self.seed, i, 1) % 540
            slot = self._churn_slots[i] = (life, _load.mix(self.seed, i, 2) % life)
        return slot

    def processes(self) -> list[dict]:
        """Processes on the node now, by pid: {pid, gpu, name, used_memory_bytes} and their owner
        {namespace, pod, pod_uid, container, container_id, qos} (all None for a host process).

        The load profile's job runs in the non-idle containers holding whole GPUs (on every GPU
        when the scenario declares no pods); background processes run in the generated pods
        (on the host when there are none).
        """
        t = self.now()
        tick = self._tick(t)
        with self._lock:
            key = (tick, self._proc_gen)
            if self._proc_cache is not None and self._proc_cache[0] == key:
                return self._proc_cache[1]
            pod_of = {c.container_id: p for p in (*self._pods.values(), *self._generated_pods) for c in p.containers}
            out = [
                {"pid": pid, "gpu": gpu, "name": name, "used_memory_bytes": b, **self._owner_fields(owner, pod_of)}
                for pid, (gpu, name, b, owner) in self._manual.items()
            ]
            whole = self._whole_gpus()
            n = len(whole)
            holders = self._holders()
            for g in self._gpus:
                s = self._current(g, tick)[0]
                holder = holders.get(g.spec.index)
                if s.job and (holder is not None or not self._declares_pods):
                    m = g.spec.model
                    frac = 0.6 + 0.25 * _load.noise(self.seed, 0, s.cycle, 7)
                    size = int((m.memory_total_mib - m.memory_reserved_mib) * frac) * MiB
                    pid = 10_000 + (self._job_pid_hash(s.cycle) % 100_000) * 10 + g.spec.index
                    out.append({"pid": pid, "gpu": g.spec.index, "name": "python", "used_memory_bytes": size,
                                **self._owner_fields(holder, pod_of)})
            generated = self._generated_pods
            if self._churn_rows_gen != self._proc_gen:
                self._churn_rows, self._churn_rows_gen = {}, self._proc_gen
            for i in range(self._churn):
                life, offset = self._churn_slot(i)
                pid = _CHURN_PID_BASE + i * 50 + ((tick + offset) // life + _REBOOT_PID_STEP * self._boots) % 50
                row = self._churn_rows.get(i)
                if row is None or row["pid"] != pid:  # the slot restarted: a new process
                    pod = generated[i % len(generated)] if generated else None
                    gpu = whole[(i % len(generated)) % n if generated else i % n]
                    container = pod.containers[0] if pod else None
                    row = {"pid": pid, "gpu": gpu, "name": "worker", "used_memory_bytes": 64 * MiB,
                           **self._owner_fields(container, pod_of)}
                    self._churn_rows[i] = row
                out.append(row)
            out.sort(key=lambda p: p["pid"])
            self._proc_cache = (key, out)
            by_gpu: dict[int, list[dict]] = {g.spec.index: [] for g in self._gpus}
            for process in out:
                by_gpu[process["gpu"]].append(process)
            self._by_gpu = by_gpu
            self._memory_by_gpu = {gpu: sum(p["used_memory_bytes"] for p in rows) for gpu, rows in by_gpu.items()}
        hook = self.on_processes_changed
        if hook is not None:
            hook(out)  # e.g. the fixture /proc, updated before NVML can show the new list
        return out

    def _job_pid_hash(self, cycle: int) -> int:
        """Hash behind the job's pid in ``cycle``: a reboot starts new processes (new pids)."""
        return _load.mix(self.seed, cycle, self._boots) if self._boots else _load.mix(self.seed, cycle)

    def _end_processes_on(self, gpu: int) -> None:
        """Every process started on ``gpu`` ends (a GPU reset; lock held)."""
        for pid in [pid for pid, entry in self._manual.items() if entry[0] == gpu]:
            del self._manual[pid]
            self._in_instance.pop(pid, None)
        self._proc_gen += 1

    def _end_processes(self) -> None:
        """Every process ends (a reboot; lock held): added ones for good; the background workers
        start again with new pids (their pods restart them, as the load profile's job starts again)."""
        self._manual.clear()
        self._in_instance.clear()
        self._churn_rows, self._churn_rows_gen = {}, -1
        self._proc_gen += 1
