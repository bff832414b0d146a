"""Who holds a node's cordon and taint: the ownership policy, pure (plain data in, plain data out).

A *hold* is a mark this service puts on a Node — the cordon (``spec.unschedulable``) or its
NoSchedule taint — together with an annotation naming its *holders*: the idempotency keys
(journal.idempotency_key) of the cordon or taint steps of the alerts that need it, comma-separated
and sorted. The mark and the annotation are always written in ONE PATCH, so whatever moment the
service is killed at, the Node itself says whether the mark is the service's and for which
alerts; the journal is never needed to know that.

- ``claim`` (the cordon and taint steps): an unmarked node gets the mark with this step as its
  only holder (holders left from an earlier mark someone removed are dropped); a node this
  service holds gains this step as a holder; a node marked by someone else (the mark without
  our annotation) is left as it is. A step run again after a crash finds itself a holder.
- ``release`` (uncordon, untaint): only a holder releases, and the mark is removed only when no
  other alert still needs it. ``needed`` — the holder keys of the other alerts on the node that
  the journal says still fire and whose ladder has the step — become the holders, so an alert
  whose own step was skipped (the cooldown, the breaker) or found the node already held still
  keeps it out of service until it resolves too. Each of them has that step in the journal, so
  its own resolution enqueues the undo that releases the mark in turn.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

CORDONED_BY = "remediation.runtimekit.io/cordoned-by"
TAINTED_BY = "remediation.runtimekit.io/tainted-by"


@dataclass(frozen=True, slots=True)
class Mark:
    """One kind of hold: the forward step's name, its past tense for results, its annotation."""

    step: str  # "cordon" or "taint"
    done: str  # "cordoned" or "tainted"
    annotation: str
    taint: Mapping[str, str] | None = None  # the taint this mark adds (None: the cordon)

    def present(self, spec: Mapping[str, Any]) -> bool:
        """Is the mark on a node with this spec (any taint of our key and effect counts)?"""
        if self.taint is None:
            return bool(spec.get("unschedulable"))
        return any(_same_taint(t, self.taint) for t in spec.get("taints", ()))

    def put(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The spec fields that add the mark (taints: the whole list, as a PATCH replaces it)."""
        if self.taint is None:
            return {"unschedulable": True}
        return {"taints": [*spec.get("taints", ()), dict(self.taint)]}

    def remove(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """The spec fields that take the mark off, leaving every other taint."""
        if self.taint is None:
            return {"unschedulable": False}
        taint = self.taint
        return {"taints": [t for t in spec.get("taints", ()) if not _same_taint(t, taint)]}


def _same_taint(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    return one.get("key") == other.get("key") and one.get("effect") == other.get("effect")


CORDON = Mark("cordon", "cordoned", CORDONED_BY)


def taint_mark(taint: Mapping[str, str]) -> Mark:
    """The taint step's mark for ``taint`` (key, value, effect)."""
    return Mark("taint", "tainted", TAINTED_BY, dict(taint))


def holders(value: str | None) -> frozenset[str]:
    """The holder keys in an annotation value ("" and None: none)."""
    return frozenset(part.strip() for part in (value or "").split(",") if part.strip())


def encode(keys: Collection[str]) -> str | None:
    """The annotation value for ``keys``; None (remove the annotation) when there are none."""
    return ",".join(sorted(keys)) or None


@dataclass(frozen=True, slots=True)
class Write:
    """One PATCH: spec fields to set and annotations to set (None removes one)."""

    spec: Mapping[str, Any]
    annotations: Mapping[str, str | None]


@dataclass(frozen=True, slots=True)
class Decision:
    write: Write | None  # None: the node is already as it should be
    result: dict[str, Any]  # journaled as the step's result


def claim(mark: Mark, spec: Mapping[str, Any], annotation: str | None, key: str) -> Decision:
    """The cordon or taint step ``key`` on a node with this spec and holders annotation."""
    held = holders(annotation)
    if not mark.present(spec):
        return Decision(Write(mark.put(spec), {mark.annotation: encode({key})}),
                        {f"already_{mark.done}": False, f"{mark.done}_by_us": True, "holders": [key]})
    if not held:  # someone else's mark: never ours to add to or to remove
        return Decision(None, {f"already_{mark.done}": True, f"{mark.done}_by_us": False})
    after = sorted(held | {key})
    write = None if key in held else Write({}, {mark.annotation: encode(after)})
    return Decision(write, {f"already_{mark.done}": key not in held, f"{mark.done}_by_us": True, "holders": after})


def release(mark: Mark, spec: Mapping[str, Any], annotation: str | None, key: str,
            needed: Collection[str]) -> Decision:
    """The undo of step ``key``; ``needed``: holder keys of other alerts on the node still firing."""
    if key not in holders(annotation):
        return Decision(None, {"skipped": f"the node's {mark.annotation} annotation does not name this alert's "
                                          f"{mark.step} step: nothing of this alert to undo"})
    keep = frozenset(needed) - {key}
    if keep:
        return Decision(Write({}, {mark.annotation: encode(keep)}), {"kept_for": sorted(keep)})
    return Decision(Write(mark.remove(spec), {mark.annotation: None}), {f"un{mark.done}": True})
