"""The decision loop of ``runtimekit gang serve``: one asyncio task that places whole gangs and
lets the Kubernetes scheduler bind them. Every Placer call happens here, one round at a time.

A **round** (after a change the informers saw, ``settle_seconds`` later, or every
``resync_seconds``) reads the informers' objects once and:

1. **Nodes**: hands each node's labels and offer to the placer (``view.py``); a node that is
   NotReady, cordoned, being deleted or gone, or whose offer cannot be read, offers nothing.
2. **Reservations** (``tracking.py``): a placed gang's devices on a node stay reserved until its
   pods there are bound (``spec.nodeName``) and the node's offer shows them allocated (at most
   the free devices it had for the reservation less those held there: the devices are then spent
   in the offer itself), or ``release_timeout_seconds`` after they bound; each node's part ends on
   its own (the rest is reserved again), and all of it at once when the gang is gone or
   restarted. A pod released to a node that can no longer take it
   (NotReady, cordoned, gone) before it bound cannot be gated again (the API server refuses new
   gates) nor pointed elsewhere (its affinity may only narrow): it is evicted (policy/v1, so it
   gets the DisruptionTarget condition a Job's podFailurePolicy can ignore) when a controller owns
   it, and its Job makes a new pod, gated by the webhook, which is placed as below; a bare pod only
   gets an event. Either way that pod's devices are no longer held; the other pods keep theirs.
   A pod deleted before it bound is replaced the same way by its Job.
3. **Gangs** with gated pods, oldest first: once all the gang's pods exist (its size:
   ``gangs.py``; pods that Succeeded count, since their Job does not run them again), one
   placement for all its gated pods (for a gang some of whose pods were released before, only the
   new gated ones: "replacements", placed as a group of their own). If
   it fits, and every pod's own nodeSelector, node affinity and tolerations admit its node
   (``nodefit.py``), it is reserved, then each pod gets one PATCH: its node pinned and our gate
   removed. Otherwise every pod stays gated; the reason goes to an Event (on the JobSet, or on
   each pod of a pod group) when it changed, and to each pod's condition
   ``runtimekit.io/GangPlaced`` (False, reason ``WaitingForPods``, ``Unplaceable`` or
   ``InvalidGang``, the reason in the message; True, ``Placed``, once released). Messages carry
   no live counts (those go to the log), and while the reason stays the same a changed message is
   written at most once per ``REWRITE_SECONDS`` per gang: offer changes elsewhere in the cluster
   do not rewrite every waiting pod.

A release is many PATCHes, one per pod, and cannot be atomic: when one fails the pods already
released stay released, and the rest are released to the same nodes in the next rounds (their
reservation is held meanwhile). After a restart, pods released by the previous run that are not
yet bound hold no reservation: the controller places nothing until they are bound or gone, or
``release_timeout_seconds`` passed. Later gangs may be placed before an older one that does not
fit (no head-of-line blocking; without preemption, a large gang can wait while small ones pass).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runtimekit.waiting import within

from .config import GangConfig
from .demand import DemandReader
from .gangs import CONDITION, GangError, GangPod, group_gangs
from .kubeapi import ApiError, ClusterApi
from .nodefit import node_admits
from .placer import GangDemand, Placement, Placer, PodDemand, Refusal, ReservationError
from .tracking import Reservations
from .view import ClusterView, InvalidPod

__all__ = ["REWRITE_SECONDS", "GangController"]

log = logging.getLogger(__name__)

REWRITE_SECONDS = 30.0  # a gang's refusal message, reason unchanged, is rewritten at most this often


@dataclass(frozen=True, slots=True)
class _Said:
    """What a gang's pods were last told, and when (clock seconds)."""

    reason: str
    message: str
    at: float


