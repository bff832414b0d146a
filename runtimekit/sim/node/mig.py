"""MIG on the simulated node: mode (pending until a GPU reset), GPU and compute instances, MIG devices.

The model of what the driver keeps, under the node's lock; ``nvml.mig`` turns it into NVML calls.
Geometry (profiles, placements) is ``mig_profiles``; the placement rules (``gi_conflict``,
``pick_gi_start``, ...) are applied here and by scenario validation alike.

- ``set_mig_mode`` sets the pending mode only; ``reset_gpu`` (or a reboot) applies it, and every
  instance is gone after a reset, as MIG devices do not persist across a reset or a reboot (MIG
  User Guide, getting-started-with-mig.html).
- GPU instance ids are the lowest free id from 1 and compute instance ids the lowest free from 0
  (a real driver derives GI ids from the placement: callers must read ids from NVML). MIG device
  UUIDs (``MIG-…``) are derived from the GPU's UUID and the instance's ids, profile and placement,
  so one instance keeps its UUID and the same seed gives the same UUIDs.
- A refused request raises ``MigError`` whose ``kind`` says which NVML error it is.
"""

from __future__ import annotations

import uuid as _uuid
from collections.abc import Callable
from typing import Any

from ..events import NO_INSTANCE
from ..faults import FaultError
from ..mig_profiles import (
    GiProfile,
    MigGeometry,
    ci_conflict,
    ci_profile,
    ci_profiles,
    geometry_for,
    gi_conflict,
    pick_ci_start,
    pick_gi_start,
)
from .state import MiB, NodeCore, _ComputeInstance, _Gpu, _GpuInstance

__all__ = ["MigPart", "MigError", "MIG_KINDS"]

#: ``MigError.kind`` values: the nvmlReturn_t each one is (NVML_ERROR_*).
MIG_KINDS = {"invalid_argument": 2, "not_supported": 3, "not_found": 6, "in_use": 19, "insufficient_resources": 23}
_XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
_UUID_NS = _uuid.UUID("5f0c6b1e-8a5e-4c55-9d0f-6d1c0b8a4e21")  # namespace of simulated MIG device UUIDs


