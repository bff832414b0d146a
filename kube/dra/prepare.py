"""NodePrepareResources and NodeUnprepareResources: idempotent, checkpointed, safe across a crash.

Prepare, per claim (kubelet dra/v1 semantics; NVIDIA's two phases, kubernetes-sigs/dra-driver-nvidia-gpu
``device_state.go``):

1. a claim the checkpoint has "completed" gets its stored devices again (the kubelet retries; no
   API call, no agent call);
2. else the ResourceClaim is read and checked (allocated, same uid), every device of this driver
   planned against the agent's node (``plan.plan_claim``): a mistake fails the claim with nothing
   made;
3. "started" is written, listing the devices, before any side effect (failpoint ``dra.prepare.started``);
4. for each slice to make (TDM share, MIG slice) the agent's slice of the claim's position is
   adopted when it matches, else made (CreateSlice, owner ``names.owner_id``; ``slice_created``),
   and recorded (``slice_recorded``); a slice of that position that does not match (an earlier
   allocation of the same claim) or a second one is deleted;
5. the claim's NIC CDI spec is written (``cdi_written``); 6. "completed" (``completed``).

A failure in 4-5 rolls back what the claim holds (its slices, its spec, its entry); a rollback that
cannot finish (the agent gone) leaves "started", which the next prepare adopts or the unprepare
removes. So after a crash between any two steps a retry converges to one slice per device.

Unprepare deletes every agent slice of the claim (failpoint ``dra.unprepare.slice_deleted``), the
claim's CDI spec (``cdi_removed``), then its entry (``dropped``). A claim known nowhere is a success.
When the agent cannot be reached and the checkpoint does not know the claim, that is a success too:
``sweep`` (at start, and with every cleanup round) deletes its own slices of claims the checkpoint
does not know (a slice made under a lost checkpoint is then left to the operator). The agent's slices are read as GetNode, then ListSlices only when ``slicer_enabled``:
with the slicer off there are none (ListSlices answers UNAVAILABLE then), so unprepare, rollback and
sweep go on with an empty list.

Whose slice is whose (owner ids: ``names``). A slice "of the claim" (``_owned``: adopted, deleted by
unprepare) names the claim's uid and this driver's name under any checkpoint, or is of the old form
without a driver: the kubelet names the claim, so a slice made before an upgrade, or under a lost
checkpoint, is still adopted or deleted. The sweep acts on what the checkpoint does not know, so it
takes only slices naming this driver and this checkpoint's id: another driver on the same agent
(another driver name, plugin directory or hostPath) has another checkpoint, and a slice of the old
form cannot say whose it is, so it may be a running pod's; both are left alone.

One asyncio lock serialises every call (as the Go helper's ``Serialize`` does); the service holds
the plugin directory's flock, so no second driver writes the same checkpoint (and the preparer,
made once it holds it, removes the temporary files of a killed writer). The checkpoint and the CDI
specs are written (fsync included) in a thread, under that lock: the event loop answers the
kubelet's other calls and the registration socket meanwhile. A call the kubelet gives up on keeps
the lock until its thread's write is done (``_in_thread``), so the next call never writes beside it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from runtimekit._proto.runtimekit.v1 import node_pb2, service_pb2, slice_pb2
from runtimekit.failpoints import failpoint
from runtimekit.grpc_unix import UnixRpcError

from ..agentclient import AgentClient, AgentError
from .cdi import NicDevice, device_id, remove_claim_spec, write_claim_spec
from .checkpoint import COMPLETED, STARTED, Checkpoint, ClaimEntry, DeviceEntry
from .claims import ClaimError, ClaimReader, ClaimReadError, ClaimRef, parse_claim
from .config import DraConfig
from .names import owner_id, parse_device_name, parse_owner_id
from .plan import Planned, plan_claim

__all__ = ["ClaimPreparer", "Prepared"]

log = logging.getLogger(__name__)
_MIB = 1 << 20
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Prepared:
    """The answer for one claim: its devices, or an error (then the devices are ignored)."""

    devices: tuple[DeviceEntry, ...] = ()
    error: str = ""


def _matches(made: slice_pb2.Slice, planned: Planned) -> bool:
    """Whether an agent slice is the one ``planned`` asks for (adopted after a crash)."""
    if made.device.uuid != planned.gpu_uuid or made.mode != planned.kind:
        return False
    if planned.kind == "tdm":
        return (made.requested_compute_percent == planned.compute
                and made.requested_memory_bytes == planned.memory_mib * _MIB)
    placed = made.HasField("partition") and made.partition.placement_size > 0
    return made.profile == planned.profile and (not placed or made.partition.placement_start == planned.placement_start)


def _request(planned: Planned, owner: str) -> service_pb2.CreateSliceRequest:
    request = service_pb2.CreateSliceRequest(
        mode=planned.kind, device=planned.gpu_uuid, compute=planned.compute,
        memory=f"{planned.memory_mib}MiB" if planned.memory_mib else "", owner_id=owner, profile=planned.profile,
    )
    if planned.placement_start is not None:
        request.placement_start = planned.placement_start
    return request


async def _in_thread(func: Callable[..., _T], /, *args: Any) -> _T:
    """``func(*args)`` in a worker thread, awaited to its end even when the caller is cancelled.

    grpc.aio cancels a handler whose kubelet deadline passed, but a thread cannot be stopped: with
    a bare ``await asyncio.to_thread`` the cancellation would leave ``async with self.lock`` at
    once, and the kubelet's next call would write the checkpoint (or a CDI spec) from a second
    thread while the first still writes — and could answer for a claim before its change is on
    disk. So the cancellation waits for the thread, then goes on: the lock is released only once
    the write is over. A failure of a write whose call was cancelled is logged (none awaits it).
    """
    job = asyncio.ensure_future(asyncio.to_thread(func, *args))
    try:
        return await asyncio.shield(job)
    except asyncio.CancelledError:
        while not job.done():
            with suppress(asyncio.CancelledError):  # cancelled again: the thread still runs
                await asyncio.wait((job,))
        if not job.cancelled() and job.exception() is not None:
            log.warning("a write whose call was cancelled failed: %s", job.exception())
        raise


class ClaimPreparer:
    """Prepares and unprepares claims for the kubelet (see the module doc)."""

    def __init__(self, config: DraConfig, agent: AgentClient, reader: ClaimReader, checkpoint: Checkpoint) -> None:
        self.config = config
        self.agent = agent
        self.reader = reader
        self.checkpoint = checkpoint
        self.lock = asyncio.Lock()
        removed = checkpoint.remove_leftovers()  # the driver holds the plugin directory's lock
        if removed:
            log.info("removed %s: left by a checkpoint write killed before its rename", ", ".join(removed))

    # -- prepare -----------------------------------------------------------------------------------
    async def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, Prepared]:
        async with self.lock:
            return {ref.uid: await self._prepare_one(ref) for ref in refs}

    async def _prepare_one(self, ref: ClaimRef) -> Prepared:
        entry = self.checkpoint.claims.get(ref.uid)
        if entry is not None and entry.state == COMPLETED:
            return Prepared(entry.devices)
        try:
            planned = await self._plan(ref)
        except (ClaimError, ClaimReadError, UnixRpcError) as error:
            log.warning("prepare %s refused: %s", ref, error)
            return Prepared(error=str(error) if isinstance(error, ClaimError) else f"{ref}: {error}")
        try:
            return Prepared(await self._make(ref, planned))
        except (UnixRpcError, ClaimError, OSError) as error:
            message = f"{ref}: {error}"
            log.warning("prepare failed, rolling back: %s", message)
            await self._roll_back(ref)
            return Prepared(error=message)

    async def _plan(self, ref: ClaimRef) -> list[Planned]:
        obj = await self.reader.read(ref.namespace, ref.name)
        if obj is None:
            raise ClaimError(f"{ref}: no ResourceClaim {ref.namespace}/{ref.name} in the API server")
        claim = parse_claim(ref, obj)
        ours = [result for result in claim.results if result.driver == self.config.driver_name]
        if not ours:
            return []
        node = await self.agent.get_node()
        slices = await self.agent.list_slices() if node.slicer_enabled else []
        needs_topology = any((name := parse_device_name(r.device)) is not None and name.kind == "nic" for r in ours)
        topology: node_pb2.Topology | None = await self.agent.get_topology() if needs_topology else None
        return plan_claim(ref, claim, driver=self.config.driver_name, pool=self.config.node_name, node=node,
                          topology=topology, slices=slices, whole_gpu_cdi_kind=self.config.whole_gpu_cdi_kind,
                          held=self._held(ref.uid))

    def _held(self, uid: str) -> dict[str, str]:
        """Device name -> the other prepared claim that holds it alone: a whole GPU or a NIC (a
        result with adminAccess holds nothing: it shares the device)."""
        held: dict[str, str] = {}
        for other, entry in self.checkpoint.claims.items():
            for device in entry.devices:
                if other != uid and device.kind in ("gpu", "nic") and not device.admin_access:
                    held[device.device] = f"claim {entry.namespace}/{entry.name} ({other})"
        return held

    async def _make(self, ref: ClaimRef, planned: list[Planned]) -> tuple[DeviceEntry, ...]:
        devices = [DeviceEntry(request=p.result.request, pool=p.result.pool, device=p.result.device,
                               position=p.result.position, kind=p.kind, share_id=p.result.share_id or "",
                               cdi_ids=(device_id(ref.uid, p.result.device),) if p.kind == "nic" else p.cdi_ids,
                               admin_access=p.result.admin_access)
                   for p in planned]
        await _in_thread(self.checkpoint.put, ref.uid, ClaimEntry(ref.namespace, ref.name, STARTED, tuple(devices)))
        failpoint("dra.prepare.started")
        makes = [(p, d) for p, d in zip(planned, devices, strict=True) if p.makes_slice]
        if makes:
            owned = self._owned(ref.uid, await self._agent_slices())
            for p, device in makes:
                made = await self._ensure_slice(ref, p, owned.get(p.result.position, []))
                await _in_thread(self.checkpoint.update_device, ref.uid,
                                 replace(device, slice_id=made.id, cdi_ids=(made.cdi_device,)))
                failpoint("dra.prepare.slice_recorded")
            await self._delete_doubles(ref)
        nics = [NicDevice(p.result.device, p.nic, p.device_nodes) for p in planned if p.kind == "nic"]
        if nics:
            await _in_thread(write_claim_spec, self.config.cdi_dir, ref.uid, nics)
            failpoint("dra.prepare.cdi_written")
        entry = self.checkpoint.claims[ref.uid]
        await _in_thread(self.checkpoint.put, ref.uid, replace(entry, state=COMPLETED))
        failpoint("dra.prepare.completed")
        log.info("prepared %s: %s", ref, ", ".join(f"{d.device} -> {' '.join(d.cdi_ids) or 'no CDI device'}"
                                                   for d in entry.devices) or "no device of this driver")
        return entry.devices

    async def _agent_slices(self) -> list[slice_pb2.Slice]:
        """Every agent slice; none when the agent's slicer is off (its ListSlices then answers
        UNAVAILABLE, and no slice can exist). UnixRpcError when the agent cannot be asked."""
        node = await self.agent.get_node()
        return await self.agent.list_slices() if node.slicer_enabled else []

    def _owned(self, uid: str, slices: Sequence[slice_pb2.Slice]) -> dict[int, list[slice_pb2.Slice]]:
        """The slices of claim ``uid`` by position: made by this driver's name under any checkpoint,
        or in the old owner form (see the module doc)."""
        owned: dict[int, list[slice_pb2.Slice]] = {}
        for made in slices:
            owner = parse_owner_id(made.owner.owner_id)
            if owner is not None and owner.uid == uid and owner.driver in ("", self.config.driver_name):
                owned.setdefault(owner.position, []).append(made)
        return owned

    def _swept(self, made: slice_pb2.Slice) -> str | None:
        """The claim uid of ``made`` when the sweep may delete it: its owner names this driver and
        this checkpoint, and the checkpoint does not know the claim; None otherwise."""
        owner = parse_owner_id(made.owner.owner_id)
        if owner is None or (owner.driver, owner.checkpoint) != (self.config.driver_name, self.checkpoint.id):
            return None
        return owner.uid if owner.uid not in self.checkpoint.claims else None

    async def _ensure_slice(self, ref: ClaimRef, planned: Planned, existing: list[slice_pb2.Slice]) -> slice_pb2.Slice:
        """The slice for ``planned``: one of ``existing`` that matches (the others deleted), else a new one."""
        chosen = next((made for made in existing if _matches(made, planned)), None)
        for made in existing:
            if made is not chosen:
                log.info("%s: deleting slice %s of position %d: not what the allocation asks now",
                         ref, made.id, planned.result.position)
                await self._delete_slice(made.id)
        if chosen is not None:
            if chosen.state == slice_pb2.SLICE_STATE_READY and chosen.cdi_device:
                log.info("%s: adopting slice %s made for %s before", ref, chosen.id, planned.result.device)
                return chosen
            raise ClaimError(f"slice {chosen.id} for {planned.result.device} is {slice_pb2.SliceState.Name(chosen.state)} "
                             "in the agent (it was being made or removed when the driver stopped); try again")
        owner = owner_id(ref.uid, planned.result.position, self.config.driver_name, self.checkpoint.id)
        made = await self.agent.create_slice(_request(planned, owner))
        failpoint("dra.prepare.slice_created")
        if not made.cdi_device:
            raise ClaimError(f"the agent made slice {made.id} for {planned.result.device} without a CDI device")
        return made

    async def _delete_doubles(self, ref: ClaimRef) -> None:
        """Delete the claim's slices the checkpoint does not record: a CreateSlice the agent carried
        out twice (the client tries a call again once when the channel broke under it)."""
        recorded = {device.slice_id for device in self.checkpoint.claims[ref.uid].devices}
        for made in [s for group in self._owned(ref.uid, await self._agent_slices()).values() for s in group]:
            if made.id not in recorded:
                log.warning("%s: deleting slice %s: a second slice for one device", ref, made.id)
                await self._delete_slice(made.id)

    async def _delete_slice(self, slice_id: str) -> None:
        try:
            await self.agent.delete_slice(slice_id)
        except AgentError as error:
            if error.code != "NOT_FOUND":
                raise

    async def _roll_back(self, ref: ClaimRef) -> None:
        try:
            await self._release(ref.uid, need_agent=True)
        except (UnixRpcError, OSError) as error:
            log.warning("%s: rollback not finished, left as started for the next call: %s", ref, error)

    # -- unprepare ---------------------------------------------------------------------------------
    async def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """claim uid -> "" when unprepared (or never prepared), else why not."""
        async with self.lock:
            errors: dict[str, str] = {}
            for ref in refs:
                entry = self.checkpoint.claims.get(ref.uid)
                try:
                    await self._release(ref.uid, need_agent=entry is not None and self._has_slices(entry))
                    errors[ref.uid] = ""
                except (UnixRpcError, OSError) as error:
                    errors[ref.uid] = f"{ref}: {error}"
                    log.warning("unprepare failed: %s", errors[ref.uid])
            return errors

    @staticmethod
    def _has_slices(entry: ClaimEntry) -> bool:
        return entry.state == STARTED or any(device.kind in ("tdm", "mig") for device in entry.devices)

    async def _release(self, uid: str, *, need_agent: bool) -> None:
        """Delete claim ``uid``'s slices, its CDI spec, then its entry. Without ``need_agent``, an
        agent that cannot be reached is no error (``sweep`` deletes what it holds later)."""
        try:
            slices = await self._agent_slices()
        except UnixRpcError:
            if need_agent:
                raise
            slices = []
        for group in self._owned(uid, slices).values():
            for made in group:
                await self._delete_slice(made.id)
                failpoint("dra.unprepare.slice_deleted")
        if await _in_thread(remove_claim_spec, self.config.cdi_dir, uid):
            failpoint("dra.unprepare.cdi_removed")
        if uid in self.checkpoint.claims:
            entry = self.checkpoint.claims[uid]
            await _in_thread(self.checkpoint.drop, uid)
            failpoint("dra.unprepare.dropped")
            log.info("unprepared claim %s/%s (%s)", entry.namespace, entry.name, uid)

    # -- the driver's own garbage ------------------------------------------------------------------
    async def sweep(self) -> int:
        """Delete this driver's agent slices (its name and its checkpoint's id in the owner) of
        claims the checkpoint does not know (one the agent made after the driver gave up on the call
        and rolled the claim back); the number deleted. Another driver's slices, and those of the
        old owner form, are never swept. UnixRpcError when the agent cannot be asked."""
        async with self.lock:
            deleted = 0
            for made in await self._agent_slices():
                uid = self._swept(made)
                if uid is not None:
                    log.info("deleting slice %s of claim %s: no prepared claim holds it", made.id, uid)
                    await self._delete_slice(made.id)
                    deleted += 1
            return deleted

    async def unprepare_gone(self) -> int:
        """Unprepare the checkpoint's claims whose ResourceClaim is gone (404) or was made again
        (another uid); the number unprepared. ClaimReadError when the API server cannot be asked."""
        gone = 0
        async with self.lock:  # the checkpoint changes in a writing thread only under the lock
            claims = sorted(self.checkpoint.claims.items())
        for uid, entry in claims:
            obj = await self.reader.read(entry.namespace, entry.name)
            if obj is not None and (obj.get("metadata") or {}).get("uid") == uid:
                continue
            ref = ClaimRef(entry.namespace, uid, entry.name)
            log.info("%s: its ResourceClaim is gone; unpreparing", ref)
            if not (await self.unprepare([ref]))[uid]:
                gone += 1
        return gone
