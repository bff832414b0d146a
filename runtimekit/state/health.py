"""The health verdict's vocabulary, shared by every room: severities, the action ladder, how a
fault clears, GPU states, and the verdict types the health checker publishes.

The health checker (``runtimekit.healthcheck``) produces these; the exporter, the slicer, the
device plugin and the remediation service read them. They live in the base so that no room
imports another to speak of health (../ARCHITECTURE.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

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

# Times in a verdict are unix seconds (UTC) from the epoch to 2100-01-01: the state file is read
# back with this rule (anything else is an unreadable entry) and the health API renders by it.
LATEST_TIME = 4_102_444_800.0  # 2100-01-01T00:00:00Z

# What a fault raised in a MIG GPU instance holds (the fault policy's ``scope``): the whole card
# (lost card, uncorrectable ECC, row-remap failure, NVLink, the card's firmware) or only that
# instance — then it sets the state of the instance's slice, never the card's (docs/health.md,
# "Slices").
CARD = "card"
INSTANCE = "instance"
SCOPES = (CARD, INSTANCE)


def plausible_time(value: object) -> bool:
    """Whether ``value`` is a time a verdict can hold: a finite number of unix seconds in
    [0, ``LATEST_TIME``) — not NaN, not infinite, not before 1970, not past 2100, not a bool."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value < LATEST_TIME)


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
    fault_class: str = ""  # the fault policy's class (memory, nvlink, thermal, power, ...); "" if unknown
    schedulable: bool | None = None  # the policy's word; None: derived from the severity (critical: no)
    scope: str = CARD  # the policy's scope: INSTANCE faults with a gpu_instance_id hold only that instance

    @property
    def instance_scoped(self) -> bool:
        """Held by one MIG instance (and its slice), not by the card: the policy scopes the fault to
        the instance and the event named one."""
        return self.scope == INSTANCE and self.gpu_instance_id is not None

    @property
    def current(self) -> bool:
        """The signal is there now (or the fault is sticky): the fault sets the GPU's state."""
        return self.clean_samples == 0 or self.clears != CLEARS_WHEN_CLEAN

    @property
    def keeps_schedulable(self) -> bool:
        """Whether the GPU may take new work while this fault is held (healthcheck/policy.yaml)."""
        return self.schedulable if self.schedulable is not None else self.severity != CRITICAL


@dataclass(frozen=True, slots=True)
class GpuHealth:
    index: int
    uuid: str
    state: str
    faults: tuple[ActiveFault, ...] = ()
    since: float = 0.0  # when the GPU entered ``state``
    action: str = NONE  # the strongest action of its active faults
    # Faults held by the GPU's MIG instances (``ActiveFault.instance_scoped``): they set neither the
    # GPU's state, action nor schedulability; the slice made of the instance carries them.
    instance_faults: tuple[ActiveFault, ...] = ()

    @property
    def schedulable(self) -> bool:
        """Whether new work may be placed on the GPU (the device plugin and slicer read this): its
        state allows it and every fault whose signal is there keeps it schedulable by the policy."""
        return self.state in (HEALTHY, SUSPECT, RECOVERING) and all(
            f.keeps_schedulable for f in self.faults if f.current)


@dataclass(frozen=True, slots=True)
class SliceHealth:
    """One slice's verdict (``runtimekit.state.slices.Slice``; computed by healthcheck/slices.py).

    ``faults`` are the slice's own: the faults its MIG instance holds (``gpu_instance_id``) and the
    isolation findings on it (``slice_memory_over_quota``, ``slice_compute_over_share``). ``state``
    is the worse of what those give and its card's state: a slice is never healthier than its card,
    whose faults stay on the card (``GpuHealth``). ``memory_used_bytes`` is what the slice's
    processes hold on the card (bytes) and ``utilization`` their share of its SM time (ratio 0..1):
    None where it cannot be measured (a TDM slice of a free owner, MIG's per-process SM time)."""

    id: str
    gpu_index: int
    gpu_uuid: str
    gpu_instance_id: int | None
    state: str
    faults: tuple[ActiveFault, ...] = ()
    since: float = 0.0  # when the slice entered ``state`` (since the agent started: not persisted)
    action: str = NONE  # the strongest action of its own faults whose signal is there
    memory_used_bytes: int | None = None
    utilization: float | None = None


# Node-level faults of the health state file (raised by healthcheck/store.py), named here because
# readiness depends on one of them.
STATE_UNREADABLE = "health_state_unreadable"  # the saved state could not be read: which GPUs were bad is unknown
STATE_UNWRITABLE = "health_state_unwritable"  # the last write of the health state failed


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """The node's verdict: the worst GPU state, and per GPU health.

    Counters are kept per GPU (by UUID) and, for node-level faults, per node: the node is never
    named by a GPU identity (no index, no UUID)."""

    evaluated_at: float
    state: str
    action: str
    gpus: tuple[GpuHealth, ...] = ()
    transitions_total: Mapping[tuple[str, str, str], int] = field(default_factory=dict)  # GPU: (uuid, from, to)
    fault_events_total: Mapping[tuple[str, str, str], int] = field(default_factory=dict)  # GPU: (uuid, fault, severity)
    detector_seconds: float = 0.0  # CPU the last evaluation took
    faults: tuple[ActiveFault, ...] = ()  # node-level faults (NVML down, GPUs missing, the checker failing)
    node_fault_events_total: Mapping[tuple[str, str], int] = field(default_factory=dict)  # node: (fault, severity)
    slices: tuple[SliceHealth, ...] = ()  # one per slice of the slices topic; they never set the node's state
    # The newest XID (NodeView.xids sequence) this verdict includes: a restarted checker starts
    # after it, so XIDs already judged are never judged twice.
    xid_sequence: int = 0