class MigError(FaultError):
    """A MIG request the driver refuses; ``kind`` is one of ``MIG_KINDS`` (the NVML error)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class MigPart(NodeCore):
    """MIG mode, GPU and compute instances, MIG devices and the processes inside them."""

    #: Called (under the node's lock) after every change of a MIG mode or instance: the driver's
    #: state outlives the agent's process on a real node, so the simulation saves it (``mig_layout``).
    mig_listener: Callable[[], None] | None = None

    # ---- mode ------------------------------------------------------------------------------
    def mig_geometry(self, gpu: int) -> MigGeometry | None:
        """The GPU's MIG profiles (None: the model has no MIG, or no geometry is tabled for it)."""
        m = self.gpu(gpu).model
        return geometry_for(m.name, m.memory_total_mib) if m.mig_capable else None

    def _geometry(self, gpu: int) -> MigGeometry:
        geometry = self.mig_geometry(self._check_gpu(gpu))
        if geometry is None:
            raise MigError("not_supported", f"gpu: GPU {gpu} ({self.gpu(gpu).model.name}) does not support MIG")
        return geometry

    def mig_mode(self, gpu: int) -> tuple[bool, bool]:
        """(current, pending) MIG mode."""
        g = self._gpus[gpu]
        with self._lock:
            return g.mig_current, g.mig_pending

    def set_mig_mode(self, gpu: int, enabled: bool) -> bool:
        """Set the pending MIG mode; True when a GPU reset is needed to apply it.

        Disabling is refused (``in_use``) while GPU instances exist, as the driver refuses it.
        """
        self._geometry(gpu)
        g = self._gpus[gpu]
        with self._lock:
            if not enabled and g.gis:
                raise MigError("in_use", f"gpu: GPU {gpu} still has {len(g.gis)} GPU instance(s); destroy them first")
            g.mig_pending = bool(enabled)
            self._mig_changed()
            return g.mig_pending != g.mig_current

    def _mig_reset(self, g: _Gpu) -> None:
        """A GPU reset (lock held): the pending mode takes effect and every instance is gone."""
        g.mig_current = g.mig_pending
        g.gis.clear()
        self._mig_changed()

    def _mig_changed(self) -> None:
        """After every change of a MIG mode or instance (lock held): what runs in instances may
        have changed, and the driver's layout is saved where a listener wants it (``mig_layout``)."""
        self._proc_gen += 1
        if self.mig_listener is not None:
            self.mig_listener()

    def _mig_on(self, gpu: int) -> tuple[MigGeometry, _Gpu]:
        geometry = self._geometry(gpu)
        g = self._gpus[gpu]
        if not g.mig_current:
            raise MigError("not_supported", f"gpu: GPU {gpu} is not in MIG mode")
        return geometry, g

    # ---- GPU instances ---------------------------------------------------------------------
    def gpu_instances(self, gpu: int) -> list[_GpuInstance]:
        """The GPU's instances by id (read-only views; empty when not in MIG mode)."""
        with self._lock:
            return [gi for _, gi in sorted(self._gpus[gpu].gis.items())]

    def gpu_instance(self, gpu: int, gi_id: int) -> _GpuInstance:
        """One GPU instance (``not_found`` when there is none with that id)."""
        with self._lock:
            _, g = self._mig_on(gpu)
            gi = g.gis.get(gi_id)
            if gi is None:
                raise MigError("not_found", f"gpu_instance: GPU {gpu} has no GPU instance {gi_id}")
            return gi

    def remaining_gpu_instances(self, gpu: int, profile_id: int) -> int:
        """How many more instances of ``profile_id`` could be created now."""
        with self._lock:
            geometry, g = self._mig_on(gpu)
            profile = _gi_profile(geometry, gpu, profile_id)
            taken = [(gi.profile, gi.start) for gi in g.gis.values()]
            n = 0
            while (start := pick_gi_start(taken, profile)) is not None:
                taken.append((profile, start))
                n += 1
            return n

    def create_gpu_instance(self, gpu: int, profile_id: int, start: int | None = None) -> _GpuInstance:
        """Create a GPU instance of ``profile_id`` at ``start`` (memory slice; None: the driver's
        choice, ``pick_gi_start``). Raises MigError: invalid_argument, insufficient_resources."""
        with self._lock:
            geometry, g = self._mig_on(gpu)
            profile = _gi_profile(geometry, gpu, profile_id)
            taken = [(gi.profile, gi.start) for gi in g.gis.values()]
            if start is None:
                start = pick_gi_start(taken, profile)
                if start is None:
                    raise MigError("insufficient_resources", f"profile: no free placement for {profile.name} on GPU {gpu}")
            _refuse_conflict(gi_conflict(taken, profile, start))
            gi_id = next(i for i in range(1, len(g.gis) + 2) if i not in g.gis)
            gi = g.gis[gi_id] = _GpuInstance(gi_id, profile, start)
            self._mig_changed()
            return gi

    def destroy_gpu_instance(self, gpu: int, gi_id: int) -> None:
        """Destroy a GPU instance; ``in_use`` while it has compute instances or processes."""
        with self._lock:
            gi = self.gpu_instance(gpu, gi_id)
            if gi.cis:
                raise MigError("in_use", f"gpu_instance: GPU instance {gi_id} still has {len(gi.cis)} compute instance(s)")
            if self._pids_in(gpu, gi_id, None):
                raise MigError("in_use", f"gpu_instance: processes run in GPU instance {gi_id}")
            del self._gpus[gpu].gis[gi_id]
            self._mig_changed()

    # ---- compute instances -----------------------------------------------------------------
    def create_compute_instance(self, gpu: int, gi_id: int, profile_id: int, start: int | None = None) -> _ComputeInstance:
        """Create a compute instance of CI profile ``profile_id`` in GPU instance ``gi_id`` at
        ``start`` (compute slice in the GI; None: the lowest free)."""
        with self._lock:
            gi = self.gpu_instance(gpu, gi_id)
            profile = ci_profile(gi.profile, profile_id)
            if profile is None:
                raise MigError("invalid_argument", f"profile: {profile_id} is not a compute instance profile of {gi.profile.name}")
            taken = [(ci.profile, ci.start) for ci in gi.cis.values()]
            if start is None:
                start = pick_ci_start(taken, profile)
                if start is None:
                    raise MigError("insufficient_resources", f"profile: no free placement for {profile.name} in GPU instance {gi_id}")
            _refuse_conflict(ci_conflict(taken, profile, start))
            ci_id = next(i for i in range(len(gi.cis) + 1) if i not in gi.cis)
            name = f"{self.gpu(gpu).uuid}/{gi.id}/{ci_id}/{gi.profile.id}@{gi.start}/{profile.id}@{start}"
            ci = gi.cis[ci_id] = _ComputeInstance(ci_id, profile, start, f"MIG-{_uuid.uuid5(_UUID_NS, name)}")
            self._mig_changed()
            return ci

    def compute_instance(self, gpu: int, gi_id: int, ci_id: int) -> _ComputeInstance:
        with self._lock:
            ci = self.gpu_instance(gpu, gi_id).cis.get(ci_id)
            if ci is None:
                raise MigError("not_found", f"compute_instance: GPU instance {gi_id} has no compute instance {ci_id}")
            return ci

    def destroy_compute_instance(self, gpu: int, gi_id: int, ci_id: int) -> None:
        """Destroy a compute instance; ``in_use`` while processes run in it."""
        with self._lock:
            self.compute_instance(gpu, gi_id, ci_id)
            if self._pids_in(gpu, gi_id, ci_id):
                raise MigError("in_use", f"compute_instance: processes run in compute instance {ci_id} of GPU instance {gi_id}")
            del self._gpus[gpu].gis[gi_id].cis[ci_id]
            self._mig_changed()

    # ---- MIG devices and what runs in them -------------------------------------------------
    def mig_devices(self, gpu: int) -> list[tuple[_GpuInstance, _ComputeInstance]]:
        """The MIG devices (one per compute instance) in NVML index order: by GI id, then CI id."""
        with self._lock:
            return [(gi, gi.cis[c]) for gi in self.gpu_instances(gpu) for c in sorted(gi.cis)]

    def process_instances(self) -> dict[int, tuple[int, int]]:
        """pid -> (GPU instance id, compute instance id) of every process running in a MIG
        instance (a copy; a process on a whole GPU is not in it)."""
        with self._lock:
            return dict(self._in_instance)

    def _pids_in(self, gpu: int, gi_id: int, ci_id: int | None) -> list[int]:
        return [pid for pid, (gi, ci) in self._in_instance.items()
                if self._manual[pid][0] == gpu and gi == gi_id and (ci_id is None or ci == ci_id)]

    def instance_memory(self, gpu: int, gi_id: int) -> tuple[int, int]:
        """(total, used) bytes of a GPU instance: its profile's memory, its processes' memory."""
        with self._lock:
            gi = self.gpu_instance(gpu, gi_id)
            used = sum(self._manual[pid][2] for pid in self._pids_in(gpu, gi_id, None))
            total = gi.profile.memory_mib * MiB
        return total, min(used, total)

    def _gi_memory_total(self, gpu: int, gi_id: int) -> int:
        """Bytes of memory GPU instance ``gi_id`` of ``gpu`` has (its profile's)."""
        with self._lock:
            return self.gpu_instance(gpu, gi_id).profile.memory_mib * MiB

    def _mig_instance_check(self, gpu: int, gpu_instance: Any, compute_instance: Any) -> tuple[int, int] | None:
        """The (GPU, compute) instance ``add_process`` puts a process in on ``gpu``, None for the
        whole GPU (FaultError naming the field when that is not possible)."""
        current = self._gpus[gpu].mig_current
        if gpu_instance is None:
            if current:
                raise FaultError(f"gpu_instance: GPU {gpu} is in MIG mode; a process runs in a GPU and compute instance")
            return None
        if not current:
            raise FaultError(f"gpu_instance: GPU {gpu} is not in MIG mode")
        for name, value in (("gpu_instance", gpu_instance), ("compute_instance", compute_instance)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise FaultError(f"{name}: got {value!r}; must be an instance id (integer)")
        try:
            self.compute_instance(gpu, gpu_instance, compute_instance)
        except MigError as exc:
            raise FaultError(str(exc)) from None
        return gpu_instance, compute_instance

    def inject_instance_xid(self, gpu: int, xid: int, gpu_instance: int, compute_instance: int | None = None) -> int:
        """Deliver XID ``xid`` raised in a MIG instance: the event carries the GPU instance id and
        the compute instance id (NO_INSTANCE when the fault is the GPU instance's as a whole). Returns
        how many event sets got it. FaultError (naming the field) for a bad XID or instance, or a
        GPU off the bus (it raises nothing until a reboot)."""
        gpu = self._check_gpu(gpu)
        if isinstance(xid, bool) or not isinstance(xid, int) or not 1 <= xid <= 999:
            raise FaultError(f"xid: got {xid!r}; must be an integer in 1..999")
        with self._lock:
            cause = self._lost_by(self._gpus[gpu])
        if cause:
            raise FaultError(f"gpu: GPU {gpu} is off the bus ({cause}); it raises no XID until a reboot")
        try:
            if compute_instance is None:
                self.gpu_instance(gpu, gpu_instance)
            else:
                self.compute_instance(gpu, gpu_instance, compute_instance)
        except MigError as exc:
            raise FaultError(str(exc)) from None
        ci = NO_INSTANCE if compute_instance is None else compute_instance
        return self.events.deliver(gpu, _XID_EVENT, xid, gpu_instance=gpu_instance, compute_instance=ci)

    # ---- the scenario's starting state -----------------------------------------------------
    def _start_mig(self) -> None:
        """Put the GPUs whose scenario entry has ``mig.enabled`` in MIG mode with its instances
        (already validated by ``parse_scenario``)."""
        for g in self._gpus:
            spec = g.spec.mig
            if spec is None or not spec.enabled:
                continue
            geometry = self._geometry(g.spec.index)
            g.mig_current = g.mig_pending = True
            for inst in spec.instances:
                profile = geometry.by_name(inst.profile)
                assert profile is not None  # checked by parse_scenario
                gi = self.create_gpu_instance(g.spec.index, profile.id, inst.placement)
                by_name = {p.name: p for p in ci_profiles(profile)}
                for ci_name in inst.compute_instances:
                    self.create_compute_instance(g.spec.index, gi.id, by_name[ci_name].id)


def _gi_profile(geometry: MigGeometry, gpu: int, profile_id: int) -> GiProfile:
    """The GPU instance profile of ``profile_id`` (MigError invalid_argument when the GPU has none)."""
    profile = geometry.by_id(profile_id)
    if profile is None:
        raise MigError("invalid_argument", f"profile: {profile_id} is not a GPU instance profile id of GPU {gpu}")
    return profile


def _refuse_conflict(conflict: tuple[str, str] | None) -> None:
    """Raise what the driver answers for a placement ``gi_conflict`` / ``ci_conflict`` refused:
    invalid_argument for a start the profile does not allow, insufficient_resources for an overlap."""
    if conflict is not None:
        kind, why = conflict
        raise MigError("invalid_argument" if kind == "invalid" else "insufficient_resources", f"placement: {why}")
