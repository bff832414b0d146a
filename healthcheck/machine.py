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
  clean sample: only a new sample can say a signal is gone. Nor does a sample that could not read
  the signal: a GPU the detectors could not judge at all (``MachineInput.judged``: NVML down, the
  GPU lost or absent) keeps its clean-sample faults as they are, and so does a fault a detector
  marked ``UNREAD`` (``Finding.hold``: its reading unreadable in this sample) — a failed probe
  never counts as healthy (gpu-faults.md §6). A fault marked ``SEEN_AGAIN`` (its signal back, not
  yet for its confirming duration) restarts its count, as a finding would, without being raised
  anew.
- A fault raised in a MIG instance whose policy scopes it to the instance (``scope: instance``;
  ``ActiveFault.instance_scoped``) is held on the GPU's record (persisted, cleared by its rule like
  any other) but sets neither the GPU's state nor its action: the slice made of that instance
  carries it (healthcheck/slices.py). Card-wide faults (the policy's default scope) hold the card
  even when the event named an instance.
- Repairs that do not last escalate (``MachineInput.recurrence``, healthcheck/recurrence.py): a GPU's
  Nth reset or reboot within a window raises ``gpu_fault_recurring``; times in ``interventions``.
- Node-level findings (``Finding.node_level``: no GPU index, no UUID — NVML down, fewer GPUs than
  expected, the checker failing) go to the node's own record (``NodeRecord``, which has no GPU
  identity); they follow the same rules and make the node suspect or unhealthy by severity. Their
  event counts are kept apart (``node_fault_events_total``, by fault and severity).
- Records have a lifecycle. When ``inventory`` says the input's ``gpus`` are every GPU on the node
  (a new sample with NVML up), the record of a GPU absent from it is *retired* — once it is
  healthy with no fault held, at a new boot (boot id changed), or at once when another GPU now
  holds its index (a board replaced under RMA: a new UUID at the same index). A GPU whose UUID is
  unavailable is not in ``gpus`` (it has no identity to hold a record by) and holds no index. A retired record is
  kept (persisted, flagged retired) but leaves the verdict, so each GPU index has exactly one
  record in ``node_health``; a GPU that comes back, or a finding for it, brings it back.

Everything here is plain data: ``step(state, input) -> Step``; time is ``input.now``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

from runtimekit.healthcheck.recurrence import RecurrenceRule, recur
from runtimekit.healthcheck.resets import seen_after_reset
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
    SEEN_AGAIN,
    SUSPECT,
    UNHEALTHY,
    WARNING,
    ActiveFault,
    Finding,
    GpuHealth,
    NodeHealth,
)

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
    interventions: tuple[float, ...] = ()  # when its recent resets or reboots began (healthcheck/recurrence.py)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """The node's own record: its node-level faults and the state they give it (no GPU identity)."""

    state: str = HEALTHY
    since: float = 0.0
    faults: tuple[ActiveFault, ...] = ()


Record = TypeVar("Record", GpuRecord, NodeRecord)


@dataclass(frozen=True, slots=True)
class MachineState:
    """Everything the machine remembers (and the store persists)."""

    gpus: Mapping[str, GpuRecord] = field(default_factory=lambda: MappingProxyType({}))  # by uuid
    node: NodeRecord = field(default_factory=NodeRecord)  # node-level faults
    transitions_total: Mapping[tuple[str, str, str], int] = field(default_factory=lambda: MappingProxyType({}))
    # (uuid, fault, severity) of GPU faults; node-level faults by (fault, severity)
    fault_events_total: Mapping[tuple[str, str, str], int] = field(default_factory=lambda: MappingProxyType({}))
    node_fault_events_total: Mapping[tuple[str, str], int] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class MachineInput:
    """One evaluation's evidence.

    ``gpus`` are (index, uuid) of the GPUs in the snapshot whose UUID is known (lost ones included;
    a GPU that left the snapshot keeps its record). ``sampled`` is False for an event-only evaluation (no new
    sample: absence of a finding proves nothing). ``resets`` are the uuids of GPUs with evidence
    of a GPU reset since the previous sample (counters that went backwards), each with about when
    it happened (``healthcheck/resets.py``); ``boot_id_changed``
    means the node rebooted since the state was saved (a reboot resets every GPU). ``judged`` are
    the uuids of the GPUs whose readings the detectors judged in this sample (None: every GPU);
    only those count the sample as clean.
    """

    now: float
    findings: tuple[Finding, ...] = ()
    gpus: tuple[tuple[int, str], ...] = ()
    sampled: bool = True
    resets: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # uuid -> when (resets.py)
    again: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))  # resets.faults_seen_again
    boot_id_changed: bool = False
    clean_samples: int = 3
    inventory: bool = False  # ``gpus`` lists every GPU on the node (a sample with NVML up): absence means gone
    judged: frozenset[str] | None = None  # GPUs read in this sample (see above); None: all of them
    recurrence: RecurrenceRule | None = None  # None: interventions are not counted

    def judges(self, uuid: str | None) -> bool:
        """Whether this evaluation can count a clean sample for the record of ``uuid`` (None: the node)."""
        return self.sampled and (uuid is None or self.judged is None or uuid in self.judged)


