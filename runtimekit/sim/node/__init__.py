"""SimulatedNode: the state of a fake GPU node (load, processes, counters, faults, events, MIG).

It knows nothing about NVML calling conventions (that is ``nvml.FakeNvmlLibrary``); it answers
"what would the driver report for GPU i now?" in NVML's units. It is composed of four parts
over a shared core (``state.NodeCore``):

- ``faults.FaultsPart``: inject, clear and list faults; the driver-side view they shape;
- ``counters.CountersPart``: per-tick readings with faults applied and the counters they
  integrate (see there for time, ticks and determinism);
- ``workload.WorkloadPart``: pods, containers and GPU processes;
- ``mig.MigPart``: MIG mode, GPU and compute instances, MIG devices;

and ``reset_gpu()`` and ``reboot()``, which touch all four as a real GPU reset and node reboot do.
"""

from __future__ import annotations

from typing import Any

from ..faults import FaultError
from .counters import CountersPart
from .faults import FaultsPart
from .mig import MigError, MigPart
from .state import Counters, MiB, _Gpu
from .workload import WorkloadPart

__all__ = ["SimulatedNode", "Counters", "MiB", "MigError"]


class SimulatedNode(FaultsPart, CountersPart, WorkloadPart, MigPart):
    """A simulated GPU node built from a scenario.

    ``SimulatedNode(scenario, seed=None, clock=time.time, load=None, tick_s=1.0)``: ``seed``
    fixes every random choice (None picks one); ``clock`` returns seconds (wall clock by default)
    and time 0 is its first reading; ``load`` overrides the scenario's load profile
    (``training``, ``busy``, ``idle``); ``tick_s`` is the sampling granularity in seconds.
    GPUs whose scenario entry says ``mig: {enabled: true, ...}`` start in MIG mode with those
    instances.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._start_mig()

    @property
    def boots(self) -> int:
        """How many simulated reboots this node has gone through."""
        return self._boots

    def reboot(self) -> int:
        """Simulate a node reboot (power cycle and driver reload); returns the faults cleared.

        As on a real node: every injected fault ends (a lost GPU is back on the bus, modes and
        flags revert, a pending row remap and a pending MIG mode are applied by the reset, MIG
        instances are gone), the driver's counters restart from 0 (volatile ECC, energy, PCIe and
        NVLink traffic and error counters), and every process is gone (the load profile's job starts again, with new pids). What the GPU keeps
        in its InfoROM stays: aggregate ECC counts, the remapped-row counts and the row-remap
        failure flag (nvmlDeviceGetRemappedRows' failureOccurred: a remap ever failed). The node's event
        sets stay (the agent's process outlives the simulated reboot); the host side (boot id,
        /proc) is ``SimulatedHost.reboot``.
        """
        t = self.now()
        cleared = 0
        with self._lock:
            for g in self._gpus:
                cleared += self._reset(g, t)
            self._boots += 1
            self._fault_gen += 1
            self._end_processes()
        return cleared

    def reset_gpu(self, gpu: int) -> int:
        """Simulate a reset of one GPU (``nvidia-smi -r``); returns the faults cleared.

        What a reboot does to every GPU, done to this one: its faults end, a pending row remap and
        a pending MIG mode are applied, every MIG instance is gone, its volatile counters restart
        from 0 (energy, PCIe and NVLink traffic and errors, volatile ECC; aggregate ECC, remapped
        rows and the remap failure flag stay in the InfoROM) and the processes started on it end.
        The load profile's job, like a training job restarting from its checkpoint, runs on.

        A GPU off the bus (``gpu-lost``, XID 79) cannot be reset: ``nvidia-smi -r`` fails on a
        device the driver cannot reach, and only a reboot brings it back (gpu-faults.md §2.3:
        XID 79 => RESTART_BM). FaultError naming ``gpu`` then, and nothing changes.
        """
        gpu = self._check_gpu(gpu)
        t = self.now()
        with self._lock:
            self.check_resettable(gpu)
            cleared = self._reset(self._gpus[gpu], t)
            self._end_processes_on(gpu)
            self._fault_gen += 1
        return cleared

    def check_resettable(self, gpu: int) -> None:
        """FaultError naming ``gpu`` when GPU ``gpu`` is off the bus, so a reset cannot reach it."""
        with self._lock:
            cause = self._lost_by(self._gpus[self._check_gpu(gpu)])
        if cause:
            raise FaultError(f"gpu: GPU {gpu} is off the bus ({cause}); it cannot be reset (nvidia-smi -r fails "
                             "on a GPU the driver cannot reach): it needs a node reboot")

    def _reset(self, g: _Gpu, t: float) -> int:
        """Reset one GPU's driver-side state (lock held); returns the faults cleared."""
        self._settle(g, t)
        self._burn_in(g)
        cleared = self._drop_faults(g, None)
        g.remap_pending = False
        g.ecc_corr_aggregate_base += g.acc.ecc_corrected
        g.ecc_unc_volatile = 0
        g.acc = Counters.zero(g.spec.model.nvlink_links)  # _settle left acc_tick and seg_start at t
        self._mig_reset(g)
        return cleared
