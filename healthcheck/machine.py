"""The per-GPU health state machine: findings in, health out, with hysteresis. Pure.

    healthy ──warning──▶ suspect ──critical──▶ unhealthy
       ▲                    │  signal gone          │ signal gone (clean-sample faults)
       │                    ▼                       ▼
       └──── N clean ── recovering ◀────────────────┘
                            │ signal back: suspect / unhealthy again

Rules (gpu-faults.md §6, §7):

- A CRITICAL finding makes the GPU unhealthy in the same evaluation — no confirmation delay, so an
  XID reaches the verdict as fast as the checker runs; confirmation ("power brake for 3 polls")
  is the detectors' business. A WARNING makes it suspect; an INFO fault is held and exported but
  changes nothing.
- A fault whose signal is gone clears by its rule: ``CLEARS_WHEN_CLEAN`` after ``clean_samples``
  consecutive *sampled* evaluations without it (the GPU is ``recovering`` meanwhile; a signal
  that comes back restarts the count, so a fault flapping faster than ``clean_samples`` never lets
  the GPU back to healthy); ``CLEARS_ON_RESET`` only once a reset of that GPU is observed (or the
  node rebooted); ``CLEARS_ON_REBOOT`` only once the boot id changed. Nothing else — in particular
  not an agent restart — clears a fault.
- Event-only evaluations (an XID between two samples) add and refresh faults but never count as a
  clean sample: only a new sample can say a signal is gone.
- Findings with ``gpu_index`` -1 are node-level (NVML down, fewer GPUs than expected, the checker
  failing); they follow the same rules and make the node suspect or unhealthy by severity.
- Records have a lifecycle. When ``inventory`` says the input's ``gpus`` are every GPU on the node
  (a new sample with NVML up), the record of a GPU absent from it is *retired* — once it is
  healthy with no fault held, at a new boot (boot id changed), or at once when another GPU now
  holds its index (a board replaced under RMA: a new UUID at the same index). A retired record is
  kept (persisted, flagged retired) but leaves the verdict, so each GPU index has exactly one
  record in ``node_health``; a GPU that comes back, or a finding for it, brings it back.

Everything here is plain data: ``step(state, input) -> Step``; time is ``input.now``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from runtimekit.healthcheck.types import (
    ACTIONS,
    CLEARS_ON_REBOOT,
    CLEARS_ON_RESET,
    CLEARS_WHEN_CLEAN,
    CRITICAL,
    HEALTHY,
    INFO,
    NONE,
    RECOVERING,
    SUSPECT,
    UNHEALTHY,
    WARNING,
    ActiveFault,
    Finding,
    GpuHealth,
    NodeHealth,
)

NODE = ""  # the uuid under which node-level faults and counters are kept
NODE_INDEX = -1
PLACEHOLDER = "unknown-gpu-"  # the reader's uuid for a GPU whose identity could not be read: holds no index
STATE_ORDER = {HEALTHY: 0, RECOVERING: 1, SUSPECT: 2, UNHEALTHY: 3}  # worse is bigger

FaultKey = tuple[str, "int | None"]  # (fault, gpu_instance_id)


@dataclass(frozen=True, slots=True)
class GpuRecord:
    index: int
    uuid: str
    state: str = HEALTHY
    since: float = 0.0
    faults: tuple[ActiveFault, ...] = ()
    retired: bool = False  # the GPU left the node; kept for the record, out of the verdict


@dataclass(frozen=True, slots=True)
class MachineState:
    """Everything the machine remembers (and the store persists)."""

    gpus: Mapping[str, GpuRecord] = field(default_factory=lambda: MappingProxyType({}))  # by uuid
    node: GpuRecord = field(default_factory=lambda: GpuRecord(NODE_INDEX, NODE))  # node-level faults
    transitions_total: Mapping[tuple[str, str, str], int] = field(default_factory=lambda: MappingProxyType({}))
    fault_events_total: Mapping[tuple[str, str, str], int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class MachineInput:
    """One evaluation's evidence.

    ``gpus`` are (index, uuid) of the GPUs in the snapshot (lost ones included; a GPU that left
    the snapshot keeps its record). ``sampled`` is False for an event-only evaluation (no new
    sample: absence of a finding proves nothing). ``resets`` are the uuids of GPUs with evidence
    of a GPU reset since the previous sample (counters that went backwards); ``boot_id_changed``
    means the node rebooted since the state was saved (a reboot resets every GPU).
    """

    now: float
    findings: tuple[Finding, ...] = ()
    gpus: tuple[tuple[int, str], ...] = ()
    sampled: bool = True
    resets: frozenset[str] = frozenset()
    boot_id_changed: bool = False
    clean_samples: int = 3
    inventory: bool = False  # ``gpus`` lists every GPU on the node (a sample with NVML up): absence means gone


@dataclass(frozen=True, slots=True)
class Transition:
    index: int
    uuid: str
    from_state: str
    to_state: str
    reason: str  # the faults that drove it ("xid_79: XID 79 …"), or what cleared

    def describe(self) -> str:
        who = "node" if self.uuid == NODE else f"GPU {self.index} ({self.uuid})"
        return f"{who} {self.from_state} → {self.to_state}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Step:
    state: MachineState
    transitions: tuple[Transition, ...] = ()
    new_faults: tuple[tuple[int, str, ActiveFault], ...] = ()  # (index, uuid, fault) that became active
    cleared: tuple[tuple[int, str, ActiveFault], ...] = ()  # (index, uuid, fault) that cleared
    retired: tuple[tuple[int, str, str], ...] = ()  # (index, uuid, why) of records retired now


def step(state: MachineState, data: MachineInput) -> Step:
    """Advance the machine by one evaluation."""
    by_gpu: dict[str, list[Finding]] = {}
    node_findings: list[Finding] = []
    index_of = {uuid: index for index, uuid in data.gpus}
    for finding in data.findings:
        if finding.gpu_index < 0 or not finding.uuid:
            node_findings.append(finding)
        else:
            by_gpu.setdefault(finding.uuid, []).append(finding)
            index_of.setdefault(finding.uuid, finding.gpu_index)

    records = dict(state.gpus)
    for uuid, index in index_of.items():
        if uuid not in records:
            records[uuid] = GpuRecord(index, uuid, HEALTHY, data.now)
        elif records[uuid].index != index or records[uuid].retired:
            records[uuid] = replace(records[uuid], index=index, retired=False)

    transitions: list[Transition] = []
    new_faults: list[tuple[int, str, ActiveFault]] = []
    cleared: list[tuple[int, str, ActiveFault]] = []
    events = dict(state.fault_events_total)
    counts = dict(state.transitions_total)

    def advance(record: GpuRecord, findings: list[Finding], reset: bool) -> GpuRecord:
        faults, added, gone = _merge(record.faults, findings, data, reset)
        for fault in added:
            key = (record.uuid, fault.fault, fault.severity)
            events[key] = events.get(key, 0) + 1
            new_faults.append((record.index, record.uuid, fault))
        cleared.extend((record.index, record.uuid, fault) for fault in gone)
        new_state = _state_of(faults, record.state)
        if new_state != record.state:
            transitions.append(Transition(record.index, record.uuid, record.state, new_state,
                                          _reason(faults, gone, new_state)))
            if record.uuid != NODE:
                key = (record.uuid, record.state, new_state)
                counts[key] = counts.get(key, 0) + 1
            return replace(record, state=new_state, since=data.now, faults=faults)
        return replace(record, faults=faults)

    for uuid in sorted(records, key=lambda u: (records[u].index, u)):
        if records[uuid].retired:
            continue
        reset = data.boot_id_changed or uuid in data.resets
        records[uuid] = advance(records[uuid], by_gpu.get(uuid, []), reset)
    node = advance(state.node, node_findings, data.boot_id_changed)
    retired = _retire(records, data, set(by_gpu)) if data.inventory else []

    return Step(
        MachineState(
            gpus=MappingProxyType(records),
            node=node,
            transitions_total=MappingProxyType(counts),
            fault_events_total=MappingProxyType(events),
        ),
        tuple(transitions),
        tuple(new_faults),
        tuple(cleared),
        tuple(retired),
    )


def _retire(records: dict[str, GpuRecord], data: MachineInput, signalled: set[str]) -> list[tuple[int, str, str]]:
    """Retire (in ``records``) the records of GPUs absent from a full inventory; see the module docstring."""
    present = {uuid for _, uuid in data.gpus}
    taken = {index: uuid for index, uuid in data.gpus if not uuid.startswith(PLACEHOLDER)}
    out = []
    for uuid, record in records.items():
        if record.retired or uuid in present or uuid in signalled:
            continue
        if data.boot_id_changed:
            why = "absent after a reboot"
        elif record.index in taken:
            why = f"GPU {taken[record.index]} now holds index {record.index} (the board was replaced)"
        elif record.state == HEALTHY and not record.faults:
            why = "absent from the node and healthy"
        else:
            continue
        records[uuid] = replace(record, retired=True, since=data.now)
        out.append((record.index, uuid, why))
    return out


def _key(fault: ActiveFault) -> FaultKey:
    return (fault.fault, fault.gpu_instance_id)


def _merge(
    held: tuple[ActiveFault, ...], findings: Iterable[Finding], data: MachineInput, reset: bool
) -> tuple[tuple[ActiveFault, ...], list[ActiveFault], list[ActiveFault]]:
    """(faults now held, faults that became active or changed severity, faults that cleared)."""
    faults: dict[FaultKey, ActiveFault] = {}
    gone: list[ActiveFault] = []
    for h in held:  # 1. what a reset or reboot clears (before this evaluation's findings)
        if (h.clears == CLEARS_ON_REBOOT and data.boot_id_changed) or (h.clears == CLEARS_ON_RESET and reset):
            gone.append(h)
        else:
            faults[_key(h)] = h
    before = dict(faults)
    seen: set[FaultKey] = set()
    added: dict[FaultKey, ActiveFault] = {}
    for f in findings:  # 2. this evaluation's findings: add or refresh
        key = (f.fault, f.gpu_instance_id)
        prior = faults.get(key)
        if key in seen and prior is not None and _rank(f.severity) <= _rank(prior.severity):
            continue  # two findings of one fault: keep the worse
        seen.add(key)
        faults[key] = ActiveFault(
            fault=f.fault, severity=f.severity, action=f.action, evidence=f.evidence, clears=f.clears,
            first_seen=prior.first_seen if prior else data.now, last_seen=data.now, gpu_instance_id=f.gpu_instance_id,
            fault_class=f.fault_class, schedulable=f.schedulable,
        )
        was = before.get(key)
        if was is None or was.severity != f.severity:
            added[key] = faults[key]
        else:
            added.pop(key, None)
    if data.sampled:  # 3. a new sample without the signal counts towards clearing
        for key, h in list(faults.items()):
            if key in seen or h.clears != CLEARS_WHEN_CLEAN:
                continue
            if h.clean_samples + 1 >= data.clean_samples:
                gone.append(h)
                del faults[key]
            else:
                faults[key] = replace(h, clean_samples=h.clean_samples + 1)
    ordered = tuple(sorted(faults.values(), key=lambda h: (-_rank(h.severity), h.fault, h.gpu_instance_id or -1)))
    return ordered, list(added.values()), gone


def _rank(severity: str) -> int:
    return {INFO: 0, WARNING: 1, CRITICAL: 2}.get(severity, 0)


def _state_of(faults: tuple[ActiveFault, ...], previous: str) -> str:
    current = {h.severity for h in faults if h.current}
    if CRITICAL in current:
        return UNHEALTHY
    if WARNING in current:
        return SUSPECT
    clearing = any(not h.current and h.severity != INFO for h in faults)
    if clearing and previous != HEALTHY:
        return RECOVERING
    return HEALTHY


def _reason(faults: tuple[ActiveFault, ...], gone: list[ActiveFault], new_state: str) -> str:
    if new_state in (UNHEALTHY, SUSPECT):
        wanted = CRITICAL if new_state == UNHEALTHY else WARNING
        return "; ".join(f"{h.fault}: {h.evidence}" for h in faults if h.current and h.severity == wanted)
    if new_state == RECOVERING:
        return "signal gone, clearing: " + ", ".join(
            f"{h.fault} ({h.clean_samples} clean)" for h in faults if not h.current)
    return "cleared: " + (", ".join(h.fault for h in gone) or "no active fault")


def strongest_action(actions: Iterable[str]) -> str:
    """The strongest action on the ladder (``types.ACTIONS``, mildest first)."""
    return max((a for a in actions if a in ACTIONS), key=ACTIONS.index, default=NONE)


def _action(faults: tuple[ActiveFault, ...]) -> str:
    """What to do now: the strongest action of the faults whose signal is there (or sticky)."""
    return strongest_action(h.action for h in faults if h.current)


def gpu_health(record: GpuRecord) -> GpuHealth:
    return GpuHealth(index=record.index, uuid=record.uuid, state=record.state, faults=record.faults,
                     since=record.since, action=_action(record.faults))


def node_health(state: MachineState, now: float, detector_seconds: float = 0.0) -> NodeHealth:
    """The node's verdict: the worst of its GPUs' states and of the node-level faults."""
    gpus = tuple(gpu_health(r) for r in sorted(state.gpus.values(), key=lambda r: (r.index, r.uuid)) if not r.retired)
    worst = max((state.node.state, *(g.state for g in gpus)), key=STATE_ORDER.__getitem__)
    return NodeHealth(
        evaluated_at=now, state=worst, action=strongest_action((_action(state.node.faults), *(g.action for g in gpus))),
        gpus=gpus, transitions_total=state.transitions_total, fault_events_total=state.fault_events_total,
        detector_seconds=detector_seconds, faults=state.node.faults,
    )