def who(index: int | None, uuid: str | None) -> str:
    """How logs name a GPU, or the node (index and uuid None)."""
    return "node" if uuid is None else f"GPU {index} ({uuid})"


@dataclass(frozen=True, slots=True)
class Transition:
    index: int | None  # None (with uuid None): the node
    uuid: str | None
    from_state: str
    to_state: str
    reason: str  # the faults that drove it ("xid_79: XID 79 …"), or what cleared

    def describe(self) -> str:
        return f"{who(self.index, self.uuid)} {self.from_state} → {self.to_state}: {self.reason}"


FaultChange = tuple["int | None", "str | None", ActiveFault]  # (index, uuid, fault); None, None: the node


@dataclass(frozen=True, slots=True)
class Step:
    state: MachineState
    transitions: tuple[Transition, ...] = ()
    new_faults: tuple[FaultChange, ...] = ()  # (index, uuid, fault) that became active
    cleared: tuple[FaultChange, ...] = ()  # (index, uuid, fault) that cleared
    retired: tuple[tuple[int, str, str], ...] = ()  # (index, uuid, why) of records retired now


def step(state: MachineState, data: MachineInput) -> Step:
    """Advance the machine by one evaluation."""
    by_gpu: dict[str, list[Finding]] = {}
    node_findings: list[Finding] = []
    index_of = {uuid: index for index, uuid in data.gpus}
    for finding in data.findings:
        if finding.uuid is None or finding.gpu_index is None:
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
    new_faults: list[FaultChange] = []
    cleared: list[FaultChange] = []
    events = dict(state.fault_events_total)
    node_events = dict(state.node_fault_events_total)
    counts = dict(state.transitions_total)

    def advance(record: Record, findings: list[Finding], reset: bool) -> Record:
        index, uuid = (record.index, record.uuid) if isinstance(record, GpuRecord) else (None, None)
        faults, added, gone = merge_faults(record.faults, findings, data, reset, data.judges(uuid))
        for fault in added:
            if uuid is None:
                node_events[(fault.fault, fault.severity)] = node_events.get((fault.fault, fault.severity), 0) + 1
            else:
                key = (uuid, fault.fault, fault.severity)
                events[key] = events.get(key, 0) + 1
            new_faults.append((index, uuid, fault))
        cleared.extend((index, uuid, fault) for fault in gone)
        held = card_faults(faults)
        new_state = state_of(held, record.state)
        if new_state != record.state:
            transitions.append(Transition(index, uuid, record.state, new_state, reason_for(held, card_faults(gone), new_state)))
            if uuid is not None:
                key = (uuid, record.state, new_state)
                counts[key] = counts.get(key, 0) + 1
            return replace(record, state=new_state, since=data.now, faults=faults)
        return replace(record, faults=faults)

    for uuid in sorted(records, key=lambda u: (records[u].index, u)):
        if records[uuid].retired:
            continue
        reset = data.boot_id_changed or uuid in data.resets
        record, found = records[uuid], by_gpu.get(uuid, [])
        if uuid in data.resets and not data.boot_id_changed:
            found = [*found, *seen_after_reset(record.index, uuid, record.faults, data.again.get(uuid, ()))]
        if data.recurrence is not None:
            kept = [h for h in record.faults if not _cleared_by(h, data, reset)]
            interventions, found = recur(data.recurrence, record.index, uuid, record.interventions, kept, found, data.now)
            record = replace(record, interventions=interventions)
        records[uuid] = advance(record, found, reset)
    node = advance(state.node, node_findings, data.boot_id_changed)
    retired = _retire(records, data, set(by_gpu)) if data.inventory else []

    return Step(
        MachineState(
            gpus=MappingProxyType(records),
            node=node,
            transitions_total=MappingProxyType(counts),
            fault_events_total=MappingProxyType(events),
            node_fault_events_total=MappingProxyType(node_events),
        ),
        tuple(transitions),
        tuple(new_faults),
        tuple(cleared),
        tuple(retired),
    )


def _retire(records: dict[str, GpuRecord], data: MachineInput, signalled: set[str]) -> list[tuple[int, str, str]]:
    """Retire (in ``records``) the records of GPUs absent from a full inventory; see the module docstring."""
    present = {uuid for _, uuid in data.gpus}
    taken = {index: uuid for index, uuid in data.gpus}  # a GPU without a UUID is not in data.gpus: holds no index
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


