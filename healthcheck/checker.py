"""HealthChecker: runs the detectors on every new sample and every new XID, steps the state machine,
persists what must survive, and publishes the verdict in ``NodeState``.

The health component's task (``runtimekit.components.HealthComponent``). It never calls NVML:
polled checks read the sampler's snapshot, event checks the XIDs of the same view.

- ``state.watch(SAMPLE, XIDS)`` wakes the task after new samples and XIDs (from any thread); it
  evaluates whatever is new in that one view — a sample, XIDs, or both in one evaluation — one
  evaluation at a time. The verdict names the newest XID it includes (``NodeHealth.xid_sequence``):
  a checker restarted by the supervisor starts after it, so no XID is judged twice.
- The detectors run in a dedicated worker thread (a slow or stuck detector never blocks the loop
  or the default executor), bounded by ``timeout_seconds``. Detectors that time out, or a
  ``run_detectors`` that raises, are a failed probe, and a failed probe never reports "healthy":
  the node gets a node-level ``health_check_failed`` warning, nothing clears in that evaluation,
  and the detectors' state is kept as it was. While a timed-out evaluation is still running, no new
  one is started. One detector that raises (``DetectorsFailed``) fails only its own probe: what
  the others find is raised as usual, the node gets ``health_check_failed`` naming it, and nothing
  clears in that evaluation; with new XIDs, the evaluation's states and XIDs are kept back, so every
  detector is given them again (a failed driver detector must not lose an XID). A detector that
  raised on a state read from disk, before it ever ran on it, and ran again from a fresh one lost
  what that state held (a raise on a state it built itself is a failure as above): when it held
  durable parts (``detectors.DURABLE``: the GPUs known, XID bursts, the ECC baseline) the node and
  every GPU get ``health_state_unreadable``, exactly as for a state file that cannot be read;
  otherwise it is logged (as if the agent had restarted).
- An XID-only evaluation (no new sample) gives the detectors the latest snapshot as both
  ``snapshot`` and ``previous`` (``data.snapshot is data.previous``: no new sample, deltas are 0)
  and does not count as a clean sample for the machine.
- The verdict is persisted (atomically, only when it changed) *before* it is published, together
  with the detectors' states (``store.py`` says which parts are written at once, which at most
  every minute); both are read back at start.
- A sample with NVML up is a full inventory of the node: the machine retires the records of GPUs
  no longer there (``machine.py``), so a replaced board leaves one health series per index.
- A saved state that could not be read (``store.py``) leaves the node ``health_state_unreadable``;
  every GPU in each evaluation gets the same fault until the node reboots: not knowing which GPUs
  were bad, none is schedulable. While writes fail (the state directory turned read-only, full),
  the node holds the ``health_state_unwritable`` warning (GPUs stay judged as before).
- A reboot is noticed at start (the saved boot id differs) and while running: on a new sample, at
  most every ``boot_id_check_seconds``, the store reads the boot id again in its I/O thread
  (never on the loop). A change — the node rebooted under a running agent, or ``runtimekit sim
  reboot`` — is applied to that evaluation exactly as at start: faults that clear on a reboot or a
  GPU reset clear, and the records of GPUs gone are retired.
- Slices (``healthcheck/slices.py``): the slices detector's findings (``Finding.slice_id``) go to the
  slice machine, not the GPU machine; after each step the slice machine gives every slice of the
  view's slices topic its verdict (``NodeHealth.slices``) from those, its MIG instance's faults
  and its card's state. A new slice gets its verdict at the next evaluation (the next sample).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from runtimekit.gpu.types import NodeSnapshot, XidEvent, is_available
from runtimekit.healthcheck.detectors import DURABLE, DetectorsFailed, readable_gpus
from runtimekit.healthcheck.machine import STATE_ORDER, MachineInput, MachineState, Step, node_health, step, who
from runtimekit.healthcheck.policy import default_policy
from runtimekit.healthcheck.recurrence import RECURRING, RecurrenceRule
from runtimekit.healthcheck.resets import Counters, counters_of, faults_seen_again, reset_evidence, resets_since
from runtimekit.healthcheck.slices import SliceRecord, slice_usage, step_slices
from runtimekit.healthcheck.store import HealthStore, Loaded, unknown_finding, unwritable_finding
from runtimekit.healthcheck.thresholds import for_detector
from runtimekit.healthcheck.types import DetectorInput, Finding
from runtimekit.state import SAMPLE, XIDS, NodeState, NodeView
from runtimekit.state.health import STATE_UNREADABLE

log = logging.getLogger("runtimekit.health")

RunDetectors = Callable[[Mapping[str, Any], DetectorInput], "tuple[Mapping[str, Any], Sequence[Finding]]"]
CHECK_FAILED = "health_check_failed"
BOOT_ID_CHECK_SECONDS = 5.0  # how often (at most) a running checker reads the boot id again



@dataclass(frozen=True, slots=True)
class _Outcome:
    states: Mapping[str, Any]
    findings: tuple[Finding, ...]
    cpu_seconds: float
    failed: Mapping[str, str]  # detectors that raised even on a fresh state: name -> why
    dropped: Mapping[str, str]  # detectors whose given state was dropped: name -> why


class HealthChecker:
    """Evaluates health on every new sample and XID; see the module docstring."""

    def __init__(
        self,
        state: NodeState,
        run_detectors: RunDetectors,
        *,
        thresholds: Mapping[str, Mapping[str, Any]] | None = None,
        store: HealthStore | None = None,
        clean_samples: int = 3,
        timeout_seconds: float = 2.0,
        expected_gpus: int | None = None,
        clock: Callable[[], float] = time.time,
        boot_id_check_seconds: float = BOOT_ID_CHECK_SECONDS,
    ) -> None:
        self._state = state
        self._run_detectors = run_detectors
        self._thresholds = thresholds or {}
        machine = for_detector("machine", self._thresholds.get("machine"))
        self._recurrence = RecurrenceRule(machine["recurrence_interventions"], machine["recurrence_window_seconds"],
                                          default_policy().node_finding(RECURRING, ""))
        self._store = store
        self._clean_samples = clean_samples
        self._timeout = timeout_seconds
        self._configured_gpus = expected_gpus
        self._clock = clock
        self._boot_id_check_seconds = boot_id_check_seconds
        self._boot_id_checked_at = float("-inf")  # time.monotonic() of the last boot id read
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="runtimekit-health")
        self._io = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="runtimekit-health-store")
        self._machine = MachineState()
        self._slices: Mapping[str, SliceRecord] = {}  # the slice machine's records (healthcheck/slices.py)
        self._detector_states: Mapping[str, Any] = {}
        self._saved_counters: Mapping[str, Counters] = {}  # loaded: for the first sample (resets.py)
        self._xids_since_sample: list[XidEvent] = []  # judged since the last sample: what came after a reset
        # Detectors whose state was read from disk and has not yet been used by a run of theirs: only
        # such a state is dropped when its detector raises on it (a raise on a state built in
        # memory is a bug: a failed probe, ``_saved_states_only``).
        self._from_disk: set[str] = set()
        self._expected_seen = 0
        self._boot_id_changed = False
        self._previous: NodeSnapshot | None = None  # the last snapshot the detectors saw
        self._last_seen: NodeSnapshot | None = None  # the last snapshot an evaluation started for
        self._xid_done = 0  # XIDs up to this sequence were given to the detectors
        self._stuck: concurrent.futures.Future | None = None
        self._failing = ""
        self._loaded = False
        self.evaluations = 0

    @property
    def machine(self) -> MachineState:
        return self._machine

    @property
    def expected_gpus(self) -> int:
        return self._configured_gpus if self._configured_gpus is not None else self._expected_seen

    async def load(self) -> None:
        """Read the remembered state (in a thread); called by ``run`` if not called before."""
        if self._store is not None:
            loaded: Loaded = await asyncio.get_running_loop().run_in_executor(self._io, self._store.load)
            self._machine = loaded.state
            self._detector_states = dict(loaded.detectors)
            self._from_disk = {name for name, value in loaded.detectors.items() if value is not None}
            self._expected_seen = loaded.expected_gpus
            self._saved_counters = loaded.counters
            self._boot_id_changed = loaded.boot_id_changed
            self._boot_id_checked_at = time.monotonic()
            remembered = [f"GPU {r.index} ({r.uuid}) {r.state}" for r in loaded.state.gpus.values() if r.state != "healthy"]
            if remembered:
                log.info("remembered health: %s", ", ".join(remembered))
        published = self._state.view().health  # by an earlier checker of this agent, restarted since
        if published is not None:
            self._xid_done = max(self._xid_done, published.xid_sequence)
        self._loaded = True

    async def run(self) -> None:
        """Evaluate whenever NodeState has something new, until cancelled."""
        if not self._loaded:
            await self.load()
        async for view in self._state.watch(SAMPLE, XIDS):
            await self.evaluate(view)

    def close(self) -> None:
        """Stop the worker threads (a stuck detector's thread is left to finish on its own)."""
        self._worker.shutdown(wait=False, cancel_futures=True)
        self._io.shutdown(wait=True, cancel_futures=False)

    async def evaluate(self, view: NodeView | None = None) -> bool:
        """One evaluation of ``view`` (default: the latest) if it has a new sample or new XIDs; True
        when one ran."""
        view = view if view is not None else self._state.view()
        snapshot = view.snapshot
        if snapshot is None:
            return False  # XIDs wait in the log until the first sample says which GPUs there are
        new_xids = view.xids_after(self._xid_done)
        sampled = snapshot is not self._last_seen
        if not sampled and not new_xids:
            return False
        self._last_seen = snapshot
        now = self._clock()
        if snapshot.nvml_up:
            self._expected_seen = max(self._expected_seen, len(snapshot.gpus))
        if sampled:
            await self._check_boot_id()
        previous = self._previous if sampled else snapshot
        resets: dict[str, float] = {}
        if sampled:  # the first sample after a start is compared with the counters saved before it
            if self._previous is None:  # a reset seen here was made while the agent was stopped: before any XID it got
                resets = {uuid: self._saved_counters[uuid].at for uuid in resets_since(self._saved_counters, snapshot)}
            else:
                resets = reset_evidence(self._previous, snapshot)
        rebooted = frozenset(u for g in snapshot.gpus if is_available(u := g.uuid)) if self._boot_id_changed else frozenset()
        data = DetectorInput(
            now=now, snapshot=snapshot, previous=previous, xids=tuple(event for _, event in new_xids),
            expected_gpus=self.expected_gpus, config=self._thresholds, slices=view.slices, attribution=view.attribution,
            repaired=frozenset(resets) | rebooted,
        )
        outcome, failure = await self._detect(data)
        again: dict[str, frozenset[str]] = {}
        if outcome is not None:
            if not (outcome.failed and new_xids):
                self._detector_states = outcome.states
                self._from_disk -= set(outcome.states) - set(outcome.failed)
                if new_xids:
                    self._xid_done = new_xids[-1][0]
                self._xids_since_sample.extend(event for _, event in new_xids)
                if sampled:
                    self._previous, self._saved_counters = snapshot, {}
                    again = faults_seen_again(resets, self._xids_since_sample, lambda code: default_policy().xid(code).fault)
                    self._xids_since_sample = []
            else:  # a failed detector may be one that judges these XIDs: every detector is given
                # them again at the next evaluation, from the same states and the same previous
                # sample, which shows the same resets again
                resets = {}
            findings, cpu = (*outcome.findings, *self._partial(outcome, snapshot)), outcome.cpu_seconds
            sampled = sampled and not outcome.failed  # a failed probe clears nothing
        else:
            resets, sampled, cpu = {}, False, 0.0
            findings = (default_policy().node_finding(CHECK_FAILED, failure),)
        identified = tuple((g.index, uuid) for g in snapshot.gpus if is_available(uuid := g.uuid))
        on_slices = tuple(f for f in findings if f.slice_id is not None)
        findings = (*(f for f in findings if f.slice_id is None), *self._state_unknown(identified), *self._unwritable())
        machine_input = MachineInput(
            now=now, findings=findings, gpus=identified,
            sampled=sampled, resets=resets, again=again, boot_id_changed=self._boot_id_changed,
            clean_samples=self._clean_samples,
            inventory=sampled and snapshot.nvml_up, judged=frozenset(uuid for uuid, _ in readable_gpus(snapshot)),
            recurrence=self._recurrence,
        )
        result = step(self._machine, machine_input)
        self._boot_id_changed = False
        self._machine = result.state
        usage = {i: slice_usage(s, snapshot, view.attribution) for i, s in view.slices.slices.items()}
        sliced = step_slices(self._slices, view.slices, on_slices, result.state, machine_input, usage)
        self._slices = sliced.records
        _log_step(result, sliced.transitions)
        await self._persist()
        self._state.publish_health(replace(node_health(result.state, now, cpu), xid_sequence=self._xid_done,
                                           slices=sliced.health))
        self.evaluations += 1
        return True

    def _partial(self, outcome: _Outcome, snapshot: NodeSnapshot) -> tuple[Finding, ...]:
        """What failed detectors add (module docstring): ``health_check_failed`` naming those that
        raised; ``health_state_unreadable`` for the node and every GPU when a durable state was dropped."""
        found: list[Finding] = []
        if outcome.failed:
            found.append(default_policy().node_finding(CHECK_FAILED, self._failing))
        lost = sorted(name for name in outcome.dropped if name in DURABLE)
        if lost:
            evidence = (f"the saved state of the {', '.join(lost)} detector could not be used "
                        f"({'; '.join(outcome.dropped[name] for name in lost)}): GPUs known bad may be among these")
            found.append(unknown_finding(None, None, evidence))
            found += [unknown_finding(g.index, uuid, evidence) for g in snapshot.gpus if is_available(uuid := g.uuid)]
        return tuple(found)

    def _state_unknown(self, identified: tuple[tuple[int, str], ...]) -> tuple[Finding, ...]:
        """While the node holds ``health_state_unreadable`` (its saved state could not be read,
        ``store.py``) and no reboot is seen in this evaluation, every GPU present is unknown too: not
        schedulable, cleared by the same reboot that clears the node's."""
        held = next((f for f in self._machine.node.faults if f.fault == STATE_UNREADABLE), None)
        if held is None or self._boot_id_changed:
            return ()
        return tuple(unknown_finding(index, uuid, held.evidence) for index, uuid in identified)

    def _unwritable(self) -> tuple[Finding, ...]:
        """The node-level ``health_state_unwritable`` while the last write failed (seen by the
        evaluation after it); it clears by clean samples once writes succeed again."""
        why = self._store.write_error if self._store is not None else ""
        return (unwritable_finding(why),) if why else ()

    async def _check_boot_id(self) -> None:
        """Read the boot id again (in the store's I/O thread) if ``boot_id_check_seconds`` passed
        since the last read; a change is applied by the next step, as a change found at load is."""
        if self._store is None or time.monotonic() - self._boot_id_checked_at < self._boot_id_check_seconds:
            return
        self._boot_id_checked_at = time.monotonic()
        # check_boot_id handles OSError itself; anything else is a bug, logged by _in_io
        if await self._in_io("reading the boot id", "trying again later", logging.WARNING, self._store.check_boot_id):
            self._boot_id_changed = True

    async def _detect(self, data: DetectorInput) -> tuple[_Outcome | None, str]:
        """Run the detectors in the worker thread within the timeout: (outcome, "") or (None, why)."""
        if self._stuck is not None and not self._stuck.done():
            return None, self._fail(f"an evaluation has been running for more than {self._timeout:g} s")
        self._stuck = None
        states = self._detector_states

        def job() -> _Outcome:
            started = time.thread_time()
            try:
                new_states, findings = self._run_detectors(states, data)
            except DetectorsFailed as partial:
                return _Outcome(partial.states, tuple(partial.findings), time.thread_time() - started,
                                partial.failed, partial.dropped)
            return _Outcome(dict(new_states), tuple(findings), time.thread_time() - started, {}, {})

        future = self._worker.submit(job)
        # asyncio.wait, not wait_for: Python 3.11's wait_for can swallow a cancellation that
        # arrives as the future completes, and this task must stop when its context says so.
        wrapped = asyncio.wrap_future(future)
        done, _ = await asyncio.wait((wrapped,), timeout=self._timeout)
        if not done:
            wrapped.add_done_callback(_consume)
            self._stuck = future
            return None, self._fail(f"the detectors did not finish within {self._timeout:g} s")
        try:
            outcome = self._saved_states_only(wrapped.result(), states)
        except Exception as error:  # a detector bug: a failed probe, not a crashed agent
            if not self._failing:
                log.error("health detectors failed", exc_info=error)
            return None, self._fail(f"the detectors failed: {type(error).__name__}: {error}")
        for name, why in outcome.dropped.items():
            log.warning("health detector %s could not use its saved state (%s): it started again from a fresh one%s",
                        name, why, "; what it held is lost, so every GPU is unknown until a reboot" if name in DURABLE else "")
        if outcome.failed:
            self._fail("the " + ", ".join(f"{name} detector failed: {why}" for name, why in outcome.failed.items()))
        elif self._failing:
            log.info("health detectors recovered")
            self._failing = ""
        return outcome, ""

    def _saved_states_only(self, outcome: _Outcome, given: Mapping[str, Any]) -> _Outcome:
        """``outcome`` with a dropped state that was not read from disk (``_from_disk``) counted as a
        failure instead, its state kept as given: a detector that raises on the state it built
        itself has a bug, and losing a durable state to a bug must not make every GPU unknown."""
        in_memory = {name: why for name, why in outcome.dropped.items() if name not in self._from_disk}
        if not in_memory:
            return outcome
        states = {**outcome.states, **{name: given.get(name) for name in in_memory}}
        dropped = {name: why for name, why in outcome.dropped.items() if name not in in_memory}
        return replace(outcome, states=states, failed={**outcome.failed, **in_memory}, dropped=dropped)

    def _fail(self, why: str) -> str:
        if self._failing != why:
            log.error("health evaluation failed: %s", why)
        self._failing = why
        return why

    async def _persist(self) -> None:
        if self._store is None:
            return
        # save() handles OSError itself; anything else is a bug, logged by _in_io
        await self._in_io("writing the health state", "publishing anyway", logging.ERROR,
                          self._store.save, self._machine, self._expected_seen, self._detector_states,
                          counters_of(self._previous) if self._previous is not None else self._saved_counters)

    async def _in_io(self, what: str, then: str, late_level: int, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the store's I/O thread, waited for at most ``timeout``: its result, or
        None when it took longer (logged at ``late_level``, saying ``then``) or raised (logged)."""
        future = asyncio.get_running_loop().run_in_executor(self._io, fn, *args)
        done, _ = await asyncio.wait((future,), timeout=self._timeout)
        if not done:
            future.add_done_callback(_consume)
            log.log(late_level, "%s took more than %g s; %s", what, self._timeout, then)
            return None
        if future.exception() is not None:
            log.error("%s failed", what, exc_info=future.exception())
            return None
        return future.result()


def _consume(future: asyncio.Future) -> None:
    """Retrieve the outcome of a future nobody awaits any more (no "never retrieved" warnings)."""
    if not future.cancelled():
        future.exception()


def _log_step(result: Step, slice_transitions: tuple[str, ...]) -> None:
    for index, uuid, fault in result.new_faults:
        log.info("%s: %s %s active (%s; clears: %s): %s", who(index, uuid), fault.severity, fault.fault,
                 fault.action, fault.clears, fault.evidence)
    for index, uuid, fault in result.cleared:
        log.info("%s: %s cleared", who(index, uuid), fault.fault)
    for index, uuid, why in result.retired:
        log.info("GPU %d (%s) retired: %s", index, uuid, why)
    for transition in result.transitions:
        worse = STATE_ORDER[transition.to_state] > STATE_ORDER[transition.from_state]
        log.log(logging.WARNING if worse else logging.INFO, "%s", transition.describe())
    for line in slice_transitions:
        log.info("%s", line)
