"""The remediation ladder: planning (pure) and the steps (I/O through NodeApi and aiohttp).

Steps are level-triggered: each looks at the node first and records what it found, so a step
retried after a crash does no harm, and a resolved alert only undoes what this service did
(never uncordons a node someone else cordoned; gpu-faults.md §3, NVIDIA/NVSentinel#1424). Which
alerts hold a node's cordon and taint is recorded on the Node, in the PATCH that adds them
(holds.py), so it survives a crash between that PATCH and the journal commit: a step run again
finds itself a holder, and uncordon and untaint read the Node, not the journal, to know whether
the mark is theirs. A mark another alert on the node still needs (it still fires, the journal
says) stays. Every write is computed from one read of the Node and guarded by its
resourceVersion; a Node changed meanwhile is read again, at most ``WRITE_TRIES`` times.

The optional drain step evicts every pod on the node through the Eviction API except DaemonSet
pods and mirror (static) pods, which an eviction cannot move. Evictions a PodDisruptionBudget
refuses are retried every ``drain.retry_seconds``; pods still blocked after
``drain.timeout_seconds`` fail the step (naming them), so the later steps do not run. Pods are
never force-deleted, and a resolved alert does not undo a drain (evicted pods are rescheduled by
their controllers, not by this service). The worker runs one action at a time, so a drain
waiting on a budget holds the queue for at most its timeout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from .config import RemediationConfig
from .holds import CORDON, CORDONED_BY, TAINTED_BY, Decision, Mark, claim, release, taint_mark
from .journal import UNDOES, Action, Planner, idempotency_key
from .ladders import steps_for
from .nodes import NodeApi, NodeChanged, NodeView
from .payload import Alert
from .template import render

log = logging.getLogger(__name__)
WRITE_TRIES = 5  # reads and PATCHes of one step while the Node keeps changing under it (409 Conflict)


class StepFailed(Exception):
    """A step that must not be retried now (its result is journaled as failed, with ``result``)."""

    def __init__(self, message: str, result: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result = dict(result or {})


def plan(config: RemediationConfig, alert: Alert) -> tuple[str, list[str]] | None:
    """The node and the ordered steps an alert asks for, or None (pure).

    The ladder is chosen by the alert's action label alone (``ladders.py``); an alert without a
    node label, or whose action label is missing or not an action name, asks for nothing
    (``unactionable`` tells those mistakes from an empty ladder).
    """
    node = alert.labels.get(config.node_label, "")
    steps = steps_for(config.ladders, alert.labels.get(config.action_label, ""))
    if not node or not steps:
        return None
    return node, steps


UNACTIONABLE = ("no_node_label", "unknown_action")  # the reasons unactionable() gives; /metrics shows each


def unactionable(config: RemediationConfig, alert: Alert) -> str | None:
    """Why a firing alert asks for nothing by mistake, or None (pure): ``"unknown_action"`` when its
    action label is not an action name, ``"no_node_label"`` when its ladder has steps but it names
    no node. An alert whose action's ladder is empty (``none``, say) asks for nothing on purpose."""
    if alert.status != "firing":
        return None
    steps = steps_for(config.ladders, alert.labels.get(config.action_label, ""))
    if steps is None:
        return "unknown_action"
    return "no_node_label" if steps and not alert.labels.get(config.node_label) else None


def collecting_plan(config: RemediationConfig, found: list[tuple[str, Alert]]) -> Planner:
    """``plan`` for ``Journal.receive``, which calls it for new alerts only (never for Alertmanager's
    re-sends), that also appends (reason, alert) to ``found`` for each alert ``unactionable`` finds:
    so each such alert is counted and reported once, after the journal commit."""
    def planner(alert: Alert) -> tuple[str, list[str]] | None:
        reason = unactionable(config, alert)
        if reason:
            found.append((reason, alert))
        return plan(config, alert)
    return planner


