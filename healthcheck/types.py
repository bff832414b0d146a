"""The health checker's vocabulary: findings from detectors, health states, the action ladder.

Detectors are pure functions (``healthcheck/detectors/``); they turn the sampler's snapshots and
the driver's XID events into ``Finding``s — "this fault is active on this GPU now, and why".
The state machine (``healthcheck/machine.py``) turns findings into a per-GPU ``GpuHealth`` with
hysteresis, and remembers what must survive a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtimekit.gpu.types import NodeSnapshot, XidEvent

# Severity of a fault: what it does to the GPU's health.
INFO = "info"  # recorded and exported, health unchanged
WARNING = "warning"  # the GPU is suspect: usable, but watch it (or fix it when idle)
CRITICAL = "critical"  # the GPU is unhealthy: place no new work on it
SEVERITIES = (INFO, WARNING, CRITICAL)

# The action ladder, mildest first (gpu-faults.md §6): what an operator or automation should do.
NONE = "none"
RESTART_APPLICATION = "restart_application"
DRAIN_AND_RESET_GPU = "drain_and_reset_gpu"
REBOOT_NODE = "reboot_node"
REPLACE_NODE = "replace_node"
ACTIONS = (NONE, RESTART_APPLICATION, DRAIN_AND_RESET_GPU, REBOOT_NODE, REPLACE_NODE)

# How a fault clears once its signal is gone.
CLEARS_WHEN_CLEAN = "clean_samples"  # after N samples without the signal (recoverable classes)
CLEARS_ON_RESET = "gpu_reset"  # only once a GPU reset (or a reboot) is observed: sticky
CLEARS_ON_REBOOT = "node_reboot"  # only once the node's boot id changed: sticky

# Health states of a GPU (and of the node, as the worst of its GPUs).
HEALTHY = "healthy"
SUSPECT = "suspect"
UNHEALTHY = "unhealthy"
RECOVERING = "recovering"
STATES = (HEALTHY, SUSPECT, UNHEALTHY, RECOVERING)


@dataclass(frozen=True, slots=True)
class Finding:
    """One active fault on one GPU, as a detector sees it at ``now``.

    ``fault`` is a stable snake_case class name (``ecc_uncorrectable``, ``nvlink_down``, …);
    ``evidence`` says what was seen, in words and numbers an operator can check; ``clears`` is
    one of the CLEARS_* rules. ``gpu_instance_id`` narrows it to a MIG instance when the fault is
    attributable to one.
    """

    gpu_index: int
    uuid: str
    fault: str
    severity: str
    action: str
    evidence: str
    clears: str
    gpu_instance_id: int | None = None


@dataclass(frozen=True, slots=True)
class DetectorInput:
    """What every detector sees: the newest snapshot, the XIDs since the last run, the time.

    ``previous`` is the snapshot before (None at the first run); ``expected_gpus`` is how many
    GPUs the node is known to have (remembered across restarts); ``config`` is the detector's own
    thresholds (commented data, ``healthcheck/thresholds.yaml``).
    """

    now: float
    snapshot: NodeSnapshot | None
    previous: NodeSnapshot | None
    xids: tuple[XidEvent, ...]
    expected_gpus: int
    config: Mapping[str, Any]


class Detector(Protocol):
    """A pure detector: (its previous state, the input) -> (its new state, active findings).

    No I/O and no clock: ``data.now`` is the time. The state is any immutable value the detector
    chooses (counts of consecutive samples, a window of readings), None at the first call.
    """

    name: str

    def __call__(self, state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]: ...


@dataclass(frozen=True, slots=True)
class ActiveFault:
    """A fault the state machine holds for a GPU (persisted for sticky ones)."""

    fault: str
    severity: str
    action: str
    evidence: str
    clears: str
    first_seen: float
    last_seen: float
    gpu_instance_id: int | None = None
    clean_samples: int = 0  # consecutive sampled evaluations without the signal (CLEARS_WHEN_CLEAN)

    @property
    def current(self) -> bool:
        """The signal is there now (or the fault is sticky): the fault sets the GPU's state."""
        return self.clean_samples == 0 or self.clears != CLEARS_WHEN_CLEAN


@dataclass(frozen=True, slots=True)
class GpuHealth:
    index: int
    uuid: str
    state: str
    faults: tuple[ActiveFault, ...] = ()
    since: float = 0.0  # when the GPU entered ``state``
    action: str = NONE  # the strongest action of its active faults

    @property
    def schedulable(self) -> bool:
        """Whether new work may be placed on the GPU (the device plugin and slicer read this)."""
        return self.state in (HEALTHY, SUSPECT, RECOVERING)


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """The node's verdict: the worst GPU state, and per GPU health."""

    evaluated_at: float
    state: str
    action: str
    gpus: tuple[GpuHealth, ...] = ()
    transitions_total: Mapping[tuple[str, str, str], int] = field(default_factory=dict)  # (uuid, from, to)
    fault_events_total: Mapping[tuple[str, str, str], int] = field(default_factory=dict)  # (uuid, fault, severity)
    detector_seconds: float = 0.0  # CPU the last evaluation took
    faults: tuple[ActiveFault, ...] = ()  # node-level faults (NVML down, GPUs missing, the checker failing)
