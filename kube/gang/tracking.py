"""The placed gangs between placement and binding: their reservations in the placer, the release of
their pods (one PATCH each, retried until done), when a reservation ends, and what happens to a
pod that can no longer bind where it was sent. The rules are the controller's (controller.py,
step 2); this module keeps the state they need:

- ``Held``: one placement (the placer's key: the gang's key, or "<gang>+<n>" for replacements
  placed while an earlier placement of the gang is still held), the uid of each pod it was made
  for (a new pod of the same name is another pod), and per node the offer version seen when all
  its pods had bound;
- the pods whose release PATCH succeeded but whose informer has not shown it yet (so a round that
  runs before the watch catches up does not place them twice), and the pods evicted;
- the pods an earlier run of the service released that were not bound when this one started.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from .config import ControllerConfig
from .gangs import GangPod
from .kubeapi import ApiError, ClusterApi
from .placer import Placement, Placer
from .view import ClusterView

__all__ = ["Held", "Reservations"]

log = logging.getLogger(__name__)


@dataclass
class Held:
    """One reserved placement of a gang (module doc)."""

    gang: str
    attempt: int
    placement: Placement
    uids: Mapping[str, str]  # pod name -> uid
    bound: dict[str, int] = field(default_factory=dict)  # node -> its offer version when its pods had all bound
    last_bound: float | None = None


class Reservations:
    """Placed gangs until their devices show in the offers (module doc)."""

    def __init__(self, placer: Placer, settings: ControllerConfig, api: ClusterApi) -> None:
        self.placer, self.settings, self.api = placer, settings, api
        self.held: dict[str, Held] = {}
        self._released: dict[str, str] = {}  # pod uid -> node, released by this run, until seen ungated
        self._evicted: set[str] = set()
        self._earlier: set[str] | None = None  # unbound pods an earlier run released
        self._started = 0.0
        self.notices: list[tuple[GangPod, str]] = []  # (pod, why it cannot bind): events for the controller

    def placer_key(self, gang: str) -> str:
        """The gang's key, or "<gang>+<n>" while the key holds an earlier placement."""
        if gang not in self.held:
            return gang
        n = 1
        while f"{gang}+{n}" in self.held:
            n += 1
        return f"{gang}+{n}"

    def hold(self, gang: str, attempt: int, placement: Placement, pods: Collection[GangPod]) -> None:
        self.held[placement.key] = Held(gang, attempt, placement, {pod.name: pod.uid for pod in pods})

    def released(self, pod: GangPod) -> bool:
        """Whether this run released ``pod`` (or evicted it) though the informer may not show it yet."""
        return pod.uid in self._released or pod.uid in self._evicted

    async def resume(self, gang: str, gated: list[GangPod]) -> tuple[list[tuple[GangPod, Held]], list[GangPod]]:
        """Release the gated pods a held placement covers: those released (with their placement),
        and the gated pods no placement covers, to be placed. An ApiError stops at the pod it hit
        (the next round goes on from there); a pod gone meanwhile (404) is passed over."""
        released: list[tuple[GangPod, Held]] = []
        rest: list[GangPod] = []
        for pod in gated:
            held = next((h for h in self.held.values() if h.gang == gang and h.uids.get(pod.name) == pod.uid), None)
            if held is None:
                rest.append(pod)
                continue
            node = held.placement.nodes[pod.name]
            try:
                await self.api.release(pod, node)
            except ApiError as error:
                if error.status == 404:
                    continue
                raise
            self._released[pod.uid] = node
            released.append((pod, held))
        return released, rest

    async def update(self, gangs: Mapping[str, list[GangPod]], view: ClusterView, now: float) -> None:
        """End the reservations whose devices the offers show, or whose gang is gone; evict (or
        note) released pods that cannot bind."""
        present = {pod.uid: pod for members in gangs.values() for pod in members}
        self._released = {uid: node for uid, node in self._released.items() if uid in present and present[uid].gated}
        self._evicted &= present.keys()
        self.notices = []
        for key, held in list(self.held.items()):
            members = [pod for pod in gangs.get(held.gang, ()) if held.uids.get(pod.name) == pod.uid]
            if not members or members[0].gang.attempt != held.attempt:
                self._end(key, "its pods are gone" if not members else "the JobSet restarted")
                continue
            waiting = [pod for pod in members if pod.node is None and not pod.deleting and not pod.finished]
            if await self._unbindable(key, waiting, view):
                continue
            for node in set(held.placement.nodes.values()) - held.bound.keys():
                if not any(held.placement.nodes[pod.name] == node for pod in waiting):
                    held.bound[node] = view.offer_version(node)
                    held.last_bound = now
            if waiting or held.last_bound is None:
                continue
            caught_up = all(view.offer_version(node) > version for node, version in held.bound.items())
            if caught_up or now - held.last_bound >= self.settings.release_timeout_seconds:
                self._end(key, "its pods are bound and the offers show them" if caught_up
                          else f"its pods are bound ({self.settings.release_timeout_seconds:g} s ago)")

    async def _unbindable(self, key: str, waiting: list[GangPod], view: ClusterView) -> bool:
        """Evict (or note) the released pods of ``key`` whose node takes no pods now; True when the
        reservation ended (it stays while an eviction failed, to be tried again next round)."""
        held = self.held[key]
        targets = [(pod, held.placement.nodes[pod.name]) for pod in waiting if not pod.gated and not self.released(pod)]
        lost = [(pod, node, why) for pod, node in targets if (why := view.unusable(node))]
        if not lost:
            return False
        failed = False
        for pod, node, why in lost:
            if not (pod.owned and self.settings.evict_unbindable):
                self.notices.append((pod, f"cannot bind: node {node} is {why}; delete the pod and create it again"))
                continue
            try:
                evicted = await self.api.evict(pod)
            except ApiError as error:
                log.warning("pod %s/%s: cannot evict it: %s; trying again in the next round", pod.namespace, pod.name, error)
                failed = True
                continue
            if evicted:
                self._evicted.add(pod.uid)
                log.info("pod %s/%s evicted: released to node %s, which is %s; its Job makes a new one",
                         pod.namespace, pod.name, node, why)
                self.notices.append((pod, f"evicted: node {node} is {why}; its Job makes a new pod, placed again"))
            else:
                self.notices.append((pod, f"cannot bind: node {node} is {why}, and a PodDisruptionBudget blocks its eviction"))
        if failed:
            return False
        self._end(key, f"{len(lost)} of its pods cannot bind")
        return True

    def _end(self, key: str, why: str) -> None:
        log.info("reservation %s released: %s", key, why)
        self.placer.release(key)
        del self.held[key]

    def waiting_for_earlier_run(self, gangs: Mapping[str, list[GangPod]], now: float) -> bool:
        """True while pods an earlier run released are neither bound nor gone (at most
        ``release_timeout_seconds`` after the first round): their devices have no reservation."""
        pending = {pod.uid for members in gangs.values() for pod in members
                   if pod.released_to and not pod.gated and pod.node is None and not pod.deleting}
        if self._earlier is None:
            self._earlier, self._started = pending - self._released.keys(), now
            if self._earlier:
                log.info("%d pods released before this start are not bound yet: placing nothing until they are "
                         "(at most %g s)", len(self._earlier), self.settings.release_timeout_seconds)
        self._earlier &= pending
        return bool(self._earlier) and now - self._started < self.settings.release_timeout_seconds
