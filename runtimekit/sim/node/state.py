"""Per-GPU state of the simulated node and the shared core every part of ``SimulatedNode`` uses.

``Counters`` are the driver's monotonic counters of one GPU, ``_Rates`` their per-second rates
during one tick, ``_Gpu`` everything the node keeps per GPU. ``NodeCore`` holds the node-wide
state (scenario, seed, clock, lock, generations) and declares the methods the parts
(``faults``, ``counters``, ``workload``) provide to each other, so each part is typed alone.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import load as _load
from ..events import EventHub
from ..faults import FaultError
from ..mig_profiles import CiProfile, GiProfile
from ..pods import SimContainer, SimPod
from ..scenario import LOAD_PROFILES, GpuSpec, Scenario

__all__ = ["Counters", "MiB", "NodeCore"]

MiB = 1 << 20
_MANUAL_PID_BASE = 3_900_000  # pids of add_process() without an explicit pid


@dataclass
class Counters:
    """Monotonic counters of one GPU since the driver loaded (units in names; per-link lists
    indexed by link). NVLink error counters follow nvmlNvLinkErrorCounter_t: ``nvlink_crc``
    holds every CRC error of the link, each one either a flit CRC error (DL_CRC_FLIT) or a data
    CRC error (DL_CRC_DATA), split by ``crc_flit``/``crc_data``; ``nvlink_replay`` (DL_REPLAY: the
    transmitter resends each flit the receiver rejected for CRC, one replay per CRC error),
    ``nvlink_recovery`` (DL_RECOVERY: link retrains)."""

    energy_mj: float = 0.0
    pcie_tx_bytes: float = 0.0
    pcie_rx_bytes: float = 0.0
    nvlink_tx_kib: list[float] = field(default_factory=list)
    nvlink_rx_kib: list[float] = field(default_factory=list)
    nvlink_crc: list[float] = field(default_factory=list)
    nvlink_replay: list[float] = field(default_factory=list)
    nvlink_recovery: list[float] = field(default_factory=list)
    ecc_corrected: int = 0
    pcie_replays: float = 0.0  # nvmlDeviceGetPcieReplayCounter

    def crc_flit(self, link: int) -> int:
        """DL_CRC_FLIT of ``link``: the odd-numbered CRC errors (the first, third, ...), so that
        flit + data is every CRC error once (the simulator splits them evenly; the hardware
        does not say in what proportion they come)."""
        n = int(self.nvlink_crc[link])
        return n - n // 2

    def crc_data(self, link: int) -> int:
        """DL_CRC_DATA of ``link``: the even-numbered CRC errors (see ``crc_flit``)."""
        return int(self.nvlink_crc[link]) // 2

    @classmethod
    def zero(cls, links: int) -> Counters:
        """Every counter at 0 for a GPU with ``links`` NVLinks (as right after driver load)."""
        return cls(nvlink_tx_kib=[0.0] * links, nvlink_rx_kib=[0.0] * links, nvlink_crc=[0.0] * links,
                   nvlink_replay=[0.0] * links, nvlink_recovery=[0.0] * links)


@dataclass
class _Rates:
    """Per-second rates during one tick (with faults applied)."""

    power_mw: float
    pcie_tx_bps: float
    pcie_rx_bps: float
    nvlink_kibs: list[float]
    nvlink_crc: list[float]
    pcie_replays: float = 0.0


@dataclass
class _ComputeInstance:
    """A MIG compute instance: its id in its GPU instance, profile, start (compute slices), UUID."""

    id: int
    profile: CiProfile
    start: int
    uuid: str  # "MIG-…" of the MIG device it makes


@dataclass
class _GpuInstance:
    """A MIG GPU instance: its id, profile, start (memory slices) and compute instances by id."""

    id: int
    profile: GiProfile
    start: int
    cis: dict[int, _ComputeInstance] = field(default_factory=dict)


@dataclass
class _Gpu:
    spec: GpuSpec
    mig_current: bool = False  # MIG mode in effect
    mig_pending: bool = False  # MIG mode after the next GPU reset (nvmlDeviceSetMigMode)
    gis: dict[int, _GpuInstance] = field(default_factory=dict)  # GPU instances by id
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
    reading_key: tuple = ()  # (time to READING_DECIMALS, fault generation, process generation)
    reading: tuple[_load.Sample, Counters] | None = None


class NodeCore:
    """Node-wide state: scenario, seed, clock and time, GPUs, lock and change generations.

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
            g.acc = Counters.zero(g.spec.model.nvlink_links)
        self._fault_gen = 0
        self._boots = 0  # simulated reboots so far
        self._pods: dict[tuple[str, str], SimPod] = {(p.namespace, p.name): p for p in scenario.kubernetes.pods}
        self._declares_pods = bool(scenario.kubernetes.pods)
        self._generated_pods: tuple[SimPod, ...] = ()
        self._holders_cache: tuple[int, dict[int, SimContainer]] | None = None
        self._manual: dict[int, tuple[int, str, int, SimContainer | None]] = {}  # pid -> (gpu, name, bytes, owner)
        self._in_instance: dict[int, tuple[int, int]] = {}  # pid of _manual -> (GPU instance id, compute instance id)
        self._next_pid = _MANUAL_PID_BASE
        self._churn = 0
        self._proc_gen = 0
        self._proc_cache: tuple[tuple, list[dict]] | None = None
        self._by_gpu: dict[int, list[dict]] = {}
        self._memory_by_gpu: dict[int, int] = {}  # GPU -> bytes its processes hold (with _by_gpu)
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

    def _tick(self, t: float) -> int:
        return int(t // self.tick_s)

    @property
    def gpu_count(self) -> int:
        return len(self._gpus)

    def gpu(self, index: int) -> GpuSpec:
        return self._gpus[index].spec

    def _check_gpu(self, gpu: Any) -> int:
        if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < len(self._gpus):
            raise FaultError(f"gpu: got {gpu!r}; must be an integer in 0..{len(self._gpus) - 1}")
        return gpu

    # ---- provided by the parts (declared for the type checker; the parts come first in the MRO)
    def _fault(self, g: _Gpu, kind: str) -> dict | None:
        raise NotImplementedError

    def link_up(self, gpu: int, link: int) -> bool:
        raise NotImplementedError

    def _lost_by(self, g: _Gpu) -> str:
        raise NotImplementedError

    def _runs_job(self, gpu: int) -> bool:
        raise NotImplementedError

    def _current(self, g: _Gpu, tick: int) -> tuple[_load.Sample, _Rates]:
        raise NotImplementedError

    def _settle(self, g: _Gpu, t: float) -> None:
        raise NotImplementedError

    def reading(self, gpu: int, t: float | None = None) -> tuple[_load.Sample, Counters]:
        raise NotImplementedError

    def processes_on(self, gpu: int) -> list[dict]:
        raise NotImplementedError

    def process_memory_on(self, gpu: int) -> int:
        raise NotImplementedError

    def _mig_instance_check(self, gpu: int, gpu_instance: Any, compute_instance: Any) -> tuple[int, int] | None:
        raise NotImplementedError

    def _gi_memory_total(self, gpu: int, gi_id: int) -> int:
        raise NotImplementedError
