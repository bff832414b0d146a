"""The detectors' contract: ``Finding``, ``DetectorInput``, ``Detector``. The verdict's vocabulary
(severities, the action ladder, states, ``GpuHealth``, ``NodeHealth``) lives in the base,
``runtimekit.state.health``, and is re-exported here for the detectors.

Detectors are pure functions (``healthcheck/detectors/``); they turn the sampler's snapshots and
the driver's XID events into ``Finding``s — "this fault is active on this GPU now, and why".
The state machine (``healthcheck/machine.py``) turns findings into a per-GPU ``GpuHealth`` with
hysteresis, and remembers what must survive a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from runtimekit.attribution.types import AttributionSnapshot
from runtimekit.gpu.types import NodeSnapshot, XidEvent
from runtimekit.state.health import (  # noqa: F401 - re-exported: the detectors' vocabulary
    ACTIONS,
    CARD,
    CLEARS_ON_REBOOT,
    CLEARS_ON_RESET,
    CLEARS_WHEN_CLEAN,
    CRITICAL,
    DRAIN_AND_RESET_GPU,
    HEALTHY,
    INFO,
    INSTANCE,
    NONE,
    REBOOT_NODE,
    RECOVERING,
    REPLACE_NODE,
    RESTART_APPLICATION,
    SCOPES,
    SEVERITIES,
    STATES,
    SUSPECT,
    UNHEALTHY,
    WARNING,
    ActiveFault,
    GpuHealth,
    NodeHealth,
    SliceHealth,
)
from runtimekit.state.slices import SliceTable

UNREAD = "unread"  # Finding.hold: the signal could not be read in this sample
SEEN_AGAIN = "seen_again"  # Finding.hold: the signal is back, not yet confirmed


@dataclass(frozen=True, slots=True)
class Finding:
    """One active fault on one GPU, as a detector sees it at ``now``.

    ``fault`` is a stable snake_case class name (``ecc_uncorrectable``, ``nvlink_down``, …);
    ``evidence`` says what was seen, in words and numbers an operator can check; ``clears`` is
    one of the CLEARS_* rules. ``gpu_instance_id`` names the MIG instance the fault was raised in;
    ``scope`` (the policy's) says whether it then holds only that instance (``INSTANCE``) or the card.
    ``slice_id`` puts it on a slice instead of the GPU (the slices detector's isolation findings:
    the slice machine holds them, healthcheck/slices.py). Severity, action, clears, ``fault_class``,
    ``schedulable`` and ``scope`` come from the fault policy (``healthcheck/policy.yaml``, through ``policy.finding``); detectors never choose
    them.

    ``gpu_index`` and ``uuid`` name the GPU; both are None for a node-level finding (NVML down,
    fewer GPUs than the node is known to have, the checker failing, a lost GPU whose identity was
    never read): build those with ``node_finding`` or ``Policy.node_finding``. A GPU-level finding
    always has a real UUID (a GPU whose UUID is unavailable is never named by a made-up one).

    ``hold`` turns it into a mark that raises nothing and only keeps a fault already held from
    clearing (the sample is not a clean one): ``UNREAD`` — this sample could not read the fault's
    signal (``evidence`` says which reading): the fault stays as it is, its clean-sample count
    unchanged, as a failed probe never counts as healthy (gpu-faults.md §6); ``SEEN_AGAIN`` — the
    signal is back but not yet for the duration that confirms it: its clean-sample count starts
    again, so a fault flapping faster than its confirmation never clears. Build them with
    ``detectors._common.unjudged`` and ``seen_again``.
    """

    gpu_index: int | None  # None: node-level (and ``uuid`` is None too)
    uuid: str | None  # None: node-level
    fault: str
    severity: str
    action: str
    evidence: str
    clears: str
    gpu_instance_id: int | None = None
    fault_class: str = ""
    schedulable: bool | None = None  # None: derived from the severity (critical: not schedulable)
    scope: str = CARD  # the policy's scope of a fault raised in a MIG instance
    slice_id: str | None = None  # a finding on a slice (the slices detector), not on the GPU
    hold: str = ""  # "": a finding that raises the fault; UNREAD or SEEN_AGAIN: a mark (see above)

    def __post_init__(self) -> None:
        if (self.gpu_index is None) != (self.uuid is None):
            raise ValueError(f"finding {self.fault}: gpu_index and uuid are both None (node-level) or both set, "
                             f"got {self.gpu_index!r} and {self.uuid!r}")
        if self.uuid == "":
            raise ValueError(f"finding {self.fault}: an empty uuid (a node-level finding has uuid None)")
        if self.hold not in ("", UNREAD, SEEN_AGAIN):
            raise ValueError(f"finding {self.fault}: hold {self.hold!r}; allowed: '', {UNREAD}, {SEEN_AGAIN}")

    @property
    def node_level(self) -> bool:
        """True for a finding on the node rather than on one GPU."""
        return self.uuid is None


@dataclass(frozen=True, slots=True)
class DetectorInput:
    """What every detector sees: the newest snapshot, the XIDs since the last run, the time.

    ``previous`` is the snapshot before (None at the first run); ``expected_gpus`` is how many
    GPUs the node is known to have (remembered across restarts); ``config`` is the detector's own
    thresholds (commented data, ``healthcheck/thresholds.yaml``). ``slices`` (the slices topic) and
    ``attribution`` (who owns each process) are what the slices detector measures slices by.
    ``repaired`` are the UUIDs of the GPUs reset since the previous sample (a counter only a reset
    sets back went backwards), or of every GPU in the snapshot once the node rebooted: what a
    detector counted towards a fault that such a repair clears starts again.
    """

    now: float
    snapshot: NodeSnapshot | None
    previous: NodeSnapshot | None
    xids: tuple[XidEvent, ...]
    expected_gpus: int
    config: Mapping[str, Any]
    slices: SliceTable = field(default_factory=SliceTable)
    attribution: AttributionSnapshot | None = None
    repaired: frozenset[str] = frozenset()


class Detector(Protocol):
    """A pure detector: (its previous state, the input) -> (its new state, active findings).

    No I/O and no clock: ``data.now`` is the time. The state is any immutable value the detector
    chooses (counts of consecutive samples, a window of readings), None at the first call.
    """

    name: str

    def __call__(self, state: Any, data: DetectorInput) -> tuple[Any, list[Finding]]: ...