def _timestamp(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class GangController:
    """Places gangs (module doc). ``run`` is the loop; ``decide`` one round (tests call it)."""

    def __init__(self, api: ClusterApi, placer: Placer, config: GangConfig, clock: Callable[[], float] = time.time) -> None:
        self.api, self.placer, self.config, self.clock = api, placer, config, clock
        self.changed = asyncio.Event()
        self.cluster = ClusterView(api, config, self.changed.set)
        self.demand = DemandReader(api, config.demand)
        self.reservations = Reservations(placer, config.controller, api)
        self.rounds = 0
        self._said: dict[str, _Said] = {}  # gang -> why it waits, as last written

    async def run(self) -> None:
        """Watch and decide until cancelled."""
        settings = self.config.controller
        self.cluster.start()
        try:
            while True:
                if await within(settings.resync_seconds, self.changed.wait(), False):
                    await asyncio.sleep(settings.settle_seconds)
                self.changed.clear()
                if not self.cluster.synced:
                    continue
                try:
                    await self.decide()
                except Exception:  # a fault of ours: the next round starts from the cluster again
                    log.exception("a decision round failed; deciding again in %g s", settings.resync_seconds)
                    await asyncio.sleep(settings.resync_seconds)
        finally:
            self.cluster.stop()

    async def decide(self) -> None:
        """One round (module doc); an API failure costs the write it hit, and the next round retries."""
        self.rounds += 1
        now = self.clock()
        self.cluster.sync_nodes(self.placer)
        pods, invalid = self.cluster.gang_pods()
        gangs = group_gangs(pods)
        self._said = {key: said for key, said in self._said.items() if key in gangs}
        self.demand.keep_only(gangs, {ref for pod in pods for ref in pod.claims})
        for bad in invalid:
            await self._condition(bad, "False", "InvalidGang", bad.message, now)
        await self.reservations.update(gangs, self.cluster, now)
        for pod, message in self.reservations.notices:
            await self._event(pod.gang.key, [pod], "Warning", "Unbindable", message, now)
        if self.reservations.waiting_for_earlier_run(gangs, now):
            return
        for key, members in sorted(gangs.items(), key=lambda item: min(pod.created for pod in item[1])):
            try:
                await self._gang(key, members, now)
            except ApiError as error:
                log.warning("gang %s: %s; trying again in the next round", key, error)

    async def _gang(self, key: str, members: list[GangPod], now: float) -> None:
        live = [pod for pod in members if not pod.deleting and not pod.finished]
        candidates = [pod for pod in live if pod.gated and not self.reservations.released(pod)]
        gated = await self._release(candidates, key, now)
        if not gated:
            return
        try:
            size = await self.demand.size(members[0].gang)
            if len(live) > size:
                raise GangError(f"{len(live)} pods exist, more than the gang's {size}")
            if len(live) + sum(pod.succeeded for pod in members) < size:  # a Succeeded pod is not run again
                await self._hold(key, gated, "WaitingForPods", f"waiting for all {size} pods of the gang to exist",
                                 now, quiet=True)
                return
            demand = GangDemand(self.reservations.placer_key(key), tuple(
                [PodDemand(pod.name, *await self.demand.devices(pod)) for pod in gated]))
        except GangError as error:
            await self._hold(key, gated, "InvalidGang", str(error), now)
            return
        result = self.placer.place(demand)
        if isinstance(result, Refusal):
            await self._hold(key, gated, "Unplaceable", result.reason, now, detail=result.detail)
            return
        unfit = self._unfit(gated, result)
        if unfit:
            await self._hold(key, gated, "Unplaceable", unfit, now)
            return
        try:
            self.placer.reserve(result)
        except ReservationError as error:
            log.info("gang %s: %s", key, error)
            self.changed.set()  # decide again with the offers as they are now
            return
        self.reservations.hold(key, members[0].gang.attempt, result, gated, self.cluster)
        self._said.pop(key, None)
        log.info("gang %s placed: %d pods in %s (%d tiers spanned, lower bound %d)", key, len(gated), result.domain,
                 result.tiers_spanned, result.lower_bound)
        await self._event(key, gated, "Normal", "GangPlaced", f"{len(gated)} pods placed in {result.domain}", now)
        await self._release(gated, key, now)

    async def _release(self, pods: list[GangPod], key: str, now: float) -> list[GangPod]:
        """Release the pods a held placement covers and mark them placed; the others, to be placed."""
        released, rest = await self.reservations.resume(key, pods)
        for pod, held in released:
            placement = held.placement
            await self._condition(pod, "True", "Placed", f"on {placement.nodes[pod.name]}: {len(placement.nodes)} pods "
                                  f"placed in {placement.domain}", now)
        return rest

    def _unfit(self, pods: list[GangPod], placement: Placement) -> str:
        """Why some pod's own constraints exclude its node in ``placement`` ("" when none do)."""
        for pod in pods:
            node = placement.nodes[pod.name]
            why = node_admits(pod, node, self.cluster.labels(node), self.cluster.taints(node))
            if why:
                return (f"the placement ({placement.domain}) puts pod {pod.name} on node {node}, but {why}; "
                        "the placer does not read node selectors, affinity or taints")
        return ""

    async def _hold(self, key: str, pods: list[GangPod], reason: str, message: str, now: float, quiet: bool = False,
                    detail: str = "") -> None:
        """Keep the gang gated and say why: an event when what it says changed (not for ``quiet``),
        the condition on each pod; the same reason in new words waits ``REWRITE_SECONDS`` (module doc)."""
        said = self._said.get(key)
        if said is not None and said.reason == reason and said.message != message and now - said.at < REWRITE_SECONDS:
            message = said.message
        elif said is None or (said.reason, said.message) != (reason, message):
            if not quiet:
                log.info("gang %s not placed: %s%s", key, message, f" ({detail})" if detail else "")
                await self._event(key, pods, "Warning", reason, message, now)
            self._said[key] = _Said(reason, message, now)
        if detail:
            log.debug("gang %s: %s", key, detail)
        for pod in pods:
            await self._condition(pod, "False", reason, message, now)

    async def _event(self, key: str, pods: list[GangPod], kind: str, reason: str, message: str, now: float) -> None:
        gang = pods[0].gang
        if gang.kind == "JobSet":
            involved: list[Mapping[str, str]] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                                  "namespace": gang.namespace, "name": gang.name}]
        else:
            involved = [{"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid}
                        for pod in pods]
        for target in involved:
            try:
                await self.api.event(target, kind, reason, message, _timestamp(now))
            except ApiError as error:
                log.warning("gang %s: cannot record an event: %s", key, error)
                return

    async def _condition(self, pod: GangPod | InvalidPod, status: str, reason: str, message: str, now: float) -> None:
        """Write the pod's GangPlaced condition when its status, reason or message differs."""
        current: Mapping[str, Any] = pod.conditions.get(CONDITION) or {}
        if (current.get("status"), current.get("reason"), current.get("message")) == (status, reason, message):
            return
        since = current.get("lastTransitionTime") if current.get("status") == status else None
        condition = {"type": CONDITION, "status": status, "reason": reason, "message": message[:32768],
                     "lastTransitionTime": since or _timestamp(now)}
        try:
            await self.api.set_condition(pod.namespace, pod.name, condition)
        except ApiError as error:
            if error.status != 404:  # a pod gone meanwhile needs no condition
                log.warning("pod %s/%s: cannot set its %s condition: %s", pod.namespace, pod.name, CONDITION, error)