def merge_faults(
    held: tuple[ActiveFault, ...], findings: Iterable[Finding], data: MachineInput, reset: bool, judged: bool
) -> tuple[tuple[ActiveFault, ...], list[ActiveFault], list[ActiveFault]]:
    """(faults now held, faults that became active or changed severity, faults that cleared): one
    record's faults (a GPU's, the node's, a slice's) after this evaluation's ``findings``. ``judged``:
    this evaluation read the record's signals, so a fault without a finding counts a clean sample."""
    faults: dict[FaultKey, ActiveFault] = {}
    gone: list[ActiveFault] = []
    for h in held:  # 1. what a reset or reboot clears (before this evaluation's findings)
        if _cleared_by(h, data, reset):
            gone.append(h)
        else:
            faults[_key(h)] = h
    before = dict(faults)
    seen: set[FaultKey] = set()
    unread: set[FaultKey] = set()
    added: dict[FaultKey, ActiveFault] = {}
    for f in findings:  # 2. this evaluation's findings: add or refresh
        key = (f.fault, f.gpu_instance_id)
        if f.hold:  # a mark: nothing raised; a fault held is not cleared by this sample
            unread.add(key)
            held_now = faults.get(key)
            if f.hold == SEEN_AGAIN and held_now is not None and held_now.clean_samples:
                faults[key] = replace(held_now, clean_samples=0)  # the signal is back: the count starts again
            continue
        prior = faults.get(key)
        if key in seen and prior is not None and _rank(f.severity) <= _rank(prior.severity):
            continue  # two findings of one fault: keep the worse
        seen.add(key)
        faults[key] = ActiveFault(
            fault=f.fault, severity=f.severity, action=f.action, evidence=f.evidence, clears=f.clears,
            first_seen=prior.first_seen if prior else data.now, last_seen=data.now, gpu_instance_id=f.gpu_instance_id,
            fault_class=f.fault_class, schedulable=f.schedulable, scope=f.scope,
        )
        was = before.get(key)
        if was is None or was.severity != f.severity:
            added[key] = faults[key]
        else:
            added.pop(key, None)
    if judged:  # 3. a new sample that read the signal and did not find it counts towards clearing
        for key, h in list(faults.items()):
            if key in seen or key in unread or h.clears != CLEARS_WHEN_CLEAN:
                continue
            if h.clean_samples + 1 >= data.clean_samples:
                gone.append(h)
                del faults[key]
            else:
                faults[key] = replace(h, clean_samples=h.clean_samples + 1)
    ordered = tuple(sorted(faults.values(), key=lambda h: (-_rank(h.severity), h.fault, h.gpu_instance_id or -1)))
    return ordered, list(added.values()), gone


def _cleared_by(fault: ActiveFault, data: MachineInput, reset: bool) -> bool:
    """Whether this evaluation's reboot (or, with ``reset``, the record's reset) clears ``fault``."""
    return (fault.clears == CLEARS_ON_REBOOT and data.boot_id_changed) or (fault.clears == CLEARS_ON_RESET and reset)


def _rank(severity: str) -> int:
    return {INFO: 0, WARNING: 1, CRITICAL: 2}.get(severity, 0)


def card_faults(faults: Iterable[ActiveFault]) -> tuple[ActiveFault, ...]:
    """The faults that hold the card: all but those scoped to one MIG instance (``instance_scoped``),
    which set no state, action or schedulability of the GPU's (their slice's, healthcheck/slices.py)."""
    return tuple(f for f in faults if not f.instance_scoped)


def state_of(faults: tuple[ActiveFault, ...], previous: str) -> str:
    """The state ``faults`` give a record that was ``previous``: critical -> unhealthy, warning ->
    suspect, a fault still clearing -> recovering (from a worse state), else healthy."""
    current = {h.severity for h in faults if h.current}
    if CRITICAL in current:
        return UNHEALTHY
    if WARNING in current:
        return SUSPECT
    clearing = any(not h.current and h.severity != INFO for h in faults)
    if clearing and previous != HEALTHY:
        return RECOVERING
    return HEALTHY


def reason_for(faults: tuple[ActiveFault, ...], gone: Iterable[ActiveFault], new_state: str) -> str:
    """Why a record entered ``new_state``, in words, from its faults and those that cleared."""
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
    """The GPU's verdict: its card faults set state and action; its instances' faults ride along."""
    held = card_faults(record.faults)
    return GpuHealth(index=record.index, uuid=record.uuid, state=record.state, faults=held,
                     since=record.since, action=_action(held),
                     instance_faults=tuple(f for f in record.faults if f.instance_scoped))


def node_health(state: MachineState, now: float, detector_seconds: float = 0.0) -> NodeHealth:
    """The node's verdict: the worst of its GPUs' states and of the node-level faults."""
    gpus = tuple(gpu_health(r) for r in sorted(state.gpus.values(), key=lambda r: (r.index, r.uuid)) if not r.retired)
    worst = max((state.node.state, *(g.state for g in gpus)), key=STATE_ORDER.__getitem__)
    return NodeHealth(
        evaluated_at=now, state=worst, action=strongest_action((_action(state.node.faults), *(g.action for g in gpus))),
        gpus=gpus, transitions_total=state.transitions_total, fault_events_total=state.fault_events_total,
        node_fault_events_total=state.node_fault_events_total, detector_seconds=detector_seconds,
        faults=state.node.faults,
    )
