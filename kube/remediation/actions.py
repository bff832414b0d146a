"""The remediation ladder: planning (pure) and the steps (I/O through NodeApi and aiohttp).

Steps are level-triggered: each looks at the node first and records what it found, so a step
retried after a crash does no harm, and a resolved alert only undoes what this service did
(never uncordons a node someone else cordoned; gpu-faults.md §3, NVIDIA/NVSentinel#1424).

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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from .config import RemediationConfig
from .journal import Action
from .ladders import steps_for
from .nodes import NodeApi
from .payload import Alert

log = logging.getLogger(__name__)


class StepFailed(Exception):
    """A step that must not be retried now (its result is journaled as failed, with ``result``)."""

    def __init__(self, message: str, result: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result = dict(result or {})


def plan(config: RemediationConfig, alert: Alert) -> tuple[str, list[str]] | None:
    """The node and the ordered steps an alert asks for, or None (pure).

    The ladder is chosen by the alert's action label alone (``ladders.py``); an alert without a
    node label, or whose action label is missing or not an action name, asks for nothing.
    """
    node = alert.labels.get(config.node_label, "")
    steps = steps_for(config.ladders, alert.labels.get(config.action_label, ""))
    if not node or not steps:
        return None
    return node, steps


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def render(template: Any, fields: Mapping[str, Any]) -> Any:
    """Fill a JSON template: a string exactly "{name}" becomes the value (lists stay lists)."""
    if isinstance(template, Mapping):
        return {k: render(v, fields) for k, v in template.items()}
    if isinstance(template, list):
        return [render(v, fields) for v in template]
    if isinstance(template, str):
        if template.startswith("{") and template.endswith("}") and template[1:-1] in fields:
            return fields[template[1:-1]]
        return template.format_map({k: v if isinstance(v, str) else ",".join(v) for k, v in fields.items()})
    return template


def replacement_body(config: RemediationConfig, action: Action, labels: Mapping[str, str]) -> Any:
    """The spare-node request: the template filled from the action and the alert's labels.

    ``gpu_uuids`` comes from the ``uuid`` label and ``gpu_indices`` from the ``gpu`` label (the
    agent's names, alerts/runtimekit.rules.yml; configurable as ``gpu_uuid_label`` and
    ``gpu_index_label``); both are lists, empty for node-level alerts that name no GPU.
    """
    fields = {"node": action.node, "gpu_uuids": _split(labels.get(config.gpu_uuid_label, "")),
              "gpu_indices": _split(labels.get(config.gpu_index_label, "")),
              "fault": labels.get(config.fault_label, ""), "fingerprint": action.fingerprint,
              "starts_at": action.starts_at}
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

    async def run(self, action: Action, labels: Mapping[str, str], siblings: list[Action]) -> dict[str, Any]:
        handler = getattr(self, f"_{action.kind}")
        return await handler(action, labels, siblings)

    async def _cordon(self, action: Action, labels, siblings) -> dict[str, Any]:
        node = await self.nodes.get_node(action.node)
        if node.unschedulable:
            return {"already_cordoned": True, "cordoned_by_us": False}
        await self.nodes.set_unschedulable(action.node, True)
        return {"already_cordoned": False, "cordoned_by_us": True}

    async def _taint(self, action: Action, labels, siblings) -> dict[str, Any]:
        node = await self.nodes.get_node(action.node)
        mine = taint(self.config)
        if any(t.get("key") == mine["key"] and t.get("effect") == mine["effect"] for t in node.taints):
            return {"already_tainted": True, "tainted_by_us": False}
        await self.nodes.set_taints(action.node, [*node.taints, mine], node.resource_version)
        return {"already_tainted": False, "tainted_by_us": True}

    async def _uncordon(self, action: Action, labels, siblings) -> dict[str, Any]:
        cordon = next((a for a in siblings if a.kind == "cordon"), None)
        if cordon is None or cordon.state != "done" or not (cordon.result or {}).get("cordoned_by_us"):
            return {"skipped": "the node was not cordoned by this service"}
        await self.nodes.set_unschedulable(action.node, False)
        return {"uncordoned": True}

    async def _untaint(self, action: Action, labels, siblings) -> dict[str, Any]:
        step = next((a for a in siblings if a.kind == "taint"), None)
        if step is None or step.state != "done" or not (step.result or {}).get("tainted_by_us"):
            return {"skipped": "the taint was not added by this service"}
        node = await self.nodes.get_node(action.node)
        key = self.config.taint_key
        kept = [t for t in node.taints if not (t.get("key") == key and t.get("effect") == "NoSchedule")]
        if len(kept) != len(node.taints):
            await self.nodes.set_taints(action.node, kept, node.resource_version)
        return {"untainted": True}

    async def _drain(self, action: Action, labels, siblings) -> dict[str, Any]:
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

    async def _replace(self, action: Action, labels, siblings) -> dict[str, Any]:
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
    """What a step would do, for the journal in dry-run mode."""
    would = {
        "cordon": f"PATCH node {action.node} spec.unschedulable=true (if not already)",
        "taint": f"add taint {config.taint_key}:NoSchedule to node {action.node}",
        "drain": (f"evict the pods on node {action.node} (not DaemonSet or mirror pods) through the Eviction "
                  f"API, retrying PodDisruptionBudget refusals for up to {config.drain.timeout_seconds} s"),
        "uncordon": f"PATCH node {action.node} spec.unschedulable=false (if cordoned by us)",
        "untaint": f"remove taint {config.taint_key} from node {action.node} (if added by us)",
        "replace": f"POST {config.replacement.url} Idempotency-Key {action.idempotency_key}",
    }[action.kind]
    result: dict[str, Any] = {"dry_run": True, "would": would}
    if action.kind == "replace":
        result["body"] = replacement_body(config, action, labels)
    return result