def warn_unactionable(config: RemediationConfig, found: Collection[tuple[str, Alert]], shown: int = 3) -> None:
    """One warning for the alerts of a notification without the node label, naming the first
    ``shown`` (alertname, fingerprint): nothing else would show them, and on a bare-metal install
    the label comes from the scrape config. An unknown action label has its own warning (server.py)."""
    missing = [alert for reason, alert in found if reason == "no_node_label"]
    if not missing:
        return
    named = ", ".join(f"{a.labels.get('alertname', '?')} (fingerprint {a.fingerprint})" for a in missing[:shown])
    more = f" and {len(missing) - shown} more" if len(missing) > shown else ""
    log.warning("%d alert(s) without the %r label name no node, so their ladder is not run (add the label in "
                "Prometheus' scrape config, or set node_label): %s%s", len(missing), config.node_label, named, more)


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def replacement_body(config: RemediationConfig, action: Action, labels: Mapping[str, str]) -> Any:
    """The spare-node request: the template filled from the action and the alert's labels.

    ``gpu_uuids`` comes from the ``uuid`` label and ``gpu_indices`` from the ``gpu`` label (the
    agent's names, alerts/runtimekit.rules.yml; configurable as ``gpu_uuid_label`` and
    ``gpu_index_label``); both are lists, empty for node-level alerts that name no GPU. ``fault``
    is the ``fault`` label (``fault_label``): the agent's fault, what the provisioning system must
    know (row_remap_failure, gpu_fault_recurring), not the alert that routed it; an alert without
    it (RuntimeKitNodeNVMLDown's rule aggregates it away) is named by its ``alertname``, so the
    field is never empty.
    """
    fields = {"node": action.node, "gpu_uuids": _split(labels.get(config.gpu_uuid_label, "")),
              "gpu_indices": _split(labels.get(config.gpu_index_label, "")),
              "fault": labels.get(config.fault_label) or labels.get("alertname", ""),
              "fingerprint": action.fingerprint, "starts_at": action.starts_at}
    return render(config.replacement.body_template, fields)


def taint(config: RemediationConfig) -> dict[str, str]:
    return {"key": config.taint_key, "value": "true", "effect": "NoSchedule"}


@dataclass
class Steps:
    config: RemediationConfig
    nodes: NodeApi
    session: aiohttp.ClientSession
    replacement_token: str | None = None
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    clock: Callable[[], float] = time.monotonic

    async def run(self, action: Action, labels: Mapping[str, str], needed: Collection[str] = ()) -> dict[str, Any]:
        """Run one step; ``needed`` (undo steps): the holder keys of the other alerts on the node
        that still fire and whose ladder has the step undone (journal.still_needed)."""
        handler = getattr(self, f"_{action.kind}")
        return await handler(action, labels, needed)

    def _mark(self, step: str) -> Mark:
        return CORDON if step == "cordon" else taint_mark(taint(self.config))

    async def _write(self, action: Action, decide: Callable[[NodeView], Decision]) -> dict[str, Any]:
        """Read the Node, decide, and write the decision in one PATCH guarded by the version read."""
        for _ in range(WRITE_TRIES):
            node = await self.nodes.get_node(action.node)
            decision = decide(node)
            if decision.write is None:
                return decision.result
            try:
                await self.nodes.patch_node(action.node, node.resource_version, decision.write.spec,
                                            decision.write.annotations)
            except NodeChanged:
                continue
            return decision.result
        raise StepFailed(f"{action.kind} of {action.node}: the node changed under each of {WRITE_TRIES} writes")

    async def _hold(self, action: Action, labels, needed) -> dict[str, Any]:
        mark = self._mark(action.kind)
        return await self._write(action, lambda node: claim(mark, node.spec, node.annotations.get(mark.annotation),
                                                            action.idempotency_key))

    async def _unhold(self, action: Action, labels, needed) -> dict[str, Any]:
        step = UNDOES[action.kind]
        mark = self._mark(step)
        key = idempotency_key(action.fingerprint, action.starts_at, action.node, step)
        return await self._write(action, lambda node: release(mark, node.spec, node.annotations.get(mark.annotation),
                                                              key, needed))

    _cordon = _taint = _hold
    _uncordon = _untaint = _unhold

    async def _drain(self, action: Action, labels, needed) -> dict[str, Any]:
        pods = await self.nodes.list_pods_on_node(action.node)
        skipped = [{"pod": f"{p.namespace}/{p.name}", "reason": "mirror pod" if p.is_mirror else "DaemonSet pod"}
                   for p in pods if p.is_mirror or p.owner_kind == "DaemonSet"]
        todo = [p for p in pods if not (p.is_mirror or p.owner_kind == "DaemonSet")]
        evicted: list[str] = []
        gone: list[str] = []
        started = self.clock()
        deadline = started + self.config.drain.timeout_seconds
        rounds = 0
        while True:
            rounds += 1
            blocked = []
            for pod in todo:
                outcome = await self.nodes.evict(pod.namespace, pod.name)
                name = f"{pod.namespace}/{pod.name}"
                if outcome == "evicted":
                    evicted.append(name)
                elif outcome == "gone":
                    gone.append(name)
                else:
                    blocked.append(pod)
            result: dict[str, Any] = {"evicted": evicted, "gone": gone, "skipped": skipped,
                      "blocked": [f"{p.namespace}/{p.name}" for p in blocked], "rounds": rounds,
                      "waited_seconds": round(self.clock() - started, 3)}
            if not blocked:
                return result
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise StepFailed(f"drain of {action.node}: {len(blocked)} pod(s) still blocked by a "
                                 f"PodDisruptionBudget after {self.config.drain.timeout_seconds} s: "
                                 f"{', '.join(result['blocked'])}", result)
            log.info("drain of %s: %d pod(s) blocked by a PodDisruptionBudget, retrying in %s s", action.node,
                     len(blocked), min(self.config.drain.retry_seconds, remaining))
            await self.sleep(min(self.config.drain.retry_seconds, remaining))
            todo = blocked

    async def _replace(self, action: Action, labels, needed) -> dict[str, Any]:
        url = self.config.replacement.url
        if not url:
            raise StepFailed("replacement.url is not configured")
        body = replacement_body(self.config, action, labels)
        headers = {"Idempotency-Key": action.idempotency_key, "Content-Type": "application/json"}
        if self.replacement_token:
            headers["Authorization"] = f"Bearer {self.replacement_token}"
        delay = self.config.replacement.backoff_seconds
        timeout = aiohttp.ClientTimeout(total=self.config.replacement.timeout_seconds)
        last = ""
        for attempt in range(1, self.config.replacement.max_attempts + 1):
            try:
                async with self.session.post(url, data=json.dumps(body), headers=headers, timeout=timeout) as resp:
                    text = (await resp.text())[:500]
                    if 200 <= resp.status < 300:
                        return {"status": resp.status, "attempts": attempt, "response": text}
                    if resp.status < 500 and resp.status not in (408, 429):
                        raise StepFailed(f"replacement webhook answered {resp.status}: {text}")
                    last = f"HTTP {resp.status}"
            except (TimeoutError, aiohttp.ClientError) as error:
                last = f"{type(error).__name__}: {error}"
            log.warning("replacement call for %s failed (%s), attempt %d", action.node, last, attempt)
            if attempt < self.config.replacement.max_attempts:
                await self.sleep(delay)
                delay *= 2
        raise StepFailed(f"replacement webhook failed after {self.config.replacement.max_attempts} attempts: {last}")


