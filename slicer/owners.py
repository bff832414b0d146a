"""Who still owns a slice, and grace periods: pure logic over plain data, time passed in.

A pod owner is gone when its pod UID is no longer among the node's live pods. The slicer passes
the set from the attribution snapshot (``AttributionSnapshot.pod_uids``: the UIDs of the pods with
a ready sandbox, from the CRI runtime's ListPodSandbox, the one source of pod UIDs the agent reads —
pod-resources names pods by namespace and name only; a crash-looping pod keeps its ready sandbox, a
Completed or Failed one has only a stopped one), or None while it is unknown (no attribution
yet, the CRI runtime down or never listed): then nobody is gone, a slice is never reclaimed on a
guess, and every grace period starts again once the source is back. A free ``owner_id`` slice
lives until it is deleted.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from runtimekit.state.slices import Owner

K = TypeVar("K", bound=Hashable)


class Grace(Generic[K]):
    """Since when each key has been in a condition (an owner missing, an instance orphaned), and
    which have been in it for ``grace_seconds`` or more. Keys no longer in the condition are
    forgotten: a key that leaves it and comes back starts its grace again."""

    def __init__(self, grace_seconds: float) -> None:
        self.grace_seconds = grace_seconds
        self._since: dict[K, float] = {}

    def due(self, keys: Iterable[K], now: float) -> list[K]:
        """``keys`` are in the condition now (unix seconds ``now``): those in it long enough, in the
        order given."""
        current = list(dict.fromkeys(keys))
        self._since = {key: self._since.get(key, now) for key in current}
        return [key for key in current if now - self._since[key] >= self.grace_seconds]

    def clear(self) -> None:
        """Forget every key: the condition cannot be told now (its source is down)."""
        self._since.clear()


class OwnerWatch:
    """Which slices' pod owners are gone, over successive looks at the live pods.

    A pod seen running since the agent started and then missing for ``grace_seconds`` is gone. A
    pod never seen running may still be starting — a slice is made before its container (the device
    plugin's Allocate, DRA's prepare and image pulls all come first) — so it is gone only after
    ``start_seconds`` without ever running. After an agent restart every owner counts as not yet
    seen: the longer wait, the safe side. While the live pods are unknown nothing is gone and every
    wait starts again."""

    def __init__(self, grace_seconds: float, start_seconds: float) -> None:
        self._gone: Grace[str] = Grace(grace_seconds)
        self._unstarted: Grace[str] = Grace(start_seconds)
        self._seen: set[str] = set()

    def due(self, owners: Iterable[tuple[str, Owner]], live: frozenset[str] | None, now: float) -> list[str]:
        """The slice ids (of ``(slice id, owner)``) whose pod is gone now (unix seconds ``now``)."""
        if live is None:
            self._gone.clear()
            self._unstarted.clear()
            return []
        pods = [(slice_id, owner) for slice_id, owner in owners if owner.is_pod]
        ids = {slice_id for slice_id, _ in pods}
        self._seen = (self._seen & ids) | {slice_id for slice_id, owner in pods if owner.pod_uid in live}
        missing = [slice_id for slice_id, owner in pods if owner.pod_uid not in live]
        return (self._gone.due([s for s in missing if s in self._seen], now)
                + self._unstarted.due([s for s in missing if s not in self._seen], now))
