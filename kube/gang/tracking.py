"""The placed gangs between placement and the offers showing their devices spent: their
reservations in the placer, the release of their pods (one PATCH each, retried until done), when
each part of a reservation ends, and what happens to a pod that can no longer bind where it was
sent. The rules are the controller's (controller.py, step 2); this module keeps the state they need:

- ``Held``: one placement (the placer's key: the gang's key, or "<gang>+<n>" for replacements
  placed while an earlier placement of the gang is still held), the uid of each pod it was made
  for (a new pod of the same name is another pod), and per node its **baseline**: the free GPUs
  and NICs the node had for this reservation when it was made (its offer less what the other
  reservations held there then);
- the pods whose release PATCH succeeded but whose informer has not shown it yet (so a round that
  runs before the watch catches up does not place them twice), and the pods evicted;
- the pods an earlier run of the service released that were not bound when this one started.

**When a node's part ends.** The pods a reservation holds on a node stay held until they are all
bound and the node's offer shows them allocated: its free GPUs at most the baseline less the GPUs
the reservation still holds there (and likewise NICs, when it holds some). An offer that changed
for another reason (one of two pods allocated, another pod finished) does not end it. Otherwise
it ends ``release_timeout_seconds`` after those pods bound. Reservations made one after another
on a node have baselines that count each other, so the offer has to fall by all of them before
the last one ends. Each node's part ends on its own: the placement is reserved again without the
pods of the nodes whose offers caught up (``Placer.reserve`` replaces a reservation of the same
key), and likewise without pods that are gone, finished, deleted before binding, or released to a
node that can no longer take them (evicted, or noted); the rest stay held.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from .config import ControllerConfig
from .gangs import GangPod
from .kubeapi import ApiError, ClusterApi
from .placer import GangDemand, Placement, Placer, ReservationError
from .view import ClusterView

__all__ = ["Held", "Reservations"]

log = logging.getLogger(__name__)


@dataclass
class Held:
    """One reserved placement of a gang (module doc): ``placement`` holds the pods still held."""

    gang: str
    attempt: int
    placement: Placement
    uids: Mapping[str, str]  # pod name -> uid
    baseline: dict[str, tuple[int, int]]  # node -> (free GPUs, free NICs) for this reservation when it was made
    bound: dict[str, float] = field(default_factory=dict)  # node -> when its held pods had all bound (s, clock)

    def on_node(self, node: str, among: Collection[str] | None = None) -> tuple[int, int]:
        """(GPUs, NICs) the reservation holds on ``node`` now (of the pods named ``among`` only, when given)."""
        demand = self.placement.demand
        pods = [pod for pod in (demand.pods if demand else ()) if self.placement.nodes.get(pod.name) == node
                and (among is None or pod.name in among)]
        return sum(pod.gpus for pod in pods), sum(pod.nics for pod in pods)


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

    def hold(self, gang: str, attempt: int, placement: Placement, pods: Collection[GangPod], view: ClusterView) -> None:
        """Track ``placement`` (reserved in the placer): its baseline per node from ``view``'s offers."""
        baseline: dict[str, tuple[int, int]] = {}
        for node in set(placement.nodes.values()):
            offer = view.offer(node)
            gpus, nics = (offer.gpus_free, offer.nics_free) if offer is not None else (0, 0)
            for other in self.held.values():
                held_gpus, held_nics = other.on_node(node)
                gpus, nics = gpus - held_gpus, nics - held_nics
            baseline[node] = (gpus, nics)
        self.held[placement.key] = Held(gang, attempt, placement, {pod.name: pod.uid for pod in pods}, baseline)

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
            held = next((h for h in self.held.values() if h.gang == gang and h.uids.get(pod.name) == pod.uid
                         and pod.name in h.placement.nodes), None)
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
        """End the parts of reservations whose devices the offers show (or whose pods are lost), and
        the reservations whose gang is gone; evict (or note) released pods that cannot bind."""
        present = {pod.uid: pod for members in gangs.values() for pod in members}
        self._released = {uid: node for uid, node in self._released.items() if uid in present and present[uid].gated}
        self._evicted &= present.keys()
        self.notices = []
        for key, held in list(self.held.items()):
            members = {pod.name: pod for pod in gangs.get(held.gang, ()) if held.uids.get(pod.name) == pod.uid}
            if not members or next(iter(members.values())).gang.attempt != held.attempt:
                self._end(key, "its pods are gone" if not members else "the JobSet restarted")
                continue
            waiting = [pod for name, pod in members.items() if name in held.placement.nodes
                       and pod.node is None and not pod.deleting and not pod.finished]
            lost = await self._unbindable(held, waiting, view)
            lost |= {name for name in held.placement.nodes if self._gone(members.get(name))}
            waiting_on = {held.placement.nodes[pod.name] for pod in waiting if pod.name not in lost}
            kept = {name: node for name, node in held.placement.nodes.items() if name not in lost}
            for node in set(kept.values()) - waiting_on:
                since = held.bound.setdefault(node, now)
                why = self._spent(held, node, kept, view, now - since)
                if why:
                    log.info("reservation %s: its pods on node %s are bound and %s: their devices are no longer held",
                             key, node, why)
                    kept = {name: at for name, at in kept.items() if at != node}
            if not kept:
                self._end(key, "its pods are bound and the offers show them, or they are gone")
            elif len(kept) < len(held.placement.nodes):
                self._reduce(key, held, kept)

    def _gone(self, pod: GangPod | None) -> bool:
        """Whether a pod of a reservation needs its devices no more: gone, finished, evicted, or deleted before binding."""
        return pod is None or pod.finished or pod.uid in self._evicted or (pod.deleting and pod.node is None)

    def _spent(self, held: Held, node: str, kept: Collection[str], view: ClusterView, bound_for: float) -> str:
        """Why the pods ``kept`` of ``held`` on ``node`` (all bound, for ``bound_for`` seconds) need
        their devices held no more ("" while they do): the offer shows them, or the timeout passed."""
        gpus, nics = held.on_node(node, kept)
        offer, (free_gpus, free_nics) = view.offer(node), held.baseline.get(node, (0, 0))
        if offer is not None and (not gpus or offer.gpus_free <= free_gpus - gpus) and (not nics or offer.nics_free <= free_nics - nics):
            return f"its offer shows them ({offer.gpus_free} GPUs free, {free_gpus} before the reservation)"
        if bound_for >= self.settings.release_timeout_seconds:
            return f"were bound {self.settings.release_timeout_seconds:g} s ago"
        return ""

    def _reduce(self, key: str, held: Held, kept: Mapping[str, str]) -> None:
        """Reserve ``held``'s placement again with the pods ``kept`` only (a same-key reservation is
        replaced); when the placer refuses (an offer shrank under it), the whole one stays held."""
        demand = held.placement.demand
        pods = tuple(pod for pod in (demand.pods if demand else ()) if pod.name in kept)
        try:
            reduced = dataclasses.replace(held.placement, nodes=dict(kept), demand=GangDemand(key, pods))
            self.placer.reserve(reduced)
        except (ReservationError, ValueError) as error:
            log.warning("reservation %s: cannot reserve its %d remaining pods alone (%s); all %d stay held", key, len(kept),
                        error, len(held.placement.nodes))
            return
        log.info("reservation %s: %d of its pods still held, on %s", key, len(kept), ", ".join(sorted(set(kept.values()))))
        held.placement = reduced
        held.bound = {node: since for node, since in held.bound.items() if node in kept.values()}

    async def _unbindable(self, held: Held, waiting: list[GangPod], view: ClusterView) -> set[str]:
        """Evict (or note) the released pods of ``held`` whose node takes no pods now; the names of
        those it lost (an eviction that failed is tried again next round: its pod stays)."""
        targets = [(pod, held.placement.nodes[pod.name]) for pod in waiting if not pod.gated and not self.released(pod)]
        lost: set[str] = set()
        for pod, node in targets:
            why = view.unusable(node)
            if not why:
                continue
            if not (pod.owned and self.settings.evict_unbindable):
                self.notices.append((pod, f"cannot bind: node {node} is {why}; delete the pod and create it again"))
                lost.add(pod.name)
                continue
            try:
                evicted = await self.api.evict(pod)
            except ApiError as error:
                log.warning("pod %s/%s: cannot evict it: %s; trying again in the next round", pod.namespace, pod.name, error)
                continue
            lost.add(pod.name)
            if evicted:
                self._evicted.add(pod.uid)
                log.info("pod %s/%s evicted: released to node %s, which is %s; its Job makes a new one",
                         pod.namespace, pod.name, node, why)
                self.notices.append((pod, f"evicted: node {node} is {why}; its Job makes a new pod, placed again"))
            else:
                self.notices.append((pod, f"cannot bind: node {node} is {why}, and a PodDisruptionBudget blocks its eviction"))
        return lost

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