def dry_run_result(config: RemediationConfig, action: Action, labels: Mapping[str, str]) -> dict[str, Any]:
    """What a step would do, for the journal in dry-run mode (the replacement's body included)."""
    repl = config.replacement
    would = {
        "cordon": f"PATCH node {action.node} spec.unschedulable=true with annotation {CORDONED_BY} naming "
                  f"{action.idempotency_key} (if not already cordoned by someone else)",
        "taint": f"PATCH node {action.node}: add taint {config.taint_key}:NoSchedule with annotation {TAINTED_BY} "
                 f"naming {action.idempotency_key} (if not already tainted by someone else)",
        "drain": (f"evict the pods on node {action.node} (not DaemonSet or mirror pods) through the Eviction "
                  f"API, retrying PodDisruptionBudget refusals for up to {config.drain.timeout_seconds} s"),
        "uncordon": f"PATCH node {action.node} spec.unschedulable=false, removing annotation {CORDONED_BY} "
                    "(if it names this alert's cordon and no other firing alert on the node needs it)",
        "untaint": f"PATCH node {action.node}: remove taint {config.taint_key} and annotation {TAINTED_BY} "
                   "(if it names this alert's taint and no other firing alert on the node needs it)",
        "replace": (f"POST {repl.url or '(replacement.url is not set: the step would fail)'} with Idempotency-Key {action.idempotency_key} and the body below, on node "
                    f"{action.node}'s behalf; at most {repl.max_attempts} calls of {repl.timeout_seconds:g} s each, "
                    f"retried on 5xx, 408, 429 and timeouts"),
    }[action.kind]
    result: dict[str, Any] = {"dry_run": True, "would": would}
    if action.kind == "replace":
        result["body"] = replacement_body(config, action, labels)
    return result
