"""Safety decisions, pure: the cluster-wide circuit breaker and the per-node cooldown.

Time is passed in (seconds since the epoch); nothing here reads a clock or the journal.
The breaker follows Cluster API MHC ``maxUnhealthy`` and NVSentinel's breaker (gpu-faults.md §3):
once it opens it stays open until a person resets it (``journal.reset_breaker``).

Two rules open it, counting distinct nodes actioned within the window, the candidate included:
more than ``max_nodes`` nodes, whatever the cluster's size; or more than ``max_percent`` of the
cluster's nodes, but only from ``min_nodes`` nodes on. Without that floor the percentage alone
refuses the first node of any cluster of fewer than 100 / max_percent nodes (one node of a
4-node cluster is 25 %), so the service could never act on a small cluster.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    max_nodes: int  # more distinct nodes actioned within the window opens the breaker
    max_percent: float  # more than this share (0..100) of the cluster's nodes opens it ...
    window_seconds: float
    min_nodes: int = 1  # ... once at least this many nodes are counted (1: no floor)


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed: bool
    reason: str  # "" when allowed
    opens_breaker: bool = False


def breaker_verdict(
    policy: BreakerPolicy,
    node: str,
    now: float,
    actioned: Iterable[tuple[str, float]],
    total_nodes: int,
    breaker_open: bool,
) -> Verdict:
    """May ``node`` be actioned now? ``actioned``: (node, time) of earlier disruptive actions.

    A node already actioned within the window continues its ladder (it adds no new node).
    ``total_nodes`` 0: the cluster's size is not known, and the percentage rule is not applied.
    """
    if breaker_open:
        return Verdict(False, "circuit breaker is open (reset it with `runtimekit remediate reset-breaker`)")
    recent = _recent(policy, now, actioned)
    if node in recent:
        return Verdict(True, "")
    count = len(recent) + 1
    if count > policy.max_nodes:
        return Verdict(False, f"circuit breaker opened: {count} nodes within {policy.window_seconds:g}s "
                              f"exceeds max_nodes {policy.max_nodes}", True)
    if count >= policy.min_nodes and total_nodes > 0 and 100.0 * count / total_nodes > policy.max_percent:
        return Verdict(False, f"circuit breaker opened: {count} of {total_nodes} nodes within "
                              f"{policy.window_seconds:g}s exceeds max_percent {policy.max_percent:g}", True)
    return Verdict(True, "")


def needs_cluster_size(policy: BreakerPolicy, node: str, now: float, actioned: Iterable[tuple[str, float]]) -> bool:
    """Can the percentage rule decide about ``node`` now, so that the cluster's node count (a
    Kubernetes call) is needed? Not for a node already actioned within the window, not below
    ``min_nodes`` nodes, and not above ``max_nodes`` (that rule decides whatever the size)."""
    recent = _recent(policy, now, actioned)
    return node not in recent and policy.min_nodes <= len(recent) + 1 <= policy.max_nodes


def _recent(policy: BreakerPolicy, now: float, actioned: Iterable[tuple[str, float]]) -> set[str]:
    """The distinct nodes actioned within the window."""
    return {name for name, at in actioned if now - at <= policy.window_seconds}


def cooldown_verdict(last_other_alert_at: float | None, now: float, cooldown_seconds: float) -> Verdict:
    """A node actioned for a different alert less than ``cooldown_seconds`` ago is left alone."""
    if last_other_alert_at is not None and now - last_other_alert_at < cooldown_seconds:
        return Verdict(False, f"node in cooldown: actioned {now - last_other_alert_at:.0f}s ago "
                              f"(cooldown {cooldown_seconds:g}s)")
    return Verdict(True, "")
