"""SimulatedNode: the state of a fake GPU node (load, processes, counters, faults, events).

It knows nothing about NVML calling conventions (that is ``nvml.FakeNvmlLibrary``); it answers
"what would the driver report for GPU i now?" in NVML's units. Time is ``clock()`` minus the
first reading, cut into ticks of ``tick_s`` seconds; readings are constant within a tick and
cached per GPU, counters (energy, PCIe, NVLink, ECC) integrate per-tick rates and interpolate
inside the current tick, so same seed + same clock readings give the same answers regardless of
how many calls came in between. Fault changes settle the counters first: counters never go back.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from . import load as _load
from .events import LOST, EventHub
from .faults import COMPUTE_MODES, DRIVER_ERRORS, FAULT_KINDS, FaultError, validate_params
from .pods import (
    GPU_RESOURCE,
    QOS_CLASSES,
    KubernetesSpec,
    SimContainer,
    SimDevice,
    SimPod,
    container_id_for,
    pod_uid_for,
)
from .scenario import LOAD_PROFILES, GpuSpec, Scenario

__all__ = ["SimulatedNode", "Counters", "MiB"]

MiB = 1 << 20
_XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
_DBE_EVENT = 0x2  # nvmlEventTypeDoubleBitEccError
_LINK_KINDS = ("nvlink-down", "nvlink-crc")
_ECC_CORRECTED_P = 0.002  # chance per GPU per tick of one corrected (single-bit) ECC error
_MANUAL_PID_BASE = 3_900_000  # pids of add_process() without an explicit pid
_CHURN_PID_BASE = 1_500_000
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass
class Counters:
    """Monotonic counters of one GPU (units in names; per-link lists indexed by link)."""

    energy_mj: float = 0.0
    pcie_tx_bytes: float = 0.0
    pcie_rx_bytes: float = 0.0
    nvlink_tx_kib: list[float] = field(default_factory=list)
    nvlink_rx_kib: list[float] = field(default_factory=list)
    nvlink_crc: list[float] = field(default_factory=list)  # CRC flit and CRC data alike
    ecc_corrected: int = 0


@dataclass
class _Rates:
    """Per-second rates during one tick (with faults applied)."""

    power_mw: float
    pcie_tx_bps: float
    pcie_rx_bps: float
    nvlink_kibs: list[float]
    nvlink_crc: list[float]


@dataclass
class _Gpu:
    spec: GpuSpec
    faults: dict[tuple, dict[str, Any]] = field(default_factory=dict)  # key -> active fault dict
    acc: Counters = field(default_factory=Counters)
    acc_tick: int = 0  # ticks before this one are folded into acc
    seg_start: float = 0.0  # acc covers time up to here within acc_tick
    ecc_unc_volatile: int = 0
    ecc_unc_aggregate: int = 0
    ecc_corr_aggregate_base: int = 0
    remap_unc: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    cache_key: tuple = ()
    cache: tuple[_load.Sample, _Rates] | None = None


class SimulatedNode:
    """A simulated GPU node built from a scenario.

    ``seed`` fixes every random choice (None picks one); ``clock`` returns seconds (wall clock by
    default) and time 0 is its first reading; ``load`` overrides the scenario's load profile
    (``training``, ``busy``, ``idle``); ``tick_s`` is the sampling granularity in seconds.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int | None = None,
        clock: Callable[[], float] = time.time,
        load: str | None = None,
        tick_s: float = 1.0,
    ) -> None:
        if load is not None and load not in LOAD_PROFILES:
            raise ValueError(f"load: must be one of {', '.join(LOAD_PROFILES)}")
        if tick_s <= 0:
            raise ValueError("tick_s: must be > 0")
        self.scenario = scenario
        self.seed = int.from_bytes(os.urandom(8), "little") if seed is None else int(seed)
        self.load_profile = load or scenario.load_profile
        self.tick_s = float(tick_s)
        self.events = EventHub()
        self._clock = clock
        self._t0: float | None = None
        self._lock = threading.RLock()
        self._offset_s = _load.mix(self.seed, 0xC7C1E) % int(_load.CYCLE_S)
        self._gpus = [_Gpu(spec=g) for g in scenario.gpus]
        for g in self._gpus:
            n = g.spec.model.nvlink_links
            g.acc = Counters(nvlink_tx_kib=[0.0] * n, nvlink_rx_kib=[0.0] * n, nvlink_crc=[0.0] * n)
        self._fault_gen = 0
        self._pods: dict[tuple[str, str], SimPod] = {(p.namespace, p.name): p for p in scenario.kubernetes.pods}
        self._declares_pods = bool(scenario.kubernetes.pods)
        self._generated_pods: tuple[SimPod, ...] = ()
        self._holders_cache: tuple[int, dict[int, SimContainer]] | None = None
        self._manual: dict[int, tuple[int, str, int, SimContainer | None]] = {}  # pid -> (gpu, name, bytes, owner)
        self._next_pid = _MANUAL_PID_BASE
        self._churn = 0
        self._proc_gen = 0
        self._proc_cache: tuple[tuple, list[dict]] | None = None
        self._by_gpu: dict[int, list[dict]] = {}
        self._churn_slots: dict[int, tuple[int, int]] = {}
        self._churn_rows: dict[int, dict] = {}  # slot -> its current process row (rebuilt on restart)
        self._churn_rows_gen = -1
        # Called with the new process list whenever it changes (SimulatedHost keeps /proc in step).
        self.on_processes_changed: Callable[[list[dict]], None] | None = None

    # ---- time ------------------------------------------------------------------------------
    def now(self) -> float:
        """Seconds since the first clock reading."""
        c = self._clock()
        with self._lock:
            if self._t0 is None:
                self._t0 = c
            return max(0.0, c - self._t0)

    def epoch(self, t: float) -> float:
        """Clock value (e.g. Unix seconds) of simulated time ``t``."""
        return (self._t0 or 0.0) + t

    @property
    def gpu_count(self) -> int:
        return len(self._gpus)

    def gpu(self, index: int) -> GpuSpec:
        return self._gpus[index].spec

    # ---- faults ----------------------------------------------------------------------------
    def _check_gpu(self, gpu: Any) -> int:
        if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < len(self._gpus):
            raise FaultError(f"gpu: got {gpu!r}; must be an integer in 0..{len(self._gpus) - 1}")
        return gpu

    def inject(self, gpu: int, kind: str, **params: Any) -> dict:
        """Start fault ``kind`` on ``gpu`` (see ``FAULT_KINDS``); returns the active fault.

        Raises FaultError naming the parameter and its allowed values. Injecting a kind that is
        already active replaces its parameters (and delivers its XID again).
        """
        gpu = self._check_gpu(gpu)
        p = validate_params(kind, params)
        g = self._gpus[gpu]
        model = g.spec.model
        if "link" in p and not p["link"] < model.nvlink_links:
            raise FaultError(f"params.link: got {p['link']}; GPU {gpu} has links 0..{model.nvlink_links - 1}")
        if kind == "pcie-downtrain":
            if p["gen"] is None:
                p["gen"] = max(1, model.pcie_generation - 1)
            if p["gen"] > model.pcie_generation:
                raise FaultError(f"params.gen: got {p['gen']}; must be in 1..{model.pcie_generation}")
            if p["width"] > model.pcie_width or p["width"] not in (1, 2, 4, 8, 16):
                raise FaultError(f"params.width: got {p['width']}; must be one of 1, 2, 4, 8, 16 and <= {model.pcie_width}")
        t = self.now()
        with self._lock:
            self._settle(g, t)
            key = (kind, p["link"]) if kind in _LINK_KINDS else (kind,)
            was_lost = self._lost(g)
            fault = {"gpu": gpu, "fault": kind, "params": p, "since_s": round(t, 6)}
            g.faults[key] = fault
            if kind == "ecc-uncorrectable":
                g.ecc_unc_volatile += p["count"]
                g.ecc_unc_aggregate += p["count"]
            elif kind == "row-remap-pending":
                g.remap_unc += 1
                g.remap_pending = True
            elif kind == "row-remap-failure":
                g.remap_failure = True
            self._fault_gen += 1
            lost_now = self._lost(g)
        xid = p["xid"] if kind == "xid" else FAULT_KINDS[kind].xid
        if kind == "ecc-uncorrectable":
            self.events.deliver(gpu, _DBE_EVENT, 0)
        if xid is not None:
            self.events.deliver(gpu, _XID_EVENT, xid)
        if lost_now and not was_lost:
            self.events.deliver(gpu, LOST, 0)
        return dict(fault, params=dict(p))

    def clear(self, gpu: int, kind: str | None = None) -> int:
        """Clear fault ``kind`` (all links of it) or every fault on ``gpu``; returns how many.

        Modes and flags revert and a lost GPU answers again; counters keep what they gained.
        """
        gpu = self._check_gpu(gpu)
        if kind is not None and kind not in FAULT_KINDS:
            raise FaultError(f"fault: unknown kind {kind!r} (allowed: {', '.join(sorted(FAULT_KINDS))})")
        t = self.now()
        with self._lock:
            g = self._gpus[gpu]
            self._settle(g, t)
            keys = [k for k in g.faults if kind is None or k[0] == kind]
            for k in keys:
                del g.faults[k]
                if k[0] == "row-remap-pending":
                    g.remap_pending = False
                elif k[0] == "row-remap-failure":
                    g.remap_failure = False
            if keys:
                self._fault_gen += 1
            return len(keys)

    def active_faults(self) -> list[dict]:
        """Every active fault: {gpu, fault, params, since_s}, by GPU then kind."""
        with self._lock:
            out = [dict(f, params=dict(f["params"])) for g in self._gpus for f in g.faults.values()]
        return sorted(out, key=lambda f: (f["gpu"], f["fault"], f["params"].get("link", 0)))

    def _fault(self, g: _Gpu, kind: str) -> dict | None:
        f = g.faults.get((kind,))
        return f["params"] if f else None

    def _lost(self, g: _Gpu) -> bool:
        if ("gpu-lost",) in g.faults:
            return True
        x = g.faults.get(("xid",))
        return bool(x and x["params"]["xid"] == 79)

    # ---- driver-side view (used by nvml.FakeNvmlLibrary) -------------------------------------
    def device_error(self, gpu: int) -> int:
        """nvmlReturn_t every call on ``gpu`` gets now: 0, 15 (GPU lost) or a driver-error code."""
        g = self._gpus[gpu]
        if not g.faults:
            return 0
        with self._lock:
            if self._lost(g):
                return 15
            f = self._fault(g, "driver-error")
            return DRIVER_ERRORS[f["error"]] if f else 0

    def compute_mode(self, gpu: int) -> int:
        """NVML_COMPUTEMODE_* (default 0)."""
        f = self._fault(self._gpus[gpu], "compute-mode")
        return COMPUTE_MODES[f["mode"]] if f else 0

    def pcie_link(self, gpu: int) -> tuple[int, int]:
        """Current (generation, width)."""
        g = self._gpus[gpu]
        f = self._fault(g, "pcie-downtrain")
        if f:
            return f["gen"], f["width"]
        return g.spec.model.pcie_generation, g.spec.model.pcie_width

    def link_up(self, gpu: int, link: int) -> bool:
        return ("nvlink-down", link) not in self._gpus[gpu].faults

    def ecc(self, gpu: int) -> dict[str, int]:
        """ECC counts: corrected/uncorrected x volatile/aggregate."""
        _, counters = self.reading(gpu)
        g = self._gpus[gpu]
        return {
            "corrected_volatile": counters.ecc_corrected,
            "corrected_aggregate": g.ecc_corr_aggregate_base + counters.ecc_corrected,
            "uncorrected_volatile": g.ecc_unc_volatile,
            "uncorrected_aggregate": g.ecc_unc_aggregate,
        }

    def remapped_rows(self, gpu: int) -> tuple[int, int, int, int]:
        """(correctable, uncorrectable, pending, failure) as nvmlDeviceGetRemappedRows."""
        g = self._gpus[gpu]
        return 0, g.remap_unc, int(g.remap_pending), int(g.remap_failure)

    def memory(self, gpu: int) -> tuple[int, int, int]:
        """(total, reserved, used) bytes; used = processes + leak (NVML v2 meaning)."""
        g = self._gpus[gpu]
        m = g.spec.model
        total, reserved = m.memory_total_mib * MiB, m.memory_reserved_mib * MiB
        used = sum(p["used_memory_bytes"] for p in self.processes_on(gpu))
        leak = self._fault(g, "memory-leak")
        if leak:
            used += leak["bytes"]
        return total, reserved, min(used, total - reserved)

    # ---- readings --------------------------------------------------------------------------
    def _tick(self, t: float) -> int:
        return int(t // self.tick_s)

    def _compute(self, g: _Gpu, tick: int) -> tuple[_load.Sample, _Rates]:
        """Sample and rates of GPU ``g`` during ``tick`` with the current faults applied."""
        m = g.spec.model
        # The job runs only on GPUs a running container holds (every GPU when no pods are declared).
        profile = self.load_profile if self._runs_job(g.spec.index) else "idle"
        s = _load.sample(m, profile, self.seed, g.spec.index, tick, tick * self.tick_s, self._offset_s)
        if g.faults:
            if self._fault(g, "thermal-slowdown") is not None:
                slow = m.temperature_thresholds_c["slowdown"]
                s = replace(
                    s,
                    temp_gpu=slow - 1,
                    temp_mem=max(s.temp_mem, slow + 2),
                    clock_sm=int(s.clock_sm * 0.55),
                    clock_graphics=int(s.clock_graphics * 0.55),
                    power_mw=int(s.power_mw * 0.7),
                    reasons=(s.reasons & ~0x1) | 0x8 | 0x40,
                )
            if self._fault(g, "power-brake") is not None:
                s = replace(
                    s,
                    clock_sm=int(s.clock_sm * 0.5),
                    clock_graphics=int(s.clock_graphics * 0.5),
                    power_mw=min(s.power_mw, int((m.power_idle_w + 0.3 * (m.power_limit_w - m.power_idle_w)) * 1000)),
                    reasons=(s.reasons & ~0x1) | 0x8 | 0x80,
                )
        links = m.nvlink_links
        up = [self.link_up(g.spec.index, i) for i in range(links)]
        n_up = sum(up)
        per_link = s.nvlink_kibs / n_up if n_up else 0.0
        crc = [0.0] * links
        for key, f in g.faults.items():
            if key[0] == "nvlink-crc":
                crc[key[1]] = f["params"]["rate"]
        rates = _Rates(
            power_mw=s.power_mw,
            pcie_tx_bps=s.pcie_tx_kbs * 1000.0,
            pcie_rx_bps=s.pcie_rx_kbs * 1000.0,
            nvlink_kibs=[per_link if u else 0.0 for u in up],
            nvlink_crc=crc,
        )
        return s, rates

    def _current(self, g: _Gpu, tick: int) -> tuple[_load.Sample, _Rates]:
        key = (tick, self._fault_gen, self._proc_gen)
        if g.cache_key != key:
            g.cache = self._compute(g, tick)
            g.cache_key = key
        return g.cache  # type: ignore[return-value]

    def _add(self, g: _Gpu, r: _Rates, dt: float) -> None:
        a = g.acc
        a.energy_mj += r.power_mw * dt
        a.pcie_tx_bytes += r.pcie_tx_bps * dt
        a.pcie_rx_bytes += r.pcie_rx_bps * dt
        for i, v in enumerate(r.nvlink_kibs):
            if v:
                a.nvlink_tx_kib[i] += v * dt
                a.nvlink_rx_kib[i] += v * dt * 0.98
        for i, v in enumerate(r.nvlink_crc):
            if v:
                a.nvlink_crc[i] += v * dt

    def _advance(self, g: _Gpu, t: float) -> int:
        """Fold every completed tick before ``t`` into the counters; returns the current tick."""
        tick = self._tick(t)
        while g.acc_tick < tick:
            _, r = self._compute(g, g.acc_tick)
            end = (g.acc_tick + 1) * self.tick_s
            self._add(g, r, end - g.seg_start)
            if _load.noise(self.seed, g.spec.index, g.acc_tick, 99) < _ECC_CORRECTED_P:
                g.acc.ecc_corrected += 1
            g.acc_tick += 1
            g.seg_start = end
        return tick

    def _settle(self, g: _Gpu, t: float) -> None:
        """Fold the counters up to ``t`` under the current faults (before they change)."""
        tick = self._advance(g, t)
        _, r = self._current(g, tick)
        self._add(g, r, t - g.seg_start)
        g.seg_start = t

    def reading(self, gpu: int, t: float | None = None) -> tuple[_load.Sample, Counters]:
        """The GPU's readings now (or at ``t``) and its counters interpolated to that instant."""
        if t is None:
            t = self.now()
        g = self._gpus[gpu]
        with self._lock:
            tick = self._advance(g, t)
            s, r = self._current(g, tick)
            dt = max(0.0, t - g.seg_start)
            a = g.acc
            c = Counters(
                energy_mj=a.energy_mj + r.power_mw * dt,
                pcie_tx_bytes=a.pcie_tx_bytes + r.pcie_tx_bps * dt,
                pcie_rx_bytes=a.pcie_rx_bytes + r.pcie_rx_bps * dt,
                nvlink_tx_kib=[x + v * dt for x, v in zip(a.nvlink_tx_kib, r.nvlink_kibs)],
                nvlink_rx_kib=[x + v * dt * 0.98 for x, v in zip(a.nvlink_rx_kib, r.nvlink_kibs)],
                nvlink_crc=[x + v * dt for x, v in zip(a.nvlink_crc, r.nvlink_crc)],
                ecc_corrected=a.ecc_corrected,
            )
        return s, c

    def sample(self, gpu: int) -> _load.Sample:
        """Instantaneous readings of the current tick (cached; a dict lookup when warm)."""
        t = self.now()
        g = self._gpus[gpu]
        with self._lock:
            return self._current(g, self._tick(t))[0]

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
        self, namespace: str, name: str, containers: list[dict[str, Any]], qos: str = "burstable"
    ) -> SimPod:
        """Start a pod; ``containers`` are ``{"name", "gpus": [index, ...], "idle": bool}``.

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
            for gpu in gpus:
                self._check_gpu(gpu)
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
            ids = {c.container_id for c in pod.containers}
            for pid in [pid for pid, entry in self._manual.items() if entry[3] and entry[3].container_id in ids]:
                del self._manual[pid]
            self._proc_gen += 1

    def set_pod_count(self, count: int) -> None:
        """Generated pods ``sim-pod-NNNN`` in namespace ``sim``, sharing the GPUs round-robin
        (time-sliced replicas ``GPU-…::N`` as the NVIDIA device plugin names them); the
        background processes of ``set_process_count`` then run in them."""
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 10_000:
            raise FaultError(f"count: got {count!r}; must be an integer in 0..10000")
        n = len(self._gpus)
        pods = []
        for i in range(count):
            name = f"sim-pod-{i:04d}"
            device = SimDevice(GPU_RESOURCE, f"{self._gpus[i % n].spec.uuid}::{i // n}")
            cid = container_id_for("sim", name, "worker", salt=str(self.seed))
            container = SimContainer("worker", cid, (device,))
            pods.append(SimPod(name, "sim", pod_uid_for("sim", name, salt=str(self.seed)), (container,)))
        with self._lock:
            self._generated_pods = tuple(pods)
            self._proc_gen += 1

    def _runs_job(self, gpu: int) -> bool:
        return not self._declares_pods or gpu in self._holders()

    def _holders(self) -> dict[int, SimContainer]:
        """GPU index -> the first non-idle container holding it whole (the job runs there)."""
        if self._holders_cache is not None and self._holders_cache[0] == self._proc_gen:
            return self._holders_cache[1]
        by_uuid = {g.spec.uuid: g.spec.index for g in self._gpus}
        holders: dict[int, SimContainer] = {}
        for pod in sorted(self._pods.values(), key=lambda p: (p.namespace, p.name)):
            for container in pod.containers:
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
    ) -> int:
        """Start a process holding ``used_memory_bytes`` on ``gpu``; returns its pid.

        With ``namespace``, ``pod`` and ``container`` it runs in that container (which must
        exist), otherwise on the host.
        """
        gpu = self._check_gpu(gpu)
        owner = None
        if namespace is not None or pod is not None or container is not None:
            found = self._pods.get((namespace, pod))  # type: ignore[arg-type]
            owner = found.container(container) if found and isinstance(container, str) else None
            if owner is None:
                raise FaultError(f"container: no container {container!r} in pod {namespace}/{pod}")
        if isinstance(used_memory_bytes, bool) or not isinstance(used_memory_bytes, int) or used_memory_bytes < 0:
            raise FaultError(f"used_memory_bytes: got {used_memory_bytes!r}; must be an integer >= 0")
        if not isinstance(name, str) or not name:
            raise FaultError("name: must be a non-empty string")
        with self._lock:
            if pid is None:
                while self._next_pid in self._manual:
                    self._next_pid += 1
                pid = self._next_pid
                self._next_pid += 1
            elif isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 1 << 32:
                raise FaultError(f"pid: got {pid!r}; must be an integer in 1..4294967295")
            self._manual[pid] = (gpu, name, used_memory_bytes, owner)
            self._proc_gen += 1
            return pid

    def remove_process(self, pid: int) -> None:
        """End a process started by ``add_process`` (KeyError when unknown)."""
        with self._lock:
            if pid not in self._manual:
                raise KeyError(f"pid {pid} is not a simulated process started with add_process")
            del self._manual[pid]
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
            n = len(self._gpus)
            holders = self._holders()
            for g in self._gpus:
                s = self._current(g, tick)[0]
                holder = holders.get(g.spec.index)
                if s.job and (holder is not None or not self._declares_pods):
                    m = g.spec.model
                    frac = 0.6 + 0.25 * _load.noise(self.seed, 0, s.cycle, 7)
                    size = int((m.memory_total_mib - m.memory_reserved_mib) * frac) * MiB
                    pid = 10_000 + (_load.mix(self.seed, s.cycle) % 100_000) * 10 + g.spec.index
                    out.append({"pid": pid, "gpu": g.spec.index, "name": "python", "used_memory_bytes": size,
                                **self._owner_fields(holder, pod_of)})
            generated = self._generated_pods
            if self._churn_rows_gen != self._proc_gen:
                self._churn_rows, self._churn_rows_gen = {}, self._proc_gen
            for i in range(self._churn):
                life, offset = self._churn_slot(i)
                pid = _CHURN_PID_BASE + i * 50 + (tick + offset) // life % 50
                row = self._churn_rows.get(i)
                if row is None or row["pid"] != pid:  # the slot restarted: a new process
                    pod = generated[i % len(generated)] if generated else None
                    gpu = (i % len(generated)) % n if generated else i % n
                    container = pod.containers[0] if pod else None
                    row = {"pid": pid, "gpu": gpu, "name": "worker", "used_memory_bytes": 64 * MiB,
                           **self._owner_fields(container, pod_of)}
                    self._churn_rows[i] = row
                out.append(row)
            out.sort(key=lambda p: p["pid"])
            self._proc_cache = (key, out)
            self._by_gpu = {g.spec.index: [] for g in self._gpus}
            for process in out:
                self._by_gpu[process["gpu"]].append(process)
        hook = self.on_processes_changed
        if hook is not None:
            hook(out)  # e.g. the fixture /proc, updated before NVML can show the new list
        return out
