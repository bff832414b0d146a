"""SimulatedNode: the state of a fake GPU node (load, processes, counters, faults, events).

It knows nothing about NVML calling conventions (that is ``nvml.FakeNvmlLibrary``); it answers
"what would the driver report for GPU i now?" in NVML's units. It is composed of three parts
over a shared core (``state.NodeCore``):

- ``faults.FaultsPart``: inject, clear and list faults; the driver-side view they shape;
- ``counters.CountersPart``: per-tick readings with faults applied and the counters they
  integrate (see there for time, ticks and determinism);
- ``workload.WorkloadPart``: pods, containers and GPU processes;

and ``reboot()``, which touches all three as a real node reboot does.
"""

from __future__ import annotations

from .counters import CountersPart
from .faults import FaultsPart
from .state import Counters, MiB
from .workload import WorkloadPart

__all__ = ["SimulatedNode", "Counters", "MiB"]


class SimulatedNode(FaultsPart, CountersPart, WorkloadPart):
    """A simulated GPU node built from a scenario.

    ``SimulatedNode(scenario, seed=None, clock=time.time, load=None, tick_s=1.0)``: ``seed``
    fixes every random choice (None picks one); ``clock`` returns seconds (wall clock by default)
    and time 0 is its first reading; ``load`` overrides the scenario's load profile
    (``training``, ``busy``, ``idle``); ``tick_s`` is the sampling granularity in seconds.
    """

    @property
    def boots(self) -> int:
        """How many simulated reboots this node has gone through."""
        return self._boots

    def reboot(self) -> int:
        """Simulate a node reboot (power cycle and driver reload); returns the faults cleared.

        As on a real node: every injected fault ends (a lost GPU is back on the bus, modes and
        flags revert, a pending row remap is applied by the reset), the driver's counters restart
        from 0 (volatile ECC, energy, PCIe and NVLink traffic and error counters), and every
        process is gone (the load profile's job starts again, with new pids). What the GPU keeps
        in its InfoROM stays: aggregate ECC counts and the remapped-row counts. The node's event
        sets stay (the agent's process outlives the simulated reboot); the host side (boot id,
        /proc) is ``SimulatedHost.reboot``.
        """
        t = self.now()
        cleared = 0
        with self._lock:
            for g in self._gpus:
                self._settle(g, t)
                cleared += self._drop_faults(g, None)
                g.remap_pending = False
                g.remap_failure = False
                g.ecc_corr_aggregate_base += g.acc.ecc_corrected
                g.ecc_unc_volatile = 0
                g.acc = Counters.zero(g.spec.model.nvlink_links)
            self._boots += 1
            self._fault_gen += 1
            self._end_processes()
        return cleared
